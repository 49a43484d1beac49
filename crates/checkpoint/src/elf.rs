//! The checkpoint's file: an ELF header, one loadable segment (the restorer) at an address
//! no captured mapping uses, then the blobs it maps or copies, page-aligned.

use std::io::{Read, Write};

use crate::displace::{displaced, SLOT};
use crate::emit::assemble;
use crate::restorer::{Layout, Restore};
use crate::CheckpointError;

const PAGE: u64 = 4096;
/// The segment's file offset (the headers fill the page before it).
const SEGMENT_OFFSET: u64 = PAGE;

fn page_up(n: u64) -> u64 {
    n.div_ceil(PAGE) * PAGE
}

/// Whether [b, b + size) keeps a page clear of every captured mapping.
fn clear(r: &Restore, b: u64, size: u64) -> bool {
    r.areas
        .iter()
        .all(|a| a.start + a.len + PAGE <= b || b + size + PAGE <= a.start)
}

/// A base for the restorer, free of every captured mapping, inside one 4 GiB span (its
/// seccomp filter compares the low 32 bits of addresses), and below the captured mappings
/// where there is room: the break of a process (the kernel's or QEMU's) starts after its
/// program's segment, and the heap's brk calls must find it below the heap to fail as glibc
/// expects where the checkpoint's handler cannot serve them (under QEMU).
fn choose_base(r: &Restore, size: u64) -> Result<u64, CheckpointError> {
    const STEP: u64 = 64 << 10;
    let fits = |b: u64| b >= 0x10_0000 && (b >> 32) == ((b + size) >> 32) && clear(r, b, size);
    let lowest = r.areas.iter().map(|a| a.start).min().unwrap_or(0x4000_0000);
    let top = lowest.saturating_sub(size + 2 * PAGE) & !(STEP - 1);
    (0..=top / STEP)
        .map(|k| top - k * STEP)
        .chain((0x2_0000_0000u64..0x7000_0000_0000).step_by(STEP as usize))
        .find(|&b| fits(b))
        .ok_or_else(|| CheckpointError::Invalid("no free address for the restorer".into()))
}

/// A free page within rel32 reach of the end instruction, for its moved copy.
fn choose_slot(r: &Restore, base: u64, size: u64) -> Result<u64, CheckpointError> {
    let near = r.end_pc & !(PAGE - 1);
    (1..(1u64 << 18))
        .flat_map(|k| [near.wrapping_sub(k * PAGE), near.wrapping_add(k * PAGE)])
        .find(|&p| {
            p >= 0x10_0000 && clear(r, p, PAGE) && (p + 2 * PAGE <= base || base + size + PAGE <= p)
        })
        .ok_or_else(|| {
            CheckpointError::Invalid(format!(
                "no free page within reach of the end instruction at {:#x}",
                r.end_pc
            ))
        })
}

fn header(entry: u64, base: u64, seg_len: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(64 + 2 * 56);
    h.extend(b"\x7fELF\x02\x01\x01\x00");
    h.extend([0u8; 8]);
    h.extend(2u16.to_le_bytes()); // ET_EXEC
    h.extend(62u16.to_le_bytes()); // EM_X86_64
    h.extend(1u32.to_le_bytes());
    h.extend(entry.to_le_bytes());
    h.extend(64u64.to_le_bytes()); // e_phoff
    h.extend(0u64.to_le_bytes()); // e_shoff
    h.extend(0u32.to_le_bytes());
    h.extend(64u16.to_le_bytes());
    h.extend(56u16.to_le_bytes());
    h.extend(2u16.to_le_bytes());
    h.extend([0u8; 6]); // no sections
    let phdr = |h: &mut Vec<u8>, kind: u32, flags: u32, off: u64, addr: u64, len: u64| {
        h.extend(kind.to_le_bytes());
        h.extend(flags.to_le_bytes());
        h.extend(off.to_le_bytes());
        h.extend(addr.to_le_bytes());
        h.extend(addr.to_le_bytes());
        h.extend(len.to_le_bytes());
        h.extend(len.to_le_bytes());
        h.extend(PAGE.to_le_bytes());
    };
    // One RWX segment: the handlers keep their counters beside their code.
    phdr(&mut h, 1, 7, SEGMENT_OFFSET, base, seg_len);
    phdr(&mut h, 0x6474_e551, 6, 0, 0, 0); // PT_GNU_STACK: no executable stack
    h
}

