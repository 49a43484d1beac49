//! Per-guest-thread counting state, indexed by vCPU (each guest thread is one vCPU in user mode).
//!
//! A thread's completed intervals go to `thread.N.bb` with one write each, and its totals and
//! unfinished interval live in `thread.N.state` (a shared mapping), so nothing is lost when the
//! process dies without running any plugin callback; the host writes the closing comment.

use bbv_plugin_contract::files;
use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};

use bbv_profile::{BbvWriter, CountStore, CutMode, IntervalCounter};

use crate::blocks::TbInfo;
use crate::fast;
use crate::flow::Pace;
use crate::metrics::ThreadMetrics;
use crate::slices::{self, ThreadSlices};
use crate::state::Shared;
use crate::turns::{self, Turn};
use crate::watch::Watch;
use crate::{report_error, Config};

/// vCPU indexes are reused, so this bounds live threads, not threads over the run.
const MAX_VCPUS: usize = 4096;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicPtr<Thread> = AtomicPtr::new(std::ptr::null_mut());
static THREADS: [AtomicPtr<Thread>; MAX_VCPUS] = [EMPTY; MAX_VCPUS];
static NEXT_NUMBER: AtomicU32 = AtomicU32::new(1);
/// Thread 1, counted by the fast path until a second thread appears.
static FIRST: AtomicPtr<Thread> = AtomicPtr::new(std::ptr::null_mut());
/// Set when a second thread appears: from then on every thread counts per block execution.
static MULTI: AtomicBool = AtomicBool::new(false);
/// Fast-path rep tracking: the rep instruction the last counted block ended with, and the
/// total at that moment (a continuation iteration adds nothing to the total).
static LAST_REP_PC: AtomicU64 = AtomicU64::new(0);
static LAST_REP_TOTAL: AtomicU64 = AtomicU64::new(u64::MAX);
/// Per-interval metrics are on (`metrics=on`): the counting callbacks also count each block's
/// metrics (see `plugin::on_tb_trans` for which side of a cut they fall on).
pub static METRICS: AtomicBool = AtomicBool::new(false);
/// Between the second thread's creation and the flush that ends inline counting.
static SWITCHING: AtomicBool = AtomicBool::new(false);
/// The thread whose creation started the switch.
static NEWEST: AtomicPtr<Thread> = AtomicPtr::new(std::ptr::null_mut());
/// Thread 1's vCPU.
static FIRST_VCPU: AtomicU32 = AtomicU32::new(0);
/// QEMU 9.0 and later (API v3) announce a new vCPU on its own thread once it runs, while its
/// parent runs on (7.2 did so on the parent, inside its clone): thread 1's hand-over then
/// waits for a reset, with every vCPU stopped, and meanwhile the new thread counts on its own
/// (its callbacks by vCPU, its inline adds in its own scoreboard entries).
const INIT_ON_NEW_THREAD: bool = cfg!(not(feature = "api-v1"));

/// API v3, once several threads run: blocks still count inline, each vCPU in its own
/// scoreboard entries, with a conditional cut check per thread (only for plain collection:
/// slices, flow control, marker windows, metrics and replay need every block).
static MULTI_INLINE: AtomicBool = AtomicBool::new(false);

/// Held while the reset harvests every thread and while an exiting thread harvests itself: a
/// thread's exit hook runs outside QEMU's exclusive section, so the two could meet.
static HARVESTING: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Whether a block on `vcpu` counts in the single-thread fast path.
#[inline(always)]
fn fast_path(vcpu: u32) -> bool {
    !MULTI.load(Ordering::Relaxed)
        && (!INIT_ON_NEW_THREAD || vcpu == FIRST_VCPU.load(Ordering::Relaxed))
}

