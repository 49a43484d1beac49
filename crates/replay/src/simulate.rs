//! `bbv simulate`: ChampSim on every region trace of `bbv trace`, the whole program's CPI
//! estimated from them as LoopPoint does, and with `--full` the whole run simulated (its
//! records piped from QEMU into ChampSim, never on disk) to measure the estimate's error.
//!
//! Estimate: cycles = sum over regions of multiplier x region cycles; instructions = sum of
//! multiplier x region instructions; CPI = cycles / instructions. Writes `simulation.json`
//! and the report's `#simulation` section together.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use bbv_champsim::sim::{self, Simulated};
use bbv_files::AtomicFiles;
use serde::Deserialize;

use crate::ReplayError;
use bbv_rundir as rundir;

/// Instructions of the whole run left unsimulated at its end, so that ChampSim's read-ahead
/// never reaches the end of the piped trace (it would start the trace again).
const FULL_MARGIN: u64 = 10_000;

/// What `bbv simulate` asks for.
#[derive(Clone, Debug)]
pub struct SimulateRequest {
    /// The run directory (traced by `bbv trace`).
    pub dir: PathBuf,
    /// ChampSim's binary (None: where scripts/champsim puts it).
    pub champsim: Option<PathBuf>,
    /// Simulations at a time (0: one per core).
    pub jobs: usize,
    /// Also simulate the whole run (traced again through a pipe into ChampSim): the program
    /// and its arguments, and how to launch it (what it leaves open is the run's own).
    pub full: Option<bbv_collect::Guest>,
    /// The band is required (refused before simulating when the run cannot give one).
    pub need_band: bool,
}

pub use bbv_rundir::simulation::{RegionSim, Simulation};

/// The part of `trace.json` read back.
#[derive(Deserialize)]
struct Traced {
    dir: PathBuf,
    run: PathBuf,
    /// Absent in traces of bbv before runs had an identity: matched by path then.
    #[serde(default)]
    run_id: Option<String>,
    build_id: Option<String>,
    regions: Vec<TracedRegion>,
}

#[derive(Deserialize)]
struct TracedRegion {
    id: usize,
    weight: f64,
    multiplier: f64,
    warmup_instructions: u64,
    /// Absent in traces of bbv before condensed warmups: every record.
    #[serde(default)]
    warmup_records: Option<u64>,
    region_instructions: u64,
    trace: String,
}

impl TracedRegion {
    /// Records ChampSim warms on.
    fn warmup(&self) -> u64 {
        self.warmup_records.unwrap_or(self.warmup_instructions)
    }
}

/// Reads `DIR/trace.json`, refusing traces of another run than `s` (DIR's summary).
fn traced(dir: &Path, s: &rundir::Summary) -> Result<Traced, ReplayError> {
    let path = dir.join(bbv_rundir::files::TRACE);
    if !path.exists() {
        return Err(ReplayError::Invalid(format!(
            "{}: no traces (run `bbv trace {}` first)",
            dir.display(),
            dir.display()
        )));
    }
    let text = bbv_files::input::read_text(&path, 1 << 26)?;
    let mut t: Traced = serde_json::from_str(&text)
        .map_err(|e| ReplayError::Invalid(format!("{}: {e}", path.display())))?;
    let same = |a: &Path, b: &Path| std::fs::canonicalize(a).ok() == std::fs::canonicalize(b).ok();
    let id = s.identity();
    let ours = match &t.run_id {
        Some(traced) => *traced == id,
        None => same(&t.run, dir),
    };
    if !ours || t.build_id != s.program.build_id || t.regions.len() != s.points.len() {
        let which = t.run_id.as_deref().unwrap_or("of an older bbv");
        return Err(ReplayError::Invalid(format!(
            "{}: the traces are of run {which} (traced in {}), not of the run {} holds now \
             ({id}): trace it again with `bbv trace {}`",
            path.display(),
            t.run.display(),
            dir.display(),
            dir.display()
        )));
    }
    // A run moved or copied with its traces inside it: the traces' folder moved with it.
    if !t.dir.is_dir() {
        if let Ok(inside) = t.dir.strip_prefix(&t.run) {
            t.dir = dir.join(inside);
        }
    }
    for r in &t.regions {
        check_region(r).map_err(|why| {
            ReplayError::Invalid(format!("{}: region {}: {why}", path.display(), r.id))
        })?;
        let p = t.dir.join(&r.trace);
        if !p.is_file() {
            return Err(ReplayError::Invalid(format!("{}: missing", p.display())));
        }
    }
    Ok(t)
}

