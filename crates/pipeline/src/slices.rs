//! The slices of a multi-threaded run (LoopPoint's regions) as files of the run directory.
//!
//! The plugin writes `slices.cuts` (its `slices` file: `start K`, then `cut S THREAD BLOCK`)
//! and one `thread.N.slices` per thread (`S FILTERED id:instructions ...`). Slices before K
//! are thread 1's intervals, from `bb.out`, since thread 1 ran alone then. From them this
//! module writes:
//! * `global.bb`: one vector per slice (in a sliced run the last one ends at the program's
//!   exit, not at a boundary), thread t's block ids (t from 0) shifted by t x the number of
//!   blocks, instructions of excluded images left out; first line
//!   `#make-balanced-concat-vectors.py num_threads N` as LoopPoint's tools write it;
//! * `slices.tsv`: per slice its start (`program-start`, `interval-cut`, or `thread-N:BLOCK`),
//!   its filtered instructions and each thread's.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::rundir::{self, BlockRow};
use bbv_files::AtomicFiles;

use crate::PipelineError;

/// Where a slice starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Boundary {
    /// Program start (slice 0).
    Start,
    /// Thread 1's interval cut of the same index (before a second thread ran).
    IntervalCut,
    /// Thread `thread` starting block `block` (a loop head of the program's own code).
    Cut {
        /// Thread number (1 = main).
        thread: u32,
        /// Block id.
        block: u32,
    },
}

/// One slice.
#[derive(Clone, Debug, PartialEq)]
pub struct SliceRow {
    /// Where it starts.
    pub boundary: Boundary,
    /// Filtered instructions of all threads.
    pub filtered: u64,
    /// Filtered instructions per thread (index = thread number - 1).
    pub threads: Vec<u64>,
}

/// Slice -> (thread, block) of the plugin's cuts.
type Cuts = BTreeMap<u64, (u32, u32)>;
/// (block id, instructions) pairs of a vector.
type Pairs = Vec<(u32, u64)>;
/// Drops the excluded blocks of a vector: (filtered instructions, the rest).
type Filter<'a> = &'a dyn Fn(&[(u32, u64)]) -> (u64, Pairs);

/// Per slice, the window after its cut: (block id, filtered instructions of all threads
/// between the cut and the block's first execution).
pub type Windows = BTreeMap<u64, Vec<(u32, u64)>>;

/// The largest `slices.cuts` read (read whole: a last line the plugin did not finish is left
/// out): a line per slice and thread.
pub const CUTS_BYTES: u64 = 1 << 30;

/// The plugin's boundary file: the first slice it counted, its cuts and their windows.
pub fn read_cuts(path: &Path) -> Result<(u64, Cuts, Windows), PipelineError> {
    let text = bbv_files::input::read_text(path, CUTS_BYTES)?;
    let mut start = None;
    let mut cuts = BTreeMap::new();
    let mut windows = Windows::new();
    for (n, line) in bbv_plugin_contract::whole_lines(&text).lines().enumerate() {
        let bad = || PipelineError::Parse {
            path: path.into(),
            line: n + 1,
            what: "`start K`, `cut SLICE THREAD BLOCK` or `win SLICE id:delta ...`".into(),
        };
        let f: Vec<&str> = line.split(' ').collect();
        match f.as_slice() {
            ["win", s, events @ ..] => {
                let s: u64 = s.parse().map_err(|_| bad())?;
                windows.insert(s, rundir::parse_id_pairs(events.iter().copied(), bad)?);
            }
            ["start", k] if start.is_none() => start = Some(k.parse().map_err(|_| bad())?),
            ["cut", s, t, b] => {
                let s: u64 = s.parse().map_err(|_| bad())?;
                let v = (t.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?);
                if cuts.insert(s, v).is_some() {
                    return Err(bad());
                }
            }
            _ => return Err(bad()),
        }
    }
    let start = start.ok_or_else(|| PipelineError::Parse {
        path: path.into(),
        line: 1,
        what: "`start K`".into(),
    })?;
    Ok((start, cuts, windows))
}

