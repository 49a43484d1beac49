//! Launch sampling scored against the hardware: a run's launches with their times measured on
//! the GPU (`bbv gpu run --repeat`), picked by bbv's rule and by published ones, and each
//! selection's estimate of the run's total GPU time against the measured total.
//!
//! A selection is a set of launches, each with a multiplier: the run's time is estimated as
//! the sum of each pick's time times its multiplier. Rules that look at times (PKA's choice of
//! k, STEM's sample sizes) see the first timing run only, and every rule is scored on the other
//! runs: no rule is scored on the times it chose from (with a single run the score is in-sample,
//! and says so).

use crate::blocks::Vector;
use crate::sample::{clusters, strata, Groups};
use crate::GpuError;

/// One launch of a timed run.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedLaunch {
    /// Kernel name, mangled.
    pub kernel: String,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Registers per thread.
    pub registers: u32,
    /// Shared memory per block, in bytes.
    pub shared: u64,
    /// Warp-level instructions (the counted run's).
    pub warp_insts: u64,
    /// Its time on the GPU in each timing run, in nanoseconds.
    pub ns: Vec<u64>,
}

/// A selection rule.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Rule {
    /// bbv's: the launches' basic-block vectors clustered (SimPoint's search up to `max_k`), a
    /// launch per cluster standing for the cluster's instructions.
    Bbv {
        /// Largest k tried.
        max_k: usize,
    },
    /// Sieve's (Naderan-Tahan, SeyyedAghaei and Eeckhout, ISPASS 2023): strata of one kernel
    /// whose instruction counts lie within `spread` of the stratum's first, the launch nearest
    /// the stratum's mean count standing for its instructions. Departs from the paper: strata
    /// are cut at a fixed relative width rather than from the kernel's count distribution.
    Sieve {
        /// Relative width of a stratum.
        spread: f64,
    },
    /// PKA's (Baddouh et al., MICRO 2021): k-means over per-launch features, k the smallest
    /// (up to `max_k`) whose projection of the first run's time is within 5%, the launch
    /// nearest each centre standing for its cluster's launch count. Departs from the paper: the
    /// features are what bbv records (instructions, grid, block, registers, shared memory),
    /// not Nsight Compute's metrics, and no principal-component step.
    Pka {
        /// Largest k tried.
        max_k: usize,
    },
    /// Execution-time sampling per kernel, as STEM (2025) is summarised: each kernel's launches
    /// sampled at random, as many as bound its mean time's error to 5% at 95% confidence given
    /// the first run's spread, each standing for its kernel's launches over the sample size.
    /// Departs from the paper: its multi-level grouping is not reproduced.
    Stem,
}

impl Rule {
    /// The rule's name in tables.
    pub fn name(&self) -> &'static str {
        match self {
            Rule::Bbv { .. } => "bbv",
            Rule::Sieve { .. } => "sieve",
            Rule::Pka { .. } => "pka",
            Rule::Stem => "stem",
        }
    }
}

/// Picks: (launch index, multiplier of its time).
pub type Selection = Vec<(usize, f64)>;

/// A selection's score against the measured times.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    /// The rule.
    pub rule: Rule,
    /// Launches picked.
    pub picked: usize,
    /// Mean over the scored runs of the estimate, in nanoseconds.
    pub estimate_ns: f64,
    /// Mean over the scored runs of the measured total, in nanoseconds.
    pub actual_ns: f64,
    /// Mean signed relative error over the scored runs.
    pub error: f64,
    /// Largest relative error over the scored runs.
    pub worst: f64,
    /// Scored on the run the rule chose from (there was one run only).
    pub in_sample: bool,
}

/// Checks the records: launches, a time per run for each, the same number of runs.
fn check(launches: &[TimedLaunch], vectors: Option<&[Vector]>) -> Result<usize, GpuError> {
    let runs = launches.first().map_or(0, |l| l.ns.len());
    if launches.is_empty() || runs == 0 {
        return Err(GpuError::Unsupported(
            "no launch with a measured time: record with `bbv gpu run --repeat N`".into(),
        ));
    }
    if let Some((i, _)) = launches
        .iter()
        .enumerate()
        .find(|(_, l)| l.ns.len() != runs)
    {
        return Err(GpuError::Unsupported(format!(
            "launch {i} has {} times, launch 0 {runs}",
            launches[i].ns.len()
        )));
    }
    if let Some(v) = vectors.filter(|v| v.len() != launches.len()) {
        return Err(GpuError::Unsupported(format!(
            "{} basic-block vectors for {} launches: not the same run",
            v.len(),
            launches.len()
        )));
    }
    Ok(runs)
}

