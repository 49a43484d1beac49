use std::path::Path;

use crate::fast::is_register;
use crate::input::Lines;
use crate::records::{AddressMode, Event, Instruction, KernelHeader};
use crate::TraceError;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum State {
    Outside,
    /// After `#BEGIN_TB`, before `thread block =`.
    Begun,
    InBlock,
    /// After `warp =`, before `insts =`.
    WarpNamed,
}

/// Streaming reader of one `kernel-N.traceg` (plain, xz or zstd).
pub struct TraceReader {
    lines: Lines,
    decode: bool,
    addresses: Vec<(u8, u64)>,
    header: KernelHeader,
    state: State,
    block: [u32; 3],
    warp: u32,
    remaining: u64,
    pending: Option<String>,
    /// Instruction lines may take the fast path (no addresses wanted, no line prefix or line
    /// numbers).
    fast: bool,
    /// The CPU runs x86-64-v3 code.
    #[cfg(target_arch = "x86_64")]
    v3: bool,
}

const TRUNCATED: &str = "file ends inside a thread block (truncated trace?)";

fn triple(text: &str) -> Option<[u32; 3]> {
    let t = text.trim().trim_start_matches('(').trim_end_matches(')');
    let mut it = t.split(',').map(|v| v.trim().parse::<u32>());
    match (it.next(), it.next(), it.next(), it.next()) {
        (Some(Ok(a)), Some(Ok(b)), Some(Ok(c)), None) => Some([a, b, c]),
        _ => None,
    }
}

impl TraceReader {
    /// Opens a kernel trace and reads its header.
    pub fn open(path: &Path) -> Result<TraceReader, TraceError> {
        let mut lines = Lines::open(path)?;
        let mut h = KernelHeader::default();
        let mut seen_name = false;
        let mut pending = None;
        loop {
            let Some(line) = lines.next_line()? else {
                return Err(
                    lines.error("file ends inside the header (no '#' line and no thread block)")
                );
            };
            let line = line.trim().to_string();
            let line = line.as_str();
            if line.is_empty() {
                continue;
            }
            if line.starts_with('#') {
                if line.starts_with("#traces format") {
                    h.immediate |= line.trim_end().ends_with("immediate");
                } else {
                    pending = Some(line.to_string());
                }
                break;
            }
            let Some((key, value)) = line
                .strip_prefix('-')
                .and_then(|l| l.split_once('='))
                .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
            else {
                return Err(lines.error(format!(
                    "expected a '-key = value' header line, found '{}'",
                    show(line.as_bytes())
                )));
            };
            let num = |v: &str| -> Result<u64, TraceError> {
                v.parse().map_err(|_| {
                    lines.error(format!("-{key}: '{}' is not a number", show(v.as_bytes())))
                })
            };
            match key.as_str() {
                "kernel name" => {
                    h.name = value;
                    seen_name = true;
                }
                "kernel id" => h.id = num(&value)?,
                "grid dim" => {
                    h.grid = triple(&value).ok_or_else(|| {
                        lines.error(format!(
                            "-grid dim: expected (x,y,z), found '{}'",
                            show(value.as_bytes())
                        ))
                    })?
                }
                "block dim" => {
                    h.block = triple(&value).ok_or_else(|| {
                        lines.error(format!(
                            "-block dim: expected (x,y,z), found '{}'",
                            show(value.as_bytes())
                        ))
                    })?
                }
                "shmem" => h.shmem = num(&value)?,
                "nregs" => h.nregs = num(&value)? as u32,
                "binary version" => h.binary_version = num(&value)? as u32,
                "cuda stream id" => h.stream = num(&value)?,
                "accelsim tracer version" => h.tracer_version = Some(value),
                "enable lineinfo" => h.lineinfo = value == "1",
                _ => {}
            }
        }
        limits(&h).map_err(|why| lines.error(why))?;
        if !seen_name {
            return Err(lines.error("the header has no '-kernel name' line"));
        }
        let major = h
            .tracer_version
            .as_deref()
            .and_then(|v| v.split('.').next())
            .and_then(|v| v.parse::<u32>().ok());
        h.prefix = major.is_none_or(|m| m < 3);
        h.immediate |= major.is_some_and(|m| m >= 5);
        Ok(TraceReader {
            fast: !h.prefix && !h.lineinfo,
            #[cfg(target_arch = "x86_64")]
            v3: crate::x86_64_v3(),
            decode: false,
            addresses: Vec::new(),
            lines,
            header: h,
            state: State::Outside,
            block: [0; 3],
            warp: 0,
            remaining: 0,
            pending,
        })
    }

