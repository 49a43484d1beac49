//! Centres in blocks of [`LANES`] and the portable distance kernels over them (AVX2: `avx2`).

#[cfg(target_arch = "x86_64")]
use super::{avx2, cpu};
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
