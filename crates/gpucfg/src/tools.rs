//! Finding the disassemblers: a path given on the command line, else the PATH, else where
//! `scripts/gpu-tools` installs NVIDIA's wheels (and Debian's versioned LLVM names for AMD).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::CfgError;

/// Where `scripts/cupti` installs NVIDIA's wheels (nvdisasm, CUPTI's headers and library):
/// `$BBV_CUDA_CACHE`, else `$XDG_CACHE_HOME/bbvkit/cuda`, else `~/.cache/bbvkit/cuda`; the
/// wheels' `nvidia/cu13` folder in it.
pub fn cache() -> Option<PathBuf> {
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let root = env("BBV_CUDA_CACHE")
        .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("bbvkit/cuda")))
        .or_else(|| env("HOME").map(|h| h.join(".cache/bbvkit/cuda")))?;
    Some(root.join("nvidia/cu13"))
}

/// `nvdisasm`: `$BBV_NVDISASM`, on the PATH, scripts/cupti's copy, or the CUDA toolkit's (the
/// one lookup every GPU command uses where no `--nvdisasm` is given).
pub fn find_nvdisasm() -> Option<PathBuf> {
    match std::env::var_os("BBV_NVDISASM") {
        Some(p) => Some(PathBuf::from(p)),
        None => nvidia_tool("nvdisasm"),
    }
}

/// [`find_nvdisasm`], or why there is none.
pub fn nvdisasm() -> Result<PathBuf, CfgError> {
    find_nvdisasm().ok_or_else(|| {
        CfgError::Tool(
            "nvdisasm not found (on the PATH, in $BBV_NVDISASM or from scripts/cupti): it \
             gives the kernels' basic blocks"
                .into(),
        )
    })
}

