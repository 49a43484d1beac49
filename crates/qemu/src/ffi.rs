//! The bottom layer: QEMU's plugin interface for API v1 (feature `api-v1`, QEMU 6.0-8.2) or
//! v3 (feature `api-v3`, QEMU 9.1 and later), as the rest of the plugin uses it: the inline
//! counters' state and scoreboards, the instructions of a block being translated, memory
//! access descriptions, and the translation flush. Nothing here knows what is counted.

use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;

use qemu_plugin::sys::{self, qemu_plugin_id_t, qemu_plugin_tb};

extern "C" {
    // Provided by QEMU's glib at load time.
    fn g_free(mem: *mut c_void);
}

/// The plugin's id, for resetting it from a callback.
pub(crate) static PLUGIN_ID: AtomicU64 = AtomicU64::new(0);
/// New translations count with inline adds (and check cuts only in blocks that may loop);
/// cleared when a second thread appears, as inline adds go to one address for every vCPU.
pub(crate) static INLINE: AtomicBool = AtomicBool::new(false);
/// What QEMU calls once a requested flush is done (the plugin layer sets it at registration).
pub(crate) static ON_RESET: OnceLock<extern "C" fn(qemu_plugin_id_t)> = OnceLock::new();

/// Asks QEMU to flush every translation and call us back with all vCPUs stopped (must be
/// called on a vCPU thread, so that QEMU defers the flush to a safe point).
pub(crate) fn request_reset() {
    let Some(&on_reset) = ON_RESET.get() else {
        return;
    };
    // SAFETY: our own id; the callback re-registers everything the reset removes.
    unsafe { sys::qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), Some(on_reset)) };
}

/// Asks QEMU to flush every translation and call `cb` (which must re-register every callback)
/// with all vCPUs stopped; called on a vCPU thread.
pub(crate) fn request_reset_with(cb: extern "C" fn(qemu_plugin_id_t)) {
    // SAFETY: our own id; the callback re-registers everything the reset removes.
    unsafe { sys::qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), Some(cb)) };
}

/// Decoded access descriptions (size shift, store bit), by QEMU's `meminfo` value: there are
/// few distinct values, and asking QEMU twice per access cost 7% of a metrics run.
static MEMINFO: [AtomicU64; 64] = [const { AtomicU64::new(u64::MAX) }; 64];

#[inline]
pub(crate) fn decode_meminfo(info: sys::qemu_plugin_meminfo_t) -> (u32, bool) {
    let slot = &MEMINFO[(info.wrapping_mul(0x9e37_79b1) >> 26) as usize];
    let cached = slot.load(Ordering::Relaxed);
    if cached >> 8 == u64::from(info) {
        return ((cached & 0x7f) as u32, cached & 0x80 != 0);
    }
    decode_meminfo_slow(info, slot)
}

#[cold]
#[inline(never)]
fn decode_meminfo_slow(info: sys::qemu_plugin_meminfo_t, slot: &AtomicU64) -> (u32, bool) {
    // SAFETY: plain queries of the access QEMU describes.
    let (shift, store) = unsafe {
        (
            sys::qemu_plugin_mem_size_shift(info),
            sys::qemu_plugin_mem_is_store(info),
        )
    };
    slot.store(
        u64::from(info) << 8 | u64::from(shift & 0x7f) | if store { 0x80 } else { 0 },
        Ordering::Relaxed,
    );
    (shift, store)
}

/// The single thread's inline counts under API v3, in QEMU's per-vCPU scoreboards (see
/// `fast.rs`): one scoreboard per [`CHUNK`](board) slots, and one with each vCPU's distance to
/// its next cut. Every inline-counted instruction shrinks the distance, so the instructions
/// follow from it: the distance set plus the instructions then, less the distance now (one
/// inline add per block fewer).
#[cfg(not(feature = "api-v1"))]
pub mod board {
    use std::sync::atomic::{AtomicPtr, AtomicU32, AtomicU64, Ordering};
    use std::sync::Mutex;

    use qemu_plugin::sys::{self, qemu_plugin_scoreboard, qemu_plugin_u64};

    /// Slots per scoreboard.
    const CHUNK: usize = 4096;
    /// A distance at or above this is negative: the cut is due.
    pub const USED_UP: u64 = 1 << 63;
    /// The largest distance set (never reached: no cut is that far).
    const FAR: u64 = 1 << 62;

    struct Boards {
        chunks: Vec<usize>,
        /// Per slot: the executions moved out of the scoreboard so far.
        taken: Vec<u64>,
    }

