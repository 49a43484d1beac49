//! Launch selection: bbv's rule and the published ones, each giving picks and weights from the
//! same records, and a selection's estimate of a run's total GPU time against the measured one.
//!
//! Rules that look at times (PKA's choice of k, STEM's sample sizes) see the first timing run
//! only, and a selection is scored on the other runs: no rule is scored on the times it chose
//! from (with a single run the score is in-sample, and says so).

use crate::blocks::Vector;
use crate::sample::{strata, stratified_clusters, Groups, Pick};
pub use crate::timed::{estimate, TimedLaunch};
use crate::timed::{pka, stem};
use crate::GpuError;

/// A selection rule.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Rule {
    /// bbv's: Sieve's strata, each split by its launches' basic-block vectors where they place
    /// more than `spread` of their instructions differently; each group's launch nearest its
    /// mean instruction count standing for its instructions. A launch never stands for another
    /// kernel's, nor for one of another size or another path through the kernel.
    #[default]
    Bbv,
    /// Sieve's (Naderan-Tahan, SeyyedAghaei and Eeckhout, ISPASS 2023): strata of one kernel
    /// whose instruction counts lie within `spread` of the stratum's first, the launch nearest
    /// the stratum's mean count standing for its instructions. Departs from the paper: strata
    /// are cut at a fixed relative width rather than from the kernel's count distribution.
    Sieve,
    /// PKA's (Baddouh et al., MICRO 2021): k-means over per-launch features, k the smallest
    /// (up to `max_k`) whose projection of the first run's time is within 5%, the launch
    /// nearest each centre standing for its cluster's launch count. Departs from the paper: the
    /// features are what bbv records (instructions, grid, block, registers, shared memory),
    /// not Nsight Compute's metrics, and no principal-component step.
    Pka,
    /// Execution-time sampling per kernel, as STEM (2025) is summarised: each kernel's launches
    /// sampled at random, as many as bound its mean time's error to 5% at 95% confidence given
    /// the first run's spread, each standing for its kernel's launches over the sample size.
    /// Departs from the paper: its multi-level grouping is not reproduced.
    Stem,
}

impl Rule {
    /// Every rule, in the order tables list them.
    pub const ALL: [Rule; 4] = [Rule::Bbv, Rule::Sieve, Rule::Pka, Rule::Stem];

    /// The rule's name (`--method`, tables).
    pub fn name(self) -> &'static str {
        match self {
            Rule::Bbv => "bbv",
            Rule::Sieve => "sieve",
            Rule::Pka => "pka",
            Rule::Stem => "stem",
        }
    }

    /// How the picks were made, in words.
    pub fn how(self) -> &'static str {
        match self {
            Rule::Bbv => "strata by kernel and instruction count, split by basic-block mix",
            Rule::Sieve => "stratified by kernel name and instruction count (Sieve)",
            Rule::Pka => "k-means over launch features, k by the first timing run (PKA)",
            Rule::Stem => "per-kernel random samples sized by the first timing run (STEM)",
        }
    }

    /// The rule reads the launches' GPU times, not only their counts (without times, it reads
    /// their warp instructions instead).
    pub fn needs_times(self) -> bool {
        matches!(self, Rule::Pka | Rule::Stem)
    }
}

impl std::str::FromStr for Rule {
    type Err = String;

    fn from_str(s: &str) -> Result<Rule, String> {
        Rule::ALL
            .into_iter()
            .find(|r| r.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Rule::ALL.iter().map(|r| r.name()).collect();
                format!("unknown method {s:?}: one of {}", names.join(", "))
            })
    }
}

/// How launches are picked: the rule and its settings.
#[derive(Clone, Copy, Debug)]
pub struct SampleOptions {
    /// The rule.
    pub rule: Rule,
    /// Largest k tried (PKA's rule).
    pub max_k: usize,
    /// How far apart launches standing for each other may be (bbv's and Sieve's rules): in
    /// instruction count, relative, and (bbv's) in the fraction of instructions their
    /// basic-block vectors place differently.
    pub spread: f64,
}

impl Default for SampleOptions {
    fn default() -> SampleOptions {
        SampleOptions {
            rule: Rule::default(),
            max_k: 20,
            spread: 0.1,
        }
    }
}

/// The largest `--max-k` (as `bbv run`'s).
pub const MAX_K: usize = 1 << 20;

impl SampleOptions {
    /// Refuses options out of range (checked before a trace is read, and for every GPU job of
    /// a suite before any job runs).
    pub fn check(&self) -> Result<(), GpuError> {
        if self.max_k == 0 {
            return Err(GpuError::Unsupported("--max-k must be at least 1".into()));
        }
        if self.max_k > MAX_K {
            return Err(GpuError::Unsupported(format!(
                "--max-k {}: at most {MAX_K} (k is also limited to the launches)",
                self.max_k
            )));
        }
        if !(self.spread.is_finite() && self.spread >= 0.0) {
            return Err(GpuError::Unsupported(
                "--spread must be a non-negative number".into(),
            ));
        }
        Ok(())
    }
}

