//! `bbv checkpoint`: executable checkpoints of a real program's regions (a file and stdin read
//! in pieces, stdout, TLS, the heap, floating point, a signal handler), profiled and captured
//! under the QEMU 10 scripts/build-qemu builds, each run to its end natively and under both
//! QEMUs, checked by `--check` (whose figures the test recomputes, system calls compared call by call),
//! a region whose calls the checkpoint cannot honour (a pipe to another process), and the bad
//! inputs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use crate::common::{assert_status, bbv, guest_env, json};
use crate::qemu10_cli::qemu10;

/// The guest, its input file and its stdin lines, built in `dir`.
pub(crate) fn guest(dir: &Path) -> PathBuf {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/guests/ckpt.c");
    let exe = dir.join("ckpt");
    let out = Command::new("gcc")
        .args(["-O2", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lm")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Bytes that steer the guest's work (its allocation sizes follow them).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..120_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    std::fs::write(dir.join("input.bin"), bytes).unwrap();
    let lines: String = (0..3000)
        .map(|i| format!("line {i} {}\n", "x".repeat(i % 37)))
        .collect();
    std::fs::write(dir.join("lines.txt"), lines).unwrap();
    exe
}

/// bbv with `args` in `dir`, the guest's stdin `lines.txt`, in a fixed environment.
pub(crate) fn bbv_in(dir: &Path, args: &[&str]) -> Output {
    let mut c = bbv();
    guest_env(&mut c)
        .current_dir(dir)
        .args(args)
        .stdin(std::fs::File::open(dir.join("lines.txt")).unwrap())
        .output()
        .unwrap()
}

pub(crate) fn q10() -> String {
    qemu10().join("qemu-x86_64").display().to_string()
}

/// `bbv run` of the guest (reading `input`, `rounds` rounds) under QEMU 10 into `run`.
fn run_args<'a>(q: &'a str, input: &'a str, rounds: &'a str) -> [&'a str; 13] {
    [
        "run",
        "--qemu",
        q,
        "--interval",
        "2000000",
        "--warmup",
        "4000000",
        "-o",
        "run",
        "--",
        "./ckpt",
        input,
        rounds,
    ]
}

/// `bbv run` of the guest under QEMU 10 into `dir/run`.
pub(crate) fn profile(dir: &Path, rounds: &str) {
    let q = q10();
    assert_status(&bbv_in(dir, &run_args(&q, "input.bin", rounds)), 0);
}

/// `bbv checkpoint` of the run in `run` under `qemu`, the guest doing `rounds` rounds.
pub(crate) fn checkpointing<'a>(qemu: &'a str, rounds: &'a str) -> [&'a str; 8] {
    [
        "checkpoint",
        "--qemu",
        qemu,
        "run",
        "--",
        "./ckpt",
        "input.bin",
        rounds,
    ]
}

