//! A captured guest process (`checkpoint=FILE`): what the plugin writes when a capture event
//! fires, and its reader.
//!
//! `checkpoint.E` is text, one fact per line (paths last, so they may hold spaces):
//!
//! ```text
//! pc HEX                              the instruction the process stopped before
//! instructions N                      thread 1's instructions before it
//! reg NAME HEX                        a register's bytes as QEMU's register API gives them
//! map START END PROT NAME             a guest mapping [START, END), PROT as mmap's bits
//! data START LEN OFFSET               LEN bytes at START are in checkpoint.E.mem at OFFSET
//!                                     (the first at files::CHECKPOINT_MEMORY_START)
//! fd N FLAGS OFFSET KIND BITS PATH    an open descriptor (OFFSET -1: not seekable; BITS 1:
//!                                     its file's bytes are in checkpoint.E.fdN, 2: inherited)
//! cwd PATH
//! sigaction SIG HANDLER FLAGS RESTORER MASK
//! sigmask MASK
//! brk HEX
//! hits MARKER COUNT                   marker MARKER's executions before this instruction
//! stdin CONSUMED                      bytes of the stdin stream (files::STDIN) read before
//! problem TEXT                        something the capture could not take
//! ```
//!
//! Pages that hold only zeros are left out of `data`; the restorer maps them as zeros.

use std::fmt::Write as _;
use std::path::Path;

use crate::ContractError;

/// One guest mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    /// First byte.
    pub start: u64,
    /// One past the last byte.
    pub end: u64,
    /// mmap's PROT_READ (1), PROT_WRITE (2), PROT_EXEC (4) bits.
    pub prot: u32,
    /// The mapped file's path, or `[anon]`, `[heap]`, `[stack]`, `[vdso]`.
    pub name: String,
}

/// Bytes of guest memory kept in the memory file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Run {
    /// Guest address.
    pub addr: u64,
    /// Bytes (whole pages).
    pub len: u64,
    /// Where they start in `checkpoint.E.mem`.
    pub offset: u64,
}

/// What a descriptor is, as fstat says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FdKind {
    /// A regular file.
    File,
    /// A character device (a terminal, /dev/null).
    Char,
    /// A pipe or FIFO.
    Pipe,
    /// A socket.
    Socket,
    /// A directory.
    Dir,
    /// Anything else (eventfd, epoll, ...).
    Other,
}

impl FdKind {
    /// The word the state file uses.
    pub fn word(self) -> &'static str {
        match self {
            FdKind::File => "file",
            FdKind::Char => "char",
            FdKind::Pipe => "pipe",
            FdKind::Socket => "socket",
            FdKind::Dir => "dir",
            FdKind::Other => "other",
        }
    }

    fn from_word(w: &str) -> Option<FdKind> {
        Some(match w {
            "file" => FdKind::File,
            "char" => FdKind::Char,
            "pipe" => FdKind::Pipe,
            "socket" => FdKind::Socket,
            "dir" => FdKind::Dir,
            "other" => FdKind::Other,
            _ => return None,
        })
    }
}

/// One open descriptor of the guest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Descriptor {
    /// Its number.
    pub fd: i32,
    /// fcntl(F_GETFL).
    pub flags: u32,
    /// The file offset, or None where it has none.
    pub offset: Option<u64>,
    /// What it is.
    pub kind: FdKind,
    /// The file's bytes were copied at capture (`checkpoint.E.fdN`).
    pub copied: bool,
    /// Open before the guest's first instruction (passed down by whatever started it, as a
    /// shell's `5< file`), not by the guest.
    pub inherited: bool,
    /// Its path as /proc/self/fd names it.
    pub path: String,
}

/// A signal's disposition as the kernel's rt_sigaction takes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SigAction {
    /// The signal.
    pub signal: u32,
    /// sa_handler (0 default, 1 ignore, else an address).
    pub handler: u64,
    /// sa_flags.
    pub flags: u64,
    /// sa_restorer.
    pub restorer: u64,
    /// sa_mask.
    pub mask: u64,
}

