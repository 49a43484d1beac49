//! The points of a multi-threaded run in LoopPoint's manner: SimPoint's choice among the
//! slices of `global.bb`, with (PC, count over all threads) markers at slice boundaries.
//!
//! A boundary before slicing began is one of thread 1's interval cuts, marked as in
//! single-threaded runs ([`Placer::place`]); a boundary the plugin cut is the first instruction
//! of the loop head it cut at, counted over every thread: the executions of that instruction
//! before the slice (its own block's and those of blocks running through it, summed over the
//! threads' slice vectors), plus one.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use crate::markers::{Placer, Profile};
use crate::regions::{self, Entry};
use crate::rundir::{BlockRow, ImageRow, Marker, Point, Summary, Window};
use crate::slices::{self, Boundary, SliceRow};
use crate::PipelineError;

/// Blocks of the chosen slices, merged over threads: (id, instructions).
type Kept = HashMap<u64, Vec<(u32, u64)>>;

/// Reads `global.bb`: the merged cumulative counts before each slice in `at`, and the merged
/// vectors of the slices in `keep`.
pub fn read_global(
    dir: &Path,
    n_blocks: usize,
    at: &BTreeSet<u64>,
    keep: &BTreeSet<u64>,
) -> Result<(HashMap<u64, Vec<u64>>, Kept), PipelineError> {
    let path = dir.join("global.bb");
    let mut reader = bbv_profile::BbvReader::open(&path)?;
    let mut cum = vec![0u64; n_blocks + 1];
    let (mut snaps, mut kept) = (HashMap::new(), Kept::new());
    let mut v = Vec::new();
    let mut j = 0u64;
    loop {
        if at.contains(&j) {
            snaps.insert(j, cum.clone());
        }
        if !reader.next_vector(&mut v)? {
            break;
        }
        let mut merged: HashMap<u32, u64> = HashMap::new();
        for t in &v {
            let id = ((t.id as usize - 1) % n_blocks.max(1)) + 1;
            cum[id] += t.value as u64;
            if keep.contains(&j) {
                *merged.entry(id as u32).or_default() += t.value as u64;
            }
        }
        if keep.contains(&j) {
            let mut m: Vec<(u32, u64)> = merged.into_iter().collect();
            m.sort_unstable();
            kept.insert(j, m);
        }
        j += 1;
    }
    Ok((snaps, kept))
}

/// Warmup slices before each region: the warmup instructions over the per-thread interval,
/// rounded up.
fn warmup_slices(s: &Summary) -> u64 {
    if s.warmup == 0 {
        0
    } else {
        s.warmup.div_ceil(s.interval.max(1))
    }
}

/// Everything a boundary's marker needs.
struct Ctx<'a> {
    rows: &'a [SliceRow],
    placer: &'a Placer<'a>,
    cum: &'a HashMap<u64, Vec<u64>>,
}

/// Where slice `b` starts; `b` = the number of slices is the end of the last one, a cut of
/// thread 1 when its intervals are the slices (a sliced run's last slice has no end).
fn boundary(rows: &[SliceRow], b: u64) -> Option<Boundary> {
    match rows.get(b as usize) {
        Some(r) => Some(r.boundary),
        None if b as usize == rows.len()
            && rows
                .iter()
                .all(|r| !matches!(r.boundary, Boundary::Cut { .. })) =>
        {
            Some(Boundary::IntervalCut)
        }
        None => None,
    }
}

impl Ctx<'_> {
    /// Executions of block `id`'s first instruction before slice `b`.
    fn executions(&self, b: u64, id: u32) -> Option<u64> {
        match boundary(self.rows, b)? {
            Boundary::Cut { .. } => self.placer.executions_in(self.cum.get(&b)?, id),
            _ => self.placer.executions_before(b, id),
        }
    }

    /// The marker where slice `b` starts, and its block.
    fn marker(&self, b: u64, what: &str) -> Result<(Marker, u32), PipelineError> {
        let missing = || PipelineError::NoMarker {
            interval: b,
            what: what.to_string(),
            cut: b,
        };
        match boundary(self.rows, b) {
            Some(Boundary::Cut { block, .. }) => {
                let row = self.placer.row(block).ok_or_else(missing)?;
                let count = self.executions(b, block).ok_or_else(|| {
                    PipelineError::Invalid(format!(
                        "slice {b}: the count of its boundary block {block} cannot be read off the vectors (QEMU translated it with several lengths)"
                    ))
                })? + 1;
                Ok((
                    Marker {
                        image: row.image.clone().unwrap_or_default(),
                        offset: format!("{:#x}", row.offset),
                        count,
                    },
                    block,
                ))
            }
            Some(_) => {
                let p = self.placer.place(b).ok_or_else(missing)?;
                Ok((regions::marker(self.placer, &p)?, p.block))
            }
            None => Err(missing()),
        }
    }
}

