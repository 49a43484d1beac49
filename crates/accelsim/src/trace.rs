use std::path::Path;

use crate::input::Lines;
use crate::TraceError;

/// The `-key = value` header of a kernel trace.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KernelHeader {
    /// Kernel name as traced (mangled).
    pub name: String,
    /// `-kernel id` (launch number, 1-based, may have gaps).
    pub id: u64,
    /// Grid dimensions.
    pub grid: [u32; 3],
    /// Block dimensions.
    pub block: [u32; 3],
    /// `-shmem`.
    pub shmem: u64,
    /// `-nregs`.
    pub nregs: u32,
    /// `-binary version` (SM version, e.g. 61).
    pub binary_version: u32,
    /// `-cuda stream id`.
    pub stream: u64,
    /// `-accelsim tracer version`, absent in the oldest traces.
    pub tracer_version: Option<String>,
    /// `-enable lineinfo = 1`: every instruction line starts with a source line number.
    pub lineinfo: bool,
    /// Instruction lines end with an immediate (tracer 5, or a format line ending in
    /// `immediate`).
    pub immediate: bool,
    /// Instruction lines start with `tbx tby tbz warp` (tracer versions before 3).
    pub prefix: bool,
}

impl KernelHeader {
    /// Number of thread blocks in the grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&g| u64::from(g)).product()
    }

    /// Threads per block.
    pub fn threads_per_block(&self) -> u64 {
        self.block.iter().map(|&b| u64::from(b)).product()
    }
}

/// How a memory instruction's addresses are written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AddressMode {
    /// Mode 0: one address per active lane.
    ListAll,
    /// Mode 1: base and stride.
    BaseStride,
    /// Mode 2: base and a delta per further active lane.
    BaseDelta,
}

/// One instruction line.
#[derive(Clone, Debug, PartialEq)]
pub struct Instruction<'a> {
    /// Offset of the instruction in its function.
    pub pc: u64,
    /// Active mask and guard predicate (0 = predicated off for every lane).
    pub mask: u32,
    /// Source line, when the trace has line info.
    pub line_num: Option<u64>,
    /// Number of destination registers.
    pub dst_regs: u8,
    /// Full opcode, e.g. `LDG.E.128.CONSTANT.SYS`.
    pub opcode: &'a str,
    /// Number of source registers.
    pub src_regs: u8,
    /// Bytes per lane for memory instructions, 0 otherwise.
    pub mem_width: u32,
    /// Address encoding of a memory instruction.
    pub address_mode: Option<AddressMode>,
    /// Trailing immediate, when the trace has them.
    pub immediate: Option<i64>,
}

