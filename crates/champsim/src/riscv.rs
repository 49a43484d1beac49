//! RISC-V 64 instructions as ChampSim records: registers from the instruction's fields as the
//! rvdasm crate decodes them (RV64GC: compressed and floating-point forms included), numbered
//! stably, with the special registers placed as ChampSim's classifier expects (see
//! [`crate::operands`]).
//!
//! RISC-V has no call or return instruction, no flags and no stack-pointer side effects, so the
//! records synthesize them, following the ISA's own hints for return-address prediction:
//! `jal`/`jalr` writing a link register (`ra` or `t0`) is a call, and reads and writes the
//! stack pointer (its link-register write does not fit the record's two destinations and is
//! left out); `jalr` writing `zero` from a link register (`ret`) is a return, and reads the
//! stack pointer and the link register and writes the stack and instruction pointers; other
//! `jalr`s are indirect jumps. Conditional branches read ChampSim's flags register as well as
//! the registers they compare (so that `beq zero, zero` is still a conditional branch).
//!
//! The compressed forms' implicit operands, which the decoder's tables leave out, are added:
//! the stack pointer of `c.*sp` and `c.addi16sp`, the link register `c.jalr` writes. Loads and
//! stores are told by the mnemonic (`l*`/`fl*`, `s*`/`fs*`, `lr`, `sc`, `amo*` both), one
//! memory operand each; vector (V extension) memory instructions are not recognised.

use rvdasm::args::{Arg, Tag};
use rvdasm::disassembler::{Disassembler, Xlen};

use crate::operands::{Flow, Numbering, Operands, Seen};
use crate::{BranchKind, REG_FLAGS, REG_SP};

/// Decodes RISC-V 64 instructions into [`Operands`].
pub struct Decoder {
    dis: Disassembler,
    /// ChampSim's numbers of `x0`..`x31` (`x0`: 0, none; `x2`, `sp`: ChampSim's stack pointer).
    x: [u8; 32],
    /// Of `f0`..`f31`.
    f: [u8; 32],
    /// Of `v0`..`v31`.
    v: [u8; 32],
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

/// `ra` and `t0`, the registers the ISA names as link registers.
fn is_link(x: u32) -> bool {
    x == 1 || x == 5
}

/// Loads and stores a mnemonic makes, one memory operand each.
fn memory_of(name: &str) -> (u8, u8) {
    if name.starts_with("amo") {
        return (1, 1);
    }
    if name.starts_with("lr.") {
        return (1, 0);
    }
    if name.starts_with("sc.") {
        return (0, 1);
    }
    let base = name.strip_prefix("c.").unwrap_or(name);
    let base = base.strip_prefix('f').unwrap_or(base);
    let base = base.strip_suffix("sp").unwrap_or(base);
    let sized = |rest: &str, unsigned: bool| {
        let mut c = rest.chars();
        let size = c.next().is_some_and(|s| "bhwdq".contains(s));
        let tail: String = c.collect();
        size && (tail.is_empty() || (unsigned && tail == "u"))
    };
    if let Some(rest) = base.strip_prefix('l') {
        if sized(rest, true) {
            return (1, 0);
        }
    }
    if let Some(rest) = base.strip_prefix('s') {
        if sized(rest, false) {
            return (0, 1);
        }
    }
    (0, 0)
}

impl Decoder {
    /// A decoder: `x1`..`x31` (but `sp`), then `f0`..`f31`, then `v0`..`v31`, all distinct
    /// from ChampSim's special numbers.
    pub fn new() -> Decoder {
        let mut next = Numbering::new();
        let mut x = [0u8; 32];
        for (i, n) in x.iter_mut().enumerate().skip(1) {
            *n = if i == 2 { REG_SP } else { next.next() };
        }
        let f = std::array::from_fn(|_| next.next());
        let v = std::array::from_fn(|_| next.next());
        Decoder {
            dis: Disassembler::new(Xlen::XLEN64),
            x,
            f,
            v,
        }
    }

    fn number(&self, tag: Tag, r: u32) -> u8 {
        let i = (r & 31) as usize;
        match tag {
            Tag::Rd | Tag::Rs1 | Tag::Rs2 | Tag::Rs3 => self.x[i],
            Tag::Fd | Tag::Fs1 | Tag::Fs2 | Tag::Fs3 => self.f[i],
            Tag::Vd | Tag::Vs1 | Tag::Vs2 | Tag::Vs3 => self.v[i],
            _ => 0,
        }
    }

