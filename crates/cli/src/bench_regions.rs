//! `bbv bench regions`: how long `bbv regions DIR` takes on real runs of at least 10,000 intervals
//! (the bar is under 1 s), with its peak memory and the speed at which it reads `bb.out`,
//! the file its time grows with.

use std::path::Path;

use anyhow::{Context, Result};

use crate::bench::measure_bbv_with;
use crate::bench_collect::{in_temp_root, make_input, median, time, tool, Workload};

/// Runs the benchmark in a temporary folder under `dir`.
pub fn run(intervals: u64, runs: usize, dir: &Path) -> Result<()> {
    in_temp_root(dir, "regions", |root| {
        bench(intervals.max(1), runs.max(1), root)
    })
}

/// A number field of a finished run's `summary.json`.
fn summary_field(dir: &Path, field: &str) -> Result<u64> {
    let path = dir.join("summary.json");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    v[field]
        .as_u64()
        .with_context(|| format!("{}: no {field}", path.display()))
}

fn bbv_run(interval: u64, out: &Path, argv: &[String], env: &[(&str, &str)]) -> Result<f64> {
    let bbv = std::env::current_exe().context("cannot find the bbv binary")?;
    let mut all = vec![
        bbv.to_string_lossy().into_owned(),
        "run".into(),
        "--interval".into(),
        interval.to_string(),
        "-o".into(),
        out.to_string_lossy().into_owned(),
        "--".into(),
    ];
    all.extend(argv.iter().cloned());
    time(&all, env, out.parent().unwrap_or(out))
}

fn bench(target: u64, runs: usize, root: &Path) -> Result<()> {
    let text = root.join("input.txt");
    make_input(&text, 4_000_000)?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let python = match Path::new("/usr/bin/python3") {
        p if p.is_file() => p.to_path_buf(),
        _ => tool("python3")?,
    };
    // An interpreter runs many distinct blocks per interval, which makes bb.out large.
    let script = "d = {}\nfor i in range(400000):\n    d[str(i * 7919 % 100003)] = i\n\
                  print(sum(sorted(d.values())[::97]), len(sorted(d, key=len)))";
    let workloads = [
        Workload {
            name: "gzip -9",
            argv: vec![s(&tool("gzip")?), "-9".into(), "-c".into(), s(&text)],
            env: vec![],
        },
        Workload {
            name: "xz -6",
            argv: vec![s(&tool("xz")?), "-6".into(), "-c".into(), s(&text)],
            env: vec![],
        },
        Workload {
            name: "python3 dict",
            argv: vec![s(&python), "-c".into(), script.into()],
            env: vec![("PYTHONHASHSEED", "0")],
        },
    ];
    println!("bbv bench regions: `bbv regions DIR` on real runs of at least {target} intervals,");
    println!("median of {runs} run(s) (target: under 1 s at 10,000 intervals)\n");
    println!(
        "{:<13} {:>14} {:>9} {:>9} {:>4} {:>9} {:>9} {:>10} {:>9} {:>8}",
        "program",
        "instructions",
        "interval",
        "intervals",
        "k",
        "bb.out MB",
        "run s",
        "regions s",
        "peak MB",
        "MB/s"
    );
    let mut worst = 0f64;
    for (i, w) in workloads.iter().enumerate() {
        let (name, argv, env) = (w.name, &w.argv, &w.env);
        // A coarse run finds the length, so that the recorded run reaches the target.
        let probe = root.join(format!("probe-{i}"));
        bbv_run(10_000_000, &probe, argv, env).with_context(|| format!("cannot profile {name}"))?;
        let total = summary_field(&probe, "instructions")?;
        let _ = std::fs::remove_dir_all(&probe);
        let interval = (total / (target + target / 50)).max(1000);
        let out = root.join(format!("run-{i}"));
        let run_s =
            bbv_run(interval, &out, argv, env).with_context(|| format!("cannot profile {name}"))?;
        let got = summary_field(&out, "intervals")?;
        let k = summary_field(&out, "k")?;
        let bb_mb = std::fs::metadata(out.join("bb.out"))?.len() as f64 / 1e6;
        let mut walls = Vec::new();
        let mut peak = 0f64;
        for _ in 0..runs {
            let args = ["regions".to_string(), s(&out)];
            let m = measure_bbv_with(&args, std::process::Stdio::null())?;
            walls.push(m.wall);
            peak = peak.max(m.max_rss_mb);
        }
        let wall = median(walls);
        worst = worst.max(wall);
        println!(
            "{:<13} {:>14} {:>9} {:>9} {:>4} {:>9.1} {:>9.1} {:>10.3} {:>9.0} {:>8.0}",
            name,
            total,
            interval,
            got,
            k,
            bb_mb,
            run_s,
            wall,
            peak,
            bb_mb / wall
        );
        let _ = std::fs::remove_dir_all(&out);
    }
    println!("\nslowest `bbv regions`: {worst:.3} s (target < 1 s)");
    println!("(its time grows with bb.out, which it reads once; a run of 10,000 intervals of 1e8");
    println!(" instructions holds more blocks per interval: divide its bb.out size by MB/s above)");
    Ok(())
}