/// What a kernel trace holds, in file order.
#[derive(Clone, Debug, PartialEq)]
pub enum Event<'a> {
    /// `#BEGIN_TB` + `thread block = x,y,z`.
    ThreadBlock([u32; 3]),
    /// `warp = w` + `insts = n`.
    Warp {
        /// Warp index in the block.
        id: u32,
        /// Instruction lines that follow.
        insts: u64,
    },
    /// An instruction of the current warp.
    Inst(Instruction<'a>),
    /// `#END_TB`.
    EndThreadBlock,
}

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
    header: KernelHeader,
    state: State,
    block: [u32; 3],
    warp: u32,
    remaining: u64,
    pending: Option<String>,
}

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
                    "expected a '-key = value' header line, found '{line}'"
                )));
            };
            let num = |v: &str| -> Result<u64, TraceError> {
                v.parse()
                    .map_err(|_| lines.error(format!("-{key}: '{v}' is not a number")))
            };
            match key.as_str() {
                "kernel name" => {
                    h.name = value;
                    seen_name = true;
                }
                "kernel id" => h.id = num(&value)?,
                "grid dim" => {
                    h.grid = triple(&value).ok_or_else(|| {
                        lines.error(format!("-grid dim: expected (x,y,z), found '{value}'"))
                    })?
                }
                "block dim" => {
                    h.block = triple(&value).ok_or_else(|| {
                        lines.error(format!("-block dim: expected (x,y,z), found '{value}'"))
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
            lines,
            header: h,
            state: State::Outside,
            block: [0; 3],
            warp: 0,
            remaining: 0,
            pending,
        })
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
    pub fn next_event(&mut self) -> Result<Option<Event<'_>>, TraceError> {
        loop {
            let kind = {
                let line = match self.pending.take() {
                    Some(p) => {
                        // The header's closing '#' line was a body line: re-read it.
                        self.pending_kind(&p)?
                    }
                    None => {
                        let Some(line) = self.lines.next_line()? else {
                            return match self.state {
                                State::Outside => Ok(None),
                                _ => Err(self
                                    .lines
                                    .error("file ends inside a thread block (truncated trace?)")),
                            };
                        };
                        classify(line)
                    }
                };
                line
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
                    let (h, block, warp) = (&self.header, self.block, self.warp);
                    let (path, line_no) = (self.lines.path.clone(), self.lines.line_no);
                    let text = self.lines.current();
                    return parse_instruction(text, h, block, warp)
                        .map(|i| Some(Event::Inst(i)))
                        .map_err(|message| TraceError::Format {
                            path,
                            line: line_no,
                            message,
                        });
                }
            }
        }
    }

    fn pending_kind(&self, line: &str) -> Result<Kind, TraceError> {
        Ok(classify(line))
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

impl Lines {
    /// The line last returned by `next_line`.
    pub(crate) fn current(&self) -> &str {
        // Lines were validated as UTF-8 when read.
        std::str::from_utf8(self.current_bytes()).unwrap_or("")
    }
}

fn parse_instruction<'a>(
    text: &'a str,
    h: &KernelHeader,
    block: [u32; 3],
    warp: u32,
) -> Result<Instruction<'a>, String> {
    let mut tok = text.split_ascii_whitespace();
    let mut next = |what: &str| {
        tok.next()
            .ok_or_else(|| format!("line ends where {what} was expected"))
    };
    let dec = |t: &str, what: &str| {
        t.parse::<u64>()
            .map_err(|_| format!("{what}: '{t}' is not a decimal number"))
    };
    let hex = |t: &str, what: &str| {
        u64::from_str_radix(t.trim_start_matches("0x"), 16)
            .map_err(|_| format!("{what}: '{t}' is not a hexadecimal number"))
    };
    if h.prefix {
        let mut pre = [0u64; 4];
        for (i, p) in pre.iter_mut().enumerate() {
            *p = dec(next("the thread block / warp prefix")?, "prefix")?;
            let _ = i;
        }
        if [pre[0], pre[1], pre[2]] != block.map(u64::from) || pre[3] != u64::from(warp) {
            return Err(format!(
                "line prefix {} {} {} {} disagrees with thread block {},{},{} warp {warp}",
                pre[0], pre[1], pre[2], pre[3], block[0], block[1], block[2]
            ));
        }
    }
    let line_num = if h.lineinfo {
        Some(dec(next("a line number")?, "line number")?)
    } else {
        None
    };
    let pc = hex(next("the PC")?, "PC")?;
    let mask_text = next("the active mask")?;
    let mask = u32::from_str_radix(mask_text, 16)
        .map_err(|_| format!("active mask: '{mask_text}' is not a 32-bit hexadecimal mask"))?;
    let dst = dec(next("the destination register count")?, "destination count")?;
    if dst > 8 {
        return Err(format!("destination register count {dst} is implausible"));
    }
    for _ in 0..dst {
        let r = next("a destination register")?;
        if !is_register(r) {
            return Err(format!(
                "expected {dst} destination register(s), found '{r}' (register count disagrees with the tokens)"
            ));
        }
    }
    let opcode = next("the opcode")?;
    if is_register(opcode) || opcode.parse::<u64>().is_ok() {
        return Err(format!(
            "expected an opcode, found '{opcode}' (register count disagrees with the tokens)"
        ));
    }
    let src = dec(next("the source register count")?, "source count")?;
    if src > 8 {
        return Err(format!("source register count {src} is implausible"));
    }
    for _ in 0..src {
        let r = next("a source register")?;
        if !is_register(r) {
            return Err(format!(
                "expected {src} source register(s), found '{r}' (register count disagrees with the tokens)"
            ));
        }
    }
    let mem_width = dec(next("the memory width")?, "memory width")?;
    let mut address_mode = None;
    if mem_width > 0 {
        let lanes = mask.count_ones() as usize;
        let mode = next("the address mode")?;
        match mode {
            "0" => {
                address_mode = Some(AddressMode::ListAll);
                for _ in 0..lanes {
                    hex(next("an address")?, "address")?;
                }
            }
            "1" => {
                address_mode = Some(AddressMode::BaseStride);
                hex(next("the base address")?, "base address")?;
                let s = next("the stride")?;
                s.parse::<i64>()
                    .map_err(|_| format!("stride: '{s}' is not a decimal number"))?;
            }
            "2" => {
                address_mode = Some(AddressMode::BaseDelta);
                hex(next("the base address")?, "base address")?;
                for _ in 1..lanes.max(1) {
                    let d = next("an address delta")?;
                    d.parse::<i64>()
                        .map_err(|_| format!("address delta: '{d}' is not a decimal number"))?;
                }
            }
            other => {
                return Err(format!(
                    "unknown address mode '{other}' (expected 0, 1 or 2)"
                ))
            }
        }
    }
    let immediate = if h.immediate {
        let t = next("the immediate")?;
        Some(
            t.parse::<i64>()
                .map_err(|_| format!("immediate: '{t}' is not a decimal number"))?,
        )
    } else {
        None
    };
    if let Some(extra) = tok.next() {
        return Err(format!(
            "unexpected '{extra}' after the instruction's last field"
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

fn is_register(t: &str) -> bool {
    let digits = t.strip_prefix("UR").or_else(|| t.strip_prefix('R'));
    digits.is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}
