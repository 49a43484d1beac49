//! `bbv bench`: bbvkit's figures measured side by side with their anchors (the reference
//! tools, native runs, bare QEMU), each printed with its ratio and target.
//!
//! The front end of the `bbv` command, as the CLI is: every benchmark times the bbv binary
//! that runs it (as a child process) on real programs, and errors are `anyhow`'s, for people.

mod band;
mod cc;
mod checkpoint;
mod collect;
mod gpu;
mod gpu_cfg;
mod gpu_live;
mod gpu_select;
mod gpu_simulate;
mod levels;
mod measure;
mod regions;
mod report;
mod simpoint;
mod simulate;
mod study;
mod suite;
mod threads;
mod trace;
mod warmup;

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;

/// Benchmarks on real runs recorded with many intervals.
#[derive(clap::Args)]
pub struct Recorded {
    /// Intervals each recorded run must reach.
    #[arg(long, default_value_t = 10_000)]
    intervals: u64,
    /// Measurements per program (the median is printed).
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Where to record the runs (a temporary folder is made and removed there).
    #[arg(long, default_value = "/tmp")]
    dir: PathBuf,
}

/// What to benchmark.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Clustering speed against SimPoint 3.2 (needs ../shared/data or --data).
    Simpoint {
        /// Folder holding simpoint-bench/ and simpoint-golden/.
        #[arg(long, default_value = "../shared/data")]
        data: PathBuf,
        /// Repetitions per case (the fastest is printed: other load on the machine only ever adds).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// GPU trace parsing speed and memory: generate a large Accel-Sim trace and count it.
    Gpu {
        /// Size of the generated kernel trace, in MB.
        #[arg(long, default_value_t = 1000)]
        mb: u64,
        /// Kernel files (the size is split between them; they are parsed in parallel).
        #[arg(long, default_value_t = 2)]
        kernels: u64,
        /// Where to write the generated trace (removed afterwards).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// Runs per shape (the fastest is printed: this machine's speed drifts).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// `bbv cc` overhead on Lua, SQLite and bzip2 (C sources from crates cargo fetches) vs
    /// native clang-14 -O2 and -fprofile-generate.
    Cc {
        /// Rounds over the variants (the median per cell is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// The clang to build with (clang-14, clang-15, clang-16).
        #[arg(long, default_value = "clang-14")]
        compiler: String,
        /// Where to build (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// `bbv cc`'s counts at -O0, -O1, -O2, -O3 and -Os on the Lua, SQLite and bzip2 builds of
    /// `bbv bench cc`, with each clang given: every count file and stdout must be alike.
    #[command(name = "cc-levels")]
    CcLevels {
        /// The clangs to build with, comma-separated.
        #[arg(
            long,
            value_delimiter = ',',
            default_value = "clang-14,clang-15,clang-16"
        )]
        compilers: Vec<String>,
        /// Where to build (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// `bbv gpu cfg`'s parsing of SASS (MB/s) on the largest cubin of FILE (a cubin, fat binary
    /// or library), beside nvdisasm's own time and peak memory on it.
    #[command(name = "gpu-cfg")]
    GpuCfg {
        /// A cubin, fat binary, executable or library with CUDA device code.
        file: PathBuf,
        /// Timed parses (the fastest is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
    },
    /// Accel-Sim on the launches `bbv gpu sample` picks against the whole list (lists of 50-200
    /// launches built from the shipped traces, three phase patterns, both sampling methods):
    /// cycle error (target: within 2%) and speedups. Needs scripts/accelsim's build.
    GpuSimulate {
        /// Folder holding accelsim/ (the shipped traces).
        #[arg(long, default_value = "../shared/data")]
        data: PathBuf,
        /// `bbv gpu simulate --warmup-launches`.
        #[arg(long = "warmup-launches", default_value_t = 4)]
        warmup_launches: usize,
        /// Where to write the lists and samples (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// Launch selection on a generated timed run (kernels of three sizes and two paths, the
    /// second slower per instruction; three timing runs): each rule's time to pick against
    /// Sieve's, its picks and GPU-time error (target: bbv's rule within 3x Sieve's time).
    #[command(name = "gpu-select")]
    GpuSelect {
        /// Launches of the run.
        #[arg(long, default_value_t = 200_000)]
        launches: usize,
        /// Kernels they run, round robin.
        #[arg(long, default_value_t = 200)]
        kernels: usize,
    },
    /// CPU collection: native, bare QEMU, bbv collect (default, --exact, with metrics, and the
    /// metrics' callbacks alone), valgrind's exp-bbv and bbv replay on xz -9, bzip2 -9, gzip -9
    /// and a python3 loop; median slowdowns and ratios.
    Collect {
        /// Rounds over the variants (the median per cell is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Multiplies the input sizes (1 = inputs of about 1.5-4 MB).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Where to write the generated inputs (removed afterwards).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// The QEMU measured, bare and under bbv (default: qemu-x86_64 from PATH), e.g. the
        /// QEMU 10.0 scripts/build-qemu builds.
        #[arg(long, value_name = "PATH")]
        qemu: Option<PathBuf>,
    },
    /// Multi-threaded regions: `bbv run --regions looppoint` against `bbv collect` on OpenMP
    /// programs (2 and 4 threads), xz -T2 and pigz -p 2 (target: at most 1.3x), and the
    /// deterministic schedule against the host's (target: at most 1.3x the CPU time).
    Threads {
        /// Rounds over the variants (the median per cell is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the inputs and outputs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// The QEMU of every run (default: qemu-x86_64 from PATH); the deterministic schedule
        /// needs 9.1 or later, e.g. the QEMU 10.0 scripts/build-qemu builds.
        #[arg(long)]
        qemu: Option<PathBuf>,
    },
    /// `bbv suite run`: six equal jobs with --jobs 1 and 2 (target: at most 60%), and a re-run
    /// where every job is done (target: well under 1% of the first run).
    Suite {
        /// Runs per setting (the median is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the inputs and outputs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// The HTML report of real `bbv run --validate` runs of at least --intervals intervals:
    /// `bbv report DIR`'s time, the page's size and chromium's time to its load event.
    Report(Recorded),
    /// `bbv regions DIR` on real runs recorded with an interval that gives at least --intervals
    /// intervals (gzip -9, xz -6 and a python3 script): median time, peak memory, reading speed.
    Regions(Recorded),
    /// The whole chain (`bbv run`, `bbv trace`, `bbv simulate --full`) on the study's real
    /// programs: gzip, xz, sqlite3, python3, gcc's cc1, perl, LLVM's opt, and with --only
    /// cc1-large and xz-large of a billion instructions: ChampSim's CPI estimated from the
    /// regions with its 95% band against the whole run's (target: within 3% each), speedups,
    /// ChampSim's speed. Long: about ten minutes per 50 million instructions simulated in full.
    Simulate {
        #[command(flatten)]
        /// How `bbv run` chooses the regions, and the simulators.
        choice: simulate::Choice,
        /// Multiplies the inputs (1: about 50 million instructions for gzip).
        #[arg(long, default_value_t = 1.0)]
        scale: f64,
        /// Only these programs (default: all but those of a billion instructions and more,
        /// cc1-large and xz-large, each about 1.5 hours of ChampSim here).
        #[arg(long, value_delimiter = ',', value_parser = study::KEYS)]
        only: Vec<String>,
        /// Where to write the runs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
    /// Does `bbv simulate`'s 95% band hold? For every k up to --max-k and --seeds k-means
    /// seeds, the run's points (SimPoint's and strata) read in context from a whole-run
    /// ChampSim log with heartbeats (at most half an interval apart), the estimate's error
    /// against the band: the share covered and the median width.
    Band {
        /// A `bbv run --validate` directory.
        dir: PathBuf,
        /// ChampSim's output for the whole run (`bbv simulate --full`'s champsim.log, or
        /// ChampSim's own standard output) from a build with frequent heartbeats
        /// (`BBV_CHAMPSIM_HEARTBEAT=N scripts/champsim`).
        #[arg(long, value_name = "LOG")]
        whole: PathBuf,
        /// Largest k.
        #[arg(long = "max-k", default_value_t = 30)]
        max_k: usize,
        /// k-means seeds per k (the first is SimPoint's default).
        #[arg(long, default_value_t = 2)]
        seeds: usize,
    },
    /// Condensed warmups against every warmup record, side by side on a run traced with
    /// `bbv trace --full-warmup`: per region the CPI (and in context with --whole) and
    /// ChampSim's wall time warming and in all; the estimates against the whole run's.
    Warmup {
        /// A traced run directory.
        dir: PathBuf,
        /// ChampSim's output for the whole run with heartbeats (as for `bbv bench band`).
        #[arg(long, value_name = "LOG")]
        whole: Option<PathBuf>,
        /// Records before each region kept whole.
        #[arg(long, default_value_t = bbv_champsim::condense::Condense::default().detail)]
        detail: u64,
        /// Lines whose last touch is kept.
        #[arg(long, default_value_t = bbv_champsim::condense::Condense::default().lines)]
        lines: usize,
        /// The ChampSim binary (default: the one scripts/champsim builds).
        #[arg(long, value_name = "PATH")]
        champsim: Option<PathBuf>,
    },
    /// `bbv trace` against bare QEMU and `bbv replay` on gzip -9: the time per traced
    /// instruction with the records written uncompressed (target: at most 30x bare QEMU's per
    /// instruction) and with xz -0 (its rate beside it), and the fast-forward between short
    /// regions (target: at most 1.2x the replay).
    Trace {
        /// Megabytes of text gzip compresses (1: about 150 million instructions).
        #[arg(long, default_value_t = 1.0)]
        mb: f64,
        /// Rounds (the fastest of each is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the runs and traces (a temporary folder is made and removed there;
        /// the uncompressed traces take a few GB).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// The QEMU of every run, bare and under bbv (default: qemu-x86_64 from PATH). Between
        /// windows only QEMU 9.1 and later (plugin API v3) runs the replay without the
        /// recorder's callbacks (docs/champsim.md).
        #[arg(long, value_name = "PATH")]
        qemu: Option<PathBuf>,
    },
    /// `bbv checkpoint` against `bbv replay` on gzip -9 (QEMU 9.1 or later): its time over the
    /// replay's with the file system's cost of writing as many bytes beside it (target: at most
    /// 1.3x the replay plus that), and the checkpoints' size against the memory they keep.
    Checkpoint {
        /// Megabytes of text gzip compresses (1: about 150 million instructions).
        #[arg(long, default_value_t = 1.0)]
        mb: f64,
        /// Rounds (the fastest of each is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the runs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// QEMU 9.1 or later (default: the one scripts/build-qemu builds).
        #[arg(long, value_name = "PATH")]
        qemu: Option<PathBuf>,
    },
    /// `bbv gpu run` against the plain run (needs an NVIDIA GPU): the test kernels and, where
    /// python3 imports torch, 5 and 50 PyTorch forward passes (target: at most 10x for runs of
    /// a second or more).
    GpuLive {
        /// Rounds (plain and counted interleaved; the median is printed).
        #[arg(long, default_value_t = 3)]
        runs: usize,
        /// Where to write the runs (a temporary folder is made and removed there).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
        /// The repository (for tools/cupti/torch_forward.py).
        #[arg(long, default_value = ".")]
        repo: PathBuf,
    },
    /// Scale: generate a large BBV (phased, sparse) and cluster it, printing time and peak memory.
    Scale {
        /// Intervals (vectors).
        #[arg(long, default_value_t = 1_000_000)]
        intervals: usize,
        /// Distinct blocks (largest block id).
        #[arg(long, default_value_t = 100_000)]
        blocks: u32,
        /// k search limit.
        #[arg(long = "max-k", default_value_t = 30)]
        max_k: usize,
        /// Where to write the generated file (removed afterwards).
        #[arg(long, default_value = "/tmp")]
        dir: PathBuf,
    },
}

/// Runs a benchmark.
pub fn run(cmd: BenchCommand) -> Result<()> {
    match cmd {
        BenchCommand::Cc {
            runs,
            dir,
            compiler,
        } => cc::run(runs, &dir, &compiler),
        BenchCommand::CcLevels { compilers, dir } => levels::run(&dir, &compilers),
        BenchCommand::GpuCfg { file, runs } => gpu_cfg::run(&file, runs),
        BenchCommand::Band {
            dir,
            whole,
            max_k,
            seeds,
        } => band::run(&dir, &whole, max_k, seeds),
        BenchCommand::Warmup {
            dir,
            whole,
            detail,
            lines,
            champsim,
        } => {
            let how = bbv_champsim::condense::Condense {
                detail,
                lines,
                ..Default::default()
            };
            warmup::run(&dir, whole.as_deref(), how, champsim.as_deref())
        }
        BenchCommand::GpuSimulate {
            data,
            warmup_launches,
            dir,
        } => gpu_simulate::run(&data, warmup_launches, &dir),
        BenchCommand::GpuSelect { launches, kernels } => gpu_select::run(launches, kernels),
        BenchCommand::Collect {
            runs,
            scale,
            dir,
            qemu,
        } => collect::run(runs, &dir, scale, qemu.as_deref()),
        BenchCommand::Threads { runs, dir, qemu } => threads::run(runs, &dir, qemu.as_deref()),
        BenchCommand::Suite { runs, dir } => suite::run(runs, &dir),
        BenchCommand::Report(r) => report::run(r.intervals, r.runs, &r.dir),
        BenchCommand::Regions(r) => regions::run(r.intervals, r.runs, &r.dir),
        BenchCommand::Gpu {
            mb,
            kernels,
            dir,
            runs,
        } => gpu::run(mb, kernels, &dir, runs),
        BenchCommand::Scale {
            intervals,
            blocks,
            max_k,
            dir,
        } => simpoint::scale(intervals, blocks, max_k, &dir),
        BenchCommand::Simpoint { data, runs } => simpoint::simpoint(&data, runs),
        BenchCommand::GpuLive { runs, dir, repo } => gpu_live::run(runs, &dir, &repo),
        BenchCommand::Simulate {
            choice,
            scale,
            only,
            dir,
        } => simulate::run(choice, scale, &only, &dir),
        BenchCommand::Trace {
            mb,
            runs,
            dir,
            qemu,
        } => trace::run(mb, runs, &dir, qemu.as_deref()),
        BenchCommand::Checkpoint {
            mb,
            runs,
            dir,
            qemu,
        } => checkpoint::run(mb, runs, &dir, qemu.as_deref()),
    }
}
