//! `bbv suite`: a manifest's jobs on this machine, resumable.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use bbv_suite::{Event, Manifest, Status};
use clap::{Parser, Subcommand};

#[derive(Subcommand)]
pub enum SuiteCommand {
    /// Run every job of MANIFEST into OUT/<name>/ (as `bbv run -o` writes it), skipping jobs
    /// finished before with the same settings; then OUT/summary.csv and OUT/index.html.
    /// Exits 0 when every job is done, 1 when any failed, 2 on a bad manifest.
    Run {
        /// The suite manifest (TOML; see the README).
        manifest: PathBuf,
        /// The output folder.
        #[arg(short = 'o', value_name = "OUT")]
        output: PathBuf,
        /// Jobs at a time (default: the number of cores).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
        jobs: Option<u32>,
    },
    /// Run job number INDEX (0-based, manifest order) of MANIFEST into OUT/<name>/: what each
    /// task of a cluster's job array runs.
    Task {
        /// The suite manifest.
        manifest: PathBuf,
        /// The job's index.
        #[arg(long)]
        index: usize,
        /// The output folder.
        #[arg(short = 'o', value_name = "OUT")]
        output: PathBuf,
    },
    /// Each job's state in OUT, from its files.
    Status {
        /// The output folder of `bbv suite run`.
        output: PathBuf,
    },
}

/// Runs a suite command; its exit status.
pub fn run(what: SuiteCommand) -> Result<u8> {
    match what {
        SuiteCommand::Run {
            manifest,
            output,
            jobs,
        } => {
            let m = load(&manifest, &output)?;
            let jobs = jobs.map_or_else(
                || std::thread::available_parallelism().map_or(1, |n| n.get()),
                |n| n as usize,
            );
            let bar = crate::progress::suite_bar(m.jobs.len() as u64);
            let counts = Mutex::new((0usize, 0usize, 0usize));
            let on_event = |e: Event| {
                let mut c = counts.lock().unwrap_or_else(|e| e.into_inner());
                match e {
                    Event::Started(_) => c.1 += 1,
                    Event::Ended(_, s) => {
                        c.1 -= 1;
                        if s == Status::Failed {
                            c.2 += 1;
                        } else {
                            c.0 += 1;
                        }
                        if let Some(b) = &bar {
                            b.inc(1);
                        }
                    }
                }
                if let Some(b) = &bar {
                    b.set_message(format!("{} done, {} running, {} failed", c.0, c.1, c.2));
                }
            };
            let records =
                bbv_suite::run_local(&m, &output, jobs, &bbv_exe()?, version(), &on_event)?;
            if let Some(b) = bar {
                b.finish_and_clear();
            }
            bbv_suite::merge(&m, &output, &records)?;
            let failed: Vec<&str> = m
                .jobs
                .iter()
                .zip(&records)
                .filter(|(_, r)| r.status == Status::Failed)
                .map(|(j, _)| j.name.as_str())
                .collect();
            let ran = records.iter().filter(|r| r.status == Status::Done).count();
            let skipped = records
                .iter()
                .filter(|r| r.status == Status::Skipped)
                .count();
            eprintln!(
                "bbv suite: {} jobs: {ran} done, {skipped} skipped, {} failed{}; {}",
                m.jobs.len(),
                failed.len(),
                if failed.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", failed.join(", "))
                },
                output.join("summary.csv").display()
            );
            Ok(u8::from(!failed.is_empty()))
        }
        SuiteCommand::Task {
            manifest,
            index,
            output,
        } => {
            let m = load(&manifest, &output)?;
            let Some(job) = m.jobs.get(index) else {
                bail!(
                    "{}: no job number {index} (it has {})",
                    manifest.display(),
                    m.jobs.len()
                );
            };
            let r = bbv_suite::job::run_job(&bbv_exe()?, job, &output, version())?;
            Ok(u8::from(r.status == Status::Failed))
        }
        SuiteCommand::Status { output } => {
            let m = recorded_manifest(&output)?;
            let records = bbv_suite::local::records(&m, &output);
            println!(
                "{:<24} {:<8} {:>7} {:>10}",
                "job", "status", "attempt", "seconds"
            );
            for (j, r) in m.jobs.iter().zip(&records) {
                println!(
                    "{:<24} {:<8} {:>7} {:>10.1}",
                    j.name,
                    r.status.name(),
                    r.attempt,
                    r.seconds
                );
            }
            Ok(0)
        }
    }
}

/// Loads and checks the manifest (every job's options through `bbv run`'s own parser), and
/// records where it is in OUT for `bbv suite status`.
fn load(manifest: &Path, output: &Path) -> Result<Manifest> {
    let m = bbv_suite::load(manifest)?;
    for job in &m.jobs {
        let mut argv: Vec<OsString> = vec!["bbv".into()];
        argv.extend(job.bbv_args(&output.join(&job.name)));
        if let Err(e) = crate::Cli::try_parse_from(&argv) {
            let text = e.to_string();
            let first = text
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("error: ");
            bail!(bbv_suite::SuiteError::Manifest {
                path: manifest.to_path_buf(),
                line: job.line,
                what: format!("job {:?}: {first}", job.name),
            });
        }
    }
    std::fs::create_dir_all(output).with_context(|| output.display().to_string())?;
    let abs = std::path::absolute(manifest)?;
    std::fs::write(
        output.join("suite.json"),
        format!("{}\n", serde_json::json!({ "manifest": abs })),
    )
    .with_context(|| output.display().to_string())?;
    Ok(m)
}

fn recorded_manifest(output: &Path) -> Result<Manifest> {
    let path = output.join("suite.json");
    let text = std::fs::read_to_string(&path).with_context(|| {
        format!(
            "{}: not the output folder of bbv suite run",
            output.display()
        )
    })?;
    let v: serde_json::Value =
        serde_json::from_str(&text).with_context(|| path.display().to_string())?;
    let Some(manifest) = v["manifest"].as_str() else {
        bail!("{}: no manifest recorded", path.display());
    };
    Ok(bbv_suite::load(Path::new(manifest))?)
}

fn bbv_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the bbv executable")
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
