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
    /// Its figures cannot be the simulation asked for: no cycles, or a count of instructions
    /// more than 1% away from the instructions asked.
    #[error("ChampSim on {}: {why}; its report is not used", trace.display())]
    Implausible {
        /// The trace.
        trace: PathBuf,
        /// What was reported against what was asked.
        why: String,
    },
}

/// Refuses figures that cannot be the simulation of `asked` instructions: every later number
/// (CPI, the estimate, its band) would be silently wrong.
fn plausible(f: &Figures, asked: u64, trace: &Path) -> Result<(), SimError> {
    let off = f.instructions.abs_diff(asked) as f64 > 0.01 * asked as f64;
    if f.cycles == 0 || f.instructions == 0 || off {
        return Err(SimError::Implausible {
            trace: trace.to_path_buf(),
            why: format!(
                "{} instructions in {} cycles reported where {asked} instructions were asked",
                f.instructions, f.cycles
            ),
        });
    }
    Ok(())
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
    /// Wall seconds until ChampSim said its warmup had finished (0 without a warmup line).
    pub warmup_seconds: f64,
    /// ChampSim's CPU seconds (user and system; what the simulation costs, however many
    /// other processes share the cores), and those until its warmup had finished; None
    /// where `/proc` does not say.
    pub cpu: Option<(f64, f64)>,
    /// ChampSim's own report (its standard output): every cache's and predictor's figures.
    pub output: String,
}

/// The most ChampSim may print: its report is some 50 KB, with a heartbeat line per 10 million
/// instructions.
const MAX_OUTPUT: u64 = 64 << 20;

/// Runs ChampSim on `trace` (a path ChampSim opens itself: `.xz`/`.gz` files, or a pipe):
/// `warmup` instructions of warming, then `simulate` simulated.
pub fn run(bin: &Path, trace: &Path, warmup: u64, simulate: u64) -> Result<Simulated, SimError> {
    run_watched(bin, trace, warmup, simulate, &|_| {})
}

/// [`run`], calling `beat` with the instructions retired so far (warmup included) at every
/// heartbeat ChampSim prints.
pub fn run_watched(
    bin: &Path,
    trace: &Path,
    warmup: u64,
    simulate: u64,
    beat: &(dyn Fn(u64) + Sync),
) -> Result<Simulated, SimError> {
    let start = Instant::now();
    // ChampSim's report goes through C stdio, block-buffered into a pipe: coreutils' stdbuf
    // makes it line-buffered so that heartbeats arrive as they are printed.
    let stdbuf = Path::new("/usr/bin/stdbuf");
    let mut cmd = if stdbuf.is_file() {
        let mut c = Command::new(stdbuf);
        c.arg("-oL").arg(bin);
        c
    } else {
        Command::new(bin)
    };
    cmd.arg("--warmup-instructions")
        .arg(warmup.to_string())
        .arg("--simulation-instructions")
        .arg(simulate.to_string())
        .arg(trace)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // Killed bbv leaves no ChampSim running (it inherited bbv's blocked SIGTERM and outlived it).
    bbv_files::interrupt::dies_with_bbv(&mut cmd);
    let start_error = |source| SimError::Start {
        path: bin.to_path_buf(),
        source,
    };
    let mut child = cmd.spawn().map_err(start_error)?;
    let pid = child.id();
    let (out, warmup_seconds, warmup_cpu) = read_output(&mut child, start, beat);
    let (stdout, err) = (out.stdout, out.stderr);
    if out.overflowed {
        let _ = child.kill();
        let _ = child.wait();
        return Err(SimError::Failed {
            trace: trace.to_path_buf(),
            why: format!(
                "{} printed more than {} MiB or a line over a megabyte, not a ChampSim report ({})",
                bin.display(),
                MAX_OUTPUT >> 20,
                output_tail(&stdout)
            ),
        });
    }
    // At the end of its output ChampSim has exited or is exiting: unreaped, its /proc entry
    // holds its final times.
    let cpu = cpu_seconds(pid).map(|all| (all, warmup_cpu.unwrap_or(0.0)));
    let status = child.wait().map_err(start_error)?;
    let seconds = start.elapsed().as_secs_f64();
    if !status.success() {
        let tail: String = err.lines().rev().take(3).collect::<Vec<_>>().join(" | ");
        return Err(SimError::Failed {
            trace: trace.to_path_buf(),
            why: format!("{status}: {tail}"),
        });
    }
    if stdout.contains("Reached end of trace") {
        return Err(SimError::EndOfTrace {
            trace: trace.to_path_buf(),
        });
    }
    let figures = Figures::parse(&stdout).map_err(|e| SimError::Failed {
        trace: trace.to_path_buf(),
        why: format!("{e}; {}", output_tail(&stdout)),
    })?;
    plausible(&figures, simulate, trace)?;
    Ok(Simulated {
        figures,
        seconds,
        warmup_seconds,
        cpu,
        output: stdout,
    })
}

