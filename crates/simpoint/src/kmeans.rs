//! Weighted Lloyd k-means with SimPoint 3.2's exact arithmetic, accelerated by Hamerly's bounds.
//!
//! Pruning never changes a result: a point skips its distance computations only when the bounds
//! prove, with a margin larger than any rounding error of the computed distances, that its
//! centre is strictly the nearest. Everything that is summed (centre coordinates, weights,
//! distortion) is summed in point order, as SimPoint does.

use crate::dataset::Dataset;
use crate::rng::Random;

/// Squared Euclidean distance, summed in dimension order (SimPoint's order).
#[inline]
pub fn dist2(a: &[f64], b: &[f64]) -> f64 {
    let mut s = 0.0;
    for (x, y) in a.iter().zip(b) {
        let d = x - y;
        s += d * d;
    }
    s
}

/// Index and squared distance of the nearest centre (strict `<`: ties go to the lowest index),
/// plus the second-smallest squared distance.
#[inline]
pub fn nearest2(p: &[f64], centres: &Dataset) -> (usize, f64, f64) {
    let d = centres.cols;
    let mut best = 0;
    let mut best_d = f64::INFINITY;
    let mut second = f64::INFINITY;
    for (c, row) in centres.data.chunks_exact(d.max(1)).enumerate() {
        let dd = dist2(p, row);
        if dd < best_d {
            second = best_d;
            best_d = dd;
            best = c;
        } else if dd < second {
            second = dd;
        }
    }
    (best, best_d, second)
}

/// Labels every row of `data` with its nearest centre (ties to the lowest index).
pub fn label_all(data: &Dataset, centres: &Dataset) -> Vec<u32> {
    let mut blocked = Blocked::new(centres.rows(), centres.cols);
    blocked.load(centres);
    (0..data.rows())
        .map(|i| blocked.nearest(data.row(i)).0 as u32)
        .collect()
}

/// `-initkm samp`: k rows drawn with replacement.
pub fn init_sample(data: &Dataset, k: usize, rng: &mut Random) -> Dataset {
    let n = data.rows() as i64;
    let mut c = Dataset::zeros(k, data.cols);
    for i in 0..k {
        let ndx = (rng.rand_int() % n) as usize;
        c.row_mut(i).copy_from_slice(data.row(ndx));
    }
    c
}

/// `-initkm ff`: furthest-first.
pub fn init_furthest_first(data: &Dataset, k: usize, rng: &mut Random) -> Dataset {
    let n = data.rows();
    let mut c = Dataset::zeros(k, data.cols);
    let first = (rng.rand_int() % n as i64) as usize;
    c.row_mut(0).copy_from_slice(data.row(first));
    let mut dist = vec![0.0f64; n];
    for i in 1..k {
        let prev = c.row(i - 1).to_vec();
        let mut far = 0;
        for j in 0..n {
            let d = dist2(data.row(j), &prev);
            if i == 1 || d < dist[j] {
                dist[j] = d;
            }
            if dist[j] > dist[far] {
                far = j;
            }
        }
        c.row_mut(i).copy_from_slice(data.row(far));
    }
    c
}

/// Initial centre weights: the normalised weight of the rows nearest to each centre.
pub fn initial_weights(data: &Dataset, centres: &mut Dataset) {
    let k = centres.rows();
    let mut cw = vec![0.0; k];
    for i in 0..data.rows() {
        let (c, _, _) = nearest2(data.row(i), centres);
        cw[c] += data.weights[i];
    }
    let total: f64 = cw.iter().fold(0.0, |a, &b| a + b);
    for w in &mut cw {
        *w /= total;
    }
    centres.weights = cw;
}

/// Identical rows of a point set, found once so that k-means assigns each distinct row once
/// (identical rows have identical distances, hence the same nearest centre).
#[derive(Clone, Debug)]
pub struct Distinct {
    /// Index of the first occurrence of each distinct row, ascending.
    pub first: Vec<u32>,
    /// For each row, the position of its distinct row in `first`.
    pub slot: Vec<u32>,
}

