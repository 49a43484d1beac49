//! `bbv bench collect`: native, bare QEMU, `bbv collect` (default and --exact), `bbv replay` and
//! valgrind's exp-bbv side by side on real programs, with median slowdowns and the ratios of the
//! targets.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};

/// One program run the same way under every tool.
pub(crate) struct Workload {
    pub name: &'static str,
    pub argv: Vec<String>,
    pub env: Vec<(&'static str, &'static str)>,
}

/// A deterministic, compressible text: words drawn by an LCG from a fixed vocabulary.
pub(crate) fn make_input(path: &Path, bytes: usize) -> Result<()> {
    let words: Vec<String> = (0..4000u64)
        .map(|i| format!("{:x}", i.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 44))
        .collect();
    let mut text = String::with_capacity(bytes + 16);
    let mut x = 88172645463325252u64;
    while text.len() < bytes {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        text.push_str(&words[(x >> 33) as usize % words.len()]);
        text.push(if x & 0xf == 0 { '\n' } else { ' ' });
    }
    std::fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
}

pub(crate) fn tool(name: &str) -> Result<PathBuf> {
    bbv_collect::find_on_path(name)
        .with_context(|| format!("{name} not found on PATH (scripts/setup installs it)"))
}

/// Wall seconds of one run; the program must succeed.
pub(crate) fn time(argv: &[String], env: &[(&str, &str)], dir: &Path) -> Result<f64> {
    time_and_cpu(argv, env, dir).map(|(wall, _)| wall)
}

/// CPU seconds (user and system) used so far by this process's waited-for children.
fn children_cpu() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(ru.ru_utime) + secs(ru.ru_stime)
}

/// Wall and CPU seconds (of the run's whole process tree) of one run; it must succeed.
pub(crate) fn time_and_cpu(
    argv: &[String],
    env: &[(&str, &str)],
    dir: &Path,
) -> Result<(f64, f64)> {
    let cpu = children_cpu();
    let start = Instant::now();
    let st = Command::new(&argv[0])
        .args(&argv[1..])
        .envs(env.iter().copied())
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .with_context(|| format!("cannot run {}", argv[0]))?;
    let t = start.elapsed().as_secs_f64();
    if !st.success() {
        bail!("{} failed ({st})", argv.join(" "));
    }
    Ok((t, children_cpu() - cpu))
}

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn geomean(v: &[f64]) -> f64 {
    (v.iter().map(|x| x.ln()).sum::<f64>() / v.len() as f64).exp()
}

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

/// Runs `f` in a folder `bbv-NAME-bench-PID` made under `dir`, removed afterwards.
pub(crate) fn in_temp_root<T>(
    dir: &Path,
    name: &str,
    f: impl FnOnce(&Path) -> Result<T>,
) -> Result<T> {
    let root = dir.join(format!("bbv-{name}-bench-{}", std::process::id()));
    std::fs::create_dir_all(&root).with_context(|| format!("cannot create {}", root.display()))?;
    let result = f(&root);
    let _ = std::fs::remove_dir_all(&root);
    result
}

