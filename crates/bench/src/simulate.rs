//! `bbv bench simulate`: the whole chain on real programs (`bbv run`, `bbv trace`,
//! `bbv simulate --full`) and the table that says how good the points are: ChampSim's CPI
//! estimated from the regions against the whole run's, the speedups and ChampSim's speed.
//! ChampSim simulates about 0.1 million instructions a second on this 2-core machine: a
//! workload of 50 million instructions takes about ten minutes; run it in the background.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use crate::measure::{in_temp_root, time, Workload};
use crate::study;

/// How `bbv run` chooses the regions, and the simulators.
#[derive(Clone, clap::Args)]
pub struct Choice {
    /// Instructions per interval.
    #[arg(long, default_value_t = 2_000_000)]
    interval: u64,
    /// Instructions of warmup before each region (xz needs 32 million: docs/champsim.md).
    #[arg(long, default_value_t = 32_000_000)]
    warmup: u64,
    /// Largest k (default: bbv run's, 30, or 100 with --target-error).
    #[arg(long = "max-k")]
    max_k: Option<usize>,
    /// Choose k by `bbv run --target-error PCT` instead of SimPoint's BIC rule.
    #[arg(long = "target-error", value_name = "PCT")]
    target_error: Option<f64>,
    /// `bbv run --every-k`: SimPoint's BIC rule over every k, not its binary search.
    #[arg(long = "every-k")]
    every_k: bool,
    /// How `bbv run` picks each cluster's point (`--pick`): strata (clusters cut into strata
    /// of like CPI estimate, a point each), metrics (the interval whose L2 misses and
    /// mispredictions are nearest its cluster's mean) or centroid (SimPoint's).
    #[arg(long, value_name = "strata|metrics|centroid", default_value = "strata", value_parser = ["strata", "metrics", "centroid"])]
    pick: String,
    /// `bbv simulate --champsim`: another ChampSim build, e.g. the heartbeat one that
    /// tools/champsim/intervals.py reads (with BBV_BENCH_KEEP=1 to keep the runs).
    #[arg(long, value_name = "PATH")]
    champsim: Option<PathBuf>,
    /// Also simulate the same regions, and the whole run, on Sniper driven live from the
    /// replay (`bbv simulate --simulator sniper --full`; scripts/sniper's build): Sniper's
    /// estimate and error beside ChampSim's.
    #[arg(long)]
    sniper: bool,
    /// Sniper alone (implies --sniper): ChampSim's half, which costs about as much again,
    /// is skipped; `bbv run` is deterministic, so a run without this flag gives ChampSim's
    /// figures for the same regions.
    #[arg(long = "sniper-only")]
    sniper_only: bool,
}

impl Choice {
    fn args(&self) -> Vec<String> {
        let mut v: Vec<String> = [
            "--interval".to_string(),
            self.interval.to_string(),
            "--warmup".into(),
            self.warmup.to_string(),
            "--pick".into(),
            self.pick.clone(),
            // validation.json: our own model's error bands beside ChampSim's error.
            "--validate".into(),
        ]
        .into();
        if let Some(k) = self.max_k {
            v.extend(["--max-k".to_string(), k.to_string()]);
        }
        if let Some(t) = self.target_error {
            v.extend(["--target-error".to_string(), t.to_string()]);
        }
        if self.every_k {
            v.push("--every-k".into());
        }
        v
    }
}

/// Runs the chain on every program of the study chosen (`only`; default: every one under a
/// billion instructions) as `choice` says, in `dir`; a program this machine lacks is named and
/// skipped.
pub fn run(choice: Choice, scale: f64, only: &[String], dir: &Path) -> Result<()> {
    let choice = Choice {
        sniper: choice.sniper || choice.sniper_only,
        ..choice
    };
    in_temp_root(dir, "simulate", |root| {
        println!(
            "bbv run {}, bbv trace, bbv simulate --full (programs of a billion instructions \
             and more: intervals of {LARGE_INTERVAL})",
            choice.args().join(" ")
        );
        println!("program | instructions | k (points) | CPI estimate | 95% band | CPI full | error | our model's 95% band: L2 misses, mispredicts | speedup (instructions, time) | ChampSim speed");
        if choice.sniper {
            println!("  and Sniper on the same regions: CPI estimate | CPI full | error | speedup (instructions, Sniper CPU time) | replay and Sniper wall time");
        }
        let mut errors = Vec::new();
        let mut sniper_errors = Vec::new();
        let mut skipped = Vec::new();
        for (i, key) in study::KEYS.iter().enumerate() {
            let named = only.iter().any(|o| o == key);
            if !named && (!only.is_empty() || key.ends_with("-large")) {
                continue;
            }
            let p = match study::program(key, root, scale) {
                Ok(p) => p,
                Err(e) => {
                    println!("{key}: skipped: {e:#}");
                    skipped.push(*key);
                    continue;
                }
            };
            let mut c = choice.clone();
            if p.large {
                c.interval = LARGE_INTERVAL;
            }
            let (e, s) = chain(&p.workload, i, &c, root).with_context(|| p.workload.name)?;
            errors.extend(e.map(f64::abs));
            sniper_errors.extend(s.map(f64::abs));
        }
        if choice.sniper {
            println!(
                "Sniper: mean |error| {:.2}% over {} programs (bar: each within 3%)",
                sniper_errors.iter().sum::<f64>() / sniper_errors.len().max(1) as f64,
                sniper_errors.len()
            );
        }
        if choice.sniper_only {
            return Ok(());
        }
        println!(
            "mean |error| {:.2}% over {} programs (bar: each within 3%){}",
            errors.iter().sum::<f64>() / errors.len().max(1) as f64,
            errors.len(),
            if skipped.is_empty() {
                String::new()
            } else {
                format!("; skipped: {}", skipped.join(", "))
            }
        );
        Ok(())
    })
}

