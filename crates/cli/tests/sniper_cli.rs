//! `bbv simulate --simulator sniper` with the real Sniper (scripts/sniper): a gzip run's
//! regions streamed live from QEMU's replay into a Sniper each, `simulation.json` checked
//! against the run (every region simulated to its end, the estimate recomputed from the
//! regions' figures), the same cycles twice, and what bad input gets.

use std::ffi::OsStr;
use std::path::Path;

use crate::common::{bbv, built_by, gzip_bbv, gzip_job, json, text_input};

/// A profiled gzip run of a text of `bytes` (3 regions at most, half-million-instruction
/// intervals).
fn profiled(work: &Path, bytes: usize) -> (std::path::PathBuf, std::path::PathBuf) {
    let input = work.join("input.txt");
    text_input(&input, bytes);
    let run = work.join("run");
    gzip_job(
        &[
            "run",
            "--interval",
            "500000",
            "--warmup",
            "500000",
            "--max-k",
            "3",
        ],
        &run,
        &input,
    );
    (run, input)
}

/// `bbv simulate RUN --simulator sniper [EXTRA]`; simulation.json.
fn simulate(run: &Path, input: &Path, sniper: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec![
        OsStr::new("simulate"),
        run.as_os_str(),
        OsStr::new("--simulator"),
        OsStr::new("sniper"),
        OsStr::new("--sniper"),
        sniper.as_os_str(),
    ];
    args.extend(extra.iter().map(OsStr::new));
    gzip_bbv(&args, input);
    json(&run.join("simulation.json"))
}

