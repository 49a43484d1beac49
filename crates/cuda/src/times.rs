//! Per-launch hardware figures from timing runs (`bbv gpu run --repeat N`): each launch's time
//! on the GPU in every run (CUPTI's activity records, not host timers), its grid and block, its
//! registers per thread and shared memory per block; `times.tsv` in the run folder.
//!
//! A timing run counts nothing and synchronises nothing, so its kernels run as they do without
//! bbv. Launches are matched across runs by number: every run must launch the same kernels in
//! the same order (another program's records, or a program whose launches depend on the run,
//! are refused). A launch's time is its kernel's end minus start; the kernels of a graph launch
//! (not numbered launches) are summed apart, as time no launch accounts for.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use crate::live::LiveRun;
use crate::tsv::Row;
use crate::CudaError;

/// One launch over every timing run.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedLaunch {
    /// 0-based launch number.
    pub number: u64,
    /// Kernel name, mangled.
    pub name: String,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Registers per thread.
    pub registers: u32,
    /// Shared memory per block (static and dynamic), in bytes.
    pub shared: u64,
    /// Its time on the GPU in each run, in nanoseconds.
    pub ns: Vec<u64>,
}

/// Every launch's figures, and what the runs say of their own spread.
#[derive(Clone, Debug, PartialEq)]
pub struct Times {
    /// Launches in order.
    pub launches: Vec<TimedLaunch>,
    /// Per run: nanoseconds of kernels no numbered launch accounts for (graph launches').
    pub unattributed_ns: Vec<u64>,
}

impl Times {
    /// Per run: the total time of the numbered launches, in nanoseconds.
    pub fn totals(&self) -> Vec<u64> {
        let runs = self.unattributed_ns.len();
        (0..runs)
            .map(|r| self.launches.iter().map(|l| l.ns[r]).sum())
            .collect()
    }

    /// The relative spread of the runs' totals: (largest - smallest) / mean (0 for one run).
    pub fn total_spread(&self) -> f64 {
        spread(&self.totals())
    }

    /// The median over launches of each launch's relative spread across the runs.
    pub fn median_launch_spread(&self) -> f64 {
        let mut s: Vec<f64> = self.launches.iter().map(|l| spread(&l.ns)).collect();
        if s.is_empty() {
            return 0.0;
        }
        s.sort_by(f64::total_cmp);
        s[s.len() / 2]
    }

    /// Writes `times.tsv`: a line per launch, a time column per run.
    pub fn write_tsv(&self, w: &mut dyn Write) -> std::io::Result<()> {
        write!(w, "{}", TSV_COLUMNS.join("\t"))?;
        for r in 0..self.unattributed_ns.len() {
            write!(w, "\tns_{}", r + 1)?;
        }
        writeln!(w)?;
        for l in &self.launches {
            write!(
                w,
                "{}\t{}\t{}\t{}\t{}\t{}",
                l.number,
                l.name,
                crate::dims_cell(l.grid),
                crate::dims_cell(l.block),
                l.registers,
                l.shared
            )?;
            for ns in &l.ns {
                write!(w, "\t{ns}")?;
            }
            writeln!(w)?;
        }
        Ok(())
    }
}

/// `times.tsv`'s columns before the times.
const TSV_COLUMNS: [&str; 6] = [
    "launch",
    "kernel",
    "grid",
    "block",
    "registers",
    "shared_bytes",
];

/// Reads `times.tsv` back ([`Times::write_tsv`]'s columns).
pub fn read_tsv(path: &Path) -> Result<Vec<TimedLaunch>, CudaError> {
    // The time columns the header names (it comes first).
    let runs = std::cell::Cell::new(0);
    let header = |r: &Row, f: &[&str]| {
        runs.set(
            f.iter()
                .skip(6)
                .take_while(|c| c.starts_with("ns_"))
                .count(),
        );
        match f.len() >= 7 && f[..6] == TSV_COLUMNS && runs.get() == f.len() - 6 {
            true => Ok(()),
            false => Err(r.err("not a times.tsv header".into())),
        }
    };
    crate::tsv::read(path, header, |r, f| {
        let n = 6 + runs.get();
        if f.len() != n {
            return Err(r.err(format!("{} columns, the header has {n}", f.len())));
        }
        let ns: Vec<u64> = f[6..].iter().map(|c| r.num(c)).collect::<Result<_, _>>()?;
        if let Some(run) = ns.iter().position(|&t| t == 0) {
            return Err(r.err(format!(
                "launch {} has no duration in timing run {} (0 ns)",
                f[0],
                run + 1
            )));
        }
        Ok(TimedLaunch {
            number: r.num(f[0])?,
            name: f[1].to_string(),
            grid: r.dims(f[2])?,
            block: r.dims(f[3])?,
            registers: r.num(f[4])?,
            shared: r.num(f[5])?,
            ns,
        })
    })
}

