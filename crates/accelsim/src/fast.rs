//! The fast path for instruction lines written the tracer's own way: single spaces, an 8-digit
//! mask, addresses only stepped over. A line's spaces are found once as a bitmap (a line under
//! 64 bytes, most of them, together with its newline, from one 64-byte window); every token
//! boundary is then a trailing-zero count instead of a byte loop.
//!
//! Anything unusual returns `None` and goes through the general tokenizer, which also words the
//! errors; what this path accepts it parses exactly as the general path would (tested on the
//! tracer's spellings and on random lines).

use crate::records::{AddressMode, Instruction};

/// Value of a hex digit, or 0xff: a table, because digit classes vary unpredictably.
static HEX: [u8; 256] = {
    let mut t = [0xffu8; 256];
    let mut i = 0;
    while i < 10 {
        t[b'0' as usize + i] = i as u8;
        i += 1;
    }
    let mut i = 0;
    while i < 6 {
        t[b'a' as usize + i] = 10 + i as u8;
        t[b'A' as usize + i] = 10 + i as u8;
        i += 1;
    }
    t
};

/// `R<digits>` or `UR<digits>` (both paths' register test), with the usual one to three
/// digits checked without a loop.
#[inline(always)]
pub(crate) fn is_register(t: &[u8]) -> bool {
    let digit = |b: &u8| b.wrapping_sub(b'0') <= 9;
    let d = match t {
        [b'R', d @ ..] => d,
        [b'U', b'R', d @ ..] => d,
        _ => return false,
    };
    match d {
        [a] => digit(a),
        [a, b] => digit(a) & digit(b),
        [a, b, c] => digit(a) & digit(b) & digit(c),
        _ => !d.is_empty() && d.iter().all(digit),
    }
}

/// Longest line taken by the fast path (a full warp's address list is about 700 bytes).
const MAX_LINE: usize = 1024;
const WORDS: usize = MAX_LINE / 64;

/// Bytes of `c` equal to `b`, as a bitmask.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
pub(crate) fn eq16(c: &[u8; 16], b: u8) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: SSE2 is part of the x86_64 baseline; the load reads exactly the 16 bytes of `c`
    // (unaligned loads allowed).
    unsafe {
        let v = _mm_loadu_si128(c.as_ptr().cast());
        _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8))) as u32
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
pub(crate) fn eq16(c: &[u8; 16], b: u8) -> u32 {
    c.iter()
        .enumerate()
        .fold(0, |m, (k, &x)| m | (u32::from(x == b) << k))
}

/// Bytes of `c` that are not ASCII, as a bitmask.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn high16(c: &[u8; 16]) -> u32 {
    use std::arch::x86_64::*;
    // SAFETY: as in `eq16`.
    unsafe { _mm_movemask_epi8(_mm_loadu_si128(c.as_ptr().cast())) as u32 }
}

/// Bytes of `c` that are not ASCII, as a bitmask.
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn high16(c: &[u8; 16]) -> u32 {
    // Bytes >= 0x80 are those whose top bit is set: compare that bit with itself.
    let top = c.map(|x| x & 0x80);
    eq16(&top, 0x80)
}

/// Bytes of `c` that are spaces, and bytes that are tabs or not ASCII, as bitmasks.
#[inline(always)]
fn mask16(c: &[u8; 16]) -> (u32, u32) {
    (eq16(c, b' '), eq16(c, b'\t') | high16(c))
}

/// Position of the first newline in `h`: short distances (most lines) inline, 16 bytes at a
/// time; longer ones through `memchr`.
#[inline(always)]
pub(crate) fn find_newline(h: &[u8]) -> Option<usize> {
    let mut i = 0;
    while i + 16 <= h.len() && i < 128 {
        let m = eq16(h[i..i + 16].try_into().unwrap(), b'\n');
        if m != 0 {
            return Some(i + m.trailing_zeros() as usize);
        }
        i += 16;
    }
    memchr::memchr(b'\n', &h[i..]).map(|k| i + k)
}

