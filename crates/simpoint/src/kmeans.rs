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

/// Labels every row of `data` with its nearest centre; returns labels and squared distances.
pub fn label_all(data: &Dataset, centres: &Dataset) -> (Vec<u32>, Vec<f64>) {
    let n = data.rows();
    let mut labels = Vec::with_capacity(n);
    let mut d2 = Vec::with_capacity(n);
    for i in 0..n {
        let (c, dd, _) = nearest2(data.row(i), centres);
        labels.push(c as u32);
        d2.push(dd);
    }
    (labels, d2)
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

/// Result of one Lloyd run.
pub struct LloydResult {
    /// Final centres (coordinates and weights), as SimPoint returns them.
    pub centres: Dataset,
    /// Iteration count as SimPoint logs it.
    pub iterations: usize,
    /// Labels of the clustered rows with respect to `centres`, when at least one pass ran.
    pub labels: Option<Vec<u32>>,
}

/// Bound on the absolute error of a computed Euclidean distance between points whose
/// coordinates are at most `max_abs` in magnitude, in `dims` dimensions.
pub fn distance_error(max_abs: f64, dims: usize) -> f64 {
    let span = 2.0 * max_abs.max(f64::MIN_POSITIVE);
    let d = dims as f64;
    (4.0 * (d + 4.0) * d * span * span * f64::EPSILON).sqrt() + 1e-300
}

/// Runs weighted Lloyd k-means from `init` (whose weights are the initial centre weights) for at
/// most `max_iter` passes, following SimPoint's stopping rule and empty-cluster handling.
pub fn lloyd(points: &Dataset, init: Dataset, max_iter: usize, err: f64) -> LloydResult {
    let n = points.rows();
    let d = points.cols;
    let k = init.rows();
    let margin = 4.0 * err;
    let mut cur = init;
    let mut next = Dataset::zeros(k, d);
    let mut labels = vec![0u32; n];
    let mut upper = vec![0.0f64; n];
    let mut lower = vec![0.0f64; n];
    let mut half_gap = vec![0.0f64; k];
    let mut drift = vec![0.0f64; k];
    for iter in 0..max_iter {
        if iter > 0 {
            centre_half_gaps(&cur, err, &mut half_gap);
        }
        next.data.iter_mut().for_each(|v| *v = 0.0);
        next.weights.iter_mut().for_each(|v| *v = 0.0);
        for p in 0..n {
            let y = points.row(p);
            let a = if iter == 0 {
                full_assign(y, &cur, err, &mut labels[p], &mut upper[p], &mut lower[p])
            } else {
                let a = labels[p] as usize;
                let m = half_gap[a].max(lower[p]);
                if upper[p] + margin < m {
                    a
                } else {
                    upper[p] = dist2(y, cur.row(a)).sqrt() + err;
                    if upper[p] + margin < m {
                        a
                    } else {
                        full_assign(y, &cur, err, &mut labels[p], &mut upper[p], &mut lower[p])
                    }
                }
            };
            let w = points.weights[p];
            for (acc, &v) in next.row_mut(a).iter_mut().zip(y) {
                *acc += v * w;
            }
            next.weights[a] += w;
        }
        for c in 0..k {
            let w = next.weights[c];
            if w > 0.0 {
                for v in next.row_mut(c) {
                    *v /= w;
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
        let mut max_drift = 0.0f64;
        for c in 0..k {
            drift[c] = dist2(cur.row(c), next.row(c)).sqrt() + err;
            max_drift = max_drift.max(drift[c]);
        }
        for p in 0..n {
            upper[p] += drift[labels[p] as usize];
            lower[p] -= max_drift;
        }
        std::mem::swap(&mut cur, &mut next);
    }
    LloydResult {
        centres: cur,
        iterations: max_iter,
        labels: None,
    }
}

#[inline]
fn full_assign(
    y: &[f64],
    centres: &Dataset,
    err: f64,
    label: &mut u32,
    upper: &mut f64,
    lower: &mut f64,
) -> usize {
    let (c, best, second) = nearest2(y, centres);
    *label = c as u32;
    *upper = best.sqrt() + err;
    *lower = (second.sqrt() - err).max(0.0);
    c
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
    if k == 1 {
        out[0] = f64::INFINITY;
    }
}

/// SimPoint's BIC of a clustering of `data` whose rows have `labels` and squared distances `d2`.
pub fn bic(data: &Dataset, centres: &Dataset, labels: &[u32], d2: &[f64]) -> f64 {
    // SimPoint's truncated constant, not f64::consts::PI: the BIC must match to the last bit.
    #[allow(clippy::approx_constant)]
    const PI: f64 = 3.14159265358979;
    let n = data.rows();
    let dim = data.cols as f64;
    let k = centres.rows() as f64;
    let mut dist = 0.0;
    let mut tw = 0.0;
    for i in 0..n {
        dist += data.weights[i] * d2[i];
        tw += data.weights[i];
    }
    let nf = n as f64;
    let dist = dist / (tw / nf);
    let sigma2 = dist / (dim * nf);
    let mut l = -dim * ((2.0 * PI * sigma2).ln() + 1.0) / 2.0 - tw.ln();
    for i in 0..n {
        let cw = centres.weights[labels[i] as usize];
        if cw > 0.0 {
            l += cw.ln() * data.weights[i] / tw;
        }
    }
    let l = l * nf;
    let params = (k - 1.0) + k * dim + 1.0;
    l - params / 2.0 * nf.ln()
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
    fn pruned_equals_naive_bitwise() {
        for seed in [5, 77, 1234] {
            let data = grid(2000, 5, seed);
            for k in [1, 3, 7, 12] {
                for iters in [1, 2, 5, 100] {
                    let mut rng = Random::new(seed + k as i64);
                    let mut init = init_sample(&data, k, &mut rng);
                    initial_weights(&data, &mut init);
                    let err = distance_error(1.3, 5);
                    let fast = lloyd(&data, init.clone(), iters, err);
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
        let r = lloyd(&data, init, 100, distance_error(2.0, 1));
        // Pass 1 puts every point in cluster 0 (tie) and moves the empty cluster 1 to the
        // origin, which then captures the point at 0.
        assert_eq!(r.labels.unwrap(), vec![1, 0, 0, 0]);
        assert_eq!(r.centres.row(0), &[4.0 / 3.0]);
        assert_eq!(r.centres.row(1), &[0.0]);
        assert_eq!(r.centres.weights, vec![0.75, 0.25]);
    }
}
