//! `bbv bench report`: the HTML report of real `bbv run --validate` runs of at least 10,000
//! intervals: how long `bbv report DIR` takes, the page's size, and how long Debian's chromium
//! takes from navigation to the load event (the bar: under 2 s and under 5 MB).

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context, Result};

use crate::measure::measure_bbv_with;
use crate::measure::{in_temp_root, median};
use crate::regions::{record, workloads};

/// Runs the benchmark in a temporary folder under `dir`.
pub fn run(intervals: u64, runs: usize, dir: &Path) -> Result<()> {
    in_temp_root(dir, "report", |root| {
        bench(intervals.max(1), runs.max(1), root)
    })
}

/// Milliseconds from navigation to the load event, as the page records it.
fn load_ms(page: &Path, profile: &Path) -> Result<f64> {
    let exe = ["chromium", "chromium-browser"]
        .into_iter()
        .find(|c| Command::new(c).arg("--version").output().is_ok())
        .context("chromium is missing (scripts/setup installs it)")?;
    let out = Command::new(exe)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--no-first-run",
            "--dump-dom",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("file://{}", page.display()))
        .output()
        .context("cannot run chromium")?;
    if !out.status.success() {
        bail!("chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    let dom = String::from_utf8_lossy(&out.stdout);
    dom.split("data-load-ms=\"")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .and_then(|s| s.parse().ok())
        .context("the page's load event did not run in chromium")
}

fn bench(target: u64, runs: usize, root: &Path) -> Result<()> {
    println!(
        "bbv bench report: report.html of real `bbv run --validate` runs of at least {target}"
    );
    println!("intervals, median of {runs} run(s) (target: loads in under 2 s, under 5 MB)\n");
    println!(
        "{:<13} {:>9} {:>4} {:>10} {:>9} {:>9} {:>9}",
        "program", "intervals", "k", "report s", "peak MB", "page KB", "load ms"
    );
    let mut worst = (0f64, 0u64);
    for (i, w) in workloads(root)?.iter().enumerate() {
        // A run can fail to place a marker at so short an interval; that says nothing of the
        // report, so the program is listed as skipped.
        let r = match record(w, i, target, root, &["--validate"]) {
            Ok(r) => r,
            Err(e) => {
                println!("{:<13} skipped: `bbv run` failed ({e:#})", w.name);
                continue;
            }
        };
        let page = r.out.join(bbv_rundir::files::REPORT);
        let (mut walls, mut loads, mut peak) = (Vec::new(), Vec::new(), 0f64);
        for n in 0..runs {
            let args = ["report".to_string(), r.out.to_string_lossy().into_owned()];
            let m = measure_bbv_with(&args, std::process::Stdio::null())?;
            walls.push(m.wall);
            peak = peak.max(m.max_rss_mb);
            loads.push(load_ms(&page, &root.join(format!("profile-{i}-{n}")))?);
        }
        let size = std::fs::metadata(&page)?.len();
        let load = median(loads);
        worst = (worst.0.max(load), worst.1.max(size));
        println!(
            "{:<13} {:>9} {:>4} {:>10.3} {:>9.0} {:>9.0} {:>9.0}",
            w.name,
            r.intervals,
            r.k,
            median(walls),
            peak,
            size as f64 / 1024.0,
            load
        );
        let _ = std::fs::remove_dir_all(&r.out);
    }
    println!(
        "\nslowest load: {:.0} ms ({:.3}x the 2 s target); largest page: {:.2} MB ({:.3}x the 5 MB target)",
        worst.0,
        worst.0 / 2000.0,
        worst.1 as f64 / 1e6,
        worst.1 as f64 / 5e6
    );
    Ok(())
}
