//! `bbv checkpoint DIR -- PROG ARGS` and `bbv checkpoint --check CKDIR`: thin wrappers over
//! bbv-pipeline's checkpoint step.

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::{Context, Result};
use bbv_pipeline::rundir::files;

/// `bbv checkpoint`.
#[derive(clap::Args, Debug)]
pub struct CheckpointArgs {
    /// Run every checkpoint of CKDIR under QEMU with bbv's collector and compare each with
    /// the profile (check.json); exit 0 when all reach their end within the tolerance.
    #[arg(long, value_name = "CKDIR", conflicts_with_all = ["output", "no_warmup", "dir", "command"])]
    pub check: Option<PathBuf>,
    /// The checkpoints' folder (default DIR/checkpoints).
    #[arg(short = 'o', value_name = "CKDIR")]
    pub output: Option<PathBuf>,
    /// Start each checkpoint at its region, not at its warmup.
    #[arg(long)]
    pub no_warmup: bool,
    /// CPU seconds after which a checkpoint that ran off course stops itself (SIGXCPU).
    #[arg(long, default_value_t = 600, value_parser = bbv_pipeline::parse::count)]
    pub cpu_seconds: u64,
    /// Largest |deviation| of a length accepted, in percent.
    #[arg(long, value_name = "PCT", default_value_t = 1.0)]
    pub tolerance: f64,
    #[command(flatten)]
    pub launch: crate::collect_cmd::LaunchArgs,
    /// A `bbv run` output directory.
    #[arg(required_unless_present = "check")]
    pub dir: Option<PathBuf>,
    /// The program (the one profiled) and its arguments, after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    pub command: Vec<OsString>,
}

/// `bbv checkpoint`: exits as `bbv replay` (0, 1 for a marker missed, 2 on bad input).
pub fn checkpoint(a: CheckpointArgs) -> Result<u8> {
    if let Some(dir) = a.check {
        let req = bbv_replay::checkpoint_check::CheckRequest {
            dir,
            qemu: a.launch.qemu,
            plugin: a.launch.plugin,
            tolerance_pct: a.tolerance,
        };
        let report = bbv_replay::checkpoint_check::check(&req)?;
        print!("{}", report.table());
        let Some(why) = report.failure() else {
            return Ok(0);
        };
        eprintln!("bbv: check failed: {why} (check.json has the figures)");
        return Ok(1);
    }
    let dir = a
        .dir
        .context("no run directory: bbv checkpoint DIR -- PROG ARGS")?;
    let command = a.command;
    let out = a.output.unwrap_or_else(|| dir.join(files::CHECKPOINTS));
    let spec = bbv_replay::checkpoint::CheckpointSpec {
        dir: std::path::absolute(&out)?,
        warmup: !a.no_warmup,
        cpu_seconds: a.cpu_seconds,
    };
    let replay = crate::regions_cmd::ReplayArgs {
        dir,
        json: false,
        tolerance: a.tolerance,
        launch: a.launch,
        command,
    };
    let extra = crate::regions_cmd::Extra {
        checkpoint: Some(spec),
        ..Default::default()
    };
    let (outcome, passed) = crate::regions_cmd::run_replay(replay, extra)?;
    let (text, code) = outcome.verdict(passed)?;
    eprint!("{text}");
    Ok(code)
}