    static BOARDS: Mutex<Boards> = Mutex::new(Boards {
        chunks: Vec::new(),
        taken: Vec::new(),
    });
    /// Per vCPU: the distance to the next cut, less one.
    static THREAD: AtomicPtr<qemu_plugin_scoreboard> = AtomicPtr::new(std::ptr::null_mut());
    /// The single thread's vCPU.
    static VCPU: AtomicU32 = AtomicU32::new(0);
    /// The single thread's instructions counted inline plus its distance (wrapping): both as
    /// of the last [`set_distance`], and constant since, as inline adds move them in step.
    static ANCHOR: AtomicU64 = AtomicU64::new(0);

    fn boards() -> std::sync::MutexGuard<'static, Boards> {
        BOARDS.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn thread_board() -> *mut qemu_plugin_scoreboard {
        let p = THREAD.load(Ordering::Acquire);
        if !p.is_null() {
            return p;
        }
        // SAFETY: a new scoreboard of one u64 per vCPU, never freed.
        let new = unsafe { sys::qemu_plugin_scoreboard_new(8) };
        match THREAD.compare_exchange(
            std::ptr::null_mut(),
            new,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => new,
            Err(old) => {
                // SAFETY: ours, unused.
                unsafe { sys::qemu_plugin_scoreboard_free(new) };
                old
            }
        }
    }

    /// The entry of each vCPU's distance to its next cut, less one.
    pub fn distance() -> qemu_plugin_u64 {
        qemu_plugin_u64 {
            score: thread_board(),
            offset: 0,
        }
    }

    /// Slot `slot`'s entry in `b`, if its scoreboard exists.
    fn entry(b: &Boards, slot: usize) -> Option<qemu_plugin_u64> {
        let &score = b.chunks.get(slot / CHUNK)?;
        Some(qemu_plugin_u64 {
            score: score as *mut qemu_plugin_scoreboard,
            offset: 8 * (slot % CHUNK),
        })
    }

    /// Slot `slot`'s entry (its scoreboard exists: [`new_slot`] made it).
    pub fn slot(slot: usize) -> qemu_plugin_u64 {
        entry(&boards(), slot).expect("new_slot made the slot's scoreboard")
    }

    /// The single thread runs on `vcpu`.
    pub fn set_vcpu(vcpu: u32) {
        VCPU.store(vcpu, Ordering::Relaxed);
    }

    fn vcpu() -> u32 {
        VCPU.load(Ordering::Relaxed)
    }

    /// The single thread's instructions counted inline.
    pub fn total() -> u64 {
        ANCHOR
            .load(Ordering::Relaxed)
            .wrapping_sub(distance_of(vcpu()))
    }

    /// The single thread's next cut falls due at `at` instructions; `counted` of its
    /// instructions were counted by callbacks (its inline ones come from the scoreboard).
    pub fn set_distance(at: u64, counted: u64) {
        let inline = total();
        let d = set_distance_of(vcpu(), at, counted + inline);
        ANCHOR.store(inline.wrapping_add(d), Ordering::Relaxed);
    }

    /// A callback counted `insns` instructions: the distance shrinks as with inline counting
    /// (and the anchor with it: those are not inline instructions).
    pub fn consume(insns: u64) {
        ANCHOR.fetch_sub(insns, Ordering::Relaxed);
        // SAFETY: writing an entry of our scoreboard on the vCPU's own thread.
        unsafe { sys::qemu_plugin_u64_add(distance(), vcpu(), insns.wrapping_neg()) };
    }

    /// `vcpu`'s distance to its next cut, less one.
    pub fn distance_of(vcpu: u32) -> u64 {
        // SAFETY: reading an entry of our scoreboard.
        unsafe { sys::qemu_plugin_u64_get(distance(), vcpu) }
    }

    /// Sets `vcpu`'s distance for a cut at `at` instructions when it has run `total` (far
    /// ahead at most [`FAR`]; negative when the cut is already due); returns it.
    pub fn set_distance_of(vcpu: u32, at: u64, total: u64) -> u64 {
        let d = if at > total {
            (at - total - 1).min(FAR)
        } else {
            u64::MAX
        };
        // SAFETY: writing an entry of our scoreboard on the vCPU's own thread.
        unsafe { sys::qemu_plugin_u64_set(distance(), vcpu, d) };
        d
    }

    /// A callback on `vcpu` counted one execution of `slot` of `insns` instructions, as an
    /// inline add would have.
    pub fn count_of(vcpu: u32, slot: usize, insns: u64) {
        let e = self::slot(slot);
        // SAFETY: entries of our scoreboards, on the vCPU's own thread.
        unsafe {
            sys::qemu_plugin_u64_add(e, vcpu, 1);
            sys::qemu_plugin_u64_add(distance(), vcpu, insns.wrapping_neg());
        }
    }

