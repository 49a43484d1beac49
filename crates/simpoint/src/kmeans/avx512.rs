//! The AVX-512 builds: Hamerly's bound checks and SimPoint's own sums (the same arithmetic as
//! the scalar code, more values a step), and the bounded pass's search in single precision.
//!
//! The search takes sixteen points at a time: the points whose bounds failed (on a trial's
//! first pass, every point) are gathered into registers, one register per dimension with a
//! point in each lane, and every centre's distance to all sixteen is computed side by side.
//! Nearest and second-nearest are then kept lane by lane, with no horizontal reduction and no
//! branch, so the work of consecutive points overlaps instead of waiting on one point's chain
//! of additions.
//!
//! Single-precision distances are not SimPoint's, so they only ever decide with a margin: each
//! carries a proven error bound ([`Narrow::new`]), and a nearest centre is taken from them only
//! when its interval lies strictly below every other centre's, widened by the running centres'
//! distance from SimPoint's and by the rounding of SimPoint's own distances. Anything closer
//! falls back to the double-precision search, which keeps SimPoint's sums.

use std::arch::x86_64::*;

use super::blocked::dim;
use super::centres::{Exact, Move, Outcome};
use super::near::{bounds_from, F32_DOWN, F32_UP};
use super::pass::{prefetch_row, Pass, BLOCK};
use crate::dataset::Dataset;

/// Points per register.
const LANES: usize = 16;

/// Most dimensions: one register per dimension.
const MAX_DIM: usize = 16;

/// Largest coordinate magnitude served: squared distances then stay far below `f32::MAX`.
const MAX_ABS: f64 = (1u64 << 50) as f64;

/// The current centres in single precision (row by row), and the error bound of a distance
/// computed from them.
pub(super) struct Narrow {
    k: usize,
    d: usize,
    t: Vec<f32>,
    /// A computed distance `x` is within `x * rel + abs` of the exact distance between the
    /// double-precision point and centre.
    rel: f64,
    abs: f64,
}

impl Narrow {
    /// The search for `k` centres over `points`, whose coordinates (and the centres') are at
    /// most `max_abs` in magnitude, when AVX-512 is present and the sizes are served.
    pub(super) fn new(k: usize, points: &Dataset, max_abs: f64) -> Option<Narrow> {
        let d = points.cols;
        let served = k >= 1
            && (1..=MAX_DIM).contains(&d)
            && max_abs <= MAX_ABS
            // Rows are gathered with 32-bit offsets.
            && points.data.len() < i32::MAX as usize;
        if !served || !super::cpu::avx512() {
            return None;
        }
        let u = f64::from(f32::EPSILON) / 2.0;
        // Rounding to single precision moves each coordinate of the point and of the centre by
        // at most u |x| (or half the smallest subnormal), so the distance between the rounded
        // pair is within sqrt(d) (2 u max + 2^-149) of the exact one. Its computed square
        // (difference, square, d additions in any order: d + 2 roundings) is within gamma of
        // it, plus each product's underflow; a square root in double precision rounds once more.
        let tiny = 2f64.powi(-149);
        let n = (d + 3) as f64;
        let gamma = n * u / (1.0 - n * u);
        let rounding = (d as f64).sqrt() * (2.0 * u * max_abs * 1.01 + tiny);
        let underflow = (d as f64 * tiny).sqrt();
        Some(Narrow {
            k,
            d,
            t: vec![0.0; k * d],
            rel: 1.01 * gamma + 4.0 * f64::EPSILON,
            abs: 1.01 * (rounding + underflow),
        })
    }

    /// Copies `centres` in, rounded to nearest.
    pub(super) fn load(&mut self, centres: &Dataset) {
        for (o, &v) in self.t.iter_mut().zip(&centres.data[..self.k * self.d]) {
            *o = v as f32;
        }
    }
}

