//! `bbv collect` (valgrind exp-bbv's job under QEMU) and `bbv run` (collect, cluster, report).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bbv_collect::{CacheModel, Collected, GuestStatus, Outcome, Request};
use bbv_profile::CacheGeometry;

use bbv_files::AtomicFiles;

fn yes_no(v: &str) -> Result<bool, String> {
    match v {
        "yes" | "on" | "true" => Ok(true),
        "no" | "off" | "false" => Ok(false),
        _ => Err(format!("expected yes or no, not {v:?}")),
    }
}

fn positive(v: &str) -> Result<u64, String> {
    match v.replace('_', "").parse::<u64>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!(
            "expected a positive whole number of instructions, not {v:?}"
        )),
    }
}

fn percent(v: &str) -> Result<f64, String> {
    match v.trim_end_matches('%').parse::<f64>() {
        Ok(p) if p > 0.0 && p <= 100.0 => Ok(p / 100.0),
        _ => Err(format!(
            "expected a percentage above 0 and at most 100, not {v:?}"
        )),
    }
}

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
    /// Largest k tried by the SimPoint search.
    #[arg(long = "max-k", value_name = "K", default_value_t = 30)]
    pub max_k: usize,
    /// Directory for every file of the run.
    #[arg(short = 'o', value_name = "DIR", default_value = "bbv-out")]
    pub output: PathBuf,
    /// Also measure per-interval metrics (DIR/metrics.csv) and report how well the chosen
    /// points estimate each (DIR/validation.json and the summary's error table).
    #[arg(long)]
    pub validate: bool,
    /// Choose k as the smallest (up to --max-k) whose estimate of every metric is within PCT
    /// percent of the full run (or 0.01 per 1000 instructions), instead of SimPoint's BIC
    /// rule; implies --validate.
    #[arg(long = "target-error", value_name = "PCT", value_parser = percent)]
    pub target_error: Option<f64>,
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
    #[arg(long = "flow-quantum", value_name = "N")]
    pub flow_quantum: Option<u64>,
    #[command(flatten)]
    pub guest: GuestArgs,
}

fn request(
    g: &GuestArgs,
    interval: u64,
    count_only: bool,
    tail: bool,
    work_dir: &Path,
) -> Result<Request> {
    let (program, args) = g.command.split_first().context("no program given")?;
    let program = program
        .to_str()
        .with_context(|| format!("{}: program name is not UTF-8", program.to_string_lossy()))?;
    Ok(Request {
        program: program.to_string(),
        args: args.to_vec(),
        qemu: g.launch.qemu.clone(),
        plugin: g.launch.plugin.clone(),
        cpu: g.launch.cpu.clone(),
        interval,
        exact: g.exact,
        count_only,
        tail,
        rep_iterations: g.count_rep == "iteration",
        watch: 0,
        slices: 0,
        exclude: Vec::new(),
        flow: 0,
        markers: None,
        metrics: None,
        work_dir: work_dir.to_path_buf(),
    })
}

/// The metrics' cache model, when metrics are asked for (`asked`); the cache options without
/// them are a mistake worth reporting.
fn cache_model(g: &GuestArgs, asked: bool, flag: &str) -> Result<Option<CacheModel>> {
    let model = CacheModel {
        l1d: g.l1d,
        l2: g.l2,
        own_thread: g.model_thread,
        calls_only: g.metrics_calls_only,
        slice_rows: false,
    };
    if !asked {
        if model != CacheModel::default() {
            bail!(
                "--l1d, --l2, --model-thread and --metrics-calls-only shape the metrics' cache model: they need {flag}"
            );
        }
        return Ok(None);
    }
    if g.l1d.line != g.l2.line {
        bail!(
            "--l1d and --l2: the line sizes differ ({} and {} bytes); the model needs one line size",
            g.l1d.line,
            g.l2.line
        );
    }
    Ok(Some(model))
}

fn dir_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Fails unless files can be created in `dir` (checked before the guest runs).
fn check_writable(dir: &Path) -> Result<()> {
    tempfile::Builder::new()
        .prefix(".bbv-check-")
        .tempfile_in(dir)
        .map(drop)
        .with_context(|| format!("cannot create files in {}", dir.display()))
}