/// A line of 64 bytes or more and the positions of its spaces (`new` gives `None`, the general
/// path, for lines with a tab, a byte that is not ASCII, a leading space, two spaces in a row,
/// or more than [`MAX_LINE`] bytes; [`Short`] declines the same).
struct Long<'a, 'm> {
    s: &'a [u8],
    spaces: &'m [u64; WORDS],
    /// Start of the next token (past the line's end once the tokens are used up).
    i: usize,
    /// Index of the bitmap word being consumed.
    w: usize,
    /// Its spaces not yet consumed: tokens are taken in order, one space after each, so the next
    /// token's end is the lowest bit left (clearing it is the only step that waits on the last).
    cur: u64,
}

impl<'a, 'm> Long<'a, 'm> {
    /// Each bitmap word is assembled in a register and stored once: read-modify-writes of the
    /// array stalled the loads that followed (store forwarding).
    #[inline(always)]
    fn new(s: &'a [u8], spaces: &'m mut [u64; WORDS]) -> Option<Self> {
        let n = s.len();
        if n > MAX_LINE {
            return None;
        }
        let (mut odd, mut carry) = (0u32, 0u64);
        for (k, word) in spaces.iter_mut().enumerate().take(n.div_ceil(64)) {
            let (sp, o) = piece_masks(s, 64 * k, n.min(64 * k + 64));
            *word = sp;
            odd |= o;
            // Two spaces in a row, also across words.
            if sp & ((sp << 1) | carry) != 0 {
                return None;
            }
            carry = sp >> 63;
        }
        if odd != 0 || spaces[0] & 1 != 0 {
            return None;
        }
        Some(Long {
            s,
            spaces,
            i: 0,
            w: 0,
            cur: spaces[0],
        })
    }
}

/// Spaces, and tabs or bytes that are not ASCII, among the at most 64 bytes `s[from..to]`, as
/// bitmasks counted from `from`. An end piece shorter than 16 bytes is read as the 16 bytes
/// before `to`, so that only a whole line under 16 bytes is ever copied.
#[inline(always)]
fn piece_masks(s: &[u8], from: usize, to: usize) -> (u64, u32) {
    debug_assert!(from < to && to - from <= 64 && to <= s.len());
    if to < 16 {
        let mut c = [0u8; 16];
        c[..to].copy_from_slice(&s[..to]);
        let (sp, odd) = mask16(&c);
        return (u64::from(sp), odd);
    }
    let (mut sp, mut odd) = (0u64, 0u32);
    let mut i = from;
    while i + 16 <= to {
        let (a, b) = mask16(s[i..i + 16].try_into().unwrap());
        sp |= u64::from(a) << (i - from);
        odd |= b;
        i += 16;
    }
    if i < to {
        // Of the last 16 bytes, only the top `to - i` are new.
        let (a, b) = mask16(s[to - 16..to].try_into().unwrap());
        let shift = 16 - (to - i);
        sp |= u64::from(a >> shift) << (i - from);
        odd |= b >> shift;
    }
    (sp, odd)
}

/// A line's tokens in order, each followed by one space (or the line's end).
trait Tokens<'a> {
    /// The next token (never empty: no leading or double spaces), stepping over the space
    /// after it.
    fn word(&mut self) -> Option<&'a [u8]>;

    /// Whether every token has been taken.
    fn done(&self) -> bool;

    #[inline(always)]
    fn skip(&mut self, k: usize) -> Option<()> {
        for _ in 0..k {
            self.word()?;
        }
        Some(())
    }

    #[inline(always)]
    fn dec(&mut self) -> Option<u64> {
        dec(self.word()?)
    }

    /// A register count (at most 8, as the general path allows) and that many registers.
    #[inline(always)]
    fn registers(&mut self) -> Option<u64> {
        let n = self.dec()?;
        if n > 8 {
            return None;
        }
        for _ in 0..n {
            if !is_register(self.word()?) {
                return None;
            }
        }
        Some(n)
    }
}

impl<'a> Tokens<'a> for Long<'a, '_> {
    #[inline(always)]
    fn word(&mut self) -> Option<&'a [u8]> {
        let (s, i) = (self.s, self.i);
        if i >= s.len() {
            return None;
        }
        let end = loop {
            if self.cur != 0 {
                let end = self.w * 64 + self.cur.trailing_zeros() as usize;
                self.cur &= self.cur - 1;
                break end;
            }
            self.w += 1;
            if self.w * 64 >= s.len() {
                break s.len();
            }
            self.cur = self.spaces[self.w];
        };
        self.i = end + 1;
        Some(&s[i..end])
    }

    #[inline(always)]
    fn done(&self) -> bool {
        self.i >= self.s.len()
    }
}

