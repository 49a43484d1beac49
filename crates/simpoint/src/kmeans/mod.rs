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

use crate::dataset::Dataset;
use crate::rng::Random;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod blocked;
mod centres;
mod distinct;
mod near;
mod pass;
#[cfg(test)]
mod structure_tests;
#[cfg(test)]
mod tests;

pub(crate) use blocked::Blocked;
use centres::{Exact, Move, Running};
pub use distinct::Distinct;
use near::{bounds_from, Near, NEAR_MAX_K};
use pass::{centre_half_gaps, prefetch_row, Pass, AHEAD};

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
