//! A seeded mutator over what users hand bbv: a run directory's files (`bbv regions`, `bbv
//! report`), `.bb` files and vector weights (`bbv simpoint`), Accel-Sim traces (`bbv gpu
//! count|bbv|sample`) and suite manifests (`bbv suite run`). Each case copies a good input,
//! breaks one file (truncated, bytes flipped, lines deleted, duplicated or swapped, numbers made
//! huge or negative, a megabyte-long line, replaced by a folder or a link to `/dev/zero`) and
//! runs the real command, which must exit 0, 1 or 2, never panic or die by a signal, stay under
//! 1 GiB and 30 s, keep its messages short, and on failure leave every output as it was.
//!
//! More groups, over other tools' outputs (a stand-in Accel-Sim's, nvdisasm's) and
//! `checkpoints.json`, are in fuzz_tools_cli.rs.
//!
//! `BBV_FUZZ_CASES=N` runs N cases per group instead of the default; `BBV_FUZZ_SEED=S`
//! another sequence (the default is fixed, so a failure reproduces).

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::{bbv, contents, copy_dir, data_dir, gzip_job, text_input};

/// The most memory one case may take (resident).
const MAX_RSS_KIB: i64 = 1 << 20;
/// The most time one case may take.
const MAX_SECONDS: u64 = 30;
/// The longest message on a failure: the cause and at most ~200 bytes quoted from the input.
const MAX_MESSAGE: usize = 2048;

/// SplitMix64: a tiny, fixed generator, so that a case number always means the same input.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

