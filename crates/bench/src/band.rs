//! `bbv bench band DIR --whole LOG`: does `bbv simulate`'s 95% band hold? For every k from 1
//! to K and every k-means seed, the run's vectors are clustered again, the points picked (as
//! SimPoint does, and cut into strata as `--pick strata` does), each point's CPI taken *in
//! context* from a whole-run ChampSim simulation with frequent heartbeats (`LOG`, e.g.
//! `BBV_CHAMPSIM_HEARTBEAT=1000000 scripts/champsim`), and the estimate's true error set
//! against the band the same code gives `bbv simulate` (`bbv_rundir::band`). Nothing here is
//! fitted to the errors it reports: the band sees only the points' CPIs and bbv's model.
//!
//! What this measures is the band's cover of the choice of points (selection): the regions'
//! own warmup error is left out, since every point here is read in context.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bbv_rundir::band::{self, Member};
use bbv_rundir::strata;
use bbv_simpoint::{KChoice, Options, PostResult, Prepared, Quiet};

/// How a clustering's points are picked.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Pick {
    Centroid,
    Strata,
}

/// One (k, seed, pick) case.
struct Case {
    k: usize,
    seed: usize,
    pick: Pick,
    points: usize,
    error_pct: f64,
    band_pct: f64,
    /// The band predicted before simulation (what `bbv run --target-error` chooses by).
    predicted_pct: f64,
}

impl Case {
    fn covered(&self) -> bool {
        self.error_pct.abs() <= self.band_pct
    }
}

/// A whole run's ChampSim log read as cycles against instructions retired.
pub(crate) struct Whole {
    /// (instructions, cycles) at each heartbeat, from (0, 0) to the run's end.
    beats: Vec<(u64, u64)>,
    /// The whole run's figures.
    pub figures: bbv_champsim::stats::Figures,
}

impl Whole {
    /// Reads `log`, whose heartbeats must be at most half of `interval` apart.
    pub fn read(log: &Path, interval: u64) -> Result<Whole> {
        let text = std::fs::read_to_string(log).with_context(|| format!("{}", log.display()))?;
        // The whole run's section of a `bbv simulate --full` log, or a log of the whole run.
        let text = text
            .find("=== the whole run")
            .map_or(text.as_str(), |at| &text[at..]);
        let mut beats: Vec<(u64, u64)> = vec![(0, 0)];
        beats.extend(text.lines().filter_map(bbv_champsim::stats::heartbeat));
        let figures = bbv_champsim::stats::Figures::parse(text)
            .with_context(|| format!("{}: the whole run's figures", log.display()))?;
        beats.push((figures.instructions, figures.cycles));
        beats.dedup_by_key(|b| b.0);
        let period = beats
            .windows(2)
            .map(|w| w[1].0 - w[0].0)
            .max()
            .unwrap_or(u64::MAX);
        if beats.len() < 3 || period.saturating_mul(2) > interval {
            bail!(
                "{}: heartbeats every {period} instructions are too coarse for intervals of \
                 {interval} (a ChampSim built with BBV_CHAMPSIM_HEARTBEAT=N scripts/champsim, N \
                 at most half the interval)",
                log.display()
            );
        }
        Ok(Whole { beats, figures })
    }

    /// Cycles when `x` instructions had retired (linear between two heartbeats).
    pub fn cycles_at(&self, x: u64) -> f64 {
        let b = &self.beats;
        let i = b.partition_point(|b| b.0 < x).min(b.len() - 1).max(1);
        let ((x0, c0), (x1, c1)) = (b[i - 1], b[i]);
        let slope = (c1 - c0) as f64 / (x1 - x0).max(1) as f64;
        c0 as f64 + slope * (x as f64 - x0 as f64)
    }

    /// CPI of the `n` instructions after the first `from`, in context.
    pub fn cpi(&self, from: u64, n: u64) -> f64 {
        (self.cycles_at(from + n) - self.cycles_at(from)) / n.max(1) as f64
    }
}

