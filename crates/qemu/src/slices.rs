//! LoopPoint-style slices of a multi-threaded run (`slices=N`).
//!
//! Once a second thread runs, the instructions of all threads outside excluded libraries (the
//! OpenMP runtimes' spinning and synchronisation, by default) are counted together. When they
//! reach N x (threads that ran in the current slice), the slice is due, and it ends where any
//! thread next starts a loop head of the program's own code: that thread moves the global slice
//! index on, and every other thread closes its vector of the slice at its next block. A thread
//! that sleeps through a slice contributes nothing to it.
//!
//! Before the second thread, thread 1's intervals are the slices (the host places their
//! boundaries as in single-threaded runs), so the first slice here carries the index of thread
//! 1's unfinished interval and starts with its counts.
//!
//! Files:
//! * `slices`: `start INDEX` (the first slice counted here), then one `cut INDEX THREAD BLOCK`
//!   per boundary (slice INDEX begins when thread THREAD starts block BLOCK), each followed by
//!   `win INDEX id:delta ...`: the first execution of each block of the program's own code in
//!   the 0.5% of a slice after the cut, delta = filtered instructions of all threads before it.
//! * `thread.N.slices`: `INDEX FILTERED id:instructions ...` for every slice thread N ran in.
//!   Each line is one write, so a killed process leaves whole lines.

use bbv_plugin_contract::files;
use std::collections::HashMap;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

use bbv_profile::{CountStore, IntervalCounter};

use crate::blocks::TbInfo;
use crate::report_error;

/// Filtered instructions a thread gathers before adding them to the global count (the shared
/// counter is touched once per this many, not per block).
const FLUSH: u64 = 1 << 14;

/// The slice the multi-threaded part is in (read at every block, written at boundaries).
static SLICE: AtomicU64 = AtomicU64::new(0);
/// Slicing has begun (a second thread exists).
static ON: AtomicBool = AtomicBool::new(false);
/// The current slice has reached its budget: the next loop head ends it.
static DUE: AtomicBool = AtomicBool::new(false);
/// A window after a cut is open.
static WINDOW_OPEN: AtomicBool = AtomicBool::new(false);
/// Filtered instructions of all threads, added in batches.
static FILTERED: AtomicU64 = AtomicU64::new(0);

/// What changes only at boundaries and joins, under one lock (these are rare).
struct Global {
    slice: u64,
    /// FILTERED when the slice began.
    start: u64,
    /// Threads that ran in the slice.
    active: u64,
    due: bool,
    /// Per-thread instructions of a slice: N.
    per_thread: u64,
    file: Option<File>,
    /// The metrics' rows are cut at the slices (`metrics_rows=slices`).
    rows: bool,
}

static GLOBAL: Mutex<Option<Global>> = Mutex::new(None);

/// After each cut, the first execution of every block of the program's own code (up to
/// [`WINDOW_BLOCKS`]) in the next 0.5% of a slice, all threads together: the host picks the
/// boundary's marker among them.
struct Window {
    slice: u64,
    /// Filtered instructions of all threads since the cut.
    since: u64,
    end: u64,
    seen: Vec<(u32, u64)>,
}

const WINDOW_BLOCKS: usize = 128;
/// The window's share of a slice (bbv-pipeline's marker tolerance).
const WINDOW_SHARE: f64 = 0.005;
static WINDOW: Mutex<Option<Window>> = Mutex::new(None);

/// Records `tb` in the open window; closes it (one `win` line) when it is over.
#[cold]
fn window_see(tb: &TbInfo) {
    let mut guard = WINDOW.lock().unwrap_or_else(|e| e.into_inner());
    let Some(w) = guard.as_mut() else { return };
    if w.since >= w.end || w.seen.len() >= WINDOW_BLOCKS {
        let line = close_window(&mut guard);
        drop(guard);
        write_window(line);
        return;
    }
    if tb.own && !tb.rep_first && !w.seen.iter().any(|s| s.0 == tb.id) {
        w.seen.push((tb.id, w.since));
    }
    if !tb.excluded {
        w.since += tb.insns;
    }
}

/// Takes the window out, returning its line. The caller writes the line after releasing
/// WINDOW: GLOBAL is never taken while WINDOW is held.
fn close_window(guard: &mut Option<Window>) -> Option<String> {
    WINDOW_OPEN.store(false, Ordering::Relaxed);
    let w = guard.take()?;
    let mut line = format!("win {}", w.slice);
    for (id, d) in &w.seen {
        let _ = write!(line, " {id}:{d}");
    }
    line.push('\n');
    Some(line)
}

fn write_window(line: Option<String>) {
    if let Some(line) = line {
        with_global(|g| append(g, &line));
    }
}

