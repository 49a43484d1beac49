//! What the `bbv gpu` commands write: counts in NVBit's, Accel-Sim's or a JSON layout, the
//! basic-block vector files, and a sampling job's output folder.

use std::collections::BTreeSet;
use std::io::Write;
use std::path::{Path, PathBuf};

use accelsim_trace::{Command, KernelList};
use bbv_files::AtomicFiles;

use crate::blocks::{Block, BlockVectors};
use crate::sample::{estimate, Estimate, Pick};
use crate::select::{score_picks, select, Rule, SampleOptions, Score, TimedLaunch};
use crate::{CountMode, GpuError, KernelCount};

/// Layouts of per-launch counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CountFormat {
    /// NVBit instr_count_bb's lines.
    Nvbit,
    /// Accel-Sim's stats.csv.
    Csv,
    /// Every field and the count of every mode.
    Json,
}

/// How counts are printed beside their layout.
#[derive(Clone, Copy, Debug)]
pub struct CountStyle<'a> {
    /// The layout.
    pub format: CountFormat,
    /// Each launch's opcode histogram too (NVBit opcode_hist's lines; NVBit layout only).
    pub opcodes: bool,
    /// Kernel names demangled (NVBit MANGLED_NAMES=0; NVBit layout only).
    pub demangle: bool,
    /// Each launch's executions of every block of its kernel, those it skipped included
    /// (NVBit and JSON layouts; `BlockVectors::entries` indexed by launch number).
    pub blocks: Option<&'a BlockVectors>,
}

/// Per block of `kernel`: (block, warp-level executions in launch `launch`), every block of
/// the kernel in address order, 0 for those the launch did not enter.
fn launch_blocks<'b>(bv: &'b BlockVectors, launch: usize, kernel: &str) -> Vec<(&'b Block, u64)> {
    let entered = bv
        .entries
        .get(launch)
        .map(Vec::as_slice)
        .unwrap_or_default();
    bv.blocks
        .iter()
        .filter(|b| b.kernel == kernel)
        .map(|b| {
            let n = entered
                .binary_search_by_key(&b.id, |e| e.0)
                .map_or(0, |i| entered[i].1);
            (b, n)
        })
        .collect()
}