/// Inputs of [`points`] read from the run directory.
pub struct Inputs<'a> {
    /// `blocks.tsv`.
    pub blocks: &'a [BlockRow],
    /// `images.tsv`.
    pub images: &'a [ImageRow],
    /// `marks.out` (thread 1's windows, for boundaries before slicing began).
    pub windows: &'a [Window],
    /// The main image's entry point (warmups reaching before slice 1).
    pub entry: Option<&'a Entry>,
}

/// The points of a looppoint run directory, heaviest first.
pub fn points(dir: &Path, s: &Summary, input: &Inputs) -> Result<Vec<Point>, PipelineError> {
    let rows = slices::read_table(&dir.join("slices.tsv"))?;
    let (chosen, labels) = crate::finish::chosen(dir)?;
    if labels.len() as u64 != s.intervals || rows.len() < labels.len() {
        return Err(PipelineError::Invalid(format!(
            "{}: {} labels for {} complete slices ({} in slices.tsv)",
            dir.join("simpoint.labels").display(),
            labels.len(),
            s.intervals,
            rows.len()
        )));
    }
    let chosen = substitute_last(dir, chosen, &labels, rows.len())?;
    let n_warm = warmup_slices(s);
    let mut needed = BTreeSet::new();
    for c in &chosen {
        if c.interval >= s.intervals {
            return Err(PipelineError::Invalid(format!(
                "{}: slice {} is beyond the {} complete slices",
                dir.join("simpoint.simpoints").display(),
                c.interval,
                s.intervals
            )));
        }
        needed.extend(c.interval.saturating_sub(n_warm)..=c.interval + 1);
    }
    let (cut_needs, prefix_needs): (BTreeSet<u64>, BTreeSet<u64>) = needed
        .iter()
        .partition(|&&b| matches!(boundary(&rows, b), Some(Boundary::Cut { .. })));
    // A last slice alone in its cluster has no region: its instructions go to the region
    // nearest to it, so that the multipliers still cover the whole run.
    let last = rows.len() as u64 - 1;
    let orphan = (dir.join("slices.cuts").exists()
        && !chosen
            .iter()
            .any(|c| labels.get(last as usize) == Some(&c.cluster)))
    .then_some(last);
    let mut keep: BTreeSet<u64> = chosen.iter().map(|c| c.interval).collect();
    keep.extend(orphan);
    let n_blocks = input.blocks.len();
    let (cum, kept) = read_global(dir, n_blocks, &cut_needs, &keep)?;
    let adopter = orphan.and_then(|o| {
        let v = kept.get(&o)?;
        chosen
            .iter()
            .map(|c| {
                (
                    c.cluster,
                    distance(v, kept.get(&c.interval).map_or(&[][..], |x| x)),
                )
            })
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .map(|(cluster, _)| (cluster, rows[o as usize].filtered))
    });
    let profile = Profile::read(
        &dir.join("bb.out"),
        n_blocks,
        &prefix_needs,
        &BTreeSet::new(),
    )?;
    // Before slicing began only thread 1 ran: its counts are the global counts.
    let placer = Placer::new(
        input.blocks,
        input.images,
        input.windows,
        HashSet::new(),
        &profile,
        s.interval,
    )
    .excluding(&s.exclude);
    let ctx = Ctx {
        rows: &rows,
        placer: &placer,
        cum: &cum,
    };
    let before = |b: u64| rows[..b as usize].iter().map(|r| r.filtered).sum::<u64>();
    chosen
        .iter()
        .map(|c| {
            let sl = c.interval;
            let (start, _) = ctx.marker(sl, "start")?;
            let (end, end_block) = ctx.marker(sl + 1, "end")?;
            let length = rows[sl as usize].filtered.max(1);
            let cluster: u64 = labels
                .iter()
                .zip(&rows)
                .filter(|(l, _)| **l == c.cluster)
                .map(|(_, r)| r.filtered)
                .sum::<u64>()
                + adopter.filter(|a| a.0 == c.cluster).map_or(0, |a| a.1);
            let (warmup, warmup_length) = warmup(&ctx, sl, n_warm, input.entry, &before)?;
            let end_before = ctx.executions(sl, end_block).unwrap_or(0);
            Ok(Point {
                cluster: c.cluster,
                interval: sl,
                weight: c.weight,
                start_instruction: before(sl),
                start,
                end: end.clone(),
                warmup,
                length,
                start_position: before(sl),
                warmup_length,
                multiplier: cluster as f64 / length as f64,
                end_relative: end.count.saturating_sub(end_before),
                thread_instructions: rows[sl as usize].threads.clone(),
                functions: hottest(kept.get(&sl).map_or(&[][..], |v| v), input.blocks),
            })
        })
        .collect()
}

