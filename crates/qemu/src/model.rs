//! The metrics' model of one thread: its counters, caches, page filter and branch predictor
//! ([`Engine`]), the table of pages every thread touched, and the rows written to `metrics`.
//! Used where the engine runs: on the guest's thread ([`crate::metrics`]) or on a model thread
//! ([`crate::offload`]).

use bbv_plugin_contract::Isa;
use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use bbv_plugin_contract::files;
use bbv_profile::{MetricsRow, MetricsWriter};

use crate::blocks::TbInfo;
use crate::cache::{Cache, Gshare};
use crate::{report_error, Config};

/// One thread's running totals, in `MetricsRow` column order. Only the owning thread writes
/// (plain load + store, no locked instruction); thread 1 reads them at cuts.
#[derive(Default)]
pub struct Counters([AtomicU64; 8]);

const INSNS: usize = 0;
pub(crate) const LOADS: usize = 1;
pub(crate) const STORES: usize = 2;
const TAKEN: usize = 3;
const PAGES: usize = 4;
const L1D: usize = 5;
const L2: usize = 6;
const MISPREDICT: usize = 7;

impl Counters {
    pub(crate) fn read(&self) -> MetricsRow {
        MetricsRow(std::array::from_fn(|i| self.0[i].load(Ordering::Relaxed)))
    }
}

/// Where an [`Engine`] counts: a thread's shared [`Counters`], or a model thread's own row
/// (plain words the compiler keeps in registers).
pub(crate) trait Tally {
    fn bump(&mut self, column: usize, by: u64);
}

impl Tally for &Counters {
    #[inline(always)]
    fn bump(&mut self, column: usize, by: u64) {
        let c = &self.0[column];
        c.store(c.load(Ordering::Relaxed) + by, Ordering::Relaxed);
    }
}

impl Tally for MetricsRow {
    #[inline(always)]
    fn bump(&mut self, column: usize, by: u64) {
        self.0[column] += by;
    }
}

/// Every thread's counters and their values at the last cut.
pub(crate) struct Rows {
    pub threads: Vec<(&'static Counters, MetricsRow)>,
    /// None after a failed write (reported once).
    pub out: Option<MetricsWriter<File>>,
}

pub(crate) static ROWS: Mutex<Option<Rows>> = Mutex::new(None);
/// Interval number; a thread's page filter entries from older intervals are stale.
pub(crate) static EPOCH: AtomicU64 = AtomicU64::new(0);

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
    let out = MetricsWriter::new(File::create(cfg.host.dir.join(files::METRICS))?)?;
    *ROWS.lock().unwrap_or_else(|e| e.into_inner()) = Some(Rows {
        threads: Vec::new(),
        out: Some(out),
    });
    let _ = PAGE_TABLE.set(PageTable::new());
    Ok(())
}

/// What a thread's blocks and memory accesses go through: its caches, its filter of recently
/// counted pages and its branch predictor. On the guest's thread, or on a model thread of its
/// own ([`offload`]).
pub struct Engine {
    l1d: Cache,
    l2: Cache,
    line_shift: u32,
    /// The last line accessed and the epoch then: a repeat is an L1D hit on a page already
    /// counted, the most common access by far.
    last_line: u64,
    last_epoch: u64,
    /// Recently counted pages, direct-mapped: (page, epoch).
    pages: Box<[(u64, u64); FILTER]>,
    gshare: Gshare,
    /// Where the previous block falls through, its conditional branch (0 if none), and its
    /// trailing rep instruction (0 if none).
    prev_end: u64,
    prev_branch: u64,
    prev_rep: u64,
    rep_iterations: bool,
}

impl Engine {
    /// A thread's engine with empty caches and a fresh predictor.
    pub(crate) fn new(cfg: &Config) -> Engine {
        let shift = if cfg.is(Isa::Aarch64) {
            2
        } else if cfg.is(Isa::Riscv64) {
            1
        } else {
            0
        };
        Engine {
            l1d: Cache::new(&cfg.model().l1d),
            l2: Cache::new(&cfg.model().l2),
            line_shift: cfg.model().l1d.line.trailing_zeros(),
            last_line: u64::MAX,
            last_epoch: 0,
            pages: Box::new([(u64::MAX, 0); FILTER]),
            gshare: Gshare::new(shift),
            prev_end: 0,
            prev_branch: 0,
            prev_rep: 0,
            rep_iterations: cfg.host.rep_iterations,
        }
    }