fn cases() -> usize {
    std::env::var("BBV_FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn seed() -> u64 {
    std::env::var("BBV_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(36)
}

/// Breaks `path` one way; returns what was done.
fn mutate(path: &Path, rng: &mut Rng, kind: usize) -> String {
    let bytes = std::fs::read(path).unwrap_or_default();
    let mut lines: Vec<Vec<u8>> = bytes.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    let join = |l: &[Vec<u8>]| l.join(&b'\n');
    let n = lines.len();
    let (what, out): (&str, Option<Vec<u8>>) = match kind % 12 {
        0 => {
            let at = rng.below(bytes.len());
            ("truncated", Some(bytes[..at].to_vec()))
        }
        1 => {
            let mut b = bytes.clone();
            for _ in 0..1 + rng.below(4) {
                if !b.is_empty() {
                    let i = rng.below(b.len());
                    b[i] ^= 1 << rng.below(8);
                }
            }
            ("bytes flipped", Some(b))
        }
        2 => {
            lines.remove(rng.below(n));
            ("a line deleted", Some(join(&lines)))
        }
        3 => {
            let i = rng.below(n);
            let l = lines[i].clone();
            lines.insert(i, l);
            ("a line duplicated", Some(join(&lines)))
        }
        4 => {
            let (i, j) = (rng.below(n), rng.below(n));
            lines.swap(i, j);
            ("two lines swapped", Some(join(&lines)))
        }
        5 | 6 => {
            let huge = [
                "18446744073709551616",
                "-1",
                "4294967296",
                "1e308",
                "nan",
                "-0.5",
                "99999999999999999999999",
                "0",
            ];
            let word = huge[rng.below(huge.len())].as_bytes();
            let digits: Vec<usize> = (0..bytes.len())
                .filter(|&i| {
                    bytes[i].is_ascii_digit() && (i == 0 || !bytes[i - 1].is_ascii_digit())
                })
                .collect();
            let mut b = bytes.clone();
            if !digits.is_empty() {
                let s = digits[rng.below(digits.len())];
                let e = (s..b.len())
                    .find(|&i| !b[i].is_ascii_digit())
                    .unwrap_or(b.len());
                b.splice(s..e, word.iter().copied());
            }
            ("a number replaced", Some(b))
        }
        7 => ("emptied", Some(Vec::new())),
        8 => {
            let i = rng.below(n);
            let mut l = lines[i].clone();
            l.extend(std::iter::repeat_n(b"7 x:"[rng.below(4)], 1 << 20));
            lines[i] = l;
            ("a line made a megabyte long", Some(join(&lines)))
        }
        9 => {
            let mut b = bytes.clone();
            let at = rng.below(b.len() + 1);
            let junk: Vec<u8> = (0..64).map(|_| rng.next() as u8).collect();
            b.splice(at..at, junk);
            ("binary junk inserted", Some(b))
        }
        10 => {
            std::fs::remove_file(path).unwrap();
            std::fs::create_dir(path).unwrap();
            ("replaced by a folder", None)
        }
        _ => {
            std::fs::remove_file(path).unwrap();
            std::os::unix::fs::symlink("/dev/zero", path).unwrap();
            ("replaced by a link to /dev/zero", None)
        }
    };
    if let Some(out) = out {
        std::fs::write(path, out).unwrap();
    }
    what.to_string()
}

/// How a case ended.
pub(crate) struct Ended {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) rss_kib: i64,
    pub(crate) seconds: f64,
    pub(crate) timed_out: bool,
    pub(crate) stderr: String,
}

/// The start of a long message, for an assertion's text.
fn short(s: &str) -> &str {
    &s[..s.floor_char_boundary(1000)]
}

/// Runs `bbv ARGS`, measuring its peak memory, ending it after [`MAX_SECONDS`].
fn run(args: &[OsString], cwd: &Path, limit_memory: bool) -> Ended {
    let err_path = cwd.join(".stderr");
    let err = std::fs::File::create(&err_path).unwrap();
    let mut cmd = bbv();
    cmd.args(args)
        .current_dir(cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(err);
    if limit_memory {
        // A safety net in case a reader does run away: address space, well above the bar.
        // SAFETY: setrlimit is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let lim = libc::rlimit {
                    rlim_cur: 8 << 30,
                    rlim_max: 8 << 30,
                };
                libc::setrlimit(libc::RLIMIT_AS, &lim);
                Ok(())
            });
        }
    }
    let start = Instant::now();
    // Reaped below by wait4, which also gives the child's peak memory.
    #[allow(clippy::zombie_processes)]
    let child = cmd.spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let mut status = 0;
    // SAFETY: an all-zero rusage is a valid value for wait4 to fill.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let mut timed_out = false;
    loop {
        // SAFETY: pid is our child, status and usage are valid for writes.
        let r = unsafe { libc::wait4(pid, &mut status, libc::WNOHANG, &mut usage) };
        if r == pid {
            break;
        }
        assert!(r == 0, "wait4: {}", std::io::Error::last_os_error());
        if start.elapsed() > Duration::from_secs(MAX_SECONDS) && !timed_out {
            timed_out = true;
            // SAFETY: signalling our own child.
            unsafe { libc::kill(pid, libc::SIGKILL) };
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let stderr = String::from_utf8_lossy(&std::fs::read(&err_path).unwrap()).into_owned();
    let _ = std::fs::remove_file(&err_path);
    Ended {
        code: libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status)),
        signal: libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status)),
        rss_kib: usage.ru_maxrss,
        seconds: start.elapsed().as_secs_f64(),
        timed_out,
        stderr,
    }
}

/// A command over a folder of good inputs.
pub(crate) struct Target {
    pub(crate) name: &'static str,
    /// The good folder, copied for each case.
    pub(crate) pristine: PathBuf,
    /// The files a case may break (relative to the folder).
    pub(crate) inputs: Vec<&'static str>,
    /// The arguments, `{D}` standing for the case's folder.
    pub(crate) args: Vec<&'static str>,
    /// Outputs a run with exit 1 may change (`bbv suite run`: a job failed).
    pub(crate) one_is_not_failure: bool,
    pub(crate) limit_memory: bool,
    /// Cases break the good folder itself, which is put back after each, instead of a copy
    /// (checkpoints record where they lie: a copy is refused before its index is read).
    pub(crate) in_place: bool,
}

