//! `bbv bench cc-levels`: `bbv cc` promises the same counts at every optimisation level; this
//! checks it on real C code not written by us (the Lua, SQLite and bzip2 builds of `bbv bench
//! cc`) with each clang given, comparing every run's count file and stdout across levels.

use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

use crate::cc;

const LEVELS: [&str; 5] = ["-O0", "-O1", "-O2", "-O3", "-Os"];

/// What one run left: its stdout and its count file's text.
type Observed = (Vec<u8>, String);

/// Runs `exe args` in `dir` with its counts written to `dir/count-TAG.count`.
fn observe(exe: &Path, args: &[String], dir: &Path, tag: &str) -> Result<Observed> {
    let out_base = dir.join(format!("count-{tag}"));
    let out = Command::new(exe)
        .args(args)
        .current_dir(dir)
        .env("BBV_OUT", &out_base)
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("cannot run {}", exe.display()))?;
    cc::check(out.status, &format!("{} {}", exe.display(), args.join(" ")))?;
    let count_file = out_base.with_extension("count");
    let counts = std::fs::read_to_string(&count_file)
        .with_context(|| format!("{} was not written", count_file.display()))?;
    Ok((out.stdout, counts))
}

/// The `total N` line of a count file, as a number.
fn total(counts: &str) -> Option<u64> {
    counts
        .lines()
        .find_map(|l| l.strip_prefix("total "))
        .and_then(|n| n.trim().parse().ok())
}

/// Builds every program at every level with each of `compilers` and compares the counts.
pub fn run(dir: &Path, compilers: &[String]) -> Result<()> {
    let root = tempfile::Builder::new()
        .prefix("bbv-bench-cc-levels-")
        .tempdir_in(dir)?;
    let d = root.path();
    let programs = cc::programs(d)?;
    println!(
        "bbv bench cc-levels: bbv cc --mode total at {}; every run's count file and stdout must be the same at every level\n",
        LEVELS.join(", ")
    );
    println!(
        "{:<20} {:<10} {:>16}  alike",
        "workload", "compiler", "instructions"
    );
    let (mut alike, mut checked) = (0, 0);
    for compiler in compilers {
        for p in &programs {
            eprintln!(
                "building {} with {compiler} at {} levels...",
                p.name,
                LEVELS.len()
            );
            let exes = LEVELS
                .iter()
                .map(|l| cc::build(p, "total", compiler, l, d))
                .collect::<Result<Vec<_>>>()?;
            for args in &p.runs {
                let seen = exes
                    .iter()
                    .zip(LEVELS)
                    .map(|(exe, l)| observe(exe, args, d, l))
                    .collect::<Result<Vec<_>>>()?;
                let same = seen.iter().all(|s| s == &seen[0]);
                checked += 1;
                alike += usize::from(same);
                let counts: Vec<String> = seen
                    .iter()
                    .map(|s| total(&s.1).map_or("?".into(), |n| n.to_string()))
                    .collect();
                let shown = if same {
                    counts[0].clone()
                } else {
                    counts.join(" / ")
                };
                println!(
                    "{:<20} {compiler:<10} {shown:>16}  {}",
                    p.label(args),
                    if same { "yes" } else { "NO" }
                );
                if !same && seen.iter().any(|s| s.0 != seen[0].0) {
                    println!("  (stdout differs between levels too)");
                }
            }
        }
    }
    println!("\n{alike} of {checked} workload/compiler pairs count alike at every level");
    if alike != checked {
        bail!("counts differ between optimisation levels");
    }
    Ok(())
}