/// A kernel name as NVBit prints it: mangled, or demangled when asked and possible.
fn display_name(name: &str, demangle: bool) -> String {
    if demangle {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_string()
}

/// Writes `counts` (launch number, count) in `mode` and `style`.
pub fn write_counts(
    out: &mut impl Write,
    counts: &[(usize, &KernelCount)],
    mode: CountMode,
    style: CountStyle,
) -> std::io::Result<()> {
    match style.format {
        CountFormat::Nvbit => write_nvbit(out, counts, mode, style)?,
        CountFormat::Csv => write_csv(out, counts, mode)?,
        CountFormat::Json => write_json(out, counts, mode, style.blocks)?,
    }
    out.flush()
}

fn write_nvbit(
    out: &mut impl Write,
    counts: &[(usize, &KernelCount)],
    mode: CountMode,
    style: CountStyle,
) -> std::io::Result<()> {
    let mut total: u64 = 0;
    for (launch, k) in counts {
        let n = k.count(mode);
        total += n;
        writeln!(
            out,
            "kernel {launch} - {} - #thread-blocks {},  kernel instructions {n}, total instructions {total}",
            display_name(&k.header.name, style.demangle),
            k.header.blocks()
        )?;
        if style.opcodes {
            for (op, c) in k.sorted_opcodes() {
                writeln!(out, "  {op} = {c}")?;
            }
        }
        if let Some(bv) = style.blocks {
            for (b, n) in launch_blocks(bv, *launch, &k.header.name) {
                writeln!(
                    out,
                    "  block {} at 0x{:04x}: {} instructions, executed {n}",
                    b.id, b.start, b.size
                )?;
            }
        }
    }
    writeln!(out, "Total app instructions: {total}")
}

fn write_csv(
    out: &mut impl Write,
    counts: &[(usize, &KernelCount)],
    mode: CountMode,
) -> std::io::Result<()> {
    writeln!(out, "kernel id, kernel mangled name, grid_dimX, grid_dimY, grid_dimZ, #blocks, block_dimX, block_dimY, block_dimZ, #threads, total_insts, total_reported_insts")?;
    for (_, k) in counts {
        let h = &k.header;
        writeln!(
            out,
            "{}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}, {}",
            h.id,
            h.name,
            h.grid[0],
            h.grid[1],
            h.grid[2],
            h.blocks(),
            h.block[0],
            h.block[1],
            h.block[2],
            h.blocks().saturating_mul(h.threads_per_block()),
            k.count(mode),
            k.warp_insts
        )?;
    }
    Ok(())
}

fn write_json(
    out: &mut impl Write,
    counts: &[(usize, &KernelCount)],
    mode: CountMode,
    blocks: Option<&BlockVectors>,
) -> std::io::Result<()> {
    let mut v = Vec::new();
    for (launch, k) in counts {
        let h = &k.header;
        let ops: serde_json::Map<String, serde_json::Value> = k
            .sorted_opcodes()
            .into_iter()
            .map(|(o, c)| (o.to_string(), c.into()))
            .collect();
        let mut launch_doc = serde_json::json!({
            "launch": launch,
            "kernel_id": h.id,
            "name": h.name,
            "file": k.path.display().to_string(),
            "grid": h.grid,
            "block": h.block,
            "blocks": h.blocks(),
            "threads": h.blocks().saturating_mul(h.threads_per_block()),
            "traced_blocks": k.traced_blocks,
            "count": k.count(mode),
            "warp_insts": k.warp_insts,
            "warp_insts_pred_on": k.warp_insts_pred_on,
            "thread_insts_pred_on": k.thread_insts,
            "mem_insts": k.mem_insts,
            "opcodes": ops,
        });
        if let Some(bv) = blocks {
            let per_block: Vec<serde_json::Value> = launch_blocks(bv, *launch, &h.name)
                .into_iter()
                .map(|(b, n)| {
                    serde_json::json!({"id": b.id, "start": b.start, "instructions": b.size, "executions": n})
                })
                .collect();
            launch_doc["basic_blocks"] = per_block.into();
        }
        v.push(launch_doc);
    }
    let total: u64 = counts.iter().map(|(_, k)| k.count(mode)).sum();
    let doc = serde_json::json!({"launches": v, "total": total});
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&doc).unwrap_or_default()
    )
}

/// Writes `PREFIX.bb`, `PREFIX.blocks` and, with per-block vectors, `PREFIX.tb.bb` (all or
/// none); `list` names the trace in the vectors' comment. Returns the files written.
pub fn write_bbv_files(
    bv: &BlockVectors,
    list: &Path,
    prefix: &Path,
    per_block: bool,
) -> Result<Vec<PathBuf>, GpuError> {
    let with = |ext: &str| {
        let mut s = prefix.as_os_str().to_owned();
        s.push(ext);
        PathBuf::from(s)
    };
    let mut files = AtomicFiles::default();
    files.write(&with(".bb"), |w| {
        let mut bb = bbv_profile::BbvWriter::new(w);
        bb.write_comment(&format!(
            "basic-block vectors of {} launches from {} (warp-level instructions per block)",
            bv.vectors.len(),
            list.display()
        ))?;
        for v in &bv.vectors {
            bb.write_vector(v)?;
        }
        bb.finish().map(|_| ())
    })?;
    if per_block {
        files.write(&with(".tb.bb"), |w| {
            let mut bb = bbv_profile::BbvWriter::new(w);
            for (launch, c, v) in &bv.block_vectors {
                bb.write_comment(&format!(
                    "launch {launch} thread block {},{},{}",
                    c[0], c[1], c[2]
                ))?;
                bb.write_vector(v)?;
            }
            bb.finish().map(|_| ())
        })?;
    }
    files.write(&with(".blocks"), |w| {
        writeln!(w, "# id kernel start_pc size executions")?;
        for b in &bv.blocks {
            writeln!(
                w,
                "{} {} 0x{:04x} {} {}",
                b.id, b.kernel, b.start, b.size, b.executions
            )?;
        }
        Ok(())
    })?;
    Ok(files.commit()?)
}

