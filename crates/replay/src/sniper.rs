//! Sniper on the regions, live: one Sniper per region, started before the replay, each
//! waiting on its FIFO; the plugin streams a region's instructions (SIFT) into its FIFO from the
//! region's warmup marker, marks the region of interest at the region's start and end markers,
//! and ends the stream there. Sniper warms its caches and predictors on the warmup and
//! simulates the region in detail; its figures are the region's.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use bbv_pipeline::regions::region_id;
use bbv_plugin_contract::events::{NEVER, WHOLE_RUN};
use bbv_rundir::{self as rundir, Point, Summary};
use bbv_sift::feed::warm;
use bbv_sniper::{Live, SimOut, Sniper};

use crate::ReplayError;
use bbv_rundir::simulation::{RegionSim, Simulation};

/// Simulate the regions with Sniper during the replay.
#[derive(Clone, Debug)]
pub struct SniperSpec {
    /// The build.
    pub sniper: Sniper,
    /// Also simulate the whole run (in detail, from its first instruction to its last), for
    /// the estimate's error.
    pub full: bool,
}

impl SniperSpec {
    /// The build in `explicit`, else where scripts/sniper puts it; `full`: the whole run too.
    /// `max_band` (no band for Sniper's figures yet) and `champsim` (ChampSim's build) are
    /// options of ChampSim's simulation, refused here rather than ignored.
    pub fn new(
        explicit: Option<&Path>,
        full: bool,
        max_band: bool,
        champsim: Option<&Path>,
    ) -> Result<SniperSpec, ReplayError> {
        if max_band {
            return Err(ReplayError::Invalid(
                "--simulator sniper takes no --max-band yet (docs/sniper.md)".into(),
            ));
        }
        if let Some(c) = champsim {
            return Err(ReplayError::Invalid(format!(
                "--champsim {} names ChampSim's build, which --simulator sniper does not run (Sniper's is --sniper)",
                c.display()
            )));
        }
        let sniper = Sniper::find(explicit).map_err(sniper_error)?;
        Ok(SniperSpec { sniper, full })
    }
}

/// Sniper's figures once the replay ended: each region's, in the summary's point order, and
/// the whole run's when asked for.
#[derive(Default)]
pub struct SniperResults {
    /// Per region.
    pub regions: Vec<Result<SimOut, ReplayError>>,
    /// The whole run (`--full`).
    pub full: Option<Result<SimOut, ReplayError>>,
}

/// How a region's window opens (events), what it may take and what of it is condensed.
struct Window {
    start: u32,
    alt: u32,
    limit: u64,
    condense: u64,
}

/// Region `p`'s window (the `r`th of `n`; events as the replay numbers them: start 2r, end
/// 2r + 1, warmup 2n + r). A single thread's warmed region opens with the run and is sent
/// condensed up to the last `warm::DETAIL` instructions before it, or its warmup's when shorter
/// (every line the run touched
/// before it, bbv_sift::feed::warm: an 8 MB L3 keeps lines older than any warmup a run
/// chooses); several threads' opens at its warmup's marker, simulated in detail
/// (bbv_sift::feed::WindowSpec::threads); a region without a warmup opens at its start.
fn window(p: &Point, r: usize, n: usize, threads: usize) -> Window {
    let region = 2 * r as u32;
    // The other threads' instructions (spinning ones too) come on top of the region's own.
    let limit = crate::trace::record_limit(p, 0).saturating_mul(threads as u64);
    match (threads, &p.warmup) {
        (1, Some(_)) => Window {
            start: WHOLE_RUN,
            alt: WHOLE_RUN,
            limit: limit.saturating_add(p.start_position),
            // The run's own warmup whole when it is shorter: a short run's regions would
            // otherwise cost Sniper more than the run.
            condense: (p.start_position).saturating_sub(p.warmup_length.min(warm::DETAIL)),
        },
        (_, Some(_)) => Window {
            start: (2 * n + r) as u32,
            alt: region,
            limit,
            condense: 0,
        },
        (_, None) => Window {
            start: region,
            alt: region,
            limit,
            condense: 0,
        },
    }
}

/// The instructions Sniper takes in for region `p` through window `w`: the region and its
/// warmup, a condensed stretch counted as its lines (at most `warm::LINES`, at most one per
/// instruction: a bound, since the lines' number is the plugin's to know).
fn simulated(p: &Point, w: &Window) -> u64 {
    let whole = match w.condense {
        0 => p.warmup_length,
        c => p.start_position.saturating_sub(c) + c.min(warm::LINES as u64),
    };
    whole + p.length
}

