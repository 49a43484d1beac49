//! Weighted Lloyd k-means with SimPoint 3.2's exact arithmetic, accelerated by Hamerly's bounds.
//!
//! Pruning never changes a result: a point skips its distance computations only when the bounds
//! prove, with a margin larger than any rounding error of the computed distances, that its
//! centre is strictly the nearest. Between passes the centres are running sums updated move by
//! move, within a computed distance of SimPoint's; margins include that distance, and SimPoint's
//! own sums (in point order, as SimPoint adds them) are taken whenever a decision needs them and
//! for every centre returned.
//!
//! With AVX-512 ([`avx512`]), the points whose bounds fail are searched sixteen at a time in
//! single precision; a result is taken only when its proven error bound cannot change it, and
//! the rest are searched again with SimPoint's double-precision sums.

use std::borrow::Cow;

use crate::dataset::{Dataset, RowTable};
use crate::rng::Random;

#[cfg(target_arch = "x86_64")]
mod avx512;

/// Which vector builds can run here (detected at run time).
#[cfg(target_arch = "x86_64")]
mod cpu {
    pub fn avx2() -> bool {
        std::arch::is_x86_feature_detected!("avx2")
    }

    pub fn avx512() -> bool {
        std::arch::is_x86_feature_detected!("avx512f")
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod cpu {
    pub fn avx2() -> bool {
        false
    }

    pub fn avx512() -> bool {
        false
    }
}

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
pub struct Distinct<'a> {
    /// Index of the first occurrence of each distinct row, ascending.
    pub first: Vec<u32>,
    /// For each row, the position of its distinct row in `first` (a deduplicated dataset's
    /// own index).
    pub slot: Cow<'a, [u32]>,
    /// Weight of each distinct row: the weights of its rows, summed in row order.
    pub weight: Vec<f64>,
    /// Number of rows of each distinct row.
    pub count: Vec<u32>,
}

impl<'a> Distinct<'a> {
    /// Groups bitwise-identical rows (open addressing over row hashes: small and temporary).
    pub fn new(points: &'a Dataset) -> Distinct<'a> {
        if let Some(ix) = &points.index {
            // Stored rows are distinct, numbered in order of first occurrence.
            let mut first = Vec::new();
            for (p, &s) in ix.iter().enumerate() {
                if s as usize == first.len() {
                    first.push(p as u32);
                }
            }
            let (weight, count) = totals(points, ix, first.len());
            return Distinct {
                first,
                slot: Cow::Borrowed(ix),
                weight,
                count,
            };
        }
        Distinct::hashed(points)
    }

    /// Groups identical rows by hashing them, whether or not `points` is deduplicated.
    pub fn hashed(points: &Dataset) -> Distinct<'static> {
        let n = points.rows();
        let mut table = RowTable::new(n);
        let mut first: Vec<u32> = Vec::new();
        let mut slot = Vec::with_capacity(n);
        for p in 0..n {
            let found = table.find_or_insert(points.row(p), first.len() as u32, |s| {
                points.row(first[s as usize] as usize)
            });
            slot.push(found.unwrap_or_else(|| {
                first.push(p as u32);
                first.len() as u32 - 1
            }));
        }
        first.shrink_to_fit();
        let (weight, count) = totals(points, &slot, first.len());
        Distinct {
            first,
            slot: Cow::Owned(slot),
            weight,
            count,
        }
    }
}

/// Weight (summed in row order) and row count of each of `distinct` distinct rows.
fn totals(points: &Dataset, slot: &[u32], distinct: usize) -> (Vec<f64>, Vec<u32>) {
    let mut weight = vec![0.0; distinct];
    let mut count = vec![0u32; distinct];
    for (&s, &w) in slot.iter().zip(&points.weights) {
        weight[s as usize] += w;
        count[s as usize] += 1;
    }
    (weight, count)
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
    /// Times SimPoint's own sums were taken because the running centres could not settle a
    /// decision (a nearest centre, a division, convergence) within their error bounds.
    pub refreshes: usize,
    /// Searches the single-precision search left to the double-precision one (too close to
    /// call within its error bound).
    pub close_calls: usize,
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
            if self.blocks * LANES <= avx2::MAX_LANES && cpu::avx2() {
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

    /// Hamerly's bound update and test for points `from..to` (what [`super::Pass::assign`] does
    /// point by point), four points per step; writes the failing points to `todo` and returns
    /// how many failed.
    #[target_feature(enable = "avx2")]
    pub unsafe fn check_bounds(
        pass: &super::Pass<'_>,
        from: usize,
        to: usize,
        labels: &[u32],
        upper: &mut [f32],
        lower: &mut [f32],
        todo: &mut [u32],
    ) -> usize {
        pass.assert_check_ranges(from, to, labels, upper, lower, todo);
        let mdc = _mm_set1_epi32(pass.max_drift_c.min(u32::MAX as usize) as u32 as i32);
        let (md, sd) = (
            _mm256_set1_pd(pass.max_drift),
            _mm256_set1_pd(pass.second_drift),
        );
        let margin = _mm256_set1_pd(pass.margin);
        let up = _mm256_set1_pd(super::F32_UP);
        let down = _mm256_set1_pd(super::F32_DOWN);
        let zero = _mm256_setzero_pd();
        let mut failed = 0;
        let mut i = from;
        while i + 4 <= to {
            let lab = _mm_loadu_si128(labels.as_ptr().add(i) as *const __m128i);
            // Labels index `drift` and `half_gap` (both k long): checked by `pass.assign`'s
            // invariant that every label is below k.
            let dr = _mm256_i32gather_pd::<8>(pass.drift.as_ptr(), lab);
            let hg = _mm256_i32gather_pd::<8>(pass.half_gap.as_ptr(), lab);
            let is_max = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(_mm_cmpeq_epi32(lab, mdc)));
            let dec = _mm256_blendv_pd(md, sd, is_max);
            let u = _mm256_add_pd(_mm256_cvtps_pd(_mm_loadu_ps(upper.as_ptr().add(i))), dr);
            let l = _mm256_sub_pd(_mm256_cvtps_pd(_mm_loadu_ps(lower.as_ptr().add(i))), dec);
            _mm_storeu_ps(
                lower.as_mut_ptr().add(i),
                _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_max_pd(l, zero), down)),
            );
            _mm_storeu_ps(
                upper.as_mut_ptr().add(i),
                _mm256_cvtpd_ps(_mm256_mul_pd(u, up)),
            );
            let fail = _mm256_cmp_pd::<_CMP_GE_OQ>(_mm256_add_pd(u, margin), _mm256_max_pd(hg, l));
            let m = _mm256_movemask_pd(fail) as usize;
            for j in 0..4 {
                *todo.get_unchecked_mut(failed) = (i + j) as u32;
                failed += (m >> j) & 1;
            }
            i += 4;
        }
        failed + pass.check_bounds_scalar(i, to, labels, upper, lower, &mut todo[failed..])
    }

    /// Builds of [`super::Pass::bounded`] for one target feature each (one body, with the
    /// search inlined: a search's result then stays in registers).
    macro_rules! bounded_build {
        ($name:ident, $feature:literal, $doc:literal) => {
            #[doc = $doc]
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(
                pass: &super::Pass<'_>,
                start: usize,
                labels: &mut [u32],
                upper: &mut [f32],
                lower: &mut [f32],
            ) -> super::Outcome {
                pass.bounded_any(start, labels, upper, lower)
            }
        };
    }
    bounded_build!(
        bounded512,
        "avx512f",
        "The bounded pass compiled for AVX-512 (a block of eight centres fills one register)."
    );
    bounded_build!(bounded, "avx2", "The bounded pass compiled for AVX2.");

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
        block_d2::<0>(&t[b * d * LANES..(b + 1) * d * LANES], y, &mut d2);
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

