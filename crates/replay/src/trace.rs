//! `bbv trace`: a replay that also writes ChampSim traces of the regions. The plugin writes each
//! region's window (its warmup, the region, then a tail) into a FIFO of its own; a thread per
//! region reads it and compresses it with xz, so that no uncompressed trace touches the disk.
//! With `--raw` the plugin writes each window straight into its (hidden, partial) file: a FIFO
//! and a copying thread would double the cost of every record. The traces, `regions.json` and
//! `regions.tsv` appear only when every region was traced whole.

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

pub use bbv_champsim::condense::Condense;
use bbv_champsim::condense::{CondenseWriter, Condensed};
use bbv_collect::Events;
use bbv_files::AtomicFiles;
use serde::Serialize;

use crate::ReplayError;
use bbv_pipeline::regions::region_id;
use bbv_rundir::Summary;

/// Bytes of one ChampSim record.
const RECORD: u64 = 64;

/// Warmup that left ChampSim's caches as warm as in the whole run, measured on gzip's regions
/// (docs/champsim.md): with 2 million instructions regions still read up to 46% slow.
pub const WARM_ENOUGH: u64 = 8_000_000;

/// [`WARM_ENOUGH`] as traced: markers sit within 0.5% of an interval of their cuts, so 8M asked
/// can trace a little less.
const WARM_ENOUGH_TRACED: u64 = WARM_ENOUGH - WARM_ENOUGH / 100;

impl TraceReport {
    /// What `bbv trace` says when done: where the traces are, and any note.
    pub fn text(&self) -> String {
        let mut t = format!(
            "{} region traces in {} (regions.json: ChampSim's command for each)\n",
            self.regions.len(),
            self.dir.display()
        );
        if let Some(why) = self.short_warmups() {
            let _ = writeln!(t, "bbv: note: {why}");
        }
        t
    }

    /// Why the estimate may read high: every warmup is shorter than [`WARM_ENOUGH`].
    pub fn short_warmups(&self) -> Option<String> {
        let longest = self.regions.iter().map(|r| r.warmup_instructions).max()?;
        (longest < WARM_ENOUGH_TRACED).then(|| {
            format!(
                "warmups of at most {longest} instructions: ChampSim's caches stay colder than in \
                 the whole run and the regions read slow (gzip's by up to 46% with 2 million); \
                 `bbv regions DIR --warmup {WARMUP_ADVISED}` and trace again (docs/champsim.md)"
            )
        })
    }
}

/// The warmup `bbv trace` names when it refuses short ones: xz's 730 KB run read as in context
/// with 32M and cc1's heaviest region with 50M (docs/champsim.md); condensed, a warmup of any
/// length costs ChampSim about its detail kept whole plus a record per line it leaves.
pub const WARMUP_ADVISED: u64 = 50_000_000;

/// Regions (id, warmup) that lie at least [`WARM_ENOUGH`] into the run yet are warmed for
/// less: their traces would start with caches colder than the run's.
fn cold_regions(s: &Summary) -> Vec<(usize, u64)> {
    s.points
        .iter()
        .map(|p| (p, p.warmup.as_ref().map_or(0, |_| p.warmup_length)))
        .filter(|(p, w)| p.start_position >= WARM_ENOUGH && *w < WARM_ENOUGH_TRACED)
        .map(|(p, w)| (region_id(p), w))
        .collect()
}

/// Records of `p`'s warmup to condense: all but the detail, when its warmup marker says where
/// it starts (the markers' tolerance, 0.5% of an interval, lies far inside the detail). A
/// warmup from the program's entry point starts wherever the dynamic loader has finished (17M
/// instructions into LLVM's `opt`), not where the profile's `warmup_length` assumes: it is
/// written whole rather than condensed past its own end.
fn stretch(condense: Option<Condense>, p: &bbv_rundir::Point) -> u64 {
    match (condense, &p.warmup) {
        (Some(c), Some(_)) if p.warmup_length < p.start_position => {
            p.warmup_length.saturating_sub(c.detail)
        }
        _ => 0,
    }
}

