//! Clustering a run's vectors as `bbv simpoint` does, optionally validating every k tried
//! against the run's metrics and choosing k by `--target-error`.

use std::io::Write as _;
use std::path::Path;

use bbv_profile::MetricsRow;
use bbv_simpoint::{Clustering, Dataset, KChoice, Observer, Options, PostResult, Prepared};

use crate::validate::{self, Clusters, KRow, Pick, Validation};
use bbv_files::AtomicFiles;
use bbv_rundir::strata;

use crate::PipelineError;

/// What `--validate` adds to clustering.
pub struct Validate<'a> {
    /// One row per vector clustered.
    pub rows: &'a [MetricsRow],
    /// `--target-error` as a fraction.
    pub target_error: Option<f64>,
    /// How each cluster's point is picked (for every k tried, before its errors are measured).
    pub pick: Pick,
    /// The share of the run after its last whole interval, when the vectors are intervals
    /// (each k's CPI band is then predicted, [`bbv_rundir::band::predicted`]); None for
    /// LoopPoint's slices, which get no band.
    pub tail: Option<f64>,
}

/// Which k are tried.
#[derive(Clone, Copy, Debug)]
pub struct KRange {
    /// The largest.
    pub max_k: usize,
    /// Every k from 1 to `max_k` (`bbv simpoint -k 1:K`), SimPoint's BIC rule over all of
    /// them; otherwise SimPoint's binary search (`-maxK K`), whose rule sees only the k it
    /// tried. A target error tries every k either way.
    pub every: bool,
}

/// Clusters a BBV file as `bbv simpoint FILE --max-k K -o PREFIX` does (SimPoint 3.2's
/// defaults) and writes `PREFIX.simpoints`, `.weights` and `.labels`.
pub fn cluster_file(
    input: &Path,
    max_k: usize,
    prefix: &Path,
    var_length: bool,
    observer: &dyn Observer,
) -> Result<(), PipelineError> {
    let k = KRange {
        max_k,
        every: false,
    };
    cluster_validated(input, k, prefix, var_length, observer, None).map(drop)
}

/// The points of a clustering: each selected cluster's point, weights over the selection.
fn clusters_of(post: &PostResult) -> Clusters {
    let sel = post.selected(1.0);
    let total: f64 = sel.iter().map(|&c| post.weights[c]).sum();
    Clusters {
        labels: post.labels.iter().map(|&l| l as usize).collect(),
        points: sel
            .iter()
            .map(|&c| {
                (
                    post.simpoints[c] as usize,
                    c,
                    post.weights[c] / total.max(f64::MIN_POSITIVE),
                )
            })
            .collect(),
    }
}

/// [`cluster_file`], and with `validate` also the error of every k tried (`PREFIX`'s folder
/// gets `validation.json`). `PREFIX`'s folder also gets `bic.csv`: every k tried, its BIC and
/// its place in the range. With a target error every k from 1 to `max_k` is tried and the
/// smallest one meeting it is written; otherwise SimPoint's search and choice stand.
pub fn cluster_validated(
    input: &Path,
    k: KRange,
    prefix: &Path,
    var_length: bool,
    observer: &dyn Observer,
    validate: Option<&Validate>,
) -> Result<Option<Validation>, PipelineError> {
    let mut data = bbv_simpoint::load_projected(input)?;
    if !var_length {
        let w = 1.0 / data.rows() as f64;
        data.weights.iter_mut().for_each(|x| *x = w);
    }
    if let Some(v) = validate {
        if v.rows.len() != data.rows() {
            return Err(PipelineError::Invalid(format!(
                "the metrics have {} intervals but {} has {}",
                v.rows.len(),
                input.display(),
                data.rows()
            )));
        }
    }
    let max_k = k.max_k.min(data.rows());
    let target = validate.and_then(|v| v.target_error);
    let opts = Options {
        k: if target.is_some() || k.every {
            KChoice::List((1..=max_k).collect())
        } else {
            KChoice::Search { max_k }
        },
        ..Options::default()
    };
    let prep = Prepared::new(&data, &opts)?;
    let result = bbv_simpoint::cluster(&prep, &opts, observer)?;
    let fractions = bic_fractions(&result.runs);
    let (post, validation) = match validate {
        None => (
            PostResult::new(&data, &result.runs[result.best].centres),
            None,
        ),
        Some(v) => {
            let (post, validation) = validate_runs(input, &data, &result, &fractions, v)?;
            (post, Some(validation))
        }
    };
    let name = |ext: &str| prefix.with_extension(ext);
    let mut files = AtomicFiles::default();
    files.write(&name("simpoints"), |w| post.write_simpoints(w, 1.0))?;
    files.write(&name("weights"), |w| post.write_weights(w, 1.0))?;
    files.write(&name("labels"), |w| post.write_labels(w))?;
    files.write(&prefix.with_file_name(bbv_rundir::files::BIC), |w| {
        let mut runs: Vec<(usize, f64, f64)> = result
            .runs
            .iter()
            .zip(&fractions)
            .map(|(r, &f)| (r.k, r.bic, f))
            .collect();
        runs.sort_by_key(|r| r.0);
        writeln!(w, "k,bic,bic_fraction")?;
        for (k, bic, f) in runs {
            writeln!(w, "{k},{bic},{f}")?;
        }
        Ok(())
    })?;
    if let Some(v) = &validation {
        let path = prefix.with_file_name(bbv_rundir::files::VALIDATION);
        files.write(&path, |w| {
            serde_json::to_writer_pretty(&mut *w, v)?;
            w.write_all(b"\n")
        })?;
    }
    files.commit()?;
    Ok(validation)
}