impl Distinct {
    /// Groups bitwise-identical rows (open addressing over row hashes: small and temporary).
    pub fn new(points: &Dataset) -> Distinct {
        let n = points.rows();
        let hash = |row: &[f64]| {
            let h = row.iter().fold(0x9e37_79b9_7f4a_7c15u64, |h, v| {
                (h ^ v.to_bits())
                    .wrapping_mul(0x0100_0000_01b3)
                    .rotate_left(23)
            });
            h ^ (h >> 29)
        };
        let size = (n + n / 2).next_power_of_two().max(16);
        let mask = size - 1;
        let mut table = vec![u32::MAX; size];
        let mut first: Vec<u32> = Vec::new();
        let mut slot = Vec::with_capacity(n);
        for p in 0..n {
            let row = points.row(p);
            let mut at = (hash(row) as usize) & mask;
            let s = loop {
                let s = table[at];
                if s == u32::MAX {
                    let s_new = first.len() as u32;
                    table[at] = s_new;
                    first.push(p as u32);
                    break s_new;
                }
                let other = points.row(first[s as usize] as usize);
                if other
                    .iter()
                    .zip(row)
                    .all(|(a, b)| a.to_bits() == b.to_bits())
                {
                    break s;
                }
                at = (at + 1) & mask;
            };
            slot.push(s);
        }
        first.shrink_to_fit();
        Distinct { first, slot }
    }
}

/// Result of one Lloyd run.
pub struct LloydResult {
    /// Final centres (coordinates and weights), as SimPoint returns them.
    pub centres: Dataset,
    /// Iteration count as SimPoint logs it.
    pub iterations: usize,
    /// Labels of the distinct clustered rows (see [`Distinct`]) with respect to `centres`,
    /// when at least one pass ran.
    pub labels: Option<Vec<u32>>,
}

/// Bound on the absolute error of a computed Euclidean distance between points whose
/// coordinates are at most `max_abs` in magnitude, in `dims` dimensions.
pub fn distance_error(max_abs: f64, dims: usize) -> f64 {
    let span = 2.0 * max_abs.max(f64::MIN_POSITIVE);
    let d = dims as f64;
    (4.0 * (d + 4.0) * d * span * span * f64::EPSILON).sqrt() + 1e-300
}

/// Centres per block: a block's distances are computed side by side, each centre's sum still
/// running over the dimensions in order.
const LANES: usize = 8;

/// Centres laid out in blocks of [`LANES`], dimension-major inside a block, so that distance
/// sums stay in registers and fill the vector lanes.
pub struct Blocked {
    k: usize,
    d: usize,
    blocks: usize,
    t: Vec<f64>,
}

impl Blocked {
    /// Empty layout for `k` centres of `d` dimensions.
    pub fn new(k: usize, d: usize) -> Blocked {
        let blocks = k.div_ceil(LANES);
        Blocked {
            k,
            d,
            blocks,
            // Padding centres sit at infinity: never nearest, never second.
            t: vec![f64::INFINITY; blocks * LANES * d],
        }
    }

    /// Copies `centres` in.
    pub fn load(&mut self, centres: &Dataset) {
        for c in 0..self.k {
            let (b, lane) = (c / LANES, c % LANES);
            for (dd, &v) in centres.row(c).iter().enumerate() {
                self.t[(b * self.d + dd) * LANES + lane] = v;
            }
        }
    }

    /// Nearest centre (ties to the lowest index), its squared distance and the second-smallest
    /// squared distance; the same values as [`nearest2`].
    #[inline]
    pub fn nearest(&self, y: &[f64]) -> (usize, f64, f64) {
        #[cfg(target_arch = "x86_64")]
        {
            if self.blocks * LANES <= avx2::MAX_LANES && std::arch::is_x86_feature_detected!("avx2")
            {
                // SAFETY: AVX2 is present (checked just above).
                return unsafe { avx2::nearest(&self.t, &y[..self.d], self.blocks) };
            }
        }
        nearest_lanes(&self.t, &y[..self.d], self.blocks)
    }
}