/// The picks of `rule` (`vectors`: the launches' basic-block vectors, which bbv's rule needs).
pub fn select(
    launches: &[TimedLaunch],
    vectors: Option<&[Vector]>,
    rule: Rule,
) -> Result<Selection, GpuError> {
    check(launches, vectors)?;
    let by_insts = |groups: Groups| -> Selection {
        (groups.into_iter())
            .map(|(rep, members)| {
                let total: u64 = members.iter().map(|&m| launches[m].warp_insts).sum();
                (rep, total as f64 / launches[rep].warp_insts.max(1) as f64)
            })
            .collect()
    };
    match rule {
        Rule::Bbv { max_k } => {
            let v = vectors.ok_or_else(|| {
                GpuError::Unsupported("bbv's rule needs the launches' vectors (bbv.bb)".into())
            })?;
            Ok(by_insts(clusters(v, max_k.clamp(1, launches.len()))?.0))
        }
        Rule::Sieve { spread } => {
            let keys: Vec<(&str, u64)> = (launches.iter())
                .map(|l| (l.kernel.as_str(), l.warp_insts))
                .collect();
            Ok(by_insts(strata(&keys, spread)))
        }
        Rule::Pka { max_k } => Ok(pka(launches, max_k)),
        Rule::Stem => Ok(stem(launches)),
    }
}

/// `selection`'s estimate of run `run`'s total time, in nanoseconds.
pub fn estimate(launches: &[TimedLaunch], selection: &Selection, run: usize) -> f64 {
    (selection.iter())
        .map(|&(l, w)| w * launches[l].ns[run] as f64)
        .sum()
}

/// `rule` chosen on the first run and scored on the others.
pub fn score(
    launches: &[TimedLaunch],
    vectors: Option<&[Vector]>,
    rule: Rule,
) -> Result<Score, GpuError> {
    // select checks the records: every launch has as many times as the first.
    let selection = select(launches, vectors, rule)?;
    let runs = launches[0].ns.len();
    let scored: Vec<usize> = if runs > 1 {
        (1..runs).collect()
    } else {
        vec![0]
    };
    let (mut est, mut act, mut err, mut worst) = (0.0, 0.0, 0.0, 0.0f64);
    for &r in &scored {
        let e = estimate(launches, &selection, r);
        let a: f64 = launches.iter().map(|l| l.ns[r] as f64).sum();
        let rel = if a > 0.0 { e / a - 1.0 } else { 0.0 };
        (est, act, err) = (est + e, act + a, err + rel);
        worst = worst.max(rel.abs());
    }
    let n = scored.len() as f64;
    Ok(Score {
        rule,
        picked: selection.len(),
        estimate_ns: est / n,
        actual_ns: act / n,
        error: err / n,
        worst,
        in_sample: runs == 1,
    })
}

/// PKA's rule (see [`Rule::Pka`]).
fn pka(launches: &[TimedLaunch], max_k: usize) -> Selection {
    let points = features(launches);
    let actual: f64 = launches.iter().map(|l| l.ns[0] as f64).sum();
    let max_k = max_k.clamp(1, launches.len());
    let mut last = Vec::new();
    for k in 1..=max_k {
        let selection: Selection = (kmeans(&points, k).into_iter())
            .map(|(rep, members)| (rep, members.len() as f64))
            .collect();
        let projected = estimate(launches, &selection, 0);
        if actual == 0.0 || (projected / actual - 1.0).abs() < 0.05 {
            return selection;
        }
        last = selection;
    }
    last
}

/// Per-launch features, each column scaled to unit spread (a constant column is left at 0).
fn features(launches: &[TimedLaunch]) -> Vec<Vec<f64>> {
    let ln = |x: f64| (1.0 + x).ln();
    let threads = |d: [u32; 3]| d.iter().map(|&x| x as f64).product::<f64>();
    let mut rows: Vec<Vec<f64>> = (launches.iter())
        .map(|l| {
            vec![
                ln(l.warp_insts as f64),
                ln(threads(l.grid)),
                ln(threads(l.block)),
                l.registers as f64,
                ln(l.shared as f64),
            ]
        })
        .collect();
    for c in 0..rows[0].len() {
        let n = rows.len() as f64;
        let mean = rows.iter().map(|r| r[c]).sum::<f64>() / n;
        let sd = (rows.iter().map(|r| (r[c] - mean).powi(2)).sum::<f64>() / n).sqrt();
        for r in &mut rows {
            r[c] = if sd > 0.0 { (r[c] - mean) / sd } else { 0.0 };
        }
    }
    rows
}