/// Each interval's CPI in context, and the whole run's CPI.
fn in_context(log: &Path, insns: &[u64]) -> Result<(Vec<f64>, f64)> {
    let whole = Whole::read(log, insns.iter().copied().max().unwrap_or(0))?;
    let mut at = 0u64;
    let cpi = insns
        .iter()
        .map(|&n| {
            let c = whole.cpi(at, n);
            at += n;
            c
        })
        .collect();
    Ok((cpi, whole.figures.cpi()))
}

/// Runs the measurement and prints one line per case and the summary.
pub fn run(dir: &Path, whole: &Path, max_k: usize, seeds: usize) -> Result<()> {
    let rows =
        bbv_profile::read_metrics(&dir.join(bbv_rundir::files::METRICS)).with_context(|| {
            format!(
                "{}: a band needs per-interval metrics (bbv run --validate)",
                dir.display()
            )
        })?;
    let insns: Vec<u64> = rows.iter().map(|r| r.instructions()).collect();
    let (cpi, full) = in_context(whole, &insns)?;
    let estimates: Vec<f64> = rows.iter().map(strata::cpi_estimate).collect();
    let weights: Vec<f64> = insns.iter().map(|&n| n as f64).collect();
    let summary = bbv_rundir::read_summary(dir)?;
    let tail = summary.tail_fraction(weights.iter().sum());
    let bb: PathBuf = dir.join(bbv_rundir::files::BB);
    let mut data = bbv_simpoint::load_projected(&bb)?;
    if data.rows() != rows.len() {
        bail!(
            "{}: {} vectors for {} metrics rows",
            bb.display(),
            data.rows(),
            rows.len()
        );
    }
    let w = 1.0 / data.rows() as f64;
    data.weights.iter_mut().for_each(|x| *x = w);
    // The intervals as the band sees them, and the prediction's prior: the same for every
    // clustering.
    let members = band::members(&rows, |i| data.row(i));
    let prior = band::Prior::of(&members);
    let max_k = max_k.min(data.rows());
    println!(
        "{}: {} intervals, whole run CPI {full:.4} (ChampSim, in context: {})",
        dir.display(),
        rows.len(),
        whole.display()
    );
    println!("k  seed  pick      points  error     95% band  predicted  covered");
    let mut cases = Vec::new();
    for seed in 0..seeds.max(1) {
        let opts = Options {
            k: KChoice::List((1..=max_k).collect()),
            seed_km: Options::default().seed_km.wrapping_add(seed as i32 * 7919),
            ..Options::default()
        };
        let prep = Prepared::new(&data, &opts)?;
        let result = bbv_simpoint::cluster(&prep, &opts, &Quiet)?;
        for r in &result.runs {
            for pick in [Pick::Centroid, Pick::Strata] {
                let mut post = PostResult::new(&data, &r.centres);
                if pick == Pick::Strata {
                    strata::cut_clusters(
                        &estimates,
                        &weights,
                        &mut post.labels,
                        &mut post.simpoints,
                        &mut post.weights,
                    );
                }
                let (points, error_pct, band_pct, predicted_pct) =
                    score(&post, (&members, &prior), (&cpi, full), tail)?;
                let c = Case {
                    k: r.k,
                    seed,
                    pick,
                    points,
                    error_pct,
                    band_pct,
                    predicted_pct,
                };
                println!(
                    "{:2} {:5}  {:8} {:6}  {:+7.2}%  ±{:6.2}%  ±{:6.2}%  {}",
                    c.k,
                    c.seed,
                    format!("{:?}", c.pick).to_lowercase(),
                    c.points,
                    c.error_pct,
                    c.band_pct,
                    c.predicted_pct,
                    if c.covered() { "yes" } else { "NO" }
                );
                cases.push(c);
            }
        }
    }
    summarize(&cases);
    by_target(&cases, seeds.max(1));
    Ok(())
}

