//! Live NVIDIA GPU counts for bbv: the per-launch SASS instruction counts written by bbv's CUPTI
//! injection library (`tools/cupti`), and their aggregation into NVBit-style counts and
//! basic-block vectors over the kernels' static blocks (bbv-gpucfg's SASS parser and nvdisasm).
//!
//! Everything here runs without a GPU: only `bbv gpu run` itself needs one (and the NVIDIA driver).

pub mod aggregate;
pub mod job;
pub mod live;
pub mod times;
pub mod tools;
mod tsv;

pub use tsv::dims_cell;

use std::path::PathBuf;

/// Errors of NVIDIA code analysis and live counting.
#[derive(Debug, thiserror::Error)]
pub enum CudaError {
    /// A file is unreadable, too large or not text.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A line of a file does not parse.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A tool (nvdisasm, the injection library) is missing or failed.
    #[error("{0}")]
    Tool(String),
    /// The machine cannot run CUDA programs.
    #[error("{0}")]
    NoDriver(String),
    /// GPU analysis failed.
    #[error(transparent)]
    Gpu(#[from] bbv_gpu::GpuError),
    /// A kernel's SASS could not be disassembled or read (nvdisasm, its listing).
    #[error(transparent)]
    Cfg(#[from] bbv_gpucfg::CfgError),
    /// An output could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file or folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}
