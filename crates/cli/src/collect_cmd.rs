//! `bbv collect` (valgrind exp-bbv's job under QEMU) and `bbv run` (collect, cluster, report).

use std::ffi::OsString;
use std::path::PathBuf;

use anyhow::Result;
use bbv_collect::{GuestStatus, Outcome, Request};
use bbv_pipeline::parse::{percent, positive, yes_no};
use bbv_pipeline::validate::Pick;
use bbv_pipeline::{CollectOptions, GuestOptions, RegionsMode, RunOptions, Schedule};
use bbv_profile::CacheGeometry;

/// Options shared by `collect` and `run`.
#[derive(clap::Args, Debug)]
pub struct GuestArgs {
    /// Cut every interval at exactly the interval size, splitting the block that straddles the
    /// cut (as exp-bbv does). Default: cut at the end of that block (never drifts).
    #[arg(long)]
    pub exact: bool,
    /// Also write the last, partial interval (exp-bbv drops it).
    #[arg(long)]
    pub tail: bool,
    #[command(flatten)]
    pub launch: LaunchArgs,
    /// Count a rep string instruction once per instance (exp-bbv's rule) or once per
    /// iteration (gem5's and Pin's, so that instruction counts handed to them match better).
    #[arg(long = "count-rep", value_name = "instance|iteration", default_value = "instance",
          value_parser = ["instance", "iteration"])]
    pub count_rep: String,
    /// The metrics' L1 data cache: SIZE,WAYS,LINE (sizes may end in K or M; power-of-two size
    /// and line).
    #[arg(long, value_name = "SIZE,WAYS,LINE", default_value = "32K,8,64", value_parser = CacheGeometry::parse)]
    pub l1d: CacheGeometry,
    /// The metrics' L2 cache (data only), with the L1D's line size.
    #[arg(long, value_name = "SIZE,WAYS,LINE", default_value = "1M,16,64", value_parser = CacheGeometry::parse)]
    pub l2: CacheGeometry,
    /// Run the metrics' cache model on a thread of its own while the guest has one thread
    /// (same results; about half the wall time when a core is free, the same CPU time). `no`
    /// keeps it on the guest's thread, e.g. when parallel jobs already fill every core.
    #[arg(long = "model-thread", value_name = "yes|no", default_value = "yes", value_parser = yes_no,
          action = clap::ArgAction::Set)]
    pub model_thread: bool,
    /// Benchmarks only: the metrics' callbacks return at once (the rows count only the blocks
    /// that also check for a cut), to measure what QEMU's calling them costs by itself.
    #[arg(long = "metrics-calls-only", hide = true)]
    pub metrics_calls_only: bool,
    /// Print the totals and the files written after the guest ends.
    #[arg(short, long)]
    pub verbose: bool,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROG ARGS"
    )]
    pub command: Vec<OsString>,
}

/// Which QEMU and plugin run the guest (`collect`, `run`, `replay`).
#[derive(clap::Args, Debug)]
pub struct LaunchArgs {
    /// QEMU user-mode executable (default: qemu-<isa> from PATH, chosen from the ELF header).
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// The plugin library (default: $BBV_PLUGIN, else the one for the QEMU's plugin API next
    /// to bbv: libbbv_qemu.so for QEMU 6.0-8.2, libbbv_qemu_v3.so for 9.1 and later).
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<PathBuf>,
    /// The guest CPU model (QEMU's -cpu: Haswell, qemu64, cortex-a72, ...; `qemu-ARCH -cpu
    /// help` lists them). The C library picks its string and memory routines by CPU features,
    /// so the profile follows the CPU given (default: QEMU's own, `max`).
    #[arg(long, value_name = "MODEL")]
    pub cpu: Option<String>,
    /// A dynamically linked AArch64 or RISC-V guest's sysroot, its loader and libraries
    /// (QEMU's -L; default: $QEMU_LD_PREFIX, else Debian's /usr/<triple>, else the run's).
    #[arg(long, value_name = "DIR")]
    pub sysroot: Option<PathBuf>,
}

impl LaunchArgs {
    /// The options as the launch every command shares.
    pub fn launch(&self) -> bbv_collect::Launch {
        bbv_collect::Launch {
            qemu: self.qemu.clone(),
            plugin: self.plugin.clone(),
            cpu: self.cpu.clone(),
            sysroot: self.sysroot.clone(),
        }
    }

    /// The guest of `command` (the program, then its arguments) launched so.
    pub fn guest(&self, command: &[OsString]) -> Result<bbv_collect::Guest> {
        bbv_collect::Guest::from_command(command, self.launch()).map_err(anyhow::Error::msg)
    }
}

