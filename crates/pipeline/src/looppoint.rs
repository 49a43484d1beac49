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
use crate::rundir::{BlockRow, Chosen, ImageRow, Marker, Point, Summary, Window};
use crate::slices::{self, Boundary, SliceRow};
use crate::PipelineError;

/// Blocks of the chosen slices, merged over threads: (id, instructions).
type Kept = HashMap<u64, Vec<(u32, u64)>>;

/// What [`read_global`] gathers.
#[derive(Default)]
pub struct GlobalRead {
    /// Instructions per block id, merged over threads, before each slice asked for.
    pub before: HashMap<u64, Vec<u64>>,
    /// Merged vectors of the slices asked for.
    pub kept: Kept,
    /// When asked for, per block id how unevenly its first instruction runs: the coefficient
    /// of variation of its executions per filtered instruction over every (slice, thread) in
    /// which the thread ran a significant share of the slice (zeros included; infinite for a
    /// block never run).
    pub spread: Vec<f64>,
}

/// Per-block sums of execution rates over (slice, thread) observations.
struct Rates<'a> {
    rows: &'a [SliceRow],
    blocks: &'a [BlockRow],
    sum: Vec<f64>,
    sumsq: Vec<f64>,
    observations: u64,
}

impl Rates<'_> {
    /// Adds slice `j`'s vector (thread-shifted ids, `nb` blocks per thread).
    fn add(&mut self, j: usize, v: &[bbv_profile::Token], nb: usize) {
        let Some(row) = self.rows.get(j) else { return };
        let significant = |t: usize| {
            let f = row.threads.get(t).copied().unwrap_or(0);
            f > 0 && f as f64 >= SIGNIFICANT * row.filtered as f64
        };
        self.observations += (0..row.threads.len()).filter(|&t| significant(t)).count() as u64;
        for x in v {
            let (t, id) = ((x.id as usize - 1) / nb, ((x.id as usize - 1) % nb) + 1);
            if !significant(t) || id >= self.sum.len() {
                continue;
            }
            let insns = self.blocks.get(id - 1).map_or(1, |b| b.instructions.max(1));
            let r = (x.value as u64 / insns) as f64 / row.threads[t] as f64;
            self.sum[id] += r;
            self.sumsq[id] += r * r;
        }
    }

    fn spread(&self) -> Vec<f64> {
        let m = self.observations.max(1) as f64;
        self.sum
            .iter()
            .zip(&self.sumsq)
            .map(|(&s, &q)| {
                let mean = s / m;
                if mean <= 0.0 {
                    return f64::INFINITY;
                }
                ((q / m - mean * mean).max(0.0)).sqrt() / mean
            })
            .collect()
    }
}

/// Reads `global.bb` (`n_blocks` blocks per thread) once: the merged counts before each slice
/// in `at`, the merged vectors of the slices in `keep`, and with `rates` (the slice table and
/// the blocks) each block's rate spread.
pub fn read_global(
    dir: &Path,
    n_blocks: usize,
    at: &BTreeSet<u64>,
    keep: &BTreeSet<u64>,
    rates: Option<(&[SliceRow], &[BlockRow])>,
) -> Result<GlobalRead, PipelineError> {
    let path = dir.join(bbv_rundir::files::GLOBAL_BB);
    let mut reader = bbv_profile::BbvReader::open(&path)?;
    let mut cum = vec![0u64; n_blocks + 1];
    let mut g = GlobalRead::default();
    let mut rates = rates.map(|(rows, blocks)| Rates {
        rows,
        blocks,
        sum: vec![0.0; n_blocks + 1],
        sumsq: vec![0.0; n_blocks + 1],
        observations: 0,
    });
    let mut v = Vec::new();
    let mut j = 0u64;
    let nb = n_blocks.max(1);
    loop {
        if at.contains(&j) {
            g.before.insert(j, cum.clone());
        }
        if !reader.next_vector(&mut v)? {
            break;
        }
        let mut merged: HashMap<u32, u64> = HashMap::new();
        for t in &v {
            let id = ((t.id as usize - 1) % nb) + 1;
            cum[id] += t.value as u64;
            if keep.contains(&j) {
                *merged.entry(id as u32).or_default() += t.value as u64;
            }
        }
        if let Some(r) = rates.as_mut() {
            r.add(j as usize, &v, nb);
        }
        if keep.contains(&j) {
            let mut m: Vec<(u32, u64)> = merged.into_iter().collect();
            m.sort_unstable();
            g.kept.insert(j, m);
        }
        j += 1;
    }
    g.spread = rates.map_or_else(Vec::new, |r| r.spread());
    Ok(g)
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
    /// The plugin's windows after its cuts.
    windows: &'a crate::slices::Windows,
    /// Per block id, [`GlobalRead::spread`].
    spread: &'a [f64],
}

