//! Placing (PC, count) markers on interval cuts.
//!
//! A marker is the N-th execution of one instruction since the program started, as Pin and
//! gem5's PC-count tracker count (every execution, whichever translated block it sits in).
//! The plugin recorded, for the 0.5% of an interval after each cut of thread 1, the blocks
//! first run there and when (`marks.out`). A block B whose first instruction A is a marker
//! candidate after cut j needs A's executions before the cut: B's own executions, read off the
//! vectors (instructions / block length), plus those of every block T that runs through A
//! (T starts before A and its bytes cover A). That count is exact when no such T runs between
//! the cut and B's first execution, which holds when T has no instructions in interval j; B's
//! first execution after the cut is then A's, and its count is the count before plus one.
//!
//! # Design constraints
//! * Markers must not move with the CPU model or the environment: never the dynamic loader,
//!   anonymous (JIT) code, rep string instructions, or the C library's string routines (chosen
//!   per CPU at load time); blocks of the program's own code are preferred to system libraries.
//! * Among those, a marker that runs rarely is cheaper to watch (for `bbv replay`, Pin or
//!   gem5's tracker), so the block with the fewest executions over the run wins.
//! * One pass over the vectors; memory is one count per block per needed cut.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::path::Path;

use crate::rundir::{BlockRow, ImageRow, Window};
use crate::PipelineError;

/// Markers must fall within this fraction of an interval of the cut.
pub const TOLERANCE: f64 = 0.005;

/// The window after a cut, in instructions, in which a marker may be placed: [`TOLERANCE`] of
/// an interval (the plugin watches the blocks first run in it).
pub fn window(interval: u64) -> u64 {
    (interval as f64 * TOLERANCE) as u64
}

/// What thread 1's vectors say, gathered in one pass for the cuts that need markers.
#[derive(Debug, Default)]
pub struct Profile {
    /// Instructions of each complete interval.
    pub lengths: Vec<u64>,
    /// Cumulative instructions per block id (index = id) before each needed cut.
    cumulative: HashMap<u64, Vec<u64>>,
    /// Blocks with instructions in the interval after each needed cut, sorted.
    used_after: HashMap<u64, Vec<u32>>,
    /// Vectors of the intervals asked to be kept (for replay's comparison).
    pub kept: HashMap<u64, Vec<(u32, u64)>>,
    /// Instructions per block id over the whole profile.
    pub totals: Vec<u64>,
}

impl Profile {
    /// Reads a vector file, keeping what cuts `cuts` and intervals `keep` need.
    pub fn read(
        path: &Path,
        blocks: usize,
        cuts: &BTreeSet<u64>,
        keep: &BTreeSet<u64>,
    ) -> Result<Profile, PipelineError> {
        let mut p = Profile {
            totals: vec![0; blocks + 1],
            ..Profile::default()
        };
        let mut reader = bbv_profile::BbvReader::open(path)?;
        let mut v = Vec::new();
        let mut j = 0u64;
        while reader.next_vector(&mut v)? {
            if cuts.contains(&j) {
                p.cumulative.insert(j, p.totals.clone());
            }
            let mut len = 0u64;
            let mut pairs = Vec::with_capacity(v.len());
            for t in &v {
                let id = t.id as usize;
                if id > blocks {
                    return Err(PipelineError::Invalid(format!(
                        "{}: interval {j} names block {id}, but blocks.tsv has {blocks} blocks",
                        path.display()
                    )));
                }
                let n = t.value as u64;
                p.totals[id] += n;
                len += n;
                pairs.push((t.id, n));
            }
            if cuts.contains(&j) {
                let mut ids: Vec<u32> = pairs.iter().map(|x| x.0).collect();
                ids.sort_unstable();
                p.used_after.insert(j, ids);
            }
            if keep.contains(&j) {
                p.kept.insert(j, pairs);
            }
            p.lengths.push(len);
            j += 1;
        }
        if cuts.contains(&j) {
            p.cumulative.insert(j, p.totals.clone());
            p.used_after.insert(j, Vec::new());
        }
        Ok(p)
    }

    /// Instructions before cut `j` (the sum of the intervals before it).
    pub fn cut_at(&self, j: u64) -> u64 {
        self.lengths.iter().take(j as usize).sum()
    }
}

