//! `bbv gpu run --repeat N`: N timing runs of the program after the counted one (nothing
//! counted, nothing synchronised, every kernel timed by CUPTI's activity records), joined into
//! `times.tsv` and the summary's `timing`.

use std::path::Path;
use std::process::ExitStatus;

use bbv_cuda::job::{raw, Live};
use bbv_cuda::times::{self, Times};
use bbv_cuda::tools::{self, Injection, Selection};
use bbv_files::AtomicFiles;

use crate::GpuJobError;

/// The raw folder of timing run `k` (1-based) inside a run's raw folder.
fn run_dir(raw: &Path, k: u32) -> std::path::PathBuf {
    raw.join(format!("times-{k}"))
}

/// Runs `command` `repeat` times into `fresh/times-K` (the raw folder to be); each must end as
/// the counted run did (`counted`). Returns how many ran.
pub(crate) fn timing_runs(
    injection: &Injection,
    fresh: &Path,
    command: &[String],
    repeat: u32,
    counted: ExitStatus,
) -> Result<u32, GpuJobError> {
    let Some((program, args)) = command.split_first() else {
        return Ok(0);
    };
    for k in 1..=repeat {
        let dir = run_dir(fresh, k);
        std::fs::create_dir_all(&dir).map_err(|e| GpuJobError::io(&dir, e))?;
        let all = Selection::default();
        let status = tools::run_program(injection, &dir, program, args, &all, true)?;
        if status.code() != counted.code() || status.success() != counted.success() {
            return Err(GpuJobError::Invalid(format!(
                "timing run {k} of {program} ended with {status}, the counted run with \
                 {counted}: its times would not be the counted run's launches"
            )));
        }
    }
    Ok(repeat)
}

/// The timing runs of `live`'s folder joined, checked against the counted run's launches;
/// None without timing runs.
pub(crate) fn join(live: &Live, runs: u32) -> Result<Option<Times>, GpuJobError> {
    if runs == 0 {
        return Ok(None);
    }
    let raw = raw(&live.dir);
    let read = (1..=runs)
        .map(|k| bbv_cuda::live::read(&run_dir(&raw, k).join("launches.txt")))
        .collect::<Result<Vec<_>, _>>()?;
    let t = times::join(&read)?;
    // The counted run numbers every launch too (counted or skipped): the same kernels.
    let counted: std::collections::HashMap<u64, &str> = (live.run.launches.iter())
        .map(|l| (l.number, l.name.as_str()))
        .chain(live.run.skipped.iter().map(|s| (s.number, s.name.as_str())))
        .collect();
    if counted.len() != t.launches.len() {
        return Err(GpuJobError::Invalid(format!(
            "the timing runs launched {} kernels, the counted run {}: the program's launches \
             depend on the run, so its times cannot be matched to its counts",
            t.launches.len(),
            counted.len()
        )));
    }
    for l in &t.launches {
        if let Some(name) = counted.get(&l.number).filter(|n| **n != l.name) {
            return Err(GpuJobError::Invalid(format!(
                "launch {} is {} in the timing runs but {name} in the counted run",
                l.number, l.name
            )));
        }
    }
    Ok(Some(t))
}

/// The GPU times of `live`'s counted launches (`counts`, in its order), from its folder's
/// `times.tsv` (`bbv gpu run --repeat`), None when the run was not timed; each count's
/// registers come from there too (the counted run's records have none).
pub(crate) fn of_counted(
    live: &Live,
    counts: &mut [bbv_gpu::KernelCount],
) -> Result<Option<Vec<Vec<u64>>>, GpuJobError> {
    let tsv = live.dir.join("times.tsv");
    if !tsv.exists() {
        return Ok(None);
    }
    let counted = (live.run.launches.iter()).map(|l| Counted {
        number: l.number,
        kernel: &l.name,
        grid: l.grid,
        block: l.block,
    });
    let timed = matched(&tsv, times::read_tsv(&tsv)?, counted)?;
    let ns = (timed.into_iter().zip(counts))
        .map(|(t, count)| {
            count.header.nregs = t.registers;
            t.ns
        })
        .collect();
    Ok(Some(ns))
}

/// A counted launch as the timed runs must have launched it too.
struct Counted<'a> {
    number: u64,
    kernel: &'a str,
    grid: [u32; 3],
    block: [u32; 3],
}

