//! Multi-threaded regions on Sniper: an OpenMP program's LoopPoint regions, profiled under the
//! deterministic turns of the real QEMU 10, replayed with every thread streamed live into a
//! Sniper of a core per thread (creations, futex waits and wakes as the guest's turns saw
//! them); `simulation.json` checked against the run and the estimate recomputed from the
//! regions' figures; the same simulation again reads the same cycles to within Sniper's own
//! variation; a replay whose QEMU is killed, and a bbv killed itself, leave no Sniper behind;
//! a run whose threads followed the host's schedule is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::{assert_status, bbv, built_by, json};
use crate::looppoint_cli::omp as omp_phases;
use crate::qemu10_cli::qemu10;
use crate::sniper_cli::recomputed;

/// `bbv ARGS -- PROG 2` with two OpenMP threads that sleep when they wait (as LoopPoint runs
/// them: spinning is the host's pace, not the program's).
fn omp(dir: &Path, prog: &Path, args: &[&str]) -> Output {
    omp_command(dir, prog, args).output().unwrap()
}

/// The command [`omp`] runs.
fn omp_command(dir: &Path, prog: &Path, args: &[&str]) -> Command {
    let mut c = bbv();
    c.current_dir(dir)
        .env("OMP_NUM_THREADS", "2")
        .env("OMP_WAIT_POLICY", "passive")
        .args(args)
        .arg("--")
        .arg(prog)
        .arg("2");
    c
}

/// LoopPoint regions of `prog` under `schedule`, in `dir/out`.
fn profile(dir: &Path, prog: &Path, schedule: &str) -> PathBuf {
    let q = qemu10().join("qemu-x86_64").display().to_string();
    let args = [
        "run",
        "--schedule",
        schedule,
        "--regions",
        "looppoint",
        "--interval",
        "1000000",
        "--warmup",
        "1000000",
        "-o",
        "out",
        "--qemu",
        &q,
    ];
    assert_status(&omp(dir, prog, &args), 0);
    dir.join("out")
}

/// `bbv simulate OUT --simulator sniper [EXTRA]`.
fn simulate(dir: &Path, prog: &Path, sniper: &Path, extra: &[&str]) -> Output {
    let s = sniper.to_str().unwrap();
    let mut args = vec!["simulate", "out", "--simulator", "sniper", "--sniper", s];
    args.extend(extra);
    omp(dir, prog, &args)
}

#[test]
fn two_threads_regions_and_the_whole_run_are_simulated_on_sniper() {
    let sniper = built_by("sniper");
    let work = tempfile::tempdir().unwrap();
    let prog = omp_phases(work.path());
    let run = profile(work.path(), &prog, "deterministic");
    let summary = json(&run.join("summary.json"));
    assert_eq!(summary["threads"].as_array().unwrap().len(), 2, "{summary}");
    let points = summary["points"].as_array().unwrap().clone();
    assert!(points.len() >= 2, "{points:?}");

    let o = simulate(work.path(), &prog, &sniper, &["--full"]);
    assert_status(&o, 0);
    let v = json(&run.join("simulation.json"));
    assert_eq!(v["simulator"], "sniper");
    // Both threads' instructions: the region ends where its end marker's thread reaches it in
    // Sniper's time, the other thread wherever Sniper has brought it.
    recomputed(&v, &points, |n, length| {
        n as f64 > 0.5 * length as f64 && (n as f64) < 2.0 * length as f64
    });
    let regions = v["regions"].as_array().unwrap();
    let estimate = v["estimate_cpi"].as_f64().unwrap();
    let full = v["full_cpi"].as_f64().unwrap();
    let error = v["error_pct"].as_f64().unwrap();
    assert!(
        (error - 100.0 * (estimate - full) / full).abs() < 1e-9,
        "{v}"
    );
    // A sanity bound, not a target (a few regions of a small program).
    assert!(error.abs() < 15.0, "{v}");
    // Simulated in detail: every region with its warmup (on so small a run, more than the
    // whole run).
    assert!(v["speedup_instructions"].as_f64().unwrap() > 0.0, "{v}");

    // Again, regions only: Sniper's multi-threaded simulation is deterministic to within
    // the host's timing of its threads (0.02% measured; allowed 1%).
    let o = simulate(work.path(), &prog, &sniper, &[]);
    assert_status(&o, 0);
    let again = json(&run.join("simulation.json"));
    for (a, b) in again["regions"].as_array().unwrap().iter().zip(regions) {
        let (a, b) = (a["cycles"].as_f64().unwrap(), b["cycles"].as_f64().unwrap());
        assert!((a / b - 1.0).abs() < 0.01, "{a} against {b}");
    }
    killed_qemu_stops_sniper(work.path(), &prog, &sniper, &run);
    killed_bbv_leaves_no_sniper(work.path(), &prog, &sniper);
    let left = Command::new("pgrep")
        .args(["-f", &work.path().display().to_string()])
        .output()
        .unwrap();
    assert!(left.stdout.is_empty(), "{left:?}");
}

