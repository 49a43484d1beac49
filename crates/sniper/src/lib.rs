//! Sniper with bbv as its frontend: Sniper's trace-driven backend (`lib/sniper`, started by
//! `run-sniper`, built by scripts/sniper) reads each guest thread's instructions as SIFT from
//! a FIFO and writes its replies (to magic instructions, and later to thread and system-call
//! events) to a response FIFO; bbv writes the first and reads the second.
//!
//! * [`Sniper::find`]: the build, where scripts/sniper put it.
//! * [`Sniper::start`]: one simulation, live: its FIFOs made, Sniper started on them
//!   (configuration `gainestown` with the `rob` core model, run-sniper's default; detailed
//!   simulation only inside the region of interest, caches and branch predictors warmed by the
//!   instructions before it), the stream to write and the replies to read.
//! * [`SimOut`]: what Sniper reports at the end (`sim.out`), per core.

mod live;
mod simout;
mod wait;

pub use bbv_sift::watch::STALL;
pub use live::{Live, Replies};
pub use simout::SimOut;

use std::path::{Path, PathBuf};

/// What can go wrong running Sniper.
#[derive(Debug, thiserror::Error)]
pub enum SniperError {
    /// No build where one was looked for.
    #[error("Sniper not found ({0}): build it with scripts/sniper, or name its folder with --sniper PATH")]
    Missing(String),
    /// A file, FIFO or process could not be made or used.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        source: std::io::Error,
    },
    /// Sniper stopped before its simulation ended, or reported what no simulation gives.
    #[error("Sniper failed ({why}); its log: {}", log.display())]
    Failed {
        /// Why.
        why: String,
        /// Its output.
        log: PathBuf,
    },
    /// The stream could not be written.
    #[error(transparent)]
    Sift(#[from] bbv_sift::SiftError),
}

impl SniperError {
    pub(crate) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SniperError {
        let what = what.into();
        move |source| SniperError::Io { what, source }
    }
}

/// A Sniper build (scripts/sniper's folder).
#[derive(Clone, Debug)]
pub struct Sniper {
    /// The folder holding `run-sniper`.
    pub root: PathBuf,
}

impl Sniper {
    /// The build in `explicit` (its folder), else in `$BBV_SNIPER_CACHE`,
    /// `$XDG_CACHE_HOME/bbvkit/sniper` or `~/.cache/bbvkit/sniper`.
    pub fn find(explicit: Option<&Path>) -> Result<Sniper, SniperError> {
        let env = |k: &str| {
            std::env::var_os(k)
                .filter(|v| !v.is_empty())
                .map(PathBuf::from)
        };
        let root = match explicit {
            Some(p) => p.to_path_buf(),
            None => env("BBV_SNIPER_CACHE")
                .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("bbvkit/sniper")))
                .or_else(|| env("HOME").map(|h| h.join(".cache/bbvkit/sniper")))
                .ok_or_else(|| SniperError::Missing("no HOME to look in".into()))?,
        };
        // Sniper runs in a folder of its own: a relative name would not find it there.
        let root = std::path::absolute(&root).unwrap_or(root);
        for (file, what) in [
            ("run-sniper", "its launcher"),
            ("lib/sniper", "its backend"),
        ] {
            if !root.join(file).is_file() {
                return Err(SniperError::Missing(format!(
                    "{what}, {}, does not exist",
                    root.join(file).display()
                )));
            }
        }
        Ok(Sniper { root })
    }
}