/// A checkpoint's run (`c`), stdin closed off, in `/`. An address it needs that this
/// process's own mappings took (exit 100, said so; they lie where the host's randomization
/// puts them) is run again, up to twice, as `--check` does and the message advises.
fn run_checkpoint(c: &mut Command) -> Output {
    let mut run = || c.stdin(Stdio::null()).current_dir("/").output().unwrap();
    let mut o = run();
    for _ in 0..2 {
        if o.status.code() != Some(100) {
            break;
        }
        o = run();
    }
    o
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn checkpoints_reach_their_ends_natively_and_under_qemu() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    guest(dir);
    profile(dir, "600");
    let q = q10();
    let out = bbv_in(dir, &checkpointing(&q, "600"));
    assert_status(&out, 0);
    let ck = dir.join("run/checkpoints");
    let index = json(&ck.join("checkpoints.json"));
    let regions = index["regions"].as_array().unwrap();
    let summary = json(&dir.join("run/summary.json"));
    assert_eq!(regions.len(), summary["points"].as_array().unwrap().len());
    for r in regions {
        let elf = ck.join(r["file"].as_str().unwrap());
        assert!(r["notes"].as_array().unwrap().is_empty(), "{r}");
        // Natively, stdin closed off: the checkpoint brings the bytes its region reads.
        for (how, mut c) in [
            ("natively", Command::new(&elf)),
            ("under QEMU 10", Command::new(qemu10().join("qemu-x86_64"))),
            ("under QEMU 7.2", Command::new("qemu-x86_64")),
        ] {
            if !how.starts_with("natively") {
                c.arg(&elf);
            }
            let o = run_checkpoint(&mut c);
            assert_eq!(
                o.status.code(),
                Some(0),
                "{} {how}: {}",
                elf.display(),
                stderr(&o)
            );
        }
    }
    // No --qemu: the check runs under the QEMU the run was profiled with (QEMU 10), not the
    // one on PATH (7.2, which cannot run checkpoints' plugin).
    let check = bbv_in(dir, &["checkpoint", "--check", "run/checkpoints"]);
    assert_status(&check, 0);
    // The checkpoints' own output goes to files beside the report, not into bbv's table.
    let table = String::from_utf8_lossy(&check.stdout);
    assert!(
        table.contains("every checkpoint reached its end"),
        "{table}"
    );
    assert!(
        !table.contains("round ") && !table.contains("caught"),
        "{table}"
    );
    let report = json(&ck.join("check.json"));
    let mut l1_sum = 0.0;
    let checked = report["regions"].as_array().unwrap();
    assert_eq!(checked.len(), regions.len());
    for c in checked {
        assert_eq!(c["reached_end"], true, "{c}");
        // Call by call as in the replay: reads of the file and of stdin, writes, brk.
        let calls = &c["syscalls"];
        assert!(calls["first_difference"].is_null(), "{c}");
        assert_eq!(calls["profile"], calls["checkpoint"], "{c}");
        let out = ck.join(format!("region-{}.check.out", c["id"]));
        assert!(out.is_file(), "{}", out.display());
        // The length's deviation from the files, not the tool's own figure.
        let id = c["id"].as_u64().unwrap();
        let r = regions
            .iter()
            .find(|r| r["id"].as_u64() == Some(id))
            .unwrap();
        let want =
            r["warmup_instructions"].as_u64().unwrap() + r["region_instructions"].as_u64().unwrap();
        assert_eq!(c["profile_length"].as_u64(), Some(want));
        let got = c["checkpoint_length"].as_u64().unwrap() as f64;
        let dev = 100.0 * (got - want as f64) / want as f64;
        assert!(
            dev.abs() < 0.01,
            "region {id}: {got} instructions for {want}"
        );
        l1_sum += c["bbv_l1"].as_f64().unwrap();
    }
    // Checkpointed again into the same folder: nothing of the earlier ones stays beside the new.
    std::fs::write(ck.join("region-99.elf"), b"another run's").unwrap();
    let again = bbv_in(dir, &checkpointing(&q, "600"));
    assert_status(&again, 0);
    assert!(!ck.join("region-99.elf").exists() && !ck.join("check.json").exists());
    assert!(
        l1_sum / (checked.len() as f64) < 0.05,
        "mean BBV L1 {}",
        l1_sum / checked.len() as f64
    );
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    guest(dir);
    profile(dir, "200");
    let q = q10();
    let ck = dir.join("run/checkpoints");
    let refused = |args: &[&str], code: i32, says: &str| {
        let o = bbv_in(dir, args);
        assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(says), "{args:?}: {}", stderr(&o));
        assert!(!ck.exists(), "{args:?} left {}", ck.display());
    };
    // Not a run directory; another program; another QEMU; a QEMU without registers.
    refused(
        &["checkpoint", "--qemu", &q, "lines.txt", "--", "./ckpt"],
        2,
        "`bbv run` output",
    );
    std::fs::copy("/bin/true", dir.join("other")).unwrap();
    refused(
        &["checkpoint", "--qemu", &q, "run", "--", "./other"],
        2,
        "build id",
    );
    refused(&checkpointing("/usr/bin/qemu-x86_64", "200"), 2, "9.1");
    // Profiled under another QEMU (as its summary says).
    let summary = dir.join("run/summary.json");
    let text = std::fs::read_to_string(&summary).unwrap();
    let other = text.replace(json(&summary)["qemu"].as_str().unwrap(), "7.2.22");
    std::fs::write(&summary, other).unwrap();
    refused(&checkpointing(&q, "200"), 2, "profiled under QEMU 7.2.22");
    std::fs::write(&summary, text).unwrap();
    // Markers not reached: the program stops early.
    refused(&checkpointing(&q, "3"), 1, "a marker was missed");
    let out = bbv_in(dir, &checkpointing(&q, "200"));
    assert_status(&out, 0);
    // A failed run into a folder of checkpoints leaves it as it was: none of the memory files
    // its plugin wrote there stays, nor their folder.
    let listing = || {
        let mut v: Vec<(String, u64)> = (std::fs::read_dir(&ck).unwrap())
            .map(|e| e.unwrap())
            .map(|e| {
                (
                    e.file_name().to_string_lossy().into_owned(),
                    e.metadata().unwrap().len(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let before = listing();
    let o = bbv_in(dir, &checkpointing(&q, "3"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert_eq!(listing(), before);
    // A checkpoint changed since, an index cut short: refused before anything runs.
    let index = json(&ck.join("checkpoints.json"));
    let elf = ck.join(index["regions"][0]["file"].as_str().unwrap());
    let mut bytes = std::fs::read(&elf).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&elf, &bytes).unwrap();
    let o = bbv_in(
        dir,
        &["checkpoint", "--qemu", &q, "--check", "run/checkpoints"],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("changed since"), "{}", stderr(&o));
    assert!(!ck.join("check.json").exists());
    let text = std::fs::read_to_string(ck.join("checkpoints.json")).unwrap();
    // An index listing no checkpoint, or one naming a file outside the folder.
    let mut none = index.clone();
    none["regions"] = serde_json::json!([]);
    let mut outside = index.clone();
    outside["regions"][0]["file"] = "../../../etc/passwd".into();
    for (doc, why) in [
        (none.to_string(), "lists no checkpoint"),
        (outside.to_string(), "is not a file of this folder"),
        (text[..text.len() / 2].to_string(), "checkpoints.json"),
    ] {
        std::fs::write(ck.join("checkpoints.json"), doc).unwrap();
        let o = bbv_in(
            dir,
            &["checkpoint", "--qemu", &q, "--check", "run/checkpoints"],
        );
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains(why), "{why}: {}", stderr(&o));
        assert!(!ck.join("check.json").exists());
    }
}

/// bbv with `args` in `dir` under bash, its descriptor 5 a pipe from another process (`cat`
/// of the guest's input file), the guest's stdin `lines.txt`.
fn bbv_piped(dir: &Path, args: &[&str]) -> Output {
    bbv_with_fd5(dir, "<(cat input.bin)", args)
}

/// bbv with `args` in `dir` under bash, its descriptor 5 opened on `from` (`5< FROM`).
fn bbv_with_fd5(dir: &Path, from: &str, args: &[&str]) -> Output {
    let mut c = Command::new("bash");
    guest_env(&mut c)
        .current_dir(dir)
        .arg("-c")
        .arg(format!(r#"exec "$0" "$@" 5< {from}"#))
        .arg(env!("CARGO_BIN_EXE_bbv"))
        .args(args)
        .stdin(std::fs::File::open(dir.join("lines.txt")).unwrap())
        .output()
        .unwrap()
}

#[test]
fn a_call_the_checkpoint_cannot_honour_is_reported() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    guest(dir);
    let q = q10();
    // The guest reads its input through a pipe to another process, which no checkpoint can
    // recreate: its reads fail there.
    assert_status(&bbv_piped(dir, &run_args(&q, "/dev/fd/5", "200")), 0);
    // At the regions' starts, after the guest opened its input (a warmup may start at its
    // entry, before it opens anything).
    let out = bbv_piped(
        dir,
        &[
            "checkpoint",
            "--qemu",
            &q,
            "--no-warmup",
            "run",
            "--",
            "./ckpt",
            "/dev/fd/5",
            "200",
        ],
    );
    assert_status(&out, 0);
    // Said by bbv checkpoint already, from the calls the region made in the replay.
    let index = json(&dir.join("run/checkpoints/checkpoints.json"));
    let mut said = 0;
    for r in index["regions"].as_array().unwrap() {
        let notes: Vec<&str> = (r["notes"].as_array().unwrap().iter())
            .map(|n| n.as_str().unwrap())
            .collect();
        if notes
            .iter()
            .any(|n| n.contains("(pipe pipe:[") && n.ends_with("(left closed)"))
        {
            assert!(
                notes.iter().any(
                    |n| n.contains("which the checkpoint leaves closed: that call fails there")
                ),
                "{r}"
            );
            said += 1;
        }
    }
    assert!(said > 0, "{index}");
    assert!(stderr(&out).contains("leaves closed"), "{}", stderr(&out));
    let check = bbv_in(
        dir,
        &["checkpoint", "--qemu", &q, "--check", "run/checkpoints"],
    );
    assert!(
        matches!(check.status.code(), Some(0 | 1)),
        "{}",
        stderr(&check)
    );
    let table = String::from_utf8_lossy(&check.stdout);
    assert!(table.contains("DIFFER"), "{table}");
    let report = json(&dir.join("run/checkpoints/check.json"));
    // Each region whose capture holds the pipe reads it: a call that succeeded in the
    // profile fails there, the first difference the check names.
    let closed: Vec<&serde_json::Value> = (report["regions"].as_array().unwrap().iter())
        .filter(|r| {
            (r["notes"].as_array().unwrap().iter())
                .any(|n| n.as_str().unwrap().ends_with("(left closed)"))
        })
        .collect();
    assert_eq!(closed.len(), said, "{report}");
    for r in closed {
        let said = r["syscalls"]["first_difference"].as_str().unwrap();
        assert!(
            said.contains("read(") && said.contains("(error) here"),
            "{r}"
        );
        let notes = r["notes"].as_array().unwrap();
        assert!(
            notes
                .iter()
                .any(|n| n.as_str().unwrap().starts_with("system calls differ")),
            "{r}"
        );
    }
}

#[test]
fn a_descriptor_passed_down_is_restored() {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    guest(dir);
    let q = q10();
    // The guest reads its input from descriptor 5, which the shell opened for it.
    let with_fd5 = |args: &[&str]| bbv_with_fd5(dir, "input.bin", args);
    assert_status(&with_fd5(&run_args(&q, "fd:5", "300")), 0);
    let out = with_fd5(&[
        "checkpoint",
        "--qemu",
        &q,
        "--no-warmup",
        "run",
        "--",
        "./ckpt",
        "fd:5",
        "300",
    ]);
    assert_status(&out, 0);
    let ck = dir.join("run/checkpoints");
    let index = json(&ck.join("checkpoints.json"));
    for r in index["regions"].as_array().unwrap() {
        assert!(r["notes"].as_array().unwrap().is_empty(), "{r}");
        // Run without any descriptor 5: the checkpoint brings the file's bytes.
        let elf = ck.join(r["file"].as_str().unwrap());
        let o = run_checkpoint(&mut Command::new(&elf));
        assert_eq!(
            o.status.code(),
            Some(0),
            "{}: {}",
            elf.display(),
            stderr(&o)
        );
    }
    let check = bbv_in(
        dir,
        &["checkpoint", "--qemu", &q, "--check", "run/checkpoints"],
    );
    assert_status(&check, 0);
    let report = json(&ck.join("check.json"));
    for c in report["regions"].as_array().unwrap() {
        assert_eq!(c["reached_end"], true, "{c}");
        assert!(c["syscalls"]["first_difference"].is_null(), "{c}");
    }
}
