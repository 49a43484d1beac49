//! Per-PC counts of a live run to per-launch counts (NVBit `instr_count_bb`'s semantics) and
//! basic-block vectors over each kernel's static blocks.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use accelsim_trace::KernelHeader;
use bbv_gpu::blocks::LaunchPcs;
use bbv_gpu::KernelCount;
use rayon::prelude::*;

use crate::live::{LiveRun, PcCount};
use crate::CudaError;
use bbv_gpucfg::sass::{self, Cfg, Function};

/// CUPTI's SASS metrics bbv reads, by NVBit counting mode.
pub const WARP: &str = "smsp__sass_inst_executed";
/// Threads active (predicated-off lanes included).
pub const THREAD: &str = "smsp__sass_thread_inst_executed";
/// Threads active with the predicate on.
pub const THREAD_PRED_ON: &str = "smsp__sass_thread_inst_executed_pred_on";
/// Warps with at least one lane predicated on.
pub const WARP_PRED_ON: &str = "smsp__sass_inst_executed_pred_on";

/// Base opcodes that access memory (counted as NVBit's memory instructions).
const MEMORY: [&str; 16] = [
    "LD", "ST", "LDG", "STG", "LDS", "STS", "LDL", "STL", "ATOM", "ATOMG", "ATOMS", "RED",
    "LDGSTS", "LDSM", "SULD", "SUST",
];

/// A kernel's disassembly and CFG.
#[derive(Clone, Debug)]
pub struct Kernel {
    /// Its function (section) in the cubin.
    pub function: Function,
    /// Its control-flow graph.
    pub cfg: Cfg,
}

/// The static code of every cubin a run loaded: kernels by (cubin CRC, name), and the cubins
/// that could not be disassembled with the reason.
#[derive(Clone, Debug, Default)]
pub struct Code {
    /// Kernels by cubin CRC and section name.
    pub kernels: HashMap<(u32, String), Kernel>,
    /// Cubins nvdisasm refused, with its message.
    pub failed: BTreeMap<u32, String>,
}

impl Code {
    /// Disassembles the functions the launches of `run` ran, cubin by cubin in parallel (`dir`
    /// is the raw folder).
    pub fn load(run: &LiveRun, dir: &Path, nvdisasm: &Path) -> Code {
        let mut wanted: BTreeMap<u32, BTreeSet<u32>> = BTreeMap::new();
        for p in run.launches.iter().flat_map(|l| &l.pcs) {
            wanted.entry(p.crc).or_default().insert(p.function_index);
        }
        let results: Vec<(u32, Result<Vec<Function>, CudaError>)> = wanted
            .into_par_iter()
            .map(|(crc, indices)| {
                let indices: Vec<u32> = indices.into_iter().collect();
                let path = LiveRun::cubin(dir, crc);
                let fs = sass::disassemble_functions(nvdisasm, &path, &indices);
                (crc, fs.map_err(CudaError::from))
            })
            .collect();
        let mut code = Code::default();
        for (crc, r) in results {
            match r {
                Ok(fs) => code.add(crc, fs),
                Err(e) => {
                    code.failed.insert(crc, e.to_string());
                }
            }
        }
        code
    }

    /// Adds the functions of one cubin.
    pub fn add(&mut self, crc: u32, functions: Vec<Function>) {
        for f in functions {
            let cfg = sass::cfg(&f);
            self.kernels
                .insert((crc, f.name.clone()), Kernel { function: f, cfg });
        }
    }

    /// The offset in its kernel's section of a counted instruction: the kernel's own offsets as
    /// they are; a subroutine's (named by its label) from the label's offset.
    fn locate(&self, crc: u32, kernel: &str, pc: &PcCount) -> Option<(u64, &Kernel)> {
        let k = self.kernels.get(&(crc, kernel.to_string()))?;
        if pc.function == kernel {
            return Some((pc.offset, k));
        }
        let base = k.function.labels.iter().find(|(l, _)| {
            l.as_str() == pc.function || l.rsplit('$').next() == Some(pc.function.as_str())
        })?;
        Some((base.1 + pc.offset, k))
    }
}

