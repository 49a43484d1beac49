//! `bbv gpu run`'s folder: the raw counts of the injection library (`raw/`), and what bbv makes
//! of them: NVBit's lines (`counts.txt`), basic-block vectors over the kernels' static blocks
//! (`bbv.bb`, `blocks.tsv`) and `summary.json`.

use std::io::Write;
use std::path::{Path, PathBuf};

use bbv_files::AtomicFiles;
use bbv_gpu::blocks::{block_vectors, BlockVectors, LaunchPcs};
use bbv_gpu::output::{write_counts, CountFormat, CountStyle};
use bbv_gpu::{CountMode, KernelCount};

use crate::aggregate::{aggregate, Code, LaunchCounts, WARP_PRED_ON};
use crate::live::{self, LiveRun};
use crate::CudaError;

/// `launches.tsv`'s columns.
const LAUNCHES_COLUMNS: [&str; 11] = [
    "launch",
    "kernel",
    "grid",
    "block",
    "warp",
    "warp_pred_on",
    "thread",
    "thread_pred_on",
    "micros",
    "unplaced",
    "uneven_blocks",
];

/// One line of `launches.tsv` as [`read_launches`] gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CountedLaunch {
    /// 0-based launch number.
    pub number: u64,
    /// Kernel name, mangled.
    pub kernel: String,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// Warp-level instructions.
    pub warp: u64,
}

/// Reads a run folder's `launches.tsv` (its launch, kernel, grid, block and warp columns).
pub fn read_launches(path: &Path) -> Result<Vec<CountedLaunch>, CudaError> {
    let n = LAUNCHES_COLUMNS.len();
    crate::tsv::read(
        path,
        |r, cells| match cells == LAUNCHES_COLUMNS {
            true => Ok(()),
            false => Err(r.err("not a launches.tsv header".into())),
        },
        |r, f| {
            if f.len() != n {
                return Err(r.err(format!("{} columns, not {n}", f.len())));
            }
            Ok(CountedLaunch {
                number: r.num(f[0])?,
                kernel: f[1].to_string(),
                grid: r.dims(f[2])?,
                block: r.dims(f[3])?,
                warp: r.num(f[4])?,
            })
        },
    )
}

/// A live run read back and aggregated.
pub struct Live {
    /// The folder.
    pub dir: PathBuf,
    /// What the injection library wrote.
    pub run: LiveRun,
    /// The kernels' static code.
    pub code: Code,
    /// Every counted launch.
    pub launches: Vec<LaunchCounts>,
    /// Basic blocks and per-launch vectors.
    pub vectors: BlockVectors,
}

/// The raw folder of a run folder.
pub fn raw(dir: &Path) -> PathBuf {
    dir.join("raw")
}

/// Whether `dir` is a `bbv gpu run` folder.
pub fn is_live(dir: &Path) -> bool {
    raw(dir).is_dir() && dir.join(bbv_rundir::files::SUMMARY).is_file()
}

impl Live {
    /// Reads the run folder `dir` and aggregates it (disassembling its cubins with `nvdisasm`).
    pub fn load(dir: &Path, nvdisasm: &Path) -> Result<Live, CudaError> {
        let raw = raw(dir);
        let file = raw.join("launches.txt");
        // No file: the program never initialised CUDA, so the driver never loaded the library.
        let run = if file.exists() {
            live::read(&file)?
        } else {
            LiveRun {
                complete: true,
                ..LiveRun::default()
            }
        };
        let code = Code::load(&run, &raw, nvdisasm);
        let launches = aggregate(&run, &code)?;
        let pcs: Vec<LaunchPcs> = launches.iter().map(|l| l.pcs.clone()).collect();
        let vectors = block_vectors(&pcs);
        Ok(Live {
            dir: dir.to_path_buf(),
            run,
            code,
            launches,
            vectors,
        })
    }

    /// Per-launch counts with `thread_insts` as `mode` defines it (CUPTI, unlike a trace, also
    /// gives thread-level counts with predicated-off lanes).
    pub fn counts(&self, mode: CountMode) -> Result<Vec<KernelCount>, CudaError> {
        if !mode.thread_level && mode.exclude_pred_off && self.run.column(WARP_PRED_ON).is_none() {
            return Err(CudaError::Tool(format!(
                "CUPTI gave no warp-level count of predicated-on instructions ({WARP_PRED_ON}) on \
                 this GPU: use --thread-level with --exclude-pred-off, or count at warp level \
                 without it"
            )));
        }
        Ok(self
            .launches
            .iter()
            .map(|l| {
                let mut c = l.count.clone();
                if mode.thread_level && !mode.exclude_pred_off {
                    c.thread_insts = l.thread_insts_all;
                }
                c
            })
            .collect())
    }

