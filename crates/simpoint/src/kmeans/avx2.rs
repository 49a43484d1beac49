//! Explicit AVX2 (never FMA: each product and sum is rounded as SimPoint's scalar code rounds
//! it). Up to four blocks (eight registers of four lanes) are summed side by side so that the
//! additions of different centres overlap; each centre's sum still runs over the dimensions in
//! order.

use std::arch::x86_64::*;

use super::blocked::LANES;
use super::centres::Outcome;
use super::near::{F32_DOWN, F32_UP};
use super::pass::Pass;

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
        let mask = _mm256_movemask_pd(_mm256_cmp_pd(_mm256_loadu_pd(p.add(4 * c)), bv, _CMP_EQ_OQ));
        if mask != 0 {
            index = 4 * c + mask.trailing_zeros() as usize;
            break;
        }
    }
    *p.add(index) = f64::INFINITY;
    let second = min_all(p);
    (index, best, second)
}

/// Hamerly's bound update and test for points `from..to` (what [`Pass::assign`] does
/// point by point), four points per step; writes the failing points to `todo` and returns
/// how many failed.
#[target_feature(enable = "avx2")]
pub unsafe fn check_bounds(
    pass: &Pass<'_>,
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
    let up = _mm256_set1_pd(F32_UP);
    let down = _mm256_set1_pd(F32_DOWN);
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

/// Builds of [`Pass::bounded`] for one target feature each (one body, with the
/// search inlined: a search's result then stays in registers).
macro_rules! bounded_build {
    ($name:ident, $feature:literal, $doc:literal) => {
        #[doc = $doc]
        #[target_feature(enable = $feature)]
        pub unsafe fn $name(
            pass: &Pass<'_>,
            start: usize,
            labels: &mut [u32],
            upper: &mut [f32],
            lower: &mut [f32],
        ) -> Outcome {
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
