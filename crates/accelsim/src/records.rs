//! What a kernel trace holds: its header, its instruction lines and its events in file order.

/// The `-key = value` header of a kernel trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelHeader {
    /// Kernel name as traced (mangled).
    pub name: String,
    /// `-kernel id` (launch number, 1-based, may have gaps).
    pub id: u64,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// `-shmem`.
    pub shmem: u64,
    /// `-nregs`.
    pub nregs: u32,
    /// `-binary version` (SM version, e.g. 61).
    pub binary_version: u32,
    /// `-cuda stream id`.
    pub stream: u64,
    /// `-accelsim tracer version`, absent in the oldest traces.
    pub tracer_version: Option<String>,
    /// `-enable lineinfo = 1`: every instruction line starts with a source line number.
    pub lineinfo: bool,
    /// Instruction lines end with an immediate (tracer 5, or a format line ending in
    /// `immediate`).
    pub immediate: bool,
    /// Instruction lines start with `tbx tby tbz warp` (tracer versions before 3).
    pub prefix: bool,
}

impl KernelHeader {
    /// Number of thread blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| u64::from(b)).product()
    }
}

/// How a memory instruction's addresses are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressMode {
    /// Mode 0: one address per active lane.
    ListAll,
    /// Mode 1: base and stride.
    BaseStride,
    /// Mode 2: base and a delta per further active lane.
    BaseDelta,
}

/// One instruction line.
#[derive(Clone, Debug, PartialEq)]
pub struct Instruction<'a> {
    /// Offset of the instruction in its function.
    pub pc: u64,
    /// Active mask and guard predicate (0 = predicated off for every lane).
    pub mask: u32,
    /// Source line, when the trace has line info.
    pub line_num: Option<u64>,
    /// Number of destination registers.
    pub dst_regs: u8,
    /// Full opcode, e.g. `LDG.E.128.CONSTANT.SYS`.
    pub opcode: &'a str,
    /// Number of source registers.
    pub src_regs: u8,
    /// Bytes per lane for memory instructions, 0 otherwise.
    pub mem_width: u32,
    /// Address encoding of a memory instruction.
    pub address_mode: Option<AddressMode>,
    /// Trailing immediate, when the trace has them.
    pub immediate: Option<i64>,
}

/// What a kernel trace holds, in file order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<'a> {
    /// `#BEGIN_TB` + `thread block = x,y,z`.
    ThreadBlock([u32; 3]),
    /// `warp = w` + `insts = n`.
    Warp {
        /// Warp index in the block.
        id: u32,
        /// Instruction lines that follow.
        insts: u64,
    },
    /// An instruction of the current warp.
    Inst(Instruction<'a>),
    /// `#END_TB`.
    EndThreadBlock,
}
