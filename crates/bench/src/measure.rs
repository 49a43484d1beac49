//! What every benchmark shares: timing a command (wall and CPU seconds, peak memory), the
//! workloads' inputs, medians and geometric means, and a scratch folder removed afterwards.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

pub struct Measure {
    pub wall: f64,
    pub cpu: f64,
    pub max_rss_mb: f64,
}

/// Runs `bbv ARGS` as a child process and measures it with wait4's resource usage.
pub fn measure_bbv(args: &[String]) -> Result<Measure> {
    measure_bbv_with(args, Stdio::inherit())
}

/// As [`measure_bbv`], with the child's stderr going to `stderr` (commands that print their
/// summary there).
pub fn measure_bbv_with(args: &[String], stderr: Stdio) -> Result<Measure> {
    let exe = std::env::current_exe().context("cannot find the bbv binary")?;
    let start = Instant::now();
    let child = Command::new(exe)
        .args(args)
        .stdout(Stdio::null())
        .stderr(stderr)
        .spawn()
        .context("cannot start bbv")?;
    reap(child, start, &format!("bbv {}", args.join(" ")))
}

/// Waits for `child` (started at `start`; `what` names it in errors) and measures it with
/// wait4's resource usage; an exit status other than 0 is an error.
pub fn reap(child: std::process::Child, start: Instant, what: &str) -> Result<Measure> {
    let mut status = 0;
    // SAFETY: rusage is plain old data, and wait4 reaps exactly the child we spawned.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let pid = unsafe { libc::wait4(child.id() as libc::pid_t, &mut status, 0, &mut usage) };
    let wall = start.elapsed().as_secs_f64();
    if pid < 0 {
        bail!("wait4 failed: {}", std::io::Error::last_os_error());
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        bail!("{what} failed (status {status})");
    }
    let tv = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    Ok(Measure {
        wall,
        cpu: tv(usage.ru_utime) + tv(usage.ru_stime),
        max_rss_mb: usage.ru_maxrss as f64 / 1024.0,
    })
}

pub fn fastest(v: &[f64]) -> f64 {
    v.iter().copied().fold(f64::INFINITY, f64::min)
}

/// One program run the same way under every tool.
pub struct Workload {
    pub name: &'static str,
    pub argv: Vec<String>,
    pub env: Vec<(&'static str, &'static str)>,
}

/// A deterministic, compressible text: words drawn by an LCG from a fixed vocabulary.
pub fn make_input(path: &Path, bytes: usize) -> Result<()> {
    let words: Vec<String> = (0..4000u64)
        .map(|i| format!("{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 44))
        .collect();
    let mut text = String::with_capacity(bytes + 16);
    let mut x = 88172645463325252u64;
    while text.len() < bytes {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&words[(x >> 33) as usize % words.len()]);
        text.push(if x & 0xf == 0 { '\n' } else { ' ' });
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

pub fn tool(name: &str) -> Result<PathBuf> {
    bbv_collect::find_on_path(name)
        .with_context(|| format!("{name} not found on PATH (scripts/setup installs it)"))
}

/// Debian's python3 (a version manager's shim on PATH would be a shell script, which QEMU
/// cannot run), else the one on PATH.
pub fn python3() -> Result<PathBuf> {
    match Path::new("/usr/bin/python3") {
        p if p.is_file() => Ok(p.to_path_buf()),
        _ => tool("python3"),
    }
}

/// Wall seconds of one run; the program must succeed.
pub fn time(argv: &[String], env: &[(&str, &str)], dir: &Path) -> Result<f64> {
    time_and_cpu(argv, env, dir).map(|(wall, _)| wall)
}

/// CPU seconds (user and system) used so far by this process's waited-for children.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Wall and CPU seconds (of the run's whole process tree) of one run; it must succeed.
pub fn time_and_cpu(argv: &[String], env: &[(&str, &str)], dir: &Path) -> Result<(f64, f64)> {
    let cpu = children_cpu();
    let start = Instant::now();
    let st = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {}", argv[0]))?;
    let t = start.elapsed().as_secs_f64();
    if !st.status.success() {
        let err = String::from_utf8_lossy(&st.stderr);
        let tail: Vec<&str> = err.lines().rev().take(5).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        bail!(
            "{} failed ({}):\n{}",
            argv.join(" "),
            st.status,
            tail.join("\n")
        );
    }
    Ok((t, children_cpu() - cpu))
}

pub fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

pub fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

/// Runs `f` in a folder `bbv-NAME-bench-PID` made under `dir`, removed afterwards (kept after a
/// failure when `BBV_BENCH_KEEP_FAILED` is set, always when `BBV_BENCH_KEEP` is).
pub fn in_temp_root<T>(dir: &Path, name: &str, f: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let root = dir.join(format!("bbv-{name}-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let result = f(&root);
    // A failed run's folder stays for a look (its inputs and run directories reproduce it);
    // any run's, to study its files (bbv bench simulate's runs, for instance).
    let keep = std::env::var_os("BBV_BENCH_KEEP").is_some()
        || (result.is_err() && std::env::var_os("BBV_BENCH_KEEP_FAILED").is_some());
    if keep {
        eprintln!("bbv: kept {}", root.display());
    } else {
        let _ = std::fs::remove_dir_all(&root);
    }
    result
}
