//! Counting while the guest has a single thread: one increment per translated-block execution.
//!
//! Each distinct translated block (a "slot") has an execution counter in `tbs.state`, a shared
//! file mapping; the instruction total is a plain global. Only when the total reaches the next
//! interval boundary are the slots harvested into thread 1's per-block counts and the cut
//! taken, so the common path is a few instructions (QEMU 7.2's plugin API v1 has no per-vCPU
//! counters, so this is only exact while one vCPU runs; see `thread::start` for the switch).
//!
//! `tbs` lists the slots (`slot id insns fldcw`), one line per write, so the host can count
//! what was not harvested yet when the guest dies without warning.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use bbv_profile::plugin_state::{HEADER_WORDS, SLOTS_MAGIC};

use crate::{report_error, Config};

/// Most distinct translated blocks a run may have (the mapping is reserved, not allocated).
pub const MAX_SLOTS: usize = 1 << 23;

/// Instructions executed by the single thread, counted in the fast path.
pub static TOTAL: AtomicU64 = AtomicU64::new(0);
/// The total at which the next cut falls due.
pub static NEXT_CUT: AtomicU64 = AtomicU64::new(u64::MAX);
static BASE: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());

struct Meta {
    /// (block id, instructions, fldcw) per slot.
    slots: Vec<(u32, u64, u64)>,
    file: Option<File>,
}

static META: Mutex<Meta> = Mutex::new(Meta {
    slots: Vec::new(),
    file: None,
});

/// Creates `tbs` and `tbs.state`.
pub fn init(cfg: &Config) -> std::io::Result<()> {
    let path = cfg.dir.join("tbs.state");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    let bytes = (HEADER_WORDS + 2 * MAX_SLOTS) * 8;
    f.set_len(bytes as u64)?;
    // SAFETY: a shared mapping of our own sparse file, never unmapped or moved.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            f.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    let base = p as *mut u64;
    // SAFETY: inside the mapping.
    unsafe { *base = SLOTS_MAGIC };
    BASE.store(base, Ordering::Release);
    let mut meta = META.lock().unwrap_or_else(|e| e.into_inner());
    meta.file = Some(File::create(cfg.dir.join("tbs"))?);
    Ok(())
}

/// A new slot for a distinct translated block; returns a pointer to its execution counter.
pub fn new_slot(id: u32, insns: u64, fldcw: u64) -> Option<*mut u64> {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return None;
    }
    let mut meta = META.lock().unwrap_or_else(|e| e.into_inner());
    let slot = meta.slots.len();
    if slot >= MAX_SLOTS {
        report_error(&format!("more than {MAX_SLOTS} distinct translated blocks"));
        return None;
    }
    meta.slots.push((id, insns, fldcw));
    if let Some(f) = &mut meta.file {
        if let Err(e) = f.write_all(format!("{slot} {id} {insns} {fldcw}\n").as_bytes()) {
            report_error(&format!("writing the slot table: {e}"));
            meta.file = None;
        }
    }
    // SAFETY: slot < MAX_SLOTS, inside the mapping.
    Some(unsafe { base.add(HEADER_WORDS + 2 * slot) })
}

/// Moves every slot's executions since the last harvest into `absorb(id, instructions)`,
/// returning the fldcw instructions among them.
pub fn harvest(mut absorb: impl FnMut(u32, u64)) -> u64 {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return 0;
    }
    let meta = META.lock().unwrap_or_else(|e| e.into_inner());
    let mut fldcw = 0;
    for (slot, &(id, insns, f)) in meta.slots.iter().enumerate() {
        // SAFETY: every listed slot is inside the mapping; only this thread writes it now.
        unsafe {
            let p = base.add(HEADER_WORDS + 2 * slot);
            let delta = *p - *p.add(1);
            if delta != 0 {
                absorb(id, delta * insns);
                fldcw += delta * f;
                *p.add(1) = *p;
            }
        }
    }
    fldcw
}

/// Every slot's instructions since the start, `each(id, instructions)` (an id may come more
/// than once, once per variant): the single thread's cumulative counts.
pub fn cumulative(mut each: impl FnMut(u32, u64)) {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return;
    }
    let meta = META.lock().unwrap_or_else(|e| e.into_inner());
    for (slot, &(id, insns, _)) in meta.slots.iter().enumerate() {
        // SAFETY: every listed slot is inside the mapping.
        let execs = unsafe { *base.add(HEADER_WORDS + 2 * slot) };
        if execs != 0 {
            each(id, execs * insns);
        }
    }
}