/// The dimension of a build for `D` dimensions: `D`, or `d` (known when running) when `D` is 0.
#[inline(always)]
const fn dim<const D: usize>(d: usize) -> usize {
    if D > 0 {
        D
    } else {
        d
    }
}

/// Squared distances from `y` to a block of [`LANES`] centres, each summed in dimension order.
/// `D`, when not 0, is the dimension (`y.len()`) known when compiling: the loop then unrolls and
/// loses its index checks, which otherwise cost as many instructions as the arithmetic.
#[inline(always)]
fn block_d2<const D: usize>(block: &[f64], y: &[f64], out: &mut [f64; LANES]) {
    let d = dim::<D>(y.len());
    let (rows, y) = (block[..d * LANES].as_chunks::<LANES>().0, &y[..d]);
    let mut a = [0.0f64; LANES];
    let mut step = |yd: f64, row: &[f64; LANES]| {
        for l in 0..LANES {
            let diff = yd - row[l];
            a[l] += diff * diff;
        }
    };
    if D > 0 && D.is_multiple_of(5) {
        // Five dimensions a step (in order): short enough for the compiler to unroll fully.
        for (ys, rs) in y.chunks_exact(5).zip(rows.chunks_exact(5)) {
            for (&yd, row) in ys.iter().zip(rs) {
                step(yd, row);
            }
        }
    } else {
        for (&yd, row) in y.iter().zip(rows) {
            step(yd, row);
        }
    }
    *out = a;
}

/// Widening by 2^-22 relative exceeds the at most 2^-24 relative change of rounding to nearest
/// single precision.
const F32_UP: f64 = 1.0 + 1.0 / 4_194_304.0;
const F32_DOWN: f64 = 1.0 - 1.0 / 4_194_304.0;

/// Hamerly's bounds after a search: the nearest centre's distance (squared: `best`) rounded up,
/// the second-nearest's (`second`) rounded down, each widened by the distance error `err`.
#[inline(always)]
fn bounds_from(best: f64, second: f64, err: f64) -> (f32, f32) {
    (
        f32_up(best.sqrt() + err),
        f32_down((second.sqrt() - err).max(0.0)),
    )
}

/// A single-precision value not below `v` (for `v >= 0`).
#[inline(always)]
fn f32_up(v: f64) -> f32 {
    (v * F32_UP) as f32
}

/// A single-precision value not above `v` and not below 0: distances are never negative.
#[inline(always)]
fn f32_down(v: f64) -> f32 {
    (v.max(0.0) * F32_DOWN) as f32
}

/// Largest k for which [`Near`] keeps, for every centre, a sorted copy of all centres (k² rows).
const NEAR_MAX_K: usize = 64;

/// For each centre `a`, every centre sorted by its distance to `a` (ties by index) and copied in
/// blocks of [`LANES`] laid out like [`Blocked`]. A point whose own centre is `a` computes its
/// distances in that order and stops once the triangle inequality proves every remaining centre
/// farther than its two nearest: a point near a cluster border looks at the centres around its
/// own instead of all of them.
pub(crate) struct Near {
    k: usize,
    d: usize,
    blocks: usize,
    /// `k * blocks * LANES` centre indices, `u32::MAX` for padding.
    order: Vec<u32>,
    /// Computed distance from `a` to each centre of `order`; infinite for padding.
    gap: Vec<f64>,
    /// `k * blocks` blocks of `d * LANES` coordinates; padding centres sit at infinity.
    t: Vec<f64>,
    /// Centre-to-centre distances, `k * k`.
    cc: Vec<f64>,
    sorted: Vec<(f64, u32)>,
    /// Position of each centre in its own sorted list (0 unless centres coincide).
    self_pos: Vec<u32>,
}

impl Near {
    fn new(k: usize, d: usize) -> Near {
        let blocks = k.div_ceil(LANES);
        let slots = k * blocks * LANES;
        Near {
            k,
            d,
            blocks,
            order: vec![u32::MAX; slots],
            gap: vec![f64::INFINITY; slots],
            t: vec![f64::INFINITY; slots * d],
            cc: vec![0.0; k * k],
            sorted: Vec::with_capacity(k),
            self_pos: vec![0; k],
        }
    }

    /// Sorts the centres around each centre; `half_gap[a]` receives half the distance from `a`
    /// to its nearest other centre, rounded down by `err`.
    fn load(&mut self, centres: &Dataset, err: f64, half_gap: &mut [f64]) {
        let (k, d, blocks) = (self.k, self.d, self.blocks);
        for a in 0..k {
            self.cc[a * k + a] = 0.0;
            for b in a + 1..k {
                let g = dist2(centres.row(a), centres.row(b)).sqrt();
                self.cc[a * k + b] = g;
                self.cc[b * k + a] = g;
            }
        }
        for a in 0..k {
            self.sorted.clear();
            self.sorted
                .extend((0..k).map(|j| (self.cc[a * k + j], j as u32)));
            self.sorted
                .sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            let base = a * blocks * LANES;
            for (pos, &(g, j)) in self.sorted.iter().enumerate() {
                if j as usize == a {
                    self.self_pos[a] = pos as u32;
                }
                self.order[base + pos] = j;
                self.gap[base + pos] = g;
                let (b, lane) = (pos / LANES, pos % LANES);
                for (dd, &v) in centres.row(j as usize).iter().enumerate() {
                    self.t[((a * blocks + b) * d + dd) * LANES + lane] = v;
                }
            }
            half_gap[a] = self
                .sorted
                .iter()
                .find(|x| x.1 as usize != a)
                .map_or(f64::INFINITY, |x| 0.5 * (x.0 - err).max(0.0));
        }
    }

    /// [`Near::visit_lanes`], as the tests call it.
    #[cfg(test)]
    fn visit(&self, a: usize, y: &[f64], err: f64, margin: f64, keep: f64) -> Visit {
        self.visit_lanes::<0>(a, y, err, margin, keep)
    }

