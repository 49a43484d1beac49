//! AArch64 instructions as ChampSim records: the registers an instruction reads and writes
//! (Capstone's access tables, mended where they are wrong), numbered stably, with the special
//! registers placed as ChampSim's classifier expects (see [`crate::operands`]).
//!
//! What is synthesized, as ChampSim's own converter of ARM traces does: `BL`/`BLR` neither
//! push nor pop, yet their records read and write the stack pointer (so that ChampSim sees a
//! call; the link register's write does not fit the record's two destinations and is left
//! out); `RET` reads the stack pointer and the link register and writes the stack and
//! instruction pointers. `B.cond` reads the flags (`NZCV`, ChampSim's flags register);
//! `CBZ`/`TBZ` read the register they test.
//!
//! Where Capstone 5's tables are wrong, the mnemonic decides: `CMP`/`CMN`/`TST` read their
//! first operand and write only the flags (Capstone has them write it); `CBZ`/`TBZ` do not read
//! the flags; `SVC` writes no link register; `RET` reads its register; atomics (`LDADD`,
//! `SWP`, `CAS`, their `ST` forms), whose operands Capstone leaves without access, read and
//! write by their definitions. Loads and stores are told by the mnemonic too (Capstone marks
//! some loads' memory operands read-write): `LD*` loads, `ST*` stores, atomics do both, one
//! memory operand each (a pair or a vector list is one operand: its lowest address).

use capstone::arch::arm64::{ArchMode, Arm64OperandType};
use capstone::arch::{ArchOperand, BuildsCapstone};
use capstone::{Capstone, RegId};
use std::collections::HashMap;

use crate::operands::{Flow, Numbering, Operands, Seen};
use crate::{BranchKind, REG_FLAGS, REG_SP};

/// Decodes AArch64 instructions into [`Operands`]. Not for sharing between threads (Capstone's
/// handle is not): make one per thread.
pub struct Decoder {
    cs: Option<Capstone>,
    /// ChampSim's number of each Capstone register seen (0: none, such as `xzr`).
    numbers: HashMap<u16, u8>,
    /// Numbers of the registers by canonical name (`x0`..`x30`, `v0`..`v31`, `p0`..`p15`,
    /// `sys` for every other one).
    by_name: HashMap<String, u8>,
}

impl Default for Decoder {
    fn default() -> Self {
        Decoder::new()
    }
}

/// Atomic read-modify-write families: they load and store.
const ATOMICS: [&str; 9] = [
    "add", "clr", "eor", "set", "smax", "smin", "umax", "umin", "swp",
];

/// How an instruction touches memory, from its mnemonic.
fn memory_of(m: &str) -> (u8, u8) {
    if is_atomic(m) {
        (1, 1)
    } else if m.starts_with("prf") {
        (0, 0)
    } else if m.starts_with("ld") {
        (1, 0)
    } else if m.starts_with("st") {
        (0, 1)
    } else {
        (0, 0)
    }
}

/// `LD<op>`/`ST<op>` (with their ordering and size suffixes), `SWP*`, `CAS*`.
fn is_atomic(m: &str) -> bool {
    if m.starts_with("cas") || m.starts_with("swp") {
        return true;
    }
    let rest = m.strip_prefix("ld").or_else(|| m.strip_prefix("st"));
    rest.is_some_and(|r| ATOMICS.iter().any(|a| r.starts_with(a)))
}

/// The control flow a mnemonic asks for.
fn flow_of(m: &str) -> Flow {
    match m {
        "b" => Flow::Jump,
        "bl" => Flow::Call,
        "cbz" | "cbnz" | "tbz" | "tbnz" => Flow::Conditional,
        "blr" | "blraa" | "blrab" | "blraaz" | "blrabz" => Flow::IndirectCall,
        "br" | "braa" | "brab" | "braaz" | "brabz" => Flow::IndirectJump,
        "ret" | "retaa" | "retab" => Flow::Return,
        _ if m.starts_with("b.") || m.starts_with("bc.") => Flow::Conditional,
        _ => Flow::Next,
    }
}

