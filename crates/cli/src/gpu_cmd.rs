//! `bbv gpu`: GPU kernels from Accel-Sim traces.

use std::path::PathBuf;

use anyhow::Result;
use bbv_gpu::output::CountFormat;
use bbv_gpu::select::{Rule, SampleOptions};
use bbv_gpu::CountMode;
use clap::{Subcommand, ValueEnum};

/// Output formats of `bbv gpu count`.
#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum Format {
    /// NVBit instr_count_bb's lines.
    Nvbit,
    /// Accel-Sim's stats.csv.
    Csv,
    /// Every field and the count of every mode.
    Json,
}

/// `bbv gpu` commands.
#[derive(Subcommand)]
pub enum GpuCommand {
    /// Per-launch instruction counts as NVBit's instr_count tools print them.
    Count(CountArgs),
    /// Count a CUDA program's kernels live on an NVIDIA GPU (CUPTI, no NVBit): per launch,
    /// every SASS instruction's executions, NVBit instr_count_bb's lines, basic-block vectors
    /// over the kernels' static blocks. Exits with the program's status (2: bbv refused, 1:
    /// CUPTI refused and counts are missing).
    Run(RunArgs),
    /// Static control-flow graphs of every kernel and device function: NVIDIA cubins, fat
    /// binaries and executables or libraries with CUDA device code (nvdisasm, cuobjdump), AMDGPU
    /// code objects and object files (llvm-objdump). Blocks as `nvdisasm -bbcfg` draws them.
    Cfg {
        /// The files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Write here instead of stdout (whole, or not at all).
        #[arg(short, long)]
        output: Option<PathBuf>,
        /// json (docs/gpu-cfg.md), dot (Graphviz) or tsv (a line per block).
        #[arg(long, default_value = "json")]
        format: bbv_gpucfg::write::Format,
        /// NVIDIA's disassembler (default: on the PATH, else scripts/gpu-tools' copy).
        #[arg(long)]
        nvdisasm: Option<PathBuf>,
        /// NVIDIA's fat-binary tool (default: on the PATH, else scripts/gpu-tools' copy).
        #[arg(long)]
        cuobjdump: Option<PathBuf>,
        /// LLVM's disassembler for AMDGPU code (default: the newest llvm-objdump-N on the PATH).
        #[arg(long = "llvm-objdump")]
        llvm_objdump: Option<PathBuf>,
    },
    /// Kernel sampling: representative launches with weights, and every metric estimated from
    /// them with its error against the full trace.
    Sample {
        /// kernelslist.g of the trace, or a `bbv gpu run` folder.
        list: PathBuf,
        /// Output folder: kernelslist.g (chosen launches), weights.csv, report, report.html,
        /// summary.json.
        #[arg(short = 'o', value_name = "DIR")]
        output: PathBuf,
        #[command(flatten)]
        how: SampleArgs,
    },
    /// Launch sampling scored against the hardware: on each `bbv gpu run --repeat` folder,
    /// every --method's picks, chosen on the first timing run, estimate the other runs' total
    /// GPU time (docs/gpu-live.md; --method itself is ignored).
    Score {
        /// `bbv gpu run --repeat N` folders (times.tsv, launches.tsv, bbv.bb).
        #[arg(required = true)]
        dirs: Vec<PathBuf>,
        #[command(flatten)]
        how: SampleArgs,
    },
    /// Accel-Sim on the launches `bbv gpu sample` picked (each in a process of its own, after
    /// the launches that preceded it in the trace): the whole run's cycles estimated from the
    /// picks' weights, and with --full the error against simulating every launch. Writes
    /// DIR/simulation.json.
    Simulate(GpuSimulateArgs),
    /// Basic-block vectors: PREFIX.bb (one SimPoint `T` line per launch, warp-level
    /// instructions per block) and PREFIX.blocks (id, kernel, start PC, size, executions).
    Bbv {
        /// kernelslist.g of the trace.
        list: PathBuf,
        /// Output prefix.
        #[arg(short = 'o', value_name = "PREFIX")]
        output: PathBuf,
        /// Also write PREFIX.tb.bb: one vector per thread block, each after a
        /// `# launch L thread block x,y,z` comment.
        #[arg(long = "per-block")]
        per_block: bool,
        /// Key the vectors by the static blocks of these binaries (`bbv gpu cfg`'s inputs),
        /// kernel by kernel where the trace agrees with them.
        #[arg(long)]
        cfg: Vec<PathBuf>,
    },
}

