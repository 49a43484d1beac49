//! The error band of a sampled CPI estimate: a 95% interval derived from the sampling design,
//! not from a whole run.
//!
//! The estimate is stratified: each point h stands for a stratum S_h of intervals (its SimPoint
//! cluster, or a `--pick strata` part of one) with the share W_h of the run's instructions, and
//! the estimate is sum_h W_h c_h with c_h the point's simulated CPI. With one point per stratum
//! the simulator alone cannot say how much the members differ, so bbv's model stands in: every
//! interval has a first-order CPI estimate e_i from its per-interval metrics
//! ([`crate::strata::cpi_estimate`]). Assume each member's true CPI is k e_i (1 + u_i), with one
//! scale k for the run and independent relative misfits u_i of variance s^2. Then a point's CPI
//! differs from its stratum's mean by k (e_p - mean e) (the model's own spread, known) plus the
//! misfits' difference, of variance k^2 s^2 (e_p^2 (1 - 2 n_p/T) + sum n_i^2 e_i^2 / T^2)
//! (n the intervals' instructions, T their sum; zero for a stratum of one interval).
//!
//! The simulated points calibrate both: k is the points' simulated CPI over their estimates
//! (weighted by W), s^2 the weighted variance of their ratio to k e_p, pooled with a weak prior
//! ([`PRIOR_MISFIT`], one pseudo-point) so that one or two points still give a band. The run's
//! tail (instructions after the last whole interval) is unrepresented: its share f adds
//! (f x estimate)^2. Half-width: 1.96 times the square root of the sum.

use serde::{Deserialize, Serialize};

use crate::RundirError;

/// The model's relative misfit assumed before any point is simulated: a first-order model
/// (misses and mispredictions at round cycle costs) is commonly off by a fifth.
pub const PRIOR_MISFIT: f64 = 0.2;
/// Weight of the prior, in points.
const PRIOR_POINTS: f64 = 1.0;
/// Two-sided 95% normal quantile.
pub const Z95: f64 = 1.959_964;

/// One interval as the band sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Member {
    /// The point (its label) the interval belongs to.
    pub label: usize,
    /// Its instructions.
    pub instructions: f64,
    /// bbv's model's CPI estimate of it.
    pub estimate: f64,
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
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
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
    /// Standard deviation of the point's CPI about the stratum's mean, in CPI.
    pub sd_cpi: f64,
}

/// The 95% interval of an estimate and how it was derived (`simulation.json`'s `band`).
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Band {
    /// Half-width as a percentage of the estimate.
    pub band_pct: f64,
    /// The interval's ends, in CPI.
    pub low_cpi: f64,
    /// Upper end.
    pub high_cpi: f64,
    /// The simulator's CPI over bbv's model's (the calibration's scale k).
    pub scale: f64,
    /// The model's relative misfit s, pooled with the prior.
    pub misfit: f64,
    /// Share of the run after its last whole interval.
    pub tail_fraction: f64,
    /// One line on how the band was derived.
    pub derivation: String,
    /// Per stratum.
    pub strata: Vec<StratumBand>,
}

