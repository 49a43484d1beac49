//! x86-64 instructions as ChampSim records: the registers an instruction really reads and
//! writes (iced-x86's instruction info), numbered stably, with the special registers placed so
//! that ChampSim classifies each branch as what it is, and how many memory operands it loads
//! and stores.
//!
//! * Conditional branches (`jcc`, `jrcxz`, `loop`) read the instruction pointer and the flags
//!   (or `rcx`) and write the pointer; direct jumps write it and read nothing; indirect jumps
//!   read their target's registers (a stand-in register, [`TARGET`], when the target is loaded
//!   from a fixed or `rip`-relative address); calls read and write the stack and instruction
//!   pointers (an indirect call also its target's registers); returns read the stack pointer and
//!   write both.
//! * `syscall`, `int` and the like are not branches: the traced program continues at the next
//!   instruction.
//! * No other instruction names the instruction pointer, so none is taken for a branch.

use iced_x86::{
    Decoder as IcedDecoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory,
    Mnemonic, OpAccess, Register,
};

use crate::operands::{Flow, Numbering, Seen};
use crate::{BranchKind, REG_FLAGS, REG_IP, REG_SP};

pub use crate::operands::{Operands, TARGET};

/// Decodes x86-64 instructions into [`Operands`] (reusable: it keeps iced-x86's buffers).
pub struct Decoder {
    factory: InstructionInfoFactory,
    numbers: [u8; 256],
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

impl Decoder {
    /// A decoder; every full register (`eax` and `al` are `rax`, `xmm0` is `zmm0`) gets one
    /// number for good, in iced-x86's register order.
    pub fn new() -> Decoder {
        let mut numbers = [0u8; 256];
        let mut next = Numbering::new();
        for r in Register::values() {
            let full = r.full_register();
            if full == Register::None {
                continue;
            }
            let n = match full {
                Register::RSP => REG_SP,
                Register::RIP => REG_IP,
                _ if numbers[full as usize] != 0 => numbers[full as usize],
                _ => next.next(),
            };
            numbers[full as usize] = n;
            numbers[r as usize] = n;
        }
        Decoder {
            factory: InstructionInfoFactory::new(),
            numbers,
        }
    }

    /// The instruction at the start of `bytes` (its address `ip`), or None for bytes that are
    /// no valid instruction.
    pub fn decode(&mut self, bytes: &[u8], ip: u64) -> Option<Operands> {
        let mut d = IcedDecoder::with_ip(64, bytes, ip, DecoderOptions::NONE);
        let insn = d.decode();
        if insn.is_invalid() {
            return None;
        }
        let (mut reads, mut writes, loads, stores) = self.accesses(&insn);
        if insn.rflags_read() != 0 && !reads.contains(&REG_FLAGS) {
            reads.push(REG_FLAGS);
        }
        if insn.rflags_written() != 0 && !writes.contains(&REG_FLAGS) {
            writes.push(REG_FLAGS);
        }
        Some(
            Seen {
                len: insn.len() as u8,
                flow: flow_of(&insn),
                reads,
                writes,
                loads,
                stores,
                rep: insn.is_string_instruction()
                    && (insn.has_rep_prefix() || insn.has_repne_prefix()),
            }
            .operands(),
        )
    }

    /// The numbers of the registers `insn` reads and writes (never the instruction pointer),
    /// and its memory operands loaded and stored.
    fn accesses(&mut self, insn: &Instruction) -> (Vec<u8>, Vec<u8>, u8, u8) {
        let info = self.factory.info(insn);
        let mut reads: Vec<u8> = Vec::with_capacity(8);
        let mut writes: Vec<u8> = Vec::with_capacity(4);
        for u in info.used_registers() {
            let n = self.numbers[u.register() as usize];
            if n == 0 || n == REG_IP {
                continue;
            }
            let (r, w) = match u.access() {
                OpAccess::Read | OpAccess::CondRead => (true, false),
                OpAccess::Write | OpAccess::CondWrite => (false, true),
                OpAccess::ReadWrite | OpAccess::ReadCondWrite => (true, true),
                _ => (false, false),
            };
            if r && !reads.contains(&n) {
                reads.push(n);
            }
            if w && !writes.contains(&n) {
                writes.push(n);
            }
        }
        let (mut loads, mut stores) = (0u8, 0u8);
        for m in info.used_memory() {
            match m.access() {
                OpAccess::Read | OpAccess::CondRead => loads += 1,
                OpAccess::Write | OpAccess::CondWrite => stores += 1,
                OpAccess::ReadWrite | OpAccess::ReadCondWrite => {
                    loads += 1;
                    stores += 1
                }
                _ => {}
            }
        }
        (reads, writes, loads, stores)
    }

