//! Basic blocks rebuilt from the warps' PC streams, and per-launch basic-block vectors.
//!
//! Leaders: the first PC of every warp, every PC reached other than sequentially, and the PC
//! after every control-flow instruction. Leaders are gathered over every launch of a kernel
//! (by name) before blocks are cut, so that a kernel's blocks are the same in every launch.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;

use accelsim_trace::{Event, Instruction, KernelHeader};

use crate::GpuError;

/// The next sequential PC, from the SM version: 16-byte instructions from Volta on; 8-byte
/// slots before, with a control word in the first slot of every 32 bytes (Maxwell, Pascal) or
/// of every 64 bytes (Kepler).
pub fn next_pc(pc: u64, sm: u32) -> u64 {
    if sm >= 70 {
        return pc + 16;
    }
    let group = if sm >= 50 { 32 } else { 64 };
    let n = pc + 8;
    if n.is_multiple_of(group) {
        n + 8
    } else {
        n
    }
}

/// Opcode base names after which a traced block ends ([`crate::control`]'s table).
const CONTROL: [&str; crate::control::TRACED] = crate::control::TRACED_NAMES;

// [`is_control`] compares bases of at most five bytes.
const _: () = {
    let mut i = 0;
    while i < CONTROL.len() {
        assert!(CONTROL[i].len() <= 5);
        i += 1;
    }
};

/// Up to seven bytes as one word, their count in the top byte (so that no two strings share
/// a word, NUL bytes included).
const fn word(b: &[u8]) -> u64 {
    let mut w = 0u64;
    let mut i = b.len();
    while i > 0 {
        i -= 1;
        w = (w << 8) | b[i] as u64;
    }
    w | (b.len() as u64) << 56
}

/// [`CONTROL`] as words, compared without a string comparison per name (this runs once per
/// instruction line when blocks are rebuilt).
const CONTROL_WORDS: [u64; CONTROL.len()] = {
    let mut out = [0u64; CONTROL.len()];
    let mut i = 0;
    while i < CONTROL.len() {
        out[i] = word(CONTROL[i].as_bytes());
        i += 1;
    }
    out
};

/// Whether an opcode may transfer control (its base name, before the first '.').
#[inline]
pub fn is_control(opcode: &str) -> bool {
    let b = opcode.as_bytes();
    let base = &b[..b.iter().position(|&c| c == b'.').unwrap_or(b.len())];
    // The longest name has five bytes (longer bases do not fit a word).
    base.len() <= 5 && CONTROL_WORDS.contains(&word(base))
}

/// Per-PC facts of one launch.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LaunchPcs {
    /// Kernel name.
    pub kernel: String,
    /// SM version.
    pub sm: u32,
    /// Warp-level executions per PC.
    pub counts: BTreeMap<u64, u64>,
    /// Leaders seen in this launch.
    pub leaders: BTreeSet<u64>,
    /// PCs reached other than sequentially (a warp's first PC included): where a trace says
    /// blocks start, whatever the instruction before them.
    pub landings: BTreeSet<u64>,
    /// Per thread block (when asked for): its coordinates and warp-level executions per PC.
    pub per_block: Vec<([u32; 3], BTreeMap<u64, u64>)>,
}

/// Reads one launch's PC streams (and per-thread-block counts when `per_block`).
pub fn launch_pcs(path: &Path, per_block: bool) -> Result<LaunchPcs, GpuError> {
    crate::scan_kernel(path, Some(per_block)).map(|(_, pcs)| pcs.expect("PCs were asked for"))
}

/// Executions per PC: a [`crate::PcTable`] (a hash per instruction was most of `bbv gpu bbv`'s
/// extra time over counting), a map for the PCs it does not hold.
#[derive(Default)]
struct PcCounts {
    dense: crate::PcTable<u64>,
    sparse: HashMap<u64, u64>,
}

impl PcCounts {
    #[inline(always)]
    fn add(&mut self, pc: u64) {
        match self.dense.entry(pc) {
            Some(c) => *c += 1,
            None => *self.sparse.entry(pc).or_insert(0) += 1,
        }
    }

