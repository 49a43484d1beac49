//! Thread 1's metrics engine on a model thread of its own (`metrics_thread=on`, the default),
//! while the guest has a single thread.
//!
//! QEMU calls the plugin at every block and memory access, and on a single-threaded guest most
//! of a metrics run's time went into the cache model and predictor on the guest's own host
//! thread while the machine's other cores idled. Here the guest's thread only appends each
//! block (its leaked `TbInfo`) and access to a buffer (one store); full buffers, and each cut's
//! row, go in order over a bounded channel to the model thread, which runs the same
//! [`Engine`] on the same stream and writes the completed rows. The results are identical by
//! construction: one consumer, one order, the same epochs. When a second guest thread starts
//! (or the guest exits) the guest's thread waits until everything sent is counted and takes
//! the engine back.

use std::fs::File;
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;

use bbv_profile::{MetricsRow, MetricsWriter};

use crate::blocks::TbInfo;
use crate::model::{self, Engine};

/// Words (blocks and accesses) per buffer: 128 KiB, small enough to stay in a core's cache.
const BUFFER: usize = 16 * 1024;
/// Entries of the guest side's filter of most recent lines (see [`Offload::mru`]).
const GROUPS: usize = 256;
/// Buffers in flight: how far the guest may run ahead of the model.
const DEPTH: usize = 8;

/// Encoding of a buffer's words. A block: its `TbInfo`'s address with [`BLOCK_BIT`]. An
/// access: the address in the low [`ADDR_BITS`] bits (user-mode addresses have fewer
/// significant bits; the caches compare lines on fewer still), the size's log2 (3 bits) and
/// [`STORE_BIT`] above.
const ADDR_BITS: u32 = 59;
const ADDR_MASK: u64 = (1 << ADDR_BITS) - 1;
const STORE_BIT: u64 = 1 << 62;
const BLOCK_BIT: u64 = 1 << 63;

enum Msg {
    /// Blocks and accesses: the first `.1` words of the buffer.
    Work(Buffer, usize),
    /// Thread 1 cut an interval: the row of the other threads' counts (none while thread 1 is
    /// alone), to which the model thread adds thread 1's.
    Cut(MetricsRow),
    /// Send back the engine, the counts since the last cut and the metrics file, then stop.
    Back(SyncSender<Returned>),
}

type Returned = (Engine, MetricsRow, Option<MetricsWriter<File>>);

/// A buffer of [`BUFFER`] words, always whole: the guest's thread writes each access's word
/// before knowing whether it keeps it (no branch to mispredict), so every slot must exist.
type Buffer = Box<[u64]>;

fn new_buffer() -> Buffer {
    vec![0; BUFFER].into_boxed_slice()
}

/// The guest side: thread 1's buffer and its end of the channel.
pub struct Offload {
    buf: Buffer,
    /// Words of `buf` in use (always less than [`BUFFER`] between calls).
    len: usize,
    /// Cache-line size's log2, and per group of L1D sets (`line & set_mask`; a group is one
    /// set unless the L1D has more than [`GROUPS`]) the line the last recorded access to the
    /// group touched in this interval (`u64::MAX` for none). Such a line is the most recent of
    /// its set in the engine's L1D, stamped with this interval: another access within it is a
    /// hit that changes no state there (L2, pages and the recency order are untouched), so it
    /// is only counted here. Most accesses are such repeats; not recording them leaves the
    /// model thread a fraction of the words. Inline, not boxed: one dependent load less.
    line_shift: u32,
    mru: [u64; GROUPS],
    set_mask: u64,
    /// Repeats since the last cut: loads, stores.
    repeats: [u64; 2],
    tx: SyncSender<Msg>,
    free: Receiver<Buffer>,
    worker: Option<JoinHandle<()>>,
}

/// Starts a model thread for `engine`, whose accesses are in interval `epoch` from now on;
/// gives the engine back when no thread can be started.
// Called once per run: the engine goes back by value rather than through another box.
#[allow(clippy::result_large_err)]
pub fn start(engine: Engine, epoch: u64) -> Result<Offload, Engine> {
    let line_shift = engine.line_shift();
    let sets = engine.l1d_sets();
    let (tx, rx) = mpsc::sync_channel::<Msg>(DEPTH);
    let (free_tx, free) = mpsc::channel::<Buffer>();
    // The engine and the metrics file move to the model thread once it runs.
    let (home_tx, home_rx) = mpsc::sync_channel::<(Engine, Option<MetricsWriter<File>>)>(1);
    let spawned = without_signals(|| {
        std::thread::Builder::new()
            .name("bbv-metrics".into())
            .spawn(move || {
                if let Ok((engine, out)) = home_rx.recv() {
                    run(engine, out, epoch, rx, free_tx);
                }
            })
    });
    let worker = match spawned {
        Ok(h) => h,
        Err(_) => return Err(engine),
    };
    if let Err(mpsc::SendError((engine, out))) = home_tx.send((engine, model::take_out())) {
        model::put_out(out);
        return Err(engine);
    }
    Ok(Offload {
        buf: new_buffer(),
        len: 0,
        line_shift,
        mru: [u64::MAX; GROUPS],
        set_mask: sets.min(GROUPS as u64) - 1,
        repeats: [0; 2],
        tx,
        free,
        worker: Some(worker),
    })
}

