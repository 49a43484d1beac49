//! The models behind `metrics`: a set-associative LRU cache and a gshare branch predictor.

use bbv_profile::CacheGeometry;

/// Low bits of an entry that hold its stamp in [`Cache::access_stamped`].
const STAMP_BITS: u32 = 20;
const STAMP_MASK: u64 = (1 << STAMP_BITS) - 1;

/// A set-associative, write-allocate LRU cache of line numbers. Each set keeps its lines in
/// recency order (most recent first): with 8 or 16 ways a hit is a short scan and a rotate,
/// cheaper than timestamps, and most hits are on the first way.
pub struct Cache {
    ways: usize,
    set_mask: u64,
    /// `sets x ways` line numbers; `EMPTY` where no line is held yet.
    lines: Vec<u64>,
}

const EMPTY: u64 = u64::MAX;

impl Cache {
    /// An empty cache (the geometry was checked by the host and the argument parser).
    pub fn new(g: &CacheGeometry) -> Cache {
        let sets = g.sets().max(1);
        Cache {
            ways: g.ways as usize,
            set_mask: sets - 1,
            lines: vec![EMPTY; (sets * g.ways) as usize],
        }
    }

    /// Its number of sets.
    pub fn sets(&self) -> u64 {
        self.set_mask + 1
    }

    /// Accesses line number `line`; true on a hit. A miss brings the line in, evicting the
    /// least recently used line of its set.
    #[inline]
    pub fn access(&mut self, line: u64) -> bool {
        let start = (line & self.set_mask) as usize * self.ways;
        let set = &mut self.lines[start..start + self.ways];
        if set[0] == line {
            return true;
        }
        let (p, hit) = match set.iter().position(|&l| l == line) {
            Some(p) => (p, true),
            None => (set.len() - 1, false),
        };
        to_front(set, p, line);
        hit
    }

    /// [`access`](Self::access) in a cache whose entries also carry a stamp (the low
    /// [`STAMP_BITS`] bits of `stamp`, an interval number): returns (hit, whether the line
    /// was not yet accessed under this stamp), and stamps the line. Lines are compared on
    /// their low 44 bits (user-mode addresses have at most 47 significant bits). Use one
    /// kind of access per cache.
    #[inline]
    pub fn access_stamped(&mut self, line: u64, stamp: u64) -> (bool, bool) {
        let key = line << STAMP_BITS;
        let want = key | (stamp & STAMP_MASK);
        let start = (line & self.set_mask) as usize * self.ways;
        let set = &mut self.lines[start..start + self.ways];
        if set[0] == want {
            return (true, false);
        }
        let found = set
            .iter()
            .position(|&l| l & !STAMP_MASK == key && l != EMPTY);
        let (p, hit, fresh) = match found {
            Some(p) => (p, true, set[p] != want),
            None => (set.len() - 1, false, true),
        };
        to_front(set, p, want);
        (hit, fresh)
    }
}

/// Moves entry `p` of a set (or the evicted last one) to the front as `entry`: a plain loop
/// (`rotate_right` on a few words goes through a general routine that cost more than the
/// search).
#[inline(always)]
fn to_front(set: &mut [u64], p: usize, entry: u64) {
    let mut i = p;
    while i > 0 {
        set[i] = set[i - 1];
        i -= 1;
    }
    set[0] = entry;
}

/// History bits of the gshare predictor.
pub const GSHARE_BITS: u32 = 14;
/// Its two-bit counters: 16 Ki.
const GSHARE_ENTRIES: usize = 1 << GSHARE_BITS;

/// A gshare predictor: two-bit saturating counters indexed by the branch address XOR the
/// global history of the last [`GSHARE_BITS`] directions. Counters start weakly not taken.
pub struct Gshare {
    counters: Vec<u8>,
    history: u64,
    /// Address bits that are always zero on this ISA (2 on AArch64, 1 on RISC-V with
    /// compressed instructions, 0 on x86).
    shift: u32,
}

impl Gshare {
    /// A predictor for an ISA whose instruction addresses have `shift` always-zero low bits.
    pub fn new(shift: u32) -> Gshare {
        Gshare {
            counters: vec![1; GSHARE_ENTRIES],
            history: 0,
            shift,
        }
    }

