//! Just enough x86 decoding to find `rep` string instructions and `fldcw`.

/// Skips legacy and REX prefixes; returns (saw F2/F3, index of the opcode byte).
fn prefixes(bytes: &[u8]) -> (bool, usize) {
    let mut rep = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            0xf2 | 0xf3 => rep = true,
            0x66 | 0x67 | 0x2e | 0x36 | 0x3e | 0x26 | 0x64 | 0x65 | 0xf0 => {}
            0x40..=0x4f => {}
            _ => break,
        }
        i += 1;
    }
    (rep, i)
}

/// Whether the instruction is a `rep`/`repe`/`repne`-prefixed string instruction, which QEMU
/// runs as one translation block per iteration but hardware and exp-bbv count once.
pub fn is_rep_string(bytes: &[u8]) -> bool {
    let (rep, i) = prefixes(bytes);
    rep && matches!(bytes.get(i), Some(0x6c..=0x6f | 0xa4..=0xa7 | 0xaa..=0xaf))
}

/// Whether the instruction is `fldcw m16` (D9 /5), which exp-bbv counts separately.
pub fn is_fldcw(bytes: &[u8]) -> bool {
    let (_, i) = prefixes(bytes);
    match (bytes.get(i), bytes.get(i + 1)) {
        (Some(0xd9), Some(&modrm)) => (modrm >> 3) & 7 == 5 && modrm >> 6 != 3,
        _ => false,
    }
}

/// Whether a block ending with this instruction can close a loop or leave a function: a
/// backward direct jump, a return, or an indirect jump or call. Any long run of instructions
/// passes such blocks often, so checking interval boundaries only there keeps cuts close.
pub fn may_loop(bytes: &[u8]) -> bool {
    let (_, i) = prefixes(bytes);
    let rel8 = |at: usize| bytes.get(at).is_some_and(|&b| (b as i8) < 0);
    let rel32 = |at: usize| bytes.get(at + 3).is_some_and(|&b| (b as i8) < 0);
    match bytes.get(i) {
        Some(0x70..=0x7f | 0xe0..=0xe3 | 0xeb) => rel8(i + 1),
        Some(0xe9) => rel32(i + 1),
        Some(0x0f) => matches!(bytes.get(i + 1), Some(0x80..=0x8f)) && rel32(i + 2),
        Some(0xc2 | 0xc3 | 0xca | 0xcb) => true,
        Some(0xff) => bytes
            .get(i + 1)
            .is_some_and(|&m| matches!((m >> 3) & 7, 2..=5)),
        _ => false,
    }
}

/// Whether the instruction is a conditional branch (Jcc, LOOP*, JCXZ): its direction feeds
/// the branch predictor of `metrics`.
pub fn is_cond_branch(bytes: &[u8]) -> bool {
    let (_, i) = prefixes(bytes);
    match bytes.get(i) {
        Some(0x70..=0x7f | 0xe0..=0xe3) => true,
        Some(0x0f) => matches!(bytes.get(i + 1), Some(0x80..=0x8f)),
        _ => false,
    }
}