/// Explicit AVX2 (never FMA: each product and sum is rounded as SimPoint's scalar code rounds
/// it). Up to four blocks (eight registers of four lanes) are summed side by side so that the
/// additions of different centres overlap; each centre's sum still runs over the dimensions in
/// order.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::LANES;
    use std::arch::x86_64::*;

    /// Centres (lanes) handled by [`nearest`]; more fall back to the portable code.
    pub const MAX_LANES: usize = 64;

    /// Nearest centre (lowest index on ties), its squared distance and the second-smallest.
    /// Padding lanes hold infinite distances and never win.
    #[target_feature(enable = "avx2")]
    pub unsafe fn nearest(t: &[f64], y: &[f64], blocks: usize) -> (usize, f64, f64) {
        let mut out = [f64::INFINITY; MAX_LANES];
        distances(t, y, blocks, &mut out);
        let chunks = blocks * LANES / 4;
        let p = out.as_mut_ptr();
        let min_all = |p: *const f64| {
            let mut m = _mm256_loadu_pd(p);
            for c in 1..chunks {
                m = _mm256_min_pd(m, _mm256_loadu_pd(p.add(4 * c)));
            }
            let m2 = _mm_min_pd(_mm256_castpd256_pd128(m), _mm256_extractf128_pd(m, 1));
            let m1 = _mm_min_sd(m2, _mm_unpackhi_pd(m2, m2));
            _mm_cvtsd_f64(m1)
        };
        let best = min_all(p);
        let bv = _mm256_set1_pd(best);
        let mut index = 0;
        for c in 0..chunks {
            let mask =
                _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(p.add(4 * c)), bv, _CMP_EQ_OQ));
            if mask != 0 {
                index = 4 * c + mask.trailing_zeros() as usize;
                break;
            }
        }
        *p.add(index) = f64::INFINITY;
        let second = min_all(p);
        (index, best, second)
    }

    /// Centre sums for the marked clusters, in point order: `row += y * w` (product rounded,
    /// then the sum, as SimPoint does) and `weight += w`. Consecutive points of one cluster are
    /// summed in registers; sums of other clusters wait in a padded scratch area, whose full-width
    /// stores and loads forward cheaply. Needs at most 16 dimensions.
    #[target_feature(enable = "avx2")]
    pub unsafe fn accumulate16(
        points: &crate::Dataset,
        slot: &[u32],
        labels: &[u32],
        changed: &[bool],
        next: &mut crate::Dataset,
    ) {
        let d = points.cols;
        let k = next.rows();
        assert!(d <= 16 && slot.len() == points.rows() && changed.len() == k);
        let mut scratch = vec![0.0f64; k * 16];
        for c in 0..k {
            scratch[c * 16..c * 16 + d].copy_from_slice(next.row(c));
        }
        let lane = |j: usize| if j < d { -1i64 } else { 0 };
        let last = (d - 1) / 4;
        let tail = _mm256_setr_epi64x(
            lane(4 * last),
            lane(4 * last + 1),
            lane(4 * last + 2),
            lane(4 * last + 3),
        );
        let chunks = last + 1;
        let mut acc = [_mm256_setzero_pd(); 4];
        let mut wacc = 0.0f64;
        let mut run = usize::MAX;
        let data = points.data.as_ptr();
        let sp = scratch.as_mut_ptr();
        for (p, &s) in slot.iter().enumerate() {
            let a = labels[s as usize] as usize;
            if !changed[a] {
                continue;
            }
            if a != run {
                if run != usize::MAX {
                    for c in 0..4 {
                        _mm256_storeu_pd(sp.add(run * 16 + 4 * c), acc[c]);
                    }
                    next.weights[run] = wacc;
                }
                run = a;
                for c in 0..4 {
                    acc[c] = _mm256_loadu_pd(sp.add(a * 16 + 4 * c));
                }
                wacc = next.weights[a];
            }
            let w = points.weights[p];
            let wv = _mm256_set1_pd(w);
            let y = data.add(p * d);
            for c in 0..chunks {
                // Only the last chunk may end past the row (and past the data).
                let v = if c == last {
                    _mm256_maskload_pd(y.add(4 * c), tail)
                } else {
                    _mm256_loadu_pd(y.add(4 * c))
                };
                acc[c] = _mm256_add_pd(acc[c], _mm256_mul_pd(v, wv));
            }
            wacc += w;
        }
        if run != usize::MAX {
            for c in 0..4 {
                _mm256_storeu_pd(sp.add(run * 16 + 4 * c), acc[c]);
            }
            next.weights[run] = wacc;
        }
        for c in 0..k {
            if changed[c] {
                next.row_mut(c)
                    .copy_from_slice(&scratch[c * 16..c * 16 + d]);
            }
        }
    }

    #[target_feature(enable = "avx2")]
    pub unsafe fn distances(t: &[f64], y: &[f64], blocks: usize, out: &mut [f64]) {
        let d = y.len();
        let size = d * LANES;
        assert!(t.len() >= blocks * size && out.len() >= blocks * LANES);
        let mut b = 0;
        while b < blocks {
            let src = t.as_ptr().add(b * size);
            let dst = out.as_mut_ptr().add(b * LANES);
            match blocks - b {
                1 => group::<1>(src, y, dst),
                2 => group::<2>(src, y, dst),
                3 => group::<3>(src, y, dst),
                _ => group::<4>(src, y, dst),
            }
            b += (blocks - b).min(4);
        }
    }

    #[inline]
    #[target_feature(enable = "avx2")]
    unsafe fn group<const B: usize>(t: *const f64, y: &[f64], out: *mut f64) {
        let d = y.len();
        let mut lo = [_mm256_setzero_pd(); B];
        let mut hi = [_mm256_setzero_pd(); B];
        for (dd, &yd) in y.iter().enumerate() {
            let yv = _mm256_set1_pd(yd);
            for g in 0..B {
                let row = t.add((g * d + dd) * LANES);
                let a = _mm256_sub_pd(yv, _mm256_loadu_pd(row));
                let b = _mm256_sub_pd(yv, _mm256_loadu_pd(row.add(4)));
                lo[g] = _mm256_add_pd(lo[g], _mm256_mul_pd(a, a));
                hi[g] = _mm256_add_pd(hi[g], _mm256_mul_pd(b, b));
            }
        }
        for g in 0..B {
            _mm256_storeu_pd(out.add(g * LANES), lo[g]);
            _mm256_storeu_pd(out.add(g * LANES + 4), hi[g]);
        }
    }
}