    /// Decode memory addresses (off by default: counting does not need them).
    pub fn decode_addresses(&mut self, on: bool) {
        self.decode = on;
        self.fast = !on && !self.header.prefix && !self.header.lineinfo;
    }

    /// With [`TraceReader::decode_addresses`] on: `(lane, address)` of every active lane of
    /// the last instruction returned, ascending lanes (empty for other instructions).
    pub fn addresses(&self) -> &[(u8, u64)] {
        &self.addresses
    }

    /// The kernel's header.
    pub fn header(&self) -> &KernelHeader {
        &self.header
    }

    /// The trace file.
    pub fn path(&self) -> &Path {
        &self.lines.path
    }

    /// Number of the line last read.
    pub fn line_number(&self) -> u64 {
        self.lines.line_no
    }

    /// The next event, or `None` at the end of a well-formed trace.
    #[inline(always)]
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>, TraceError> {
        // Inside a warp's instructions, a short line already in the buffer is found, tokenized
        // and parsed in one pass (most lines of real traces); anything else, including a line
        // this declines, is read again by the general path. (A header line still pending is
        // read before any `insts =` line, so `remaining > 0` means none is.)
        if self.remaining > 0 && self.fast {
            if let Some((line, spaces, odd)) = self.lines.peek_short() {
                let imm = self.header.immediate;
                if let Some(i) = crate::fast::short_instruction(line, spaces, odd, imm) {
                    self.remaining -= 1;
                    let line = self.lines.take_short(line.len());
                    // SAFETY: `take_short` returns the very bytes `peek_short` gave.
                    return Ok(Some(Event::Inst(unsafe { i.attach(line) })));
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if self.v3 {
            // SAFETY: the CPU has the features `next_event_v3` is built for (checked at open).
            return unsafe { self.next_event_v3() };
        }
        self.next_event_general()
    }

    /// [`TraceReader::next_event_general`] built for x86-64-v3 CPUs (long lines' byte
    /// classification and token walk use AVX2 and BMI; chosen when the CPU has them).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,popcnt,lzcnt")]
    #[inline(never)]
    unsafe fn next_event_v3(&mut self) -> Result<Option<Event<'_>>, TraceError> {
        self.general_body()
    }

    #[inline(never)]
    fn next_event_general(&mut self) -> Result<Option<Event<'_>>, TraceError> {
        self.general_body()
    }

    /// Every line the short-line path does not take: header remnants, thread-block and warp
    /// lines, long or unusual instruction lines, and the wording of every error.
    #[inline(always)]
    fn general_body(&mut self) -> Result<Option<Event<'_>>, TraceError> {
        loop {
            let kind = match self.pending.take() {
                // The header's closing '#' line was a body line: read it now.
                Some(p) => classify(&p),
                None => {
                    let Some(line) = self.lines.next_bytes()? else {
                        return match self.state {
                            State::Outside => Ok(None),
                            _ => Err(self.lines.error(TRUNCATED)),
                        };
                    };
                    classify_bytes(line)
                }
            };
            match kind {
                Kind::Blank => continue,
                Kind::Begin => {
                    if self.state != State::Outside {
                        return Err(self.lines.error("#BEGIN_TB inside a thread block"));
                    }
                    self.state = State::Begun;
                }
                Kind::Block(b) => {
                    let Some(b) = b else {
                        return Err(self.lines.error("expected 'thread block = x,y,z'"));
                    };
                    if self.state != State::Begun {
                        return Err(self.lines.error("'thread block =' outside #BEGIN_TB"));
                    }
                    let grid = self.header.grid;
                    if b.iter().zip(grid).any(|(&i, g)| i >= g) {
                        return Err(self.lines.error(format!(
                            "thread block ({},{},{}) is outside the grid ({},{},{})",
                            b[0], b[1], b[2], grid[0], grid[1], grid[2]
                        )));
                    }
                    self.block = b;
                    self.state = State::InBlock;
                    return Ok(Some(Event::ThreadBlock(b)));
                }
                Kind::Warp(w) => {
                    let Some(w) = w else {
                        return Err(self.lines.error("expected 'warp = <number>'"));
                    };
                    self.check_warp_done()?;
                    if self.state != State::InBlock {
                        return Err(self.lines.error("'warp =' outside a thread block"));
                    }
                    self.warp = w;
                    self.state = State::WarpNamed;
                }
                Kind::Insts(n) => {
                    let Some(n) = n else {
                        return Err(self.lines.error("expected 'insts = <number>'"));
                    };
                    if self.state != State::WarpNamed {
                        return Err(self.lines.error("'insts =' without a preceding 'warp ='"));
                    }
                    self.remaining = n;
                    self.state = State::InBlock;
                    return Ok(Some(Event::Warp {
                        id: self.warp,
                        insts: n,
                    }));
                }
                Kind::End => {
                    self.check_warp_done()?;
                    if self.state != State::InBlock {
                        return Err(self.lines.error("#END_TB without a thread block"));
                    }
                    self.state = State::Outside;
                    return Ok(Some(Event::EndThreadBlock));
                }
                Kind::Other => {
                    if self.state != State::InBlock {
                        return Err(self.lines.error(
                            "instruction line outside a thread block's warp (or unknown line)",
                        ));
                    }
                    if self.remaining == 0 {
                        return Err(self.lines.error(format!(
                            "more instruction lines than 'insts =' announced for warp {}",
                            self.warp
                        )));
                    }
                    self.remaining -= 1;
                    let lines = &self.lines;
                    let h = &self.header;
                    if self.fast {
                        if let Some(i) =
                            crate::fast::instruction(lines.current_bytes(), h.immediate)
                        {
                            return Ok(Some(Event::Inst(i)));
                        }
                    }
                    let addrs = if self.decode {
                        Some(&mut self.addresses)
                    } else {
                        None
                    };
                    return parse_instruction(
                        lines.current_bytes(),
                        &self.header,
                        self.block,
                        self.warp,
                        addrs,
                    )
                    .map(|i| Some(Event::Inst(i)))
                    .map_err(|message| TraceError::Format {
                        path: lines.path.clone(),
                        line: lines.line_no,
                        message,
                    });
                }
            }
        }
    }

