//! Condensed warmups: the records of a long warmup cut down to those that leave ChampSim's
//! caches, TLBs and branch predictor in (nearly) the state the whole warmup leaves them in, so
//! that a warmup of tens of millions of instructions costs ChampSim a few hundred thousand
//! records plus a short stretch kept whole.
//!
//! ChampSim warms with register dependencies removed and every latency zero (`ooo_cpu.cc`'s
//! "fast warmup"): what a warmup record changes is the lines it touches (its instruction's
//! line and its loads' and stores' lines), the pages they lie on, and, for a branch, the
//! predictor and the target buffer. With LRU caches the state a stream of accesses leaves is
//! the last access of each line, in order: so of the condensed stretch each record is kept
//! that is the last touch of one of its lines (a line written anywhere in the stretch is
//! written by its last touch, so that it stays dirty), the newest `lines` lines only (older
//! ones cannot be in any cache), and for each branch its last `branch_repeats` executions with
//! the record after each (ChampSim takes a taken branch's target from the next record). Kept
//! records keep their order; a record kept for its lines that is not a kept execution of its
//! branch is made a plain instruction, so that no target is learnt wrong. The last `detail`
//! records of the warmup pass whole: the predictor's history, the return stack and the
//! caches' most recent order are as in the full warmup when the region starts.

use std::collections::{BTreeMap, VecDeque};

use rustc_hash::FxHashMap as HashMap;
use std::io::{self, Write};

use crate::{BranchKind, Record, RECORD_BYTES};

/// How a warmup is condensed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Condense {
    /// Records before the region passed whole.
    pub detail: u64,
    /// Lines whose last touch is kept (the newest ones).
    pub lines: usize,
    /// Executions of each branch kept (the last ones).
    pub branch_repeats: usize,
}

/// Lines of ChampSim's largest cache as scripts/champsim configures it (LLC: 2,048 sets of 16
/// ways of 64 bytes, 2 MiB).
pub const LLC_LINES: usize = 2048 * 16;

impl Default for Condense {
    /// 2 million records whole; lines of four LLCs (a set's 16 lines are the newest 16 of its
    /// own, older than the newest 32,768 overall when the sets fill unevenly); 4 executions of
    /// each branch (ChampSim's bimodal counters saturate in 2).
    fn default() -> Condense {
        Condense {
            detail: 2_000_000,
            lines: 4 * LLC_LINES,
            branch_repeats: 4,
        }
    }
}

/// A kept record and what keeps it.
struct Kept {
    record: Record,
    /// Lines whose last touch it is, branch executions and successors it stands for.
    refs: u32,
    /// A kept execution of its branch (its successor is kept too).
    branch: bool,
}

/// What a condensed warmup came to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Condensed {
    /// Records read.
    pub records_in: u64,
    /// Records written.
    pub records_out: u64,
    /// Records of the condensed stretch read (less than asked when the trace ended in it).
    pub stretch_in: u64,
    /// Records written for them.
    pub stretch_out: u64,
}

impl Condensed {
    /// Records of a warmup of `warmup` records once condensed: ChampSim's
    /// `--warmup-instructions` for the trace (None when the stretch ran past the warmup).
    pub fn warmup_records(&self, warmup: u64) -> Option<u64> {
        (warmup >= self.stretch_in).then(|| self.stretch_out + warmup - self.stretch_in)
    }
}

/// A writer that condenses the first `stretch` records written through it and passes the
/// rest to `out` unchanged.
pub struct CondenseWriter<W: Write> {
    out: W,
    how: Condense,
    stretch: u64,
    /// Records read so far.
    at: u64,
    /// Bytes of an unfinished record.
    partial: Vec<u8>,
    kept: BTreeMap<u64, Kept>,
    /// Line key (line << 1 | code) to (its last touch, written in the stretch).
    lines: HashMap<u64, (u64, bool)>,
    /// Branch address to its kept executions.
    branches: HashMap<u64, VecDeque<u64>>,
    /// The previous record was a kept branch execution: this one is its successor.
    successor: bool,
    written: u64,
    condensed: Option<u64>,
}

impl<W: Write> CondenseWriter<W> {
    /// Condenses the first `stretch` records (0: none) as `how` says.
    pub fn new(out: W, stretch: u64, how: Condense) -> CondenseWriter<W> {
        CondenseWriter {
            out,
            how,
            stretch,
            at: 0,
            partial: Vec::with_capacity(RECORD_BYTES),
            kept: BTreeMap::new(),
            lines: HashMap::default(),
            branches: HashMap::default(),
            successor: false,
            written: 0,
            condensed: (stretch == 0).then_some(0),
        }
    }