/// The line of `times.tsv` (`tsv`, read as `timed`) of each counted launch, in the counted
/// order: a counted launch without one, or of another kernel or shape there, is another
/// run's.
fn matched<'a>(
    tsv: &Path,
    timed: Vec<times::TimedLaunch>,
    counted: impl Iterator<Item = Counted<'a>>,
) -> Result<Vec<times::TimedLaunch>, GpuJobError> {
    let mut timed: std::collections::HashMap<u64, times::TimedLaunch> =
        timed.into_iter().map(|l| (l.number, l)).collect();
    let dims = bbv_cuda::dims_cell;
    counted
        .map(|c| {
            let (number, kernel) = (c.number, c.kernel);
            match timed.remove(&number) {
                Some(t) if t.name == kernel && (t.grid, t.block) == (c.grid, c.block) => Ok(t),
                Some(t) if t.name == kernel => Err(GpuJobError::Invalid(format!(
                    "{}: launch {number} ({kernel}) ran grid {} of blocks {} there but grid {} \
                     of blocks {} in the counted run: records of another run",
                    tsv.display(),
                    dims(t.grid),
                    dims(t.block),
                    dims(c.grid),
                    dims(c.block)
                ))),
                Some(t) => Err(GpuJobError::Invalid(format!(
                    "{}: launch {number} is {} there but {kernel} in the counted run: records \
                     of another run",
                    tsv.display(),
                    t.name
                ))),
                None => Err(GpuJobError::Invalid(format!(
                    "{}: counted launch {number} ({kernel}) has no time: records of another run",
                    tsv.display()
                ))),
            }
        })
        .collect()
}

/// The summary's `timing` object.
pub(crate) fn summary(t: &Times) -> serde_json::Value {
    serde_json::json!({
        "runs": t.unattributed_ns.len(),
        "source": "CUPTI activity records: each kernel's start to end on the GPU, in runs that count nothing",
        "total_ns": t.totals(),
        "total_spread": t.total_spread(),
        "median_launch_spread": t.median_launch_spread(),
        "unattributed_ns": t.unattributed_ns,
    })
}

/// Writes `times.tsv` into the run folder `dir`.
pub(crate) fn write(t: &Times, dir: &Path) -> Result<(), GpuJobError> {
    let mut files = AtomicFiles::default();
    files.write(&dir.join("times.tsv"), |w| t.write_tsv(w))?;
    files.commit()?;
    Ok(())
}

/// The user's lines on the timing runs.
pub(crate) fn report(t: &Times) -> String {
    let totals = t.totals();
    let mean = totals.iter().sum::<u64>() as f64 / totals.len().max(1) as f64;
    let mut s = format!(
        "timed {} runs: {:.3} ms of GPU time per run in {} launches (runs {:.2}% apart, a \
         launch's median {:.2}%)\n",
        totals.len(),
        mean / 1e6,
        t.launches.len(),
        100.0 * t.total_spread(),
        100.0 * t.median_launch_spread()
    );
    let other: u64 = t.unattributed_ns.iter().sum();
    if other > 0 {
        s.push_str(&format!(
            "note: {:.3} ms per run of kernels no launch accounts for (graph launches)\n",
            other as f64 / totals.len().max(1) as f64 / 1e6
        ));
    }
    s
}

/// `bbv gpu score DIR...`: on each timed run folder, bbv's rule and the published ones side by
/// side (picks chosen on the first timing run, scored on the others): a table, then each
/// rule's mean and worst error over the folders.
pub fn gpu_score(
    dirs: &[std::path::PathBuf],
    options: &bbv_gpu::select::SampleOptions,
) -> Result<String, GpuJobError> {
    use bbv_gpu::select::{score, Rule, SampleOptions};
    let rules = Rule::ALL;
    let mut out = String::from(
        "folder\tlaunches\truns\truns_apart\trule\tpicked\testimate_ms\tmeasured_ms\terror\tworst\n",
    );
    let mut by_rule: Vec<Vec<(f64, usize)>> = vec![Vec::new(); rules.len()];
    // The largest spread of the runs' own totals, and its folder.
    let mut widest = (0.0f64, String::new());
    for dir in dirs {
        let (launches, vectors) = records(dir)?;
        for (i, &rule) in rules.iter().enumerate() {
            let o = SampleOptions { rule, ..*options };
            let s = score(&launches, Some(&vectors), &o)?;
            if s.runs_apart >= widest.0 {
                widest = (s.runs_apart, dir.display().to_string());
            }
            by_rule[i].push((s.error, s.picked));
            out.push_str(&format!(
                "{}\t{}\t{}\t{:.2}%\t{}\t{}\t{:.4}\t{:.4}\t{:+.2}%{}\t{:.2}%\n",
                dir.display(),
                launches.len(),
                launches[0].ns.len(),
                100.0 * s.runs_apart,
                rule.name(),
                s.picked,
                s.mean_estimate_ns() / 1e6,
                s.mean_actual_ns() / 1e6,
                100.0 * s.error,
                if s.in_sample { " (in-sample)" } else { "" },
                100.0 * s.worst
            ));
        }
    }
    let totals: Vec<Total> = (by_rule.iter())
        .map(|scores| Total {
            mean: scores.iter().map(|s| s.0.abs()).sum::<f64>() / scores.len().max(1) as f64,
            worst: scores.iter().map(|s| s.0.abs()).fold(0.0, f64::max),
            picked: scores.iter().map(|s| s.1).sum::<usize>(),
        })
        .collect();
    for (rule, t) in rules.iter().zip(&totals) {
        out.push_str(&format!(
            "{}: mean |error| {:.2}%, worst {:.2}%, {} launches picked in all\n",
            rule.name(),
            100.0 * t.mean,
            100.0 * t.worst,
            t.picked
        ));
    }
    out.push_str(&against_default(&rules, &totals, &widest));
    Ok(out)
}