/// Every k tried, its estimate errors, and the chosen run's points (by BIC, or by the
/// target error).
fn validate_runs(
    input: &Path,
    data: &Dataset,
    result: &Clustering,
    fractions: &[f64],
    v: &Validate,
) -> Result<(PostResult, Validation), PipelineError> {
    let target = v.target_error;
    let mut posts: Vec<PostResult> = result
        .runs
        .iter()
        .map(|r| PostResult::new(data, &r.centres))
        .collect();
    match v.pick {
        Pick::Metrics => {
            for post in &mut posts {
                pick_typical(post, v.rows)?;
            }
        }
        Pick::Strata => {
            for post in &mut posts {
                pick_strata(post, v.rows)?;
            }
        }
        Pick::Centroid => {}
    }
    let clusterings: Vec<Clusters> = posts.iter().map(clusters_of).collect();
    let bbv = validate::bbv_errors(input, &clusterings)?;
    // The run's intervals and prior, the same for every k.
    let members = v.tail.map(|_| {
        let m = bbv_rundir::band::members(v.rows, |i| data.row(i));
        let prior = bbv_rundir::band::Prior::of(&m);
        (m, prior)
    });
    let mut by_k = Vec::new();
    for (((run, c), bbv_error), &bic_fraction) in
        result.runs.iter().zip(&clusterings).zip(bbv).zip(fractions)
    {
        let metrics = validate::metric_errors(v.rows, c)?;
        let worst = metrics.iter().map(|m| m.rank()).fold(0.0, f64::max);
        let predicted = match (&members, v.tail) {
            (Some((m, prior)), Some(tail)) => Some(predicted_band(m, prior, c, tail)?),
            _ => None,
        };
        by_k.push(KRow {
            k: run.k,
            points: c.points.len(),
            bic: run.bic,
            bic_fraction,
            worst_rel_error: worst.is_finite().then_some(worst),
            bbv_error,
            metrics,
            predicted_band_pct: predicted,
        });
    }
    let (best, rule) = match target {
        None => (
            result.best,
            "SimPoint 3.2: the smallest k whose BIC reaches 90% of the range".to_string(),
        ),
        Some(t) => choose_by_target(&by_k, t),
    };
    let chosen = &by_k[best];
    let mut order: Vec<KRow> = by_k.clone();
    order.sort_by_key(|r| r.k);
    let validation = Validation {
        metrics: chosen.metrics.clone(),
        bbv_error: chosen.bbv_error,
        bic_fraction: chosen.bic_fraction,
        k_rule: rule,
        k: chosen.k,
        target_error: target,
        by_k: order,
        pick: v.pick,
    };
    Ok((posts.swap_remove(best), validation))
}

/// The CPI band, in percent, that a clustering's points are expected to get when simulated.
fn predicted_band(
    members: &[bbv_rundir::band::Member],
    prior: &bbv_rundir::band::Prior,
    c: &Clusters,
    tail: f64,
) -> Result<f64, PipelineError> {
    let points = bbv_rundir::band::weighted_points(
        members,
        &c.labels,
        c.points
            .iter()
            .map(|&(interval, label, _)| (label, interval)),
    );
    let b = bbv_rundir::band::predicted(members, &c.labels, &points, tail, prior)?;
    Ok(b.band_pct)
}