struct Thread {
    /// Its number (creation order, 1 the main thread).
    number: u32,
    counter: IntervalCounter<Shared>,
    out: Option<File>,
    line: Vec<u8>,
    last_rep: u64,
    watch: Watch,
    /// LoopPoint-style slices (`slices=N`), once a second thread runs.
    slices: Option<ThreadSlices>,
    /// Flow control (`flow=Q`).
    pace: Option<Pace>,
    /// Deterministic turns (`turns=Q`).
    turn: Option<Turn>,
    /// Per-interval metrics (`metrics=on`).
    metrics: Option<ThreadMetrics>,
    /// Thread 1's cuts also cut the metrics of all threads.
    main: bool,
    /// The vCPU the thread runs on (QEMU reuses indexes of exited threads).
    vcpu: u32,
    /// With [`MULTI_INLINE`]: the thread's instructions counted inline plus its vCPU's
    /// distance, as of the last time the distance was set (see fast.rs).
    anchor: u64,
    /// It ended and took its counts with it (see [`finish_vcpu`]): the reset passes it by.
    gone: bool,
    /// `count_rep=iteration`: every execution of a rep instruction counts.
    rep_iterations: bool,
    /// `metrics_rows=slices`: once slicing begins, the metrics' rows follow the slices.
    rows_at_slices: bool,
}

impl Thread {
    /// The thread or the guest ends: writes its open marker window and its last slice.
    fn close_files(&mut self) {
        self.watch.close();
        if let Some(sl) = self.slices.as_mut() {
            sl.flush(&mut self.counter);
        }
    }
}

/// A new guest thread (called on its parent's thread, so numbers follow creation order).
pub fn start(cfg: &Config, vcpu: u32) {
    if crate::fork::forked() {
        // A thread of a forked child: not followed (see fork.rs).
        return;
    }
    let Some(slot) = THREADS.get(vcpu as usize) else {
        report_error(&format!(
            "more than {MAX_VCPUS} guest threads alive at once"
        ));
        return;
    };
    // Under turns a thread starting on its own host thread takes the number its parent's
    // clone gave it: host threads start in whatever order the host runs them.
    let later = !FIRST.load(Ordering::Acquire).is_null();
    let number = match turns::active() && later {
        true => turns::number_of_new_thread().unwrap_or_else(next_number),
        false => next_number(),
    };
    let shared = match Shared::create(&cfg.host.dir.join(files::thread_state(number)), number) {
        Ok(s) => s,
        Err(e) => return report_error(&format!("creating thread {number}'s counters: {e}")),
    };
    let out = if cfg.host.count_only {
        None
    } else {
        match File::create(cfg.host.dir.join(files::thread_bb(number))) {
            Ok(f) => Some(f),
            Err(e) => return report_error(&format!("creating thread {number}'s vector file: {e}")),
        }
    };
    let marks = if cfg.host.watch > 0 && !cfg.host.count_only {
        match File::create(cfg.host.dir.join(files::thread_marks(number))) {
            Ok(f) => Some(f),
            Err(e) => return report_error(&format!("creating thread {number}'s marks file: {e}")),
        }
    } else {
        None
    };
    let mode = if cfg.host.exact {
        CutMode::Exact
    } else {
        CutMode::BlockEnd
    };
    let t = Box::new(Thread {
        number,
        counter: IntervalCounter::with_store(cfg.host.interval, mode, shared),
        out,
        line: Vec::new(),
        last_rep: 0,
        watch: Watch::new(cfg.host.watch, marks),
        slices: if cfg.host.slices > 0 && !cfg.host.count_only {
            ThreadSlices::new(&cfg.host.dir, number)
        } else {
            None
        },
        pace: (cfg.host.flow > 0).then(|| Pace::new(number, cfg.host.flow)),
        turn: turns::active().then(|| Turn::new(number, cfg.host.turns)),
        metrics: cfg.metrics().then(|| ThreadMetrics::new(cfg, number == 1)),
        main: number == 1,
        vcpu,
        anchor: 0,
        gone: false,
        rep_iterations: cfg.host.rep_iterations,
        rows_at_slices: cfg.metrics() && cfg.model().slice_rows,
    });
    let t = Box::into_raw(t);
    // SAFETY: thread states are never freed or moved.
    if let Some(m) = unsafe { (*t).metrics.as_ref() } {
        m.register();
    }
    if number == 1 {
        // SAFETY: just created, not yet shared.
        FIRST_VCPU.store(vcpu, Ordering::Relaxed);
        fast::board::set_vcpu(vcpu);
        fast::set_next_cut(unsafe { next_stop(&*t) });
        FIRST.store(t, Ordering::Release);
    } else if !MULTI.load(Ordering::Relaxed) && !turns::active() {
        // (Under turns thread 1 hands over at its clone's return: see syscall_ret.)
        if INIT_ON_NEW_THREAD {
            // On the new thread, thread 1 running: see INIT_ON_NEW_THREAD.
            if !SWITCHING.swap(true, Ordering::SeqCst) {
                NEWEST.store(t, Ordering::Release);
                crate::ffi::request_reset();
            }
        } else if crate::ffi::INLINE.load(Ordering::Relaxed) {
            // Inline adds cannot tell threads apart: flush every translation (QEMU does it at
            // the next safe point, before this creating thread runs another guest instruction)
            // and count per thread from then on. Until then only the new thread can run, so
            // what the fast path counts meanwhile is its own (see after_reset).
            if !SWITCHING.swap(true, Ordering::SeqCst) {
                take_over_first(cfg);
                NEWEST.store(t, Ordering::Release);
                crate::ffi::request_reset();
            }
        } else {
            take_over_first(cfg);
            MULTI.store(true, Ordering::SeqCst);
        }
    }
    // The previous owner of a reused index has exited; its state stays for the host to read.
    slot.store(t, Ordering::Release);
}