/// A rule's errors and picks over every folder scored.
struct Total {
    mean: f64,
    worst: f64,
    picked: usize,
}

/// `bbv gpu sample`'s default rule against each other rule: which is more accurate on the mean,
/// unless the two differ by less than the runs' own totals do (`widest`: the largest spread and
/// its folder), and which picks fewer launches.
fn against_default(
    rules: &[bbv_gpu::select::Rule],
    totals: &[Total],
    widest: &(f64, String),
) -> String {
    let default = bbv_gpu::select::Rule::default();
    let Some(d) = rules.iter().position(|&r| r == default) else {
        return String::new();
    };
    let mut out = format!(
        "the runs' own totals are up to {:.2}% apart ({}): smaller differences are not claimed\n",
        100.0 * widest.0,
        widest.1
    );
    for (i, rule) in rules.iter().enumerate().filter(|&(i, _)| i != d) {
        let (a, b) = (&totals[d], &totals[i]);
        let verdict = match (a.mean - b.mean).abs() < widest.0 {
            true => "no difference claimed",
            false if a.mean < b.mean => "the default is more accurate",
            false => "the default is less accurate",
        };
        out.push_str(&format!(
            "{} (default) against {}: mean |error| {:.2}% against {:.2}%, {verdict}; {} launches \
             picked against {}\n",
            default.name(),
            rule.name(),
            100.0 * a.mean,
            100.0 * b.mean,
            a.picked,
            b.picked
        ));
    }
    out
}

/// A timed run folder's launches (times, counts, geometry) and basic-block vectors.
fn records(
    dir: &Path,
) -> Result<
    (
        Vec<bbv_gpu::timed::TimedLaunch>,
        Vec<bbv_gpu::blocks::Vector>,
    ),
    GpuJobError,
> {
    // Each file as the run wrote it, or compressed beside (stored records).
    let file = |name: &str| {
        let gz = dir.join(format!("{name}.gz"));
        match dir.join(name) {
            plain if !plain.exists() && gz.exists() => gz,
            plain => plain,
        }
    };
    let tsv = file("times.tsv");
    if !tsv.is_file() {
        return Err(GpuJobError::Invalid(format!(
            "{} has no times.tsv: record the run with `bbv gpu run --repeat N`",
            dir.display()
        )));
    }
    let timed = times::read_tsv(&tsv)?;
    let counted = bbv_cuda::job::read_launches(&file("launches.tsv"))?;
    let vectors = read_vectors(&file("bbv.bb"))?;
    if counted.len() != timed.len() || vectors.len() != timed.len() {
        return Err(GpuJobError::Invalid(format!(
            "{}: {} launches timed, {} counted, {} vectors: score a run that counted every \
             launch (no --launches or --kernels)",
            dir.display(),
            timed.len(),
            counted.len(),
            vectors.len()
        )));
    }
    let shapes = counted.iter().map(|c| Counted {
        number: c.number,
        kernel: &c.kernel,
        grid: c.grid,
        block: c.block,
    });
    let launches = (matched(&tsv, timed, shapes)?.into_iter().zip(&counted))
        .map(|(t, c)| bbv_gpu::timed::TimedLaunch {
            kernel: t.name,
            grid: t.grid,
            block: t.block,
            registers: t.registers,
            shared: t.shared,
            warp_insts: c.warp,
            ns: t.ns,
        })
        .collect();
    Ok((launches, vectors))
}

/// A run folder's `bbv.bb`: one vector per counted launch.
fn read_vectors(path: &Path) -> Result<Vec<bbv_gpu::blocks::Vector>, GpuJobError> {
    let bad = |e: bbv_profile::ProfileError| GpuJobError::Invalid(e.to_string());
    let mut reader = bbv_profile::BbvReader::open(path).map_err(bad)?;
    let mut tokens = Vec::new();
    let mut out = Vec::new();
    while reader.next_vector(&mut tokens).map_err(bad)? {
        out.push(tokens.iter().map(|t| (t.id, t.value as u64)).collect());
    }
    Ok(out)
}
