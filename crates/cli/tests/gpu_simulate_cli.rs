//! `bbv gpu simulate` with the real Accel-Sim (scripts/accelsim): a list built from the shipped
//! traces sampled, its picks and the whole list simulated, the estimate recomputed here from
//! simulation.json's cycles and weights.csv's weights; and what bad input gets.

use std::path::{Path, PathBuf};

use crate::common::{bbv, built_by, data_dir};

/// `dir/kernelslist.g` of links `kernel-N.traceg` to copies (in `dir/traces`) of the shipped
/// traces: 8 matrixmul, 8 vectoradd A and B alternating, 8 matrixmul.
fn list(dir: &Path) -> PathBuf {
    let traces = dir.join("traces");
    std::fs::create_dir_all(&traces).unwrap();
    let acc = data_dir().join("accelsim");
    let names = ["mm", "va", "vb"];
    for (name, t) in names.iter().zip([
        "matrixmul-32-32-trace-aba4ea32",
        "vectoradd-100-32-trace-0c94f481",
        "vectoradd-100-32-trace-12f5cb88",
    ]) {
        std::fs::copy(
            acc.join(t).join("kernel-1.traceg"),
            traces.join(format!("{name}.traceg")),
        )
        .unwrap();
    }
    let order: Vec<usize> = (0..24)
        .map(|i| match i {
            8..=15 => 1 + i % 2,
            _ => 0,
        })
        .collect();
    let mut lines = String::new();
    for (n, t) in order.iter().enumerate() {
        let name = format!("kernel-{}.traceg", n + 1);
        std::os::unix::fs::symlink(
            traces.join(format!("{}.traceg", names[*t])),
            dir.join(&name),
        )
        .unwrap();
        lines.push_str(&name);
        lines.push('\n');
    }
    let l = dir.join("kernelslist.g");
    std::fs::write(&l, lines).unwrap();
    l
}

fn run(args: &[&str]) -> std::process::Output {
    bbv().args(args).output().unwrap()
}

