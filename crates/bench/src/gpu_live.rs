//! `bbv bench gpu-live` (needs an NVIDIA GPU): `bbv gpu run`'s slowdown against the plain run,
//! per workload, measured side by side (plain and counted runs interleaved, median of --runs):
//! the test kernels beside bbv (`cuda-kernels`, built by scripts/cupti) and 5 and 50 PyTorch
//! forward passes (tools/cupti/torch_forward.py, when python3 imports torch). Beside the
//! process's wall time: the program's own time under the counting (from summary.json), bbv's
//! work after it, and the sum of the launches' time from launch to completion.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use crate::measure::{in_temp_root, median, time};

/// Runs the benchmark in a temporary folder under `dir`; `repo` holds tools/cupti.
pub fn run(runs: usize, dir: &Path, repo: &Path) -> Result<()> {
    if !Path::new("/dev/nvidiactl").exists() {
        bail!(
            "bbv bench gpu-live needs an NVIDIA GPU and its driver (/dev/nvidiactl does not exist)"
        );
    }
    let exe = std::env::current_exe()?;
    let exe_dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let mut workloads: Vec<(String, Vec<String>)> = Vec::new();
    let kernels = exe_dir.join("cuda-kernels");
    if !kernels.is_file() {
        bail!("{} does not exist: run scripts/cupti", kernels.display());
    }
    workloads.push(("test kernels".into(), vec![kernels.display().to_string()]));
    // The runs start in a temporary folder, so a relative --repo (the default ".") must not stay
    // relative.
    let repo = std::path::absolute(repo)?;
    let torch = repo.join("tools/cupti/torch_forward.py");
    let has_torch = std::process::Command::new("python3")
        .args(["-c", "import torch"])
        .status()
        .is_ok_and(|s| s.success());
    if has_torch && torch.is_file() {
        // Few passes: the process is mostly Python and module loading; many: mostly launches.
        for steps in ["5", "50"] {
            workloads.push((
                format!("PyTorch, {steps} forward passes"),
                vec!["python3".into(), torch.display().to_string(), steps.into()],
            ));
        }
    } else {
        println!("(no PyTorch here: its workload is left out)");
    }
    in_temp_root(dir, "gpu-live", |root| {
        println!("bbv gpu run against the plain run, median of {runs}");
        for (name, argv) in &workloads {
            bench_one(name, argv, &exe, runs.max(1), root)?;
        }
        Ok(())
    })
}

fn bench_one(name: &str, argv: &[String], exe: &Path, runs: usize, root: &Path) -> Result<()> {
    let (mut plain, mut counted, mut inside, mut kernels) = (vec![], vec![], vec![], vec![]);
    for r in 0..runs {
        plain.push(time(argv, &[], root)?);
        let out = root.join(format!("run-{r}"));
        let mut cmd = vec![
            exe.display().to_string(),
            "gpu".into(),
            "run".into(),
            "-o".into(),
            out.display().to_string(),
            "--".into(),
        ];
        cmd.extend(argv.iter().cloned());
        counted.push(time(&cmd, &[], root)?);
        let summary = std::fs::read_to_string(out.join(bbv_rundir::files::SUMMARY))
            .with_context(|| format!("{name}: no summary.json"))?;
        let v: serde_json::Value = serde_json::from_str(&summary)?;
        inside.push(v["wall_seconds"].as_f64().unwrap_or(f64::NAN));
        kernels.push(v["kernel_micros_instrumented"].as_f64().unwrap_or(f64::NAN) / 1e6);
    }
    let (p, c, i, k) = (
        median(plain),
        median(counted),
        median(inside),
        median(kernels),
    );
    println!(
        "  {name}: plain {p:.2} s, bbv gpu run {c:.2} s ({:.1}x; target at most 10x for runs of a second or more)",
        c / p
    );
    println!(
        "    the program under counting {i:.2} s ({:.1}x), bbv's work after it {:.2} s, launches to completion {k:.3} s",
        i / p,
        c - i
    );
    Ok(())
}