/// The next thread number (creation order).
pub(crate) fn next_number() -> u32 {
    NEXT_NUMBER.fetch_add(1, Ordering::Relaxed)
}

/// A second thread is being created (API v1: on thread 1's host thread, inside its clone
/// syscall; v3: in the reset that follows, every vCPU stopped; so thread 1 runs no block
/// meanwhile): move the fast path's counts into thread 1's own state.
fn take_over_first(cfg: &Config) {
    let p = FIRST.load(Ordering::Acquire);
    if !p.is_null() {
        // SAFETY: thread 1's state; its host thread is the one running this.
        let t = unsafe { &mut *p };
        harvest(t);
        // The new thread's accesses are modelled on its own thread; thread 1's come back to it.
        if let Some(m) = t.metrics.as_mut() {
            m.bring_back();
        }
        if LAST_REP_TOTAL.load(Ordering::Relaxed) == fast::total() {
            t.last_rep = LAST_REP_PC.load(Ordering::Relaxed);
        }
        if let Some(sl) = t.slices.as_mut() {
            // Thread 1's finished intervals are the slices before this one, which starts
            // with its unfinished interval.
            let rows = t.rows_at_slices;
            slices::begin(&cfg.host.dir, cfg.host.slices, t.counter.intervals(), rows);
            sl.add_filtered(t.counter.total() - t.counter.last_cut());
        }
    }
}

