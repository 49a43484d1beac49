//! `bbv gpu sample` and `bbv gpu run` as library calls: pick the representative launches of a
//! trace or of a live run and write the sampling folder whole (the reduced kernel list or the
//! tracer's commands, weights, text report, summary, HTML page); count a CUDA program live.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Instant;

use bbv_cuda::job::{is_live, raw, Live};
use bbv_cuda::tools::{self, Injection, Selection};
use bbv_files::AtomicFiles;
use bbv_gpu::output::{sample, sample_counts, Source};
use bbv_gpu::select::SampleOptions;
use bbv_gpu::CountMode;

use crate::GpuJobError;

/// Samples the trace of `list`, or the live run in the folder `list`, into the folder `output`;
/// returns the text report.
pub fn gpu_sample(
    list: &Path,
    output: &Path,
    options: SampleOptions,
) -> Result<String, GpuJobError> {
    // The folder's next state is built beside it and swapped in whole.
    let text = bbv_files::folder::update(output, |o| sample_into(list, o, options))?;
    Ok(bbv_files::folder::plain(&text))
}

fn sample_into(list: &Path, output: &Path, options: SampleOptions) -> Result<String, GpuJobError> {
    let mut warnings = String::new();
    let s = if list.is_dir() {
        options.check()?;
        if !is_live(list) {
            return Err(GpuJobError::Invalid(format!(
                "{}: neither a kernel list nor a `bbv gpu run` folder (no raw/ and summary.json)",
                list.display()
            )));
        }
        let live = Live::load(list, &bbv_gpucfg::tools::nvdisasm()?)?;
        let mut counts = live.counts(CountMode::default())?;
        if counts.is_empty() {
            return Err(GpuJobError::Invalid(format!(
                "{}: the run counted no kernel launch: nothing to sample",
                list.display()
            )));
        }
        let command = command_of(list)?;
        for (crc, why) in &live.code.failed {
            warnings.push_str(&format!(
                "warning: cubin {crc:08x} not disassembled (its kernels' counts stay per PC): {why}\n"
            ));
        }
        let source = Source::Live {
            dir: list.to_path_buf(),
            command,
        };
        let ns = crate::gpu_times::of_counted(&live, &mut counts)?;
        sample_counts(source, counts, live.vectors, ns, options)?
    } else {
        sample(list, options)?
    };
    let mut files = AtomicFiles::default();
    s.write(output, &mut files)?;
    let page = bbv_report::html(&bbv_report::from_gpu_sample(
        &list.display().to_string(),
        &s,
    ));
    files.write(&output.join(bbv_rundir::files::REPORT), |w| {
        w.write_all(page.as_bytes())
    })?;
    files.commit()?;
    Ok(warnings + &s.report())
}

/// The command a run folder's summary records.
fn command_of(dir: &Path) -> Result<Vec<String>, GpuJobError> {
    let path = dir.join(bbv_rundir::files::SUMMARY);
    read_json(&path)?["command"]
        .as_array()
        .and_then(|a| a.iter().map(|s| s.as_str().map(String::from)).collect())
        .ok_or_else(|| GpuJobError::Invalid(format!("{}: no command", path.display())))
}

/// A JSON file of bbv's (a summary), whole; malformed: an error naming it.
pub(crate) fn read_json(path: &Path) -> Result<serde_json::Value, GpuJobError> {
    let text = bbv_files::input::read_text(path, 1 << 26)?;
    serde_json::from_str(&text)
        .map_err(|e| GpuJobError::Invalid(format!("{}: {e}", path.display())))
}

/// A live run: the program, where its folder goes and what to count.
#[derive(Clone, Debug)]
pub struct GpuRun {
    /// The run's folder.
    pub output: PathBuf,
    /// The program and its arguments.
    pub command: Vec<String>,
    /// NVBit's counting mode for `counts.txt`.
    pub mode: CountMode,
    /// Which launches to count.
    pub selection: Selection,
    /// Timing runs after the counted one (`--repeat`): each launch's time on the GPU.
    pub repeat: u32,
    /// The folder of the bbv binary (the injection library sits beside it).
    pub exe_dir: PathBuf,
}