/// `bbv collect`: exp-bbv's options, defaults and files.
#[derive(clap::Args, Debug)]
pub struct CollectArgs {
    /// Vector file of thread 1 (thread N writes FILE.N); %p = pid, %q{VAR} = environment.
    #[arg(long = "bb-out-file", value_name = "FILE", default_value = "bb.out.%p")]
    pub bb_out_file: String,
    /// PC file (F:id:hexaddr:function per block).
    #[arg(long = "pc-out-file", value_name = "FILE", default_value = "pc.out.%p")]
    pub pc_out_file: String,
    /// Block table (id, image, offset, instructions, function, source, bytes, kind).
    #[arg(long = "blocks-out-file", value_name = "FILE")]
    pub blocks_out_file: Option<String>,
    /// Instructions per interval.
    #[arg(long = "interval-size", value_name = "N", default_value = "100000000", value_parser = positive)]
    pub interval_size: u64,
    /// Per-interval metrics (instructions, loads, stores, taken branches, pages, L1D and L2
    /// misses, branch mispredictions) of all threads, cut as thread 1's vectors, as CSV.
    #[arg(long = "metrics-out-file", value_name = "FILE")]
    pub metrics_out_file: Option<String>,
    /// Only count instructions (totals on stderr); no vector or PC files.
    #[arg(long = "instr-count-only", value_name = "yes|no", num_args = 0..=1, require_equals = true,
          default_missing_value = "yes", default_value = "no", value_parser = yes_no)]
    pub instr_count_only: bool,
    #[command(flatten)]
    pub guest: GuestArgs,
}

/// `bbv run`: collect, cluster, summarize.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Instructions per interval.
    #[arg(long, value_name = "N", default_value = "100000000", value_parser = positive)]
    pub interval: u64,
    /// Largest k tried (default: 30, SimPoint's; 100 with --target-error, which may need more
    /// points than SimPoint's default allows).
    #[arg(long = "max-k", value_name = "K")]
    pub max_k: Option<usize>,
    /// Try every k from 1 to --max-k and apply SimPoint's BIC rule to all of them (SimPoint's
    /// `-k 1:K`) instead of its binary search (`-maxK K`).
    #[arg(long = "every-k")]
    pub every_k: bool,
    /// Directory for every file of the run.
    #[arg(short = 'o', value_name = "DIR", default_value = "bbv-out")]
    pub output: PathBuf,
    /// Also measure per-interval metrics (DIR/metrics.csv) and report how well the chosen
    /// points estimate each (DIR/validation.json and the summary's error table).
    #[arg(long)]
    pub validate: bool,
    /// Choose k (up to --max-k) as the one with the fewest points whose estimate of every
    /// metric is within PCT percent of the full run (or 0.01 per 1000 instructions) and whose
    /// CPI band predicted by bbv's model (95%) is at most PCT, instead of SimPoint's BIC rule;
    /// when none is, the nearest, with a warning first. Implies --validate.
    #[arg(long = "target-error", value_name = "PCT", value_parser = percent)]
    pub target_error: Option<f64>,
    /// Each cluster's point: the interval nearest its centre (centroid, SimPoint 3.2's), the
    /// one whose L2 misses and branch mispredictions (bbv's model) lie nearest the cluster's
    /// mean (metrics), or clusters cut into strata of like CPI estimate, a point each (strata;
    /// the closest ChampSim estimates). metrics and strata imply --validate.
    #[arg(long, value_name = "centroid|metrics|strata", default_value = "centroid", value_parser = clap::builder::PossibleValuesParser::new(Pick::ALL.map(Pick::name)))]
    pub pick: String,
    /// Cluster the main thread's intervals (main) or every thread's together (all).
    #[arg(long, value_name = "main|all", default_value = "main", value_parser = ["main", "all"])]
    pub threads: String,
    /// Warmup before each region, in instructions (rounded to whole intervals; 0 = none;
    /// default: one interval).
    #[arg(long, value_name = "N")]
    pub warmup: Option<u64>,
    /// Regions from the main thread's intervals (intervals), from slices of all threads in
    /// LoopPoint's manner (looppoint), or looppoint when another thread ran more instructions
    /// than the main one (auto).
    #[arg(long, value_name = "MODE", default_value = "auto", value_parser = ["auto", "intervals", "looppoint"])]
    pub regions: String,
    /// Library whose instructions do not count toward slices and never hold a slice boundary
    /// (a file-name prefix, e.g. libgomp; repeatable; default: libgomp and libiomp5).
    #[arg(long = "exclude-image", value_name = "NAME")]
    pub exclude_image: Vec<String>,
    /// Pace the threads of a multi-threaded program: none runs more than N instructions ahead
    /// of the slowest running one, in the run and in its replay, so that global markers mean
    /// the same work each time (0 = threads run unpaced; default: a twentieth of the interval).
    /// Under the deterministic schedule: the length of a turn (default 100000).
    #[arg(long = "flow-quantum", value_name = "N")]
    pub flow_quantum: Option<u64>,
    /// How the guest's threads are scheduled: as the host runs them (host), or in turns in an
    /// order that depends only on the program, so that a replay
    /// follows the same interleaving (deterministic: one thread runs at a time; QEMU 9.1 or
    /// later). auto: deterministic for --regions looppoint where the QEMU allows it.
    #[arg(long, value_name = "HOW", default_value = "auto", value_parser = ["auto", "host", "deterministic"])]
    pub schedule: String,
    #[command(flatten)]
    pub guest: GuestArgs,
}

