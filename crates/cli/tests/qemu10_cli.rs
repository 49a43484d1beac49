//! Today's QEMU: the plugin for API v3 on a real QEMU 10.0 built with plugins
//! (`scripts/build-qemu`, started here when missing), against Debian's 7.2 with the v1 plugin;
//! `--cpu`; and the QEMUs bbv cannot use (a static build), refused before the guest runs.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

use crate::common::{assert_status, bbv, files_in, gzip_job, json, text_input};

/// QEMU 10.0's bin folder, built once per machine by the repository's script.
pub(crate) fn qemu10() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/build-qemu");
        let out = Command::new(&script)
            .output()
            .expect("scripts/build-qemu runs");
        assert!(
            out.status.success(),
            "scripts/build-qemu failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

/// `bbv collect --tail --qemu QEMU --cpu CPU` of `argv` in `dir` (with `blocks.tsv`): the
/// vector files' total.
fn collect(dir: &Path, qemu: &Path, cpu: &str, argv: &[&str]) -> (Output, u64) {
    std::fs::create_dir_all(dir).unwrap();
    let out = bbv()
        .current_dir(dir)
        .args([
            "collect",
            "--tail",
            "--cpu",
            cpu,
            "--interval-size",
            "10000000",
        ])
        .args(["--blocks-out-file", "blocks.tsv", "--qemu"])
        .arg(qemu)
        .args(["--bb-out-file", "bb.out", "--pc-out-file", "pc.out", "--"])
        .args(argv)
        .output()
        .unwrap();
    assert_status(&out, 0);
    let mut total = 0;
    for f in files_in(dir).iter().filter(|f| f.starts_with("bb.out")) {
        let text = std::fs::read_to_string(dir.join(f)).unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("#   Total instructions:"))
            .expect("a closing comment");
        total += line.rsplit(' ').next().unwrap().parse::<u64>().unwrap();
    }
    (out, total)
}

/// Instructions per (image, link-time offset) of a `--tail --blocks-out-file` collection.
fn per_block(dir: &Path) -> HashMap<(String, String), u64> {
    let table = std::fs::read_to_string(dir.join("blocks.tsv")).unwrap();
    let key: HashMap<u32, (String, String)> = table
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            (f[0].parse().unwrap(), (f[1].to_string(), f[2].to_string()))
        })
        .collect();
    let mut out = HashMap::new();
    for v in crate::collect_cli::vectors(&dir.join("bb.out")) {
        for (id, n) in v {
            *out.entry(key[&id].clone()).or_insert(0) += n;
        }
    }
    out
}

#[test]
fn qemu_10_counts_as_qemu_7_2_does() {
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("input.txt");
    text_input(&input, 500_000);
    let input = input.to_str().unwrap();
    let q10 = qemu10().join("qemu-x86_64");
    let v = Command::new(&q10).arg("-version").output().unwrap();
    assert!(String::from_utf8_lossy(&v.stdout).contains("version 10.0"));
    let gzip = ["gzip", "-6", "-c", input];
    let (d10, d72) = (work.path().join("q10"), work.path().join("q72"));
    let (o10, t10) = collect(&d10, &q10, "qemu64", &gzip);
    let (o72, t72) = collect(&d72, Path::new("/usr/bin/qemu-x86_64"), "qemu64", &gzip);
    // The guest's own output is untouched on both.
    let native = Command::new("gzip")
        .args(["-6", "-c", input])
        .output()
        .unwrap();
    assert_eq!(o10.stdout, native.stdout);
    assert_eq!(o72.stdout, native.stdout);
    // Every block of the program and the C library runs as often on both. QEMU 10 gives the
    // guest a vDSO, which 7.2 does not: the dynamic loader links one more object, a few
    // thousand instructions (3,876 for gzip), all in ld.so.
    let (b10, b72) = (per_block(&d10), per_block(&d72));
    let mut loader_extra = 0i64;
    let keys: std::collections::HashSet<_> = b10.keys().chain(b72.keys()).collect();
    for key in keys {
        let (x, y) = (
            b10.get(key).copied().unwrap_or(0),
            b72.get(key).copied().unwrap_or(0),
        );
        if key.0.starts_with("ld-linux") {
            loader_extra += x as i64 - y as i64;
        } else {
            assert_eq!(x, y, "{key:?}: QEMU 10 {x}, QEMU 7.2 {y}");
        }
    }
    assert_eq!(
        t10 as i64 - t72 as i64,
        loader_extra,
        "the whole difference is the loader's"
    );
    assert!((0..10_000).contains(&(loader_extra)), "{loader_extra}");
    eprintln!(
        "gzip -6: QEMU 10.0 {t10}, QEMU 7.2 {t72}: ld.so {:+}",
        loader_extra
    );
}