/// Runs the guest; `Err` = bbv's own failure before the guest ran.
fn launch(req: Request, watcher: Option<&dyn bbv_collect::Watcher>) -> Result<Outcome> {
    let prepared = bbv_collect::prepare(req)?;
    Ok(prepared.run_watched(watcher)?)
}

/// Result of a command that ran a guest: the guest's status, or bbv's failure afterwards.
pub struct GuestExit {
    pub status: GuestStatus,
    pub failure: Option<anyhow::Error>,
}

/// `bbv collect`.
pub fn collect(a: CollectArgs) -> Result<GuestExit> {
    bbv_collect::expand(&a.bb_out_file, None)?;
    bbv_collect::expand(&a.pc_out_file, None)?;
    if let Some(b) = &a.blocks_out_file {
        bbv_collect::expand(b, None)?;
        if !a.instr_count_only {
            check_writable(&dir_of(Path::new(b)))?;
        }
    }
    let bb_dir = dir_of(Path::new(&a.bb_out_file));
    if let Some(m) = &a.metrics_out_file {
        bbv_collect::expand(m, None)?;
        if a.instr_count_only {
            bail!(
                "--metrics-out-file needs the vectors' cuts: it cannot go with --instr-count-only"
            );
        }
        check_writable(&dir_of(Path::new(m)))?;
    }
    let metrics = cache_model(&a.guest, a.metrics_out_file.is_some(), "--metrics-out-file")?;
    if !a.instr_count_only {
        check_writable(&bb_dir)?;
        check_writable(&dir_of(Path::new(&a.pc_out_file)))?;
    }
    let work = if a.instr_count_only {
        std::env::temp_dir()
    } else {
        bb_dir
    };
    let mut req = request(
        &a.guest,
        a.interval_size,
        a.instr_count_only,
        a.guest.tail,
        &work,
    )?;
    req.metrics = metrics;
    // -v: progress on a terminal while the guest runs.
    let progress = crate::progress::Progress::new(None);
    let outcome = launch(req, a.guest.verbose.then_some(&progress as _));
    progress.done();
    let outcome = outcome?;
    let status = outcome.status;
    let failure = (|| -> Result<()> {
        let collected = outcome.collected?;
        if a.instr_count_only {
            for t in &collected.threads {
                eprint!("{}", t.summary);
            }
            return Ok(());
        }
        let bb = PathBuf::from(bbv_collect::expand(&a.bb_out_file, Some(outcome.pid))?);
        let pc = PathBuf::from(bbv_collect::expand(&a.pc_out_file, Some(outcome.pid))?);
        let blocks = a
            .blocks_out_file
            .as_deref()
            .map(|f| bbv_collect::expand(f, Some(outcome.pid)).map(PathBuf::from))
            .transpose()?;
        let metrics = a
            .metrics_out_file
            .as_deref()
            .map(|f| bbv_collect::expand(f, Some(outcome.pid)).map(PathBuf::from))
            .transpose()?;
        let mut written = place(&collected, &bb, &pc, blocks.as_deref())?;
        if let (Some(path), Some(rows)) = (metrics, collected.metrics_rows()?) {
            let mut files = AtomicFiles::default();
            files.write(&path, |w| bbv_pipeline::write_metrics(w, &rows))?;
            written.extend(files.commit()?);
        }
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

/// Thread N's vector file: the name itself for thread 1, `NAME.N` for the others.
fn thread_file(bb: &Path, number: u32) -> PathBuf {
    if number == 1 {
        bb.to_path_buf()
    } else {
        let mut s = bb.as_os_str().to_owned();
        s.push(format!(".{number}"));
        PathBuf::from(s)
    }
}

/// Moves the vector files to their names and writes the PC file (and the block table).
fn place(c: &Collected, bb: &Path, pc: &Path, blocks: Option<&Path>) -> Result<Vec<PathBuf>> {
    let mut files = AtomicFiles::default();
    files.write(pc, |w| bbv_collect::write_pc(w, &c.blocks))?;
    if let Some(b) = blocks {
        files.write(b, |w| {
            bbv_collect::write_blocks_tsv(w, &c.blocks, &c.images)
        })?;
    }
    // The PC file and the vectors land together, even if bbv is killed now.
    let hold = bbv_files::interrupt::hold();
    let mut written = files.commit_held(&hold)?;
    for t in &c.threads {
        if let Some(src) = &t.bb {
            let dest = thread_file(bb, t.number);
            bbv_files::move_file(src, &dest)?;
            written.push(dest);
        }
    }
    Ok(written)
}

/// `bbv run`: the pipeline's main job, with progress on a terminal.
pub fn run(a: RunArgs) -> Result<GuestExit> {
    if a.max_k == 0 {
        bail!("--max-k must be at least 1");
    }
    let validate = a.validate || a.target_error.is_some();
    let metrics = cache_model(&a.guest, validate, "--validate")?;
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("cannot create the output directory {}", a.output.display()))?;
    check_writable(&a.output)?;
    let mut collect = request(&a.guest, a.interval, false, a.guest.tail, &a.output)?;
    collect.metrics = metrics;
    // Markers must fall within 0.5% of an interval of each cut.
    collect.watch = (a.interval as f64 * bbv_pipeline::markers::TOLERANCE) as u64;
    let regions = match a.regions.as_str() {
        "intervals" => bbv_pipeline::RegionsMode::Intervals,
        "looppoint" => bbv_pipeline::RegionsMode::Looppoint,
        _ => bbv_pipeline::RegionsMode::Auto,
    };
    if regions == bbv_pipeline::RegionsMode::Looppoint && a.threads == "all" {
        bail!("--regions looppoint already covers every thread; --threads all is for --regions intervals");
    }
    if a.flow_quantum.is_some()
        && (regions == bbv_pipeline::RegionsMode::Intervals || a.threads == "all")
    {
        bail!("--flow-quantum paces the threads for multi-threaded regions: it needs --regions auto or looppoint (and --threads main)");
    }
    if let Some(m) = collect.metrics.as_mut() {
        // Only an explicit looppoint knows before the run that slices will be clustered; auto
        // decides at the end, so its rows follow the main thread's intervals.
        m.slice_rows = regions == bbv_pipeline::RegionsMode::Looppoint;
    }
    if regions != bbv_pipeline::RegionsMode::Intervals && a.threads == "main" {
        // Recorded whenever a second thread runs, so that auto can choose at the end.
        collect.slices = a.interval;
        collect.flow = a
            .flow_quantum
            .unwrap_or_else(|| bbv_pipeline::flow_quantum(a.interval));
        collect.exclude = if a.exclude_image.is_empty() {
            bbv_pipeline::DEFAULT_EXCLUDE.map(String::from).to_vec()
        } else {
            a.exclude_image.clone()
        };
    }
    for e in &a.exclude_image {
        if e.is_empty() || e.contains([',', ':', '/']) {
            bail!("--exclude-image {e:?}: expected a library's file name or its prefix (libgomp), without ',', ':' or '/'");
        }
    }
    let req = bbv_pipeline::RunRequest {
        collect,
        out: a.output.clone(),
        max_k: a.max_k,
        threads_all: a.threads == "all",
        warmup: a.warmup,
        regions: if a.threads == "all" {
            bbv_pipeline::RegionsMode::Intervals
        } else {
            regions
        },
        target_error: a.target_error,
    };
    let k = match a.target_error {
        Some(_) => bbv_simpoint::KChoice::List((1..=a.max_k).collect()),
        None => bbv_simpoint::KChoice::Search { max_k: a.max_k },
    };
    let progress = crate::progress::Progress::new(Some(k.max_runs()));
    let outcome = bbv_pipeline::run(&req, &progress, Some(&progress));
    progress.done();
    let outcome = outcome?;
    for w in &outcome.warnings {
        eprintln!("bbv: warning: {w}");
    }
    let failure = match outcome.finished {
        Ok(f) => {
            eprint!("{}", f.text);
            bbv_report::write_run_report(&a.output)
                .err()
                .map(anyhow::Error::from)
        }
        Err(e) => Some(e.into()),
    };
    Ok(GuestExit {
        status: outcome.status,
        failure,
    })
}