#[test]
fn regions_are_simulated_live_and_the_estimate_recomputed() {
    let sniper = built_by("sniper");
    let work = tempfile::tempdir().unwrap();
    let (run, input) = profiled(work.path(), 300_000);
    let v = simulate(&run, &input, &sniper, &[]);
    assert_eq!(v["simulator"], "sniper");
    let points = json(&run.join("summary.json"))["points"]
        .as_array()
        .unwrap()
        .clone();
    assert!(points.len() >= 2, "{points:?}");
    // The region's instructions, less those still in the 128-entry reorder buffer at its end
    // marker (and QEMU's count of a rep instruction against Sniper's).
    recomputed(&v, &points, |n, length| {
        n as f64 >= 0.99 * length as f64 && n <= length + 1000
    });
    // Sniper is deterministic here: the same stream gives the same cycles.
    let again = simulate(&run, &input, &sniper, &[]);
    let cycles_of = |v: &serde_json::Value| -> Vec<u64> {
        (v["regions"].as_array().unwrap().iter())
            .map(|r| r["cycles"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(cycles_of(&again), cycles_of(&v));
    crate::readback::every_file_reads_back(&run);
    let page = std::fs::read_to_string(run.join("report.html")).unwrap();
    assert!(page.contains("Simulated with Sniper"), "{page}");
}

/// Checks `simulation.json`'s regions (`v`) against the run's `points` (each region's
/// instructions `n` against its profiled `length` by `fits`, its IPC, its multiplier) and
/// recomputes the estimate from them: Σ multiplier × cycles / Σ multiplier × instructions.
pub(crate) fn recomputed(
    v: &serde_json::Value,
    points: &[serde_json::Value],
    fits: impl Fn(u64, u64) -> bool,
) {
    let regions = v["regions"].as_array().unwrap();
    assert_eq!(regions.len(), points.len());
    let (mut cycles, mut insts) = (0.0, 0.0);
    for (r, p) in regions.iter().zip(points) {
        let n = r["instructions"].as_u64().unwrap();
        let c = r["cycles"].as_u64().unwrap();
        let length = p["length"].as_u64().unwrap();
        assert!(fits(n, length), "{n} of {length}: {r}");
        let ipc = r["ipc"].as_f64().unwrap();
        assert!((ipc - n as f64 / c as f64).abs() < 1e-9, "{r}");
        assert!(ipc > 0.05 && ipc < 8.0, "{r}");
        let m = r["multiplier"].as_f64().unwrap();
        assert_eq!(m, p["multiplier"].as_f64().unwrap());
        cycles += m * c as f64;
        insts += m * n as f64;
    }
    let estimate = v["estimate_cpi"].as_f64().unwrap();
    assert!((estimate - cycles / insts).abs() < 1e-9 * estimate, "{v}");
}

/// With --full the whole run goes through a Sniper of its own in the same replay: its CPI
/// and the estimate's error are written (a small run: Sniper simulates some 200 thousand
/// instructions a second here).
#[test]
fn the_whole_run_gives_the_estimate_its_error() {
    let sniper = built_by("sniper");
    let work = tempfile::tempdir().unwrap();
    let (run, input) = profiled(work.path(), 30_000);
    let v = simulate(&run, &input, &sniper, &["--full"]);
    let (estimate, full) = (
        v["estimate_cpi"].as_f64().unwrap(),
        v["full_cpi"].as_f64().unwrap(),
    );
    let error = v["error_pct"].as_f64().unwrap();
    assert!(
        (error - 100.0 * (estimate - full) / full).abs() < 1e-9,
        "{v}"
    );
    // A sanity bound, not a target: three regions of half a million instructions each.
    assert!(error.abs() < 15.0, "{v}");
    assert!(v["speedup_instructions"].as_f64().unwrap() > 1.0, "{v}");
    // What each Sniper cost in CPU time (they run side by side in one replay).
    let cpu: f64 = (v["regions"].as_array().unwrap().iter())
        .map(|r| r["cpu_seconds"].as_f64().unwrap())
        .sum();
    assert!(cpu > 0.0, "{v}");
    assert!(v["speedup_cpu"].as_f64().unwrap() > 0.0, "{v}");
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let work = tempfile::tempdir().unwrap();
    let (run, input) = profiled(work.path(), 300_000);
    let sniper = built_by("sniper");
    let r = run.to_str().unwrap();
    let s = sniper.to_str().unwrap();
    let cases: [(&[&str], &str); 4] = [
        (
            &["--simulator", "sniper", "--sniper", "/nonexistent/sniper"],
            "scripts/sniper",
        ),
        (
            &["--simulator", "sniper", "--sniper", s, "--max-band", "5"],
            "--simulator sniper takes no --max-band",
        ),
        (&["--simulator", "gem5"], "invalid value 'gem5'"),
        (
            &[
                "--simulator",
                "sniper",
                "--sniper",
                s,
                "--champsim",
                "/bin/true",
            ],
            "which --simulator sniper does not run",
        ),
    ];
    for (extra, says) in cases {
        let o = bbv()
            .args(["simulate", r])
            .args(extra)
            .arg("--")
            .args(["gzip", "-6", "-c"])
            .arg(&input)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(says), "{extra:?}: {err}");
        assert!(!run.join("simulation.json").exists(), "{extra:?}");
    }
}

/// `bbv simulate RUN --simulator sniper --sniper SNIPER -- gzip -6 -c INPUT`.
fn simulate_gzip(run: &Path, sniper: &Path, input: &Path) -> std::process::Output {
    bbv()
        .arg("simulate")
        .arg(run)
        .args(["--simulator", "sniper", "--sniper"])
        .arg(sniper)
        .args(["--", "gzip", "-6", "-c"])
        .arg(input)
        .output()
        .unwrap()
}

/// No process (QEMU, Sniper, bbv) names `run` any more.
fn no_process_left(run: &Path) {
    let stray = std::process::Command::new("pgrep")
        .args(["-f", &run.display().to_string()])
        .output()
        .unwrap();
    assert!(
        stray.stdout.is_empty(),
        "{}",
        String::from_utf8_lossy(&stray.stdout)
    );
}

/// A replay that misses the run's markers (another input) simulates nothing: exit 1 with the
/// replay's table, nothing written, no Sniper left.
#[test]
fn a_missed_marker_exits_1_and_writes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let (run, _) = profiled(work.path(), 300_000);
    let sniper = built_by("sniper");
    let other = work.path().join("other.txt");
    std::fs::write(&other, "a short other text\n".repeat(50)).unwrap();
    let o = simulate_gzip(&run, &sniper, &other);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("a marker was missed"), "{err}");
    assert!(!run.join("simulation.json").exists());
    no_process_left(&run);
}