/// The L1 distance of two vectors normalised to sum 1 (sorted by id).
fn distance(a: &[(u32, u64)], b: &[(u32, u64)]) -> f64 {
    let (sa, sb) = (
        a.iter().map(|x| x.1).sum::<u64>().max(1) as f64,
        b.iter().map(|x| x.1).sum::<u64>().max(1) as f64,
    );
    let (mut i, mut j, mut d) = (0, 0, 0.0);
    while i < a.len() || j < b.len() {
        match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) if x.0 == y.0 => {
                d += (x.1 as f64 / sa - y.1 as f64 / sb).abs();
                i += 1;
                j += 1;
            }
            (Some(x), Some(y)) if x.0 < y.0 => {
                d += x.1 as f64 / sa;
                i += 1;
            }
            (Some(x), None) => {
                d += x.1 as f64 / sa;
                i += 1;
            }
            (_, Some(y)) => {
                d += y.1 as f64 / sb;
                j += 1;
            }
            (None, None) => break,
        }
    }
    d
}

/// In a sliced run the last slice ends at the program's exit, where no marker can be: when
/// SimPoint chose it, its cluster's nearest other member stands in (SimPoint's weights stay);
/// a cluster of that slice alone has no region (its instructions join the nearest region's).
fn substitute_last(
    dir: &Path,
    chosen: Vec<regions::Chosen>,
    labels: &[usize],
    n_rows: usize,
) -> Result<Vec<regions::Chosen>, PipelineError> {
    if !dir.join("slices.cuts").exists() || n_rows == 0 {
        return Ok(chosen);
    }
    let last = n_rows as u64 - 1;
    if !chosen.iter().any(|c| c.interval == last) {
        return Ok(chosen);
    }
    let path = dir.join("simpoint.labels");
    let text = std::fs::read_to_string(&path).map_err(|e| PipelineError::io(&path, e))?;
    let distance: Vec<f64> = text
        .lines()
        .map(|l| {
            l.split_whitespace()
                .nth(1)
                .and_then(|d| d.parse().ok())
                .unwrap_or(f64::INFINITY)
        })
        .collect();
    Ok(chosen
        .into_iter()
        .filter_map(|mut c| {
            if c.interval == last {
                let best = (0..last as usize)
                    .filter(|&j| labels.get(j) == Some(&c.cluster))
                    .min_by(|&a, &b| distance[a].total_cmp(&distance[b]))?;
                c.interval = best as u64;
            }
            Some(c)
        })
        .collect())
}

/// The warmup marker `n_warm` slices before slice `sl` (an earlier boundary when that one has
/// no marker; the entry point when warming reaches before slice 1).
fn warmup(
    ctx: &Ctx,
    sl: u64,
    n_warm: u64,
    entry: Option<&Entry>,
    before: &dyn Fn(u64) -> u64,
) -> Result<(Option<Marker>, u64), PipelineError> {
    if n_warm == 0 {
        return Ok((None, 0));
    }
    if let Some(w) = sl.checked_sub(n_warm).filter(|&w| w >= 1) {
        for b in (w.saturating_sub(n_warm).max(1)..=w).rev() {
            if let Ok((m, _)) = ctx.marker(b, "warmup") {
                return Ok((Some(m), before(sl) - before(b)));
            }
        }
    }
    match entry {
        Some(e) => Ok((
            Some(Marker {
                image: e.image.clone(),
                offset: format!("{:#x}", e.offset),
                count: 1,
            }),
            before(sl),
        )),
        None => Err(PipelineError::NoMarker {
            interval: sl,
            what: "warmup".into(),
            cut: sl.saturating_sub(n_warm),
        }),
    }
}

/// The ten functions with the most instructions in a slice's merged vector.
fn hottest(v: &[(u32, u64)], blocks: &[BlockRow]) -> Vec<(String, u64)> {
    let mut by: HashMap<String, u64> = HashMap::new();
    for &(id, n) in v {
        let name = match blocks.get(id as usize - 1) {
            Some(b) if b.function != "-" && !b.function.is_empty() => b.function.clone(),
            Some(b) => format!(
                "{}+{:#x}",
                b.image.as_deref().unwrap_or("anonymous"),
                b.offset
            ),
            None => format!("block {id}"),
        };
        *by.entry(name).or_default() += n;
    }
    let mut all: Vec<(String, u64)> = by.into_iter().collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    all.truncate(10);
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_of_normalised_vectors() {
        assert!(distance(&[(1, 10), (2, 30)], &[(1, 1), (2, 3)]) < 1e-12);
        assert!((distance(&[(1, 5)], &[(2, 5)]) - 2.0).abs() < 1e-12);
        assert!((distance(&[(1, 10), (3, 10)], &[(1, 10), (2, 10)]) - 1.0).abs() < 1e-12);
    }
}
