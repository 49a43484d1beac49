//! The real Sniper (scripts/sniper) fed live by bbv-sift: a loop of real x86-64 instructions
//! (an add, a load walking 512 KiB, a decrement and a branch back) with a region of interest
//! marked by magic instructions; what Sniper reports is checked against what was streamed,
//! twice for determinism, and a broken stream and a missing build get clear errors.

use std::path::Path;
use std::process::Command;

use bbv_sift::command;
use bbv_sniper::{Sniper, SniperError};

mod common;
use common::{iteration, sniper};

/// Streams `warm` iterations, the region of interest's `roi`, then `tail`; Sniper's
/// (instructions, cycles) of the region.
fn simulate(s: &Sniper, warm: u64, roi: u64, tail: u64) -> (u64, u64) {
    let work = tempfile::tempdir().unwrap();
    let mut live = s.start(work.path(), 1, None).unwrap();
    let (mut w, mut replies) = live.thread0().unwrap();
    let n = warm + roi + tail;
    for k in 0..n {
        if k == warm {
            w.magic(&mut replies, [command::ROI_START, 0, 0]).unwrap();
        }
        if k == warm + roi {
            w.magic(&mut replies, [command::ROI_END, 0, 0]).unwrap();
        }
        for i in iteration(0, k, k + 1 == n) {
            w.instruction(&i).unwrap();
        }
    }
    drop(w.end().unwrap());
    let out = live.finish().unwrap();
    (out.instructions[0], out.cycles[0])
}

#[test]
fn a_region_of_interest_is_simulated_as_streamed_and_the_same_twice() {
    let s = sniper();
    let roi = 50_000;
    let (insns, cycles) = simulate(&s, 25_000, roi, 1_000);
    // The instructions still in the core's 128-entry reorder buffer when the region ends are
    // not counted as the region's.
    let streamed = 4 * roi;
    assert!(
        insns <= streamed && insns + 200 >= streamed,
        "{insns} of {streamed}"
    );
    // One load a cache line of a 512 KiB walk per iteration: L1 misses bound it well under 1.
    let ipc = insns as f64 / cycles as f64;
    assert!(ipc > 0.01 && ipc < 1.0, "IPC {ipc}");
    assert_eq!(simulate(&s, 25_000, roi, 1_000), (insns, cycles));
}

#[test]
fn a_broken_stream_and_a_missing_build_are_named() {
    let s = sniper();
    let work = tempfile::tempdir().unwrap();
    let mut live = s.start(work.path(), 1, None).unwrap();
    let (mut w, _replies) = live.thread0().unwrap();
    for i in iteration(0, 0, false) {
        w.instruction(&i).unwrap();
    }
    // A record of a type Sniper does not know, and the stream ends there.
    let mut out = w.into_inner().unwrap().into_inner().unwrap();
    std::io::Write::write_all(&mut out, &[0, 0x7e, 0, 0, 0, 0]).unwrap();
    drop(out);
    let pid = live.pid();
    match live.finish() {
        Err(SniperError::Failed { log, why }) => assert!(log.is_file(), "{why}"),
        other => panic!("{other:?}"),
    }
    // Neither run-sniper nor the backend it started is left.
    assert!(!Path::new(&format!("/proc/{pid}")).exists());
    let stray = Command::new("pgrep")
        .args(["-f", &work.path().display().to_string()])
        .output()
        .unwrap();
    assert!(
        stray.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&stray.stdout)
    );
    let e = Sniper::find(Some(Path::new("/nonexistent/sniper")))
        .unwrap_err()
        .to_string();
    assert!(e.contains("scripts/sniper"), "{e}");
}