/// Lane-wise minimum over blocks, then across lanes: branch-free, and the same answer as a scan
/// in index order with strict `<` (each lane keeps the first block reaching its minimum; across
/// lanes, equal values go to the lowest index).
#[inline(always)]
fn nearest_lanes(t: &[f64], y: &[f64], blocks: usize) -> (usize, f64, f64) {
    let d = y.len();
    let mut bv = [f64::INFINITY; LANES];
    let mut bi = [0u32; LANES];
    let mut sv = [f64::INFINITY; LANES];
    let mut d2 = [0.0f64; LANES];
    for b in 0..blocks {
        block_d2(&t[b * d * LANES..(b + 1) * d * LANES], y, &mut d2);
        for l in 0..LANES {
            let v = d2[l];
            let lt = v < bv[l];
            sv[l] = if lt { bv[l] } else { sv[l].min(v) };
            bi[l] = if lt { b as u32 } else { bi[l] };
            bv[l] = if lt { v } else { bv[l] };
        }
    }
    let mut best_l = 0;
    for l in 1..LANES {
        let idx = bi[l] as usize * LANES + l;
        let best_idx = bi[best_l] as usize * LANES + best_l;
        if bv[l] < bv[best_l] || (bv[l] == bv[best_l] && idx < best_idx) {
            best_l = l;
        }
    }
    let mut second = sv[best_l];
    for l in 0..LANES {
        if l != best_l {
            second = second.min(bv[l]);
        }
    }
    (bi[best_l] as usize * LANES + best_l, bv[best_l], second)
}

#[inline(always)]
fn block_d2(block: &[f64], y: &[f64], out: &mut [f64; LANES]) {
    let mut a = [0.0f64; LANES];
    for (dd, &yd) in y.iter().enumerate() {
        let row: &[f64; LANES] = block[dd * LANES..(dd + 1) * LANES]
            .try_into()
            .expect("lane block");
        for l in 0..LANES {
            let diff = yd - row[l];
            a[l] += diff * diff;
        }
    }
    *out = a;
}

/// A single-precision value not below `v` (for `v >= 0`): widening by 2^-22 relative exceeds the
/// at most 2^-24 relative change of rounding to nearest.
#[inline(always)]
fn f32_up(v: f64) -> f32 {
    (v * (1.0 + 1.0 / 4_194_304.0)) as f32
}

