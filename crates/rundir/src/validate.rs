//! How well the chosen points estimate the whole run (`bbv run --validate`): for every metric of
//! `metrics.csv`, the weighted estimate from the points against the full run's value, with the
//! error bands of stratified sampling, and the same for every k tried (`validation.json`).
//!
//! Definitions (rates per kilo-instruction; interval i has rate r_i = 1000 x value_i / insns_i):
//! * full = 1000 x column total / instructions total; estimate = sum over points of weight x
//!   the point's rate.
//! * std_error = sqrt(sum over clusters of weight^2 x the population variance of the rate over
//!   the cluster's intervals) (one sample per stratum); band95 = 1.96 x std_error.
//! * worst_case = sum over clusters of weight x the largest |rate_i - the point's rate| over the
//!   cluster's intervals: the error had every point been its cluster's least typical interval.
//! * max_cluster_cv: the largest coefficient of variation of the rate within a cluster of at
//!   least two intervals.
//! * random_sampling_std_error: the rate's standard deviation over all intervals / sqrt(k), what
//!   k intervals drawn at random would give.
//! * bbv_error: sum over clusters of weight x the mean L1 distance between the normalised BBVs
//!   of the cluster's intervals and its point's.
//! * bic_fraction: (BIC_k - min) / (max - min) over the k tried (1 when all are equal).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use bbv_profile::{MetricsRow, METRIC_COLUMNS};
use serde::{Deserialize, Serialize};

use crate::RundirError;

/// A metric counts as estimated well enough by `--target-error` when its relative error is
/// within the target, or its absolute error is below this many events per kilo-instruction
/// (rare events, such as L2 misses of a program that fits in L2, have huge relative errors
/// that mean nothing).
pub const ABS_ERROR_FLOOR: f64 = 0.01;

/// One metric's estimate and error.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct MetricError {
    /// Column of `metrics.csv`.
    pub name: String,
    /// Values are events per 1000 instructions.
    pub per_kilo_instruction: bool,
    /// The whole run's value.
    pub full: f64,
    /// The points' weighted estimate.
    pub estimate: f64,
    /// |estimate - full| / full (None when full is 0 and the estimate is not).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rel_error: Option<f64>,
    /// |estimate - full|.
    pub abs_error: f64,
    /// Standard error of the estimate, from the variation within clusters.
    pub std_error: f64,
    /// 1.96 x std_error.
    pub band95: f64,
    /// The error had every point been its cluster's least typical interval.
    pub worst_case: f64,
    /// Largest coefficient of variation of the rate within one cluster.
    pub max_cluster_cv: f64,
    /// Standard error of k intervals drawn at random.
    pub random_sampling_std_error: f64,
}

impl MetricError {
    /// Whether the error is within `target` (a fraction) by [`ABS_ERROR_FLOOR`]'s rule.
    pub fn meets(&self, target: f64) -> bool {
        self.abs_error <= ABS_ERROR_FLOOR || self.rel_error.is_some_and(|e| e <= target)
    }

    /// The relative error for ranking (infinite when undefined, 0 under the floor).
    pub fn rank(&self) -> f64 {
        if self.abs_error <= ABS_ERROR_FLOOR {
            0.0
        } else {
            self.rel_error.unwrap_or(f64::INFINITY)
        }
    }
}

/// One k tried.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct KRow {
    /// Clusters asked for.
    pub k: usize,
    /// Points chosen (non-empty clusters).
    pub points: usize,
    /// SimPoint's BIC score of the clustering.
    pub bic: f64,
    /// Its place between the lowest and the highest BIC tried.
    pub bic_fraction: f64,
    /// The largest relative error over the metrics (by the floor rule; None if undefined).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worst_rel_error: Option<f64>,
    /// BBV distance of the intervals to their points.
    pub bbv_error: f64,
    /// The metrics' errors at this k.
    pub metrics: Vec<MetricError>,
    /// The 95% CPI band its points are expected to get when simulated, in percent
    /// ([`crate::band::predicted`]; None for slices and files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_band_pct: Option<f64>,
}

