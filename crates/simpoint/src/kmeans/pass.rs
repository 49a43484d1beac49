//! One assignment pass over the distinct rows: bounds, searches and moves, in blocks, on one or several threads.

#[cfg(target_arch = "x86_64")]
use super::avx2;
#[cfg(target_arch = "x86_64")]
use super::avx512;
use super::blocked::{dim, Blocked};
use super::centres::Outcome;
use super::dist2;
use super::near::{bounds_from, f32_down, f32_up, Near, Visit};
use crate::dataset::Dataset;

/// Asks the cache for every line of a row that will be read soon.
#[inline(always)]
pub(super) fn prefetch_row(row: &[f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = std::mem::size_of_val(row);
        let p = row.as_ptr() as *const i8;
        // SAFETY: prefetching never faults; the addresses lie inside `row` anyway.
        unsafe {
            let mut at = 0;
            while at < bytes {
                _mm_prefetch(p.add(at), _MM_HINT_T0);
                at += 64;
            }
            if bytes > 0 {
                _mm_prefetch(p.add(bytes - 1), _MM_HINT_T0);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// Points whose bounds are checked together before the failing ones are searched.
pub(super) const BLOCK: usize = 4096;

/// How many failing points ahead a row is prefetched.
pub(super) const AHEAD: usize = 8;

/// What one assignment pass reads.
pub(super) struct Pass<'a> {
    pub(super) points: &'a Dataset,
    pub(super) first: &'a [u32],
    pub(super) cur: &'a Dataset,
    pub(super) blocked: &'a Blocked,
    pub(super) near: Option<&'a Near>,
    /// The single-precision search, when it serves this k and machine.
    #[cfg(target_arch = "x86_64")]
    pub(super) narrow: Option<&'a avx512::Narrow>,
    pub(super) direct: bool,
    pub(super) half_gap: &'a [f64],
    pub(super) drift: &'a [f64],
    pub(super) max_drift: f64,
    pub(super) second_drift: f64,
    pub(super) max_drift_c: usize,
    pub(super) err: f64,
    pub(super) margin: f64,
    /// Bound on the distance from any centre of `cur` to SimPoint's (0: they are SimPoint's).
    pub(super) spread: f64,
    /// Bound on the rounding error of a computed squared distance.
    pub(super) round2: f64,
    /// Search every point from scratch (no bounds, no moves: the first pass).
    pub(super) full: bool,
    pub(super) avx2: bool,
    pub(super) avx512: bool,
}

impl Pass<'_> {
    /// Updates the bounds of points `from..to` for the centres' drift and writes to `todo` the
    /// points whose bounds no longer prove their centre nearest; returns how many.
    pub(super) fn check_bounds(
        &self,
        from: usize,
        to: usize,
        labels: &[u32],
        upper: &mut [f32],
        lower: &mut [f32],
        todo: &mut [u32],
    ) -> usize {
        #[cfg(target_arch = "x86_64")]
        {
            if self.avx512 {
                // SAFETY: AVX-512F was detected by the caller; indices are checked inside.
                return unsafe { avx512::check_bounds(self, from, to, labels, upper, lower, todo) };
            }
            if self.avx2 {
                // SAFETY: AVX2 was detected by the caller; indices are checked inside.
                return unsafe { avx2::check_bounds(self, from, to, labels, upper, lower, todo) };
            }
        }
        self.check_bounds_scalar(from, to, labels, upper, lower, todo)
    }

    /// What the vector bound checks' unchecked loads and stores rely on: `from..to` lies in
    /// every slice, `todo` has room for all of it, and `half_gap` is as long as `drift` (whose
    /// entries the labels index, labels being below k) with 32-bit indices.
    pub(super) fn assert_check_ranges(
        &self,
        from: usize,
        to: usize,
        labels: &[u32],
        upper: &[f32],
        lower: &[f32],
        todo: &[u32],
    ) {
        assert!(to <= labels.len() && to <= upper.len() && to <= lower.len());
        assert!(from <= to && todo.len() >= to - from);
        let k = self.drift.len();
        assert!(self.half_gap.len() == k && k <= i32::MAX as usize);
        debug_assert!(labels[from..to].iter().all(|&l| (l as usize) < k));
    }

    pub(super) fn check_bounds_scalar(
        &self,
        from: usize,
        to: usize,
        labels: &[u32],
        upper: &mut [f32],
        lower: &mut [f32],
        todo: &mut [u32],
    ) -> usize {
        // Branch-free: which points fail is unpredictable.
        let mut failed = 0;
        for i in from..to {
            let a = labels[i] as usize;
            let u = f64::from(upper[i]) + self.drift[a];
            let l = f64::from(lower[i])
                - if a == self.max_drift_c {
                    self.second_drift
                } else {
                    self.max_drift
                };
            lower[i] = f32_down(l);
            upper[i] = f32_up(u);
            todo[failed] = i as u32;
            failed += usize::from(u + self.margin >= self.half_gap[a].max(l));
        }
        failed
    }

    /// Assigns points `start..start + labels.len()` to their nearest centre, updating their
    /// bounds; returns the points that changed cluster (none on a full pass, which labels every
    /// point from scratch) and the points whose nearest centre the running centres left open.
    pub(super) fn assign(
        &self,
        start: usize,
        labels: &mut [u32],
        upper: &mut [f32],
        lower: &mut [f32],
    ) -> Outcome {
        #[cfg(target_arch = "x86_64")]
        if let Some(narrow) = self.narrow {
            return avx512::assign(self, narrow, start, labels, upper, lower);
        }
        if self.full && self.near.is_none() {
            // Only SimPoint's own centres are searched this way (`spread` is 0): the distances
            // are SimPoint's, and so is the nearest centre.
            for (i, label) in labels.iter_mut().enumerate() {
                let (c, best, second) = self.blocked.nearest(self.row(start, i));
                *label = c as u32;
                (upper[i], lower[i]) = bounds_from(best, second, self.err);
            }
            return Outcome::default();
        }
        #[cfg(target_arch = "x86_64")]
        if self.near.is_some() {
            if self.avx512 {
                // SAFETY: AVX-512F was detected by the caller.
                return unsafe { avx2::bounded512(self, start, labels, upper, lower) };
            }
            if self.avx2 {
                // SAFETY: AVX2 was detected by the caller.
                return unsafe { avx2::bounded(self, start, labels, upper, lower) };
            }
        }
        self.bounded_any(start, labels, upper, lower)
    }

    /// [`Pass::bounded`] built for SimPoint's default of 15 dimensions when that is the
    /// dimension, and for any other.
    #[inline(always)]
    pub(super) fn bounded_any(
        &self,
        start: usize,
        labels: &mut [u32],
        upper: &mut [f32],
        lower: &mut [f32],
    ) -> Outcome {
        if self.points.cols == crate::DEFAULT_DIM {
            self.bounded::<{ crate::DEFAULT_DIM }>(start, labels, upper, lower)
        } else {
            self.bounded::<0>(start, labels, upper, lower)
        }
    }

    /// Row of point `start + i`.
    #[inline(always)]
    pub(super) fn row(&self, start: usize, i: usize) -> &[f64] {
        self.row_d::<0>(start, i)
    }

    /// Where point `start + i`'s values are stored in `points.data` (in rows of `points.cols`).
    #[inline(always)]
    pub(super) fn stored_row(&self, start: usize, i: usize) -> usize {
        // A deduplicated set stores distinct row i as row i.
        if self.direct {
            start + i
        } else {
            self.points.stored(self.first[start + i] as usize)
        }
    }

    /// [`Pass::row`] for rows of `D` values (any number when `D` is 0).
    #[inline(always)]
    pub(super) fn row_d<const D: usize>(&self, start: usize, i: usize) -> &[f64] {
        let d = dim::<D>(self.points.cols);
        &self.points.data[self.stored_row(start, i) * d..][..d]
    }

    /// [`Pass::assign`] with centres sorted around each centre: on the first pass, each point's
    /// search starts from the previous point's centre (consecutive intervals tend to share a
    /// phase, so the search mostly stops after a block); later, Hamerly's bounds come first.
    #[inline(always)]
    pub(super) fn bounded<const D: usize>(
        &self,
        start: usize,
        labels: &mut [u32],
        upper: &mut [f32],
        lower: &mut [f32],
    ) -> Outcome {
        let (err, margin) = (self.err, self.margin);
        let mut out = Outcome::default();
        if let (true, Some(near)) = (self.full, self.near) {
            // SimPoint's own centres (`spread` is 0): the distances and the nearest are SimPoint's.
            let mut a = 0;
            for i in 0..labels.len() {
                if i + 8 < labels.len() {
                    prefetch_row(self.row_d::<D>(start, i + 8));
                }
                let (c, best, second) =
                    near.nearest_from::<D>(a, self.row_d::<D>(start, i), margin);
                labels[i] = c as u32;
                (upper[i], lower[i]) = bounds_from(best, second, err);
                a = c;
            }
            return out;
        }
        // In blocks: first the bound checks, which touch no coordinates (branch-free: which
        // points fail is unpredictable); then, with the rows prefetched a few points ahead, the
        // points whose bounds failed.
        let mut todo = [0u32; BLOCK];
        for base in (0..labels.len()).step_by(BLOCK) {
            let end = (base + BLOCK).min(labels.len());
            let failed = self.check_bounds(base, end, labels, upper, lower, &mut todo);
            let todo = &todo[..failed];
            for (j, &i) in todo.iter().enumerate() {
                if let Some(&ahead) = todo.get(j + AHEAD) {
                    prefetch_row(self.row_d::<D>(start, ahead as usize));
                }
                let i = i as usize;
                let a = labels[i] as usize;
                // Neither is NaN: a plain comparison, not `f64::max`.
                let (h, l) = (self.half_gap[a], f64::from(lower[i]));
                let m = if h > l { h } else { l };
                let y = self.row_d::<D>(start, i);
                let (c, best, second) = match self.near {
                    Some(near) => match near.visit_lanes::<D>(a, y, err, margin, m) {
                        Visit::Kept(ua) => {
                            upper[i] = f32_up(ua + err);
                            continue;
                        }
                        Visit::Searched(c, best, second) => (c, best, second),
                    },
                    None => {
                        let u = dist2(y, self.cur.row(a)).sqrt() + err;
                        upper[i] = f32_up(u);
                        if u + margin < m {
                            continue;
                        }
                        self.blocked.nearest(y)
                    }
                };
                if !self.certain(best, second) {
                    out.uncertain.push((start + i) as u32);
                    continue;
                }
                (upper[i], lower[i]) = bounds_from(best, second, err);
                out.place(start + i, &mut labels[i], c);
            }
        }
        out
    }

    /// Whether the nearest centre found, at computed squared distance `best` with the next at
    /// `second`, is SimPoint's. With SimPoint's own centres the distances are SimPoint's. With
    /// running centres each squared distance x may be off by (2 sqrt(x) + 2 err + s) s plus
    /// both computations' rounding, s being `spread`; that grows more slowly than x, so the
    /// nearest is certain when `best` and `second` are further apart than both allowances.
    #[inline]
    pub(super) fn certain(&self, best: f64, second: f64) -> bool {
        let s = self.spread;
        if s == 0.0 || second == f64::INFINITY {
            return true;
        }
        let slack = |x: f64| (2.0 * x.sqrt() + 2.0 * self.err + s) * s + 2.0 * self.round2;
        second - best > slack(best) + slack(second)
    }
}

/// Half the distance from each centre to its nearest other centre, rounded down by `err`.
pub(super) fn centre_half_gaps(centres: &Dataset, err: f64, out: &mut [f64]) {
    let k = centres.rows();
    out.iter_mut().for_each(|v| *v = f64::INFINITY);
    for a in 0..k {
        for b in a + 1..k {
            let dd = dist2(centres.row(a), centres.row(b));
            let h = 0.5 * (dd.sqrt() - err).max(0.0);
            out[a] = out[a].min(h);
            out[b] = out[b].min(h);
        }
    }
}
