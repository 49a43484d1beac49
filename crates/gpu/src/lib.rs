//! GPU kernel analysis from Accel-Sim traces: per-launch instruction counts with the semantics of
//! NVBit's `instr_count` tools, and opcode histograms.
//!
//! # Design constraints
//! * A count is exact or an error: settings a trace cannot answer are refused, not approximated.
//! * Memory is bounded by the number of distinct opcodes, not by the trace size.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::path::{Path, PathBuf};

pub mod blocks;
pub mod control;
pub mod output;
pub mod sample;
pub mod select;
pub mod timed;

use accelsim_trace::{Event, KernelHeader, KernelList, TraceError, TraceReader};
use rayon::prelude::*;

/// Errors of GPU trace analysis.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// A trace or list file is unreadable or malformed.
    #[error(transparent)]
    Trace(#[from] TraceError),
    /// A kernel file named in the list does not exist.
    #[error("{list}: kernel trace {kernel} does not exist")]
    MissingKernel {
        /// The list naming it.
        list: PathBuf,
        /// The missing file.
        kernel: PathBuf,
    },
    /// A setting the trace cannot answer, or an option out of range.
    #[error("{0}")]
    Unsupported(String),
    /// An output folder could not be made.
    #[error("cannot create {}: {source}", path.display())]
    CreateDir {
        /// The folder.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Output files could not be written.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
}

/// What to count, as NVBit's `COUNT_WARP_LEVEL` and `EXCLUDE_PRED_OFF` choose.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CountMode {
    /// Count per thread (popcount of the active mask) instead of per warp.
    pub thread_level: bool,
    /// Skip instructions whose guard predicate is off for every lane.
    pub exclude_pred_off: bool,
}

impl CountMode {
    /// Refuses the one setting a trace cannot answer: thread level with predicated-off lanes
    /// included (the trace keeps only active-and-predicated-on lanes).
    pub fn check(self) -> Result<CountMode, GpuError> {
        if self.thread_level && !self.exclude_pred_off {
            return Err(GpuError::Unsupported(
                "thread-level counts that include predicated-off instructions cannot be recovered \
                 from a trace: its mask holds only the lanes that were active with the predicate on. \
                 Add --exclude-pred-off (NVBit's EXCLUDE_PRED_OFF=1) or count at warp level."
                    .into(),
            ));
        }
        Ok(self)
    }
}

/// A fast hash for short opcode strings (looked up once per instruction line).
#[derive(Default, Clone, Copy)]
pub struct OpcodeHasher(u64);

impl Hasher for OpcodeHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            self.0 =
                (self.0.rotate_left(5) ^ u64::from_le_bytes(w)).wrapping_mul(0x517c_c1b7_2722_0a95);
        }
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// Per-opcode counts.
pub type OpcodeCounts = HashMap<String, u64, BuildHasherDefault<OpcodeHasher>>;

/// Counts of one kernel launch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelCount {
    /// The trace file.
    pub path: PathBuf,
    /// Its header.
    pub header: KernelHeader,
    /// Instruction lines (NVBit warp level, predicated-off included).
    pub warp_insts: u64,
    /// Instruction lines with a non-zero mask (warp level, predicated-off excluded).
    pub warp_insts_pred_on: u64,
    /// Sum of active lanes (thread level, predicated-off excluded).
    pub thread_insts: u64,
    /// Memory instructions (warp level).
    pub mem_insts: u64,
    /// Thread blocks present in the trace (empty ones are not traced).
    pub traced_blocks: u64,
    /// Warp-level executions per opcode.
    pub opcodes: OpcodeCounts,
}

impl KernelCount {
    /// The count NVBit would report in `mode`.
    pub fn count(&self, mode: CountMode) -> u64 {
        match (mode.thread_level, mode.exclude_pred_off) {
            (false, false) => self.warp_insts,
            (false, true) => self.warp_insts_pred_on,
            (true, _) => self.thread_insts,
        }
    }

    /// Opcodes sorted by name, as `opcode_hist` prints them (zero counts never occur).
    pub fn sorted_opcodes(&self) -> Vec<(&str, u64)> {
        let mut v: Vec<(&str, u64)> = self.opcodes.iter().map(|(k, &c)| (k.as_str(), c)).collect();
        v.sort();
        v
    }
}

