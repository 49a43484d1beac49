//! Which blocks may close a loop or leave a function, for AArch64 and RISC-V (x86 is in x86.rs).
//! A backward direct branch, a return or an indirect branch qualifies; calls do not.

/// AArch64: the block's last instruction word.
pub fn aarch64_may_loop(bytes: &[u8]) -> bool {
    let Some(w) = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return true;
    };
    // Backward or to itself: the offset's sign bit is set, or the offset is zero.
    let back = |shift: u32, width: u32| {
        let imm = (w >> shift) & ((1 << width) - 1);
        imm == 0 || imm >> (width - 1) == 1
    };
    if w & 0xfc00_0000 == 0x1400_0000 {
        back(0, 26) // B
    } else if w & 0xff00_0010 == 0x5400_0000 || w & 0x7e00_0000 == 0x3400_0000 {
        back(5, 19) // B.cond, CBZ, CBNZ
    } else if w & 0x7e00_0000 == 0x3600_0000 {
        back(5, 14) // TBZ, TBNZ
    } else {
        w & 0xfe00_0000 == 0xd600_0000 // BR, BLR, RET and their authenticated forms
    }
}

/// AArch64: the target of a backward direct branch (B, B.cond, CBZ/CBNZ, TBZ/TBNZ) at
/// `vaddr`: a loop head.
pub fn aarch64_backward_target(bytes: &[u8], vaddr: u64) -> Option<u64> {
    let w = u32::from_le_bytes(bytes.get(..4)?.try_into().ok()?);
    let (shift, width) = if w & 0xfc00_0000 == 0x1400_0000 {
        (0, 26)
    } else if w & 0xff00_0010 == 0x5400_0000 || w & 0x7e00_0000 == 0x3400_0000 {
        (5, 19)
    } else if w & 0x7e00_0000 == 0x3600_0000 {
        (5, 14)
    } else {
        return None;
    };
    let imm = ((w >> shift) & ((1 << width) - 1)) as i64;
    let disp = (imm << (64 - width)) >> (64 - width);
    (disp <= 0).then(|| vaddr.wrapping_add((disp * 4) as u64))
}

/// AArch64: a conditional branch (B.cond, CBZ/CBNZ, TBZ/TBNZ).
pub fn aarch64_is_cond_branch(bytes: &[u8]) -> bool {
    let Some(w) = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return false;
    };
    w & 0xff00_0010 == 0x5400_0000
        || w & 0x7e00_0000 == 0x3400_0000
        || w & 0x7e00_0000 == 0x3600_0000
}

/// RISC-V: a conditional branch (BEQ..BGEU, C.BEQZ, C.BNEZ).
pub fn riscv64_is_cond_branch(bytes: &[u8]) -> bool {
    match bytes.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]])) {
        Some(h) if h & 3 != 3 => h & 3 == 1 && matches!(h >> 13, 0b110 | 0b111),
        Some(h) => h & 0x7f == 0x63,
        None => false,
    }
}

