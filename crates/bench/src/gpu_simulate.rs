//! `bbv bench gpu-simulate`: Accel-Sim on the launches `bbv gpu sample` picks against the whole
//! list, on lists of 50-200 launches built from the shipped single-launch traces in different
//! phase patterns, for both sampling methods: launches, picks, cycle error, speedups.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use bbv_rundir::gpu_simulation::GpuSimulationFile;

use crate::measure::in_temp_root;

/// The shipped traces: matrixmul and the two vectoradd traces (the same kernel, other data).
const TRACES: [&str; 3] = [
    "matrixmul-32-32-trace-aba4ea32",
    "vectoradd-100-32-trace-0c94f481",
    "vectoradd-100-32-trace-12f5cb88",
];

/// A list's phases: (trace index into [`TRACES`], launches), repeated in order.
pub struct Pattern {
    /// What it shows.
    pub name: &'static str,
    /// Runs of launches.
    pub phases: Vec<Vec<usize>>,
}

/// The lists measured: long phases, a fine interleave, phases of growing length.
pub fn patterns() -> Vec<Pattern> {
    let run = |t: usize, n: usize| vec![t; n];
    let alternate = |n: usize| (0..n).map(|i| 1 + i % 2).collect::<Vec<_>>();
    vec![
        Pattern {
            name: "phases: (20 matrixmul, 20 vectoradd A/B alternating) x 3",
            phases: (0..3).flat_map(|_| [run(0, 20), alternate(20)]).collect(),
        },
        Pattern {
            name: "interleaved: (matrixmul, vectoradd A, vectoradd B) x 50",
            phases: vec![vec![0, 1, 2]; 50],
        },
        Pattern {
            name: "growing: 5 matrixmul, 10 vectoradd A, 15 matrixmul, 20 vectoradd B, 25 matrixmul, 25 vectoradd A/B",
            phases: vec![run(0, 5), run(1, 10), run(0, 15), run(2, 20), run(0, 25), alternate(25)],
        },
    ]
}

/// Writes `dir/kernelslist.g` for `pattern`: launch N is a link `kernel-N.traceg` to its trace.
pub fn build_list(data: &Path, pattern: &Pattern, dir: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let mut lines = String::new();
    for (n, t) in pattern.phases.iter().flatten().enumerate() {
        let target = data
            .join("accelsim")
            .join(TRACES[*t])
            .join("kernel-1.traceg");
        if !target.is_file() {
            bail!("{} is missing (../shared/data or --data)", target.display());
        }
        let name = format!("kernel-{}.traceg", n + 1);
        std::os::unix::fs::symlink(std::fs::canonicalize(&target)?, dir.join(&name))?;
        lines.push_str(&name);
        lines.push('\n');
    }
    let list = dir.join("kernelslist.g");
    std::fs::write(&list, lines)?;
    Ok(list)
}

/// Runs `bbv ARGS`, failing with its stderr.
fn bbv(args: &[&str]) -> Result<()> {
    let exe = std::env::current_exe()?;
    let out = std::process::Command::new(exe)
        .args(args)
        .output()
        .context("cannot start bbv")?;
    if !out.status.success() {
        bail!(
            "bbv {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}

/// Runs the benchmark with traces from `data`, `warmup` launches before each pick.
pub fn run(data: &Path, warmup: usize, dir: &Path) -> Result<()> {
    in_temp_root(dir, "gpu-simulate", |root| {
        println!("bbv gpu sample --method bbv|sieve, bbv gpu simulate --warmup-launches {warmup} --full (Accel-Sim)");
        println!("list | launches | method | picks | cycles estimate | cycles full | error | IPC error | speedup (launches, instructions, simulation time)");
        let mut errors = Vec::new();
        for (i, p) in patterns().iter().enumerate() {
            let list_dir = root.join(format!("list-{i}"));
            let list = build_list(data, p, &list_dir)?;
            let l = list.to_string_lossy().into_owned();
            for method in ["bbv", "sieve"] {
                let out = root.join(format!("sample-{i}-{method}"));
                let o = out.to_string_lossy().into_owned();
                bbv(&["gpu", "sample", &l, "-o", &o, "--method", method])?;
                let w = warmup.to_string();
                bbv(&["gpu", "simulate", &o, "--full", &l, "--warmup-launches", &w])?;
                let v = GpuSimulationFile::read(&out)?
                    .with_context(|| format!("{}: no simulation.json", out.display()))?;
                let full = v
                    .full
                    .context("bbv gpu simulate --full wrote no full run")?;
                errors.push(full.error_pct.abs());
                println!(
                    "{} | {} | {method} | {} | {:.0} | {} | {:+.2}% | {:+.2}% | {:.1}x, {:.1}x, {:.1}x",
                    p.name,
                    full.full_launches,
                    v.launches.len(),
                    v.estimate_cycles,
                    full.full_cycles,
                    full.error_pct,
                    full.ipc_error_pct,
                    full.speedup_launches,
                    full.speedup_instructions,
                    full.speedup_wall,
                );
            }
        }
        let worst = errors.iter().copied().fold(0.0, f64::max);
        println!(
            "mean |error| {:.2}%, worst {worst:.2}% (bar: each within 2%)",
            errors.iter().sum::<f64>() / errors.len().max(1) as f64
        );
        Ok(())
    })
}