    /// The inner writer and the counts.
    pub fn finish(mut self) -> io::Result<(W, Condensed)> {
        if self.condensed.is_none() {
            self.flush_stretch()?;
        }
        if !self.partial.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the trace ends inside a record ({} of {RECORD_BYTES} bytes)",
                    self.partial.len()
                ),
            ));
        }
        let c = Condensed {
            records_in: self.at,
            records_out: self.written,
            stretch_in: self.stretch.min(self.at),
            stretch_out: self.condensed.unwrap_or(0),
        };
        Ok((self.out, c))
    }

    fn release(&mut self, idx: u64) {
        if let Some(k) = self.kept.get_mut(&idx) {
            k.refs -= 1;
            if k.refs == 0 {
                self.kept.remove(&idx);
            }
        }
    }

    /// One record of the stretch.
    fn take(&mut self, r: Record) {
        let idx = self.at;
        let mut refs = 0u32;
        let data = r.src_mem.iter().map(|&a| (a, false));
        let stores = r.dst_mem.iter().map(|&a| (a, true));
        let code = std::iter::once((r.ip, false));
        for (n, (addr, write)) in code.chain(data).chain(stores).enumerate() {
            if addr == 0 {
                continue;
            }
            let key = (addr >> 6) << 1 | u64::from(n == 0);
            let (old, dirty) = self
                .lines
                .insert(key, (idx, write))
                .map_or((None, false), |(i, d)| (Some(i), d));
            if dirty {
                // Written earlier in the stretch: stays written.
                self.lines.insert(key, (idx, true));
            }
            match old {
                Some(i) if i == idx => {}
                Some(i) => {
                    self.release(i);
                    refs += 1;
                }
                None => refs += 1,
            }
        }
        let branch = BranchKind::of(&r) != BranchKind::NotBranch;
        if self.successor {
            refs += 1;
        }
        if branch && self.how.branch_repeats > 0 {
            refs += 1;
            let q = self.branches.entry(r.ip).or_default();
            q.push_back(idx);
            if q.len() > self.how.branch_repeats {
                let old = q.pop_front().unwrap_or(idx);
                if let Some(k) = self.kept.get_mut(&old) {
                    k.branch = false;
                }
                self.release(old);
                self.release(old + 1);
            }
        }
        self.successor = branch && self.how.branch_repeats > 0;
        if refs > 0 {
            self.kept.insert(
                idx,
                Kept {
                    record: r,
                    refs,
                    branch: branch && self.how.branch_repeats > 0,
                },
            );
        }
        if self.lines.len() > 2 * self.how.lines.max(1) {
            self.prune();
        }
    }

    /// Forgets all but the newest `lines` lines.
    fn prune(&mut self) {
        let mut last: Vec<u64> = self.lines.values().map(|&(i, _)| i).collect();
        let cut = last.len() - self.how.lines.max(1);
        let (_, &mut threshold, _) = last.select_nth_unstable(cut);
        let old: Vec<u64> = self
            .lines
            .iter()
            .filter(|(_, &(i, _))| i < threshold)
            .map(|(&k, _)| k)
            .collect();
        for k in old {
            if let Some((i, _)) = self.lines.remove(&k) {
                self.release(i);
            }
        }
    }

    /// Writes the stretch's kept records, in order.
    fn flush_stretch(&mut self) -> io::Result<()> {
        let mut n = 0u64;
        let kept = std::mem::take(&mut self.kept);
        for (idx, k) in kept {
            let mut r = k.record;
            if !k.branch && BranchKind::of(&r) != BranchKind::NotBranch {
                r = Record {
                    is_branch: false,
                    branch_taken: false,
                    dst_regs: [0; 2],
                    src_regs: [0; 4],
                    ..r
                };
            }
            // A line written in the stretch whose last touch only reads it: a store of its own.
            let mut extra = Vec::new();
            for &a in &k.record.src_mem {
                let key = (a >> 6) << 1;
                let dirty_here = a != 0 && self.lines.get(&key) == Some(&(idx, true));
                let stored = |d: &u64| *d != 0 && d >> 6 == a >> 6;
                if dirty_here && !r.dst_mem.iter().any(stored) && !extra.iter().any(stored) {
                    match r.dst_mem.iter_mut().find(|d| **d == 0) {
                        Some(slot) => *slot = a,
                        None => extra.push(a),
                    }
                }
            }
            r.write(&mut self.out)?;
            n += 1;
            // Nothing may come between a kept branch and its successor (ChampSim takes the
            // target from the next record): its lines then stay clean, a rare small error.
            if k.branch {
                extra.clear();
            }
            for a in extra {
                let store = Record {
                    ip: r.ip,
                    dst_mem: [a, 0],
                    ..Record::default()
                };
                store.write(&mut self.out)?;
                n += 1;
            }
        }
        self.lines = HashMap::default();
        self.branches = HashMap::default();
        self.written += n;
        self.condensed = Some(n);
        Ok(())
    }

    fn record(&mut self, bytes: &[u8; RECORD_BYTES]) -> io::Result<()> {
        if self.condensed.is_none() {
            self.take(Record::from_bytes(bytes));
            self.at += 1;
            if self.at == self.stretch {
                self.flush_stretch()?;
            }
            return Ok(());
        }
        self.at += 1;
        self.written += 1;
        self.out.write_all(bytes)
    }
}

