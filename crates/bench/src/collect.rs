//! `bbv bench collect`: native, bare QEMU, `bbv collect` (default and --exact), `bbv replay` and
//! valgrind's exp-bbv side by side on real programs, with median slowdowns and the ratios of the
//! targets.

use std::path::Path;

use anyhow::{Context, Result};

use crate::measure::{
    geomean, in_temp_root, make_input, median, time, time_and_cpu, tool, Workload,
};

/// Removes the files the timed commands wrote into `root`.
fn remove_outputs(root: &Path) -> Result<()> {
    for e in std::fs::read_dir(root)? {
        let p = e?.path();
        let n = p.file_name().unwrap_or_default().to_string_lossy();
        if ["bb.", "pc.", "vg.", "metrics."]
            .iter()
            .any(|p| n.starts_with(p))
        {
            let _ = std::fs::remove_file(&p);
        }
    }
    Ok(())
}

/// Profiles a workload once with `bbv run` (untimed) so that `bbv replay` has markers to watch.
/// The interval shrinks with `scale` so that small inputs still give complete intervals.
fn prepare_replay(bbv: &Path, w: &Workload, dir: &Path, scale: f64, qemu: &str) -> Result<()> {
    let interval = ((100_000_000.0 * scale.min(1.0)) as u64).max(1_000_000);
    let mut argv = vec![
        bbv.to_string_lossy().into_owned(),
        "run".into(),
        "--qemu".into(),
        qemu.into(),
        "--interval".into(),
        interval.to_string(),
        "-o".into(),
        dir.to_string_lossy().into_owned(),
        "--".into(),
    ];
    argv.extend(w.argv.iter().cloned());
    time(&argv, &w.env, dir.parent().unwrap_or(dir))
        .with_context(|| format!("cannot profile {} for the replay column", w.name))?;
    Ok(())
}

/// Runs the benchmark; `scale` multiplies the input sizes.
pub fn run(runs: usize, dir: &Path, scale: f64, qemu: Option<&Path>) -> Result<()> {
    let runs = runs.max(1);
    let qemu = match qemu {
        Some(q) => q.to_path_buf(),
        None => tool("qemu-x86_64")?,
    };
    in_temp_root(dir, "collect", |root| bench(runs, root, scale, &qemu))
}

/// The programs timed: three compressors on generated text and a python3 loop.
fn workloads(root: &Path, scale: f64) -> Result<Vec<Workload>> {
    let input = root.join("input.txt");
    let mb = |m: f64| ((m * scale * 1e6) as usize).max(10_000);
    make_input(&input, mb(4.0))?;
    let small = root.join("small.txt");
    make_input(&small, mb(1.5))?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let python = crate::measure::python3()?;
    let loops = ((1_500_000.0 * scale) as u64).max(1000);
    Ok(vec![
        Workload {
            name: "xz -9",
            argv: vec![s(&tool("xz")?), "-9".into(), "-c".into(), s(&small)],
            env: vec![],
        },
        Workload {
            name: "bzip2 -9",
            argv: vec![s(&tool("bzip2")?), "-9".into(), "-c".into(), s(&input)],
            env: vec![],
        },
        Workload {
            name: "gzip -9",
            argv: vec![s(&tool("gzip")?), "-9".into(), "-c".into(), s(&input)],
            env: vec![],
        },
        Workload {
            name: "python3 loop",
            argv: vec![
                s(&python),
                "-c".into(),
                format!("s = 0\nfor i in range({loops}):\n    s += i * i % 7\nprint(s)"),
            ],
            env: vec![("PYTHONHASHSEED", "0")],
        },
    ])
}

/// The columns, in order: the first is the baseline of every slowdown.
const MODES: [&str; 8] = [
    "native",
    "qemu",
    "collect",
    "collect --exact",
    "exp-bbv",
    "replay",
    "collect --metrics",
    "collect --metrics-calls-only",
];

/// The tools each mode runs the workload under.
struct Tools {
    bbv: String,
    qemu: String,
    valgrind: String,
}