/// The rows of up to [`LANES`] points (`rows`, offsets of their first coordinate in `data`),
/// rounded to single precision: one register per dimension, a point per lane.
#[inline]
#[target_feature(enable = "avx512f")]
fn gather<const D: usize>(data: &[f64], rows: &[i32; LANES], d: usize) -> [__m512; MAX_DIM] {
    let d = dim::<D>(d);
    // SAFETY: `rows` holds sixteen offsets: eight at 0 and eight at 8.
    let (lo, hi) = unsafe {
        (
            _mm256_loadu_si256(rows.as_ptr() as *const __m256i),
            _mm256_loadu_si256(rows[8..].as_ptr() as *const __m256i),
        )
    };
    let mut y = [_mm512_setzero_ps(); MAX_DIM];
    for (dd, v) in y[..d].iter_mut().enumerate() {
        let step = _mm256_set1_epi32(dd as i32);
        // SAFETY: every offset plus `dd < d` indexes a coordinate of `data` (the caller's
        // rows are rows of `data`).
        let (a, b) = unsafe {
            (
                _mm512_i32gather_pd::<8>(_mm256_add_epi32(lo, step), data.as_ptr()),
                _mm512_i32gather_pd::<8>(_mm256_add_epi32(hi, step), data.as_ptr()),
            )
        };
        let a = _mm512_castpd256_pd512(_mm256_castps_pd(_mm512_cvtpd_ps(a)));
        let b = _mm256_castps_pd(_mm512_cvtpd_ps(b));
        *v = _mm512_castpd_ps(_mm512_insertf64x4::<1>(a, b));
    }
    y
}

/// For the points of `y` (lanes), the nearest centre of `t` (`k` rows of `d`; ties to the
/// lowest index), the smallest squared distance and the second-smallest (equal to the smallest
/// when two centres tie).
#[inline]
#[target_feature(enable = "avx512f")]
fn nearest_two<const D: usize>(
    t: &[f32],
    k: usize,
    d: usize,
    y: &[__m512; MAX_DIM],
) -> (__m512i, __m512, __m512) {
    let d = dim::<D>(d);
    let inf = _mm512_set1_ps(f32::INFINITY);
    let (mut best, mut second, mut index) = (inf, inf, _mm512_setzero_si512());
    for (c, row) in t[..k * d].chunks_exact(d).enumerate() {
        // Three partial sums shorten each centre's chain of dependent additions (the error
        // bound holds for any order).
        let mut acc = [_mm512_setzero_ps(); 3];
        for (dd, &cv) in row.iter().enumerate() {
            let diff = _mm512_sub_ps(y[dd], _mm512_set1_ps(cv));
            acc[dd % 3] = _mm512_fmadd_ps(diff, diff, acc[dd % 3]);
        }
        let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), acc[2]);
        let nearer = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(s, best);
        second = _mm512_min_ps(second, _mm512_max_ps(best, s));
        best = _mm512_min_ps(best, s);
        index = _mm512_mask_mov_epi32(index, nearer, _mm512_set1_epi32(c as i32));
    }
    (index, best, second)
}

/// Most dimensions [`exact_sums`] serves: two registers of eight.
pub(super) const SUM_DIM: usize = 16;