/// A kernel-sampling job (`bbv gpu sample`): the trace's launches, the picks and every
/// metric's estimate.
pub struct Sampled {
    /// Where the launches come from.
    pub source: Source,
    /// Every launch's counts.
    pub counts: Vec<KernelCount>,
    /// Every launch's basic-block vector.
    pub vectors: BlockVectors,
    /// The representative launches with their weights.
    pub picks: Vec<Pick>,
    /// Every metric estimated from the picks, against the full trace.
    pub estimates: Vec<Estimate>,
    /// The picks' estimate of the run's GPU time against the measured one (a timed live run).
    pub gpu_time: Option<Score>,
    /// The rule that made the picks.
    pub rule: Rule,
}

/// The report's line on the picks' estimate of a timed run's GPU time.
fn gpu_time_line(t: &Score) -> String {
    let runs = match t.in_sample {
        true => "the one timing run, which they were chosen from: in-sample".to_string(),
        false => format!(
            "timing runs 2 to {}, chosen from run 1",
            t.actual_ns.len() + 1
        ),
    };
    format!(
        "GPU time | {:.0} ns | {:.1} | {:+.4}% (worst {:.4}%; mean over {runs}; the runs' \
         totals {:.2}% apart)\n",
        t.mean_actual_ns(),
        t.mean_estimate_ns(),
        100.0 * t.error,
        100.0 * t.worst,
        100.0 * t.runs_apart
    )
}

/// Where a sampling job's launches come from.
#[derive(Clone, Debug)]
pub enum Source {
    /// An Accel-Sim trace (its list).
    Trace(KernelList),
    /// A live run (`bbv gpu run`): its folder and the command it ran.
    Live {
        /// The run's folder.
        dir: PathBuf,
        /// The program and its arguments.
        command: Vec<String>,
    },
}

/// Bytes an uncompressed Accel-Sim trace spends per warp instruction (measured on the traces in
/// `../shared/data/accelsim`: 40.6 for matrixmul, 36.7 for vectoradd), for the expected size of
/// the traces of the chosen launches.
pub const TRACE_BYTES_PER_WARP_INSTRUCTION: f64 = 40.0;

/// Scans the trace of `list` and picks its representative launches.
pub fn sample(list: &Path, o: SampleOptions) -> Result<Sampled, GpuError> {
    o.check()?;
    let kl = KernelList::open(list)?;
    let (counts, vectors) = crate::scan_list(&kl, false)?;
    if counts.is_empty() {
        return Err(GpuError::Unsupported(format!(
            "{}: launches no kernel: nothing to sample",
            list.display()
        )));
    }
    sample_counts(Source::Trace(kl), counts, vectors, None, o)
}

/// Picks the representative launches among counted ones (from a trace or a live run; `ns`:
/// each launch's GPU time per timing run, when the run was timed).
pub fn sample_counts(
    source: Source,
    counts: Vec<KernelCount>,
    vectors: BlockVectors,
    ns: Option<Vec<Vec<u64>>>,
    o: SampleOptions,
) -> Result<Sampled, GpuError> {
    o.check()?;
    let launches: Vec<TimedLaunch> = match ns {
        Some(ns) if ns.len() == counts.len() => (counts.iter().zip(ns))
            .map(|(c, ns)| TimedLaunch::new(c, ns))
            .collect(),
        Some(ns) => {
            return Err(GpuError::Unsupported(format!(
                "{} launches timed, {} counted",
                ns.len(),
                counts.len()
            )))
        }
        None => counts
            .iter()
            .map(|c| TimedLaunch::new(c, Vec::new()))
            .collect(),
    };
    let picks = select(&launches, Some(&vectors.vectors), &o)?;
    let estimates = estimate(&counts, &picks);
    let timed = launches.first().is_some_and(|l| !l.ns.is_empty());
    let gpu_time = match timed {
        true => Some(score_picks(&launches, &picks, o.rule)?),
        false => None,
    };
    Ok(Sampled {
        source,
        counts,
        vectors,
        picks,
        estimates,
        gpu_time,
        rule: o.rule,
    })
}

