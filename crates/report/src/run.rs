//! A [`Report`] from a `bbv run` directory's files alone.

use std::path::{Path, PathBuf};

use bbv_rundir::{Clustered, Regions};

use bbv_profile::{MetricsRow, METRIC_COLUMNS};
use bbv_rundir::validate::Validation;
use bbv_rundir::{self as rundir, Summary};

use crate::{Curve, ErrorRow, KScore, MatrixBuilder, Point, Report, ReportError};

/// Reads a run directory: `summary.json`, SimPoint's files, the clustered vectors and, when
/// present, `metrics.csv`, `validation.json` and `bic.csv`. Files that disagree on the number
/// of units are refused rather than drawn wrong.
pub fn from_run_dir(dir: &Path) -> Result<Report, ReportError> {
    from_summary(dir, &rundir::read_summary(dir)?)
}

/// [`from_run_dir`] with `summary.json`'s content given: `bbv regions` builds the report of
/// the summary it is about to write, before writing anything.
pub fn from_summary(dir: &Path, summary: &Summary) -> Result<Report, ReportError> {
    from_summary_with(dir, summary, rundir::simulation::read(dir)?)
}

/// [`from_summary`] with the simulation given instead of read: `bbv simulate` builds the
/// report of the figures it is about to write, whatever `simulation.json` held before.
pub fn from_summary_with(
    dir: &Path,
    summary: &Summary,
    simulation: Option<rundir::simulation::Simulation>,
) -> Result<Report, ReportError> {
    let unit = if summary.regions_mode == Regions::Looppoint {
        "slice"
    } else {
        "interval"
    };
    let mut r = Report {
        title: format!("bbv run: {}", program_line(summary)),
        unit: unit.into(),
        ..Report::default()
    };
    facts(&mut r, summary);
    r.simulation = simulation;
    if summary.intervals == 0 {
        let why = "Nothing was clustered: the program ran no complete interval.";
        r.curves_note = why.into();
        r.matrix_note = why.into();
        r.errors_note = why.into();
        r.bic_note = why.into();
        return Ok(r);
    }
    let need = |name: &str| -> Result<PathBuf, ReportError> {
        let path = dir.join(name);
        match path.exists() {
            true => Ok(path),
            false => Err(ReportError::Missing {
                path,
                dir: dir.to_path_buf(),
            }),
        }
    };
    for f in [
        bbv_rundir::files::SIMPOINTS,
        bbv_rundir::files::WEIGHTS,
        bbv_rundir::files::LABELS,
    ] {
        need(f)?;
    }
    let (chosen, labels) = bbv_rundir::chosen(dir)?;
    if labels.len() as u64 != summary.intervals {
        return Err(ReportError::Inconsistent(format!(
            "{}: {} labels, but summary.json says {} {unit}s",
            dir.join(bbv_rundir::files::LABELS).display(),
            labels.len(),
            summary.intervals
        )));
    }
    let input = rundir::clustered_input(dir, summary);
    let input_name = input.file_name().map(|n| n.to_string_lossy().into_owned());
    r.matrix = Some(read_matrix(
        &need(&input_name.unwrap_or_default())?,
        &labels,
    )?);
    r.points = chosen
        .iter()
        .map(|c| Point {
            cluster: c.cluster,
            unit: c.interval as usize,
            weight: c.weight,
            detail: markers_of(summary, c.cluster, c.interval),
        })
        .collect();
    if let Some(p) = r.points.iter().find(|p| p.unit >= labels.len()) {
        return Err(ReportError::Inconsistent(format!(
            "{}: {unit} {} is beyond the {} {unit}s of the run",
            dir.join(bbv_rundir::files::SIMPOINTS).display(),
            p.unit,
            labels.len()
        )));
    }
    r.labels = labels;
    r.chosen_k = Some(summary.k);
    let validation = bbv_rundir::validate::read(dir)?;
    metrics(&mut r, dir, summary, validation.as_ref())?;
    choosing_k(&mut r, dir, validation.as_ref())?;
    Ok(r)
}

fn program_line(s: &Summary) -> String {
    let name = Path::new(&s.program.path)
        .file_name()
        .map_or(s.program.path.clone(), |n| n.to_string_lossy().into_owned());
    std::iter::once(name)
        .chain(s.program.args.iter().cloned())
        .collect::<Vec<_>>()
        .join(" ")
}

fn facts(r: &mut Report, s: &Summary) {
    let mut add = |k: &str, v: String| r.facts.push((k.into(), v));
    add("program", s.program.path.clone());
    add("arguments", s.program.args.join(" "));
    add(
        "instructions",
        format!("{} in {} thread(s)", s.instructions, s.threads.len()),
    );
    add(
        "intervals",
        format!(
            "{} of {} instructions ({})",
            s.intervals,
            s.interval,
            match (s.regions_mode, s.clustered) {
                (Regions::Looppoint, _) => "slices of all threads, LoopPoint-style",
                (_, Clustered::All) => "every thread's intervals",
                _ => "main thread",
            }
        ),
    );
    add(
        "regions",
        format!("{} ({})", s.regions_mode.name(), s.regions_reason),
    );
    add("clusters", format!("k = {} (--max-k {})", s.k, s.max_k));
    add("warmup", format!("{} instructions", s.warmup));
    add(
        "QEMU",
        format!(
            "{}, guest CPU {}",
            s.qemu,
            s.cpu.as_deref().unwrap_or("QEMU's default")
        ),
    );
}

