//! The error band of a sampled CPI estimate: a 95% interval derived from the sampling design,
//! not from a whole run.
//!
//! The estimate is stratified: each point h stands for a stratum S_h of intervals (its SimPoint
//! cluster, or a `--pick strata` part of one) with the share W_h of the run's instructions, and
//! the estimate is sum_h W_h c_h with c_h the point's simulated CPI. With one point per stratum
//! the simulator alone cannot say how much the members differ, so bbv's model stands in: every
//! interval has a first-order CPI estimate e_i from its per-interval metrics
//! ([`crate::strata::cpi_estimate`]) and a place x_i in SimPoint's projected BBV space. Each
//! member's true CPI is taken as k e_i (1 + u_i): one scale k for the run, and a relative misfit
//! u_i that the model cannot see, which differs between two intervals the more their code
//! differs: Var(u_i - u_j) = 2 t^2 + g |x_i - x_j|^2 (a nugget t^2 of noise, and a smooth part
//! growing with the BBV distance). Then a point's CPI differs from its stratum's mean by
//! k (e_p - mean e), known, plus k mean e (u_p - mean u), of variance
//! (k mean e)^2 (g |x_p - mean x|^2 + t^2 (1 - 1/N)): small when the point sits at its
//! stratum's centre in BBV space (SimPoint's own choice) and the stratum is made of like code.
//!
//! The simulated points calibrate it: k is the points' simulated CPI over their estimates
//! (weighted by W); t^2 and g are fitted to the pairs of points, (r_a - r_b)^2 against
//! |x_a - x_b|^2, r the points' relative misfits (least squares, both at least 0), with fewer
//! than three pairs a prior ([`PRIOR_MISFIT`]) as pure nugget. The run's tail (instructions
//! after the last whole interval) is unrepresented: its share f adds (f x estimate)^2.
//! Half-width: 1.96 times the square root of sum_h W_h^2 Var_h.

use serde::{Deserialize, Serialize};

use crate::RundirError;

/// The model's relative misfit assumed when too few points are simulated to fit it: a
/// first-order model (misses and mispredictions at round cycle costs) is commonly off by a fifth.
pub const PRIOR_MISFIT: f64 = 0.2;
/// Two-sided 95% normal quantile.
pub const Z95: f64 = 1.959_964;

/// One interval as the band sees it (which point it belongs to is the labels').
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    /// Its instructions.
    pub instructions: f64,
    /// bbv's model's CPI estimate of it.
    pub estimate: f64,
    /// Its place in SimPoint's projected BBV space.
    pub position: Vec<f64>,
}

/// Every interval of a run as the band sees it: its instructions and bbv's model's CPI
/// estimate from its metrics row, and its place (`position(i)`, the projected BBV space that
/// was clustered).
pub fn members<'a>(
    rows: &[bbv_profile::MetricsRow],
    position: impl Fn(usize) -> &'a [f64],
) -> Vec<Member> {
    rows.iter()
        .enumerate()
        .map(|(i, row)| Member {
            instructions: row.instructions() as f64,
            estimate: crate::strata::cpi_estimate(row),
            position: position(i).to_vec(),
        })
        .collect()
}

/// A clustering's points, each `(label, interval)` weighted by the instructions of its
/// stratum (the members `labels` give it), its `cpi` 0 for the caller to set; the point of an
/// empty stratum is left out.
pub fn weighted_points(
    members: &[Member],
    labels: &[usize],
    points: impl IntoIterator<Item = (usize, usize)>,
) -> Vec<Sampled> {
    let mut share = vec![0.0; labels.iter().max().map_or(0, |&l| l + 1)];
    for (m, &l) in members.iter().zip(labels) {
        share[l] += m.instructions;
    }
    points
        .into_iter()
        .filter_map(|(label, interval)| {
            let weight = *share.get(label).filter(|&&w| w > 0.0)?;
            Some(Sampled {
                label,
                interval,
                weight,
                cpi: 0.0,
            })
        })
        .collect()
}

/// One simulated point.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampled {
    /// Its label (the stratum it stands for).
    pub label: usize,
    /// The interval simulated.
    pub interval: usize,
    /// Its share of the estimate (instructions it stands for over the run's).
    pub weight: f64,
    /// Its simulated CPI.
    pub cpi: f64,
}