/// The flush asked for when the second thread appeared is done and every vCPU is stopped:
/// what the fast path counted since thread 1's hand-over was run by the new thread.
pub fn after_reset(cfg: &Config) {
    let _harvesting = HARVESTING.lock().unwrap_or_else(|p| p.into_inner());
    let inline_multi = INIT_ON_NEW_THREAD
        && crate::ffi::INLINE.load(Ordering::Relaxed)
        // No marker watched (a replay), no slices, flow, marker candidates or metrics.
        && cfg.host.markers.is_none()
        && cfg.host.slices == 0
        && cfg.host.flow == 0
        && cfg.host.turns == 0
        && cfg.host.watch == 0
        && !cfg.metrics();
    if INIT_ON_NEW_THREAD {
        // Thread 1's hand-over, and what every other thread counted inline on its own vCPU.
        take_over_first(cfg);
        let first = FIRST.load(Ordering::Acquire);
        for slot in THREADS.iter() {
            let p = slot.load(Ordering::Acquire);
            // SAFETY: all vCPUs are stopped while QEMU runs reset callbacks.
            let Some(t) = (unsafe { p.as_mut() }).filter(|t| !t.gone) else {
                continue;
            };
            if p != first {
                harvest(t);
            }
            if inline_multi {
                set_multi_distance(t);
            }
        }
    } else {
        let p = NEWEST.load(Ordering::Acquire);
        // SAFETY: all vCPUs are stopped while QEMU runs reset callbacks.
        if let Some(t) = unsafe { p.as_mut() } {
            harvest(t);
        }
    }
    if inline_multi {
        MULTI_INLINE.store(true, Ordering::SeqCst);
    } else {
        crate::ffi::INLINE.store(false, Ordering::SeqCst);
    }
    MULTI.store(true, Ordering::SeqCst);
}

/// With [`MULTI_INLINE`]: what `t` counted inline and has not harvested yet.
fn inline_total(t: &Thread) -> u64 {
    t.anchor.wrapping_sub(fast::board::distance_of(t.vcpu))
}

/// With [`MULTI_INLINE`]: sets `t`'s vCPU distance to the thread's next boundary.
fn set_multi_distance(t: &mut Thread) {
    let inline = inline_total(t);
    let total = t.counter.total() + inline;
    let d = fast::board::set_distance_of(t.vcpu, t.counter.next_boundary(), total);
    t.anchor = inline.wrapping_add(d);
}

/// With [`MULTI_INLINE`]: `t` reached its next boundary before block `tb` (which a callback
/// may already have counted): its inline counts join its own, and the cut is taken as the
/// single-thread fast path takes it.
fn multi_cut(t: &mut Thread, tb: &TbInfo) {
    harvest(t);
    if t.counter.total() >= t.counter.next_boundary() {
        let Thread {
            counter, out, line, ..
        } = t;
        let _ = counter.cut_pending(tb.id, &mut |pairs| write_vector(out, line, pairs));
        let intervals = counter.intervals();
        counter.store_mut().header().intervals = intervals;
    }
    set_multi_distance(t);
}

/// Inline counting: a block that may close a loop checks whether a cut is due. QEMU runs a
/// block's callbacks before its inline adds, so the total does not hold the block yet.
#[inline]
/// Whether `vcpu` runs thread 1 (the guest's main thread), in the process bbv started.
pub fn is_first(vcpu: u32) -> bool {
    !FIRST.load(Ordering::Acquire).is_null()
        && vcpu == FIRST_VCPU.load(Ordering::Relaxed)
        && !crate::fork::forked()
}

pub fn check_cut(vcpu: u32, tb: &TbInfo) {
    if fast_path(vcpu) {
        let total = fast::total();
        if total >= fast::next_cut() {
            single_cut(tb, total);
        }
    } else if MULTI_INLINE.load(Ordering::Relaxed) {
        if let Some(t) = own_thread(vcpu) {
            multi_cut(t, tb);
        }
    }
    if METRICS.load(Ordering::Relaxed) {
        metrics_block(vcpu, tb);
    }
}

/// Moves what the fast path counted (under API v3, on `t`'s vCPU) into `t`'s own state; none
/// of `t`'s inline counts is pending afterwards (its anchor says so).
fn harvest(t: &mut Thread) {
    harvest_from(t, true);
}

