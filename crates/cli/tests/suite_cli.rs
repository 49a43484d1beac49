//! `bbv suite`: manifests, the local executor, resume, failures, kills.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{assert_status, bbv, json};

/// A shell loop of `n` rounds (about 11,000 instructions a round under dash).
fn looping(n: u32) -> String {
    format!(
        "[\"sh\", \"-c\", \"i=0; while [ $i -lt {n} ]; do i=$((i+1)); done; echo $HOME $LANG\"]"
    )
}

/// A job compressing `input` (written into `dir` with `bytes` of text): gzip's instruction
/// stream, unlike a shell's, does not depend on the digits of its pids (dash formats its
/// parent's pid into PPID at start-up: 99,999 and 100,000 differ by an instruction), so two
/// runs of it can be compared byte for byte.
fn gzip_command(dir: &Path, input: &str, bytes: usize) -> String {
    crate::common::text_input(&dir.join(input), bytes);
    format!("[\"gzip\", \"-6\", \"-c\", \"{input}\"]")
}

fn csv_statuses(out: &Path) -> Vec<(String, String)> {
    std::fs::read_to_string(out.join("summary.csv"))
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| {
            let f: Vec<&str> = l.split(',').collect();
            (f[0].to_string(), f[1].to_string())
        })
        .collect()
}

