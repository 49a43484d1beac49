//! Finding the tools of a build: the user's clang, the `opt` of its LLVM, and bbv's pass and
//! runtime built for that LLVM.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::CcError;

/// What a build runs.
pub(crate) struct Tools {
    pub compiler: PathBuf,
    pub opt: PathBuf,
    pub plugin: PathBuf,
    pub runtime: PathBuf,
}

/// The LLVM majors whose pass `scripts/build` can build (llvm-plugin's levels).
const LLVM_MAJORS: [u32; 3] = [14, 15, 16];

/// The pass plugin's file for LLVM `major`: the workspace builds 14's, scripts/build the
/// others from their own target directories.
fn plugin_file(major: u32) -> String {
    if major == 14 {
        "libbbv_llvm.so".into()
    } else {
        format!("libbbv_llvm_{major}.so")
    }
}

/// The major version in clang's `--version` line (`Debian clang version 16.0.6 (15~deb12u1)`).
fn clang_major(first_line: &str) -> Option<u32> {
    let rest = first_line.split("clang version ").nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

/// The compiler, LLVM's `opt` of the same version, and bbv's pass and runtime for it (next
/// to the bbv binary, or in `$BBV_LLVM_DIR`).
pub(crate) fn find_tools(compiler: &OsStr) -> Result<Tools, CcError> {
    let name = compiler.to_string_lossy().into_owned();
    let path = if name.contains('/') {
        PathBuf::from(&name)
    } else {
        bbv_collect::find_on_path(&name).ok_or_else(|| {
            CcError::Invalid(format!(
                "{name}: not found on PATH (apt-get install clang-16, or clang-14 or clang-15)"
            ))
        })?
    };
    let version = Command::new(&path)
        .arg("--version")
        .output()
        .map_err(|source| CcError::Spawn {
            program: path.display().to_string(),
            source,
        })?;
    let text = String::from_utf8_lossy(&version.stdout);
    let first = text.lines().next().unwrap_or("");
    let Some(major) = clang_major(first) else {
        bail!("{name} is not clang ({first:?}): bbv cc needs clang 14, 15 or 16 (clang-16 / clang++-16, ...)");
    };
    if !LLVM_MAJORS.contains(&major) {
        bail!(
            "{name} is clang {major} ({first:?}); bbv cc's pass is built for LLVM 14, 15 and 16: use clang-14, clang-15 or clang-16"
        );
    }
    // opt from the same LLVM installation as the compiler.
    let real = std::fs::canonicalize(&path).unwrap_or(path.clone());
    let opt = real
        .parent()
        .map(|d| d.join("opt"))
        .filter(|p| p.is_file())
        .or_else(|| bbv_collect::find_on_path(&format!("opt-{major}")))
        .ok_or_else(|| {
            CcError::Invalid(format!("opt (LLVM {major}) not found next to the compiler nor as opt-{major} on PATH (apt-get install llvm-{major})"))
        })?;
    let dir = match std::env::var_os("BBV_LLVM_DIR") {
        Some(d) => PathBuf::from(d),
        None => std::env::current_exe()
            .ok()
            .and_then(|e| e.parent().map(Path::to_path_buf))
            .ok_or_else(|| CcError::Invalid("cannot find the bbv binary's directory".into()))?,
    };
    let plugin = dir.join(plugin_file(major));
    let runtime = dir.join("libbbv_llvm_runtime.a");
    if !plugin.is_file() {
        bail!(
            "{name} is clang {major}, but bbv's pass for LLVM {major} ({}) is not built: apt-get install llvm-{major}-dev, then scripts/build --workspace (or set BBV_LLVM_DIR)",
            plugin.display()
        );
    }
    if !runtime.is_file() {
        bail!(
            "the bbv LLVM runtime {} is missing: build it with scripts/build --workspace or set BBV_LLVM_DIR",
            runtime.display()
        );
    }
    Ok(Tools {
        compiler: path,
        opt,
        plugin,
        runtime,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clang_versions() {
        assert_eq!(
            clang_major("Debian clang version 16.0.6 (15~deb12u1)"),
            Some(16)
        );
        assert_eq!(clang_major("Debian clang version 14.0.6"), Some(14));
        assert_eq!(
            clang_major("clang version 18.1.8 (Fedora 18.1.8-1.fc40)"),
            Some(18)
        );
        assert_eq!(clang_major("gcc (Debian 12.2.0-14) 12.2.0"), None);
        assert_eq!(plugin_file(14), "libbbv_llvm.so");
        assert_eq!(plugin_file(16), "libbbv_llvm_16.so");
    }
}
