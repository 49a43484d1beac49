//! `bbv collect` (valgrind exp-bbv's job under QEMU) and `bbv run` (collect, cluster, report).

use std::collections::HashMap;
use std::ffi::OsString;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use bbv_collect::{Block, Collected, GuestStatus, Outcome, Request};

use crate::atomic::AtomicFiles;

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
    /// QEMU user-mode executable (default: qemu-<isa> from PATH, chosen from the ELF header).
    #[arg(long, value_name = "PATH")]
    pub qemu: Option<PathBuf>,
    /// The plugin library (default: $BBV_PLUGIN, else libbbv_qemu.so next to bbv).
    #[arg(long, value_name = "PATH")]
    pub plugin: Option<PathBuf>,
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

/// `bbv collect`: exp-bbv's options, defaults and files.
#[derive(clap::Args, Debug)]
pub struct CollectArgs {
    /// Vector file of thread 1 (thread N writes FILE.N); %p = pid, %q{VAR} = environment.
    #[arg(long = "bb-out-file", value_name = "FILE", default_value = "bb.out.%p")]
    pub bb_out_file: String,
    /// PC file (F:id:hexaddr:function per block).
    #[arg(long = "pc-out-file", value_name = "FILE", default_value = "pc.out.%p")]
    pub pc_out_file: String,
    /// Instructions per interval.
    #[arg(long = "interval-size", value_name = "N", default_value = "100000000", value_parser = positive)]
    pub interval_size: u64,
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
    /// Cluster the main thread's intervals (main) or every thread's together (all).
    #[arg(long, value_name = "main|all", default_value = "main", value_parser = ["main", "all"])]
    pub threads: String,
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
        qemu: g.qemu.clone(),
        plugin: g.plugin.clone(),
        interval,
        exact: g.exact,
        count_only,
        tail,
        work_dir: work_dir.to_path_buf(),
    })
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
fn launch(req: Request) -> Result<Outcome> {
    let prepared = bbv_collect::prepare(req)?;
    Ok(prepared.run()?)
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
    let bb_dir = dir_of(Path::new(&a.bb_out_file));
    if !a.instr_count_only {
        check_writable(&bb_dir)?;
        check_writable(&dir_of(Path::new(&a.pc_out_file)))?;
    }
    let work = if a.instr_count_only {
        std::env::temp_dir()
    } else {
        bb_dir
    };
    let req = request(
        &a.guest,
        a.interval_size,
        a.instr_count_only,
        a.guest.tail,
        &work,
    )?;
    let outcome = launch(req)?;
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
        let written = place(&collected, &bb, &pc)?;
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

/// Moves the vector files to their names and writes the PC file.
fn place(c: &Collected, bb: &Path, pc: &Path) -> Result<Vec<PathBuf>> {
    let mut files = AtomicFiles::default();
    files.write(pc, |w| bbv_collect::write_pc(w, &c.blocks))?;
    let mut written = files.commit()?;
    for t in &c.threads {
        if let Some(src) = &t.bb {
            let dest = thread_file(bb, t.number);
            bbv_collect::move_file(src, &dest)?;
            written.push(dest);
        }
    }
    Ok(written)
}

/// `bbv run`.
pub fn run(a: RunArgs) -> Result<GuestExit> {
    if a.max_k == 0 {
        bail!("--max-k must be at least 1");
    }
    std::fs::create_dir_all(&a.output)
        .with_context(|| format!("cannot create the output directory {}", a.output.display()))?;
    check_writable(&a.output)?;
    let req = request(&a.guest, a.interval, false, a.guest.tail, &a.output)?;
    let outcome = launch(req)?;
    let status = outcome.status;
    let failure = (|| -> Result<()> {
        let collected = outcome.collected?;
        let bb = a.output.join("bb.out");
        let pc = a.output.join("pc.out");
        place(&collected, &bb, &pc)?;
        summarize(&a, &collected, &bb)
    })();
    Ok(GuestExit {
        status,
        failure: failure.err(),
    })
}

/// One interval's vector: (block id, instructions).
type Sparse = Vec<(u32, f64)>;

fn summarize(a: &RunArgs, c: &Collected, bb: &Path) -> Result<()> {
    let dir = &a.output;
    let threads: Vec<_> = c
        .threads
        .iter()
        .filter(|t| a.threads == "all" || t.number == 1)
        .collect();
    // Vectors per thread (the tail, when asked for, is in the file as its last line).
    let mut vectors: Vec<(u32, Vec<Sparse>)> = Vec::new();
    for t in &threads {
        let path = thread_file(bb, t.number);
        let mut r = bbv_profile::BbvReader::open(&path)?;
        let mut v = Vec::new();
        let mut all = Vec::new();
        while r.next_vector(&mut v)? {
            all.push(v.iter().map(|t| (t.id, t.value)).collect());
        }
        vectors.push((t.number, all));
    }
    let total_rows: usize = vectors.iter().map(|v| v.1.len()).sum();
    let mut report = String::new();
    let total: u64 = c.threads.iter().map(|t| t.instructions).sum();
    report.push_str(&format!(
        "instructions: {total} in {} thread{}\n",
        c.threads.len(),
        if c.threads.len() == 1 { "" } else { "s" }
    ));
    if c.threads.len() > 1 {
        for t in &c.threads {
            report.push_str(&format!("  thread {}: {}\n", t.number, t.instructions));
        }
    }
    report.push_str(&format!(
        "intervals: {total_rows} of {} instructions ({})\n",
        a.interval,
        if a.threads == "all" {
            "all threads; shown as thread:interval"
        } else {
            "main thread"
        }
    ));
    if total_rows == 0 {
        report.push_str(&format!(
            "no complete interval to cluster: the run is shorter than --interval {} (try a smaller one, or --tail)\n",
            a.interval
        ));
        return finish_report(dir, &report);
    }
    // The file SimPoint clusters: the chosen threads' vectors, in thread order.
    let input = if a.threads == "all" {
        let p = dir.join("bb.all");
        let mut files = AtomicFiles::default();
        files.write(&p, |w| {
            let mut bw = bbv_profile::BbvWriter::new(w);
            for (_, vs) in &vectors {
                for v in vs {
                    let pairs: Vec<(u32, u64)> = v.iter().map(|&(id, x)| (id, x as u64)).collect();
                    bw.write_vector(&pairs)?;
                }
            }
            bw.finish().map(drop)
        })?;
        files.commit()?;
        p
    } else {
        bb.to_path_buf()
    };
    let prefix = dir.join("simpoint");
    let mut args: Vec<OsString> = vec![input.into(), "--max-k".into(), a.max_k.to_string().into()];
    args.push("-o".into());
    args.push(prefix.clone().into());
    let mut cfg = crate::simpoint_cmd::parse_modern(&args)?;
    cfg.summary = false;
    crate::simpoint_cmd::run(cfg)?;

    let points = read_pairs::<usize>(&prefix.with_extension("simpoints"))?;
    let weights = read_pairs::<f64>(&prefix.with_extension("weights"))?;
    let weight_of: HashMap<u64, f64> = weights.iter().map(|&(w, c)| (c as u64, w)).collect();
    // Which thread and interval each clustered row is.
    let index: Vec<(u32, u64)> = vectors
        .iter()
        .flat_map(|(n, vs)| (0..vs.len() as u64).map(move |i| (*n, i)))
        .collect();
    let flat: Vec<&Sparse> = vectors.iter().flat_map(|(_, v)| v.iter()).collect();
    report.push_str(&format!(
        "simpoints: {} (k chosen by BIC, --max-k {})\n",
        points.len(),
        a.max_k
    ));
    report.push_str("  weight  interval  start instruction  hottest functions\n");
    let mut pts: Vec<(f64, u64, u64)> = points
        .iter()
        .map(|&(row, cl)| {
            (
                weight_of.get(&(cl as u64)).copied().unwrap_or(0.0),
                row as u64,
                cl as u64,
            )
        })
        .collect();
    pts.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
    for (w, row, _) in pts {
        let (thread, interval) = index.get(row as usize).copied().unwrap_or((1, row));
        let start = interval * a.interval;
        let hot = flat
            .get(row as usize)
            .map(|v| hottest(v, &c.blocks))
            .unwrap_or_default();
        let at = if a.threads == "all" {
            format!("{thread}:{interval}")
        } else {
            interval.to_string()
        };
        report.push_str(&format!("  {w:6.4}  {at:>8}  {start:>17}  {hot}\n"));
    }
    report.push_str(&format!(
        "files: {}/ (bb.out{}, pc.out, {}simpoint.simpoints, simpoint.weights, simpoint.labels, summary.txt)\n",
        dir.display(),
        if c.threads.len() > 1 { ", bb.out.N" } else { "" },
        if a.threads == "all" { "bb.all, " } else { "" }
    ));
    finish_report(dir, &report)
}

fn finish_report(dir: &Path, report: &str) -> Result<()> {
    let mut files = AtomicFiles::default();
    files.write(&dir.join("summary.txt"), |w| w.write_all(report.as_bytes()))?;
    files.commit()?;
    eprint!("{report}");
    Ok(())
}

/// The three functions holding the most instructions of an interval, with their shares.
fn hottest(v: &[(u32, f64)], blocks: &[Block]) -> String {
    let mut by_fn: HashMap<String, f64> = HashMap::new();
    let mut total = 0.0;
    for &(id, x) in v {
        total += x;
        let name = match blocks.get(id as usize - 1) {
            Some(b) if !b.function.is_empty() => b.function.clone(),
            Some(b) => match &b.module {
                Some(m) => format!(
                    "{}+{:#x}",
                    m.file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    b.address
                ),
                None => format!("{:#x}", b.address),
            },
            None => format!("block {id}"),
        };
        *by_fn.entry(name).or_default() += x;
    }
    let mut list: Vec<(String, f64)> = by_fn.into_iter().collect();
    list.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    list.iter()
        .take(3)
        .map(|(n, x)| format!("{n} {:.0}%", 100.0 * x / total.max(1.0)))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Reads SimPoint's `VALUE INDEX` lines.
fn read_pairs<T: std::str::FromStr>(path: &Path) -> Result<Vec<(T, usize)>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    text.lines()
        .map(|l| {
            let mut f = l.split_whitespace();
            let v = f.next().and_then(|s| s.parse().ok());
            let i = f.next().and_then(|s| s.parse().ok());
            v.zip(i)
                .with_context(|| format!("{}: unexpected line {l:?}", path.display()))
        })
        .collect()
}