    fn into_map(self) -> BTreeMap<u64, u64> {
        let dense = self.dense.into_entries().filter(|&(_, c)| c > 0);
        dense.chain(self.sparse).collect()
    }
}

/// Follows the events of one launch and gathers its [`LaunchPcs`].
pub(crate) struct PcTracker {
    out: LaunchPcs,
    counts: PcCounts,
    prev: Option<(u64, bool)>,
    per_block: bool,
}

impl PcTracker {
    pub(crate) fn new(header: &KernelHeader, per_block: bool) -> PcTracker {
        PcTracker {
            out: LaunchPcs {
                kernel: header.name.clone(),
                sm: header.binary_version,
                ..LaunchPcs::default()
            },
            counts: PcCounts::default(),
            prev: None,
            per_block,
        }
    }

    pub(crate) fn event(&mut self, event: &Event<'_>) {
        match event {
            Event::ThreadBlock(b) => {
                self.prev = None;
                if self.per_block {
                    self.out.per_block.push((*b, BTreeMap::new()));
                }
            }
            Event::Warp { .. } | Event::EndThreadBlock => self.prev = None,
            Event::Inst(i) => self.instruction(i),
        }
    }

    /// [`PcTracker::event`] for an instruction.
    pub(crate) fn instruction(&mut self, i: &Instruction<'_>) {
        self.counts.add(i.pc);
        if let Some((_, tb)) = self.out.per_block.last_mut() {
            *tb.entry(i.pc).or_insert(0) += 1;
        }
        match self.prev {
            None => {
                self.out.leaders.insert(i.pc);
                self.out.landings.insert(i.pc);
            }
            Some((p, control)) => {
                let seq = next_pc(p, self.out.sm);
                if control {
                    self.out.leaders.insert(seq);
                }
                if i.pc != seq {
                    self.out.leaders.insert(i.pc);
                    self.out.landings.insert(i.pc);
                }
            }
        }
        self.prev = Some((i.pc, is_control(i.opcode)));
    }

    pub(crate) fn finish(mut self) -> LaunchPcs {
        self.out.counts = self.counts.into_map();
        self.out
    }
}

/// One basic block.
#[derive(Clone, Debug, PartialEq)]
pub struct Block {
    /// 1-based id, in order of (kernel, start PC).
    pub id: u32,
    /// Kernel name.
    pub kernel: String,
    /// First PC.
    pub start: u64,
    /// Instructions in the block.
    pub size: u32,
    /// Warp-level executions of the block (of its first instruction) over all launches.
    pub executions: u64,
}

/// A sparse basic-block vector: (block id, warp-level instructions), ascending ids.
pub type Vector = Vec<(u32, u64)>;

/// Blocks of every kernel and one vector per launch: block id and warp-level instructions
/// executed in it.
#[derive(Clone, Debug, Default)]
pub struct BlockVectors {
    /// All blocks, by id.
    pub blocks: Vec<Block>,
    /// Per launch.
    pub vectors: Vec<Vector>,
    /// Per launch: (block id, warp-level executions of the block's first instruction), the
    /// blocks it entered only.
    pub entries: Vec<Vector>,
    /// Per thread block, when collected: launch, coordinates and its vector.
    pub block_vectors: Vec<(usize, [u32; 3], Vector)>,
}

/// Static basic blocks per (kernel's mangled name, SM version): each block's first PC (an
/// offset in the kernel's code, as traces give PCs) and instruction count, in address order.
pub type StaticBlocks = BTreeMap<(String, u32), Vec<(u64, u32)>>;

/// How a kernel's blocks were found, when static blocks were given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BlockSource {
    /// From the binary: every static block, run or not.
    Static,
    /// No static CFG of this kernel for its SM version: rebuilt from the trace.
    Missing,
    /// The trace disagrees with the binary (PCs inside no block, blocks entered in their
    /// middle): rebuilt from the trace.
    Disagrees {
        /// Distinct executed PCs inside no static block.
        stray_pcs: usize,
        /// Distinct PCs reached non-sequentially that start no static block.
        mid_entries: usize,
    },
}

