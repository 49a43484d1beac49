//! The `bbv` command.

mod cc_cmd;
mod checkpoint_cmd;
mod collect_cmd;
mod gpu_cmd;
mod progress;
mod regions_cmd;
mod simpoint_cmd;
mod suite_cmd;

use std::ffi::OsString;
use std::path::Path;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "bbv",
    version,
    about = "Basic-block vectors and SimPoints, faster and more exactly"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a program under QEMU and write basic-block vectors (valgrind exp-bbv's options and
    /// files). Exits with the program's own status.
    Collect(collect_cmd::CollectArgs),
    /// Collect, cluster and summarize: simulation points of a program in one command.
    Run(collect_cmd::RunArgs),
    /// Place (PC, count) markers on a run's points and write the hand-off files (regions.csv,
    /// regions.json, gem5/, nemu/, regions.sniper.txt) from a `bbv run` directory.
    Regions(regions_cmd::RegionsArgs),
    /// Rebuild a run's one-page HTML report (DIR/report.html) from its files.
    Report(regions_cmd::ReportArgs),
    /// Run the program again watching only a run's markers: every region must start and end
    /// where the profile says. Exits 0 if so, 1 if not, 2 on bad input.
    Replay(regions_cmd::ReplayArgs),
    /// Replay a run and write ChampSim traces of its regions (x86-64, AArch64, RISC-V 64): per
    /// region its warmup, the region and a tail, xz-compressed, with ChampSim's command lines in
    /// regions.json.
    /// Exits as `bbv replay` does.
    Trace(regions_cmd::TraceArgs),
    /// Replay a run and write an executable checkpoint of each region (x86-64, QEMU 9.1+): a
    /// static ELF that starts at the region's warmup and exits 0 at its end, natively or under
    /// QEMU; --check CKDIR runs them and compares each with the profile.
    Checkpoint(checkpoint_cmd::CheckpointArgs),
    /// Run ChampSim on a run's region traces and estimate the program's CPI from them (as
    /// LoopPoint does); with --full -- PROG ARGS also simulate the whole run and report the
    /// estimate's error.
    Simulate(regions_cmd::SimulateArgs),
    /// Compile C with deterministic instruction counting: `bbv cc -- clang-14 ARGS` (usable as CC).
    Cc(cc_cmd::CcArgs),
    /// Compile C++ with deterministic instruction counting: `bbv c++ -- clang++-14 ARGS`.
    #[command(name = "c++")]
    Cxx(cc_cmd::CcArgs),
    /// Cluster a BBV file and pick simulation points (SimPoint 3.2 compatible; accepts
    /// SimPoint's own options too). See 'bbv simpoint --help'.
    #[command(disable_help_flag = true)]
    Simpoint {
        #[arg(allow_hyphen_values = true, trailing_var_arg = true, num_args = 0..)]
        args: Vec<OsString>,
    },
    /// GPU kernels: NVBit-exact counts from Accel-Sim traces or live (CUPTI), static CFGs,
    /// kernel sampling and Accel-Sim on the picks.
    Gpu {
        #[command(subcommand)]
        what: gpu_cmd::GpuCommand,
    },
    /// Whole suites from one manifest, on this machine or a Slurm cluster: `bbv suite run
    /// MANIFEST -o OUT`.
    Suite {
        #[command(subcommand)]
        what: suite_cmd::SuiteCommand,
    },
    /// Benchmarks against the anchor figures of the reference tools.
    Bench {
        #[command(subcommand)]
        what: bbv_bench::BenchCommand,
    },
}

fn simpoint(args: &[OsString]) -> anyhow::Result<()> {
    simpoint_cmd::run(simpoint_cmd::parse(args)?)
}

fn message(e: &anyhow::Error) -> String {
    let mut msg = format!("{e}");
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !msg.contains(&c) {
            msg.push_str(&format!(": {c}"));
        }
    }
    msg
}

