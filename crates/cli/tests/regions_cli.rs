//! `bbv run`'s markers and hand-off files, `bbv regions` and `bbv replay`, on real programs
//! under the real QEMU.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use crate::common::{assert_status, bbv, json, replay_report};

/// A compressible input of about 2.4 MB (phases: text runs, then counters).
fn input(dir: &Path) -> PathBuf {
    let p = dir.join("input");
    let mut s = String::new();
    for i in 0..150_000u32 {
        if i % 3000 < 1500 {
            s.push_str(&format!("line {} of the first kind\n", i % 97));
        } else {
            s.push_str(&format!(
                "{:08x} {:08x}\n",
                i.wrapping_mul(2_654_435_761),
                i
            ));
        }
    }
    std::fs::write(&p, s).unwrap();
    p
}

fn gzip_run(dir: &Path, extra: &[&str]) -> (Output, PathBuf) {
    let inp = input(dir);
    let out = bbv()
        .current_dir(dir)
        .args(["run", "--interval", "4000000", "--max-k", "6", "-o", "out"])
        .args(extra)
        .args(["--", "gzip", "-9", "-c"])
        .arg(&inp)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    (out, dir.join("out"))
}

fn replay(dir: &Path, run: &Path, args: &[&str], prog: &[&str]) -> Output {
    bbv()
        .current_dir(dir)
        .arg("replay")
        .arg(run)
        .args(args)
        .arg("--")
        .args(prog)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn bbv_s_own_settings_do_not_reach_the_guest() {
    // A guest that prints its environment: bbv's BBV_* settings are left out (others kept),
    // so the guest runs the same instructions with and without them.
    let dir = tempfile::tempdir().unwrap();
    let count = |env: &[(&str, &str)]| {
        let out = bbv()
            .current_dir(dir.path())
            .args(["collect", "--instr-count-only", "--", "/usr/bin/env"])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert_status(&out, 0);
        let total = String::from_utf8_lossy(&out.stderr)
            .lines()
            .find_map(|l| {
                l.strip_prefix("#   Total instructions: ")
                    .map(str::to_owned)
            })
            .expect("a total");
        (String::from_utf8_lossy(&out.stdout).into_owned(), total)
    };
    let (printed, with) = count(&[("BBV_SETTING_FOR_BBV", "1"), ("KEPT_FOR_THE_GUEST", "1")]);
    assert!(printed.contains("KEPT_FOR_THE_GUEST=1"), "{printed}");
    assert!(!printed.contains("BBV_"), "{printed}");
    let (_, with_only_kept) = count(&[("KEPT_FOR_THE_GUEST", "1")]);
    assert_eq!(with, with_only_kept);
}

#[test]
fn markers_are_reached_on_replay_in_another_environment() {
    let dir = tempfile::tempdir().unwrap();
    let (out, run) = gzip_run(dir.path(), &[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    for f in [
        "blocks.tsv",
        "images.tsv",
        "marks.out",
        "summary.json",
        "regions.csv",
        "regions.json",
        "regions.sniper.txt",
        "gem5/simpoints",
        "gem5/weights",
        "gem5/README",
        "nemu/simpoints0",
        "nemu/weights0",
    ] {
        assert!(run.join(f).is_file(), "{f} missing");
    }
    let summary = json(&run.join("summary.json"));
    let points = summary["points"].as_array().unwrap();
    assert!(!points.is_empty());
    assert_eq!(summary["k"].as_u64().unwrap() as usize, points.len());
    assert!(summary["program"]["build_id"].as_str().is_some());
    for p in points {
        for m in ["start", "end", "warmup"] {
            assert_eq!(p[m]["image"], "gzip", "{p}: the program's own code");
            assert!(p[m]["count"].as_u64().unwrap() >= 1);
        }
        // Within 0.5% of an interval of the cuts.
        let start = p["start_position"].as_u64().unwrap();
        let cut = p["start_instruction"].as_u64().unwrap();
        assert!(start >= cut && start - cut <= 20_000, "{p}");
        let len = p["length"].as_u64().unwrap() as f64;
        assert!((len - 4e6).abs() < 4e6 * 0.011, "{p}");
    }
    let shown = format!(
        "start gzip+{} #{}",
        points[0]["start"]["offset"].as_str().unwrap(),
        points[0]["start"]["count"]
    );
    assert!(err.contains(&shown), "{shown} not in {err}");

    // The PinPoints CSV: exact header, one simulation and one warmup row per point, no
    // spaces inside fields after the comment.
    let csv = std::fs::read_to_string(run.join("regions.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(lines.next().unwrap(), "# comment,thread-id,region-id,start-pc, start-image-name, start-image-offset, start-pc-count,end-pc, end-image-name, end-image-offset, end-pc-count,end-pc-relative-count, region-length, region-weight, region-multiplier, region-type");
    let rows: Vec<&str> = lines.collect();
    assert_eq!(rows.len(), 2 * points.len());
    for r in &rows {
        let f: Vec<&str> = r.split(',').collect();
        assert_eq!(f.len(), 16, "{r}");
        assert!(f[1..].iter().all(|x| !x.contains(' ')), "{r}");
        assert_eq!(f[1], "global");
    }
    assert_eq!(
        rows.iter()
            .filter(|r| r.starts_with("cluster ") && r.ends_with(",simulation"))
            .count(),
        points.len()
    );
    // gem5's JSON layout: decimal PCs, global counts, multiplier, warmup.
    let regions = json(&run.join("regions.json"));
    let r = regions.as_object().unwrap();
    assert_eq!(r.len(), points.len());
    for v in r.values() {
        assert!(v["simulation"]["start"]["pc"].as_u64().is_some());
        assert!(v["simulation"]["end"]["global"].as_u64().is_some());
        assert!(v["multiplier"].as_f64().unwrap() >= 1.0);
        assert!(v["warmup"]["start"]["count"].as_u64().is_some());
    }
    let sniper = std::fs::read_to_string(run.join("regions.sniper.txt")).unwrap();
    assert!(
        sniper.contains("-control start:address:gzip+0x"),
        "{sniper}"
    );

    // Replay from another directory with a few kB more environment.
    let other = dir.path().join("elsewhere");
    std::fs::create_dir(&other).unwrap();
    let inp = dir.path().join("input");
    let out = bbv()
        .current_dir(&other)
        .env("BBV_TEST_PADDING", "x".repeat(4000))
        .arg("replay")
        .arg(&run)
        .args(["--json", "--", "gzip", "-9", "-c"])
        .arg(&inp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_status(&out, 0);
    // The guest's own output (compressed bytes, no final newline) comes first on stdout.
    let report = replay_report(&out);
    assert_eq!(report["tolerance_pct"], 1.0);
    let checks = report["regions"].as_array().unwrap();
    assert_eq!(checks.len(), points.len());
    let total = summary["instructions"].as_f64().unwrap();
    let mut extrapolated = 0.0;
    let mut l1 = 0.0;
    for c in checks {
        assert_eq!(c["start_found"], true, "{c}");
        assert_eq!(c["end_found"], true, "{c}");
        assert!(c["deviation_pct"].as_f64().unwrap().abs() <= 1.0, "{c}");
        l1 += c["bbv_l1"].as_f64().unwrap();
        let id = c["id"].as_u64().unwrap().to_string();
        extrapolated +=
            regions[&id]["multiplier"].as_f64().unwrap() * c["replay_length"].as_f64().unwrap();
    }
    assert!(l1 / (checks.len() as f64) < 0.05, "mean L1 {l1}");
    assert!(
        (extrapolated - total).abs() / total < 0.02,
        "sum of multiplier x length {extrapolated} vs {total}"
    );
    assert!(run.join("replay.json").is_file());
    // A copy of the program under another name (its build id the same) reaches every marker:
    // they name the profiled program's image, which the replay maps to the copy's name.
    let copy = other.join("gz-copy");
    std::fs::copy(bbv_collect::find_on_path("gzip").unwrap(), &copy).unwrap();
    let out = bbv()
        .current_dir(&other)
        .arg("replay")
        .arg(&run)
        .args(["--json", "--", "./gz-copy", "-9", "-c"])
        .arg(&inp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_status(&out, 0);
    for c in replay_report(&out)["regions"].as_array().unwrap() {
        assert_eq!(c["start_found"], true, "{c}");
        assert_eq!(c["end_found"], true, "{c}");
        assert!(c["bbv_l1"].as_f64().unwrap() < 0.2, "{c}");
    }

    // bbv regions rebuilds from the directory: without warmup, then as before.
    let before = std::fs::read_to_string(run.join("regions.csv")).unwrap();
    let out = bbv()
        .args(["regions", "--warmup", "0"])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    let csv = std::fs::read_to_string(run.join("regions.csv")).unwrap();
    assert_eq!(csv.lines().count(), 1 + points.len(), "no warmup rows");
    let out = bbv()
        .args(["regions", "--warmup", "4000000"])
        .arg(&run)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        std::fs::read_to_string(run.join("regions.csv")).unwrap(),
        before
    );

    bad_input(dir.path(), &run, &inp);
}

/// Bad input: exit 2, a message naming what does not match, nothing written.
fn bad_input(dir: &Path, run: &Path, inp: &Path) {
    let regions = |d: &Path| bbv().arg("regions").arg(d).output().unwrap();
    let out = regions(&dir.join("nothing-here"));
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing-here: no such folder"));
    // An older bbv's directory, or one whose summary.json was lost.
    let old = dir.join("old");
    std::fs::create_dir(&old).unwrap();
    std::fs::write(old.join("summary.txt"), "instructions: 1\n").unwrap();
    let out = regions(&old);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("summary.json: missing") && err.contains("not a complete"),
        "{err}"
    );

    // A copy whose files are hand-edited into nonsense.
    let copy = dir.join("copy");
    std::fs::create_dir(&copy).unwrap();
    for e in std::fs::read_dir(run).unwrap() {
        let e = e.unwrap();
        if e.file_type().unwrap().is_file() {
            std::fs::copy(e.path(), copy.join(e.file_name())).unwrap();
        }
    }
    let csv_before = std::fs::read(copy.join("regions.csv")).unwrap();
    std::fs::write(copy.join("marks.out"), "0 0 12:x\n").unwrap();
    let out = regions(&copy);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("marks.out:1"), "{err}");
    std::fs::copy(run.join("marks.out"), copy.join("marks.out")).unwrap();
    let summary = std::fs::read_to_string(copy.join("summary.json")).unwrap();
    std::fs::write(
        copy.join("summary.json"),
        summary.replace("\"interval\": 4000000", "\"interval\": \"many\""),
    )
    .unwrap();
    let out = regions(&copy);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("summary.json:"), "{err}");
    assert_eq!(std::fs::read(copy.join("regions.csv")).unwrap(), csv_before);
    std::fs::write(copy.join("summary.json"), &summary).unwrap();
    std::fs::remove_file(copy.join("blocks.tsv")).unwrap();
    let out = regions(&copy);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("blocks.tsv: missing"));

    // Another program than the one profiled.
    let out = replay(dir, run, &[], &["xz", "-9", "-c", inp.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("build id") && err.contains("not the program of this run"),
        "{err}"
    );
    // A marker count no run reaches: the check fails (1), it is not bad input.
    let s = std::fs::read_to_string(run.join("summary.json")).unwrap();
    let mut v: serde_json::Value = serde_json::from_str(&s).unwrap();
    v["points"][0]["end"]["count"] = 1_000_000_000_000u64.into();
    std::fs::write(copy.join("summary.json"), v.to_string()).unwrap();
    std::fs::copy(run.join("blocks.tsv"), copy.join("blocks.tsv")).unwrap();
    let out = replay(
        dir,
        &copy,
        &[],
        &["gzip", "-9", "-c", inp.to_str().unwrap()],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("FAILED"), "{err}");
    let out = replay(dir, run, &["--tolerance", "-1"], &["gzip"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn rep_iterations_count_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let prog = crate::collect_cli::build_static(dir.path(), "gcc", "x86_64_rep.S", "rep");
    let count = |mode: &str| -> String {
        let out = bbv()
            .current_dir(dir.path())
            .args(["collect", "--instr-count-only", "--count-rep", mode, "--"])
            .arg(&prog)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let instance = count("instance");
    assert!(instance.contains("Total instructions: 2013"), "{instance}");
    // 110 rep executions over 3 instances: 107 more instructions.
    let iteration = count("iteration");
    assert!(
        iteration.contains("Total instructions: 2120"),
        "{iteration}"
    );
    assert!(iteration.contains("Total reps: 110"), "{iteration}");
}

#[test]
fn collect_writes_the_block_table() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("loop.c");
    std::fs::write(
        &src,
        "int main(void) { volatile long s = 0; for (long i = 0; i < 100000; i++) s += i; return (int)(s & 1); }\n",
    )
    .unwrap();
    let prog = dir.path().join("loop");
    let st = std::process::Command::new("gcc")
        .args(["-g", "-O1", "-o"])
        .arg(&prog)
        .arg(&src)
        .status()
        .unwrap();
    assert!(st.success());
    let out = bbv()
        .current_dir(dir.path())
        .args([
            "collect",
            "--bb-out-file",
            "bb",
            "--pc-out-file",
            "pc",
            "--blocks-out-file",
            "blocks.tsv",
            "--interval-size",
            "100000",
            "--",
        ])
        .arg(&prog)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let table = std::fs::read_to_string(dir.path().join("blocks.tsv")).unwrap();
    let pc = std::fs::read_to_string(dir.path().join("pc")).unwrap();
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap(),
        "id\timage\toffset\tinstructions\tfunction\tsource\tbytes\tkind"
    );
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split('\t').collect()).collect();
    assert_eq!(rows.len(), pc.lines().count(), "one row per block id");
    let main: Vec<_> = rows.iter().filter(|r| r[4] == "main").collect();
    assert!(!main.is_empty());
    assert!(
        main.iter()
            .all(|r| r[1] == "loop" && r[5].starts_with("loop.c:")),
        "{main:?}"
    );
    assert!(rows.iter().any(|r| r[1].starts_with("ld-linux")));
}

/// `bbv run OPTS -o out -- PROG` in `dir` (exit 0): the run directory and its summary.json.
fn run_out(dir: &Path, opts: &[&str], prog: &[&str]) -> (PathBuf, serde_json::Value) {
    let out = bbv()
        .current_dir(dir)
        .arg("run")
        .args(opts)
        .args(["-o", "out", "--"])
        .args(prog)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_status(&out, 0);
    let run = dir.join("out");
    let summary = json(&run.join("summary.json"));
    (run, summary)
}

/// The hot code of xz is in liblzma: markers go there, and replay reaches them.
#[test]
fn markers_in_the_programs_own_library() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let opts = ["--interval", "20000000", "--max-k", "4"];
    let xz = ["xz", "-6", "-c", inp.to_str().unwrap()];
    let (run, summary) = run_out(dir.path(), &opts, &xz);
    let points = summary["points"].as_array().unwrap();
    let in_lzma = points
        .iter()
        .filter(|p| {
            p["start"]["image"]
                .as_str()
                .unwrap()
                .starts_with("liblzma.so")
        })
        .count();
    assert!(in_lzma > 0, "no start marker in liblzma: {points:?}");
    let path = inp.to_string_lossy();
    let out = replay(dir.path(), &run, &[], &["xz", "-6", "-c", &path]);
    assert_status(&out, 0);
}

/// `python3` is a symlink to `python3.11`: a warmup reaching before the first cut starts at the
/// entry point of the image the command resolves to.
#[test]
fn warmup_from_the_entry_point_of_a_symlinked_command() {
    let python = Path::new("/usr/bin/python3");
    if !python.is_symlink() {
        panic!("/usr/bin/python3 is not a symlink here; scripts/setup installs Debian's python3");
    }
    let real = std::fs::canonicalize(python).unwrap();
    let name = real.file_name().unwrap().to_string_lossy().into_owned();
    let dir = tempfile::tempdir().unwrap();
    let script = "d = {}\nfor i in range(60000):\n    d[str(i * 7919 % 100003)] = i\nprint(len(sorted(d)))\n";
    // A warmup longer than the run: every warmup starts at the entry point.
    let out = bbv()
        .current_dir(dir.path())
        .env("PYTHONHASHSEED", "0")
        .args(["run", "--interval", "5000000", "--max-k", "3"])
        .args(["--warmup", "100000000000", "-o", "out", "--"])
        .args([python.to_str().unwrap(), "-c", script])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_status(&out, 0);
    let summary = json(&dir.path().join("out/summary.json"));
    let points = summary["points"].as_array().unwrap();
    assert!(!points.is_empty());
    for p in points {
        assert_eq!(p["warmup"]["image"].as_str(), Some(name.as_str()), "{p}");
        assert_eq!(p["warmup"]["count"], 1, "{p}");
    }
}

/// LLVM's `opt` spends its first 17 million instructions in the dynamic loader relocating
/// libLLVM, where no marker may go: points chosen there used to fail the whole run. Each now
/// stands in from the first interval after it that a marker delimits, saying so, and the
/// replay reaches every marker.
#[test]
fn points_in_the_loaders_start_up_stand_in_from_after_it() {
    let opt = "/usr/bin/opt-14";
    assert!(
        Path::new(opt).is_file(),
        "{opt} missing: scripts/setup installs llvm-14"
    );
    let dir = tempfile::tempdir().unwrap();
    let (run, summary) = run_out(dir.path(), &["--interval", "1000000"], &[opt, "--version"]);
    let points = summary["points"].as_array().unwrap();
    let standing: Vec<_> = points
        .iter()
        .filter(|p| p["stand_in_for"].is_u64())
        .collect();
    assert!(!standing.is_empty(), "no point in the loader: {points:?}");
    for p in points {
        assert!(
            !p["start"]["image"]
                .as_str()
                .unwrap()
                .starts_with("ld-linux"),
            "{p}"
        );
    }
    for p in standing {
        assert!(p["interval"].as_u64() > p["stand_in_for"].as_u64(), "{p}");
    }
    let text = std::fs::read_to_string(run.join("summary.txt")).unwrap();
    assert!(text.contains("stands in for interval"), "{text}");
    let out = replay(dir.path(), &run, &[], &[opt, "--version"]);
    assert_status(&out, 0);
}

/// A program whose name holds a comma, a space and a quote (gzip copied so): regions.csv keeps
/// 16 fields a row as an RFC 4180 reader splits it, and each line of regions.sniper.txt is 8
/// words as the shell splits it, the image name whole in its two `-control` values.
#[test]
fn hand_off_files_keep_odd_program_names_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let name = "g,z 'ip";
    std::fs::copy(bbv_collect::find_on_path("gzip").unwrap(), d.join(name)).unwrap();
    let inp = input(d);
    let out = bbv()
        .current_dir(d)
        .args(["run", "--interval", "4000000", "--max-k", "4", "-o", "out"])
        .arg("--")
        .arg(d.join(name))
        .args(["-9", "-c"])
        .arg(&inp)
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_status(&out, 0);
    let csv = std::fs::read_to_string(d.join("out/regions.csv")).unwrap();
    let fields = |row: &str| -> Vec<String> {
        let (mut out, mut cur, mut quoted, mut chars) =
            (Vec::new(), String::new(), false, row.chars().peekable());
        while let Some(c) = chars.next() {
            match (c, quoted) {
                ('"', true) if chars.peek() == Some(&'"') => {
                    cur.push('"');
                    chars.next();
                }
                ('"', _) => quoted = !quoted,
                (',', false) => out.push(std::mem::take(&mut cur)),
                _ => cur.push(c),
            }
        }
        out.push(cur);
        out
    };
    let rows: Vec<Vec<String>> = csv.lines().skip(1).map(fields).collect();
    assert!(!rows.is_empty());
    for r in &rows {
        assert_eq!(r.len(), 16, "{r:?}");
        assert!(
            r[4] == name || r[4].starts_with("ld-") || r[4].starts_with("lib"),
            "{r:?}"
        );
    }
    assert!(rows.iter().any(|r| r[4] == name), "{csv}");
    let sniper = std::fs::read_to_string(d.join("out/regions.sniper.txt")).unwrap();
    for line in sniper.lines().skip(1) {
        let o = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("for w in {line}; do printf '%s\\n' \"$w\"; done"))
            .output()
            .unwrap();
        let words: Vec<String> = String::from_utf8_lossy(&o.stdout)
            .lines()
            .map(String::from)
            .collect();
        assert_eq!(words.len(), 8, "{line}: {words:?}");
        assert_eq!(words[4], "-control");
        assert!(words[5].starts_with("start:address:"), "{words:?}");
    }
    assert!(
        sniper.contains(&format!("start:address:{}", "g,z '\\''ip")),
        "{sniper}"
    );
}