impl Sampled {
    /// The text report: picks against launches, and each metric's estimate and error.
    pub fn report(&self) -> String {
        let mut report = format!(
            "{} of {} launches chosen ({})\n",
            self.picks.len(),
            self.counts.len(),
            self.rule.how()
        );
        if self.gpu_time.is_none() && self.rule.needs_times() {
            report.push_str(&format!(
                "note: no GPU times (a trace, or a run without `bbv gpu run --repeat`): {}'s \
                 choices read each launch's warp instructions in their place\n",
                self.rule.name()
            ));
        }
        report.push_str("metric | full trace | estimate | relative error\n");
        for e in &self.estimates {
            report.push_str(&format!(
                "{} | {} | {:.1} | {:.4}%\n",
                e.metric,
                e.actual,
                e.estimate,
                100.0 * e.relative_error()
            ));
        }
        if let Some(t) = &self.gpu_time {
            report.push_str(&gpu_time_line(t));
        }
        report
    }

    /// Makes the folder `output` and adds its files to `files`: `kernelslist.g` (the chosen launches, with the
    /// list's memory copies), `weights.csv`, `report` and `summary.json`.
    pub fn write(&self, output: &Path, files: &mut AtomicFiles) -> Result<(), GpuError> {
        std::fs::create_dir_all(output).map_err(|source| GpuError::CreateDir {
            path: output.to_path_buf(),
            source,
        })?;
        match &self.source {
            Source::Trace(list) => self.write_list(list, output, files)?,
            Source::Live { command, .. } => self.write_tracer(command, output, files)?,
        }
        files.write(&output.join(bbv_rundir::files::GPU_WEIGHTS), |w| {
            writeln!(w, "launch,kernel,weight,launches_represented")?;
            for p in &self.picks {
                writeln!(
                    w,
                    "{},{},{},{}",
                    p.launch,
                    self.counts[p.launch].header.name,
                    p.weight,
                    p.members.len()
                )?;
            }
            Ok(())
        })?;
        let report = self.report();
        files.write(&output.join("report"), |w| w.write_all(report.as_bytes()))?;
        let saved = self.trace_bytes_saved();
        // The figures `bbv suite` puts in summary.csv, under the names `bbv run` uses.
        let mut summary = serde_json::json!({
            "kind": "gpu",
            "instructions": self.counts.iter().map(|c| c.warp_insts).sum::<u64>(),
            "instruction_unit": "warp instructions",
            "intervals": self.counts.len(),
            "interval_unit": "kernel launches",
            "k": self.picks.len(),
            "points": self.picks.iter().map(|p| serde_json::json!({
                "launch": p.launch,
                "kernel": self.counts[p.launch].header.name,
                "weight": p.weight,
            })).collect::<Vec<_>>(),
            "method": self.rule.how(),
            "rule": self.rule.name(),
            "trace_bytes_expected": saved.0,
            "trace_bytes_saved": saved.1,
        });
        if let Some(t) = &self.gpu_time {
            summary["gpu_time"] = serde_json::json!({
                "source": "CUPTI activity records of the timing runs (times.tsv)",
                "chosen_on_run": 1,
                "scored_runs": if t.in_sample { vec![1] } else { (2..=t.actual_ns.len() + 1).collect() },
                "measured_ns": t.actual_ns,
                "estimate_ns": t.estimate_ns,
                "error": t.error,
                "worst": t.worst,
                "runs_apart": t.runs_apart,
            });
        }
        if let Source::Trace(list) = &self.source {
            // Where `bbv gpu simulate` takes the launches that warm each pick.
            let abs = std::fs::canonicalize(&list.path).unwrap_or_else(|_| list.path.clone());
            summary["trace"] = abs.display().to_string().into();
        }
        files.write(&output.join(bbv_rundir::files::SUMMARY), |w| {
            writeln!(w, "{summary:#}")
        })?;
        Ok(())
    }
}