/// A traced region's figures as the estimate needs them: a weight and multiplier finite and
/// positive (a multiplier of 1e308 would make the estimate infinite, written as `null`), some
/// instructions to simulate, a trace file named inside the traces' folder.
fn check_region(r: &TracedRegion) -> Result<(), String> {
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if !positive(r.weight) || !positive(r.multiplier) || r.multiplier > 1e15 {
        return Err(format!(
            "weight {} and multiplier {} (expected finite and positive, as bbv trace writes \
             them)",
            r.weight, r.multiplier
        ));
    }
    if r.region_instructions == 0 {
        return Err("no instructions to simulate".into());
    }
    if !bbv_files::input::is_file_name(&r.trace) {
        return Err(format!(
            "trace {:?}: expected a file name in the traces' folder",
            r.trace
        ));
    }
    Ok(())
}

/// Told how far the simulations got (ChampSim's heartbeats), for progress and the time left.
pub trait SimulateWatcher: Sync {
    /// The regions: instructions retired so far over all of them (warmups included), their
    /// total, regions finished and regions.
    fn regions(&self, retired: u64, total: u64, finished: usize, regions: usize);
    /// The whole run (`--full`): instructions retired so far and the total.
    fn whole(&self, retired: u64, total: u64);
}

/// A watcher that is told nothing.
struct Unwatched;

impl SimulateWatcher for Unwatched {
    fn regions(&self, _: u64, _: u64, _: usize, _: usize) {}
    fn whole(&self, _: u64, _: u64) {}
}

/// Runs every simulation and writes `DIR/simulation.json`.
pub fn simulate(req: &SimulateRequest) -> Result<Simulation, ReplayError> {
    simulate_watched(req, &Unwatched)
}

/// [`simulate`], telling `watcher` how far it got.
pub fn simulate_watched(
    req: &SimulateRequest,
    watcher: &dyn SimulateWatcher,
) -> Result<Simulation, ReplayError> {
    // simulation.json lands in the run directory's staged next state, swapped in whole.
    rundir::update(&req.dir, |d| {
        let req = SimulateRequest {
            dir: d.to_path_buf(),
            ..req.clone()
        };
        simulate_staged(&req, watcher)
    })
}

fn simulate_staged(
    req: &SimulateRequest,
    watcher: &dyn SimulateWatcher,
) -> Result<Simulation, ReplayError> {
    let s = rundir::read_summary(&req.dir)?;
    let t = traced(&req.dir, &s)?;
    // Read before the simulations, so that a run that cannot be banded is refused at once.
    let members = band_members(&req.dir, &s)?;
    if let (Err(why), true) = (&members, req.need_band) {
        return Err(ReplayError::Invalid(format!(
            "{}: no error band: {why}; an estimate without one can be off by several percent \
             with nothing to say so (`bbv run --target-error 3` measures the metrics and \
             chooses the points by the band; --full measures the error; --no-band simulates \
             anyway)",
            req.dir.display()
        )));
    }
    let bin = sim::find(req.champsim.as_deref())?;
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let jobs = if req.jobs == 0 { cores } else { req.jobs };
    let (regions, outputs) = simulate_regions(&bin, &t, jobs, watcher)?;
    let estimate_cpi = bbv_rundir::simulation::estimate_cpi(&regions);
    let full = match &req.full {
        Some(f) => Some(simulate_full(&bin, &req.dir, &s, f, watcher)?),
        None => None,
    };
    let sampled_instructions: u64 = t
        .regions
        .iter()
        .map(|r| r.warmup() + r.region_instructions)
        .sum();
    let sampled_wall: f64 = regions.iter().map(|r| r.seconds).sum();
    let full_cpi = full.as_ref().map(|f| f.figures.cpi());
    let (band, no_band) = banded(&s, &regions, members, estimate_cpi);
    let sampled_cpu: Option<f64> = regions.iter().map(|r| r.cpu_seconds).sum();
    let warmup_share = bbv_rundir::simulation::warmup_share(&regions);
    let sim = Simulation {
        simulator: "champsim".into(),
        commit: bin
            .parent()
            .and_then(|b| std::fs::read_to_string(b.with_file_name("stamp")).ok())
            .and_then(|s| s.split(" | ").next().map(str::to_string)),
        regions,
        estimate_cpi,
        full_cpi,
        error_pct: bbv_rundir::simulation::error_pct(estimate_cpi, full_cpi),
        speedup_instructions: full
            .as_ref()
            .map(|f| f.figures.instructions as f64 / sampled_instructions.max(1) as f64),
        speedup_wall: full.as_ref().map(|f| f.seconds / sampled_wall.max(1e-9)),
        speedup_cpu: full
            .as_ref()
            .and_then(|f| Some(f.cpu?.0 / sampled_cpu?.max(1e-9))),
        warmup_share,
        band_pct: band.as_ref().map(|b| b.band_pct),
        band,
        no_band,
    };
    let mut files = AtomicFiles::default();
    crate::simulation_files::write(&mut files, &req.dir, &s, &sim)?;
    files.write(&req.dir.join(bbv_rundir::files::CHAMPSIM_LOG), |w| {
        for (r, out) in t.regions.iter().zip(&outputs) {
            writeln!(
                w,
                "=== region {}: champsim --warmup-instructions {} --simulation-instructions {} {}",
                r.id,
                r.warmup(),
                r.region_instructions,
                r.trace
            )?;
            w.write_all(out.as_bytes())?;
        }
        if let Some(f) = &full {
            writeln!(w, "=== the whole run (--full)")?;
            w.write_all(f.output.as_bytes())?;
        }
        Ok(())
    })?;
    files.commit()?;
    Ok(sim)
}