/// RISC-V (RV64GC): the block's last instruction, 2 or 4 bytes.
pub fn riscv64_may_loop(bytes: &[u8]) -> bool {
    let Some(h) = bytes.get(..2).map(|b| u16::from_le_bytes([b[0], b[1]])) else {
        return true;
    };
    if h & 3 != 3 {
        let funct3 = h >> 13;
        let neg = h >> 12 & 1 == 1;
        return match (h & 3, funct3) {
            (1, 0b101) => neg || h >> 2 & 0x7ff == 0, // C.J
            (1, 0b110 | 0b111) => neg || (h >> 10 & 7 == 0 && h >> 2 & 0x1f == 0), // C.BEQZ, C.BNEZ
            (2, 0b100) => h >> 2 & 0x1f == 0 && h >> 7 & 0x1f != 0, // C.JR, C.JALR
            _ => false,
        };
    }
    let Some(w) = bytes
        .get(..4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    else {
        return true;
    };
    match w & 0x7f {
        0x63 => w >> 31 == 1 || (w >> 25 == 0 && (w >> 7) & 0x1f == 0), // branches
        0x6f => (w >> 31 == 1 || w >> 12 == 0) && (w >> 7) & 0x1f == 0, // JAL x0 (a jump, not a call)
        0x67 => true, // JALR: returns and indirect jumps
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aarch64_branches() {
        assert!(aarch64_may_loop(&0x17ff_ffffu32.to_le_bytes())); // b .-4
        assert!(!aarch64_may_loop(&0x1400_0002u32.to_le_bytes())); // b .+8
        assert!(aarch64_may_loop(&0x54ff_ffe1u32.to_le_bytes())); // b.ne .-4
        assert!(aarch64_may_loop(&0xd65f_03c0u32.to_le_bytes())); // ret
        assert!(!aarch64_may_loop(&0x9400_0010u32.to_le_bytes())); // bl
        assert!(aarch64_may_loop(&0x1400_0000u32.to_le_bytes())); // b .
        let t = |w: u32| aarch64_backward_target(&w.to_le_bytes(), 0x1000);
        assert_eq!(t(0x17ff_ffff), Some(0x0ffc)); // b .-4
        assert_eq!(t(0x54ff_ffe1), Some(0x0ffc)); // b.ne .-4
        assert_eq!(t(0x1400_0002), None); // b .+8
        assert_eq!(t(0xd65f_03c0), None); // ret
    }

    #[test]
    fn riscv_branches() {
        assert!(riscv64_may_loop(&0x0002_9063u32.to_le_bytes())); // bnez t0, .
        assert!(riscv64_may_loop(&0x8082u16.to_le_bytes())); // ret (c.jr ra)
        assert!(!riscv64_may_loop(&0x0001u16.to_le_bytes())); // c.nop
        assert!(riscv64_may_loop(&0xa001u16.to_le_bytes())); // c.j .
        assert!(riscv64_may_loop(&0xbffdu16.to_le_bytes())); // c.j .-2
        assert!(!riscv64_may_loop(&0x0000_8463u32.to_le_bytes())); // beqz ra, .+8
    }

    #[test]
    fn conditional_branches() {
        assert!(aarch64_is_cond_branch(&0x54ff_ffe1u32.to_le_bytes())); // b.ne
        assert!(aarch64_is_cond_branch(&0xb400_0040u32.to_le_bytes())); // cbz x0
        assert!(aarch64_is_cond_branch(&0x3600_0040u32.to_le_bytes())); // tbz w0
        assert!(!aarch64_is_cond_branch(&0x17ff_ffffu32.to_le_bytes())); // b
        assert!(!aarch64_is_cond_branch(&0xd65f_03c0u32.to_le_bytes())); // ret
        assert!(riscv64_is_cond_branch(&0x0002_9063u32.to_le_bytes())); // bnez t0
        assert!(riscv64_is_cond_branch(&0xc111u16.to_le_bytes())); // c.beqz a0
        assert!(!riscv64_is_cond_branch(&0xa001u16.to_le_bytes())); // c.j
        assert!(!riscv64_is_cond_branch(&0x8082u16.to_le_bytes())); // ret
    }

    /// Every word of the AArch64 C library's code (the cross libc the AArch64 tests link
    /// against), disassembled by Capstone (bbv-champsim's AArch64 decoder): the matchers agree
    /// with it on every instruction it decodes, and each kind occurs.
    #[test]
    fn aarch64_matchers_agree_with_capstone_on_real_code() {
        use capstone::arch::arm64::ArchMode;
        use capstone::arch::BuildsCapstone;
        use object::{Object, ObjectSection, SectionKind};
        let lib = "/usr/aarch64-linux-gnu/lib/libc.so.6";
        let data = std::fs::read(lib).expect("scripts/apt-packages.txt installs it");
        let elf = object::File::parse(&*data).unwrap();
        let cs = capstone::Capstone::new()
            .arm64()
            .mode(ArchMode::Arm)
            .build()
            .unwrap();
        let indirect = [
            "br", "blr", "ret", "braa", "brab", "braaz", "brabz", "blraa", "blrab", "blraaz",
            "blrabz", "retaa", "retab", "eret", "eretaa", "eretab", "drps",
        ];
        // Per property (conditional, backward target, may loop): instructions where it held.
        let (mut seen, mut total) = ([0u64; 3], 0u64);
        for s in elf.sections().filter(|s| s.kind() == SectionKind::Text) {
            let code = s.data().unwrap();
            for (i, bytes) in code.chunks_exact(4).enumerate() {
                let at = s.address() + 4 * i as u64;
                let Ok(insns) = cs.disasm_count(bytes, at, 1) else {
                    continue;
                };
                let Some(insn) = insns.iter().next() else {
                    continue;
                };
                let m = insn.mnemonic().unwrap_or("");
                if m.starts_with("bc.") {
                    continue; // FEAT_HBC's hinted branches: not in the matchers' table
                }
                total += 1;
                let cond = m.starts_with("b.") || matches!(m, "cbz" | "cbnz" | "tbz" | "tbnz");
                let direct = cond || m == "b";
                let target = direct
                    .then(|| {
                        let ops = insn.op_str().unwrap_or("");
                        let hex = ops.rsplit("#0x").next().unwrap();
                        u64::from_str_radix(hex, 16).unwrap()
                    })
                    .filter(|&t| t <= at);
                let may = target.is_some() || indirect.contains(&m);
                let what = || {
                    format!(
                        "{at:#x} {:08x} {m} {}",
                        u32::from_le_bytes(bytes.try_into().unwrap()),
                        insn.op_str().unwrap_or("")
                    )
                };
                assert_eq!(
                    aarch64_is_cond_branch(bytes),
                    cond,
                    "conditional: {}",
                    what()
                );
                assert_eq!(
                    aarch64_backward_target(bytes, at),
                    target,
                    "backward: {}",
                    what()
                );
                assert_eq!(aarch64_may_loop(bytes), may, "may loop: {}", what());
                for (n, hit) in seen.iter_mut().zip([cond, target.is_some(), may]) {
                    *n += u64::from(hit);
                }
            }
        }
        assert!(total > 100_000, "{total} instructions");
        assert!(seen.iter().all(|&n| n > 0), "{seen:?} of {total}");
    }

    /// Every instruction of the RISC-V 64 C library's code (linear, 2 or 4 bytes each),
    /// decoded by rvdasm (bbv-champsim's RISC-V decoder): the matchers agree with it.
    #[test]
    fn riscv_matchers_agree_with_rvdasm_on_real_code() {
        use object::{Object, ObjectSection, SectionKind};
        use rvdasm::args::Arg;
        use rvdasm::disassembler::{Disassembler, Xlen};
        let lib = "/usr/riscv64-linux-gnu/lib/libc.so.6";
        let data = std::fs::read(lib).expect("scripts/apt-packages.txt installs it");
        let elf = object::File::parse(&*data).unwrap();
        let dis = Disassembler::new(Xlen::XLEN64);
        let conds = [
            "beq", "bne", "blt", "bge", "bltu", "bgeu", "c.beqz", "c.bnez",
        ];
        let (mut seen, mut total) = ([0u64; 2], 0u64);
        for s in elf.sections().filter(|s| s.kind() == SectionKind::Text) {
            let code = s.data().unwrap();
            let mut i = 0;
            while i + 2 <= code.len() {
                let low = u16::from_le_bytes([code[i], code[i + 1]]);
                let len = if low & 3 == 3 { 4 } else { 2 };
                let Some(bytes) = code.get(i..i + len) else {
                    break;
                };
                let word = match len {
                    4 => u32::from_le_bytes(bytes.try_into().unwrap()),
                    _ => u32::from(low),
                };
                let at = s.address() + i as u64;
                i += len;
                let Some(insn) = dis.disassmeble_one(word) else {
                    continue;
                };
                total += 1;
                let name = insn.get_name();
                let imm = insn.operands().find_map(|(_, a)| match a {
                    Arg::Imm(v) => Some(v),
                    _ => None,
                });
                let rd = insn.operands().find_map(|(_, a)| match a {
                    Arg::DstReg(r) => Some(r),
                    _ => None,
                });
                let back = imm.is_some_and(|v| v <= 0);
                let cond = conds.contains(&name);
                let may = match name {
                    "jalr" | "c.jr" | "c.jalr" => true,
                    "c.j" => back,
                    "jal" => back && rd == Some(0),
                    _ => cond && back,
                };
                let what = || format!("{at:#x} {word:08x} {}", insn.to_string());
                assert_eq!(
                    riscv64_is_cond_branch(bytes),
                    cond,
                    "conditional: {}",
                    what()
                );
                assert_eq!(riscv64_may_loop(bytes), may, "may loop: {}", what());
                for (n, hit) in seen.iter_mut().zip([cond, may]) {
                    *n += u64::from(hit);
                }
            }
        }
        assert!(total > 100_000, "{total} instructions");
        assert!(seen.iter().all(|&n| n > 0), "{seen:?} of {total}");
    }
}
