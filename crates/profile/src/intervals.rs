use std::io;

/// Where interval cuts fall.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutMode {
    /// Every interval holds exactly the interval size; a block whose instructions straddle a
    /// cut has its count split between the two intervals (what exp-bbv does).
    Exact,
    /// Cut i falls at the end of the first block that reaches `i * interval` instructions, so
    /// blocks are never split; cuts never drift, the overshoot is taken from the next interval.
    BlockEnd,
}

/// Storage of the per-block counts of the current interval, indexed by block id.
///
/// The QEMU plugin keeps them in a shared file mapping so that the host can still read the
/// last partial interval of a guest that died by a signal.
pub trait CountStore {
    /// The counts (index = block id; index 0 unused).
    fn counts(&mut self) -> &mut [u64];
    /// Makes room for at least `len` counts; new ones are zero.
    fn grow(&mut self, len: usize);
}

impl CountStore for Vec<u64> {
    fn counts(&mut self) -> &mut [u64] {
        self
    }
    fn grow(&mut self, len: usize) {
        self.resize(len, 0);
    }
}

/// Accumulates per-block instruction counts of one thread and cuts them into intervals.
///
/// Block ids are 1-based; a completed interval is handed to a sink as `(id, count)` pairs in
/// ascending id order, so the output does not depend on execution order within the interval.
pub struct IntervalCounter<S: CountStore = Vec<u64>> {
    interval: u64,
    mode: CutMode,
    counts: S,
    touched: Vec<u32>,
    filled: u64,
    total: u64,
    next_cut: u64,
    intervals: u64,
    last_cut: u64,
    pairs: Vec<(u32, u64)>,
}

impl IntervalCounter<Vec<u64>> {
    /// A counter cutting every `interval` instructions (`interval` must be at least 1).
    pub fn new(interval: u64, mode: CutMode) -> Self {
        Self::with_store(interval, mode, Vec::new())
    }
}

impl<S: CountStore> IntervalCounter<S> {
    /// A counter keeping its counts in `store` (which must hold zeros).
    pub fn with_store(interval: u64, mode: CutMode, store: S) -> Self {
        let interval = interval.max(1);
        IntervalCounter {
            interval,
            mode,
            counts: store,
            touched: Vec::new(),
            filled: 0,
            total: 0,
            next_cut: interval,
            intervals: 0,
            last_cut: 0,
            pairs: Vec::new(),
        }
    }

    /// Instructions counted so far.
    pub fn total(&self) -> u64 {
        self.total
    }

    /// The count storage.
    pub fn store_mut(&mut self) -> &mut S {
        &mut self.counts
    }

    /// Intervals handed to the sink so far.
    pub fn intervals(&self) -> u64 {
        self.intervals
    }

    /// Instructions before the current interval: where the last cut fell (0 before any).
    /// Markers of interval boundaries are placed relative to it.
    pub fn last_cut(&self) -> u64 {
        self.last_cut
    }

    /// The counts of the current, unfinished interval, as `each(id, instructions)`.
    pub fn for_each_current(&mut self, mut each: impl FnMut(u32, u64)) {
        for i in 0..self.touched.len() {
            let id = self.touched[i];
            let c = self.counts.counts().get(id as usize).copied().unwrap_or(0);
            if c > 0 {
                each(id, c);
            }
        }
    }

    /// Whether the current, unfinished interval holds any instructions.
    pub fn has_partial(&self) -> bool {
        !self.touched.is_empty()
    }

    #[inline]
    fn bump(&mut self, id: u32, n: u64) {
        let i = id as usize;
        if i >= self.counts.counts().len() {
            self.counts.grow((i + 1).next_power_of_two().max(1024));
        }
        let c = &mut self.counts.counts()[i];
        if *c == 0 {
            self.touched.push(id);
        }
        *c += n;
    }