/// What a live run gave.
pub struct GpuRunOutcome {
    /// The program's exit status.
    pub status: ExitStatus,
    /// Lines for the user.
    pub report: String,
    /// CUPTI refused something: some counts are missing.
    pub cupti_failed: bool,
}

impl GpuRunOutcome {
    /// bbv's exit status: the program's (128 + signal when killed), 1 when CUPTI refused.
    pub fn exit_code(&self) -> u8 {
        use std::os::unix::process::ExitStatusExt;
        match self.status.code() {
            Some(0) if self.cupti_failed => 1,
            Some(c) => c.clamp(0, 255) as u8,
            None => (128 + self.status.signal().unwrap_or(0)).clamp(0, 255) as u8,
        }
    }
}

/// Runs the program under the injection library, then writes the run folder.
pub fn gpu_run(r: &GpuRun) -> Result<GpuRunOutcome, GpuJobError> {
    // The folder's next state is built beside it and swapped in whole.
    let mut done = bbv_files::folder::update(&r.output, |o| {
        run_into(&GpuRun {
            output: o.to_path_buf(),
            ..r.clone()
        })
    })?;
    done.report = bbv_files::folder::plain(&done.report);
    Ok(done)
}

fn run_into(r: &GpuRun) -> Result<GpuRunOutcome, GpuJobError> {
    let (program, args) = r
        .command
        .split_first()
        .ok_or_else(|| GpuJobError::Invalid("no program to run".into()))?;
    // Everything that can be refused is refused before the program runs.
    tools::check_driver()?;
    let injection = Injection::find(&r.exe_dir)?;
    let nvdisasm = bbv_gpucfg::tools::nvdisasm()?;
    std::fs::create_dir_all(&r.output).map_err(|source| GpuJobError::Create {
        what: format!("cannot create {}", r.output.display()),
        source,
    })?;
    // The raw counts land in a fresh folder, which replaces the last run's only once complete.
    let fresh = r.output.join(format!(".raw.{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&fresh);
    std::fs::create_dir_all(&fresh).map_err(|e| GpuJobError::io(&fresh, e))?;
    let start = Instant::now();
    let status = tools::run_program(&injection, &fresh, program, args, &r.selection, false)?;
    let wall = start.elapsed().as_secs_f64();
    // A program that failed is not timed: its counts are kept, and its times would be those
    // of a run cut short.
    let repeat = if status.success() { r.repeat } else { 0 };
    let timing = crate::gpu_times::timing_runs(&injection, &fresh, &r.command, repeat, status)?;
    let target = raw(&r.output);
    let _ = std::fs::remove_dir_all(&target);
    std::fs::rename(&fresh, &target).map_err(|e| GpuJobError::io(&target, e))?;
    let live = Live::load(&r.output, &nvdisasm).map_err(|e| match died(status) {
        Some(how) => GpuJobError::Invalid(format!(
            "{program} {how} before its counts were written: {e}"
        )),
        None => e.into(),
    })?;
    let times = crate::gpu_times::join(&live, timing)?;
    let mut extra = serde_json::json!({
        "command": r.command,
        "exit_status": status.code(),
        "wall_seconds": wall,
    });
    if let Some(t) = &times {
        extra["timing"] = crate::gpu_times::summary(t);
    }
    live.write(r.mode, extra)?;
    let mut report = outcome_report(&live, wall, &r.output);
    if repeat < r.repeat {
        report.push_str(&format!(
            "note: {program} ended with {status}, so it was not timed (--repeat)\n"
        ));
    }
    if let Some(t) = &times {
        crate::gpu_times::write(t, &r.output)?;
        report.push_str(&crate::gpu_times::report(t));
    }
    Ok(GpuRunOutcome {
        status,
        report,
        cupti_failed: !live.run.errors.is_empty(),
    })
}

/// How a program that did not exit normally ended.
fn died(status: ExitStatus) -> Option<String> {
    use std::os::unix::process::ExitStatusExt;
    status.signal().map(|s| format!("was killed by signal {s}"))
}

fn outcome_report(live: &Live, wall: f64, dir: &Path) -> String {
    let run = &live.run;
    let mut out = String::new();
    if run.launches.is_empty() && run.skipped.is_empty() {
        out.push_str(if live.dir.join("raw/launches.txt").exists() {
            "note: the program launched no kernel (nothing counted)\n"
        } else {
            "note: the program never initialised CUDA (not a CUDA program?): nothing counted\n"
        });
    }
    out.push_str(&format!(
        "{} launches counted, {} skipped, in {wall:.2} s; {} blocks; {}\n",
        run.launches.len(),
        run.skipped.len(),
        live.vectors.blocks.len(),
        dir.display()
    ));
    if run.graphs > 0 {
        out.push_str(&format!(
            "warning: {} graph launches: their kernels are not counted\n",
            run.graphs
        ));
    }
    for (crc, why) in &live.code.failed {
        out.push_str(&format!(
            "warning: cubin {crc:08x} not disassembled (its counts stay per PC): {why}\n"
        ));
    }
    for e in &run.errors {
        out.push_str(&format!("error: CUPTI: {e}\n"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    /// The H200 run of the test kernels, with `records` added before its `done`.
    fn run_with(records: &str) -> (tempfile::TempDir, PathBuf) {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../cuda/tests/data/h200/raw");
        let t = tempfile::tempdir().unwrap();
        let raw = t.path().join("raw");
        std::fs::create_dir_all(raw.join("cubins")).unwrap();
        let cubin = "cubins/4e5b5de8.cubin";
        std::fs::copy(data.join(cubin), raw.join(cubin)).unwrap();
        let text = std::fs::read_to_string(data.join("launches.txt")).unwrap();
        let text = text.replacen("done ", &format!("{records}done "), 1);
        std::fs::write(raw.join("launches.txt"), text).unwrap();
        let dir = t.path().to_path_buf();
        (t, dir)
    }

    #[test]
    fn cupti_refusing_is_printed_and_gives_exit_status_1() {
        let nvdisasm =
            bbv_gpucfg::tools::nvdisasm().expect("nvdisasm (scripts/gpu-tools installs it)");
        let why = "cuptiSassMetricsEnable: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES";
        let (_t, dir) = run_with(&format!("error {why}\n"));
        let live = Live::load(&dir, &nvdisasm).unwrap();
        let report = outcome_report(&live, 1.0, &dir);
        assert!(
            report.contains(&format!("error: CUPTI: {why}\n")),
            "{report}"
        );
        assert!(report.contains("16 launches counted"), "{report}");
        let outcome = |code: i32, refused: bool| GpuRunOutcome {
            status: ExitStatus::from_raw(code << 8),
            report: String::new(),
            cupti_failed: refused,
        };
        assert_eq!(outcome(0, !live.run.errors.is_empty()).exit_code(), 1);
        // The program's own failure wins; no refusal, its status as it is.
        assert_eq!(outcome(3, true).exit_code(), 3);
        assert_eq!(outcome(0, false).exit_code(), 0);
        let killed = GpuRunOutcome {
            status: ExitStatus::from_raw(9),
            report: String::new(),
            cupti_failed: true,
        };
        assert_eq!(killed.exit_code(), 137);
    }

    #[test]
    fn a_program_without_kernels_is_a_note() {
        let nvdisasm =
            bbv_gpucfg::tools::nvdisasm().expect("nvdisasm (scripts/gpu-tools installs it)");
        let t = tempfile::tempdir().unwrap();
        let live = Live::load(t.path(), &nvdisasm).unwrap();
        let report = outcome_report(&live, 0.0, t.path());
        assert!(
            report.starts_with("note: the program never initialised CUDA"),
            "{report}"
        );
        assert!(!report.contains("error"), "{report}");
    }
}