/// What choosing by the predicted band would give: for each target, seed and way of picking,
/// the case with the fewest points (then the smallest k) whose predicted band is within the
/// target, and its true error.
fn by_target(cases: &[Case], seeds: usize) {
    println!("choosing by the predicted band (bbv run --target-error's rule):");
    for target in TARGETS {
        for pick in [Pick::Centroid, Pick::Strata] {
            let mut chosen = Vec::new();
            for seed in 0..seeds {
                let meeting = cases
                    .iter()
                    .filter(|c| c.pick == pick && c.seed == seed && c.predicted_pct <= target)
                    .min_by_key(|c| (c.points, c.k));
                match meeting {
                    Some(c) => chosen.push(c),
                    None => println!("  ±{target}% {pick:?} seed {seed}: no k meets it"),
                }
            }
            if chosen.is_empty() {
                continue;
            }
            let within = chosen
                .iter()
                .filter(|c| c.error_pct.abs() <= target)
                .count();
            let each: Vec<String> = chosen
                .iter()
                .map(|c| format!("k {} ({} points) {:+.2}%", c.k, c.points, c.error_pct))
                .collect();
            println!(
                "  ±{target}% {pick:?}: {within} of {} within the target: {}",
                chosen.len(),
                each.join(", ")
            );
        }
    }
}

/// The targets `by_target` tries, in percent.
const TARGETS: [f64; 4] = [1.0, 2.0, 3.0, 5.0];

/// Per way of picking: the cases covered, the median width, the mean error and points.
fn summarize(cases: &[Case]) {
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(f64::NAN)
    };
    for pick in [Pick::Centroid, Pick::Strata] {
        let of: Vec<&Case> = cases.iter().filter(|c| c.pick == pick).collect();
        let n = of.len().max(1) as f64;
        let share =
            |f: &dyn Fn(&Case) -> bool| 100.0 * of.iter().filter(|c| f(c)).count() as f64 / n;
        println!(
            "{:?}: {} cases, covered {:.1}%, median band ±{:.2}%, mean |error| {:.2}%, \
             points {:.1} on average; the predicted band covered {:.1}%, median ±{:.2}%",
            pick,
            of.len(),
            share(&|c| c.covered()),
            median(of.iter().map(|c| c.band_pct).collect()),
            of.iter().map(|c| c.error_pct.abs()).sum::<f64>() / n,
            of.iter().map(|c| c.points as f64).sum::<f64>() / n,
            share(&|c| c.error_pct.abs() <= c.predicted_pct),
            median(of.iter().map(|c| c.predicted_pct).collect()),
        );
    }
}

/// One clustering's points in context: how many, the estimate's error against the whole run,
/// its band and the band predicted before simulation, all in percent.
fn score(
    post: &PostResult,
    (members, prior): (&[Member], &band::Prior),
    (cpi, full): (&[f64], f64),
    tail: f64,
) -> Result<(usize, f64, f64, f64)> {
    let labels: Vec<usize> = post.labels.iter().map(|&l| l as usize).collect();
    let chosen = post.simpoints.iter().enumerate();
    let mut points = band::weighted_points(
        members,
        &labels,
        chosen.filter_map(|(c, &p)| Some((c, usize::try_from(p).ok()?))),
    );
    for p in &mut points {
        p.cpi = cpi[p.interval];
    }
    let total: f64 = points.iter().map(|p| p.weight).sum();
    let estimate = points.iter().map(|p| p.weight * p.cpi).sum::<f64>() / total;
    let b = band::band(members, &labels, &points, estimate, tail)?;
    let predicted = band::predicted(members, &labels, &points, tail, prior)?;
    Ok((
        points.len(),
        100.0 * (estimate - full) / full,
        b.band_pct,
        predicted.band_pct,
    ))
}
