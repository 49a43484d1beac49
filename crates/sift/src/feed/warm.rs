//! Condensed cache warming for a single thread's window: of the warmup but its last
//! [`DETAIL`] instructions, Sniper is sent only the last touch of each cache line, as one
//! synthetic load (or store, for a line written) per line, oldest first.
//!
//! Why: Sniper's 8 MB L3 holds lines a program touched long before a region (python3 frees
//! at its exit what it built at its start: its last regions read 30 times the DRAM reads in
//! isolation that they read in the whole run, and CPI +34% to +95%), and streaming every
//! instruction of a warmup long enough for that costs Sniper about a third of simulating it
//! in detail. With LRU replacement the state an access stream leaves is the order of each
//! line's last touch, so the newest lines in that order leave the caches (and the TLBs: a
//! page's last touch is one of its lines') as the whole stretch does; the last [`DETAIL`]
//! instructions are then streamed whole for the branch predictor, the L1s and the recent
//! order. The same rule as ChampSim's condensed warmups (bbv-champsim's `condense`), here
//! made live: the frontend keeps the lines, and a window condenses from its own start.

use rustc_hash::FxHashMap as HashMap;

use crate::Instruction;

/// Instructions before the region streamed whole after the condensed lines.
pub const DETAIL: u64 = 2_000_000;

/// Lines kept (the newest): four times the 8 MB L3 of Sniper's `gainestown` in 64-byte lines,
/// more than any cache of its configurations used here holds (a set's lines are the newest of
/// its own, older than the newest L3-full overall when the sets fill unevenly).
pub const LINES: usize = 4 * (8 << 20) / 64;

/// Cache lines' size in bytes (every configuration scripts/sniper's build uses).
const LINE: u64 = 64;

/// Where the synthetic loads and stores sit: above user space, so that no guest instruction
/// shares their address (Sniper caches its decoding by address); one each, as they differ.
const LOAD_IP: u64 = 0xffff_ffff_ffff_f000;
const STORE_IP: u64 = LOAD_IP + 0x40;

#[derive(Clone, Copy)]
struct Touch {
    /// The instruction (the feed's sequence number) that last touched the line.
    last: u64,
    /// The last that wrote it (0: none).
    written: u64,
}

/// The newest lines' last touches.
pub(super) struct Lines {
    touches: HashMap<u64, Touch>,
    keep: usize,
}

impl Lines {
    /// Keeps (at least) the newest `keep` lines.
    pub fn new(keep: usize) -> Lines {
        Lines {
            touches: HashMap::default(),
            keep: keep.max(1),
        }
    }

    /// Instruction `seq` touched the line of `addr`.
    pub fn touch(&mut self, addr: u64, seq: u64, write: bool) {
        let t = self.touches.entry(addr / LINE).or_insert(Touch {
            last: seq,
            written: 0,
        });
        t.last = seq;
        if write {
            t.written = seq;
        }
        if self.touches.len() >= 2 * self.keep {
            self.trim();
        }
    }

    /// Drops all but the newest `keep` lines (amortised: at twice that many).
    fn trim(&mut self) {
        let mut lasts: Vec<u64> = self.touches.values().map(|t| t.last).collect();
        let cut = lasts.len() - self.keep;
        let (_, &mut oldest_kept, _) = lasts.select_nth_unstable(cut);
        self.touches.retain(|_, t| t.last >= oldest_kept);
    }

    /// The lines last touched by instruction `since` or later, at most the newest `keep`,
    /// oldest first: each line's address and whether it was written since.
    pub fn since(&self, since: u64) -> Vec<(u64, bool)> {
        let mut v: Vec<(u64, u64, bool)> = (self.touches.iter())
            .filter(|(_, t)| t.last >= since)
            .map(|(&line, t)| (t.last, line * LINE, t.written >= since && t.written > 0))
            .collect();
        v.sort_unstable_by_key(|&(last, line, _)| (last, line));
        let skip = v.len().saturating_sub(self.keep);
        v.into_iter().skip(skip).map(|(_, a, w)| (a, w)).collect()
    }
}

