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
//!
//! Plugin API v1 adds inline into the slot's word of the mapping and into [`TOTAL`], and calls
//! the plugin at every block that may close a loop. API v3 (QEMU 9.1+) has no inline add to a
//! plain address, only to per-vCPU scoreboards: there each slot also has an entry in a
//! scoreboard ([`board`]), one more holds the vCPU's distance to the next cut (its inline
//! instructions follow from it), and a block that may close a loop calls the plugin only when
//! that distance is used up (a conditional callback). Callback-counted blocks (rep string
//! blocks) still count into the mapping and [`TOTAL`]; readers add the two.

use bbv_plugin_contract::files;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

use bbv_plugin_contract::state::{HEADER_WORDS, SLOTS_MAGIC};

use crate::maplog::MapLog;
use crate::{report_error, Config};

/// Most distinct translated blocks a run may have (the mapping is reserved, not allocated).
pub const MAX_SLOTS: usize = 1 << 23;

/// Instructions executed by the single thread and counted in the fast path by a callback (by
/// inline adds too under API v1).
pub static TOTAL: AtomicU64 = AtomicU64::new(0);
/// The total at which the next cut falls due.
static NEXT_CUT: AtomicU64 = AtomicU64::new(u64::MAX);

/// Whether blocks count inline now, so that the scoreboards of API v3 hold counts (asking
/// QEMU for an entry costs more than a block's whole callback otherwise).
#[inline(always)]
fn on_board() -> bool {
    !cfg!(any(test, feature = "api-v1")) && crate::ffi::INLINE.load(Ordering::Relaxed)
}

/// Instructions executed by the single thread so far.
#[inline]
pub fn total() -> u64 {
    let t = TOTAL.load(Ordering::Relaxed);
    if on_board() {
        t + board::total()
    } else {
        t
    }
}

/// The total at which the single thread next calls [`crate::thread`]'s slow path.
#[inline]
pub fn next_cut() -> u64 {
    NEXT_CUT.load(Ordering::Relaxed)
}

/// Sets [`next_cut`] (and, under API v3, the distance the conditional callbacks test).
pub fn set_next_cut(at: u64) {
    NEXT_CUT.store(at, Ordering::Relaxed);
    if on_board() {
        board::set_distance(at, TOTAL.load(Ordering::Relaxed));
    }
}

/// A callback counted one execution of `insns` instructions; returns the new total.
#[inline]
pub fn count_callback(insns: u64) -> u64 {
    let t = TOTAL.load(Ordering::Relaxed) + insns;
    TOTAL.store(t, Ordering::Relaxed);
    if on_board() {
        board::consume(insns);
        t + board::total()
    } else {
        t
    }
}
static BASE: AtomicPtr<u64> = AtomicPtr::new(std::ptr::null_mut());

struct Meta {
    /// (block id, instructions, fldcw) per slot.
    slots: Vec<(u32, u64, u64)>,
    /// `DIR/tbs`: a line per slot.
    file: Option<MapLog>,
}

static META: Mutex<Meta> = Mutex::new(Meta {
    slots: Vec::new(),
    file: None,
});

/// Creates `tbs` and `tbs.state`.
pub fn init(cfg: &Config) -> std::io::Result<()> {
    let path = cfg.host.dir.join(files::TBS_STATE);
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
    meta.file = Some(MapLog::create(&cfg.host.dir.join(files::TBS))?);
    Ok(())
}

/// A new slot for a distinct translated block; returns a pointer to its execution counter and
/// its index.
pub fn new_slot(id: u32, insns: u64, fldcw: u64) -> Option<(*mut u64, u32)> {
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
        if let Err(e) = f.append(format!("{slot} {id} {insns} {fldcw}\n").as_bytes()) {
            report_error(&format!("writing the slot table: {e}"));
            meta.file = None;
        }
    }
    board::new_slot(slot);
    // SAFETY: slot < MAX_SLOTS, inside the mapping.
    Some((unsafe { base.add(HEADER_WORDS + 2 * slot) }, slot as u32))
}

/// Moves every slot's executions since the last harvest (under API v3, those of `vcpu`'s
/// scoreboard entries) into `absorb(id, instructions)`, returning the fldcw instructions among
/// them. Call on `vcpu`'s thread, or with every vCPU stopped.
///
/// `single`: also what the single-thread path counted in the mapping itself (callbacks, and
/// API v1's inline adds): thread 1's until the second thread's reset, so only it or a thread
/// harvested after that reset may take it.
pub fn harvest(vcpu: u32, single: bool, mut absorb: impl FnMut(u32, u64)) -> u64 {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() {
        return 0;
    }
    let meta = META.lock().unwrap_or_else(|e| e.into_inner());
    let mut fldcw = 0;
    let board = on_board();
    for (slot, &(id, insns, f)) in meta.slots.iter().enumerate() {
        // SAFETY: every listed slot is inside the mapping; only this thread writes it now.
        unsafe {
            let p = base.add(HEADER_WORDS + 2 * slot);
            let mapped = if single { *p - *p.add(1) } else { 0 };
            let delta = mapped + if board { board::take(slot, vcpu) } else { 0 };
            if delta != 0 {
                absorb(id, delta * insns);
                fldcw += delta * f;
            }
            if single {
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
    let board = on_board();
    for (slot, &(id, insns, _)) in meta.slots.iter().enumerate() {
        let inline = if board { board::cumulative(slot) } else { 0 };
        // SAFETY: every listed slot is inside the mapping.
        let execs = unsafe { *base.add(HEADER_WORDS + 2 * slot) } + inline;
        if execs != 0 {
            each(id, execs * insns);
        }
    }
}

/// Moves the inline counts of `vcpu` (API v3: in QEMU's memory) into the mapping, where the
/// host finds them if QEMU dies before the next harvest; the guest is exiting.
pub fn flush(vcpu: u32) {
    let base = BASE.load(Ordering::Acquire);
    if base.is_null() || !on_board() {
        return;
    }
    let meta = META.lock().unwrap_or_else(|e| e.into_inner());
    for slot in 0..meta.slots.len() {
        let n = board::take(slot, vcpu);
        // SAFETY: every listed slot is inside the mapping; no guest code runs at exit.
        unsafe { *base.add(HEADER_WORDS + 2 * slot) += n };
    }
    TOTAL.fetch_add(board::take_total(), Ordering::Relaxed);
}

/// API v1: nothing lives in scoreboards.
#[cfg(any(test, feature = "api-v1"))]
pub mod board {
    pub fn total() -> u64 {
        0
    }
    pub fn set_distance(_at: u64, _counted: u64) {}
    pub fn consume(_insns: u64) {}
    pub fn new_slot(_slot: usize) {}
    pub fn take(_slot: usize, _vcpu: u32) -> u64 {
        0
    }
    pub fn take_total() -> u64 {
        0
    }
    pub fn cumulative(_slot: usize) -> u64 {
        0
    }
    /// The single thread runs on this vCPU.
    pub fn set_vcpu(_vcpu: u32) {}
    pub fn distance_of(_vcpu: u32) -> u64 {
        0
    }
    pub fn set_distance_of(_vcpu: u32, _at: u64, _total: u64) -> u64 {
        0
    }
    pub fn count_of(_vcpu: u32, _slot: usize, _insns: u64) {}
}

#[cfg(not(any(test, feature = "api-v1")))]
pub use crate::ffi::board;