/// How much a block is worth as a marker (lower is better); None = never.
fn tier(b: &BlockRow, images: &HashMap<&str, &ImageRow>) -> Option<u8> {
    let name = b.image.as_deref()?;
    let image = images.get(name)?;
    if b.rep || b.varies {
        return None;
    }
    match bbv_profile::image_kind(&image.name) {
        bbv_profile::ImageKind::Loader => return None,
        bbv_profile::ImageKind::Own => return Some(0),
        bbv_profile::ImageKind::Runtime => {}
    }
    if name.starts_with("libc.so") {
        // The C library's string routines are picked per CPU at load time (IFUNC), and its
        // unnamed code is mostly those variants (they have no exported symbol).
        let f = b.function.trim_start_matches('_');
        let string = ["mem", "str", "wmem", "wcs", "stp", "rawmem"]
            .iter()
            .any(|p| f.starts_with(p));
        if b.function == "-" || b.function.is_empty() || string {
            return None;
        }
    }
    Some(1)
}

/// A marker placed on a cut.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Placed {
    /// The block whose first instruction is the marker.
    pub block: u32,
    /// Instructions between the cut and the marker instruction.
    pub delta: u64,
    /// The marker's execution count.
    pub count: u64,
}

/// An image's blocks as (start, end, id) sorted by start, and the longest block's bytes.
type Spans = (Vec<(u64, u64, u32)>, u64);

/// Places markers with the profile of one run.
pub struct Placer<'a> {
    blocks: &'a [BlockRow],
    images: HashMap<&'a str, &'a ImageRow>,
    windows: HashMap<u64, &'a Window>,
    /// Per image: (start, end, id) sorted by start, and the longest block's bytes.
    spans: HashMap<&'a str, Spans>,
    /// Blocks other threads ran (their counts are not in thread 1's vectors).
    others: HashSet<u32>,
    profile: &'a Profile,
    tolerance: u64,
    /// Images never to hold a marker (a multi-threaded run's excluded libraries).
    excluded: Vec<String>,
}