    fn check_warp_done(&self) -> Result<(), TraceError> {
        if self.remaining > 0 {
            return Err(self.lines.error(format!(
                "warp {} has {} fewer instruction lines than 'insts =' announced",
                self.warp, self.remaining
            )));
        }
        Ok(())
    }
}

enum Kind {
    Blank,
    Begin,
    End,
    Block(Option<[u32; 3]>),
    Warp(Option<u32>),
    Insts(Option<u64>),
    Other,
}

/// Instruction lines start with a hex digit: decide those without any string work.
#[inline]
fn classify_bytes(line: &[u8]) -> Kind {
    match line.first() {
        Some(b) if b.is_ascii_hexdigit() => Kind::Other,
        _ => match std::str::from_utf8(line) {
            Ok(text) => classify(text),
            Err(_) => Kind::Other,
        },
    }
}

fn classify(line: &str) -> Kind {
    let t = line.trim();
    if t.is_empty() {
        return Kind::Blank;
    }
    if t == "#BEGIN_TB" {
        return Kind::Begin;
    }
    if t == "#END_TB" {
        return Kind::End;
    }
    let value = |prefix: &str| {
        t.strip_prefix(prefix)
            .and_then(|r| r.trim_start().strip_prefix('='))
            .map(str::trim)
    };
    if let Some(v) = value("thread block") {
        return Kind::Block(triple(v));
    }
    if let Some(v) = value("warp") {
        return Kind::Warp(v.parse().ok());
    }
    if let Some(v) = value("insts") {
        return Kind::Insts(v.parse().ok());
    }
    Kind::Other
}