/// [`harvest`], with `single`: also the single-thread path's counts in the mapping (see
/// [`fast::harvest`]).
fn harvest_from(t: &mut Thread, single: bool) {
    let counter = &mut t.counter;
    // Once slicing runs, what the fast path counted belongs to the new thread's slice too.
    let mut sl = t.slices.as_mut().filter(|_| slices::on());
    let fldcw = fast::harvest(t.vcpu, single, |id, n| {
        counter.absorb(id, n);
        counter.store_mut().header().total += n;
        if let Some(sl) = sl.as_mut() {
            sl.add_filtered(n);
        }
    });
    t.counter.store_mut().header().fldcw += fldcw;
    t.anchor = fast::board::distance_of(t.vcpu);
}

/// Where the fast path must next call [`single_cut`]: at every watched block while a window
/// is open, else at the next boundary.
fn next_stop(t: &Thread) -> u64 {
    if t.watch.open {
        0
    } else {
        t.counter.next_boundary()
    }
}

/// The fast path's slow part: the total reached the next boundary, or a window is open.
/// `before`: the instructions counted before `tb` started.
#[cold]
fn single_cut(tb: &TbInfo, before: u64) {
    let p = FIRST.load(Ordering::Acquire);
    if SWITCHING.load(Ordering::Relaxed) && !INIT_ON_NEW_THREAD {
        return;
    }
    if p.is_null() {
        fast::set_next_cut(u64::MAX);
        return;
    }
    // SAFETY: only thread 1 exists, and this is its host thread.
    let t = unsafe { &mut *p };
    let total = fast::total();
    if t.watch.open {
        t.watch.see(tb, before);
    }
    if total >= t.counter.next_boundary() {
        harvest(t);
        let Thread {
            counter, out, line, ..
        } = t;
        let before = counter.intervals();
        let _ = counter.cut_pending(tb.id, &mut |pairs| write_vector(out, line, pairs));
        let intervals = counter.intervals();
        // Only thread 1 runs here, so no slicing yet: its intervals cut the rows.
        if t.metrics.is_some() {
            (before..intervals).for_each(|_| crate::metrics::cut(t.metrics.as_mut()));
        }
        counter.store_mut().header().intervals = intervals;
        let cut_at = t.counter.last_cut();
        t.watch.start(intervals, cut_at);
    }
    fast::set_next_cut(next_stop(t));
}

#[inline(always)]
fn count_fast(tb: &TbInfo) -> u64 {
    // SAFETY: the slot counter is inside the never-unmapped shared mapping; one thread runs.
    unsafe { *tb.execs += 1 };
    let total = fast::count_callback(tb.insns);
    if total >= fast::next_cut() {
        single_cut(tb, total - tb.insns);
    }
    total
}

/// Counts one execution of an ordinary translated block.
#[inline]
pub fn exec_fast(vcpu: u32, tb: &TbInfo) {
    if METRICS.load(Ordering::Relaxed) {
        metrics_block(vcpu, tb);
    }
    if !fast_path(vcpu) {
        return exec(vcpu, tb);
    }
    count_fast(tb);
}

/// Counts one execution of a block that starts or ends with a rep string instruction.
pub fn exec_rep(vcpu: u32, tb: &TbInfo) {
    if METRICS.load(Ordering::Relaxed) {
        metrics_block(vcpu, tb);
    }
    if !fast_path(vcpu) {
        return exec(vcpu, tb);
    }
    let p = FIRST.load(Ordering::Acquire);
    if p.is_null() {
        return;
    }
    // SAFETY: only thread 1 exists, and this is its host thread.
    let rep_iterations = unsafe { (*p).rep_iterations };
    // SAFETY: as above.
    let h = unsafe { (*p).counter.store_mut().header() };
    let again = tb.rep_first
        && LAST_REP_PC.load(Ordering::Relaxed) == tb.pc
        && LAST_REP_TOTAL.load(Ordering::Relaxed) == fast::total();
    if again {
        // Another iteration of the rep instance the previous block started.
        h.rep_iterations += 1;
        if !rep_iterations {
            return;
        }
    } else if tb.rep_last != 0 {
        h.rep_iterations += 1;
        h.rep_instances += 1;
    }
    let total = count_fast(tb);
    LAST_REP_PC.store(tb.rep_last, Ordering::Relaxed);
    LAST_REP_TOTAL.store(total, Ordering::Relaxed);
}

