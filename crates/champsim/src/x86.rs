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

use crate::{BranchKind, Record, REG_FLAGS, REG_IP, REG_SP};

/// The register an indirect branch reads when its target's address names none (`jmp
/// [rip+table]`): ChampSim tells indirect from direct branches by such a register.
pub const TARGET: u8 = 255;

/// What a record of one instruction holds besides its run-time facts (taken, addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operands {
    /// Length in bytes.
    pub len: u8,
    /// Registers written (0: none).
    pub dst_regs: [u8; 2],
    /// Registers read (0: none).
    pub src_regs: [u8; 4],
    /// Memory operands read (at most 4 recorded).
    pub loads: u8,
    /// Memory operands written (at most 2 recorded).
    pub stores: u8,
    /// The kind ChampSim will take it for.
    pub kind: BranchKind,
    /// A string instruction with a rep prefix: QEMU may run it once per iteration.
    pub rep: bool,
}

impl Operands {
    /// The record of one execution: `taken` = the next instruction is not the fall-through;
    /// one address per memory operand (extra ones dropped, as the record has no room).
    pub fn record(&self, ip: u64, taken: bool, loads: &[u64], stores: &[u64]) -> Record {
        let mut r = Record {
            ip,
            is_branch: self.kind != BranchKind::NotBranch,
            branch_taken: taken,
            dst_regs: self.dst_regs,
            src_regs: self.src_regs,
            ..Record::default()
        };
        for (slot, a) in r.src_mem.iter_mut().zip(loads) {
            *slot = *a;
        }
        for (slot, a) in r.dst_mem.iter_mut().zip(stores) {
            *slot = *a;
        }
        r
    }
}

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

/// Numbers ChampSim gives a meaning to, or takes for "none".
fn reserved(n: u8) -> bool {
    matches!(n, 0 | REG_SP | REG_FLAGS | REG_IP | TARGET)
}

impl Decoder {
    /// A decoder; every full register (`eax` and `al` are `rax`, `xmm0` is `zmm0`) gets one
    /// number for good, in iced-x86's register order.
    pub fn new() -> Decoder {
        let mut numbers = [0u8; 256];
        let mut next = 1u8;
        for r in Register::values() {
            let full = r.full_register();
            if full == Register::None {
                continue;
            }
            let n = match full {
                Register::RSP => REG_SP,
                Register::RIP => REG_IP,
                _ if numbers[full as usize] != 0 => numbers[full as usize],
                _ => {
                    while reserved(next) {
                        next += 1;
                    }
                    next += 1;
                    next - 1
                }
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
        let (reads, writes, loads, stores) = self.accesses(&insn);
        let flags_read = insn.rflags_read() != 0;
        let flags_written = insn.rflags_written() != 0;
        // A branch's target registers: what it reads besides the stack pointer and flags.
        let target = |reads: &[u8]| -> Vec<u8> {
            let t: Vec<u8> = reads
                .iter()
                .copied()
                .filter(|&n| n != REG_SP && n != REG_FLAGS)
                .collect();
            if t.is_empty() {
                vec![TARGET]
            } else {
                t
            }
        };
        let (dst, src): (Vec<u8>, Vec<u8>) = match flow(&insn) {
            FlowControl::UnconditionalBranch => (vec![REG_IP], vec![]),
            FlowControl::IndirectBranch => (vec![REG_IP], target(&reads)),
            FlowControl::ConditionalBranch => {
                let mut src = vec![REG_IP];
                if flags_read {
                    src.push(REG_FLAGS);
                }
                src.extend(reads.iter().filter(|&&n| n != REG_FLAGS && n != REG_SP));
                let mut dst = vec![REG_IP];
                dst.extend(writes.iter().filter(|&&n| n != REG_FLAGS && n != REG_SP));
                (dst, src)
            }
            FlowControl::Call => (vec![REG_IP, REG_SP], vec![REG_IP, REG_SP]),
            FlowControl::IndirectCall => {
                let mut src = vec![REG_IP, REG_SP];
                src.extend(target(&reads));
                (vec![REG_IP, REG_SP], src)
            }
            FlowControl::Return => (vec![REG_IP, REG_SP], vec![REG_SP]),
            _ => {
                let mut src = reads;
                let mut dst = writes;
                if flags_read && !src.contains(&REG_FLAGS) {
                    src.push(REG_FLAGS);
                }
                if flags_written && !dst.contains(&REG_FLAGS) {
                    dst.push(REG_FLAGS);
                }
                (dst, src)
            }
        };
        let mut ops = Operands {
            len: insn.len() as u8,
            dst_regs: [0; 2],
            src_regs: [0; 4],
            loads,
            stores,
            kind: BranchKind::NotBranch,
            rep: insn.is_string_instruction() && (insn.has_rep_prefix() || insn.has_repne_prefix()),
        };
        for (slot, n) in ops.dst_regs.iter_mut().zip(dst) {
            *slot = n;
        }
        for (slot, n) in ops.src_regs.iter_mut().zip(src) {
            *slot = n;
        }
        ops.kind = BranchKind::of(&ops.record(ip, false, &[], &[]));
        Some(ops)
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
        Some(match flow(&insn) {
            FlowControl::UnconditionalBranch => BranchKind::DirectJump,
            FlowControl::IndirectBranch => BranchKind::Indirect,
            FlowControl::ConditionalBranch => BranchKind::Conditional,
            FlowControl::Call => BranchKind::DirectCall,
            FlowControl::IndirectCall => BranchKind::IndirectCall,
            FlowControl::Return => BranchKind::Return,
            _ => BranchKind::NotBranch,
        })
    }
}

/// iced-x86's control flow, but a system call is no branch: the traced program goes on at the
/// next instruction.
fn flow(insn: &Instruction) -> FlowControl {
    match insn.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => FlowControl::Next,
        _ => insn.flow_control(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