fn dist2(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| (x - y).powi(2)).sum()
}

/// Lloyd's k-means from a farthest-first start (deterministic); each cluster's launch nearest
/// its centre (the first in launch order on ties) and its members.
fn kmeans(points: &[Vec<f64>], k: usize) -> Groups {
    let nearest = |centres: &[Vec<f64>], p: &[f64]| -> usize {
        (0..centres.len())
            .min_by(|&a, &b| dist2(&centres[a], p).total_cmp(&dist2(&centres[b], p)))
            .unwrap_or(0)
    };
    let mut centres = vec![points[0].clone()];
    while centres.len() < k {
        let far = (0..points.len())
            .max_by(|&a, &b| {
                let da = dist2(&centres[nearest(&centres, &points[a])], &points[a]);
                let db = dist2(&centres[nearest(&centres, &points[b])], &points[b]);
                da.total_cmp(&db).then(b.cmp(&a))
            })
            .unwrap_or(0);
        centres.push(points[far].clone());
    }
    let mut labels = vec![usize::MAX; points.len()];
    for _ in 0..100 {
        let next: Vec<usize> = points.iter().map(|p| nearest(&centres, p)).collect();
        if next == labels {
            break;
        }
        labels = next;
        for (c, centre) in centres.iter_mut().enumerate() {
            let members: Vec<&Vec<f64>> = (points.iter().zip(&labels))
                .filter(|(_, &l)| l == c)
                .map(|(p, _)| p)
                .collect();
            if members.is_empty() {
                continue;
            }
            for (d, x) in centre.iter_mut().enumerate() {
                *x = members.iter().map(|p| p[d]).sum::<f64>() / members.len() as f64;
            }
        }
    }
    (0..centres.len())
        .filter_map(|c| {
            let members: Vec<usize> = (0..points.len()).filter(|&i| labels[i] == c).collect();
            let rep = *members.iter().min_by(|&&a, &&b| {
                dist2(&points[a], &centres[c]).total_cmp(&dist2(&points[b], &centres[c]))
            })?;
            Some((rep, members))
        })
        .collect()
}