/// One thread's slice file, read a line at a time: (slice, filtered, pairs).
struct ThreadLines {
    path: PathBuf,
    lines: bbv_files::input::Lines,
    last: Option<u64>,
}

impl ThreadLines {
    fn open(path: &Path) -> Result<ThreadLines, PipelineError> {
        Ok(ThreadLines {
            path: path.into(),
            lines: bbv_files::input::Lines::open(path, rundir::MARKS_LINE)?,
            last: None,
        })
    }

    fn next(&mut self) -> Result<Option<(u64, u64, Pairs)>, PipelineError> {
        let Some((n, line)) = self.lines.next_line()? else {
            return Ok(None);
        };
        let bad = || PipelineError::Parse {
            path: self.path.clone(),
            line: n as usize,
            what: "`SLICE FILTERED id:instructions ...` with slices in ascending order".into(),
        };
        let mut f = line.split(' ');
        let s: u64 = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        let filtered: u64 = f.next().and_then(|x| x.parse().ok()).ok_or_else(bad)?;
        if self.last.is_some_and(|l| l >= s) {
            return Err(bad());
        }
        self.last = Some(s);
        Ok(Some((s, filtered, rundir::parse_id_pairs(f, bad)?)))
    }
}

/// The ids of blocks in excluded images.
pub fn excluded_ids(blocks: &[BlockRow], exclude: &[String]) -> HashSet<u32> {
    blocks
        .iter()
        .filter(|b| {
            b.image
                .as_deref()
                .is_some_and(|i| bbv_profile::image_matches(i, exclude))
        })
        .map(|b| b.id)
        .collect()
}

/// Builds `global.bb` and `slices.tsv` in `dir` from the collected files; `threads` = the
/// thread numbers that ran. Returns the slices, one per vector of `global.bb`; when slicing
/// ran (`slices.cuts` exists) the last one ended at the program's exit.
pub fn build(
    dir: &Path,
    threads: &[u32],
    blocks: &[BlockRow],
    exclude: &[String],
) -> Result<Vec<SliceRow>, PipelineError> {
    let n_threads = threads.iter().copied().max().unwrap_or(1) as usize;
    let excluded = excluded_ids(blocks, exclude);
    let cuts_path = dir.join(bbv_rundir::files::SLICE_CUTS);
    let (first, cuts) = if cuts_path.exists() {
        let (first, cuts, _) = read_cuts(&cuts_path)?;
        (first, cuts)
    } else {
        // One thread only: every interval is a slice, and the unfinished one the last.
        (u64::MAX, BTreeMap::new())
    };
    let mut slices: Vec<(SliceRow, Vec<(u32, u64)>)> = Vec::new();
    let filter = |pairs: &[(u32, u64)]| -> (u64, Vec<(u32, u64)>) {
        let kept: Vec<(u32, u64)> = pairs
            .iter()
            .copied()
            .filter(|(id, _)| !excluded.contains(id))
            .collect();
        (kept.iter().map(|p| p.1).sum(), kept)
    };
    // Thread 1's intervals before slicing began.
    let mut reader = bbv_profile::BbvReader::open(&rundir::thread_file(dir, 1))?;
    let mut v = Vec::new();
    while (slices.len() as u64) < first && reader.next_vector(&mut v)? {
        let pairs: Vec<(u32, u64)> = v.iter().map(|t| (t.id, t.value as u64)).collect();
        let (filtered, kept) = filter(&pairs);
        let mut per = vec![0; n_threads];
        per[0] = filtered;
        let boundary = if slices.is_empty() {
            Boundary::Start
        } else {
            Boundary::IntervalCut
        };
        slices.push((
            SliceRow {
                boundary,
                filtered,
                threads: per,
            },
            kept,
        ));
    }
    if first != u64::MAX {
        if slices.len() as u64 != first {
            return Err(PipelineError::Invalid(format!(
                "{}: slicing began at slice {first}, but {} has {} intervals",
                cuts_path.display(),
                rundir::thread_file(dir, 1).display(),
                slices.len()
            )));
        }
        merge_threads(
            dir,
            threads,
            n_threads,
            blocks.len(),
            first,
            &cuts,
            &filter,
            &mut slices,
        )?;
    } else if slices.is_empty() {
        return Ok(Vec::new());
    }
    // A sliced run ends with a slice the program's exit cut short: it is clustered too (its
    // instructions count in the multipliers), but never a region (see looppoint.rs).
    write_global(dir, n_threads, &slices)?;
    let rows: Vec<SliceRow> = slices.into_iter().map(|(r, _)| r).collect();
    let mut files = AtomicFiles::default();
    files.write(&dir.join(bbv_rundir::files::SLICES), |w| {
        write_table(w, &rows)
    })?;
    files.commit()?;
    Ok(rows)
}