/// How `bbv gpu sample` picks launches.
#[derive(clap::Args)]
pub struct SampleArgs {
    /// bbv (Sieve's strata split by basic-block mix), sieve (by kernel and instruction count),
    /// pka or stem (these two read `bbv gpu run --repeat`'s times, else instructions).
    #[arg(long, default_value = "bbv")]
    method: Rule,
    /// Largest k tried (pka).
    #[arg(long = "max-k", default_value_t = SampleOptions::default().max_k)]
    max_k: usize,
    /// How far apart in instruction count (relative) and, with bbv, in basic-block mix
    /// (fraction of instructions placed differently) launches standing for each other may be.
    #[arg(long, default_value_t = SampleOptions::default().spread)]
    spread: f64,
}

impl SampleArgs {
    fn options(&self) -> SampleOptions {
        SampleOptions {
            rule: self.method,
            max_k: self.max_k,
            spread: self.spread,
        }
    }
}

/// `bbv gpu run`'s options.
#[derive(clap::Args)]
pub struct RunArgs {
    /// Output folder: raw/ (per-PC counts, cubins), counts.txt, bbv.bb, blocks.tsv,
    /// launches.tsv, summary.json; times.tsv with --repeat.
    #[arg(short = 'o', value_name = "DIR", default_value = "bbv-gpu")]
    output: PathBuf,
    /// Count only kernels whose mangled name matches this regular expression (ECMAScript).
    #[arg(long)]
    kernels: Option<String>,
    /// Count only launches A (inclusive) to B (exclusive), 0-based; B may be left out.
    #[arg(long, value_name = "A:B", value_parser = bbv_cuda::tools::launch_range)]
    launches: Option<(u64, Option<u64>)>,
    /// counts.txt per thread (active lanes) instead of per warp (NVBit COUNT_WARP_LEVEL=0).
    #[arg(long = "thread-level")]
    thread_level: bool,
    /// counts.txt without predicated-off instructions (NVBit EXCLUDE_PRED_OFF=1).
    #[arg(long = "exclude-pred-off")]
    exclude_pred_off: bool,
    /// Then run the program N more times uncounted, each launch timed on the GPU (CUPTI's
    /// activity records): times.tsv, a time per launch and run, and their spread.
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100))]
    repeat: u32,
    /// The program and its arguments.
    #[arg(last = true, required = true, value_name = "PROGRAM")]
    command: Vec<String>,
}

/// `bbv gpu count`'s options.
#[derive(clap::Args)]
pub struct CountArgs {
    /// kernelslist.g of the trace.
    pub list: PathBuf,
    /// Count threads (active lanes) instead of warps (NVBit COUNT_WARP_LEVEL=0).
    #[arg(long = "thread-level")]
    pub thread_level: bool,
    /// Skip instructions predicated off in every lane (NVBit EXCLUDE_PRED_OFF=1).
    #[arg(long = "exclude-pred-off")]
    pub exclude_pred_off: bool,
    /// First launch counted (0-based, NVBit START_GRID_NUM).
    #[arg(long = "start-grid", default_value_t = 0)]
    pub start_grid: usize,
    /// Launches from this one on are not counted (NVBit END_GRID_NUM).
    #[arg(long = "end-grid")]
    pub end_grid: Option<usize>,
    /// Output format.
    #[arg(long, value_enum, default_value = "nvbit")]
    pub format: Format,
    /// Also print each launch's opcode histogram (NVBit opcode_hist's lines).
    #[arg(long)]
    pub opcodes: bool,
    /// Print kernel names demangled (NVBit MANGLED_NAMES=0).
    #[arg(long)]
    pub demangle: bool,
    /// Warn about a damaged or missing kernel file and skip that launch instead of stopping.
    #[arg(long = "keep-going")]
    pub keep_going: bool,
    /// Also print each launch's executions of every basic block of its kernel, the blocks
    /// it skipped included (nvbit and json layouts).
    #[arg(long = "per-block")]
    pub per_block: bool,
    /// Key --per-block by the static blocks of these binaries (`bbv gpu cfg`'s inputs),
    /// kernel by kernel where the trace agrees with them.
    #[arg(long)]
    pub cfg: Vec<PathBuf>,
}