impl Tools {
    /// The command line of `mode` before the workload's own; `profile` is `bbv run`'s output
    /// that `bbv replay` follows.
    fn prefix(&self, mode: &str, profile: &Path) -> Vec<String> {
        let (bbv, qemu) = (self.bbv.clone(), self.qemu.clone());
        match mode {
            "native" => vec![],
            "qemu" => vec![qemu],
            "replay" => vec![
                bbv,
                "replay".into(),
                "--qemu".into(),
                qemu,
                profile.to_string_lossy().into_owned(),
                "--".into(),
            ],
            "exp-bbv" => vec![
                self.valgrind.clone(),
                "--tool=exp-bbv".into(),
                "--bb-out-file=vg.bb.%p".into(),
                "--pc-out-file=vg.pc.%p".into(),
            ],
            _ => {
                let mut v = vec![bbv, "collect".into(), "--qemu".into(), qemu];
                v.extend(["--bb-out-file".into(), "bb.%p".into()]);
                v.extend(["--pc-out-file".into(), "pc.%p".into()]);
                if mode == "collect --exact" {
                    v.push("--exact".into());
                }
                if mode.starts_with("collect --metrics") {
                    v.extend(["--metrics-out-file".into(), "metrics.%p".into()]);
                }
                if mode == "collect --metrics-calls-only" {
                    v.push("--metrics-calls-only".into());
                }
                v.push("--".into());
                v
            }
        }
    }
}

/// Medians of `runs` rounds over every mode: wall seconds and CPU seconds per mode.
fn measure_modes(
    runs: usize,
    root: &Path,
    w: &Workload,
    tools: &Tools,
    profile: &Path,
) -> Result<(Vec<f64>, Vec<f64>)> {
    let argvs: Vec<Vec<String>> = MODES
        .iter()
        .map(|mode| {
            let mut argv = tools.prefix(mode, profile);
            argv.extend(w.argv.iter().cloned());
            argv
        })
        .collect();
    // Rounds over all modes rather than all runs of one mode after another: this machine's
    // speed drifts by tens of percent within minutes, which would otherwise land on one column.
    let mut times = vec![Vec::new(); MODES.len()];
    let mut cpus = vec![Vec::new(); MODES.len()];
    for _ in 0..runs {
        for ((argv, t), c) in argvs.iter().zip(&mut times).zip(&mut cpus) {
            let (wall, cpu) = time_and_cpu(argv, &w.env, root)?;
            t.push(wall);
            c.push(cpu);
            remove_outputs(root)?;
        }
    }
    Ok((
        times.into_iter().map(median).collect(),
        cpus.into_iter().map(median).collect(),
    ))
}

fn print_header(runs: usize, qemu: &str) {
    println!(
        "bbv bench collect: median wall time of {runs} run(s) per cell, slowdown = time / native"
    );
    println!(
        "QEMU: {qemu} ({})",
        bbv_collect::qemu_version(Path::new(qemu)).unwrap_or_default()
    );
    println!("(anchors: bare QEMU 1.8-9.1x and exp-bbv 16-47x on this machine kind; targets: default within");
    println!(" 1.5x of bare QEMU's slowdown, >= 4x faster than exp-bbv; --exact >= 2x faster than exp-bbv;");
    println!(" bbv replay of a bbv run profile (interval 1e8) <= 1.1x collect; --metrics-out-file (bbv run");
    println!(" --validate's metrics) <= 4x bare QEMU, geomean)\n");
    println!(
        "{:<14} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9} {:>11} {:>11} {:>11} {:>11} {:>11} {:>11}",
        "program",
        "native s",
        "qemu",
        "collect",
        "--exact",
        "exp-bbv",
        "replay",
        "metrics",
        "coll/qemu",
        "expbbv/coll",
        "expbbv/exact",
        "replay/coll",
        "metr/qemu",
        "calls/qemu"
    );
}