/// A thread takes part in a slice's rate comparison when it ran this share of the slice.
const SIGNIFICANT: f64 = 0.05;

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

    /// Among the blocks of the program's own code first run in the window after boundary `b`
    /// (within 0.5% of a slice), the one whose executions per instruction are the most even
    /// over the whole run and every thread; with its distance from the cut. Its global count
    /// marks the same amount of work however the threads interleave on another run, which the
    /// loop head the plugin cut at does not when threads work independently (its rate
    /// differs between threads in different phases, and the phases shift).
    fn steady(&self, b: u64) -> Option<(u32, u64)> {
        type Ranked = ((u8, u64, u64), (u32, u64));
        let mut best: Option<Ranked> = None;
        for &(id, delta) in self.windows.get(&b)? {
            let spread = self
                .spread
                .get(id as usize)
                .copied()
                .unwrap_or(f64::INFINITY);
            if !spread.is_finite() || !self.placer.alone(id) {
                continue;
            }
            let Some(tier) = self.placer.tier_of(id) else {
                continue;
            };
            // Spread in thousandths, then the nearest to the cut.
            let key = (tier, (spread * 1000.0) as u64, delta);
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((key, (id, delta)));
            }
        }
        best.map(|(_, x)| x)
    }

    /// The marker where slice `b` starts, its block, and the instructions from the boundary
    /// to it.
    fn marker(&self, b: u64, what: &str) -> Result<(Marker, u32, u64), PipelineError> {
        let missing = || PipelineError::NoMarker {
            interval: b,
            what: what.to_string(),
            cut: b,
        };
        match boundary(self.rows, b) {
            Some(Boundary::Cut { block, .. }) => {
                let (block, delta) = self.steady(b).unwrap_or((block, 0));
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
                    delta,
                ))
            }
            Some(_) => {
                let p = self.placer.place(b).ok_or_else(missing)?;
                Ok((regions::marker(self.placer, &p)?, p.block, p.delta))
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

/// The chosen slices (a last, partial slice replaced) and every complete slice's cluster,
/// checked against the slice table.
fn chosen_slices(
    dir: &Path,
    s: &Summary,
    rows: &[SliceRow],
) -> Result<(Vec<Chosen>, Vec<usize>), PipelineError> {
    let (chosen, labels) = crate::rundir::chosen(dir)?;
    if labels.len() as u64 != s.intervals || rows.len() < labels.len() {
        return Err(PipelineError::Invalid(format!(
            "{}: {} labels for {} complete slices ({} in slices.tsv)",
            dir.join(bbv_rundir::files::LABELS).display(),
            labels.len(),
            s.intervals,
            rows.len()
        )));
    }
    let chosen = substitute_last(dir, chosen, &labels, rows.len())?;
    crate::rundir::check_chosen(dir, &chosen, s.intervals, "slice")?;
    Ok((chosen, labels))
}

/// The cluster whose point is nearest to the orphan last slice `o`, and the slice's
/// filtered instructions, which that cluster's multiplier takes in.
fn adopter(o: u64, chosen: &[Chosen], kept: &Kept, rows: &[SliceRow]) -> Option<(usize, u64)> {
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
}

/// The points of a looppoint run directory, heaviest first.
pub fn points(dir: &Path, s: &Summary, input: &Inputs) -> Result<Vec<Point>, PipelineError> {
    let rows = slices::read_table(&dir.join(bbv_rundir::files::SLICES))?;
    let (chosen, labels) = chosen_slices(dir, s, &rows)?;
    let n_warm = warmup_slices(s);
    let mut needed = BTreeSet::new();
    for c in &chosen {
        needed.extend(c.interval.saturating_sub(n_warm)..=c.interval + 1);
    }
    let (cut_needs, prefix_needs): (BTreeSet<u64>, BTreeSet<u64>) = needed
        .iter()
        .partition(|&&b| matches!(boundary(&rows, b), Some(Boundary::Cut { .. })));
    // A last slice alone in its cluster has no region: its instructions go to the region
    // nearest to it, so that the multipliers still cover the whole run.
    let last = rows.len() as u64 - 1;
    let orphan = (dir.join(bbv_rundir::files::SLICE_CUTS).exists()
        && !chosen
            .iter()
            .any(|c| labels.get(last as usize) == Some(&c.cluster)))
    .then_some(last);
    let mut keep: BTreeSet<u64> = chosen.iter().map(|c| c.interval).collect();
    keep.extend(orphan);
    let n_blocks = input.blocks.len();
    // The rate spread picks markers at the plugin's cuts only.
    let rates = (!cut_needs.is_empty()).then_some((&rows[..], input.blocks));
    let GlobalRead {
        before: cum,
        kept,
        spread,
    } = read_global(dir, n_blocks, &cut_needs, &keep, rates)?;
    let cuts = dir.join(bbv_rundir::files::SLICE_CUTS);
    let windows = if cuts.exists() {
        crate::slices::read_cuts(&cuts)?.2
    } else {
        Default::default()
    };
    let adopter = orphan.and_then(|o| adopter(o, &chosen, &kept, &rows));
    let profile = Profile::read(
        &dir.join(bbv_rundir::files::BB),
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
        windows: &windows,
        spread: &spread,
    };
    let before = |b: u64| rows[..b as usize].iter().map(|r| r.filtered).sum::<u64>();
    chosen
        .iter()
        .map(|c| {
            let sl = c.interval;
            let (start, _, d_start) = ctx.marker(sl, "start")?;
            let (end, end_block, d_end) = ctx.marker(sl + 1, "end")?;
            let start_position = before(sl) + d_start;
            let length = (before(sl + 1) + d_end)
                .saturating_sub(start_position)
                .max(1);
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
                start_position,
                warmup_length,
                multiplier: cluster as f64 / length as f64,
                end_relative: end.count.saturating_sub(end_before),
                thread_instructions: rows[sl as usize].threads.clone(),
                functions: {
                    let v = kept.get(&sl).map_or(&[][..], |v| v);
                    let mut f = crate::job_text::function_totals(v, input.blocks);
                    f.truncate(10);
                    f
                },
                stand_in_for: None,
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
    chosen: Vec<crate::rundir::Chosen>,
    labels: &[usize],
    n_rows: usize,
) -> Result<Vec<crate::rundir::Chosen>, PipelineError> {
    if !dir.join(bbv_rundir::files::SLICE_CUTS).exists() || n_rows == 0 {
        return Ok(chosen);
    }
    let last = n_rows as u64 - 1;
    if !chosen.iter().any(|c| c.interval == last) {
        return Ok(chosen);
    }
    let path = dir.join(bbv_rundir::files::LABELS);
    let distance = crate::rundir::read_label_distances(&path)?;
    Ok(chosen
        .into_iter()
        .filter_map(|mut c| {
            if c.interval == last {
                let best = (0..last as usize)
                    .filter(|&j| labels.get(j) == Some(&c.cluster))
                    .min_by(|&a, &b| {
                        let d = |j: usize| distance.get(j).copied().unwrap_or(f64::INFINITY);
                        d(a).total_cmp(&d(b))
                    })?;
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
            if let Ok((m, _, d)) = ctx.marker(b, "warmup") {
                return Ok((Some(m), (before(sl) - before(b)).saturating_sub(d)));
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