/// The state of the thread running on `vcpu`. Only that vCPU's own host thread may call this
/// (it is the state's only user), and states are never freed.
#[inline]
fn own_thread(vcpu: u32) -> Option<&'static mut Thread> {
    let p = THREADS.get(vcpu as usize)?.load(Ordering::Relaxed);
    // SAFETY: see above; a null slot is a thread not (or no longer) counted.
    unsafe { p.as_mut() }
}

/// Counts one execution of a translated block on `vcpu`, in the thread's own state.
#[inline]
fn exec(vcpu: u32, tb: &TbInfo) {
    let Some(t) = own_thread(vcpu) else {
        return;
    };
    if let Some(pace) = t.pace.as_mut() {
        pace.on_block(tb.insns, tb.excluded);
    }
    if let Some(turn) = t.turn.as_mut() {
        if !turn.on_block(tb.insns, tb.excluded) {
            return;
        }
    }
    let again = tb.rep_first && t.last_rep == tb.pc;
    if again {
        // Another iteration of the rep instance the previous block started.
        t.counter.store_mut().header().rep_iterations += 1;
        if !t.rep_iterations {
            return;
        }
    }
    t.last_rep = tb.rep_last;
    if (tb.rep_last != 0 && !again) || tb.fldcw != 0 {
        let h = t.counter.store_mut().header();
        if tb.rep_last != 0 && !again {
            h.rep_iterations += 1;
            h.rep_instances += 1;
        }
        h.fldcw += tb.fldcw;
    }
    if MULTI_INLINE.load(Ordering::Relaxed) {
        // Counted as an inline add would have (a rep block, which calls the plugin anyway).
        fast::board::count_of(vcpu, tb.slot as usize, tb.insns);
        if t.counter.total() + inline_total(t) >= t.counter.next_boundary() {
            multi_cut(t, tb);
        }
        return;
    }
    if t.watch.open {
        let before = t.counter.total();
        t.watch.see(tb, before);
    }
    let Thread {
        counter,
        out,
        line,
        slices,
        ..
    } = t;
    if let Some(sl) = slices.as_mut() {
        sl.on_block(tb, counter);
    }
    let before = counter.intervals();
    let _ = counter.add(tb.id, tb.insns, &mut |pairs| {
        if let Some(sl) = slices.as_mut() {
            sl.emitted(pairs);
        }
        write_vector(out, line, pairs)
    });
    let (total, intervals) = (counter.total(), counter.intervals());
    let h = counter.store_mut().header();
    h.total = total;
    if intervals != before {
        h.intervals = intervals;
        if t.main && t.metrics.is_some() && !crate::slices::slice_rows(t.rows_at_slices) {
            (before..intervals).for_each(|_| crate::metrics::cut(t.metrics.as_mut()));
        }
        let cut_at = t.counter.last_cut();
        t.watch.start(intervals, cut_at);
    }
}

/// Whether only thread 1 has run so far.
pub fn single() -> bool {
    !MULTI.load(Ordering::Relaxed) && NEXT_NUMBER.load(Ordering::Relaxed) <= 2
}

/// Instructions the thread on `vcpu` has counted, including the whole block now starting (for
/// replay: where a marker instruction falls).
pub fn position(vcpu: u32) -> u64 {
    if !MULTI.load(Ordering::Relaxed) {
        return fast::total();
    }
    own_thread(vcpu).map_or(0, |t| t.counter.total())
}

/// The instructions each block has run on `vcpu`'s thread so far, by block id (for replay,
/// whose single interval never closes).
pub fn snapshot(vcpu: u32, mut each: impl FnMut(u32, u64)) {
    if !MULTI.load(Ordering::Relaxed) {
        return fast::cumulative(each);
    }
    if let Some(t) = own_thread(vcpu) {
        for (id, &c) in t.counter.store_mut().counts().iter().enumerate() {
            if c != 0 {
                each(id as u32, c);
            }
        }
    }
}