/// What to trace besides the replay.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    /// The folder of the traces.
    pub dir: PathBuf,
    /// Records after each region's end (ChampSim reads ahead of retirement).
    pub tail: u64,
    /// xz preset (0-9); None writes the records uncompressed (`region-R.champsim`).
    pub preset: Option<u32>,
    /// How warmups are condensed (None: every record of them written).
    pub condense: Option<Condense>,
    /// Trace regions whose warmups are too short (`--short-warmups`) instead of refusing.
    pub short_warmups: bool,
}

impl TraceSpec {
    /// A spec, its tail, preset and detail checked. `detail`: records before each region
    /// written whole, the rest of the warmup condensed ([`Condense`]'s other defaults); None
    /// writes every record of the warmups.
    pub fn new(
        dir: PathBuf,
        tail: u64,
        preset: Option<u32>,
        detail: Option<u64>,
        short_warmups: bool,
    ) -> Result<TraceSpec, ReplayError> {
        let condense = detail.map(|detail| Condense {
            detail,
            ..Condense::default()
        });
        if tail < 1000 {
            return Err(ReplayError::Invalid(format!(
                "--tail {tail}: at least 1000 records (ChampSim reads ahead of retirement)"
            )));
        }
        if let Some(p) = preset.filter(|&p| p > 9) {
            return Err(ReplayError::Invalid(format!("--xz-preset {p}: 0 to 9")));
        }
        if let Some(c) = condense.filter(|c| c.detail < 100_000) {
            return Err(ReplayError::Invalid(format!(
                "--warmup-detail {}: at least 100000 records (ChampSim's queues, return stack \
                 and predictor history before the region come from records kept whole)",
                c.detail
            )));
        }
        Ok(TraceSpec {
            dir,
            tail,
            preset,
            condense,
            short_warmups,
        })
    }

    /// Refuses, before anything runs, a run of LoopPoint regions, and one whose regions could
    /// be warmed for [`WARM_ENOUGH`] instructions and are not (naming the command that
    /// lengthens them; unless `short_warmups`).
    pub fn check_run(&self, dir: &Path, s: &Summary) -> Result<(), ReplayError> {
        if s.regions_mode == bbv_rundir::Regions::Looppoint {
            // The records are thread 1's; a LoopPoint region spans every thread.
            return Err(ReplayError::Invalid(
                "the regions are LoopPoint slices of several threads: bbv trace writes one \
                 thread's records (single-core ChampSim traces); profile with --regions intervals"
                    .into(),
            ));
        }
        let cold = cold_regions(s);
        if self.short_warmups || cold.is_empty() {
            return Ok(());
        }
        let list: Vec<String> = cold.iter().map(|(id, w)| format!("{id} ({w})")).collect();
        Err(ReplayError::Invalid(format!(
            "regions {} have warmups shorter than {WARM_ENOUGH} instructions though the run has \
             room for them: ChampSim's caches would stay colder than in the whole run and the \
             regions read slow (gzip's by up to 46% with 2 million, xz's +13% as a whole); \
             `bbv regions {} --warmup {WARMUP_ADVISED}` and trace again (warmups are condensed: \
             a long one costs ChampSim little more than a short one), or --short-warmups to \
             trace them as they are",
            list.join(", "),
            dir.display(),
        )))
    }
}

/// One region's trace (`regions.json`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct RegionTrace {
    /// Region id (cluster + 1).
    pub id: usize,
    /// SimPoint's cluster.
    pub cluster: usize,
    /// SimPoint's weight.
    pub weight: f64,
    /// Instructions of the cluster's intervals over the region's.
    pub multiplier: f64,
    /// Instructions of the warmup (its records as traced).
    pub warmup_instructions: u64,
    /// Records of the warmup in the trace (ChampSim's `--warmup-instructions`): fewer than
    /// `warmup_instructions` when condensed.
    pub warmup_records: u64,
    /// Records of the region.
    pub region_instructions: u64,
    /// Records after the region.
    pub tail_instructions: u64,
    /// The trace's file name in the traces' folder.
    pub trace: String,
    /// ChampSim's command line for it (`champsim` from scripts/champsim).
    pub champsim_command: String,
}

