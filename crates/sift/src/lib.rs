//! Sniper's instruction trace format, SIFT ("Sniper Instruction Trace File"), as Sniper 8.1's
//! trace reader takes it: little-endian, a 16-byte header, then records.
//!
//! * [`Writer`]: instructions streamed to any [`std::io::Write`] (a file, or the FIFO Sniper's
//!   live frontend protocol reads), each with its bytes sent once per address (the
//!   variable-size instruction-cache records, so that the writer needs only the bytes of the
//!   instructions it sees, which is what QEMU's plugin API gives), its data addresses and, for
//!   a branch, whether it was taken; [`Writer::end`] closes the stream.
//! * [`Reader`]: the same records read back, for checking a trace and in tests.
//! * [`feed::Feed`]: a program's threads fed live into Sniper, as a frontend sees them run
//!   (through [`relay`], so that the frontend never waits on a Sniper that died).
//!
//! Record layout (the bitfields as GCC packs them, least significant bit first):
//! * simple instruction, for one that follows the previous instruction in memory: one byte,
//!   bits 0-3 its size (1-15), 4-5 its data addresses (0-3), 6 is-branch, 7 taken; then the
//!   addresses, 8 bytes each;
//! * extended instruction: byte 0 bits 0-3 zero, 4-7 the size; byte 1 bits 0-1 the addresses,
//!   2 is-branch, 3 taken, 4 is-predicated, 5 executed; the instruction's address (8 bytes);
//!   then the data addresses;
//! * other: a zero byte, a type byte, a 4-byte payload size, the payload.

pub mod feed;
mod read;
pub mod relay;
mod reply;
mod spool;
pub mod watch;
mod write;

pub use read::{Reader, Record};
pub use reply::{read_reply, write_memory_response, Reply};
pub use write::Writer;

/// "SIFT", little-endian.
pub const MAGIC: u32 = 0x5446_4953;

/// Header option: instruction bytes come in variable-size records, per instruction address.
pub const OPTION_ICACHE_VARIABLE: u64 = 4;

/// The most data addresses one instruction record holds.
pub const MAX_ADDRESSES: usize = 3;

/// The longest instruction the format holds (x86's limit, in 4 bits).
pub const MAX_SIZE: usize = 15;

/// Types of "other" records (Sniper's `RecOtherType`): the ones bbv writes or reads.
pub mod other {
    /// A whole 4 KiB page of code.
    pub const ICACHE: u8 = 0;
    /// A system call for Sniper to model: its number (2 bytes) and six arguments.
    pub const SYSCALL: u8 = 2;
    /// Sniper's answer to [`SYSCALL`]: the call's return value.
    pub const SYSCALL_RESPONSE: u8 = 3;
    /// The thread creates a thread (no payload).
    pub const NEW_THREAD: u8 = 4;
    /// Sniper's answer to [`NEW_THREAD`]: the new thread's id (its FIFOs' number).
    pub const NEW_THREAD_RESPONSE: u8 = 5;
    /// Sniper asks for guest memory (on the reply channel): address, size, lock, operation.
    pub const MEMORY_REQUEST: u8 = 6;
    /// The frontend's answer to [`MEMORY_REQUEST`] (on the stream): address, operation, data.
    pub const MEMORY_RESPONSE: u8 = 7;
    /// Sniper's answer to a synchronisation or instruction-count record: its mode.
    pub const SYNC_RESPONSE: u8 = 13;
    /// The instruction set of the instructions after it (4-byte payload, a [`crate::isa`]).
    pub const ISA_CHANGE: u8 = 25;
    /// Sniper tells the frontend to stop.
    pub const SHUTDOWN: u8 = 26;
    /// Bytes at an address (with [`crate::OPTION_ICACHE_VARIABLE`]).
    pub const ICACHE_VARIABLE: u8 = 11;
    /// A magic instruction (Sniper's simulator commands: region of interest start, end).
    pub const MAGIC: u8 = 15;
    /// Sniper's answer to [`MAGIC`].
    pub const MAGIC_RESPONSE: u8 = 16;
    /// The end of the stream.
    pub const END: u8 = 0xff;
}

