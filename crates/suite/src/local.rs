//! The local executor and the merge of a suite's results.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::job::{run_job, JobRecord, Status};
use crate::manifest::Manifest;
use crate::SuiteError;

/// What the executor tells its caller (for a progress display).
#[derive(Clone, Debug)]
pub enum Event {
    /// A job started.
    Started(String),
    /// A job ended (or was skipped).
    Ended(String, Status),
}

/// Runs every job of `manifest` with `bbv` into `out`, `jobs` at a time; a failed job never
/// stops the others. Returns each job's record in manifest order.
pub fn run_local(
    manifest: &Manifest,
    out: &Path,
    jobs: usize,
    bbv: &Path,
    version: &str,
    on_event: &(dyn Fn(Event) + Sync),
) -> Result<Vec<JobRecord>, SuiteError> {
    std::fs::create_dir_all(out).map_err(|e| SuiteError::io(out, e))?;
    // One suite run per folder: two would run the same jobs into the same folders.
    let _held = bbv_files::folder::Locked::acquire(out)?;
    let next = AtomicUsize::new(0);
    let results: Mutex<Vec<Option<Result<JobRecord, SuiteError>>>> =
        Mutex::new((0..manifest.jobs.len()).map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, manifest.jobs.len().max(1)) {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(job) = manifest.jobs.get(i) else {
                    break;
                };
                if bbv_files::interrupt::received().is_some() {
                    break;
                }
                on_event(Event::Started(job.name.clone()));
                let r = run_job(bbv, job, out, version);
                let status = r.as_ref().map_or(Status::Failed, |r| r.status);
                on_event(Event::Ended(job.name.clone(), status));
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(r);
            });
        }
    });
    let mut records = Vec::new();
    for (i, r) in results
        .into_inner()
        .unwrap_or_else(|e| e.into_inner())
        .into_iter()
        .enumerate()
    {
        match r {
            Some(r) => records.push(r?),
            // Not started (the suite was stopped).
            None => records.push(pending(&manifest.jobs[i].name, out)),
        }
    }
    Ok(records)
}

/// A job's record from its folder, or a pending one.
fn pending(name: &str, out: &Path) -> JobRecord {
    JobRecord::read(&out.join(name)).unwrap_or(JobRecord {
        status: Status::Pending,
        attempt: 0,
        started: 0,
        finished: 0,
        exit: None,
        seconds: 0.0,
        peak_kib: 0,
        reason: None,
        hash: String::new(),
    })
}

/// [`records`], a job done before this run (`done_before`, per job) shown as skipped.
pub fn records_since(manifest: &Manifest, out: &Path, done_before: &[bool]) -> Vec<JobRecord> {
    records(manifest, out)
        .into_iter()
        .zip(done_before)
        .map(|(r, &before)| {
            if before && r.status == Status::Done {
                JobRecord {
                    status: Status::Skipped,
                    ..r
                }
            } else {
                r
            }
        })
        .collect()
}

/// Each job's record as its folder has it (`pending` where there is none).
pub fn records(manifest: &Manifest, out: &Path) -> Vec<JobRecord> {
    manifest
        .jobs
        .iter()
        .map(|j| pending(&j.name, out))
        .collect()
}

/// Writes `OUT/summary.csv` (job, status, instructions, intervals, k, points, seconds, peak
/// memory) and `OUT/index.html` (each job's report, where it has one).
pub fn merge(manifest: &Manifest, out: &Path, records: &[JobRecord]) -> Result<(), SuiteError> {
    let mut csv = String::from("job,status,instructions,intervals,k,points,seconds,peak_kib\n");
    let mut rows = String::new();
    for (job, r) in manifest.jobs.iter().zip(records) {
        let dir = out.join(&job.name);
        // `bbv run` and `bbv gpu sample` both write these four into summary.json (a GPU job's
        // instructions are warp instructions, its intervals kernel launches).
        let summary = bbv_files::input::read_text(&dir.join(bbv_rundir::files::SUMMARY), 256 << 20)
            .ok()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
            .filter(|_| matches!(r.status, Status::Done | Status::Skipped));
        let (instructions, intervals, k, points) = match &summary {
            Some(s) => {
                let num = |key: &str| s[key].as_u64().map_or(String::new(), |n| n.to_string());
                let points = s["points"]
                    .as_array()
                    .map_or(String::new(), |p| p.len().to_string());
                (num("instructions"), num("intervals"), num("k"), points)
            }
            None => Default::default(),
        };
        csv.push_str(&format!(
            "{},{},{instructions},{intervals},{k},{points},{:.3},{}\n",
            job.name,
            r.status.name(),
            r.seconds,
            r.peak_kib
        ));
        let report = if dir.join(bbv_rundir::files::REPORT).is_file() {
            let page = bbv_rundir::files::REPORT;
            format!("<a href=\"{0}/{page}\">{0}</a>", html(&job.name))
        } else {
            html(&job.name)
        };
        rows.push_str(&format!(
            "<tr><td>{0}</td><td class=\"{1}\">{1}</td><td>{instructions}</td><td>{k}</td><td>{2:.1}</td><td><a href=\"{3}/log\">log</a></td></tr>\n",
            report,
            r.status.name(),
            r.seconds,
            html(&job.name)
        ));
    }
    let page = format!(
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>bbv suite</title><style>\
         body{{font-family:sans-serif}}table{{border-collapse:collapse}}td,th{{padding:2px 8px;border-bottom:1px solid #ccc}}\
         .failed{{color:#b00}}.done,.skipped{{color:#070}}</style></head><body>\n\
         <h1>{}</h1>\n<table id=\"jobs\"><tr><th>job</th><th>status</th><th>instructions</th><th>k</th><th>seconds</th><th></th></tr>\n{rows}</table>\n</body></html>\n",
        html(&manifest.path.display().to_string())
    );
    bbv_files::write_atomic(&out.join("summary.csv"), csv.as_bytes())?;
    bbv_files::write_atomic(&out.join("index.html"), page.as_bytes())?;
    Ok(())
}

fn html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}