/// Cuts blocks from the leaders of every launch of each kernel and builds per-launch vectors.
pub fn block_vectors(launches: &[LaunchPcs]) -> BlockVectors {
    block_vectors_with(launches, None).0
}

/// A kernel's blocks rebuilt from the PCs its launches ran and their leaders.
fn rebuilt(pcs: &BTreeSet<u64>, leaders: &BTreeSet<u64>, sm: u32) -> Vec<(u64, u32)> {
    let mut out: Vec<(u64, u32)> = Vec::new();
    let mut prev: Option<u64> = None;
    for &pc in pcs {
        let continues = prev.is_some_and(|p| next_pc(p, sm) == pc) && !leaders.contains(&pc);
        match out.last_mut() {
            Some(last) if continues => last.1 += 1,
            _ => out.push((pc, 1)),
        }
        prev = Some(pc);
    }
    out
}

/// Whether a trace agrees with a kernel's static blocks: the counts of executed PCs in no
/// block and of non-sequential entries that start no block (both 0 when it does).
fn disagreement(
    blocks: &[(u64, u32)],
    pcs: &BTreeSet<u64>,
    landings: &BTreeSet<u64>,
    sm: u32,
) -> (usize, usize) {
    let mut covered = BTreeSet::new();
    for &(start, size) in blocks {
        let mut pc = start;
        for _ in 0..size {
            covered.insert(pc);
            pc = next_pc(pc, sm);
        }
    }
    let starts: BTreeSet<u64> = blocks.iter().map(|b| b.0).collect();
    let stray = pcs.difference(&covered).count();
    let mid = landings
        .iter()
        .filter(|pc| covered.contains(pc) && !starts.contains(pc))
        .count();
    (stray, mid)
}

/// Per kernel (mangled name, SM version): where its blocks came from.
pub type Sources = Vec<(String, u32, BlockSource)>;