/// Instruction sets as Sniper's decoder library numbers them (its `dl_isa`): what an
/// [`other::ISA_CHANGE`] record names. Sniper's reader decodes x86 until told otherwise.
pub mod isa {
    /// AArch64 (A64), decoded by Sniper's Capstone-based ARM decoder.
    pub const AARCH64: u32 = 5;
}

/// Sniper's simulator commands, the first argument of a magic instruction (its `sim_api.h`).
pub mod command {
    /// Start of the region of interest: Sniper's detailed simulation begins.
    pub const ROI_START: u64 = 1;
    /// End of the region of interest.
    pub const ROI_END: u64 = 2;
    /// A user command (two arguments): answered by a script's `hook_magic_user`, here bbv's
    /// region script ([`region`]).
    pub const USER: u64 = 5;

    /// The first arguments of the [`USER`] commands that bound a multi-threaded region in
    /// Sniper's order of its markers' executions (crates/sniper's region script counts them).
    pub mod region {
        /// The region starts at the N-th execution of its start marker from here on (N the
        /// second argument).
        pub const START_AFTER: u64 = 0x6276_0001;
        /// The region ends at the N-th execution of its end marker from here on.
        pub const END_AFTER: u64 = 0x6276_0002;
        /// One execution of a bounding marker: the second argument's [`HIT_START`] and
        /// [`HIT_END`] bits say which (the same instruction may bound both ends).
        pub const HIT: u64 = 0x6276_0003;
        /// See [`HIT`].
        pub const HIT_START: u64 = 1;
        /// See [`HIT`].
        pub const HIT_END: u64 = 2;
    }
}

/// One executed instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    /// Its address.
    pub address: u64,
    /// Its encoding (1 to [`MAX_SIZE`] bytes).
    pub bytes: Vec<u8>,
    /// The data addresses it read or wrote (at most [`MAX_ADDRESSES`]).
    pub memory: Vec<u64>,
    /// A conditional branch (one with a fall-through), as Sniper's own recorder flags them:
    /// Sniper's timing model gives only those a branch micro-op, and stops at a flagged
    /// instruction whose micro-ops have none (a `jmp`, `call` or `ret`).
    pub branch: bool,
    /// A branch that was taken.
    pub taken: bool,
}

impl Instruction {
    /// An instruction from what a frontend saw of it: the distinct addresses it accessed in
    /// order (`seen`) and the memory operands its decoder counts (`operands`). Sniper reads one
    /// address per memory operand of its own decoding: the record holds the larger of the two
    /// counts (at most [`MAX_ADDRESSES`]), an operand that made no access (a prefetch) given
    /// the last address seen, or 0.
    pub fn from_accesses(
        address: u64,
        bytes: &[u8],
        seen: &[u64],
        operands: usize,
        (branch, taken): (bool, bool),
    ) -> Instruction {
        let n = seen.len().max(operands).min(MAX_ADDRESSES);
        let last = seen.last().copied().unwrap_or(0);
        Instruction {
            address,
            bytes: bytes.to_vec(),
            memory: (0..n)
                .map(|k| seen.get(k).copied().unwrap_or(last))
                .collect(),
            branch,
            taken: branch && taken,
        }
    }
}

/// What can go wrong writing or reading SIFT.
#[derive(Debug, thiserror::Error)]
pub enum SiftError {
    /// The stream could not be written or read.
    #[error("{0}")]
    Io(#[from] std::io::Error),
    /// An instruction the format cannot hold.
    #[error("instruction at {address:#x}: {why}")]
    Unrepresentable {
        /// Its address.
        address: u64,
        /// Why.
        why: String,
    },
    /// Bytes that are no SIFT trace.
    #[error("byte {offset}: {why}")]
    Malformed {
        /// Where in the stream.
        offset: u64,
        /// What is wrong.
        why: String,
    },
}