/// Runs `f` with every signal blocked, so that a thread it starts inherits an all-blocked
/// mask: QEMU's host signal handlers expect a vCPU thread, and the guest's signals are for it.
fn without_signals<T>(f: impl FnOnce() -> T) -> T {
    // SAFETY: plain signal-mask calls on the calling thread, restored before returning.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old);
        let r = f();
        libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        r
    }
}

/// The model thread: counts the blocks and accesses in stream order, completes and writes
/// each row.
fn run(
    mut engine: Engine,
    mut out: Option<MetricsWriter<File>>,
    mut epoch: u64,
    rx: Receiver<Msg>,
    free: mpsc::Sender<Buffer>,
) {
    // Counts since the last cut.
    let mut since = MetricsRow::default();
    for msg in rx {
        match msg {
            Msg::Work(buf, len) => {
                for &w in &buf[..len] {
                    if w & BLOCK_BIT != 0 {
                        // SAFETY: TbInfos are leaked at translation and never freed.
                        let tb = unsafe { &*((w & !BLOCK_BIT) as *const TbInfo) };
                        engine.block(&mut since, tb);
                    } else {
                        let size = 1u64 << ((w >> ADDR_BITS) & 7);
                        engine.access(&mut since, w & ADDR_MASK, size, w & STORE_BIT != 0, epoch);
                    }
                }
                let _ = free.send(buf);
            }
            Msg::Cut(mut row) => {
                for i in 0..8 {
                    row.0[i] += since.0[i];
                }
                since = MetricsRow::default();
                epoch += 1;
                model::write_row(&mut out, &row);
            }
            Msg::Back(reply) => {
                let _ = reply.send((engine, since, out));
                return;
            }
        }
    }
}

impl Offload {
    /// Records a block's start.
    #[inline(always)]
    pub fn block(&mut self, tb: &TbInfo) {
        self.push(tb as *const TbInfo as u64 | BLOCK_BIT);
    }

    /// Records one access.
    #[inline(always)]
    pub fn access(&mut self, vaddr: u64, size: u64, store: bool) {
        let first = vaddr >> self.line_shift;
        let last = (vaddr + size.max(1) - 1) >> self.line_shift;
        let group = (first & self.set_mask) as usize;
        let repeat = (first == last) & (self.mru[group] == first);
        self.repeats[store as usize] += u64::from(repeat);
        // Across two lines the engine accesses `first`, then `last` (which takes `first`'s
        // place when both share a group).
        self.mru[group] = first;
        self.mru[(last & self.set_mask) as usize] = last;
        let shift = u64::from(size.max(1).trailing_zeros().min(7));
        let store = if store { STORE_BIT } else { 0 };
        self.put(vaddr & ADDR_MASK | shift << ADDR_BITS | store, !repeat);
    }

    #[inline(always)]
    fn push(&mut self, word: u64) {
        self.put(word, true);
    }

    /// Writes `word` at the end of the buffer and keeps it there if `keep`. Whether an access
    /// is kept follows the data, so a branch on it mispredicted often: the word is written
    /// either way.
    #[inline(always)]
    fn put(&mut self, word: u64, keep: bool) {
        self.buf[self.len] = word;
        self.len += usize::from(keep);
        if self.len == BUFFER {
            self.send_buffer();
        }
    }

    #[cold]
    fn send_buffer(&mut self) {
        // A forked child has no model thread, and must not touch the channels either: one
        // the model thread was sending on at the fork is left mid-write, and a receive on it
        // spins forever waiting for that write to finish.
        if crate::fork::forked() {
            self.len = 0;
            return;
        }
        let next = self.free.try_recv().unwrap_or_else(|_| new_buffer());
        let full = std::mem::replace(&mut self.buf, next);
        let len = std::mem::take(&mut self.len);
        self.send(Msg::Work(full, len));
    }

    fn send(&mut self, msg: Msg) {
        // A forked child has no model thread (threads do not survive fork): it must not wait
        // on the full channel, and counts nothing for the parent anyway.
        if crate::fork::forked() {
            self.len = 0;
            return;
        }
        let _ = self.tx.send(msg);
    }

    /// Thread 1 cut an interval: the model thread adds thread 1's counts to `row` once it
    /// has counted every block and access before the cut.
    pub fn cut(&mut self, mut row: MetricsRow) {
        self.take_repeats(&mut row);
        // A line's first access in the new interval may be its page's first touch.
        self.mru.fill(u64::MAX);
        self.send_partial();
        self.send(Msg::Cut(row));
    }

    /// Adds the repeats since the last cut to `row`'s loads and stores.
    fn take_repeats(&mut self, row: &mut MetricsRow) {
        row.0[model::LOADS] += self.repeats[0];
        row.0[model::STORES] += self.repeats[1];
        self.repeats = [0; 2];
    }

    /// Sends what the buffer holds, if anything.
    fn send_partial(&mut self) {
        if self.len > 0 {
            self.send_buffer();
        }
    }