/// How each cluster's point is picked (`bbv run --pick`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Pick {
    /// SimPoint 3.2's: the interval nearest the cluster's centre in BBV space.
    #[default]
    Centroid,
    /// The interval whose metrics lie nearest the cluster's mean ([`typical_points`]).
    Metrics,
    /// Clusters cut into strata of like first-order CPI ([`crate::strata`]), a point each.
    Strata,
}

impl Pick {
    /// Every way, in the order `--help` lists them.
    pub const ALL: [Pick; 3] = [Pick::Centroid, Pick::Metrics, Pick::Strata];

    /// The way named `name` (`--pick NAME`).
    pub fn from_name(name: &str) -> Option<Pick> {
        Pick::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The option's value (`--pick NAME`).
    pub fn name(self) -> &'static str {
        match self {
            Pick::Centroid => "centroid",
            Pick::Metrics => "metrics",
            Pick::Strata => "strata",
        }
    }

    /// What the summary and the report add after the rule that chose k ("" for SimPoint's).
    pub fn note(self) -> &'static str {
        match self {
            Pick::Metrics => "; each point the interval whose L2 misses and mispredictions are nearest its cluster's mean (--pick metrics)",
            Pick::Strata => "; clusters whose members' CPI estimates (bbv's model) spread by more than 15% cut into strata, each with its own point nearest its mean (--pick strata)",
            Pick::Centroid => "",
        }
    }
}

/// `validation.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Validation {
    /// The chosen k's metric errors.
    pub metrics: Vec<MetricError>,
    /// The chosen k's BBV error.
    pub bbv_error: f64,
    /// The chosen k's BIC fraction.
    pub bic_fraction: f64,
    /// How k was chosen.
    pub k_rule: String,
    /// The chosen k.
    pub k: usize,
    /// `--target-error` as a fraction, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_error: Option<f64>,
    /// Every k tried, ascending.
    pub by_k: Vec<KRow>,
    /// How each cluster's point was picked (older files: centroid).
    #[serde(default)]
    pub pick: Pick,
}

/// A clustering's points: each interval's cluster, and (interval, cluster, weight) per point,
/// weights summing to 1.
#[derive(Clone, Debug)]
pub struct Clusters {
    /// Cluster of each interval.
    pub labels: Vec<usize>,
    /// The points.
    pub points: Vec<(usize, usize, f64)>,
}

fn rate(value: u64, insns: u64) -> f64 {
    if insns == 0 {
        0.0
    } else {
        1000.0 * value as f64 / insns as f64
    }
}

/// Mean and population variance.
fn moments(v: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = v.clone().count().max(1) as f64;
    let mean = v.clone().sum::<f64>() / n;
    let var = v.map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var)
}

