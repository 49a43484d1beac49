//! bbv-branch: what an instruction's bytes say about control flow, as QEMU's plugin asks it
//! of a block being translated (whether its last instruction may close a loop or branches
//! conditionally, where a backward branch goes, which x86 instructions repeat), without a
//! full decoder on the translation path: byte matchers, each checked in its tests against a
//! full decoder on real code.
//!
//! * [`x86`] for x86-64,
//! * [`decode`] for AArch64 and RISC-V 64.

pub mod decode;
pub mod x86;
