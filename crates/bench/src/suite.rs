//! `bbv bench suite`: the local executor's parallel speed-up and the cost of a resumed suite.
//! Six equal single-threaded jobs (gzip -6 of the same 6 MB under `bbv run`): `--jobs 2`
//! against `--jobs 1` (target: at most 60% of its wall time on 2 cores), then a re-run where
//! every job is done already (target: well under 1% of the first run).

use std::path::Path;

use anyhow::Result;

use crate::measure::{in_temp_root, make_input, median, time, tool};

/// Runs the benchmark in a temporary folder under `dir`.
pub fn run(runs: usize, dir: &Path) -> Result<()> {
    in_temp_root(dir, "suite", |root| bench(runs.max(1), root))
}

fn bench(runs: usize, root: &Path) -> Result<()> {
    let input = root.join("input.txt");
    make_input(&input, 6_000_000)?;
    let gzip = tool("gzip")?;
    let mut manifest = String::from("[defaults]\ninterval = 20000000\nmax-k = 10\n");
    for i in 0..6 {
        manifest.push_str(&format!(
            "\n[[job]]\nname = \"gzip-{i}\"\ncommand = [{:?}, \"-6\", \"-c\", \"input.txt\"]\n",
            gzip.display().to_string()
        ));
    }
    let manifest_path = root.join("suite.toml");
    std::fs::write(&manifest_path, manifest)?;
    let exe = std::env::current_exe()?.to_string_lossy().into_owned();
    let argv = |out: &str, jobs: usize| -> Vec<String> {
        [
            &exe,
            "suite",
            "run",
            "suite.toml",
            "-o",
            out,
            "--jobs",
            &jobs.to_string(),
        ]
        .map(String::from)
        .to_vec()
    };
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!("bbv suite run: six equal jobs (bbv run on gzip -6 of 6 MB), {cores} cores, median of {runs}");
    let mut medians = Vec::new();
    for jobs in [1, 2] {
        let mut walls = Vec::new();
        for r in 0..runs {
            let out = format!("out-{jobs}-{r}");
            walls.push(time(&argv(&out, jobs), &[], root)?);
        }
        let m = median(walls);
        println!("  --jobs {jobs}: {m:.2} s");
        medians.push(m);
    }
    println!(
        "  --jobs 2 / --jobs 1: {:.0}% (target at most 60% on 2 cores)",
        100.0 * medians[1] / medians[0]
    );
    // Resume: every job of the last --jobs 2 run is done; a re-run only checks them.
    let out = format!("out-2-{}", runs - 1);
    let again = median(
        (0..runs)
            .map(|_| time(&argv(&out, 2), &[], root))
            .collect::<Result<_>>()?,
    );
    println!(
        "  re-run with every job done (all skipped): {:.3} s, {:.2}% of the first run (target well under 1%)",
        again,
        100.0 * again / medians[1]
    );
    Ok(())
}