/// The estimate's band, or why there is none: after the simulations a band that cannot be had
/// is said, not an error, so that the figures are kept.
fn banded(
    s: &rundir::Summary,
    regions: &[RegionSim],
    members: Members,
    estimate_cpi: f64,
) -> (Option<bbv_rundir::band::Band>, Option<String>) {
    let (members, labels, tail) = match members {
        Ok(m) => m,
        Err(why) => return (None, Some(why)),
    };
    let band = sampled(s, regions, members.len()).and_then(|points| {
        Ok(bbv_rundir::band::band(
            &members,
            &labels,
            &points,
            estimate_cpi,
            tail,
        )?)
    });
    match band {
        Ok(b) => (Some(b), None),
        Err(e) => (None, Some(e.to_string())),
    }
}

/// The warning `bbv trace` gives before its replay (which can take hours) when `bbv simulate`
/// will need --full or --no-band; None for a run that can be banded, or no run at all (left
/// to the replay to refuse).
pub fn unbanded_warning(dir: &Path) -> Option<String> {
    let s = rundir::read_summary(dir).ok()?;
    let why = why_unbanded(dir, &s)?;
    Some(format!(
        "{}: `bbv simulate` can give its estimate no error band: {why}",
        dir.display()
    ))
}

/// Why the run's estimate cannot have a band, from what the run directory holds (None: it can),
/// so that `bbv trace` can say so before its replay and `bbv simulate` before ChampSim runs.
pub fn why_unbanded(dir: &Path, s: &rundir::Summary) -> Option<String> {
    if s.regions_mode != rundir::Regions::Intervals {
        return Some("the regions are LoopPoint slices (a band needs intervals)".into());
    }
    (!dir.join(bbv_rundir::files::METRICS).exists()).then(|| {
        "the run has no per-interval metrics (metrics.csv): `bbv run --validate` measures them"
            .into()
    })
}

/// Every interval of the run for the band (instructions, model estimate, place), their labels
/// and the share of the run after its last interval; Err(why) when the run cannot be banded.
type Members = Result<(Vec<bbv_rundir::band::Member>, Vec<usize>, f64), String>;

fn band_members(dir: &Path, s: &rundir::Summary) -> Result<Members, ReplayError> {
    if let Some(why) = why_unbanded(dir, s) {
        return Ok(Err(why));
    }
    let csv = dir.join(bbv_rundir::files::METRICS);
    let rows = bbv_profile::read_metrics(&csv)?;
    let (_, labels) = bbv_rundir::chosen(dir)?;
    if labels.len() != rows.len() {
        return Err(ReplayError::Invalid(format!(
            "{}: {} rows for the {} intervals of simpoint.labels",
            csv.display(),
            rows.len(),
            labels.len()
        )));
    }
    let positions = bbv_simpoint::load_projected(&rundir::clustered_input(dir, s))?;
    if positions.rows() != rows.len() {
        return Err(ReplayError::Invalid(format!(
            "{}: {} rows for the run's {} vectors",
            csv.display(),
            rows.len(),
            positions.rows()
        )));
    }
    let members = bbv_rundir::band::members(&rows, |i| positions.row(i));
    let tail = s.tail_fraction(members.iter().map(|m| m.instructions).sum());
    Ok(Ok((members, labels, tail)))
}