/// A Sniper that dies (a stand-in build whose launcher fails at once, or one that stops
/// reading mid-region) is named with its log, exit 2, nothing written, no process left, and
/// the replay does not wait for it.
#[test]
fn a_sniper_that_dies_is_named_and_nothing_is_left() {
    use std::os::unix::fs::PermissionsExt;
    let work = tempfile::tempdir().unwrap();
    let (run, input) = profiled(work.path(), 300_000);
    for (name, script) in [
        ("dies", "#!/bin/sh\necho 'stand-in Sniper: cannot start' >&2\nexit 3\n"),
        // Reads a little of its stream, then exits.
        (
            "stops",
            "#!/bin/sh\nfor a; do case $a in traceinput/trace_prefix=*) p=${a#*=};; esac; done\nhead -c 100000 \"$p.app0.th0.sift\" > /dev/null\nexit 4\n",
        ),
    ] {
        let fake = work.path().join(name);
        std::fs::create_dir_all(fake.join("lib")).unwrap();
        std::fs::write(fake.join("lib/sniper"), "").unwrap();
        let launcher = fake.join("run-sniper");
        std::fs::write(&launcher, script).unwrap();
        std::fs::set_permissions(&launcher, std::fs::Permissions::from_mode(0o755)).unwrap();
        let started = std::time::Instant::now();
        let o = simulate_gzip(&run, &fake, &input);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{name}: {err}");
        assert!(
            err.contains("Sniper failed") && err.contains("sniper.log"),
            "{name}: {err}"
        );
        assert!(started.elapsed().as_secs() < 120, "{name}: waited");
        assert!(!run.join("simulation.json").exists(), "{name}");
        no_process_left(&run);
    }
}

/// An AArch64 program (sort_libc.c on a tenth of its array, Debian's cross compiler) on
/// Sniper's Cortex-A72 model, the stream's instruction set said by a SIFT record: profiled and
/// replayed under QEMU's Cortex-A72 (ARMv8.0, as Sniper's decoder), every region simulated to
/// its end and the whole run for the error; under QEMU's default CPU glibc picks ARMv8.1
/// atomics, which Sniper's decoder does not know: the failure says what to do.
#[test]
fn an_aarch64_program_is_simulated_on_sniper_s_arm_core() {
    let sniper = built_by("sniper");
    let work = tempfile::tempdir().unwrap();
    // About 8 million instructions: Sniper simulates the whole run in some 40 seconds.
    let src = std::fs::read_to_string(crate::collect_cli::guests().join("sort_libc.c")).unwrap();
    let small = work.path().join("sort_small.c");
    std::fs::write(&small, src.replace("n = 200000", "n = 20000")).unwrap();
    let prog = work.path().join("sort");
    let st = std::process::Command::new("aarch64-linux-gnu-gcc")
        .args(["-O2", "-o"])
        .arg(&prog)
        .arg(&small)
        .status()
        .unwrap();
    assert!(st.success());
    let run = work.path().join("run");
    let job = |cpu: Option<&str>, args: &[&OsStr]| {
        let mut c = bbv();
        c.env_remove("QEMU_LD_PREFIX").env_remove("QEMU_CPU");
        if let Some(cpu) = cpu {
            c.env("QEMU_CPU", cpu);
        }
        c.args(args).arg("--").arg(&prog).output().unwrap()
    };
    let profile = |cpu: Option<&str>, run: &Path| {
        let args = ["--interval", "300000", "--warmup", "300000", "--max-k", "3"];
        let mut v = vec![OsStr::new("run"), OsStr::new("-o"), run.as_os_str()];
        v.extend(args.map(OsStr::new));
        job(cpu, &v)
    };
    let o = profile(Some("cortex-a72"), &run);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let simulate: Vec<&OsStr> = vec![
        OsStr::new("simulate"),
        run.as_os_str(),
        OsStr::new("--simulator"),
        OsStr::new("sniper"),
        OsStr::new("--sniper"),
        sniper.as_os_str(),
        OsStr::new("--full"),
    ];
    let o = job(Some("cortex-a72"), &simulate);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v = json(&run.join("simulation.json"));
    let points = json(&run.join("summary.json"))["points"]
        .as_array()
        .unwrap()
        .clone();
    for (r, p) in v["regions"].as_array().unwrap().iter().zip(&points) {
        let n = r["instructions"].as_u64().unwrap();
        let length = p["length"].as_u64().unwrap();
        assert!(
            n as f64 >= 0.99 * length as f64 && n <= length + 1000,
            "{r}"
        );
    }
    let (estimate, full) = (
        v["estimate_cpi"].as_f64().unwrap(),
        v["full_cpi"].as_f64().unwrap(),
    );
    assert!(
        estimate > 0.2 && estimate < 5.0 && full > 0.2 && full < 5.0,
        "{v}"
    );
    // QEMU's default CPU: the same program's start-up takes ARMv8.1 atomics.
    let run2 = work.path().join("run-max");
    let o = profile(None, &run2);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut simulate = simulate;
    simulate[1] = run2.as_os_str();
    let o = job(None, &simulate);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("QEMU_CPU=cortex-a72"), "{err}");
    assert!(!run2.join("simulation.json").exists());
}
