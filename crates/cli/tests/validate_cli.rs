//! Per-interval metrics (`bbv collect --metrics-out-file`, `bbv run --validate`): the cache
//! model against valgrind's cachegrind on a real program, the instruction column against the
//! vectors, `validation.json` recomputed independently from the run's files, `--target-error`'s
//! choice, and bad options.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::common::{assert_status, bbv, json, text_input};

/// The rows of a metrics.csv as maps from column to value.
pub(crate) fn csv_rows(path: &Path) -> Vec<HashMap<String, f64>> {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let head: Vec<String> = lines.next().unwrap().split(',').map(String::from).collect();
    lines
        .map(|l| {
            head.iter()
                .cloned()
                .zip(l.split(',').map(|v| v.parse::<f64>().unwrap()))
                .collect()
        })
        .collect()
}

/// Instructions of each vector of an exp-bbv file.
fn vector_sums(path: &Path) -> Vec<f64> {
    crate::collect_cli::vectors(path)
        .iter()
        .map(|v| v.iter().map(|&(_, n)| n as f64).sum())
        .collect()
}

/// A number from cachegrind's summary line `==pid== NAME: 1,234 (...)`.
fn cachegrind_total(stderr: &str, name: &str) -> f64 {
    let line = stderr
        .lines()
        .find(|l| l.contains(&format!("{name}:")))
        .unwrap_or_else(|| panic!("no '{name}' in cachegrind's output:\n{stderr}"));
    let after = line.split(&format!("{name}:")).nth(1).unwrap().trim_start();
    let digits: String = after
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == ',')
        .filter(|c| *c != ',')
        .collect();
    digits.parse().unwrap()
}

#[test]
fn metrics_agree_with_cachegrind_and_the_vectors() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    text_input(&input, 2_000_000);
    let gzip = ["gzip", "-6", "-c", input.to_str().unwrap()];
    // `bbv collect` with metrics into NAME.bb, NAME.pc and NAME.csv.
    let collect = |name: &str, extra: &[&str]| {
        let out = bbv()
            .current_dir(dir.path())
            .args(["collect", "--tail", "--interval-size", "20000000"])
            .args(["--bb-out-file", &format!("{name}.bb")])
            .args(["--pc-out-file", &format!("{name}.pc")])
            .args(extra)
            .args(["--metrics-out-file", &format!("{name}.csv"), "--"])
            .args(gzip)
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert_status(&out, 0);
    };
    collect("m", &[]);
    // The model on the guest's own thread gives the same file as on its model thread.
    collect("m2", &["--model-thread", "no"]);
    assert_eq!(
        std::fs::read(dir.path().join("m.csv")).unwrap(),
        std::fs::read(dir.path().join("m2.csv")).unwrap(),
        "--model-thread yes and no differ"
    );
    let rows = csv_rows(&dir.path().join("m.csv"));
    // Every interval's instructions, the tail included, are its vector's.
    let sums = vector_sums(&dir.path().join("m.bb"));
    assert!(sums.len() > 5);
    let insns: Vec<f64> = rows.iter().map(|r| r["instructions"]).collect();
    assert_eq!(insns, sums);
    let total = |c: &str| rows.iter().map(|r| r[c]).sum::<f64>();
    let cg = Command::new("valgrind")
        .current_dir(dir.path())
        .args([
            "--tool=cachegrind",
            "--cache-sim=yes",
            "--cachegrind-out-file=/dev/null",
        ])
        .args(["--D1=32768,8,64", "--LL=1048576,16,64", "--I1=32768,8,64"])
        .args(gzip)
        .stdout(Stdio::null())
        .output()
        .expect("valgrind runs");
    assert!(cg.status.success());
    let cg = String::from_utf8_lossy(&cg.stderr);
    let near = |ours: f64, theirs: f64, rel: f64, what: &str| {
        assert!(
            (ours - theirs).abs() <= rel * theirs,
            "{what}: ours {ours}, cachegrind {theirs}"
        );
    };
    near(
        total("loads") + total("stores"),
        cachegrind_total(&cg, "D   refs"),
        0.03,
        "loads + stores",
    );
    near(
        total("l1d_misses"),
        cachegrind_total(&cg, "D1  misses"),
        0.05,
        "L1D misses",
    );
    let l2 = total("l2_misses");
    let cg_l2 = cachegrind_total(&cg, "LLd misses");
    assert!(
        (l2 - cg_l2).abs() <= (0.10 * cg_l2).max(0.01 * total("instructions") / 1000.0),
        "L2 misses: ours {l2}, cachegrind {cg_l2}"
    );
    // Sanity of the other columns: gzip takes branches, mispredicts some, touches pages.
    let per_k = |c: &str| 1000.0 * total(c) / total("instructions");
    assert!(
        (20.0..300.0).contains(&per_k("taken_branches")),
        "{}",
        per_k("taken_branches")
    );
    assert!(
        per_k("branch_mispredicts") > 0.1 && per_k("branch_mispredicts") < per_k("taken_branches")
    );
    assert!(rows.iter().all(|r| r["pages"] >= 1.0));
}