/// The simulated regions as the band's points: each region's point (its interval), its share of
/// the estimate and its CPI.
fn sampled(
    s: &rundir::Summary,
    regions: &[RegionSim],
    intervals: usize,
) -> Result<Vec<bbv_rundir::band::Sampled>, ReplayError> {
    regions
        .iter()
        .map(|r| {
            let label = r.id.checked_sub(1).unwrap_or(usize::MAX);
            let p = s
                .points
                .iter()
                .find(|p| p.cluster == label)
                .ok_or_else(|| {
                    ReplayError::Invalid(format!("region {} has no point in summary.json", r.id))
                })?;
            let interval = usize::try_from(p.interval).unwrap_or(usize::MAX);
            if interval >= intervals {
                return Err(ReplayError::Invalid(format!(
                    "region {}: interval {} beyond the run's {intervals}",
                    r.id, p.interval
                )));
            }
            Ok(bbv_rundir::band::Sampled {
                label,
                interval,
                weight: r.multiplier * r.instructions as f64,
                cpi: r.cycles as f64 / (r.instructions as f64).max(1.0),
            })
        })
        .collect()
}

/// ChampSim on every region, `jobs` at a time: its figures and ChampSim's report.
fn simulate_regions(
    bin: &Path,
    t: &Traced,
    jobs: usize,
    watcher: &dyn SimulateWatcher,
) -> Result<(Vec<RegionSim>, Vec<String>), ReplayError> {
    let next = AtomicUsize::new(0);
    let retired: Vec<AtomicU64> = t.regions.iter().map(|_| AtomicU64::new(0)).collect();
    let finished = AtomicUsize::new(0);
    let total: u64 = t
        .regions
        .iter()
        .map(|r| r.warmup() + r.region_instructions)
        .sum();
    let tell = || {
        let so_far = retired.iter().map(|r| r.load(Ordering::Relaxed)).sum();
        let done = finished.load(Ordering::Relaxed);
        watcher.regions(so_far, total, done, t.regions.len());
    };
    tell();
    let results: Mutex<Vec<Option<Result<Simulated, ReplayError>>>> =
        Mutex::new((0..t.regions.len()).map(|_| None).collect());
    std::thread::scope(|scope| {
        for _ in 0..jobs.min(t.regions.len()) {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(r) = t.regions.get(i) else { break };
                let trace = t.dir.join(&r.trace);
                let beat = |n: u64| {
                    retired[i].store(n, Ordering::Relaxed);
                    tell();
                };
                let got = sim::run_watched(bin, &trace, r.warmup(), r.region_instructions, &beat)
                    .map_err(ReplayError::from);
                retired[i].store(r.warmup() + r.region_instructions, Ordering::Relaxed);
                finished.fetch_add(1, Ordering::Relaxed);
                tell();
                results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(got);
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    t.regions
        .iter()
        .zip(results)
        .map(|(r, got)| {
            let s = got.unwrap_or_else(|| Err(ReplayError::Invalid("not simulated".into())))?;
            let region = RegionSim {
                id: r.id,
                weight: r.weight,
                multiplier: r.multiplier,
                instructions: s.figures.instructions,
                cycles: s.figures.cycles,
                ipc: 1.0 / s.figures.cpi(),
                seconds: s.seconds,
                warmup_seconds: s.warmup_seconds,
                cpu_seconds: s.cpu.map(|c| c.0),
                warmup_cpu_seconds: s.cpu.map(|c| c.1),
            };
            Ok((region, s.output))
        })
        .collect::<Result<Vec<_>, ReplayError>>()
        .map(|v| v.into_iter().unzip())
}

/// The whole run: the plugin writes every record into a FIFO; a thread of bbv passes them on
/// into ChampSim's FIFO until ChampSim is done, then drains the rest, so that the guest runs to
/// its end.
fn simulate_full(
    bin: &Path,
    dir: &Path,
    s: &rundir::Summary,
    f: &bbv_collect::Guest,
    watcher: &dyn SimulateWatcher,
) -> Result<Simulated, ReplayError> {
    let work = tempfile::Builder::new()
        .prefix(".bbv-simulate-")
        .tempdir()
        .map_err(|e| ReplayError::io(std::env::temp_dir(), e))?;
    let from_plugin = work.path().join("records");
    let to_champsim = work.path().join("champsim.trace");
    crate::trace::make_fifo(&from_plugin)?;
    crate::trace::make_fifo(&to_champsim)?;
    let instructions = s.threads.first().map_or(0, |t| t.instructions);
    if instructions <= FULL_MARGIN {
        return Err(ReplayError::Invalid(format!(
            "{}: the run is too short to simulate in full ({instructions} instructions)",
            dir.display()
        )));
    }
    let request = bbv_collect::Request {
        guest: crate::replay::on_run(f, s),
        counting: bbv_collect::PluginConfig {
            interval: u64::MAX / 4,
            count_only: true,
            rep_iterations: s.count_rep == "iteration",
            record: Some(from_plugin.clone()),
            ..Default::default()
        },
        work_dir: work.path().to_path_buf(),
    };
    let program = bbv_collect::resolve_program(&f.program)?;
    let have = bbv_collect::ElfFacts::read(&program).and_then(|e| e.build_id);
    if have != s.program.build_id {
        return Err(ReplayError::Invalid(format!(
            "{}: build id {} differs from the profiled program's {}: not the program of this run",
            program.display(),
            have.as_deref().unwrap_or("(none)"),
            s.program.build_id.as_deref().unwrap_or("(none)")
        )));
    }
    let prepared = bbv_collect::prepare(request)?;
    let total = instructions - FULL_MARGIN;
    let beat = |n: u64| watcher.whole(n, total);
    watcher.whole(0, total);
    let simulated = std::thread::scope(|scope| {
        let relay = scope.spawn(|| relay(&from_plugin, &to_champsim));
        let champsim = scope.spawn(|| sim::run_watched(bin, &to_champsim, 0, total, &beat));
        let guest = prepared.run();
        // Whichever end never opened its FIFO (a guest or a ChampSim that failed to start) is
        // stood in for, so that the relay ends.
        crate::trace::release(&from_plugin);
        let simulated = champsim.join();
        while !relay.is_finished() {
            release_reader(&to_champsim);
            crate::trace::release(&from_plugin);
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        (guest, simulated)
    });
    let (guest, simulated) = simulated;
    guest?;
    simulated
        .unwrap_or_else(|_| Err(sim::SimError::Missing("ChampSim's thread panicked".into())))
        .map_err(ReplayError::from)
}

/// Opens a FIFO for reading without blocking and closes it: a writer waiting in its open() goes
/// on (and then finds no reader).
fn release_reader(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    let _ = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
}

/// Copies the plugin's records into ChampSim's FIFO while ChampSim reads, then discards them.
fn relay(from: &Path, to: &Path) -> std::io::Result<()> {
    let mut input = std::fs::File::open(from)?;
    let mut out = Some(std::fs::OpenOptions::new().write(true).open(to)?);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = match input.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if let Some(o) = out.as_mut() {
            if o.write_all(&buf[..n]).is_err() {
                // ChampSim is done: the guest still runs to its end.
                out = None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(weight: f64, multiplier: f64, trace: &str) -> TracedRegion {
        TracedRegion {
            id: 1,
            weight,
            multiplier,
            warmup_instructions: 0,
            warmup_records: None,
            region_instructions: 2_000_000,
            trace: trace.into(),
        }
    }

    /// What the estimate cannot use is refused, naming it; a region bbv trace writes passes.
    #[test]
    fn traced_regions_are_checked() {
        assert!(check_region(&region(0.25, 12.5, "region-1.champsim.xz")).is_ok());
        for (r, why) in [
            (region(0.25, 1e308, "r"), "multiplier"),
            (region(0.25, -2.0, "r"), "multiplier"),
            (region(f64::NAN, 2.0, "r"), "weight NaN"),
            (region(0.0, 2.0, "r"), "weight 0"),
            (region(0.25, 2.0, "../../etc/passwd"), "a file name"),
            (region(0.25, 2.0, "/etc/passwd"), "a file name"),
            (region(0.25, 2.0, ""), "a file name"),
        ] {
            let e = check_region(&r).unwrap_err();
            assert!(e.contains(why), "{e}");
        }
        let mut empty = region(0.25, 2.0, "r");
        empty.region_instructions = 0;
        assert!(check_region(&empty)
            .unwrap_err()
            .contains("no instructions"));
    }
}
