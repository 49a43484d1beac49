//! `trace=FILE`'s `sift` windows: every guest thread's instructions, thread creations, futex
//! waits and wakes and exits fed to Sniper through [`bbv_sift::feed`].
//!
//! Unlike ChampSim's recorder (thread 1 only, no lock), the feed is called from every vCPU's
//! thread, so it sits behind a mutex. Under bbv's turns one guest thread runs at a time, so the
//! lock is not contended; each instruction pays an uncontended lock, small beside what Sniper
//! spends on it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

use bbv_champsim::Isa;
use bbv_sift::feed::{Code, Feed, Sync, WindowSpec};

static FEED: Mutex<Option<Feed>> = Mutex::new(None);
static ACTIVE: AtomicBool = AtomicBool::new(false);

/// Feeds the Sniper `windows` of a guest of instruction set `isa` from now on (at
/// registration, before any vCPU runs); `merge_rep`: a rep string instruction's iterations
/// make one instruction.
pub fn install(windows: Vec<WindowSpec>, isa: Isa, merge_rep: bool) {
    // SIFT's instruction set (None: x86, Sniper's default).
    let sift_isa = (isa == Isa::Aarch64).then_some(bbv_sift::isa::AARCH64);
    let feed = Feed::new(windows, sift_isa, merge_rep);
    // A whole run's window is open from the start.
    if feed.busy() {
        crate::record::instrument_on(true);
    }
    *lock() = Some(feed);
    ACTIVE.store(true, Ordering::Release);
}

/// Whether Sniper windows are fed (the recorder's callbacks go here, from every thread).
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

fn lock() -> MutexGuard<'static, Option<Feed>> {
    FEED.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs `f` on the feed, then reports its errors and drops the recorder's callbacks when no
/// window is open or about to open.
fn with(f: impl FnOnce(&mut Feed)) {
    let mut g = lock();
    let Some(feed) = g.as_mut() else { return };
    let was = feed.busy();
    f(feed);
    for e in feed.take_errors() {
        crate::report_error(&format!("Sniper's stream: {e}"));
    }
    if crate::record::UNINSTRUMENT && was && !feed.busy() {
        crate::record::instrument(false);
    }
}

/// Guest thread `thread` starts instruction `code`.
#[inline]
pub fn exec(thread: u32, code: &'static Code) {
    if let Some(feed) = lock().as_mut() {
        feed.exec(thread, code);
    }
}

/// Guest thread `thread`'s instruction under way accesses `vaddr`.
#[inline]
pub fn access(thread: u32, vaddr: u64, store: bool) {
    if let Some(feed) = lock().as_mut() {
        feed.access(thread, vaddr, store);
    }
}

/// The next execution of a marker fires `event`: windows it opens get the recorder's
/// callbacks before it (at `start`, before any translation, without a flush).
pub fn arm(event: u32, start: bool) {
    let any = lock().as_mut().is_some_and(|f| f.arm(event));
    if any {
        crate::record::instrument_on(start);
    }
}

/// Marker event `event` fired on guest thread `thread`.
pub fn event(thread: u32, event: u32) {
    with(|f| f.event(thread, event));
}

/// Guest thread `thread` runs marker `marker`, its `n`-th execution over every thread.
pub fn marker(thread: u32, marker: u32, n: u64) {
    with(|f| f.marker(thread, marker, n));
}

/// Guest thread `thread`'s system call ended as `sync` says.
pub fn sync(thread: u32, sync: Sync) {
    with(|f| f.sync(thread, sync));
}

/// The guest exits: every window ends, and its streams are delivered to Sniper.
pub fn finish() {
    if let Some(feed) = lock().as_mut() {
        feed.finish();
    }
}