    /// Visits point `y` of cluster `a` whose bounds failed. The first block of `a`'s sorted
    /// centres holds `a` itself: its lane gives the exact distance to `a` (the same sums as
    /// [`dist2`]), which may prove `a` still nearest (`distance + err + margin < keep`);
    /// otherwise the search goes on from that block. `margin` exceeds the rounding error of
    /// three computed distances.
    #[inline(always)]
    fn visit_lanes<const D: usize>(
        &self,
        a: usize,
        y: &[f64],
        err: f64,
        margin: f64,
        keep: f64,
    ) -> Visit {
        let (d2, ua) = self.own_block::<D>(a, y);
        if ua + err + margin < keep {
            return Visit::Kept(ua);
        }
        let (c, best, second) = self.search::<D>(a, y, ua, margin, d2);
        Visit::Searched(c, best, second)
    }

    /// What [`nearest2`] returns for `y`, searching from centre `a`'s sorted centres (any `a`:
    /// the search is shortest from the nearest).
    #[inline(always)]
    fn nearest_from<const D: usize>(&self, a: usize, y: &[f64], margin: f64) -> (usize, f64, f64) {
        let (d2, ua) = self.own_block::<D>(a, y);
        self.search::<D>(a, y, ua, margin, d2)
    }

    /// Squared distances from `y` to the first block of `a`'s sorted centres, and the distance
    /// to `a`.
    #[inline(always)]
    fn own_block<const D: usize>(&self, a: usize, y: &[f64]) -> ([f64; LANES], f64) {
        debug_assert!(D == 0 || D == self.d);
        let d = dim::<D>(self.d);
        let size = d * LANES;
        let base = a * self.blocks;
        let y = &y[..d];
        let mut d2 = [0.0f64; LANES];
        block_d2::<D>(&self.t[base * size..(base + 1) * size], y, &mut d2);
        let pos = self.self_pos[a] as usize;
        let ua = if pos < LANES {
            d2[pos]
        } else {
            // More than a block of centres coincide with `a`: read its lane where it lies.
            let (at, lane) = (base + pos / LANES, pos % LANES);
            let mut s = 0.0;
            for (dd, &yd) in y.iter().enumerate() {
                let diff = yd - self.t[(at * d + dd) * LANES + lane];
                s += diff * diff;
            }
            s
        }
        .sqrt();
        (d2, ua)
    }

    /// The nearest of `a`'s sorted centres to `y` (ties to the lowest index), its squared
    /// distance and the second-smallest, from `d2` (the first block's) on; `ua` is the distance
    /// from `y` to `a`.
    #[inline(always)]
    fn search<const D: usize>(
        &self,
        a: usize,
        y: &[f64],
        ua: f64,
        margin: f64,
        mut d2: [f64; LANES],
    ) -> (usize, f64, f64) {
        let d = dim::<D>(self.d);
        let size = d * LANES;
        let base = a * self.blocks;
        let y = &y[..d];
        let (mut best, mut best_d, mut second) = (usize::MAX, f64::INFINITY, f64::INFINITY);
        for b in 0..self.blocks {
            let at = base + b;
            if b > 0 {
                block_d2::<D>(&self.t[at * size..(at + 1) * size], y, &mut d2);
            }
            let idx = &self.order[at * LANES..(at + 1) * LANES];
            for (&v, &j) in d2.iter().zip(idx) {
                let j = j as usize;
                if v < best_d || (v == best_d && j < best) {
                    second = best_d;
                    best_d = v;
                    best = j;
                } else if v < second {
                    second = v;
                }
            }
            // A centre at distance g from `a` lies at least g - ua from `y`; the gaps ascend,
            // so once the next one is out of reach, so are all after it.
            if b + 1 < self.blocks && self.gap[(at + 1) * LANES] - ua - margin > second.sqrt() {
                break;
            }
        }
        (best, best_d, second)
    }
}

/// What a point whose bounds failed learns from [`Near::visit`].
#[derive(Clone, Copy, Debug, PartialEq)]
enum Visit {
    /// The computed distance to its own centre, which proves that centre still nearest.
    Kept(f64),
    /// Nearest centre (ties to the lowest index), its squared distance and the second-smallest
    /// squared distance: what [`nearest2`] returns.
    Searched(usize, f64, f64),
}

/// A distinct row that changed cluster in a pass.
#[derive(Clone, Copy, Debug, Default)]
struct Move {
    row: u32,
    from: u32,
    to: u32,
}

/// What one assignment pass found: the moves, and the points whose nearest centre the running
/// centres could not settle (see [`Running`]).
#[derive(Default)]
struct Outcome {
    moves: Vec<Move>,
    uncertain: Vec<u32>,
    /// Searches left by the single-precision search to the double-precision one.
    close: usize,
}

impl Outcome {
    /// Puts distinct row `row`, whose label is `label`, in cluster `c`, recording the move when
    /// it changes cluster.
    #[inline(always)]
    fn place(&mut self, row: usize, label: &mut u32, c: usize) {
        if c as u32 != *label {
            self.moves.push(Move {
                row: row as u32,
                from: *label,
                to: c as u32,
            });
            *label = c as u32;
        }
    }
}

/// SimPoint's centre sums over every row in order, from the labels of the distinct rows.
struct Exact {
    /// Coordinate sums (`k * d`), weight and row count of each cluster, before division.
    sums: Vec<f64>,
    weights: Vec<f64>,
    rows: Vec<u64>,
}

impl Exact {
    /// Sums `y * w` and `w` of every row into its cluster, in row order: SimPoint's additions.
    fn new(points: &Dataset, distinct: &Distinct, labels: &[u32], k: usize) -> Exact {
        #[cfg(target_arch = "x86_64")]
        if points.cols <= avx512::SUM_DIM && cpu::avx512() {
            // SAFETY: AVX-512F is present (checked just above).
            return unsafe { avx512::exact_sums(points, &distinct.slot, labels, k) };
        }
        Exact::new_scalar(points, distinct, labels, k)
    }

    /// [`Exact::new`], one coordinate at a time.
    fn new_scalar(points: &Dataset, distinct: &Distinct, labels: &[u32], k: usize) -> Exact {
        let d = points.cols;
        let mut e = Exact {
            sums: vec![0.0; k * d],
            weights: vec![0.0; k],
            rows: vec![0; k],
        };
        for (p, &s) in distinct.slot.iter().enumerate() {
            let c = labels[s as usize] as usize;
            let w = points.weights[p];
            for (acc, &v) in e.sums[c * d..(c + 1) * d].iter_mut().zip(points.row(p)) {
                *acc += v * w;
            }
            e.weights[c] += w;
            e.rows[c] += 1;
        }
        e
    }