/// Checks the records: launches, as many times for each (maybe none), and a vector per launch.
/// Returns the number of timing runs.
fn check(launches: &[TimedLaunch], vectors: Option<&[Vector]>) -> Result<usize, GpuError> {
    let runs = launches.first().map_or(0, |l| l.ns.len());
    if launches.is_empty() {
        return Err(GpuError::Unsupported(
            "no kernel launch to pick from".into(),
        ));
    }
    if let Some((i, l)) = (launches.iter().enumerate()).find(|(_, l)| l.ns.len() != runs) {
        return Err(GpuError::Unsupported(format!(
            "launch {i} has {} times, launch 0 {runs}",
            l.ns.len()
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

/// The picks of `o.rule` (`vectors`: the launches' basic-block vectors, which bbv's rule needs).
/// Without times (a trace, a run without `--repeat`), the rules that read them read each
/// launch's warp instructions instead ([`Rule::needs_times`]).
pub fn select(
    launches: &[TimedLaunch],
    vectors: Option<&[Vector]>,
    o: &SampleOptions,
) -> Result<Vec<Pick>, GpuError> {
    o.check()?;
    let proxied: Vec<TimedLaunch>;
    let launches = match check(launches, vectors)? {
        0 if o.rule.needs_times() => {
            proxied = (launches.iter())
                .map(|l| TimedLaunch {
                    ns: vec![l.warp_insts],
                    ..l.clone()
                })
                .collect();
            &proxied[..]
        }
        _ => launches,
    };
    let max_k = o.max_k.clamp(1, launches.len());
    let keys: Vec<(&str, u64)> = (launches.iter())
        .map(|l| (l.kernel.as_str(), l.warp_insts))
        .collect();
    Ok(match o.rule {
        Rule::Bbv => {
            let v = vectors.ok_or_else(|| {
                GpuError::Unsupported("bbv's rule needs the launches' vectors (bbv.bb)".into())
            })?;
            by_insts(launches, stratified_clusters(&keys, v, o.spread))
        }
        Rule::Sieve => by_insts(launches, strata(&keys, o.spread)),
        Rule::Pka => pka(launches, max_k),
        Rule::Stem => stem(launches),
    })
}

/// Each group's representative standing for the group's warp instructions.
fn by_insts(launches: &[TimedLaunch], groups: Groups) -> Vec<Pick> {
    (groups.into_iter())
        .map(|(launch, members)| {
            let total: u64 = members.iter().map(|&m| launches[m].warp_insts).sum();
            let weight = total as f64 / launches[launch].warp_insts.max(1) as f64;
            Pick {
                launch,
                members,
                weight,
            }
        })
        .collect()
}

/// A selection's score against the measured times.
#[derive(Clone, Debug, PartialEq)]
pub struct Score {
    /// The rule.
    pub rule: Rule,
    /// Launches picked.
    pub picked: usize,
    /// The estimate of each scored run, in nanoseconds.
    pub estimate_ns: Vec<f64>,
    /// The measured total of each scored run, in nanoseconds.
    pub actual_ns: Vec<f64>,
    /// Mean signed relative error over the scored runs.
    pub error: f64,
    /// Largest relative error over the scored runs.
    pub worst: f64,
    /// Scored on the run the rule chose from (there was one run only).
    pub in_sample: bool,
    /// How far apart the measured totals of every run are ([`crate::timed::spread`]): no
    /// error smaller than this tells rules apart.
    pub runs_apart: f64,
}

impl Score {
    /// Mean over the scored runs of the estimate, in nanoseconds.
    pub fn mean_estimate_ns(&self) -> f64 {
        self.estimate_ns.iter().sum::<f64>() / self.estimate_ns.len().max(1) as f64
    }

    /// Mean over the scored runs of the measured total, in nanoseconds.
    pub fn mean_actual_ns(&self) -> f64 {
        self.actual_ns.iter().sum::<f64>() / self.actual_ns.len().max(1) as f64
    }
}

/// The records' timing runs: an error when the records hold none.
fn timed_runs(launches: &[TimedLaunch]) -> Result<usize, GpuError> {
    match check(launches, None)? {
        0 => Err(GpuError::Unsupported(
            "no launch with a measured time: record with `bbv gpu run --repeat N`".into(),
        )),
        runs => Ok(runs),
    }
}

/// `picks` (made by `rule` from the first run) scored on the other runs.
pub fn score_picks(
    launches: &[TimedLaunch],
    picks: &[Pick],
    rule: Rule,
) -> Result<Score, GpuError> {
    let runs = timed_runs(launches)?;
    let scored: Vec<usize> = if runs > 1 {
        (1..runs).collect()
    } else {
        vec![0]
    };
    let totals: Vec<u64> = (0..runs)
        .map(|r| launches.iter().map(|l| l.ns[r]).sum())
        .collect();
    let estimate_ns: Vec<f64> = scored
        .iter()
        .map(|&r| estimate(launches, picks, r))
        .collect();
    let actual_ns: Vec<f64> = scored.iter().map(|&r| totals[r] as f64).collect();
    let rel: Vec<f64> = (estimate_ns.iter().zip(&actual_ns))
        .map(|(e, a)| if *a > 0.0 { e / a - 1.0 } else { 0.0 })
        .collect();
    Ok(Score {
        runs_apart: crate::timed::spread(&totals),
        rule,
        picked: picks.len(),
        error: rel.iter().sum::<f64>() / rel.len() as f64,
        worst: rel.iter().fold(0.0, |w, r| r.abs().max(w)),
        estimate_ns,
        actual_ns,
        in_sample: runs == 1,
    })
}

/// `o.rule` chosen on the first run and scored on the others.
pub fn score(
    launches: &[TimedLaunch],
    vectors: Option<&[Vector]>,
    o: &SampleOptions,
) -> Result<Score, GpuError> {
    // The records' own faults first: a run never timed is refused as such, whatever the rule.
    timed_runs(launches)?;
    let picks = select(launches, vectors, o)?;
    score_picks(launches, &picks, o.rule)
}

#[cfg(test)]
#[path = "select_tests.rs"]
mod tests;