/// `bbv suite run MANIFEST -o OUT EXTRA...`, finished.
fn suite_run(manifest: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    bbv()
        .args(["suite", "run"])
        .arg(manifest)
        .arg("-o")
        .arg(out)
        .args(extra)
        .output()
        .unwrap()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn a_suite_runs_isolates_failures_and_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("suite.toml");
    std::fs::write(
        &manifest,
        format!(
            "[defaults]\ninterval = 1000000\nmax-k = 4\n\n\
             [[job]]\nname = \"loop-a\"\ncommand = {}\n\n\
             [[job]]\nname = \"crash\"\ncommand = [\"sh\", \"-c\", \"echo about-to-crash; kill -SEGV $$\"]\n\n\
             [[job]]\nname = \"forever\"\ncommand = [\"sh\", \"-c\", \"while :; do :; done\"]\ntimeout = 2\n\n\
             [[job]]\nname = \"loop-b\"\ncommand = {}\nenv = {{ LANG = \"en_US.UTF-8\" }}\n\n\
             [[job]]\nname = \"env-c\"\ncommand = {}\n",
            gzip_command(tmp.path(), "a.txt", 400_000),
            looping(25_000),
            looping(5_000)
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = suite_run(&manifest, &out, &["--jobs", "2"]);
    assert_status(&o, 1);
    let want = pairs(&[
        ("loop-a", "done"),
        ("crash", "failed"),
        ("forever", "failed"),
        ("loop-b", "done"),
        ("env-c", "done"),
    ]);
    assert_eq!(csv_statuses(&out), want);
    // The crash keeps its output and status; the timeout says so.
    let log = std::fs::read_to_string(out.join("crash/log")).unwrap();
    assert!(log.contains("about-to-crash"), "{log}");
    assert_eq!(json(&out.join("crash/job.json"))["exit"], 128 + 11);
    let forever = json(&out.join("forever/job.json"));
    assert_eq!(forever["exit"], 128 + libc::SIGTERM);
    assert!(forever["reason"].as_str().unwrap().contains("timed out"));
    // The fixed environment: HOME and LANG=C, overridden by the job's env.
    let log_a = std::fs::read_to_string(out.join("env-c/log")).unwrap();
    let home = std::env::var("HOME").unwrap();
    assert!(log_a.starts_with(&format!("{home} C\n")), "{log_a}");
    let log_b = std::fs::read_to_string(out.join("loop-b/log")).unwrap();
    assert!(
        log_b.starts_with(&format!("{home} en_US.UTF-8\n")),
        "{log_b}"
    );
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(index.contains("loop-a/report.html"), "{index}");

    // The job's files are those of `bbv run -o` in the same environment.
    let direct = tmp.path().join("direct");
    let o = bbv()
        .current_dir(tmp.path())
        .env_clear()
        .env("PATH", bbv_suite::manifest::FIXED_PATH)
        .env("HOME", &home)
        .env("LANG", "C")
        .args(["run", "--interval", "1000000", "--max-k", "4", "-o"])
        .arg(&direct)
        .args(["--", "gzip", "-6", "-c", "a.txt"])
        .output()
        .unwrap();
    assert_status(&o, 0);
    for f in [
        "bb.out",
        "simpoint.simpoints",
        "simpoint.weights",
        "regions.csv",
    ] {
        let a = std::fs::read(out.join("loop-a").join(f)).unwrap();
        let b = std::fs::read(direct.join(f)).unwrap();
        assert!(
            a == b,
            "{f} differs between the suite and bbv run:\n{}\n{}",
            std::fs::read_to_string(out.join("loop-a/log")).unwrap_or_default(),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    // Again: the finished jobs are skipped, the failed ones run again.
    let before = std::fs::read(out.join("loop-a/job.json")).unwrap();
    let o = suite_run(&manifest, &out, &[]);
    assert_status(&o, 1);
    assert_eq!(
        csv_statuses(&out),
        pairs(&[
            ("loop-a", "skipped"),
            ("crash", "failed"),
            ("forever", "failed"),
            ("loop-b", "skipped"),
            ("env-c", "skipped"),
        ])
    );
    assert_eq!(std::fs::read(out.join("loop-a/job.json")).unwrap(), before);
    assert_eq!(json(&out.join("crash/job.json"))["attempt"], 2);
    // A changed setting runs the job again.
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("max-k = 4", "max-k = 3")).unwrap();
    let o = suite_run(&manifest, &out, &[]);
    assert_status(&o, 1);
    assert_eq!(csv_statuses(&out)[0], ("loop-a".into(), "done".into()));
    assert_eq!(json(&out.join("loop-a/job.json"))["attempt"], 2);
    let status = bbv().args(["suite", "status"]).arg(&out).output().unwrap();
    assert_status(&status, 0);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("crash") && text.contains("failed"), "{text}");
}

#[test]
fn bad_manifests_stop_before_anything_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let cases = [
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nintervall = 5\n", "suite.toml:4: unknown key \"intervall\""),
        ("[[job]]\nname = \"a/b\"\ncommand = [\"true\"]\n", "suite.toml:2: job name \"a/b\""),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\n\n[[job]]\nname = \"a\"\ncommand = [\"true\"]\n", "suite.toml:6: job name \"a\" is used twice"),
        ("[[job]]\nname = \"a\"\ncommand = [\"./not-here\"]\n", "suite.toml:3: program \"./not-here\" not found"),
        // Values are checked by bbv run's own parser.
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nregions = \"sometimes\"\n", "suite.toml:1: job \"a\": invalid value 'sometimes'"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\ninterval = 0\n", "suite.toml:1: job \"a\": invalid value '0'"),
        // And by bbv run's rules of which options go together (RunOptions::check).
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nregions = \"looppoint\"\nthreads = \"all\"\n", "suite.toml:1: job \"a\": --regions looppoint already covers every thread"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nmax-k = 0\n", "suite.toml:1: job \"a\": --max-k must be at least 1"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nl1d = \"16K,4,64\"\n", "suite.toml:1: job \"a\": --l1d, --l2, --model-thread and --metrics-calls-only shape the metrics' cache model: they need --validate"),
        // Values in range, [defaults] included, and GPU jobs too.
        ("[defaults]\nmax-k = 0\n\n[[job]]\nname = \"a\"\ncommand = [\"true\"]\n", "suite.toml:4: job \"a\": --max-k must be at least 1"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nmax-k = 4294967296\n", "suite.toml:1: job \"a\": --max-k 4294967296: at most 1048576"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\ninterval = 4611686018427387905\n", "suite.toml:1: job \"a\": --interval 4611686018427387905: at most 4611686018427387904 (2^62)"),
        ("[[job]]\nname = \"a\"\ncommand = [\"true\"]\nwarmup = 9000000000000000000\n", "suite.toml:1: job \"a\": --warmup 9000000000000000000: at most"),
        ("[[job]]\nname = \"g\"\nkind = \"gpu\"\ntraces = \"list\"\nmax-k = 0\n", "suite.toml:1: job \"g\": --max-k must be at least 1"),
    ];
    std::fs::write(tmp.path().join("list"), "kernel-1.traceg\n").unwrap();
    for (text, want) in cases {
        let manifest = tmp.path().join("suite.toml");
        std::fs::write(&manifest, text).unwrap();
        let out = tmp.path().join("out");
        let o = suite_run(&manifest, &out, &[]);
        assert_status(&o, 2);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains(want), "{text:?}: {err}");
        assert!(!out.exists(), "{text:?} created the output folder");
    }
}