/// Every metric's error for one clustering (`rows` are the intervals clustered).
pub fn metric_errors(rows: &[MetricsRow], c: &Clusters) -> Result<Vec<MetricError>, RundirError> {
    if rows.len() != c.labels.len() {
        return Err(RundirError::Invalid(format!(
            "metrics.csv has {} intervals but the clustering has {}",
            rows.len(),
            c.labels.len()
        )));
    }
    if let Some(&(i, _, _)) = c.points.iter().find(|p| p.0 >= rows.len()) {
        return Err(RundirError::Invalid(format!(
            "point {i} is beyond the {} intervals of metrics.csv",
            rows.len()
        )));
    }
    let mut members: HashMap<usize, Vec<usize>> = HashMap::new();
    for (i, &l) in c.labels.iter().enumerate() {
        members.entry(l).or_default().push(i);
    }
    let insns_total: u64 = rows.iter().map(|r| r.instructions()).sum();
    let k = c.points.len().max(1) as f64;
    let mut out = Vec::new();
    for (col, name) in METRIC_COLUMNS.iter().enumerate().skip(1) {
        let r = |i: usize| rate(rows[i].0[col], rows[i].instructions());
        let total: u64 = rows.iter().map(|row| row.0[col]).sum();
        let full = rate(total, insns_total);
        let (mut estimate, mut var, mut worst, mut cv) = (0.0, 0.0, 0.0f64, 0.0f64);
        for &(p, cluster, w) in &c.points {
            let rp = r(p);
            estimate += w * rp;
            let m = members.get(&cluster).map(Vec::as_slice).unwrap_or(&[]);
            let (mean, v) = moments(m.iter().map(|&i| r(i)));
            var += w * w * v;
            worst += w * m.iter().map(|&i| (r(i) - rp).abs()).fold(0.0, f64::max);
            if m.len() >= 2 && mean > 0.0 {
                cv = cv.max(v.sqrt() / mean);
            }
        }
        let (_, all_var) = moments((0..rows.len()).map(r));
        let abs_error = (estimate - full).abs();
        let std_error = var.sqrt();
        out.push(MetricError {
            name: name.to_string(),
            per_kilo_instruction: true,
            full,
            estimate,
            rel_error: if full != 0.0 {
                Some(abs_error / full)
            } else if abs_error == 0.0 {
                Some(0.0)
            } else {
                None
            },
            abs_error,
            std_error,
            band95: 1.96 * std_error,
            worst_case: worst,
            max_cluster_cv: cv,
            random_sampling_std_error: all_var.sqrt() / k.sqrt(),
        });
    }
    Ok(out)
}

/// The metrics [`typical_points`] matches (columns of `metrics.csv`): the events that stall
/// an out-of-order core longest. Same-code intervals differ mostly in these (a dictionary
/// outgrowing a cache); L1 misses that hit L2 are largely hidden, and adding them, or the
/// throughput columns, made ChampSim's estimates worse on python3 and no better on xz and
/// sqlite3 (docs/champsim.md).
pub const PICK_METRICS: [&str; 2] = ["l2_misses", "branch_mispredicts"];

/// Per cluster, the member interval whose [`PICK_METRICS`] lie nearest the cluster's mean:
/// the one minimising the sum over those metrics of ((its rate - the cluster's mean rate) /
/// the whole run's rate)^2, the squared share of the run's value that picking it would miss
/// (so that a rare event weighs as much as a common one). `nearest[c]` is the current point
/// of cluster c (None for an empty cluster) and is kept on ties.
pub fn typical_points(
    rows: &[MetricsRow],
    labels: &[usize],
    nearest: &[Option<usize>],
) -> Result<Vec<Option<usize>>, RundirError> {
    if rows.len() != labels.len() {
        return Err(RundirError::Invalid(format!(
            "metrics.csv has {} intervals but the clustering has {}",
            rows.len(),
            labels.len()
        )));
    }
    let cols: Vec<usize> = PICK_METRICS
        .iter()
        .filter_map(|m| METRIC_COLUMNS.iter().position(|c| c == m))
        .collect();
    let insns_total: u64 = rows.iter().map(|r| r.instructions()).sum();
    let full: Vec<f64> = cols
        .iter()
        .map(|&col| rate(rows.iter().map(|r| r.0[col]).sum(), insns_total))
        .collect();
    let rates = |i: usize| {
        cols.iter()
            .map(move |&col| rate(rows[i].0[col], rows[i].instructions()))
    };
    let mut members: Vec<Vec<usize>> = vec![Vec::new(); nearest.len()];
    for (i, &l) in labels.iter().enumerate() {
        if let Some(m) = members.get_mut(l) {
            m.push(i);
        }
    }
    Ok(nearest
        .iter()
        .zip(&members)
        .map(|(&point, m)| {
            let point = point?;
            let mut mean = vec![0.0; cols.len()];
            for &i in m {
                mean.iter_mut().zip(rates(i)).for_each(|(a, r)| *a += r);
            }
            mean.iter_mut().for_each(|a| *a /= m.len().max(1) as f64);
            let score = |i: usize| -> f64 {
                rates(i)
                    .zip(&mean)
                    .zip(&full)
                    .filter(|(_, &f)| f > 0.0)
                    .map(|((r, a), f)| ((r - a) / f).powi(2))
                    .sum()
            };
            let mut best = (point, score(point));
            for &i in m {
                let s = score(i);
                if s < best.1 * (1.0 - 1e-12) {
                    best = (i, s);
                }
            }
            Some(best.0)
        })
        .collect())
}

