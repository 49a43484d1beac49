//! Finding the disassemblers: a path given on the command line, else the PATH, else where
//! `scripts/gpu-tools` installs NVIDIA's wheels (and Debian's versioned LLVM names for AMD).

use std::path::{Path, PathBuf};
use std::process::Command;

use bbv_cuda::tools::{find_nvdisasm, nvidia_tool, on_path};

use crate::CfgError;

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
    Command::new(tool)
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .map(str::trim)
                .find(|l| l.contains("version") || l.starts_with("Cuda compilation tools"))
                .map(str::to_string)
        })
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

/// Runs `cmd`, returning stdout, or a tool error with its stderr.
pub(crate) fn output(mut cmd: Command, what: &Path) -> Result<Vec<u8>, CfgError> {
    let tool = PathBuf::from(cmd.get_program());
    let out = cmd
        .output()
        .map_err(|e| CfgError::Tool(format!("cannot run {}: {e}", tool.display())))?;
    if !out.status.success() {
        let msg = String::from_utf8_lossy(&out.stderr);
        let msg = msg.trim();
        return Err(CfgError::Input {
            path: what.to_path_buf(),
            message: format!(
                "{} refused it ({}): {}",
                tool.file_name().unwrap_or_default().to_string_lossy(),
                out.status,
                if msg.is_empty() { "no message" } else { msg }
            ),
        });
    }
    Ok(out.stdout)
}