/// The Sniper instances of a replay under way, and the plugin's windows file.
pub(crate) struct Simulating {
    lives: Vec<Live>,
    full: Option<Live>,
    isa: bbv_collect::Isa,
    /// The plugin's `trace=FILE`.
    pub file: PathBuf,
}

impl Simulating {
    /// Starts a Sniper per region in `work` (configured for the program's instruction set
    /// `isa`) and writes the windows' file.
    pub fn start(
        spec: &SniperSpec,
        s: &Summary,
        isa: bbv_collect::Isa,
        work: &Path,
    ) -> Result<Simulating, ReplayError> {
        let config = match isa {
            bbv_collect::Isa::X86_64 => None,
            // Sniper's ARM core, the decoder scripts/sniper builds on Capstone.
            bbv_collect::Isa::Aarch64 => Some("cortex-a72"),
            bbv_collect::Isa::Riscv64 => {
                return Err(ReplayError::Invalid(
                    "Sniper simulates x86-64 and AArch64 programs here: its RISC-V decoder needs rv8's sources, which scripts/sniper does not have (docs/sniper.md)".into(),
                ))
            }
        };
        // Every thread is streamed, its synchronisation as the turns saw it: a run whose
        // threads followed the host's schedule is not replayed the same way twice.
        let threads = s.threads.len().max(1);
        if threads > 1 && s.turn_quantum == 0 {
            return Err(ReplayError::Invalid(format!(
                "the run's {threads} threads followed the host's schedule, so their regions cannot be replayed into Sniper as they ran: profile it again with `bbv run --schedule deterministic` (QEMU 9.1 or later)"
            )));
        }
        let mut text = String::new();
        let mut lives = Vec::new();
        let mut full = None;
        let n = s.points.len();
        for (r, p) in s.points.iter().enumerate() {
            let dir = work.join(format!("sniper-{r}"));
            std::fs::create_dir(&dir).map_err(|e| ReplayError::io(&dir, e))?;
            // Several threads: the warmup is simulated in detail, the region's figures from
            // a marker at its start (bbv_sift::feed::WindowSpec::threads says why).
            let live = match threads > 1 {
                true => spec.sniper.start_from_marker(&dir, threads, config),
                false => spec.sniper.start(&dir, threads, config),
            }
            .map_err(sniper_error)?;
            let w = window(p, r, n, threads);
            let _ = writeln!(
                text,
                "sift {r} {} {} {} {} {} {} {threads} {} {}",
                w.start,
                w.alt,
                2 * r + 1,
                2 * r,
                w.limit,
                live.pid(),
                w.condense,
                live.prefix().display()
            );
            lives.push(live);
        }
        if spec.full {
            let dir = work.join("sniper-full");
            std::fs::create_dir(&dir).map_err(|e| ReplayError::io(&dir, e))?;
            let live = spec
                .sniper
                .start(&dir, threads, config)
                .map_err(sniper_error)?;
            let (whole, never) = (WHOLE_RUN, NEVER);
            let _ = writeln!(
                text,
                "sift {n} {whole} {whole} {never} {never} {} {} {threads} 0 {}",
                u64::MAX,
                live.pid(),
                live.prefix().display()
            );
            full = Some(live);
        }
        let file = work.join("sniper-windows");
        std::fs::write(&file, text).map_err(|e| ReplayError::io(&file, e))?;
        Ok(Simulating {
            lives,
            full,
            isa,
            file,
        })
    }

    /// Stops every Sniper (none left behind) when the replay failed: its streams may never
    /// end; each region's result says so.
    pub fn abort(self) -> SniperResults {
        let failed = |l: Live| {
            drop(l);
            Err(ReplayError::Invalid(
                "the replay stopped before the program's end, so Sniper was stopped".into(),
            ))
        };
        SniperResults {
            regions: self.lives.into_iter().map(failed).collect(),
            full: self.full.map(failed),
        }
    }

    /// Each region's figures and the whole run's, once the replay ended.
    pub fn finish(self) -> SniperResults {
        let isa = self.isa;
        let end = |l: Live| {
            l.release();
            l.finish().map_err(|e| {
                let e = e.to_string();
                // Sniper's ARM decoder is Capstone 4's, which knows ARMv8.0: an ARMv8.1
                // instruction (an LSE atomic, which glibc picks on QEMU's default CPU) stops it.
                let hint = if isa == bbv_collect::Isa::Aarch64 && e.contains("arm_decoder") {
                    " (an instruction Sniper's ARM decoder does not know, such as an ARMv8.1 \
                     atomic: profile and replay the program under QEMU_CPU=cortex-a72, the \
                     core Sniper models)"
                } else {
                    ""
                };
                ReplayError::Invalid(format!("{e}{hint}"))
            })
        };
        SniperResults {
            regions: self.lives.into_iter().map(end).collect(),
            full: self.full.map(end),
        }
    }
}