/// Whitespace-separated tokens of a line.
struct Tokens<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Tokens<'a> {
    #[inline(always)]
    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.s;
        let mut i = self.i;
        while i < s.len() && (s[i] == b' ' || s[i] == b'\t') {
            i += 1;
        }
        if i >= s.len() {
            self.i = i;
            return None;
        }
        let start = i;
        while i < s.len() && s[i] != b' ' && s[i] != b'\t' {
            i += 1;
        }
        self.i = i;
        Some(&s[start..i])
    }

    #[inline(always)]
    fn expect(&mut self, what: &str) -> Result<&'a [u8], String> {
        self.next()
            .ok_or_else(|| format!("line ends where {what} was expected"))
    }
}

/// A token for a message: at most 200 bytes of it.
fn show(t: &[u8]) -> String {
    bbv_files::input::quote(t)
}

/// A decimal number (the fast path's reader, with the general path's error).
#[inline(always)]
fn dec(t: &[u8], what: &str) -> Result<u64, String> {
    crate::fast::dec(t).ok_or_else(|| format!("{what}: '{}' is not a decimal number", show(t)))
}

#[inline(always)]
fn signed(t: &[u8], what: &str) -> Result<i64, String> {
    match t.first() {
        Some(b'-') => dec(&t[1..], what).map(|v| -(v as i64)),
        Some(b'+') => dec(&t[1..], what).map(|v| v as i64),
        _ => dec(t, what).map(|v| v as i64),
    }
}

/// A hexadecimal number, `0x` optional (the fast path's reader, with the general path's error).
#[inline(always)]
fn hex(t: &[u8], what: &str) -> Result<u64, String> {
    crate::fast::hex(t.strip_prefix(b"0x").unwrap_or(t))
        .ok_or_else(|| format!("{what}: '{}' is not a hexadecimal number", show(t)))
}

/// Active lanes of a mask, ascending.
fn active_lanes(mask: u32) -> impl Iterator<Item = u8> {
    (0..32u8).filter(move |&l| mask & (1 << l) != 0)
}