#[test]
fn a_suite_killed_half_way_reruns_only_what_did_not_finish() {
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("suite.toml");
    let mut text = String::from("[defaults]\ninterval = 1000000\nmax-k = 3\n");
    // Two short jobs first, then long ones the kill interrupts or never starts.
    for (i, n) in [5_000, 5_000, 400_000, 400_000, 400_000, 400_000]
        .iter()
        .enumerate()
    {
        text.push_str(&format!(
            "\n[[job]]\nname = \"job{i}\"\ncommand = {}\n",
            looping(*n)
        ));
    }
    std::fs::write(&manifest, text).unwrap();
    let out = tmp.path().join("out");
    let child = bbv()
        .args(["suite", "run"])
        .arg(&manifest)
        .arg("-o")
        .arg(&out)
        .args(["--jobs", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    // Wait until the first two are done and the next ones run.
    while !(out.join("job0/summary.json").exists()
        && out.join("job1/summary.json").exists()
        && out.join("job2/log").exists())
    {
        assert!(Instant::now() < until, "the suite did not get going");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let o = child.wait_with_output().unwrap();
    assert_status(&o, 128 + libc::SIGTERM);
    let statuses = csv_statuses(&out);
    assert_eq!(
        &statuses[..2],
        &pairs(&[("job0", "done"), ("job1", "done")])[..]
    );
    assert!(
        statuses[2..].iter().all(|(_, s)| s != "done"),
        "{statuses:?}"
    );
    assert_eq!(json(&out.join("job2/job.json"))["status"], "failed");
    assert!(!out.join("job2/summary.json").exists());
    let left: Vec<String> = std::fs::read_dir(out.join("job2"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert_eq!(left, Vec::<String>::new());
    // The re-run skips the finished jobs. (Shortened: the long jobs' work is not the point.)
    let text = std::fs::read_to_string(&manifest).unwrap();
    std::fs::write(&manifest, text.replace("400000", "6000")).unwrap();
    let o = suite_run(&manifest, &out, &[]);
    assert_status(&o, 0);
    assert_eq!(
        csv_statuses(&out),
        pairs(&[
            ("job0", "skipped"),
            ("job1", "skipped"),
            ("job2", "done"),
            ("job3", "done"),
            ("job4", "done"),
            ("job5", "done"),
        ])
    );
}

#[test]
fn a_gpu_job_samples_launches() {
    let tmp = tempfile::tempdir().unwrap();
    let traces =
        crate::common::data_dir().join("accelsim/matrixmul-32-32-trace-aba4ea32/kernelslist.g");
    let manifest = tmp.path().join("suite.toml");
    std::fs::write(
        &manifest,
        format!("[defaults]\ninterval = 1000\n\n[[job]]\nname = \"mm\"\nkind = \"gpu\"\ntraces = {:?}\nmax-k = 3\n", traces.display().to_string()),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = suite_run(&manifest, &out, &[]);
    assert_status(&o, 0);
    assert_eq!(csv_statuses(&out), pairs(&[("mm", "done")]));
    for f in [
        "kernelslist.g",
        "weights.csv",
        "report.html",
        "summary.json",
    ] {
        assert!(out.join("mm").join(f).is_file(), "{f}");
    }
    // The summary's columns come from the job's summary.json, which agrees with weights.csv.
    let csv = std::fs::read_to_string(out.join("summary.csv")).unwrap();
    let row: Vec<&str> = csv.lines().nth(1).unwrap().split(',').collect();
    let weights = std::fs::read_to_string(out.join("mm/weights.csv")).unwrap();
    let picks = weights.lines().count() - 1;
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("mm/summary.json")).unwrap())
            .unwrap();
    assert!(s["instructions"].as_u64().unwrap() > 0, "{s}");
    assert_eq!(row[2], s["instructions"].to_string(), "{csv}");
    assert_eq!(row[3], s["intervals"].to_string(), "{csv}");
    assert!(s["intervals"].as_u64().unwrap() >= picks as u64, "{s}");
    assert_eq!(row[4], picks.to_string(), "{csv}");
    assert_eq!(row[5], picks.to_string(), "{csv}");
    assert!(std::fs::read_to_string(out.join("index.html"))
        .unwrap()
        .contains("mm/report.html"));
}

/// Starts the single-node Slurm of `scripts/local-slurm` (installing it if need be); its
/// configuration file.
fn local_slurm() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/local-slurm");
    let o = std::process::Command::new(script)
        .arg("up")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_status(&o, 0);
    let text = String::from_utf8_lossy(&o.stdout);
    text.trim()
        .strip_prefix("export SLURM_CONF=")
        .unwrap_or_else(|| panic!("scripts/local-slurm up printed {text:?}"))
        .to_string()
}

/// `bbv suite run MANIFEST -o OUT --slurm` against the local Slurm of `conf`.
fn slurm_run(conf: &str, manifest: &Path, out: &Path) -> std::process::Command {
    let mut c = bbv();
    c.env("SLURM_CONF", conf)
        .args(["suite", "run"])
        .arg(manifest)
        .arg("-o")
        .arg(out)
        .arg("--slurm");
    c
}

#[test]
fn slurm_and_the_local_executor_give_the_same_files() {
    let conf = local_slurm();
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("suite.toml");
    std::fs::write(
        &manifest,
        format!(
            "[defaults]\ninterval = 1000000\nmax-k = 4\n\n\
             [[job]]\nname = \"short\"\ncommand = {}\n\n\
             [[job]]\nname = \"crash\"\ncommand = [\"sh\", \"-c\", \"kill -SEGV $$\"]\n\n\
             [[job]]\nname = \"long\"\ncommand = {}\nwarmup = 500000\n\n\
             [[job]]\nname = \"middle\"\ncommand = {}\n",
            gzip_command(tmp.path(), "short.txt", 200_000),
            gzip_command(tmp.path(), "long.txt", 600_000),
            gzip_command(tmp.path(), "middle.txt", 400_000)
        ),
    )
    .unwrap();
    let (local, slurm) = (tmp.path().join("local"), tmp.path().join("slurm"));
    assert_status(&suite_run(&manifest, &local, &["--jobs", "2"]), 1);
    let on_slurm = |extra: &[&str]| {
        slurm_run(&conf, &manifest, &slurm)
            .args(["--max-parallel", "2"])
            .args(extra)
            .output()
            .unwrap()
    };
    let o = on_slurm(&[]);
    assert_status(&o, 1);
    let want = pairs(&[
        ("short", "done"),
        ("crash", "failed"),
        ("long", "done"),
        ("middle", "done"),
    ]);
    assert_eq!(csv_statuses(&local), want);
    assert_eq!(csv_statuses(&slurm), want);
    for job in ["short", "long", "middle"] {
        for f in [
            "bb.out",
            "simpoint.simpoints",
            "simpoint.weights",
            "simpoint.labels",
            "regions.csv",
            "regions.json",
            "regions.sniper.txt",
        ] {
            let a = std::fs::read(local.join(job).join(f)).unwrap();
            let b = std::fs::read(slurm.join(job).join(f)).unwrap();
            assert!(
                a == b,
                "{job}/{f} differs between the local executor and Slurm"
            );
        }
    }
    // The task's record is the local one's (same settings hash).
    assert_eq!(
        json(&local.join("long/job.json"))["hash"],
        json(&slurm.join("long/job.json"))["hash"]
    );
    // Again without waiting: only the failed job is submitted; status shows it.
    let o = on_slurm(&["--no-wait"]);
    assert_status(&o, 0);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("submitted 1 of 4 jobs"), "{err}");
    // suite.json is `bbv suite run`'s: the task leaves it alone (it used to rewrite it in
    // place while `status` below read it, which then read an empty file).
    let inode = || {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(slurm.join("suite.json")).unwrap();
        (m.ino(), m.mtime(), m.mtime_nsec())
    };
    let recorded = inode();
    let until = Instant::now() + Duration::from_secs(120);
    loop {
        let st = bbv()
            .env("SLURM_CONF", &conf)
            .args(["suite", "status"])
            .arg(&slurm)
            .output()
            .unwrap();
        assert_status(&st, 0);
        let text = String::from_utf8_lossy(&st.stdout).into_owned();
        let crash = text
            .lines()
            .find(|l| l.starts_with("crash"))
            .unwrap()
            .to_string();
        if crash.contains("failed") && json(&slurm.join("crash/job.json"))["attempt"] == 2 {
            assert_eq!(inode(), recorded, "a task rewrote suite.json");
            assert!(
                text.lines()
                    .any(|l| l.starts_with("short") && l.contains("done")),
                "{text}"
            );
            break;
        }
        assert!(
            Instant::now() < until,
            "the resubmitted task did not finish: {text}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A manifest in `dir` of one job, "forever", whose guest loops until killed and whose command
/// line holds a tag of its own (which [`qemu_with`] finds); the manifest and the tag.
fn forever(dir: &Path, what: &str) -> (std::path::PathBuf, String) {
    let manifest = dir.join("suite.toml");
    let tag = format!("bbv-{what}-{}", std::process::id());
    std::fs::write(
        &manifest,
        format!("[[job]]\nname = \"forever\"\ncommand = [\"sh\", \"-c\", \"while :; do :; done; echo {tag}\"]\n"),
    )
    .unwrap();
    (manifest, tag)
}

#[test]
fn scancel_reaches_the_guest_and_leaves_nothing_behind() {
    let conf = local_slurm();
    let tmp = tempfile::tempdir().unwrap();
    let (manifest, tag) = forever(tmp.path(), "scancel");
    let out = tmp.path().join("out");
    let o = slurm_run(&conf, &manifest, &out)
        .args(["--no-wait"])
        .output()
        .unwrap();
    assert_status(&o, 0);
    let id = std::fs::read_to_string(out.join("slurm/job-id")).unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while !qemu_with(&tag) {
        assert!(Instant::now() < until, "the task's guest never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let st = std::process::Command::new("scancel")
        .env("SLURM_CONF", &conf)
        .arg(id.trim())
        .status()
        .unwrap();
    assert!(st.success());
    // The task records the job failed once its guest has ended.
    while json(&out.join("forever/job.json"))["status"] == "running" {
        assert!(Instant::now() < until, "the job never ended");
        std::thread::sleep(Duration::from_millis(100));
    }
    let record = json(&out.join("forever/job.json"));
    assert_eq!(record["status"], "failed");
    assert_eq!(record["exit"], 128 + libc::SIGTERM);
    assert!(!qemu_with(&tag), "QEMU outlived the cancelled task");
    let left: Vec<String> = std::fs::read_dir(out.join("forever"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert_eq!(left, Vec::<String>::new());
}

/// Whether a QEMU whose command line holds `tag` is running.
fn qemu_with(tag: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|e| {
        std::fs::read(e.path().join("cmdline")).is_ok_and(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("qemu-") && c.contains(tag)
        })
    })
}

/// `squeue`'s lines for the job (none once it has left the queue).
fn in_queue(conf: &str, id: &str) -> usize {
    let o = std::process::Command::new("squeue")
        .env("SLURM_CONF", conf)
        .args(["-h", "-r", "-j", id])
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).lines().count()
}

#[test]
fn a_second_run_waits_for_the_array_still_queued() {
    let conf = local_slurm();
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("suite.toml");
    std::fs::write(
        &manifest,
        format!(
            "[[job]]\nname = \"one\"\ncommand = {}\n\n[[job]]\nname = \"two\"\ncommand = {}\n",
            looping(20000),
            looping(20000)
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let run = |extra: &[&str]| {
        slurm_run(&conf, &manifest, &out)
            .args(["--max-parallel", "1"])
            .args(extra)
            .output()
            .unwrap()
    };
    let first = run(&["--no-wait"]);
    assert_status(&first, 0);
    let id = std::fs::read_to_string(out.join("slurm/job-id")).unwrap();
    // The second run finds the array queued (one task at a time): it waits for it, submits
    // nothing, and merges.
    let second = run(&[]);
    assert_status(&second, 0);
    let err = String::from_utf8_lossy(&second.stderr);
    assert!(
        err.contains(&format!("Slurm job {} of an earlier run", id.trim()))
            && !err.contains("submitted"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(out.join("slurm/job-id")).unwrap(),
        id
    );
    assert_eq!(
        csv_statuses(&out),
        pairs(&[("one", "done"), ("two", "done")])
    );
    for job in ["one", "two"] {
        assert_eq!(json(&out.join(job).join("job.json"))["attempt"], 1, "{job}");
    }
}

#[test]
fn stopping_a_waiting_suite_cancels_its_array() {
    let conf = local_slurm();
    let tmp = tempfile::tempdir().unwrap();
    let (manifest, tag) = forever(tmp.path(), "stop");
    let out = tmp.path().join("out");
    let child = slurm_run(&conf, &manifest, &out)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(120);
    while !qemu_with(&tag) {
        assert!(Instant::now() < until, "the task's guest never ran");
        std::thread::sleep(Duration::from_millis(100));
    }
    let id = std::fs::read_to_string(out.join("slurm/job-id")).unwrap();
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGINT) };
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(128 + libc::SIGINT));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cancelling Slurm job"), "{err}");
    // Gone from the queue, its guest ended, its job recorded failed and merged as such.
    assert_eq!(in_queue(&conf, id.trim()), 0);
    assert!(!qemu_with(&tag), "QEMU outlived the cancelled array");
    assert_eq!(json(&out.join("forever/job.json"))["status"], "failed");
    assert_eq!(csv_statuses(&out), pairs(&[("forever", "failed")]));
}

/// `simulate = true`: the job runs bbv run (with --validate), bbv trace and bbv simulate into
/// its folder (the report showing ChampSim's figures and the band); a step that fails (here ChampSim is not where the job's
/// environment says) fails the job with its status, the earlier steps' files kept.
#[test]
fn a_job_traces_and_simulates_its_regions() {
    let cache = crate::common::champsim_bin()
        .parent()
        .unwrap()
        .to_path_buf();
    let tmp = tempfile::tempdir().unwrap();
    let manifest = tmp.path().join("suite.toml");
    let gzip = gzip_command(tmp.path(), "input.txt", 60_000);
    std::fs::write(
        &manifest,
        format!(
            "[defaults]\ninterval = 300000\nwarmup = 300000\nmax-k = 3\nsimulate = true\n\n\
             [[job]]\nname = \"sim\"\ncommand = {gzip}\nenv = {{ BBV_CHAMPSIM_CACHE = \"{}\" }}\n\n\
             [[job]]\nname = \"nosim\"\ncommand = {gzip}\nenv = {{ BBV_CHAMPSIM_CACHE = \"{}\" }}\n",
            cache.display(),
            tmp.path().join("nowhere").display()
        ),
    )
    .unwrap();
    let out = tmp.path().join("out");
    let o = suite_run(&manifest, &out, &["--jobs", "1"]);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(
        csv_statuses(&out),
        pairs(&[("sim", "done"), ("nosim", "failed")])
    );
    let sim = json(&out.join("sim/simulation.json"));
    let regions = json(&out.join("sim/trace.json"));
    assert_eq!(
        sim["regions"].as_array().unwrap().len(),
        regions["regions"].as_array().unwrap().len()
    );
    // A simulated job is profiled with its per-interval metrics: its estimate has a band.
    assert!(sim["band_pct"].as_f64().is_some_and(|b| b > 0.0), "{sim}");
    let page = std::fs::read_to_string(out.join("sim/report.html")).unwrap();
    let cpi = format!("{:.4}", sim["estimate_cpi"].as_f64().unwrap());
    assert!(page.contains(&cpi), "{cpi} not in the report");
    let failed = json(&out.join("nosim/job.json"));
    assert_eq!(failed["exit"], 2);
    // The log holds gzip's output too.
    let log = String::from_utf8_lossy(&std::fs::read(out.join("nosim/log")).unwrap()).into_owned();
    assert!(log.contains("scripts/champsim"), "{log}");
    assert!(out.join("nosim/trace.json").exists() && !out.join("nosim/simulation.json").exists());
}
