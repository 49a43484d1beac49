//! Running ChampSim: finding the binary scripts/champsim builds, and one simulation of a trace
//! (its warmup and simulated instructions), read back as [`Figures`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::stats::{Figures, StatsError};

/// What went wrong running ChampSim.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    /// No ChampSim where it was looked for.
    #[error(
        "ChampSim not found ({0}): build it with scripts/champsim, or name it with --champsim PATH"
    )]
    Missing(String),
    /// It could not be started.
    #[error("cannot start {}: {source}", path.display())]
    Start {
        /// The binary.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// It failed, or its output lacks the figures.
    #[error("ChampSim on {}: {why}", trace.display())]
    Failed {
        /// The trace.
        trace: PathBuf,
        /// Its exit status or the parse error, and the end of its error output.
        why: String,
    },
    /// It reached the end of the trace and started it again: the figures would mix the
    /// trace's start into its end.
    #[error("ChampSim reached the end of {} before finishing: the trace is too short for the instructions asked", trace.display())]
    EndOfTrace {
        /// The trace.
        trace: PathBuf,
    },
    /// Its output did not parse.
    #[error(transparent)]
    Stats(#[from] StatsError),
}

/// The ChampSim binary: `explicit`, else `$BBV_CHAMPSIM_CACHE/bin/champsim`, else
/// `$XDG_CACHE_HOME/bbvkit/champsim/bin/champsim`, else `~/.cache/bbvkit/champsim/bin/champsim`.
pub fn find(explicit: Option<&Path>) -> Result<PathBuf, SimError> {
    if let Some(p) = explicit {
        return if p.is_file() {
            Ok(p.to_path_buf())
        } else {
            Err(SimError::Missing(format!("{} does not exist", p.display())))
        };
    }
    let env = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    let cache = env("BBV_CHAMPSIM_CACHE")
        .or_else(|| env("XDG_CACHE_HOME").map(|c| c.join("bbvkit/champsim")))
        .or_else(|| env("HOME").map(|h| h.join(".cache/bbvkit/champsim")))
        .ok_or_else(|| SimError::Missing("no HOME to look in".into()))?;
    let bin = cache.join("bin/champsim");
    if bin.is_file() {
        Ok(bin)
    } else {
        Err(SimError::Missing(format!(
            "{} does not exist",
            bin.display()
        )))
    }
}

/// One simulation's result.
#[derive(Clone, Debug, PartialEq)]
pub struct Simulated {
    /// The simulated phase.
    pub figures: Figures,
    /// Wall seconds of the whole ChampSim run (warmup included).
    pub seconds: f64,
    /// ChampSim's own report (its standard output): every cache's and predictor's figures.
    pub output: String,
}

/// Runs ChampSim on `trace` (a path ChampSim opens itself: `.xz`/`.gz` files, or a pipe):
/// `warmup` instructions of warming, then `simulate` simulated.
pub fn run(bin: &Path, trace: &Path, warmup: u64, simulate: u64) -> Result<Simulated, SimError> {
    let start = Instant::now();
    let mut cmd = Command::new(bin);
    cmd.arg("--warmup-instructions")
        .arg(warmup.to_string())
        .arg("--simulation-instructions")
        .arg(simulate.to_string())
        .arg(trace)
        .stdin(Stdio::null());
    // Killed bbv leaves no ChampSim running (it inherited bbv's blocked SIGTERM and outlived it).
    bbv_files::interrupt::dies_with_bbv(&mut cmd);
    let out = cmd.output().map_err(|source| SimError::Start {
        path: bin.to_path_buf(),
        source,
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        return Err(SimError::Failed {
            trace: trace.to_path_buf(),
            why: format!("{}: {tail}", out.status),
        });
    }
    if stdout.contains("Reached end of trace") {
        return Err(SimError::EndOfTrace {
            trace: trace.to_path_buf(),
        });
    }
    Ok(Simulated {
        figures: Figures::parse(&stdout)?,
        seconds,
        output: stdout.into_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_champsim_names_the_script() {
        let e = find(Some(Path::new("/nonexistent/champsim"))).unwrap_err();
        assert!(e.to_string().contains("scripts/champsim"), "{e}");
    }
}
