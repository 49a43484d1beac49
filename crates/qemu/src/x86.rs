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
