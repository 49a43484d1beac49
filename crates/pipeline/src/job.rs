//! `bbv run` as a library call: collect, place the raw files, cluster, then
//! [`finish`](crate::finish).

use std::path::{Path, PathBuf};

use bbv_collect::{Collected, GuestStatus};
use bbv_profile::MetricsRow;
use bbv_simpoint::Observer;

use crate::finish::{finish, Finished};
use crate::rundir::{self, ImageRow, Program, Regions, Summary, ThreadTotal, LAYOUT};
use bbv_files::AtomicFiles;

use crate::validate::Pick;
use crate::PipelineError;

/// What `bbv run` asks for.
#[derive(Clone, Debug)]
pub struct RunRequest {
    /// The collection (its `work_dir` should be `out`, so files are renamed into place).
    pub collect: bbv_collect::Request,
    /// The run directory.
    pub out: PathBuf,
    /// Largest k tried.
    pub max_k: usize,
    /// Try every k up to `max_k` with SimPoint's BIC rule, not its binary search.
    pub every_k: bool,
    /// Cluster every thread's intervals together instead of the main thread's.
    pub threads_all: bool,
    /// Warmup instructions before each region (None: one interval).
    pub warmup: Option<u64>,
    /// How regions are formed.
    pub regions: RegionsMode,
    /// `--target-error` (a fraction): choose the smallest k whose estimates are all this
    /// close (needs metrics, `collect.metrics`).
    pub target_error: Option<f64>,
    /// How each cluster's point is picked (needs metrics for any but [`Pick::Centroid`]).
    pub pick: Pick,
    /// Deterministic turns of this many instructions where the QEMU allows them, the pace of
    /// `collect` otherwise (`--schedule auto` with `--regions looppoint`).
    pub turns_if_possible: Option<u64>,
    /// `out` was made for this run: removed again when nothing is committed into it.
    pub created_out: bool,
}

/// How regions are formed (`bbv run --regions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegionsMode {
    /// `looppoint` when a thread other than the main one ran more instructions than the main
    /// thread, else `intervals`.
    Auto,
    /// SimPoint on the main thread's intervals.
    Intervals,
    /// LoopPoint's slices of all threads.
    Looppoint,
}

/// How the guest ended, and whether bbv finished its files afterwards.
pub struct RunOutcome {
    /// The guest's status.
    pub status: GuestStatus,
    /// The finished run directory, or why it could not be finished.
    pub finished: Result<Finished, PipelineError>,
    /// Things the user should know that did not stop the run.
    pub warnings: Vec<String>,
}