/// A register's canonical name: `w3`/`x3` are `x3`, `b0`..`q0`/`z0` are `v0`, `fp` and `lr`
/// are `x29` and `x30`; None for the zero registers.
fn canonical(name: &str) -> Option<String> {
    let name = name.to_ascii_lowercase();
    match name.as_str() {
        "xzr" | "wzr" => return None,
        "fp" => return Some("x29".into()),
        "lr" => return Some("x30".into()),
        "sp" | "wsp" => return Some("sp".into()),
        "nzcv" => return Some("nzcv".into()),
        _ => {}
    }
    if !name.is_ascii() || name.is_empty() {
        return Some("sys".into());
    }
    let (head, digits) = name.split_at(1);
    match (head, digits.parse::<u8>()) {
        ("w" | "x", Ok(n)) if n <= 30 => Some(format!("x{n}")),
        ("b" | "h" | "s" | "d" | "q" | "v" | "z", Ok(n)) if n <= 31 => Some(format!("v{n}")),
        ("p", Ok(n)) if n <= 15 => Some(format!("p{n}")),
        _ => Some("sys".into()),
    }
}

impl Decoder {
    /// A decoder: `x0`..`x30`, then `v0`..`v31`, then the SVE predicates, then one number for
    /// every other register (system and status registers), all distinct from ChampSim's
    /// special numbers; the stack pointer is ChampSim's, `NZCV` its flags.
    pub fn new() -> Decoder {
        let cs = Capstone::new()
            .arm64()
            .mode(ArchMode::Arm)
            .detail(true)
            .build()
            .ok();
        let mut by_name = HashMap::new();
        let mut next = Numbering::new();
        let names = (0..=30)
            .map(|n| format!("x{n}"))
            .chain((0..32).map(|n| format!("v{n}")))
            .chain((0..16).map(|n| format!("p{n}")))
            .chain(["sys".to_string()]);
        for name in names {
            by_name.insert(name, next.next());
        }
        by_name.insert("sp".into(), REG_SP);
        by_name.insert("nzcv".into(), REG_FLAGS);
        Decoder {
            cs,
            numbers: HashMap::new(),
            by_name,
        }
    }

    fn number(&mut self, r: RegId) -> u8 {
        if let Some(&n) = self.numbers.get(&r.0) {
            return n;
        }
        let name = self.cs.as_ref().and_then(|cs| cs.reg_name(r));
        let n = name
            .as_deref()
            .and_then(canonical)
            .map_or(0, |c| self.by_name[c.as_str()]);
        self.numbers.insert(r.0, n);
        n
    }

    /// The instruction at the start of `bytes` (its address `ip`), or None for bytes that are
    /// no valid instruction.
    pub fn decode(&mut self, bytes: &[u8], ip: u64) -> Option<Operands> {
        let (mnemonic, reads, writes, operands) = {
            let cs = self.cs.as_ref()?;
            let insns = cs.disasm_count(bytes.get(..4)?, ip, 1).ok()?;
            let insn = insns.iter().next()?;
            let detail = cs.insn_detail(insn).ok()?;
            let operands: Vec<(Option<RegId>, bool, bool)> = detail
                .arch_detail()
                .operands()
                .into_iter()
                .filter_map(|o| {
                    // Another crate enabling more of Capstone's architectures adds variants.
                    #[allow(unreachable_patterns)]
                    match o {
                        ArchOperand::Arm64Operand(o) => Some(o),
                        _ => None,
                    }
                })
                .map(|o| {
                    let (r, w) = match o.access {
                        Some(capstone::RegAccessType::ReadOnly) => (true, false),
                        Some(capstone::RegAccessType::WriteOnly) => (false, true),
                        Some(capstone::RegAccessType::ReadWrite) => (true, true),
                        None => (false, false),
                    };
                    match o.op_type {
                        Arm64OperandType::Reg(reg) => (Some(reg), r, w),
                        _ => (None, r, w),
                    }
                })
                .collect();
            (
                insn.mnemonic()?.to_ascii_lowercase(),
                detail.regs_read().to_vec(),
                detail.regs_write().to_vec(),
                operands,
            )
        };
        let mut reads: Vec<u8> = reads.into_iter().map(|r| self.number(r)).collect();
        let mut writes: Vec<u8> = writes.into_iter().map(|r| self.number(r)).collect();
        let regs: Vec<u8> = operands
            .iter()
            .map(|&(r, _, _)| r.map_or(0, |r| self.number(r)))
            .collect();
        let flow = flow_of(&mnemonic);
        let m = mnemonic.as_str();
        if matches!(m, "cmp" | "cmn" | "tst") {
            // Capstone: "writes" the operand that the alias's zero register replaces.
            reads.extend(writes.iter().filter(|&&n| n != REG_FLAGS));
            writes = vec![REG_FLAGS];
        } else if matches!(m, "cbz" | "cbnz" | "tbz" | "tbnz") {
            reads.retain(|&n| n != REG_FLAGS);
        } else if matches!(m, "svc" | "hvc" | "smc" | "brk" | "hlt") {
            writes.clear();
        } else if flow == Flow::Return && regs.is_empty() {
            reads.push(self.by_name["x30"]);
        } else if is_atomic(m) && operands.iter().all(|&(_, r, w)| !r && !w) {
            let (r, w) = atomic_registers(m, &regs);
            reads.extend(r);
            writes.extend(w);
        } else if operands.iter().all(|&(_, r, w)| !r && !w) {
            // No access known (`dc zva, x0`): the registers named are read.
            reads.extend(regs.iter().copied().filter(|&n| n != 0));
        }
        Some(Seen::without_rep(4, flow, reads, writes, memory_of(m)).operands())
    }