/// Intervals of the study's programs of a billion instructions and more.
pub const LARGE_INTERVAL: u64 = 10_000_000;

/// One workload through the chain; prints its row (and Sniper's) and returns its error in
/// percent (none with `sniper_only`) and Sniper's.
fn chain(
    w: &Workload,
    i: usize,
    choice: &Choice,
    root: &Path,
) -> Result<(Option<f64>, Option<f64>)> {
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let dir = root.join(format!("run-{i}"));
    let d = dir.to_string_lossy().into_owned();
    let step = |args: Vec<String>| -> Result<f64> {
        let mut argv = vec![exe.clone()];
        argv.extend(args);
        argv.push("--".into());
        argv.extend(w.argv.iter().cloned());
        time(&argv, &w.env, root)
    };
    let mut run = vec!["run".to_string(), "-o".into(), d.clone()];
    run.extend(choice.args());
    step(run)?;
    // Sniper first, on a copy of the run (its simulation.json is its own), so that both
    // simulators get exactly the same regions.
    let sniper = if choice.sniper {
        let copy = root.join(format!("run-{i}-sniper"));
        copy_dir(&dir, &copy)?;
        let c = copy.to_string_lossy().into_owned();
        let secs = step(vec![
            "simulate".into(),
            c,
            "--simulator".into(),
            "sniper".into(),
            "--full".into(),
        ])?;
        Some((copy, secs))
    } else {
        None
    };
    let sniper_result = || match &sniper {
        Some((copy, secs)) => sniper_row(copy, *secs).map(Some),
        None => Ok(None),
    };
    if choice.sniper_only {
        let summary = read_json(&dir, bbv_rundir::files::SUMMARY)?;
        println!(
            "{} | {} | {} | ChampSim skipped (--sniper-only)",
            w.name, summary["instructions"], summary["k"]
        );
        return Ok((None, sniper_result()?));
    }
    step(vec!["trace".into(), d.clone()])?;
    let mut simulate = vec!["simulate".into(), d.clone(), "--full".into()];
    if let Some(c) = &choice.champsim {
        simulate.extend(["--champsim".into(), c.to_string_lossy().into_owned()]);
    }
    let sim_seconds = step(simulate)?;
    let read = |name: &str| read_json(&dir, name);
    let sim = read(bbv_rundir::files::SIMULATION)?;
    let summary = read(bbv_rundir::files::SUMMARY)?;
    let instructions = summary["instructions"].as_u64().unwrap_or(0);
    let error = num(&sim["error_pct"]);
    let validation = read(bbv_rundir::files::VALIDATION)?;
    // The band as a share of the full run's value, for the metrics nearest to what moves CPI.
    let band = |name: &str| -> String {
        let m = validation["metrics"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == name));
        match m {
            Some(m) => format!(
                "±{:.1}%",
                100.0 * num(&m["band95"]) / num(&m["full"]).abs().max(1e-12)
            ),
            None => "-".into(),
        }
    };
    println!(
        "{} | {} | {} ({}) | {:.4} | ±{:.2}% | {:.4} | {:+.2}% | {}, {} | {:.1}x, {:.1}x | {:.0}k instructions/s",
        w.name,
        instructions,
        summary["k"],
        sim["regions"].as_array().map_or(0, Vec::len),
        num(&sim["estimate_cpi"]),
        num(&sim["band_pct"]),
        num(&sim["full_cpi"]),
        error,
        band("l2_misses"),
        band("branch_mispredicts"),
        num(&sim["speedup_instructions"]),
        num(&sim["speedup_wall"]),
        instructions as f64 / sim_seconds / 1000.0,
    );
    Ok((Some(error), sniper_result()?))
}

/// A JSON file of a run folder.
fn read_json(dir: &Path, name: &str) -> Result<serde_json::Value> {
    let path = dir.join(name);
    let text = std::fs::read_to_string(&path).with_context(|| format!("{}", path.display()))?;
    Ok(serde_json::from_str(&text)?)
}

/// A JSON number (NaN when absent, so that a missing figure reads as such in the table).
fn num(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// Prints Sniper's row from the copy's simulation.json and returns its error in percent.
fn sniper_row(copy: &Path, secs: f64) -> Result<f64> {
    let s = read_json(copy, bbv_rundir::files::SIMULATION)?;
    let e = num(&s["error_pct"]);
    println!(
        "  Sniper | {:.4} | {:.4} | {:+.2}% | {:.1}x, {:.1}x | {:.0} s",
        num(&s["estimate_cpi"]),
        num(&s["full_cpi"]),
        e,
        num(&s["speedup_instructions"]),
        num(&s["speedup_cpu"]),
        secs
    );
    Ok(e)
}

/// Copies a run folder (files and sub-folders) to `to`, which must not exist.
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir(to).with_context(|| format!("cannot create {}", to.display()))?;
    for entry in std::fs::read_dir(from).with_context(|| from.display().to_string())? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_dir(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)
                .with_context(|| format!("cannot copy {}", entry.path().display()))?;
        }
    }
    Ok(())
}