/// The replay's QEMU killed while its threads stream into Sniper: an error, the previous
/// simulation.json untouched, and no Sniper left waiting for a stream that will never open.
fn killed_qemu_stops_sniper(dir: &Path, prog: &Path, sniper: &Path, run: &Path) {
    let before = std::fs::read(run.join("simulation.json")).unwrap();
    let s = sniper.to_str().unwrap();
    let args = [
        "simulate",
        "out",
        "--simulator",
        "sniper",
        "--sniper",
        s,
        "--full",
    ];
    let mut child = omp_command(dir, prog, &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let started = std::time::Instant::now();
    let qemu = loop {
        let o = Command::new("pgrep")
            .args(["-P", &child.id().to_string(), "qemu"])
            .output()
            .unwrap();
        if let Some(pid) = String::from_utf8_lossy(&o.stdout).split_whitespace().next() {
            break pid.parse::<i32>().unwrap();
        }
        assert!(started.elapsed().as_secs() < 60, "no QEMU started");
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    // Into the replay: Sniper's threads are streaming.
    std::thread::sleep(std::time::Duration::from_millis(1500));
    // SAFETY: a process of this test's own bbv.
    unsafe { libc::kill(qemu, libc::SIGKILL) };
    let waited = std::time::Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st;
        }
        if waited.elapsed().as_secs() > 120 {
            let _ = child.kill();
            panic!("bbv still waiting 120 s after its QEMU was killed");
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    // 1: the replay missed its markers (the table says the program was killed); 2: it failed.
    assert!(matches!(status.code(), Some(1 | 2)), "{status:?}: {err}");
    assert_eq!(std::fs::read(run.join("simulation.json")).unwrap(), before);
}

/// bbv itself SIGKILLed while its Snipers simulate: run-sniper dies with bbv, and the
/// simulator run-sniper started dies with run-sniper (none left reading FIFOs nobody writes).
fn killed_bbv_leaves_no_sniper(dir: &Path, prog: &Path, sniper: &Path) {
    let s = sniper.to_str().unwrap();
    let args = ["simulate", "out", "--simulator", "sniper", "--sniper", s];
    let mut child = omp_command(dir, prog, &args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Each Sniper works in bbv's replay folder, named after bbv's process id.
    let pattern = format!("lib/sniper .*bbv-replay-{}-", child.id());
    let simulators = || {
        let o = Command::new("pgrep")
            .args(["-f", &pattern])
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).lines().count()
    };
    let started = std::time::Instant::now();
    while simulators() == 0 {
        assert!(started.elapsed().as_secs() < 60, "no Sniper started");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = std::time::Instant::now();
    while simulators() > 0 {
        assert!(
            killed.elapsed().as_secs() < 30,
            "Sniper still running 30 s after bbv was killed"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn threads_that_followed_the_host_s_schedule_are_refused() {
    let sniper = built_by("sniper");
    let work = tempfile::tempdir().unwrap();
    let prog = omp_phases(work.path());
    let run = profile(work.path(), &prog, "host");
    let o = simulate(work.path(), &prog, &sniper, &[]);
    assert_status(&o, 2);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--schedule deterministic"), "{err}");
    assert!(!run.join("simulation.json").exists());
}