/// Replaces each cluster's point by [`validate::typical_points`]' choice.
fn pick_typical(post: &mut PostResult, rows: &[MetricsRow]) -> Result<(), PipelineError> {
    let labels: Vec<usize> = post.labels.iter().map(|&l| l as usize).collect();
    let nearest: Vec<Option<usize>> = post
        .simpoints
        .iter()
        .map(|&p| usize::try_from(p).ok())
        .collect();
    let typical = validate::typical_points(rows, &labels, &nearest)?;
    for (p, t) in post.simpoints.iter_mut().zip(typical) {
        if let Some(t) = t {
            *p = t as i64;
        }
    }
    Ok(())
}

/// Cuts each cluster into strata of like CPI estimate ([`bbv_rundir::strata`]): the first
/// stratum keeps the cluster's number, the others get new ones after the last; each stratum's
/// point is its member nearest its mean, its weight the cluster's shared by instructions.
fn pick_strata(post: &mut PostResult, rows: &[MetricsRow]) -> Result<(), PipelineError> {
    if rows.len() != post.labels.len() {
        return Err(PipelineError::Invalid(format!(
            "metrics.csv has {} intervals but the clustering has {}",
            rows.len(),
            post.labels.len()
        )));
    }
    let estimates: Vec<f64> = rows.iter().map(strata::cpi_estimate).collect();
    let weights: Vec<f64> = rows.iter().map(|r| r.instructions() as f64).collect();
    strata::cut_clusters(
        &estimates,
        &weights,
        &mut post.labels,
        &mut post.simpoints,
        &mut post.weights,
    );
    Ok(())
}

/// Each run's BIC as a fraction of the range over the runs (1 when all are equal).
fn bic_fractions(runs: &[bbv_simpoint::Run]) -> Vec<f64> {
    let (lo, hi) = runs
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), r| {
            (lo.min(r.bic), hi.max(r.bic))
        });
    runs.iter()
        .map(|r| {
            if hi > lo {
                (r.bic - lo) / (hi - lo)
            } else {
                1.0
            }
        })
        .collect()
}

