//! The top layer: registration and the raw callbacks QEMU calls, each handing its event to the
//! counting engine ([`crate::thread`]) or a feature (metrics, replay), for plugin API v1
//! (feature `api-v1`, QEMU 6.0-8.2) or v3 (feature `api-v3`, QEMU 9.1 and later).
//!
//! The qemu-plugin crate owns `qemu_plugin_install`; we override `register_default` so that only
//! the callbacks we need are registered (its defaults take a global lock on every syscall), and
//! register the hot execution callback with our own pointer as user data.

use bbv_plugin_contract::files;
use std::ffi::{c_uint, c_void};
use std::sync::atomic::Ordering;

use qemu_plugin::install::{Args, Info};
use qemu_plugin::plugin::{HasCallbacks, Register};
use qemu_plugin::sys::{self, qemu_plugin_cb_flags, qemu_plugin_id_t, qemu_plugin_tb};
use qemu_plugin::PluginId;

use crate::blocks::{self, TbInfo};
#[cfg(not(feature = "api-v1"))]
use crate::ffi::board;
use crate::ffi::{decode_meminfo, Insn, InsnBytes, INLINE, ON_RESET, PLUGIN_ID};
use crate::{parse_args, thread, CONFIG};

struct BbvPlugin;

/// The guest's first block was translated (checkpoints read its stack pointer there).
static FIRST_SEEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

impl HasCallbacks for BbvPlugin {}