impl<'a> Placer<'a> {
    /// A placer for `profile` (thread 1's vectors), `windows` (its `marks.out`) and the blocks
    /// other threads ran.
    pub fn new(
        blocks: &'a [BlockRow],
        images: &'a [ImageRow],
        windows: &'a [Window],
        others: HashSet<u32>,
        profile: &'a Profile,
        interval: u64,
    ) -> Placer<'a> {
        let mut spans: HashMap<&str, Spans> = HashMap::new();
        for b in blocks {
            if let Some(img) = b.image.as_deref() {
                let e = spans.entry(img).or_default();
                e.0.push((b.offset, b.offset + b.bytes, b.id));
                e.1 = e.1.max(b.bytes);
            }
        }
        for (v, _) in spans.values_mut() {
            v.sort_unstable();
        }
        // Two images with one file name cannot be told apart by a marker.
        let mut names: HashMap<&str, usize> = HashMap::new();
        for i in images {
            *names.entry(i.name.as_str()).or_default() += 1;
        }
        Placer {
            blocks,
            images: images
                .iter()
                .filter(|i| names[i.name.as_str()] == 1)
                .map(|i| (i.name.as_str(), i))
                .collect(),
            windows: windows.iter().map(|w| (w.index, w)).collect(),
            spans,
            others,
            profile,
            tolerance: window(interval),
            excluded: Vec::new(),
        }
    }

    /// Never places a marker in these images (file-name prefixes, as `--exclude-image`).
    pub fn excluding(mut self, images: &[String]) -> Self {
        self.excluded = images.to_vec();
        self
    }

    fn block(&self, id: u32) -> Option<&'a BlockRow> {
        self.blocks.get((id as usize).checked_sub(1)?)
    }

    /// Blocks other than `b` whose bytes cover `b`'s first instruction.
    fn containers(&self, b: &BlockRow) -> Vec<u32> {
        let Some((v, longest)) = b.image.as_deref().and_then(|i| self.spans.get(i)) else {
            return Vec::new();
        };
        let from = v.partition_point(|s| s.0 + longest <= b.offset);
        v[from..]
            .iter()
            .take_while(|s| s.0 < b.offset)
            .filter(|s| s.1 > b.offset && s.2 != b.id)
            .map(|s| s.2)
            .collect()
    }

    /// Executions of `b`'s first instruction within `cumulative` (instructions per block):
    /// `b`'s own (rounded up: an execution straddling an exact cut has started) and those of
    /// blocks running through it. None when a count is not a whole number of executions.
    fn executions(&self, cumulative: &[u64], b: &BlockRow, containers: &[u32]) -> Option<u64> {
        let mut n = cumulative.get(b.id as usize)?.div_ceil(b.instructions);
        for &t in containers {
            let tb = self.block(t)?;
            if tb.rep || tb.varies {
                return None;
            }
            n += cumulative.get(t as usize)? / tb.instructions;
        }
        Some(n)
    }

    /// Whether a block running through a candidate marker may also run it between the cut and
    /// the candidate's own first execution there: then the marker's first execution after the
    /// cut lies somewhere in [cut, cut + delta] rather than exactly at delta, which the
    /// tolerance still covers. None when the count itself is unknown: a container another thread
    /// runs, or one whose execution straddles the cut (its instructions before the cut are not a
    /// whole number of executions, so whether it passed the marker before the cut is unknown).
    fn run_through_after(
        &self,
        containers: &[u32],
        cumulative: &[u64],
        used: &[u32],
    ) -> Option<bool> {
        let mut inexact = false;
        for t in containers {
            if self.others.contains(t) {
                return None;
            }
            if used.binary_search(t).is_ok() {
                let tb = self.block(*t)?;
                if cumulative.get(*t as usize)? % tb.instructions != 0 {
                    return None;
                }
                inexact = true;
            }
        }
        Some(inexact)
    }

    /// Whether no other block's bytes run through block `id`'s first instruction.
    pub fn alone(&self, id: u32) -> bool {
        self.block(id)
            .is_some_and(|b| self.containers(b).is_empty())
    }

    /// How good block `id` is as a marker (lower is better; None = never): the tier of its
    /// image, and never in an excluded one.
    pub fn tier_of(&self, id: u32) -> Option<u8> {
        let b = self.block(id)?;
        if b.image
            .as_deref()
            .is_some_and(|i| bbv_profile::image_matches(i, &self.excluded))
        {
            return None;
        }
        tier(b, &self.images)
    }

    /// Executions of block `id`'s first instruction in `cumulative` (instructions per block,
    /// e.g. summed over threads), blocks running through it included (None if unknown).
    pub fn executions_in(&self, cumulative: &[u64], id: u32) -> Option<u64> {
        let b = self.block(id)?;
        if b.rep || b.varies {
            return None;
        }
        let c = self.containers(b);
        self.executions(cumulative, b, &c)
    }

    /// Executions of `b`'s first instruction before cut `j` (None if unknown).
    pub fn executions_before(&self, j: u64, b: u32) -> Option<u64> {
        let b = self.block(b)?;
        let c = self.containers(b);
        self.executions(self.profile.cumulative.get(&j)?, b, &c)
    }

    /// The best marker on cut `j`, if any block qualifies within the tolerance.
    pub fn place(&self, j: u64) -> Option<Placed> {
        let window = self.windows.get(&j)?;
        let cumulative = self.profile.cumulative.get(&j)?;
        let used = self.profile.used_after.get(&j)?;
        let mut best: Option<((u8, bool, u64, u64), Placed)> = None;
        // Program start: the loader runs first and is never a marker, so the first region
        // starts at the earliest qualifying block after it (its length is measured from there);
        // how far that window reaches is the plugin's choice (bbv-qemu's START_REACH).
        let start = j == 0;
        let tolerance = if start { u64::MAX } else { self.tolerance };
        for &(id, delta) in &window.events {
            if delta > tolerance {
                break;
            }
            let Some(b) = self.block(id) else { continue };
            let Some(tier) = self.tier_of(id) else {
                continue;
            };
            let containers = self.containers(b);
            let Some(inexact) = self.run_through_after(&containers, cumulative, used) else {
                continue;
            };
            if self.others.contains(&id) {
                continue;
            }
            let (Some(before), Some(total)) = (
                self.executions(cumulative, b, &containers),
                self.executions(&self.profile.totals, b, &containers),
            ) else {
                continue;
            };
            let key = if start {
                (tier, inexact, delta, total)
            } else {
                (tier, inexact, total, delta)
            };
            if best.as_ref().is_none_or(|(k, _)| key < *k) {
                best = Some((
                    key,
                    Placed {
                        block: id,
                        delta,
                        count: before + 1,
                    },
                ));
            }
        }
        best.map(|(_, p)| p)
    }

    /// The block row of a placed marker.
    pub fn row(&self, id: u32) -> Option<&'a BlockRow> {
        self.block(id)
    }

    /// Whether block `id` is first run after cut `j` earlier than `delta` instructions.
    pub fn seen_before(&self, j: u64, id: u32, delta: u64) -> bool {
        self.windows
            .get(&j)
            .is_some_and(|w| w.events.iter().any(|&(b, d)| b == id && d < delta))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn row(id: u32, image: &str, offset: u64, insns: u64, bytes: u64) -> BlockRow {
        BlockRow {
            id,
            image: Some(image.into()),
            offset,
            instructions: insns,
            function: "f".into(),
            bytes,
            rep: false,
            varies: false,
        }
    }

    fn image(name: &str) -> ImageRow {
        ImageRow {
            name: name.into(),
            path: PathBuf::from(format!("/x/{name}")),
            fixed: false,
            build_id: None,
            bias: 0,
        }
    }

    /// Block 2 at 0x10 is also run through by block 1 (0x0..0x20); block 3 is its own.
    fn fixture(dir: &Path, vectors: &str) -> (Vec<BlockRow>, Vec<ImageRow>, Profile) {
        let path = dir.join("bb");
        std::fs::write(&path, vectors).unwrap();
        let blocks = vec![
            row(1, "prog", 0x0, 4, 0x20),
            row(2, "prog", 0x10, 2, 0x10),
            row(3, "prog", 0x40, 5, 0x14),
        ];
        let cuts: BTreeSet<u64> = [0, 1, 2].into();
        let p = Profile::read(&path, 3, &cuts, &BTreeSet::new()).unwrap();
        (
            blocks,
            vec![image("prog"), image("ld-linux-x86-64.so.2")],
            p,
        )
    }

    #[test]
    fn counts_include_blocks_running_through_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        // Interval 0: block 1 twice, block 2 three times, block 3 once; interval 1: 2 and 3.
        let (blocks, images, p) = fixture(dir.path(), "T:1:8 :2:6 :3:5\nT:2:10 :3:10\n");
        assert_eq!(p.lengths, vec![19, 20]);
        let windows = vec![Window {
            index: 1,
            cut_at: 19,
            events: vec![(2, 3), (3, 0)],
        }];
        let placer = Placer::new(&blocks, &images, &windows, HashSet::new(), &p, 2000);
        // Block 2's first instruction ran 3 times in its own block and twice inside block 1.
        assert_eq!(placer.executions_before(1, 2), Some(5));
        assert_eq!(placer.executions_before(2, 2), Some(10));
        // Both qualify (block 1 does not run in interval 1); block 3 runs less often.
        let m = placer.place(1).unwrap();
        assert_eq!(
            m,
            Placed {
                block: 3,
                delta: 0,
                count: 2
            }
        );
    }

    #[test]
    fn a_block_run_through_after_the_cut_is_a_marker_of_last_resort() {
        let dir = tempfile::tempdir().unwrap();
        // Block 1 also runs in interval 1, so block 2's first execution after the cut may come
        // from block 1 before delta: block 3, exact, is preferred while within the tolerance.
        let (blocks, images, p) = fixture(dir.path(), "T:1:8 :2:6\nT:1:4 :2:10 :3:5\n");
        let windows = vec![Window {
            index: 1,
            cut_at: 14,
            events: vec![(2, 2), (3, 9)],
        }];
        let placer = Placer::new(&blocks, &images, &windows, HashSet::new(), &p, 2000);
        assert_eq!(placer.place(1).map(|m| m.block), Some(3));
        // 9 instructions > 0.5% of 1000: block 2 it is, counting block 1's two runs through it.
        let strict = Placer::new(&blocks, &images, &windows, HashSet::new(), &p, 1000);
        assert_eq!(
            strict.place(1),
            Some(Placed {
                block: 2,
                delta: 2,
                count: 6
            })
        );
        // When block 1 straddles the cut (6 of its 4-instruction runs), block 2's count is
        // unknown.
        let (blocks, images, p) = fixture(dir.path(), "T:1:6 :2:6\nT:1:6 :2:10 :3:5\n");
        let strict = Placer::new(&blocks, &images, &windows, HashSet::new(), &p, 1000);
        assert_eq!(strict.place(1), None);
        // A block another thread runs is never a marker.
        let others: HashSet<u32> = [3].into();
        let placer = Placer::new(&blocks, &images, &windows, others, &p, 2000);
        assert_eq!(placer.place(1), None);
    }

    #[test]
    fn loader_rep_and_string_routines_are_never_markers() {
        let images: HashMap<&str, &ImageRow> = HashMap::new();
        assert_eq!(
            tier(&row(1, "prog", 0, 1, 1), &images),
            None,
            "unknown image"
        );
        let all = [
            image("prog"),
            image("ld-linux-x86-64.so.2"),
            image("libc.so.6"),
            image("liblzma.so.5"),
        ];
        let images: HashMap<&str, &ImageRow> = all.iter().map(|i| (i.name.as_str(), i)).collect();
        assert_eq!(tier(&row(1, "prog", 0, 1, 1), &images), Some(0));
        assert_eq!(tier(&row(1, "liblzma.so.5", 0, 1, 1), &images), Some(0));
        assert_eq!(
            tier(&row(1, "ld-linux-x86-64.so.2", 0, 1, 1), &images),
            None
        );
        let mut b = row(1, "libc.so.6", 0, 1, 1);
        assert_eq!(tier(&b, &images), Some(1));
        b.function = "__memcpy_avx_unaligned_erms".into();
        assert_eq!(tier(&b, &images), None);
        b.function = "-".into();
        assert_eq!(tier(&b, &images), None);
        let mut r = row(1, "prog", 0, 1, 1);
        r.rep = true;
        assert_eq!(tier(&r, &images), None);
    }
}