/// A line of fewer than 64 bytes (most instruction lines without addresses): its spaces, and
/// its end unless a space is there already, are the bits of one word, so a token is a
/// trailing-zero count and nothing else.
struct Short<'a> {
    s: &'a [u8],
    i: usize,
    ends: u64,
}

impl<'a> Short<'a> {
    #[inline(always)]
    fn new(s: &'a [u8]) -> Option<Self> {
        debug_assert!(s.len() < 64);
        if s.is_empty() {
            return None;
        }
        let (spaces, odd) = piece_masks(s, 0, s.len());
        Self::from_masks(s, spaces, odd != 0)
    }

    /// From the line's spaces and whether it holds a tab or a byte that is not ASCII.
    #[inline(always)]
    fn from_masks(s: &'a [u8], spaces: u64, odd: bool) -> Option<Self> {
        let n = s.len();
        if odd || spaces & 1 != 0 || spaces & (spaces << 1) != 0 {
            return None;
        }
        let open = n > 0 && s[n - 1] != b' ';
        Some(Short {
            s,
            i: 0,
            ends: spaces | (u64::from(open) << n),
        })
    }
}

impl<'a> Tokens<'a> for Short<'a> {
    #[inline(always)]
    fn word(&mut self) -> Option<&'a [u8]> {
        if self.ends == 0 {
            return None;
        }
        let end = self.ends.trailing_zeros() as usize;
        self.ends &= self.ends - 1;
        // SAFETY: `ends` only has bits at or below the line's length, taken in increasing order,
        // and `i` is one past the last one taken, so `i <= end <= s.len()` (checking cost a
        // sixth of the parse).
        let t = unsafe { self.s.get_unchecked(self.i..end) };
        self.i = end + 1;
        Some(t)
    }

    #[inline(always)]
    fn done(&self) -> bool {
        self.ends == 0
    }
}

/// Newlines, spaces, and tabs or bytes that are not ASCII among 64 bytes, as bitmasks: a short
/// line is found and its tokens located in one pass.
#[inline(always)]
pub(crate) fn masks64(h: &[u8; 64]) -> (u64, u64, u64) {
    // A cached flag: in a caller built for AVX2 (the counting loop is) the 32-byte version is
    // inlined; elsewhere the branch is never taken on CPUs without AVX2.
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (just checked).
        return unsafe { masks64_avx2(h) };
    }
    masks64_sse2(h)
}

/// [`masks64`] 32 bytes at a time.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
fn masks64_avx2(h: &[u8; 64]) -> (u64, u64, u64) {
    use std::arch::x86_64::*;
    let bits = |v: __m256i| u64::from(_mm256_movemask_epi8(v) as u32);
    let eq = |v: __m256i, c: u8| _mm256_cmpeq_epi8(v, _mm256_set1_epi8(c as i8));
    // SAFETY: both loads read within `h` (unaligned loads allowed).
    let (a, b) = unsafe {
        (
            _mm256_loadu_si256(h.as_ptr().cast()),
            _mm256_loadu_si256(h.as_ptr().add(32).cast()),
        )
    };
    let two = |f: &dyn Fn(__m256i) -> __m256i| bits(f(a)) | bits(f(b)) << 32;
    (
        two(&|v| eq(v, b'\n')),
        two(&|v| eq(v, b' ')),
        // Tabs, and bytes with the top bit set (movemask reads that bit).
        two(&|v| _mm256_or_si256(eq(v, b'\t'), v)),
    )
}

/// [`masks64`] 16 bytes at a time (SSE2, every x86-64).
#[inline(always)]
fn masks64_sse2(h: &[u8; 64]) -> (u64, u64, u64) {
    let (mut nl, mut sp, mut odd) = (0u64, 0u64, 0u64);
    for k in 0..4 {
        let c: &[u8; 16] = h[16 * k..16 * k + 16].try_into().unwrap();
        nl |= u64::from(eq16(c, b'\n')) << (16 * k);
        let (s, o) = mask16(c);
        sp |= u64::from(s) << (16 * k);
        odd |= u64::from(o) << (16 * k);
    }
    (nl, sp, odd)
}

