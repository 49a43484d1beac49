//! `bbv regions DIR`, `bbv report DIR` and `bbv replay DIR -- PROG ARGS`: thin wrappers over
//! bbv-pipeline and bbv-report.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use bbv_pipeline::rundir::files;
use bbv_replay::simulate::{simulate_watched, SimulateRequest};
use bbv_replay::trace::TraceSpec;

/// `bbv regions`.
#[derive(clap::Args, Debug)]
pub struct RegionsArgs {
    /// A `bbv run` output directory.
    pub dir: PathBuf,
    /// Warmup before each region, in instructions (rounded to whole intervals; 0 = none;
    /// default: what the run used).
    #[arg(long, value_name = "N", value_parser = bbv_pipeline::parse::count)]
    pub warmup: Option<u64>,
}

/// `bbv report`.
#[derive(clap::Args, Debug)]
pub struct ReportArgs {
    /// A `bbv run` output directory.
    pub dir: PathBuf,
}

/// `bbv replay`.
#[derive(clap::Args, Debug)]
pub struct ReplayArgs {
    /// A `bbv run` output directory.
    pub dir: PathBuf,
    /// Print the report as JSON on stdout (after the program's own output).
    #[arg(long)]
    pub json: bool,
    /// Largest |deviation| of a region's length accepted, in percent.
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    pub tolerance: f64,
    #[command(flatten)]
    pub launch: crate::collect_cmd::LaunchArgs,
    /// The program and its arguments (the one profiled).
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    pub command: Vec<OsString>,
}

/// `bbv trace`: the replay's arguments, and where and how the traces are written.
#[derive(clap::Args, Debug)]
pub struct TraceArgs {
    /// The traces' folder (default DIR/traces; recorded in DIR/trace.json).
    #[arg(short = 'o', value_name = "TRACEDIR")]
    pub output: Option<PathBuf>,
    /// Records after each region's end: ChampSim reads hundreds of records ahead of
    /// retirement, and must not reach the end of the trace while the region retires.
    #[arg(long, default_value_t = 10_000, value_parser = bbv_pipeline::parse::count)]
    pub tail: u64,
    /// xz preset of the traces (0-9).
    #[arg(long = "xz-preset", default_value_t = 0)]
    pub xz_preset: u32,
    /// Write the records uncompressed (region-R.champsim, 64 bytes per instruction).
    #[arg(long, conflicts_with = "xz_preset")]
    pub raw: bool,
    /// Write every record of the warmups (by default each warmup but its last
    /// --warmup-detail records is condensed to the records that leave ChampSim's caches and
    /// predictor as the whole warmup does: docs/champsim.md#condensed-warmups).
    #[arg(long = "full-warmup")]
    pub full_warmup: bool,
    /// Records before each region written whole when warmups are condensed.
    #[arg(long = "warmup-detail", value_name = "N", conflicts_with = "full_warmup",
          default_value_t = bbv_replay::trace::Condense::default().detail, value_parser = bbv_pipeline::parse::count)]
    pub warmup_detail: u64,
    /// Trace regions whose warmups are shorter than 8 million instructions though the run has
    /// room for longer ones (refused otherwise: their caches would start colder than the run's).
    #[arg(long = "short-warmups")]
    pub short_warmups: bool,
    #[command(flatten)]
    pub replay: ReplayArgs,
}

/// `bbv simulate`.
#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// A `bbv run` output directory traced by `bbv trace`.
    pub dir: PathBuf,
    /// ChampSim's binary (default: where scripts/champsim builds it).
    #[arg(long, value_name = "PATH")]
    pub champsim: Option<PathBuf>,
    /// Simulations at a time (default: the cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Exit 1 when the estimate's 95% band is wider than PCT percent (the figures are still
    /// written); a run without per-interval metrics (`bbv run --validate`) is refused first.
    #[arg(long, value_name = "PCT", value_parser = bbv_pipeline::parse::percent)]
    pub max_band: Option<f64>,
    /// Simulate a run that cannot give a band (no per-interval metrics, LoopPoint slices):
    /// refused without --full or this flag, since nothing would say how far off it is.
    #[arg(long = "no-band", conflicts_with = "max_band")]
    pub no_band: bool,
    #[command(flatten)]
    pub launch: crate::collect_cmd::LaunchArgs,
    /// Also simulate the whole run (the program given again after --full, as to `bbv replay`)
    /// and report the estimate's error.
    #[arg(long, requires = "command")]
    pub full: bool,
    /// The simulator: champsim (on the traces `bbv trace` wrote) or sniper (live: the program,
    /// given after --, is replayed under QEMU and each region streamed to a Sniper of its
    /// own; docs/sniper.md).
    #[arg(long, default_value = "champsim", value_parser = ["champsim", "sniper"])]
    pub simulator: String,
    /// Sniper's folder (default: where scripts/sniper builds it).
    #[arg(long, value_name = "PATH")]
    pub sniper: Option<PathBuf>,
    /// With --full or --simulator sniper: the program and its arguments (the one profiled).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    pub command: Vec<OsString>,
}