#[test]
fn metrics_are_the_same_on_every_run_despite_qemu_10s_address_randomization() {
    // QEMU 10 loads the guest's libraries at other addresses on every run (7.2 at fixed ones):
    // the metrics' predictor works on file offsets, so every column repeats.
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("input.txt");
    text_input(&input, 500_000);
    let q10 = qemu10().join("qemu-x86_64");
    let maps = |_: u32| {
        let out = Command::new(&q10)
            .args(["/bin/cat", "/proc/self/maps"])
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert_ne!(
        maps(1),
        maps(2),
        "QEMU 10 no longer randomizes: this test tests nothing"
    );
    let run = |name: &str| {
        let out = bbv()
            .current_dir(work.path())
            .args(["collect", "--tail", "--interval-size", "2000000", "--qemu"])
            .arg(&q10)
            .args([
                "--bb-out-file",
                &format!("{name}.bb"),
                "--pc-out-file",
                "pc",
            ])
            .args(["--metrics-out-file", &format!("{name}.csv"), "--"])
            .args(["gzip", "-6", "-c", input.to_str().unwrap()])
            .output()
            .unwrap();
        assert_status(&out, 0);
        std::fs::read(work.path().join(format!("{name}.csv"))).unwrap()
    };
    let first = run("a");
    assert!(first.split(|&b| b == b'\n').count() > 3);
    assert_eq!(first, run("b"), "metrics differ between two runs");
}

#[test]
fn qemu_10_counts_every_thread() {
    let work = tempfile::tempdir().unwrap();
    let input = work.path().join("input.txt");
    text_input(&input, 2_000_000);
    let xz = [
        "xz",
        "-T2",
        "--block-size=500KiB",
        "-6",
        "-c",
        input.to_str().unwrap(),
    ];
    let dir = work.path().join("q10");
    let (_, t10) = collect(&dir, &qemu10().join("qemu-x86_64"), "qemu64", &xz);
    let (_, t72) = collect(
        &work.path().join("q72"),
        Path::new("/usr/bin/qemu-x86_64"),
        "qemu64",
        &xz,
    );
    assert!(
        files_in(&dir)
            .iter()
            .filter(|f| f.starts_with("bb.out"))
            .count()
            >= 3,
        "main thread and two workers: {:?}",
        files_in(&dir)
    );
    let rel = (t10 as f64 - t72 as f64).abs() / t72 as f64;
    assert!(rel < 1e-4, "QEMU 10: {t10}, QEMU 7.2: {t72}");
}

#[test]
fn threads_in_waves_count_alike_on_qemu_10_and_7_2() {
    // Six waves of three threads, each joined before the next starts: QEMU reuses the vCPU
    // indexes. On QEMU 10 every thread counts inline in its own vCPU's scoreboard entries; on
    // 7.2 every block calls the plugin. Each worker's total is the same on both (thread 1's
    // differs by the loader's vDSO work, see above).
    let work = tempfile::tempdir().unwrap();
    let exe =
        crate::collect_cli::build(work.path(), "gcc", "waves.c", "waves", &["-O1", "-pthread"]);
    let exe = exe.to_str().unwrap();
    let per_thread = |dir: &Path, qemu: &Path| -> Vec<u64> {
        let (out, _) = collect(dir, qemu, "qemu64", &[exe]);
        assert_eq!(String::from_utf8_lossy(&out.stdout), "61199735\n");
        let mut files: Vec<String> = files_in(dir)
            .into_iter()
            .filter(|f| f.starts_with("bb.out"))
            .collect();
        files.sort_by_key(|f| {
            f.rsplit('.')
                .next()
                .and_then(|n| n.parse::<u32>().ok())
                .unwrap_or(1)
        });
        files
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(dir.join(f)).unwrap();
                let line = text
                    .lines()
                    .find(|l| l.starts_with("#   Total instructions:"))
                    .expect("a closing comment");
                line.rsplit(' ').next().unwrap().parse().unwrap()
            })
            .collect()
    };
    let t10 = per_thread(&work.path().join("q10"), &qemu10().join("qemu-x86_64"));
    let t72 = per_thread(&work.path().join("q72"), Path::new("/usr/bin/qemu-x86_64"));
    assert_eq!(t10.len(), 19, "the main thread and 18 workers: {t10:?}");
    // QEMU 10 numbers a wave's threads as they first run, which need not be the order they
    // were created in (7.2 numbers them at creation): compare each wave's workers as a set.
    let waves = |t: &[u64]| -> Vec<Vec<u64>> {
        t[1..]
            .chunks(3)
            .map(|w| {
                let mut w = w.to_vec();
                w.sort_unstable();
                w
            })
            .collect()
    };
    assert_eq!(
        waves(&t10),
        waves(&t72),
        "workers: QEMU 10 {t10:?}, QEMU 7.2 {t72:?}"
    );
}

