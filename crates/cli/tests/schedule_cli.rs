//! `bbv run --schedule deterministic` under the real QEMU 10 (`scripts/build-qemu`): threads
//! take turns in an order that depends only on the program, so that two runs write the same
//! files, the guest computes the same result, and a replay measures every region as profiled;
//! what the order cannot follow (a timeout, a thread blocked on the outside, a fork, a signal
//! from another process) ends the run as before and is listed in the summary.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::collect_cli::build;
use crate::common::{assert_status, bbv, json, replay_report};
use crate::qemu10_cli::qemu10;

fn qemu() -> PathBuf {
    qemu10().join("qemu-x86_64")
}

/// Runs `cmd` to its end, killing it (and failing) past `limit`: a schedule must never hang.
fn finish_within(mut cmd: Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let readers = (
        std::thread::spawn(move || {
            let mut v = Vec::new();
            out.read_to_end(&mut v).unwrap();
            v
        }),
        std::thread::spawn(move || {
            let mut v = Vec::new();
            err.read_to_end(&mut v).unwrap();
            v
        }),
    );
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} hung for {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: readers.0.join().unwrap(),
        stderr: readers.1.join().unwrap(),
    }
}

/// `bbv run --schedule deterministic --regions looppoint -o out` of `guest` in `dir`.
fn run(dir: &Path, threads: &str, guest: &[&str]) -> Output {
    let mut cmd = bbv();
    cmd.current_dir(dir)
        .env("OMP_NUM_THREADS", threads)
        .args([
            "run",
            "--schedule",
            "deterministic",
            "--regions",
            "looppoint",
        ])
        .args(["--interval", "2000000", "-o", "out", "--qemu"])
        .arg(qemu())
        .arg("--")
        .args(guest);
    finish_within(cmd, Duration::from_secs(300))
}

/// The OpenMP program with a dynamic-schedule loop, built in `dir`.
fn omp_dynamic(dir: &Path) -> PathBuf {
    build(dir, "gcc", "omp_dynamic.c", "omp_dyn", &["-O2", "-fopenmp"])
}

#[test]
fn two_runs_and_their_replays_follow_one_order() {
    // A dynamic-schedule loop hands chunks to whichever thread asks first: under the host's
    // schedule the split (and the floating-point sum the program prints) changes from run to
    // run, and replayed regions moved by up to 16% (L1 0.29).
    let dir = tempfile::tempdir().unwrap();
    let prog = omp_dynamic(dir.path());
    let prog = prog.to_str().unwrap();
    let mut printed = Vec::new();
    let mut files = Vec::new();
    for name in ["a", "b"] {
        let d = dir.path().join(name);
        std::fs::create_dir(&d).unwrap();
        let out = run(&d, "2", &[prog, "4"]);
        assert_status(&out, 0);
        printed.push(out.stdout);
        let out_dir = d.join("out");
        let summary = json(&out_dir.join("summary.json"));
        assert_eq!(summary["schedule"], "deterministic");
        assert_eq!(summary["turn_quantum"], 100_000);
        assert!(summary.get("schedule_events").is_none(), "{summary}");
        assert_eq!(summary["threads"].as_array().unwrap().len(), 2);
        let read = |f: &str| std::fs::read(out_dir.join(f)).unwrap();
        files.push([read("summary.json"), read("global.bb"), read("slices.tsv")]);
    }
    assert_eq!(printed[0], printed[1], "the guest computed another sum");
    assert!(files[0] == files[1], "two runs wrote different files");

    // Replayed from another directory with a larger environment, twice: the second time
    // without --qemu, since the run's own QEMU (summary.json's qemu_path) is the default.
    let own = json(&dir.path().join("a/out/summary.json"))["qemu_path"].clone();
    assert_eq!(own.as_str().map(PathBuf::from), Some(qemu()), "{own}");
    let other = dir.path().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let mut reports = Vec::new();
    for round in 0..2 {
        let mut cmd = bbv();
        cmd.current_dir(&other)
            .env("OMP_NUM_THREADS", "2")
            .env("BBV_TEST_PADDING", "x".repeat(3000))
            .arg("replay")
            .arg(dir.path().join("a/out"))
            .args(["--json", "--tolerance", "1"]);
        if round == 0 {
            cmd.arg("--qemu").arg(qemu());
        }
        cmd.args(["--", prog, "4"]);
        let out = finish_within(cmd, Duration::from_secs(300));
        let report = replay_report(&out);
        assert_eq!(out.status.code(), Some(0), "{report}");
        for c in report["regions"].as_array().unwrap() {
            let (profiled, replayed) = (
                c["profile_length"].as_f64().unwrap(),
                c["replay_length"].as_f64().unwrap(),
            );
            // Within a few instructions (a larger environment moves the stack, and string
            // functions run a little differently); the host's schedule moved regions by
            // tens of percent here.
            assert!(
                (replayed - profiled).abs() / profiled < 0.001,
                "{c}: {replayed} replayed, {profiled} profiled"
            );
            assert!(c["bbv_l1"].as_f64().unwrap() < 0.02, "{c}");
        }
        reports.push(report["regions"].clone());
    }
    assert_eq!(
        reports[0], reports[1],
        "two replays measured different regions"
    );
}