/// Sniper's whole run must have simulated the run's instructions, every thread's: a thread
/// Sniper left blocked, or streams ended early, would otherwise read as the run's CPI. The
/// replay of a program whose threads wait with timeouts is not exactly the profile's, hence
/// the margin.
fn check_whole(simulated: u64, profiled: u64) -> Result<(), ReplayError> {
    const MARGIN: f64 = 0.02;
    let off = (simulated as f64 - profiled as f64) / profiled.max(1) as f64;
    if off.abs() > MARGIN {
        return Err(ReplayError::Invalid(format!(
            "the whole run (--full): Sniper simulated {simulated} instructions of the run's \
             {profiled} ({:+.1}%): its threads did not all run to their ends there, so its \
             CPI is not the run's",
            off * 100.0
        )));
    }
    Ok(())
}

fn sniper_error(e: bbv_sniper::SniperError) -> ReplayError {
    ReplayError::Invalid(e.to_string())
}

/// What `bbv simulate --simulator sniper` says after the replay's table, and its exit status:
/// the estimate (written as [`write_simulation`] does) and 0, or, when the replay missed a
/// marker (`passed` false), nothing written and 1: Sniper's figures are then not the regions'.
pub fn conclude(dir: &Path, got: SniperResults, passed: bool) -> Result<(String, u8), ReplayError> {
    if !passed {
        let why = "bbv: nothing simulated written: a marker was missed (the table above)\n";
        return Ok((why.into(), 1));
    }
    Ok((write_simulation(dir, got)?.text(), 0))
}

