//! `bbv bench simulate`: the whole chain on real programs (`bbv run`, `bbv trace`,
//! `bbv simulate --full`) and the table that says how good the points are: ChampSim's CPI
//! estimated from the regions against the whole run's, the speedups and ChampSim's speed.
//! ChampSim simulates about 0.1 million instructions a second on this 2-core machine: a
//! workload of 50 million instructions takes about ten minutes; run it in the background.

use std::path::Path;

use anyhow::{Context, Result};

use crate::measure::{in_temp_root, time, Workload};
use crate::study;

/// How `bbv run` chooses the regions.
#[derive(Clone)]
pub struct Choice {
    pub interval: u64,
    pub warmup: u64,
    /// `--max-k` (None: bbv run's default).
    pub max_k: Option<usize>,
    /// `--target-error PCT` instead of the BIC rule.
    pub target_error: Option<f64>,
    /// `--every-k`.
    pub every_k: bool,
    /// `--pick`: strata, metrics or centroid.
    pub pick: String,
    /// `bbv simulate --champsim`.
    pub champsim: Option<std::path::PathBuf>,
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
    in_temp_root(dir, "simulate", |root| {
        println!(
            "bbv run {}, bbv trace, bbv simulate --full (programs of a billion instructions \
             and more: intervals of {LARGE_INTERVAL})",
            choice.args().join(" ")
        );
        println!("program | instructions | k (points) | CPI estimate | 95% band | CPI full | error | our model's 95% band: L2 misses, mispredicts | speedup (instructions, time) | ChampSim speed");
        let mut errors = Vec::new();
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
            let e = chain(&p.workload, i, &c, root).with_context(|| p.workload.name)?;
            errors.push(e.abs());
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

/// One workload through the chain; prints its row and returns its error in percent.
fn chain(w: &Workload, i: usize, choice: &Choice, root: &Path) -> Result<f64> {
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
    step(vec!["trace".into(), d.clone()])?;
    let mut simulate = vec!["simulate".into(), d.clone(), "--full".into()];
    if let Some(c) = &choice.champsim {
        simulate.extend(["--champsim".into(), c.to_string_lossy().into_owned()]);
    }
    let sim_seconds = step(simulate)?;
    let read = |name: &str| -> Result<serde_json::Value> {
        let text = std::fs::read_to_string(dir.join(name))?;
        Ok(serde_json::from_str(&text)?)
    };
    let sim = read(bbv_rundir::files::SIMULATION)?;
    let summary = read(bbv_rundir::files::SUMMARY)?;
    let f = |v: &serde_json::Value| v.as_f64().unwrap_or(f64::NAN);
    let instructions = summary["instructions"].as_u64().unwrap_or(0);
    let error = f(&sim["error_pct"]);
    let validation = read(bbv_rundir::files::VALIDATION)?;
    // The band as a share of the full run's value, for the metrics nearest to what moves CPI.
    let band = |name: &str| -> String {
        let m = validation["metrics"]
            .as_array()
            .and_then(|ms| ms.iter().find(|m| m["name"] == name));
        match m {
            Some(m) => format!(
                "±{:.1}%",
                100.0 * f(&m["band95"]) / f(&m["full"]).abs().max(1e-12)
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
        f(&sim["estimate_cpi"]),
        f(&sim["band_pct"]),
        f(&sim["full_cpi"]),
        error,
        band("l2_misses"),
        band("branch_mispredicts"),
        f(&sim["speedup_instructions"]),
        f(&sim["speedup_wall"]),
        instructions as f64 / sim_seconds / 1000.0,
    );
    Ok(error)
}