/// Runs `sched_faults MODE` deterministically: it ends as it does natively, and the summary
/// lists an event with `says`.
fn fault(mode: &str, says: &str) {
    let dir = tempfile::tempdir().unwrap();
    let prog = build(
        dir.path(),
        "gcc",
        "sched_faults.c",
        "faults",
        &["-O1", "-pthread"],
    );
    let out = run(dir.path(), "1", &[prog.to_str().unwrap(), mode]);
    assert_status(&out, 0);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{mode} done\n")
    );
    let summary = json(&dir.path().join("out/summary.json"));
    assert_eq!(summary["schedule"], "deterministic");
    let events = summary["schedule_events"]
        .as_array()
        .expect("events listed");
    assert!(
        events.iter().any(|e| e.as_str().unwrap().contains(says)),
        "{mode}: {events:?}"
    );
    // Each names the thread and how far it had got.
    for e in events {
        let e = e.as_str().unwrap();
        assert!(
            e.starts_with("thread ") && e.contains(" instruction "),
            "{e}"
        );
    }
    let text = std::fs::read_to_string(dir.path().join("out/summary.txt")).unwrap();
    assert!(text.contains("not reproducible"), "{text}");
}

#[test]
fn a_timeout_is_reported() {
    fault("timed", "futex wait");
}

#[test]
fn a_thread_blocked_for_good_neither_hangs_the_run_nor_goes_unreported() {
    fault("blocked", "system call kept the turn");
}

#[test]
fn a_fork_among_threads_is_reported() {
    fault("fork", "forked while several threads ran");
}

#[test]
fn a_signal_from_another_process_is_reported() {
    fault("signal", "signal handler");
}

#[test]
fn qemu_7_2_is_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = bbv()
        .current_dir(dir.path())
        .args(["run", "--schedule", "deterministic", "-o", "out", "--qemu"])
        .arg("/usr/bin/qemu-x86_64")
        .args(["--", "/bin/true"])
        .output()
        .unwrap();
    assert_status(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs QEMU 9.1 or later"), "{err}");
    assert!(!dir.path().join("out/summary.json").exists());
}

#[test]
fn looppoint_regions_take_turns_where_qemu_allows_and_replay_needs_the_same_threads() {
    let dir = tempfile::tempdir().unwrap();
    let prog = omp_dynamic(dir.path());
    let prog = prog.to_str().unwrap();
    let looppoint = |name: &str, qemu: &Path| {
        let mut cmd = bbv();
        cmd.current_dir(dir.path())
            .env("OMP_NUM_THREADS", "2")
            .args([
                "run",
                "--regions",
                "looppoint",
                "--interval",
                "2000000",
                "-o",
            ])
            .arg(name)
            .arg("--qemu")
            .arg(qemu)
            .args(["--", prog, "1"]);
        let out = finish_within(cmd, Duration::from_secs(300));
        assert_status(&out, 0);
        (json(&dir.path().join(name).join("summary.json")), out)
    };
    let (s, _) = looppoint("new", &qemu());
    assert_eq!(s["schedule"], "deterministic");
    assert!(
        s.get("flow_quantum").is_none(),
        "turns replace the pacing: {s}"
    );
    // Debian's QEMU 7.2 cannot: the threads are paced as before, and the run says why.
    let (s, out) = looppoint("old", Path::new("/usr/bin/qemu-x86_64"));
    assert_eq!(s["schedule"], "host");
    assert_eq!(s["flow_quantum"], 100_000);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("QEMU 9.1 or later"), "{err}");

    // Another thread count cannot follow the run's order: refused, exit 2, replay.json kept.
    let mut cmd = bbv();
    cmd.current_dir(dir.path())
        .env("OMP_NUM_THREADS", "3")
        .arg("replay")
        .arg(dir.path().join("new"))
        .arg("--qemu")
        .arg(qemu())
        .args(["--", prog, "1"]);
    let out = finish_within(cmd, Duration::from_secs(300));
    assert_status(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot be reproduced"), "{err}");
    assert!(!dir.path().join("new/replay.json").exists());
}