    /// The branch at `pc` went `taken`; returns true when it was mispredicted.
    #[inline]
    pub fn update(&mut self, pc: u64, taken: bool) -> bool {
        let mask = GSHARE_ENTRIES as u64 - 1;
        let i = (((pc >> self.shift) ^ self.history) & mask) as usize;
        let c = &mut self.counters[i];
        let predicted = *c >= 2;
        if taken {
            *c = (*c + 1).min(3);
        } else {
            *c = c.saturating_sub(1);
        }
        self.history = ((self.history << 1) | taken as u64) & mask;
        predicted != taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lru_replacement() {
        // 2 sets of 2 ways.
        let mut c = Cache::new(&CacheGeometry {
            size: 256,
            ways: 2,
            line: 64,
        });
        assert!(!c.access(0));
        assert!(!c.access(2)); // same set (even lines)
        assert!(c.access(0));
        assert!(!c.access(4)); // evicts 2, the least recently used
        assert!(c.access(0));
        assert!(!c.access(2));
        assert!(!c.access(4)); // 2 evicted 4, so 4 misses and evicts 0
        assert!(!c.access(1)); // the other set is untouched
        assert!(c.access(2));
    }

    #[test]
    fn lru_matches_a_reference_model() {
        // A fully associative reference with explicit timestamps, on a pseudo-random stream.
        let g = CacheGeometry {
            size: 4096,
            ways: 4,
            line: 64,
        };
        let mut c = Cache::new(&g);
        let sets = g.sets();
        let mut reference: Vec<Vec<(u64, u64)>> = vec![Vec::new(); sets as usize];
        let mut x = 12345u64;
        let (mut misses, mut ref_misses) = (0, 0);
        for t in 0..100_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let line = (x >> 33) % 200;
            misses += !c.access(line) as u64;
            let set = &mut reference[(line % sets) as usize];
            match set.iter_mut().find(|e| e.0 == line) {
                Some(e) => e.1 = t,
                None => {
                    ref_misses += 1;
                    if set.len() == 4 {
                        let lru = (0..4).min_by_key(|&i| set[i].1).unwrap();
                        set.remove(lru);
                    }
                    set.push((line, t));
                }
            }
        }
        assert_eq!(misses, ref_misses);
        assert!(misses > 1000 && misses < 90_000);
    }

    #[test]
    fn stamped_access_tracks_first_use_per_stamp() {
        let g = CacheGeometry {
            size: 256,
            ways: 2,
            line: 64,
        };
        let (mut c, mut plain) = (Cache::new(&g), Cache::new(&g));
        assert_eq!(c.access_stamped(0, 7), (false, true));
        assert_eq!(c.access_stamped(0, 7), (true, false));
        assert_eq!(c.access_stamped(2, 7), (false, true));
        assert_eq!(c.access_stamped(0, 7), (true, false)); // from the second way
        assert_eq!(c.access_stamped(0, 8), (true, true)); // a new stamp
        assert_eq!(c.access_stamped(2, 8), (true, true));
        assert_eq!(c.access_stamped(2, 8), (true, false));
        // Hits and misses are those of the plain cache on any stream.
        let mut x = 99u64;
        for t in 0..20_000u64 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            let line = (x >> 40) % 12;
            assert_eq!(c.access_stamped(line, t / 100).0, plain.access(line));
        }
    }

    #[test]
    fn gshare_learns_a_pattern() {
        let mut g = Gshare::new(0);
        // A loop branch taken 7 times then not taken: history makes it fully predictable.
        let mut late = 0;
        for round in 0..200 {
            for i in 0..8 {
                let miss = g.update(0x401000, i != 7);
                if round >= 100 {
                    late += miss as u32;
                }
            }
        }
        assert_eq!(late, 0);
        // Always taken: at most the first two predictions miss.
        let mut g = Gshare::new(0);
        let misses: u32 = (0..100).map(|_| g.update(0x400, true) as u32).sum();
        assert!(misses <= 16, "{misses}");
    }
}