impl Target {
    /// A command whose failures are exit 2 (or 1), run under the memory safety net.
    pub(crate) fn new(
        name: &'static str,
        pristine: &Path,
        inputs: &[&'static str],
        args: &[&'static str],
    ) -> Self {
        Target {
            name,
            pristine: pristine.to_path_buf(),
            inputs: inputs.to_vec(),
            args: args.to_vec(),
            one_is_not_failure: false,
            limit_memory: true,
            in_place: false,
        }
    }
}

/// Counts by target and how the cases ended, for the figures.
#[derive(Default)]
struct Tally {
    by: BTreeMap<(String, String), usize>,
    max_rss_kib: i64,
    max_seconds: f64,
    named: usize,
    failed: usize,
}

impl Tally {
    fn print(&self, group: &str) {
        let total: usize = self.by.values().sum();
        eprintln!("fuzz {group}: {total} cases");
        for ((t, end), n) in &self.by {
            eprintln!("  {t:<16} {end:<8} {n}");
        }
        eprintln!(
            "  exit 2 messages naming the broken file: {} of {}; peak RSS {} KiB; slowest case {:.2} s",
            self.named, self.failed, self.max_rss_kib, self.max_seconds
        );
    }
}

fn one_case(t: &Target, case: usize, rng: &mut Rng, kind: usize, work: &Path, tally: &mut Tally) {
    let dir = match t.in_place {
        true => t.pristine.clone(),
        false => {
            let dir = work.join(format!("{}-{case}", t.name.replace(' ', "-")));
            copy_dir(&t.pristine, &dir);
            dir
        }
    };
    let input = t.inputs[rng.below(t.inputs.len())];
    let path = dir.join(input);
    let good = std::fs::read(&path).unwrap();
    let what = mutate(&path, rng, kind);
    let mut before = contents(&dir);
    before.remove(&path);
    let d = dir.to_str().unwrap();
    let args: Vec<OsString> = t.args.iter().map(|a| a.replace("{D}", d).into()).collect();
    let e = run(&args, &dir, t.limit_memory);
    let case_name = format!("{} case {case}: {input} {what}", t.name);
    assert!(
        !e.timed_out,
        "{case_name}: still running after {MAX_SECONDS} s"
    );
    assert!(
        e.signal.is_none() && matches!(e.code, Some(0..=2)),
        "{case_name}: exit {:?}, signal {:?}: {}",
        e.code,
        e.signal,
        short(&e.stderr)
    );
    assert!(
        !e.stderr.contains("panicked") && !e.stderr.contains("RUST_BACKTRACE"),
        "{case_name}: {}",
        short(&e.stderr)
    );
    assert!(
        e.rss_kib <= MAX_RSS_KIB,
        "{case_name}: {} KiB resident",
        e.rss_kib
    );
    let failed = e.code == Some(2) || (e.code == Some(1) && !t.one_is_not_failure);
    if failed {
        // Progress lines (`bbv simulate`'s, without a terminal) may come first.
        let at = match e.stderr.starts_with("bbv") {
            true => Some(0),
            false => e.stderr.find("\nbbv").map(|at| at + 1),
        };
        let message = at.map_or("", |at| &e.stderr[at..]);
        assert!(
            !message.is_empty() && message.len() <= MAX_MESSAGE,
            "{case_name}: a {}-byte message: {}",
            e.stderr.len(),
            short(&e.stderr)
        );
        let mut after = contents(&dir);
        after.remove(&path);
        let changed: Vec<_> = after
            .iter()
            .filter(|(p, c)| before.get(*p) != Some(*c))
            .map(|(p, _)| p.display().to_string())
            .chain(
                before
                    .keys()
                    .filter(|p| !after.contains_key(*p))
                    .map(|p| p.display().to_string()),
            )
            .collect();
        assert!(
            changed.is_empty(),
            "{case_name}: exit {:?} but outputs changed: {changed:?}\n{}",
            e.code,
            short(&e.stderr)
        );
        tally.failed += 1;
        if e.stderr.contains(input) {
            tally.named += 1;
        } else {
            eprintln!(
                "  {case_name}: the message names another file: {}",
                short(e.stderr.trim_end())
            );
        }
    }
    if e.code == Some(0) {
        numbers_are_numbers(&dir, &case_name);
    }
    let end = match e.code {
        Some(c) => format!("exit {c}"),
        None => "signal".into(),
    };
    *tally.by.entry((t.name.to_string(), end)).or_default() += 1;
    tally.max_rss_kib = tally.max_rss_kib.max(e.rss_kib);
    tally.max_seconds = tally.max_seconds.max(e.seconds);
    match t.in_place {
        true => {
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path).unwrap(),
                _ => std::fs::remove_file(&path).unwrap(),
            }
            std::fs::write(&path, good).unwrap();
        }
        false => std::fs::remove_dir_all(&dir).unwrap(),
    }
}

