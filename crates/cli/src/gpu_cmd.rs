//! `bbv gpu`: GPU kernels from Accel-Sim traces.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use bbv_gpu::{count_list, CountMode, KernelCount};
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
    Count {
        /// kernelslist.g of the trace.
        list: PathBuf,
        /// Count threads (active lanes) instead of warps (NVBit COUNT_WARP_LEVEL=0).
        #[arg(long = "thread-level")]
        thread_level: bool,
        /// Skip instructions predicated off in every lane (NVBit EXCLUDE_PRED_OFF=1).
        #[arg(long = "exclude-pred-off")]
        exclude_pred_off: bool,
        /// First launch counted (0-based, NVBit START_GRID_NUM).
        #[arg(long = "start-grid", default_value_t = 0)]
        start_grid: usize,
        /// Launches from this one on are not counted (NVBit END_GRID_NUM).
        #[arg(long = "end-grid")]
        end_grid: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value = "nvbit")]
        format: Format,
        /// Also print each launch's opcode histogram (NVBit opcode_hist's lines).
        #[arg(long)]
        opcodes: bool,
        /// Print kernel names demangled (NVBit MANGLED_NAMES=0).
        #[arg(long)]
        demangle: bool,
        /// Warn about a damaged or missing kernel file and skip that launch instead of stopping.
        #[arg(long = "keep-going")]
        keep_going: bool,
    },
    /// Kernel sampling: representative launches with weights, and every metric estimated from
    /// them with its error against the full trace.
    Sample {
        /// kernelslist.g of the trace.
        list: PathBuf,
        /// Output folder: kernelslist.g (chosen launches), weights.csv, report, report.html,
        /// summary.json.
        #[arg(short = 'o', value_name = "DIR")]
        output: PathBuf,
        /// Cluster the launches' basic-block vectors, trying k up to K.
        #[arg(long = "max-k", default_value_t = 20, conflicts_with = "stratified")]
        max_k: usize,
        /// Sieve-style strata by kernel name and instruction count instead of clustering.
        #[arg(long)]
        stratified: bool,
        /// Relative width of an instruction-count stratum (with --stratified).
        #[arg(long, default_value_t = 0.1)]
        spread: f64,
    },
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
    },
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

fn write_counts(
    out: &mut impl Write,
    counts: &[(usize, &KernelCount)],
    mode: CountMode,
    format: Format,
    opcodes: bool,
    demangle: bool,
) -> std::io::Result<()> {
    match format {
        Format::Nvbit => {
            let mut total: u64 = 0;
            for (launch, k) in counts {
                let n = k.count(mode);
                total += n;
                writeln!(
                    out,
                    "kernel {launch} - {} - #thread-blocks {},  kernel instructions {n}, total instructions {total}",
                    display_name(&k.header.name, demangle),
                    k.header.blocks()
                )?;
                if opcodes {
                    for (op, c) in k.sorted_opcodes() {
                        writeln!(out, "  {op} = {c}")?;
                    }
                }
            }
            writeln!(out, "Total app instructions: {total}")?;
        }
        Format::Csv => {
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
                    h.blocks() * h.threads_per_block(),
                    k.count(mode),
                    k.warp_insts
                )?;
            }
        }
        Format::Json => {
            let mut v = Vec::new();
            for (launch, k) in counts {
                let h = &k.header;
                let ops: serde_json::Map<String, serde_json::Value> = k
                    .sorted_opcodes()
                    .into_iter()
                    .map(|(o, c)| (o.to_string(), c.into()))
                    .collect();
                v.push(serde_json::json!({
                    "launch": launch,
                    "kernel_id": h.id,
                    "name": h.name,
                    "file": k.path.display().to_string(),
                    "grid": h.grid,
                    "block": h.block,
                    "blocks": h.blocks(),
                    "threads": h.blocks() * h.threads_per_block(),
                    "traced_blocks": k.traced_blocks,
                    "count": k.count(mode),
                    "warp_insts": k.warp_insts,
                    "warp_insts_pred_on": k.warp_insts_pred_on,
                    "thread_insts_pred_on": k.thread_insts,
                    "mem_insts": k.mem_insts,
                    "opcodes": ops,
                }));
            }
            let total: u64 = counts.iter().map(|(_, k)| k.count(mode)).sum();
            let doc = serde_json::json!({"launches": v, "total": total});
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(&doc).unwrap_or_default()
            )?;
        }
    }
    out.flush()
}

