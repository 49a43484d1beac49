//! The marker-candidate watch: per thread, the blocks first run in the instructions after each
//! interval cut (`thread.N.marks`), which the host places (PC, count) markers on.

use std::fs::File;
use std::io::Write;

use crate::blocks::TbInfo;
use crate::report_error;

/// Most blocks recorded after one cut: enough choice for a marker in the program's own code
/// even when the cut falls in library code.
const WATCH_BLOCKS: usize = 128;
/// At program start the dynamic loader runs first, and its blocks are never markers: the
/// first window reaches further (this many times `span`) and keeps more blocks.
const START_REACH: u64 = 100;
const START_BLOCKS: usize = 8192;

/// The blocks first run in the `cfg.host.watch` instructions after the thread's latest cut; the
/// host places (PC, count) markers of interval boundaries on them (see `bbv-pipeline`).
pub(crate) struct Watch {
    /// Instructions watched after each cut (0 = no watching).
    span: u64,
    pub(crate) open: bool,
    /// The cut's instruction count, and the count at which the window closes.
    cut_at: u64,
    end: u64,
    seen: Vec<u32>,
    /// Bit per block id: in `seen` (a scan of `seen` at every block cost more than all the
    /// counting when the start window holds thousands).
    in_seen: Vec<u64>,
    /// Blocks kept in this window.
    cap: usize,
    line: String,
    file: Option<File>,
}

impl Watch {
    pub(crate) fn new(span: u64, file: Option<File>) -> Watch {
        let mut w = Watch {
            span,
            open: false,
            cut_at: 0,
            end: 0,
            seen: Vec::new(),
            in_seen: Vec::new(),
            cap: WATCH_BLOCKS,
            line: String::new(),
            file,
        };
        w.start(0, 0);
        w
    }

    /// Opens the window after cut `index`, which fell after `cut_at` instructions.
    pub(crate) fn start(&mut self, index: u64, cut_at: u64) {
        self.close();
        if self.span == 0 || self.file.is_none() {
            return;
        }
        self.open = true;
        self.cut_at = cut_at;
        let (reach, cap) = if index == 0 {
            (START_REACH, START_BLOCKS)
        } else {
            (1, WATCH_BLOCKS)
        };
        self.end = cut_at + self.span * reach;
        self.cap = cap;
        for id in self.seen.drain(..) {
            self.in_seen[id as usize / 64] &= !(1 << (id % 64));
        }
        self.line.clear();
        use std::fmt::Write as _;
        let _ = write!(self.line, "{index} {cut_at}");
    }

    /// A block starts after `before` instructions of the thread.
    #[inline]
    pub(crate) fn see(&mut self, tb: &TbInfo, before: u64) {
        if before >= self.end || self.seen.len() >= self.cap {
            return self.close();
        }
        if tb.rep_first {
            return;
        }
        let (word, bit) = (tb.id as usize / 64, 1u64 << (tb.id % 64));
        if word >= self.in_seen.len() {
            self.in_seen.resize((word + 1).next_power_of_two(), 0);
        }
        if self.in_seen[word] & bit != 0 {
            return;
        }
        self.in_seen[word] |= bit;
        self.seen.push(tb.id);
        use std::fmt::Write as _;
        let _ = write!(self.line, " {}:{}", tb.id, before - self.cut_at);
    }

    /// Writes the window's line (one write, so a killed process leaves whole lines).
    pub(crate) fn close(&mut self) {
        if !self.open {
            return;
        }
        self.open = false;
        self.line.push('\n');
        if let Some(f) = &mut self.file {
            if let Err(e) = f.write_all(self.line.as_bytes()) {
                report_error(&format!("writing a marks file: {e}"));
                self.file = None;
            }
        }
    }
}