/// Runs the main job: collect, place the raw files, cluster, then [`finish`]. `watcher` hears
/// how far the guest got while it runs, `observer` the clustering.
/// `Err` = nothing ran (bad request); the guest's failures are in the outcome.
pub fn run(
    req: &RunRequest,
    observer: &dyn Observer,
    watcher: Option<&dyn bbv_collect::Watcher>,
) -> Result<RunOutcome, PipelineError> {
    // The run is built beside the run directory and swapped in whole when finished: a
    // failed or killed run leaves the previous one (and a folder made for it goes again).
    let mut staged = bbv_files::folder::Staged::open(&req.out)?;
    if req.created_out {
        staged.remove_folder_on_drop();
    }
    let mut collect = req.collect.clone();
    collect.work_dir = staged.path().to_path_buf();
    let mut prepared = bbv_collect::prepare(collect)?;
    let qemu = bbv_collect::qemu_version(&prepared.qemu).unwrap_or_else(|| "unknown".into());
    let prepared_qemu = prepared.qemu.clone();
    let mut warnings = Vec::new();
    if let Some(q) = req.turns_if_possible {
        if !prepared.take_turns(q) {
            warnings.push(format!("QEMU {qemu} runs the threads as the host schedules them (paced within {} instructions): replayed regions can drift; QEMU 9.1 or later (scripts/build-qemu, --qemu) gives a deterministic order", req.collect.counting.flow));
        }
    }
    // The summary records what ran.
    let req = &RunRequest {
        collect: prepared.request().clone(),
        out: staged.path().to_path_buf(),
        ..req.clone()
    };
    let r = &req.collect;
    let program = prepared.program.clone();
    let outcome = prepared.run_watched(watcher)?;
    let finished = (|| {
        let c = outcome.collected?;
        // Rows cut at slices are matched against the slices once they are built.
        let sliced = r.counting.metrics.is_some_and(|m| m.slice_rows) && c.slices.is_some();
        let rows = match if sliced {
            c.metrics_rows_all()
        } else {
            c.metrics_rows()
        } {
            Ok(rows) => rows,
            Err(e) => {
                warnings.push(format!("--validate: {e}; no validation"));
                None
            }
        };
        place(&c, &req.out, rows.as_deref())?;
        let facts = run_facts(req, &c, &program, (qemu, &prepared_qemu))?;
        let (mode, reason) = choose_mode(req.regions, &facts);
        let first = cluster_as(
            req,
            &c,
            facts.clone(),
            (mode, reason),
            rows.as_deref(),
            &mut warnings,
            observer,
        )
        .and_then(|()| finish(&req.out, None));
        match first {
            // The main thread's code runs on other threads too, so no marker of it can be
            // counted from its own vectors: the slices of all threads can.
            Err(PipelineError::NoMarker { cut, .. })
                if req.regions == RegionsMode::Auto && c.slices.is_some() =>
            {
                let why = format!(
                    "intervals mode found no marker at cut {cut} of the main thread (its code also runs on other threads)"
                );
                let mode = (Regions::Looppoint, why);
                cluster_as(
                    req,
                    &c,
                    facts,
                    mode,
                    rows.as_deref(),
                    &mut warnings,
                    observer,
                )?;
                finish(&req.out, None)
            }
            other => other,
        }
    })();
    let finished = finished.and_then(|f| {
        staged.commit()?;
        Ok(f)
    });
    Ok(RunOutcome {
        status: outcome.status,
        finished,
        warnings,
    })
}

/// Writes the clustering input of `mode` (`global.bb` for looppoint), `summary.json`, and
/// clusters (and validates the points against `rows`, the metrics, when given).
fn cluster_as(
    req: &RunRequest,
    c: &Collected,
    mut summary: Summary,
    (mode, reason): (Regions, String),
    rows: Option<&[MetricsRow]>,
    warnings: &mut Vec<String>,
    observer: &dyn Observer,
) -> Result<(), PipelineError> {
    let r = &req.collect;
    let per_slice = r.counting.metrics.is_some_and(|m| m.slice_rows);
    let mut metrics = match rows {
        Some(_) if (mode == Regions::Looppoint && !per_slice) || req.threads_all => {
            warnings.push(format!(
                "--validate: the metrics follow the main thread's intervals, but this run clustered {}: metrics.csv is written, validation.json is not{}",
                if mode == Regions::Looppoint { "slices of all threads" } else { "every thread's intervals" },
                if mode == Regions::Looppoint { " (--regions looppoint cuts them at the slices)" } else { "" }
            ));
            None
        }
        other => other.map(<[MetricsRow]>::to_vec),
    };
    summary.regions_mode = mode;
    summary.regions_reason = reason;
    let rows = if mode == Regions::Looppoint {
        let blocks = rundir::read_blocks(&req.out.join(rundir::files::BLOCKS))?;
        let threads: Vec<u32> = c.threads.iter().map(|t| t.number).collect();
        let slices = crate::slices::build(&req.out, &threads, &blocks, &r.counting.exclude)?;
        summary.filtered_instructions = Some(slices.iter().map(|s| s.filtered).sum());
        warnings.extend(unmapped(c, &r.counting.exclude));
        if let Some(m) = metrics.as_mut() {
            match_slices(&req.out, m, slices.len(), warnings)?;
            if m.is_empty() {
                metrics = None;
            }
        }
        slices.len() as u64
    } else if req.threads_all {
        concatenate(c, &req.out, &req.out.join(rundir::files::BB_ALL))?
    } else {
        c.threads.first().map_or(0, |t| t.intervals)
    };
    summary.intervals = rows;
    let mut files = AtomicFiles::default();
    files.write(&req.out.join(rundir::files::SUMMARY), |w| {
        rundir::write_summary(w, &summary)
    })?;
    files.commit()?;
    if metrics.is_none() && req.pick != Pick::Centroid {
        warnings.push(format!(
            "--pick {}: no metrics to pick by (see above): each point is the interval nearest its cluster's centre",
            req.pick.name()
        ));
    }
    if rows > 0 {
        let input = rundir::clustered_input(&req.out, &summary);
        let var_length = mode == Regions::Looppoint;
        let validate = metrics.as_deref().map(|rows| crate::cluster::Validate {
            rows,
            target_error: req.target_error,
            pick: req.pick,
            tail: (!var_length)
                .then(|| summary.tail_fraction(rows.iter().map(|r| r.instructions() as f64).sum())),
        });
        let v = crate::cluster::cluster_validated(
            &input,
            crate::cluster::KRange {
                max_k: req.max_k,
                every: req.every_k,
            },
            &req.out.join(rundir::files::SIMPOINT),
            var_length,
            observer,
            validate.as_ref(),
        )?;
        if let Some(v) = v.filter(|v| v.k_rule.contains("not met")) {
            warnings.push(v.k_rule);
        }
    }
    Ok(())
}