/// `bbv simulate`: prints the estimate with its band, the regions' IPC (and the error with
/// --full); 1 when the band is wider than --max-band.
pub fn simulate(a: SimulateArgs) -> Result<u8> {
    if a.simulator == "sniper" {
        return simulate_sniper(a);
    }
    let l = a.launch;
    let full = (a.full).then(|| l.guest(&a.command)).transpose()?;
    let req = SimulateRequest {
        dir: a.dir.clone(),
        champsim: a.champsim,
        jobs: a.jobs.unwrap_or(0),
        full,
        need_band: a.max_band.is_some() || !(a.full || a.no_band),
    };
    let spinner = crate::progress::Progress::new(None);
    let s = simulate_watched(&req, &crate::progress::simulate(&spinner));
    spinner.done();
    let s = s?;
    eprint!("{}", s.text());
    eprintln!("{}", a.dir.join(files::SIMULATION).display());
    let over = s.band_over(a.max_band);
    if let Some(why) = &over {
        eprintln!("bbv: {why}");
    }
    Ok(u8::from(over.is_some()))
}

/// `bbv regions DIR`.
pub fn regions(a: RegionsArgs) -> Result<()> {
    let f = bbv_pipeline::update_regions(&a.dir, a.warmup)?;
    eprint!("{}", f.text);
    Ok(())
}

/// `bbv report DIR`: rebuilds `DIR/report.html` and names it on stdout.
pub fn report(a: ReportArgs) -> Result<()> {
    let path = bbv_report::write_run_report(&a.dir)?;
    println!("{}", path.display());
    Ok(())
}

/// `bbv trace`: the replay's exit statuses; 1 also when a region could not be traced whole.
pub fn trace(a: TraceArgs) -> Result<u8> {
    let out = std::path::absolute(a.output.unwrap_or_else(|| a.replay.dir.join(files::TRACES)))?;
    let detail = (!a.full_warmup).then_some(a.warmup_detail);
    let preset = (!a.raw).then_some(a.xz_preset);
    let spec = TraceSpec::new(out, a.tail, preset, detail, a.short_warmups)?;
    if let Some(w) = bbv_replay::simulate::unbanded_warning(&a.replay.dir) {
        eprintln!("bbv: warning: {w}");
    }
    let extra = Extra {
        trace: Some(spec),
        ..Default::default()
    };
    let (outcome, passed) = run_replay(a.replay, extra)?;
    let (text, code) = outcome.verdict(passed)?;
    eprint!("{text}");
    Ok(code)
}

/// `bbv simulate --simulator sniper`: the replay's table, then the estimate; 1 when a marker
/// was missed.
fn simulate_sniper(a: SimulateArgs) -> Result<u8> {
    let (max_band, champsim) = (a.max_band.is_some(), a.champsim.as_deref());
    let spec =
        bbv_replay::sniper::SniperSpec::new(a.sniper.as_deref(), a.full, max_band, champsim)?;
    let (dir, command, launch) = (a.dir.clone(), a.command, a.launch);
    let replay = ReplayArgs {
        dir,
        json: false,
        tolerance: 1.0,
        launch,
        command,
    };
    let (outcome, passed) = run_replay(
        replay,
        Extra {
            sniper: Some(spec),
            ..Default::default()
        },
    )?;
    let got = outcome.sniper.unwrap_or_default();
    let (text, code) = bbv_replay::sniper::conclude(&a.dir, got, passed)?;
    eprint!("{text}");
    Ok(code)
}

/// `bbv replay`: exit 0 when every marker is reached within the tolerance, 1 otherwise.
pub fn replay(a: ReplayArgs) -> Result<u8> {
    let (_, passed) = run_replay(a, Extra::default())?;
    Ok(if passed { 0 } else { 1 })
}

/// What a replay also writes.
#[derive(Default)]
pub struct Extra {
    /// ChampSim traces (`bbv trace`).
    pub trace: Option<TraceSpec>,
    /// Checkpoints (`bbv checkpoint`).
    pub checkpoint: Option<bbv_replay::checkpoint::CheckpointSpec>,
    /// Sniper on the regions, live (`bbv simulate --simulator sniper`).
    pub sniper: Option<bbv_replay::sniper::SniperSpec>,
}

/// Replays (tracing or checkpointing too), prints the table; the outcome and whether it passed.
pub fn run_replay(a: ReplayArgs, extra: Extra) -> Result<(bbv_replay::ReplayOutcome, bool)> {
    let req = bbv_replay::ReplayRequest {
        dir: a.dir.clone(),
        guest: a.launch.guest(&a.command)?,
        tolerance_pct: a.tolerance,
        trace: extra.trace,
        checkpoint: extra.checkpoint,
        sniper: extra.sniper,
    };
    let mut outcome = bbv_replay::replay(&req)?;
    let report = std::mem::replace(
        &mut outcome.report,
        Err(bbv_replay::ReplayError::Invalid(String::new())),
    )?;
    if a.json {
        println!("{}", serde_json::to_string(&report.to_json())?);
    } else {
        eprint!("{}", report.table());
    }
    if outcome.status.code() != 0 {
        eprintln!(
            "bbv: note: the program exited with status {} in the replay",
            outcome.status.code()
        );
    }
    Ok((outcome, report.passed()))
}