impl Register for BbvPlugin {
    fn register_default(
        &mut self,
        id: PluginId,
        args: &Args,
        info: &Info,
    ) -> qemu_plugin::Result<()> {
        let dir = args.raw.iter().find_map(|a| a.strip_prefix("dir="));
        crate::guard::install(dir.map(std::path::Path::new));
        let cfg = match parse_args(&args.raw, &info.target_name) {
            Ok(cfg) => cfg,
            Err(msg) => {
                // Without a valid configuration there is nowhere to count into; leave the error
                // where the host looks (if the directory is known) and let the guest run.
                if let Some(dir) = dir {
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
            if let Err(e) = crate::model::init(&cfg) {
                let _ = std::fs::write(
                    cfg.host.dir.join(files::ERROR),
                    format!("creating metrics: {e}"),
                );
                return Ok(());
            }
        }
        if let (Some(path), Some(isa)) = (&cfg.host.record, cfg.isa) {
            if let Err(msg) = crate::record::init(path, isa) {
                let _ = std::fs::write(cfg.host.dir.join(files::ERROR), msg);
                return Ok(());
            }
        }
        crate::record::REP_ITERATIONS.store(cfg.host.rep_iterations, Ordering::Relaxed);
        if let (Some(file), Some(isa)) = (&cfg.host.trace, cfg.isa) {
            match crate::record::init_windows(file, isa) {
                Ok(mut sift) if !sift.is_empty() => {
                    crate::replay::bound(&mut sift);
                    crate::feed::install(sift, isa, !cfg.host.rep_iterations);
                }
                Ok(_) => {}
                Err(msg) => {
                    let _ = std::fs::write(cfg.host.dir.join(files::ERROR), msg);
                    return Ok(());
                }
            }
            crate::record::set_reset(on_record_reset);
            for event in crate::replay::first_events() {
                crate::record::arm(event, true);
                crate::feed::arm(event, true);
            }
        }
        if cfg.host.syscalls {
            if let Err(msg) = crate::syscall_log::init(&cfg.host.dir) {
                let _ = std::fs::write(cfg.host.dir.join(files::ERROR), msg);
                return Ok(());
            }
        }
        if let Some(file) = &cfg.host.checkpoint {
            if let Err(msg) = crate::checkpoint::init(&cfg.host.dir, file) {
                let _ = std::fs::write(cfg.host.dir.join(files::ERROR), msg);
                return Ok(());
            }
        }
        crate::fork::install(&cfg.host.dir);
        if cfg.host.turns > 0 {
            if cfg!(feature = "api-v1") {
                let msg = "turns=Q needs QEMU 9.1 or later (a thread starts on its parent here)";
                let _ = std::fs::write(cfg.host.dir.join(files::ERROR), msg);
                return Ok(());
            }
            let calls = if cfg.x86 {
                crate::turns::Calls::X86_64
            } else {
                crate::turns::Calls::GENERIC
            };
            crate::turns::install(cfg.host.dir.join(files::SCHEDULE), calls);
        }
        // Under turns thread 1 counts by callbacks from the start, so that its hand-over to
        // per-thread counting needs no flush of every translation (see turns.rs).
        INLINE.store(!cfg.host.exact && cfg.host.turns == 0, Ordering::Relaxed);
        thread::METRICS.store(cfg.metrics(), Ordering::Relaxed);
        let _ = CONFIG.set(cfg);
        PLUGIN_ID.store(id, Ordering::Relaxed);
        let _ = ON_RESET.set(on_reset);
        register_all(id);
        Ok(())
    }
}

fn register_all(id: qemu_plugin_id_t) {
    // SAFETY: registering callbacks with the id QEMU gave us.
    unsafe {
        sys::qemu_plugin_register_vcpu_init_cb(id, Some(on_vcpu_init));
        sys::qemu_plugin_register_vcpu_exit_cb(id, Some(on_vcpu_exit));
        sys::qemu_plugin_register_vcpu_tb_trans_cb(id, Some(on_tb_trans));
        sys::qemu_plugin_register_atexit_cb(id, Some(on_exit), std::ptr::null_mut());
        if crate::checkpoint::active()
            || crate::syscall_log::active()
            || CONFIG
                .get()
                .is_some_and(|c| c.host.flow > 0 || c.host.turns > 0)
        {
            sys::qemu_plugin_register_vcpu_syscall_cb(id, Some(on_syscall));
            sys::qemu_plugin_register_vcpu_syscall_ret_cb(id, Some(on_syscall_ret));
        }
    }
}

#[allow(clippy::too_many_arguments)]
extern "C" fn on_syscall(
    _id: qemu_plugin_id_t,
    vcpu: c_uint,
    num: i64,
    a1: u64,
    a2: u64,
    a3: u64,
    a4: u64,
    a5: u64,
    a6: u64,
    _a7: u64,
    _a8: u64,
) {
    thread::syscall(vcpu, num, [a1, a2, a3, a4, a5, a6]);
    crate::checkpoint::syscall(vcpu, num, [a1, a2, a3, a4, a5, a6]);
    crate::syscall_log::call(vcpu, num, a1);
}

extern "C" fn on_syscall_ret(_id: qemu_plugin_id_t, vcpu: c_uint, _num: i64, ret: i64) {
    if let Some(cfg) = CONFIG.get() {
        thread::syscall_ret(cfg, vcpu, ret);
    }
    crate::checkpoint::syscall_ret(vcpu, ret);
    crate::syscall_log::ret(vcpu, ret);
}

/// The guest's registers, read inside a callback registered with `QEMU_PLUGIN_CB_R_REGS`
/// (none below QEMU 9.1).
fn read_registers() -> crate::checkpoint::Registers {
    #[cfg(not(feature = "api-v1"))]
    if let Ok(list) = qemu_plugin::qemu_plugin_get_registers() {
        return list
            .iter()
            .filter_map(|r| Some((r.name.clone(), r.read().ok()?)))
            .collect();
    }
    Vec::new()
}

/// The guest's first block runs: checkpoints learn the loader's mappings.
extern "C" fn on_first_block(_vcpu: c_uint, _udata: *mut c_void) {
    crate::checkpoint::first_instruction(read_registers());
}

/// Flags for callbacks that may read registers (checkpoints).
fn marker_flags() -> qemu_plugin_cb_flags {
    if crate::checkpoint::active() {
        qemu_plugin_cb_flags::QEMU_PLUGIN_CB_R_REGS
    } else {
        qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS
    }
}

// The callbacks below are where the configuration comes from its global (QEMU's callbacks
// carry no context of ours); everything they call takes it as an argument.

extern "C" fn on_exit(_id: qemu_plugin_id_t, _udata: *mut c_void) {
    crate::guard::inject("exit");
    if let Some(cfg) = CONFIG.get() {
        thread::finish_all(cfg);
    }
    if !crate::fork::forked() {
        crate::record::finish();
        crate::feed::finish();
    }
    crate::syscall_log::finish();
}

extern "C" fn on_marker(vcpu: c_uint, udata: *mut c_void) {
    if let Some(cfg) = CONFIG.get() {
        crate::replay::hit(cfg, vcpu, udata, read_registers);
    }
}

extern "C" fn on_reset(id: qemu_plugin_id_t) {
    if let Some(cfg) = CONFIG.get() {
        thread::after_reset(cfg);
    }
    register_all(id);
}

/// After a flush the recorder asked for (a window about to open, or none open any more).
extern "C" fn on_record_reset(id: qemu_plugin_id_t) {
    register_all(id);
}

extern "C" fn on_candidate(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: as in on_tb_exec.
    let tb = unsafe { &*(udata as *const TbInfo) };
    thread::check_cut(vcpu, tb);
}

qemu_plugin::register!(BbvPlugin);

extern "C" fn on_vcpu_init(_id: qemu_plugin_id_t, vcpu: c_uint) {
    if let Some(cfg) = CONFIG.get() {
        thread::start(cfg, vcpu);
    }
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

/// [`on_metrics_block`] and [`on_mem`] doing nothing (`metrics_calls=empty`).
extern "C" fn on_block_empty(_: c_uint, _: *mut c_void) {}

extern "C" fn on_mem_empty(_: c_uint, _: sys::qemu_plugin_meminfo_t, _: u64, _: *mut c_void) {}

extern "C" fn on_mem(vcpu: c_uint, info: sys::qemu_plugin_meminfo_t, vaddr: u64, _: *mut c_void) {
    let (shift, store) = decode_meminfo(info);
    thread::metrics_access(vcpu, vaddr, 1 << shift, store);
}

extern "C" fn on_rec_insn(vcpu: c_uint, udata: *mut c_void) {
    // SAFETY: udata is the RecInsn leaked for this instruction in on_tb_trans.
    let insn = unsafe { &*(udata as *const crate::record::RecInsn) };
    if crate::feed::active() {
        if let Some(number) = thread::number(vcpu) {
            crate::feed::exec(number, &insn.code);
        }
    } else if thread::is_first(vcpu) {
        crate::record::exec(insn);
    }
}

extern "C" fn on_rec_mem(
    vcpu: c_uint,
    info: sys::qemu_plugin_meminfo_t,
    vaddr: u64,
    _: *mut c_void,
) {
    let (_, store) = decode_meminfo(info);
    if crate::feed::active() {
        if let Some(number) = thread::number(vcpu) {
            crate::feed::access(number, vaddr, store);
        }
    } else if thread::is_first(vcpu) {
        crate::record::access(vaddr, store);
    }
}

/// Registers the recorder's callbacks on every instruction of a block being translated.
///
/// # Safety
/// `tb` is the block being translated, `n` its instructions, `code` their bytes.
unsafe fn register_records(tb: *mut qemu_plugin_tb, n: usize, code: &InsnBytes) {
    let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_NO_REGS;
    for i in 0..n {
        let p = sys::qemu_plugin_tb_get_insn(tb, i);
        let insn = crate::record::translate(code.get(p, i), sys::qemu_plugin_insn_vaddr(p));
        let data = insn as *const crate::record::RecInsn as *mut c_void;
        sys::qemu_plugin_register_vcpu_insn_exec_cb(p, Some(on_rec_insn), flags, data);
        if insn.has_memory() {
            let rw = sys::qemu_plugin_mem_rw::QEMU_PLUGIN_MEM_RW;
            sys::qemu_plugin_register_vcpu_mem_cb(p, Some(on_rec_mem), flags, rw, data);
        }
    }
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

extern "C" fn on_tb_trans(_id: qemu_plugin_id_t, tb: *mut qemu_plugin_tb) {
    let Some(cfg) = CONFIG.get() else { return };
    crate::guard::inject("tb_trans");
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
        if crate::checkpoint::active() && !FIRST_SEEN.swap(true, Ordering::Relaxed) {
            let base = haddr.wrapping_sub(first.vaddr);
            bbv_guest::state::GUEST_BASE.store(base, Ordering::Relaxed);
            let flags = qemu_plugin_cb_flags::QEMU_PLUGIN_CB_R_REGS;
            let none = std::ptr::null_mut();
            sys::qemu_plugin_register_vcpu_tb_exec_cb(tb, Some(on_first_block), flags, none);
        }
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
        if crate::record::instrumenting() {
            register_records(tb, n, &code);
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
                sys::qemu_plugin_register_vcpu_insn_exec_cb(
                    p,
                    Some(on_marker),
                    marker_flags(),
                    data,
                );
            }
        }
    }
}
