//! Streaming parser of Accel-Sim GPU traces: `kernelslist.g` and `kernel-N.traceg` (plain, xz or
//! zstd, detected from the content), of every tracer version.
//!
//! # Design constraints
//! * Streaming: one line buffer; memory does not grow with the trace.
//! * Every inconsistency (a count that disagrees with the lines, an instruction outside a thread
//!   block, an unknown address mode, register counts that disagree with the tokens) is an error
//!   naming the file and line: a silently wrong instruction count is the worst outcome.

mod error;
mod fast;
mod input;
mod list;
mod records;
mod trace;

pub use error::TraceError;
pub use list::{Command, KernelList};
pub use records::{AddressMode, Event, Instruction, KernelHeader};
pub use trace::TraceReader;

/// Whether this CPU runs x86-64-v3 code (AVX2, BMI1/2, POPCNT, LZCNT): the reader's general
/// path, and a caller's loop over [`TraceReader::next_event`], may then use a build made for it.
#[cfg(target_arch = "x86_64")]
pub fn x86_64_v3() -> bool {
    use std::arch::is_x86_feature_detected as has;
    has!("avx2") && has!("bmi1") && has!("bmi2") && has!("popcnt") && has!("lzcnt")
}
