//! The rules that read GPU times (`bbv gpu run --repeat`): PKA's clustering of per-launch
//! features and STEM's per-kernel time sampling, over a run's launches.

use crate::sample::{Groups, Pick};
use crate::KernelCount;

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

impl TimedLaunch {
    /// A counted launch with its times (none when the run was not timed).
    pub fn new(count: &KernelCount, ns: Vec<u64>) -> TimedLaunch {
        let h = &count.header;
        TimedLaunch {
            kernel: h.name.clone(),
            grid: h.grid,
            block: h.block,
            registers: h.nregs,
            shared: h.shmem,
            warp_insts: count.warp_insts,
            ns,
        }
    }
}

/// The picks' estimate of run `run`'s total time, in nanoseconds.
pub fn estimate(launches: &[TimedLaunch], picks: &[Pick], run: usize) -> f64 {
    (picks.iter())
        .map(|p| p.weight * launches[p.launch].ns[run] as f64)
        .sum()
}

/// (largest - smallest) / mean of `v` (0 when empty or all 0): how far apart runs are.
pub fn spread(v: &[u64]) -> f64 {
    let (Some(lo), Some(hi)) = (v.iter().min(), v.iter().max()) else {
        return 0.0;
    };
    let mean = v.iter().sum::<u64>() as f64 / v.len() as f64;
    if mean == 0.0 {
        0.0
    } else {
        (hi - lo) as f64 / mean
    }
}

/// PKA's rule (see [`crate::select::Rule::Pka`]): each pick stands for its cluster's launch
/// count.
pub(crate) fn pka(launches: &[TimedLaunch], max_k: usize) -> Vec<Pick> {
    let points = features(launches);
    let actual: f64 = launches.iter().map(|l| l.ns[0] as f64).sum();
    let max_k = max_k.clamp(1, launches.len());
    let mut last = Vec::new();
    for k in 1..=max_k {
        let selection: Vec<Pick> = (kmeans(&points, k).into_iter())
            .map(|(launch, members)| Pick {
                launch,
                weight: members.len() as f64,
                members,
            })
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
    // The first nearest centre.
    let nearest = |centres: &[Vec<f64>], p: &[f64]| -> usize {
        let mut best = (0, f64::INFINITY);
        for (c, centre) in centres.iter().enumerate() {
            let d = dist2(centre, p);
            if d < best.1 {
                best = (c, d);
            }
        }
        best.0
    };
    let mut centres = vec![points[0].clone()];
    // Each point's distance to its nearest centre so far.
    let mut far: Vec<f64> = points.iter().map(|p| dist2(&centres[0], p)).collect();
    while centres.len() < k {
        // The point farthest from every centre, the first among ties.
        let mut pick = 0;
        for (i, &d) in far.iter().enumerate() {
            if d > far[pick] {
                pick = i;
            }
        }
        let centre = points[pick].clone();
        for (d, p) in far.iter_mut().zip(points) {
            *d = d.min(dist2(&centre, p));
        }
        centres.push(centre);
    }
    let dims = points[0].len();
    let mut labels = vec![usize::MAX; points.len()];
    for _ in 0..100 {
        let next: Vec<usize> = points.iter().map(|p| nearest(&centres, p)).collect();
        if next == labels {
            break;
        }
        labels = next;
        let mut sums = vec![(0usize, vec![0.0; dims]); centres.len()];
        for (p, &l) in points.iter().zip(&labels) {
            sums[l].0 += 1;
            for (s, x) in sums[l].1.iter_mut().zip(p) {
                *s += x;
            }
        }
        for (centre, (n, sum)) in centres.iter_mut().zip(sums) {
            if n > 0 {
                *centre = sum.into_iter().map(|s| s / n as f64).collect();
            }
        }
    }
    let mut members = vec![Vec::new(); centres.len()];
    for (i, &l) in labels.iter().enumerate() {
        members[l].push(i);
    }
    (members.into_iter().zip(&centres))
        .filter_map(|(members, centre)| {
            let rep = *members.iter().min_by(|&&a, &&b| {
                dist2(&points[a], centre).total_cmp(&dist2(&points[b], centre))
            })?;
            Some((rep, members))
        })
        .collect()
}

/// STEM's rule as summarised (see [`crate::select::Rule::Stem`]): a seeded random sample per
/// kernel, every pick of a kernel standing for its launches over the sample size; a pick's
/// members are the kernel's launches nearest it in launch order.
pub(crate) fn stem(launches: &[TimedLaunch]) -> Vec<Pick> {
    const Z: f64 = 1.96;
    const ERROR: f64 = 0.05;
    // Kernels in the order they first ran.
    let mut kernels: Vec<Vec<usize>> = Vec::new();
    let mut index: std::collections::HashMap<&str, usize> = Default::default();
    for (i, l) in launches.iter().enumerate() {
        let k = *index.entry(&l.kernel).or_insert_with(|| {
            kernels.push(Vec::new());
            kernels.len() - 1
        });
        kernels[k].push(i);
    }
    let mut rng = bbv_simpoint::Random::new(i64::from(bbv_simpoint::DEFAULT_SEED_PROJ));
    let mut selection = Vec::new();
    for mut members in kernels {
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
        let weight = members.len() as f64 / take as f64;
        let mut picked: Vec<usize> = members[..take].to_vec();
        picked.sort_unstable();
        members.sort_unstable();
        let mut picks: Vec<Pick> = (picked.iter())
            .map(|&launch| Pick {
                launch,
                members: Vec::new(),
                weight,
            })
            .collect();
        for m in members {
            // picked is sorted: the first pick at or after m, or the one before it if nearer.
            let after = picked.partition_point(|&p| p < m);
            let near = match (after.checked_sub(1), picked.get(after)) {
                (Some(b), Some(&a)) if m - picked[b] <= a - m => b,
                (Some(b), None) => b,
                _ => after,
            };
            picks[near].members.push(m);
        }
        selection.extend(picks);
    }
    selection.sort_by_key(|p| p.launch);
    selection
}
