//! The figures ChampSim prints at the end of a run: the simulated phase's instructions and
//! cycles (its `CPU 0 cumulative IPC: X instructions: N cycles: C` line).

/// What went wrong reading ChampSim's output.
#[derive(Debug, thiserror::Error)]
pub enum StatsError {
    /// No `cumulative IPC` line: the run did not finish.
    #[error("no `CPU 0 cumulative IPC` line in ChampSim's output (did it finish?)")]
    Missing,
    /// The line is there but not as expected.
    #[error("ChampSim's line `{0}` is not `CPU 0 cumulative IPC: X instructions: N cycles: C`")]
    Malformed(String),
}

/// The simulated phase of one ChampSim run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Figures {
    /// Instructions retired in the simulated phase.
    pub instructions: u64,
    /// Cycles of the simulated phase.
    pub cycles: u64,
}

impl Figures {
    /// Cycles per instruction.
    pub fn cpi(&self) -> f64 {
        self.cycles as f64 / self.instructions.max(1) as f64
    }

    /// Reads CPU 0's final line from ChampSim's standard output (the last one printed: the
    /// warmup's own figures come earlier).
    pub fn parse(output: &str) -> Result<Figures, StatsError> {
        let line = output
            .lines()
            .rev()
            .find(|l| l.trim_start().starts_with("CPU 0 cumulative IPC:"))
            .ok_or(StatsError::Missing)?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let after = |key: &str| -> Option<u64> {
            let i = words.iter().position(|w| *w == key)?;
            words.get(i + 1)?.parse().ok()
        };
        match (after("instructions:"), after("cycles:")) {
            (Some(instructions), Some(cycles)) if instructions > 0 => Ok(Figures {
                instructions,
                cycles,
            }),
            _ => Err(StatsError::Malformed(bbv_files::input::quote(
                line.trim().as_bytes(),
            ))),
        }
    }
}

/// A heartbeat line's cumulative instructions and cycles (`Heartbeat CPU 0 instructions: N
/// cycles: C ...`, printed every 10 million instructions, or as often as a build from
/// `BBV_CHAMPSIM_HEARTBEAT=N scripts/champsim` says); None for any other line.
pub fn heartbeat(line: &str) -> Option<(u64, u64)> {
    let rest = line
        .trim_start()
        .strip_prefix("Heartbeat CPU 0 instructions:")?;
    let mut words = rest.split_whitespace();
    let instructions = words.next()?.parse().ok()?;
    (words.next()? == "cycles:").then_some(())?;
    Some((instructions, words.next()?.parse().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heartbeats_are_read() {
        let l = "Heartbeat CPU 0 instructions: 55000101 cycles: 37771765 heartbeat IPC: 1.504 \
                 cumulative IPC: 1.456 (Simulation time: 00 hr 05 min 11 sec)";
        assert_eq!(heartbeat(l), Some((55_000_101, 37_771_765)));
        assert_eq!(heartbeat("Heartbeat CPU 0 instructions: 5 cycles:"), None);
        assert_eq!(heartbeat("Heartbeat CPU 0 instructions: x cycles: 5"), None);
        assert_eq!(
            heartbeat("CPU 0 cumulative IPC: 1.5 instructions: 3 cycles: 2"),
            None
        );
    }

    #[test]
    fn the_last_cumulative_line_counts() {
        let out = "Warmup complete CPU 0 instructions: 10000 cycles: 9000\n\
                   CPU 0 cumulative IPC: 1.5 instructions: 30000 cycles: 20000\n\
                   other\n";
        let f = Figures::parse(out).unwrap();
        assert_eq!((f.instructions, f.cycles), (30000, 20000));
        assert!((f.cpi() - 2.0 / 3.0).abs() < 1e-12);
        assert!(matches!(
            Figures::parse("nothing"),
            Err(StatsError::Missing)
        ));
        assert!(matches!(
            Figures::parse("CPU 0 cumulative IPC: x instructions: y"),
            Err(StatsError::Malformed(_))
        ));
    }
}
