//! bbv-replay: the stages that run the program again on a finished run directory (one that
//! bbv-pipeline wrote), each following the run's markers.
//!
//! * [`replay`] (`bbv replay`): run the program watching only the markers, and compare every
//!   region's start, end and length with the profile.
//! * [`trace`] (`bbv trace`): the same replay writing a ChampSim trace of every region (its
//!   warmup, condensed by default, the region and a tail).
//! * [`simulate`] (`bbv simulate`): ChampSim on the traces, the program's CPI estimated with its
//!   95% band, and with `--full` the whole run simulated through a pipe for the error.
//! * [`checkpoint`] (`bbv checkpoint`): the replay capturing each region's process state into an
//!   executable checkpoint; [`checkpoint_check`] (`--check`) runs each and compares it with the
//!   replay, system call by system call ([`checkpoint_calls`]).
//!
//! # Design constraints
//! * The run directory is read, never rewritten: what a stage writes (traces, trace.json,
//!   simulation.json, checkpoints) is written all together or not at all
//!   ([`bbv_files::AtomicFiles`]), and a run is refused when the program, its build or the
//!   QEMU differs from the one profiled.
//! * The instruction decoders (iced-x86, Capstone, rvdasm) come in with bbv-champsim here, not
//!   in the profile path below.
//! * Errors are [`ReplayError`]; bad input names the file and line.

pub mod checkpoint;
pub mod checkpoint_calls;
pub mod checkpoint_check;
mod replay;
pub mod simulate;
pub mod simulate_progress;
mod simulation_files;
pub mod sniper;
pub mod trace;
mod verdict;

pub use replay::{on_run, replay, RegionCheck, ReplayOutcome, ReplayReport, ReplayRequest};

use std::path::PathBuf;

/// Everything that can go wrong in a stage that runs the program again.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
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
    /// A region's trace could not be made whole (a marker not reached, a short trace).
    #[error("no traces written: {0}")]
    NotTraced(String),
    /// The run directory's own stage failed (its markers, its slices).
    #[error(transparent)]
    Pipeline(#[from] bbv_pipeline::PipelineError),
    /// A checkpoint could not be built.
    #[error(transparent)]
    Checkpoint(#[from] bbv_checkpoint::CheckpointError),
    /// ChampSim is missing or failed.
    #[error(transparent)]
    Champsim(#[from] bbv_champsim::sim::SimError),
    /// Outputs could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A run-directory file is malformed or inconsistent.
    #[error(transparent)]
    Rundir(#[from] bbv_rundir::RundirError),
    /// The HTML report could not be written.
    #[error(transparent)]
    Report(#[from] bbv_report::ReportError),
    /// Running the program under QEMU failed.
    #[error(transparent)]
    Collect(#[from] bbv_collect::CollectError),
    /// A vector file is malformed.
    #[error(transparent)]
    Profile(#[from] bbv_profile::ProfileError),
    /// A projected vector file could not be read.
    #[error(transparent)]
    Simpoint(#[from] bbv_simpoint::SimpointError),
}

impl ReplayError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        ReplayError::Io {
            path: path.into(),
            source,
        }
    }
}
