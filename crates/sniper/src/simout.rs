//! Sniper's end-of-run report, `sim.out`: a table of `name | core 0 | core 1 ...` rows.

use std::path::Path;

use crate::SniperError;

/// Sniper's figures per simulated core, inside the region of interest.
#[derive(Clone, Debug, PartialEq)]
pub struct SimOut {
    /// Instructions each core retired.
    pub instructions: Vec<u64>,
    /// Each core's cycles (its time at Sniper's frequency, idle time included).
    pub cycles: Vec<u64>,
    /// Each core's idle nanoseconds, over its time's (`Idle time (ns)`, `Time (ns)`).
    pub idle: Vec<(f64, f64)>,
    /// The CPU seconds Sniper used (its processes', warming included), when its end was
    /// waited for ([`crate::Live::finish`]).
    pub cpu_seconds: Option<f64>,
}

impl SimOut {
    /// Core `core`'s cycles less its idle time. A core that warmed in Sniper's cache-only
    /// mode starts the region of interest behind the simulation's clock and idles until it
    /// catches up (gzip: 66% of a region's time, which made its CPI 2.5 times what the same
    /// region gives without the warmup); a single-threaded program's stream never waits
    /// otherwise (no system call is emulated), so its busy cycles are the region's.
    pub fn busy_cycles(&self, core: usize) -> u64 {
        let c = self.cycles[core] as f64;
        match self.idle.get(core) {
            Some(&(idle, time)) if time > 0.0 => (c * (1.0 - idle.max(0.0) / time)).round() as u64,
            _ => c as u64,
        }
    }
}

impl SimOut {
    /// Instructions of every core.
    pub fn total_instructions(&self) -> u64 {
        self.instructions.iter().sum()
    }

    /// The region's time in cycles: a single thread's busy cycles ([`SimOut::busy_cycles`]);
    /// with `threads`, the simulation's elapsed cycles (every core's clock reads the same),
    /// idle time included: a thread waiting for another is part of the program's time.
    pub fn region_cycles(&self, threads: bool) -> u64 {
        match threads {
            true => self.cycles.iter().copied().max().unwrap_or(0),
            false => self.busy_cycles(0),
        }
    }
}

impl SimOut {
    /// Reads `sim.out` (`log` is named in errors).
    pub fn read(path: &Path, log: &Path) -> Result<SimOut, SniperError> {
        let fail = |why: String| SniperError::Failed {
            why,
            log: log.to_path_buf(),
        };
        let text = bbv_files::input::read_text(path, 16 << 20)
            .map_err(|e| fail(format!("no report: {e}")))?;
        SimOut::parse(&text).map_err(|why| fail(format!("{}: {why}", path.display())))
    }

    /// Parses `sim.out`'s text.
    pub fn parse(text: &str) -> Result<SimOut, String> {
        let row = |name: &str| -> Result<Vec<u64>, String> {
            let line = text
                .lines()
                .find(|l| l.split('|').next().map(str::trim) == Some(name))
                .ok_or_else(|| format!("no '{name}' row"))?;
            line.split('|')
                .skip(1)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        format!(
                            "'{name}' row: '{}' is not a whole number",
                            bbv_files::input::quote(v.trim().as_bytes())
                        )
                    })
                })
                .collect()
        };
        let instructions = row("Instructions")?;
        let cycles = row("Cycles")?;
        // Signed (a core a few nanoseconds ahead reads -48) and fractional where printed so.
        let floats = |name: &str| -> Vec<f64> {
            (text.lines())
                .find(|l| l.split('|').next().map(str::trim) == Some(name))
                .map(|l| {
                    (l.split('|').skip(1))
                        .map(|v| v.trim().parse::<f64>().unwrap_or(0.0))
                        .collect()
                })
                .unwrap_or_default()
        };
        let idle = floats("Idle time (ns)")
            .into_iter()
            .zip(floats("Time (ns)"))
            .collect();
        if instructions.is_empty() || instructions.len() != cycles.len() {
            return Err(format!(
                "{} cores' instructions but {} cores' cycles",
                instructions.len(),
                cycles.len()
            ));
        }
        Ok(SimOut {
            instructions,
            cycles,
            idle,
            cpu_seconds: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: &str = "                                     | Core 0     | Core 1    \n  \
        Instructions                       |     199870 |      1200\n  \
        Cycles                             |    1536028 |   1536028\n  \
        IPC                                |       0.13 |      0.00\n  \
        Time (ns)                          |     295435 |    295435\n  \
        Idle time (ns)                     |     196272 |       -48\n";

    #[test]
    fn cores_are_read_by_row() {
        let s = SimOut::parse(TWO).unwrap();
        assert_eq!(s.instructions, [199870, 1200]);
        assert_eq!(s.cycles, [1536028, 1536028]);
        // Idle time left out; a core slightly ahead of the clock reads a negative idle time.
        assert_eq!(s.busy_cycles(0), 515569);
        assert_eq!(s.busy_cycles(1), 1536028);
    }

    #[test]
    fn broken_reports_say_what_is_wrong() {
        let e = SimOut::parse(&TWO.replace("Cycles", "Cykles")).unwrap_err();
        assert!(e.contains("no 'Cycles' row"), "{e}");
        let e = SimOut::parse(&TWO.replace("199870", "-5")).unwrap_err();
        assert!(e.contains("'-5' is not a whole number"), "{e}");
        let e = SimOut::parse(&TWO.replace("|   1536028", "")).unwrap_err();
        assert!(e.contains("2 cores' instructions but 1"), "{e}");
    }
}