impl<W: Write> Write for CondenseWriter<W> {
    fn write(&mut self, mut buf: &[u8]) -> io::Result<usize> {
        let len = buf.len();
        if !self.partial.is_empty() {
            let need = RECORD_BYTES - self.partial.len();
            let take = need.min(buf.len());
            self.partial.extend_from_slice(&buf[..take]);
            buf = &buf[take..];
            if self.partial.len() < RECORD_BYTES {
                return Ok(len);
            }
            let mut rec = [0u8; RECORD_BYTES];
            rec.copy_from_slice(&self.partial);
            self.partial.clear();
            self.record(&rec)?;
        }
        // Past the stretch whole records go out in one write.
        if self.condensed.is_some() {
            let whole = buf.len() - buf.len() % RECORD_BYTES;
            self.out.write_all(&buf[..whole])?;
            let n = (whole / RECORD_BYTES) as u64;
            self.at += n;
            self.written += n;
            buf = &buf[whole..];
        }
        let mut chunks = buf.chunks_exact(RECORD_BYTES);
        for c in &mut chunks {
            let mut rec = [0u8; RECORD_BYTES];
            rec.copy_from_slice(c);
            self.record(&rec)?;
        }
        self.partial.extend_from_slice(chunks.remainder());
        Ok(len)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{REG_FLAGS, REG_IP};

    fn load(ip: u64, a: u64) -> Record {
        Record {
            ip,
            src_mem: [a, 0, 0, 0],
            ..Record::default()
        }
    }

    fn store(ip: u64, a: u64) -> Record {
        Record {
            ip,
            dst_mem: [a, 0],
            ..Record::default()
        }
    }

    fn branch(ip: u64, taken: bool) -> Record {
        Record {
            ip,
            is_branch: true,
            branch_taken: taken,
            dst_regs: [REG_IP, 0],
            src_regs: [REG_IP, REG_FLAGS, 0, 0],
            ..Record::default()
        }
    }

    fn bytes(rs: &[Record]) -> Vec<u8> {
        rs.iter().flat_map(|r| r.to_bytes()).collect()
    }

    fn records(b: &[u8]) -> Vec<Record> {
        b.chunks_exact(RECORD_BYTES)
            .map(|c| Record::from_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// Writes `input` in pieces of `step` bytes; the output and the counts.
    fn condense(input: &[u8], stretch: u64, how: Condense, step: usize) -> (Vec<u8>, Condensed) {
        let mut w = CondenseWriter::new(Vec::new(), stretch, how);
        for piece in input.chunks(step) {
            w.write_all(piece).unwrap();
        }
        w.finish().unwrap()
    }

    /// A set-associative LRU cache of 64-byte lines: its sets' lines, newest last, and which
    /// are dirty.
    fn lru(rs: &[Record], sets: u64, ways: usize) -> Vec<Vec<(u64, bool)>> {
        let mut c = vec![Vec::<(u64, bool)>::new(); sets as usize];
        for r in rs {
            let acc = r.src_mem.iter().map(|&a| (a, false));
            for (a, w) in acc.chain(r.dst_mem.iter().map(|&a| (a, true))) {
                if a == 0 {
                    continue;
                }
                let line = a >> 6;
                let set = &mut c[(line % sets) as usize];
                let dirty = match set.iter().position(|&(l, _)| l == line) {
                    Some(i) => set.remove(i).1,
                    None => false,
                };
                set.push((line, dirty || w));
                if set.len() > ways {
                    set.remove(0);
                }
            }
        }
        c
    }

    fn random_stream(n: usize) -> Vec<Record> {
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        (0..n)
            .map(|i| {
                let ip = 0x40_0000 + (next() % 4096) * 4;
                let a = 0x10_0000 + (next() % 3000) * 8;
                match next() % 4 {
                    0 => load(ip, a),
                    1 => store(ip, a),
                    2 => branch(ip, next() % 2 == 0),
                    _ => Record {
                        ip: 0x50_0000 + i as u64,
                        ..Record::default()
                    },
                }
            })
            .collect()
    }

    #[test]
    fn caches_end_as_after_the_whole_stretch_and_the_rest_passes_whole() {
        let rs = random_stream(20_000);
        let input = bytes(&rs);
        let stretch = 15_000;
        let (out, c) = condense(&input, stretch, Condense::default(), 4096);
        assert_eq!(c.records_in, 20_000);
        let kept = (c.records_out - 5_000) as usize;
        assert!(kept < 15_000 / 2, "{kept} of 15000 kept");
        assert_eq!(c.warmup_records(15_001), Some(kept as u64 + 1));
        assert_eq!(c.warmup_records(14_999), None);
        let got = records(&out);
        assert_eq!(
            &got[kept..],
            &rs[15_000..],
            "records after the stretch pass whole"
        );
        for (sets, ways) in [(64, 12), (16, 4), (1, 200)] {
            let (short, whole) = (
                lru(&got[..kept], sets, ways),
                lru(&rs[..15_000], sets, ways),
            );
            let lines = |c: &[Vec<(u64, bool)>]| -> Vec<Vec<u64>> {
                c.iter().map(|s| s.iter().map(|l| l.0).collect()).collect()
            };
            assert_eq!(lines(&short), lines(&whole), "{sets}x{ways}");
            // Dirty wherever the whole stretch leaves a line dirty (a line written back and
            // read again is dirty once more: one writeback too many, never one too few).
            for (s, w) in short.iter().flatten().zip(whole.iter().flatten()) {
                assert!(s.1 || !w.1, "{sets}x{ways}: line {:x}", w.0);
            }
        }
    }

    #[test]
    fn however_it_is_written_the_output_is_the_same() {
        let input = bytes(&random_stream(3_000));
        let (whole, _) = condense(&input, 2_000, Condense::default(), input.len());
        for step in [1, 63, 64, 65, 1000] {
            assert_eq!(condense(&input, 2_000, Condense::default(), step).0, whole);
        }
        let (same, c) = condense(&input, 0, Condense::default(), 100);
        assert_eq!((same, c.records_out), (input.clone(), 3_000));
    }

    #[test]
    fn a_line_written_then_read_stays_written() {
        let rs = [
            store(0x1000, 0x8000),
            load(0x1004, 0x8008),
            load(0x1008, 0x9000),
        ];
        let (out, _) = condense(&bytes(&rs), 3, Condense::default(), 64);
        let got = records(&out);
        // The store is no line's last touch; the load that is carries the store.
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].src_mem[0], 0x8008);
        assert_eq!(got[0].dst_mem[0], 0x8008);
        assert_eq!(got[1].dst_mem, [0, 0]);
    }

    #[test]
    fn nothing_comes_between_a_kept_branch_and_its_successor() {
        // A return that reads a written line and has no store slot free.
        let mut ret = branch(0x2000, true);
        ret.src_mem[0] = 0x8000;
        ret.dst_mem = [0x9000, 0xa000];
        let rs = [store(0x1000, 0x8000), ret, load(0x4000, 0xb000)];
        let (out, _) = condense(&bytes(&rs), 3, Condense::default(), 64);
        let got = records(&out);
        let at = got.iter().position(|r| r.is_branch).unwrap();
        assert_eq!(got[at + 1].ip, 0x4000, "{got:?}");
    }

    #[test]
    fn a_branch_keeps_its_last_executions_and_their_successors() {
        let how = Condense {
            branch_repeats: 2,
            ..Condense::default()
        };
        let mut rs = Vec::new();
        for i in 0..5u64 {
            rs.push(branch(0x2000, i % 2 == 0));
            // Each successor also the last touch of nothing but itself: a line of its own.
            rs.push(load(0x3000 + 0x40 * i, 0x7000));
        }
        let (out, _) = condense(&bytes(&rs), 10, how, 64);
        let got = records(&out);
        let kept: Vec<(bool, u64)> = got
            .windows(2)
            .filter(|w| w[0].is_branch)
            .map(|w| (w[0].branch_taken, w[1].ip))
            .collect();
        // Executions 3 (not taken) and 4 (taken), each followed by its own successor.
        assert_eq!(kept, [(false, 0x30c0), (true, 0x3100)], "{got:?}");
        // The older executions survive (their line's last touch: the branch's own code line is
        // shared) only as plain instructions.
        assert!(got
            .iter()
            .all(|r| r.is_branch || BranchKind::of(r) == BranchKind::NotBranch));
    }

    #[test]
    fn only_the_newest_lines_are_kept() {
        let rs: Vec<Record> = (0..10_000u64)
            .map(|i| load(0x1000, 0x100_0000 + 64 * i))
            .collect();
        let how = Condense {
            lines: 100,
            ..Condense::default()
        };
        let (out, _) = condense(&bytes(&rs), 10_000, how, 64 * 7);
        let got = records(&out);
        assert!(got.len() >= 100 && got.len() <= 201, "{}", got.len());
        assert_eq!(got.last(), rs.last());
    }

    #[test]
    fn a_trace_cut_inside_a_record_is_an_error() {
        let mut w = CondenseWriter::new(Vec::new(), 1, Condense::default());
        w.write_all(&[0u8; 100]).unwrap();
        assert!(w.finish().is_err());
    }
}