/// The target of a backward direct jump or conditional jump (the instruction `bytes` at
/// `vaddr`): a loop head, where multi-threaded slices may end.
pub fn backward_target(bytes: &[u8], vaddr: u64) -> Option<u64> {
    let (_, i) = prefixes(bytes);
    let rel32 = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as i64)
    };
    let disp = match *bytes.get(i)? {
        0x70..=0x7f | 0xe0..=0xe3 | 0xeb => *bytes.get(i + 1)? as i8 as i64,
        0xe9 => rel32(i + 1)?,
        0x0f if matches!(bytes.get(i + 1), Some(0x80..=0x8f)) => rel32(i + 2)?,
        _ => return None,
    };
    (disp < 0).then(|| {
        vaddr
            .wrapping_add(bytes.len() as u64)
            .wrapping_add(disp as u64)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rep_string_instructions() {
        assert!(is_rep_string(&[0xf3, 0xa4])); // rep movsb
        assert!(is_rep_string(&[0xf3, 0x48, 0xab])); // rep stosq
        assert!(is_rep_string(&[0xf2, 0xae])); // repne scasb
        assert!(!is_rep_string(&[0xa4])); // movsb without rep
        assert!(!is_rep_string(&[0xf3, 0xc3])); // repz ret is not a string instruction
        assert!(!is_rep_string(&[0xf3, 0x0f, 0x1e, 0xfa])); // endbr64
    }

    #[test]
    fn fldcw_and_loops() {
        assert!(is_fldcw(&[0xd9, 0x6c, 0x24, 0xfe])); // fldcw -2(%rsp)
        assert!(!is_fldcw(&[0xd9, 0xe8])); // fld1
        assert!(may_loop(&[0x75, 0xfb])); // jne .-3
        assert!(!may_loop(&[0x75, 0x05])); // jne forward
        assert!(may_loop(&[0x0f, 0x85, 0x00, 0xff, 0xff, 0xff])); // jne rel32 backward
        assert!(may_loop(&[0xc3])); // ret
        assert!(may_loop(&[0xf3, 0xc3])); // repz ret
        assert!(may_loop(&[0xff, 0xe0])); // jmp *%rax
        assert!(!may_loop(&[0xe8, 0, 0, 0, 0])); // call
        assert!(!may_loop(&[0x0f, 0x05])); // syscall
    }

    #[test]
    fn loop_heads() {
        assert_eq!(backward_target(&[0x75, 0xfb], 0x1000), Some(0x0ffd)); // jne .-3
        assert_eq!(backward_target(&[0x75, 0x05], 0x1000), None); // jne forward
        let jne32 = [0x0f, 0x85, 0xf0, 0xff, 0xff, 0xff];
        assert_eq!(backward_target(&jne32, 0x1000), Some(0x0ff6));
        assert_eq!(
            backward_target(&[0xe9, 0xfb, 0xff, 0xff, 0xff], 0x10),
            Some(0x10)
        );
        assert_eq!(backward_target(&[0xc3], 0x10), None); // ret
    }

    #[test]
    fn conditional_branches() {
        assert!(is_cond_branch(&[0x75, 0xfb])); // jne
        assert!(is_cond_branch(&[0x0f, 0x84, 0, 0, 0, 0])); // je rel32
        assert!(is_cond_branch(&[0xe2, 0xfe])); // loop
        assert!(!is_cond_branch(&[0xeb, 0xfe])); // jmp
        assert!(!is_cond_branch(&[0xc3])); // ret
        assert!(!is_cond_branch(&[0x0f, 0x05])); // syscall
    }

    /// Every instruction of the C library's and the maths library's code, decoded by iced-x86
    /// (the decoder bbv-champsim's records come from): the byte matchers above agree with it on
    /// each, and the kinds they look for all occur, so that agreement is not vacuous.
    #[test]
    fn matchers_agree_with_iced_x86_on_real_code() {
        use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};
        use object::{Object, ObjectSection, SectionKind};
        let libs = ["libc.so.6", "libm.so.6"].map(|l| {
            [
                "/lib/x86_64-linux-gnu",
                "/usr/lib/x86_64-linux-gnu",
                "/lib64",
            ]
            .iter()
            .map(|d| std::path::Path::new(d).join(l))
            .find(|p| p.exists())
            .unwrap_or_else(|| panic!("{l}: not found (an x86-64 Debian has it)"))
        });
        let strings = [
            Code::Insb_m8_DX,
            Code::Insw_m16_DX,
            Code::Insd_m32_DX,
            Code::Outsb_DX_m8,
            Code::Outsw_DX_m16,
            Code::Outsd_DX_m32,
            Code::Movsb_m8_m8,
            Code::Movsw_m16_m16,
            Code::Movsd_m32_m32,
            Code::Movsq_m64_m64,
            Code::Cmpsb_m8_m8,
            Code::Cmpsw_m16_m16,
            Code::Cmpsd_m32_m32,
            Code::Cmpsq_m64_m64,
            Code::Stosb_m8_AL,
            Code::Stosw_m16_AX,
            Code::Stosd_m32_EAX,
            Code::Stosq_m64_RAX,
            Code::Lodsb_AL_m8,
            Code::Lodsw_AX_m16,
            Code::Lodsd_EAX_m32,
            Code::Lodsq_RAX_m64,
            Code::Scasb_AL_m8,
            Code::Scasw_AX_m16,
            Code::Scasd_EAX_m32,
            Code::Scasq_RAX_m64,
        ];
        // Instructions seen per property (rep string, fldcw, conditional, backward, loop end).
        let mut seen = [0u64; 5];
        let mut total = 0u64;
        for lib in &libs {
            let data = std::fs::read(lib).unwrap();
            let elf = object::File::parse(&*data).unwrap();
            for s in elf.sections().filter(|s| s.kind() == SectionKind::Text) {
                let code = s.data().unwrap();
                let mut d = Decoder::with_ip(64, code, s.address(), DecoderOptions::NONE);
                let mut i = Instruction::default();
                while d.can_decode() {
                    let at = (d.position(), d.ip());
                    d.decode_out(&mut i);
                    if i.is_invalid() {
                        continue;
                    }
                    let bytes = &code[at.0..at.0 + i.len()];
                    let what =
                        || format!("{} {:#x} {bytes:02x?} {:?}", lib.display(), at.1, i.code());
                    total += 1;
                    let rep =
                        (i.has_rep_prefix() || i.has_repne_prefix()) && strings.contains(&i.code());
                    let flow = i.flow_control();
                    let direct = matches!(
                        flow,
                        FlowControl::ConditionalBranch | FlowControl::UnconditionalBranch
                    );
                    let back = (direct && i.near_branch_target() < i.next_ip())
                        .then(|| i.near_branch_target());
                    let ends_loop = back.is_some()
                        || matches!(
                            flow,
                            FlowControl::IndirectBranch | FlowControl::IndirectCall
                        )
                        || matches!(i.mnemonic(), Mnemonic::Ret | Mnemonic::Retf);
                    let fldcw = i.code() == Code::Fldcw_m2byte;
                    let cond = flow == FlowControl::ConditionalBranch;
                    assert_eq!(is_rep_string(bytes), rep, "rep string: {}", what());
                    assert_eq!(is_fldcw(bytes), fldcw, "fldcw: {}", what());
                    assert_eq!(is_cond_branch(bytes), cond, "conditional: {}", what());
                    assert_eq!(backward_target(bytes, at.1), back, "backward: {}", what());
                    assert_eq!(may_loop(bytes), ends_loop, "may loop: {}", what());
                    for (n, hit) in
                        seen.iter_mut()
                            .zip([rep, fldcw, cond, back.is_some(), ends_loop])
                    {
                        *n += u64::from(hit);
                    }
                }
            }
        }
        assert!(total > 100_000, "{total} instructions");
        assert!(seen.iter().all(|&n| n > 0), "{seen:?} of {total}");
    }
}
