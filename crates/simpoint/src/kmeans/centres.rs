//! What a pass changes and the centres it is measured against: moves, SimPoint's exact sums and the running sums.

use super::distinct::Distinct;
#[cfg(target_arch = "x86_64")]
use super::{avx512, cpu};
use crate::dataset::Dataset;

/// A distinct row that changed cluster in a pass.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Move {
    pub(super) row: u32,
    pub(super) from: u32,
    pub(super) to: u32,
}

/// What one assignment pass found: the moves, and the points whose nearest centre the running
/// centres could not settle (see [`Running`]).
#[derive(Default)]
pub(super) struct Outcome {
    pub(super) moves: Vec<Move>,
    pub(super) uncertain: Vec<u32>,
    /// Searches left by the single-precision search to the double-precision one.
    pub(super) close: usize,
}

impl Outcome {
    /// Puts distinct row `row`, whose label is `label`, in cluster `c`, recording the move when
    /// it changes cluster.
    #[inline(always)]
    pub(super) fn place(&mut self, row: usize, label: &mut u32, c: usize) {
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
pub(super) struct Exact {
    /// Coordinate sums (`k * d`), weight and row count of each cluster, before division.
    pub(super) sums: Vec<f64>,
    pub(super) weights: Vec<f64>,
    pub(super) rows: Vec<u64>,
}

impl Exact {
    /// Sums `y * w` and `w` of every row into its cluster, in row order: SimPoint's additions.
    pub(super) fn new(points: &Dataset, distinct: &Distinct, labels: &[u32], k: usize) -> Exact {
        #[cfg(target_arch = "x86_64")]
        if points.cols <= avx512::SUM_DIM && cpu::avx512() {
            // SAFETY: AVX-512F is present (checked just above).
            return unsafe { avx512::exact_sums(points, &distinct.slot, labels, k) };
        }
        Exact::new_scalar(points, distinct, labels, k)
    }

    /// [`Exact::new`], one coordinate at a time.
    pub(super) fn new_scalar(
        points: &Dataset,
        distinct: &Distinct,
        labels: &[u32],
        k: usize,
    ) -> Exact {
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
    pub(super) fn centres(&self, d: usize) -> Dataset {
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
pub(super) struct Running {
    pub(super) d: usize,
    pub(super) sums: Vec<f64>,
    pub(super) weights: Vec<f64>,
    pub(super) rows: Vec<u64>,
    /// Per cluster, a bound on the rounding errors of the sums so far, in units of `u * max_abs`
    /// (for the coordinates) and `u` (for the weight), `u` being half the machine epsilon.
    pub(super) budget: Vec<f64>,
    /// Largest coordinate magnitude of any point, times the largest of 1 and the total weight:
    /// bounds every sum.
    pub(super) max_abs: f64,
    pub(super) scale: f64,
    /// Multiplies the bounds; tests raise it to make every decision uncertain.
    pub(super) inflate: f64,
}

impl Running {
    pub(super) fn new(
        k: usize,
        d: usize,
        max_abs: f64,
        total_weight: f64,
        inflate: f64,
    ) -> Running {
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
    pub(super) fn restart(&mut self, exact: &Exact, bound: &mut [f64]) -> Dataset {
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
    pub(super) fn apply(&mut self, y: &[f64], w: f64, count: u32, from: usize, to: usize) {
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
    pub(super) fn centre(&mut self, c: usize, out: &mut [f64]) -> Option<(f64, f64)> {
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