/// Everything traced (`regions.json`).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct TraceReport {
    /// The traces' folder.
    pub dir: PathBuf,
    /// The run directory the regions are of, where it was when traced.
    pub run: PathBuf,
    /// That run's identity by content ([`bbv_rundir::Summary::identity`]): what `bbv
    /// simulate` matches, so that a moved or copied run keeps its traces.
    pub run_id: String,
    /// The profiled program's build id (a trace folder names its run).
    pub build_id: Option<String>,
    /// The profiled run's instructions (thread 1).
    pub run_instructions: u64,
    /// `count_rep` of the run: one record per rep instance or per iteration.
    pub count_rep: String,
    /// How the warmups were condensed (None: every record written).
    pub condensed: Option<CondenseDoc>,
    /// Per region, in the run's order.
    pub regions: Vec<RegionTrace>,
}

/// How the warmups were condensed (`regions.json`; docs/champsim.md#condensed-warmups).
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct CondenseDoc {
    /// Records before each region kept whole.
    pub detail: u64,
    /// Lines whose last touch is kept (the newest).
    pub lines: usize,
    /// Executions of each branch kept (the last ones) with the record after each.
    pub branch_repeats: usize,
    /// In words.
    pub rule: String,
}

impl CondenseDoc {
    fn of(c: Condense) -> CondenseDoc {
        CondenseDoc {
            detail: c.detail,
            lines: c.lines,
            branch_repeats: c.branch_repeats,
            rule: "of each warmup but its last `detail` records, the records that are the last \
                   touch of one of their cache lines (instruction or data; written lines stay \
                   written) among the newest `lines` lines, and each branch's last \
                   `branch_repeats` executions with the record after each; the rest of the \
                   warmup and the region whole"
                .into(),
        }
    }
}

struct Window {
    region: usize,
    partial: PathBuf,
    /// Records of the warmup condensed (0: none), and how.
    stretch: u64,
    how: Condense,
    /// The FIFO and the thread compressing what comes through it; None when the plugin writes
    /// `partial` itself.
    reader: Option<(PathBuf, JoinHandle<std::io::Result<Written>>)>,
}

/// What a window's reader read and wrote.
#[derive(Clone, Copy, Debug, Default)]
struct Written {
    /// Bytes read.
    bytes: u64,
    /// Records written, counted as [`CondenseWriter`] does (its stretch 0: none condensed).
    kept: Condensed,
}

/// A tracing replay under way: the FIFOs, their readers and the windows' file. Dropped
/// unfinished (the guest never ran), it releases its readers and removes what they wrote.
pub struct Tracing {
    spec: TraceSpec,
    windows: Vec<Window>,
    /// The plugin's `trace=FILE`.
    pub file: PathBuf,
}

impl Drop for Tracing {
    fn drop(&mut self) {
        for (_, partial, _) in collect(std::mem::take(&mut self.windows), false) {
            let _ = std::fs::remove_file(partial);
        }
    }
}

/// Releases and joins every reader: (region, partial file, what it read and wrote); with
/// `condense`, windows the plugin wrote itself are condensed now.
fn collect(
    windows: Vec<Window>,
    condense: bool,
) -> Vec<(usize, PathBuf, std::io::Result<Written>)> {
    let mut got = Vec::new();
    for w in windows {
        let bytes = match w.reader {
            Some((fifo, reader)) => {
                // A reader not yet at its open() when released would wait forever: release
                // until it is done (one whose window ran ends by itself).
                while !reader.is_finished() {
                    release(&fifo);
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
                reader
                    .join()
                    .unwrap_or_else(|_| Err(std::io::Error::other("reader panicked")))
            }
            // A window that never opened has no file: no records.
            None => match std::fs::metadata(&w.partial) {
                Ok(m) => condense_file(&w.partial, m.len(), w.stretch * u64::from(condense), w.how),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Written::default()),
                Err(e) => Err(e),
            },
        };
        got.push((w.region, w.partial, bytes));
    }
    got
}

/// The start event of region `r` of `n`: its warmup's, or its own without a warmup (events as
/// `replay` numbers them: start 2r, end 2r + 1, warmup 2n + r).
fn start_event(s: &Summary, r: usize) -> usize {
    if s.points[r].warmup.is_some() {
        2 * s.points.len() + r
    } else {
        2 * r
    }
}