/// A `simulation.json` a command left (a CPU run's or a GPU sample's) holds numbers where
/// figures belong: never `null` (which is what a NaN or an infinity would be written as).
fn numbers_are_numbers(dir: &Path, case: &str) {
    for path in [
        dir.join("simulation.json"),
        dir.join("sample/simulation.json"),
    ] {
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|e| panic!("{case}: simulation.json does not parse: {e}"));
        let (total, items, keys) = match v.get("launches") {
            Some(_) => (
                "estimate_cycles",
                "launches",
                &["cycles", "instructions", "weight"][..],
            ),
            None => (
                "estimate_cpi",
                "regions",
                &["ipc", "cycles", "instructions", "multiplier", "weight"][..],
            ),
        };
        assert!(v[total].is_f64(), "{case}: {text}");
        for r in v[items].as_array().into_iter().flatten() {
            for k in keys {
                assert!(r[k].is_number(), "{case}: {items} {k}: {text}");
            }
        }
    }
}

/// Runs `per_target` cases on each target, round robin, and prints the tally.
pub(crate) fn fuzz(group: &str, targets: &[Target], per_target: usize, work: &Path) {
    let per_target = match cases() {
        0 => per_target,
        n => n,
    };
    let mut rng = Rng(seed() ^ group.len() as u64);
    let mut tally = Tally::default();
    for case in 0..per_target {
        for t in targets {
            // Every kind of damage comes round every 12 cases, the rest is random.
            let kind = if case < 12 { case } else { rng.below(12) };
            one_case(t, case, &mut rng, kind, work, &mut tally);
        }
    }
    tally.print(group);
}

/// A `bbv run --validate` directory of gzip (4-ish intervals of a small input).
fn run_dir(work: &Path) -> PathBuf {
    let input = work.join("input.txt");
    text_input(&input, 200_000);
    let out = work.join("run");
    gzip_job(&["run", "--validate", "--interval", "300000"], &out, &input);
    crate::readback::every_file_reads_back(&out);
    out
}

const RUN_FILES: [&str; 11] = [
    "summary.json",
    "simpoint.simpoints",
    "simpoint.weights",
    "simpoint.labels",
    "marks.out",
    "images.tsv",
    "blocks.tsv",
    "bic.csv",
    "bb.out",
    "metrics.csv",
    "validation.json",
];

#[test]
fn broken_run_directories_are_refused_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let run = run_dir(work.path());
    let targets = [
        Target::new("regions", &run, &RUN_FILES, &["regions", "{D}"]),
        Target::new("report", &run, &RUN_FILES, &["report", "{D}"]),
    ];
    fuzz("run directory", &targets, 100, work.path());
}

/// A `.bb` of the first 200 of SimPoint's gzip vectors, weights for them, and the outputs of a
/// good run in place.
fn simpoint_dir(work: &Path) -> PathBuf {
    let dir = work.join("sp");
    std::fs::create_dir(&dir).unwrap();
    let gz = std::fs::File::open(data_dir().join("simpoint-golden/gzip_9/gzip_9.bb.gz")).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(gz), &mut text).unwrap();
    let lines: Vec<&str> = text.lines().take(200).collect();
    std::fs::write(dir.join("in.bb"), lines.join("\n") + "\n").unwrap();
    let weights: Vec<String> = (0..200).map(|i| format!("{}", 1 + i % 7)).collect();
    std::fs::write(dir.join("w.txt"), weights.join("\n") + "\n").unwrap();
    let out = bbv()
        .current_dir(&dir)
        .args([
            "simpoint",
            "in.bb",
            "--max-k",
            "5",
            "--vector-weights",
            "w.txt",
            "-o",
            "out",
        ])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    crate::readback::every_file_reads_back(&dir);
    dir
}