/// ChampSim's standard output (at most [`MAX_OUTPUT`]) and the first megabyte of its error
/// output, read as it runs: each heartbeat goes to `beat`, and the wall and CPU seconds at
/// which its warmup finished are noted.
fn read_output(
    child: &mut std::process::Child,
    start: Instant,
    beat: &(dyn Fn(u64) + Sync),
) -> (bbv_files::child::Output, f64, Option<f64>) {
    let mut warmup_seconds = 0.0;
    let mut warmup_cpu = None;
    let pid = child.id();
    let o = bbv_files::child::read_bounded(child, MAX_OUTPUT, 1 << 20, &mut |l| {
        if let Some((retired, _)) = crate::stats::heartbeat(l) {
            beat(retired);
        }
        if warmup_seconds == 0.0 && l.starts_with("Warmup finished") {
            warmup_seconds = start.elapsed().as_secs_f64();
            warmup_cpu = cpu_seconds(pid);
        }
        true
    });
    (o, warmup_seconds, warmup_cpu)
}

/// How much ChampSim printed and its last line (shortened): what a user needs to see why its
/// report did not read.
fn output_tail(stdout: &str) -> String {
    let last = stdout
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("");
    format!(
        "its output: {} lines, the last `{}`",
        stdout.lines().count(),
        bbv_files::input::quote(last.as_bytes())
    )
}

/// CPU seconds (user and system) process `pid` has used, from `/proc/PID/stat` (fields 14
/// and 15, in clock ticks of 1/100 s, as Linux reports them to user space).
fn cpu_seconds(pid: u32) -> Option<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) may hold spaces: count from the ')' that ends it.
    let mut f = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
    let utime: u64 = f.next()?.parse().ok()?;
    let stime: u64 = f.next()?.parse().ok()?;
    Some((utime + stime) as f64 / 100.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_seconds_are_read_from_proc() {
        // Spinning, this process's CPU time grows by a tenth of a second, however loaded the
        // machine (the wall-clock limit only stops a broken reading).
        let me = std::process::id();
        let before = cpu_seconds(me).unwrap();
        let deadline = Instant::now() + std::time::Duration::from_secs(60);
        while cpu_seconds(me).unwrap() < before + 0.1 {
            assert!(Instant::now() < deadline, "no CPU time counted");
            for i in 0..1_000_000u64 {
                std::hint::black_box(i);
            }
        }
        assert_eq!(cpu_seconds(u32::MAX), None);
    }

    #[test]
    fn implausible_figures_are_refused() {
        let t = Path::new("region-1.champsim.xz");
        let f = |instructions, cycles| Figures {
            instructions,
            cycles,
        };
        assert!(plausible(&f(2_000_003, 1_700_000), 2_000_000, t).is_ok());
        assert!(plausible(&f(1_990_000, 1), 2_000_000, t).is_ok());
        for (bad, why) in [
            (f(5, 9), "5 instructions in 9 cycles reported where 2000000"),
            (f(2_000_000, 0), "in 0 cycles"),
            (f(2_030_000, 10), "2030000 instructions"),
            (f(0, 0), "0 instructions"),
        ] {
            let e = plausible(&bad, 2_000_000, t).unwrap_err().to_string();
            assert!(e.contains(why) && e.contains("region-1"), "{e}");
        }
    }

    #[test]
    fn a_missing_champsim_names_the_script() {
        let e = find(Some(Path::new("/nonexistent/champsim"))).unwrap_err();
        assert!(e.to_string().contains("scripts/champsim"), "{e}");
    }
}
