//! Killed bbv: the signal reaches the guest, and no QEMU, temporary folder or output is left.

use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bbv, files_in, processes_with};

/// A guest that loops until it gets SIGTERM, then says so and exits 7. `tag` appears in its
/// command line, so that its QEMU can be found among the machine's processes.
fn looping_guest(tag: &str) -> Vec<String> {
    let script = format!("trap 'echo got-term-{tag}; exit 7' TERM; while :; do :; done");
    vec!["sh".into(), "-c".into(), script]
}

/// Waits until `ready` holds (the guest runs), at most a minute.
fn wait_for(what: &str, ready: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(60);
    while !ready() {
        assert!(Instant::now() < until, "gave up waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits for `child` to end, killing it after a minute (a guest the signal never reached).
fn finish(mut child: Child) -> std::process::Output {
    let until = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > until {
            let _ = child.kill();
            panic!("bbv did not end after the signal");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: signals our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

/// Starts `cmd` (a bbv command ending in `--`) on the looping guest, and returns once the
/// guest's QEMU runs.
fn start(mut cmd: std::process::Command, tag: &str) -> Child {
    let child = cmd
        .args(looping_guest(tag))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for("the guest's QEMU", || {
        processes_with(tag).iter().any(|p| p.contains("qemu-"))
    });
    child
}

/// Starts `bbv ARGS -- looping guest` in `dir`, and signals it once the guest runs.
fn killed_mid_run(dir: &Path, args: &[&str], tag: &str, sig: i32) -> std::process::Output {
    let mut cmd = bbv();
    cmd.current_dir(dir).args(args).arg("--");
    let child = start(cmd, tag);
    // Past QEMU's start-up: the guest's loop (and its trap) runs.
    std::thread::sleep(Duration::from_millis(700));
    signal(&child, sig);
    finish(child)
}

#[test]
fn sigint_sigterm_and_sighup_reach_the_guest_and_leave_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let cases: [(&[&str], i32); 4] = [
        (&["run", "-o", "out"], libc::SIGTERM),
        (&["run", "-o", "out"], libc::SIGINT),
        (
            &[
                "collect",
                "--bb-out-file",
                "bb.out",
                "--pc-out-file",
                "pc.out",
            ],
            libc::SIGHUP,
        ),
        (
            &[
                "collect",
                "--bb-out-file",
                "bb.out",
                "--pc-out-file",
                "pc.out",
            ],
            libc::SIGTERM,
        ),
    ];
    for (i, (args, sig)) in cases.into_iter().enumerate() {
        let dir = tmp.path().join(format!("case{i}"));
        std::fs::create_dir_all(&dir).unwrap();
        let tag = format!("bbv-sig-test-{}-{i}", std::process::id());
        let out = killed_mid_run(&dir, args, &tag, sig);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(128 + sig), "{args:?}: {stderr}");
        // One line saying what the outputs hold now.
        assert!(stderr.starts_with("bbv: stopped by SIG"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
        // bbv waited for the guest, so its QEMU is gone already.
        assert_eq!(processes_with(&tag), Vec::<String>::new(), "{args:?}");
        // The guest's handler ran for SIGTERM; SIGINT and SIGHUP ended it (default action).
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            stdout.contains(&format!("got-term-{tag}")),
            sig == libc::SIGTERM,
            "{stdout}"
        );
        // Nothing half-made: no temporary folder, no output.
        let left: Vec<String> = walk(&dir);
        assert_eq!(left, Vec::<String>::new(), "{args:?} left {left:?}");
    }
}

/// Every path under `dir` except empty folders bbv created for its outputs.
fn walk(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    for name in files_in(dir) {
        let p = dir.join(&name);
        if p.is_dir() {
            let inner = walk(&p);
            if name.starts_with('.') || !inner.is_empty() {
                found.push(name.clone());
            }
            found.extend(inner.into_iter().map(|n| format!("{name}/{n}")));
        } else {
            found.push(name);
        }
    }
    found
}

#[test]
fn a_replay_killed_mid_run_leaves_nothing_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    // A short run of the same shell (the loop ends after 20,000 rounds) to replay.
    let o = bbv()
        .args(["run", "--interval", "1000000", "-o"])
        .arg(&run)
        .args([
            "--",
            "sh",
            "-c",
            "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done",
        ])
        .output()
        .unwrap();
    crate::common::assert_status(&o, 0);
    let before = walk(&run);
    let tag = format!("bbv-sig-replay-{}", std::process::id());
    let scratch = tmp.path().join("scratch");
    std::fs::create_dir(&scratch).unwrap();
    let mut cmd = bbv();
    cmd.env("TMPDIR", &scratch)
        .arg("replay")
        .arg(&run)
        .arg("--");
    let child = start(cmd, &tag);
    std::thread::sleep(Duration::from_millis(700));
    signal(&child, libc::SIGTERM);
    let out = finish(child);
    crate::common::assert_status(&out, 128 + libc::SIGTERM);
    assert_eq!(processes_with(&tag), Vec::<String>::new());
    assert_eq!(walk(&run), before, "the run directory changed");
    // The replay's own work folder (in the temporary directory) is gone too.
    assert_eq!(walk(&scratch), Vec::<String>::new());
}

/// `bbv collect` into bb.out and pc.out of the current folder.
const COLLECT: [&str; 5] = [
    "collect",
    "--bb-out-file",
    "bb.out",
    "--pc-out-file",
    "pc.out",
];

#[test]
fn a_sigkilled_bbv_takes_its_qemu_with_it() {
    let tmp = tempfile::tempdir().unwrap();
    let tag = format!("bbv-sig-kill-{}", std::process::id());
    let mut cmd = bbv();
    cmd.current_dir(tmp.path()).args(COLLECT).arg("--");
    let child = start(cmd, &tag);
    signal(&child, libc::SIGKILL);
    let out = finish(child);
    assert_eq!(out.status.code(), None);
    // The kernel kills QEMU once bbv is gone (its zombie has no command line).
    wait_for("QEMU to die with bbv", || processes_with(&tag).is_empty());
    // Its work folder stays, until the next bbv run in that folder removes it.
    let work = |dir: &Path| -> Vec<String> {
        files_in(dir)
            .into_iter()
            .filter(|n| n.starts_with(".bbv-collect-"))
            .collect()
    };
    assert_eq!(work(tmp.path()).len(), 1);
    let o = bbv()
        .current_dir(tmp.path())
        .args(COLLECT)
        .args(["--", "true"])
        .output()
        .unwrap();
    crate::common::assert_status(&o, 0);
    assert_eq!(work(tmp.path()), Vec::<String>::new());
}

#[test]
fn a_killed_bbv_cc_leaves_no_compiler_or_temporary_folder() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // A source clang takes seconds over, even at -O0: thousands of functions.
    let tag = format!("bbvccsig{}", std::process::id());
    let src = d.join(format!("{tag}.c"));
    let mut text = String::new();
    for i in 0..6000 {
        text.push_str(&format!(
            "int f{i}(int x) {{ int s = 0; for (int j = 0; j < x; j++) s += j * {i} ^ (s >> 3); return s; }}\n"
        ));
    }
    std::fs::write(&src, text).unwrap();
    let tmp = d.join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let child = bbv()
        .current_dir(d)
        .env("TMPDIR", &tmp)
        .args(["cc", "--", "clang-14", "-O2", "-c", "-o", "out.o"])
        .arg(&src)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // bbv's own command line names clang too: the compiler's is one without " cc -- ".
    let compilers = || {
        processes_with(&tag)
            .into_iter()
            .filter(|p| !p.contains(" cc -- ") && (p.contains("clang") || p.contains("opt")))
            .count()
    };
    wait_for("clang on the source", || compilers() > 0);
    signal(&child, libc::SIGTERM);
    let out = finish(child);
    assert_eq!(out.status.code(), Some(128 + libc::SIGTERM));
    wait_for("the compilers to die with bbv", || compilers() == 0);
    assert_eq!(walk(&tmp), Vec::<String>::new(), "temporary folder left");
    assert!(!d.join("out.o").exists());
}
