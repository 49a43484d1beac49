//! `bbv run --pick strata`: SimPoint's clusters split into strata of like CPI.
//!
//! Intervals of one cluster run the same code (that is what their BBVs say) but can spend very
//! different time on misses: interpreter start-up beside its exit, a dictionary before and after
//! it outgrows a cache. One point cannot stand for both. bbv's own model counts each interval's
//! L1 and L2 misses and mispredictions; a first-order CPI estimate from them ranks the members,
//! a cluster whose estimates spread widely is cut in two where the two halves are most alike
//! inside (recursively), and each stratum gets its own point and its share of the weight.

use bbv_profile::MetricsRow;

/// The first-order model: a base CPI plus each event's cycles. Round figures of a current
/// out-of-order core (an L1 miss served by L2, an L2 miss served further away, a pipeline
/// refill), not fitted to any program: they only rank intervals against each other.
const BASE_CPI: f64 = 0.5;
const L1D_MISS_CYCLES: f64 = 10.0;
const L2_MISS_CYCLES: f64 = 70.0;
const MISPREDICT_CYCLES: f64 = 16.0;

/// A stratum is cut while its estimates' coefficient of variation exceeds this.
pub const MAX_CV: f64 = 0.15;

/// The first-order CPI estimate of one interval from bbv's model's counts.
pub fn cpi_estimate(row: &MetricsRow) -> f64 {
    let insns = row.instructions();
    if insns == 0 {
        return BASE_CPI;
    }
    // METRIC_COLUMNS: l1d_misses, l2_misses, branch_mispredicts are the last three.
    let [.., l1d, l2, mispredicts] = row.0;
    let cycles = L1D_MISS_CYCLES * l1d as f64
        + L2_MISS_CYCLES * l2 as f64
        + MISPREDICT_CYCLES * mispredicts as f64;
    BASE_CPI + cycles / insns as f64
}

/// Weighted sums of a run of values, for the mean and spread of any prefix in O(1).
struct Sums {
    w: Vec<f64>,
    wx: Vec<f64>,
    wxx: Vec<f64>,
}

impl Sums {
    fn new(values: &[(f64, f64)]) -> Sums {
        let mut s = Sums {
            w: vec![0.0],
            wx: vec![0.0],
            wxx: vec![0.0],
        };
        for &(x, w) in values {
            s.w.push(s.w.last().unwrap_or(&0.0) + w);
            s.wx.push(s.wx.last().unwrap_or(&0.0) + w * x);
            s.wxx.push(s.wxx.last().unwrap_or(&0.0) + w * x * x);
        }
        s
    }

    /// Weighted sum of squared deviations from the mean over values a..b.
    fn sse(&self, a: usize, b: usize) -> f64 {
        let w = self.w[b] - self.w[a];
        if w <= 0.0 {
            return 0.0;
        }
        let wx = self.wx[b] - self.wx[a];
        (self.wxx[b] - self.wxx[a] - wx * wx / w).max(0.0)
    }

    fn mean(&self, a: usize, b: usize) -> f64 {
        let w = self.w[b] - self.w[a];
        if w > 0.0 {
            (self.wx[b] - self.wx[a]) / w
        } else {
            0.0
        }
    }
}

/// Cuts `members` (interval indices) into strata whose CPI estimates (`estimates`, weighted
/// by `weights`) each vary by at most [`MAX_CV`]: recursively, at the cut of the sorted
/// estimates that leaves the least squared deviation on both sides. Strata come out in
/// ascending estimate, each in ascending index.
pub fn strata(estimates: &[f64], weights: &[f64], members: &[usize]) -> Vec<Vec<usize>> {
    if members.is_empty() {
        return Vec::new();
    }
    let mut sorted = members.to_vec();
    sorted.sort_by(|&a, &b| estimates[a].total_cmp(&estimates[b]).then(a.cmp(&b)));
    let values: Vec<(f64, f64)> = sorted.iter().map(|&i| (estimates[i], weights[i])).collect();
    let sums = Sums::new(&values);
    let mut out = Vec::new();
    cut(&sums, 0, sorted.len(), &mut |a, b| {
        let mut s = sorted[a..b].to_vec();
        s.sort_unstable();
        out.push(s);
    });
    out
}

fn cut(sums: &Sums, a: usize, b: usize, emit: &mut dyn FnMut(usize, usize)) {
    let w = sums.w[b] - sums.w[a];
    let mean = sums.mean(a, b);
    let spread = if w > 0.0 {
        (sums.sse(a, b) / w).sqrt()
    } else {
        0.0
    };
    if b - a < 2 || mean <= 0.0 || spread / mean <= MAX_CV {
        emit(a, b);
        return;
    }
    let best = (a + 1..b)
        .min_by(|&x, &y| {
            (sums.sse(a, x) + sums.sse(x, b)).total_cmp(&(sums.sse(a, y) + sums.sse(y, b)))
        })
        .unwrap_or(a + 1);
    cut(sums, a, best, emit);
    cut(sums, best, b, emit);
}

/// The member whose estimate lies nearest the stratum's weighted mean (the lowest index on
/// ties): the stratum's point.
pub fn point(estimates: &[f64], weights: &[f64], stratum: &[usize]) -> Option<usize> {
    let w: f64 = stratum.iter().map(|&i| weights[i]).sum();
    let mean = if w > 0.0 {
        stratum
            .iter()
            .map(|&i| weights[i] * estimates[i])
            .sum::<f64>()
            / w
    } else {
        stratum.iter().map(|&i| estimates[i]).sum::<f64>() / stratum.len().max(1) as f64
    };
    stratum.iter().copied().min_by(|&a, &b| {
        (estimates[a] - mean)
            .abs()
            .total_cmp(&(estimates[b] - mean).abs())
            .then(a.cmp(&b))
    })
}