/// A copy of an Accel-Sim trace with the outputs of good runs in place.
pub(crate) fn gpu_dir(work: &Path) -> PathBuf {
    let dir = work.join("gpu");
    copy_dir(
        &data_dir().join("accelsim/vectoradd-100-32-trace-12f5cb88"),
        &dir,
    );
    for args in [
        &["gpu", "bbv", "kernelslist.g", "-o", "app"][..],
        &[
            "gpu",
            "sample",
            "kernelslist.g",
            "-o",
            "sample",
            "--max-k",
            "2",
        ][..],
    ] {
        let out = bbv().current_dir(&dir).args(args).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    crate::readback::every_file_reads_back(&dir);
    dir
}

#[test]
fn broken_vectors_weights_and_traces_are_refused_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let sp = simpoint_dir(work.path());
    let gpu = gpu_dir(work.path());
    let targets = [
        Target::new(
            "simpoint",
            &sp,
            &["in.bb", "w.txt"],
            &[
                "simpoint",
                "{D}/in.bb",
                "--max-k",
                "5",
                "--vector-weights",
                "{D}/w.txt",
                "-o",
                "{D}/out",
            ],
        ),
        Target::new(
            "gpu count",
            &gpu,
            &["kernelslist.g", "kernel-1.traceg"],
            &["gpu", "count", "{D}/kernelslist.g"],
        ),
        Target::new(
            "gpu bbv",
            &gpu,
            &["kernelslist.g", "kernel-1.traceg"],
            &["gpu", "bbv", "{D}/kernelslist.g", "-o", "{D}/app"],
        ),
        Target::new(
            "gpu sample",
            &gpu,
            &["kernelslist.g", "kernel-1.traceg"],
            &[
                "gpu",
                "sample",
                "{D}/kernelslist.g",
                "-o",
                "{D}/sample",
                "--max-k",
                "2",
            ],
        ),
    ];
    fuzz("vectors and traces", &targets, 60, work.path());
}

/// A traced and simulated gzip run (small intervals) with a stand-in for ChampSim beside it
/// that prints what the real one printed for region 1 (`champsim.out`).
fn traced_dir(work: &Path) -> PathBuf {
    let input = work.join("input.txt");
    text_input(&input, 200_000);
    let out = work.join("traced");
    gzip_job(
        &[
            "run",
            "--validate",
            "--interval",
            "300000",
            "--warmup",
            "300000",
            "--max-k",
            "3",
        ],
        &out,
        &input,
    );
    // As gzip_job runs the guest (the same environment), with the run directory as DIR.
    let trace = ["trace", "--short-warmups", "--tail", "2000"].map(std::ffi::OsStr::new);
    crate::common::gzip_bbv(&[&trace[..], &[out.as_os_str()]].concat(), &input);
    let trace: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("trace.json")).unwrap()).unwrap();
    let r = &trace["regions"][0];
    let champsim = crate::common::champsim_bin().join("champsim");
    let o = std::process::Command::new(&champsim)
        .arg("--warmup-instructions")
        .arg(r["warmup_records"].to_string())
        .arg("--simulation-instructions")
        .arg(r["region_instructions"].to_string())
        .arg(out.join("traces").join(r["trace"].as_str().unwrap()))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    std::fs::write(out.join("champsim.out"), &o.stdout).unwrap();
    let fake = out.join("champsim");
    std::fs::write(
        &fake,
        "#!/bin/sh\nexec cat \"$(dirname \"$0\")/champsim.out\"\n",
    )
    .unwrap();
    let mut p = std::fs::metadata(&fake).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut p, 0o755);
    std::fs::set_permissions(&fake, p).unwrap();
    let e = run_once(
        &[
            "simulate",
            out.to_str().unwrap(),
            "--champsim",
            fake.to_str().unwrap(),
            "--no-band",
        ],
        work,
    );
    assert_eq!(e.code, Some(0), "{}", e.stderr);
    crate::readback::every_file_reads_back(&out);
    out
}

