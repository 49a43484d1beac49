//! Per-interval metrics (`metrics=on`): instructions, loads, stores, taken control transfers,
//! distinct data pages, L1D and L2 misses of a cache model, and gshare mispredictions, of all
//! threads together, cut where thread 1's intervals are cut.
//!
//! Each thread has its own caches and predictor (one core per thread) and its own counters,
//! written only by that thread; thread 1 sums every thread's counters at each of its cuts and
//! appends one row to `metrics` (the `metrics.csv` format of `bbv-profile`), one write per row.
//! Distinct pages are counted across threads in one shared table, consulted only when a
//! thread's small filter of recently seen pages misses.
//!
//! While the guest has one thread, its engine (caches, pages, predictor) runs on a model thread
//! of its own by default ([`offload`]): the guest's thread only records each block and access,
//! and the model thread counts them and writes the rows in the same order.
//!
//! Where a block falls at a cut: when a cut is taken after the block that crossed it (per-block
//! counting), the block's metrics are counted before the cut; when it is taken before the block
//! (inline counting), after. So thread 1's instructions per row are its vector's instructions.

use std::sync::atomic::Ordering;

use bbv_profile::MetricsRow;

use crate::blocks::TbInfo;
use crate::model::{put_out, write_row, Counters, Engine, Tally, EPOCH, ROWS};
use crate::offload::{self, Offload};
use crate::{report_error, Config};

/// An access counted on the guest's own thread. Kept out of line so that QEMU's per-access
/// call stays short on the offloaded path, which then saves no registers it does not use.
#[inline(never)]
fn access_here(e: &mut Engine, counters: &Counters, vaddr: u64, size: u64, store: bool) {
    let epoch = EPOCH.load(Ordering::Relaxed);
    e.access(&mut &*counters, vaddr, size, store, epoch)
}

/// Where a thread's blocks and accesses are counted.
// The recorder stays inline: every access reads its filter, one pointer less to follow.
#[allow(clippy::large_enum_variant)]
enum Where {
    Here(Engine),
    Away(Offload),
    /// Between taking the engine back from its thread and installing it (never seen by a
    /// block or an access).
    Moving,
}

/// One thread's metrics: its counters and where its engine runs.
pub struct ThreadMetrics {
    counters: Counters,
    engine: Where,
}

impl ThreadMetrics {
    /// A new thread's metrics; [`register`](Self::register) them once they are in place.
    /// `alone`: the guest's only thread, whose engine may run on a model thread.
    pub fn new(cfg: &Config, alone: bool) -> ThreadMetrics {
        let engine = Engine::new(cfg);
        let engine = if alone && cfg.model().own_thread {
            match offload::start(engine, EPOCH.load(Ordering::Relaxed)) {
                Ok(away) => Where::Away(away),
                Err(engine) => Where::Here(engine),
            }
        } else {
            Where::Here(engine)
        };
        ThreadMetrics {
            counters: Counters::default(),
            engine,
        }
    }

    /// Adds the thread's counters to the cuts' sums; `self` never moves or dies again (thread
    /// states are never freed: an exited thread's work still counts).
    pub fn register(&'static self) {
        if let Some(rows) = ROWS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            rows.threads.push((&self.counters, MetricsRow::default()));
        }
    }

    /// A block starts.
    #[inline]
    pub fn block(&mut self, tb: &TbInfo) {
        match &mut self.engine {
            Where::Here(e) => e.block(&mut &self.counters, tb),
            Where::Away(o) => o.block(tb),
            Where::Moving => {}
        }
    }

    /// A memory access of `size` bytes at `vaddr`.
    #[inline]
    pub fn access(&mut self, vaddr: u64, size: u64, store: bool) {
        match &mut self.engine {
            Where::Here(e) => access_here(e, &self.counters, vaddr, size, store),
            Where::Away(o) => o.access(vaddr, size, store),
            Where::Moving => {}
        }
    }

    /// The thread's engine comes back from its model thread once everything sent there is
    /// counted (a second guest thread is starting, whose work is counted on its own thread,
    /// or the guest exits). Call on the owning thread.
    pub fn bring_back(&mut self) {
        let away = match std::mem::replace(&mut self.engine, Where::Moving) {
            Where::Away(away) => away,
            other => {
                self.engine = other;
                return;
            }
        };
        match away.finish() {
            Some((engine, since_cut, out)) => {
                for (i, &n) in since_cut.0.iter().enumerate() {
                    (&self.counters).bump(i, n);
                }
                put_out(out);
                self.engine = Where::Here(engine);
            }
            None if crate::fork::forked() => {}
            None => report_error("the metrics model thread ended early"),
        }
    }
}

/// Thread 1 cut an interval (`main`: its metrics, when it is the caller): the row of every
/// thread's metrics since the last cut, appended to `metrics` here or, while thread 1's engine
/// is away, by its model thread once that has counted everything before the cut.
pub fn cut(main: Option<&mut ThreadMetrics>) {
    let row = {
        let mut guard = ROWS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(rows) = guard.as_mut() else { return };
        let mut row = MetricsRow::default();
        for (counters, base) in rows.threads.iter_mut() {
            let now = counters.read();
            for i in 0..8 {
                row.0[i] += now.0[i] - base.0[i];
            }
            *base = now;
        }
        EPOCH.fetch_add(1, Ordering::Relaxed);
        match main.as_ref().map(|m| &m.engine) {
            Some(Where::Away(_)) => row,
            _ => {
                write_row(&mut rows.out, &row);
                return;
            }
        }
    };
    if let Some(Where::Away(away)) = main.map(|m| &mut m.engine) {
        away.cut(row);
    }
}