impl Sampled {
    /// The reduced kernel list: the chosen launches, with the list's memory copies. Accel-Sim
    /// reads a launch only from a line starting with `kernel`, a file in the list's folder: each
    /// chosen launch L (0-based) is a symbolic link `kernel-<L+1><suffix>` beside the list to
    /// its trace file (by absolute path; suffix: the file's own from its first dot).
    fn write_list(
        &self,
        list: &KernelList,
        output: &Path,
        files: &mut AtomicFiles,
    ) -> Result<(), GpuError> {
        let chosen: BTreeSet<usize> = self.picks.iter().map(|p| p.launch).collect();
        let mut lines = String::new();
        let mut launch = 0;
        for c in &list.commands {
            match c {
                Command::MemcpyHtoD { text, .. } => lines.push_str(&format!("{text}\n")),
                Command::Kernel { path, .. } => {
                    if chosen.contains(&launch) {
                        let abs = std::fs::canonicalize(path).map_err(|e| {
                            GpuError::Unsupported(format!("{}: {e}", path.display()))
                        })?;
                        let file = abs.file_name().unwrap_or_default().to_string_lossy();
                        let suffix = file.find('.').map_or("", |i| &file[i..]);
                        let name = format!("kernel-{}{suffix}", launch + 1);
                        files.symlink(&output.join(&name), &abs)?;
                        lines.push_str(&format!("{name}\n"));
                    }
                    launch += 1;
                }
            }
        }
        files.write(&output.join("kernelslist.g"), |w| {
            w.write_all(lines.as_bytes())
        })?;
        Ok(())
    }

    /// Expected bytes of the chosen launches' traces, and bytes saved against tracing the
    /// whole run (uncompressed, at [`TRACE_BYTES_PER_WARP_INSTRUCTION`]).
    pub fn trace_bytes_saved(&self) -> (u64, u64) {
        let all: u64 = self.counts.iter().map(|c| c.warp_insts).sum();
        let chosen: u64 = self
            .picks
            .iter()
            .map(|p| self.counts[p.launch].warp_insts)
            .sum();
        let bytes = |n: u64| (n as f64 * TRACE_BYTES_PER_WARP_INSTRUCTION) as u64;
        (bytes(chosen), bytes(all) - bytes(chosen))
    }

    /// `tracer.sh`: Accel-Sim's NVBit tracer run once per chosen launch (its launch-range
    /// variables), each into its own folder.
    fn write_tracer(
        &self,
        command: &[String],
        output: &Path,
        files: &mut AtomicFiles,
    ) -> Result<(), GpuError> {
        let (expected, saved) = self.trace_bytes_saved();
        let quoted: Vec<String> = command.iter().map(|a| shell_quote(a)).collect();
        files.write(&output.join("tracer.sh"), |w| {
            writeln!(w, "#!/bin/sh")?;
            writeln!(
                w,
                "# Accel-Sim's NVBit tracer on the {} launches `bbv gpu sample` chose of {}: one \
                 run per launch, stopped after it.",
                self.picks.len(),
                self.counts.len()
            )?;
            writeln!(
                w,
                "# Expected traces: about {:.1} MB, {:.1} MB less than the whole run's (uncompressed).",
                expected as f64 / 1e6,
                saved as f64 / 1e6
            )?;
            writeln!(w, "# TRACER: util/tracer_nvbit/tracer_tool/tracer_tool.so of Accel-Sim.")?;
            writeln!(w, "set -e")?;
            writeln!(w, ": \"${{TRACER:?set TRACER to Accel-Sim's tracer_tool.so}}\"")?;
            for p in &self.picks {
                // The tracer numbers launches from 1.
                let id = p.launch + 1;
                writeln!(
                    w,
                    "USER_DEFINED_FOLDERS=1 TRACES_FOLDER=traces/launch-{} DYNAMIC_KERNEL_LIMIT_START={id} \
                     DYNAMIC_KERNEL_LIMIT_END={id} TERMINATE_UPON_LIMIT=1 LD_PRELOAD=\"$TRACER\" {}",
                    p.launch,
                    quoted.join(" ")
                )?;
            }
            Ok(())
        })?;
        Ok(())
    }
}

/// A word as a POSIX shell reads it back unchanged.
pub fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%".contains(&b))
    {
        return s.to_string();
    }
    format!("'{}'", s.replace('\'', "'\\''"))
}
