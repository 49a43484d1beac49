//! Kill-safety: `run`, `regions`, `trace`, `simulate` (the real ChampSim) and `checkpoint`
//! (QEMU 10) are each killed at seeded instants spread over their life, by SIGTERM and SIGKILL
//! alternately at random. After every kill the folder is file for file its state before the
//! command or the one the command makes when left alone; no process of the command stays; the
//! next command on the folder works and leaves nothing of the killed one behind (no stage
//! beside the folder, no temporary in it).
//!
//! Kills per command: `BBV_CRASH_KILLS` (default 40: 200 in all).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{bbv, champsim_bin, guest_env, processes_with, text_input};

/// A folder's files, relative to it, with their contents as compared.
type State = BTreeMap<PathBuf, Vec<u8>>;

/// Files whose contents vary from run to run: text with figures that do (wall and CPU
/// seconds), compared with every digit blanked; and files compared by name and length class
/// only (a checkpoint holds the host's addresses): `(suffix, whole)`.
fn state(dir: &Path, volatile: &[(&str, bool)]) -> State {
    crate::common::contents(dir)
        .into_iter()
        .map(|(p, bytes)| {
            let rel = p.strip_prefix(dir).unwrap().to_path_buf();
            let name = rel.to_string_lossy().into_owned();
            let bytes = match volatile.iter().find(|v| name.ends_with(v.0)) {
                Some((_, true)) => {
                    // Each number one '#', whatever its digits.
                    let mut out = Vec::new();
                    for b in bytes {
                        let digit = b.is_ascii_digit() || b == b'.';
                        if !(digit && out.last() == Some(&b'#')) {
                            out.push(if digit { b'#' } else { b });
                        }
                    }
                    out
                }
                Some((_, false)) => format!("{} bytes", bytes.len().max(1).ilog2()).into_bytes(),
                None => bytes,
            };
            (rel, bytes)
        })
        .collect()
}

/// The files two states disagree on (missing from one, or of other contents).
fn differing(a: &State, b: &State) -> Vec<PathBuf> {
    let mut keys: Vec<PathBuf> = a.keys().chain(b.keys()).cloned().collect();
    keys.sort();
    keys.dedup();
    keys.retain(|k| a.get(k) != b.get(k));
    keys
}

/// xorshift64*: the kills' instants and signals, the same in every run of the test.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// One command under test: its arguments (run in `root`, in a fixed environment), the folder
/// it writes, and the cheap command run after each kill.
struct Case {
    name: &'static str,
    root: PathBuf,
    args: Vec<String>,
    dir: PathBuf,
    next: Vec<String>,
    volatile: &'static [(&'static str, bool)],
}

impl Case {
    /// `args` on the run directory `root/R`, `next` after each kill, every file compared whole.
    fn new(name: &'static str, root: &Path, args: Vec<String>, next: Vec<String>) -> Case {
        Case {
            name,
            root: root.to_path_buf(),
            args,
            dir: root.join("R"),
            next,
            volatile: &[],
        }
    }

    fn command(&self, args: &[String]) -> Command {
        let mut c = bbv();
        guest_env(&mut c)
            .env("TMPDIR", self.root.join("tmp"))
            .current_dir(&self.root)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        c
    }

    fn run(&self, args: &[String]) -> (std::process::Output, Duration) {
        let start = Instant::now();
        let o = self.command(args).output().unwrap();
        (o, start.elapsed())
    }

    /// The folder as `snapshot` holds it (a copy: the command may replace every file).
    fn restore(&self, snapshot: &Path) {
        let _ = std::fs::remove_dir_all(&self.dir);
        let ok = Command::new("cp")
            .arg("-a")
            .arg(snapshot)
            .arg(&self.dir)
            .status()
            .unwrap();
        assert!(ok.success());
    }
}