/// A captured process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Capture {
    /// The instruction the process stopped before.
    pub pc: u64,
    /// Thread 1's instructions before it.
    pub instructions: u64,
    /// (name, bytes) in QEMU's order.
    pub registers: Vec<(String, Vec<u8>)>,
    /// The guest's mappings, ascending.
    pub maps: Vec<Mapping>,
    /// Non-zero memory, ascending.
    pub data: Vec<Run>,
    /// Open descriptors, ascending.
    pub fds: Vec<Descriptor>,
    /// The working directory.
    pub cwd: String,
    /// Dispositions other than the default.
    pub sigactions: Vec<SigAction>,
    /// Blocked signals (bit n-1 for signal n).
    pub sigmask: u64,
    /// The program break.
    pub brk: u64,
    /// (marker, executions before this instruction).
    pub hits: Vec<(u32, u64)>,
    /// Bytes of the recorded stdin stream read before the capture.
    pub stdin_consumed: Option<u64>,
    /// What could not be captured.
    pub problems: Vec<String>,
}

impl Capture {
    /// The state file's text.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "pc {:x}", self.pc);
        let _ = writeln!(s, "instructions {}", self.instructions);
        for (name, bytes) in &self.registers {
            let _ = write!(s, "reg {name} ");
            for b in bytes {
                let _ = write!(s, "{b:02x}");
            }
            s.push('\n');
        }
        for m in &self.maps {
            let _ = writeln!(s, "map {:x} {:x} {} {}", m.start, m.end, m.prot, m.name);
        }
        for r in &self.data {
            let _ = writeln!(s, "data {:x} {:x} {:x}", r.addr, r.len, r.offset);
        }
        for d in &self.fds {
            let off = d.offset.map_or("-1".to_string(), |o| o.to_string());
            let _ = writeln!(
                s,
                "fd {} {} {off} {} {} {}",
                d.fd,
                d.flags,
                d.kind.word(),
                u8::from(d.copied) | u8::from(d.inherited) << 1,
                d.path
            );
        }
        let _ = writeln!(s, "cwd {}", self.cwd);
        for a in &self.sigactions {
            let _ = writeln!(
                s,
                "sigaction {} {:x} {:x} {:x} {:x}",
                a.signal, a.handler, a.flags, a.restorer, a.mask
            );
        }
        let _ = writeln!(s, "sigmask {:x}", self.sigmask);
        let _ = writeln!(s, "brk {:x}", self.brk);
        for (m, n) in &self.hits {
            let _ = writeln!(s, "hits {m} {n}");
        }
        if let Some(n) = self.stdin_consumed {
            let _ = writeln!(s, "stdin {n}");
        }
        for p in &self.problems {
            let _ = writeln!(s, "problem {}", p.replace('\n', " "));
        }
        s
    }

    /// Reads a state file the plugin wrote.
    pub fn read(path: &Path) -> Result<Capture, ContractError> {
        let text = std::fs::read_to_string(path).map_err(|source| ContractError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let mut c = Capture::default();
        let mut pc = false;
        for (i, line) in text.lines().enumerate() {
            parse_line(&mut c, line, &mut pc).map_err(|what| ContractError::Parse {
                path: path.to_path_buf(),
                line: i + 1,
                what: what.to_string(),
            })?;
        }
        if !pc {
            return Err(ContractError::Parse {
                path: path.to_path_buf(),
                line: text.lines().count() + 1,
                what: "a pc line (the capture is incomplete)".into(),
            });
        }
        Ok(c)
    }
}

fn hex(s: Option<&str>) -> Option<u64> {
    u64::from_str_radix(s?, 16).ok()
}

fn dec<T: std::str::FromStr>(s: Option<&str>) -> Option<T> {
    s?.parse().ok()
}