/// The BBV error of each clustering of the vectors in `bb` (two passes over the file: the
/// points' vectors, then every interval's distance to its point).
pub fn bbv_errors(bb: &Path, clusterings: &[Clusters]) -> Result<Vec<f64>, RundirError> {
    // BTreeMaps: sums in a fixed order, so that validation.json is the same bytes each run.
    let normalised = |v: &[bbv_profile::Token]| -> BTreeMap<u32, f64> {
        let sum: f64 = v.iter().map(|t| t.value).sum();
        v.iter()
            .map(|t| (t.id, if sum > 0.0 { t.value / sum } else { 0.0 }))
            .collect()
    };
    let mut wanted: HashMap<usize, BTreeMap<u32, f64>> = HashMap::new();
    for c in clusterings {
        for &(p, _, _) in &c.points {
            wanted.insert(p, BTreeMap::new());
        }
    }
    let mut v = Vec::new();
    let mut r = bbv_profile::BbvReader::open(bb)?;
    let mut i = 0;
    while r.next_vector(&mut v)? {
        if let Some(slot) = wanted.get_mut(&i) {
            *slot = normalised(&v);
        }
        i += 1;
    }
    // Per clustering: cluster -> (point, weight, distance sum, members).
    let mut sums: Vec<BTreeMap<usize, (usize, f64, f64, u64)>> = clusterings
        .iter()
        .map(|c| {
            c.points
                .iter()
                .map(|&(p, cl, w)| (cl, (p, w, 0.0, 0)))
                .collect()
        })
        .collect();
    let mut r = bbv_profile::BbvReader::open(bb)?;
    let mut i = 0;
    while r.next_vector(&mut v)? {
        let x = normalised(&v);
        for (c, s) in clusterings.iter().zip(sums.iter_mut()) {
            let Some(e) = c.labels.get(i).and_then(|l| s.get_mut(l)) else {
                continue;
            };
            let point = &wanted[&e.0];
            let mut d: f64 = x
                .iter()
                .map(|(id, a)| (a - point.get(id).unwrap_or(&0.0)).abs())
                .sum();
            d += point
                .iter()
                .filter(|(id, _)| !x.contains_key(id))
                .map(|(_, b)| b)
                .sum::<f64>();
            e.2 += d;
            e.3 += 1;
        }
        i += 1;
    }
    Ok(sums
        .iter()
        .map(|s| {
            s.values()
                .map(|&(_, w, d, n)| if n > 0 { w * d / n as f64 } else { 0.0 })
                .sum()
        })
        .collect())
}

/// Reads `dir/validation.json`, if the run has one.
pub fn read(dir: &Path) -> Result<Option<Validation>, RundirError> {
    crate::read_optional_json(dir, crate::files::VALIDATION, "bbv run --validate")
}

