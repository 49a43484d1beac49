//! The QEMU-facing part: registration and the raw callbacks QEMU calls, for plugin API v1
//! (feature `api-v1`, QEMU 6.0-8.2) or v3 (feature `api-v3`, QEMU 9.1 and later).
//!
//! The qemu-plugin crate owns `qemu_plugin_install`; we override `register_default` so that only
//! the callbacks we need are registered (its defaults take a global lock on every syscall), and
//! register the hot execution callback with our own pointer as user data.

use bbv_plugin_contract::files;
use std::ffi::{c_uint, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use qemu_plugin::install::{Args, Info};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::sys::{self, qemu_plugin_cb_flags, qemu_plugin_id_t, qemu_plugin_tb};
use qemu_plugin::PluginId;

use crate::blocks::{self, TbInfo};
use crate::{parse_args, thread, CONFIG};

extern "C" {
    // Provided by QEMU's glib at load time.
    fn g_free(mem: *mut c_void);
}

struct BbvPlugin;

impl HasCallbacks for BbvPlugin {}

impl Register for BbvPlugin {
    fn register_default(
        &mut self,
        id: PluginId,
        args: &Args,
        info: &Info,
    ) -> qemu_plugin::Result<()> {
        let cfg = match parse_args(&args.raw, &info.target_name) {
            Ok(cfg) => cfg,
            Err(msg) => {
                // Without a valid configuration there is nowhere to count into; leave the error
                // where the host looks (if the directory is known) and let the guest run.
                if let Some(dir) = args.raw.iter().find_map(|a| a.strip_prefix("dir=")) {
                    let _ = std::fs::write(std::path::Path::new(dir).join(files::ERROR), msg);
                }
                return Ok(());
            }
        };
        if let Err(e) = blocks::init(&cfg).and_then(|_| crate::fast::init(&cfg)) {
            let _ = std::fs::write(
                cfg.host.dir.join(files::ERROR),
                format!("creating the block table: {e}"),
            );
            return Ok(());
        }
        if let Some(markers) = &cfg.host.markers {
            if let Err(msg) = crate::replay::init(&cfg.host.dir, markers) {
                let _ = std::fs::write(cfg.host.dir.join(files::ERROR), msg);
                return Ok(());
            }
        }
        if cfg.metrics() {
            if let Err(e) = crate::metrics::init(&cfg) {
                let _ = std::fs::write(
                    cfg.host.dir.join(files::ERROR),
                    format!("creating metrics: {e}"),
                );
                return Ok(());
            }
        }
        crate::fork::install(&cfg.host.dir);
        INLINE.store(!cfg.host.exact, Ordering::Relaxed);
        thread::METRICS.store(cfg.metrics(), Ordering::Relaxed);
        let _ = CONFIG.set(cfg);
        PLUGIN_ID.store(id, Ordering::Relaxed);
        register_all(id);
        Ok(())
    }
}

/// The plugin's id, for resetting it from a callback.
static PLUGIN_ID: AtomicU64 = AtomicU64::new(0);
/// New translations count with inline adds (and check cuts only in blocks that may loop);
/// cleared when a second thread appears, as inline adds go to one address for every vCPU.
pub(crate) static INLINE: AtomicBool = AtomicBool::new(false);

fn register_all(id: qemu_plugin_id_t) {
    // SAFETY: registering callbacks with the id QEMU gave us.
    unsafe {
        sys::qemu_plugin_register_vcpu_init_cb(id, Some(on_vcpu_init));
        sys::qemu_plugin_register_vcpu_exit_cb(id, Some(on_vcpu_exit));
        sys::qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_tb_trans));
        sys::qemu_plugin_register_atexit_cb(id, Some(on_exit), std::ptr::null_mut());
        if CONFIG.get().is_some_and(|c| c.host.flow > 0) {
            sys::qemu_plugin_register_vcpu_syscall_cb(id, Some(on_syscall));
            sys::qemu_plugin_register_vcpu_syscall_ret_cb(id, Some(on_syscall_ret));
        }
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn on_syscall(
    _id: qemu_plugin_id_t,
    vcpu: c_uint,
    _num: i64,
    _a1: u64,
    _a2: u64,
    _a3: u64,
    _a4: u64,
    _a5: u64,
    _a6: u64,
    _a7: u64,
    _a8: u64,
) {
    thread::syscall(vcpu, true);
}

extern "C" fn on_syscall_ret(_id: qemu_plugin_id_t, vcpu: c_uint, _num: i64, _ret: i64) {
    thread::syscall(vcpu, false);
}

extern "C" fn on_exit(_id: qemu_plugin_id_t, _udata: *mut c_void) {
    thread::finish_all();
}

extern "C" fn on_marker(vcpu: c_uint, udata: *mut c_void) {
    crate::replay::hit(vcpu, udata);
}

/// Asks QEMU to flush every translation and call us back with all vCPUs stopped (must be
/// called on a vCPU thread, so that QEMU defers the flush to a safe point).
pub(crate) fn request_reset() {
    // SAFETY: our own id; the callback re-registers everything the reset removes.
    unsafe { sys::qemu_plugin_reset(PLUGIN_ID.load(Ordering::Relaxed), Some(on_reset)) };
}

extern "C" fn on_reset(id: qemu_plugin_id_t) {
    thread::after_reset();
    register_all(id);
}

extern "C" fn on_candidate(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: as in on_tb_exec.
    let tb = unsafe { &*(udata as *const TbInfo) };
    thread::check_cut(vcpu, tb);
}

qemu_plugin::register!(BbvPlugin);

extern "C" fn on_vcpu_init(_id: qemu_plugin_id_t, vcpu: c_uint) {
    thread::start(vcpu);
}

extern "C" fn on_vcpu_exit(_id: qemu_plugin_id_t, vcpu: c_uint) {
    thread::finish_vcpu(vcpu);
}

extern "C" fn on_tb_exec(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: udata is the TbInfo leaked for this TB in on_tb_trans; it is never freed.
    let tb = unsafe { &*(udata as *const TbInfo) };
    thread::exec_fast(vcpu, tb);
}

extern "C" fn on_metrics_block(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: as in on_tb_exec.
    let tb = unsafe { &*(udata as *const TbInfo) };
    thread::metrics_block(vcpu, tb);
}

/// Decoded access descriptions (size shift, store bit), by QEMU's `meminfo` value: there are
/// few distinct values, and asking QEMU twice per access cost 7% of a metrics run.
static MEMINFO: [AtomicU64; 64] = [const { AtomicU64::new(u64::MAX) }; 64];

#[inline]
fn decode_meminfo(info: sys::qemu_plugin_meminfo_t) -> (u32, bool) {
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

/// [`on_metrics_block`] and [`on_mem`] doing nothing (`metrics_calls=empty`).
extern "C" fn on_block_empty(_: c_uint, _: *mut c_void) {}

extern "C" fn on_mem_empty(_: c_uint, _: sys::qemu_plugin_meminfo_t, _: u64, _: *mut c_void) {}

extern "C" fn on_mem(vcpu: c_uint, info: sys::qemu_plugin_meminfo_t, vaddr: u64, _: *mut c_void) {
    let (shift, store) = decode_meminfo(info);
    thread::metrics_access(vcpu, vaddr, 1 << shift, store);
}

type MemCb = extern "C" fn(c_uint, sys::qemu_plugin_meminfo_t, u64, *mut c_void);
type BlockCb = extern "C" fn(c_uint, *mut c_void);

/// Registers the metrics callback of every memory access of a block's counted instructions.
///
/// # Safety
/// `tb` is the block being translated.
unsafe fn register_accesses(tb: *mut qemu_plugin_tb, counted: usize, empty: bool) {
    let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
    let cb: MemCb = if empty { on_mem_empty } else { on_mem };
    for i in 0..counted {
        let p = sys::qemu_plugin_tb_get_insn(tb, i);
        let rw = sys::qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW;
        sys::qemu_plugin_register_vcpu_mem_cb(p, Some(cb), flags, rw, std::ptr::null_mut());
    }
}

extern "C" fn on_rep_exec(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: as in on_tb_exec.
    let tb = unsafe { &*(udata as *const TbInfo) };
    thread::exec_rep(vcpu, tb);
}

/// Inline counting of a block: one add to its slot, one to the total (API v1's global inline
/// adds; QEMU 9.0 removed them).
///
/// # Safety
/// `tb` is the block being translated.
#[cfg(feature = "api-v1")]
unsafe fn count_inline(tb: *mut qemu_plugin_tb, info: &TbInfo) {
    let add = sys::qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64;
    sys::qemu_plugin_register_vcpu_tb_exec_inline(tb, add, info.execs as *mut c_void, 1);
    let total = crate::fast::TOTAL.as_ptr() as *mut c_void;
    sys::qemu_plugin_register_vcpu_tb_exec_inline(tb, add, total, info.insns);
}

/// Inline counting of a block at API v3: per-vCPU adds to its slot's scoreboard entry and
/// (down) to the vCPU's distance to the next cut, from which its instructions follow.
///
/// # Safety
/// `tb` is the block being translated.
#[cfg(not(feature = "api-v1"))]
unsafe fn count_inline(tb: *mut qemu_plugin_tb, info: &TbInfo) {
    let add = sys::qemu_plugin_op::QEMU_PLUGIN_INLINE_ADD_U64;
    let per_vcpu = sys::qemu_plugin_register_vcpu_tb_exec_inline_per_vcpu;
    per_vcpu(tb, add, board::slot(info.slot as usize), 1);
    per_vcpu(tb, add, board::distance(), info.insns.wrapping_neg());
}

/// The cut check of an inline-counted block that may close a loop, registered before its
/// inline adds (API v3 runs a block's callbacks and adds in registration order; v1 runs the
/// callbacks first anyway), so that it sees the total without the block. Under API v3 it is a
/// conditional callback that QEMU makes only when the distance to the next cut is used up;
/// with metrics, which need every block, it is made every time.
///
/// # Safety
/// `tb` is the block being translated; `udata` its leaked `TbInfo`.
unsafe fn register_check(tb: *mut qemu_plugin_tb, udata: *mut c_void, every_time: bool) {
    let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
    #[cfg(not(feature = "api-v1"))]
    if !every_time {
        let ge = sys::qemu_plugin_cond::QEMU_PLUGIN_COND_GE;
        sys::qemu_plugin_register_vcpu_tb_exec_cond_cb(
            tb,
            Some(on_candidate),
            flags,
            ge,
            board::distance(),
            board::USED_UP,
            udata,
        );
        return;
    }
    let _ = every_time;
    sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(on_candidate), flags, udata);
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
struct InsnBytes {
    #[cfg(not(feature = "api-v1"))]
    copies: Vec<([u8; 16], usize)>,
}

impl InsnBytes {
    /// # Safety
    /// `tb` is the block being translated and has `n` instructions.
    #[cfg(feature = "api-v1")]
    unsafe fn of(_tb: *mut qemu_plugin_tb, _n: usize) -> InsnBytes {
        InsnBytes {}
    }

    /// # Safety
    /// As above.
    #[cfg(not(feature = "api-v1"))]
    unsafe fn of(tb: *mut qemu_plugin_tb, n: usize) -> InsnBytes {
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
    unsafe fn get(&self, ptr: *mut sys::qemu_plugin_insn, _i: usize) -> &[u8] {
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
    unsafe fn get(&self, _ptr: *mut sys::qemu_plugin_insn, i: usize) -> &[u8] {
        let (buf, len) = &self.copies[i];
        &buf[..*len]
    }
}

/// One instruction of the TB being translated, as the translation-time analysis sees it.
pub(crate) struct Insn<'a> {
    pub vaddr: u64,
    pub bytes: &'a [u8],
    ptr: *mut sys::qemu_plugin_insn,
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

extern "C" fn on_tb_trans(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    let Some(cfg) = CONFIG.get() else { return };
    // SAFETY: the tb handle and its instructions are valid for the duration of this callback.
    unsafe {
        let n = sys::qemu_plugin_tb_n_insns(tb);
        if n == 0 {
            return;
        }
        let code = InsnBytes::of(tb, n);
        let insn = |i: usize| {
            let ptr = sys::qemu_plugin_tb_get_insn(tb, i);
            Insn {
                vaddr: sys::qemu_plugin_insn_vaddr(ptr),
                bytes: code.get(ptr, i),
                ptr,
            }
        };
        let first = insn(0);
        let haddr = sys::qemu_plugin_insn_haddr(first.ptr) as u64;
        let Some(info) = blocks::analyze(cfg, n, haddr, insn) else {
            return;
        };
        let rep = info.rep_first || info.rep_last != 0;
        let udata = info as *const TbInfo as *mut c_void;
        let inline = INLINE.load(Ordering::Relaxed) && !rep;
        // The block's metrics are counted by its counting callback (per-block counting, cuts
        // after the block that crosses a boundary: the block's metrics first) or by the cut
        // check (inline counting, cuts before the block: the cut first), so that the metrics
        // see the block on the same side of a cut as the vectors; other inline blocks get a
        // callback of their own.
        if inline {
            let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
            if info.may_loop {
                register_check(tb, udata, cfg.metrics());
            } else if cfg.metrics() {
                let cb: BlockCb = if cfg.model().calls_only {
                    on_block_empty
                } else {
                    on_metrics_block
                };
                sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(cb), flags, udata);
            }
            count_inline(tb, info);
        } else {
            let cb: extern "C" fn(c_uint, *mut c_void) = if rep { on_rep_exec } else { on_tb_exec };
            let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
            sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(cb), flags, udata);
        }
        if cfg.metrics() {
            register_accesses(tb, info.insns as usize, cfg.model().calls_only);
        }
        if crate::replay::active() {
            // Registered after the block's own counting, so the block's instructions are
            // already added when a marker instruction in it runs.
            let located = |i: usize| {
                let p = sys::qemu_plugin_tb_get_insn(tb, i);
                (
                    sys::qemu_plugin_insn_haddr(p) as u64,
                    sys::qemu_plugin_insn_vaddr(p),
                )
            };
            for (i, hit) in crate::replay::hits(info.insns as usize, located) {
                let p = sys::qemu_plugin_tb_get_insn(tb, i);
                let data = hit as *const crate::replay::Hit as *mut c_void;
                let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
                sys::qemu_plugin_register_vcpu_insn_exec_cb(p, Some(on_marker), flags, data);
            }
        }
    }
}