/// A program named `name` in a folder of the PATH.
pub fn on_path(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// An NVIDIA tool (nvdisasm, cuobjdump, ...): on the PATH, else in scripts/gpu-tools' cache,
/// else in a CUDA toolkit's usual place.
pub fn nvidia_tool(name: &str) -> Option<PathBuf> {
    on_path(name).or_else(|| {
        let cached = cache().map(|c| c.join("bin"));
        cached
            .into_iter()
            .chain([PathBuf::from("/usr/local/cuda/bin")])
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}

/// The tools one `bbv gpu cfg` uses, found on first need.
#[derive(Debug, Default)]
pub struct Tools {
    /// `--nvdisasm`.
    pub nvdisasm: Option<PathBuf>,
    /// `--cuobjdump`.
    pub cuobjdump: Option<PathBuf>,
    /// `--llvm-objdump`.
    pub llvm_objdump: Option<PathBuf>,
    /// One line per tool used: its name, path and version.
    pub used: Vec<String>,
}

/// Newest first: AMDGPU targets only grow (gfx942 needs LLVM 17).
const LLVM_OBJDUMPS: [&str; 6] = [
    "llvm-objdump-19",
    "llvm-objdump-18",
    "llvm-objdump-17",
    "llvm-objdump-16",
    "llvm-objdump",
    "llvm-objdump-15",
];

/// The first line of `tool --version` that names a version.
fn version(tool: &Path) -> String {
    let child = Command::new(tool)
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let Ok(mut child) = child else {
        return "version unknown".into();
    };
    let out = bbv_files::child::read_bounded(&mut child, 1 << 16, 0, &mut |_| true);
    let _ = child.kill();
    let _ = child.wait();
    out.stdout
        .lines()
        .map(str::trim)
        .find(|l| l.contains("version") || l.starts_with("Cuda compilation tools"))
        .map(|l| bbv_files::input::quote(l.as_bytes()))
        .unwrap_or_else(|| "version unknown".into())
}

impl Tools {
    fn resolve(
        given: &mut Option<PathBuf>,
        used: &mut Vec<String>,
        label: &str,
        candidates: impl FnOnce() -> Option<PathBuf>,
        missing: &str,
    ) -> Result<PathBuf, CfgError> {
        if let Some(p) = given {
            // Tools run in temporary folders: a relative path must not depend on that.
            if p.components().count() > 1 && p.is_relative() {
                *p = std::path::absolute(&*p).unwrap_or_else(|_| p.clone());
            }
            if !used.iter().any(|u| u.starts_with(&format!("{label}: "))) {
                used.push(format!("{label}: {} ({})", p.display(), version(p)));
            }
            return Ok(p.clone());
        }
        let found = candidates().ok_or_else(|| CfgError::Tool(missing.to_string()))?;
        used.push(format!(
            "{label}: {} ({})",
            found.display(),
            version(&found)
        ));
        *given = Some(found.clone());
        Ok(found)
    }

    /// NVIDIA's disassembler.
    pub fn nvdisasm(&mut self) -> Result<PathBuf, CfgError> {
        Self::resolve(
            &mut self.nvdisasm,
            &mut self.used,
            "nvdisasm",
            find_nvdisasm,
            "nvdisasm not found (not in $BBV_NVDISASM, not on the PATH, not from scripts/gpu-tools): give --nvdisasm PATH or run scripts/gpu-tools",
        )
    }

    /// NVIDIA's fat-binary extractor.
    pub fn cuobjdump(&mut self) -> Result<PathBuf, CfgError> {
        Self::resolve(
            &mut self.cuobjdump,
            &mut self.used,
            "cuobjdump",
            || nvidia_tool("cuobjdump"),
            "cuobjdump not found (not on the PATH, not from scripts/gpu-tools): give --cuobjdump PATH or run scripts/gpu-tools",
        )
    }

    /// LLVM's disassembler with the AMDGPU target.
    pub fn llvm_objdump(&mut self) -> Result<PathBuf, CfgError> {
        Self::resolve(
            &mut self.llvm_objdump,
            &mut self.used,
            "llvm-objdump",
            || LLVM_OBJDUMPS.iter().find_map(|n| on_path(n)),
            "llvm-objdump not found (llvm-objdump-19 .. -15 or llvm-objdump on the PATH; Debian: apt-get install llvm-19): give --llvm-objdump PATH",
        )
    }
}

/// The most a disassembler may print: a library's listing runs to hundreds of megabytes.
const MAX_OUTPUT: u64 = 4 << 30;

/// Runs `cmd`, returning stdout, or a tool error with the first lines of its stderr.
pub(crate) fn output(mut cmd: Command, what: &Path) -> Result<Vec<u8>, CfgError> {
    let tool = PathBuf::from(cmd.get_program());
    let name = tool.file_name().unwrap_or_default().to_string_lossy();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| CfgError::Tool(format!("cannot run {}: {e}", tool.display())))?;
    let out = bbv_files::child::read_bounded(&mut child, MAX_OUTPUT, 1 << 16, &mut |_| true);
    if out.overflowed {
        let _ = child.kill();
    }
    let status = child
        .wait()
        .map_err(|e| CfgError::Tool(format!("cannot run {}: {e}", tool.display())))?;
    let refused = |message: String| CfgError::Input {
        path: what.to_path_buf(),
        message,
    };
    if out.overflowed {
        return Err(refused(format!(
            "{name} printed more than {} GiB or a line over a megabyte: not a disassembly",
            MAX_OUTPUT >> 30
        )));
    }
    if !status.success() {
        // A broken input can make a disassembler print an error per instruction: the first
        // few say why.
        let lines: Vec<&str> = out
            .stderr
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        let mut msg: Vec<String> = lines
            .iter()
            .take(3)
            .map(|l| bbv_files::input::quote(l.trim().as_bytes()))
            .collect();
        if lines.len() > 3 {
            msg.push(format!("and {} more lines", lines.len() - 3));
        }
        let msg = match msg.is_empty() {
            true => "no message".to_string(),
            false => msg.join(" | "),
        };
        return Err(refused(format!("{name} refused it ({status}): {msg}")));
    }
    Ok(out.stdout.into_bytes())
}