/// One stratum's part of the band.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct StratumBand {
    /// The point's label.
    pub label: usize,
    /// Intervals in the stratum.
    pub intervals: usize,
    /// Its share of the estimate.
    pub weight: f64,
    /// The model's estimate of the point, and the stratum's instruction-weighted mean.
    pub point_estimate: f64,
    /// The stratum's mean model estimate.
    pub mean_estimate: f64,
    /// The point's BBV distance to its stratum's centre (projected space).
    pub distance: f64,
    /// Standard deviation of the point's CPI about the stratum's mean, in CPI.
    pub sd_cpi: f64,
}

/// The 95% interval of an estimate and how it was derived (`simulation.json`'s `band`).
/// Every field has a default, so that a `simulation.json` of another bbv version reads (its
/// band is shown as it was; a new `bbv simulate` replaces it).
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct Band {
    /// Half-width as a percentage of the estimate.
    pub band_pct: f64,
    /// The interval's ends, in CPI.
    pub low_cpi: f64,
    /// Upper end.
    pub high_cpi: f64,
    /// The simulator's CPI over bbv's model's (the calibration's scale k).
    pub scale: f64,
    /// The model's relative misfit: its variance between two intervals per unit of BBV
    /// distance (projected space).
    pub growth: f64,
    /// Share of the run after its last whole interval.
    pub tail_fraction: f64,
    /// One line on how the band was derived.
    pub derivation: String,
    /// Per stratum.
    pub strata: Vec<StratumBand>,
}

/// Refuses what cannot be banded; the points' total weight.
fn checked(
    members: &[Member],
    labels: &[usize],
    points: &[Sampled],
    estimate: f64,
) -> Result<f64, RundirError> {
    let invalid = |m: String| Err(RundirError::Invalid(m));
    if points.is_empty() {
        return invalid("no simulated point: no band".into());
    }
    if labels.len() != members.len() {
        return invalid(format!(
            "{} labels for {} intervals: no band",
            labels.len(),
            members.len()
        ));
    }
    if !(estimate.is_finite() && estimate > 0.0) {
        return invalid(format!("estimate {estimate}: no band"));
    }
    if let Some(p) = points.iter().find(|p| p.interval >= members.len()) {
        return invalid(format!(
            "point of interval {} beyond the run's {} intervals",
            p.interval,
            members.len()
        ));
    }
    if let Some(p) = points
        .iter()
        .find(|p| !(p.cpi.is_finite() && p.cpi > 0.0 && p.weight.is_finite() && p.weight >= 0.0))
    {
        return invalid(format!(
            "point of interval {}: CPI {} and weight {} cannot be banded",
            p.interval, p.cpi, p.weight
        ));
    }
    let total_w: f64 = points.iter().map(|p| p.weight).sum();
    if total_w <= 0.0 {
        return invalid("the points have no weight: no band".into());
    }
    Ok(total_w)
}

/// The band of `estimate` (the points' weighted CPI) from every interval of the run, each
/// interval's point (`labels`) and the simulated points. `tail_fraction` is the share of the
/// run no interval holds.
pub fn band(
    members: &[Member],
    labels: &[usize],
    points: &[Sampled],
    estimate: f64,
    tail_fraction: f64,
) -> Result<Band, RundirError> {
    let total_w = checked(members, labels, points, estimate)?;
    let w = |p: &Sampled| p.weight / total_w;
    let e_point = |p: &Sampled| members[p.interval].estimate.max(1e-9);
    // Calibration: one scale for the run, the points' relative misfit about it.
    let scale = points.iter().map(|p| w(p) * p.cpi).sum::<f64>()
        / points.iter().map(|p| w(p) * e_point(p)).sum::<f64>();
    let misfit: Vec<f64> = points
        .iter()
        .map(|p| p.cpi / (scale * e_point(p)) - 1.0)
        .collect();
    let growth = fit_misfit(members, points, &misfit);
    let mut b = assemble(
        (members, labels),
        points,
        estimate,
        tail_fraction,
        (scale, growth),
    );
    b.derivation = format!(
        "stratified sampling, one point per stratum: each stratum's spread from bbv's model \
         (metrics.csv) scaled by the points' simulated CPI (k = {scale:.3}) and the model's \
         misfit growing with the BBV distance of the point to its stratum's centre \
         (variance {growth:.4} per unit of distance, fitted to the {} points' pairs); the \
         tail's share {:.4} added whole; warmup not included (see docs/champsim.md)",
        points.len(),
        b.tail_fraction
    );
    Ok(b)
}

