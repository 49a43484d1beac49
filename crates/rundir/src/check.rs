//! Whether a run directory's files agree with each other before anything is rebuilt from
//! them: SimPoint's points, weights and labels, and the summary's numbers.

use std::collections::{BTreeSet, HashMap};
use std::path::Path;

use crate::{RundirError, Summary};

/// How far the weights' sum may stray from 1: SimPoint prints six significant digits, so
/// each weight carries up to 5e-7 of rounding.
pub fn weight_sum_tolerance(k: usize) -> f64 {
    1e-6 * k.max(1) as f64 + 1e-9
}

fn invalid(path: &Path, what: String) -> RundirError {
    RundirError::Invalid(format!("{}: {what}", path.display()))
}

/// Weights as SimPoint writes them: each finite and within [0, 1], one per cluster, summing
/// to 1 within rounding.
pub fn weights(path: &Path, weights: &[(f64, usize)]) -> Result<HashMap<usize, f64>, RundirError> {
    let mut of = HashMap::new();
    for (n, &(w, cluster)) in weights.iter().enumerate() {
        if !(w.is_finite() && (0.0..=1.0).contains(&w)) {
            return Err(invalid(
                path,
                format!(
                    "line {}: weight {w} of cluster {cluster} is not a fraction from 0 to 1",
                    n + 1
                ),
            ));
        }
        if of.insert(cluster, w).is_some() {
            return Err(invalid(
                path,
                format!("line {}: cluster {cluster} has a second weight", n + 1),
            ));
        }
    }
    sums_to_one(path, weights.iter().map(|w| w.0), "the weights", false)?;
    Ok(of)
}

/// Weights summing to 1 within rounding (or, with `at_most`, not above 1: looppoint mode
/// drops the point of a cluster that held only the last, partial slice).
fn sums_to_one(
    path: &Path,
    weights: impl Iterator<Item = f64> + Clone,
    what: &str,
    at_most: bool,
) -> Result<(), RundirError> {
    let n = weights.clone().count();
    if n == 0 {
        return Ok(());
    }
    let sum: f64 = weights.sum();
    let off = sum - 1.0;
    if off > weight_sum_tolerance(n) || (!at_most && -off > weight_sum_tolerance(n)) {
        return Err(invalid(
            path,
            format!("{what} sum to {sum}, not 1 (a line duplicated or missing?)"),
        ));
    }
    Ok(())
}

/// Points (`(interval, cluster)`) and labels agree: one point per cluster, every point's
/// interval among the labels and labelled with its cluster, every labelled cluster with a
/// point.
pub fn points_and_labels(
    dir: &Path,
    points: &[(u64, usize)],
    labels: &[usize],
) -> Result<(), RundirError> {
    let simpoints = dir.join(crate::files::SIMPOINTS);
    let mut seen = BTreeSet::new();
    for (n, &(interval, cluster)) in points.iter().enumerate() {
        let at = format!("line {}: cluster {cluster}", n + 1);
        if !seen.insert(cluster) {
            return Err(invalid(&simpoints, format!("{at} has a second point")));
        }
        match labels.get(interval as usize) {
            None => {
                return Err(invalid(
                    &simpoints,
                    format!(
                        "{at}'s point {interval} is beyond the {} labels of simpoint.labels",
                        labels.len()
                    ),
                ))
            }
            Some(&l) if l != cluster => {
                return Err(invalid(
                    &simpoints,
                    format!("{at}'s point {interval} is labelled {l} in simpoint.labels"),
                ))
            }
            Some(_) => {}
        }
    }
    let labelled: BTreeSet<usize> = labels.iter().copied().collect();
    if let Some(c) = labelled.difference(&seen).next() {
        return Err(invalid(
            &simpoints,
            format!(
                "no point for cluster {c}, which simpoint.labels uses ({} points for {} clusters)",
                seen.len(),
                labelled.len()
            ),
        ));
    }
    Ok(())
}

/// The summary's numbers make sense on their own: weights are fractions summing to 1, points
/// lie inside the run, sizes do not overflow.
pub fn summary(path: &Path, s: &Summary) -> Result<(), RundirError> {
    if s.interval == 0 {
        return Err(invalid(
            path,
            "interval 0: intervals hold instructions".into(),
        ));
    }
    if s.points.len() > s.k {
        return Err(invalid(
            path,
            format!("{} points, but k = {}", s.points.len(), s.k),
        ));
    }
    for (n, p) in s.points.iter().enumerate() {
        let at = format!("point {} (cluster {})", n + 1, p.cluster);
        if !(p.weight.is_finite() && (0.0..=1.0).contains(&p.weight)) {
            return Err(invalid(
                path,
                format!("{at}: weight {} is not a fraction from 0 to 1", p.weight),
            ));
        }
        if !(p.multiplier.is_finite() && p.multiplier >= 0.0) {
            return Err(invalid(
                path,
                format!(
                    "{at}: multiplier {} is not a finite positive number",
                    p.multiplier
                ),
            ));
        }
        if p.interval >= s.intervals {
            return Err(invalid(
                path,
                format!(
                    "{at}: interval {} is beyond the {} of the run",
                    p.interval, s.intervals
                ),
            ));
        }
    }
    let looppoint = s.regions_mode == crate::Regions::Looppoint;
    sums_to_one(
        path,
        s.points.iter().map(|p| p.weight),
        "the points' weights",
        looppoint,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_must_be_fractions_summing_to_one() {
        let p = Path::new("w");
        assert!(weights(p, &[(0.25, 0), (0.75, 1)]).is_ok());
        assert!(weights(p, &[(0.333333, 0), (0.333333, 1), (0.333333, 2)]).is_ok());
        let e = |w: &[(f64, usize)]| weights(p, w).unwrap_err().to_string();
        assert!(e(&[(0.25, 0), (0.75, 1), (0.75, 1)]).contains("second weight"));
        assert!(e(&[(0.25, 0), (0.75, 1), (0.75, 2)]).contains("sum to 1.75"));
        assert!(e(&[(1e26, 0)]).contains("not a fraction"));
        assert!(e(&[(f64::NAN, 0)]).contains("not a fraction"));
        assert!(e(&[(-0.5, 0), (1.5, 1)]).contains("not a fraction"));
    }

    #[test]
    fn points_and_labels_must_agree() {
        let d = Path::new("d");
        let labels = [0, 1, 1, 2, 0];
        assert!(points_and_labels(d, &[(0, 0), (2, 1), (3, 2)], &labels).is_ok());
        let e = |p: &[(u64, usize)]| points_and_labels(d, p, &labels).unwrap_err().to_string();
        assert!(e(&[(0, 0), (2, 1)]).contains("no point for cluster 2"));
        assert!(e(&[(0, 0), (2, 1), (3, 2), (4, 0)]).contains("second point"));
        assert!(e(&[(1, 0), (2, 1), (3, 2)]).contains("is labelled 1"));
        assert!(e(&[(0, 0), (2, 1), (9, 2)]).contains("beyond the 5 labels"));
    }
}