fn bench(runs: usize, root: &Path, scale: f64, qemu: &Path) -> Result<()> {
    let input = root.join("input.txt");
    let mb = |m: f64| ((m * scale * 1e6) as usize).max(10_000);
    make_input(&input, mb(4.0))?;
    let small = root.join("small.txt");
    make_input(&small, mb(1.5))?;
    let s = |p: &Path| p.to_string_lossy().into_owned();
    // Debian's interpreter (a version manager's shim on PATH would be a shell script).
    let python = match Path::new("/usr/bin/python3") {
        p if p.is_file() => p.to_path_buf(),
        _ => tool("python3")?,
    };
    let loops = ((1_500_000.0 * scale) as u64).max(1000);
    let workloads = [
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
    ];
    let bbv = std::env::current_exe().context("cannot find the bbv binary")?;
    let qemu = s(qemu);
    let valgrind = s(&tool("valgrind")?);
    let modes = [
        "native",
        "qemu",
        "collect",
        "collect --exact",
        "exp-bbv",
        "replay",
        "collect --metrics",
        "collect --metrics-calls-only",
    ];
    println!(
        "bbv bench collect: median wall time of {runs} run(s) per cell, slowdown = time / native"
    );
    println!(
        "QEMU: {qemu} ({})",
        bbv_collect::qemu_version(Path::new(&qemu)).unwrap_or_default()
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
    let (mut over_qemu, mut vs_exp, mut vs_exp_exact) = (Vec::new(), Vec::new(), Vec::new());
    let (mut replay_ratio, mut metrics_ratio) = (Vec::new(), Vec::new());
    let (mut metrics_cpu_ratio, mut floor_ratio) = (Vec::new(), Vec::new());
    for (i, w) in workloads.iter().enumerate() {
        let profile = root.join(format!("profile-{i}"));
        prepare_replay(&bbv, w, &profile, scale, &qemu)?;
        let argvs: Vec<Vec<String>> = modes
            .iter()
            .map(|&mode| {
                let mut argv: Vec<String> = match mode {
                    "native" => vec![],
                    "qemu" => vec![qemu.clone()],
                    "collect"
                    | "collect --exact"
                    | "collect --metrics"
                    | "collect --metrics-calls-only" => {
                        let mut v = vec![
                            s(&bbv),
                            "collect".into(),
                            "--qemu".into(),
                            qemu.clone(),
                            "--bb-out-file".into(),
                            "bb.%p".into(),
                        ];
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
                    "replay" => vec![
                        s(&bbv),
                        "replay".into(),
                        "--qemu".into(),
                        qemu.clone(),
                        s(&profile),
                        "--".into(),
                    ],
                    _ => vec![
                        valgrind.clone(),
                        "--tool=exp-bbv".into(),
                        "--bb-out-file=vg.bb.%p".into(),
                        "--pc-out-file=vg.pc.%p".into(),
                    ],
                };
                argv.extend(w.argv.iter().cloned());
                argv
            })
            .collect();
        // Rounds over all modes rather than all runs of one mode after another: this machine's
        // speed drifts by tens of percent within minutes, which would otherwise land on one column.
        let mut times = vec![Vec::new(); modes.len()];
        let mut cpus = vec![Vec::new(); modes.len()];
        for _ in 0..runs {
            for ((argv, t), c) in argvs.iter().zip(&mut times).zip(&mut cpus) {
                let (wall, cpu) = time_and_cpu(argv, &w.env, root)?;
                t.push(wall);
                c.push(cpu);
                remove_outputs(root)?;
            }
        }
        let cpu: Vec<f64> = cpus.into_iter().map(median).collect();
        // The metrics' model runs on a thread of its own: its CPU time is not its wall time.
        metrics_cpu_ratio.push(cpu[6] / cpu[1]);
        let med: Vec<f64> = times.into_iter().map(median).collect();
        let sd: Vec<f64> = med.iter().map(|t| t / med[0]).collect();
        let (q, c, e, v, r, m, calls) = (sd[1], sd[2], sd[3], sd[4], sd[5], sd[6], sd[7]);
        metrics_ratio.push(m / q);
        floor_ratio.push(calls / q);
        over_qemu.push(c / q);
        vs_exp.push(v / c);
        vs_exp_exact.push(v / e);
        replay_ratio.push(r / c);
        println!(
            "{:<14} {:>8.2} {:>7.1}x {:>8.1}x {:>8.1}x {:>8.1}x {:>8.1}x {:>8.1}x {:>10.2}x {:>10.2}x {:>11.2}x {:>10.2}x {:>10.2}x {:>10.2}x",
            w.name,
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
    let worst = |v: &[f64], max: bool| {
        v.iter().copied().fold(
            if max { 0.0 } else { f64::INFINITY },
            if max { f64::max } else { f64::min },
        )
    };
    println!();
    println!(
        "default vs bare QEMU slowdown: geomean {:.2}x (target <= 1.5x), worst {:.2}x (target <= 2x)",
        geomean(&over_qemu),
        worst(&over_qemu, true)
    );
    println!(
        "exp-bbv / default:             geomean {:.2}x (target >= 4x), worst {:.2}x (target >= 3x)",
        geomean(&vs_exp),
        worst(&vs_exp, false)
    );
    println!(
        "exp-bbv / --exact:             geomean {:.2}x (target >= 2x)",
        geomean(&vs_exp_exact)
    );
    println!(
        "replay / default:              geomean {:.2}x, worst {:.2}x (target <= 1.1x)",
        geomean(&replay_ratio),
        worst(&replay_ratio, true)
    );
    println!(
        "--metrics-out-file / bare QEMU: geomean {:.2}x (target <= 4x), worst {:.2}x",
        geomean(&metrics_ratio),
        worst(&metrics_ratio, true)
    );
    println!(
        "  its CPU time / bare QEMU's:   geomean {:.2}x, worst {:.2}x (the cache model runs on a thread of its own)",
        geomean(&metrics_cpu_ratio),
        worst(&metrics_cpu_ratio, true)
    );
    println!(
        "  QEMU's calls alone / bare:    geomean {:.2}x, worst {:.2}x (the same callbacks returning at once: the floor under any\n                                 plugin that sees every access; calls/qemu column)",
        geomean(&floor_ratio),
        worst(&floor_ratio, true)
    );
    Ok(())
}
