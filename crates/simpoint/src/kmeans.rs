//! Weighted Lloyd k-means with SimPoint 3.2's exact arithmetic, accelerated by Hamerly's bounds.
//!
//! Pruning never changes a result: a point skips its distance computations only when the bounds
//! prove, with a margin larger than any rounding error of the computed distances, that its
//! centre is strictly the nearest. Everything that is summed (centre coordinates, weights,
//! distortion) is summed in point order, as SimPoint does.

use std::borrow::Cow;

use crate::dataset::{Dataset, RowTable};
use crate::rng::Random;

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
    /// For each row, the next row identical to it (`u32::MAX` after the last): with `first`,
    /// the rows of each distinct row, ascending.
    pub next_same: Vec<u32>,
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
            let next_same = chain(ix, first.len());
            return Distinct {
                first,
                slot: Cow::Borrowed(ix),
                next_same,
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
        let next_same = chain(&slot, first.len());
        Distinct {
            first,
            slot: Cow::Owned(slot),
            next_same,
        }
    }

    /// Rows identical to distinct row `i`, ascending.
    pub fn rows_of(&self, i: usize) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors(Some(self.first[i]), |&p| {
            Some(self.next_same[p as usize]).filter(|&q| q != u32::MAX)
        })
    }
}

/// Links each row to the next row of the same slot (`u32::MAX` after the last).
fn chain(slot: &[u32], distinct: usize) -> Vec<u32> {
    let mut next = vec![u32::MAX; slot.len()];
    let mut last = vec![u32::MAX; distinct];
    for (p, &s) in slot.iter().enumerate() {
        let prev = std::mem::replace(&mut last[s as usize], p as u32);
        if prev != u32::MAX {
            next[prev as usize] = p as u32;
        }
    }
    next
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

    /// [`super::sum_rows`] for `d <= 4 * C`: `C` chunks of four lanes cover the dimensions.
    #[target_feature(enable = "avx2")]
    pub unsafe fn sum_rows<const C: usize>(
        points: &crate::Dataset,
        list: &[u32],
        out: &mut [f64],
        weight: &mut f64,
        prefix: &mut Vec<f64>,
        kept: usize,
    ) {
        let d = points.cols;
        assert!(d > 4 * (C - 1) && d <= 4 * C && out.len() == d);
        let lane = |j: usize| if j < d { -1i64 } else { 0 };
        let last = C - 1;
        let tail = _mm256_setr_epi64x(
            lane(4 * last),
            lane(4 * last + 1),
            lane(4 * last + 2),
            lane(4 * last + 3),
        );
        let mut buf = [0.0f64; 16];
        let (from, mut w_acc) = super::resume(prefix, kept, d, &mut buf[..d]);
        let mut acc = [_mm256_setzero_pd(); C];
        for (c, a) in acc.iter_mut().enumerate() {
            *a = _mm256_loadu_pd(buf.as_ptr().add(4 * c));
        }
        for (j, &p) in list.iter().enumerate().skip(from) {
            let p = p as usize;
            if let Some(&ahead) = list.get(j + 32) {
                // Every cache line of the row (up to three for 16 dimensions).
                let q = points.row(ahead as usize).as_ptr() as *const i8;
                _mm_prefetch(q, _MM_HINT_T0);
                if d > 8 {
                    _mm_prefetch(q.add(64), _MM_HINT_T0);
                }
                _mm_prefetch(q.add(8 * d - 1), _MM_HINT_T0);
            }
            let w = points.weights[p];
            let wv = _mm256_set1_pd(w);
            let y = points.row(p).as_ptr();
            for (c, a) in acc.iter_mut().enumerate() {
                // Only the last chunk may end past the row (and past the data).
                let v = if c == last {
                    _mm256_maskload_pd(y.add(4 * c), tail)
                } else {
                    _mm256_loadu_pd(y.add(4 * c))
                };
                *a = _mm256_add_pd(*a, _mm256_mul_pd(v, wv));
            }
            w_acc += w;
            if (j + 1) % super::PREFIX_STEP == 0 {
                for (c, a) in acc.iter().enumerate() {
                    _mm256_storeu_pd(buf.as_mut_ptr().add(4 * c), *a);
                }
                prefix.extend_from_slice(&buf[..d]);
                prefix.push(w_acc);
            }
        }
        for (c, a) in acc.iter().enumerate() {
            _mm256_storeu_pd(buf.as_mut_ptr().add(4 * c), *a);
        }
        out.copy_from_slice(&buf[..d]);
        *weight = w_acc;
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
        assert!(to <= labels.len() && to <= upper.len() && to <= lower.len());
        assert!(todo.len() >= to - from);
        let k = pass.drift.len();
        assert!(pass.half_gap.len() == k && k <= i32::MAX as usize);
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

    /// Builds of [`super::Near::visit_lanes`] for one target feature each (one body, inlined).
    macro_rules! visit_build {
        ($name:ident, $feature:literal, $doc:literal) => {
            #[doc = $doc]
            #[target_feature(enable = $feature)]
            pub unsafe fn $name(
                near: &super::Near,
                a: usize,
                y: &[f64],
                err: f64,
                margin: f64,
                keep: f64,
            ) -> super::Visit {
                near.visit_lanes(a, y, err, margin, keep)
            }
        };
    }
    visit_build!(
        visit512,
        "avx512f",
        "The search compiled for AVX-512 (a block of eight centres fills one register)."
    );
    visit_build!(visit, "avx2", "The search compiled for AVX2.");

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

/// Widening by 2^-22 relative exceeds the at most 2^-24 relative change of rounding to nearest
/// single precision.
const F32_UP: f64 = 1.0 + 1.0 / 4_194_304.0;
const F32_DOWN: f64 = 1.0 - 1.0 / 4_194_304.0;

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
    avx2: bool,
    avx512: bool,
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
            avx2: cpu::avx2(),
            avx512: cpu::avx512(),
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

    /// Visits point `y` of cluster `a` whose bounds failed. The first block of `a`'s sorted
    /// centres holds `a` itself: its lane gives the exact distance to `a` (the same sums as
    /// [`dist2`]), which may prove `a` still nearest (`distance + err + margin < keep`);
    /// otherwise the search goes on from that block. `margin` exceeds the rounding error of
    /// three computed distances.
    fn visit(&self, a: usize, y: &[f64], err: f64, margin: f64, keep: f64) -> Visit {
        #[cfg(target_arch = "x86_64")]
        {
            if self.avx512 {
                // SAFETY: AVX-512F was detected when `self` was made.
                return unsafe { avx2::visit512(self, a, y, err, margin, keep) };
            }
            if self.avx2 {
                // SAFETY: AVX2 was detected when `self` was made.
                return unsafe { avx2::visit(self, a, y, err, margin, keep) };
            }
        }
        self.visit_lanes(a, y, err, margin, keep)
    }

    #[inline(always)]
    fn visit_lanes(&self, a: usize, y: &[f64], err: f64, margin: f64, keep: f64) -> Visit {
        let d = self.d;
        let size = d * LANES;
        let base = a * self.blocks;
        let y = &y[..d];
        let mut d2 = [0.0f64; LANES];
        block_d2(&self.t[base * size..(base + 1) * size], y, &mut d2);
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
        if ua + err + margin < keep {
            return Visit::Kept(ua);
        }
        let (mut best, mut best_d, mut second) = (usize::MAX, f64::INFINITY, f64::INFINITY);
        for b in 0..self.blocks {
            let at = base + b;
            if b > 0 {
                block_d2(&self.t[at * size..(at + 1) * size], y, &mut d2);
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
        Visit::Searched(best, best_d, second)
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

/// Row indices of each cluster's members, ascending (the order SimPoint sums them in), all
/// clusters in one array; a pass writes the next lists into a second array, so that memory
/// stays at two indices per row whatever the cluster sizes do.
struct Members {
    rows: Vec<u32>,
    start: Vec<u32>,
    next_rows: Vec<u32>,
    next_start: Vec<u32>,
    removed: Vec<Vec<u32>>,
    added: Vec<Vec<u32>>,
    /// Partial sums of each cluster's list as last summed (see [`sum_rows`]).
    prefix: Vec<Vec<f64>>,
    /// Leading members of each list unchanged since it was last summed.
    kept: Vec<u32>,
}

/// A distinct row that changed cluster in one pass.
#[derive(Clone, Copy)]
struct Move {
    row: u32,
    from: u32,
    to: u32,
}

impl Members {
    fn new(k: usize) -> Members {
        Members {
            rows: Vec::new(),
            start: vec![0; k + 1],
            next_rows: Vec::new(),
            next_start: vec![0; k + 1],
            removed: vec![Vec::new(); k],
            added: vec![Vec::new(); k],
            prefix: vec![Vec::new(); k],
            kept: vec![0; k],
        }
    }

    /// Members of cluster `c`, ascending.
    #[cfg(test)]
    fn list(&self, c: usize) -> &[u32] {
        &self.rows[self.start[c] as usize..self.start[c + 1] as usize]
    }

    /// Lists every row under the label of its distinct row (a counting sort).
    fn rebuild(&mut self, slot: &[u32], labels: &[u32]) {
        let k = self.start.len() - 1;
        let mut fill = vec![0u32; k + 1];
        for &s in slot {
            fill[labels[s as usize] as usize + 1] += 1;
        }
        for c in 0..k {
            fill[c + 1] += fill[c];
        }
        self.start.copy_from_slice(&fill);
        self.kept.fill(0);
        self.rows.clear();
        self.rows.resize(slot.len(), 0);
        for (p, &s) in slot.iter().enumerate() {
            let c = labels[s as usize] as usize;
            self.rows[fill[c] as usize] = p as u32;
            fill[c] += 1;
        }
    }

    /// Applies `moves`, marking in `changed` the clusters whose members changed. Moves are few
    /// and members many: merging the changes into the old lists beats sorting again.
    fn apply(&mut self, moves: &[Move], distinct: &Distinct, changed: &mut [bool]) {
        for m in moves {
            let (from, to) = (m.from as usize, m.to as usize);
            for p in distinct.rows_of(m.row as usize) {
                self.removed[from].push(p);
                self.added[to].push(p);
            }
            changed[from] = true;
            changed[to] = true;
        }
        let k = changed.len();
        let mut out = std::mem::take(&mut self.next_rows);
        out.clear();
        for c in 0..k {
            self.next_start[c] = out.len() as u32;
            let old = &self.rows[self.start[c] as usize..self.start[c + 1] as usize];
            if !changed[c] {
                out.extend_from_slice(old);
                continue;
            }
            let (rem, add) = (&mut self.removed[c], &mut self.added[c]);
            rem.sort_unstable();
            add.sort_unstable();
            self.kept[c] = merge_changes(old, rem, add, &mut out) as u32;
            rem.clear();
            add.clear();
        }
        self.next_start[k] = out.len() as u32;
        self.next_rows = std::mem::replace(&mut self.rows, out);
        std::mem::swap(&mut self.start, &mut self.next_start);
    }
}

/// Appends to `out` the ascending list `old` without the rows of `rem` (a subset of `old`) and
/// with those of `add`, both ascending: the runs between changes are found by galloping and
/// copied whole. Returns how many leading members of `old` the new list shares.
fn merge_changes(old: &[u32], rem: &[u32], add: &[u32], out: &mut Vec<u32>) -> usize {
    let (mut from, mut r, mut q) = (0, 0, 0);
    let mut first = usize::MAX;
    loop {
        let removal = match (rem.get(r), add.get(q)) {
            (Some(&x), Some(&y)) => x < y,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => break,
        };
        let key = if removal { rem[r] } else { add[q] };
        let at = from + gallop(&old[from..], key);
        first = first.min(at);
        out.extend_from_slice(&old[from..at]);
        if removal {
            debug_assert_eq!(old.get(at), Some(&key));
            from = at + 1;
            r += 1;
        } else {
            out.push(key);
            from = at;
            q += 1;
        }
    }
    out.extend_from_slice(&old[from..]);
    first.min(old.len())
}

/// Number of leading elements of the ascending `list` below `key`, found by doubling steps
/// from the front and then a binary search: cheap when the answer is small.
fn gallop(list: &[u32], key: u32) -> usize {
    let mut hi = 1;
    while hi < list.len() && list[hi - 1] < key {
        hi *= 2;
    }
    let lo = hi / 2;
    let hi = hi.min(list.len());
    lo + list[lo..hi].partition_point(|&x| x < key)
}

/// Members between two saved partial sums of a cluster.
const PREFIX_STEP: usize = 64;

/// Sums `y * w` over the rows in `list` into `out` and `w` into `weight`, from zero and in list
/// order: the sums SimPoint computes, with the same roundings. `prefix` holds the partial sums
/// (`d` sums and the weight) after every [`PREFIX_STEP`] members of the list last summed, whose
/// first `kept` members `list` shares: the sum resumes from the last of those it can use, and
/// `prefix` is brought up to date for `list`.
fn sum_rows(
    points: &Dataset,
    list: &[u32],
    out: &mut [f64],
    weight: &mut f64,
    prefix: &mut Vec<f64>,
    kept: usize,
) {
    #[cfg(target_arch = "x86_64")]
    {
        let d = points.cols;
        if (1..=16).contains(&d) && cpu::avx2() {
            // SAFETY: AVX2 is present (checked just above); each arm's chunks cover `d`.
            unsafe {
                match d.div_ceil(4) {
                    1 => avx2::sum_rows::<1>(points, list, out, weight, prefix, kept),
                    2 => avx2::sum_rows::<2>(points, list, out, weight, prefix, kept),
                    3 => avx2::sum_rows::<3>(points, list, out, weight, prefix, kept),
                    _ => avx2::sum_rows::<4>(points, list, out, weight, prefix, kept),
                }
            }
            return;
        }
    }
    sum_rows_portable(points, list, out, weight, prefix, kept);
}

/// Drops the partial sums of `prefix` that `kept` shared members do not cover, loads the last
/// remaining one into `sums` (zeros when none) and returns how many members it covers and its
/// weight sum.
fn resume(prefix: &mut Vec<f64>, kept: usize, d: usize, sums: &mut [f64]) -> (usize, f64) {
    let usable = (kept / PREFIX_STEP).min(prefix.len() / (d + 1));
    prefix.truncate(usable * (d + 1));
    match prefix.len().checked_sub(d + 1) {
        Some(at) => {
            sums.copy_from_slice(&prefix[at..at + d]);
            (usable * PREFIX_STEP, prefix[at + d])
        }
        None => {
            sums.iter_mut().for_each(|v| *v = 0.0);
            (0, 0.0)
        }
    }
}

fn sum_rows_portable(
    points: &Dataset,
    list: &[u32],
    out: &mut [f64],
    weight: &mut f64,
    prefix: &mut Vec<f64>,
    kept: usize,
) {
    let d = points.cols;
    let (from, mut w_acc) = resume(prefix, kept, d, out);
    for (j, &p) in list.iter().enumerate().skip(from) {
        let w = points.weights[p as usize];
        for (acc, &v) in out.iter_mut().zip(points.row(p as usize)) {
            *acc += v * w;
        }
        w_acc += w;
        if (j + 1) % PREFIX_STEP == 0 {
            prefix.extend_from_slice(out);
            prefix.push(w_acc);
        }
    }
    *weight = w_acc;
}

/// One changed cluster to sum: members, centre row, weight, partial sums, shared members.
type SumJob<'a> = (
    &'a [u32],
    &'a mut [f64],
    &'a mut f64,
    &'a mut Vec<f64>,
    usize,
);

/// Runs weighted Lloyd k-means from `init` (whose weights are the initial centre weights) for at
/// most `max_iter` passes, following SimPoint's stopping rule and empty-cluster handling.
///
/// Three exact shortcuts: Hamerly's bounds skip distance computations whose outcome is certain;
/// a point whose bounds fail looks at centres in order of their distance to its own and stops
/// when the rest are provably farther; and only clusters whose members changed are summed again
/// (a cluster with the same members would add the same numbers in the same order), each from its
/// member list rather than a scan of every row.
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
    let mut near = (k <= NEAR_MAX_K).then(|| Near::new(k, d));
    let mut members = Members::new(k);
    let (mut max_drift, mut second_drift, mut max_drift_c) = (0.0f64, 0.0f64, usize::MAX);
    let large = n >= 16_384 && rayon::current_num_threads() > 1;
    let avx2 = cpu::avx2();
    for iter in 0..max_iter {
        let parallel = large && split();
        if iter == 0 || near.is_none() {
            blocked.load(&cur);
        }
        if iter > 0 {
            match &mut near {
                Some(near) => near.load(&cur, err, &mut half_gap),
                None => centre_half_gaps(&cur, err, &mut half_gap),
            }
        }
        let pass = Pass {
            points,
            first: &distinct.first,
            cur: &cur,
            blocked: &blocked,
            near: near.as_ref(),
            direct: matches!((&distinct.slot, &points.index),
                (Cow::Borrowed(s), Some(ix)) if std::ptr::eq(*s, ix.as_slice())),
            half_gap: &half_gap,
            drift: &drift,
            max_drift,
            second_drift,
            max_drift_c,
            err,
            margin,
            initial: iter == 0,
            avx2,
        };
        let moves = if parallel {
            let mid = n / 2;
            let (la, lb) = labels.split_at_mut(mid);
            let (ua, ub) = upper.split_at_mut(mid);
            let (wa, wb) = lower.split_at_mut(mid);
            let (mut ma, mb) = rayon::join(
                || pass.assign(0, la, ua, wa),
                || pass.assign(mid, lb, ub, wb),
            );
            ma.extend_from_slice(&mb);
            ma
        } else {
            pass.assign(0, &mut labels, &mut upper, &mut lower)
        };
        if iter == 0 {
            members.rebuild(&distinct.slot, &labels);
            changed.fill(true);
        } else {
            changed.fill(false);
            members.apply(&moves, distinct, &mut changed);
        }
        // Clusters with unchanged members keep the centre and weight computed last pass.
        let mut jobs = Vec::new();
        let Members {
            rows,
            start,
            prefix,
            kept,
            ..
        } = &mut members;
        for (c, ((row, w), prefix)) in next
            .data
            .chunks_mut(d.max(1))
            .zip(next.weights.iter_mut())
            .zip(prefix.iter_mut())
            .enumerate()
        {
            if changed[c] {
                let list = &rows[start[c] as usize..start[c + 1] as usize];
                jobs.push((list, row, w, prefix, kept[c] as usize));
            } else {
                row.copy_from_slice(cur.row(c));
                *w = cur.weights[c];
            }
        }
        let sum = |(list, row, w, prefix, kept): SumJob<'_>| {
            sum_rows(points, list, row, w, prefix, kept);
            if *w > 0.0 {
                row.iter_mut().for_each(|v| *v /= *w);
            }
        };
        if parallel {
            use rayon::prelude::*;
            jobs.into_par_iter().for_each(sum);
        } else {
            jobs.into_iter().for_each(sum);
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

/// What one assignment pass reads.
struct Pass<'a> {
    points: &'a Dataset,
    first: &'a [u32],
    cur: &'a Dataset,
    blocked: &'a Blocked,
    near: Option<&'a Near>,
    direct: bool,
    half_gap: &'a [f64],
    drift: &'a [f64],
    max_drift: f64,
    second_drift: f64,
    max_drift_c: usize,
    err: f64,
    margin: f64,
    initial: bool,
    avx2: bool,
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
            if self.avx2 {
                // SAFETY: AVX2 was detected by the caller; indices are checked inside.
                return unsafe { avx2::check_bounds(self, from, to, labels, upper, lower, todo) };
            }
        }
        self.check_bounds_scalar(from, to, labels, upper, lower, todo)
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
    /// bounds; returns the points that changed cluster (none on the first pass, which labels
    /// every point from scratch).
    fn assign(
        &self,
        start: usize,
        labels: &mut [u32],
        upper: &mut [f32],
        lower: &mut [f32],
    ) -> Vec<Move> {
        let (err, margin) = (self.err, self.margin);
        let d = self.points.cols;
        // A deduplicated set stores distinct row i as row i.
        let row = |i: usize| {
            if self.direct {
                &self.points.data[(start + i) * d..(start + i + 1) * d]
            } else {
                self.points.row(self.first[start + i] as usize)
            }
        };
        let mut moves = Vec::new();
        if self.initial {
            for (i, label) in labels.iter_mut().enumerate() {
                let (c, best, second) = self.blocked.nearest(row(i));
                *label = c as u32;
                upper[i] = f32_up(best.sqrt() + err);
                lower[i] = f32_down((second.sqrt() - err).max(0.0));
            }
            return moves;
        }
        // In blocks: first the bound checks, which touch no coordinates (branch-free: which
        // points fail is unpredictable); then, with the rows prefetched a few points ahead, the
        // points whose bounds failed.
        const BLOCK: usize = 4096;
        const AHEAD: usize = 8;
        let mut todo = [0u32; BLOCK];
        for base in (0..labels.len()).step_by(BLOCK) {
            let end = (base + BLOCK).min(labels.len());
            let failed = self.check_bounds(base, end, labels, upper, lower, &mut todo);
            let todo = &todo[..failed];
            for (j, &i) in todo.iter().enumerate() {
                if let Some(&ahead) = todo.get(j + AHEAD) {
                    prefetch_row(row(ahead as usize));
                }
                let i = i as usize;
                let a = labels[i] as usize;
                let m = self.half_gap[a].max(f64::from(lower[i]));
                let y = row(i);
                let (c, best, second) = match self.near {
                    Some(near) => match near.visit(a, y, err, margin, m) {
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
                upper[i] = f32_up(best.sqrt() + err);
                lower[i] = f32_down((second.sqrt() - err).max(0.0));
                if c != a {
                    labels[i] = c as u32;
                    moves.push(Move {
                        row: (start + i) as u32,
                        from: a as u32,
                        to: c as u32,
                    });
                }
            }
        }
        moves
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
                    let fast = lloyd(
                        &data,
                        &Distinct::new(&data),
                        init.clone(),
                        iters,
                        1.3,
                        &|| true,
                    );
                    let (slow, it) = naive(&data, init, iters);
                    assert_eq!(fast.centres, slow, "seed {seed} k {k} iters {iters}");
                    assert_eq!(fast.iterations, it);
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
                    assert_eq!(near.visit_lanes(a, &y, err, m, ninf), want);
                    let keep = f64::INFINITY;
                    assert_eq!(near.visit(a, &y, err, m, keep), Visit::Kept(ua));
                    assert_eq!(near.visit_lanes(a, &y, err, m, keep), Visit::Kept(ua));
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
    fn vector_bound_checks_equal_scalar_ones() {
        let mut r = Random::new(77);
        let (k, n) = (13, 1001);
        let centres = random_set(&mut r, k, 3);
        let blocked = Blocked::new(k, 3);
        let points = random_set(&mut r, 1, 3);
        let drift: Vec<f64> = (0..k).map(|_| f64::from(r.rand_float()) * 0.1).collect();
        let half_gap: Vec<f64> = (0..k).map(|_| f64::from(r.rand_float())).collect();
        for max_drift_c in [usize::MAX, 0, 5] {
            let pass = Pass {
                points: &points,
                first: &[],
                cur: &centres,
                blocked: &blocked,
                near: None,
                direct: false,
                half_gap: &half_gap,
                drift: &drift,
                max_drift: 0.1,
                second_drift: 0.05,
                max_drift_c,
                err: 1e-9,
                margin: 4e-9,
                initial: false,
                avx2: cpu::avx2(),
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
    fn member_lists_follow_moves() {
        let mut r = Random::new(8);
        let n = 3000;
        // Rows repeat so that a move carries several rows.
        let mut points = Dataset::zeros(n, 2);
        for p in 0..n {
            let v = f64::from(r.rand_int() as i32 % 500);
            points.row_mut(p).copy_from_slice(&[v, -v]);
        }
        let distinct = Distinct::new(&points);
        let m = distinct.first.len();
        let k = 7;
        let mut labels: Vec<u32> = (0..m).map(|_| (r.rand_int() % k) as u32).collect();
        let mut members = Members::new(k as usize);
        members.rebuild(&distinct.slot, &labels);
        for round in 0..20 {
            let mut moves = Vec::new();
            for i in 0..m {
                if r.rand_int() % (1 + round) == 0 {
                    let to = (r.rand_int() % k) as u32;
                    if to != labels[i] {
                        moves.push(Move {
                            row: i as u32,
                            from: labels[i],
                            to,
                        });
                        labels[i] = to;
                    }
                }
            }
            let mut changed = vec![false; k as usize];
            members.apply(&moves, &distinct, &mut changed);
            let mut fresh = Members::new(k as usize);
            fresh.rebuild(&distinct.slot, &labels);
            for c in 0..k as usize {
                assert_eq!(members.list(c), fresh.list(c), "round {round} cluster {c}");
                let moved = moves
                    .iter()
                    .any(|mv| mv.from as usize == c || mv.to as usize == c);
                assert_eq!(changed[c], moved);
            }
        }
    }

    #[test]
    fn vector_sums_equal_portable_sums() {
        let mut r = Random::new(5);
        for d in [1, 3, 4, 5, 8, 15, 16] {
            let points = random_set(&mut r, 997, d);
            let list: Vec<u32> = (0..997).filter(|p| p % 3 != 1).collect();
            let (mut a, mut b) = (vec![0.0; d], vec![0.0; d]);
            let (mut wa, mut wb) = (0.0, 0.0);
            let (mut pa, mut pb) = (Vec::new(), Vec::new());
            sum_rows(&points, &list, &mut a, &mut wa, &mut pa, 0);
            sum_rows_portable(&points, &list, &mut b, &mut wb, &mut pb, 0);
            assert_eq!((&a, wa, &pa), (&b, wb, &pb), "d {d}");
            assert_eq!(pa.len(), list.len() / PREFIX_STEP * (d + 1));
            // Resuming from the partial sums of a list sharing a prefix gives the same sums as
            // summing from scratch.
            let mut other = list.clone();
            other.remove(300);
            other.push(996);
            let (mut fresh, mut wf, mut pf) = (vec![0.0; d], 0.0, Vec::new());
            sum_rows_portable(&points, &other, &mut fresh, &mut wf, &mut pf, 0);
            for kept in [0, 63, 64, 200, 300] {
                let (mut p1, mut p2) = (pa.clone(), pa.clone());
                sum_rows(&points, &other, &mut a, &mut wa, &mut p1, kept);
                sum_rows_portable(&points, &other, &mut b, &mut wb, &mut p2, kept);
                assert_eq!((&a, wa, &p1), (&fresh, wf, &pf), "d {d} kept {kept}");
                assert_eq!((&b, wb, &p2), (&fresh, wf, &pf), "d {d} kept {kept}");
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
        assert_eq!(dp.next_same, dd.next_same);
        for k in [1, 5, 12] {
            let mut rng = Random::new(k as i64);
            let init = init_sample(&plain, k, &mut rng);
            let a = lloyd(&plain, &dp, init.clone(), 100, 1.0, &|| true);
            let b = lloyd(&dedup, &dd, init, 100, 1.0, &|| false);
            assert_eq!(a.centres, b.centres);
            assert_eq!(a.iterations, b.iterations);
            assert_eq!(a.labels, b.labels);
        }
        // Distinct rows only: nothing to deduplicate, no index.
        let mut distinct_rows = Dataset::zeros(3, 1);
        distinct_rows.data.copy_from_slice(&[1.0, 2.0, 3.0]);
        distinct_rows.dedup();
        assert!(distinct_rows.index.is_none());
    }
}