/// STEM's rule as summarised (see [`Rule::Stem`]): a seeded random sample per kernel.
fn stem(launches: &[TimedLaunch]) -> Selection {
    const Z: f64 = 1.96;
    const ERROR: f64 = 0.05;
    let mut kernels: Vec<(&str, Vec<usize>)> = Vec::new();
    for (i, l) in launches.iter().enumerate() {
        match kernels.iter_mut().find(|(k, _)| *k == l.kernel) {
            Some(k) => k.1.push(i),
            None => kernels.push((&l.kernel, vec![i])),
        }
    }
    let mut rng = bbv_simpoint::Random::new(i64::from(bbv_simpoint::DEFAULT_SEED_PROJ));
    let mut selection = Selection::new();
    for (_, mut members) in kernels {
        let t: Vec<f64> = members.iter().map(|&m| launches[m].ns[0] as f64).collect();
        let n = t.len() as f64;
        let mean = t.iter().sum::<f64>() / n;
        let sd = (t.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n).sqrt();
        let want = if mean > 0.0 {
            (Z * sd / (ERROR * mean)).powi(2).ceil() as usize
        } else {
            1
        };
        let take = want.clamp(1, members.len());
        // A partial Fisher-Yates shuffle: the first `take` are a uniform sample.
        for i in 0..take {
            let j = i + (rng.rand_int() as usize) % (members.len() - i);
            members.swap(i, j);
        }
        let w = members.len() as f64 / take as f64;
        let mut picked: Vec<usize> = members[..take].to_vec();
        picked.sort_unstable();
        selection.extend(picked.into_iter().map(|m| (m, w)));
    }
    selection.sort_by_key(|p| p.0);
    selection
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(kernel: &str, insts: u64, ns: &[u64]) -> TimedLaunch {
        TimedLaunch {
            kernel: kernel.into(),
            grid: [insts.min(1000) as u32, 1, 1],
            block: [128, 1, 1],
            registers: 32,
            shared: 0,
            warp_insts: insts,
            ns: ns.to_vec(),
        }
    }

    /// Two kernels: `a` of two sizes (time follows instructions), `b` of one size whose time
    /// varies.
    fn workload() -> Vec<TimedLaunch> {
        let mut v = Vec::new();
        for i in 0..40u64 {
            v.push(launch("a", 1000, &[100, 101]));
            v.push(launch("a", 5000, &[500, 498]));
            v.push(launch("b", 300, &[200 + 10 * (i % 4), 205 + 10 * (i % 4)]));
        }
        v
    }

    #[test]
    fn every_rule_estimates_an_easy_workload_closely_from_few_launches() {
        let w = workload();
        let vectors: Vec<Vector> = (w.iter())
            .map(|l| vec![(if l.kernel == "a" { 1 } else { 2 }, l.warp_insts)])
            .collect();
        let total: f64 = w.iter().map(|l| l.ns[1] as f64).sum();
        for rule in [
            Rule::Bbv { max_k: 10 },
            Rule::Sieve { spread: 0.1 },
            Rule::Pka { max_k: 10 },
            Rule::Stem,
        ] {
            let s = score(&w, Some(&vectors), rule).unwrap();
            assert!(!s.in_sample);
            assert!((s.actual_ns - total).abs() < 1e-6, "{s:?}");
            assert!(s.error.abs() < 0.03, "{s:?}");
            assert!(s.worst >= s.error.abs());
            // STEM samples by kernel name alone: kernel a's two sizes make its times spread too
            // widely for a sample to bound, so it takes all of a.
            let few = if rule == Rule::Stem {
                w.len()
            } else {
                w.len() / 2 - 1
            };
            assert!(s.picked >= 2 && s.picked <= few, "{s:?}");
            let sel = select(&w, Some(&vectors), rule).unwrap();
            assert_eq!(sel.len(), s.picked);
            assert!((estimate(&w, &sel, 1) - s.estimate_ns).abs() < 1e-6);
        }
        // Sieve's strata: a of 1000, a of 5000, b; each pick stands for its stratum's 40.
        let sel = select(&w, None, Rule::Sieve { spread: 0.1 }).unwrap();
        assert_eq!(sel.len(), 3);
        assert!(sel.iter().all(|&(_, m)| (m - 40.0).abs() < 1e-9), "{sel:?}");
    }

    #[test]
    fn stem_samples_more_of_a_kernel_whose_time_varies() {
        let mut w = workload();
        // Kernel a of one size, its time steady.
        for l in w.iter_mut().filter(|l| l.kernel == "a") {
            (l.warp_insts, l.ns) = (1000, vec![100 + l.ns[0] % 3, 100]);
        }
        for (i, l) in w.iter_mut().enumerate().filter(|(_, l)| l.kernel == "b") {
            l.ns = vec![100 + (i as u64 * 37) % 300, 150];
        }
        let sel = select(&w, None, Rule::Stem).unwrap();
        let of = |k: &str| sel.iter().filter(|&&(l, _)| w[l].kernel == k).count();
        assert!(of("b") > of("a"), "{sel:?}");
        // The same picks every time (seeded).
        assert_eq!(sel, select(&w, None, Rule::Stem).unwrap());
    }

    #[test]
    fn records_that_cannot_be_scored_are_refused() {
        let e = score(&[], None, Rule::Stem).unwrap_err();
        assert!(
            e.to_string().contains("no launch with a measured time"),
            "{e}"
        );
        let mut w = workload();
        w[3].ns.pop();
        let e = score(&w, None, Rule::Stem).unwrap_err();
        assert!(
            e.to_string().contains("launch 3 has 1 times, launch 0 2"),
            "{e}"
        );
        let w = workload();
        let e = score(&w, None, Rule::Bbv { max_k: 5 }).unwrap_err();
        assert!(e.to_string().contains("needs the launches' vectors"), "{e}");
        let e = score(&w, Some(&[vec![(0, 1)]]), Rule::Sieve { spread: 0.1 }).unwrap_err();
        assert!(
            e.to_string()
                .contains("1 basic-block vectors for 120 launches"),
            "{e}"
        );
        // One run: scored in-sample, and said so.
        let one: Vec<TimedLaunch> = (w.into_iter())
            .map(|mut l| {
                l.ns.truncate(1);
                l
            })
            .collect();
        assert!(score(&one, None, Rule::Pka { max_k: 5 }).unwrap().in_sample);
    }
}