/// The band of `estimate` (the points' weighted CPI) from every interval of the run and the
/// simulated points. `tail_fraction` is the share of the run no interval holds.
pub fn band(
    members: &[Member],
    points: &[Sampled],
    estimate: f64,
    tail_fraction: f64,
) -> Result<Band, RundirError> {
    let invalid = |m: String| Err(RundirError::Invalid(m));
    if points.is_empty() {
        return invalid("no simulated point: no band".into());
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
    let w = |p: &Sampled| p.weight / total_w;
    let e_point = |p: &Sampled| members[p.interval].estimate.max(1e-9);
    // Calibration: one scale for the run, the points' relative misfit about it.
    let scale = points.iter().map(|p| w(p) * p.cpi).sum::<f64>()
        / points.iter().map(|p| w(p) * e_point(p)).sum::<f64>();
    let sum_w2: f64 = points.iter().map(|p| w(p) * w(p)).sum();
    let data_var = points
        .iter()
        .map(|p| w(p) * (p.cpi / (scale * e_point(p)) - 1.0).powi(2))
        .sum::<f64>();
    // Effective points beyond the one the scale used: 1/sum(w^2) - 1.
    let dof = (1.0 / sum_w2 - 1.0).max(0.0);
    let data_var = if sum_w2 < 1.0 {
        data_var / (1.0 - sum_w2)
    } else {
        0.0
    };
    let misfit_var =
        (PRIOR_POINTS * PRIOR_MISFIT * PRIOR_MISFIT + dof * data_var) / (PRIOR_POINTS + dof);
    let mut var = 0.0;
    let mut strata = Vec::with_capacity(points.len());
    for p in points {
        let st = stratum(members, p, w(p), scale, misfit_var);
        var += st.weight * st.weight * st.sd_cpi * st.sd_cpi;
        strata.push(st);
    }
    let tail = tail_fraction.clamp(0.0, 1.0);
    var += (tail * estimate).powi(2);
    let half = Z95 * var.sqrt();
    Ok(Band {
        band_pct: 100.0 * half / estimate,
        low_cpi: estimate - half,
        high_cpi: estimate + half,
        scale,
        misfit: misfit_var.sqrt(),
        tail_fraction: tail,
        derivation: format!(
            "stratified sampling, one point per stratum; members' spread from bbv's model \
             (metrics.csv) scaled by the points' simulated CPI (k = {scale:.3}, relative \
             misfit {:.3} from {} points and a prior of {PRIOR_MISFIT}); the tail's share \
             {tail:.4} added whole; warmup not included (see docs/champsim.md)",
            misfit_var.sqrt(),
            points.len()
        ),
        strata,
    })
}

/// Point `p`'s stratum: its members' model estimates, and the variance of the point's CPI
/// about their mean (offset from the mean plus the misfits' difference).
fn stratum(
    members: &[Member],
    p: &Sampled,
    weight: f64,
    scale: f64,
    misfit_var: f64,
) -> StratumBand {
    let (mut t, mut te, mut sum_n2e2, mut n) = (0.0, 0.0, 0.0, 0usize);
    for m in members.iter().filter(|m| m.label == p.label) {
        t += m.instructions;
        te += m.instructions * m.estimate;
        sum_n2e2 += (m.instructions * m.estimate).powi(2);
        n += 1;
    }
    let point = members[p.interval];
    let (mean, v) = if t > 0.0 && n > 1 {
        let mean = te / t;
        let offset = scale * (point.estimate - mean);
        let own = point.estimate.powi(2) * (1.0 - 2.0 * point.instructions / t);
        let misfit = scale * scale * misfit_var * (own + sum_n2e2 / (t * t)).max(0.0);
        (mean, offset * offset + misfit)
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
        sd_cpi: v.sqrt(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(spec: &[(usize, f64)]) -> Vec<Member> {
        spec.iter()
            .map(|&(label, estimate)| Member {
                label,
                instructions: 1e6,
                estimate,
            })
            .collect()
    }

    #[test]
    fn strata_of_one_interval_are_exact() {
        let m = members(&[(0, 1.0), (1, 2.0)]);
        let p = [
            Sampled {
                label: 0,
                interval: 0,
                weight: 0.5,
                cpi: 1.1,
            },
            Sampled {
                label: 1,
                interval: 1,
                weight: 0.5,
                cpi: 2.2,
            },
        ];
        let b = band(&m, &p, 1.65, 0.0).unwrap();
        assert_eq!(b.band_pct, 0.0);
        assert!((b.scale - 1.1).abs() < 1e-12);
        assert_eq!(b.low_cpi, 1.65);
    }

    #[test]
    fn a_wider_stratum_or_a_worse_fit_widens_the_band() {
        let like = members(&[(0, 1.0), (0, 1.0), (0, 1.02), (1, 2.0), (1, 2.0)]);
        let spread = members(&[(0, 0.6), (0, 1.0), (0, 1.4), (1, 2.0), (1, 2.0)]);
        let p = |c1: f64| {
            [
                Sampled {
                    label: 0,
                    interval: 1,
                    weight: 0.6,
                    cpi: 1.0,
                },
                Sampled {
                    label: 1,
                    interval: 3,
                    weight: 0.4,
                    cpi: c1,
                },
            ]
        };
        let narrow = band(&like, &p(2.0), 1.4, 0.0).unwrap();
        let wide = band(&spread, &p(2.0), 1.4, 0.0).unwrap();
        let misfit = band(&like, &p(3.0), 1.8, 0.0).unwrap();
        assert!(narrow.band_pct > 0.0);
        assert!(wide.band_pct > narrow.band_pct, "{wide:?} {narrow:?}");
        assert!(misfit.misfit > narrow.misfit);
        // By hand: k = 1, misfit^2 = prior pooled with nothing more (both points on the line).
        let dof = 1.0 / (0.36 + 0.16) - 1.0;
        let s2 = PRIOR_MISFIT * PRIOR_MISFIT / (1.0 + dof);
        let mean0: f64 = (1.0 + 1.0 + 1.02) / 3.0;
        let v0 = (1.0 - mean0).powi(2)
            + s2 * (1.0 * (1.0 - 2.0 / 3.0) + (1.0 + 1.0 + 1.02f64.powi(2)) / 9.0);
        let v1 = s2 * (4.0 * (1.0 - 1.0) + (4.0 + 4.0) / 4.0);
        let half = Z95 * (0.36 * v0 + 0.16 * v1).sqrt();
        assert!(
            (narrow.band_pct - 100.0 * half / 1.4).abs() < 1e-9,
            "{narrow:?}"
        );
    }

    #[test]
    fn the_tail_counts_whole() {
        let m = members(&[(0, 1.0)]);
        let p = [Sampled {
            label: 0,
            interval: 0,
            weight: 1.0,
            cpi: 1.0,
        }];
        let b = band(&m, &p, 1.0, 0.01).unwrap();
        assert!((b.band_pct - Z95).abs() < 1e-9);
    }

    #[test]
    fn bad_points_are_refused() {
        let m = members(&[(0, 1.0)]);
        let ok = Sampled {
            label: 0,
            interval: 0,
            weight: 1.0,
            cpi: 1.0,
        };
        assert!(band(&m, &[], 1.0, 0.0).is_err());
        assert!(band(&m, &[Sampled { interval: 5, ..ok }], 1.0, 0.0).is_err());
        assert!(band(
            &m,
            &[Sampled {
                cpi: f64::NAN,
                ..ok
            }],
            1.0,
            0.0
        )
        .is_err());
        assert!(band(&m, &[Sampled { cpi: 0.0, ..ok }], 1.0, 0.0).is_err());
        assert!(band(&m, &[Sampled { weight: 0.0, ..ok }], 1.0, 0.0).is_err());
        assert!(band(&m, &[ok], f64::INFINITY, 0.0).is_err());
    }
}