/// [`block_vectors`] on static blocks where given: per kernel (in name order) where its blocks
/// came from.
pub fn block_vectors_with(
    launches: &[LaunchPcs],
    statics: Option<&StaticBlocks>,
) -> (BlockVectors, Sources) {
    // Per kernel: every executed PC, leaders, non-sequential entries, SM.
    type Seen = (BTreeSet<u64>, BTreeSet<u64>, BTreeSet<u64>, u32);
    let mut kernels: BTreeMap<&str, Seen> = BTreeMap::new();
    for l in launches {
        let e = kernels
            .entry(l.kernel.as_str())
            .or_insert_with(|| (BTreeSet::new(), BTreeSet::new(), BTreeSet::new(), l.sm));
        e.0.extend(l.counts.keys());
        e.1.extend(l.leaders.iter());
        e.2.extend(l.landings.iter());
    }
    let mut blocks = Vec::new();
    let mut sources = Vec::new();
    // (kernel, pc) -> block index
    let mut block_of: HashMap<(&str, u64), usize> = HashMap::new();
    for (kernel, (pcs, leaders, landings, sm)) in &kernels {
        let static_blocks = statics.map(|st| st.get(&(kernel.to_string(), *sm)));
        let (cut, source) = match static_blocks {
            None => (rebuilt(pcs, leaders, *sm), None),
            Some(None) => (rebuilt(pcs, leaders, *sm), Some(BlockSource::Missing)),
            Some(Some(b)) => match disagreement(b, pcs, landings, *sm) {
                (0, 0) => (b.clone(), Some(BlockSource::Static)),
                (stray_pcs, mid_entries) => (
                    rebuilt(pcs, leaders, *sm),
                    Some(BlockSource::Disagrees {
                        stray_pcs,
                        mid_entries,
                    }),
                ),
            },
        };
        if let Some(source) = source {
            sources.push((kernel.to_string(), *sm, source));
        }
        for (start, size) in cut {
            let mut pc = start;
            for _ in 0..size {
                block_of.insert((kernel, pc), blocks.len());
                pc = next_pc(pc, *sm);
            }
            blocks.push(Block {
                id: blocks.len() as u32 + 1,
                kernel: kernel.to_string(),
                start,
                size,
                executions: 0,
            });
        }
    }
    let mut vectors = Vec::with_capacity(launches.len());
    let mut entries = Vec::with_capacity(launches.len());
    for l in launches {
        let mut v: BTreeMap<u32, u64> = BTreeMap::new();
        let mut e = Vec::new();
        for (&pc, &n) in &l.counts {
            let b = block_of[&(l.kernel.as_str(), pc)];
            *v.entry(blocks[b].id).or_insert(0) += n;
            if blocks[b].start == pc {
                blocks[b].executions += n;
                e.push((blocks[b].id, n));
            }
        }
        vectors.push(v.into_iter().collect());
        // PCs ascend within a kernel, and so do its block ids.
        entries.push(e);
    }
    let mut tb_vectors = Vec::new();
    for (launch, l) in launches.iter().enumerate() {
        for (coords, pcs) in &l.per_block {
            let mut v: BTreeMap<u32, u64> = BTreeMap::new();
            for (&pc, &n) in pcs {
                *v.entry(blocks[block_of[&(l.kernel.as_str(), pc)]].id)
                    .or_insert(0) += n;
            }
            tb_vectors.push((launch, *coords, v.into_iter().collect()));
        }
    }
    let bv = BlockVectors {
        blocks,
        vectors,
        entries,
        block_vectors: tb_vectors,
    };
    (bv, sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_opcodes_are_their_base_names() {
        let plain = |op: &str| CONTROL.contains(&op.split('.').next().unwrap());
        let mut ops = vec![
            "",
            ".",
            ".BRA",
            "BR",
            "BRAX",
            "BRA\0",
            "BRA.U",
            "bra",
            "EXIT",
            "EXIT.KEEPREFCOUNT",
            "BSYNC",
            "BSYNCX",
            "BSYNC.RECONVERGENT",
            "CALL.ABS.NOINC",
            "MOV",
            "SYNCS.ARRIVE",
            "RET.REL.NODEC",
            "LDG.E.128.CONSTANT.SYS",
            "KILL",
            "K",
            "\0\0\0",
        ];
        ops.extend(CONTROL);
        for op in ops {
            assert_eq!(is_control(op), plain(op), "{op:?}");
        }
    }

    #[test]
    fn sequential_pcs_skip_control_words() {
        assert_eq!(next_pc(0x08, 61), 0x10);
        assert_eq!(next_pc(0x18, 61), 0x28);
        assert_eq!(next_pc(0x38, 35), 0x48);
        assert_eq!(next_pc(0x38, 30), 0x48);
        assert_eq!(next_pc(0x78, 35), 0x88);
        assert_eq!(next_pc(0x70, 75), 0x80);
    }

    #[test]
    fn blocks_split_at_targets_and_after_branches() {
        // 0x10 0x20 BRA -> 0x50 0x60 EXIT ; a second warp runs 0x10 0x20 0x30 0x40 0x50 0x60
        let mut a = LaunchPcs {
            kernel: "k".into(),
            sm: 75,
            ..LaunchPcs::default()
        };
        for (pc, n) in [
            (0x10, 2),
            (0x20, 2),
            (0x30, 1),
            (0x40, 1),
            (0x50, 2),
            (0x60, 2),
        ] {
            a.counts.insert(pc, n);
        }
        a.leaders.extend([0x10, 0x50, 0x30]);
        let bv = block_vectors(&[a]);
        let starts: Vec<(u64, u32, u64)> = bv
            .blocks
            .iter()
            .map(|b| (b.start, b.size, b.executions))
            .collect();
        assert_eq!(starts, vec![(0x10, 2, 2), (0x30, 2, 1), (0x50, 2, 2)]);
        assert_eq!(bv.vectors[0], vec![(1, 4), (2, 2), (3, 4)]);
        assert_eq!(bv.entries[0], vec![(1, 2), (2, 1), (3, 2)]);
    }
}