pub use bbv_gpu::timed::spread;

/// Joins the timing runs' launches and kernel records.
pub fn join(runs: &[LiveRun]) -> Result<Times, CudaError> {
    let Some(first) = runs.first() else {
        return Err(CudaError::Tool("no timing run".into()));
    };
    let mut launches: Vec<TimedLaunch> = first
        .skipped
        .iter()
        .map(|s| TimedLaunch {
            number: s.number,
            name: s.name.clone(),
            grid: s.grid,
            block: s.block,
            registers: 0,
            shared: 0,
            ns: Vec::new(),
        })
        .collect();
    let mut unattributed = Vec::new();
    for (r, run) in runs.iter().enumerate() {
        let which = format!("timing run {}", r + 1);
        if !run.timing {
            return Err(CudaError::Tool(format!("{which} is not a timing run")));
        }
        if !run.complete {
            return Err(CudaError::Tool(format!(
                "{which} did not finish (its program died, or CUPTI refused: {})",
                run.errors.join("; ")
            )));
        }
        if run.skipped.len() != launches.len() {
            return Err(CudaError::Tool(format!(
                "{which} launched {} kernels, run 1 {}: the runs are not of one program, or its \
                 launches depend on the run",
                run.skipped.len(),
                launches.len()
            )));
        }
        for (l, s) in launches.iter().zip(&run.skipped) {
            if s.number != l.number || s.name != l.name {
                return Err(CudaError::Tool(format!(
                    "launch {} is {} in {which} but {} in run 1: the runs are not of one program",
                    l.number, s.name, l.name
                )));
            }
            if (s.grid, s.block) != (l.grid, l.block) {
                return Err(CudaError::Tool(format!(
                    "launch {} ({}) ran grid {} of blocks {} in {which} but grid {} of blocks \
                     {} in run 1: its launches depend on the run, so their times cannot be \
                     compared",
                    l.number,
                    l.name,
                    crate::dims_cell(s.grid),
                    crate::dims_cell(s.block),
                    crate::dims_cell(l.grid),
                    crate::dims_cell(l.block)
                )));
            }
        }
        let by_corr: HashMap<u32, u64> = run.correlations.iter().map(|&(n, c)| (c, n)).collect();
        let mut seen: HashMap<u64, &crate::live::KernelTime> = HashMap::new();
        let mut other = 0;
        for k in &run.kernels {
            match by_corr.get(&k.correlation) {
                Some(&n) => {
                    if seen.insert(n, k).is_some() {
                        return Err(CudaError::Tool(format!(
                            "{which}: launch {n} has two kernel records"
                        )));
                    }
                }
                None => other += k.end - k.start,
            }
        }
        for l in &mut launches {
            let k = seen.get(&l.number).ok_or_else(|| {
                CudaError::Tool(format!(
                    "{which}: launch {} ({}) has no duration (CUPTI gave no kernel record for \
                     it)",
                    l.number, l.name
                ))
            })?;
            l.ns.push(k.end - k.start);
            l.registers = k.registers;
            l.shared = k.static_shared + k.dynamic_shared;
        }
        unattributed.push(other);
    }
    Ok(Times {
        launches,
        unattributed_ns: unattributed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::live::{KernelTime, Skipped};

    /// A timing run of launches (name, ns), correlation ids 100 + n, plus a graph kernel.
    fn run(launches: &[(&str, u64)]) -> LiveRun {
        let mut r = LiveRun {
            timing: true,
            complete: true,
            ..LiveRun::default()
        };
        for (n, &(name, ns)) in launches.iter().enumerate() {
            let n = n as u64;
            r.skipped.push(Skipped {
                number: n,
                grid: [4, 1, 1],
                block: [128, 1, 1],
                name: name.into(),
            });
            r.correlations.push((n, 100 + n as u32));
            r.kernels.push(KernelTime {
                correlation: 100 + n as u32,
                start: 1000 * n,
                end: 1000 * n + ns,
                registers: 32,
                static_shared: 1024,
                dynamic_shared: 512,
            });
        }
        r.graph_correlations.push(7);
        r.kernels.push(KernelTime {
            correlation: 7,
            start: 0,
            end: 50,
            ..KernelTime::default()
        });
        r
    }

    #[test]
    fn runs_join_by_launch_and_their_spread_is_reported() {
        let t = join(&[
            run(&[("a", 100), ("b", 300)]),
            run(&[("a", 110), ("b", 290)]),
        ])
        .unwrap();
        assert_eq!(t.launches.len(), 2);
        assert_eq!(t.launches[0].ns, [100, 110]);
        assert_eq!(t.launches[1].registers, 32);
        assert_eq!(t.launches[1].shared, 1536);
        assert_eq!(t.totals(), [400, 400]);
        assert_eq!(t.total_spread(), 0.0);
        assert_eq!(t.unattributed_ns, [50, 50]);
        // Launch a: 10/105; launch b: 10/295; the median of two is the larger.
        assert!((t.median_launch_spread() - 10.0 / 105.0).abs() < 1e-9);
        let mut tsv = Vec::new();
        t.write_tsv(&mut tsv).unwrap();
        let tsv = String::from_utf8(tsv).unwrap();
        assert_eq!(
            tsv.lines().next().unwrap(),
            "launch\tkernel\tgrid\tblock\tregisters\tshared_bytes\tns_1\tns_2"
        );
        assert_eq!(
            tsv.lines().nth(1).unwrap(),
            "0\ta\t4,1,1\t128,1,1\t32\t1536\t100\t110"
        );
        // Read back as written; damaged files name their line.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("times.tsv");
        std::fs::write(&p, &tsv).unwrap();
        assert_eq!(read_tsv(&p).unwrap(), t.launches);
        for (bad, want) in [
            (
                tsv.replace("\t110\n", "\n"),
                ":2: 7 columns, the header has 8",
            ),
            (tsv.replacen("4,1,1", "4,1", 1), ":2: 4,1 is not X,Y,Z"),
            (tsv.replacen("\t100\t", "\tx\t", 1), ":2: x is not a number"),
            (
                tsv.replacen("\t110\n", "\t0\n", 1),
                ":2: launch 0 has no duration in timing run 2 (0 ns)",
            ),
            (tsv.replace("ns_2", "time"), ":1: not a times.tsv header"),
            (String::new(), ": empty file"),
        ] {
            std::fs::write(&p, bad).unwrap();
            let e = read_tsv(&p).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
    }

    #[test]
    fn runs_of_other_programs_and_missing_durations_are_refused() {
        let e = join(&[run(&[("a", 1)]), run(&[("b", 1)])]).unwrap_err();
        assert!(
            e.to_string().contains("launch 0 is b in timing run 2"),
            "{e}"
        );
        // The same kernels launched with other shapes: times of other work.
        let mut r = run(&[("a", 1)]);
        r.skipped[0].grid = [8, 1, 1];
        let e = join(&[run(&[("a", 1)]), r]).unwrap_err();
        assert!(
            e.to_string()
                .contains("launch 0 (a) ran grid 8,1,1 of blocks 128,1,1 in timing run 2"),
            "{e}"
        );
        let e = join(&[run(&[("a", 1)]), run(&[("a", 1), ("a", 1)])]).unwrap_err();
        assert!(e.to_string().contains("launched 2 kernels, run 1 1"), "{e}");
        let mut r = run(&[("a", 1), ("b", 2)]);
        r.kernels.remove(1);
        let e = join(&[r]).unwrap_err();
        assert!(
            e.to_string().contains("launch 1 (b) has no duration"),
            "{e}"
        );
        let mut r = run(&[("a", 1)]);
        r.kernels.push(r.kernels[0]);
        let e = join(&[r]).unwrap_err();
        assert!(e.to_string().contains("two kernel records"), "{e}");
        let mut r = run(&[("a", 1)]);
        r.complete = false;
        assert!(join(&[r])
            .unwrap_err()
            .to_string()
            .contains("did not finish"));
        let mut r = run(&[("a", 1)]);
        r.timing = false;
        assert!(join(&[r])
            .unwrap_err()
            .to_string()
            .contains("not a timing run"));
        assert!(join(&[]).is_err());
    }
}