    /// Adds `insns` instructions executed in block `id`, handing every interval completed by
    /// them to `sink`.
    #[inline]
    pub fn add<F>(&mut self, id: u32, insns: u64, sink: &mut F) -> io::Result<()>
    where
        F: FnMut(&[(u32, u64)]) -> io::Result<()>,
    {
        if insns == 0 {
            return Ok(());
        }
        self.total += insns;
        match self.mode {
            CutMode::Exact => {
                let mut n = insns;
                while n >= self.interval - self.filled {
                    let part = self.interval - self.filled;
                    if part > 0 {
                        self.bump(id, part);
                    }
                    n -= part;
                    self.filled = 0;
                    self.emit(sink)?;
                }
                if n > 0 {
                    self.bump(id, n);
                    self.filled += n;
                }
            }
            CutMode::BlockEnd => {
                self.bump(id, insns);
                if self.total >= self.next_cut {
                    self.emit(sink)?;
                    // A block longer than an interval passes several cuts; the next cut is
                    // still a multiple of the interval, so cuts never drift.
                    self.next_cut = (self.total / self.interval + 1) * self.interval;
                }
            }
        }
        Ok(())
    }

    /// Adds `insns` instructions of block `id` without taking any cut (for counts gathered in
    /// bulk); follow with [`cut_pending`](Self::cut_pending) once the last block is known.
    #[inline]
    pub fn absorb(&mut self, id: u32, insns: u64) {
        if insns == 0 {
            return;
        }
        self.bump(id, insns);
        self.total += insns;
        if self.mode == CutMode::Exact {
            self.filled += insns;
        }
    }

    /// Takes every cut the absorbed counts have reached, as [`add`](Self::add) would have if
    /// the last block absorbed, `last`, was the one that crossed them: in exact mode the
    /// instructions past a cut are moved from `last` to the next interval.
    pub fn cut_pending<F>(&mut self, last: u32, sink: &mut F) -> io::Result<()>
    where
        F: FnMut(&[(u32, u64)]) -> io::Result<()>,
    {
        match self.mode {
            CutMode::Exact => {
                while self.filled >= self.interval {
                    let over = self.filled - self.interval;
                    let i = last as usize;
                    let have = self.counts.counts().get(i).copied().unwrap_or(0);
                    let over = over.min(have);
                    self.counts.counts()[i] -= over;
                    if have == over {
                        // The block's whole count moves on: it no longer belongs here.
                        self.touched.retain(|&t| t != last);
                    }
                    self.emit(sink)?;
                    self.filled -= self.interval;
                    if over > 0 {
                        self.bump(last, over);
                    }
                }
            }
            CutMode::BlockEnd => {
                if self.total >= self.next_cut {
                    self.emit(sink)?;
                    self.next_cut = (self.total / self.interval + 1) * self.interval;
                }
            }
        }
        Ok(())
    }

    /// The instruction count at which the next cut falls due.
    pub fn next_boundary(&self) -> u64 {
        match self.mode {
            CutMode::Exact => self.total - self.filled + self.interval,
            CutMode::BlockEnd => self.next_cut,
        }
    }

    /// Hands the unfinished interval to `sink` if it holds anything (exp-bbv drops it; this is
    /// what `--tail` asks for).
    pub fn flush_partial<F>(&mut self, sink: &mut F) -> io::Result<()>
    where
        F: FnMut(&[(u32, u64)]) -> io::Result<()>,
    {
        if self.has_partial() {
            self.emit(sink)?;
        }
        Ok(())
    }

    fn emit<F>(&mut self, sink: &mut F) -> io::Result<()>
    where
        F: FnMut(&[(u32, u64)]) -> io::Result<()>,
    {
        self.touched.sort_unstable();
        self.pairs.clear();
        let counts = self.counts.counts();
        for &id in &self.touched {
            self.pairs.push((id, counts[id as usize]));
        }
        // Hand the vector out before clearing it: if the process dies in between, whoever
        // reads the store afterwards can tell from the written vectors that it went out.
        let r = sink(&self.pairs);
        let counts = self.counts.counts();
        for &id in &self.touched {
            counts[id as usize] = 0;
        }
        self.touched.clear();
        self.intervals += 1;
        self.last_cut = match self.mode {
            CutMode::Exact => self.intervals * self.interval,
            CutMode::BlockEnd => self.total,
        };
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mode: CutMode, interval: u64, blocks: &[(u32, u64)]) -> (Vec<Vec<(u32, u64)>>, u64) {
        let mut c = IntervalCounter::new(interval, mode);
        let mut out = Vec::new();
        let mut sink = |p: &[(u32, u64)]| {
            out.push(p.to_vec());
            Ok(())
        };
        for &(id, n) in blocks {
            c.add(id, n, &mut sink).unwrap();
        }
        c.flush_partial(&mut sink).unwrap();
        (out, c.total())
    }

