//! Hamerly's bounds in single precision, and [`Near`]: the centres around a point's own, nearest first.

use super::blocked::{block_d2, dim, LANES};
use super::dist2;
use crate::dataset::Dataset;

/// Widening by 2^-22 relative exceeds the at most 2^-24 relative change of rounding to nearest
/// single precision.
pub(super) const F32_UP: f64 = 1.0 + 1.0 / 4_194_304.0;
pub(super) const F32_DOWN: f64 = 1.0 - 1.0 / 4_194_304.0;

/// Hamerly's bounds after a search: the nearest centre's distance (squared: `best`) rounded up,
/// the second-nearest's (`second`) rounded down, each widened by the distance error `err`.
#[inline(always)]
pub(super) fn bounds_from(best: f64, second: f64, err: f64) -> (f32, f32) {
    (
        f32_up(best.sqrt() + err),
        f32_down((second.sqrt() - err).max(0.0)),
    )
}

/// A single-precision value not below `v` (for `v >= 0`).
#[inline(always)]
pub(super) fn f32_up(v: f64) -> f32 {
    (v * F32_UP) as f32
}

/// A single-precision value not above `v` and not below 0: distances are never negative.
#[inline(always)]
pub(super) fn f32_down(v: f64) -> f32 {
    (v.max(0.0) * F32_DOWN) as f32
}

/// Largest k for which [`Near`] keeps, for every centre, a sorted copy of all centres (k² rows).
pub(super) const NEAR_MAX_K: usize = 64;

/// For each centre `a`, every centre sorted by its distance to `a` (ties by index) and copied in
/// blocks of [`LANES`] laid out like [`Blocked`]. A point whose own centre is `a` computes its
/// distances in that order and stops once the triangle inequality proves every remaining centre
/// farther than its two nearest: a point near a cluster border looks at the centres around its
/// own instead of all of them.
pub(crate) struct Near {
    pub(super) k: usize,
    pub(super) d: usize,
    pub(super) blocks: usize,
    /// `k * blocks * LANES` centre indices, `u32::MAX` for padding.
    pub(super) order: Vec<u32>,
    /// Computed distance from `a` to each centre of `order`; infinite for padding.
    pub(super) gap: Vec<f64>,
    /// `k * blocks` blocks of `d * LANES` coordinates; padding centres sit at infinity.
    pub(super) t: Vec<f64>,
    /// Centre-to-centre distances, `k * k`.
    pub(super) cc: Vec<f64>,
    pub(super) sorted: Vec<(f64, u32)>,
    /// Position of each centre in its own sorted list (0 unless centres coincide).
    pub(super) self_pos: Vec<u32>,
}

impl Near {
    pub(super) fn new(k: usize, d: usize) -> Near {
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
    pub(super) fn load(&mut self, centres: &Dataset, err: f64, half_gap: &mut [f64]) {
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
    pub(super) fn visit(&self, a: usize, y: &[f64], err: f64, margin: f64, keep: f64) -> Visit {
        self.visit_lanes::<0>(a, y, err, margin, keep)
    }

    /// Visits point `y` of cluster `a` whose bounds failed. The first block of `a`'s sorted
    /// centres holds `a` itself: its lane gives the exact distance to `a` (the same sums as
    /// [`dist2`]), which may prove `a` still nearest (`distance + err + margin < keep`);
    /// otherwise the search goes on from that block. `margin` exceeds the rounding error of
    /// three computed distances.
    #[inline(always)]
    pub(super) fn visit_lanes<const D: usize>(
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
    pub(super) fn nearest_from<const D: usize>(
        &self,
        a: usize,
        y: &[f64],
        margin: f64,
    ) -> (usize, f64, f64) {
        let (d2, ua) = self.own_block::<D>(a, y);
        self.search::<D>(a, y, ua, margin, d2)
    }

    /// Squared distances from `y` to the first block of `a`'s sorted centres, and the distance
    /// to `a`.
    #[inline(always)]
    pub(super) fn own_block<const D: usize>(&self, a: usize, y: &[f64]) -> ([f64; LANES], f64) {
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
    pub(super) fn search<const D: usize>(
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
pub(super) enum Visit {
    /// The computed distance to its own centre, which proves that centre still nearest.
    Kept(f64),
    /// Nearest centre (ties to the lowest index), its squared distance and the second-smallest
    /// squared distance: what [`nearest2`] returns.
    Searched(usize, f64, f64),
}
