//! Kernel sampling: pick representative launches, weight them, and estimate every counted metric
//! of the whole run from the sample, with its error against the full trace.

use std::collections::{BTreeMap, HashMap};

use crate::blocks::Vector;
use crate::KernelCount;

/// A chosen launch and what it stands for.
#[derive(Clone, Debug, PartialEq)]
pub struct Pick {
    /// 0-based launch index.
    pub launch: usize,
    /// Launches it represents (itself included).
    pub members: Vec<usize>,
    /// Multiplier of its metrics in the estimate: the members' warp instructions over its own
    /// (bbv's and Sieve's rules), the launches it stands for (PKA's and STEM's).
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

/// Launches in groups: (the representative, the members).
pub(crate) type Groups = Vec<(usize, Vec<usize>)>;

/// Strata of launches by kernel name and instruction count (`keys`: each launch's; within
/// `spread` of the stratum's first).
pub(crate) fn strata(keys: &[(&str, u64)], spread: f64) -> Groups {
    // Each stratum: its first launch's count and its members; found through its kernel's.
    let mut strata: Vec<(f64, Vec<usize>)> = Vec::new();
    let mut of_kernel: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, &(kernel, n)) in keys.iter().enumerate() {
        let insts = n as f64;
        let own = of_kernel.entry(kernel).or_default();
        let near = |&&s: &&usize| (insts - strata[s].0).abs() <= spread * strata[s].0.max(1.0);
        match own.iter().find(near) {
            Some(&s) => strata[s].1.push(i),
            None => {
                own.push(strata.len());
                strata.push((insts, vec![i]));
            }
        }
    }
    (strata.into_iter())
        .map(|(_, members)| (nearest_mean(&members, |m| keys[m].1), members))
        .collect()
}

/// The member whose instruction count (`insts`) is nearest the group's mean (the middle one in
/// launch order among ties). Time and cycles grow about as a fixed cost plus a cost per
/// instruction: scaled by the group's instructions over its own, such a launch's time is the
/// group's, the fixed costs included, where a smaller one's would count its fixed cost too
/// often and a larger one's too rarely.
fn nearest_mean(members: &[usize], insts: impl Fn(usize) -> u64) -> usize {
    let mean = members.iter().map(|&m| insts(m) as f64).sum::<f64>() / members.len() as f64;
    let distance = |m: usize| (insts(m) as f64 - mean).abs();
    let best = (members.iter())
        .map(|&m| distance(m))
        .fold(f64::INFINITY, f64::min);
    let tied: Vec<usize> = (members.iter().copied())
        .filter(|&m| distance(m) == best)
        .collect();
    middle(&tied)
}

/// bbv's groups: Sieve's strata (`keys`: each launch's kernel and instruction count, within
/// `spread`), so that a launch never stands for another kernel's nor for a launch of another
/// size (a launch's time is not its instructions times a constant: small grids leave the GPU
/// idle), each split further where its launches' basic-block vectors place more than `spread`
/// of their instructions differently (a launch joins the first group whose first launch's mix
/// is within `spread` of its own); each group represented by its launch nearest its mean
/// instruction count.
pub(crate) fn stratified_clusters(keys: &[(&str, u64)], vectors: &[Vector], spread: f64) -> Groups {
    let mut groups = Groups::new();
    for (rep, members) in strata(keys, spread) {
        if members
            .iter()
            .all(|&m| apart(&vectors[m], &vectors[rep]) <= spread)
        {
            groups.push((rep, members));
            continue;
        }
        let mut mixes: Vec<Vec<usize>> = Vec::new();
        for m in members {
            match (mixes.iter_mut()).find(|g| apart(&vectors[g[0]], &vectors[m]) <= spread) {
                Some(g) => g.push(m),
                None => mixes.push(vec![m]),
            }
        }
        groups.extend((mixes.into_iter()).map(|g| (nearest_mean(&g, |m| keys[m].1), g)));
    }
    groups
}

/// The fraction of their instructions two vectors place in different blocks (0: the same mix,
/// 1: no block in common).
fn apart(a: &Vector, b: &Vector) -> f64 {
    let total = |v: &Vector| v.iter().map(|&(_, n)| n as f64).sum::<f64>().max(1.0);
    let (ta, tb) = (total(a), total(b));
    let mut d: BTreeMap<u32, f64> = a.iter().map(|&(i, n)| (i, n as f64 / ta)).collect();
    for &(i, n) in b {
        *d.entry(i).or_insert(0.0) -= n as f64 / tb;
    }
    d.values().map(|x| x.abs()).sum::<f64>() / 2.0
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