/// The estimate from the regions' Sniper figures, written to `dir/simulation.json` with
/// `"simulator": "sniper"`: the whole run's CPI as Σ multiplier × cycles / Σ multiplier ×
/// instructions, each region's cycles and instructions Sniper's inside its region of interest.
pub fn write_simulation(dir: &Path, got: SniperResults) -> Result<Simulation, ReplayError> {
    let s = rundir::read_summary(dir)?;
    let SniperResults {
        regions: results,
        full,
    } = got;
    if results.len() != s.points.len() {
        return Err(ReplayError::Invalid(format!(
            "{} regions simulated of {}",
            results.len(),
            s.points.len()
        )));
    }
    // Every region's failure is said, not only the first's.
    let failed: Vec<String> = (s.points.iter().zip(&results))
        .filter_map(|(p, r)| Some(format!("region {}: {}", region_id(p), r.as_ref().err()?)))
        .collect();
    if !failed.is_empty() {
        return Err(ReplayError::Invalid(failed.join("\n")));
    }
    let threads = s.threads.len() > 1;
    let mut regions = Vec::new();
    for (p, got) in s.points.iter().zip(results) {
        let out = got?;
        let (instructions, cycles) = (out.total_instructions(), out.region_cycles(threads));
        // Sniper reports what retired inside the region of interest: a single thread's region
        // that reached its end retires about its length (less what was still in flight when
        // it ended). With threads the region ends where its end marker's thread reaches it in
        // simulated time, the other threads wherever Sniper's timing has brought them, as in
        // LoopPoint: their instructions differ from the profile's.
        let short = !threads && (instructions as f64) < 0.99 * p.length as f64;
        if instructions == 0 || cycles == 0 || short {
            return Err(ReplayError::Invalid(format!(
                "Sniper simulated {instructions} instructions in {cycles} cycles for region {} \
                 of {} instructions: its stream did not reach the region's end",
                region_id(p),
                p.length
            )));
        }
        regions.push(RegionSim {
            id: region_id(p),
            weight: p.weight,
            multiplier: p.multiplier,
            instructions,
            cycles,
            ipc: instructions as f64 / cycles as f64,
            // The regions' Snipers run side by side during one replay: their CPU time, not
            // wall time, is what each costs.
            seconds: 0.0,
            warmup_seconds: 0.0,
            cpu_seconds: out.cpu_seconds,
            warmup_cpu_seconds: None,
        });
    }
    let estimate_cpi = bbv_rundir::simulation::estimate_cpi(&regions);
    let full = full
        .transpose()
        .map_err(|e| ReplayError::Invalid(format!("the whole run (--full): {e}")))?;
    if let Some(f) = &full {
        check_whole(f.total_instructions(), s.instructions)?;
    }
    let full_cpi = full
        .as_ref()
        .map(|f| f.region_cycles(threads) as f64 / f.total_instructions().max(1) as f64);
    let n = s.points.len();
    let sampled: u64 = (s.points.iter().enumerate())
        .map(|(r, p)| simulated(p, &window(p, r, n, s.threads.len().max(1))))
        .sum();
    let speedup_cpu = full.as_ref().and_then(|f| {
        let spent: Option<f64> = regions.iter().map(|r| r.cpu_seconds).sum();
        Some(f.cpu_seconds? / spent?.max(1e-9))
    });
    let sim = Simulation {
        simulator: "sniper".into(),
        commit: None,
        regions,
        estimate_cpi,
        full_cpi,
        error_pct: bbv_rundir::simulation::error_pct(estimate_cpi, full_cpi),
        speedup_instructions: full
            .as_ref()
            .map(|f| f.total_instructions() as f64 / sampled.max(1) as f64),
        speedup_wall: None,
        speedup_cpu,
        warmup_share: None,
        band_pct: None,
        band: None,
        no_band: Some("the band is computed for ChampSim's figures only, so far".into()),
    };
    rundir::update(dir, |d| {
        let mut files = bbv_files::AtomicFiles::default();
        crate::simulation_files::write(&mut files, d, &s, &sim)?;
        files.commit()?;
        Ok::<_, ReplayError>(())
    })?;
    Ok(sim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(start: u64, warmup: Option<u64>) -> Point {
        let marker = serde_json::json!({"image": "p", "offset": "0x10", "count": 1});
        serde_json::from_value(serde_json::json!({
            "cluster": 0, "interval": start / 1_000_000, "weight": 1.0,
            "start_instruction": start, "start": marker, "end": marker,
            "warmup": warmup.map(|_| marker.clone()), "length": 1_000_000,
            "start_position": start, "warmup_length": warmup.unwrap_or(0),
            "multiplier": 1.0, "end_relative": 1
        }))
        .unwrap()
    }

    #[test]
    fn a_single_thread_s_region_is_warmed_from_the_run_s_start_condensed() {
        let p = point(50_000_000, Some(8_000_000));
        let w = window(&p, 3, 5, 1);
        assert_eq!((w.start, w.alt), (WHOLE_RUN, WHOLE_RUN));
        assert_eq!(w.condense, 50_000_000 - warm::DETAIL);
        assert!(w.limit > 50_000_000 + 1_000_000);
        // Its lines (at most warm::LINES), the last 2M whole, the region.
        let taken = warm::DETAIL + warm::LINES as u64 + 1_000_000;
        assert_eq!(simulated(&p, &w), taken);
        // A warmup shorter than warm::DETAIL is the part sent whole.
        let short = point(1_500_000, Some(400_000));
        let w = window(&short, 0, 5, 1);
        assert_eq!((w.start, w.condense), (WHOLE_RUN, 1_100_000));
        let lines = warm::LINES as u64;
        assert_eq!(simulated(&short, &w), 400_000 + lines + 1_000_000);
        // Near the start, nothing condensed: the stretch before the region whole.
        let early = point(1_500_000, Some(1_500_000));
        let w = window(&early, 0, 5, 1);
        assert_eq!((w.start, w.condense), (WHOLE_RUN, 0));
        assert_eq!(simulated(&early, &w), 1_500_000 + 1_000_000);
    }

    #[test]
    fn threads_warm_from_the_warmup_marker_and_no_warmup_means_cold() {
        let p = point(50_000_000, Some(8_000_000));
        let w = window(&p, 3, 5, 2);
        assert_eq!((w.start, w.alt, w.condense), (2 * 5 + 3, 6, 0));
        assert_eq!(simulated(&p, &w), 9_000_000);
        let cold = point(50_000_000, None);
        let w = window(&cold, 3, 5, 1);
        assert_eq!((w.start, w.alt, w.condense), (6, 6, 0));
        assert_eq!(simulated(&cold, &w), 1_000_000);
    }

    #[test]
    fn a_whole_run_short_of_the_run_s_instructions_is_refused() {
        assert!(check_whole(1_000_000, 1_000_000).is_ok());
        assert!(check_whole(985_000, 1_000_000).is_ok());
        // lbzip2 -n 4: its main thread's exit ended Sniper after its own 0.2M instructions.
        let e = check_whole(176_688, 133_334_141).unwrap_err().to_string();
        assert!(
            e.contains("176688 instructions of the run's 133334141"),
            "{e}"
        );
        assert!(check_whole(1_030_000, 1_000_000).is_err());
        assert!(check_whole(0, 0).is_ok());
    }
}
