//! bbv-pipeline: the profile-to-regions stage of bbvkit's main job, shared by `bbv run`,
//! `bbv regions` and `bbv suite`.
//!
//! * [`run`]: collect a program's BBV under QEMU, cluster it with SimPoint's algorithm, and
//!   [`finish`] the run directory.
//! * [`finish`] (`bbv regions DIR`): from a run directory alone, place (PC, count) markers on
//!   every point's boundaries ([`markers`]) and write the hand-off files ([`regions`]),
//!   `summary.json` / `summary.txt` and the HTML report (bbv-report).
//!
//! What reruns the program on a finished run directory (replay, ChampSim traces and
//! simulation, checkpoints) is the bbv-replay crate above this one; the GPU jobs are
//! bbv-gpujob. This crate builds no instruction decoder (iced-x86, Capstone) and no CUDA code.
//!
//! # Design constraints
//! * A run directory is a contract ([`rundir`], the bbv-rundir crate, which the report reads
//!   too): every file is written through this crate,
//!   all together or not at all ([`bbv_files::AtomicFiles`]), and everything `bbv regions` needs is in it.
//! * Errors are [`PipelineError`]; bad input names the file and line.

mod cluster;
mod finish;
mod job;
mod job_text;
pub mod looppoint;
pub mod markers;
mod options;
pub mod parse;
pub mod regions;
mod slices;

pub use bbv_rundir as rundir;
pub use bbv_rundir::{chosen, validate};
pub use cluster::{cluster_file, cluster_validated, KRange, Validate};
pub use finish::{finish, update_regions, Finished};
pub use job::{run, RegionsMode, RunOutcome, RunRequest};
pub use options::{
    default_max_k, CollectOptions, GuestOptions, RunOptions, Schedule, MAX_INSTRUCTIONS,
};

/// Writes `metrics.csv` (see `bbv_profile::MetricsWriter`).
pub fn write_metrics(
    out: &mut impl std::io::Write,
    rows: &[bbv_profile::MetricsRow],
) -> std::io::Result<()> {
    let mut w = bbv_profile::MetricsWriter::new(out)?;
    for r in rows {
        w.row(r)?;
    }
    Ok(())
}

/// Default flow-control quantum of multi-threaded runs (instructions; see the bbv-qemu
/// crate's `flow`): a twentieth of an interval, small against a slice (an interval per
/// thread), so that the threads' progress at a marker differs little from run to run (xz -T2
/// replayed within 1.7% over six runs; at a tenth, one run in ten over 5%; at two fifths,
/// 16%), and large enough that a thread the host preempts for a few milliseconds rarely stops
/// the others.
pub fn flow_quantum(interval: u64) -> u64 {
    (interval / 20).max(1)
}
/// Default turn of the deterministic schedule (instructions): short, because while one
/// thread runs the others wait, and a thread that waits for another at a barrier or a lock
/// spins through its turns (on the OpenMP program with phases, 2 threads: 1.11x the host
/// schedule's CPU time at 100,000, 2.1x at 5,000,000, a twentieth of the default interval).
pub const TURN_QUANTUM: u64 = 100_000;

/// Images excluded from slices unless told otherwise: the OpenMP runtimes, whose spinning and
/// synchronisation say nothing about the program's work.
pub const DEFAULT_EXCLUDE: [&str; 2] = ["libgomp", "libiomp5"];

use std::path::PathBuf;

/// Everything that can go wrong in the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum PipelineError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A run-directory file is malformed.
    #[error("{}:{line}: expected {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was expected.
        what: String,
    },
    /// Input that cannot be used, explained.
    #[error("{0}")]
    Invalid(String),
    /// A folder or file could not be made where it was asked for.
    #[error("{what}: {source}")]
    Create {
        /// What was being made.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// No block qualified as a marker near a cut.
    #[error("interval {interval}: no {what} marker in marks.out: no block of the program's own code (or of a system library other than the loader and the C library's string routines) first ran within 0.5% of an interval after cut {cut}; a longer --interval gives more room")]
    NoMarker {
        /// The point's interval.
        interval: u64,
        /// start, end, warmup or end-relative.
        what: String,
        /// The cut.
        cut: u64,
    },
    /// Outputs could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A run-directory file is malformed or inconsistent.
    #[error(transparent)]
    Rundir(#[from] bbv_rundir::RundirError),
    /// The HTML report could not be written.
    #[error(transparent)]
    Report(#[from] bbv_report::ReportError),
    /// Collecting failed.
    #[error(transparent)]
    Collect(#[from] bbv_collect::CollectError),
    /// A vector file is malformed.
    #[error(transparent)]
    Profile(#[from] bbv_profile::ProfileError),
    /// Clustering failed.
    #[error(transparent)]
    Simpoint(#[from] bbv_simpoint::SimpointError),
}

impl PipelineError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        PipelineError::Io {
            path: path.into(),
            source,
        }
    }
}