/// The text table of the summary.
pub fn table(v: &Validation) -> String {
    use std::fmt::Write as _;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "estimate errors at k = {} ({}); per 1000 instructions:",
        v.k, v.k_rule
    );
    let _ = writeln!(
        t,
        "  {:<20} {:>12} {:>12} {:>9} {:>12} {:>12} {:>12}",
        "metric", "full run", "estimate", "error", "95% band", "worst case", "random k"
    );
    for m in &v.metrics {
        let rel = match m.rel_error {
            Some(e) => format!("{:+.2}%", 100.0 * e * (m.estimate - m.full).signum()),
            None => "n/a".into(),
        };
        let _ = writeln!(
            t,
            "  {:<20} {:>12.4} {:>12.4} {:>9} {:>12.4} {:>12.4} {:>12.4}",
            m.name,
            m.full,
            m.estimate,
            rel,
            m.band95,
            m.worst_case,
            1.96 * m.random_sampling_std_error
        );
    }
    let _ = writeln!(
        t,
        "  BBV distance to the points {:.4}; BIC at {:.0}% of its range over the k tried",
        v.bbv_error,
        100.0 * v.bic_fraction
    );
    let chosen = v.by_k.iter().find(|r| r.k == v.k);
    if let Some(b) = chosen.and_then(|r| r.predicted_band_pct) {
        let _ = writeln!(
            t,
            "  CPI band predicted for these points: ±{b:.2}% (95%, from bbv's model before any \
             simulation; `bbv simulate` gives the band from the simulated CPI)"
        );
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(insns: u64, loads: u64) -> MetricsRow {
        MetricsRow([insns, loads, 0, 0, 0, 0, 0, 0])
    }

    #[test]
    fn stratified_estimate_and_bands() {
        // Two clusters: {0,1} rates 100 and 300, point 0; {2} rate 50, point 2.
        let rows = [row(1000, 100), row(1000, 300), row(1000, 50)];
        let c = Clusters {
            labels: vec![0, 0, 1],
            points: vec![(0, 0, 2.0 / 3.0), (2, 1, 1.0 / 3.0)],
        };
        let e = metric_errors(&rows, &c).unwrap();
        let loads = &e[0];
        assert_eq!(loads.name, "loads");
        assert!((loads.full - 150.0).abs() < 1e-9);
        assert!((loads.estimate - (2.0 / 3.0 * 100.0 + 50.0 / 3.0)).abs() < 1e-9);
        // Cluster 0's variance is 100^2; weight 2/3.
        assert!((loads.std_error - (4.0 / 9.0 * 10000.0f64).sqrt()).abs() < 1e-9);
        assert!((loads.worst_case - 2.0 / 3.0 * 200.0).abs() < 1e-9);
        assert!((loads.max_cluster_cv - 0.5).abs() < 1e-9);
        let all_sd = ((2500.0 + 22500.0 + 10000.0) / 3.0f64).sqrt();
        assert!((loads.random_sampling_std_error - all_sd / 2f64.sqrt()).abs() < 1e-9);
        // A metric that is 0 everywhere is estimated exactly.
        assert_eq!(e[1].rel_error, Some(0.0));
        assert!(e[1].meets(0.0));
        assert!(!loads.meets(0.01));
    }

    /// An interval with `misses` L2 misses and `mispredicts` mispredictions per 1000.
    fn events(loads: u64, misses: u64, mispredicts: u64) -> MetricsRow {
        MetricsRow([1000, loads, 0, 0, 0, 0, misses, mispredicts])
    }

    #[test]
    fn typical_point_is_nearest_the_cluster_mean() {
        // Cluster 0: misses 1, 3, 4 (mean 2.67) -> interval 1; cluster 1 alone. The loads,
        // which are not matched, do not matter.
        let rows = [
            events(500, 1, 5),
            events(100, 3, 5),
            events(100, 4, 5),
            events(100, 9, 5),
        ];
        let labels = [0, 0, 0, 1];
        let p = typical_points(&rows, &labels, &[Some(0), Some(3), None]).unwrap();
        assert_eq!(p, vec![Some(1), Some(3), None]);
        // Two members are equally far from their mean: the nearest to the centre stays.
        let p = typical_points(&rows[..2], &labels[..2], &[Some(1)]).unwrap();
        assert_eq!(p, vec![Some(1)]);
        // Each metric weighs by the run's rate: 1 miss off where the run has 2 outweighs
        // 5 mispredictions off where it has 50.
        let rows = [events(0, 3, 50), events(0, 2, 55), events(0, 1, 45)];
        let p = typical_points(&rows, &[0, 0, 0], &[Some(0)]).unwrap();
        assert_eq!(p, vec![Some(1)]);
        assert!(typical_points(&rows, &[0], &[Some(0)]).is_err());
    }

    #[test]
    fn mismatched_lengths_are_errors() {
        let c = Clusters {
            labels: vec![0],
            points: vec![(0, 0, 1.0)],
        };
        assert!(metric_errors(&[row(1, 1), row(1, 1)], &c).is_err());
    }
}