    /// The instruction at the start of `bytes`, or None for bytes that are no valid one.
    fn insn(&self, bytes: &[u8]) -> Option<rvdasm::insn::Insn> {
        let low = u16::from_le_bytes([*bytes.first()?, *bytes.get(1)?]);
        let word = if low & 3 == 3 {
            u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?)
        } else {
            u32::from(low)
        };
        self.dis.disassmeble_one(word)
    }

    /// The control flow of `insn`, from its mnemonic and its link registers.
    fn flow(insn: &rvdasm::insn::Insn) -> Flow {
        let reg = |want: Tag| {
            insn.operands().find_map(|(t, a)| match a {
                Arg::DstReg(r) | Arg::SrcReg(r) if t == want => Some(r),
                _ => None,
            })
        };
        match insn.get_name() {
            "jal" => match reg(Tag::Rd) {
                Some(rd) if is_link(rd) => Flow::Call,
                _ => Flow::Jump,
            },
            "jalr" => match (reg(Tag::Rd), reg(Tag::Rs1)) {
                (Some(rd), _) if is_link(rd) => Flow::IndirectCall,
                (Some(0) | None, Some(rs1)) if is_link(rs1) => Flow::Return,
                _ => Flow::IndirectJump,
            },
            "c.j" => Flow::Jump,
            "c.jal" => Flow::Call,
            "c.jalr" => Flow::IndirectCall,
            "c.jr" => match reg(Tag::Rs1) {
                Some(rs1) if is_link(rs1) => Flow::Return,
                _ => Flow::IndirectJump,
            },
            _ if insn.is_branch() => Flow::Conditional,
            _ => Flow::Next,
        }
    }

    /// The instruction at the start of `bytes` (its address `ip`), or None for bytes that are
    /// no valid instruction.
    pub fn decode(&mut self, bytes: &[u8], _ip: u64) -> Option<Operands> {
        let insn = self.insn(bytes)?;
        let name = insn.get_name();
        let flow = Self::flow(&insn);
        let mut reads = Vec::with_capacity(4);
        let mut writes = Vec::with_capacity(2);
        for (tag, arg) in insn.operands() {
            match arg {
                Arg::SrcReg(r) => reads.push(self.number(tag, r)),
                Arg::DstReg(r) => writes.push(self.number(tag, r)),
                _ => {}
            }
        }
        match name {
            "c.addi16sp" => {
                reads.push(REG_SP);
                writes.push(REG_SP);
            }
            "c.jalr" | "c.jal" => writes.push(self.x[1]),
            _ if name.starts_with("c.") && name.ends_with("sp") => reads.push(REG_SP),
            "c.addi4spn" => reads.push(REG_SP),
            _ => {}
        }
        if flow == Flow::Conditional {
            reads.insert(0, REG_FLAGS);
        }
        Some(Seen::without_rep(insn.get_len(), flow, reads, writes, memory_of(name)).operands())
    }

