//! The Slurm executor: one job array, one task per job (`bbv suite task MANIFEST --index I -o
//! OUT`), followed with `squeue` (accounting needs slurmdbd, which many clusters lack).
//!
//! The tasks run the same [`run_job`](crate::job::run_job) as the local executor, in the same
//! fixed environment, so a single-threaded job gives the same files either way. OUT must be on
//! a file system every node sees.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::job::{settings_hash, JobRecord};
use crate::manifest::Manifest;
use crate::SuiteError;

/// `sbatch` options of the array.
#[derive(Clone, Debug, Default)]
pub struct SlurmOptions {
    /// `--partition`.
    pub partition: Option<String>,
    /// `--time` per task.
    pub time: Option<String>,
    /// `--mem` per task.
    pub mem: Option<String>,
    /// Tasks at a time (`--array=...%N`).
    pub max_parallel: Option<u32>,
    /// More `sbatch` arguments, as given.
    pub sbatch_args: Vec<String>,
}

/// The submitted array: its job id, and the manifest indices of its tasks.
#[derive(Clone, Debug, PartialEq)]
pub struct Submitted {
    /// Slurm's job id of the array.
    pub job_id: String,
    /// The jobs submitted (manifest indices); the others were done already.
    pub indices: Vec<usize>,
}

/// Where the array's script, task logs and job id go.
pub fn slurm_dir(out: &Path) -> PathBuf {
    out.join("slurm")
}

/// Per manifest job: whether OUT holds it done with its current settings.
pub fn done_already(manifest: &Manifest, out: &Path, version: &str) -> Vec<bool> {
    manifest
        .jobs
        .iter()
        .map(|job| {
            JobRecord::read(&out.join(&job.name))
                .is_some_and(|r| r.done_with(&settings_hash(job, version)))
        })
        .collect()
}

/// Submits the jobs not `done` (per manifest job, from [`done_already`]) as one array; None
/// when all are.
pub fn submit(
    manifest: &Manifest,
    out: &Path,
    bbv: &Path,
    done: &[bool],
    opts: &SlurmOptions,
) -> Result<Option<Submitted>, SuiteError> {
    let indices: Vec<usize> = (0..manifest.jobs.len())
        .filter(|&i| !done.get(i).copied().unwrap_or(false))
        .collect();
    if indices.is_empty() {
        return Ok(None);
    }
    let dir = slurm_dir(out);
    std::fs::create_dir_all(&dir).map_err(|e| SuiteError::io(&dir, e))?;
    let abs = |p: &Path| std::path::absolute(p).map_err(|e| SuiteError::io(p, e));
    let (manifest_path, out_abs) = (abs(&manifest.path)?, abs(out)?);
    let script = dir.join("array.sh");
    let text = format!(
        "#!/bin/sh\n# Written by bbv suite run --slurm: one task per job of the manifest.\nexec {} suite task {} --index \"$SLURM_ARRAY_TASK_ID\" -o {}\n",
        quote(bbv),
        quote(&manifest_path),
        quote(&out_abs)
    );
    std::fs::write(&script, text).map_err(|e| SuiteError::io(&script, e))?;
    let mut array: String = indices
        .iter()
        .map(usize::to_string)
        .collect::<Vec<_>>()
        .join(",");
    if let Some(n) = opts.max_parallel {
        array.push_str(&format!("%{n}"));
    }
    let mut args: Vec<OsString> = vec![
        "--parsable".into(),
        "--job-name=bbv-suite".into(),
        format!("--array={array}").into(),
        {
            let mut o = OsString::from("--output=");
            o.push(abs(&dir)?.join("task-%A_%a.out"));
            o
        },
    ];
    for (flag, value) in [
        ("--partition", &opts.partition),
        ("--time", &opts.time),
        ("--mem", &opts.mem),
    ] {
        if let Some(v) = value {
            args.push(format!("{flag}={v}").into());
        }
    }
    args.extend(opts.sbatch_args.iter().map(OsString::from));
    args.push(abs(&script)?.into());
    let output = run_ok("sbatch", &args)?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    // --parsable prints "id" or "id;cluster".
    let job_id = stdout.trim().split(';').next().unwrap_or("").to_string();
    if job_id.is_empty() || !job_id.bytes().all(|b| b.is_ascii_digit()) {
        return Err(SuiteError::Slurm(format!(
            "sbatch printed no job id: {stdout:?}"
        )));
    }
    let id_file = dir.join("job-id");
    std::fs::write(&id_file, format!("{job_id}\n")).map_err(|e| SuiteError::io(&id_file, e))?;
    Ok(Some(Submitted { job_id, indices }))
}

