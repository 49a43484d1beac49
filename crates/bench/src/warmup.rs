//! `bbv bench warmup DIR`: the regions of a traced run simulated twice side by side, with
//! every record of their warmups (the anchor) and with the warmups condensed
//! (`bbv_champsim::condense`, what `bbv trace` writes by default): per region the CPI, the
//! warmup's records and ChampSim's wall time spent warming and in all, and the estimates of
//! the run's CPI against the whole run's (`--whole LOG`, a ChampSim log of the whole run with
//! heartbeats; each region is also read in context there, so that its warmup error shows).
//! The traces must have been written with `bbv trace --full-warmup`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use bbv_champsim::condense::{Condense, CondenseWriter};
use bbv_champsim::sim;

use crate::band::Whole;

/// One region as trace.json lists it.
struct Region {
    id: u64,
    multiplier: f64,
    warmup: u64,
    region: u64,
    trace: PathBuf,
}

fn regions(dir: &Path) -> Result<Vec<Region>> {
    let path = dir.join(bbv_rundir::files::TRACE);
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let t: serde_json::Value = serde_json::from_str(&text)?;
    let folder = PathBuf::from(t["dir"].as_str().context("trace.json: no dir")?);
    let rs = t["regions"].as_array().context("trace.json: no regions")?;
    rs.iter()
        .map(|r| {
            let n = |k: &str| r[k].as_u64().with_context(|| format!("trace.json: no {k}"));
            if r.get("warmup_records")
                .is_some_and(|w| *w != r["warmup_instructions"])
            {
                bail!("trace.json: the warmups are condensed already (bbv trace --full-warmup)");
            }
            Ok(Region {
                id: n("id")?,
                multiplier: r["multiplier"]
                    .as_f64()
                    .context("trace.json: no multiplier")?,
                warmup: n("warmup_instructions")?,
                region: n("region_instructions")?,
                trace: folder.join(r["trace"].as_str().context("trace.json: no trace")?),
            })
        })
        .collect()
}

/// Writes `to`: `from` with the warmup's first `warmup - detail` records condensed; the
/// warmup records it keeps.
fn condense(from: &Path, to: &Path, warmup: u64, how: Condense) -> Result<u64> {
    let input = xz2::read::XzDecoder::new(std::io::BufReader::new(std::fs::File::open(from)?));
    let out = std::io::BufWriter::new(std::fs::File::create(to)?);
    let mut w = CondenseWriter::new(
        xz2::write::XzEncoder::new(out, 0),
        warmup.saturating_sub(how.detail),
        how,
    );
    std::io::copy(&mut std::io::BufReader::new(input), &mut w)
        .with_context(|| from.display().to_string())?;
    let (xz, c) = w.finish()?;
    xz.finish()?.flush()?;
    c.warmup_records(warmup)
        .with_context(|| format!("{}: shorter than its warmup", from.display()))
}

/// One simulation's figures: CPI, ChampSim's CPU seconds warming and in all (wall seconds
/// where /proc does not say), wall seconds.
struct Sim {
    cpi: f64,
    warm_s: f64,
    all_s: f64,
    wall_s: f64,
}

fn simulate(bin: &Path, trace: &Path, warmup: u64, region: u64) -> Result<Sim> {
    let s = sim::run(bin, trace, warmup, region)?;
    let (all_s, warm_s) = s.cpu.unwrap_or((s.seconds, s.warmup_seconds));
    Ok(Sim {
        cpi: s.figures.cpi(),
        warm_s,
        all_s,
        wall_s: s.seconds,
    })
}

/// Runs the comparison and prints a row per region and the summary.
pub fn run(dir: &Path, whole: Option<&Path>, how: Condense, champsim: Option<&Path>) -> Result<()> {
    let bin = sim::find(champsim)?;
    let rs = regions(dir)?;
    let summary = bbv_rundir::read_summary(dir)?;
    if summary.points.len() != rs.len() {
        bail!("{}: trace.json is of another run", dir.display());
    }
    let whole = match whole {
        Some(log) => Some(Whole::read(log, summary.interval)?),
        None => None,
    };
    let tmp = tempfile::Builder::new().prefix("bbv-warmup").tempdir()?;
    println!(
        "condensed: the newest {} lines' last touches and {} executions of each branch, then \
         {} records whole",
        how.lines, how.branch_repeats, how.detail
    );
    println!("region | warmup records (all, condensed) | CPI: all, condensed, in context | ChampSim CPU seconds warming (all, condensed) | in all (all, condensed) | condensing seconds");
    let (mut est, mut tot) = ([0.0f64; 2], [[0.0f64; 3]; 2]);
    let mut insns = 0.0;
    for (r, p) in rs.iter().zip(&summary.points) {
        let small = tmp.path().join(format!("region-{}.champsim.xz", r.id));
        let t = Instant::now();
        let kept = condense(&r.trace, &small, r.warmup, how)?;
        let condense_s = t.elapsed().as_secs_f64();
        let a = simulate(&bin, &r.trace, r.warmup, r.region)?;
        let b = simulate(&bin, &small, kept, r.region)?;
        std::fs::remove_file(&small)?;
        let context = whole
            .as_ref()
            .map_or(f64::NAN, |w| w.cpi(p.start_position, p.length));
        println!(
            "{} | {}, {} | {:.4}, {:.4}, {:.4} | {:.0}, {:.0} | {:.0}, {:.0} | {:.0}",
            r.id,
            r.warmup,
            kept,
            a.cpi,
            b.cpi,
            context,
            a.warm_s,
            b.warm_s,
            a.all_s,
            b.all_s,
            condense_s
        );
        let n = r.multiplier * r.region as f64;
        insns += n;
        for (i, s) in [&a, &b].into_iter().enumerate() {
            est[i] += n * s.cpi;
            tot[i][0] += s.warm_s;
            tot[i][1] += s.all_s;
            tot[i][2] += s.wall_s;
        }
    }
    for (i, name) in ["every warmup record", "condensed warmups"]
        .iter()
        .enumerate()
    {
        let cpi = est[i] / insns.max(1.0);
        let error = whole.as_ref().map_or(String::new(), |w| {
            format!(
                ", {:+.2}% against the whole run's {:.4}",
                100.0 * (cpi / w.figures.cpi() - 1.0),
                w.figures.cpi()
            )
        });
        println!(
            "{name}: estimate {cpi:.4}{error}; ChampSim {:.0} CPU seconds, warming {:.0} ({:.0}%); \
             {:.0} s wall",
            tot[i][1],
            tot[i][0],
            100.0 * tot[i][0] / tot[i][1].max(1e-9),
            tot[i][2]
        );
    }
    Ok(())
}
