//! From a capture to what the restorer restores, and the checkpoint's file.

use std::path::{Path, PathBuf};

use bbv_plugin_contract::checkpoint::{Capture, Descriptor, FdKind};
use bbv_plugin_contract::files::CHECKPOINT_MEMORY_START as START;

use crate::restorer::{Area, FdOp, Regs, Restore, Run};
use crate::CheckpointError;

/// Everything one checkpoint is made of.
pub struct Inputs<'a> {
    /// The captured process.
    pub capture: &'a Capture,
    /// Its memory file (`checkpoint.E.mem`), which becomes the checkpoint.
    pub memory: &'a Path,
    /// The copy of the file open as descriptor N (`checkpoint.E.fdN`).
    pub copied: &'a dyn Fn(i32) -> PathBuf,
    /// The bytes the run read from a stdin that was not a regular file, when recorded.
    pub stdin_stream: Option<&'a Path>,
    /// The end marker's instruction.
    pub end_pc: u64,
    /// Its executions from the checkpoint's start to the region's end (the first execution
    /// of the start instruction, when it is the same, counts).
    pub end_count: u64,
    /// Where files open for writing are recreated (absolute).
    pub outputs: &'a Path,
    /// CPU seconds after which the checkpoint is stopped.
    pub cpu_seconds: u64,
}

/// What a built checkpoint could not restore as it was.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Built {
    /// One line each: descriptors left closed, state the checkpoint cannot take.
    pub notes: Vec<String>,
    /// Bytes of memory kept.
    pub memory_bytes: u64,
    /// Descriptors the process had that the checkpoint leaves closed.
    pub closed: Vec<i32>,
    /// The restorer's segment and the moved end instruction's page, [start, end) each: code
    /// there is the checkpoint's, not the program's.
    pub restorer: Vec<(u64, u64)>,
    /// The instruction whose execution means the region's end was reached.
    pub reached: u64,
    /// Kept pages in the file: (guest address, bytes, file offset).
    pub runs: Vec<(u64, u64, u64)>,
    /// The file's [`crate::fingerprint`].
    pub fingerprint: u64,
}

impl Built {
    /// Where guest address `addr` of the kept pages lies in the checkpoint's file (how QEMU's
    /// plugin names the code there: the checkpoint's image, this offset).
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.runs
            .iter()
            .find(|r| r.0 <= addr && addr < r.0 + r.1)
            .map(|r| r.2 + addr - r.0)
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> CheckpointError + '_ {
    move |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn registers(c: &Capture) -> Result<Regs, CheckpointError> {
    let get = |name: &str| -> Option<&[u8]> {
        c.registers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, b)| b.as_slice())
    };
    let word = |name: &str| -> Result<u64, CheckpointError> {
        let b = get(name).ok_or_else(|| {
            CheckpointError::Invalid(format!(
                "the capture has no {name} register (not an x86-64 guest?)"
            ))
        })?;
        let mut w = [0u8; 8];
        w[..b.len().min(8)].copy_from_slice(&b[..b.len().min(8)]);
        Ok(u64::from_le_bytes(w))
    };
    const GPRS: [&str; 16] = [
        "rax", "rbx", "rcx", "rdx", "rsi", "rdi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12",
        "r13", "r14", "r15",
    ];
    let mut gpr = [0u64; 16];
    for (slot, name) in gpr.iter_mut().zip(GPRS) {
        *slot = word(name)?;
    }
    // FXSAVE's layout: FCW, FSW, abridged tag (0: every x87 register empty, as at a call),
    // MXCSR at 24, ST0-7 from 32, XMM0-15 from 160.
    let mut fx = [0u8; 512];
    let put = |fx: &mut [u8; 512], at: usize, b: Option<&[u8]>, n: usize| {
        if let Some(b) = b {
            let n = n.min(b.len());
            fx[at..at + n].copy_from_slice(&b[..n]);
        }
    };
    put(&mut fx, 0, get("fctrl"), 2);
    put(&mut fx, 2, get("fstat"), 2);
    put(&mut fx, 24, get("mxcsr"), 4);
    for i in 0..8 {
        put(&mut fx, 32 + 16 * i, get(&format!("st{i}")), 10);
    }
    for i in 0..16 {
        put(&mut fx, 160 + 16 * i, get(&format!("xmm{i}")), 16);
    }
    if get("fctrl").is_none() {
        fx[0..2].copy_from_slice(&0x037fu16.to_le_bytes());
    }
    if get("mxcsr").is_none() {
        fx[24..28].copy_from_slice(&0x1f80u32.to_le_bytes());
    }
    Ok(Regs {
        gpr,
        rip: c.pc,
        fs_base: word("fs_base").unwrap_or(0),
        gs_base: word("gs_base").unwrap_or(0),
        fx,
    })
}