#[test]
fn a_forked_child_is_not_followed() {
    // QEMU user mode forks itself with the plugin's state: the child (which runs guest code
    // without exec) must neither wait for the model thread, which fork does not copy, nor
    // write into the parent's files or counters.
    let dir = tempfile::tempdir().unwrap();
    let exe = crate::collect_cli::build(dir.path(), "gcc", "forks.c", "forks", &["-O1"]);
    let run = |name: &str, child_works: bool| {
        let mut cmd = bbv();
        cmd.current_dir(dir.path())
            .args(["collect", "--tail", "--interval-size", "1000000"])
            .args([
                "--bb-out-file",
                &format!("{name}.bb"),
                "--pc-out-file",
                "pc",
            ])
            .args(["--metrics-out-file", &format!("{name}.csv"), "--"])
            .arg(&exe);
        if !child_works {
            cmd.arg("idle-child");
        }
        // Its own process group, so that a hang ends QEMU's forked child too (once one kept
        // a core busy for the rest of the test run).
        std::os::unix::process::CommandExt::process_group(&mut cmd, 0);
        let mut child = cmd.stdout(Stdio::piped()).spawn().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while child.try_wait().unwrap().is_none() {
            if std::time::Instant::now() > deadline {
                let _ = Command::new("kill")
                    .args(["-KILL", "--", &format!("-{}", child.id())])
                    .status();
                let _ = child.wait();
                panic!("bbv collect on a forking guest hangs");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let out = child.wait_with_output().unwrap();
        assert_status(&out, 0);
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "child exited with 7\n"
        );
        let rows = csv_rows(&dir.path().join(format!("{name}.csv")));
        let sums = vector_sums(&dir.path().join(format!("{name}.bb")));
        let insns: Vec<f64> = rows.iter().map(|r| r["instructions"]).collect();
        assert_eq!(insns, sums, "{name}: metrics and vectors disagree");
        assert!(rows.iter().all(|r| r["loads"] + r["stores"] > 0.0));
        sums.iter().sum::<f64>()
    };
    // The child's work (three times the parent's) is not in the parent's files.
    let (busy, idle) = (run("busy", true), run("idle", false));
    assert!(
        (busy - idle).abs() < 0.01 * idle,
        "with a busy child {busy} instructions, with an idle one {idle}"
    );
    // A shell running a command (fork, then exec) was refused before: its block table had the
    // child's lines in it.
    let out = bbv()
        .current_dir(dir.path())
        .args([
            "collect",
            "--bb-out-file",
            "sh.bb",
            "--pc-out-file",
            "sh.pc",
            "--",
        ])
        .args(["/bin/sh", "-c", "ls / > /dev/null; echo done"])
        .output()
        .unwrap();
    assert_status(&out, 0);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "done\n");
}

/// Pairs `A B` per line of a SimPoint output file.
fn pairs(path: &Path) -> Vec<(f64, usize)> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let mut it = l.split_whitespace();
            (
                it.next().unwrap().parse().unwrap(),
                it.next().unwrap().parse::<f64>().unwrap() as usize,
            )
        })
        .collect()
}