/// A single-precision value not above `v` and not below 0: distances are never negative.
#[inline(always)]
fn f32_down(v: f64) -> f32 {
    (v.max(0.0) * (1.0 - 1.0 / 4_194_304.0)) as f32
}

/// Runs weighted Lloyd k-means from `init` (whose weights are the initial centre weights) for at
/// most `max_iter` passes, following SimPoint's stopping rule and empty-cluster handling.
///
/// Two exact shortcuts: Hamerly's bounds skip distance computations whose outcome is certain, and
/// a cluster whose members are the same as in the previous pass keeps its centre, because its
/// sums would add the same numbers in the same order.
///
/// `max_abs` bounds the magnitude of every point coordinate; it sets the rounding-error margins.
pub fn lloyd(
    points: &Dataset,
    distinct: &Distinct,
    init: Dataset,
    max_iter: usize,
    max_abs: f64,
) -> LloydResult {
    // Assignment state lives on distinct rows; sums run over every row in order.
    let n = distinct.first.len();
    let d = points.cols;
    let k = init.rows();
    // Centres are weighted means of points, or the origin, or the initial centres.
    let max_abs = init.data.iter().fold(max_abs, |m, v| m.max(v.abs()));
    let err = distance_error(max_abs, d);
    let margin = 4.0 * err;
    let mut cur = init;
    let mut next = Dataset::zeros(k, d);
    let mut labels = vec![0u32; n];
    // Bounds are kept in single precision, rounded outwards, to halve their memory.
    let mut upper = vec![0.0f32; n];
    let mut lower = vec![0.0f32; n];
    let mut half_gap = vec![0.0f64; k];
    let mut drift = vec![0.0f64; k];
    let mut changed = vec![true; k];
    let mut blocked = Blocked::new(k, d);
    let (mut max_drift, mut second_drift, mut max_drift_c) = (0.0f64, 0.0f64, usize::MAX);
    let parallel = n >= 16_384 && rayon::current_num_threads() > 1;
    for iter in 0..max_iter {
        blocked.load(&cur);
        if iter > 0 {
            centre_half_gaps(&cur, err, &mut half_gap);
        }
        let pass = Pass {
            points,
            first: &distinct.first,
            cur: &cur,
            blocked: &blocked,
            half_gap: &half_gap,
            drift: &drift,
            max_drift,
            second_drift,
            max_drift_c,
            err,
            margin,
            initial: iter == 0,
        };
        if parallel {
            let mid = n / 2;
            let (la, lb) = labels.split_at_mut(mid);
            let (ua, ub) = upper.split_at_mut(mid);
            let (wa, wb) = lower.split_at_mut(mid);
            let (ca, cb) = rayon::join(
                || pass.assign(0, la, ua, wa),
                || pass.assign(mid, lb, ub, wb),
            );
            for c in 0..k {
                changed[c] = ca[c] || cb[c];
            }
        } else {
            changed = pass.assign(0, &mut labels, &mut upper, &mut lower);
        }
        // Clusters with unchanged members keep the centre and weight computed last pass.
        for c in 0..k {
            if changed[c] {
                next.row_mut(c).iter_mut().for_each(|v| *v = 0.0);
                next.weights[c] = 0.0;
            } else {
                next.row_mut(c).copy_from_slice(cur.row(c));
                next.weights[c] = cur.weights[c];
            }
        }
        if changed.iter().any(|&c| c) {
            if parallel {
                // Each thread sums a disjoint set of clusters, every one in point order.
                let odd: Vec<bool> = (0..k).map(|c| changed[c] && c % 2 == 1).collect();
                let even: Vec<bool> = (0..k).map(|c| changed[c] && c % 2 == 0).collect();
                let mut other = next.clone();
                let next_ref = &mut next;
                let other_ref = &mut other;
                rayon::join(
                    || accumulate(points, &distinct.slot, &labels, &even, next_ref),
                    || accumulate(points, &distinct.slot, &labels, &odd, other_ref),
                );
                for c in (1..k).step_by(2) {
                    if changed[c] {
                        next.row_mut(c).copy_from_slice(other.row(c));
                        next.weights[c] = other.weights[c];
                    }
                }
            } else {
                accumulate(points, &distinct.slot, &labels, &changed, &mut next);
            }
            for c in 0..k {
                let w = next.weights[c];
                if changed[c] && w > 0.0 {
                    next.row_mut(c).iter_mut().for_each(|v| *v /= w);
                }
            }
        }
        if next.data == cur.data {
            return LloydResult {
                centres: next,
                iterations: iter,
                labels: Some(labels),
            };
        }
        if iter + 1 == max_iter {
            return LloydResult {
                centres: cur,
                iterations: max_iter,
                labels: Some(labels),
            };
        }
        max_drift = 0.0;
        second_drift = 0.0;
        max_drift_c = usize::MAX;
        for c in 0..k {
            drift[c] = if cur.row(c) == next.row(c) {
                0.0
            } else {
                dist2(cur.row(c), next.row(c)).sqrt() + err
            };
            if drift[c] > max_drift {
                second_drift = max_drift;
                max_drift = drift[c];
                max_drift_c = c;
            } else if drift[c] > second_drift {
                second_drift = drift[c];
            }
        }
        std::mem::swap(&mut cur, &mut next);
    }
    LloydResult {
        centres: cur,
        iterations: max_iter,
        labels: None,
    }
}