/// Where a written checkpoint's restorer lies.
pub(crate) struct Placed {
    /// Its segment: [start, end).
    pub segment: (u64, u64),
    /// The handler's exit at the region's end.
    pub reached: u64,
    /// The moved end instruction's page.
    pub slot: u64,
    /// Where each run of kept pages lies in the file: (guest address, bytes, file offset).
    pub runs: Vec<(u64, u64, u64)>,
}

/// Writes the checkpoint of `r` into `out`.
pub(crate) fn write(r: &Restore, out: &mut impl Write) -> Result<Placed, CheckpointError> {
    let blobs = r.blobs();
    // First pass with the largest offsets there could be, to size the code.
    let far = Layout {
        base: 0x2_0000_0000,
        blob_offsets: vec![1 << 40; blobs.len()],
        slot: 1 << 46,
        moved: vec![0; SLOT as usize],
    };
    let seg_len = page_up(assemble(r, &far, far.base + (1 << 30))?.code.len() as u64 + 64);
    let base = choose_base(r, seg_len)?;
    let slot = choose_slot(r, base, seg_len)?;
    let mut moved = displaced(&r.end_code, r.end_pc, slot)?;
    moved.resize(SLOT as usize, 0xcc);
    let mut at = SEGMENT_OFFSET + seg_len;
    let mut blob_offsets = Vec::with_capacity(blobs.len());
    for b in &blobs {
        blob_offsets.push(at);
        at = page_up(at + b.2);
    }
    let layout = Layout {
        base,
        blob_offsets,
        slot,
        moved,
    };
    let layout = &layout;
    let assembled = assemble(r, layout, base + seg_len)?;
    let code = assembled.code;
    if code.len() as u64 > seg_len {
        return Err(CheckpointError::Assemble(format!(
            "the restorer grew from {seg_len} to {} bytes",
            code.len()
        )));
    }
    let mut w = Counted { out, written: 0 };
    w.put(&header(base, base, seg_len))?;
    w.pad_to(SEGMENT_OFFSET)?;
    w.put(&code)?;
    for (b, &off) in blobs.iter().zip(&layout.blob_offsets) {
        w.pad_to(off)?;
        let (path, start, len) = b;
        let io = |source| CheckpointError::Io {
            path: path.clone(),
            source,
        };
        let mut f = std::fs::File::open(path).map_err(io)?;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(*start)).map_err(io)?;
        let mut left = *len;
        let mut buf = vec![0u8; 1 << 20];
        while left > 0 {
            let n = (left as usize).min(buf.len());
            f.read_exact(&mut buf[..n]).map_err(io)?;
            w.put(&buf[..n])?;
            left -= n as u64;
        }
    }
    // A whole last page: the last blob's mapping must not reach past the file's end.
    let end = page_up(w.written);
    w.pad_to(end)?;
    Ok(Placed {
        segment: (base, base + seg_len),
        reached: assembled.reached,
        slot,
        runs: (r.runs.iter().zip(&layout.blob_offsets))
            .map(|((addr, (_, _, len)), &off)| (*addr, *len, off))
            .collect(),
    })
}

/// A writer that knows how far it got.
struct Counted<'a, W: Write> {
    out: &'a mut W,
    written: u64,
}

impl<W: Write> Counted<'_, W> {
    fn put(&mut self, bytes: &[u8]) -> Result<(), CheckpointError> {
        self.out
            .write_all(bytes)
            .map_err(|source| CheckpointError::Io {
                path: "(the checkpoint being written)".into(),
                source,
            })?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad_to(&mut self, to: u64) -> Result<(), CheckpointError> {
        let pad = vec![0u8; to.saturating_sub(self.written) as usize];
        self.put(&pad)
    }
}
