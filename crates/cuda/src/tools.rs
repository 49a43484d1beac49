//! Finding bbv's injection library, checking for a driver, and running a CUDA program with the
//! injection library (NVIDIA's disassemblers are found by `bbv_gpucfg::tools`).

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

use crate::CudaError;

/// The injection library and the folder of the CUPTI it runs with.
#[derive(Clone, Debug)]
pub struct Injection {
    /// `libbbv_cupti.so`.
    pub library: PathBuf,
    /// A folder holding the `libcupti.so.13` to preload into the program, if any.
    pub cupti: Option<PathBuf>,
}

impl Injection {
    /// `$BBV_CUPTI_INJECTION`, or `libbbv_cupti.so` next to the bbv binary (`exe_dir`), with
    /// `$BBV_CUPTI_LIB` or the `cupti` folder beside it.
    pub fn find(exe_dir: &Path) -> Result<Injection, CudaError> {
        let library = std::env::var_os("BBV_CUPTI_INJECTION")
            .map(PathBuf::from)
            .unwrap_or_else(|| exe_dir.join("libbbv_cupti.so"));
        if !library.is_file() {
            return Err(CudaError::Tool(format!(
                "{} does not exist: build it with scripts/cupti (or set BBV_CUPTI_INJECTION)",
                library.display()
            )));
        }
        let cupti = std::env::var_os("BBV_CUPTI_LIB")
            .map(PathBuf::from)
            .or_else(|| Some(exe_dir.join("cupti")).filter(|d| d.join("libcupti.so.13").is_file()));
        Ok(Injection { library, cupti })
    }
}

/// Refuses a machine without an NVIDIA driver (no GPU device node, or no `libcuda.so.1`), before
/// anything runs.
pub fn check_driver() -> Result<(), CudaError> {
    // The device folder can be named (tests stand in a machine without a GPU with it).
    let dev =
        std::env::var_os("BBV_NVIDIA_DEV").map_or_else(|| PathBuf::from("/dev"), PathBuf::from);
    check_driver_at(&dev, &library_dirs())
}

fn library_dirs() -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("LD_LIBRARY_PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    // The loader's own folders.
    if let Ok(entries) = std::fs::read_dir("/etc/ld.so.conf.d") {
        for e in entries.flatten() {
            if let Ok(text) = std::fs::read_to_string(e.path()) {
                dirs.extend(
                    text.lines()
                        .map(str::trim)
                        .filter(|l| l.starts_with('/'))
                        .map(PathBuf::from),
                );
            }
        }
    }
    for d in [
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/lib/x86_64-linux-gnu",
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
        "/usr/lib/wsl/lib",
        "/usr/local/cuda/compat",
    ] {
        dirs.push(PathBuf::from(d));
    }
    dirs
}

/// [`check_driver`] against a given device folder and library folders.
pub fn check_driver_at(dev: &Path, libs: &[PathBuf]) -> Result<(), CudaError> {
    if !dev.join("nvidiactl").exists() {
        return Err(CudaError::NoDriver(format!(
            "no NVIDIA driver: {} does not exist. `bbv gpu run` counts kernels on an NVIDIA GPU \
             through its driver; nothing was run",
            dev.join("nvidiactl").display()
        )));
    }
    if !libs.iter().any(|d| d.join("libcuda.so.1").exists()) {
        return Err(CudaError::NoDriver(
            "no NVIDIA driver library: libcuda.so.1 is not in the library path nor in the usual \
             folders; nothing was run"
                .into(),
        ));
    }
    Ok(())
}

/// What `bbv gpu run` asks of the injection library.
#[derive(Clone, Debug, Default)]
pub struct Selection {
    /// Only kernels whose mangled name matches (ECMAScript regex).
    pub kernels: Option<String>,
    /// Only launches `a..b` (0-based, b exclusive).
    pub launches: Option<(u64, Option<u64>)>,
}

/// Parses `--launches A:B` (0-based, B exclusive, may be left out).
pub fn launch_range(s: &str) -> Result<(u64, Option<u64>), String> {
    let bad = || format!("{s:?}: expected A:B (0-based, B exclusive, may be left out)");
    let (a, b) = s.split_once(':').ok_or_else(bad)?;
    let a: u64 = a.parse().map_err(|_| bad())?;
    let b: Option<u64> = match b {
        "" => None,
        b => Some(b.parse().map_err(|_| bad())?),
    };
    if b.is_some_and(|b| b <= a) {
        return Err(format!("{s}: B must be greater than A"));
    }
    Ok((a, b))
}

/// Runs `program args` with the injection library writing into `raw`; returns its status.
/// `timing`: a timing run (every launch timed, nothing counted, the selection ignored).
pub fn run_program(
    inj: &Injection,
    raw: &Path,
    program: &str,
    args: &[String],
    sel: &Selection,
    timing: bool,
) -> Result<ExitStatus, CudaError> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("CUDA_INJECTION64_PATH", &inj.library)
        .env("BBV_GPU_DIR", raw);
    if let Some(dir) = &inj.cupti {
        // Preloaded, not put on the library path: a program that brings its own CUPTI (PyTorch)
        // would otherwise load that one under the same name (CUDA 13.0's counts only the first
        // kernel), and a library path ahead of PyTorch's own crashed it.
        let mut preload = dir.join("libcupti.so.13").into_os_string();
        if let Some(old) = std::env::var_os("LD_PRELOAD").filter(|o| !o.is_empty()) {
            preload.push(" ");
            preload.push(old);
        }
        cmd.env("LD_PRELOAD", preload);
    }
    if timing {
        cmd.env("BBV_GPU_TIMES", "1");
        return cmd
            .status()
            .map_err(|e| CudaError::Tool(format!("cannot start {program}: {e}")));
    }
    if let Some(k) = &sel.kernels {
        cmd.env("BBV_GPU_KERNELS", k);
    }
    if let Some((a, b)) = sel.launches {
        let b = b.map(|b| b.to_string()).unwrap_or_default();
        cmd.env("BBV_GPU_LAUNCHES", format!("{a}:{b}"));
    }
    cmd.status()
        .map_err(|e| CudaError::Tool(format!("cannot start {program}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_machine_without_a_driver_is_named() {
        let t = tempfile::tempdir().unwrap();
        let e = check_driver_at(t.path(), &[t.path().to_path_buf()]).unwrap_err();
        assert!(e.to_string().contains("nvidiactl does not exist"), "{e}");
        std::fs::write(t.path().join("nvidiactl"), "").unwrap();
        let e = check_driver_at(t.path(), &[t.path().to_path_buf()]).unwrap_err();
        assert!(e.to_string().contains("libcuda.so.1"), "{e}");
        std::fs::write(t.path().join("libcuda.so.1"), "").unwrap();
        check_driver_at(t.path(), &[t.path().to_path_buf()]).unwrap();
    }
}