/// The model's misfit assumed before any point is simulated: [`PRIOR_MISFIT`] between two
/// intervals at the run's mean BBV distance apart. A property of the run, not of a choice of
/// points: computed once for all the clusterings [`predicted`] is asked about.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Prior {
    /// Mean BBV distance between two of the run's intervals (at most [`BLOCK_SAMPLE`] of them,
    /// by stride; each with itself included).
    pub mean_distance: f64,
    /// The misfit's variance per unit of distance.
    pub growth: f64,
}

impl Prior {
    /// The prior of the run whose intervals are `members`.
    pub fn of(members: &[Member]) -> Prior {
        let all: Vec<&[f64]> = members.iter().map(|m| m.position.as_slice()).collect();
        let mean_distance = mean_within(&strided(&all));
        Prior {
            mean_distance,
            growth: 2.0 * PRIOR_MISFIT * PRIOR_MISFIT / mean_distance.max(1e-3),
        }
    }
}

/// The band a choice of points is expected to get before any is simulated (`bbv run
/// --target-error`): each point's CPI taken as bbv's model's estimate of it (scale 1, so the
/// percentage is the model's), and the misfit's growth the run's [`Prior`]. The points' `cpi`
/// is not read.
pub fn predicted(
    members: &[Member],
    labels: &[usize],
    points: &[Sampled],
    tail_fraction: f64,
    prior: &Prior,
) -> Result<Band, RundirError> {
    let modelled: Vec<Sampled> = points
        .iter()
        .map(|p| Sampled {
            cpi: members
                .get(p.interval)
                .map_or(1.0, |m| m.estimate.max(1e-9)),
            ..*p
        })
        .collect();
    // The estimate follows from the points, so there is none to check yet: 1 stands in.
    let total_w = checked(members, labels, &modelled, 1.0)?;
    let estimate = modelled.iter().map(|p| p.weight * p.cpi).sum::<f64>() / total_w;
    let Prior {
        mean_distance,
        growth,
    } = *prior;
    let mut b = assemble(
        (members, labels),
        &modelled,
        estimate,
        tail_fraction,
        (1.0, growth),
    );
    b.derivation = format!(
        "predicted before simulation: stratified sampling, one point per stratum, each point \
         read as bbv's model's estimate of it; the model's misfit the prior ({PRIOR_MISFIT} \
         between intervals at the run's mean BBV distance, {mean_distance:.3}: variance \
         {growth:.4} per unit of distance); the tail's share {:.4} added whole",
        b.tail_fraction
    );
    Ok(b)
}

/// The band from a calibration (`scale`, `growth`): each stratum's variance, the tail's, and
/// the 95% interval about `estimate` (the derivation is the caller's to say).
fn assemble(
    run: (&[Member], &[usize]),
    points: &[Sampled],
    estimate: f64,
    tail_fraction: f64,
    (scale, growth): (f64, f64),
) -> Band {
    let total_w: f64 = points.iter().map(|p| p.weight).sum();
    let mut var = 0.0;
    let mut strata = Vec::with_capacity(points.len());
    for p in points {
        let st = stratum(run, p, p.weight / total_w, scale, growth);
        var += st.weight * st.weight * st.sd_cpi * st.sd_cpi;
        strata.push(st);
    }
    let tail = tail_fraction.clamp(0.0, 1.0);
    var += (tail * estimate).powi(2);
    let half = Z95 * var.sqrt();
    Band {
        band_pct: 100.0 * half / estimate,
        low_cpi: estimate - half,
        high_cpi: estimate + half,
        scale,
        growth,
        tail_fraction: tail,
        derivation: String::new(),
        strata,
    }
}

/// The misfit's growth g with the BBV distance, fitted to the points' pairs:
/// (r_a - r_b)^2 = g d_ab by least squares through the origin (a linear variogram: the misfit
/// between two intervals grows with the distance between their code, and vanishes with it).
/// With fewer than three pairs the prior: g such that points at the pairs' typical distance
/// differ by [`PRIOR_MISFIT`] (or the prior itself when the points are one).
fn fit_misfit(members: &[Member], points: &[Sampled], misfit: &[f64]) -> f64 {
    let mut pairs = Vec::new();
    for a in 0..points.len() {
        for b in a + 1..points.len() {
            let d = dist2(
                &members[points[a].interval].position,
                &members[points[b].interval].position,
            )
            .sqrt();
            pairs.push((d, (misfit[a] - misfit[b]).powi(2)));
        }
    }
    let sxx: f64 = pairs.iter().map(|p| p.0 * p.0).sum();
    if pairs.len() >= 3 && sxx > 0.0 {
        return pairs.iter().map(|p| p.0 * p.1).sum::<f64>() / sxx;
    }
    let typical = pairs.iter().map(|p| p.0).sum::<f64>() / pairs.len().max(1) as f64;
    2.0 * PRIOR_MISFIT * PRIOR_MISFIT / typical.max(1e-3)
}