/// validation.json's metric errors recomputed from metrics.csv, simpoint.simpoints,
/// simpoint.weights and simpoint.labels, straight from the definitions in docs/run.md.
fn recompute(dir: &Path) -> Vec<(String, [f64; 7])> {
    let rows = csv_rows(&dir.join("metrics.csv"));
    let points = pairs(&dir.join("simpoint.simpoints"));
    let weights: HashMap<usize, f64> = pairs(&dir.join("simpoint.weights"))
        .into_iter()
        .map(|(w, c)| (c, w))
        .collect();
    let labels: Vec<usize> = pairs(&dir.join("simpoint.labels"))
        .into_iter()
        .map(|(l, _)| l as usize)
        .collect();
    let mut out = Vec::new();
    // Every column after instructions is a rate metric.
    for &name in &bbv_profile::METRIC_COLUMNS[1..] {
        let rate: Vec<f64> = rows
            .iter()
            .map(|r| 1000.0 * r[name] / r["instructions"])
            .collect();
        let full = 1000.0 * rows.iter().map(|r| r[name]).sum::<f64>()
            / rows.iter().map(|r| r["instructions"]).sum::<f64>();
        let mut est = 0.0;
        let mut var = 0.0;
        let mut worst = 0.0;
        for &(p, c) in &points {
            let p = p as usize;
            let w = weights[&c];
            est += w * rate[p];
            let members: Vec<f64> = (0..rows.len())
                .filter(|&i| labels[i] == c)
                .map(|i| rate[i])
                .collect();
            let n = members.len() as f64;
            let mean = members.iter().sum::<f64>() / n;
            var += w * w * members.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
            worst += w * members
                .iter()
                .map(|x| (x - rate[p]).abs())
                .fold(0.0, f64::max);
        }
        let n = rate.len() as f64;
        let mean = rate.iter().sum::<f64>() / n;
        let sd = (rate.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let k = points.len() as f64;
        out.push((
            name.to_string(),
            [
                full,
                est,
                (est - full).abs(),
                var.sqrt(),
                1.96 * var.sqrt(),
                worst,
                sd / k.sqrt(),
            ],
        ));
    }
    out
}

/// Per point of `dir`: its cluster, its distance from the cluster's mean L2-miss and
/// misprediction rates (each over the run's rate, squared and summed, as docs/run.md defines
/// `--pick metrics`), and the least such distance of any member.
fn typical_scores(dir: &Path) -> Vec<(usize, f64, f64)> {
    let rows = csv_rows(&dir.join("metrics.csv"));
    let labels: Vec<usize> = pairs(&dir.join("simpoint.labels"))
        .into_iter()
        .map(|(l, _)| l as usize)
        .collect();
    let names = ["l2_misses", "branch_mispredicts"];
    let total = |name: &str| rows.iter().map(|r| r[name]).sum::<f64>();
    let full = names.map(|n| total(n) / total("instructions"));
    let rate = |i: usize, m: usize| rows[i][names[m]] / rows[i]["instructions"];
    let mut out = Vec::new();
    for (p, c) in pairs(&dir.join("simpoint.simpoints")) {
        let members: Vec<usize> = (0..rows.len()).filter(|&i| labels[i] == c).collect();
        let mean =
            [0, 1].map(|m| members.iter().map(|&i| rate(i, m)).sum::<f64>() / members.len() as f64);
        let score = |i: usize| -> f64 {
            (0..2)
                .filter(|&m| full[m] > 0.0)
                .map(|m| ((rate(i, m) - mean[m]) / full[m]).powi(2))
                .sum()
        };
        let best = members
            .iter()
            .map(|&i| score(i))
            .fold(f64::INFINITY, f64::min);
        out.push((c, score(p as usize), best));
    }
    out.sort_by_key(|x| x.0);
    out
}

/// The first-order CPI estimate `--pick strata` ranks intervals by (docs/run.md).
fn cpi_estimate(row: &HashMap<String, f64>) -> f64 {
    0.5 + (10.0 * row["l1d_misses"] + 70.0 * row["l2_misses"] + 16.0 * row["branch_mispredicts"])
        / row["instructions"]
}

/// `strata`'s clusters against the centroid run `centroid` of the same program: each a part of
/// one cluster, cut only where the cluster's estimates spread by more than 15%, within it
/// unless a single interval; points and weights as docs/run.md says.
fn assert_strata(centroid: &Path, strata: &Path) {
    let rows = csv_rows(&strata.join("metrics.csv"));
    let est: Vec<f64> = rows.iter().map(cpi_estimate).collect();
    let insns: Vec<f64> = rows.iter().map(|r| r["instructions"]).collect();
    let labels = |d: &Path| -> Vec<usize> {
        pairs(&d.join("simpoint.labels"))
            .into_iter()
            .map(|(l, _)| l as usize)
            .collect()
    };
    let (cl, sl) = (labels(centroid), labels(strata));
    assert_eq!(cl.len(), est.len());
    let weight_of = |d: &Path| -> HashMap<usize, f64> {
        pairs(&d.join("simpoint.weights"))
            .into_iter()
            .map(|(w, c)| (c, w))
            .collect()
    };
    let (cw, sw) = (weight_of(centroid), weight_of(strata));
    let cv = |m: &[usize]| {
        let w: f64 = m.iter().map(|&i| insns[i]).sum();
        let mean = m.iter().map(|&i| insns[i] * est[i]).sum::<f64>() / w;
        let var = m
            .iter()
            .map(|&i| insns[i] * (est[i] - mean).powi(2))
            .sum::<f64>()
            / w;
        (mean, var.sqrt() / mean)
    };
    let mut cut = 0;
    for (&c, &weight) in &cw {
        let members: Vec<usize> = (0..cl.len()).filter(|&i| cl[i] == c).collect();
        let parts: std::collections::BTreeSet<usize> = members.iter().map(|&i| sl[i]).collect();
        assert_eq!(
            parts.len() > 1,
            cv(&members).1 > 0.15,
            "cluster {c}: {parts:?}"
        );
        cut += usize::from(parts.len() > 1);
        let total: f64 = members.iter().map(|&i| insns[i]).sum();
        for s in parts {
            let m: Vec<usize> = (0..sl.len()).filter(|&i| sl[i] == s).collect();
            assert!(
                m.iter().all(|&i| cl[i] == c),
                "stratum {s} outside cluster {c}"
            );
            let (mean, spread) = cv(&m);
            assert!(m.len() == 1 || spread <= 0.15, "stratum {s}: {spread}");
            let share = m.iter().map(|&i| insns[i]).sum::<f64>() / total;
            let w = sw[&s] / sw.values().sum::<f64>();
            assert!(
                (w - weight * share).abs() < 2e-5,
                "stratum {s}: {w} vs {}",
                weight * share
            );
            let (point, _) = pairs(&strata.join("simpoint.simpoints"))
                .into_iter()
                .find(|&(_, c2)| c2 == s)
                .unwrap();
            let best = m
                .iter()
                .map(|&i| (est[i] - mean).abs())
                .fold(f64::INFINITY, f64::min);
            assert!(
                (est[point as usize] - mean).abs() <= best + 1e-12,
                "stratum {s}"
            );
        }
    }
    eprintln!("--pick strata cut {cut} of {} clusters", cw.len());
}

/// Checks `dir/validation.json` against [`recompute`] and returns it.
pub(crate) fn assert_validation_recomputes(dir: &Path) -> serde_json::Value {
    let v = json(&dir.join("validation.json"));
    let metrics = v["metrics"].as_array().unwrap();
    let ours = recompute(dir);
    assert_eq!(metrics.len(), ours.len());
    for (m, (name, want)) in metrics.iter().zip(&ours) {
        assert_eq!(m["name"], name.as_str());
        let got = [
            "full",
            "estimate",
            "abs_error",
            "std_error",
            "band95",
            "worst_case",
            "random_sampling_std_error",
        ]
        .map(|f| m[f].as_f64().unwrap());
        for (g, w) in got.iter().zip(want) {
            // simpoint.weights holds 6 significant digits: differences up to a few millionths
            // of the rates' scale.
            let scale = w.abs().max(want[0].abs()).max(1e-3);
            assert!((g - w).abs() <= 1e-5 * scale, "{name}: {got:?} vs {want:?}");
        }
    }
    assert!(v["bbv_error"].as_f64().unwrap() > 0.0);
    v
}

#[test]
fn validation_recomputes_from_the_run_files_and_target_error_chooses_k() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    text_input(&input, 600_000);
    let run = |out: &str, extra: &[&str]| {
        let o = bbv()
            .current_dir(dir.path())
            .args(["run", "--interval", "2000000", "--max-k", "8", "-o", out])
            .args(extra)
            .args(["--", "gzip", "-9", "-c", input.to_str().unwrap()])
            .stdout(Stdio::null())
            .output()
            .unwrap();
        assert_status(&o, 0);
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    let text = run("v", &["--validate"]);
    assert!(text.contains("estimate errors at k = "), "{text}");
    let d = dir.path().join("v");
    let v = assert_validation_recomputes(&d);
    let k = v["k"].as_u64().unwrap();
    let s = json(&d.join("summary.json"));
    assert_eq!(s["k"].as_u64(), Some(k));
    // The default choice is SimPoint's: `bbv simpoint` on the run's vectors writes the same files.
    let out = bbv()
        .current_dir(&d)
        .args(["simpoint", "bb.out", "--max-k", "8", "-o", "again"])
        .output()
        .unwrap();
    assert_status(&out, 0);
    for ext in ["simpoints", "weights", "labels"] {
        assert_eq!(
            std::fs::read(d.join(format!("simpoint.{ext}"))).unwrap(),
            std::fs::read(d.join(format!("again.{ext}"))).unwrap(),
            "{ext}"
        );
    }
    // --pick metrics: the same clusters and weights, each point the member whose L2 misses
    // and mispredictions are nearest its cluster's mean (recomputed here), and the estimates
    // recomputed from the files.
    let text = run("p", &["--pick", "metrics"]);
    assert!(text.contains("nearest its cluster's mean"), "{text}");
    let p = dir.path().join("p");
    assert_eq!(assert_validation_recomputes(&p)["pick"], "metrics");
    assert_eq!(v["pick"], "centroid");
    for ext in ["weights", "labels"] {
        assert_eq!(
            std::fs::read(d.join(format!("simpoint.{ext}"))).unwrap(),
            std::fs::read(p.join(format!("simpoint.{ext}"))).unwrap(),
            "{ext}"
        );
    }
    assert_ne!(
        std::fs::read(d.join("simpoint.simpoints")).unwrap(),
        std::fs::read(p.join("simpoint.simpoints")).unwrap(),
        "some cluster's typical interval is not its nearest to the centre"
    );
    let (picked, nearest) = (typical_scores(&p), typical_scores(&d));
    for ((c, score, best), (c2, centroid_score, _)) in picked.iter().zip(&nearest) {
        assert_eq!(c, c2);
        assert!(
            *score <= best * (1.0 + 1e-9),
            "cluster {c}: {score} > {best}"
        );
        assert!(score <= centroid_score, "cluster {c}");
    }
    // --pick strata: every cluster of the centroid run cut into strata of like CPI estimate
    // (recomputed here from metrics.csv), each stratum's point nearest its mean and its weight
    // its cluster's shared by instructions; the estimates recomputed from the files.
    let text = run("s", &["--pick", "strata"]);
    assert!(text.contains("cut into strata"), "{text}");
    let st = dir.path().join("s");
    assert_eq!(assert_validation_recomputes(&st)["pick"], "strata");
    assert_strata(&d, &st);
    // --every-k: SimPoint's rule over k = 1..8 (`bbv simpoint -k 1:8` writes the same files),
    // every k in bic.csv, and the summary says so.
    run("e", &["--every-k"]);
    let e = dir.path().join("e");
    let out = bbv()
        .current_dir(&e)
        .args(["simpoint", "bb.out", "-k", "1:8", "-o", "again"])
        .output()
        .unwrap();
    assert_status(&out, 0);
    for ext in ["simpoints", "weights", "labels"] {
        assert_eq!(
            std::fs::read(e.join(format!("simpoint.{ext}"))).unwrap(),
            std::fs::read(e.join(format!("again.{ext}"))).unwrap(),
            "--every-k {ext}"
        );
    }
    let bic = std::fs::read_to_string(e.join("bic.csv")).unwrap();
    let ks: Vec<&str> = bic
        .lines()
        .skip(1)
        .map(|l| l.split(',').next().unwrap())
        .collect();
    assert_eq!(ks, ["1", "2", "3", "4", "5", "6", "7", "8"]);
    assert_eq!(json(&e.join("summary.json"))["every_k"], true);
    assert_eq!(json(&d.join("summary.json")).get("every_k"), None);
    let text = std::fs::read_to_string(e.join("summary.txt")).unwrap();
    assert!(text.contains("k chosen by BIC over every k"), "{text}");
    // Without --validate there is no validation.
    run("plain", &[]);
    assert!(!dir.path().join("plain/validation.json").exists());
    assert!(!dir.path().join("plain/metrics.csv").exists());
    // A loose target: the k with the fewest points whose every metric meets it and whose
    // predicted CPI band (given for every k) is within it.
    let text = run("t", &["--target-error", "20"]);
    let t = json(&dir.path().join("t/validation.json"));
    let by_k = t["by_k"].as_array().unwrap();
    assert_eq!(by_k.len(), 8, "every k from 1 to --max-k is tried");
    let band = |row: &serde_json::Value| row["predicted_band_pct"].as_f64().unwrap();
    assert!(by_k.iter().all(|r| band(r) > 0.0 && band(r).is_finite()));
    let meets = |row: &serde_json::Value| {
        band(row) <= 20.0
            && row["metrics"].as_array().unwrap().iter().all(|m| {
                m["abs_error"].as_f64().unwrap() <= 0.01
                    || m["rel_error"].as_f64().is_some_and(|e| e <= 0.20)
            })
    };
    let fewest = by_k
        .iter()
        .filter(|r| meets(r))
        .min_by_key(|r| (r["points"].as_u64(), r["k"].as_u64()))
        .expect("some k meets 20%");
    assert_eq!(t["k"], fewest["k"]);
    assert!(t["k_rule"].as_str().unwrap().contains("--target-error 20%"));
    let said = format!("CPI band predicted for these points: ±{:.2}%", band(fewest));
    assert!(text.contains(&said), "{text}");
    // A target no k meets: the nearest k, and the warning says so before the summary.
    let text = run("tight", &["--target-error", "0.01"]);
    let warned = text.find("bbv: warning: --target-error 0.01% not met by any k up to 8");
    let summary = text.find("instructions: ");
    assert!(warned.is_some() && warned < summary, "{text}");
    assert!(text.contains("--max-k or shorter intervals"), "{text}");
}

#[test]
fn bad_metrics_options_exit_2_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [&[&str]; 10] = [
        &["run", "--validate", "--l1d", "48K,12,64"],
        &["run", "--pick", "median"],
        &["run", "--validate", "--l2", "1M,16,128"],
        &["run", "--l1d", "16K,4,64"],
        &["run", "--target-error", "0"],
        &["run", "--target-error=-1"],
        &["collect", "--metrics-out-file", "m", "--instr-count-only"],
        &["collect", "--l2", "3M,16,64", "--metrics-out-file", "m"],
        &["collect", "--model-thread", "no"],
        &["collect", "--metrics-calls-only"],
    ];
    for args in cases {
        let out = bbv()
            .current_dir(dir.path())
            .args(args)
            .args(["--", "true"])
            .output()
            .unwrap();
        assert_status(&out, 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.lines().count() <= 4, "{args:?}: {err}");
    }
    assert_eq!(
        std::fs::read_dir(dir.path()).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn the_bench_probe_calls_the_plugin_but_records_nothing() {
    // `--metrics-calls-only` (bbv bench collect's floor) registers the metrics' callbacks and
    // returns from them at once: the rows are cut as usual, with no access counted.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    text_input(&input, 300_000);
    let out = bbv()
        .current_dir(dir.path())
        .args(["collect", "--metrics-calls-only", "--metrics-out-file", "m"])
        .args([
            "--interval-size",
            "2000000",
            "--bb-out-file",
            "bb",
            "--pc-out-file",
            "pc",
        ])
        .args(["--", "gzip", "-9", "-c", input.to_str().unwrap()])
        .stdout(Stdio::null())
        .output()
        .unwrap();
    assert_status(&out, 0);
    let rows = csv_rows(&dir.path().join("m"));
    let vectors = std::fs::read_to_string(dir.path().join("bb"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with('T'))
        .count();
    assert!(vectors > 3, "{vectors} intervals");
    assert_eq!(rows.len(), vectors);
    for r in &rows {
        assert_eq!(
            (r["loads"], r["stores"], r["l1d_misses"]),
            (0.0, 0.0, 0.0),
            "{r:?}"
        );
    }
}

#[test]
fn identical_runs_write_identical_files() {
    // The same command twice in the same folder: every file of the run directory, the
    // replay's included, the same bytes (validation.json's sums once followed a HashMap's
    // order, which changes from process to process).
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in");
    text_input(&input, 600_000);
    let guest = ["--", "gzip", "-9", "-c", input.to_str().unwrap()];
    let mut runs = Vec::new();
    for _ in 0..2 {
        let out = dir.path().join("o");
        let _ = std::fs::remove_dir_all(&out);
        for args in [
            &[
                "run",
                "--interval",
                "2000000",
                "--max-k",
                "8",
                "--validate",
                "--pick",
                "metrics",
                "-o",
                "o",
            ][..],
            &["replay", "o"][..],
        ] {
            let o = bbv()
                .current_dir(dir.path())
                .args(args)
                .args(guest)
                .stdout(Stdio::null())
                .output()
                .unwrap();
            assert_status(&o, 0);
        }
        runs.push(crate::common::contents(&out));
    }
    let names: Vec<_> = runs[0].keys().collect();
    assert!(
        names.iter().any(|p| p.ends_with("validation.json")),
        "{names:?}"
    );
    assert!(
        names.iter().any(|p| p.ends_with("replay.json")),
        "{names:?}"
    );
    assert_eq!(names, runs[1].keys().collect::<Vec<_>>());
    for (path, bytes) in &runs[0] {
        assert!(&runs[1][path] == bytes, "{} differs", path.display());
    }
}