impl Tracing {
    /// Makes a FIFO per region in `work` and starts its reader (for xz), and writes the
    /// windows' file.
    pub fn start(spec: &TraceSpec, s: &Summary, work: &Path) -> Result<Tracing, ReplayError> {
        std::fs::create_dir_all(&spec.dir).map_err(|source| ReplayError::Create {
            what: format!("cannot create {}", spec.dir.display()),
            source,
        })?;
        bbv_files::interrupt::remove_orphan_partials(&spec.dir);
        let mut text = String::new();
        let mut windows = Vec::new();
        for (r, p) in s.points.iter().enumerate() {
            let name = trace_name(region_id(p), spec.preset.is_some());
            let stretch = stretch(spec.condense, p);
            let how = spec.condense.unwrap_or_default();
            let partial = spec
                .dir
                .join(format!(".{name}.{}.partial", std::process::id()));
            let reader = match spec.preset {
                Some(preset) => {
                    let fifo = work.join(format!("region-{r}.fifo"));
                    make_fifo(&fifo)?;
                    let reader = spawn_xz(fifo.clone(), partial.clone(), preset, stretch, how);
                    Some((fifo, reader))
                }
                None => None,
            };
            let into = reader.as_ref().map_or(&partial, |(fifo, _)| fifo);
            let _ = writeln!(
                text,
                "window {r} {} {} {} {} {} {}",
                start_event(s, r),
                2 * r,
                2 * r + 1,
                spec.tail,
                record_limit(p, spec.tail),
                into.display()
            );
            windows.push(Window {
                region: r,
                partial,
                stretch,
                how,
                reader,
            });
        }
        let file = work.join("windows");
        std::fs::write(&file, text).map_err(|e| ReplayError::io(&file, e))?;
        Ok(Tracing {
            spec: spec.clone(),
            windows,
            file,
        })
    }

    /// After the guest: releases the readers of windows that never opened, checks every trace
    /// against the replay's events, and puts the traces and their tables in place (or removes
    /// them all).
    pub fn finish(
        mut self,
        run: &Path,
        s: &Summary,
        events: Option<&Events>,
    ) -> Result<TraceReport, ReplayError> {
        let got = collect(std::mem::take(&mut self.windows), true);
        // The folders as they are named once the command's stages are in place.
        let result = check(s, &self.spec, events, &got).map(|regions| TraceReport {
            dir: bbv_files::folder::plain_path(&self.spec.dir),
            run: bbv_files::folder::plain_path(run),
            run_id: s.identity(),
            build_id: s.program.build_id.clone(),
            run_instructions: s.threads.first().map_or(0, |t| t.instructions),
            count_rep: s.count_rep.clone(),
            condensed: self.spec.condense.map(CondenseDoc::of),
            regions,
        });
        let placed = result.and_then(|report| {
            for (r, partial, _) in &got {
                let to = self.spec.dir.join(&report.regions[*r].trace);
                std::fs::rename(partial, &to).map_err(|e| ReplayError::io(&to, e))?;
            }
            write_tables(&report, &self.spec.dir, run)?;
            Ok(report)
        });
        if placed.is_err() {
            for (_, partial, _) in &got {
                let _ = std::fs::remove_file(partial);
            }
        }
        placed
    }
}

/// `region-R.champsim.xz`, or `region-R.champsim` uncompressed (ChampSim chooses how to read
/// a trace by its name's ending).
pub fn trace_name(id: usize, xz: bool) -> String {
    match xz {
        true => format!("region-{id}.champsim.xz"),
        false => format!("region-{id}.champsim"),
    }
}