/// Parses an instruction line; with `addrs`, also decodes its per-lane addresses into it. The
/// general path: lines the fast path declines, and the wording of every error.
#[inline(never)]
pub(crate) fn parse_instruction<'a>(
    text: &'a [u8],
    h: &KernelHeader,
    block: [u32; 3],
    warp: u32,
    mut addrs: Option<&mut Vec<(u8, u64)>>,
) -> Result<Instruction<'a>, String> {
    if let Some(a) = addrs.as_deref_mut() {
        a.clear();
    }
    let mut tok = Tokens { s: text, i: 0 };
    if h.prefix {
        let mut pre = [0u64; 4];
        for p in &mut pre {
            *p = dec(tok.expect("the thread block / warp prefix")?, "prefix")?;
        }
        if [pre[0], pre[1], pre[2]] != block.map(u64::from) || pre[3] != u64::from(warp) {
            return Err(format!(
                "line prefix {} {} {} {} disagrees with thread block {},{},{} warp {warp}",
                pre[0], pre[1], pre[2], pre[3], block[0], block[1], block[2]
            ));
        }
    }
    let line_num = if h.lineinfo {
        Some(dec(tok.expect("a line number")?, "line number")?)
    } else {
        None
    };
    let pc = hex(tok.expect("the PC")?, "PC")?;
    let mask_text = tok.expect("the active mask")?;
    if mask_text.len() > 8 {
        return Err(format!(
            "active mask: '{}' is not a 32-bit hexadecimal mask",
            show(mask_text)
        ));
    }
    let mask = hex(mask_text, "active mask")? as u32;
    let dst = dec(
        tok.expect("the destination register count")?,
        "destination count",
    )?;
    if dst > 8 {
        return Err(format!("destination register count {dst} is implausible"));
    }
    for _ in 0..dst {
        let r = tok.expect("a destination register")?;
        if !is_register(r) {
            return Err(format!(
                "expected {dst} destination register(s), found '{}' (register count disagrees with the tokens)",
                show(r)
            ));
        }
    }
    let op = tok.expect("the opcode")?;
    if is_register(op) || op.iter().all(u8::is_ascii_digit) || !op.is_ascii() {
        return Err(format!(
            "expected an opcode, found '{}' (register count disagrees with the tokens)",
            show(op)
        ));
    }
    let opcode = std::str::from_utf8(op).map_err(|_| "opcode is not text".to_string())?;
    let src = dec(tok.expect("the source register count")?, "source count")?;
    if src > 8 {
        return Err(format!("source register count {src} is implausible"));
    }
    for _ in 0..src {
        let r = tok.expect("a source register")?;
        if !is_register(r) {
            return Err(format!(
                "expected {src} source register(s), found '{}' (register count disagrees with the tokens)",
                show(r)
            ));
        }
    }
    let mem_width = dec(tok.expect("the memory width")?, "memory width")?;
    let mut address_mode = None;
    if mem_width > 0 {
        let lanes = mask.count_ones() as usize;
        match tok.expect("the address mode")? {
            b"0" => {
                address_mode = Some(AddressMode::ListAll);
                match addrs.as_deref_mut() {
                    Some(out) => {
                        for lane in active_lanes(mask) {
                            out.push((lane, hex(tok.expect("an address")?, "address")?));
                        }
                    }
                    // Counting does not need the addresses: they are only stepped over.
                    None => {
                        for _ in 0..lanes {
                            tok.expect("an address")?;
                        }
                    }
                }
            }
            b"1" => {
                address_mode = Some(AddressMode::BaseStride);
                let base = hex(tok.expect("the base address")?, "base address")?;
                let stride = signed(tok.expect("the stride")?, "stride")?;
                if let Some(out) = addrs.as_deref_mut() {
                    for (k, lane) in active_lanes(mask).enumerate() {
                        out.push((
                            lane,
                            base.wrapping_add_signed(stride.wrapping_mul(k as i64)),
                        ));
                    }
                }
            }
            b"2" => {
                address_mode = Some(AddressMode::BaseDelta);
                let base = hex(tok.expect("the base address")?, "base address")?;
                match addrs {
                    Some(out) => {
                        let mut lanes_iter = active_lanes(mask);
                        let mut addr = base;
                        if let Some(first) = lanes_iter.next() {
                            out.push((first, addr));
                        }
                        for lane in lanes_iter {
                            let delta = signed(tok.expect("an address delta")?, "address delta")?;
                            addr = addr.wrapping_add_signed(delta);
                            out.push((lane, addr));
                        }
                    }
                    None => {
                        for _ in 1..lanes.max(1) {
                            tok.expect("an address delta")?;
                        }
                    }
                }
            }
            other => {
                return Err(format!(
                    "unknown address mode '{}' (expected 0, 1 or 2)",
                    show(other)
                ))
            }
        }
    }
    let immediate = if h.immediate {
        Some(signed(tok.expect("the immediate")?, "immediate")?)
    } else {
        None
    };
    if let Some(extra) = tok.next() {
        return Err(format!(
            "unexpected '{}' after the instruction's last field",
            show(extra)
        ));
    }
    Ok(Instruction {
        pc,
        mask,
        line_num,
        dst_regs: dst as u8,
        opcode,
        src_regs: src as u8,
        mem_width: mem_width as u32,
        address_mode,
        immediate,
    })
}