/// What bbv takes from other tools and from its own earlier steps: `trace.json` and a
/// simulator's output (`bbv simulate` with a ChampSim that prints zeros, huge numbers,
/// truncated text), and `simulation.json` (`bbv report`, `bbv regions`).
#[test]
fn broken_hand_offs_are_refused_and_change_nothing() {
    let work = tempfile::tempdir().unwrap();
    let traced = traced_dir(work.path());
    let simulate = [
        "simulate",
        "{D}",
        "--champsim",
        "{D}/champsim",
        "--no-band",
        "--jobs",
        "1",
    ];
    let targets = [
        Target::new(
            "simulate",
            &traced,
            &["trace.json", "champsim.out"],
            &simulate,
        ),
        Target::new("report", &traced, &["simulation.json"], &["report", "{D}"]),
        Target::new(
            "regions",
            &traced,
            &["simulation.json"],
            &["regions", "{D}"],
        ),
    ];
    fuzz("hand-offs", &targets, 100, work.path());
}

#[test]
fn broken_manifests_are_refused_before_anything_runs() {
    let work = tempfile::tempdir().unwrap();
    let gpu = gpu_dir(work.path());
    let dir = work.path().join("suite");
    copy_dir(&gpu, &dir.join("trace"));
    std::fs::write(
        dir.join("suite.toml"),
        "[defaults]\ninterval = 100000\nmax-k = 3\ntimeout = \"60s\"\n\n\
         [[job]]\nname = \"vectoradd\"\nkind = \"gpu\"\ntraces = \"trace/kernelslist.g\"\nmax-k = 2\n\n\
         [[job]]\nname = \"true\"\ncommand = [\"true\"]\nwarmup = 0\nenv = { A = \"1\" }\n",
    )
    .unwrap();
    let targets = [Target {
        name: "suite run",
        pristine: dir,
        inputs: vec!["suite.toml"],
        args: vec![
            "suite",
            "run",
            "{D}/suite.toml",
            "-o",
            "{D}/out",
            "--jobs",
            "1",
        ],
        one_is_not_failure: true,
        // QEMU reserves a large address space for its guest.
        limit_memory: false,
        in_place: false,
    }];
    fuzz("manifests", &targets, 60, work.path());
}

#[test]
fn links_to_dev_zero_are_refused_by_every_reader() {
    let work = tempfile::tempdir().unwrap();
    let run = run_dir(work.path());
    for (n, f) in RUN_FILES.iter().enumerate() {
        for cmd in ["regions", "report"] {
            let dir = work.path().join(format!("{cmd}-{n}"));
            copy_dir(&run, &dir);
            std::fs::remove_file(dir.join(f)).unwrap();
            std::os::unix::fs::symlink("/dev/zero", dir.join(f)).unwrap();
            let e = run_once(&[cmd, dir.to_str().unwrap()], &dir);
            // `bbv report` reads neither the markers' files nor the block table, and a validated
            // run's k comes from validation.json, not bic.csv.
            let read = *f != "bic.csv"
                && (cmd == "regions" || !["marks.out", "images.tsv", "blocks.tsv"].contains(f));
            if read {
                assert_eq!(e.code, Some(2), "{cmd} {f}: {}", e.stderr);
                assert!(
                    e.stderr
                        .contains(&format!("{f}: is a device, not a regular file")),
                    "{cmd} {f}: {}",
                    e.stderr
                );
            } else {
                assert_eq!(e.code, Some(0), "{cmd} {f}: {}", e.stderr);
            }
            assert!(e.rss_kib < MAX_RSS_KIB, "{cmd} {f}: {} KiB", e.rss_kib);
        }
    }
}

pub(crate) fn run_once(args: &[&str], cwd: &Path) -> Ended {
    let args: Vec<OsString> = args.iter().map(OsString::from).collect();
    let e = run(&args, cwd, true);
    assert!(!e.timed_out && e.signal.is_none(), "{args:?}: {}", e.stderr);
    e
}
