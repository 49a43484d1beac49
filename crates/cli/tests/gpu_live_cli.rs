//! `bbv gpu run` without a GPU (it must refuse before running anything), and `bbv gpu sample`
//! and `bbv gpu cfg` on a real live run: bbv-cuda's tests/data/h200, the CUPTI injection
//! library's counts of tools/cupti/kernels.cu on an H200.

use std::path::{Path, PathBuf};

use crate::common::{bbv, contents, copy_dir};

fn h200() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda/tests/data/h200")
}

/// A run folder made of the real run's raw counts, as `bbv gpu run` leaves it.
fn run_folder(dir: &Path) -> PathBuf {
    let run = dir.join("run");
    copy_dir(&h200().join("raw"), &run.join("raw"));
    std::fs::write(
        run.join("summary.json"),
        r#"{"kind": "gpu-live", "command": ["./cuda-kernels", "a b"]}"#,
    )
    .unwrap();
    run
}

/// `bbv gpu sample RUN -o OUT`.
fn sample(run: &Path, out: &Path) -> std::process::Output {
    bbv()
        .args(["gpu", "sample"])
        .arg(run)
        .arg("-o")
        .arg(out)
        .output()
        .unwrap()
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn without_a_driver_nothing_runs() {
    let t = tempfile::tempdir().unwrap();
    let marker = t.path().join("ran");
    let out = bbv()
        .env("BBV_NVIDIA_DEV", t.path().join("no-dev"))
        .args(["gpu", "run", "--repeat", "3", "-o"])
        .arg(t.path().join("out"))
        .args(["--", "sh", "-c"])
        .arg(format!("touch {}", marker.display()))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("no NVIDIA driver"), "{}", text(&out));
    assert!(text(&out).contains("nothing was run"), "{}", text(&out));
    assert!(!marker.exists());
    assert!(!t.path().join("out").exists());
}

#[test]
fn bad_run_options_are_refused() {
    for (args, want) in [
        (&["--launches", "5:2"][..], "B must be greater than A"),
        (&["--launches", "x"][..], "expected A:B"),
        (&["--launches", "1:2:3"][..], "expected A:B"),
        (&["--repeat", "101"][..], "101 is not in 0..=100"),
        (&["--repeat", "-1"][..], "unexpected argument '-1'"),
    ] {
        let out = bbv()
            .args(["gpu", "run"])
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out));
        assert!(text(&out).contains(want), "{args:?}: {}", text(&out));
    }
    let out = bbv().args(["gpu", "run"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

#[test]
fn a_live_run_is_sampled_as_a_trace_is() {
    let t = tempfile::tempdir().unwrap();
    let run = run_folder(t.path());
    let out_dir = t.path().join("picks");
    let out = sample(&run, &out_dir);
    assert!(out.status.success(), "{}", text(&out));
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("of 16 launches chosen"), "{report}");
    assert!(report.contains("warp instructions | 631366 |"), "{report}");
    let tracer = std::fs::read_to_string(out_dir.join("tracer.sh")).unwrap();
    // One tracer run per pick, numbered from 1, with the run's own command, quoted.
    let weights = std::fs::read_to_string(out_dir.join("weights.csv")).unwrap();
    let picks: Vec<u64> = weights
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap().parse().unwrap())
        .collect();
    assert!(!picks.is_empty());
    for p in &picks {
        let line = format!(
            "DYNAMIC_KERNEL_LIMIT_START={} DYNAMIC_KERNEL_LIMIT_END={} TERMINATE_UPON_LIMIT=1",
            p + 1,
            p + 1
        );
        assert!(tracer.contains(&line), "{line}\n{tracer}");
    }
    assert!(
        tracer.contains("LD_PRELOAD=\"$TRACER\" ./cuda-kernels 'a b'"),
        "{tracer}"
    );
    assert!(tracer.contains("MB less than the whole run's"), "{tracer}");
    for f in ["report", "report.html", "summary.json", "weights.csv"] {
        assert!(out_dir.join(f).is_file(), "{f}");
    }
    let summary = std::fs::read_to_string(out_dir.join("summary.json")).unwrap();
    assert!(summary.contains("\"trace_bytes_saved\""), "{summary}");
}

#[test]
fn a_damaged_run_folder_changes_nothing() {
    let t = tempfile::tempdir().unwrap();
    let run = run_folder(t.path());
    let raw = run.join("raw/launches.txt");
    let text_in = std::fs::read_to_string(&raw).unwrap();
    std::fs::write(&raw, text_in.replacen("end 3 ", "end 4 ", 1)).unwrap();
    let out_dir = t.path().join("picks");
    std::fs::create_dir(&out_dir).unwrap();
    std::fs::write(out_dir.join("weights.csv"), "old").unwrap();
    let before = contents(&out_dir);
    let out = sample(&run, &out_dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains(&format!("{}:", raw.display()))
            && text(&out).contains("launch 3 ends as 4"),
        "{}",
        text(&out)
    );
    assert_eq!(contents(&out_dir), before);
    // A folder that is not a run.
    let out = sample(t.path(), &out_dir);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("not a `bbv gpu run` folder")
            || text(&out).contains("neither a kernel list"),
        "{}",
        text(&out)
    );
}

