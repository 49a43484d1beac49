//! Static control-flow graphs of GPU code, before anything runs: every kernel and device
//! function of an NVIDIA cubin, fat binary or executable (SASS from `nvdisasm`, cubins out of fat
//! binaries through `cuobjdump`) and of an AMDGPU code object or relocatable object (from
//! `llvm-objdump`), as basic blocks with their opcodes and typed edges.
//!
//! The block rules follow the tools users compare with: on NVIDIA the blocks `nvdisasm -bbcfg`
//! draws (and NVBit's `nvbit_get_CFG` returns), on AMD the leaders of a classic CFG (see
//! [`amdgpu`] and [`nvidia`]).

pub mod amdgpu;
mod detect;
pub mod nvidia;
pub mod sass;
pub mod tools;
pub mod write;

use std::path::{Path, PathBuf};

pub use detect::{kind as file_kind, Kind};
pub use tools::Tools;

/// Errors of static GPU code analysis.
#[derive(Debug, thiserror::Error)]
pub enum CfgError {
    /// A file is unreadable or too large.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A file is not GPU code bbv can read.
    #[error("{}: {message}", path.display())]
    Input {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A disassembler's output does not parse.
    #[error("{}:{line}: {message}", path.display())]
    Parse {
        /// The file disassembled.
        path: PathBuf,
        /// 1-based line of the disassembler's output.
        line: u64,
        /// What is wrong.
        message: String,
    },
    /// A tool is missing or failed.
    #[error("{0}")]
    Tool(String),
    /// A trace could not be read.
    #[error(transparent)]
    Gpu(#[from] bbv_gpu::GpuError),
    /// A kernel list could not be read.
    #[error(transparent)]
    Trace(#[from] accelsim_trace::TraceError),
    /// A temporary folder could not be made.
    #[error("cannot make a temporary folder: {0}")]
    Temp(std::io::Error),
}

/// How control leaves a block along one edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EdgeKind {
    /// Into the next block in address order.
    FallThrough,
    /// A branch's target (direct, or one of an indirect branch's listed targets).
    Taken,
    /// Into a called function (the call's return point is a fall-through edge).
    Call,
    /// Back to the caller.
    Return,
    /// The thread ends.
    Exit,
    /// An indirect branch whose targets are not known.
    Indirect,
}

impl EdgeKind {
    /// The name used in every output format.
    pub fn name(self) -> &'static str {
        match self {
            EdgeKind::FallThrough => "fall-through",
            EdgeKind::Taken => "taken",
            EdgeKind::Call => "call",
            EdgeKind::Return => "return",
            EdgeKind::Exit => "exit",
            EdgeKind::Indirect => "indirect",
        }
    }
}

/// One edge out of a block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Edge {
    /// The target block's index in its function (for a call, in the callee); `None` for
    /// returns, exits, unknown targets and callees outside the file.
    pub block: Option<usize>,
    /// What kind of transfer.
    pub kind: EdgeKind,
    /// For a call, the callee's mangled name when known.
    pub callee: Option<String>,
}

impl Edge {
    /// An edge with no callee.
    pub fn to(block: Option<usize>, kind: EdgeKind) -> Edge {
        Edge {
            block,
            kind,
            callee: None,
        }
    }
}

/// A basic block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// Byte offset of its first instruction from the function's first instruction.
    pub start: u64,
    /// Each instruction's opcode (with modifiers on NVIDIA, the mnemonic on AMD).
    pub opcodes: Vec<String>,
    /// Where control may go next.
    pub successors: Vec<Edge>,
}

/// A kernel or device function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Demangled name (the mangled one when it does not demangle).
    pub name: String,
    /// The symbol's name.
    pub mangled: String,
    /// `sm_80`, `gfx90a`, ...
    pub arch: String,
    /// A kernel (an entry point) rather than a device function.
    pub kernel: bool,
    /// On NVIDIA, the kernel whose code section holds this device function (each kernel gets
    /// its own copy); `None` for kernels and on AMD.
    pub parent: Option<String>,
    /// Byte offset of its first instruction in its code section (a kernel's section on
    /// NVIDIA, `.text` on AMD): trace PCs are relative to that section.
    pub offset: u64,
    /// Has an indirect branch (NVBit's `is_degenerate`).
    pub degenerate: bool,
    /// Its blocks in address order.
    pub blocks: Vec<Block>,
}

impl Function {
    /// Instructions in all its blocks.
    pub fn instructions(&self) -> usize {
        self.blocks.iter().map(|b| b.opcodes.len()).sum()
    }
}

/// Every function of one input file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileCfg {
    /// The file as named.
    pub path: PathBuf,
    /// What the file is.
    pub kind: Kind,
    /// Kernels and device functions, per architecture in the file's order.
    pub functions: Vec<Function>,
}

/// A name demangled when it is an Itanium C++ name.
pub(crate) fn demangle(name: &str) -> String {
    cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|s| s.demangle(&cpp_demangle::DemangleOptions::default()).ok())
        .unwrap_or_else(|| name.to_string())
}