    /// The centres SimPoint divides out (an empty cluster, or one of weight 0, stays at the
    /// origin).
    fn centres(&self, d: usize) -> Dataset {
        let mut out = Dataset::new(d, self.sums.clone(), self.weights.clone());
        for (row, &w) in out.data.chunks_mut(d.max(1)).zip(&self.weights) {
            if w > 0.0 {
                row.iter_mut().for_each(|v| *v /= w);
            }
        }
        out
    }
}

/// Each cluster's coordinate sums and weight, updated move by move instead of summed again in
/// SimPoint's order: a move costs `d` additions, where SimPoint's order would re-add every
/// member after the first change. The centres divided out of them are not SimPoint's to the
/// last bit, but each lies within a computed distance of SimPoint's ([`Running::centre`]);
/// k-means widens its margins by that much, and exact sums are taken when a decision needs
/// them.
struct Running {
    d: usize,
    sums: Vec<f64>,
    weights: Vec<f64>,
    rows: Vec<u64>,
    /// Per cluster, a bound on the rounding errors of the sums so far, in units of `u * max_abs`
    /// (for the coordinates) and `u` (for the weight), `u` being half the machine epsilon.
    budget: Vec<f64>,
    /// Largest coordinate magnitude of any point, times the largest of 1 and the total weight:
    /// bounds every sum.
    max_abs: f64,
    scale: f64,
    /// Multiplies the bounds; tests raise it to make every decision uncertain.
    inflate: f64,
}

impl Running {
    fn new(k: usize, d: usize, max_abs: f64, total_weight: f64, inflate: f64) -> Running {
        Running {
            d,
            sums: vec![0.0; k * d],
            weights: vec![0.0; k],
            rows: vec![0; k],
            budget: vec![0.0; k],
            max_abs,
            scale: total_weight.max(1.0) * 1.01,
            inflate,
        }
    }

    /// Starts again from SimPoint's own sums, whose only error is their summation's; returns
    /// SimPoint's centres, whose coordinate bounds in `bound` become 0.
    fn restart(&mut self, exact: &Exact, bound: &mut [f64]) -> Dataset {
        self.sums.copy_from_slice(&exact.sums);
        self.weights.copy_from_slice(&exact.weights);
        self.rows.copy_from_slice(&exact.rows);
        for (b, &r) in self.budget.iter_mut().zip(&self.rows) {
            *b = (r as f64 + 1.0) * self.scale;
        }
        bound.fill(0.0);
        exact.centres(self.d)
    }

    /// Moves distinct row `y`, of weight `w` over `count` rows, from cluster `from` to `to`.
    fn apply(&mut self, y: &[f64], w: f64, count: u32, from: usize, to: usize) {
        let d = self.d;
        for (dd, &v) in y.iter().enumerate() {
            let z = v * w;
            self.sums[from * d + dd] -= z;
            self.sums[to * d + dd] += z;
        }
        self.weights[from] -= w;
        self.weights[to] += w;
        self.rows[from] -= u64::from(count);
        self.rows[to] += u64::from(count);
        // Each addition rounds by at most u times the sum (at most `scale`); the product and
        // the row's own weight sum add (count + 1) u times the term.
        let b = self.scale + w * (f64::from(count) + 3.0);
        self.budget[from] += b;
        self.budget[to] += b;
    }

    /// Centre `c` into `out`, its weight and a bound on the distance from every coordinate to
    /// SimPoint's; `None` when the weight is too small against its own error bound to divide by
    /// (exact sums must decide).
    fn centre(&mut self, c: usize, out: &mut [f64]) -> Option<(f64, f64)> {
        let d = self.d;
        if self.rows[c] == 0 {
            // SimPoint's empty cluster sits at the origin with weight 0, exactly.
            out.fill(0.0);
            self.sums[c * d..(c + 1) * d].fill(0.0);
            self.weights[c] = 0.0;
            self.budget[c] = 0.0;
            return Some((0.0, 0.0));
        }
        let u = f64::EPSILON / 2.0;
        // SimPoint's own sums round too: (rows + 1) u times their magnitude.
        let t = (self.budget[c] + (self.rows[c] as f64 + 1.0) * self.scale) * self.inflate;
        let sigma = 1.01 * u * self.max_abs * t;
        let omega = 1.01 * u * t;
        let w = self.weights[c];
        if w.is_nan() || w <= 4.0 * omega {
            return None;
        }
        for (o, &s) in out.iter_mut().zip(&self.sums[c * d..(c + 1) * d]) {
            *o = s / w;
        }
        // |S'/W' - S/W| <= |S' - S| / W' + |S / W| |W' - W| / W', and each division rounds.
        // Never 0: a bound of 0 marks SimPoint's own centre (weight included).
        let e = (sigma + 1.01 * self.max_abs * omega) / (w - omega)
            + 2.02 * u * self.max_abs * self.inflate
            + f64::MIN_POSITIVE;
        if cfg!(test) && self.inflate > 1.0 {
            // Tests move the centre almost as far as its bound allows, in a fixed pattern.
            for (dd, o) in out.iter_mut().enumerate() {
                *o += if (c + dd).is_multiple_of(2) {
                    0.9 * e
                } else {
                    -0.9 * e
                };
            }
        }
        Some((w, e))
    }
}

/// Runs weighted Lloyd k-means from `init` (whose weights are the initial centre weights) for at
/// most `max_iter` passes, following SimPoint's stopping rule and empty-cluster handling.
///
/// Shortcuts that keep SimPoint's results: Hamerly's bounds skip distance computations whose
/// outcome is certain; a point whose bounds fail looks at centres in order of their distance to
/// its own and stops when the rest are provably farther; and the centres are kept as running
/// sums ([`Running`]), with SimPoint's own sums taken at the end and whenever the running
/// centres leave a decision open.
///
/// `max_abs` bounds the magnitude of every point coordinate; it sets the rounding-error margins.
/// Each pass of a large set is split across threads when `split` says threads are idle.
pub fn lloyd(
    points: &Dataset,
    distinct: &Distinct,
    init: Dataset,
    max_iter: usize,
    max_abs: f64,
    split: &(dyn Fn() -> bool + Sync),
) -> LloydResult {
    lloyd_inflated(points, distinct, init, max_iter, max_abs, split, 1.0, true)
}