#[test]
fn a_kernel_that_cannot_be_disassembled_keeps_its_counts() {
    let t = tempfile::tempdir().unwrap();
    let run = run_folder(t.path());
    let cubin = run.join("raw/cubins/4e5b5de8.cubin");
    std::fs::write(&cubin, b"not an ELF file").unwrap();
    let out_dir = t.path().join("picks");
    let out = sample(&run, &out_dir);
    assert!(out.status.success(), "{}", text(&out));
    // Every instruction still counted; blocks cut where PCs stop being consecutive.
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(s.contains("warp instructions | 631366 |"), "{s}");
    assert!(
        s.contains("warning: cubin 4e5b5de8 not disassembled"),
        "{s}"
    );
}

#[test]
fn cfg_lists_the_blocks_of_every_kernel() {
    let cubin = h200().join("raw/cubins/4e5b5de8.cubin");
    let out = bbv()
        .args(["gpu", "cfg", "--format", "tsv"])
        .arg(&cubin)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let s = String::from_utf8_lossy(&out.stdout);
    assert!(
        s.starts_with(
            "file\tarch\tfunction\tkind\tdegenerate\tblock\tstart\tinstructions\tsuccessors\n"
        ),
        "{s}"
    );
    // The loop at 0x140: five instructions, back to itself or on to the next block.
    let row = format!(
        "{}\tsm_90\t_Z9trip_loopPKiPii\tkernel\tfalse\t4\t320\t5\t4:taken,5:fall-through\n",
        cubin.display()
    );
    assert!(s.contains(&row), "{s}");
    let out = bbv()
        .args(["gpu", "cfg", "/nonexistent.cubin"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
}

/// A timed run folder as `bbv gpu run --repeat 3` leaves it (times.tsv, launches.tsv, bbv.bb):
/// 10 launches of kernel a (1,000 warp instructions, 100 ns in every run) and 20 of b (4,000
/// warp instructions; 400, 410 and 390 ns in runs 1 to 3, alike within a run).
fn timed_folder(dir: &Path) -> PathBuf {
    let run = dir.join("timed");
    std::fs::create_dir_all(&run).unwrap();
    let mut launches = String::from("launch\tkernel\tgrid\tblock\twarp\twarp_pred_on\tthread\tthread_pred_on\tmicros\tunplaced\tuneven_blocks\n");
    let mut times =
        String::from("launch\tkernel\tgrid\tblock\tregisters\tshared_bytes\tns_1\tns_2\tns_3\n");
    let mut bb = String::new();
    for i in 0..30 {
        let (k, warp, ns) = match i % 3 {
            0 => ("_Z1av", 1000, [100, 100, 100]),
            _ => ("_Z1bv", 4000, [400, 410, 390]),
        };
        launches.push_str(&format!(
            "{i}\t{k}\t4,1,1\t128,1,1\t{warp}\t{warp}\t{}\t{}\t7\t0\t0\n",
            32 * warp,
            32 * warp
        ));
        times.push_str(&format!(
            "{i}\t{k}\t4,1,1\t128,1,1\t32\t0\t{}\t{}\t{}\n",
            ns[0], ns[1], ns[2]
        ));
        bb.push_str(&format!("T:{}:{warp} \n", if i % 3 == 0 { 1 } else { 2 }));
    }
    std::fs::write(run.join("launches.tsv"), launches).unwrap();
    std::fs::write(run.join("times.tsv"), times).unwrap();
    std::fs::write(run.join("bbv.bb"), bb).unwrap();
    run
}

#[test]
fn timed_runs_are_scored_rule_by_rule() {
    let t = tempfile::tempdir().unwrap();
    let run = timed_folder(t.path());
    let out = bbv().args(["gpu", "score"]).arg(&run).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    let rows: Vec<Vec<&str>> = table
        .lines()
        .filter(|l| l.starts_with(&run.display().to_string()))
        .map(|l| l.split('\t').collect())
        .collect();
    let rules: Vec<&str> = rows.iter().map(|r| r[4]).collect();
    assert_eq!(rules, ["bbv", "sieve", "pka", "stem"], "{table}");
    // Recomputed from the files: scored on runs 2 and 3, each 10 x 100 + 20 x 410 (or 390).
    let measured = (10.0 * 100.0 + 20.0 * 400.0) / 1e6;
    for r in &rows {
        assert_eq!(r[1], "30", "{table}");
        assert_eq!(r[2], "3", "{table}");
        // Runs 1 to 3 total 9,000, 9,200 and 8,800 ns: 4.44% apart.
        assert_eq!(r[3], "4.44%", "{table}");
        assert_eq!(r[7].parse::<f64>().unwrap(), measured, "{table}");
    }
    // Sieve's strata (a; b) pick one launch each, standing for 10 and 20: exact here.
    let sieve = &rows[1];
    assert_eq!((sieve[5], sieve[8]), ("2", "+0.00%"), "{table}");
    assert!(table.contains("sieve: mean |error| 0.00%"), "{table}");
    // bbv's rule groups as Sieve's here (one block mix per kernel): the same two picks.
    assert_eq!((rows[0][5], rows[0][8]), ("2", "+0.00%"), "{table}");
    // The default against each other rule, no difference claimed below the runs' spread.
    assert!(
        table.contains(&format!(
            "the runs' own totals are up to 4.44% apart ({}): smaller differences are not claimed",
            run.display()
        )),
        "{table}"
    );
    assert!(
        table.contains(
            "bbv (default) against sieve: mean |error| 0.00% against 0.00%, no difference \
             claimed; 2 launches picked against 2"
        ),
        "{table}"
    );
    assert_eq!(table.matches("bbv (default) against").count(), 3, "{table}");
    // Stored compressed (NAME.gz beside where NAME would be): the same rows.
    let packed = t.path().join("packed");
    copy_dir(&run, &packed);
    for f in ["times.tsv", "launches.tsv", "bbv.bb"] {
        let ok = std::process::Command::new("gzip")
            .arg(packed.join(f))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    let o = bbv().args(["gpu", "score"]).arg(&packed).output().unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let packed_table = String::from_utf8_lossy(&o.stdout)
        .replace(&packed.display().to_string(), &run.display().to_string());
    assert_eq!(packed_table, table);

    // Bad input: a folder never timed, another run's times, a damaged times.tsv.
    let other = t.path().join("untimed");
    std::fs::create_dir_all(&other).unwrap();
    let o = bbv().args(["gpu", "score"]).arg(&other).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(text(&o).contains("has no times.tsv: record the run with `bbv gpu run --repeat N`"));
    let tsv = std::fs::read_to_string(run.join("times.tsv")).unwrap();
    for (bad, want) in [
        (tsv.replacen("_Z1bv", "_Z1cv", 1), "records of another run"),
        (
            tsv.replacen("\t4,1,1\t", "\t8,1,1\t", 1),
            "launch 0 (_Z1av) ran grid 8,1,1 of blocks 128,1,1 there but grid 4,1,1 of blocks \
             128,1,1 in the counted run: records of another run",
        ),
        (
            tsv.replacen("\t410\t", "\t-4\t", 1),
            "times.tsv:3: -4 is not a number",
        ),
    ] {
        std::fs::write(run.join("times.tsv"), bad).unwrap();
        let o = bbv().args(["gpu", "score"]).arg(&run).output().unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", text(&o));
        assert!(text(&o).contains(want), "{}", text(&o));
    }
}

/// The real run's folder with a times.tsv of three timing runs: launch N takes 1,000 + 100 N
/// ns in run 1, 2 % more in run 2 and 1 % less in run 3.
fn timed_live_folder(dir: &Path) -> (PathBuf, Vec<[u64; 3]>) {
    let run = run_folder(dir);
    let raw = std::fs::read_to_string(run.join("raw/launches.txt")).unwrap();
    let mut tsv =
        String::from("launch\tkernel\tgrid\tblock\tregisters\tshared_bytes\tns_1\tns_2\tns_3\n");
    let mut ns = Vec::new();
    for l in raw.lines().filter(|l| l.starts_with("launch ")) {
        let f: Vec<&str> = l.split(' ').collect();
        let n: u64 = f[1].parse().unwrap();
        let t = [
            1000 + 100 * n,
            (1000 + 100 * n) * 102 / 100,
            (1000 + 100 * n) * 99 / 100,
        ];
        tsv.push_str(&format!(
            "{n}\t{}\t{},{},{}\t{},{},{}\t32\t0\t{}\t{}\t{}\n",
            f.last().unwrap(),
            f[2],
            f[3],
            f[4],
            f[5],
            f[6],
            f[7],
            t[0],
            t[1],
            t[2]
        ));
        ns.push(t);
    }
    std::fs::write(run.join("times.tsv"), tsv).unwrap();
    (run, ns)
}

#[test]
fn every_method_picks_from_a_timed_run_and_estimates_its_gpu_time() {
    let t = tempfile::tempdir().unwrap();
    let (run, ns) = timed_live_folder(t.path());
    assert_eq!(ns.len(), 16);
    for method in ["bbv", "sieve", "pka", "stem"] {
        let out_dir = t.path().join(method);
        let o = bbv()
            .args(["gpu", "sample", "--method", method])
            .arg(&run)
            .arg("-o")
            .arg(&out_dir)
            .output()
            .unwrap();
        assert!(o.status.success(), "{method}: {}", text(&o));
        let report = String::from_utf8_lossy(&o.stdout);
        assert!(report.contains("GPU time |"), "{report}");
        assert!(
            report.contains("timing runs 2 to 3, chosen from run 1"),
            "{report}"
        );
        // The estimate recomputed from the files: weights.csv's picks times their times.
        let weights = std::fs::read_to_string(out_dir.join("weights.csv")).unwrap();
        let mut estimate = [0.0f64; 2];
        for line in weights.lines().skip(1) {
            let f: Vec<&str> = line.split(',').collect();
            let (launch, w): (usize, f64) = (f[0].parse().unwrap(), f[2].parse().unwrap());
            for (r, e) in estimate.iter_mut().enumerate() {
                *e += w * ns[launch][r + 1] as f64;
            }
        }
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap())
                .unwrap();
        let g = &s["gpu_time"];
        assert_eq!(s["rule"], method, "{s}");
        assert_eq!(g["scored_runs"], serde_json::json!([2, 3]), "{s}");
        // Runs 2 and 3 are 2% over and 1% under run 1: 3% apart, reported beside the error.
        let apart = g["runs_apart"].as_f64().unwrap();
        assert!((apart - 0.03 / (3.01 / 3.0)).abs() < 1e-3, "{s}");
        assert!(report.contains("the runs' totals 2.99% apart"), "{report}");
        for r in 0..2 {
            let measured: u64 = ns.iter().map(|t| t[r + 1]).sum();
            assert_eq!(
                g["measured_ns"][r].as_f64().unwrap(),
                measured as f64,
                "{s}"
            );
            let got = g["estimate_ns"][r].as_f64().unwrap();
            assert!((got - estimate[r]).abs() < 1e-6 * got, "{got} {estimate:?}");
        }
        let page = std::fs::read_to_string(out_dir.join("report.html")).unwrap();
        assert!(page.contains("GPU time, ns"), "{method}");
    }

    // Without times, PKA's and STEM's rules read instructions instead, and say so.
    let untimed = t.path().join("untimed");
    std::fs::create_dir_all(&untimed).unwrap();
    let plain = run_folder(&untimed);
    for method in ["pka", "stem"] {
        let o = bbv()
            .args(["gpu", "sample", "--method", method])
            .arg(&plain)
            .arg("-o")
            .arg(untimed.join(method))
            .output()
            .unwrap();
        assert!(o.status.success(), "{method}: {}", text(&o));
        let want = format!("{method}'s choices read each launch's warp instructions");
        assert!(text(&o).contains(&want), "{}", text(&o));
        assert!(!text(&o).contains("GPU time |"), "{}", text(&o));
    }

    // Bad input: an unknown method, another run's times, a counted launch without a time,
    // one launched with another shape: exit 2, no output folder.
    let tsv = std::fs::read_to_string(run.join("times.tsv")).unwrap();
    let dropped: String = (tsv.lines())
        .filter(|l| !l.starts_with("7\t"))
        .map(|l| format!("{l}\n"))
        .collect();
    for (args, folder, times, want) in [
        (
            "simpoint",
            &run,
            None,
            "unknown method \"simpoint\": one of bbv, sieve, pka, stem",
        ),
        (
            "bbv",
            &run,
            Some(tsv.replacen("_Z7divergePKiPii", "_Z5otherv", 1)),
            "records of another run",
        ),
        (
            "sieve",
            &run,
            Some(dropped),
            "counted launch 7 (_Z6callerPKiPii) has no time",
        ),
        (
            "stem",
            &run,
            Some(tsv.replacen("\t128,1,1\t", "\t256,1,1\t", 1)),
            "launch 0 (_Z9trip_loopPKiPii) ran grid 1,1,1 of blocks 256,1,1 there but grid \
             1,1,1 of blocks 128,1,1 in the counted run",
        ),
    ] {
        if let Some(times) = times {
            std::fs::write(folder.join("times.tsv"), times).unwrap();
        }
        let out_dir = t.path().join("refused");
        let o = bbv()
            .args(["gpu", "sample", "--method", args])
            .arg(folder)
            .arg("-o")
            .arg(&out_dir)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{args}: {}", text(&o));
        assert!(text(&o).contains(want), "{args}: {}", text(&o));
        assert!(!out_dir.exists(), "{args}");
    }
}
