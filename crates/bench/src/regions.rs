//! `bbv bench regions`: how long `bbv regions DIR` takes on real runs of at least 10,000 intervals
//! (the bar is under 1 s), with its peak memory and the speed at which it reads `bb.out`,
//! the file its time grows with.

use std::path::Path;

use anyhow::{Context, Result};

use crate::measure::measure_bbv_with;
use crate::measure::{in_temp_root, make_input, median, time, tool, Workload};

/// Runs the benchmark in a temporary folder under `dir`.
pub fn run(intervals: u64, runs: usize, dir: &Path) -> Result<()> {
    in_temp_root(dir, "regions", |root| {
        bench(intervals.max(1), runs.max(1), root)
    })
}

/// A number field of a finished run's `summary.json`.
fn summary_field(dir: &Path, field: &str) -> Result<u64> {
    let path = dir.join(bbv_rundir::files::SUMMARY);
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("cannot read {}", path.display()))?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("{}: not JSON", path.display()))?;
    v[field]
        .as_u64()
        .with_context(|| format!("{}: no {field}", path.display()))
}

fn bbv_run(interval: u64, out: &Path, w: &Workload, extra: &[&str]) -> Result<f64> {
    let bbv = std::env::current_exe().context("cannot find the bbv binary")?;
    let mut all = vec![
        bbv.to_string_lossy().into_owned(),
        "run".into(),
        "--interval".into(),
        interval.to_string(),
        "-o".into(),
        out.to_string_lossy().into_owned(),
    ];
    all.extend(extra.iter().map(|s| s.to_string()));
    all.push("--".into());
    all.extend(w.argv.iter().cloned());
    time(&all, &w.env, out.parent().unwrap_or(out))
}

/// The real programs both benches record: gzip -9, xz -6 (a 4 MB text under `root`) and a
/// python3 script, whose interpreter runs many distinct blocks per interval.
pub fn workloads(root: &Path) -> Result<Vec<Workload>> {
    let text = root.join("input.txt");
    make_input(&text, 4_000_000)?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let python = crate::measure::python3()?;
    let script = "d = {}\nfor i in range(400000):\n    d[str(i * 7919 % 100003)] = i\n\
                  print(sum(sorted(d.values())[::97]), len(sorted(d, key=len)))";
    Ok(vec![
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
    ])
}

/// A run recorded with at least the target number of intervals.
pub struct Recorded {
    pub out: std::path::PathBuf,
    pub instructions: u64,
    pub interval: u64,
    pub intervals: u64,
    pub k: u64,
    pub seconds: f64,
}

/// Records `w` as `bbv run EXTRA` into `root/run-TAG`, with an interval giving at least
/// `target` intervals (a coarse run finds the program's length first).
pub fn record(
    w: &Workload,
    tag: usize,
    target: u64,
    root: &Path,
    extra: &[&str],
) -> Result<Recorded> {
    let probe = root.join(format!("probe-{tag}"));
    bbv_run(10_000_000, &probe, w, &[]).with_context(|| format!("cannot profile {}", w.name))?;
    let instructions = summary_field(&probe, "instructions")?;
    let _ = std::fs::remove_dir_all(&probe);
    let interval = (instructions / (target + target / 50)).max(1000);
    let out = root.join(format!("run-{tag}"));
    let seconds =
        bbv_run(interval, &out, w, extra).with_context(|| format!("cannot profile {}", w.name))?;
    Ok(Recorded {
        intervals: summary_field(&out, "intervals")?,
        k: summary_field(&out, "k")?,
        out,
        instructions,
        interval,
        seconds,
    })
}

fn bench(target: u64, runs: usize, root: &Path) -> Result<()> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
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
    for (i, w) in workloads(root)?.iter().enumerate() {
        let r = record(w, i, target, root, &[])?;
        let out = &r.out;
        let bb_mb = std::fs::metadata(out.join(bbv_rundir::files::BB))?.len() as f64 / 1e6;
        let mut walls = Vec::new();
        let mut peak = 0f64;
        for _ in 0..runs {
            let args = ["regions".to_string(), s(out)];
            let m = measure_bbv_with(&args, std::process::Stdio::null())?;
            walls.push(m.wall);
            peak = peak.max(m.max_rss_mb);
        }
        let wall = median(walls);
        worst = worst.max(wall);
        println!(
            "{:<13} {:>14} {:>9} {:>9} {:>4} {:>9.1} {:>9.1} {:>10.3} {:>9.0} {:>8.0}",
            w.name,
            r.instructions,
            r.interval,
            r.intervals,
            r.k,
            bb_mb,
            r.seconds,
            wall,
            peak,
            bb_mb / wall
        );
        let _ = std::fs::remove_dir_all(out);
    }
    println!("\nslowest `bbv regions`: {worst:.3} s (target < 1 s)");
    println!("(its time grows with bb.out, which it reads once; a run of 10,000 intervals of 1e8");
    println!(" instructions holds more blocks per interval: divide its bb.out size by MB/s above)");
    Ok(())
}