/// Takes out and writes the open window, if any.
fn flush_window() {
    let line = close_window(&mut WINDOW.lock().unwrap_or_else(|e| e.into_inner()));
    write_window(line);
}

/// Writes the window still open (the guest is exiting).
pub fn finish() {
    flush_window();
}

fn with_global<R>(f: impl FnOnce(&mut Global) -> R) -> Option<R> {
    GLOBAL
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .map(f)
}

fn append(g: &mut Global, line: &str) {
    if let Some(f) = &mut g.file {
        if let Err(e) = f.write_all(line.as_bytes()) {
            report_error(&format!("writing the slice file: {e}"));
            g.file = None;
        }
    }
}

/// Whether slicing has begun.
pub fn on() -> bool {
    ON.load(Ordering::Acquire)
}

/// Starts slicing at slice `first` (a second thread is being created); writes `start`.
pub fn begin(dir: &Path, per_thread: u64, first: u64, rows: bool) {
    let mut guard = GLOBAL.lock().unwrap_or_else(|e| e.into_inner());
    if guard.is_some() {
        return;
    }
    let file = match File::create(dir.join(files::SLICES)) {
        Ok(f) => Some(f),
        Err(e) => {
            report_error(&format!("creating the slice file: {e}"));
            None
        }
    };
    let mut g = Global {
        slice: first,
        start: 0,
        active: 0,
        due: false,
        per_thread: per_thread.max(1),
        file,
        rows,
    };
    append(&mut g, &format!("start {first}\n"));
    *guard = Some(g);
    SLICE.store(first, Ordering::Release);
    ON.store(true, Ordering::Release);
}

/// One thread's part of the slices. It keeps no count per block of its own (a second count
/// at every block costs as much as the first): a slice's vector is what the thread's interval
/// counter gathered since the slice began, that is the intervals it handed out since then
/// ([`emitted`](Self::emitted)) plus its unfinished interval, less that interval's counts
/// when the slice began.
pub struct ThreadSlices {
    /// The slice the counts belong to (u64::MAX: not joined yet).
    slice: u64,
    /// Instructions per block id of the intervals handed out since the slice began.
    acc: Vec<u64>,
    touched: Vec<u32>,
    /// The unfinished interval's counts when the slice began, until that interval is out.
    snap: HashMap<u32, u64>,
    filtered: u64,
    /// Filtered instructions not yet added to FILTERED.
    pending: u64,
    number: u32,
    file: Option<File>,
    line: String,
}

impl ThreadSlices {
    /// The slice state of thread `number`, writing `DIR/thread.N.slices`.
    pub fn new(dir: &Path, number: u32) -> Option<ThreadSlices> {
        let file = match File::create(dir.join(files::thread_slices(number))) {
            Ok(f) => f,
            Err(e) => {
                report_error(&format!("creating thread {number}'s slice file: {e}"));
                return None;
            }
        };
        Some(ThreadSlices {
            slice: u64::MAX,
            acc: Vec::new(),
            touched: Vec::new(),
            snap: HashMap::new(),
            filtered: 0,
            pending: 0,
            number,
            file: Some(file),
            line: String::new(),
        })
    }

    /// Adds filtered instructions counted outside [`on_block`](Self::on_block): thread 1's
    /// unfinished interval when slicing begins, or what the fast path counted for a thread
    /// before it counted per block. Joins the current slice first.
    pub fn add_filtered(&mut self, filtered: u64) {
        if self.slice == u64::MAX && ON.load(Ordering::Acquire) {
            self.join(SLICE.load(Ordering::Acquire));
        }
        self.filtered += filtered;
        self.pending += filtered;
    }

    /// The thread's interval counter hands out an interval: its counts since the slice began
    /// join the slice's.
    pub fn emitted(&mut self, pairs: &[(u32, u64)]) {
        if !ON.load(Ordering::Relaxed) {
            return;
        }
        let snap = std::mem::take(&mut self.snap);
        for &(id, c) in pairs {
            let c = c.saturating_sub(snap.get(&id).copied().unwrap_or(0));
            if c == 0 {
                continue;
            }
            let i = id as usize;
            if i >= self.acc.len() {
                self.acc.resize((i + 1).next_power_of_two().max(1024), 0);
            }
            if self.acc[i] == 0 {
                self.touched.push(id);
            }
            self.acc[i] += c;
        }
    }

    fn join(&mut self, s: u64) {
        self.slice = s;
        with_global(|g| {
            if g.slice == s {
                g.active += 1;
            }
        });
    }