/// Asks the cache for a row that will be read soon.
#[inline(always)]
fn prefetch_row(row: &[f64]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let bytes = std::mem::size_of_val(row);
        let p = row.as_ptr() as *const i8;
        // SAFETY: prefetching never faults; the addresses lie inside `row` anyway.
        unsafe {
            _mm_prefetch(p, _MM_HINT_T0);
            if bytes > 64 {
                _mm_prefetch(p.add(bytes - 1), _MM_HINT_T0);
            }
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
}

/// What one assignment pass reads.
struct Pass<'a> {
    points: &'a Dataset,
    first: &'a [u32],
    cur: &'a Dataset,
    blocked: &'a Blocked,
    half_gap: &'a [f64],
    drift: &'a [f64],
    max_drift: f64,
    second_drift: f64,
    max_drift_c: usize,
    err: f64,
    margin: f64,
    initial: bool,
}

impl Pass<'_> {
    /// Assigns points `start..start + labels.len()` to their nearest centre, updating their
    /// bounds; returns which clusters gained or lost a point (all, on the first pass).
    fn assign(
        &self,
        start: usize,
        labels: &mut [u32],
        upper: &mut [f32],
        lower: &mut [f32],
    ) -> Vec<bool> {
        let (err, margin) = (self.err, self.margin);
        let k = self.cur.rows();
        let row = |i: usize| self.points.row(self.first[start + i] as usize);
        if self.initial {
            for (i, label) in labels.iter_mut().enumerate() {
                let (c, best, second) = self.blocked.nearest(row(i));
                *label = c as u32;
                upper[i] = f32_up(best.sqrt() + err);
                lower[i] = f32_down((second.sqrt() - err).max(0.0));
            }
            return vec![true; k];
        }
        let mut changed = vec![false; k];
        // First the bound checks, which touch no coordinates; then, with the rows prefetched a
        // few points ahead, the points whose bounds failed.
        let mut todo: Vec<u32> = Vec::new();
        for i in 0..labels.len() {
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
            if u + margin < self.half_gap[a].max(l) {
                continue;
            }
            todo.push(i as u32);
        }
        const AHEAD: usize = 8;
        for (j, &i) in todo.iter().enumerate() {
            if let Some(&ahead) = todo.get(j + AHEAD) {
                prefetch_row(row(ahead as usize));
            }
            let i = i as usize;
            let a = labels[i] as usize;
            let m = self.half_gap[a].max(f64::from(lower[i]));
            let y = row(i);
            let u = dist2(y, self.cur.row(a)).sqrt() + err;
            upper[i] = f32_up(u);
            if u + margin < m {
                continue;
            }
            let (c, best, second) = self.blocked.nearest(y);
            upper[i] = f32_up(best.sqrt() + err);
            lower[i] = f32_down((second.sqrt() - err).max(0.0));
            if c != a {
                labels[i] = c as u32;
                changed[a] = true;
                changed[c] = true;
            }
        }
        changed
    }
}

