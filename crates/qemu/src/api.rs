//! The QEMU-facing part: registration and the raw callbacks QEMU calls, for plugin API v1
//! (feature `api-v1`, QEMU 6.0-8.2) or v3 (feature `api-v3`, QEMU 9.1 and later).
//!
//! The qemu-plugin crate owns `qemu_plugin_install`; we override `register_default` so that only
//! the callbacks we need are registered (its defaults take a global lock on every syscall), and
//! register the hot execution callback with our own pointer as user data.

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
                    let _ = std::fs::write(std::path::Path::new(dir).join("error"), msg);
                }
                return Ok(());
            }
        };
        if let Err(e) = blocks::init(&cfg).and_then(|_| crate::fast::init(&cfg)) {
            let _ = std::fs::write(
                cfg.dir.join("error"),
                format!("creating the block table: {e}"),
            );
            return Ok(());
        }
        if let Some(markers) = &cfg.markers {
            if let Err(msg) = crate::replay::init(&cfg.dir, markers) {
                let _ = std::fs::write(cfg.dir.join("error"), msg);
                return Ok(());
            }
        }
        if cfg.metrics {
            if let Err(e) = crate::metrics::init(&cfg) {
                let _ = std::fs::write(cfg.dir.join("error"), format!("creating metrics: {e}"));
                return Ok(());
            }
        }
        crate::fork::install(&cfg.dir);
        INLINE.store(!cfg.exact && INLINE_COUNTING, Ordering::Relaxed);
        thread::METRICS.store(cfg.metrics, Ordering::Relaxed);
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
        if CONFIG.get().is_some_and(|c| c.flow > 0) {
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

extern "C" fn on_mem(vcpu: c_uint, info: sys::qemu_plugin_meminfo_t, vaddr: u64, _: *mut c_void) {
    let (shift, store) = decode_meminfo(info);
    thread::metrics_access(vcpu, vaddr, 1 << shift, store);
}

/// Registers the metrics callback of every memory access of a block's counted instructions.
///
/// # Safety
/// `tb` is the block being translated.
unsafe fn register_accesses(tb: *mut qemu_plugin_tb, counted: usize) {
    let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
    for i in 0..counted {
        let p = sys::qemu_plugin_tb_get_insn(tb, i);
        let rw = sys::qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW;
        sys::qemu_plugin_register_vcpu_mem_cb(p, Some(on_mem), flags, rw, std::ptr::null_mut());
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

/// API v3 has only per-vCPU inline adds into QEMU's scoreboards: until counting moves there,
/// every block is counted by its callback ([`INLINE`] stays off).
#[cfg(not(feature = "api-v1"))]
unsafe fn count_inline(_tb: *mut qemu_plugin_tb, _info: &TbInfo) {
    unreachable!("inline counting is off at this API level");
}

/// Whether blocks may be counted inline at this API level.
pub(crate) const INLINE_COUNTING: bool = cfg!(feature = "api-v1");

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
            count_inline(tb, info);
            let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
            if info.may_loop {
                sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(on_candidate), flags, udata);
            } else if cfg.metrics {
                sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(on_metrics_block), flags, udata);
            }
        } else {
            let cb: extern "C" fn(c_uint, *mut c_void) = if rep { on_rep_exec } else { on_tb_exec };
            let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
            sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(cb), flags, udata);
        }
        if cfg.metrics {
            register_accesses(tb, info.insns as usize);
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