/// CUDA's limits (grid x below 2^31, y and z up to 65535; 1024 threads a block): the counts
/// built on them (blocks, threads) stay within 64 bits.
fn limits(h: &KernelHeader) -> Result<(), String> {
    let over = |v: [u32; 3], max: [u32; 3]| v.iter().zip(max).any(|(&a, m)| a == 0 || a > m);
    if over(h.grid, [i32::MAX as u32, 65535, 65535]) {
        return Err(format!(
            "-grid dim ({},{},{}): beyond CUDA's limits (x 1 to 2^31-1, y and z 1 to 65535)",
            h.grid[0], h.grid[1], h.grid[2]
        ));
    }
    if over(h.block, [1024, 1024, 64]) || h.threads_per_block() > 1024 {
        return Err(format!(
            "-block dim ({},{},{}): beyond CUDA's limits (at most 1024 threads, z at most 64)",
            h.block[0], h.block[1], h.block[2]
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every event of a trace, as text.
    fn all_events(r: &mut TraceReader) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(e) = r.next_event().unwrap() {
            out.push(format!("{e:?}"));
            out.push(format!("@{}", r.line_number()));
        }
        out
    }

    /// Grids and blocks beyond CUDA's limits (whose block and thread counts would wrap) and
    /// thread blocks outside the grid are refused, naming the line.
    #[test]
    fn grids_stay_within_cudas_limits() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../../shared/data/accelsim/vectoradd-100-32-trace-0c94f481/kernel-1.traceg");
        let good = std::fs::read_to_string(data).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            (
                "-grid dim = (1,1,1)",
                "-grid dim = (4294967295,4294967295,65535)",
                "beyond CUDA's limits (x 1 to 2^31-1",
            ),
            (
                "-grid dim = (1,1,1)",
                "-grid dim = (0,1,1)",
                "-grid dim (0,1,1): beyond",
            ),
            (
                "-block dim = (1024,1,1)",
                "-block dim = (1024,2,1)",
                "-block dim (1024,2,1): beyond",
            ),
            (
                "thread block = 0,0,0",
                "thread block = 1,0,0",
                "outside the grid (1,1,1)",
            ),
        ];
        for (from, to, says) in cases {
            let p = dir.path().join("kernel-1.traceg");
            assert!(good.contains(from), "{from}");
            std::fs::write(&p, good.replacen(from, to, 1)).unwrap();
            let err = TraceReader::open(&p).and_then(|mut r| {
                while r.next_event()?.is_some() {}
                Ok(())
            });
            let msg = err.unwrap_err().to_string();
            assert!(msg.contains(says), "{to}: {msg}");
        }
    }

    /// The general path's two builds (x86-64-v3 and portable) read the shipped traces alike.
    #[test]
    fn both_builds_of_the_general_path_agree() {
        let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/data/accelsim");
        for dir in [
            "matrixmul-32-32-trace-aba4ea32",
            "vectoradd-100-32-trace-0c94f481",
        ] {
            let k = data.join(dir).join("kernel-1.traceg");
            let mut portable = TraceReader::open(&k).unwrap();
            #[cfg(target_arch = "x86_64")]
            {
                portable.v3 = false;
            }
            let want = all_events(&mut portable);
            assert!(want.len() > 100, "{dir}");
            assert_eq!(
                all_events(&mut TraceReader::open(&k).unwrap()),
                want,
                "{dir}"
            );
        }
    }
}
