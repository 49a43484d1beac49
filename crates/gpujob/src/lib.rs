//! bbv-gpujob: bbvkit's GPU jobs, each a command's whole work on GPU inputs.
//!
//! * [`gpu_count`], [`gpu_bbv`] (`bbv gpu count`, `bbv gpu bbv`): NVBit-exact per-launch counts,
//!   basic blocks and per-launch BBVs from Accel-Sim traces, the blocks cut by the kernels'
//!   static CFGs when a binary is given (bbv-gpucfg).
//! * [`gpu_sample`], [`gpu_run`] (`bbv gpu sample`, `bbv gpu run`): kernel sampling on traces
//!   or on a live CUPTI run (bbv-cuda), written as one folder.
//! * [`gpu_simulate`] (`bbv gpu simulate`): Accel-Sim (bbv-gpusim) on the launches picked, each
//!   warmed by the launches before it, and the run's cycles estimated from them.
//!
//! # Design constraints
//! * Nothing here touches the CPU pipeline: the GPU jobs share only the output folder rules
//!   ([`bbv_files::AtomicFiles`]: every folder all together or not at all) and the report.
//! * Errors are [`GpuJobError`]; bad input names the file and line.

mod gpu_count;
mod gpu_job;
mod gpu_simulate;
mod gpu_simulate_doc;
mod gpu_times;

pub use gpu_count::{gpu_bbv, gpu_count, GpuCount};
pub use gpu_job::{gpu_run, gpu_sample, GpuRun, GpuRunOutcome};
pub use gpu_simulate::{gpu_simulate, GpuSimulate, GpuSimulation};
pub use gpu_times::gpu_score;

use std::path::PathBuf;

/// Everything that can go wrong in a GPU job.
#[derive(Debug, thiserror::Error)]
pub enum GpuJobError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Input that cannot be used, explained.
    #[error("{0}")]
    Invalid(String),
    /// A folder or file could not be made where it was asked for.
    #[error("{what}: {source}")]
    Create {
        /// What was being made.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Outputs could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A GPU trace could not be sampled.
    #[error(transparent)]
    Gpu(#[from] bbv_gpu::GpuError),
    /// A GPU binary's control-flow graph could not be made.
    #[error(transparent)]
    Cfg(#[from] bbv_gpucfg::CfgError),
    /// Accel-Sim is missing, refused a configuration or failed.
    #[error(transparent)]
    GpuSim(#[from] bbv_gpusim::GpuSimError),
    /// A live GPU run failed, or its folder is unusable.
    #[error(transparent)]
    Cuda(#[from] bbv_cuda::CudaError),
    /// The HTML report could not be written.
    #[error(transparent)]
    Report(#[from] bbv_report::ReportError),
}

impl GpuJobError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        GpuJobError::Io {
            path: path.into(),
            source,
        }
    }
}