#[test]
fn cpu_model_is_used_recorded_and_checked() {
    let work = tempfile::tempdir().unwrap();
    let sql = [
        "sqlite3",
        ":memory:",
        "create table t(a); insert into t values(1),(2); select sum(a) from t;",
    ];
    let q72 = Path::new("/usr/bin/qemu-x86_64");
    let mut totals = Vec::new();
    for (i, cpu) in ["qemu64", "Haswell", "qemu64", "Haswell"]
        .iter()
        .enumerate()
    {
        totals.push(collect(&work.path().join(format!("c{i}")), q72, cpu, &sql).1);
    }
    // The C library picks other routines for another CPU; each model reproduces its count.
    assert_ne!(totals[0], totals[1]);
    assert_eq!(totals[0], totals[2]);
    assert_eq!(totals[1], totals[3]);
    // bbv run records it.
    let input = work.path().join("input.txt");
    text_input(&input, 300_000);
    let out = work.path().join("run");
    let r = gzip_job(
        &["run", "--cpu", "qemu64", "--interval", "1000000"],
        &out,
        &input,
    );
    assert_eq!(json(&out.join("summary.json"))["cpu"], "qemu64");
    assert!(String::from_utf8_lossy(&r.stderr).contains("(guest CPU qemu64)"));
    // An unknown model: one line, exit 2, the guest never runs.
    let marker = work.path().join("ran");
    let bad = bbv()
        .current_dir(work.path())
        .args(["collect", "--cpu", "Pentium9000", "--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_status(&bad, 2);
    let err = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("knows no CPU model \"Pentium9000\""), "{err}");
    assert!(!marker.exists());
}

#[test]
fn a_qemu_without_plugin_support_is_refused_before_the_guest_runs() {
    let work = tempfile::tempdir().unwrap();
    let marker = work.path().join("ran");
    let out = bbv()
        .current_dir(work.path())
        .args([
            "collect",
            "--qemu",
            "/usr/bin/qemu-x86_64-static",
            "--",
            "touch",
        ])
        .arg(&marker)
        .output()
        .unwrap();
    assert_status(&out, 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("without TCG plugin support"), "{err}");
    assert!(err.contains("scripts/build-qemu"), "{err}");
    assert!(!marker.exists());
    assert!(
        files_in(work.path()).is_empty(),
        "{:?}",
        files_in(work.path())
    );
}