/// Mean distance from `x` to each of `set`, and between the members of `set` (a stride of at
/// most [`BLOCK_SAMPLE`] of them, so that a stratum of many intervals costs no more).
fn mean_distances(x: &[f64], set: &[&[f64]]) -> (f64, f64) {
    let sample = strided(set);
    let n = sample.len().max(1) as f64;
    let to_x = sample.iter().map(|y| dist2(x, y).sqrt()).sum::<f64>() / n;
    (to_x, mean_within(&sample))
}

/// At most [`BLOCK_SAMPLE`] of `set`, evenly strided.
fn strided<'a>(set: &[&'a [f64]]) -> Vec<&'a [f64]> {
    let step = set.len().div_ceil(BLOCK_SAMPLE).max(1);
    set.iter().step_by(step).copied().collect()
}

/// Mean distance between two of `sample` (each with itself included, as the variance of a
/// stratum's mean counts it).
fn mean_within(sample: &[&[f64]]) -> f64 {
    let n = sample.len().max(1) as f64;
    let mut within = 0.0;
    for a in sample {
        within += sample.iter().map(|b| dist2(a, b).sqrt()).sum::<f64>();
    }
    within / (n * n)
}

/// Most members of a stratum whose pairwise distances are averaged.
const BLOCK_SAMPLE: usize = 512;

fn dist2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