/// Matches metrics rows cut at slices to the `n` slices built: the last row may be of a slice
/// the exit left empty (dropped, and `metrics.csv` rewritten); fewer rows than slices (a guest
/// killed before the plugin's exit wrote the last) leave the run without validation, emptied.
fn match_slices(
    dir: &Path,
    rows: &mut Vec<MetricsRow>,
    n: usize,
    warnings: &mut Vec<String>,
) -> Result<(), PipelineError> {
    if rows.len() < n {
        warnings.push(format!(
            "--validate: the metrics have {} rows for {n} slices (the guest ended without running the plugin's exit?): no validation",
            rows.len()
        ));
        rows.clear();
    } else if rows.len() > n {
        rows.truncate(n);
        let mut files = AtomicFiles::default();
        files.write(&dir.join(rundir::files::METRICS), |w| {
            crate::write_metrics(w, rows)
        })?;
        files.commit()?;
    }
    Ok(())
}

/// The regions mode to use and why.
fn choose_mode(asked: RegionsMode, s: &Summary) -> (Regions, String) {
    let main = s.threads.first().map_or(0, |t| t.instructions);
    let busiest = s.threads.iter().skip(1).max_by_key(|t| t.instructions);
    match asked {
        RegionsMode::Intervals => (Regions::Intervals, "asked for (--regions intervals)".into()),
        RegionsMode::Looppoint => (Regions::Looppoint, "asked for (--regions looppoint)".into()),
        RegionsMode::Auto => match busiest {
            Some(t) if t.instructions > main => (
                Regions::Looppoint,
                format!(
                    "thread {} ran more instructions ({}) than the main thread ({main})",
                    t.thread, t.instructions
                ),
            ),
            Some(_) => (
                Regions::Intervals,
                "no other thread ran more instructions than the main thread".into(),
            ),
            None => (Regions::Intervals, "one thread".into()),
        },
    }
}

/// Excluded images that were never mapped (a likely misspelling), as warnings.
fn unmapped(c: &Collected, exclude: &[String]) -> Vec<String> {
    exclude
        .iter()
        .filter(|e| !crate::DEFAULT_EXCLUDE.contains(&e.as_str()))
        .filter(|e| {
            !c.images
                .iter()
                .any(|i| bbv_profile::image_matches(&i.name(), std::slice::from_ref(*e)))
        })
        .map(|e| {
            format!(
                "--exclude-image {e}: no image of that name was mapped; nothing excluded for it"
            )
        })
        .collect()
}