/// An instruction whose opcode is kept as its place in the line, so that the result holds no
/// borrow of the line: when parsing fails, the reader goes on to read the line another way
/// (the borrow checker rejects that when a failed parse's result borrows the buffer).
pub(crate) struct Detached {
    inst: Instruction<'static>,
    op: (usize, usize),
}

impl Detached {
    /// The instruction, its opcode taken from `line`.
    ///
    /// # Safety
    /// `line` must hold the bytes the instruction was parsed from, whose opcode bytes the
    /// parser found to be ASCII (checking them again cost 4% of a short line).
    #[inline(always)]
    pub(crate) unsafe fn attach(self, line: &[u8]) -> Instruction<'_> {
        let op = &line[self.op.0..self.op.1];
        debug_assert!(op.is_ascii());
        // SAFETY: ASCII (the caller's promise) is valid UTF-8.
        let opcode = unsafe { std::str::from_utf8_unchecked(op) };
        Instruction {
            opcode,
            ..self.inst
        }
    }
}

/// [`instruction`] for a line of fewer than 64 bytes whose spaces (and whether it holds a tab
/// or a byte that is not ASCII) are known already.
#[inline(always)]
pub(crate) fn short_instruction(
    s: &[u8],
    spaces: u64,
    odd: bool,
    immediate: bool,
) -> Option<Detached> {
    debug_assert!(s.len() < 64);
    let i = parse(Short::from_masks(s, spaces, odd)?, immediate)?;
    let start = i.opcode.as_ptr() as usize - s.as_ptr() as usize;
    Some(Detached {
        op: (start, start + i.opcode.len()),
        inst: Instruction { opcode: "", ..i },
    })
}

/// Up to 16 hexadecimal digits.
#[inline(always)]
pub(crate) fn hex(t: &[u8]) -> Option<u64> {
    if t.is_empty() || t.len() > 16 {
        return None;
    }
    let mut v = 0u64;
    let mut bad = 0u8;
    for &b in t {
        let d = HEX[b as usize];
        bad |= d;
        v = (v << 4) | u64::from(d & 0x0f);
    }
    // Digits are below 16; the "not a digit" mark is 0xff.
    (bad < 16).then_some(v)
}

/// [`hex`] of exactly 8 ASCII bytes (the active mask), all at once in one word.
#[inline(always)]
fn hex8(t: &[u8; 8]) -> Option<u32> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let x = u64::from_le_bytes(*t);
    // Per byte, the top bit of `ge(v, lo)` says v >= lo: for ASCII bytes no carry crosses
    // into the next byte; a byte that is not ASCII is refused below whatever the sum did.
    let ge = |v: u64, lo: u8| v.wrapping_add(u64::from(0x80 - lo) * ONES) & HIGH;
    let digit = ge(x, b'0') & !ge(x, b'9' + 1);
    // Setting bit 5 folds A-F onto a-f (and nothing else onto them).
    let lower = x | (0x20 * ONES);
    let letter = ge(lower, b'a') & !ge(lower, b'f' + 1);
    if x & HIGH != 0 || digit | letter != HIGH {
        return None;
    }
    // Digit values, first character (most significant) in the lowest byte.
    let nib = (x & (0x0f * ONES)) + (letter >> 7) * 9;
    let pairs = ((nib << 4) | (nib >> 8)) & 0x00ff_00ff_00ff_00ff;
    let quads = ((pairs << 8) | (pairs >> 16)) & 0x0000_ffff_0000_ffff;
    Some((((quads << 16) | (quads >> 32)) & 0xffff_ffff) as u32)
}

/// Up to 19 decimal digits.
#[inline(always)]
pub(crate) fn dec(t: &[u8]) -> Option<u64> {
    // Register and operand counts: one digit.
    if let [b] = t {
        let d = b.wrapping_sub(b'0');
        return (d <= 9).then_some(u64::from(d));
    }
    if t.is_empty() || t.len() > 19 {
        return None;
    }
    let mut v = 0u64;
    for &b in t {
        let d = b.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    Some(v)
}

/// Parses a line the tracer's way (see the module documentation), or `None`.
#[inline(always)]
pub(crate) fn instruction(s: &[u8], immediate: bool) -> Option<Instruction<'_>> {
    if s.len() < 64 {
        parse(Short::new(s)?, immediate)
    } else {
        let mut spaces = [0u64; WORDS];
        parse(Long::new(s, &mut spaces)?, immediate)
    }
}