/// Point `p`'s stratum: its members' model estimates and centre, and the variance of the
/// point's CPI about their mean (offset from the mean plus the misfits' difference).
fn stratum(
    (members, labels): (&[Member], &[usize]),
    p: &Sampled,
    weight: f64,
    scale: f64,
    growth: f64,
) -> StratumBand {
    let point = &members[p.interval];
    let mut centre = vec![0.0; point.position.len()];
    let (mut t, mut te) = (0.0, 0.0);
    let mut places: Vec<&[f64]> = Vec::new();
    let of_p = members.iter().zip(labels).filter(|&(_, &l)| l == p.label);
    for (m, _) in of_p {
        t += m.instructions;
        te += m.instructions * m.estimate;
        places.push(&m.position);
        for (c, x) in centre.iter_mut().zip(&m.position) {
            *c += m.instructions * x;
        }
    }
    if t > 0.0 {
        centre.iter_mut().for_each(|c| *c /= t);
    }
    let n = places.len();
    let (mean, v) = if t > 0.0 && n > 1 {
        let mean = te / t;
        let offset = scale * (point.estimate - mean);
        // Var(u_p - mean u) = 2 gamma(p, S) - gamma(S, S), gamma(d) = growth d / 2.
        let (to_point, within) = mean_distances(&point.position, &places);
        let spread = (growth * (to_point - within / 2.0)).max(0.0);
        (mean, offset * offset + (scale * mean).powi(2) * spread)
    } else {
        // A stratum of one interval is its own point.
        (point.estimate, 0.0)
    };
    StratumBand {
        label: p.label,
        intervals: n,
        weight,
        point_estimate: point.estimate,
        mean_estimate: mean,
        distance: dist2(&point.position, &centre).sqrt(),
        sd_cpi: v.sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Intervals and their labels.
    type Run = (Vec<Member>, Vec<usize>);

    fn members(spec: &[(usize, f64)]) -> Run {
        let m = spec
            .iter()
            .enumerate()
            .map(|(i, &(label, estimate))| Member {
                instructions: 1e6,
                estimate,
                position: vec![label as f64, i as f64 * 0.01],
            })
            .collect();
        (m, spec.iter().map(|s| s.0).collect())
    }

    fn banded(run: &Run, p: &[Sampled], estimate: f64, tail: f64) -> Result<Band, RundirError> {
        band(&run.0, &run.1, p, estimate, tail)
    }

    fn sampled(label: usize, interval: usize, weight: f64, cpi: f64) -> Sampled {
        Sampled {
            label,
            interval,
            weight,
            cpi,
        }
    }

    #[test]
    fn strata_of_one_interval_are_exact() {
        let m = members(&[(0, 1.0), (1, 2.0)]);
        let p = [sampled(0, 0, 0.5, 1.1), sampled(1, 1, 0.5, 2.2)];
        let b = banded(&m, &p, 1.65, 0.0).unwrap();
        assert_eq!(b.band_pct, 0.0);
        assert!((b.scale - 1.1).abs() < 1e-12);
        assert_eq!(b.low_cpi, 1.65);
    }

    #[test]
    fn the_prior_stands_for_too_few_points() {
        let like = members(&[(0, 1.0), (0, 1.0), (0, 1.02), (1, 2.0), (1, 2.0)]);
        let spread = members(&[(0, 0.6), (0, 1.0), (0, 1.4), (1, 2.0), (1, 2.0)]);
        let p = [sampled(0, 1, 0.6, 1.0), sampled(1, 3, 0.4, 2.0)];
        let narrow = banded(&like, &p, 1.4, 0.0).unwrap();
        // A point the model puts off its stratum's mean widens the band by the offset.
        let off = [sampled(0, 0, 0.6, 0.6), sampled(1, 3, 0.4, 2.0)];
        let wide = banded(&spread, &off, 1.16, 0.0).unwrap();
        assert!(wide.strata[0].sd_cpi > 0.4 * wide.scale, "{wide:?}");
        assert!(wide.band_pct > narrow.band_pct, "{wide:?} {narrow:?}");
        // By hand: k = 1 (both points on the model's line); one pair, so the prior: points at
        // their distance (1.0002) differ by PRIOR_MISFIT.
        let g = 2.0 * PRIOR_MISFIT * PRIOR_MISFIT / (1.0f64 + 0.02 * 0.02).sqrt();
        assert!((narrow.growth - g).abs() < 1e-12, "{narrow:?}");
        // Stratum 0 at 0, 0.01, 0.02 (point in the middle): mean distance to the point 0.02/3,
        // between members 0.08/9; stratum 1 at 0.03, 0.04 (point first): 0.005 and 0.005.
        let mean0: f64 = (1.0 + 1.0 + 1.02) / 3.0;
        let v0 = (1.0 - mean0).powi(2) + mean0 * mean0 * g * (0.02 / 3.0 - 0.04 / 9.0);
        let v1 = 4.0 * g * (0.005 - 0.0025);
        let half = Z95 * (0.36 * v0 + 0.16 * v1).sqrt();
        assert!(
            (narrow.band_pct - 100.0 * half / 1.4).abs() < 1e-9,
            "{narrow:?}"
        );
    }

    #[test]
    fn misfit_growing_with_distance_is_fitted() {
        // Four strata along a line in BBV space, the model's misfit growing with the place.
        let mut m: Run = (Vec::new(), Vec::new());
        for label in 0..4 {
            for j in 0..5 {
                m.1.push(label);
                m.0.push(Member {
                    instructions: 1e6,
                    estimate: 1.0,
                    position: vec![label as f64 + 0.1 * j as f64],
                });
            }
        }
        let cpi = |x: f64| 1.0 + 0.1 * x;
        // Points at each stratum's centre (j = 2) and at its edge (j = 0).
        let centred: Vec<Sampled> = (0..4)
            .map(|l| sampled(l, 5 * l + 2, 0.25, cpi(l as f64 + 0.2)))
            .collect();
        let edge: Vec<Sampled> = (0..4)
            .map(|l| sampled(l, 5 * l, 0.25, cpi(l as f64)))
            .collect();
        let c = banded(&m, &centred, 1.0, 0.0).unwrap();
        let e = banded(&m, &edge, 1.0, 0.0).unwrap();
        assert!(c.growth > 0.0, "{c:?}");
        assert!(c.strata.iter().all(|s| s.distance < 1e-12));
        assert!(e.strata.iter().all(|s| (s.distance - 0.2).abs() < 1e-12));
        assert!(e.band_pct > c.band_pct, "{e:?} {c:?}");
        // Points that agree with the model exactly leave no misfit.
        let exact: Vec<Sampled> = (0..4).map(|l| sampled(l, 5 * l + 2, 0.25, 1.0)).collect();
        assert_eq!(banded(&m, &exact, 1.0, 0.0).unwrap().band_pct, 0.0);
    }

    #[test]
    fn the_tail_counts_whole() {
        let m = members(&[(0, 1.0)]);
        let b = banded(&m, &[sampled(0, 0, 1.0, 1.0)], 1.0, 0.01).unwrap();
        assert!((b.band_pct - Z95).abs() < 1e-9);
    }

    #[test]
    fn a_band_of_another_version_reads() {
        let old = r#"{"band_pct": 2.5, "low_cpi": 1.0, "strata": [{"label": 3}], "misfit": 0.2}"#;
        let b: Band = serde_json::from_str(old).unwrap();
        assert_eq!(
            (b.band_pct, b.strata[0].label, b.strata[0].distance),
            (2.5, 3, 0.0)
        );
    }

    #[test]
    fn bad_points_are_refused() {
        let m = members(&[(0, 1.0)]);
        let ok = sampled(0, 0, 1.0, 1.0);
        assert!(banded(&m, &[], 1.0, 0.0).is_err());
        assert!(banded(&m, &[Sampled { interval: 5, ..ok }], 1.0, 0.0).is_err());
        assert!(banded(
            &m,
            &[Sampled {
                cpi: f64::NAN,
                ..ok
            }],
            1.0,
            0.0
        )
        .is_err());
        assert!(banded(&m, &[Sampled { cpi: 0.0, ..ok }], 1.0, 0.0).is_err());
        assert!(banded(&m, &[Sampled { weight: 0.0, ..ok }], 1.0, 0.0).is_err());
        assert!(banded(&m, &[ok], f64::INFINITY, 0.0).is_err());
    }

    #[test]
    fn the_predicted_band_reads_the_model_and_the_prior() {
        let spread = members(&[(0, 0.6), (0, 1.0), (0, 1.4), (1, 2.0), (1, 2.0)]);
        // The points' CPI is not read: any value predicts the same band.
        let p = [sampled(0, 1, 0.6, 7.0), sampled(1, 3, 0.4, 0.1)];
        let prior = Prior::of(&spread.0);
        let b = predicted(&spread.0, &spread.1, &p, 0.0, &prior).unwrap();
        let q = [sampled(0, 1, 0.6, 1.0), sampled(1, 3, 0.4, 2.0)];
        assert_eq!(b, predicted(&spread.0, &spread.1, &q, 0.0, &prior).unwrap());
        assert_eq!(b.scale, 1.0);
        // The prior: PRIOR_MISFIT at the run's mean distance (self-pairs included), here the
        // five places (0, 0), (0, .01), (0, .02), (1, .03), (1, .04).
        let pos: Vec<&[f64]> = spread.0.iter().map(|m| m.position.as_slice()).collect();
        let mut sum = 0.0;
        for a in &pos {
            for b in &pos {
                sum += dist2(a, b).sqrt();
            }
        }
        let g = 2.0 * PRIOR_MISFIT * PRIOR_MISFIT / (sum / 25.0);
        assert!((b.growth - g).abs() < 1e-12, "{b:?}");
        // Estimate 0.6 x 1.0 + 0.4 x 2.0: its band by hand, as in the band's own test.
        // Stratum 0: the point (1.0) at its mean, so the misfit alone.
        let v0 = g * (0.02 / 3.0 - 0.04 / 9.0);
        let v1 = 4.0 * g * (0.005 - 0.0025);
        let half = Z95 * (0.36 * v0 + 0.16 * v1).sqrt();
        assert!((b.band_pct - 100.0 * half / 1.4).abs() < 1e-9, "{b:?}");
        assert!(b.derivation.starts_with("predicted before simulation"));
        // Each interval its own point: nothing left to predict but the tail.
        let all: Vec<Sampled> = (0..5).map(|i| sampled(i, i, 0.2, 1.0)).collect();
        let own: Vec<usize> = (0..5).collect();
        let exact = predicted(&spread.0, &own, &all, 0.01, &prior).unwrap();
        assert!(
            (exact.band_pct - 100.0 * Z95 * 0.01).abs() < 1e-9,
            "{exact:?}"
        );
        // What the band refuses, the prediction refuses.
        assert!(predicted(&spread.0, &spread.1, &[], 0.0, &prior).is_err());
        let beyond = [sampled(0, 9, 1.0, 1.0)];
        assert!(predicted(&spread.0, &spread.1, &beyond, 0.0, &prior).is_err());
    }
}
