//! `bbv gpu count` as a library call: per-launch counts of a trace in NVBit's, Accel-Sim's or a
//! JSON layout, and with `per_block` every block's executions per launch, over the static
//! blocks of the binaries given where the trace agrees with them.

use std::io::Write;
use std::path::PathBuf;

use bbv_gpu::blocks::BlockVectors;
use bbv_gpu::output::{write_counts, CountFormat, CountStyle};
use bbv_gpu::{CountMode, KernelCount};

use crate::GpuJobError;

/// A `bbv gpu count` job.
pub struct GpuCount {
    /// The trace's kernelslist.g.
    pub list: PathBuf,
    /// NVBit's counting mode.
    pub mode: CountMode,
    /// First launch printed (0-based).
    pub start_grid: usize,
    /// Launches from this one on are not printed.
    pub end_grid: Option<usize>,
    /// Layout.
    pub format: CountFormat,
    /// Each launch's opcode histogram too.
    pub opcodes: bool,
    /// Kernel names demangled.
    pub demangle: bool,
    /// A damaged or missing kernel file skips its launch with a warning instead of stopping.
    pub keep_going: bool,
    /// Every block's executions per launch.
    pub per_block: bool,
    /// Binaries whose static blocks the per-block counts use (`bbv gpu cfg`'s inputs).
    pub cfg: Vec<PathBuf>,
    /// Where the disassemblers are (`bbv gpu cfg`'s options).
    pub tools: bbv_gpucfg::Tools,
}

impl GpuCount {
    /// Refuses options that contradict each other, before any file is read.
    pub fn check(&self) -> Result<(), GpuJobError> {
        self.mode.check()?;
        let refuse = |m: String| Err(GpuJobError::Invalid(m));
        if let Some(end) = self.end_grid {
            if end <= self.start_grid {
                return refuse(format!(
                    "--end-grid {end} must be greater than --start-grid {}",
                    self.start_grid
                ));
            }
        }
        if !self.cfg.is_empty() && !self.per_block {
            return refuse("--cfg keys per-block counts: give --per-block with it".into());
        }
        if self.per_block && self.format == CountFormat::Csv {
            return refuse(
                "--per-block prints blocks in the nvbit and json layouts, not in Accel-Sim's csv"
                    .into(),
            );
        }
        if self.per_block && self.keep_going {
            return refuse(
                "--per-block needs every launch's trace: it cannot skip launches (--keep-going)"
                    .into(),
            );
        }
        Ok(())
    }
}

/// Runs `job`, writing its counts to `out`; returns lines for the user (the tools used, where
/// each kernel's blocks came from, launches skipped).
pub fn gpu_count(mut job: GpuCount, out: &mut impl Write) -> Result<Vec<String>, GpuJobError> {
    job.check()?;
    let kl = accelsim_trace::KernelList::open(&job.list).map_err(bbv_gpu::GpuError::from)?;
    let mut lines = Vec::new();
    let (all, blocks): (Vec<Option<KernelCount>>, Option<BlockVectors>) = if job.per_block {
        let statics = if job.cfg.is_empty() {
            None
        } else {
            Some(bbv_gpucfg::statics_of(&job.cfg, &mut job.tools)?)
        };
        let (counts, bv, sources) = bbv_gpu::scan_list_with(&kl, false, statics.as_ref())?;
        lines.append(&mut job.tools.used);
        lines.extend(bbv_gpucfg::source_lines(&bv, &sources));
        (counts.into_iter().map(Some).collect(), Some(bv))
    } else if job.keep_going {
        let each = bbv_gpu::count_list_each(&kl).into_iter().map(|r| match r {
            Ok(c) => Some(c),
            Err(e) => {
                lines.push(format!("warning: launch skipped: {e}"));
                None
            }
        });
        (each.collect(), None)
    } else {
        let counts = bbv_gpu::count_list(&kl)?;
        (counts.into_iter().map(Some).collect(), None)
    };
    let end = job.end_grid.unwrap_or(usize::MAX);
    // Launches keep their numbers (NVBit's launch order) when one is skipped.
    let chosen: Vec<(usize, &KernelCount)> = all
        .iter()
        .enumerate()
        .filter_map(|(i, c)| c.as_ref().map(|c| (i, c)))
        .filter(|(i, _)| *i >= job.start_grid && *i < end)
        .collect();
    let style = CountStyle {
        format: job.format,
        opcodes: job.opcodes,
        demangle: job.demangle,
        blocks: blocks.as_ref(),
    };
    write_counts(out, &chosen, job.mode, style).map_err(|e| GpuJobError::io("stdout", e))?;
    Ok(lines)
}

/// `bbv gpu bbv`: per-launch block vectors of a kernel list (blocks from the traces' PCs, or
/// from static CFGs with `cfg`) written beside `output`; returns lines for the user.
pub fn gpu_bbv(
    list: &std::path::Path,
    output: &std::path::Path,
    per_block: bool,
    cfg: &[PathBuf],
) -> Result<Vec<String>, GpuJobError> {
    let (bv, mut lines) = if cfg.is_empty() {
        let kl = accelsim_trace::KernelList::open(list).map_err(bbv_gpu::GpuError::from)?;
        (bbv_gpu::list_block_vectors(&kl, per_block)?, Vec::new())
    } else {
        let mut tools = bbv_gpucfg::Tools::default();
        let (bv, lines) = bbv_gpucfg::trace_block_vectors(list, per_block, cfg, &mut tools)?;
        let lines = lines.iter().map(|l| format!("bbv gpu bbv: {l}")).collect();
        (bv, lines)
    };
    for p in bbv_gpu::output::write_bbv_files(&bv, list, output, per_block)? {
        lines.push(format!("wrote {}", p.display()));
    }
    Ok(lines)
}