/// The restorer's work on descriptors, and what it cannot redo.
fn descriptors(inp: &Inputs, notes: &mut Vec<String>, closed: &mut Vec<i32>) -> Vec<FdOp> {
    let c = inp.capture;
    let mut ops = Vec::new();
    for fd in 0..3 {
        if !c.fds.iter().any(|d| d.fd == fd) {
            ops.push(FdOp::Close { fd });
        }
    }
    let pipes = pipe_pairs(c);
    for &(r, w) in &pipes {
        ops.push(FdOp::Pipe {
            read: (r.fd, r.flags),
            write: (w.fd, w.flags),
        });
    }
    let paired = |fd: i32| pipes.iter().any(|(r, w)| r.fd == fd || w.fd == fd);
    for d in c.fds.iter().filter(|d| !paired(d.fd)) {
        let what = format!("fd {} ({} {})", d.fd, d.kind.word(), d.path);
        let write_only = d.flags & 3 == 1;
        match d.kind {
            FdKind::File if d.copied => {
                let path = (inp.copied)(d.fd);
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                ops.push(FdOp::Content {
                    fd: d.fd,
                    blob: (path, 0, len),
                    offset: d.offset.unwrap_or(0),
                    read_only: d.flags & 3 == 0,
                });
            }
            _ if d.fd == 0 && d.path != "/dev/null" && inp.stdin_stream.is_some() => {
                let path = inp.stdin_stream.expect("checked").to_path_buf();
                let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                let from = c.stdin_consumed.unwrap_or(0).min(len);
                ops.push(FdOp::Content {
                    fd: 0,
                    blob: (path, from, len - from),
                    offset: 0,
                    read_only: d.flags & 3 == 0,
                });
            }
            // The caller's stdout and stderr, whatever they are.
            _ if d.fd == 1 || d.fd == 2 => {}
            FdKind::File if write_only => {
                let path = inp.outputs.join(format!("fd-{}.out", d.fd));
                // O_WRONLY | O_CREAT | O_TRUNC, and O_APPEND as it was.
                let flags = 1 | 0o100 | 0o1000 | (d.flags & 0o2000);
                ops.push(FdOp::Open {
                    fd: d.fd,
                    path,
                    flags,
                    offset: d.offset,
                });
            }
            FdKind::Char | FdKind::Dir => ops.push(FdOp::Open {
                fd: d.fd,
                path: PathBuf::from(&d.path),
                // The access mode and O_APPEND/O_NONBLOCK/O_DIRECTORY as they were.
                flags: d.flags & (3 | 0o2000 | 0o4000 | 0o200000),
                offset: None,
            }),
            // One passed down to the program that it cannot have again (a make jobserver's
            // pipe, say) matters only if the region uses it, which the region's calls tell.
            _ if d.inherited => closed.push(d.fd),
            _ => {
                notes.push(format!("{what}: not restored (left closed)"));
                closed.push(d.fd);
            }
        }
    }
    notes.extend(
        c.sigactions
            .iter()
            .filter(|a| a.signal == 5 || a.signal == 31)
            .map(|a| {
                format!(
                    "signal {}: the program's handler is replaced by the checkpoint's own",
                    a.signal
                )
            }),
    );
    ops
}

/// Pipes whose read end and write end the process both holds (a self-pipe): (read, write).
fn pipe_pairs(c: &Capture) -> Vec<(&Descriptor, &Descriptor)> {
    let ends = |mode: u32| {
        (c.fds.iter()).filter(move |d| d.kind == FdKind::Pipe && d.fd > 2 && d.flags & 3 == mode)
    };
    let mut pairs: Vec<(&Descriptor, &Descriptor)> = Vec::new();
    for r in ends(0) {
        let taken = |w: &Descriptor| pairs.iter().any(|p| p.1.fd == w.fd);
        if let Some(w) = ends(1).find(|w| w.path == r.path && !taken(w)) {
            pairs.push((r, w));
        }
    }
    pairs
}

/// The captured mappings; the end marker's instruction must be in an executable one (the
/// restorer writes its int3 there before it restores the protections).
fn areas(c: &Capture, end_pc: u64) -> Result<Vec<Area>, CheckpointError> {
    if !(c.maps.iter()).any(|m| m.start <= end_pc && end_pc < m.end && m.prot & 4 != 0) {
        return Err(CheckpointError::Invalid(format!(
            "the end marker's instruction {end_pc:#x} is in no executable mapping of the capture"
        )));
    }
    Ok(c.maps
        .iter()
        .map(|m| Area {
            start: m.start,
            len: m.end - m.start,
            prot: m.prot,
        })
        .collect())
}