/// [`lloyd`] with the running centres' error bounds multiplied by `inflate` (at least 1), and
/// the single-precision search only if `narrow` (tests compare both searches).
#[allow(clippy::too_many_arguments)]
fn lloyd_inflated(
    points: &Dataset,
    distinct: &Distinct,
    init: Dataset,
    max_iter: usize,
    max_abs: f64,
    split: &(dyn Fn() -> bool + Sync),
    inflate: f64,
    narrow: bool,
) -> LloydResult {
    // Assignment state lives on distinct rows; sums run over every row in order.
    let n = distinct.first.len();
    let d = points.cols;
    let k = init.rows();
    let point_abs = max_abs;
    // Centres are weighted means of points, or the origin, or the initial centres.
    let max_abs = init.data.iter().fold(max_abs, |m, v| m.max(v.abs()));
    let err = distance_error(max_abs, d);
    let total_weight = distinct.weight.iter().sum::<f64>();
    let mut running = Running::new(k, d, point_abs, total_weight, inflate);
    let mut cur = init;
    let mut next = Dataset::zeros(k, d);
    // Bounds on each coordinate's distance from SimPoint's centre: `cur`'s and `next`'s.
    let mut bound = vec![0.0f64; k];
    let mut next_bound = vec![0.0f64; k];
    let mut labels = vec![0u32; n];
    // Bounds are kept in single precision, rounded outwards, to halve their memory.
    let mut upper = vec![0.0f32; n];
    let mut lower = vec![0.0f32; n];
    let mut half_gap = vec![0.0f64; k];
    let mut drift = vec![0.0f64; k];
    let mut changed = vec![true; k];
    let mut blocked = Blocked::new(k, d);
    #[cfg(target_arch = "x86_64")]
    let mut narrow = narrow
        .then(|| avx512::Narrow::new(k, points, max_abs))
        .flatten();
    #[cfg(target_arch = "x86_64")]
    let sorted = narrow.is_none();
    #[cfg(not(target_arch = "x86_64"))]
    let sorted = !narrow;
    // The single-precision search scans every centre; otherwise they are sorted around each.
    let mut near = (sorted && k <= NEAR_MAX_K).then(|| Near::new(k, d));
    let (mut max_drift, mut second_drift, mut max_drift_c) = (0.0f64, 0.0f64, usize::MAX);
    let large = n >= 16_384 && rayon::current_num_threads() > 1;
    let avx2 = cpu::avx2();
    let avx512 = cpu::avx512();
    let root_d = (d as f64).sqrt() * 1.01;
    // SimPoint's sums for the labels as they are, and as they were before a pass's moves.
    let exact = |labels: &[u32]| Exact::new(points, distinct, labels, k);
    let exact_before = |labels: &mut [u32], moves: &[Move]| {
        undo(labels, moves);
        let e = exact(labels);
        redo(labels, moves);
        e
    };
    let mut refreshes = 0;
    let mut close_calls = 0;
    for iter in 0..max_iter {
        let parallel = large && split();
        // The first pass searches every point from scratch.
        let full = iter == 0;
        let spread = bound.iter().fold(0.0f64, |m, &b| m.max(b)) * root_d;
        let err_pass = err + 2.0 * spread;
        if full || near.is_none() {
            blocked.load(&cur);
        }
        match &mut near {
            Some(near) => near.load(&cur, err_pass, &mut half_gap),
            None if !full => centre_half_gaps(&cur, err_pass, &mut half_gap),
            None => {}
        }
        #[cfg(target_arch = "x86_64")]
        if let Some(narrow) = &mut narrow {
            narrow.load(&cur);
        }
        let pass = Pass {
            points,
            first: &distinct.first,
            cur: &cur,
            blocked: &blocked,
            near: near.as_ref(),
            #[cfg(target_arch = "x86_64")]
            narrow: narrow.as_ref(),
            direct: matches!((&distinct.slot, &points.index),
                (Cow::Borrowed(s), Some(ix)) if std::ptr::eq(*s, ix.as_slice())),
            half_gap: &half_gap,
            drift: &drift,
            max_drift,
            second_drift,
            max_drift_c,
            err: err_pass,
            margin: 4.0 * err_pass,
            spread,
            round2: err * err,
            full,
            avx2,
            avx512,
        };
        let mut outcome = if parallel {
            let mid = n / 2;
            let (la, lb) = labels.split_at_mut(mid);
            let (ua, ub) = upper.split_at_mut(mid);
            let (wa, wb) = lower.split_at_mut(mid);
            let (mut oa, ob) = rayon::join(
                || pass.assign(0, la, ua, wa),
                || pass.assign(mid, lb, ub, wb),
            );
            oa.moves.extend_from_slice(&ob.moves);
            oa.uncertain.extend_from_slice(&ob.uncertain);
            oa.close += ob.close;
            oa
        } else {
            pass.assign(0, &mut labels, &mut upper, &mut lower)
        };
        close_calls += outcome.close;
        if !outcome.uncertain.is_empty() {
            // The running centres left some nearest centres open. SimPoint's centres for the
            // labels before this pass settle them; every other decision and bound of the pass
            // holds for those centres too (the pass's margins cover their distance).
            refreshes += 1;
            cur = running.restart(&exact_before(&mut labels, &outcome.moves), &mut bound);
            blocked.load(&cur);
            for i in std::mem::take(&mut outcome.uncertain) {
                let i = i as usize;
                let (c, best, second) = blocked.nearest(points.row(distinct.first[i] as usize));
                (upper[i], lower[i]) = bounds_from(best, second, err);
                outcome.place(i, &mut labels[i], c);
            }
        }
        let moves = outcome.moves;
        if iter == 0 {
            next = running.restart(&exact(&labels), &mut next_bound);
            changed.fill(true);
        } else {
            changed.fill(false);
            for (j, m) in moves.iter().enumerate() {
                if let Some(ahead) = moves.get(j + AHEAD) {
                    prefetch_row(points.row(distinct.first[ahead.row as usize] as usize));
                }
                let i = m.row as usize;
                let y = points.row(distinct.first[i] as usize);
                let (from, to) = (m.from as usize, m.to as usize);
                running.apply(y, distinct.weight[i], distinct.count[i], from, to);
                changed[from] = true;
                changed[to] = true;
            }
            let mut settled = true;
            for c in 0..k {
                if changed[c] {
                    match running.centre(c, next.row_mut(c)) {
                        Some((w, b)) => (next.weights[c], next_bound[c]) = (w, b),
                        None => settled = false,
                    }
                } else {
                    next.row_mut(c).copy_from_slice(cur.row(c));
                    next.weights[c] = cur.weights[c];
                    next_bound[c] = bound[c];
                }
            }
            if !settled {
                refreshes += 1;
                next = running.restart(&exact(&labels), &mut next_bound);
            }
        }
        // SimPoint stops when the new centres equal the old ones bit for bit. Without moves
        // they are the same sums; with moves, they differ when some coordinate moved by more
        // than both bounds; otherwise compare SimPoint's own.
        let converged = if iter == 0 {
            next.data == cur.data
        } else if moves.is_empty() {
            true
        } else {
            let apart = (0..k).any(|c| {
                changed[c]
                    && next
                        .row(c)
                        .iter()
                        .zip(cur.row(c))
                        .any(|(a, b)| (a - b).abs() > (next_bound[c] + bound[c]) * 1.01)
            });
            if apart {
                false
            } else {
                refreshes += 1;
                next = running.restart(&exact(&labels), &mut next_bound);
                next.data == exact_before(&mut labels, &moves).centres(d).data
            }
        };
        if converged {
            let centres = if next_bound.iter().all(|&b| b == 0.0) {
                next
            } else {
                exact(&labels).centres(d)
            };
            return LloydResult {
                centres,
                iterations: iter,
                labels: Some(labels),
                refreshes,
                close_calls,
            };
        }
        if iter + 1 == max_iter {
            // SimPoint returns the centres this pass started from.
            let centres = if bound.iter().all(|&b| b == 0.0) {
                cur
            } else {
                exact_before(&mut labels, &moves).centres(d)
            };
            return LloydResult {
                centres,
                iterations: max_iter,
                labels: Some(labels),
                refreshes,
                close_calls,
            };
        }
        max_drift = 0.0;
        second_drift = 0.0;
        max_drift_c = usize::MAX;
        for c in 0..k {
            // A cluster with the same members has the same sums: SimPoint's centre stays put.
            let same = cur.row(c) == next.row(c) && bound[c] == 0.0 && next_bound[c] == 0.0;
            drift[c] = if !changed[c] || same {
                0.0
            } else {
                dist2(cur.row(c), next.row(c)).sqrt() + err + (bound[c] + next_bound[c]) * root_d
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
        std::mem::swap(&mut bound, &mut next_bound);
    }
    LloydResult {
        centres: cur,
        iterations: max_iter,
        labels: None,
        refreshes,
        close_calls,
    }
}

/// Puts the distinct rows of `moves` back in the clusters they left.
fn undo(labels: &mut [u32], moves: &[Move]) {
    for m in moves {
        labels[m.row as usize] = m.from;
    }
}

/// Moves the distinct rows of `moves` again.
fn redo(labels: &mut [u32], moves: &[Move]) {
    for m in moves {
        labels[m.row as usize] = m.to;
    }
}

/// Asks the cache for every line of a row that will be read soon.
#[inline(always)]
fn prefetch_row(row: &[f64]) {
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
const BLOCK: usize = 4096;

/// How many failing points ahead a row is prefetched.
const AHEAD: usize = 8;

/// What one assignment pass reads.
struct Pass<'a> {
    points: &'a Dataset,
    first: &'a [u32],
    cur: &'a Dataset,
    blocked: &'a Blocked,
    near: Option<&'a Near>,
    /// The single-precision search, when it serves this k and machine.
    #[cfg(target_arch = "x86_64")]
    narrow: Option<&'a avx512::Narrow>,
    direct: bool,
    half_gap: &'a [f64],
    drift: &'a [f64],
    max_drift: f64,
    second_drift: f64,
    max_drift_c: usize,
    err: f64,
    margin: f64,
    /// Bound on the distance from any centre of `cur` to SimPoint's (0: they are SimPoint's).
    spread: f64,
    /// Bound on the rounding error of a computed squared distance.
    round2: f64,
    /// Search every point from scratch (no bounds, no moves: the first pass).
    full: bool,
    avx2: bool,
    avx512: bool,
}

impl Pass<'_> {
    /// Updates the bounds of points `from..to` for the centres' drift and writes to `todo` the
    /// points whose bounds no longer prove their centre nearest; returns how many.
    fn check_bounds(
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
    fn assert_check_ranges(
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

    fn check_bounds_scalar(
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
    fn assign(
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
    fn bounded_any(
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
    fn row(&self, start: usize, i: usize) -> &[f64] {
        self.row_d::<0>(start, i)
    }

    /// Where point `start + i`'s values are stored in `points.data` (in rows of `points.cols`).
    #[inline(always)]
    fn stored_row(&self, start: usize, i: usize) -> usize {
        // A deduplicated set stores distinct row i as row i.
        if self.direct {
            start + i
        } else {
            self.points.stored(self.first[start + i] as usize)
        }
    }

    /// [`Pass::row`] for rows of `D` values (any number when `D` is 0).
    #[inline(always)]
    fn row_d<const D: usize>(&self, start: usize, i: usize) -> &[f64] {
        let d = dim::<D>(self.points.cols);
        &self.points.data[self.stored_row(start, i) * d..][..d]
    }

    /// [`Pass::assign`] with centres sorted around each centre: on the first pass, each point's
    /// search starts from the previous point's centre (consecutive intervals tend to share a
    /// phase, so the search mostly stops after a block); later, Hamerly's bounds come first.
    #[inline(always)]
    fn bounded<const D: usize>(
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
    fn certain(&self, best: f64, second: f64) -> bool {
        let s = self.spread;
        if s == 0.0 || second == f64::INFINITY {
            return true;
        }
        let slack = |x: f64| (2.0 * x.sqrt() + 2.0 * self.err + s) * s + 2.0 * self.round2;
        second - best > slack(best) + slack(second)
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
    // One logarithm per cluster: the same value every member's term would compute.
    let ln_w: Vec<f64> = centres.weights.iter().map(|&cw| cw.ln()).collect();
    for i in 0..n {
        let c = label(i);
        if centres.weights[c] > 0.0 {
            l += ln_w[c] * data.weights[i] / tw;
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
        // 15 dimensions take the build of the bounded pass for SimPoint's default dimension.
        for (seed, d) in [(5, 5), (77, 5), (1234, 5), (31, 15)] {
            let data = grid(2000, d, seed);
            for k in [1, 3, 7, 12] {
                for iters in [1, 2, 5, 100] {
                    let mut rng = Random::new(seed + k as i64);
                    let mut init = init_sample(&data, k, &mut rng);
                    initial_weights(&data, &mut init);
                    let (slow, it) = naive(&data, init.clone(), iters);
                    for narrow in [false, true] {
                        let fast = lloyd_inflated(
                            &data,
                            &Distinct::new(&data),
                            init.clone(),
                            iters,
                            1.3,
                            &|| true,
                            1.0,
                            narrow,
                        );
                        let case = format!("seed {seed} k {k} iters {iters} narrow {narrow}");
                        assert_eq!(fast.centres, slow, "{case}");
                        assert_eq!(fast.iterations, it, "{case}");
                        // With one centre there is no second one: nothing is close.
                        if k == 1 {
                            assert_eq!(fast.close_calls, 0, "{case}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn close_calls_go_to_the_double_precision_search() {
        // Mirrored pairs keep the two clusters' border at x0 = 0.5; points within 1e-9 of it
        // are beyond single precision's resolution but not double precision's.
        let (n, d) = (1200, 15);
        let mut r = Random::new(9);
        let mut data = Dataset::zeros(n, d);
        for i in (0..n).step_by(2) {
            let x0 = if i % 6 == 0 {
                0.5 + (f64::from(r.rand_float()) - 0.5) * 2e-9
            } else {
                f64::from(r.rand_float()) * 0.4
            };
            let rest: Vec<f64> = (1..d).map(|_| f64::from(r.rand_float()) * 0.2).collect();
            for (row, x) in [(i, x0), (i + 1, 1.0 - x0)] {
                data.row_mut(row)[0] = x;
                data.row_mut(row)[1..].copy_from_slice(&rest);
                data.weights[row] = 1.0 / n as f64;
            }
        }
        // Mirrored starting centres keep the clusters mirrored.
        for xs in [&[0.2, 0.8][..], &[0.1, 0.9, 0.3, 0.7]] {
            let k = xs.len();
            let mut init = Dataset::zeros(k, d);
            for (c, &x) in xs.iter().enumerate() {
                init.row_mut(c).fill(0.1);
                init.row_mut(c)[0] = x;
            }
            let (slow, it) = naive(&data, init.clone(), 100);
            for narrow in [false, true] {
                let fast = lloyd_inflated(
                    &data,
                    &Distinct::new(&data),
                    init.clone(),
                    100,
                    1.0,
                    &|| true,
                    1.0,
                    narrow,
                );
                assert_eq!(fast.centres, slow, "k {k} narrow {narrow}");
                assert_eq!(fast.iterations, it, "k {k} narrow {narrow}");
                if !narrow {
                    assert_eq!(fast.close_calls, 0);
                } else if cpu::avx512() {
                    assert!(fast.close_calls > 0, "k {k}: no close call");
                }
            }
        }
    }

    #[test]
    fn ties_go_to_lowest_index_and_empty_clusters_move_to_origin() {
        let data = Dataset::new(1, vec![0.0, 1.0, 1.0, 2.0], vec![0.25; 4]);
        let init = Dataset::new(1, vec![1.0, 1.0], vec![0.5, 0.5]);
        let distinct = Distinct::new(&data);
        let r = lloyd(&data, &distinct, init, 100, 2.0, &|| true);
        // Pass 1 puts every point in cluster 0 (tie) and moves the empty cluster 1 to the
        // origin, which then captures the point at 0.
        let labels = r.labels.unwrap();
        let all: Vec<u32> = distinct.slot.iter().map(|&s| labels[s as usize]).collect();
        assert_eq!(all, vec![1, 0, 0, 0]);
        assert_eq!(r.centres.row(0), &[4.0 / 3.0]);
        assert_eq!(r.centres.row(1), &[0.0]);
        assert_eq!(r.centres.weights, vec![0.75, 0.25]);
    }

    #[test]
    fn inflated_running_bounds_fall_back_to_simpoints_sums() {
        // Bounds inflated until the running centres settle little (1e9) or nothing (1e13):
        // every open decision must go to SimPoint's own sums, with the same results.
        let tie = Dataset::new(1, vec![0.0, 1.0, 1.0, 2.0, 2.0, 3.0], vec![1.0 / 6.0; 6]);
        for seed in [5, 77] {
            let data = grid(1500, 4, seed);
            for inflate in [1e9, 1e13] {
                let mut refreshed = 0;
                for k in [2, 5, 9] {
                    for iters in [2, 7, 100] {
                        let mut rng = Random::new(seed + k as i64);
                        let init = init_sample(&data, k, &mut rng);
                        let split = |_| true;
                        let r = lloyd_inflated(
                            &data,
                            &Distinct::new(&data),
                            init.clone(),
                            iters,
                            1.3,
                            &|| split(()),
                            inflate,
                            true,
                        );
                        let (slow, it) = naive(&data, init, iters);
                        assert_eq!(
                            r.centres, slow,
                            "seed {seed} k {k} iters {iters} x{inflate}"
                        );
                        assert_eq!(r.iterations, it);
                        refreshed += r.refreshes;
                    }
                }
                assert!(refreshed > 0, "inflate {inflate}: no fallback taken");
            }
            let init = Dataset::new(1, vec![1.0, 1.0, 2.5], vec![0.0; 3]);
            let r = lloyd_inflated(
                &tie,
                &Distinct::new(&tie),
                init.clone(),
                50,
                3.0,
                &|| false,
                1e9,
                true,
            );
            assert_eq!(r.centres, naive(&tie, init, 50).0);
        }
    }
}

#[cfg(test)]
mod structure_tests {
    use super::*;

    fn random_set(r: &mut Random, n: usize, d: usize) -> Dataset {
        let mut set = Dataset::zeros(n, d);
        for v in &mut set.data {
            *v = f64::from(r.rand_float()) * 2.0 - 1.0;
        }
        for w in &mut set.weights {
            *w = f64::from(r.rand_float());
        }
        set
    }

    #[test]
    fn sorted_search_equals_the_full_scan() {
        let mut r = Random::new(41);
        for trial in 0..200 {
            let k = 1 + trial % NEAR_MAX_K;
            let d = 1 + trial % 17;
            let mut centres = random_set(&mut r, k, d);
            if k > 3 {
                // Duplicate centres force ties in distance and in centre gaps.
                let row = centres.row(1).to_vec();
                centres.row_mut(k - 1).copy_from_slice(&row);
            }
            let err = distance_error(1.0, d);
            let mut near = Near::new(k, d);
            let mut half_gap = vec![0.0; k];
            near.load(&centres, err, &mut half_gap);
            for p in 0..30 {
                let y: Vec<f64> = match p % 3 {
                    0 => centres.row(p % k).to_vec(),
                    _ => (0..d)
                        .map(|_| f64::from(r.rand_float()) * 2.0 - 1.0)
                        .collect(),
                };
                let want = nearest2(&y, &centres);
                let want = Visit::Searched(want.0, want.1, want.2);
                let m = 4.0 * err;
                for a in [0, k / 2, k - 1] {
                    let ua = dist2(&y, centres.row(a)).sqrt();
                    let ninf = f64::NEG_INFINITY;
                    assert_eq!(near.visit(a, &y, err, m, ninf), want, "k {k} d {d} a {a}");
                    let (c, best, second) = near.nearest_from::<0>(a, &y, m);
                    assert_eq!(Visit::Searched(c, best, second), want);
                    assert_eq!(near.visit_lanes::<0>(a, &y, err, m, ninf), want);
                    let keep = f64::INFINITY;
                    assert_eq!(near.visit(a, &y, err, m, keep), Visit::Kept(ua));
                    assert_eq!(near.visit_lanes::<0>(a, &y, err, m, keep), Visit::Kept(ua));
                    if d == 15 {
                        // The build for a dimension known when compiling adds the same way.
                        let (c, best, second) = near.nearest_from::<15>(a, &y, m);
                        assert_eq!(Visit::Searched(c, best, second), want);
                        assert_eq!(near.visit_lanes::<15>(a, &y, err, m, ninf), want);
                        assert_eq!(near.visit_lanes::<15>(a, &y, err, m, keep), Visit::Kept(ua));
                    }
                }
            }
        }
    }

    #[test]
    fn own_distance_is_found_behind_a_block_of_coincident_centres() {
        let mut r = Random::new(3);
        let (k, d) = (20, 4);
        let mut centres = random_set(&mut r, k, d);
        let row = centres.row(0).to_vec();
        for c in 1..11 {
            centres.row_mut(c).copy_from_slice(&row);
        }
        let err = distance_error(1.0, d);
        let mut near = Near::new(k, d);
        let mut half_gap = vec![0.0; k];
        near.load(&centres, err, &mut half_gap);
        assert_eq!(near.self_pos[10], 10);
        let y: Vec<f64> = (0..d).map(|_| f64::from(r.rand_float())).collect();
        let ua = dist2(&y, centres.row(10)).sqrt();
        assert_eq!(
            near.visit(10, &y, err, 4.0 * err, f64::INFINITY),
            Visit::Kept(ua)
        );
        let (c, best, second) = nearest2(&y, &centres);
        assert_eq!(
            near.visit(10, &y, err, 4.0 * err, f64::NEG_INFINITY),
            Visit::Searched(c, best, second)
        );
    }

    #[test]
    fn vector_exact_sums_equal_scalar_ones() {
        let mut r = Random::new(5);
        for d in [1, 3, 8, 9, 15, 16] {
            let mut set = random_set(&mut r, 3000, d);
            for i in 0..set.rows() {
                set.weights[i] = f64::from(r.rand_float());
                if i % 3 == 0 {
                    // Repeated rows, so that a deduplicated set reads rows out of order.
                    let prev = set.row(i / 2).to_vec();
                    set.row_mut(i).copy_from_slice(&prev);
                }
            }
            let mut dedup = set.clone();
            dedup.dedup();
            for (points, k) in [(&set, 7), (&dedup, 7), (&set, 1)] {
                let distinct = Distinct::new(points);
                let n = distinct.first.len();
                // Runs of one label, as phases give, and scattered ones.
                let labels: Vec<u32> = (0..n)
                    .map(|i| {
                        if i % 5 == 0 {
                            (r.rand_int() % k as i64) as u32
                        } else {
                            (i / 40 % k) as u32
                        }
                    })
                    .collect();
                let fast = Exact::new(points, &distinct, &labels, k);
                let slow = Exact::new_scalar(points, &distinct, &labels, k);
                assert_eq!(fast.sums, slow.sums, "d {d} k {k}");
                assert_eq!(fast.weights, slow.weights);
                assert_eq!(fast.rows, slow.rows);
            }
        }
    }

    #[test]
    fn vector_bound_checks_equal_scalar_ones() {
        let mut r = Random::new(77);
        let (k, n) = (13, 1001);
        let centres = random_set(&mut r, k, 3);
        let blocked = Blocked::new(k, 3);
        let points = random_set(&mut r, 1, 3);
        let drift: Vec<f64> = (0..k).map(|_| f64::from(r.rand_float()) * 0.1).collect();
        let half_gap: Vec<f64> = (0..k).map(|_| f64::from(r.rand_float())).collect();
        let builds = [(false, false), (true, false), (true, true)];
        let here = builds
            .into_iter()
            .filter(|&(a, b)| (!a || cpu::avx2()) && (!b || cpu::avx512()));
        for ((avx2, avx512), max_drift_c) in here.flat_map(|b| [(b, usize::MAX), (b, 0), (b, 5)]) {
            let pass = Pass {
                points: &points,
                first: &[],
                cur: &centres,
                blocked: &blocked,
                near: None,
                #[cfg(target_arch = "x86_64")]
                narrow: None,
                direct: false,
                half_gap: &half_gap,
                drift: &drift,
                max_drift: 0.1,
                second_drift: 0.05,
                max_drift_c,
                err: 1e-9,
                margin: 4e-9,
                spread: 0.0,
                round2: 0.0,
                full: false,
                avx2,
                avx512,
            };
            let labels: Vec<u32> = (0..n).map(|_| (r.rand_int() % k as i64) as u32).collect();
            let upper: Vec<f32> = (0..n).map(|_| r.rand_float()).collect();
            let lower: Vec<f32> = (0..n).map(|_| r.rand_float()).collect();
            let (mut u1, mut l1, mut t1) = (upper.clone(), lower.clone(), vec![0u32; n]);
            let (mut u2, mut l2, mut t2) = (upper, lower, vec![0u32; n]);
            for (from, to) in [(0, n), (3, 10), (7, 7), (500, 1001)] {
                let f1 = pass.check_bounds(from, to, &labels, &mut u1, &mut l1, &mut t1);
                let f2 = pass.check_bounds_scalar(from, to, &labels, &mut u2, &mut l2, &mut t2);
                assert_eq!((f1, &t1[..f1], &u1, &l1), (f2, &t2[..f2], &u2, &l2));
            }
        }
    }

    #[test]
    fn deduplicated_sets_cluster_exactly_like_plain_ones() {
        let mut r = Random::new(12);
        let n = 4000;
        let mut plain = Dataset::zeros(n, 3);
        for p in 0..n {
            let v = f64::from(r.rand_int() as i32 % 900) / 900.0;
            plain.row_mut(p).copy_from_slice(&[v, v * v, 1.0 - v]);
            plain.weights[p] = 1.0 / n as f64;
        }
        let mut dedup = plain.clone();
        dedup.dedup();
        let ix = dedup.index.as_ref().expect("rows repeat");
        assert!(dedup.data.len() < plain.data.len());
        assert_eq!(ix.len(), n);
        for p in 0..n {
            assert_eq!(dedup.row(p), plain.row(p));
        }
        let (dp, dd) = (Distinct::new(&plain), Distinct::new(&dedup));
        assert_eq!(dp.first, dd.first);
        assert_eq!(dp.slot, dd.slot);
        assert_eq!((&dp.weight, &dp.count), (&dd.weight, &dd.count));
        for k in [1, 5, 12] {
            let mut rng = Random::new(k as i64);
            let init = init_sample(&plain, k, &mut rng);
            let a = lloyd(&plain, &dp, init.clone(), 100, 1.0, &|| true);
            let b = lloyd(&dedup, &dd, init.clone(), 100, 1.0, &|| false);
            assert_eq!(a.centres, b.centres);
            assert_eq!(a.iterations, b.iterations);
            assert_eq!(a.labels, b.labels);
            // Rows grouped by hashing a deduplicated set: distinct rows are found through its
            // index, not read in place.
            let h = Distinct::hashed(&dedup);
            let c = lloyd(&dedup, &h, init, 100, 1.0, &|| true);
            assert_eq!(a.centres, c.centres);
            assert_eq!(a.iterations, c.iterations);
            assert_eq!(a.labels, c.labels);
        }
        // Distinct rows only: nothing to deduplicate, no index.
        let mut distinct_rows = Dataset::zeros(3, 1);
        distinct_rows.data.copy_from_slice(&[1.0, 2.0, 3.0]);
        distinct_rows.dedup();
        assert!(distinct_rows.index.is_none());
    }
}
