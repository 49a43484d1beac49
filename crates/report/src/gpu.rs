//! A [`Report`] of a GPU sample: launches instead of intervals.

use bbv_gpu::output::Sampled;
use bbv_gpu::sample::Pick;
use bbv_gpu::KernelCount;

use crate::{Curve, ErrorRow, MatrixBuilder, Point, Report};

/// Builds the report of `bbv gpu sample` on `list`: the picks in their group order (group i is
/// cluster i), every k tried when the launches were clustered, every metric's estimate and, for
/// a timed run, the GPU time's.
pub fn from_gpu_sample(list: &str, s: &Sampled) -> Report {
    let (counts, picks, method) = (&s.counts, &s.picks, s.rule.how());
    let n = counts.len();
    let mut labels = vec![0usize; n];
    for (g, p) in picks.iter().enumerate() {
        for &m in &p.members {
            if let Some(l) = labels.get_mut(m) {
                *l = g;
            }
        }
    }
    let total: f64 = counts.iter().map(|c| c.warp_insts as f64).sum();
    let mut points: Vec<Point> = picks
        .iter()
        .enumerate()
        .map(|(g, p)| {
            let represented: f64 = p.members.iter().map(|&m| counts[m].warp_insts as f64).sum();
            Point {
                cluster: g,
                unit: p.launch,
                weight: if total > 0.0 {
                    represented / total
                } else {
                    0.0
                },
                detail: format!(
                    "{}, multiplier {:.4}, {} launch(es) represented",
                    counts[p.launch].header.name,
                    p.weight,
                    p.members.len()
                ),
            }
        })
        .collect();
    points.sort_by(|a, b| b.weight.total_cmp(&a.weight).then(a.unit.cmp(&b.unit)));
    let mut matrix = MatrixBuilder::new(&labels);
    for v in &s.vectors.vectors {
        matrix.add(v.iter().map(|&(id, c)| (id, c as f64)));
    }
    Report {
        title: format!("bbv gpu sample: {list}"),
        unit: "launch".into(),
        facts: vec![
            ("kernel list".into(), list.into()),
            ("launches".into(), n.to_string()),
            (
                "warp instructions".into(),
                format!("{}", total as u64),
            ),
            ("launches chosen".into(), format!("{} ({method})", picks.len())),
        ],
        curves: curves(counts, picks),
        curves_note: String::new(),
        matrix: Some(matrix.finish()),
        matrix_note: String::new(),
        errors: (s.estimates.iter())
            .map(|e| ErrorRow::new(&e.metric, e.actual, e.estimate, None))
            .chain(s.gpu_time.iter().map(|t| {
                ErrorRow::new("GPU time, ns", t.mean_actual_ns(), t.mean_estimate_ns(), None)
            }))
            .collect(),
        errors_note: format!(
            "Totals over the whole trace against the chosen launches' values times their multipliers (no band: one launch per group is measured).{}",
            s.gpu_time.as_ref().map_or(String::new(), |t| format!(
                " GPU time: the mean over {} timing run(s) {}.",
                t.actual_ns.len(),
                if t.in_sample { "the picks were chosen from" } else { "after the first, which the picks were chosen from" }
            ))
        ),
        by_k: Vec::new(),
        chosen_k: None,
        bic_note: "Launches are grouped by rule (kernel, instruction count, basic-block mix; docs/gpu-live.md), not by a search over k.".into(),
        simulation: None,
        simulation_note: "GPU launches are simulated with Accel-Sim (`bbv gpu sample` writes its kernel list), not ChampSim.".into(),
        labels,
        points,
    }
}

/// Per launch: warp instructions, memory instructions per 1000 and active lanes per warp
/// instruction, with the whole trace's value and the picks' estimate.
fn curves(counts: &[KernelCount], picks: &[Pick]) -> Vec<Curve> {
    type Get = fn(&KernelCount) -> (f64, f64);
    let series: [(&str, &str, f64, Get); 3] = [
        ("warp instructions", "per launch", 1.0, |c| {
            (c.warp_insts as f64, 1.0)
        }),
        (
            "memory instructions",
            "per 1000 warp instructions",
            1000.0,
            |c| (c.mem_insts as f64, c.warp_insts as f64),
        ),
        ("active threads", "per warp instruction", 1.0, |c| {
            (c.thread_insts as f64, c.warp_insts_pred_on as f64)
        }),
    ];
    let ratio = |num: f64, den: f64, scale: f64| if den > 0.0 { scale * num / den } else { 0.0 };
    series
        .iter()
        .map(|&(name, unit, scale, get)| {
            let (num, den) = counts
                .iter()
                .map(get)
                .fold((0.0, 0.0), |a, b| (a.0 + b.0, a.1 + b.1));
            let (enum_, eden) = picks.iter().fold((0.0, 0.0), |a, p| {
                let (x, y) = get(&counts[p.launch]);
                (a.0 + p.weight * x, a.1 + p.weight * y)
            });
            // Warp instructions per launch: the mean over launches, estimated likewise.
            let per_launch = name == "warp instructions";
            let n = counts.len().max(1) as f64;
            Curve {
                name: name.into(),
                unit: unit.into(),
                values: counts
                    .iter()
                    .map(|c| {
                        let (x, y) = get(c);
                        ratio(x, y, scale)
                    })
                    .collect(),
                full: if per_launch {
                    num / n
                } else {
                    ratio(num, den, scale)
                },
                estimate: Some(if per_launch {
                    enum_ / n
                } else {
                    ratio(enum_, eden, scale)
                }),
            }
        })
        .collect()
}