/// A command that ran a guest exits with the guest's status, unless bbv failed.
fn guest_exit(result: anyhow::Result<collect_cmd::GuestExit>) -> ExitCode {
    match result {
        Ok(g) => match g.failure {
            Some(e) => {
                stopped_or(&message(&e));
                ExitCode::from(2)
            }
            None => ExitCode::from(g.status.code().clamp(0, 255) as u8),
        },
        Err(e) => report(Err(e)),
    }
}

/// A command's own exit status (0, 1), or 2 with the error's message.
fn status(result: anyhow::Result<u8>) -> ExitCode {
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => report(Err(e)),
    }
}

/// Prints an error's message, or, when a signal stopped bbv, what each folder kept.
fn stopped_or(msg: &str) {
    match bbv_files::interrupt::received() {
        Some(sig) => bbv_files::interrupt::say_farewell(sig),
        None => eprintln!("bbv: {}", bbv_files::folder::plain(msg)),
    }
}

fn report(result: anyhow::Result<()>) -> ExitCode {
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let mut msg = format!("{e}");
            for cause in e.chain().skip(1) {
                let c = cause.to_string();
                if !msg.contains(&c) {
                    msg.push_str(&format!(": {c}"));
                }
            }
            stopped_or(&msg);
            ExitCode::from(2)
        }
    }
}

/// Large buffers (vectors, per-trial k-means state) come and go; glibc's default raises its
/// mmap threshold after the first such free and then keeps later ones on the heap, where they
/// stay resident. A fixed threshold returns them to the system: peak memory is what is in use.
fn fixed_mmap_threshold() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only changes allocator tuning; called before any thread starts.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 * 1024);
    }
}

fn main() -> ExitCode {
    fixed_mmap_threshold();
    let mut args: Vec<OsString> = std::env::args_os().collect();
    // Invoked through a symlink named `simpoint`: behave as `bbv simpoint`.
    let invoked_as = args
        .first()
        .and_then(|a| Path::new(a).file_name())
        .map(|n| n.to_string_lossy().into_owned());
    if invoked_as.as_deref() == Some("simpoint") {
        args.remove(0);
        return report(simpoint(&args));
    }
    let cli = match Cli::try_parse_from(&args) {
        Ok(c) => c,
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { 2 } else { 0 });
        }
    };
    if !matches!(cli.command, Command::Bench { .. }) {
        // Before any other thread starts, so that all of them leave the signals to it.
        if let Err(e) = bbv_files::interrupt::install() {
            eprintln!("bbv: cannot handle signals: {e}");
            return ExitCode::from(2);
        }
    }
    let code = dispatch(cli.command);
    match bbv_files::interrupt::received() {
        // A signal bbv did not end on at once (a guest got it; the command ended meanwhile).
        Some(sig) => {
            bbv_files::interrupt::say_farewell(sig);
            ExitCode::from((128 + sig).clamp(0, 255) as u8)
        }
        None => code,
    }
}

fn dispatch(command: Command) -> ExitCode {
    report(match command {
        Command::Collect(a) => return guest_exit(collect_cmd::collect(a)),
        Command::Run(a) => return guest_exit(collect_cmd::run(a)),
        Command::Regions(a) => regions_cmd::regions(a),
        Command::Report(a) => regions_cmd::report(a),
        Command::Replay(a) => return status(regions_cmd::replay(a)),
        Command::Trace(a) => return status(regions_cmd::trace(a)),
        Command::Checkpoint(a) => return status(checkpoint_cmd::checkpoint(a)),
        Command::Simulate(a) => return status(regions_cmd::simulate(a)),
        Command::Cc(a) | Command::Cxx(a) => cc_cmd::run_cc(a),
        Command::Simpoint { args } => simpoint(&args),
        Command::Gpu { what } => return status(gpu_cmd::run(what)),
        Command::Bench { what } => bbv_bench::run(what),
        Command::Suite { what } => return status(suite_cmd::run(what)),
    })
}