/// Runs a `bbv gpu` command.
pub fn run(cmd: GpuCommand) -> Result<()> {
    match cmd {
        GpuCommand::Sample {
            list,
            output,
            max_k,
            stratified,
            spread,
        } => {
            use bbv_gpu::sample::{estimate, pick_scored, Method};
            if max_k == 0 {
                bail!("--max-k must be at least 1");
            }
            if !(spread.is_finite() && spread >= 0.0) {
                bail!("--spread must be a non-negative number");
            }
            let kl = accelsim_trace::KernelList::open(&list)?;
            let (counts, bv) = bbv_gpu::scan_list(&kl, false)?;
            let method = if stratified {
                Method::Stratified { spread }
            } else {
                Method::Cluster { max_k }
            };
            let (picks, bic) = pick_scored(&counts, &bv, method)?;
            let estimates = estimate(&counts, &picks);
            std::fs::create_dir_all(&output)
                .with_context(|| format!("cannot create {}", output.display()))?;
            let chosen: std::collections::BTreeSet<usize> =
                picks.iter().map(|p| p.launch).collect();
            let mut files = bbv_files::AtomicFiles::default();
            files.write(&output.join("kernelslist.g"), |w| {
                let mut launch = 0;
                for c in &kl.commands {
                    match c {
                        accelsim_trace::Command::MemcpyHtoD { text, .. } => writeln!(w, "{text}")?,
                        accelsim_trace::Command::Kernel { path, .. } => {
                            if chosen.contains(&launch) {
                                let abs = std::fs::canonicalize(path)?;
                                writeln!(w, "{}", abs.display())?;
                            }
                            launch += 1;
                        }
                    }
                }
                Ok(())
            })?;
            files.write(&output.join("weights.csv"), |w| {
                writeln!(w, "launch,kernel,weight,launches_represented")?;
                for p in &picks {
                    writeln!(
                        w,
                        "{},{},{},{}",
                        p.launch,
                        counts[p.launch].header.name,
                        p.weight,
                        p.members.len()
                    )?;
                }
                Ok(())
            })?;
            let mut report = String::new();
            let how = if stratified {
                "stratified by kernel name and instruction count"
            } else {
                "clustered basic-block vectors"
            };
            report.push_str(&format!(
                "{} of {} launches chosen ({how})\n",
                picks.len(),
                counts.len(),
            ));
            report.push_str("metric | full trace | estimate | relative error\n");
            for e in &estimates {
                report.push_str(&format!(
                    "{} | {} | {:.1} | {:.4}%\n",
                    e.metric,
                    e.actual,
                    e.estimate,
                    100.0 * e.relative_error()
                ));
            }
            files.write(&output.join("report"), |w| w.write_all(report.as_bytes()))?;
            // The figures `bbv suite` puts in summary.csv, under the names `bbv run` uses.
            let summary = serde_json::json!({
                "kind": "gpu",
                "instructions": counts.iter().map(|c| c.warp_insts).sum::<u64>(),
                "instruction_unit": "warp instructions",
                "intervals": counts.len(),
                "interval_unit": "kernel launches",
                "k": picks.len(),
                "points": picks.iter().map(|p| serde_json::json!({
                    "launch": p.launch,
                    "kernel": counts[p.launch].header.name,
                    "weight": p.weight,
                })).collect::<Vec<_>>(),
                "method": how,
            });
            files.write(&output.join("summary.json"), |w| writeln!(w, "{summary:#}"))?;
            let page = bbv_report::html(&bbv_report::from_gpu_sample(
                &list.display().to_string(),
                &counts,
                &bv,
                &picks,
                &estimates,
                &bic,
                how,
            ));
            files.write(&output.join("report.html"), |w| {
                w.write_all(page.as_bytes())
            })?;
            files.commit()?;
            print!("{report}");
            Ok(())
        }
        GpuCommand::Bbv {
            list,
            output,
            per_block,
        } => {
            let kl = accelsim_trace::KernelList::open(&list)?;
            let bv = bbv_gpu::list_block_vectors(&kl, per_block)?;
            let with = |ext: &str| {
                let mut s = output.clone().into_os_string();
                s.push(ext);
                PathBuf::from(s)
            };
            let mut files = bbv_files::AtomicFiles::default();
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
            for p in files.commit()? {
                eprintln!("wrote {}", p.display());
            }
            Ok(())
        }
        GpuCommand::Count {
            list,
            thread_level,
            exclude_pred_off,
            start_grid,
            end_grid,
            format,
            opcodes,
            demangle,
            keep_going,
        } => {
            let mode = CountMode {
                thread_level,
                exclude_pred_off,
            }
            .check()?;
            if let Some(end) = end_grid {
                if end <= start_grid {
                    bail!("--end-grid {end} must be greater than --start-grid {start_grid}");
                }
            }
            let kl = accelsim_trace::KernelList::open(&list)?;
            let all: Vec<Option<KernelCount>> = if keep_going {
                bbv_gpu::count_list_each(&kl)
                    .into_iter()
                    .map(|r| match r {
                        Ok(c) => Some(c),
                        Err(e) => {
                            eprintln!("bbv: warning: launch skipped: {e}");
                            None
                        }
                    })
                    .collect()
            } else {
                count_list(&kl)?.into_iter().map(Some).collect()
            };
            let end = end_grid.unwrap_or(usize::MAX);
            // Launches keep their numbers (NVBit's launch order) when one is skipped.
            let chosen: Vec<(usize, &KernelCount)> = all
                .iter()
                .enumerate()
                .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
                .filter(|(i, _)| *i >= start_grid && *i < end)
                .collect();
            let stdout = std::io::stdout();
            let mut out = std::io::BufWriter::new(stdout.lock());
            write_counts(&mut out, &chosen, mode, format, opcodes, demangle)?;
            Ok(())
        }
    }
}