/// Every workload's ratios, for the closing geometric means.
#[derive(Default)]
struct Ratios {
    over_qemu: Vec<f64>,
    vs_exp: Vec<f64>,
    vs_exp_exact: Vec<f64>,
    replay: Vec<f64>,
    metrics: Vec<f64>,
    metrics_cpu: Vec<f64>,
    floor: Vec<f64>,
}

impl Ratios {
    /// Records and prints one workload's row from its median wall and CPU seconds per mode.
    fn row(&mut self, name: &str, med: &[f64], cpu: &[f64]) {
        // The metrics' model runs on a thread of its own: its CPU time is not its wall time.
        self.metrics_cpu.push(cpu[6] / cpu[1]);
        let sd: Vec<f64> = med.iter().map(|t| t / med[0]).collect();
        let (q, c, e, v, r, m, calls) = (sd[1], sd[2], sd[3], sd[4], sd[5], sd[6], sd[7]);
        self.metrics.push(m / q);
        self.floor.push(calls / q);
        self.over_qemu.push(c / q);
        self.vs_exp.push(v / c);
        self.vs_exp_exact.push(v / e);
        self.replay.push(r / c);
        println!(
            "{:<14} {:>8.2} {:>7.1}x {:>8.1}x {:>8.1}x {:>8.1}x {:>8.1}x {:>8.1}x {:>10.2}x {:>10.2}x {:>11.2}x {:>10.2}x {:>10.2}x {:>10.2}x",
            name,
            med[0],
            q,
            c,
            e,
            v,
            r,
            m,
            c / q,
            v / c,
            v / e,
            r / c,
            m / q,
            calls / q
        );
    }

    fn print(&self) {
        let worst = |v: &[f64], max: bool| {
            v.iter().copied().fold(
                if max { 0.0 } else { f64::INFINITY },
                if max { f64::max } else { f64::min },
            )
        };
        println!();
        println!(
            "default vs bare QEMU slowdown: geomean {:.2}x (target <= 1.5x), worst {:.2}x (target <= 2x)",
            geomean(&self.over_qemu),
            worst(&self.over_qemu, true)
        );
        println!(
            "exp-bbv / default:             geomean {:.2}x (target >= 4x), worst {:.2}x (target >= 3x)",
            geomean(&self.vs_exp),
            worst(&self.vs_exp, false)
        );
        println!(
            "exp-bbv / --exact:             geomean {:.2}x (target >= 2x)",
            geomean(&self.vs_exp_exact)
        );
        println!(
            "replay / default:              geomean {:.2}x, worst {:.2}x (target <= 1.1x)",
            geomean(&self.replay),
            worst(&self.replay, true)
        );
        println!(
            "--metrics-out-file / bare QEMU: geomean {:.2}x (target <= 4x), worst {:.2}x",
            geomean(&self.metrics),
            worst(&self.metrics, true)
        );
        println!(
            "  its CPU time / bare QEMU's:   geomean {:.2}x, worst {:.2}x (the cache model runs on a thread of its own)",
            geomean(&self.metrics_cpu),
            worst(&self.metrics_cpu, true)
        );
        println!(
            "  QEMU's calls alone / bare:    geomean {:.2}x, worst {:.2}x (the same callbacks returning at once: the floor under any\n                                 plugin that sees every access; calls/qemu column)",
            geomean(&self.floor),
            worst(&self.floor, true)
        );
    }
}

fn bench(runs: usize, root: &Path, scale: f64, qemu: &Path) -> Result<()> {
    let workloads = workloads(root, scale)?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    let bbv = std::env::current_exe().context("cannot find the bbv binary")?;
    let tools = Tools {
        bbv: s(&bbv),
        qemu: s(qemu),
        valgrind: s(&tool("valgrind")?),
    };
    print_header(runs, &tools.qemu);
    let mut ratios = Ratios::default();
    for (i, w) in workloads.iter().enumerate() {
        let profile = root.join(format!("profile-{i}"));
        prepare_replay(&bbv, w, &profile, scale, &tools.qemu)?;
        let (med, cpu) = measure_modes(runs, root, w, &tools, &profile)?;
        ratios.row(w.name, &med, &cpu);
    }
    ratios.print();
    Ok(())
}