pub(crate) fn make_fifo(path: &Path) -> Result<(), ReplayError> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| ReplayError::Invalid(format!("{}: NUL in path", path.display())))?;
    // SAFETY: c is a valid NUL-terminated path.
    if unsafe { libc::mkfifo(c.as_ptr(), 0o600) } != 0 {
        return Err(ReplayError::io(path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Reads a FIFO to its end (blocking until the plugin opens it) and writes what comes into
/// `to`, its first `stretch` records condensed as `how` says, compressed with xz at `preset`.
fn spawn_xz(
    fifo: PathBuf,
    to: PathBuf,
    preset: u32,
    stretch: u64,
    how: Condense,
) -> JoinHandle<std::io::Result<Written>> {
    std::thread::spawn(move || {
        let input = std::fs::File::open(&fifo)?;
        let out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&to)?);
        let xz = xz2::write::XzEncoder::new(out, preset);
        let mut w = CondenseWriter::new(xz, stretch, how);
        let bytes = copy_all(input, &mut w)?;
        let (xz, kept) = w.finish()?;
        xz.finish()?.flush()?;
        Ok(Written { bytes, kept })
    })
}

/// A window the plugin wrote itself (`bytes` long), its first `stretch` records condensed
/// in place.
fn condense_file(
    partial: &Path,
    bytes: u64,
    stretch: u64,
    how: Condense,
) -> std::io::Result<Written> {
    if stretch == 0 {
        let kept = Condensed {
            records_in: bytes / RECORD,
            records_out: bytes / RECORD,
            ..Condensed::default()
        };
        return Ok(Written { bytes, kept });
    }
    let mut name = partial.as_os_str().to_owned();
    name.push(".condensed");
    let to = PathBuf::from(name);
    let result = (|| {
        let out = std::io::BufWriter::with_capacity(1 << 20, std::fs::File::create(&to)?);
        let mut w = CondenseWriter::new(out, stretch, how);
        copy_all(std::fs::File::open(partial)?, &mut w)?;
        let (out, kept) = w.finish()?;
        out.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&to, partial)?;
        Ok(Written { bytes, kept })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&to);
    }
    result
}

/// Copies until the writer of the FIFO closes it; the bytes copied.
fn copy_all(mut input: std::fs::File, out: &mut impl Write) -> std::io::Result<u64> {
    let mut buf = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        out.write_all(&buf[..n])?;
        total += n as u64;
    }
    Ok(total)
}

/// Opens a FIFO for writing without blocking and closes it: a reader still waiting for the
/// plugin (its window never started) sees the end at once; otherwise nothing happens.
pub(crate) fn release(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
}

/// The most records a window takes: twice its warmup and region as profiled, its tail and a
/// million more. A replayed region is within the tolerance of its profiled length, so only a
/// window whose end marker is missed reaches this, and stops there instead of recording to the
/// program's end.
pub(crate) fn record_limit(p: &bbv_rundir::Point, tail: u64) -> u64 {
    (p.warmup_length.saturating_add(p.length))
        .saturating_mul(2)
        .saturating_add(tail)
        .saturating_add(1_000_000)
}

fn check(
    s: &Summary,
    spec: &TraceSpec,
    events: Option<&Events>,
    got: &[(usize, PathBuf, std::io::Result<Written>)],
) -> Result<Vec<RegionTrace>, ReplayError> {
    let mut regions = Vec::new();
    let mut missing = Vec::new();
    for (r, _, bytes) in got {
        let p = &s.points[*r];
        let id = region_id(p);
        let pos = |e: usize| events.and_then(|ev| ev.get(&e)).map(|x| x.0);
        let (Some(warm), Some(start), Some(end)) =
            (pos(start_event(s, *r)), pos(2 * r), pos(2 * r + 1))
        else {
            let limit = record_limit(p, spec.tail);
            let cut = matches!(bytes, Ok(w) if w.bytes >= limit * RECORD);
            missing.push(match cut {
                true => format!(
                    "region {id}: its end marker was not reached within {limit} records (twice \
                     its profiled warmup and length, and more): its recording stopped there"
                ),
                false => format!("region {id}: a marker was not reached"),
            });
            continue;
        };
        // The window opened at whichever came first (see the plugin's record module).
        let first = warm.min(start);
        let written = match bytes {
            Ok(w) => *w,
            Err(e) => {
                missing.push(format!("region {id}: writing its trace: {e}"));
                continue;
            }
        };
        let (warmup, region) = (start.saturating_sub(first), end.saturating_sub(start));
        let want = (warmup + region + spec.tail) * RECORD;
        let bytes = written.bytes;
        if bytes != want {
            missing.push(format!(
                "region {id}: {} records traced, {} expected ({warmup} warmup + {region} region + {} tail)",
                bytes / RECORD,
                want / RECORD,
                spec.tail
            ));
            continue;
        }
        let Some(warmup_records) = written.kept.warmup_records(warmup) else {
            missing.push(format!(
                "region {id}: {} records condensed, but its warmup is {warmup} (trace again \
                 with --full-warmup)",
                written.kept.stretch_in
            ));
            continue;
        };
        let trace = trace_name(id, spec.preset.is_some());
        regions.push(RegionTrace {
            id,
            cluster: p.cluster,
            weight: p.weight,
            multiplier: p.multiplier,
            warmup_instructions: warmup,
            warmup_records,
            region_instructions: region,
            tail_instructions: spec.tail,
            champsim_command: format!(
                "champsim --warmup-instructions {warmup_records} --simulation-instructions {region} {trace}"
            ),
            trace,
        });
    }
    if !missing.is_empty() {
        return Err(ReplayError::NotTraced(missing.join("; ")));
    }
    Ok(regions)
}