/// Reads one kernel trace and counts it.
pub fn count_kernel(path: &Path) -> Result<KernelCount, GpuError> {
    scan_kernel(path, None).map(|(c, _)| c)
}

/// What one pass over a kernel trace gives.
type Scan = Result<(KernelCount, Option<blocks::LaunchPcs>), GpuError>;

/// One pass over a kernel trace: its counts, and its PC streams when `pcs` is given (the
/// value says whether to keep per-thread-block counts too).
pub(crate) fn scan_kernel(path: &Path, pcs: Option<bool>) -> Scan {
    #[cfg(target_arch = "x86_64")]
    if accelsim_trace::x86_64_v3() {
        // SAFETY: the CPU has the features `v3::scan_kernel` is compiled for (just checked).
        return unsafe { v3::scan_kernel(path, pcs) };
    }
    scan_kernel_body(path, pcs)
}

/// The scan loop built again for x86-64-v3 CPUs (AVX2, BMI, POPCNT): the trace parser is
/// inlined into it, so its byte classification, token walk and lane counts use them (9% fewer
/// instructions a short line), while the binary still runs on any x86-64.
#[cfg(target_arch = "x86_64")]
mod v3 {
    use super::{scan_kernel_body, Path, Scan};

    #[target_feature(enable = "avx2,bmi1,bmi2,popcnt,lzcnt")]
    pub(super) unsafe fn scan_kernel(path: &Path, pcs: Option<bool>) -> Scan {
        scan_kernel_body(path, pcs)
    }
}

#[inline(always)]
fn scan_kernel_body(path: &Path, pcs: Option<bool>) -> Scan {
    let mut reader = TraceReader::open(path)?;
    let mut tracker = pcs.map(|per_block| blocks::PcTracker::new(reader.header(), per_block));
    let header = reader.header().clone();
    let warps_per_block = header.threads_per_block().div_ceil(32);
    let mut c = KernelCount {
        path: path.to_path_buf(),
        header,
        ..KernelCount::default()
    };
    let mut ops = OpcodeTally::default();
    loop {
        // Instructions are matched where the reader returns them: moving the event into a
        // variable first copied it through memory with wide loads that waited on its narrow
        // stores (a fifth of the loop's time in the AVX2 build).
        match reader.next_event() {
            Ok(Some(Event::Inst(i))) => {
                if let Some(t) = tracker.as_mut() {
                    t.instruction(&i);
                }
                c.warp_insts += 1;
                if i.mask != 0 {
                    c.warp_insts_pred_on += 1;
                }
                c.thread_insts += u64::from(i.mask.count_ones());
                if i.mem_width > 0 {
                    c.mem_insts += 1;
                }
                ops.add(i.pc, i.opcode);
            }
            Ok(Some(event)) => {
                if let Some(t) = tracker.as_mut() {
                    t.event(&event);
                }
                match event {
                    Event::ThreadBlock(_) => c.traced_blocks += 1,
                    Event::Warp { id, .. } if u64::from(id) >= warps_per_block => {
                        return Err(GpuError::Trace(TraceError::Format {
                            path: path.to_path_buf(),
                            line: reader.line_number(),
                            message: format!(
                                "warp {id} does not exist in a block of {} threads",
                                c.header.threads_per_block()
                            ),
                        }));
                    }
                    _ => {}
                }
            }
            Ok(None) => break,
            Err(e) => return Err(e.into()),
        }
    }
    c.opcodes = ops.finish();
    Ok((c, tracker.map(blocks::PcTracker::finish)))
}

/// `a == b`, without a library call for the short strings opcodes are (a `memcmp` call per
/// instruction was 3% of counting).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().unwrap());
    match n {
        // Two overlapping words cover the whole string.
        8..=16 => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        0..8 => a.iter().zip(b).all(|(x, y)| x == y),
        _ => a == b,
    }
}

/// Values kept per PC in a table indexed by PC / 8, for the small, 8-byte aligned offsets that
/// kernel code has. Other PCs have no entry (callers keep them elsewhere), so the table stays
/// within 64 Ki entries whatever a trace says.
pub(crate) struct PcTable<T> {
    slots: Vec<T>,
}

impl<T> Default for PcTable<T> {
    fn default() -> Self {
        PcTable { slots: Vec::new() }
    }
}

