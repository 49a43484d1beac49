//! bbv-suite: whole benchmark suites from one manifest, run on this machine, resumable.
//!
//! * [`manifest`]: the TOML manifest, checked completely before anything runs.
//! * [`job`]: one job: `bbv run` (or `bbv gpu sample`) as a child process in the job's fixed
//!   environment, its output in `OUT/<name>/log`, its record in `OUT/<name>/job.json`.
//! * [`local`]: the local executor (N jobs at a time; finished jobs with unchanged settings
//!   are skipped), and the merge: `OUT/summary.csv` and `OUT/index.html`.
//! * [`slurm`]: the same jobs as one Slurm job array of `bbv suite task`.
//!
//! Each job is its own process, so that a crash, a timeout or a kill stays with that job; the
//! same function runs it wherever it runs.

pub mod job;
pub mod local;
pub mod manifest;
pub mod slurm;
mod steps;

pub use job::{JobRecord, Status};
pub use local::{merge, run_local, Event};
pub use manifest::{load, Job, Manifest};

use std::path::PathBuf;

/// Everything that can go wrong in a suite (a failed job is not an error: see [`Status`]).
#[derive(Debug, thiserror::Error)]
pub enum SuiteError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The manifest is malformed.
    #[error("{}:{line}: {what}", path.display())]
    Manifest {
        /// The manifest.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What is wrong.
        what: String,
    },
    /// Slurm's commands failed or are missing.
    #[error("{0}")]
    Slurm(String),
    /// A record or summary could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
}

impl SuiteError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> SuiteError {
        SuiteError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Records in OUT where the manifest is, for `bbv suite status`: `bbv suite run` does, not
/// the tasks (which run while `status` may be reading it), and atomically (a reader sees the
/// old file or the new one, never a half-written one).
pub fn record_manifest(
    manifest: &std::path::Path,
    output: &std::path::Path,
) -> Result<(), SuiteError> {
    std::fs::create_dir_all(output).map_err(|e| SuiteError::io(output, e))?;
    let abs = std::path::absolute(manifest).map_err(|e| SuiteError::io(manifest, e))?;
    let text = format!("{}\n", serde_json::json!({ "manifest": abs }));
    bbv_files::write_atomic(&output.join("suite.json"), text.as_bytes())?;
    Ok(())
}

/// The manifest `bbv suite run` recorded in OUT.
pub fn recorded_manifest(output: &std::path::Path) -> Result<Manifest, SuiteError> {
    let path = output.join("suite.json");
    let not_ours = |what: String| SuiteError::Manifest {
        path: path.clone(),
        line: 1,
        what,
    };
    let text = bbv_files::input::read_text(&path, 1 << 20).map_err(|e| {
        not_ours(format!(
            "{}: not the output folder of bbv suite run ({e})",
            output.display()
        ))
    })?;
    let v: serde_json::Value = serde_json::from_str(&text).map_err(|e| not_ours(e.to_string()))?;
    let Some(manifest) = v["manifest"].as_str() else {
        return Err(not_ours("no manifest recorded".into()));
    };
    load(std::path::Path::new(manifest))
}
