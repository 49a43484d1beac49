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
        /// The suite manifest (TOML; see docs/suite.md).
        manifest: PathBuf,
        /// The output folder.
        #[arg(short = 'o', value_name = "OUT")]
        output: PathBuf,
        /// Jobs at a time (default: the number of cores).
        #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "slurm")]
        jobs: Option<u32>,
        #[command(flatten)]
        slurm: SlurmArgs,
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

/// `--slurm` and its sbatch options.
#[derive(clap::Args)]
pub struct SlurmArgs {
    /// Submit the jobs as one Slurm job array (one task per job not done yet) instead of
    /// running them here; OUT must be on a file system the nodes share.
    #[arg(long)]
    slurm: bool,
    /// sbatch --partition.
    #[arg(long, value_name = "P", requires = "slurm")]
    partition: Option<String>,
    /// sbatch --time, per task.
    #[arg(long, value_name = "T", requires = "slurm")]
    time: Option<String>,
    /// sbatch --mem, per task.
    #[arg(long, value_name = "M", requires = "slurm")]
    mem: Option<String>,
    /// Tasks at a time.
    #[arg(long = "max-parallel", value_name = "N", requires = "slurm", value_parser = clap::value_parser!(u32).range(1..))]
    max_parallel: Option<u32>,
    /// One more sbatch argument (repeatable): --sbatch-arg=--account=lab.
    #[arg(
        long = "sbatch-arg",
        value_name = "ARG",
        requires = "slurm",
        allow_hyphen_values = true
    )]
    sbatch_arg: Vec<String>,
    /// Return once the array is submitted (see `bbv suite status OUT`).
    #[arg(long = "no-wait", requires = "slurm")]
    no_wait: bool,
}

/// Runs a suite command; its exit status.
pub fn run(what: SuiteCommand) -> Result<u8> {
    match what {
        SuiteCommand::Run {
            manifest,
            output,
            slurm,
            ..
        } if slurm.slurm => {
            let m = load(&manifest, &output)?;
            bbv_suite::record_manifest(&manifest, &output)?;
            on_slurm(&m, &output, &slurm)
        }
        SuiteCommand::Run {
            manifest,
            output,
            jobs,
            ..
        } => {
            let m = load(&manifest, &output)?;
            bbv_suite::record_manifest(&manifest, &output)?;
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
            finish(&m, &output, &records)
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
            let m = bbv_suite::recorded_manifest(&output)?;
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

/// The end of a run: the merge, one line on stderr, the exit status (1 if any job is not
/// done or skipped).
fn finish(m: &Manifest, output: &Path, records: &[bbv_suite::JobRecord]) -> Result<u8> {
    bbv_suite::merge(m, output, records)?;
    let failed: Vec<&str> = m
        .jobs
        .iter()
        .zip(records)
        .filter(|(_, r)| !matches!(r.status, Status::Done | Status::Skipped))
        .map(|(j, _)| j.name.as_str())
        .collect();
    let count = |s: Status| records.iter().filter(|r| r.status == s).count();
    eprintln!(
        "bbv suite: {} jobs: {} done, {} skipped, {} failed, {} not run{}; {}",
        m.jobs.len(),
        count(Status::Done),
        count(Status::Skipped),
        count(Status::Failed),
        count(Status::Pending) + count(Status::Running),
        if failed.is_empty() {
            String::new()
        } else {
            format!(" ({})", failed.join(", "))
        },
        output.join("summary.csv").display()
    );
    Ok(u8::from(!failed.is_empty()))
}

/// `--slurm`: submit (or, while the array of an earlier run still has tasks queued, wait for
/// it instead of running its jobs a second time), wait with the done count on a terminal, merge.
/// Stopped while waiting (SIGINT, SIGTERM, SIGHUP), it cancels the array, waits for the tasks to
/// record their jobs and merges; main then exits 128+N.
fn on_slurm(m: &Manifest, output: &Path, a: &SlurmArgs) -> Result<u8> {
    let version = version();
    // Jobs already done with their current settings: not submitted, reported as skipped.
    let done_before = bbv_suite::slurm::done_already(m, output, version);
    let (job_id, tasks) = match bbv_suite::slurm::still_queued(output)? {
        Some((id, q)) => {
            eprintln!(
                "bbv suite: Slurm job {id} of an earlier run still has {} task(s) queued: waiting for it rather than submitting its jobs again",
                q.len()
            );
            (id, q.len())
        }
        None => {
            let opts = bbv_suite::slurm::SlurmOptions {
                partition: a.partition.clone(),
                time: a.time.clone(),
                mem: a.mem.clone(),
                max_parallel: a.max_parallel,
                sbatch_args: a.sbatch_arg.clone(),
            };
            let Some(sub) = bbv_suite::slurm::submit(m, output, &bbv_exe()?, &done_before, &opts)?
            else {
                return finish(
                    m,
                    output,
                    &bbv_suite::local::records_since(m, output, &done_before),
                );
            };
            eprintln!(
                "bbv suite: submitted {} of {} jobs as Slurm job {} (task logs in {})",
                sub.indices.len(),
                m.jobs.len(),
                sub.job_id,
                bbv_suite::slurm::slurm_dir(output).display()
            );
            (sub.job_id, sub.indices.len())
        }
    };
    if a.no_wait {
        return Ok(0);
    }
    // A signal from here on is ours to act on: cancel the array, then merge.
    let _defer = bbv_files::interrupt::defer();
    let bar = crate::progress::suite_bar(tasks as u64);
    bbv_suite::slurm::wait(&job_id, &|q| {
        if let Some(b) = &bar {
            let running = q.values().filter(|s| s.as_str() == "RUNNING").count();
            b.set_position(tasks.saturating_sub(q.len()) as u64);
            b.set_message(format!("{running} running, {} queued", q.len() - running));
        }
    })?;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    if bbv_files::interrupt::received().is_some() {
        eprintln!("bbv suite: stopped: cancelling Slurm job {job_id}");
        bbv_suite::slurm::cancel(&job_id)?;
        // Slurm sends SIGTERM, then SIGKILL after its KillWait (30 s by default).
        if !bbv_suite::slurm::wait_gone(&job_id, std::time::Duration::from_secs(90))? {
            eprintln!("bbv suite: Slurm job {job_id} is still queued 90 s after scancel");
        }
    }
    finish(
        m,
        output,
        &bbv_suite::local::records_since(m, output, &done_before),
    )
}

/// Loads and checks the manifest (every job's options through `bbv run`'s own parser).
fn load(manifest: &Path, output: &Path) -> Result<Manifest> {
    let m = bbv_suite::load(manifest)?;
    for (job, step) in m.jobs.iter().flat_map(|j| {
        j.steps(&output.join(&j.name))
            .into_iter()
            .map(move |s| (j, s))
    }) {
        let mut argv: Vec<OsString> = vec!["bbv".into()];
        argv.extend(step);
        // bbv run's own parser, then the rules of which options go together.
        let checked = match crate::Cli::try_parse_from(&argv) {
            Err(e) => Err(e.to_string()),
            Ok(crate::Cli {
                command: crate::Command::Run(a),
            }) => a.options().check().map_err(|e| e.to_string()),
            Ok(crate::Cli {
                command: crate::Command::Gpu { what },
            }) => what.check().map_err(|e| e.to_string()),
            Ok(_) => Ok(()),
        };
        if let Err(text) = checked {
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
    Ok(m)
}

fn bbv_exe() -> Result<PathBuf> {
    std::env::current_exe().context("cannot find the bbv executable")
}

fn version() -> &'static str {
    env!("CARGO_PKG_VERSION")
}