fn markers_of(s: &Summary, cluster: usize, interval: u64) -> String {
    let Some(p) = s
        .points
        .iter()
        .find(|p| p.cluster == cluster && p.interval == interval)
    else {
        return String::new();
    };
    let m = |m: &rundir::Marker| format!("{}+{} #{}", m.image, m.offset, m.count);
    let mut text = format!("start {}, end {}", m(&p.start), m(&p.end));
    if let Some(w) = &p.warmup {
        text.push_str(&format!(", warmup {}", m(w)));
    }
    text
}

/// Streams the clustered vectors into the similarity matrix.
fn read_matrix(path: &Path, labels: &[usize]) -> Result<crate::Matrix, ReportError> {
    let mut b = MatrixBuilder::new(labels);
    let mut reader = bbv_profile::BbvReader::open(path)?;
    let mut v = Vec::new();
    while reader.next_vector(&mut v)? {
        b.add(v.iter().map(|t| (t.id, t.value)));
    }
    if b.added() != labels.len() {
        return Err(ReportError::Inconsistent(format!(
            "{}: {} vectors, but simpoint.labels has {}",
            path.display(),
            b.added(),
            labels.len()
        )));
    }
    Ok(b.finish())
}

/// The curves and the error table, from `metrics.csv` and `validation.json`.
fn metrics(
    r: &mut Report,
    dir: &Path,
    s: &Summary,
    v: Option<&Validation>,
) -> Result<(), ReportError> {
    let path = dir.join(bbv_rundir::files::METRICS);
    if !path.exists() {
        let why =
            "No metrics: run `bbv run --validate` to measure them and the points' estimate errors.";
        r.curves_note = why.into();
        r.errors_note = why.into();
        return Ok(());
    }
    let rows = bbv_profile::read_metrics(&path)?;
    let aligned = s.regions_mode != Regions::Looppoint && s.clustered == Clustered::Main;
    if !aligned {
        let why = "metrics.csv follows the main thread's intervals, but this run clustered other units: per-slice metrics are not measured yet.";
        r.curves_note = why.into();
        r.errors_note = why.into();
        return Ok(());
    }
    if rows.len() != r.labels.len() {
        return Err(ReportError::Inconsistent(format!(
            "{}: {} intervals, but the run clustered {}",
            path.display(),
            rows.len(),
            r.labels.len()
        )));
    }
    r.curves = curves(&rows, v);
    match v {
        Some(v) => {
            let pick = v.pick.note();
            r.errors_note = format!(
                "At k = {} ({}{pick}); per 1000 instructions. The band is 1.96 standard errors of stratified sampling, from the variation within clusters.",
                v.k, v.k_rule
            );
            r.errors = v
                .metrics
                .iter()
                .map(|m| ErrorRow::new(&m.name, m.full, m.estimate, Some(m.band95)))
                .collect();
        }
        None => {
            r.errors_note = "metrics.csv is present but validation.json is not: no estimate errors (run `bbv run --validate`).".into();
        }
    }
    Ok(())
}

fn curves(rows: &[MetricsRow], v: Option<&Validation>) -> Vec<Curve> {
    let insns: u64 = rows.iter().map(MetricsRow::instructions).sum();
    let rate = |value: u64, n: u64| {
        if n == 0 {
            0.0
        } else {
            1000.0 * value as f64 / n as f64
        }
    };
    METRIC_COLUMNS
        .iter()
        .enumerate()
        .skip(1)
        .map(|(col, name)| {
            let total: u64 = rows.iter().map(|r| r.0[col]).sum();
            Curve {
                name: name.to_string(),
                unit: "per 1000 instructions".into(),
                values: rows
                    .iter()
                    .map(|r| rate(r.0[col], r.instructions()))
                    .collect(),
                full: rate(total, insns),
                estimate: v.and_then(|v| {
                    v.metrics
                        .iter()
                        .find(|m| m.name == *name)
                        .map(|m| m.estimate)
                }),
            }
        })
        .collect()
}

/// `#bic`: `validation.json`'s rows when the run was validated, else `bic.csv`.
fn choosing_k(r: &mut Report, dir: &Path, v: Option<&Validation>) -> Result<(), ReportError> {
    if let Some(v) = v {
        r.bic_note = format!("k = {}: {}.", v.k, v.k_rule);
        r.by_k = v
            .by_k
            .iter()
            .map(|k| KScore {
                k: k.k,
                bic_fraction: k.bic_fraction,
                worst_rel_error: k.worst_rel_error,
                bbv_error: Some(k.bbv_error),
            })
            .collect();
        return Ok(());
    }
    let path = dir.join(bbv_rundir::files::BIC);
    if !path.exists() {
        r.bic_note = "No bic.csv: the run directory was written by an older bbv.".into();
        return Ok(());
    }
    r.bic_note = format!(
        "k = {}: SimPoint 3.2's rule, the smallest k whose BIC reaches 90% of the range of the k tried. Errors against k need `bbv run --validate`.",
        r.chosen_k.unwrap_or(0)
    );
    let mut lines = bbv_files::input::Lines::open(&path, bbv_rundir::PAIR_LINE)?;
    while let Some((n, line)) = lines.next_line()? {
        if n == 1 {
            continue;
        }
        let f: Vec<&str> = line.split(',').collect();
        let parsed = match f.as_slice() {
            [k, _, frac] => k.parse().ok().zip(frac.parse::<f64>().ok()),
            _ => None,
        };
        let (k, bic_fraction) = parsed.ok_or_else(|| {
            ReportError::Rundir(bbv_rundir::RundirError::Parse {
                path: path.clone(),
                line: n as usize,
                what: "`k,bic,bic_fraction`".into(),
            })
        })?;
        r.by_k.push(KScore {
            k,
            bic_fraction,
            worst_rel_error: None,
            bbv_error: None,
        });
    }
    Ok(())
}
