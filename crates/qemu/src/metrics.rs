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
//! Where a block falls at a cut: when a cut is taken after the block that crossed it (per-block
//! counting), the block's metrics are counted before the cut; when it is taken before the block
//! (inline counting), after. So thread 1's instructions per row are its vector's instructions.

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use bbv_profile::{CacheGeometry, MetricsRow, MetricsWriter};

use crate::blocks::TbInfo;
use crate::cache::{Cache, Gshare};
use crate::{report_error, Config};

/// One thread's running totals, in `MetricsRow` column order. Only the owning thread writes
/// (plain load + store, no locked instruction); thread 1 reads them at cuts.
#[derive(Default)]
struct Counters([AtomicU64; 8]);

const INSNS: usize = 0;
const LOADS: usize = 1;
const STORES: usize = 2;
const TAKEN: usize = 3;
const PAGES: usize = 4;
const L1D: usize = 5;
const L2: usize = 6;
const MISPREDICT: usize = 7;

impl Counters {
    #[inline(always)]
    fn bump(&self, column: usize, by: u64) {
        let c = &self.0[column];
        c.store(c.load(Ordering::Relaxed) + by, Ordering::Relaxed);
    }

    fn read(&self) -> MetricsRow {
        MetricsRow(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}

/// Every thread's counters and their values at the last cut.
struct Rows {
    threads: Vec<(&'static Counters, MetricsRow)>,
    /// None after a failed write (reported once).
    out: Option<MetricsWriter<File>>,
}

static ROWS: Mutex<Option<Rows>> = Mutex::new(None);
/// Interval number; a thread's page filter entries from older intervals are stale.
static EPOCH: AtomicU64 = AtomicU64::new(0);
/// Distinct pages counted in the current epoch.
static PAGE_COUNT: AtomicU64 = AtomicU64::new(0);

const PAGE_SHIFT: u32 = 12;
/// Entries of a thread's filter of recently counted pages.
const FILTER: usize = 256;

/// Every page touched, shared by the threads without a lock: open addressing on (page + 1)
/// keys, each with the epoch in which the page was last counted. Allocated zeroed, so only the
/// slots used ever take memory.
struct PageTable {
    keys: Vec<AtomicU64>,
    epochs: Vec<AtomicU64>,
}

/// Slots of the page table: 16 GiB of distinct pages touched in a run.
const PAGE_SLOTS: usize = 1 << 22;
static PAGE_TABLE: OnceLock<PageTable> = OnceLock::new();

impl PageTable {
    fn new() -> PageTable {
        let zeroed = || {
            let v: Vec<u64> = vec![0; PAGE_SLOTS];
            // SAFETY: AtomicU64 has u64's size and alignment; calloc'd zeros stay untouched.
            let mut v = std::mem::ManuallyDrop::new(v);
            unsafe { Vec::from_raw_parts(v.as_mut_ptr() as *mut AtomicU64, v.len(), v.capacity()) }
        };
        PageTable {
            keys: zeroed(),
            epochs: zeroed(),
        }
    }

    /// Whether `page` was not counted yet in `epoch` (and marks it counted).
    fn first_in(&self, page: u64, epoch: u64) -> bool {
        let key = page + 1;
        let mask = PAGE_SLOTS - 1;
        let mut i = (page.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 40) as usize & mask;
        for _ in 0..PAGE_SLOTS {
            let k = self.keys[i].load(Ordering::Relaxed);
            let mine = k == key
                || (k == 0
                    && match self.keys[i].compare_exchange(
                        0,
                        key,
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    ) {
                        Ok(_) => true,
                        Err(now) => now == key,
                    });
            if mine {
                // Epochs start at 1 in the table (0 = never counted).
                return self.epochs[i].swap(epoch + 1, Ordering::Relaxed) != epoch + 1;
            }
            i = (i + 1) & mask;
        }
        // A full table: count the page (the column overstates rather than stops).
        true
    }
}

/// Creates `metrics` with its header.
pub fn init(cfg: &Config) -> std::io::Result<()> {
    let out = MetricsWriter::new(File::create(cfg.dir.join("metrics"))?)?;
    *ROWS.lock().unwrap_or_else(|e| e.into_inner()) = Some(Rows {
        threads: Vec::new(),
        out: Some(out),
    });
    let _ = PAGE_TABLE.set(PageTable::new());
    Ok(())
}

/// One thread's models and counters (the fields every access touches first).
#[repr(C)]
pub struct ThreadMetrics {
    counters: Counters,
    l1d: Cache,
    l2: Cache,
    line_shift: u32,
    gshare: Gshare,
    /// The last line accessed and the epoch then: a repeat is an L1D hit on a page already
    /// counted, the most common access by far.
    last_line: u64,
    last_epoch: u64,
    /// Recently counted pages, direct-mapped: (page, epoch).
    pages: Box<[(u64, u64); FILTER]>,
    /// Where the previous block falls through, its conditional branch (0 if none), and its
    /// trailing rep instruction (0 if none).
    prev_end: u64,
    prev_branch: u64,
    prev_rep: u64,
    rep_iterations: bool,
}

impl ThreadMetrics {
    /// A new thread's metrics; [`register`](Self::register) them once they are in place.
    pub fn new(cfg: &Config) -> ThreadMetrics {
        let shift = if cfg.aarch64 {
            2
        } else if cfg.riscv64 {
            1
        } else {
            0
        };
        ThreadMetrics {
            counters: Counters::default(),
            l1d: Cache::new(&cfg.l1d),
            l2: Cache::new(&cfg.l2),
            line_shift: cfg.l1d.line.trailing_zeros(),
            gshare: Gshare::new(shift),
            last_line: u64::MAX,
            last_epoch: 0,
            pages: Box::new([(u64::MAX, 0); FILTER]),
            prev_end: 0,
            prev_branch: 0,
            prev_rep: 0,
            rep_iterations: cfg.rep_iterations,
        }
    }

    /// Adds the thread's counters to the cuts' sums; `self` never moves or dies again (thread
    /// states are never freed: an exited thread's work still counts).
    pub fn register(&'static self) {
        if let Some(rows) = ROWS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            rows.threads.push((&self.counters, MetricsRow::default()));
        }
    }

    /// A block starts: the previous block's control transfer, then the block's instructions.
    #[inline]
    pub fn block(&mut self, tb: &TbInfo) {
        // Another iteration of a rep string instruction is not a transfer, and counts as an
        // instruction only under count_rep=iteration (as the vectors count it).
        let again = tb.rep_first && self.prev_rep == tb.pc;
        let c = &self.counters;
        if !again && self.prev_end != 0 {
            let taken = tb.pc != self.prev_end;
            if taken {
                c.bump(TAKEN, 1);
            }
            if self.prev_branch != 0 && self.gshare.update(self.prev_branch, taken) {
                c.bump(MISPREDICT, 1);
            }
        }
        if !again || self.rep_iterations {
            c.bump(INSNS, tb.insns);
        }
        self.prev_end = tb.end;
        self.prev_branch = tb.branch;
        self.prev_rep = tb.rep_last;
    }

    /// A memory access of `size` bytes at `vaddr`.
    #[inline]
    pub fn access(&mut self, vaddr: u64, size: u64, store: bool) {
        self.counters.bump(if store { STORES } else { LOADS }, 1);
        let first = vaddr >> self.line_shift;
        let last = (vaddr + size.max(1) - 1) >> self.line_shift;
        let epoch = EPOCH.load(Ordering::Relaxed);
        if first == last && first == self.last_line && epoch == self.last_epoch {
            return;
        }
        // An access across two lines misses if either line misses (cachegrind's rule). A line
        // hit for the first time in this interval may be on a page not counted in it yet.
        let (mut l1_miss, mut l2_miss) = self.line(first, epoch);
        if last != first {
            let (m1, m2) = self.line(first + 1, epoch);
            l1_miss |= m1;
            l2_miss |= m2;
        }
        self.last_line = last;
        self.last_epoch = epoch;
        if l1_miss {
            self.counters.bump(L1D, 1);
            if l2_miss {
                self.counters.bump(L2, 1);
            }
        }
    }

    /// One line of an access: (L1D miss, L2 miss).
    #[inline(always)]
    fn line(&mut self, line: u64, epoch: u64) -> (bool, bool) {
        let (hit, fresh) = self.l1d.access_stamped(line, epoch);
        if fresh {
            self.page(line << self.line_shift >> PAGE_SHIFT, epoch);
        }
        if hit {
            (false, false)
        } else {
            (true, !self.l2.access(line))
        }
    }

    #[inline]
    fn page(&mut self, page: u64, epoch: u64) {
        let slot = &mut self.pages[page as usize % FILTER];
        if *slot == (page, epoch) {
            return;
        }
        *slot = (page, epoch);
        if PAGE_TABLE.get().is_some_and(|t| t.first_in(page, epoch)) {
            PAGE_COUNT.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Thread 1 cut an interval: append the row of every thread's metrics since the last cut.
pub fn cut() {
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
    row.0[PAGES] = PAGE_COUNT.swap(0, Ordering::Relaxed);
    if let Some(out) = rows.out.as_mut() {
        if let Err(e) = out.row(&row) {
            report_error(&format!("writing the metrics file: {e}"));
            rows.out = None;
        }
    }
}

/// Parses `SIZE:WAYS:LINE` for the plugin arguments `l1d=` and `l2=`.
pub fn geometry(key: &str, value: &str) -> Result<CacheGeometry, String> {
    CacheGeometry::parse(value).map_err(|e| format!("plugin argument {key}: {e}"))
}
