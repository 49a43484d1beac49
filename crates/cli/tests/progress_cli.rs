//! Progress: shown on a terminal (a pseudo-terminal from `script -qc`) while the guest runs and
//! while clustering; nothing extra on stderr when it is not a terminal.

use std::path::Path;
use std::process::Command;

use crate::common::{assert_status, bbv, gzip_job, text_input};

/// Runs `command` under a pseudo-terminal; returns what the terminal received.
fn on_terminal(command: &str) -> String {
    let out = Command::new("script")
        .args(["-qec", command, "/dev/null"])
        .output()
        .expect("script(1) runs (bsdutils)");
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn quote(p: &Path) -> String {
    format!("'{}'", p.display())
}

#[test]
fn run_shows_the_guest_and_the_clustering_on_a_terminal_only() {
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("input.txt");
    text_input(&input, 1_000_000);
    let bbv_exe = env!("CARGO_BIN_EXE_bbv");
    let dir = work.path().join("tty");
    let seen = on_terminal(&format!(
        "{bbv_exe} run --interval 1000000 -o {} -- gzip -6 -c {} > /dev/null",
        quote(&dir),
        quote(&input)
    ));
    assert!(seen.contains("guest running: "), "{seen}");
    assert!(seen.contains(" instructions ("), "{seen}");
    assert!(seen.contains(" intervals"), "{seen}");
    assert!(
        seen.contains("clustering: k-means run 1 of at most 7, k = "),
        "{seen}"
    );
    // Without a terminal stderr holds the summary and nothing else.
    let dir = work.path().join("pipe");
    let out = gzip_job(&["run", "--interval", "1000000"], &dir, &input);
    let summary = std::fs::read_to_string(dir.join("summary.txt")).unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stderr), summary);
}

#[test]
fn collect_shows_progress_with_verbose_and_simpoint_shows_its_runs() {
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("input.txt");
    text_input(&input, 300_000);
    let bbv_exe = env!("CARGO_BIN_EXE_bbv");
    let bb = work.path().join("bb.out");
    let collect = |flag: &str| {
        on_terminal(&format!(
            "cd {} && {bbv_exe} collect {flag} --interval-size 1000000 --bb-out-file bb.out -- gzip -6 -c {} > /dev/null",
            quote(work.path()),
            quote(&input)
        ))
    };
    assert!(collect("-v").contains("guest running: "));
    assert!(!collect("").contains("guest running"));
    let seen = on_terminal(&format!(
        "{bbv_exe} simpoint {} --max-k 5 -o {}",
        quote(&bb),
        quote(&work.path().join("sp"))
    ));
    assert!(
        seen.contains("clustering: k-means run 1 of at most 5, k = 1"),
        "{seen}"
    );
    let piped = bbv()
        .arg("simpoint")
        .arg(&bb)
        .args(["--max-k", "5", "-o"])
        .arg(work.path().join("sp2"))
        .output()
        .unwrap();
    assert_status(&piped, 0);
    assert!(!String::from_utf8_lossy(&piped.stderr).contains("clustering"));
}