    /// The log2 of the cache-line size.
    pub(crate) fn line_shift(&self) -> u32 {
        self.line_shift
    }

    /// The L1D's number of sets (a power of two).
    pub(crate) fn l1d_sets(&self) -> u64 {
        self.l1d.sets()
    }

    /// A block starts: the previous block's control transfer, then the block's instructions.
    #[inline(always)]
    pub(crate) fn block(&mut self, c: &mut impl Tally, tb: &TbInfo) {
        // Another iteration of a rep string instruction is not a transfer, and counts as an
        // instruction only under count_rep=iteration (as the vectors count it).
        let again = tb.rep_first && self.prev_rep == tb.pc;
        if !again && self.prev_end != 0 {
            let taken = tb.pc != self.prev_end;
            c.bump(TAKEN, taken as u64);
            if self.prev_branch != 0 {
                c.bump(
                    MISPREDICT,
                    self.gshare.update(self.prev_branch, taken) as u64,
                );
            }
        }
        if !again || self.rep_iterations {
            c.bump(INSNS, tb.insns);
        }
        self.prev_end = tb.end;
        self.prev_branch = tb.branch;
        self.prev_rep = tb.rep_last;
    }

    /// A memory access of `size` bytes at `vaddr` in interval `epoch`.
    #[inline(always)]
    pub(crate) fn access(
        &mut self,
        c: &mut impl Tally,
        vaddr: u64,
        size: u64,
        store: bool,
        epoch: u64,
    ) {
        c.bump(if store { STORES } else { LOADS }, 1);
        let first = vaddr >> self.line_shift;
        let last = (vaddr + size.max(1) - 1) >> self.line_shift;
        if first == last && first == self.last_line && epoch == self.last_epoch {
            return;
        }
        // An access across two lines misses if either line misses (cachegrind's rule). A line
        // hit for the first time in this interval may be on a page not counted in it yet.
        let (mut l1_miss, mut l2_miss) = self.line(c, first, epoch);
        if last != first {
            let (m1, m2) = self.line(c, first + 1, epoch);
            l1_miss |= m1;
            l2_miss |= m2;
        }
        self.last_line = last;
        self.last_epoch = epoch;
        if l1_miss {
            c.bump(L1D, 1);
            if l2_miss {
                c.bump(L2, 1);
            }
        }
    }

    /// One line of an access: (L1D miss, L2 miss).
    #[inline(always)]
    fn line(&mut self, c: &mut impl Tally, line: u64, epoch: u64) -> (bool, bool) {
        let (hit, fresh) = self.l1d.access_stamped(line, epoch);
        if fresh {
            self.page(c, line << self.line_shift >> PAGE_SHIFT, epoch);
        }
        if hit {
            (false, false)
        } else {
            (true, !self.l2.access(line))
        }
    }

    #[inline]
    fn page(&mut self, c: &mut impl Tally, page: u64, epoch: u64) {
        let slot = &mut self.pages[page as usize % FILTER];
        if *slot == (page, epoch) {
            return;
        }
        *slot = (page, epoch);
        if PAGE_TABLE.get().is_some_and(|t| t.first_in(page, epoch)) {
            c.bump(PAGES, 1);
        }
    }
}

/// Appends `row`; after a failed write (reported once) the file gets no more rows.
pub(crate) fn write_row(out: &mut Option<MetricsWriter<File>>, row: &MetricsRow) {
    if let Some(w) = out.as_mut() {
        if let Err(e) = w.row(row) {
            report_error(&format!("writing the metrics file: {e}"));
            *out = None;
        }
    }
}

/// The metrics file, taken by a model thread that writes the rows while it runs.
pub(crate) fn take_out() -> Option<MetricsWriter<File>> {
    ROWS.lock()
        .unwrap_or_else(|e| e.into_inner())
        .as_mut()
        .and_then(|r| r.out.take())
}

/// The metrics file back from a model thread.
pub(crate) fn put_out(out: Option<MetricsWriter<File>>) {
    if let Some(rows) = ROWS.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
        rows.out = out;
    }
}