/// [`Exact::new`] with each row's products and sums eight coordinates at a time: the
/// same roundings in the same order (no fused multiply-add), so the same sums. A run of rows in
/// one cluster keeps that cluster's sums in registers.
#[target_feature(enable = "avx512f")]
pub(super) fn exact_sums(points: &Dataset, slot: &[u32], labels: &[u32], k: usize) -> Exact {
    let d = points.cols;
    assert!(d <= SUM_DIM);
    let mut sums = vec![0.0f64; k * d + SUM_DIM];
    let mut weights = vec![0.0f64; k];
    let mut rows = vec![0u64; k];
    let lo: __mmask8 = ((1u16 << d.min(8)) - 1) as u8;
    let hi: __mmask8 = ((1u16 << (d.max(8) - 8)) - 1) as u8;
    let (mut cur, mut a, mut b) = (usize::MAX, _mm512_setzero_pd(), _mm512_setzero_pd());
    let (mut cw, mut cn) = (0.0f64, 0u64);
    for (p, &s) in slot.iter().enumerate() {
        let c = labels[s as usize] as usize;
        assert!(c < k);
        let row = points.row(p);
        assert!(row.len() == d);
        // SAFETY: the masks cover the `d` values of `row` and of a cluster's sums (`sums` has
        // SUM_DIM spare values past the last cluster's).
        unsafe {
            if c != cur {
                if cur != usize::MAX {
                    let at = sums.as_mut_ptr().add(cur * d);
                    _mm512_mask_storeu_pd(at, lo, a);
                    _mm512_mask_storeu_pd(at.add(8), hi, b);
                    weights[cur] = cw;
                    rows[cur] = cn;
                }
                let at = sums.as_ptr().add(c * d);
                a = _mm512_maskz_loadu_pd(lo, at);
                b = _mm512_maskz_loadu_pd(hi, at.add(8));
                (cur, cw, cn) = (c, weights[c], rows[c]);
            }
            let w = points.weights[p];
            let wv = _mm512_set1_pd(w);
            let x = _mm512_maskz_loadu_pd(lo, row.as_ptr());
            let y = _mm512_maskz_loadu_pd(hi, row.as_ptr().add(8.min(d)));
            a = _mm512_add_pd(a, _mm512_mul_pd(x, wv));
            b = _mm512_add_pd(b, _mm512_mul_pd(y, wv));
            cw += w;
            cn += 1;
        }
    }
    if cur != usize::MAX {
        // SAFETY: as above.
        unsafe {
            let at = sums.as_mut_ptr().add(cur * d);
            _mm512_mask_storeu_pd(at, lo, a);
            _mm512_mask_storeu_pd(at.add(8), hi, b);
        }
        weights[cur] = cw;
        rows[cur] = cn;
    }
    sums.truncate(k * d);
    Exact {
        sums,
        weights,
        rows,
    }
}

/// Hamerly's bound update and test for points `from..to` (what [`Pass::check_bounds`] does
/// point by point), sixteen points per step; writes the failing points to `todo` and returns
/// how many failed.
#[target_feature(enable = "avx512f")]
pub(super) fn check_bounds(
    pass: &Pass<'_>,
    from: usize,
    to: usize,
    labels: &[u32],
    upper: &mut [f32],
    lower: &mut [f32],
    todo: &mut [u32],
) -> usize {
    pass.assert_check_ranges(from, to, labels, upper, lower, todo);
    let mdc = _mm512_set1_epi32(pass.max_drift_c.min(u32::MAX as usize) as u32 as i32);
    let (md, sd) = (
        _mm512_set1_pd(pass.max_drift),
        _mm512_set1_pd(pass.second_drift),
    );
    let margin = _mm512_set1_pd(pass.margin);
    let up = _mm512_set1_pd(F32_UP);
    let down = _mm512_set1_pd(F32_DOWN);
    let zero = _mm512_setzero_pd();
    let iota = _mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    let mut failed = 0;
    let mut i = from;
    while i + LANES <= to {
        // SAFETY: `i + 16 <= to`, within `labels`, `upper` and `lower` (asserted above); the
        // gathers read `drift` and `half_gap` at labels below k; `todo` has room for the
        // `to - from` indices, and the compressing store writes only the failing ones.
        unsafe {
            let lab = _mm512_loadu_si512(labels.as_ptr().add(i) as *const __m512i);
            let is_max = _mm512_cmpeq_epi32_mask(lab, mdc);
            let mut fail = 0u16;
            for half in 0..2 {
                let l8 = if half == 0 {
                    _mm512_castsi512_si256(lab)
                } else {
                    _mm512_extracti64x4_epi64::<1>(lab)
                };
                let at = i + 8 * half;
                let dr = _mm512_i32gather_pd::<8>(l8, pass.drift.as_ptr());
                let hg = _mm512_i32gather_pd::<8>(l8, pass.half_gap.as_ptr());
                let dec = _mm512_mask_blend_pd((is_max >> (8 * half)) as u8, md, sd);
                let u = _mm512_add_pd(_mm512_cvtps_pd(_mm256_loadu_ps(upper.as_ptr().add(at))), dr);
                let l = _mm512_sub_pd(
                    _mm512_cvtps_pd(_mm256_loadu_ps(lower.as_ptr().add(at))),
                    dec,
                );
                _mm256_storeu_ps(
                    lower.as_mut_ptr().add(at),
                    _mm512_cvtpd_ps(_mm512_mul_pd(_mm512_max_pd(l, zero), down)),
                );
                _mm256_storeu_ps(
                    upper.as_mut_ptr().add(at),
                    _mm512_cvtpd_ps(_mm512_mul_pd(u, up)),
                );
                let f = _mm512_cmp_pd_mask::<_CMP_GE_OQ>(
                    _mm512_add_pd(u, margin),
                    _mm512_max_pd(hg, l),
                );
                fail |= u16::from(f) << (8 * half);
            }
            let idx = _mm512_add_epi32(_mm512_set1_epi32(i as i32), iota);
            _mm512_mask_compressstoreu_epi32(todo.as_mut_ptr().add(failed) as *mut _, fail, idx);
            failed += fail.count_ones() as usize;
        }
        i += LANES;
    }
    failed + pass.check_bounds_scalar(i, to, labels, upper, lower, &mut todo[failed..])
}