    /// Waits until everything sent is counted and written, then returns the engine, its
    /// counts since the last cut and the metrics file (None if the model thread is gone).
    pub fn finish(mut self) -> Option<Returned> {
        if crate::fork::forked() {
            // Not dropped either: dropping the buffers' receiver discards what is queued, and
            // waits on a buffer the model thread (which fork does not copy) was sending at the
            // fork, for ever (the rare hang of a guest that forks, with metrics).
            std::mem::forget(self);
            return None;
        }
        self.send_partial();
        let (reply, back) = mpsc::sync_channel(1);
        self.tx.send(Msg::Back(reply)).ok()?;
        let mut returned = back.recv().ok();
        if let Some(h) = self.worker.take() {
            let _ = h.join();
        }
        if let Some((_, since, _)) = returned.as_mut() {
            self.take_repeats(since);
        }
        returned
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Counters;

    enum Event {
        Block(&'static TbInfo),
        Access(u64, u64, bool),
    }

    fn block(pc: u64, end: u64, branch: u64) -> &'static TbInfo {
        Box::leak(Box::new(TbInfo {
            id: 1,
            insns: (end - pc) / 4,
            pc,
            end,
            branch,
            rep_first: false,
            rep_last: 0,
            fldcw: 0,
            execs: std::ptr::null_mut(),
            slot: 0,
            may_loop: true,
            own: true,
            excluded: false,
            head: Default::default(),
        }))
    }

    #[test]
    fn the_model_thread_counts_and_writes_what_the_guest_thread_would() {
        let dir = std::env::temp_dir().join(format!("bbv-offload-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let args = [format!("dir={}", dir.display()), "metrics=on".to_string()];
        let cfg = crate::parse_args(&args, "x86_64").unwrap();
        model::init(&cfg).unwrap();
        // Block i falls through into block i + 1 and ends with a conditional branch: the stream
        // goes on to the next block half of the time, to a random one otherwise.
        let blocks: Vec<&'static TbInfo> = (0..17u64)
            .map(|i| block(0x1000 + 64 * i, 0x1040 + 64 * i, 0x103c + 64 * i))
            .collect();
        let (mut x, mut at, mut prev) = (7u64, 0usize, 0x7f00_0000_0000u64);
        let stream: Vec<Event> = (0..300_000)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                if x >> 60 < 4 {
                    at = if x >> 59 & 1 == 0 {
                        at + 1
                    } else {
                        (x >> 50) as usize
                    } % 16;
                    Event::Block(blocks[at])
                } else {
                    // Half the accesses near the previous one: repeats of its line, and
                    // accesses across into the next.
                    prev = if x >> 58 & 1 == 0 {
                        prev + (x >> 10 & 15)
                    } else {
                        0x7f00_0000_0000 + (x >> 40) % (4 << 20)
                    };
                    Event::Access(prev, 1 << (x >> 20 & 3), x >> 30 & 1 == 1)
                }
            })
            .collect();
        let cuts = [50_000, 120_001, 250_000];
        // Around each cut, two accesses to one line of a page touched nowhere else: after the
        // cut it is a first touch again (no repeat of the access before the cut).
        let mut stream = stream;
        for (k, &c) in cuts.iter().enumerate() {
            let lone = 0x7e00_0000_0000 + 4096 * k as u64;
            stream[c - 1] = Event::Access(lone, 4, false);
            stream[c] = Event::Access(lone + 8, 4, true);
        }
        // The reference: the same engine on this thread. Pages are counted once per epoch over
        // the whole process, so it sees the stream in other pages (same sets) and epochs.
        let here = Counters::default();
        let mut engine = Engine::new(&cfg);
        let mut want = Vec::new();
        let mut base = MetricsRow::default();
        for (i, e) in stream.iter().enumerate() {
            if cuts.contains(&i) {
                let now = here.read();
                want.push(MetricsRow(std::array::from_fn(|c| now.0[c] - base.0[c])));
                base = now;
            }
            let epoch = 500 + cuts.iter().filter(|&&c| c <= i).count() as u64;
            match *e {
                Event::Block(tb) => engine.block(&mut &here, tb),
                Event::Access(vaddr, size, store) => {
                    engine.access(&mut &here, vaddr + (1 << 44), size, store, epoch)
                }
            }
        }
        let now = here.read();
        let want_tail = MetricsRow(std::array::from_fn(|c| now.0[c] - base.0[c]));
        let mut away = start(Engine::new(&cfg), 0).ok().unwrap();
        for (i, e) in stream.iter().enumerate() {
            if cuts.contains(&i) {
                away.cut(MetricsRow::default());
            }
            match *e {
                Event::Block(tb) => away.block(tb),
                Event::Access(vaddr, size, store) => away.access(vaddr, size, store),
            }
        }
        let (_, since_cut, out) = away.finish().unwrap();
        assert_eq!(since_cut, want_tail);
        // Every column is exercised.
        assert!(want_tail.0.iter().all(|&n| n > 100), "{want_tail:?}");
        drop(out);
        let got = bbv_profile::read_metrics(&dir.join("metrics")).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(got, want);
    }
}