/// scripts/accelsim's folder, and in a temporary folder the test list sampled (with `extra`
/// options) into `s`: (the folder, the list, the sample).
fn sampled(extra: &[&str]) -> (String, tempfile::TempDir, PathBuf, PathBuf) {
    let acc = built_by("accelsim");
    let work = tempfile::tempdir().unwrap();
    let list = list(work.path());
    let s = work.path().join("s");
    let mut args = vec![
        "gpu",
        "sample",
        list.to_str().unwrap(),
        "-o",
        s.to_str().unwrap(),
    ];
    args.extend(extra);
    let o = run(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    (acc.to_string_lossy().into_owned(), work, list, s)
}

#[test]
fn picks_and_the_full_list_are_simulated_and_the_estimate_recomputed() {
    let (a, _work, list, s) = sampled(&[]);
    let (a, l, sd) = (a.as_str(), list.to_str().unwrap(), s.to_str().unwrap());
    let page_before = std::fs::read_to_string(s.join("report.html")).unwrap();
    let o = run(&[
        "gpu",
        "simulate",
        sd,
        "--accelsim",
        a,
        "--full",
        l,
        "--jobs",
        "2",
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("configuration SM6_TITANX (sm_61)"), "{out}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(s.join("simulation.json")).unwrap()).unwrap();
    // Every pick simulated as itself: simulation.json's launches are weights.csv's rows.
    let weights = std::fs::read_to_string(s.join("weights.csv")).unwrap();
    let rows: Vec<(u64, String, f64)> = weights
        .lines()
        .skip(1)
        .map(|r| {
            let f: Vec<&str> = r.split(',').collect();
            (
                f[0].parse().unwrap(),
                f[1].to_string(),
                f[2].parse().unwrap(),
            )
        })
        .collect();
    let launches = v["launches"].as_array().unwrap();
    assert_eq!(launches.len(), rows.len());
    assert!(rows.len() >= 2, "{weights}");
    let mut estimate = 0.0;
    for (l, (launch, kernel, weight)) in launches.iter().zip(&rows) {
        assert_eq!(l["launch"].as_u64().unwrap(), *launch);
        assert_eq!(l["kernel"].as_str().unwrap(), kernel);
        let cycles = l["cycles"].as_u64().unwrap();
        assert!(cycles > 1000, "{l}");
        // Warmed by the 4 launches before it, where the trace has them.
        assert_eq!(l["warmup_launches"].as_u64().unwrap(), (*launch).min(4));
        estimate += weight * cycles as f64;
    }
    // Weights: each pick stands for its members' instructions; together, the whole list's.
    let full = v["full_cycles"].as_f64().unwrap();
    assert_eq!(v["full_launches"].as_u64(), Some(24));
    let error = 100.0 * (estimate - full) / full;
    assert!(
        (estimate - v["estimate_cycles"].as_f64().unwrap()).abs() < 1e-6 * full,
        "{v}"
    );
    assert!(
        (error - v["error_pct"].as_f64().unwrap()).abs() < 1e-9,
        "{v}"
    );
    assert!(error.abs() < 2.0, "cycle error {error:.3}%: {v}");
    let est_insts: f64 = launches
        .iter()
        .zip(&rows)
        .map(|(l, r)| r.2 * l["instructions"].as_f64().unwrap())
        .sum();
    // The sample's page shows it in place of its note, the rest of the page as it was.
    let page = std::fs::read_to_string(s.join("report.html")).unwrap();
    assert!(page.contains("Simulated with Accel-Sim"), "{page}");
    assert!(page.contains(&format!("{error:+.2}%")));
    let head = |p: &str| p[..p.find("<section id=\"simulation\"").unwrap()].to_string();
    assert_eq!(head(&page), head(&page_before));
    let full_insts = v["full_instructions"].as_f64().unwrap();
    assert!((est_insts - full_insts).abs() <= 1e-9 * full_insts, "{v}");
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    let (a, work, _list, s) = sampled(&["--method", "sieve"]);
    let (a, sd) = (a.as_str(), s.to_str().unwrap());
    let page = std::fs::read_to_string(s.join("report.html")).unwrap();
    let short = work.path().join("short.g");
    std::fs::write(&short, "kernel-1.traceg\nkernel-2.traceg\n").unwrap();
    let sh = short.to_str().unwrap();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["--accelsim", "/nonexistent/accelsim"],
            "scripts/accelsim",
        ),
        (
            vec!["--accelsim", a, "--config", "SM7_QV100"],
            "models sm_70, the traces are sm_61",
        ),
        (
            vec!["--accelsim", a, "--config", "NOPE"],
            "no configuration NOPE",
        ),
        (
            vec!["--accelsim", a, "--full", sh],
            "not the trace that was sampled",
        ),
        (
            vec!["--accelsim", a, "--jobs", "0"],
            "--jobs must be at least 1",
        ),
    ];
    for (extra, message) in &cases {
        let mut args = vec!["gpu", "simulate", sd];
        args.extend(extra);
        let o = run(&args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{extra:?}: {err}");
        assert!(err.contains(message), "{extra:?}: {err}");
        assert!(!s.join("simulation.json").exists(), "{extra:?}");
        assert_eq!(
            std::fs::read_to_string(s.join("report.html")).unwrap(),
            page
        );
    }
    // weights.csv edited by hand: a launch picked twice, a launch past the trace's end.
    let weights = s.join("weights.csv");
    let good = std::fs::read_to_string(&weights).unwrap();
    let lines: Vec<&str> = good.lines().collect();
    let first = lines[1].split_once(',').unwrap().1;
    let twice = format!("{}\n{}\n{}\n", lines[0], lines[1], lines[1]);
    let past = good.replacen(lines[1], &format!("99999999,{first}"), 1);
    for (text, message) in [(twice, "is picked twice"), (past, "past the end of")] {
        std::fs::write(&weights, &text).unwrap();
        let o = run(&["gpu", "simulate", sd, "--accelsim", a]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{message}: {err}");
        assert!(err.contains(message), "{message}: {err}");
        assert!(!s.join("simulation.json").exists());
    }
    std::fs::write(&weights, good).unwrap();
    // The traces moved after sampling: the sample's links point nowhere.
    std::fs::rename(work.path().join("traces"), work.path().join("moved")).unwrap();
    let o = run(&["gpu", "simulate", sd, "--accelsim", a]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the trace moved since bbv gpu sample"),
        "{err}"
    );
    assert!(!s.join("simulation.json").exists());
}