/// `bbv gpu simulate`'s options.
#[derive(clap::Args)]
pub struct GpuSimulateArgs {
    /// The `bbv gpu sample` folder.
    pub dir: PathBuf,
    /// scripts/accelsim's folder or an accel-sim.out (default: ~/.cache/bbvkit/accelsim).
    #[arg(long)]
    pub accelsim: Option<PathBuf>,
    /// A tested configuration by name (default: the first that models the traces' SM).
    #[arg(long)]
    pub config: Option<String>,
    /// Simulator processes at a time (default: the cores).
    #[arg(long)]
    pub jobs: Option<usize>,
    /// Launches of the trace simulated before each pick to warm its caches, not counted.
    #[arg(long = "warmup-launches", default_value_t = 4)]
    pub warmup_launches: usize,
    /// The whole trace's kernelslist.g: simulated in full for the error and speedups.
    #[arg(long)]
    pub full: Option<PathBuf>,
}

impl From<Format> for CountFormat {
    fn from(f: Format) -> CountFormat {
        match f {
            Format::Nvbit => CountFormat::Nvbit,
            Format::Csv => CountFormat::Csv,
            Format::Json => CountFormat::Json,
        }
    }
}

impl GpuCommand {
    /// `bbv gpu sample`'s options, checked (a suite's GPU jobs are checked before any runs).
    pub fn check(&self) -> Result<()> {
        if let GpuCommand::Sample { how, .. } = self {
            how.options().check()?;
        }
        Ok(())
    }
}

/// `bbv gpu run`: the program's exit status, 1 when CUPTI refused.
fn live_run(a: RunArgs) -> Result<u8> {
    let exe = std::env::current_exe()?;
    let exe_dir = exe.parent().map(PathBuf::from).unwrap_or_default();
    let run = bbv_gpujob::GpuRun {
        output: a.output,
        command: a.command,
        mode: CountMode {
            thread_level: a.thread_level,
            exclude_pred_off: a.exclude_pred_off,
        },
        selection: bbv_cuda::tools::Selection {
            kernels: a.kernels,
            launches: a.launches,
        },
        repeat: a.repeat,
        exe_dir,
    };
    let o = bbv_gpujob::gpu_run(&run)?;
    eprint!("{}", o.report);
    Ok(o.exit_code())
}

/// Runs a `bbv gpu` command; returns the exit status.
pub fn run(cmd: GpuCommand) -> Result<u8> {
    match cmd {
        GpuCommand::Run(a) => live_run(a),
        GpuCommand::Cfg {
            files,
            output,
            format,
            nvdisasm,
            cuobjdump,
            llvm_objdump,
        } => {
            let mut tools = bbv_gpucfg::Tools {
                nvdisasm,
                cuobjdump,
                llvm_objdump,
                used: Vec::new(),
            };
            for line in bbv_gpucfg::run(&files, output.as_deref(), format, &mut tools)? {
                eprintln!("bbv gpu cfg: {line}");
            }
            Ok(0)
        }
        GpuCommand::Sample { list, output, how } => {
            print!("{}", bbv_gpujob::gpu_sample(&list, &output, how.options())?);
            Ok(0)
        }
        GpuCommand::Bbv {
            list,
            output,
            per_block,
            cfg,
        } => {
            for line in bbv_gpujob::gpu_bbv(&list, &output, per_block, &cfg)? {
                eprintln!("{line}");
            }
            Ok(0)
        }
        GpuCommand::Count(a) => count(a),
        GpuCommand::Score { dirs, how } => {
            print!("{}", bbv_gpujob::gpu_score(&dirs, &how.options())?);
            Ok(0)
        }
        GpuCommand::Simulate(a) => {
            let job = bbv_gpujob::GpuSimulate {
                dir: a.dir,
                accelsim: a.accelsim,
                config: a.config,
                jobs: a.jobs,
                warmup_launches: a.warmup_launches,
                full: a.full,
            };
            print!("{}", bbv_gpujob::gpu_simulate(&job)?.report);
            Ok(0)
        }
    }
}

/// `bbv gpu count`.
fn count(a: CountArgs) -> Result<u8> {
    let job = bbv_gpujob::GpuCount {
        list: a.list,
        mode: CountMode {
            thread_level: a.thread_level,
            exclude_pred_off: a.exclude_pred_off,
        },
        start_grid: a.start_grid,
        end_grid: a.end_grid,
        format: a.format.into(),
        opcodes: a.opcodes,
        demangle: a.demangle,
        keep_going: a.keep_going,
        per_block: a.per_block,
        cfg: a.cfg,
        tools: bbv_gpucfg::Tools::default(),
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for line in bbv_gpujob::gpu_count(job, &mut out)? {
        eprintln!("bbv gpu count: {line}");
    }
    Ok(0)
}