/// Cuts every cluster of a clustering into strata, in place: `labels` per interval, `points`
/// and `weights` per cluster (SimPoint's, -1 for an empty cluster). A cluster's first stratum
/// keeps its number; each further stratum is appended with the members relabelled. Each
/// stratum's weight is its share of its cluster's instructions (`insns`) times the cluster's.
pub fn cut_clusters(
    estimates: &[f64],
    insns: &[f64],
    labels: &mut [u32],
    points: &mut Vec<i64>,
    weights: &mut Vec<f64>,
) {
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); points.len()];
    for (i, &l) in labels.iter().enumerate() {
        if let Some(m) = members.get_mut(l as usize) {
            m.push(i);
        }
    }
    for (c, m) in members.iter().enumerate() {
        let parts = strata(estimates, insns, m);
        let total: f64 = m.iter().map(|&i| insns[i]).sum();
        let share = weights[c];
        for (j, part) in parts.iter().enumerate() {
            let point = point(estimates, insns, part).map_or(-1, |p| p as i64);
            let weight = share * stratum_share(part, insns, total, parts.len());
            if j == 0 {
                points[c] = point;
                weights[c] = weight;
                continue;
            }
            let id = points.len() as u32;
            points.push(point);
            weights.push(weight);
            for &i in part {
                labels[i] = id;
            }
        }
    }
}

/// A stratum's share of its cluster's instructions (an equal share when they have none).
fn stratum_share(part: &[usize], insns: &[f64], total: f64, parts: usize) -> f64 {
    if total > 0.0 {
        part.iter().map(|&i| insns[i]).sum::<f64>() / total
    } else {
        1.0 / parts as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(insns: u64, l1d: u64, l2: u64, mispredicts: u64) -> MetricsRow {
        MetricsRow([insns, 0, 0, 0, 0, l1d, l2, mispredicts])
    }

    #[test]
    fn the_estimate_charges_each_event() {
        assert_eq!(cpi_estimate(&row(1000, 0, 0, 0)), 0.5);
        assert!(
            (cpi_estimate(&row(1000, 10, 1, 2)) - (0.5 + (100.0 + 70.0 + 32.0) / 1000.0)).abs()
                < 1e-12
        );
        assert_eq!(cpi_estimate(&row(0, 5, 5, 5)), 0.5);
    }

    #[test]
    fn a_bimodal_cluster_is_cut_and_a_uniform_one_is_not() {
        // Python's start-up and exit beside its steady loop (CPI estimates of a real run).
        let est = [1.50, 0.98, 1.02, 0.97, 0.90, 0.83, 1.94, 1.69, 1.0, 1.05];
        let w = [1.0; 10];
        let s = strata(&est, &w, &[0, 1, 3, 4, 5, 6, 7]);
        assert_eq!(s, vec![vec![1, 3, 4, 5], vec![0, 6, 7]]);
        assert_eq!(point(&est, &w, &s[0]), Some(4));
        assert_eq!(point(&est, &w, &s[1]), Some(7));
        assert_eq!(
            strata(&est, &w, &[1, 2, 3, 8, 9]),
            vec![vec![1, 2, 3, 8, 9]]
        );
        assert_eq!(strata(&est, &w, &[4]), vec![vec![4]]);
        assert!(strata(&est, &w, &[]).is_empty());
    }

    #[test]
    fn clusters_are_cut_in_place() {
        let est = [1.50, 0.98, 1.02, 0.97, 0.90, 0.83, 1.94, 1.69, 1.0, 1.05];
        let insns = [1.0; 10];
        let mut labels = [0, 0, 1, 0, 0, 0, 0, 0, 1, 1];
        let (mut points, mut weights) = (vec![0, 2], vec![0.7, 0.3]);
        cut_clusters(&est, &insns, &mut labels, &mut points, &mut weights);
        assert_eq!(labels, [2, 0, 1, 0, 0, 0, 2, 2, 1, 1]);
        assert_eq!(points, [4, 2, 7]);
        let w = [0.7 * 4.0 / 7.0, 0.3, 0.7 * 3.0 / 7.0];
        assert!(weights.iter().zip(w).all(|(a, b)| (a - b).abs() < 1e-12));
    }

    #[test]
    fn every_stratum_ends_within_the_spread() {
        let est: Vec<f64> = (0..200).map(|i| 0.6 + (i % 37) as f64 * 0.07).collect();
        let w: Vec<f64> = (0..200).map(|i| 1.0 + (i % 3) as f64).collect();
        let members: Vec<usize> = (0..200).collect();
        let s = strata(&est, &w, &members);
        assert_eq!(s.iter().map(Vec::len).sum::<usize>(), 200);
        for st in &s {
            let tw: f64 = st.iter().map(|&i| w[i]).sum();
            let mean = st.iter().map(|&i| w[i] * est[i]).sum::<f64>() / tw;
            let var = st
                .iter()
                .map(|&i| w[i] * (est[i] - mean).powi(2))
                .sum::<f64>()
                / tw;
            assert!(st.len() == 1 || var.sqrt() / mean <= MAX_CV, "{st:?}");
        }
    }
}