/// The kept pages cut at the mappings' bounds, those of executable mappings to be mapped from
/// the file, the others read.
fn runs(c: &Capture) -> Vec<Run> {
    let mut out = Vec::new();
    for r in &c.data {
        for m in (c.maps.iter()).filter(|m| m.start < r.addr + r.len && r.addr < m.end) {
            let (from, to) = (r.addr.max(m.start), (r.addr + r.len).min(m.end));
            out.push(Run {
                addr: from,
                offset: r.offset + (from - r.addr),
                len: to - from,
                mapped: m.prot & 4 != 0,
            });
        }
    }
    out
}

/// Up to `n` bytes of captured memory from `addr` on (in the memory file `f`), stopping at
/// the first byte not kept.
fn bytes_at(
    inp: &Inputs,
    f: &std::fs::File,
    addr: u64,
    n: u64,
) -> Result<Vec<u8>, CheckpointError> {
    use std::os::unix::fs::FileExt;
    let mut out = Vec::new();
    let mut at = addr;
    while (out.len() as u64) < n {
        let Some(run) = (inp.capture.data.iter()).find(|r| r.addr <= at && at < r.addr + r.len)
        else {
            break;
        };
        let take = (run.addr + run.len - at).min(n - out.len() as u64);
        let mut b = vec![0u8; take as usize];
        f.read_exact_at(&mut b, run.offset + at - run.addr)
            .map_err(io(inp.memory))?;
        out.extend(b);
        at += take;
    }
    if out.is_empty() {
        return Err(CheckpointError::Invalid(format!(
            "the end marker's instruction {addr:#x} is not in the captured memory"
        )));
    }
    Ok(out)
}

/// Builds one checkpoint from the memory file `inp.memory`, which becomes it: the headers and
/// the restorer are written around the kept pages in place (rename the file afterwards).
pub fn build(inp: &Inputs) -> Result<Built, CheckpointError> {
    let c = inp.capture;
    if inp.end_count == 0 {
        return Err(CheckpointError::Invalid(
            "the end marker's count from the checkpoint is 0 (it ran before the start)".into(),
        ));
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(inp.memory)
        .map_err(io(inp.memory))?;
    let mem_len = file.metadata().map_err(io(inp.memory))?.len();
    if let Some(r) = (c.data.iter()).find(|r| r.offset + r.len > mem_len || r.offset < START) {
        return Err(CheckpointError::Invalid(format!(
            "{}: {} bytes, but the capture keeps {:#x} bytes at offset {:#x}: {}",
            inp.memory.display(),
            mem_len,
            r.len,
            r.offset,
            if r.offset < START {
                "over the header's page"
            } else {
                "truncated"
            }
        )));
    }
    let mut notes: Vec<String> = c.problems.clone();
    let mut closed = Vec::new();
    let fds = descriptors(inp, &mut notes, &mut closed);
    let restore = Restore {
        areas: areas(c, inp.end_pc)?,
        runs: runs(c),
        fds,
        cwd: c.cwd.clone(),
        sigactions: c
            .sigactions
            .iter()
            .filter(|a| a.signal != 5 && a.signal != 31)
            .copied()
            .collect(),
        sigmask: c.sigmask & !((1 << 4) | (1 << 30)),
        regs: registers(c)?,
        end_pc: inp.end_pc,
        end_count: inp.end_count,
        end_code: bytes_at(inp, &file, inp.end_pc, 16)?,
        brk: c.brk,
        heap_start: (c.maps.iter())
            .filter(|m| m.name == "[heap]")
            .map(|m| m.start)
            .min()
            .unwrap_or(c.brk),
        cpu_seconds: inp.cpu_seconds,
    };
    let placed = crate::elf::write(&restore, &mut file, inp.memory)?;
    std::io::Seek::rewind(&mut file).map_err(io(inp.memory))?;
    let fingerprint = crate::fingerprint(&file).map_err(io(inp.memory))?;
    Ok(Built {
        notes,
        memory_bytes: c.data.iter().map(|r| r.len).sum(),
        closed,
        restorer: vec![placed.segment, (placed.slot, placed.slot + 4096)],
        reached: placed.reached,
        runs: (c.data.iter()).map(|r| (r.addr, r.len, r.offset)).collect(),
        fingerprint,
    })
}