    /// The kind an instruction's control flow asks for (what [`Decoder::decode`]'s registers
    /// must make ChampSim see).
    pub fn intended(bytes: &[u8], ip: u64) -> Option<BranchKind> {
        let insn = IcedDecoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
        if insn.is_invalid() {
            return None;
        }
        Some(flow_of(&insn).kind())
    }
}

/// iced-x86's control flow, but a system call is no branch: the traced program goes on at the
/// next instruction.
fn flow_of(insn: &Instruction) -> Flow {
    match insn.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => Flow::Next,
        _ => match insn.flow_control() {
            FlowControl::UnconditionalBranch => Flow::Jump,
            FlowControl::IndirectBranch => Flow::IndirectJump,
            FlowControl::ConditionalBranch => Flow::Conditional,
            FlowControl::Call => Flow::Call,
            FlowControl::IndirectCall => Flow::IndirectCall,
            FlowControl::Return => Flow::Return,
            _ => Flow::Next,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operands::reserved;

    fn ops(bytes: &[u8]) -> Operands {
        Decoder::new().decode(bytes, 0x1000).unwrap()
    }

    #[test]
    fn registers_are_numbered_once_and_never_as_the_special_ones() {
        let d = Decoder::new();
        let mut seen = std::collections::HashMap::new();
        for r in Register::values() {
            let full = r.full_register();
            let n = d.numbers[r as usize];
            if full == Register::None {
                assert_eq!(n, 0, "{r:?}");
                continue;
            }
            assert_ne!(n, 0, "{r:?}");
            match full {
                Register::RSP => assert_eq!(n, REG_SP),
                Register::RIP => assert_eq!(n, REG_IP),
                _ => assert!(!reserved(n), "{r:?} got {n}"),
            }
            if let Some(other) = seen.insert(n, full) {
                assert_eq!(other, full, "{n} names two registers");
            }
        }
        assert_eq!(
            d.numbers[Register::EAX as usize],
            d.numbers[Register::AL as usize]
        );
    }

    #[test]
    fn each_branch_is_what_champsim_will_see() {
        // jne rel8, jmp rel32, jmp rax, jmp [rip+0x10], call rel32, call rax, call [rbx+8], ret,
        // loop, jrcxz
        let cases: [(&[u8], BranchKind); 10] = [
            (&[0x75, 0x10], BranchKind::Conditional),
            (&[0xe9, 0, 1, 0, 0], BranchKind::DirectJump),
            (&[0xff, 0xe0], BranchKind::Indirect),
            (&[0xff, 0x25, 0x10, 0, 0, 0], BranchKind::Indirect),
            (&[0xe8, 0, 1, 0, 0], BranchKind::DirectCall),
            (&[0xff, 0xd0], BranchKind::IndirectCall),
            (&[0xff, 0x53, 0x08], BranchKind::IndirectCall),
            (&[0xc3], BranchKind::Return),
            (&[0xe2, 0xfe], BranchKind::Conditional),
            (&[0xe3, 0x10], BranchKind::Conditional),
        ];
        for (bytes, kind) in cases {
            let o = ops(bytes);
            assert_eq!(o.kind, kind, "{bytes:x?}: {o:?}");
            assert_eq!(Decoder::intended(bytes, 0x1000), Some(kind));
        }
    }

    #[test]
    fn other_instructions_name_their_operands_and_never_the_instruction_pointer() {
        // add rax, [rbx+rcx*8]: reads rax, rbx, rcx; writes rax and the flags; one load.
        let o = ops(&[0x48, 0x03, 0x04, 0xcb]);
        assert_eq!(o.kind, BranchKind::NotBranch);
        assert_eq!((o.loads, o.stores), (1, 0));
        assert_eq!(o.dst_regs[1], REG_FLAGS);
        assert_eq!(o.src_regs.iter().filter(|&&r| r != 0).count(), 3);
        // push rbx: reads rbx and rsp, writes rsp, one store.
        let o = ops(&[0x53]);
        assert_eq!((o.loads, o.stores), (0, 1));
        assert!(o.dst_regs.contains(&REG_SP) && o.src_regs.contains(&REG_SP));
        // mov rax, [rip+0x20]: rip-relative, yet no instruction-pointer register.
        let o = ops(&[0x48, 0x8b, 0x05, 0x20, 0, 0, 0]);
        assert!(!o.src_regs.contains(&REG_IP) && !o.dst_regs.contains(&REG_IP));
        assert_eq!(o.kind, BranchKind::NotBranch);
        // syscall continues at the next instruction: not a branch.
        assert_eq!(ops(&[0x0f, 0x05]).kind, BranchKind::NotBranch);
        // rep movsb: one load, one store.
        let o = ops(&[0xf3, 0xa4]);
        assert_eq!((o.loads, o.stores), (1, 1));
    }
}