    /// The kind an instruction's control flow asks for (what [`Decoder::decode`]'s registers
    /// must make ChampSim see).
    pub fn intended(&self, bytes: &[u8], _ip: u64) -> Option<BranchKind> {
        Some(Self::flow(&self.insn(bytes)?).kind())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operands::reserved;
    use crate::REG_IP;

    fn ops(bytes: &[u8]) -> Operands {
        Decoder::new().decode(bytes, 0x1000).unwrap()
    }

    fn word(w: u32) -> [u8; 4] {
        w.to_le_bytes()
    }

    fn half(h: u16) -> [u8; 2] {
        h.to_le_bytes()
    }

    #[test]
    fn each_branch_is_what_champsim_will_see() {
        let cases: [(&[u8], BranchKind); 12] = [
            (&word(0x0000006f), BranchKind::DirectJump), // jal zero (j)
            (&word(0x008000ef), BranchKind::DirectCall), // jal ra
            (&word(0x000780e7), BranchKind::IndirectCall), // jalr ra, a5
            (&word(0x00008067), BranchKind::Return),     // jalr zero, ra (ret)
            (&word(0x00078067), BranchKind::Indirect),   // jalr zero, a5 (jr a5)
            (&word(0x00b50463), BranchKind::Conditional), // beq a0, a1
            (&word(0x00000463), BranchKind::Conditional), // beq zero, zero
            (&half(0xa001), BranchKind::DirectJump),     // c.j
            (&half(0x9782), BranchKind::IndirectCall),   // c.jalr a5
            (&half(0x8082), BranchKind::Return),         // c.jr ra (c.ret)
            (&half(0x8782), BranchKind::Indirect),       // c.jr a5
            (&half(0xc101), BranchKind::Conditional),    // c.beqz a0
        ];
        let d = Decoder::new();
        for (bytes, kind) in cases {
            let o = ops(bytes);
            assert_eq!(o.kind, kind, "{bytes:x?}: {o:?}");
            assert_eq!(usize::from(o.len), bytes.len());
            assert_eq!(d.intended(bytes, 0x1000), Some(kind));
        }
        // ecall goes on at the next instruction.
        assert_eq!(ops(&word(0x00000073)).kind, BranchKind::NotBranch);
    }

    #[test]
    fn operands_are_the_instructions_own() {
        let d = Decoder::new();
        // add a0, a0, a1: reads x10, x11, writes x10.
        let o = ops(&word(0x00b50533));
        assert_eq!(o.dst_regs, [d.x[10], 0]);
        assert_eq!(o.src_regs, [d.x[10], d.x[11], 0, 0]);
        // sd ra, 8(sp): one store, reads sp and ra.
        let o = ops(&word(0x00113423));
        assert_eq!((o.loads, o.stores), (0, 1));
        assert!(o.src_regs.contains(&REG_SP) && o.src_regs.contains(&d.x[1]));
        // fld fa0, 0(a0): one load into f10.
        let o = ops(&word(0x00053507));
        assert_eq!((o.loads, o.stores), (1, 0));
        assert_eq!(o.dst_regs, [d.f[10], 0]);
        // c.ldsp ra, 8(sp): a load reading the stack pointer the form implies.
        let o = ops(&half(0x60a2));
        assert_eq!((o.loads, o.stores), (1, 0));
        assert!(o.src_regs.contains(&REG_SP));
        // c.fsdsp fs0, 8(sp): a floating-point store.
        let o = ops(&half(0xa422));
        assert_eq!((o.loads, o.stores), (0, 1));
        // c.addi16sp sp, 32: reads and writes the stack pointer; not a branch.
        let o = ops(&half(0x6105));
        assert_eq!(o.dst_regs, [REG_SP, 0]);
        assert_eq!(o.kind, BranchKind::NotBranch);
        // amoadd.w a0, a1, (a2): loads and stores.
        assert_eq!(
            (ops(&word(0x00b6252f)).loads, ops(&word(0x00b6252f)).stores),
            (1, 1)
        );
        // Not memory: sll, slt, lui, sh1add-like names are not loads or stores.
        for n in ["sll", "slt", "lui", "sub", "sra", "sh1add", "c.slli"] {
            assert_eq!(memory_of(n), (0, 0), "{n}");
        }
        for n in ["lbu", "lwu", "c.lwsp", "flw", "c.fld", "lr.d"] {
            assert_eq!(memory_of(n), (1, 0), "{n}");
        }
        for n in ["sb", "c.sdsp", "fsd", "sc.w", "c.fsd"] {
            assert_eq!(memory_of(n), (0, 1), "{n}");
        }
        for w in [0x00b50533u32, 0x00113423, 0x00053507] {
            let o = ops(&word(w));
            assert!(!o.src_regs.contains(&REG_IP) && !o.dst_regs.contains(&REG_IP));
        }
    }

    #[test]
    fn registers_are_numbered_once_and_never_as_the_special_ones() {
        let d = Decoder::new();
        let mut all: Vec<u8> = d.x[1..].iter().chain(&d.f).chain(&d.v).copied().collect();
        assert_eq!(d.x[0], 0);
        assert_eq!(d.x[2], REG_SP);
        all.retain(|&n| n != REG_SP);
        assert!(all.iter().all(|&n| !reserved(n)));
        let n = all.len();
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), n);
        // Truncated bytes are no instruction.
        assert_eq!(Decoder::new().decode(&[0x13], 0), None);
        assert_eq!(Decoder::new().decode(&[0x13, 0x05, 0x05], 0), None);
    }
}
