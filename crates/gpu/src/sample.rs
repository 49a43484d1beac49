//! Kernel sampling: pick representative launches, weight them, and estimate every counted metric
//! of the whole run from the sample, with its error against the full trace.

use std::collections::BTreeMap;

use bbv_simpoint::{cluster, KChoice, Options, PostResult, Prepared, Projection, Quiet};

use crate::blocks::{BlockVectors, Vector};
use crate::{GpuError, KernelCount};

/// How launches are grouped.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// Cluster the launches' basic-block vectors (SimPoint, k searched up to `max_k`).
    Cluster {
        /// Largest k tried.
        max_k: usize,
    },
    /// Sieve-style strata: same kernel name, and instruction counts within `spread` (relative)
    /// of the stratum's first launch.
    Stratified {
        /// Relative width of an instruction-count stratum.
        spread: f64,
    },
}

/// A k tried by [`Method::Cluster`] and its BIC.
pub type KScore = (usize, f64);

/// A chosen launch and what it stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    /// 0-based launch index.
    pub launch: usize,
    /// Launches it represents (itself included).
    pub members: Vec<usize>,
    /// Multiplier of its metrics in the estimate: the members' warp instructions over its own.
    pub weight: f64,
}

/// One metric's truth and estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct Estimate {
    /// Metric name.
    pub metric: String,
    /// Value over the full trace.
    pub actual: f64,
    /// Value estimated from the picks.
    pub estimate: f64,
}

impl Estimate {
    /// Relative error (0 when both are 0).
    pub fn relative_error(&self) -> f64 {
        if self.actual == 0.0 {
            if self.estimate == 0.0 {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (self.estimate - self.actual).abs() / self.actual
        }
    }
}

/// Picks representative launches.
pub fn pick(
    counts: &[KernelCount],
    bv: &BlockVectors,
    method: Method,
) -> Result<Vec<Pick>, GpuError> {
    pick_scored(counts, bv, method).map(|(picks, _)| picks)
}

/// [`pick`], and with [`Method::Cluster`] also every k tried and its BIC (ascending k).
pub fn pick_scored(
    counts: &[KernelCount],
    bv: &BlockVectors,
    method: Method,
) -> Result<(Vec<Pick>, Vec<KScore>), GpuError> {
    let n = counts.len();
    if n == 0 {
        return Err(GpuError::Unsupported(
            "the kernel list launches no kernel".into(),
        ));
    }
    let (groups, scores) = match method {
        Method::Stratified { spread } => {
            let keys: Vec<(&str, u64)> = (counts.iter())
                .map(|c| (c.header.name.as_str(), c.warp_insts))
                .collect();
            (strata(&keys, spread), Vec::new())
        }
        Method::Cluster { max_k } => clusters(&bv.vectors, max_k.clamp(1, n))?,
    };
    let picks = groups
        .into_iter()
        .map(|(rep, members)| {
            let total: u64 = members.iter().map(|&m| counts[m].warp_insts).sum();
            let own = counts[rep].warp_insts.max(1);
            Pick {
                launch: rep,
                members,
                weight: total as f64 / own as f64,
            }
        })
        .collect();
    Ok((picks, scores))
}

/// Launches in groups: (the representative, the members).
pub(crate) type Groups = Vec<(usize, Vec<usize>)>;

/// Strata of launches by kernel name and instruction count (`keys`: each launch's; within
/// `spread` of the stratum's first).
pub(crate) fn strata(keys: &[(&str, u64)], spread: f64) -> Groups {
    let mut strata: Vec<(&str, f64, usize, Vec<usize>)> = Vec::new();
    for (i, &(kernel, n)) in keys.iter().enumerate() {
        let insts = n as f64;
        let found = strata.iter_mut().find(|(name, base, _, _)| {
            *name == kernel && (insts - base).abs() <= spread * base.max(1.0)
        });
        match found {
            Some(s) => s.3.push(i),
            None => strata.push((kernel, insts, i, vec![i])),
        }
    }
    strata
        .into_iter()
        .map(|(_, _, _, members)| {
            // The member closest to the stratum's mean instruction count represents it.
            let mean =
                members.iter().map(|&m| keys[m].1 as f64).sum::<f64>() / members.len() as f64;
            let distance = |m: usize| (keys[m].1 as f64 - mean).abs();
            let best = members
                .iter()
                .map(|&m| distance(m))
                .fold(f64::INFINITY, f64::min);
            let tied: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&m| distance(m) == best)
                .collect();
            (middle(&tied), members)
        })
        .collect()
}

