//! Centres in blocks of [`LANES`] and the distance kernels over them (portable and AVX2).

#[cfg(target_arch = "x86_64")]
use super::centres::Outcome;
#[cfg(target_arch = "x86_64")]
use super::cpu;
#[cfg(target_arch = "x86_64")]
use super::near::{F32_DOWN, F32_UP};
#[cfg(target_arch = "x86_64")]
use super::pass::Pass;
use crate::dataset::Dataset;

/// Centres per block: a block's distances are computed side by side, each centre's sum still
/// running over the dimensions in order.
pub(super) const LANES: usize = 8;

/// Centres laid out in blocks of [`LANES`], dimension-major inside a block, so that distance
/// sums stay in registers and fill the vector lanes.
pub struct Blocked {
    pub(super) k: usize,
    pub(super) d: usize,
    pub(super) blocks: usize,
    pub(super) t: Vec<f64>,
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
pub(super) mod avx2 {
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
    pub(super) unsafe fn group<const B: usize>(t: *const f64, y: &[f64], out: *mut f64) {
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
pub(super) fn nearest_lanes(t: &[f64], y: &[f64], blocks: usize) -> (usize, f64, f64) {
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
pub(super) const fn dim<const D: usize>(d: usize) -> usize {
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
pub(super) fn block_d2<const D: usize>(block: &[f64], y: &[f64], out: &mut [f64; LANES]) {
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