fn bytes(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn parse_line(c: &mut Capture, line: &str, pc: &mut bool) -> Result<(), &'static str> {
    let (key, rest) = line.split_once(' ').unwrap_or((line, ""));
    let mut f = rest.split(' ');
    match key {
        "pc" => {
            c.pc = hex(f.next()).ok_or("pc HEX")?;
            *pc = true;
        }
        "instructions" => c.instructions = dec(f.next()).ok_or("instructions N")?,
        "reg" => {
            let name = f.next().filter(|n| !n.is_empty()).ok_or("reg NAME HEX")?;
            let b = f.next().and_then(bytes).ok_or("reg NAME HEX")?;
            c.registers.push((name.to_string(), b));
        }
        "map" => {
            let mut f = rest.splitn(4, ' ');
            let m = (|| {
                Some(Mapping {
                    start: hex(f.next())?,
                    end: hex(f.next())?,
                    prot: dec(f.next())?,
                    name: f.next()?.to_string(),
                })
            })()
            .filter(|m| m.start < m.end && m.prot < 8)
            .ok_or("map START END PROT NAME")?;
            c.maps.push(m);
        }
        "data" => {
            let r = (|| {
                Some(Run {
                    addr: hex(f.next())?,
                    len: hex(f.next())?,
                    offset: hex(f.next())?,
                })
            })()
            .ok_or("data START LEN OFFSET")?;
            c.data.push(r);
        }
        "fd" => {
            let mut f = rest.splitn(6, ' ');
            let d = (|| {
                let fd = dec(f.next())?;
                let flags = dec(f.next())?;
                let offset: i64 = dec(f.next())?;
                let kind = FdKind::from_word(f.next()?)?;
                let bits: u8 = f.next()?.parse().ok().filter(|&b| b < 4)?;
                Some(Descriptor {
                    fd,
                    flags,
                    offset: u64::try_from(offset).ok(),
                    kind,
                    copied: bits & 1 != 0,
                    inherited: bits & 2 != 0,
                    path: f.next()?.to_string(),
                })
            })()
            .ok_or("fd N FLAGS OFFSET KIND BITS PATH")?;
            c.fds.push(d);
        }
        "cwd" => c.cwd = rest.to_string(),
        "sigaction" => {
            let a = (|| {
                Some(SigAction {
                    signal: dec(f.next())?,
                    handler: hex(f.next())?,
                    flags: hex(f.next())?,
                    restorer: hex(f.next())?,
                    mask: hex(f.next())?,
                })
            })()
            .filter(|a| (1..=64).contains(&a.signal))
            .ok_or("sigaction SIG HANDLER FLAGS RESTORER MASK")?;
            c.sigactions.push(a);
        }
        "sigmask" => c.sigmask = hex(f.next()).ok_or("sigmask HEX")?,
        "brk" => c.brk = hex(f.next()).ok_or("brk HEX")?,
        "hits" => {
            let m = dec(f.next()).ok_or("hits MARKER COUNT")?;
            let n = dec(f.next()).ok_or("hits MARKER COUNT")?;
            c.hits.push((m, n));
        }
        "stdin" => c.stdin_consumed = Some(dec(f.next()).ok_or("stdin BYTES")?),
        "problem" => c.problems.push(rest.to_string()),
        _ => return Err("a checkpoint state line (pc, reg, map, data, fd, ...)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_goes_there_and_back() {
        let c = Capture {
            pc: 0x401000,
            instructions: 12345,
            registers: vec![("rax".into(), vec![1, 0, 0, 0, 0, 0, 0, 0xff])],
            maps: vec![Mapping {
                start: 0x400000,
                end: 0x402000,
                prot: 5,
                name: "/tmp/a b".into(),
            }],
            data: vec![Run {
                addr: 0x400000,
                len: 0x1000,
                offset: 0,
            }],
            fds: vec![Descriptor {
                fd: 3,
                flags: 0,
                offset: Some(17),
                kind: FdKind::File,
                copied: true,
                inherited: true,
                path: "/tmp/in put".into(),
            }],
            cwd: "/tmp/x y".into(),
            sigactions: vec![SigAction {
                signal: 10,
                handler: 0x401234,
                flags: 0x4000000,
                restorer: 0x7f00,
                mask: 0,
            }],
            sigmask: 0x200,
            brk: 0x600000,
            hits: vec![(0, 3), (1, 0)],
            stdin_consumed: Some(10),
            problems: vec!["fd 5: a socket".into()],
        };
        let dir = std::env::temp_dir().join(format!("bbv-ckpt-{}", std::process::id()));
        std::fs::write(&dir, c.to_text()).unwrap();
        let back = Capture::read(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(back, c);
    }

    #[test]
    fn bad_lines_are_named() {
        let p = std::env::temp_dir().join(format!("bbv-ckpt-bad-{}", std::process::id()));
        for (text, line) in [
            ("pc 10\nmap 5 4 1 x\n", 2),
            ("pc zz\n", 1),
            ("pc 1\nreg rax 123\n", 2),
            ("map 1 2 3 x\n", 2),
            ("pc 1\nsigaction 99 0 0 0 0\n", 2),
        ] {
            std::fs::write(&p, text).unwrap();
            match Capture::read(&p) {
                Err(ContractError::Parse { line: l, .. }) => assert_eq!(l, line, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        std::fs::remove_file(&p).unwrap();
    }
}