impl GuestArgs {
    fn options(&self) -> GuestOptions {
        GuestOptions {
            command: self.command.clone(),
            launch: self.launch.launch(),
            exact: self.exact,
            tail: self.tail,
            rep_iterations: self.count_rep == "iteration",
            l1d: self.l1d,
            l2: self.l2,
            model_thread: self.model_thread,
            metrics_calls_only: self.metrics_calls_only,
        }
    }
}

impl RunArgs {
    /// The typed options (as a suite manifest's job builds them too).
    pub fn options(&self) -> RunOptions {
        RunOptions {
            interval: self.interval,
            max_k: bbv_pipeline::default_max_k(self.max_k, self.target_error.is_some()),
            every_k: self.every_k,
            output: self.output.clone(),
            validate: self.validate,
            target_error: self.target_error,
            // clap admits only the names.
            pick: Pick::from_name(&self.pick).unwrap_or_default(),
            threads_all: self.threads == "all",
            warmup: self.warmup,
            regions: match self.regions.as_str() {
                "intervals" => RegionsMode::Intervals,
                "looppoint" => RegionsMode::Looppoint,
                _ => RegionsMode::Auto,
            },
            exclude_image: self.exclude_image.clone(),
            flow_quantum: self.flow_quantum,
            schedule: match self.schedule.as_str() {
                "deterministic" => Schedule::Deterministic,
                "host" => Schedule::Host,
                _ => Schedule::Auto,
            },
            guest: self.guest.options(),
        }
    }
}

/// Runs the guest; `Err` = bbv's own failure before the guest ran.
fn launch(req: Request, watcher: Option<&dyn bbv_collect::Watcher>) -> Result<Outcome> {
    let prepared = bbv_collect::prepare(req)?;
    Ok(prepared.run_watched(watcher)?)
}

/// Result of a command that ran a guest: the guest's status, or bbv's failure afterwards.
pub struct GuestExit {
    /// How the guest ended.
    pub status: GuestStatus,
    /// bbv's failure after the guest ran, if any.
    pub failure: Option<anyhow::Error>,
}

/// `bbv collect`.
pub fn collect(a: CollectArgs) -> Result<GuestExit> {
    let options = CollectOptions {
        bb_out_file: a.bb_out_file,
        pc_out_file: a.pc_out_file,
        blocks_out_file: a.blocks_out_file,
        interval_size: a.interval_size,
        metrics_out_file: a.metrics_out_file,
        instr_count_only: a.instr_count_only,
        guest: a.guest.options(),
    };
    let req = options.request()?;
    // -v: progress on a terminal while the guest runs.
    let progress = crate::progress::Progress::new(None);
    let outcome = launch(req, a.guest.verbose.then_some(&progress as _));
    progress.done();
    let outcome = outcome?;
    let status = outcome.status;
    let failure = (|| -> Result<()> {
        let collected = outcome.collected?;
        if options.instr_count_only {
            for t in &collected.threads {
                eprint!("{}", t.summary);
            }
            return Ok(());
        }
        let written = options.place(&collected, outcome.pid)?;
        if a.guest.verbose {
            for t in &collected.threads {
                eprint!("{}", t.summary);
            }
            for p in written {
                eprintln!("bbv: wrote {}", p.display());
            }
        }
        Ok(())
    })();
    Ok(GuestExit {
        status,
        failure: failure.err(),
    })
}

/// `bbv run`: the pipeline's main job, with progress on a terminal.
pub fn run(a: RunArgs) -> Result<GuestExit> {
    let options = a.options();
    let req = options.request()?;
    let progress = crate::progress::Progress::new(Some(options.k_choice().max_runs()));
    let outcome = bbv_pipeline::run(&req, &progress, Some(&progress));
    progress.done();
    let outcome = outcome?;
    for w in &outcome.warnings {
        eprintln!("bbv: warning: {}", bbv_files::folder::plain(w));
    }
    let failure = match outcome.finished {
        Ok(f) => {
            eprint!("{}", f.text);
            None
        }
        Err(e) => Some(e.into()),
    };
    Ok(GuestExit {
        status: outcome.status,
        failure,
    })
}