/// `TRACEDIR/regions.json` and `.tsv`, and `DIR/trace.json` (the same, so that later commands
/// find the traces), written into `traces` and `run` (the folders' stages).
fn write_tables(report: &TraceReport, traces: &Path, run: &Path) -> Result<(), ReplayError> {
    let mut files = AtomicFiles::default();
    for path in [
        traces.join(bbv_rundir::files::REGIONS_JSON),
        run.join(bbv_rundir::files::TRACE),
    ] {
        files.write(&path, |w| {
            serde_json::to_writer_pretty(&mut *w, report)?;
            w.write_all(b"\n")
        })?;
    }
    files.write(&traces.join("regions.tsv"), |w| {
        writeln!(w, "id\tcluster\tweight\tmultiplier\twarmup_instructions\twarmup_records\tregion_instructions\ttail_instructions\ttrace\tchampsim_command")?;
        for r in &report.regions {
            writeln!(
                w,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                r.id,
                r.cluster,
                r.weight,
                r.multiplier,
                r.warmup_instructions,
                r.warmup_records,
                r.region_instructions,
                r.tail_instructions,
                r.trace,
                r.champsim_command
            )?;
        }
        Ok(())
    })?;
    files.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(warmups: &[u64]) -> TraceReport {
        TraceReport {
            dir: PathBuf::new(),
            run: PathBuf::new(),
            run_id: String::new(),
            build_id: None,
            run_instructions: 0,
            count_rep: "instance".into(),
            condensed: None,
            regions: warmups
                .iter()
                .map(|&w| RegionTrace {
                    id: 1,
                    cluster: 0,
                    weight: 1.0,
                    multiplier: 1.0,
                    warmup_instructions: w,
                    warmup_records: w,
                    region_instructions: 1,
                    tail_instructions: 1,
                    trace: String::new(),
                    champsim_command: String::new(),
                })
                .collect(),
        }
    }

    #[test]
    fn warmups_from_a_marker_are_condensed_and_from_the_entry_point_not() {
        let text = r#"{"cluster":0,"interval":9,"weight":0.5,"start_instruction":18000000,
            "start":{"image":"a","offset":"0x10","count":1},
            "end":{"image":"a","offset":"0x20","count":1},
            "warmup":{"image":"a","offset":"0x30","count":4},
            "length":2000000,"start_position":18000005,"warmup_length":16000000,
            "multiplier":2.0,"end_relative":1}"#;
        let mut p: bbv_rundir::Point = serde_json::from_str(text).unwrap();
        let c = Some(Condense::default());
        assert_eq!(stretch(c, &p), 14_000_000);
        assert_eq!(stretch(None, &p), 0);
        // From the entry point: warmup_length is the start position, an assumption.
        p.warmup_length = p.start_position;
        assert_eq!(stretch(c, &p), 0);
        p.warmup = None;
        assert_eq!(stretch(c, &p), 0);
    }

    #[test]
    fn short_warmups_allow_for_the_markers_tolerance() {
        // 8M asked, traced from the nearest marker: no note.
        assert_eq!(report(&[0, 7_999_643]).short_warmups(), None);
        let note = report(&[2_000_000, 500_000]).short_warmups().unwrap();
        assert!(note.contains("at most 2000000 instructions"), "{note}");
        assert_eq!(report(&[]).short_warmups(), None);
    }
}