/// Moves the collected files into the run directory and writes the block and image tables
/// (and the metrics, or removes those of an earlier run).
fn place(c: &Collected, dir: &Path, rows: Option<&[MetricsRow]>) -> Result<(), PipelineError> {
    let mut files = AtomicFiles::default();
    if let Some(rows) = rows {
        files.write(&dir.join(rundir::files::METRICS), |w| {
            crate::write_metrics(w, rows)
        })?;
    }
    files.write(&dir.join(rundir::files::PC), |w| {
        bbv_collect::write_pc(w, &c.blocks)
    })?;
    files.write(&dir.join(rundir::files::BLOCKS), |w| {
        bbv_collect::write_blocks_tsv(w, &c.blocks, &c.images)
    })?;
    let images: Vec<ImageRow> = c
        .images
        .iter()
        .map(|i| ImageRow {
            name: i.name(),
            path: i.path.clone(),
            fixed: i.fixed,
            build_id: i.build_id.clone(),
            bias: i.bias,
        })
        .collect();
    files.write(&dir.join(rundir::files::IMAGES), |w| {
        rundir::write_images(w, &images)
    })?;
    // The tables and the vectors land together, even if bbv is killed now, and without an
    // earlier run's later files: the clustering and the hand-off write theirs again when this
    // run gets that far (a run that stops before, or has no point, leaves none).
    let hold = bbv_files::interrupt::hold();
    if rows.is_none() {
        remove_stale(dir, rundir::files::METRICS)?;
    }
    for stale in STALE {
        remove_stale(dir, stale)?;
    }
    files.commit_held(&hold)?;
    for t in &c.threads {
        if let Some(src) = &t.bb {
            bbv_files::move_file(src, &rundir::thread_file(dir, t.number))?;
        }
    }
    if let Some(src) = &c.slices {
        bbv_files::move_file(src, &dir.join(rundir::files::SLICE_CUTS))?;
    }
    for t in &c.threads {
        // The run directory keeps the plugin's name for it.
        let name = bbv_plugin_contract::files::thread_slices(t.number);
        match &t.slices {
            Some(src) => bbv_files::move_file(src, &dir.join(name))?,
            None => remove_stale(dir, &name)?,
        }
    }
    let marks = dir.join(rundir::files::MARKS);
    match c.threads.first().and_then(|t| t.marks.as_ref()) {
        Some(m) => bbv_files::move_file(m, &marks)?,
        None => std::fs::write(&marks, b"").map_err(|e| PipelineError::io(&marks, e))?,
    }
    Ok(())
}

fn run_facts(
    req: &RunRequest,
    c: &Collected,
    program: &Path,
    (qemu, qemu_path): (String, &Path),
) -> Result<Summary, PipelineError> {
    let r = &req.collect;
    Ok(Summary {
        layout: LAYOUT,
        instructions: c.threads.iter().map(|t| t.instructions).sum(),
        threads: c
            .threads
            .iter()
            .map(|t| ThreadTotal {
                thread: t.number,
                instructions: t.instructions,
            })
            .collect(),
        interval: r.counting.interval,
        intervals: 0,
        k: 0,
        max_k: req.max_k,
        every_k: req.every_k,
        qemu,
        qemu_path: std::path::absolute(qemu_path)
            .ok()
            .map(|p| p.display().to_string()),
        cpu: r.guest.launch.cpu.clone(),
        sysroot: r
            .guest
            .launch
            .sysroot
            .as_ref()
            .map(|p| p.display().to_string()),
        program: Program {
            path: program.display().to_string(),
            build_id: bbv_collect::ElfFacts::read(program).and_then(|f| f.build_id),
            args: r
                .guest
                .args
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
        },
        count_rep: if r.counting.rep_iterations {
            "iteration"
        } else {
            "instance"
        }
        .into(),
        exact: r.counting.exact,
        clustered: if req.threads_all {
            rundir::Clustered::All
        } else {
            rundir::Clustered::Main
        },
        warmup: req.warmup.unwrap_or(r.counting.interval),
        regions_mode: rundir::Regions::Intervals,
        regions_reason: String::new(),
        exclude: r.counting.exclude.clone(),
        filtered_instructions: None,
        flow_quantum: r.counting.flow,
        schedule: if r.counting.turns > 0 {
            "deterministic"
        } else {
            "host"
        }
        .into(),
        turn_quantum: r.counting.turns,
        schedule_events: c.schedule_events()?,
        points: Vec::new(),
    })
}