/// Adds `y * w` of every point of a marked cluster into the cluster's (zeroed) row and `w` into
/// its weight, in point order: the sums SimPoint computes, with the same roundings.
/// `slot` maps each row to its distinct row, whose label `labels` holds.
fn accumulate(
    points: &Dataset,
    slot: &[u32],
    labels: &[u32],
    changed: &[bool],
    next: &mut Dataset,
) {
    #[cfg(target_arch = "x86_64")]
    {
        if points.cols <= 16 && points.cols > 0 && std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: AVX2 is present (checked just above); the dimension fits.
            unsafe { avx2::accumulate16(points, slot, labels, changed, next) };
            return;
        }
    }
    accumulate_portable(points, slot, labels, changed, next);
}

fn accumulate_portable(
    points: &Dataset,
    slot: &[u32],
    labels: &[u32],
    changed: &[bool],
    next: &mut Dataset,
) {
    for (p, &s) in slot.iter().enumerate() {
        let a = labels[s as usize] as usize;
        if !changed[a] {
            continue;
        }
        let w = points.weights[p];
        for (acc, &v) in next.row_mut(a).iter_mut().zip(points.row(p)) {
            *acc += v * w;
        }
        next.weights[a] += w;
    }
}

/// Half the distance from each centre to its nearest other centre, rounded down by `err`.
fn centre_half_gaps(centres: &Dataset, err: f64, out: &mut [f64]) {
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

/// SimPoint's BIC of a clustering of `data` whose rows have `labels`, and the weighted
/// distortion (sum of weight times squared distance).
pub fn bic(data: &Dataset, centres: &Dataset, label: impl Fn(usize) -> usize) -> (f64, f64) {
    // SimPoint's truncated constant, not f64::consts::PI: the BIC must match to the last bit.
    #[allow(clippy::approx_constant)]
    const PI: f64 = 3.14159265358979;
    let n = data.rows();
    let dim = data.cols as f64;
    let k = centres.rows() as f64;
    let mut distortion = 0.0;
    let mut tw = 0.0;
    for i in 0..n {
        let d2 = dist2(data.row(i), centres.row(label(i)));
        distortion += data.weights[i] * d2;
        tw += data.weights[i];
    }
    let nf = n as f64;
    let dist = distortion / (tw / nf);
    let sigma2 = dist / (dim * nf);
    let mut l = -dim * ((2.0 * PI * sigma2).ln() + 1.0) / 2.0 - tw.ln();
    for i in 0..n {
        let cw = centres.weights[label(i)];
        if cw > 0.0 {
            l += cw.ln() * data.weights[i] / tw;
        }
    }
    let l = l * nf;
    let params = (k - 1.0) + k * dim + 1.0;
    (l - params / 2.0 * nf.ln(), distortion)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn grid(n: usize, d: usize, seed: i64) -> Dataset {
        let mut r = Random::new(seed);
        let mut set = Dataset::zeros(n, d);
        for i in 0..n {
            let centre = (i % 4) as f64;
            for v in set.row_mut(i) {
                *v = centre + f64::from(r.rand_float()) * 0.3;
            }
            set.weights[i] = 1.0 / n as f64;
        }
        set
    }

    /// Plain Lloyd without pruning, as the reference for bit-identity.
    fn naive(points: &Dataset, init: Dataset, max_iter: usize) -> (Dataset, usize) {
        let k = init.rows();
        let mut cur = init;
        for iter in 0..max_iter {
            let mut next = Dataset::zeros(k, points.cols);
            for p in 0..points.rows() {
                let (a, _, _) = nearest2(points.row(p), &cur);
                let w = points.weights[p];
                for (acc, &v) in next.row_mut(a).iter_mut().zip(points.row(p)) {
                    *acc += v * w;
                }
                next.weights[a] += w;
            }
            for c in 0..k {
                let w = next.weights[c];
                if w > 0.0 {
                    next.row_mut(c).iter_mut().for_each(|v| *v /= w);
                }
            }
            if next.data == cur.data {
                return (next, iter);
            }
            if iter + 1 == max_iter {
                return (cur, max_iter);
            }
            cur = next;
        }
        (cur, max_iter)
    }

    #[test]
    fn vector_kernels_equal_the_scalar_scan() {
        let mut r = Random::new(99);
        for trial in 0..300 {
            let k = 1 + trial % 70;
            let d = 1 + trial % 19;
            let mut centres = Dataset::zeros(k, d);
            for v in &mut centres.data {
                *v = f64::from(r.rand_float()) * 2.0 - 1.0;
            }
            if k > 3 {
                // Duplicate centres force ties.
                let row = centres.row(1).to_vec();
                centres.row_mut(k - 2).copy_from_slice(&row);
            }
            let mut blocked = Blocked::new(k, d);
            blocked.load(&centres);
            for p in 0..40 {
                let y: Vec<f64> = match p % 4 {
                    0 => centres.row(p % k).to_vec(),
                    1 if k > 1 => centres
                        .row(0)
                        .iter()
                        .zip(centres.row(1))
                        .map(|(a, b)| (a + b) / 2.0)
                        .collect(),
                    _ => (0..d)
                        .map(|_| f64::from(r.rand_float()) * 2.0 - 1.0)
                        .collect(),
                };
                let want = nearest2(&y, &centres);
                assert_eq!(blocked.nearest(&y), want, "k {k} d {d} p {p}");
                assert_eq!(nearest_lanes(&blocked.t, &y, blocked.blocks), want);
            }
        }
    }

    #[test]
    fn pruned_equals_naive_bitwise() {
        for seed in [5, 77, 1234] {
            let data = grid(2000, 5, seed);
            for k in [1, 3, 7, 12] {
                for iters in [1, 2, 5, 100] {
                    let mut rng = Random::new(seed + k as i64);
                    let mut init = init_sample(&data, k, &mut rng);
                    initial_weights(&data, &mut init);
                    let fast = lloyd(&data, &Distinct::new(&data), init.clone(), iters, 1.3);
                    let (slow, it) = naive(&data, init, iters);
                    assert_eq!(fast.centres, slow, "seed {seed} k {k} iters {iters}");
                    assert_eq!(fast.iterations, it);
                }
            }
        }
    }

    #[test]
    fn ties_go_to_lowest_index_and_empty_clusters_move_to_origin() {
        let data = Dataset {
            cols: 1,
            data: vec![0.0, 1.0, 1.0, 2.0],
            weights: vec![0.25; 4],
        };
        let init = Dataset {
            cols: 1,
            data: vec![1.0, 1.0],
            weights: vec![0.5, 0.5],
        };
        let distinct = Distinct::new(&data);
        let r = lloyd(&data, &distinct, init, 100, 2.0);
        // Pass 1 puts every point in cluster 0 (tie) and moves the empty cluster 1 to the
        // origin, which then captures the point at 0.
        let labels = r.labels.unwrap();
        let all: Vec<u32> = distinct.slot.iter().map(|&s| labels[s as usize]).collect();
        assert_eq!(all, vec![1, 0, 0, 0]);
        assert_eq!(r.centres.row(0), &[4.0 / 3.0]);
        assert_eq!(r.centres.row(1), &[0.0]);
        assert_eq!(r.centres.weights, vec![0.75, 0.25]);
    }
}

#[cfg(test)]
mod accumulate_tests {
    use super::*;

    #[test]
    fn vector_accumulation_equals_portable() {
        let mut r = Random::new(5);
        for d in [1, 3, 4, 5, 15, 16] {
            let n = 997;
            let k = 7;
            let mut points = Dataset::zeros(n, d);
            for v in &mut points.data {
                *v = f64::from(r.rand_float()) * 2.0 - 1.0;
            }
            for w in &mut points.weights {
                *w = f64::from(r.rand_float());
            }
            // Runs of equal labels and isolated switches.
            let labels: Vec<u32> = (0..n).map(|p| ((p / 13 + p % 3) % k) as u32).collect();
            let changed: Vec<bool> = (0..k).map(|c| c != 2).collect();
            let mut a = Dataset::zeros(k, d);
            let mut b = Dataset::zeros(k, d);
            let slot: Vec<u32> = (0..n as u32).collect();
            accumulate(&points, &slot, &labels, &changed, &mut a);
            accumulate_portable(&points, &slot, &labels, &changed, &mut b);
            assert_eq!(a, b, "d {d}");
        }
    }
}