impl<T: Copy + Default> PcTable<T> {
    const SLOTS: u64 = 1 << 16;

    #[inline(always)]
    fn slot(pc: u64) -> Option<usize> {
        // A multiple of 8 below `8 * SLOTS`, in one test.
        (pc & !(8 * Self::SLOTS - 8) == 0).then_some((pc / 8) as usize)
    }

    /// The value kept for `pc` (the default when none was).
    #[inline(always)]
    pub(crate) fn get(&self, pc: u64) -> Option<T> {
        Self::slot(pc).map(|s| self.slots.get(s).copied().unwrap_or_default())
    }

    /// The value for `pc`, made room for; `None` for a PC the table does not hold.
    #[inline(always)]
    pub(crate) fn entry(&mut self, pc: u64) -> Option<&mut T> {
        let s = Self::slot(pc)?;
        if s >= self.slots.len() {
            self.slots.resize(s + 1, T::default());
        }
        Some(&mut self.slots[s])
    }

    /// Every PC the table has room for, ascending, with its value.
    pub(crate) fn into_entries(self) -> impl Iterator<Item = (u64, T)> {
        (0u64..).zip(self.slots).map(|(s, v)| (s * 8, v))
    }
}

/// Opcode counts keyed first by PC: an instruction's opcode is fixed by its PC, so a small
/// table indexed by PC finds the counter without hashing the opcode text (which is still
/// compared, so a trace whose PC and opcode disagree is counted correctly all the same).
#[derive(Default)]
struct OpcodeTally {
    names: Vec<String>,
    counts: Vec<u64>,
    by_name: OpcodeCounts,
    /// Index + 1 into `names` of the opcode last seen at a PC (0 = not seen).
    by_pc: PcTable<u32>,
}

impl OpcodeTally {
    #[inline(always)]
    fn add(&mut self, pc: u64, opcode: &str) {
        if let Some(idx) = self.by_pc.get(pc) {
            if idx != 0 && same(self.names[idx as usize - 1].as_bytes(), opcode.as_bytes()) {
                self.counts[idx as usize - 1] += 1;
                return;
            }
        }
        self.add_new(pc, opcode);
    }

    /// A PC not seen yet, or seen with another opcode.
    #[inline(never)]
    fn add_new(&mut self, pc: u64, opcode: &str) {
        let idx = match self.by_name.get(opcode) {
            Some(&i) => i as usize,
            None => {
                self.names.push(opcode.to_string());
                self.counts.push(0);
                let i = self.names.len() - 1;
                self.by_name.insert(opcode.to_string(), i as u64);
                i
            }
        };
        self.counts[idx] += 1;
        if let Some(slot) = self.by_pc.entry(pc) {
            *slot = idx as u32 + 1;
        }
    }

    fn finish(self) -> OpcodeCounts {
        self.names.into_iter().zip(self.counts).collect()
    }
}

/// The kernel files of a list, checked to exist.
fn kernel_files(list: &KernelList) -> Result<Vec<&Path>, GpuError> {
    let kernels: Vec<&Path> = list.kernels().collect();
    for k in &kernels {
        if !k.exists() {
            return Err(GpuError::MissingKernel {
                list: list.path.clone(),
                kernel: k.to_path_buf(),
            });
        }
    }
    Ok(kernels)
}

/// Counts every kernel of a list, in launch order (kernel files are read in parallel).
pub fn count_list(list: &KernelList) -> Result<Vec<KernelCount>, GpuError> {
    kernel_files(list)?;
    count_list_each(list).into_iter().collect()
}

/// Counts every kernel of a list, keeping each launch's own result: a damaged kernel file does
/// not hide the others (for `--keep-going`).
pub fn count_list_each(list: &KernelList) -> Vec<Result<KernelCount, GpuError>> {
    let kernels: Vec<&Path> = list.kernels().collect();
    kernels
        .par_iter()
        .map(|k| {
            if k.exists() {
                count_kernel(k)
            } else {
                Err(GpuError::MissingKernel {
                    list: list.path.clone(),
                    kernel: k.to_path_buf(),
                })
            }
        })
        .collect()
}