    #[test]
    fn exact_splits_blocks_across_cuts() {
        let (v, total) = run(CutMode::Exact, 10, &[(2, 4), (1, 4), (2, 4), (3, 25)]);
        assert_eq!(total, 37);
        assert_eq!(v[0], vec![(1, 4), (2, 6)]);
        assert_eq!(v[1], vec![(2, 2), (3, 8)]);
        assert_eq!(v[2], vec![(3, 10)]);
        assert_eq!(v[3], vec![(3, 7)]);
        for w in &v[..3] {
            assert_eq!(w.iter().map(|p| p.1).sum::<u64>(), 10);
        }
    }

    #[test]
    fn block_end_cuts_do_not_drift() {
        let blocks: Vec<(u32, u64)> = (0..1000).map(|i| (1 + i % 3, 7)).collect();
        let (v, total) = run(CutMode::BlockEnd, 100, &blocks);
        assert_eq!(total, 7000);
        let mut at = 0u64;
        for (i, w) in v.iter().enumerate().take(v.len() - 1) {
            at += w.iter().map(|p| p.1).sum::<u64>();
            let cut = (i as u64 + 1) * 100;
            assert!(at >= cut && at < cut + 7, "cut {i} at {at}");
        }
        assert_eq!(
            at + v.last().unwrap().iter().map(|p| p.1).sum::<u64>(),
            7000
        );
    }

    /// Bulk counting with cuts taken afterwards gives what per-block counting gives.
    #[test]
    fn absorb_then_cut_matches_add() {
        for mode in [CutMode::Exact, CutMode::BlockEnd] {
            let blocks: Vec<(u32, u64)> = (0..500u32)
                .map(|i| (1 + i * 7 % 5, 1 + u64::from(i % 9)))
                .collect();
            let (want, _) = run(mode, 37, &blocks);
            let mut c = IntervalCounter::new(37, mode);
            let mut got = Vec::new();
            let mut sink = |p: &[(u32, u64)]| {
                got.push(p.to_vec());
                Ok(())
            };
            let mut pending: Vec<(u32, u64)> = Vec::new();
            let mut total = 0;
            for &(id, n) in &blocks {
                pending.push((id, n));
                total += n;
                if total >= c.next_boundary() {
                    for &(i, m) in &pending {
                        c.absorb(i, m);
                    }
                    pending.clear();
                    c.cut_pending(id, &mut sink).unwrap();
                }
            }
            for &(i, m) in &pending {
                c.absorb(i, m);
            }
            c.flush_partial(&mut sink).unwrap();
            assert_eq!(got, want, "{mode:?}");
        }
    }

    /// The last cut is the sum of every vector handed out so far, in both modes.
    #[test]
    fn last_cut_is_the_sum_of_the_closed_intervals() {
        for mode in [CutMode::Exact, CutMode::BlockEnd] {
            let mut c = IntervalCounter::new(50, mode);
            let mut closed = 0u64;
            for i in 0..400u32 {
                let mut sum = 0;
                c.add(1 + i % 4, u64::from(1 + i % 11), &mut |p: &[(
                    u32,
                    u64,
                )]| {
                    sum += p.iter().map(|x| x.1).sum::<u64>();
                    Ok(())
                })
                .unwrap();
                closed += sum;
                assert_eq!(c.last_cut(), closed, "{mode:?} after block {i}");
            }
            assert!(c.intervals() > 10);
        }
    }

    #[test]
    fn huge_block_in_exact_mode_fills_several_intervals() {
        let (v, _) = run(CutMode::Exact, 3, &[(5, 10)]);
        assert_eq!(
            v,
            vec![vec![(5, 3)], vec![(5, 3)], vec![(5, 3)], vec![(5, 1)]]
        );
    }
}
