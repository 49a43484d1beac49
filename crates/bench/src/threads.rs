//! `bbv bench threads`: what multi-threaded regions cost. `bbv run --regions looppoint` (the
//! plugin's slices, `global.bb`, clustering, markers) against `bbv collect` on the same
//! programs: OpenMP programs with phases (one with a dynamic schedule) and real threaded
//! programs (xz -T2, pigz -p 2), target at most 1.3x; and the deterministic schedule
//! (`--schedule deterministic`, QEMU 9.1+) against the host's, in CPU time (target at most
//! 1.3x) and wall time (one thread runs at a time).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::measure::{in_temp_root, median, time, time_and_cpu, tool, Workload};

/// Runs the benchmark in a temporary folder under `dir`, every run under `qemu` (default:
/// qemu-x86_64 from PATH; the deterministic schedule needs QEMU 9.1 or later).
pub fn run(runs: usize, dir: &Path, qemu: Option<&Path>) -> Result<()> {
    in_temp_root(dir, "threads", |root| bench(runs.max(1), root, qemu))
}

/// An OpenMP program of the tests (`omp_phases.c`, `omp_dynamic.c`), built with gcc -fopenmp.
fn build_omp(root: &Path, name: &str, src_text: &str) -> Result<String> {
    let src = root.join(format!("{name}.c"));
    std::fs::write(&src, src_text)?;
    let out = root.join(name);
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

fn bench(runs: usize, root: &Path, qemu: Option<&Path>) -> Result<()> {
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let phases = build_omp(
        root,
        "omp",
        include_str!("../../cli/tests/guests/omp_phases.c"),
    )?;
    let dynamic = build_omp(
        root,
        "omp_dyn",
        include_str!("../../cli/tests/guests/omp_dynamic.c"),
    )?;
    let input = root.join("input");
    let qemu_bin = std::fs::read(tool("qemu-x86_64")?)?;
    let half = &qemu_bin[..qemu_bin.len().min(6_000_000)];
    std::fs::write(&input, [half, half].concat())?;
    let omp = |name, prog: &String, rounds: &str, threads| Workload {
        name,
        argv: vec![prog.clone(), rounds.into()],
        env: vec![("OMP_NUM_THREADS", threads)],
    };
    let workloads = [
        omp("omp 2 threads", &phases, "100", "2"),
        omp("omp 4 threads", &phases, "100", "4"),
        omp("omp dynamic 2", &dynamic, "20", "2"),
        omp("omp dynamic 4", &dynamic, "20", "4"),
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
    let qemu_args: Vec<String> = match qemu {
        Some(q) => vec!["--qemu".into(), s(q)],
        None => Vec::new(),
    };
    println!(
        "bbv bench threads: median wall and CPU time of {runs} run(s), in rounds (one of each, then again)"
    );
    println!("(targets: bbv run --regions looppoint at most 1.3x bbv collect in wall time; --schedule deterministic at most 1.3x --schedule host in CPU time)\n");
    println!(
        "{:<14} {:>10} {:>12} {:>7} {:>14} {:>9} {:>9} {:>9} {:>9}",
        "program",
        "collect s",
        "looppoint s",
        "ratio",
        "deterministic s",
        "wall",
        "host cpu",
        "det cpu",
        "cpu"
    );
    let (mut worst, mut worst_cpu) = (0f64, 0f64);
    for w in &workloads {
        let with = |head: &[&str]| -> Vec<String> {
            let mut v: Vec<String> = head.iter().map(|x| x.to_string()).collect();
            v.extend(qemu_args.iter().cloned());
            v.push("--".into());
            v.extend(w.argv.iter().cloned());
            v
        };
        let out = s(&root.join("run"));
        let collect = with(&[
            &bbv,
            "collect",
            "--bb-out-file",
            "bb.%p",
            "--pc-out-file",
            "pc.%p",
        ]);
        let looppoint = |schedule| {
            with(&[
                &bbv,
                "run",
                "--regions",
                "looppoint",
                "--schedule",
                schedule,
                "-o",
                &out,
            ])
        };
        let (host, det) = (looppoint("host"), looppoint("deterministic"));
        let (mut a, mut b, mut c, mut bc, mut cc) = (vec![], vec![], vec![], vec![], vec![]);
        let mut det_ok = true;
        for _ in 0..runs {
            a.push(time(&collect, &w.env, root)?);
            let (wall, cpu) = time_and_cpu(&host, &w.env, root)?;
            b.push(wall);
            bc.push(cpu);
            let _ = std::fs::remove_dir_all(root.join("run"));
            if det_ok {
                match time_and_cpu(&det, &w.env, root) {
                    Ok((wall, cpu)) => {
                        c.push(wall);
                        cc.push(cpu);
                    }
                    // A QEMU before 9.1 cannot (bbv says so).
                    Err(_) => det_ok = false,
                }
                let _ = std::fs::remove_dir_all(root.join("run"));
            }
        }
        let (a, b, bc) = (median(a), median(b), median(bc));
        worst = worst.max(b / a);
        if det_ok {
            let (c, cc) = (median(c), median(cc));
            worst_cpu = worst_cpu.max(cc / bc);
            println!(
                "{:<14} {:>10.2} {:>12.2} {:>6.2}x {:>14.2} {:>8.2}x {:>9.2} {:>9.2} {:>8.2}x",
                w.name,
                a,
                b,
                b / a,
                c,
                c / b,
                bc,
                cc,
                cc / bc
            );
        } else {
            println!(
                "{:<14} {:>10.2} {:>12.2} {:>6.2}x {:>14} {:>9} {:>9.2} {:>9} {:>9}",
                w.name,
                a,
                b,
                b / a,
                "-",
                "-",
                bc,
                "-",
                "-"
            );
        }
    }
    println!("\nworst: looppoint {worst:.2}x collect (target <= 1.3x)");
    if worst_cpu > 0.0 {
        println!("worst: deterministic {worst_cpu:.2}x host in CPU time (target <= 1.3x)");
    } else {
        println!(
            "deterministic: not measured (it needs QEMU 9.1 or later: --qemu, scripts/build-qemu)"
        );
    }
    Ok(())
}