/// One launch aggregated.
#[derive(Clone, Debug, Default)]
pub struct LaunchCounts {
    /// Counts in every mode NVBit has (those CUPTI gives).
    pub count: KernelCount,
    /// Thread-level instructions with predicated-off lanes included (CUPTI gives it; traces don't).
    pub thread_insts_all: u64,
    /// Per-PC warp-level counts and the kernel's static leaders, for basic-block vectors.
    pub pcs: LaunchPcs,
    /// Per-PC thread-level counts (predicated-off lanes included): unlike warp counts, which
    /// diverged groups of one warp add to separately at a reconvergence point, these follow
    /// each lane, so flow into a block equals flow out.
    pub threads: BTreeMap<u64, u64>,
    /// Instructions counted at an offset the disassembly lacks, or in a cubin it could not read
    /// (their counts are kept in the totals, outside any block).
    pub unplaced: u64,
    /// Blocks whose counts disagree with the CFG ([`uneven_blocks`]).
    pub uneven_blocks: u64,
    /// Instructions of a kernel whose cubin could not be disassembled: kept per PC, in blocks
    /// cut where PCs stop being consecutive (no opcodes, no static leaders).
    pub undisassembled: u64,
}

/// Aggregates every launch of `run` over the kernels' static code.
pub fn aggregate(run: &LiveRun, code: &Code) -> Result<Vec<LaunchCounts>, CudaError> {
    if run.launches.is_empty() {
        return Ok(Vec::new());
    }
    let col = |name: &str| run.column(name);
    let warp = col(WARP).ok_or_else(|| {
        CudaError::Tool(format!(
            "CUPTI gave no {WARP} counts (metrics collected: {})",
            run.metrics.join(", ")
        ))
    })?;
    let (thread, thread_on, warp_on) = (col(THREAD), col(THREAD_PRED_ON), col(WARP_PRED_ON));
    let mut out = Vec::with_capacity(run.launches.len());
    for l in &run.launches {
        let crc = l.pcs.first().map(|p| p.crc);
        let kernel = crc.and_then(|c| code.kernels.get(&(c, l.name.clone())));
        let mut a = LaunchCounts::default();
        a.count.header = KernelHeader {
            name: l.name.clone(),
            id: l.number + 1,
            grid: l.grid,
            block: l.block,
            shmem: l.shmem,
            stream: l.stream,
            ..KernelHeader::default()
        };
        a.count.traced_blocks = l.grid.iter().map(|&g| u64::from(g)).product();
        a.pcs.kernel = l.name.clone();
        a.pcs.sm = 90;
        if let Some(k) = kernel {
            a.pcs.leaders = k.cfg.leaders();
        }
        for p in &l.pcs {
            let w = p.values[warp];
            a.count.warp_insts += w;
            a.count.warp_insts_pred_on += warp_on.map_or(0, |c| p.values[c]);
            a.count.thread_insts += thread_on.map_or(0, |c| p.values[c]);
            a.thread_insts_all += thread.map_or(0, |c| p.values[c]);
            if w == 0 {
                continue;
            }
            if kernel.is_none() && p.function == l.name {
                *a.pcs.counts.entry(p.offset).or_insert(0) += w;
                a.undisassembled += w;
                continue;
            }
            let placed = code.locate(p.crc, &l.name, p).and_then(|(off, k)| {
                let i = k
                    .function
                    .instructions
                    .binary_search_by_key(&off, |i| i.offset)
                    .ok()?;
                Some((off, &k.function.instructions[i]))
            });
            match placed {
                Some((off, insn)) => {
                    *a.pcs.counts.entry(off).or_insert(0) += w;
                    *a.threads.entry(off).or_insert(0) += thread.map_or(0, |c| p.values[c]);
                    *a.count.opcodes.entry(insn.opcode.clone()).or_insert(0) += w;
                    if MEMORY.contains(&insn.base()) {
                        a.count.mem_insts += w;
                    }
                }
                None => a.unplaced += w,
            }
        }
        if let Some(k) = kernel {
            a.uneven_blocks = uneven_blocks(k, &a.pcs.counts);
        }
        out.push(a);
    }
    Ok(out)
}