/// Runs a Slurm command that must succeed; its output.
fn run_ok(cmd: &str, args: &[OsString]) -> Result<std::process::Output, SuiteError> {
    let output = Command::new(cmd)
        .args(args)
        .output()
        .map_err(|e| no_slurm(cmd, e))?;
    if !output.status.success() {
        return Err(SuiteError::Slurm(format!(
            "{cmd} failed: {}",
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    Ok(output)
}

fn no_slurm(cmd: &str, e: std::io::Error) -> SuiteError {
    SuiteError::Slurm(format!(
        "{cmd}: {e} (--slurm needs Slurm's client commands on PATH, Debian's slurm-client; scripts/local-slurm up starts a single-node Slurm to try it)"
    ))
}

/// Whether a Slurm client's error is the controller being busy or briefly away (a query
/// asked again then answers), not a wrong request.
fn transient(stderr: &str) -> bool {
    [
        "Socket timed out",
        "Unable to contact slurm controller",
        "Slurm backup controller in standby mode",
    ]
    .iter()
    .any(|m| stderr.contains(m))
}

/// How long a query keeps asking a controller that does not answer.
const PATIENCE: Duration = Duration::from_secs(120);

/// The array's tasks still in the queue: manifest index → Slurm state (PENDING, RUNNING, ...).
/// A controller too busy to answer (seen on a loaded single-node Slurm) is asked again, with
/// growing pauses, for up to [`PATIENCE`].
pub fn queued(job_id: &str) -> Result<BTreeMap<usize, String>, SuiteError> {
    let start = std::time::Instant::now();
    let mut pause = Duration::from_millis(500);
    let output = loop {
        let output = Command::new("squeue")
            .args(["-h", "-r", "-j", job_id, "-o", "%K %T"])
            .output()
            .map_err(|e| no_slurm("squeue", e))?;
        let err = String::from_utf8_lossy(&output.stderr);
        let stopped = bbv_files::interrupt::received().is_some();
        if output.status.success() || !transient(&err) || start.elapsed() > PATIENCE || stopped {
            break output;
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_secs(10));
    };
    let mut tasks = BTreeMap::new();
    if !output.status.success() {
        // Slurm forgets a finished job after MinJobAge: "Invalid job id specified".
        let err = String::from_utf8_lossy(&output.stderr);
        if err.contains("Invalid job id") {
            return Ok(tasks);
        }
        return Err(SuiteError::Slurm(format!("squeue failed: {}", err.trim())));
    }
    for line in String::from_utf8_lossy(&output.stdout).lines() {
        let mut f = line.split_whitespace();
        if let (Some(i), Some(state)) = (f.next().and_then(|i| i.parse().ok()), f.next()) {
            tasks.insert(i, state.to_string());
        }
    }
    Ok(tasks)
}

/// Waits until none of the array's tasks is queued, calling `tick` with the queue meanwhile;
/// returns early once bbv has received a killing signal.
pub fn wait(job_id: &str, tick: &dyn Fn(&BTreeMap<usize, String>)) -> Result<(), SuiteError> {
    let stopped = || bbv_files::interrupt::received().is_some();
    watch(job_id, Duration::from_millis(500), tick, &stopped).map(|_| ())
}

/// Polls the queue every `every` until the array has left it (true) or `give_up` says so
/// (false), calling `tick` with the queue meanwhile.
fn watch(
    job_id: &str,
    every: Duration,
    tick: &dyn Fn(&BTreeMap<usize, String>),
    give_up: &dyn Fn() -> bool,
) -> Result<bool, SuiteError> {
    loop {
        if give_up() {
            return Ok(false);
        }
        let q = queued(job_id)?;
        tick(&q);
        if q.is_empty() {
            return Ok(true);
        }
        std::thread::sleep(every);
    }
}

/// Cancels the array (`scancel`): its running tasks get SIGTERM and record their jobs failed.
pub fn cancel(job_id: &str) -> Result<(), SuiteError> {
    run_ok("scancel", &[OsString::from(job_id)]).map(|_| ())
}

/// Waits until none of the array's tasks is queued or `limit` has passed; whether it emptied.
pub fn wait_gone(job_id: &str, limit: Duration) -> Result<bool, SuiteError> {
    let until = std::time::Instant::now() + limit;
    let late = || std::time::Instant::now() >= until;
    watch(job_id, Duration::from_millis(200), &|_| {}, &late)
}

/// A Slurm job id and its tasks still queued (manifest index → state).
pub type QueuedArray = (String, BTreeMap<usize, String>);

/// The array last submitted for OUT and its tasks, if some are still queued: a new submission
/// would run those jobs a second time, into the same folders.
pub fn still_queued(out: &Path) -> Result<Option<QueuedArray>, SuiteError> {
    let Some(id) = last_job_id(out) else {
        return Ok(None);
    };
    let q = queued(&id)?;
    Ok((!q.is_empty()).then_some((id, q)))
}

/// The id of the array last submitted for OUT, if any.
pub fn last_job_id(out: &Path) -> Option<String> {
    std::fs::read_to_string(slurm_dir(out).join("job-id"))
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

/// A path for `sh`, single-quoted.
fn quote(p: &Path) -> String {
    format!("'{}'", p.display().to_string().replace('\'', "'\\''"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_busy_controller_is_asked_again_and_a_wrong_request_is_not() {
        assert!(transient(
            "slurm_load_jobs error: Socket timed out on send/recv operation"
        ));
        assert!(transient(
            "slurm_load_jobs error: Unable to contact slurm controller (connect failure)"
        ));
        assert!(!transient(
            "slurm_load_jobs error: Invalid job id specified"
        ));
        assert!(!transient("squeue: error: Invalid user: nobody2"));
    }
}