/// A synthetic instruction that loads (or stores) `addr`, for instruction set `isa` (None:
/// x86-64; else one of [`crate::isa`]).
pub fn touch_instruction(isa: Option<u32>, addr: u64, write: bool) -> Instruction {
    // x86-64: mov rax, [rax] and mov [rax], rax; AArch64: ldr x0, [x0] and str x0, [x0].
    let bytes: &[u8] = match (isa == Some(crate::isa::AARCH64), write) {
        (false, false) => &[0x48, 0x8b, 0x00],
        (false, true) => &[0x48, 0x89, 0x00],
        (true, false) => &[0x00, 0x00, 0x40, 0xf9],
        (true, true) => &[0x00, 0x00, 0x00, 0xf9],
    };
    let ip = if write { STORE_IP } else { LOAD_IP };
    Instruction::from_accesses(ip, bytes, &[addr], 1, (false, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A set-associative LRU cache: what the kept lines must leave as the whole stream does.
    struct Lru {
        sets: Vec<Vec<u64>>,
        ways: usize,
    }

    impl Lru {
        fn new(sets: usize, ways: usize) -> Lru {
            Lru {
                sets: vec![Vec::new(); sets],
                ways,
            }
        }
        fn access(&mut self, addr: u64) {
            let line = addr / LINE;
            let n = self.sets.len() as u64;
            let set = &mut self.sets[(line % n) as usize];
            set.retain(|&l| l != line);
            set.insert(0, line);
            set.truncate(self.ways);
        }
    }

    /// A pseudo-random stream with reuse (a xorshift; no dependency for a test).
    fn stream(n: usize, span: u64) -> Vec<(u64, bool)> {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % span) * 8, x.is_multiple_of(5))
            })
            .collect()
    }

    #[test]
    fn the_kept_lines_leave_an_lru_cache_as_the_whole_stream_does() {
        let s = stream(200_000, 1 << 20);
        for (sets, ways) in [(64, 8), (256, 16), (1024, 4)] {
            let capacity = sets * ways;
            let (mut whole, mut condensed) = (Lru::new(sets, ways), Lru::new(sets, ways));
            let mut lines = Lines::new(4 * capacity);
            // The window starts at instruction 50,000; what came before is not its own.
            for (seq, &(a, w)) in s.iter().enumerate() {
                lines.touch(a, seq as u64, w);
                if seq >= 50_000 {
                    whole.access(a);
                }
            }
            for (a, _) in lines.since(50_000) {
                condensed.access(a);
            }
            assert_eq!(whole.sets, condensed.sets, "{sets} sets of {ways}");
        }
    }

    #[test]
    fn lines_written_since_the_start_are_stored_and_older_writes_are_not() {
        let mut lines = Lines::new(16);
        lines.touch(0x1000, 1, true);
        lines.touch(0x2000, 2, false);
        lines.touch(0x1008, 5, false);
        lines.touch(0x3000, 6, true);
        assert_eq!(lines.since(3), [(0x1000, false), (0x3000, true)]);
        assert_eq!(
            lines.since(0),
            [(0x2000, false), (0x1000, true), (0x3000, true)]
        );
    }

    #[test]
    fn at_most_the_newest_lines_are_kept_in_their_order() {
        let mut lines = Lines::new(3);
        for (seq, a) in [0x40, 0x80, 0xc0, 0x100, 0x140, 0x80, 0x180]
            .iter()
            .enumerate()
        {
            lines.touch(*a, seq as u64, false);
        }
        assert_eq!(
            lines.since(0),
            [(0x140, false), (0x80, false), (0x180, false)]
        );
    }

    #[test]
    fn the_synthetic_accesses_decode_as_one_memory_operand_at_the_line() {
        let i = touch_instruction(None, 0x1234_5678, true);
        assert_eq!(i.memory, [0x1234_5678]);
        assert_eq!(i.bytes, [0x48, 0x89, 0x00]);
        assert!(!i.branch);
        let a = touch_instruction(Some(crate::isa::AARCH64), 0x40, false);
        assert_eq!(a.bytes, 0xf940_0000u32.to_le_bytes());
        assert_ne!(a.address, touch_instruction(None, 0, true).address);
    }
}