    /// The kind an instruction's control flow asks for (what [`Decoder::decode`]'s registers
    /// must make ChampSim see).
    pub fn intended(&self, bytes: &[u8], ip: u64) -> Option<BranchKind> {
        let cs = self.cs.as_ref()?;
        let insns = cs.disasm_count(bytes.get(..4)?, ip, 1).ok()?;
        let insn = insns.iter().next()?;
        Some(flow_of(&insn.mnemonic()?.to_ascii_lowercase()).kind())
    }
}

/// An atomic's registers by the architecture's definition (operands as Capstone lists them:
/// `CAS Rs, Rt, [Rn]`, `CASP Rs, Rs+1, Rt, Rt+1, [Rn]`, `LD<op>/SWP Rs, Rt, [Rn]`, `ST<op>
/// Rs, [Rn]`); the base register is among Capstone's reads already.
fn atomic_registers(m: &str, regs: &[u8]) -> (Vec<u8>, Vec<u8>) {
    let named: Vec<u8> = regs.iter().copied().filter(|&n| n != 0).collect();
    if m.starts_with("casp") {
        // Compares and swaps a pair: the first pair is read and written, the second read.
        let w: Vec<u8> = regs.iter().take(2).copied().collect();
        return (named, w);
    }
    if m.starts_with("cas") {
        let w: Vec<u8> = regs.iter().take(1).copied().collect();
        return (named, w);
    }
    if m.starts_with("st") {
        return (named, Vec::new());
    }
    // LD<op>, SWP: Rs read, Rt written.
    (
        regs.iter().take(1).copied().collect(),
        regs.iter().skip(1).take(1).copied().collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operands::reserved;
    use crate::REG_IP;

    fn ops(word: u32) -> Operands {
        Decoder::new().decode(&word.to_le_bytes(), 0x1000).unwrap()
    }

    fn number(name: &str) -> u8 {
        Decoder::new().by_name[name]
    }

    #[test]
    fn each_branch_is_what_champsim_will_see() {
        let cases = [
            (0x14000010, BranchKind::DirectJump),   // b
            (0x54000061, BranchKind::Conditional),  // b.ne
            (0xb4000060, BranchKind::Conditional),  // cbz x0
            (0x36000040, BranchKind::Conditional),  // tbz w0, #0
            (0x94000010, BranchKind::DirectCall),   // bl
            (0xd63f0060, BranchKind::IndirectCall), // blr x3
            (0xd61f0080, BranchKind::Indirect),     // br x4
            (0xd65f03c0, BranchKind::Return),       // ret
            (0xd65f0020, BranchKind::Return),       // ret x1
            (0xd4000001, BranchKind::NotBranch),    // svc #0
        ];
        let d = Decoder::new();
        for (word, kind) in cases {
            let o = ops(word);
            assert_eq!(o.kind, kind, "{word:#x}: {o:?}");
            assert_eq!(d.intended(&u32::to_le_bytes(word), 0x1000), Some(kind));
        }
        // b.ne reads the flags; cbz the register it tests and not the flags; ret the link
        // register.
        assert!(ops(0x54000061).src_regs.contains(&REG_FLAGS));
        let cbz = ops(0xb4000060);
        assert!(cbz.src_regs.contains(&number("x0")) && !cbz.src_regs.contains(&REG_FLAGS));
        assert!(ops(0xd65f03c0).src_regs.contains(&number("x30")));
        assert!(ops(0xd65f0020).src_regs.contains(&number("x1")));
        assert_eq!(ops(0xd4000001).dst_regs, [0, 0]);
    }

    #[test]
    fn operands_are_the_instructions_own() {
        // cmp x0, #1: reads x0, writes the flags only.
        let o = ops(0xf100041f);
        assert_eq!(o.dst_regs, [REG_FLAGS, 0]);
        assert!(o.src_regs.contains(&number("x0")));
        // tst x0, #1 likewise.
        let o = ops(0xf240001f);
        assert_eq!(o.dst_regs, [REG_FLAGS, 0]);
        assert_eq!(o.src_regs[0], number("x0"));
        // adds x0, x1, x2: writes x0 and the flags.
        let o = ops(0xab020020);
        assert!(o.dst_regs.contains(&number("x0")) && o.dst_regs.contains(&REG_FLAGS));
        // ldp x29, x30, [sp], #16: one load, writes x29 and x30 (sp's write-back left out).
        let o = ops(0xa8c17bfd);
        assert_eq!((o.loads, o.stores), (1, 0));
        assert!(o.src_regs.contains(&REG_SP));
        // stp x29, x30, [sp, #-16]!: one store.
        assert_eq!((ops(0xa9bf7bfd).loads, ops(0xa9bf7bfd).stores), (0, 1));
        // str q0, [x0, x1]: a store (Capstone calls its memory operand read-write).
        let o = ops(0x3ca16800);
        assert_eq!((o.loads, o.stores), (0, 1));
        // ldr x0, <literal>: a load without a memory operand.
        assert_eq!((ops(0x58000040).loads, ops(0x58000040).stores), (1, 0));
        // swpal x0, x1, [x2]: loads and stores, reads x0 and x2, writes x1.
        let o = ops(0xf8e08041);
        assert_eq!((o.loads, o.stores), (1, 1));
        assert_eq!(o.dst_regs, [number("x1"), 0]);
        assert!(o.src_regs.contains(&number("x0")) && o.src_regs.contains(&number("x2")));
        // casal x0, x1, [x2]: reads all three, writes x0.
        let o = ops(0xc8e0fc41);
        assert_eq!(o.dst_regs, [number("x0"), 0]);
        assert_eq!(o.src_regs.iter().filter(|&&n| n != 0).count(), 3);
        // fmadd d0, d1, d2, d3: four vector registers, none special.
        let o = ops(0x1f420c20);
        assert_eq!(o.dst_regs, [number("v0"), 0]);
        assert_eq!(o.src_regs, [number("v1"), number("v2"), number("v3"), 0]);
        // No ordinary instruction names the instruction pointer.
        for w in [0xf100041fu32, 0xab020020, 0xa8c17bfd, 0x58000040] {
            let o = ops(w);
            assert!(!o.src_regs.contains(&REG_IP) && !o.dst_regs.contains(&REG_IP));
        }
    }

    #[test]
    fn registers_are_numbered_once_and_never_as_the_special_ones() {
        let d = Decoder::new();
        let mut seen = std::collections::HashMap::new();
        for (name, &n) in &d.by_name {
            match name.as_str() {
                "sp" => assert_eq!(n, REG_SP),
                "nzcv" => assert_eq!(n, REG_FLAGS),
                _ => assert!(!reserved(n), "{name} got {n}"),
            }
            assert!(seen.insert(n, name).is_none(), "{n} names two registers");
        }
        assert_eq!(canonical("w7"), canonical("x7"));
        assert_eq!(canonical("q3"), canonical("d3"));
        assert_eq!(canonical("xzr"), None);
        assert_eq!(canonical(""), Some("sys".into()));
        assert_eq!(canonical("tpidr_el0"), Some("sys".into()));
        // Truncated bytes are no instruction.
        assert_eq!(Decoder::new().decode(&[0x1f, 0x20], 0), None);
    }
}
