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

/// The programs measured: OpenMP with phases and with a dynamic schedule (2 and 4 threads),
/// xz -T2 and pigz -p 2 on 12 MB.
fn workloads(root: &Path) -> Result<Vec<Workload>> {
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
    let tool_on_input = |name, tool_name: &str, args: &[&str]| -> Result<Workload> {
        let mut argv = vec![s(&tool(tool_name)?)];
        argv.extend(args.iter().map(|a| a.to_string()));
        argv.push(s(&input));
        Ok(Workload {
            name,
            argv,
            env: vec![],
        })
    };
    Ok(vec![
        omp("omp 2 threads", &phases, "100", "2"),
        omp("omp 4 threads", &phases, "100", "4"),
        omp("omp dynamic 2", &dynamic, "20", "2"),
        omp("omp dynamic 4", &dynamic, "20", "4"),
        tool_on_input("xz -T2", "xz", &["-T2", "--block-size=2MiB", "-6", "-c"])?,
        tool_on_input("pigz -p 2", "pigz", &["-p", "2", "-9", "-c"])?,
    ])
}

/// One program's medians: collect's wall time, the host schedule's wall and CPU time, and the
/// deterministic schedule's (None when the QEMU cannot).
type Row = (f64, f64, f64, Option<(f64, f64)>);

fn measure(w: &Workload, runs: usize, root: &Path, qemu_args: &[String]) -> Result<Row> {
    let bbv = std::env::current_exe().context("cannot find the bbv binary")?;
    let bbv = bbv.to_string_lossy();
    let out = root.join("run").to_string_lossy().into_owned();
    let with = |head: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = head.iter().map(|x| x.to_string()).collect();
        v.extend(qemu_args.iter().cloned());
        v.push("--".into());
        v.extend(w.argv.iter().cloned());
        v
    };
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
    let (mut a, mut b, mut bc, mut c, mut cc) = (vec![], vec![], vec![], vec![], vec![]);
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
    let det = det_ok.then(|| (median(c), median(cc)));
    Ok((median(a), median(b), median(bc), det))
}

fn bench(runs: usize, root: &Path, qemu: Option<&Path>) -> Result<()> {
    let workloads = workloads(root)?;
    let qemu_args: Vec<String> = match qemu {
        Some(q) => vec!["--qemu".into(), q.to_string_lossy().into_owned()],
        None => Vec::new(),
    };
    println!(
        "bbv bench threads: median wall and CPU time of {runs} run(s), in rounds (one of each, then again)"
    );
    println!("(targets: bbv run --regions looppoint at most 1.3x bbv collect in wall time; --schedule deterministic at most 1.3x --schedule host in CPU time)\n");
    println!(
        "{:<14} {:>10} {:>12} {:>7} {:>15} {:>9} {:>9} {:>9} {:>9}",
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
        let (a, b, bc, det) = measure(w, runs, root, &qemu_args)?;
        worst = worst.max(b / a);
        match det {
            Some((c, cc)) => {
                worst_cpu = worst_cpu.max(cc / bc);
                println!(
                    "{:<14} {:>10.2} {:>12.2} {:>6.2}x {:>15.2} {:>8.2}x {:>9.2} {:>9.2} {:>8.2}x",
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
            }
            None => println!(
                "{:<14} {:>10.2} {:>12.2} {:>6.2}x {:>15} {:>9} {:>9.2} {:>9} {:>9}",
                w.name,
                a,
                b,
                b / a,
                "-",
                "-",
                bc,
                "-",
                "-"
            ),
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
