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