/// Adds the slices counted per thread (from `first` on) to `slices`, their vectors already
/// shifted by thread.
#[allow(clippy::too_many_arguments)]
fn merge_threads(
    dir: &Path,
    threads: &[u32],
    n_threads: usize,
    n_blocks: usize,
    first: u64,
    cuts: &Cuts,
    filter: Filter,
    slices: &mut Vec<(SliceRow, Pairs)>,
) -> Result<(), PipelineError> {
    // Shift thread 1's prefix vectors (already thread 0: no shift).
    let mut by_slice: BTreeMap<u64, (SliceRow, Vec<(u32, u64)>)> = BTreeMap::new();
    for &t in threads {
        let path = dir.join(bbv_plugin_contract::files::thread_slices(t));
        if !path.exists() {
            continue;
        }
        let shift = (t as u64 - 1) * n_blocks as u64;
        let mut lines = ThreadLines::open(&path)?;
        while let Some((s, _, pairs)) = lines.next()? {
            if s < first {
                return Err(PipelineError::Invalid(format!(
                    "{}: slice {s} is before the first sliced one ({first})",
                    path.display()
                )));
            }
            let (filtered, kept) = filter(&pairs);
            let e = by_slice.entry(s).or_insert_with(|| {
                let boundary = match cuts.get(&s) {
                    Some(&(thread, block)) => Boundary::Cut { thread, block },
                    None if s == 0 => Boundary::Start,
                    None => Boundary::IntervalCut,
                };
                (
                    SliceRow {
                        boundary,
                        filtered: 0,
                        threads: vec![0; n_threads],
                    },
                    Vec::new(),
                )
            });
            e.0.filtered += filtered;
            e.0.threads[t as usize - 1] += filtered;
            e.1.extend(kept.iter().map(|&(id, c)| ((id as u64 + shift) as u32, c)));
        }
    }
    for (s, (row, mut v)) in by_slice {
        if s != slices.len() as u64 {
            return Err(PipelineError::Invalid(format!(
                "{}: slice {} has no vector in any thread's slice file",
                dir.join(bbv_rundir::files::SLICE_CUTS).display(),
                slices.len()
            )));
        }
        if s > first && !cuts.contains_key(&s) {
            return Err(PipelineError::Invalid(format!(
                "{}: slice {s} has vectors but no cut",
                dir.join(bbv_rundir::files::SLICE_CUTS).display()
            )));
        }
        v.sort_unstable();
        slices.push((row, v));
    }
    Ok(())
}

fn write_global(
    dir: &Path,
    n_threads: usize,
    slices: &[(SliceRow, Vec<(u32, u64)>)],
) -> Result<(), PipelineError> {
    let mut files = AtomicFiles::default();
    files.write(&dir.join(bbv_rundir::files::GLOBAL_BB), |w| {
        writeln!(
            w,
            "#make-balanced-concat-vectors.py num_threads {n_threads}"
        )?;
        let mut bw = bbv_profile::BbvWriter::new(w);
        for (_, v) in slices {
            bw.write_vector(v)?;
        }
        bw.finish().map(drop)
    })?;
    files.commit()?;
    Ok(())
}

