//! `bbv bench threads`: what multi-threaded regions cost. `bbv run --regions looppoint` (the
//! plugin's slices, `global.bb`, clustering, markers) against `bbv collect` on the same
//! programs: an OpenMP program with phases and real threaded programs (xz -T2, pigz -p 2).
//! Target: at most 1.3x.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::measure::{in_temp_root, median, time, tool, Workload};

/// Runs the benchmark in a temporary folder under `dir`.
pub fn run(runs: usize, dir: &Path) -> Result<()> {
    in_temp_root(dir, "threads", |root| bench(runs.max(1), root))
}

/// The OpenMP program of the tests, built with gcc -fopenmp.
fn build_omp(root: &Path) -> Result<String> {
    const SRC: &str = include_str!("../../cli/tests/guests/omp_phases.c");
    let src = root.join("omp.c");
    std::fs::write(&src, SRC)?;
    let out = root.join("omp");
    let st = Command::new(tool("gcc")?)
        .args(["-O2", "-fopenmp", "-fno-math-errno", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .context("cannot run gcc")?;
    if !st.success() {
        bail!("gcc -fopenmp failed (scripts/setup installs gcc)");
    }
    Ok(out.to_string_lossy().into_owned())
}

fn bench(runs: usize, root: &Path) -> Result<()> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let omp = build_omp(root)?;
    let input = root.join("input");
    let qemu_bin = std::fs::read(tool("qemu-x86_64")?)?;
    let half = &qemu_bin[..qemu_bin.len().min(6_000_000)];
    std::fs::write(&input, [half, half].concat())?;
    let workloads = [
        Workload {
            name: "omp 2 threads",
            argv: vec![omp.clone(), "100".into()],
            env: vec![("OMP_NUM_THREADS", "2")],
        },
        Workload {
            name: "omp 4 threads",
            argv: vec![omp, "100".into()],
            env: vec![("OMP_NUM_THREADS", "4")],
        },
        Workload {
            name: "xz -T2",
            argv: vec![
                s(&tool("xz")?),
                "-T2".into(),
                "--block-size=2MiB".into(),
                "-6".into(),
                "-c".into(),
                s(&input),
            ],
            env: vec![],
        },
        Workload {
            name: "pigz -p 2",
            argv: vec![
                s(&tool("pigz")?),
                "-p".into(),
                "2".into(),
                "-9".into(),
                "-c".into(),
                s(&input),
            ],
            env: vec![],
        },
    ];
    let bbv = s(&std::env::current_exe().context("cannot find the bbv binary")?);
    println!(
        "bbv bench threads: median wall time of {runs} run(s), in rounds (one of each, then again)"
    );
    println!("(target: bbv run --regions looppoint at most 1.3x bbv collect)\n");
    println!(
        "{:<14} {:>10} {:>12} {:>8}",
        "program", "collect s", "looppoint s", "ratio"
    );
    let mut worst = 0f64;
    for w in &workloads {
        let collect: Vec<String> = [&bbv, "collect", "--bb-out-file", "bb.%p", "--pc-out-file"]
            .iter()
            .map(|x| x.to_string())
            .chain(["pc.%p".into(), "--".into()])
            .chain(w.argv.iter().cloned())
            .collect();
        let out = s(&root.join("run"));
        let looppoint: Vec<String> = [&bbv, "run", "--regions", "looppoint", "-o", &out, "--"]
            .iter()
            .map(|x| x.to_string())
            .chain(w.argv.iter().cloned())
            .collect();
        let (mut a, mut b) = (Vec::new(), Vec::new());
        for _ in 0..runs {
            a.push(time(&collect, &w.env, root)?);
            b.push(time(&looppoint, &w.env, root)?);
            let _ = std::fs::remove_dir_all(root.join("run"));
        }
        let (a, b) = (median(a), median(b));
        worst = worst.max(b / a);
        println!("{:<14} {:>10.2} {:>12.2} {:>7.2}x", w.name, a, b, b / a);
    }
    println!("\nworst: {worst:.2}x (target <= 1.3x)");
    Ok(())
}