/// The fields of a line, from its tokens.
#[inline(always)]
fn parse<'a>(mut c: impl Tokens<'a>, immediate: bool) -> Option<Instruction<'a>> {
    let pc = hex(c.word()?)?;
    let mask = hex8(c.word()?.try_into().ok()?)?;
    let dst = c.registers()?;
    let op = c.word()?;
    if is_register(op) || op.iter().all(u8::is_ascii_digit) {
        return None;
    }
    // SAFETY: the line is ASCII (the cursor checked), which is valid UTF-8; validating again cost
    // 5% of parsing.
    let opcode = unsafe { std::str::from_utf8_unchecked(op) };
    let src = c.registers()?;
    let mem_width = c.dec()?;
    let mut address_mode = None;
    if mem_width > 0 {
        let lanes = mask.count_ones() as usize;
        let base = |t: &[u8]| hex(t.strip_prefix(b"0x").unwrap_or(t));
        match c.dec()? {
            0 => {
                address_mode = Some(AddressMode::ListAll);
                c.skip(lanes)?;
            }
            1 => {
                address_mode = Some(AddressMode::BaseStride);
                base(c.word()?)?;
                let t = c.word()?;
                dec(t.strip_prefix(b"-").unwrap_or(t))?;
            }
            2 => {
                address_mode = Some(AddressMode::BaseDelta);
                base(c.word()?)?;
                c.skip(lanes.max(1) - 1)?;
            }
            _ => return None,
        }
    }
    let immediate = if immediate {
        let t = c.word()?;
        Some(match t.strip_prefix(b"-") {
            Some(d) => -(dec(d)? as i64),
            None => dec(t)? as i64,
        })
    } else {
        None
    };
    if !c.done() {
        return None;
    }
    Some(Instruction {
        pc,
        mask,
        line_num: None,
        dst_regs: dst as u8,
        opcode,
        src_regs: src as u8,
        mem_width: mem_width as u32,
        address_mode,
        immediate,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::KernelHeader;
    use crate::trace::parse_instruction;
    use proptest::prelude::*;

    /// The general path's reading of a line (forced by asking for its addresses).
    fn general(line: &[u8], immediate: bool) -> Result<Instruction<'_>, String> {
        let h = KernelHeader {
            immediate,
            ..KernelHeader::default()
        };
        let mut addrs = Vec::new();
        parse_instruction(line, &h, [0; 3], 0, Some(&mut addrs))
    }

    /// The fast path accepts the tracer's lines and agrees with the general path on them.
    #[test]
    fn takes_the_tracers_lines_as_the_general_path_does() {
        let full_list: String = (0..32).map(|k| format!("0x7f00000{k:05x} ")).collect();
        let long = format!("0010 ffffffff 1 R4 LDG.E 1 R2 4 0 {full_list}");
        let lines = [
            ("0008 ffffffff 1 R1 MOV 0 0 ", false),
            ("0098 ffffffff 1 R4 LDG.E.CG 1 R4 4 1 0x7fd165500000 4 ", false),
            ("0058 fffffff0 0 EXIT 0 0 ", false),
            ("1020 0000000f 1 R24 LDG.E.128.CONSTANT.SYS 1 R44 16 2 0x7efe7b60c300 16 16 16 2000 ", true),
            ("0030 0000000d 0 STG.E 2 R2 R4 4 2 0x2000 8 4 ", false),
            ("0040 00000001 0 STG.E 2 R2 R4 4 2 0x2000 ", false),
            ("0050 00000000 0 STG.E 2 R2 R4 4 1 0x0 0 ", false),
            ("0010 0000000f 1 R4 LDG.E 1 R2 4 0 0x1000 0x1004 0x1008 0x100c ", false),
            ("0010 0000000f 1 R4 LDG.E 1 R2 4 0 0x1000 0x1004 0x1008 0x100c", false),
            ("0010 ffffffff 1 R1 MOV 0 0 -7 ", true),
            ("0010 ffffffff 1 R1 IADD 1 R2 0 -5", true),
            ("0010 ffffffff 1 R1 IADD 1 R2 0 -5", true),
            ("8 ffffffff 0 NOP 0 0", false),
            (long.as_str(), false),
        ];
        for (line, imm) in lines {
            let fast = instruction(line.as_bytes(), imm).expect(line);
            assert_eq!(Ok(fast), general(line.as_bytes(), imm), "{line}");
        }
        // Unusual spellings fall back (the general path handles or rejects them).
        for odd in [
            "0010  ffffffff 1 R1 MOV 0 0",
            " 0010 ffffffff 1 R1 MOV 0 0",
            "0010 fffffff 1 R1 MOV 0 0",
            "0010 ffffffff 1 R1 MOV 0 0 extra",
            "0010\tffffffff 1 R1 MOV 0 0",
            "0010 ffffffff 1 R1 MOV 0 0  ",
            "0x10 ffffffff 1 R1 MOV 0 0",
            "0010 0000000f 1 R4 LDG.E 1 R2 4 0 0x1000 0x1004 0x1008",
            "0010 0000000f 1 R4 LDG.E 1 R2 4 3 0x1000",
            "",
        ] {
            assert!(instruction(odd.as_bytes(), false).is_none(), "{odd}");
        }
        let too_long = format!("{long}{}", "0 ".repeat(200));
        assert!(instruction(too_long.as_bytes(), false).is_none());
    }

    #[test]
    fn newline_found_at_every_distance() {
        for len in 0..300 {
            let mut h = vec![b'x'; len];
            assert_eq!(find_newline(&h), None, "{len}");
            for at in (0..len).rev() {
                h[at] = b'\n';
                assert_eq!(find_newline(&h), Some(at), "{len} {at}");
            }
        }
        let mut h = vec![0xc3u8; 40];
        h.push(b'\n');
        assert_eq!(find_newline(&h), Some(40));
    }

    /// The next value of a xorshift generator (test inputs without a dependency).
    fn xorshift(rng: &mut u64) -> u64 {
        *rng ^= *rng << 13;
        *rng ^= *rng >> 7;
        *rng ^= *rng << 17;
        *rng
    }

    /// Bytes of `bytes` (at most 64) for which `f` holds, as a bitmask: what the mask readers
    /// compute.
    fn bits(bytes: &[u8], f: impl Fn(u8) -> bool) -> u64 {
        bytes
            .iter()
            .enumerate()
            .fold(0u64, |m, (k, &x)| m | (u64::from(f(x)) << k))
    }

    /// Both builds of `masks64` agree with a byte loop.
    #[test]
    fn masks64_marks_newlines_spaces_tabs_and_high_bytes() {
        let mut rng = 0x2545_f491_4f6c_dd1du64;
        let alphabet = b"\n \t\x80\xffaZ09\r";
        for _ in 0..20_000 {
            let mut h = [0u8; 64];
            for b in &mut h {
                *b = alphabet[(xorshift(&mut rng) >> 40) as usize % alphabet.len()];
            }
            let expected = (
                bits(&h, |x| x == b'\n'),
                bits(&h, |x| x == b' '),
                bits(&h, |x| x == b'\t' || x >= 0x80),
            );
            assert_eq!(masks64_sse2(&h), expected);
            assert_eq!(masks64(&h), expected);
            #[cfg(target_arch = "x86_64")]
            if std::arch::is_x86_feature_detected!("avx2") {
                // SAFETY: AVX2 is there.
                assert_eq!(unsafe { masks64_avx2(&h) }, expected);
            }
        }
    }

    #[test]
    fn masks_mark_spaces_tabs_and_high_bytes() {
        let c: [u8; 16] = *b"a b\tc\xff d  e \x7f\x80\nx";
        let (sp, odd) = mask16(&c);
        assert_eq!(u64::from(sp), bits(&c, |x| x == b' '));
        assert_eq!(u64::from(odd), bits(&c, |x| x == b'\t' || x >= 0x80));
    }

    #[test]
    fn eight_digit_masks_read_as_the_general_path_reads_them() {
        let mut rng = 0x9e37_79b9_7f4a_7c15u64;
        let alphabet = b"0123456789abcdefABCDEFgGxX/:@`\x10\x19\x7f\xc3 ";
        for k in 0..200_000 {
            let mut t = [0u8; 8];
            for b in &mut t {
                // Mostly hex digits, so that valid masks are common.
                let pick = (xorshift(&mut rng) >> 32) as usize;
                *b = if k % 3 == 0 {
                    alphabet[pick % alphabet.len()]
                } else {
                    alphabet[pick % 22]
                };
            }
            assert_eq!(
                hex8(&t),
                hex(&t).map(|v| v as u32),
                "{}",
                String::from_utf8_lossy(&t)
            );
        }
        assert_eq!(hex8(b"ffffffff"), Some(u32::MAX));
        assert_eq!(hex8(b"0000000f"), Some(15));
        assert_eq!(hex8(b"12345678"), Some(0x1234_5678));
        assert_eq!(hex8(b"AbCdEf09"), Some(0xabcd_ef09));
    }

    /// [`short_instruction`] on `line` found in a 64-byte window by [`masks64`], as the reader
    /// finds it (`None` where the line and its newline do not fit).
    fn via_masks64(line: &[u8], imm: bool) -> Option<Instruction<'_>> {
        let mut h = [b'x'; 64];
        h.get_mut(..line.len())?.copy_from_slice(line);
        *h.get_mut(line.len())? = b'\n';
        let (nl, sp, odd) = masks64(&h);
        let n = nl.trailing_zeros() as usize;
        assert_eq!(n, line.len());
        let below = (1u64 << n) - 1;
        let d = short_instruction(&h[..n], sp & below, odd & below != 0, imm)?;
        // SAFETY: `line` is the bytes parsed (copied into `h`).
        Some(unsafe { d.attach(line) })
    }

    /// Tokens a line is assembled from: the tracer's and a few that only the general path takes.
    fn token() -> impl Strategy<Value = String> {
        const TRACER: [&str; 12] = [
            "0", "1", "2", "4", "R1", "UR7", "LDG.E", "0x1000", "-3", "ffffffff", "0000000f",
            "00000000",
        ];
        prop_oneof![
            prop::sample::select(&TRACER[..]).prop_map(String::from),
            "[0-9a-fA-Fx+-]{1,20}",
        ]
    }

    fn separator() -> impl Strategy<Value = &'static str> {
        prop_oneof![8 => Just(" "), 1 => Just("  "), 1 => Just("\t")]
    }

    proptest! {
        /// Whatever the fast path accepts, the general path reads the same way.
        #[test]
        fn never_disagrees_with_the_general_path(
            parts in prop::collection::vec((token(), separator()), 1..60),
            trailing in any::<bool>(),
            imm in any::<bool>(),
        ) {
            let mut line = String::new();
            for (k, (t, sep)) in parts.iter().enumerate() {
                if k > 0 {
                    line.push_str(sep);
                }
                line.push_str(t);
            }
            if trailing {
                line.push(' ');
            }
            if let Some(fast) = instruction(line.as_bytes(), imm) {
                prop_assert_eq!(Ok(fast), general(line.as_bytes(), imm), "{}", line);
            }
            prop_assert_eq!(via_masks64(line.as_bytes(), imm), instruction(line.as_bytes(), imm));
        }

        /// Lines of a valid shape (where the fast path must not give up) agree too.
        #[test]
        fn valid_lines_take_the_fast_path(
            pc in 0u64..0x10_0000,
            mask in any::<u32>(),
            dst in 0usize..4,
            src in 0usize..4,
            mode in 0u8..4,
            imm in any::<bool>(),
            value in any::<i32>(),
        ) {
            let mut line = format!("{pc:04x} {mask:08x} {dst} ");
            for r in 0..dst {
                line.push_str(&format!("R{r} "));
            }
            line.push_str(&format!("OP.X {src} "));
            for r in 0..src {
                line.push_str(&format!("UR{r} "));
            }
            let lanes = mask.count_ones() as usize;
            match mode {
                0 => line.push_str(&format!("4 0 {}", (0..lanes).map(|l| format!("0x{l:x} ")).collect::<String>())),
                1 => line.push_str(&format!("8 1 0x7f00 {value} ")),
                2 => line.push_str(&format!("4 2 0x7f00 {}", (1..lanes).map(|_| format!("{value} ")).collect::<String>())),
                _ => line.push_str("0 "),
            }
            if imm {
                line.push_str(&format!("{value} "));
            }
            let fast = instruction(line.as_bytes(), imm);
            prop_assert!(fast.is_some(), "{}", line);
            if line.len() < 64 {
                prop_assert_eq!(&via_masks64(line.as_bytes(), imm), &fast);
            }
            prop_assert_eq!(Ok(fast.unwrap()), general(line.as_bytes(), imm), "{}", line);
        }
    }
}