/// Opcodes at which the lanes of a warp that arrived apart (each diverged group on its own)
/// wait for each other: each group executes them, the reunited warp what follows.
const RECONVERGENCE: [&str; 2] = ["WARPSYNC", "BSYNC"];

/// Blocks whose counts disagree with the CFG. Within a block a warp runs every instruction or
/// none (counts include predicated-off instructions), so each instruction's warp-level count
/// equals the one before it, except right after a reconvergence instruction (`WARPSYNC`,
/// `BSYNC`), where it may drop: a warp whose lanes arrived in several groups ran what came
/// before once per group (cuBLAS's `WARPSYNC.ALL` heading a block after a loop the lanes
/// left at different trips, seen on an H200).
pub fn uneven_blocks(kernel: &Kernel, counts: &BTreeMap<u64, u64>) -> u64 {
    let count = |offset: u64| counts.get(&offset).copied().unwrap_or(0);
    let reconverges = |offset: u64| {
        let insns = &kernel.function.instructions;
        insns
            .binary_search_by_key(&offset, |i| i.offset)
            .is_ok_and(|i| RECONVERGENCE.contains(&insns[i].base()))
    };
    let mut uneven = 0;
    for b in &kernel.cfg.blocks {
        let offsets: Vec<u64> = (0..u64::from(b.size))
            .map(|i| b.start + i * sass::INSTRUCTION_BYTES)
            .collect();
        let even = offsets.windows(2).all(|w| {
            let (before, after) = (count(w[0]), count(w[1]));
            after == before || (after < before && reconverges(w[0]))
        });
        if !even {
            uneven += 1;
        }
    }
    uneven
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    /// The shape of cuBLAS's `sgemm_largek_lds64` around its 0x17a0 (an H200 run's counts): a
    /// loop the lanes leave at different trips, then a block headed by `WARPSYNC.ALL`.
    const LISTING: &str = "\
.section .text.k,\"ax\",@progbits
        /*0000*/                   LDG.E R2, desc[UR4][R4.64] ;
.L_x_0:
        /*0010*/                   ISETP.NE.AND P0, PT, R2, RZ, PT ;
        /*0020*/               @P0 BRA `(.L_x_0) ;
        /*0030*/                   WARPSYNC.ALL ;
        /*0040*/                   BAR.SYNC.DEFER_BLOCKING 0x0 ;
        /*0050*/                   IADD3 R0, R0, 0x1, RZ ;
        /*0060*/                   EXIT ;
";

    fn kernel() -> Kernel {
        let f = sass::parse(LISTING, Path::new("t")).unwrap().remove(0);
        Kernel {
            cfg: sass::cfg(&f),
            function: f,
        }
    }

    fn uneven(counts: &[(u64, u64)]) -> u64 {
        uneven_blocks(&kernel(), &counts.iter().copied().collect())
    }

    #[test]
    fn counts_drop_only_after_a_reconvergence_instruction() {
        let k = kernel();
        let starts: Vec<u64> = k.cfg.blocks.iter().map(|b| b.start).collect();
        assert_eq!(starts, [0x00, 0x10, 0x30]);
        let loop_ = [(0x00, 4), (0x10, 40), (0x20, 40)];
        // Groups that left the loop apart each ran WARPSYNC: the count may drop after it.
        let tail = [(0x30, 9), (0x40, 4), (0x50, 4), (0x60, 4)];
        assert_eq!(uneven(&[&loop_[..], &tail[..]].concat()), 0);
        // A drop after any other instruction, or a rise anywhere, disagrees with the CFG.
        let tail = [(0x30, 4), (0x40, 4), (0x50, 5), (0x60, 5)];
        assert_eq!(uneven(&[&loop_[..], &tail[..]].concat()), 1);
        let tail = [(0x30, 9), (0x40, 4), (0x50, 4), (0x60, 2)];
        assert_eq!(uneven(&[&loop_[..], &tail[..]].concat()), 1);
        assert_eq!(uneven(&[(0x00, 4), (0x10, 40), (0x20, 39)]), 1);
        // Blocks never run are even.
        assert_eq!(uneven(&[]), 0);
    }
}