    /// A new slot: its scoreboard is made with the first slot it holds.
    pub fn new_slot(slot: usize) {
        let mut b = boards();
        if slot / CHUNK >= b.chunks.len() {
            // SAFETY: a new scoreboard of CHUNK u64 per vCPU, never freed.
            let score = unsafe { sys::qemu_plugin_scoreboard_new(8 * CHUNK) };
            b.chunks.push(score as usize);
        }
        if b.taken.len() <= slot {
            b.taken.resize(slot + 1, 0);
        }
    }

    /// Moves out the executions `vcpu` counted inline in `slot` since the last take.
    pub fn take(slot: usize, vcpu: u32) -> u64 {
        let mut b = boards();
        let Some(e) = entry(&b, slot) else { return 0 };
        // SAFETY: `vcpu` runs no guest code meanwhile (its own thread, or all stopped).
        let n = unsafe { sys::qemu_plugin_u64_get(e, vcpu) };
        if n != 0 {
            // SAFETY: as above.
            unsafe { sys::qemu_plugin_u64_set(e, vcpu, 0) };
            b.taken[slot] += n;
        }
        n
    }

    /// Moves out the single thread's inline-counted instructions.
    pub fn take_total() -> u64 {
        let n = total();
        ANCHOR.store(distance_of(vcpu()), Ordering::Relaxed);
        n
    }

    /// The single thread's executions of `slot` counted inline since the start.
    pub fn cumulative(slot: usize) -> u64 {
        let b = boards();
        let taken = b.taken.get(slot).copied().unwrap_or(0);
        // SAFETY: reading an entry of our scoreboard.
        let now = entry(&b, slot).map_or(0, |e| unsafe { sys::qemu_plugin_u64_get(e, vcpu()) });
        taken + now
    }
}
/// The machine code of a block's instructions during its translation: QEMU's own bytes (API
/// v1 lends a pointer) or copies (v3 copies into a buffer).
pub(crate) struct InsnBytes {
    #[cfg(not(feature = "api-v1"))]
    copies: Vec<([u8; 16], usize)>,
}

impl InsnBytes {
    /// # Safety
    /// `tb` is the block being translated and has `n` instructions.
    #[cfg(feature = "api-v1")]
    pub(crate) unsafe fn of(_tb: *mut qemu_plugin_tb, _n: usize) -> InsnBytes {
        InsnBytes {}
    }

    /// # Safety
    /// As above.
    #[cfg(not(feature = "api-v1"))]
    pub(crate) unsafe fn of(tb: *mut qemu_plugin_tb, n: usize) -> InsnBytes {
        let copies = (0..n)
            .map(|i| {
                let p = sys::qemu_plugin_tb_get_insn(tb, i);
                let mut buf = [0u8; 16];
                let len = sys::qemu_plugin_insn_data(p, buf.as_mut_ptr() as *mut c_void, 16);
                (buf, len.min(16))
            })
            .collect();
        InsnBytes { copies }
    }

    /// Instruction `i`'s bytes (`ptr` is its handle).
    ///
    /// # Safety
    /// `ptr` is instruction `i` of the block being translated.
    #[cfg(feature = "api-v1")]
    pub(crate) unsafe fn get(&self, ptr: *mut sys::qemu_plugin_insn, _i: usize) -> &[u8] {
        let size = sys::qemu_plugin_insn_size(ptr);
        let data = sys::qemu_plugin_insn_data(ptr) as *const u8;
        if data.is_null() {
            &[]
        } else {
            std::slice::from_raw_parts(data, size)
        }
    }

    /// # Safety
    /// As above.
    #[cfg(not(feature = "api-v1"))]
    pub(crate) unsafe fn get(&self, _ptr: *mut sys::qemu_plugin_insn, i: usize) -> &[u8] {
        let (buf, len) = &self.copies[i];
        &buf[..*len]
    }
}

/// One instruction of the TB being translated, as the translation-time analysis sees it.
pub(crate) struct Insn<'a> {
    pub vaddr: u64,
    pub bytes: &'a [u8],
    pub ptr: *mut sys::qemu_plugin_insn,
}

impl Insn<'_> {
    /// QEMU's disassembly of the instruction (only asked for near page ends: it allocates).
    pub fn disas(&self) -> String {
        // SAFETY: valid during the translation callback; QEMU returns a g_malloc'd string.
        unsafe {
            let p = sys::qemu_plugin_insn_disas(self.ptr);
            if p.is_null() {
                return String::new();
            }
            let s = CStr::from_ptr(p).to_string_lossy().into_owned();
            g_free(p as *mut c_void);
            s
        }
    }
}