/// The k with the fewest points (then the smallest k) whose every metric is within `target`
/// and whose predicted CPI band is at most `target`; when none is, the one nearest to it (the
/// smallest of its worst metric error and its band, each over the target). Returns the index
/// into `rows` (in run order) and the rule as said in the summary.
fn choose_by_target(rows: &[KRow], target: f64) -> (usize, String) {
    let pct = 100.0 * target;
    let band = |r: &KRow| r.predicted_band_pct.map_or(0.0, |b| b / 100.0);
    let banded = rows.iter().any(|r| r.predicted_band_pct.is_some());
    let what = if banded {
        "every metric within and a predicted CPI band of at most"
    } else {
        "every metric within"
    };
    let meeting = rows
        .iter()
        .enumerate()
        .filter(|(_, r)| r.metrics.iter().all(|m| m.meets(target)) && band(r) <= target)
        .min_by_key(|(_, r)| (r.points, r.k));
    if let Some((i, _)) = meeting {
        return (
            i,
            format!("--target-error {pct}%: the fewest points with {what} {pct}%"),
        );
    }
    let worst = |r: &KRow| r.metrics.iter().map(|m| m.rank()).fold(0.0, f64::max);
    let rank = |r: &KRow| worst(r).max(band(r));
    let (i, r) = rows
        .iter()
        .enumerate()
        .min_by(|a, b| {
            rank(a.1)
                .total_cmp(&rank(b.1))
                .then((a.1.points, a.1.k).cmp(&(b.1.points, b.1.k)))
        })
        .expect("at least one k is tried");
    let band_said = r
        .predicted_band_pct
        .map_or(String::new(), |b| format!(", predicted CPI band ±{b:.2}%"));
    (
        i,
        format!(
            "--target-error {pct}% not met by any k up to {} ({what} {pct}%): k = {} ({} points) \
             comes nearest, worst metric error {:.2}%{band_said}; a larger --max-k or shorter \
             intervals give more points",
            rows.iter().map(|r| r.k).max().unwrap_or(0),
            r.k,
            r.points,
            100.0 * worst(r)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An interval of `insns` instructions whose CPI estimate is `0.5 + 70 * l2 / insns`.
    fn row(insns: u64, l2: u64) -> MetricsRow {
        MetricsRow([insns, 0, 0, 0, 0, 0, l2, 0])
    }

    #[test]
    fn strata_take_new_numbers_and_share_their_cluster_weight() {
        // Cluster 0: four like intervals and two slow ones (cut); cluster 1: like intervals.
        let rows = [
            row(1000, 5),
            row(1000, 5),
            row(1000, 30),
            row(1000, 6),
            row(2000, 12),
            row(2000, 50),
            row(1000, 1),
            row(1000, 1),
        ];
        let mut post = PostResult {
            labels: vec![0, 0, 0, 0, 0, 0, 1, 1],
            dists: vec![0.0; 8],
            simpoints: vec![1, 7],
            weights: vec![0.75, 0.25],
        };
        pick_strata(&mut post, &rows).unwrap();
        assert_eq!(post.labels, [0, 0, 2, 0, 0, 2, 1, 1]);
        // Cluster 0's 8,000 instructions: 5,000 like (estimates 0.85, 0.85, 0.92, 0.92) and 3,000
        // slow (2.6 over 1,000, 2.25 over 2,000).
        assert_eq!(post.weights.len(), 3);
        assert!((post.weights[0] - 0.75 * 5.0 / 8.0).abs() < 1e-12);
        assert!((post.weights[2] - 0.75 * 3.0 / 8.0).abs() < 1e-12);
        assert_eq!(post.weights[1], 0.25);
        // Weighted means 0.892 (intervals 3 and 4 tie at 0.92: the lower wins) and 2.367.
        assert_eq!(post.simpoints, [3, 6, 5]);
        let c = clusters_of(&post);
        assert_eq!(c.points.len(), 3);
        assert!((c.points.iter().map(|p| p.2).sum::<f64>() - 1.0).abs() < 1e-12);
        // Metrics for another number of intervals are refused.
        assert!(pick_strata(&mut post, &rows[..7]).is_err());
    }

    /// A k of `points` points whose one metric is off by `rel` and whose band is `band` (%).
    fn k_row(k: usize, points: usize, rel: f64, band: Option<f64>) -> KRow {
        KRow {
            k,
            points,
            bic: 0.0,
            bic_fraction: 0.0,
            worst_rel_error: Some(rel),
            bbv_error: 0.0,
            metrics: vec![bbv_rundir::validate::MetricError {
                name: "cpi".into(),
                per_kilo_instruction: false,
                full: 1.0,
                estimate: 1.0 + rel,
                rel_error: Some(rel),
                abs_error: rel,
                std_error: 0.0,
                band95: 0.0,
                worst_case: 0.0,
                max_cluster_cv: 0.0,
                random_sampling_std_error: 0.0,
            }],
            predicted_band_pct: band,
        }
    }

    #[test]
    fn the_target_takes_the_fewest_points_meeting_metrics_and_band() {
        let rows = [
            k_row(2, 2, 0.01, Some(9.0)),
            k_row(3, 3, 0.04, Some(2.0)),
            // Strata: k = 4 cut into 6 points, k = 5 into 5; both meet 3%.
            k_row(4, 6, 0.01, Some(2.5)),
            k_row(5, 5, 0.02, Some(2.9)),
        ];
        let (i, rule) = choose_by_target(&rows, 0.03);
        assert_eq!(rows[i].k, 5, "{rule}");
        assert!(rule.contains("predicted CPI band of at most 3%"), "{rule}");
        // Met by none: the nearest, its figures said with the way to more points.
        let (i, rule) = choose_by_target(&rows, 0.01);
        // Nearest: the larger of metric error and band, 9%, 4%, 2.5% and 2.9%.
        assert_eq!(rows[i].k, 4, "{rule}");
        assert!(
            rule.contains("not met") && rule.contains("±2.50%"),
            "{rule}"
        );
        assert!(rule.contains("--max-k"), "{rule}");
        // Without bands (LoopPoint's slices) the metrics alone decide.
        let slices: Vec<KRow> = rows
            .iter()
            .map(|r| KRow {
                predicted_band_pct: None,
                ..r.clone()
            })
            .collect();
        let (i, rule) = choose_by_target(&slices, 0.03);
        assert_eq!(slices[i].k, 2, "{rule}");
        assert!(!rule.contains("band"), "{rule}");
    }
}
