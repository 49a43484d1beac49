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

#[test]
fn suite_shows_its_jobs_on_a_terminal_only() {
    let work = tempfile::tempdir().unwrap();
    let manifest = work.path().join("suite.toml");
    let mut text = String::from("[defaults]\ninterval = 1000000\nmax-k = 3\n");
    for i in 0..3 {
        text.push_str(&format!(
            "\n[[job]]\nname = \"j{i}\"\ncommand = [\"sh\", \"-c\", \"i=0; while [ $i -lt 30000 ]; do i=$((i+1)); done\"]\n"
        ));
    }
    std::fs::write(&manifest, text).unwrap();
    let bbv_exe = env!("CARGO_BIN_EXE_bbv");
    let seen = on_terminal(&format!(
        "{bbv_exe} suite run {} -o {} --jobs 2",
        quote(&manifest),
        quote(&work.path().join("tty"))
    ));
    assert!(seen.contains("running, 0 failed"), "{seen}");
    assert!(seen.contains("/3]"), "{seen}");
    // Without a terminal: the closing line only.
    let out = bbv()
        .args(["suite", "run"])
        .arg(&manifest)
        .arg("-o")
        .arg(work.path().join("pipe"))
        .output()
        .unwrap();
    assert_status(&out, 0);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("bbv suite: 3 jobs: 3 done"), "{err}");
}