fn ok(o: &std::process::Output, what: &str) {
    assert!(
        o.status.success(),
        "{what}: {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Names under `dir` that only a writer at work has: stages, temporaries, partial files.
fn leftovers(dir: &Path) -> Vec<String> {
    fn walk(dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.contains(".bbv-") || name.ends_with(".partial") || name.starts_with(".raw.") {
                out.push(p.display().to_string());
            }
            if e.file_type().is_ok_and(|t| t.is_dir()) {
                walk(&p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, &mut out);
    out
}

/// Kills `case`'s command `kills` times; returns (kills by SIGTERM, by SIGKILL, states found
/// old, found new).
fn crash(case: &Case, kills: usize, seed: u64) -> [usize; 4] {
    let snapshots = case.root.join("snapshots");
    std::fs::create_dir_all(&snapshots).unwrap();
    std::fs::create_dir_all(case.root.join("tmp")).unwrap();
    let old_snap = snapshots.join(case.name);
    let _ = std::fs::remove_dir_all(&old_snap);
    let ok_cp = Command::new("cp")
        .arg("-a")
        .arg(&case.dir)
        .arg(&old_snap)
        .status()
        .unwrap();
    assert!(ok_cp.success());
    let old = state(&case.dir, case.volatile);
    // The new state, and how long the command takes left alone.
    let (o, took) = case.run(&case.args);
    ok(&o, case.name);
    let new = state(&case.dir, case.volatile);
    assert!(old != new, "{}: the command changes nothing", case.name);
    case.restore(&old_snap);
    let (o, _) = case.run(&case.args);
    ok(&o, case.name);
    let again = state(&case.dir, case.volatile);
    assert!(
        again == new,
        "{}: two runs of the command differ in {:?}",
        case.name,
        differing(&again, &new)
    );
    let tag = case.root.display().to_string();
    let parent = case.dir.parent().unwrap();
    let siblings: Vec<String> = crate::common::files_in(parent);
    let mut rng = Seeded(seed);
    let mut tally = [0; 4];
    for i in 0..kills {
        case.restore(&old_snap);
        // Over the whole life and a little past it (a command that ends first must have
        // left the new state).
        let at = took.mul_f64(1.1 * (i as f64 + rng.unit()) / kills as f64);
        let sig = if rng.next() & 1 == 0 {
            libc::SIGTERM
        } else {
            libc::SIGKILL
        };
        let mut child = case.command(&case.args).spawn().unwrap();
        std::thread::sleep(at);
        // SAFETY: signals our own child, not yet reaped.
        unsafe { libc::kill(child.id() as i32, sig) };
        let until = Instant::now() + Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            assert!(Instant::now() < until, "{}: bbv did not end", case.name);
            std::thread::sleep(Duration::from_millis(10));
        }
        let out = child.wait_with_output().unwrap();
        let what = format!(
            "{} killed by {} at {:.3} s of {:.3} s ({:?}): {}",
            case.name,
            if sig == libc::SIGTERM {
                "SIGTERM"
            } else {
                "SIGKILL"
            },
            at.as_secs_f64(),
            took.as_secs_f64(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        let now = state(&case.dir, case.volatile);
        let is_old = now == old;
        assert!(
            is_old || now == new,
            "{what}: the folder is neither its old state (differs in {:?}) nor the new one (differs in {:?})",
            differing(&now, &old),
            differing(&now, &new)
        );
        // Handled (a SIGTERM before bbv set up its handling ends it at once, as it does
        // any process: nothing was written yet), bbv says what the folder holds.
        if sig == libc::SIGTERM && out.status.code() == Some(128 + libc::SIGTERM) {
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(err.contains("bbv: stopped by SIGTERM"), "{what}");
        }
        // QEMU and ChampSim die with bbv (PR_SET_PDEATHSIG), within moments.
        let until = Instant::now() + Duration::from_secs(10);
        while !processes_with(&tag).is_empty() {
            assert!(
                Instant::now() < until,
                "{what}: left running: {:?}",
                processes_with(&tag)
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let (o, _) = case.run(&case.next);
        ok(&o, &format!("{what}; then {:?}", case.next));
        assert_eq!(leftovers(&case.dir), Vec::<String>::new(), "{what}");
        assert_eq!(crate::common::files_in(parent), siblings, "{what}");
        tally[usize::from(sig == libc::SIGKILL)] += 1;
        tally[if is_old { 2 } else { 3 }] += 1;
    }
    // Left alone once more, the command ends as it does from the old state, and the
    // temporaries of every killed one are gone.
    case.restore(&old_snap);
    let (o, _) = case.run(&case.args);
    ok(&o, case.name);
    let last = state(&case.dir, case.volatile);
    assert!(last == new, "{}: {:?}", case.name, differing(&last, &new));
    assert_eq!(
        crate::common::files_in(&case.root.join("tmp")),
        Vec::<String>::new()
    );
    eprintln!(
        "crash {}: {kills} kills ({} SIGTERM, {} SIGKILL) over {:.2} s: {} old, {} new",
        case.name,
        tally[0],
        tally[1],
        took.as_secs_f64(),
        tally[2],
        tally[3]
    );
    tally
}

fn kills() -> usize {
    std::env::var("BBV_CRASH_KILLS")
        .ok()
        .and_then(|k| k.parse().ok())
        .unwrap_or(40)
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// A gzip of a text file profiled into `root/R` with `opts` (small intervals: every command
/// on it takes seconds); returns the guest's command line.
fn profiled(root: &Path, opts: &[&str]) -> Vec<String> {
    let input = root.join("input.txt");
    text_input(&input, 400_000);
    let guest = strings(&["/bin/gzip", "-6", "-c", &input.display().to_string()]);
    let case = Case::new("profile", root, Vec::new(), Vec::new());
    std::fs::create_dir_all(root.join("tmp")).unwrap();
    let mut head = vec!["run", "-o", "R"];
    head.extend(opts);
    ok(&case.run(&with_guest(&head, &guest)).0, "bbv run");
    guest
}

fn with_guest(head: &[&str], guest: &[String]) -> Vec<String> {
    let mut v = strings(head);
    v.push("--".into());
    v.extend(guest.iter().cloned());
    v
}

const RUN_OPTS: &[&str] = &["--interval", "300000", "--warmup", "300000", "--max-k", "4"];

#[test]
fn a_killed_run_leaves_the_old_run_or_the_new() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let guest = profiled(root, RUN_OPTS);
    let case = Case::new(
        "run",
        root,
        // Another interval, so that the new run differs from the old in every file.
        with_guest(
            &[
                "run",
                "-o",
                "R",
                "--interval",
                "400000",
                "--max-k",
                "4",
                "--validate",
            ],
            &guest,
        ),
        strings(&["regions", "R"]),
    );
    crash(&case, kills(), 0x5eed_0001);
}

#[test]
fn killed_regions_leave_the_old_regions_or_the_new() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    profiled(root, RUN_OPTS);
    let case = Case::new(
        "regions",
        root,
        strings(&["regions", "R", "--warmup", "600000"]),
        strings(&["report", "R"]),
    );
    crash(&case, kills(), 0x5eed_0002);
}

#[test]
fn a_killed_trace_or_simulation_leaves_the_old_state_or_the_new() {
    let bin = champsim_bin();
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let mut opts = RUN_OPTS.to_vec();
    opts.push("--validate");
    let guest = profiled(root, &opts);
    let trace = Case::new(
        "trace",
        root,
        with_guest(&["trace", "R", "--tail", "2000", "--short-warmups"], &guest),
        strings(&["report", "R"]),
    );
    crash(&trace, kills(), 0x5eed_0003);
    let champsim = bin.join("champsim").display().to_string();
    let simulate = Case {
        // The simulations' wall and CPU seconds.
        volatile: &[
            ("simulation.json", true),
            ("report.html", true),
            ("champsim.log", false),
        ],
        ..Case::new(
            "simulate",
            root,
            strings(&["simulate", "R", "--champsim", &champsim, "--jobs", "2"]),
            strings(&["report", "R"]),
        )
    };
    crash(&simulate, kills(), 0x5eed_0004);
}

#[test]
fn a_killed_checkpoint_leaves_the_old_state_or_the_new() {
    let q10 = crate::qemu10_cli::qemu10()
        .join("qemu-x86_64")
        .display()
        .to_string();
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    let mut opts = vec!["--qemu", &q10];
    opts.extend(RUN_OPTS);
    let guest = profiled(root, &opts);
    let case = Case {
        // Host addresses: where QEMU and the guest's stack were mapped.
        volatile: &[
            ("checkpoints.json", false),
            ("blocks.tsv", false),
            (".elf", false),
        ],
        ..Case::new(
            "checkpoint",
            root,
            with_guest(&["checkpoint", "--qemu", &q10, "R"], &guest),
            strings(&["report", "R"]),
        )
    };
    crash(&case, kills(), 0x5eed_0005);
}

/// A folder being written is refused to a second writer at once, naming the first; the first,
/// stopped by SIGTERM, says the folder kept its previous state, which it did.
#[test]
fn a_second_writer_is_refused_and_the_first_stopped_keeps_the_old_state() {
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    profiled(root, RUN_OPTS);
    let case = Case::new("lock", root, Vec::new(), Vec::new());
    let old = state(&case.dir, &[]);
    // A guest that runs until it is stopped.
    let looping = strings(&["run", "-o", "R", "--", "sh", "-c", "while :; do :; done"]);
    let first = case.command(&looping).spawn().unwrap();
    let until = Instant::now() + Duration::from_secs(60);
    while !processes_with(&root.display().to_string())
        .iter()
        .any(|p| p.contains("qemu-"))
    {
        assert!(Instant::now() < until, "the guest never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    for second in [
        strings(&["regions", "R"]),
        strings(&["report", "R"]),
        with_guest(&["run", "-o", "R"], &strings(&["true"])),
    ] {
        let (o, _) = case.run(&second);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{second:?}: {err}");
        assert!(
            err.contains(&format!("R: in use by process {} (", first.id()))
                && err.contains("bbv run"),
            "{second:?}: {err}"
        );
    }
    // SAFETY: signals our own child.
    unsafe { libc::kill(first.id() as i32, libc::SIGTERM) };
    let out = first.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bbv: stopped by SIGTERM: R is unchanged (its previous state is kept)"),
        "{err}"
    );
    assert!(state(&case.dir, &[]) == old);
    let staged_beside = || {
        crate::common::files_in(root)
            .iter()
            .filter(|n| n.contains(".bbv-"))
            .count()
    };
    assert_eq!(staged_beside(), 0);
    // Written from inside (a shell in it): the folder stays the one the shell is in.
    use std::os::unix::fs::MetadataExt;
    let ino = std::fs::metadata(&case.dir).unwrap().ino();
    let o = bbv()
        .current_dir(&case.dir)
        .args(["regions", "."])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(std::fs::metadata(&case.dir).unwrap().ino(), ino);
    assert!(case.dir.join("summary.json").is_file());
    assert_eq!(staged_beside(), 0);
}