    /// Writes `counts.txt`, `bbv.bb`, `blocks.tsv` and `summary.json` into the folder (all or
    /// none); `extra` adds fields to the summary (the command, its status and time).
    pub fn write(&self, mode: CountMode, extra: serde_json::Value) -> Result<(), CudaError> {
        let counts = self.counts(mode)?;
        let mut files = AtomicFiles::default();
        let numbered: Vec<(usize, &KernelCount)> = counts
            .iter()
            .zip(&self.run.launches)
            .map(|(c, l)| (l.number as usize, c))
            .collect();
        let style = CountStyle {
            format: CountFormat::Nvbit,
            opcodes: false,
            demangle: false,
            blocks: None,
        };
        files.write(&self.dir.join("counts.txt"), |w| {
            write_counts(w, &numbered, mode, style)
        })?;
        files.write(&self.dir.join("bbv.bb"), |w| {
            let mut bb = bbv_profile::BbvWriter::new(w);
            bb.write_comment(&format!(
                "basic-block vectors of {} launches (warp-level instructions per static block)",
                self.vectors.vectors.len()
            ))?;
            for v in &self.vectors.vectors {
                bb.write_vector(v)?;
            }
            bb.finish().map(|_| ())
        })?;
        files.write(&self.dir.join("blocks.tsv"), |w| self.write_blocks(w))?;
        files.write(&self.dir.join("launches.tsv"), |w| self.write_launches(w))?;
        let summary = self.summary(&counts, mode, extra);
        files.write(&self.dir.join(bbv_rundir::files::SUMMARY), |w| {
            writeln!(w, "{summary:#}")
        })?;
        files.commit()?;
        Ok(())
    }

    /// One line per counted launch with its count in every mode CUPTI gave.
    fn write_launches(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(w, "{}", LAUNCHES_COLUMNS.join("\t"))?;
        for (l, raw) in self.launches.iter().zip(&self.run.launches) {
            let c = &l.count;
            writeln!(
                w,
                "{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                raw.number,
                c.header.name,
                crate::dims_cell(c.header.grid),
                crate::dims_cell(c.header.block),
                c.warp_insts,
                c.warp_insts_pred_on,
                l.thread_insts_all,
                c.thread_insts,
                raw.micros,
                l.unplaced,
                l.uneven_blocks
            )?;
        }
        Ok(())
    }

    fn write_blocks(&self, w: &mut dyn Write) -> std::io::Result<()> {
        writeln!(w, "id\tkernel\tstart\tsize\texecutions\tsuccessors")?;
        for b in &self.vectors.blocks {
            let succ = self
                .code
                .kernels
                .iter()
                .find(|((_, name), _)| *name == b.kernel)
                .and_then(|(_, k)| k.cfg.block_of(b.start).map(|i| &k.cfg.blocks[i]))
                .filter(|sb| sb.start == b.start)
                .map(|sb| {
                    sb.successors
                        .iter()
                        .map(|s| format!("0x{s:04x}"))
                        .collect::<Vec<_>>()
                        .join(",")
                })
                .unwrap_or_default();
            writeln!(
                w,
                "{}\t{}\t0x{:04x}\t{}\t{}\t{}",
                b.id, b.kernel, b.start, b.size, b.executions, succ
            )?;
        }
        Ok(())
    }

    fn summary(
        &self,
        counts: &[KernelCount],
        mode: CountMode,
        extra: serde_json::Value,
    ) -> serde_json::Value {
        let micros: u64 = self.run.launches.iter().map(|l| l.micros).sum();
        let failed: Vec<serde_json::Value> = self
            .code
            .failed
            .iter()
            .map(|(crc, why)| serde_json::json!({"cubin": format!("{crc:08x}"), "error": why}))
            .collect();
        let mut s = serde_json::json!({
            "kind": "gpu-live",
            "chip": self.run.chip,
            "metrics": self.run.metrics,
            "complete": self.run.complete,
            "mode": {"thread_level": mode.thread_level, "exclude_pred_off": mode.exclude_pred_off},
            "instructions": counts.iter().map(|c| c.count(mode)).sum::<u64>(),
            "warp_instructions": counts.iter().map(|c| c.warp_insts).sum::<u64>(),
            "instruction_unit": if mode.thread_level { "thread instructions" } else { "warp instructions" },
            "intervals": counts.len(),
            "interval_unit": "kernel launches",
            "launches_skipped": self.run.skipped.len(),
            "graph_launches_not_counted": self.run.graphs,
            "kernel_micros_instrumented": micros,
            "blocks": self.vectors.blocks.len(),
            "unplaced_instructions": self.launches.iter().map(|l| l.unplaced).sum::<u64>(),
            "instructions_not_disassembled": self.launches.iter().map(|l| l.undisassembled).sum::<u64>(),
            "uneven_blocks": self.launches.iter().map(|l| l.uneven_blocks).sum::<u64>(),
            "cubins_not_disassembled": failed,
            "cupti_errors": self.run.errors,
        });
        if let (Some(obj), serde_json::Value::Object(more)) = (s.as_object_mut(), extra) {
            obj.extend(more);
        }
        s
    }
}