/// The instructions each block has run on every thread so far, by block id, summed over the
/// threads (for the replay of multi-threaded regions); returns the instructions of all threads.
/// Other threads' counters are read from their state files, which the shared mappings keep
/// current: a read can never meet a mapping another thread is moving.
pub fn snapshot_all(cfg: &Config, mut each: impl FnMut(u32, u64)) -> u64 {
    if !MULTI.load(Ordering::Acquire) {
        fast::cumulative(each);
        return fast::total();
    };
    let mut total = 0;
    for number in 1..NEXT_NUMBER.load(Ordering::Acquire) {
        let Ok(bytes) = std::fs::read(cfg.host.dir.join(files::thread_state(number))) else {
            continue;
        };
        let words: Vec<u64> = bytes
            .chunks_exact(8)
            .map(|w| u64::from_ne_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
            .collect();
        let Some(counts) = words.get(bbv_plugin_contract::state::HEADER_WORDS..) else {
            continue;
        };
        // Word 2 of the header is the thread's total (see state.rs).
        total += words[2];
        for (id, &c) in counts.iter().enumerate() {
            if c != 0 {
                each(id as u32, c);
            }
        }
    }
    total
}

/// The guest is exiting: write out the windows still open.
pub fn finish_all(cfg: &Config) {
    if MULTI_INLINE.load(Ordering::Acquire) {
        for slot in THREADS.iter() {
            let p = slot.load(Ordering::Acquire);
            // SAFETY: at exit no guest code runs; thread states are never freed.
            if let Some(t) = unsafe { p.as_mut() } {
                harvest(t);
            }
        }
    } else if !MULTI.load(Ordering::Acquire) {
        // API v3's inline counts live in QEMU's memory: into the mapping, for the host.
        let p = FIRST.load(Ordering::Acquire);
        // SAFETY: at exit no guest code runs; thread 1's state is never freed.
        if let Some(t) = unsafe { p.as_ref() } {
            fast::flush(t.vcpu);
        }
    }
    slices::finish();
    turns::finish();
    if cfg.metrics() {
        let p = FIRST.load(Ordering::Acquire);
        // SAFETY: at exit no guest thread runs blocks any more; thread 1's state is never freed.
        let mut first = unsafe { p.as_mut() }.and_then(|t| t.metrics.as_mut());
        if crate::slices::slice_rows(cfg.model().slice_rows) {
            // The row of the last slice, which the program's exit cut short (the host
            // clusters it too).
            crate::metrics::cut(None);
        } else if cfg.host.tail {
            // The row of the unfinished interval, for the host's tail vector.
            crate::metrics::cut(first.as_deref_mut());
        }
        // Every row is written before QEMU exits.
        if let Some(m) = first {
            m.bring_back();
        }
    }
    for slot in THREADS.iter() {
        let p = slot.load(Ordering::Acquire);
        if !p.is_null() {
            // SAFETY: at exit no other guest thread runs blocks any more.
            unsafe { (*p).close_files() };
        }
    }
}

fn write_vector(
    out: &mut Option<File>,
    line: &mut Vec<u8>,
    pairs: &[(u32, u64)],
) -> io::Result<()> {
    if let Some(f) = out {
        line.clear();
        let mut w = BbvWriter::new(&mut *line);
        w.write_vector(pairs)?;
        // One write per interval: a vector is in the file whole, or not at all.
        if let Err(e) = f.write_all(line) {
            report_error(&format!("writing a vector file: {e}"));
            *out = None;
        }
    }
    Ok(())
}

/// A block starts on `vcpu` (metrics only).
#[inline]
pub fn metrics_block(vcpu: u32, tb: &TbInfo) {
    if let Some(m) = own_thread(vcpu).and_then(|t| t.metrics.as_mut()) {
        m.block(tb);
    }
}

/// A memory access on `vcpu` (metrics only).
#[inline]
pub fn metrics_access(vcpu: u32, vaddr: u64, size: u64, store: bool) {
    if let Some(m) = own_thread(vcpu).and_then(|t| t.metrics.as_mut()) {
        m.access(vaddr, size, store);
    }
}

/// The thread running on `vcpu` enters system call `nr`: flow control does not wait for it
/// meanwhile; turns follow some calls (see turns.rs).
pub fn syscall(vcpu: u32, nr: i64, args: [u64; 6]) {
    let Some(t) = own_thread(vcpu) else { return };
    if let Some(pace) = t.pace.as_mut() {
        pace.syscall(true);
    }
    if let Some(turn) = t.turn.as_mut() {
        if let Some(sync) = turn.syscall(nr, args) {
            feed_sync(t.number, sync);
        }
    }
}

/// Sniper's streams learn how a thread's system call ended (see feed.rs).
fn feed_sync(number: u32, sync: turns::Sync) {
    if crate::feed::active() {
        crate::feed::sync(number, sync);
    }
}

/// The number of the thread running on `vcpu`.
pub fn number(vcpu: u32) -> Option<u32> {
    own_thread(vcpu).map(|t| t.number)
}

/// The thread running on `vcpu` returns `ret` from its system call.
pub fn syscall_ret(cfg: &Config, vcpu: u32, ret: i64) {
    let Some(t) = own_thread(vcpu) else { return };
    if let Some(pace) = t.pace.as_mut() {
        pace.syscall(false);
    }
    if let Some(turn) = t.turn.as_mut() {
        let sync = turn.syscall_ret(ret, || {
            if !MULTI.load(Ordering::Acquire) {
                // The second thread: thread 1 hands over on its own host thread, before the new
                // thread runs (it waits for thread 1's next block, see turns.rs).
                take_over_first(cfg);
                MULTI.store(true, Ordering::SeqCst);
            }
            next_number()
        });
        if let Some(sync) = sync {
            feed_sync(t.number, sync);
        }
    }
}

/// The thread running on `vcpu` is exiting; its files are already complete.
pub fn finish_vcpu(vcpu: u32) {
    let Some(slot) = THREADS.get(vcpu as usize) else {
        return;
    };
    let p = slot.load(Ordering::Acquire);
    // SAFETY: called on the exiting thread, the state's only user (the reset's harvest is held
    // off by HARVESTING, and passes a thread gone by); states are never freed.
    if let Some(t) = unsafe { p.as_mut() } {
        // A thread that ends before the reset that makes counting per thread (a short worker,
        // the second thread's creation still waiting for every vCPU to stop) has its inline
        // counts on its vCPU's board too: the reset harvests live threads only, and the next
        // thread given the index took them for its own.
        let harvesting = HARVESTING.lock().unwrap_or_else(|p| p.into_inner());
        let pending = INIT_ON_NEW_THREAD
            && crate::ffi::INLINE.load(Ordering::Acquire)
            && !MULTI.load(Ordering::Acquire)
            && p != FIRST.load(Ordering::Acquire)
            && vcpu != FIRST_VCPU.load(Ordering::Relaxed);
        if MULTI_INLINE.load(Ordering::Acquire) || pending {
            // Before the reset, what the mapping holds is thread 1's, which still runs: only
            // the vCPU's own board is taken. A thread reusing the vCPU starts at 0.
            harvest_from(t, !pending);
            fast::board::set_distance_of(vcpu, 1, 0);
            t.gone = true;
        }
        drop(harvesting);
        t.close_files();
        if let Some(pace) = t.pace.as_mut() {
            pace.exit();
        }
        if let Some(sync) = t.turn.as_mut().and_then(Turn::exit) {
            feed_sync(t.number, sync);
        }
    }
    slot.store(std::ptr::null_mut(), Ordering::Release);
}
