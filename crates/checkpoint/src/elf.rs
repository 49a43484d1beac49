//! The checkpoint's file: an ELF header in the first page, the kept pages as the plugin wrote
//! them, one loadable segment (the restorer) at an address no captured mapping uses, then the
//! descriptors' bytes it copies, page-aligned.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use crate::displace::{displaced, SLOT};
use crate::emit::assemble;
use crate::restorer::{Layout, Restore};
use crate::CheckpointError;

const PAGE: u64 = 4096;

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

/// The ELF header and program headers: one segment, `seg_len` bytes at file offset `offset`
/// loaded at `base`.
fn header(entry: u64, offset: u64, base: u64, seg_len: u64) -> Vec<u8> {
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
    phdr(&mut h, 1, 7, offset, base, seg_len);
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
}

/// Makes the memory file `file` (at `path`; its first page a hole, the kept pages after it)
/// the checkpoint of `r`: the headers into that first page, the restorer's segment and the
/// descriptors' bytes after the pages. The pages are not copied.
pub(crate) fn write(r: &Restore, file: &mut File, path: &Path) -> Result<Placed, CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.to_path_buf(),
        source,
    };
    let pages_end = page_up(file.metadata().map_err(io)?.len()).max(PAGE);
    let blobs = r.blobs();
    // First pass with the largest offsets there could be, to size the code; the slack covers
    // what the real pass may add (QEMU's break moved when the segment lands below the heap).
    let far = Layout {
        base: 0x2_0000_0000,
        blob_offsets: vec![1 << 40; blobs.len()],
        slot: 1 << 46,
        moved: vec![0; SLOT as usize],
    };
    let seg_len = page_up(assemble(r, &far, far.base + (1 << 30))?.code.len() as u64 + 256);
    let base = choose_base(r, seg_len)?;
    let slot = choose_slot(r, base, seg_len)?;
    let mut moved = displaced(&r.end_code, r.end_pc, slot)?;
    moved.resize(SLOT as usize, 0xcc);
    let mut at = pages_end + seg_len;
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
    let assembled = assemble(r, &layout, base + seg_len)?;
    if assembled.code.len() as u64 > seg_len {
        return Err(CheckpointError::Assemble(format!(
            "the restorer grew from {seg_len} to {} bytes",
            assembled.code.len()
        )));
    }
    file.write_all_at(&header(base, pages_end, base, seg_len), 0)
        .and_then(|_| file.write_all_at(&assembled.code, pages_end))
        .map_err(io)?;
    for (b, &off) in blobs.iter().zip(&layout.blob_offsets) {
        let (from, start, len) = b;
        let source = |source| CheckpointError::Io {
            path: from.clone(),
            source,
        };
        let mut f = File::open(from).map_err(source)?;
        f.seek(SeekFrom::Start(*start)).map_err(source)?;
        file.seek(SeekFrom::Start(off)).map_err(io)?;
        // File to file: the kernel copies (copy_file_range), nothing passes through here.
        let copied = std::io::copy(&mut (&mut f).take(*len), file).map_err(io)?;
        if copied != *len {
            return Err(CheckpointError::Invalid(format!(
                "{}: {copied} bytes from offset {start}, {len} expected: it changed",
                from.display()
            )));
        }
    }
    // A whole last page: the last blob's mapping must not reach past the file's end.
    file.set_len(page_up(at)).map_err(io)?;
    Ok(Placed {
        segment: (base, base + seg_len),
        reached: assembled.reached,
        slot,
    })
}