/// Bounds from single-precision squared distances `x` (eight lanes): the distance rounded up
/// (`up`) or down, each widened by the computation's error bound.
#[inline]
#[target_feature(enable = "avx512f")]
fn widen(narrow: &Narrow, x: __m256, up: bool) -> __m512d {
    let root = _mm512_sqrt_pd(_mm512_cvtps_pd(x));
    let abs = _mm512_set1_pd(narrow.abs);
    // As products, an infinite distance (no second centre) stays infinite. The roundings of
    // these few operations are within the 4 epsilon of slack in `rel`.
    if up {
        _mm512_add_pd(_mm512_mul_pd(root, _mm512_set1_pd(1.0 + narrow.rel)), abs)
    } else {
        let shrunk = _mm512_mul_pd(root, _mm512_set1_pd(1.0 - narrow.rel));
        _mm512_max_pd(_mm512_sub_pd(shrunk, abs), _mm512_setzero_pd())
    }
}

/// [`Pass::bounded`] with the single-precision search, for (unless 0) `D` dimensions.
#[target_feature(enable = "avx512f")]
fn bounded<const D: usize>(
    pass: &Pass<'_>,
    narrow: &Narrow,
    start: usize,
    labels: &mut [u32],
    upper: &mut [f32],
    lower: &mut [f32],
) -> Outcome {
    let d = narrow.d;
    let err = pass.err;
    // Each computed distance may differ from SimPoint's by the running centre's distance from
    // SimPoint's (`spread`) and by the rounding of SimPoint's own sums (`err`).
    let apart = _mm512_set1_pd(2.0 * (pass.spread + err));
    let data = &pass.points.data;
    let mut out = Outcome::default();
    let mut todo = [0u32; BLOCK];
    let mut moves = [Move::default(); BLOCK];
    for base in (0..labels.len()).step_by(BLOCK) {
        let end = (base + BLOCK).min(labels.len());
        // The first pass searches every point.
        let failed = if pass.full {
            for (t, i) in todo.iter_mut().zip(base..end) {
                *t = i as u32;
            }
            end - base
        } else {
            pass.check_bounds(base, end, labels, upper, lower, &mut todo)
        };
        let todo = &todo[..failed];
        let mut moved = 0;
        for (g, group) in todo.chunks(LANES).enumerate() {
            if let Some(next) = todo.get((g + 1) * LANES..) {
                for &i in next.iter().take(LANES) {
                    prefetch_row(pass.row_d::<D>(start, i as usize));
                }
            }
            // Missing lanes repeat the first point; their results are not read.
            let mut rows = [0i32; LANES];
            for (lane, r) in rows.iter_mut().enumerate() {
                let i = group.get(lane).unwrap_or(&group[0]);
                *r = (pass.stored_row(start, *i as usize) * d) as i32;
            }
            let y = gather::<D>(data, &rows, d);
            let (index, first, second) = nearest_two::<D>(&narrow.t, narrow.k, d, &y);
            let mut lanes = [0u32; LANES];
            // SAFETY: `lanes` holds sixteen 32-bit values.
            unsafe { _mm512_storeu_si512(lanes.as_mut_ptr() as *mut __m512i, index) };
            let mut up = [0.0f32; LANES];
            let mut down = [0.0f32; LANES];
            let mut sure = 0u32;
            for half in 0..2 {
                let pick = |v: __m512| {
                    let v = _mm512_castps_pd(v);
                    _mm256_castpd_ps(if half == 0 {
                        _mm512_castpd512_pd256(v)
                    } else {
                        _mm512_extractf64x4_pd::<1>(v)
                    })
                };
                let u1 = widen(narrow, pick(first), true);
                let l2 = widen(narrow, pick(second), false);
                let ok = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(_mm512_add_pd(u1, apart), l2);
                sure |= u32::from(ok) << (8 * half);
                let u = _mm512_cvtpd_ps(_mm512_mul_pd(u1, _mm512_set1_pd(F32_UP)));
                let l = _mm512_cvtpd_ps(_mm512_mul_pd(l2, _mm512_set1_pd(F32_DOWN)));
                // SAFETY: each half's eight values fit at `8 * half` in the arrays of 16.
                unsafe {
                    _mm256_storeu_ps(up.as_mut_ptr().add(8 * half), u);
                    _mm256_storeu_ps(down.as_mut_ptr().add(8 * half), l);
                }
            }
            for (lane, &i) in group.iter().enumerate() {
                let i = i as usize;
                let from = labels[i];
                let (c, sure) = (lanes[lane], sure >> lane & 1 == 1);
                let to = if sure {
                    (upper[i], lower[i]) = (up[lane], down[lane]);
                    c
                } else {
                    // Too close to call in single precision: SimPoint's sums in double
                    // precision.
                    out.close += 1;
                    let (c, best, second) = pass.blocked.nearest(pass.row_d::<D>(start, i));
                    if !pass.certain(best, second) {
                        out.uncertain.push((start + i) as u32);
                        continue;
                    }
                    (upper[i], lower[i]) = bounds_from(best, second, err);
                    c as u32
                };
                labels[i] = to;
                moves[moved] = Move {
                    row: (start + i) as u32,
                    from,
                    to,
                };
                // The first pass labels from scratch: nothing moves.
                moved += usize::from(from != to && !pass.full);
            }
        }
        // The moves in point order, as the other searches record them.
        out.moves.extend_from_slice(&moves[..moved]);
    }
    out
}

/// [`Pass::assign`] with the single-precision search (AVX-512 was detected when `narrow` was
/// made).
pub(super) fn assign(
    pass: &Pass<'_>,
    narrow: &Narrow,
    start: usize,
    labels: &mut [u32],
    upper: &mut [f32],
    lower: &mut [f32],
) -> Outcome {
    assert!(narrow.d == pass.points.cols && pass.points.data.len() < i32::MAX as usize);
    // SAFETY: `Narrow::new` returned `narrow` only after detecting AVX-512F.
    unsafe {
        if narrow.d == crate::DEFAULT_DIM {
            bounded::<{ crate::DEFAULT_DIM }>(pass, narrow, start, labels, upper, lower)
        } else {
            bounded::<0>(pass, narrow, start, labels, upper, lower)
        }
    }
}