/// Writes every thread's vectors, in thread order, into one file (`--threads all`).
fn concatenate(c: &Collected, dir: &Path, out: &Path) -> Result<u64, PipelineError> {
    let mut rows = 0;
    let mut files = AtomicFiles::default();
    let mut failure = None;
    files.write(out, |w| {
        let mut bw = bbv_profile::BbvWriter::new(w);
        for t in &c.threads {
            let path = rundir::thread_file(dir, t.number);
            let mut r = match bbv_profile::BbvReader::open(&path) {
                Ok(r) => r,
                Err(e) => {
                    failure = Some(e);
                    return Ok(());
                }
            };
            let mut v = Vec::new();
            loop {
                match r.next_vector(&mut v) {
                    Ok(true) => {}
                    Ok(false) => break,
                    Err(e) => {
                        failure = Some(e);
                        return Ok(());
                    }
                }
                let pairs: Vec<(u32, u64)> = v.iter().map(|t| (t.id, t.value as u64)).collect();
                bw.write_vector(&pairs)?;
                rows += 1;
            }
        }
        bw.finish().map(drop)
    })?;
    if let Some(e) = failure {
        return Err(e.into());
    }
    files.commit()?;
    Ok(rows)
}

/// Files of a run directory written after the vectors are placed.
const STALE: [&str; 19] = [
    rundir::files::VALIDATION,
    rundir::files::GLOBAL_BB,
    rundir::files::SLICES,
    rundir::files::SLICE_CUTS,
    rundir::files::BIC,
    rundir::files::REPORT,
    rundir::files::SIMPOINTS,
    rundir::files::WEIGHTS,
    rundir::files::LABELS,
    rundir::files::SUMMARY,
    rundir::files::SUMMARY_TXT,
    rundir::files::REGIONS_CSV,
    rundir::files::REGIONS_JSON,
    rundir::files::SNIPER,
    "gem5/simpoints",
    "gem5/weights",
    "gem5/README",
    "nemu/simpoints0",
    "nemu/weights0",
];

/// Removes `dir/name` if an earlier run left it.
fn remove_stale(dir: &Path, name: &str) -> Result<(), PipelineError> {
    let p = dir.join(name);
    match std::fs::remove_file(&p) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(PipelineError::io(&p, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(n: u64) -> Vec<MetricsRow> {
        (0..n)
            .map(|i| MetricsRow([1000 + i, i, 0, 0, 0, 0, 0, 0]))
            .collect()
    }

    #[test]
    fn slice_rows_are_matched_to_the_slices() {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("metrics.csv");
        let mut warnings = Vec::new();
        // One row too many (a slice the exit left empty): dropped, and the file rewritten.
        let mut m = rows(4);
        std::fs::write(&csv, "stale").unwrap();
        match_slices(dir.path(), &mut m, 3, &mut warnings).unwrap();
        assert_eq!(m, rows(3));
        assert_eq!(bbv_profile::read_metrics(&csv).unwrap(), rows(3));
        assert!(warnings.is_empty());
        // As many: untouched.
        std::fs::write(&csv, "kept").unwrap();
        match_slices(dir.path(), &mut m, 3, &mut warnings).unwrap();
        assert_eq!(m, rows(3));
        assert_eq!(std::fs::read_to_string(&csv).unwrap(), "kept");
        // Too few (the guest died before the last row): no validation, and the user is told.
        match_slices(dir.path(), &mut m, 5, &mut warnings).unwrap();
        assert!(m.is_empty());
        assert_eq!(warnings.len(), 1);
        assert!(warnings[0].contains("3 rows for 5 slices"), "{warnings:?}");
    }
}