fn write_table(w: &mut impl Write, rows: &[SliceRow]) -> std::io::Result<()> {
    writeln!(w, "slice\tstart\tfiltered\tthreads")?;
    for (s, r) in rows.iter().enumerate() {
        let start = match r.boundary {
            Boundary::Start => "program-start".to_string(),
            Boundary::IntervalCut => "interval-cut".to_string(),
            Boundary::Cut { thread, block } => format!("thread-{thread}:{block}"),
        };
        let per: Vec<String> = r.threads.iter().map(|x| x.to_string()).collect();
        writeln!(w, "{s}\t{start}\t{}\t{}", r.filtered, per.join(","))?;
    }
    Ok(())
}

/// Reads `slices.tsv`.
pub fn read_table(path: &Path) -> Result<Vec<SliceRow>, PipelineError> {
    let mut lines = bbv_files::input::Lines::open(path, rundir::TABLE_LINE)?;
    let mut rows = Vec::new();
    while let Some((n, line)) = lines.next_line()? {
        if n == 1 {
            continue;
        }
        let bad = || PipelineError::Parse {
            path: path.into(),
            line: n as usize,
            what: "`SLICE START FILTERED T1,T2,...` (tab-separated, slices in order)".into(),
        };
        let f: Vec<&str> = line.split('\t').collect();
        let [s, start, filtered, per] = f.as_slice() else {
            return Err(bad());
        };
        if s.parse::<usize>().ok() != Some(rows.len()) {
            return Err(bad());
        }
        let boundary = match *start {
            "program-start" => Boundary::Start,
            "interval-cut" => Boundary::IntervalCut,
            other => {
                let (t, b) = other
                    .strip_prefix("thread-")
                    .and_then(|x| x.split_once(':'))
                    .ok_or_else(bad)?;
                Boundary::Cut {
                    thread: t.parse().map_err(|_| bad())?,
                    block: b.parse().map_err(|_| bad())?,
                }
            }
        };
        let threads = per
            .split(',')
            .map(|x| x.parse::<u64>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|_| bad())?;
        rows.push(SliceRow {
            boundary,
            filtered: filtered.parse().map_err(|_| bad())?,
            threads,
        });
    }
    Ok(rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cut_files_and_tables() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("slices.cuts");
        std::fs::write(
            &p,
            "start 2\ncut 3 2 17\nwin 3 17:0 5:40\ncut 4 1 9\ncut 5 1",
        )
        .unwrap();
        let (first, cuts, _) = read_cuts(&p).unwrap();
        assert_eq!(first, 2);
        assert_eq!(cuts.get(&3), Some(&(2, 17)));
        assert_eq!(cuts.len(), 2, "an unfinished last line is left out");
        assert_eq!(
            read_cuts(&p).unwrap().2.get(&3),
            Some(&vec![(17, 0), (5, 40)])
        );
        std::fs::write(&p, "start 0\ncut 1 x 3\n").unwrap();
        let e = read_cuts(&p).unwrap_err().to_string();
        assert!(e.contains("slices.cuts:2:"), "{e}");

        let rows = vec![
            SliceRow {
                boundary: Boundary::Start,
                filtered: 10,
                threads: vec![10, 0],
            },
            SliceRow {
                boundary: Boundary::Cut {
                    thread: 2,
                    block: 5,
                },
                filtered: 30,
                threads: vec![12, 18],
            },
        ];
        let t = dir.path().join("slices.tsv");
        let mut out = Vec::new();
        write_table(&mut out, &rows).unwrap();
        std::fs::write(&t, out).unwrap();
        assert_eq!(read_table(&t).unwrap(), rows);
        std::fs::write(&t, "slice\tstart\tfiltered\tthreads\n0\tsomewhere\t1\t1\n").unwrap();
        assert!(read_table(&t).unwrap_err().to_string().contains(":2:"));
    }
}
