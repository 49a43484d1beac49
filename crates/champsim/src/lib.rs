//! ChampSim, the trace-driven CPU simulator bbv's points are checked on: its 64-byte trace
//! record ([`Record`]), how it tells branch kinds apart from the registers a record names
//! ([`BranchKind::of`]), instructions as records ([`Operands`]: x86-64 decoded with iced-x86,
//! AArch64 with Capstone, RISC-V 64 with rvdasm; [`Decoder`] picks by [`Isa`]), and the
//! figures it prints ([`stats::Figures`]).
//!
//! ChampSim reads no branch type from a trace: it derives one from three special registers,
//! the stack pointer ([`REG_SP`]), the flags ([`REG_FLAGS`]) and the instruction pointer
//! ([`REG_IP`]), and drops register 0 and address 0 as "none". A tracer must name those
//! registers in the patterns it expects and number every other register stably, never as one
//! of them.

pub mod aarch64;
mod classify;
pub mod condense;
mod operands;
mod record;
pub mod riscv;
pub mod sim;
pub mod stats;
pub mod x86;

pub use bbv_plugin_contract::Isa;
pub use classify::BranchKind;
pub use operands::{Operands, TARGET};
pub use record::{Record, RECORD_BYTES};

/// ChampSim's stack-pointer register.
pub const REG_SP: u8 = 6;
/// ChampSim's flags register.
pub const REG_FLAGS: u8 = 25;
/// ChampSim's instruction-pointer register.
pub const REG_IP: u8 = 26;

/// One ISA's decoder (each keeps buffers or a library handle: make one per thread).
pub enum Decoder {
    /// iced-x86.
    X86(x86::Decoder),
    /// Capstone.
    Aarch64(aarch64::Decoder),
    /// rvdasm.
    Riscv64(riscv::Decoder),
}

impl Decoder {
    /// A decoder of `isa`.
    pub fn new(isa: Isa) -> Decoder {
        match isa {
            Isa::X86_64 => Decoder::X86(x86::Decoder::new()),
            Isa::Aarch64 => Decoder::Aarch64(aarch64::Decoder::new()),
            Isa::Riscv64 => Decoder::Riscv64(riscv::Decoder::new()),
        }
    }

    /// The instruction at the start of `bytes` (its address `ip`), or None for bytes that are
    /// no valid instruction.
    pub fn decode(&mut self, bytes: &[u8], ip: u64) -> Option<Operands> {
        match self {
            Decoder::X86(d) => d.decode(bytes, ip),
            Decoder::Aarch64(d) => d.decode(bytes, ip),
            Decoder::Riscv64(d) => d.decode(bytes, ip),
        }
    }

    /// The kind the instruction's control flow asks for, independently of the registers
    /// [`Decoder::decode`] gives it (for checking that ChampSim will see that kind).
    pub fn intended(&self, bytes: &[u8], ip: u64) -> Option<BranchKind> {
        match self {
            Decoder::X86(_) => x86::Decoder::intended(bytes, ip),
            Decoder::Aarch64(d) => d.intended(bytes, ip),
            Decoder::Riscv64(d) => d.intended(bytes, ip),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whatever bytes the guest's code holds, a decoder answers (an instruction or None) and
    /// never panics: the plugin decodes inside QEMU, where a panic would abort the guest.
    #[test]
    fn arbitrary_bytes_decode_or_not_and_never_panic() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for isa in [Isa::X86_64, Isa::Aarch64, Isa::Riscv64] {
            let mut d = Decoder::new(isa);
            // Every 16-bit value (RISC-V's compressed forms), then random words.
            for h in 0..=u16::MAX {
                let b = h.to_le_bytes();
                if let Some(o) = d.decode(&b, 0x1000) {
                    assert!(usize::from(o.len) <= b.len(), "{isa:?} {b:x?}");
                }
            }
            for _ in 0..200_000 {
                let b = next().to_le_bytes();
                if let Some(o) = d.decode(&b, 0x1000) {
                    assert!(o.len > 0 && usize::from(o.len) <= b.len(), "{isa:?} {b:x?}");
                    assert_eq!(Some(o.kind), d.intended(&b, 0x1000), "{isa:?} {b:x?}");
                }
            }
        }
    }
}