/// Clusters of the launches' vectors (SimPoint's search up to `max_k`), and each k's BIC.
pub(crate) fn clusters(
    vectors: &[Vector],
    max_k: usize,
) -> Result<(Groups, Vec<KScore>), GpuError> {
    // The vectors go through SimPoint exactly as a .bb file would.
    let mut w = bbv_profile::BbvWriter::new(Vec::new());
    for v in vectors {
        if v.is_empty() {
            return Err(GpuError::Unsupported(
                "a launch executed no instruction: it has no basic-block vector".into(),
            ));
        }
        w.write_vector(v)
            .map_err(|e| GpuError::Unsupported(e.to_string()))?;
    }
    let text = w
        .finish()
        .map_err(|e| GpuError::Unsupported(e.to_string()))?;
    let mut reader = bbv_profile::BbvReader::new(&text[..], "launch vectors");
    let loaded = bbv_simpoint::load_vectors(
        &mut reader,
        &Projection::Random {
            dim: bbv_simpoint::DEFAULT_DIM,
            seed: i64::from(bbv_simpoint::DEFAULT_SEED_PROJ),
        },
        |_| {},
    )
    .map_err(|e| GpuError::Unsupported(e.to_string()))?;
    // Weighted by instruction count (SimPoint's -fixedLength off).
    let data = loaded.vectors;
    let opts = Options {
        k: KChoice::Search { max_k },
        ..Options::default()
    };
    let prep = Prepared::new(&data, &opts).map_err(|e| GpuError::Unsupported(e.to_string()))?;
    let result = cluster(&prep, &opts, &Quiet).map_err(|e| GpuError::Unsupported(e.to_string()))?;
    let mut scores: Vec<KScore> = result.runs.iter().map(|r| (r.k, r.bic)).collect();
    scores.sort_by_key(|s| s.0);
    let post = PostResult::new(&data, &result.runs[result.best].centres);
    let mut by_cluster: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    for (i, &l) in post.labels.iter().enumerate() {
        by_cluster.entry(l).or_default().push(i);
    }
    let groups = by_cluster
        .into_iter()
        .map(|(c, members)| {
            let rep = post.simpoints[c as usize] as usize;
            // Launches with the representative's very vector are as near the centre as it is.
            let tied: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&m| vectors[m] == vectors[rep])
                .collect();
            (middle(&tied), members)
        })
        .collect();
    Ok((groups, scores))
}

/// Among launches the sampler cannot tell apart, the middle one in launch order: they differ
/// in what it does not see, the caches the launches before them left, and the first of them
/// often ran cold (the trace's start) while most ran warm; a simulator warms the pick with the
/// launches before it (`bbv gpu simulate --warmup-launches`).
fn middle(tied: &[usize]) -> usize {
    tied[(tied.len() - 1) / 2]
}

/// Every counted metric, estimated from the picks.
pub fn estimate(counts: &[KernelCount], picks: &[Pick]) -> Vec<Estimate> {
    let mut metrics: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    let weight_of: BTreeMap<usize, f64> = picks.iter().map(|p| (p.launch, p.weight)).collect();
    for (i, c) in counts.iter().enumerate() {
        // Launches not picked contribute to the truth only (weight 0 in the estimate).
        let w = weight_of.get(&i).copied().unwrap_or(0.0);
        let mut add = |name: String, value: u64| {
            let e = metrics.entry(name).or_insert((0.0, 0.0));
            e.0 += value as f64;
            e.1 += w * value as f64;
        };
        add("warp instructions".into(), c.warp_insts);
        add(
            "warp instructions, predicated-off excluded".into(),
            c.warp_insts_pred_on,
        );
        add(
            "thread instructions, predicated-off excluded".into(),
            c.thread_insts,
        );
        add("memory instructions".into(), c.mem_insts);
        for (op, &n) in &c.opcodes {
            let class = op.split('.').next().unwrap_or(op);
            add(format!("opcode {class}"), n);
        }
    }
    metrics
        .into_iter()
        .map(|(metric, (actual, estimate))| Estimate {
            metric,
            actual,
            estimate,
        })
        .collect()
}