    /// Thread runs block `tb` (its interval counter `counter` does not hold it yet): closes
    /// the vector of a slice that ended, ends a due slice at a loop head of the program's own
    /// code, then counts the block's filtered instructions.
    #[inline]
    pub fn on_block<S: CountStore>(&mut self, tb: &TbInfo, counter: &mut IntervalCounter<S>) {
        if !ON.load(Ordering::Relaxed) {
            return;
        }
        let s = SLICE.load(Ordering::Acquire);
        if s != self.slice {
            self.flush(counter);
            self.join(s);
        }
        if tb.own && DUE.load(Ordering::Relaxed) && tb.head.load(Ordering::Relaxed) {
            self.try_cut(tb, counter);
        }
        if WINDOW_OPEN.load(Ordering::Relaxed) {
            window_see(tb);
        }
        if !tb.excluded {
            self.filtered += tb.insns;
            self.pending += tb.insns;
            if self.pending >= FLUSH {
                self.publish();
            }
        }
    }

    /// Adds the pending filtered count to the global one and checks the budget.
    #[cold]
    fn publish(&mut self) {
        let total = FILTERED.fetch_add(self.pending, Ordering::Relaxed) + self.pending;
        self.pending = 0;
        with_global(|g| {
            if !g.due && total.saturating_sub(g.start) >= g.per_thread * g.active.max(1) {
                g.due = true;
                DUE.store(true, Ordering::Relaxed);
            }
        });
    }

    /// Ends the due slice here, unless another thread already did.
    #[cold]
    fn try_cut<S: CountStore>(&mut self, tb: &TbInfo, counter: &mut IntervalCounter<S>) {
        let s = self.slice;
        let number = self.number;
        // A window still open closes first, so that its line comes before this cut's.
        if WINDOW_OPEN.load(Ordering::Relaxed) {
            flush_window();
        }
        let won = with_global(|g| {
            if g.slice != s || !g.due {
                return None;
            }
            let end = (g.per_thread as f64 * g.active.max(1) as f64 * WINDOW_SHARE) as u64;
            g.slice = s + 1;
            g.start = FILTERED.load(Ordering::Relaxed);
            g.active = 1;
            g.due = false;
            DUE.store(false, Ordering::Relaxed);
            SLICE.store(s + 1, Ordering::Release);
            append(g, &format!("cut {} {number} {}\n", s + 1, tb.id));
            // Under GLOBAL, so that rows follow the slices' order.
            if g.rows {
                crate::metrics::cut(None);
            }
            Some(end)
        });
        if let Some(Some(end)) = won {
            self.flush(counter);
            self.slice = s + 1;
            *WINDOW.lock().unwrap_or_else(|e| e.into_inner()) = Some(Window {
                slice: s + 1,
                since: 0,
                end,
                seen: Vec::new(),
            });
            WINDOW_OPEN.store(true, Ordering::Relaxed);
        }
    }

    /// Writes the vector of the slice the thread was in (nothing when it ran no instruction),
    /// and starts the next one at `counter`'s present state.
    pub fn flush<S: CountStore>(&mut self, counter: &mut IntervalCounter<S>) {
        let mut v: HashMap<u32, u64> = HashMap::new();
        for &id in &self.touched {
            let c = std::mem::take(&mut self.acc[id as usize]);
            *v.entry(id).or_default() += c;
        }
        self.touched.clear();
        let old = std::mem::take(&mut self.snap);
        let mut snap = HashMap::new();
        counter.for_each_current(|id, c| {
            snap.insert(id, c);
            let c = c.saturating_sub(old.get(&id).copied().unwrap_or(0));
            if c > 0 {
                *v.entry(id).or_default() += c;
            }
        });
        self.snap = snap;
        let filtered = std::mem::take(&mut self.filtered);
        if v.is_empty() {
            return;
        }
        let mut pairs: Vec<(u32, u64)> = v.into_iter().collect();
        pairs.sort_unstable();
        self.line.clear();
        let _ = write!(self.line, "{} {filtered}", self.slice);
        for (id, c) in pairs {
            let _ = write!(self.line, " {id}:{c}");
        }
        self.line.push('\n');
        if let Some(f) = &mut self.file {
            if let Err(e) = f.write_all(self.line.as_bytes()) {
                report_error(&format!("writing thread {}'s slice file: {e}", self.number));
                self.file = None;
            }
        }
    }
}

/// Whether rows are cut at slice boundaries now: `asked` for (`metrics_rows=slices`), and slicing
/// has begun. Thread 1's engine is back on its own thread by then (it comes back when the
/// second thread starts, before slicing begins), so a row needs no model thread.
pub fn slice_rows(asked: bool) -> bool {
    asked && on()
}