/// Counts, basic blocks and basic-block vectors of every launch in one pass over each kernel file
/// (read in parallel).
pub fn scan_list(
    list: &KernelList,
    per_block: bool,
) -> Result<(Vec<KernelCount>, blocks::BlockVectors), GpuError> {
    scan_list_with(list, per_block, None).map(|(c, bv, _)| (c, bv))
}

/// [`scan_list`] on static blocks where given (see [`blocks::block_vectors_with`]).
pub fn scan_list_with(
    list: &KernelList,
    per_block: bool,
    statics: Option<&blocks::StaticBlocks>,
) -> Result<(Vec<KernelCount>, blocks::BlockVectors, blocks::Sources), GpuError> {
    let scans: Vec<(KernelCount, Option<blocks::LaunchPcs>)> = kernel_files(list)?
        .par_iter()
        .map(|k| scan_kernel(k, Some(per_block)))
        .collect::<Result<_, _>>()?;
    let (counts, pcs): (Vec<KernelCount>, Vec<Option<blocks::LaunchPcs>>) =
        scans.into_iter().unzip();
    let pcs: Vec<blocks::LaunchPcs> = pcs
        .into_iter()
        .map(|p| p.expect("PCs were asked for"))
        .collect();
    let (bv, sources) = blocks::block_vectors_with(&pcs, statics);
    Ok((counts, bv, sources))
}

/// Basic blocks and one basic-block vector per launch, and per thread block when `per_block`
/// (kernel files are read in parallel).
pub fn list_block_vectors(
    list: &KernelList,
    per_block: bool,
) -> Result<blocks::BlockVectors, GpuError> {
    list_block_vectors_with(list, per_block, None).map(|r| r.0)
}

/// [`list_block_vectors`] on static blocks where given (see [`blocks::block_vectors_with`]).
pub fn list_block_vectors_with(
    list: &KernelList,
    per_block: bool,
    statics: Option<&blocks::StaticBlocks>,
) -> Result<(blocks::BlockVectors, blocks::Sources), GpuError> {
    let launches: Vec<blocks::LaunchPcs> = kernel_files(list)?
        .par_iter()
        .map(|k| blocks::launch_pcs(k, per_block))
        .collect::<Result<_, _>>()?;
    Ok(blocks::block_vectors_with(&launches, statics))
}

#[cfg(test)]
mod tests {
    use super::{same, scan_kernel, scan_kernel_body, PcTable};

    #[test]
    fn pc_table_holds_aligned_pcs_below_512_kib_only() {
        let mut t = PcTable::<u64>::default();
        for pc in [0, 8, 0x7fff8] {
            *t.entry(pc).unwrap() += pc + 1;
            assert_eq!(t.get(pc), Some(pc + 1));
        }
        for pc in [4, 9, 0x80000, 0x80008, u64::MAX] {
            assert!(t.entry(pc).is_none() && t.get(pc).is_none(), "{pc:#x}");
        }
        assert_eq!(t.get(16), Some(0));
        let kept: Vec<(u64, u64)> = t.into_entries().filter(|&(_, v)| v > 0).collect();
        assert_eq!(kept, [(0, 1), (8, 9), (0x7fff8, 0x7fff9)]);
    }

    /// The build for x86-64-v3 CPUs (which the tests run on when the CPU has it) and the
    /// portable build count the shipped traces alike.
    #[test]
    fn both_builds_of_the_scan_agree() {
        let data =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/accelsim");
        for dir in [
            "matrixmul-32-32-trace-aba4ea32",
            "vectoradd-100-32-trace-0c94f481",
        ] {
            let k = data.join(dir).join("kernel-1.traceg");
            let (count, pcs) = scan_kernel_body(&k, Some(true)).unwrap();
            assert!(count.warp_insts > 0, "{dir}");
            assert_eq!((count, pcs), scan_kernel(&k, Some(true)).unwrap(), "{dir}");
        }
    }

    #[test]
    fn same_agrees_with_equality_at_every_length() {
        for n in 0..40usize {
            let a: Vec<u8> = (0..n as u8).map(|k| b'A' + k % 26).collect();
            assert!(same(&a, &a.clone()), "{n}");
            for k in 0..n {
                let mut b = a.clone();
                b[k] ^= 1;
                assert!(!same(&a, &b), "{n} {k}");
            }
            assert!(!same(&a, &a[..n.saturating_sub(1)]) || n == 0, "{n}");
        }
    }
}
