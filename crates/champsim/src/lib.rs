//! ChampSim, the trace-driven CPU simulator bbv's points are checked on: its 64-byte trace
//! record ([`Record`]), how it tells branch kinds apart from the registers a record names
//! ([`BranchKind::of`]), x86-64 instructions as records ([`x86::Operands`], decoded with
//! iced-x86), and the figures it prints ([`stats::Figures`]).
//!
//! ChampSim reads no branch type from a trace: it derives one from three special registers,
//! the stack pointer ([`REG_SP`]), the flags ([`REG_FLAGS`]) and the instruction pointer
//! ([`REG_IP`]), and drops register 0 and address 0 as "none". A tracer must name those
//! registers in the patterns it expects and number every other register stably, never as one
//! of them.

mod classify;
mod record;
pub mod sim;
pub mod stats;
pub mod x86;

pub use classify::BranchKind;
pub use record::{Record, RECORD_BYTES};

/// ChampSim's stack-pointer register.
pub const REG_SP: u8 = 6;
/// ChampSim's flags register.
pub const REG_FLAGS: u8 = 25;
/// ChampSim's instruction-pointer register.
pub const REG_IP: u8 = 26;