/// Reads every kernel's and device function's CFG from `path`.
pub fn analyse(path: &Path, tools: &mut Tools) -> Result<FileCfg, CfgError> {
    let kind = detect::kind(path)?;
    let functions = match kind {
        Kind::Cubin => nvidia::cubin(path, path, tools)?,
        Kind::FatBinary | Kind::HostElf => nvidia::embedded(path, kind, tools)?,
        Kind::AmdGpu => amdgpu::object(path, tools)?,
    };
    Ok(FileCfg {
        path: path.to_path_buf(),
        kind,
        functions,
    })
}

/// `bbv gpu cfg`: every file's CFGs written in `format` to `output` (whole, or not at all) or
/// to stdout; returns the lines naming the tools used.
pub fn run(
    files: &[PathBuf],
    output: Option<&Path>,
    format: write::Format,
    tools: &mut Tools,
) -> Result<Vec<String>, CfgError> {
    let cfgs = files
        .iter()
        .map(|f| analyse(f, tools))
        .collect::<Result<Vec<_>, _>>()?;
    let written = |path: &Path, e: std::io::Error| CfgError::Input {
        path: path.to_path_buf(),
        message: format!("cannot write: {e}"),
    };
    match output {
        Some(path) => {
            let mut bytes = Vec::new();
            write::write(&mut bytes, &cfgs, format).map_err(|e| written(path, e))?;
            bbv_files::write_atomic(path, &bytes)?;
        }
        None => {
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            write::write(&mut out, &cfgs, format)
                .and_then(|()| std::io::Write::flush(&mut out))
                .map_err(|e| written(Path::new("stdout"), e))?;
        }
    }
    Ok(std::mem::take(&mut tools.used))
}

/// The static blocks of every NVIDIA kernel in `files`, keyed as traces name kernels (mangled
/// name, SM version), at offsets in the kernel's code section (its device functions included).
pub fn static_blocks(files: &[FileCfg]) -> bbv_gpu::blocks::StaticBlocks {
    let mut out = bbv_gpu::blocks::StaticBlocks::new();
    for f in files.iter().flat_map(|f| &f.functions) {
        let Some(sm) = f.arch.strip_prefix("sm_").and_then(|v| v.parse().ok()) else {
            continue;
        };
        let kernel = f.parent.clone().unwrap_or_else(|| f.mangled.clone());
        let blocks = out.entry((kernel, sm)).or_default();
        blocks.extend(
            f.blocks
                .iter()
                .map(|b| (f.offset + b.start, b.opcodes.len() as u32)),
        );
        blocks.sort_unstable();
        blocks.dedup();
    }
    out
}

/// The static blocks of the NVIDIA kernels in the binaries `cfg` (see [`static_blocks`]).
pub fn statics_of(
    cfg: &[PathBuf],
    tools: &mut Tools,
) -> Result<bbv_gpu::blocks::StaticBlocks, CfgError> {
    let files = cfg
        .iter()
        .map(|f| analyse(f, tools))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(static_blocks(&files))
}

/// One line per kernel saying where its blocks in `bv` came from.
pub fn source_lines(
    bv: &bbv_gpu::blocks::BlockVectors,
    sources: &bbv_gpu::blocks::Sources,
) -> Vec<String> {
    use bbv_gpu::blocks::BlockSource;
    sources
        .iter()
        .map(|(kernel, sm, source)| {
            let n = bv.blocks.iter().filter(|b| &b.kernel == kernel).count();
            match source {
                BlockSource::Static => {
                    format!("{kernel} (sm_{sm}): {n} static blocks from the binary")
                }
                BlockSource::Missing => format!(
                    "{kernel} (sm_{sm}): not in the binaries given; {n} blocks rebuilt from the trace"
                ),
                BlockSource::Disagrees {
                    stray_pcs,
                    mid_entries,
                } => format!(
                    "{kernel} (sm_{sm}): the trace disagrees with the binary ({stray_pcs} PCs inside no static block, {mid_entries} blocks entered in their middle); {n} blocks rebuilt from the trace"
                ),
            }
        })
        .collect()
}

/// `bbv gpu bbv --cfg FILES`: a trace's per-launch vectors over the static blocks of the
/// binaries where the trace agrees with them (else over blocks rebuilt from the trace, kernel
/// by kernel), and one line per kernel saying which.
pub fn trace_block_vectors(
    list: &Path,
    per_block: bool,
    cfg: &[PathBuf],
    tools: &mut Tools,
) -> Result<(bbv_gpu::blocks::BlockVectors, Vec<String>), CfgError> {
    let statics = statics_of(cfg, tools)?;
    let kl = accelsim_trace::KernelList::open(list)?;
    let (bv, sources) = bbv_gpu::list_block_vectors_with(&kl, per_block, Some(&statics))?;
    let mut lines = std::mem::take(&mut tools.used);
    lines.extend(source_lines(&bv, &sources));
    Ok((bv, lines))
}

/// A function's blocks as (start, instructions, successors as (block, kind)): what the unit
/// tests compare.
#[cfg(test)]
pub(crate) type Shape = Vec<(u64, usize, Vec<(Option<usize>, &'static str)>)>;

#[cfg(test)]
pub(crate) fn shape(blocks: &[Block]) -> Shape {
    blocks
        .iter()
        .map(|b| {
            let s = b
                .successors
                .iter()
                .map(|e| (e.block, e.kind.name()))
                .collect();
            (b.start, b.opcodes.len(), s)
        })
        .collect()
}
