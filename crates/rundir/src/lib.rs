//! The run directory as a contract: every file `bbv run` leaves, its types, and the readers
//! and writers `bbv regions`, `bbv replay`, `bbv report` and `bbv suite` share.
//!
//! | file | what |
//! |---|---|
//! | `bb.out`, `bb.out.N` | thread 1's (thread N's) vectors, exp-bbv's format |
//! | `pc.out` | exp-bbv's PC file |
//! | `blocks.tsv` | one row per block id: image, link-time offset, instructions, function, source, bytes, kind |
//! | `images.tsv` | one row per image: name, path, fixed (non-PIE) or not, build id, load bias |
//! | `marks.out` | per cut of thread 1: the blocks first run in the 0.5% of an interval after it |
//! | `simpoint.*` | SimPoint's simpoints, weights and labels |
//! | `summary.json`, `summary.txt` | the run's facts and points with their markers |
//! | `regions.*`, `gem5/`, `nemu/` | the hand-off files (bbv-pipeline's `regions`) |
//! | `report.html`, `bic.csv` | the HTML report (bbv-report) and every k's BIC |
//! | `replay.json` | the last `bbv replay`'s report |
//! | `trace.json`, `simulation.json` | `bbv trace`'s region traces and `bbv simulate`'s ChampSim figures |
//! | `metrics.csv`, `validation.json` | `--validate`: per-interval metrics and the points' estimate errors |
//! | `slices.cuts`, `thread.N.slices` | multi-threaded runs: the plugin's slice boundaries and per-thread slice vectors |
//! | `global.bb`, `slices.tsv` | the slices' concatenated vectors and their table (bbv-pipeline's `slices`) |

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

pub mod band;
pub mod check;
pub mod files;
pub mod gpu_simulation;
pub mod simulation;
pub mod strata;
pub mod validate;

/// What can go wrong reading a run directory.
#[derive(Debug, thiserror::Error)]
pub enum RundirError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A file is malformed.
    #[error("{}:{line}: expected {what}", path.display())]
    Parse {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was expected.
        what: String,
    },
    /// The files cannot be used together, explained.
    #[error("{0}")]
    Invalid(String),
    /// A vector file is malformed.
    #[error(transparent)]
    Profile(#[from] bbv_profile::ProfileError),
    /// A file is not one bbv reads (a device, a folder) or exceeds a limit.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
}

/// The longest line of `blocks.tsv`, `images.tsv`, `slices.tsv` and `metrics.csv` bbv reads:
/// paths and demangled C++ names fit many times over.
pub const TABLE_LINE: usize = 1 << 20;
/// The longest line of `marks.out`: one `id:delta` pair per block first run in a window,
/// a couple of million blocks.
pub const MARKS_LINE: usize = 64 << 20;
/// The longest line of `simpoint.simpoints`, `.weights`, `.labels` and `bic.csv`: two or
/// three numbers.
pub const PAIR_LINE: usize = 4096;
/// The largest `summary.json`, `validation.json` or `replay.json` bbv reads.
pub const JSON_BYTES: u64 = 256 << 20;

/// Reads `dir/name`, a JSON file a run directory may hold (None when absent); `writer` names
/// the command that writes it, for the parse error.
pub(crate) fn read_optional_json<T: serde::de::DeserializeOwned>(
    dir: &Path,
    name: &str,
    writer: &str,
) -> Result<Option<T>, RundirError> {
    let path = dir.join(name);
    if path.symlink_metadata().is_err() {
        return Ok(None);
    }
    let text = bbv_files::input::read_text(&path, JSON_BYTES)?;
    serde_json::from_str(&text)
        .map(Some)
        .map_err(|e| RundirError::Parse {
            path,
            line: e.line(),
            what: format!("{name} as {writer} writes it ({e})"),
        })
}

impl RundirError {
    /// An I/O error on `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        RundirError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Version of the run-directory layout written by this bbv.
pub const LAYOUT: u32 = 2;

/// How a run's regions were formed (`summary.json`'s `regions_mode`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Regions {
    /// SimPoint on the main thread's intervals (also what files of older versions without
    /// the field mean).
    #[default]
    Intervals,
    /// LoopPoint's slices of all threads.
    Looppoint,
}

impl Regions {
    /// The name `summary.json` and the messages use.
    pub fn name(self) -> &'static str {
        match self {
            Regions::Intervals => "intervals",
            Regions::Looppoint => "looppoint",
        }
    }
}

/// Which threads' vectors a run clustered (`summary.json`'s `clustered`, `bbv run --threads`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Clustered {
    /// The main thread's.
    #[default]
    Main,
    /// Every thread's together (`bb.all`).
    All,
}

/// `summary.json`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    /// [`LAYOUT`] of the bbv that wrote it.
    pub layout: u32,
    /// Instructions of every thread.
    pub instructions: u64,
    /// Per thread, in creation order.
    pub threads: Vec<ThreadTotal>,
    /// Instructions per interval.
    pub interval: u64,
    /// Intervals clustered.
    pub intervals: u64,
    /// Clusters chosen (0 when there was nothing to cluster).
    pub k: usize,
    /// Largest k the search tried.
    pub max_k: usize,
    /// Every k from 1 to `max_k` was tried (`--every-k`), not SimPoint's binary search.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub every_k: bool,
    /// QEMU's version.
    pub qemu: String,
    /// The QEMU executable that ran the profile, as found: the default of every later command
    /// that runs the program again (replay, trace, checkpoint, `simulate --full`), so that a
    /// run profiled under another QEMU than the one on PATH needs no `--qemu` again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub qemu_path: Option<String>,
    /// The guest CPU model asked for (`--cpu`; None: QEMU's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// A foreign dynamically linked guest's sysroot (`qemu -L`), as found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysroot: Option<String>,
    /// The program profiled.
    pub program: Program,
    /// `instance` (exp-bbv) or `iteration` (gem5, Pin).
    pub count_rep: String,
    /// Intervals cut at exactly the interval size (`--exact`).
    pub exact: bool,
    /// Which threads were clustered: `main` or `all`.
    pub clustered: Clustered,
    /// Warmup instructions asked for before each region (0 = none).
    pub warmup: u64,
    /// `intervals` (SimPoint on thread 1's intervals) or `looppoint` (slices of all threads).
    #[serde(default)]
    pub regions_mode: Regions,
    /// Why that mode (for `--regions auto`).
    #[serde(default)]
    pub regions_reason: String,
    /// Image file-name prefixes whose instructions do not count toward slices.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// Instructions of all threads outside the excluded images (looppoint mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filtered_instructions: Option<u64>,
    /// Flow control of the threads during the run: no running thread was more than this many
    /// instructions ahead of the slowest (0 = none); replay paces them the same way.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub flow_quantum: u64,
    /// How the guest's threads were scheduled: `deterministic` (they took turns of
    /// `turn_quantum` instructions in an order that depends only on the guest, and replay
    /// follows the same order) or `host` (as the host ran them).
    #[serde(default = "host_schedule")]
    pub schedule: String,
    /// Instructions per turn (`schedule` deterministic).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub turn_quantum: u64,
    /// Where the deterministic order could not follow the guest alone (a timeout, a signal, a
    /// system call that blocked on the outside world), one line each: empty when the run is
    /// reproducible.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub schedule_events: Vec<String>,
    /// The simulation points, heaviest first.
    pub points: Vec<Point>,
}

impl Summary {
    /// The run's identity by content, not by where its directory is: the program's build id
    /// and instructions, the interval and every point (cluster, interval, weight, markers), as
    /// 16 hex digits (FNV-1a of their JSON). A moved or copied run keeps it; a new `bbv run`
    /// into the same folder, or `bbv regions` placing other markers, changes it.
    pub fn identity(&self) -> String {
        let content = serde_json::json!({
            "build_id": self.program.build_id,
            "instructions": self.instructions,
            "interval": self.interval,
            "points": self.points,
        });
        format!("{:016x}", bbv_files::fnv1a(content.to_string().as_bytes()))
    }

    /// The QEMU to run the program again with: `asked` (`--qemu`), else the one that ran the
    /// profile while it is still there, else None (the one on PATH).
    pub fn qemu_or(&self, asked: Option<&Path>) -> Option<PathBuf> {
        if let Some(q) = asked {
            return Some(q.to_path_buf());
        }
        let own = PathBuf::from(self.qemu_path.as_deref()?);
        own.is_file().then_some(own)
    }

    /// The share of the main thread's instructions after the last of the intervals that hold
    /// `covered` instructions (no interval stands for it; 0 for an empty run).
    pub fn tail_fraction(&self, covered: f64) -> f64 {
        let run = self.threads.first().map_or(0, |t| t.instructions) as f64;
        if run > 0.0 {
            (1.0 - covered / run).max(0.0)
        } else {
            0.0
        }
    }
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

fn host_schedule() -> String {
    "host".into()
}

/// One thread's total.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct ThreadTotal {
    /// 1 = main thread, then creation order.
    pub thread: u32,
    /// Instructions it ran.
    pub instructions: u64,
}

/// The profiled program.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Program {
    /// Its path.
    pub path: String,
    /// Its GNU build id (hex), which `bbv replay` checks.
    pub build_id: Option<String>,
    /// Its arguments.
    pub args: Vec<String>,
}

/// A marker: the `count`-th execution (since the program started, over every thread) of the
/// instruction at `offset` (link-time address) in the image named `image`.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct Marker {
    /// File name of the image.
    pub image: String,
    /// Link-time address in it, `0x...`.
    pub offset: String,
    /// Execution count.
    pub count: u64,
}

impl Marker {
    /// The offset as a number.
    pub fn offset_value(&self) -> Result<u64, RundirError> {
        self.offset
            .strip_prefix("0x")
            .and_then(|h| u64::from_str_radix(h, 16).ok())
            .ok_or_else(|| {
                RundirError::Invalid(format!(
                    "marker offset {:?} is not a 0x-prefixed hex number",
                    self.offset
                ))
            })
    }
}

/// A simulation point and the markers that delimit it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Point {
    /// SimPoint's cluster number.
    pub cluster: usize,
    /// The chosen interval (0-based, thread 1's).
    pub interval: u64,
    /// SimPoint's weight.
    pub weight: f64,
    /// Instructions before the region's first interval in the profiling run: the chosen one,
    /// or up to four before it when its own cut has no marker.
    pub start_instruction: u64,
    /// Where simulation starts.
    pub start: Marker,
    /// Where it ends.
    pub end: Marker,
    /// Where warming starts (None: no warmup asked for).
    pub warmup: Option<Marker>,
    /// Instructions from the start marker to the end marker in the profiling run.
    pub length: u64,
    /// Instructions before the start marker in the profiling run.
    pub start_position: u64,
    /// Instructions from the warmup marker to the start marker (approximate when the warmup
    /// starts at the program's entry point).
    pub warmup_length: u64,
    /// Instructions of the cluster's intervals over `length`.
    pub multiplier: f64,
    /// Executions of the end marker's instruction after the start marker (PinPoints'
    /// end-pc-relative-count).
    pub end_relative: u64,
    /// Looppoint mode: the region's filtered instructions per thread (index = thread - 1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub thread_instructions: Vec<u64>,
    /// Looppoint mode: the region's ten hottest functions and their instructions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub functions: Vec<(String, u64)>,
    /// SimPoint's representative of the cluster when `interval` stands in for it: no marker
    /// could delimit the representative (its start in the dynamic loader, say), and
    /// `interval` is the member nearest the cluster's centre that one can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stand_in_for: Option<u64>,
}

/// Stages a run directory's next state ([`bbv_files::folder::Staged`]) once it is known to be
/// one: a folder that is no run is refused as it is, nothing staged beside it.
pub fn stage(dir: &Path) -> Result<bbv_files::folder::Staged, RundirError> {
    read_summary(dir)?;
    Ok(bbv_files::folder::Staged::open(dir)?)
}

/// Runs `work` on a run directory's staged next state ([`stage`]) and swaps it in if `work`
/// succeeds; otherwise the directory stays as it was.
pub fn update<T, E: From<RundirError> + From<bbv_files::FilesError>>(
    dir: &Path,
    work: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<T, E> {
    read_summary(dir)?;
    bbv_files::folder::update(dir, work)
}

/// Reads `DIR/summary.json`, refusing directories of older bbv versions.
pub fn read_summary(dir: &Path) -> Result<Summary, RundirError> {
    let path = dir.join(crate::files::SUMMARY);
    if path.symlink_metadata().is_err() {
        return Err(RundirError::Invalid(if dir.is_dir() {
            format!(
                "{}: missing, so {} is not a complete `bbv run` output directory (the run did \
                 not finish, the file was deleted, or a bbv older than layout {LAYOUT} wrote \
                 it); run `bbv run` again",
                path.display(),
                dir.display()
            )
        } else {
            format!(
                "{}: no such folder (expected a `bbv run` output directory)",
                dir.display()
            )
        }));
    }
    let text = bbv_files::input::read_text(&path, JSON_BYTES)?;
    let layout = serde_json::from_str::<serde_json::Value>(&text)
        .ok()
        .and_then(|v| v.get("layout").and_then(|l| l.as_u64()));
    match layout {
        Some(l) if l == u64::from(LAYOUT) => {}
        Some(l) => {
            return Err(RundirError::Invalid(format!(
                "{}: layout {l}, but this bbv reads layout {LAYOUT}; run `bbv run` again",
                path.display()
            )))
        }
        None => {}
    }
    let summary = serde_json::from_str(&text).map_err(|e| RundirError::Parse {
        path: path.clone(),
        line: e.line(),
        what: format!("summary.json as `bbv run` writes it ({e})"),
    })?;
    check::summary(&path, &summary)?;
    Ok(summary)
}

/// Writes `summary.json`.
pub fn write_summary(out: &mut impl Write, s: &Summary) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, s)?;
    out.write_all(b"\n")
}

/// A row of `blocks.tsv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockRow {
    /// Block id.
    pub id: u32,
    /// Image file name (None: anonymous code).
    pub image: Option<String>,
    /// Link-time address in the image.
    pub offset: u64,
    /// Instructions.
    pub instructions: u64,
    /// Function (`-` when unknown).
    pub function: String,
    /// Byte span.
    pub bytes: u64,
    /// Starts with a rep string instruction.
    pub rep: bool,
    /// Translated with several lengths.
    pub varies: bool,
}

/// A row of `images.tsv`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageRow {
    /// File name.
    pub name: String,
    /// Path when profiled.
    pub path: PathBuf,
    /// Linked at a fixed address (not PIE).
    pub fixed: bool,
    /// GNU build id.
    pub build_id: Option<String>,
    /// Run-time minus link-time address in the profiling run.
    pub bias: u64,
}

/// Calls `each(line number, line)` for every line of `path`, streaming; no line may be
/// longer than `max` bytes.
fn for_lines(
    path: &Path,
    max: usize,
    mut each: impl FnMut(usize, &str) -> Result<(), RundirError>,
) -> Result<(), RundirError> {
    let mut lines = bbv_files::input::Lines::open(path, max)?;
    while let Some((n, line)) = lines.next_line()? {
        each(n as usize, line)?;
    }
    Ok(())
}

/// [`for_lines`] over a table whose first line is a header: an empty file is an error.
fn for_table(
    path: &Path,
    max: usize,
    header: &str,
    mut each: impl FnMut(usize, &str) -> Result<(), RundirError>,
) -> Result<(), RundirError> {
    let mut any = false;
    for_lines(path, max, |n, line| {
        any = true;
        each(n, line)
    })?;
    if !any {
        return Err(parse_error(path, 1, &format!("the header line `{header}`")));
    }
    Ok(())
}

fn parse_error(path: &Path, line: usize, what: &str) -> RundirError {
    RundirError::Parse {
        path: path.into(),
        line,
        what: what.into(),
    }
}

fn hex(s: &str) -> Option<u64> {
    u64::from_str_radix(s.strip_prefix("0x")?, 16).ok()
}

/// Reads `blocks.tsv`: rows must hold ids 1, 2, ... in order.
pub fn read_blocks(path: &Path) -> Result<Vec<BlockRow>, RundirError> {
    let mut rows = Vec::new();
    for_table(
        path,
        TABLE_LINE,
        "id\timage\toffset\tinstructions...",
        |n, line| {
            let bad = |what: &str| parse_error(path, n, what);
            if n == 1 {
                if !line.starts_with("id\timage\toffset\tinstructions") {
                    return Err(bad("the header line `id\timage\toffset\tinstructions...`"));
                }
                return Ok(());
            }
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 8 {
                return Err(bad("8 tab-separated columns"));
            }
            let id: u32 = f[0].parse().map_err(|_| bad("a block id"))?;
            if id as usize != rows.len() + 1 {
                return Err(bad("block ids 1, 2, ... in order"));
            }
            rows.push(BlockRow {
                id,
                image: (f[1] != "-").then(|| f[1].to_string()),
                offset: hex(f[2]).ok_or_else(|| bad("a 0x-prefixed hex offset"))?,
                instructions: f[3]
                    .parse()
                    .ok()
                    .filter(|&n: &u64| n > 0)
                    .ok_or_else(|| bad("a positive instruction count"))?,
                function: f[4].to_string(),
                bytes: f[6].parse().map_err(|_| bad("a byte count"))?,
                rep: f[7] == "rep",
                varies: match f[7] {
                    "varies" => true,
                    "-" | "rep" => false,
                    _ => return Err(bad("kind -, rep or varies")),
                },
            });
            Ok(())
        },
    )?;
    Ok(rows)
}

/// Writes `images.tsv`.
pub fn write_images(out: &mut impl Write, images: &[ImageRow]) -> std::io::Result<()> {
    writeln!(out, "image\tpath\tlinked\tbuild_id\tload_bias")?;
    for i in images {
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{:#x}",
            i.name,
            i.path.display(),
            if i.fixed { "fixed" } else { "pie" },
            i.build_id.as_deref().unwrap_or("-"),
            i.bias
        )?;
    }
    Ok(())
}

/// Reads `images.tsv`.
pub fn read_images(path: &Path) -> Result<Vec<ImageRow>, RundirError> {
    let mut rows = Vec::new();
    for_table(
        path,
        TABLE_LINE,
        "image\tpath\tlinked\tbuild_id\tload_bias",
        |n, line| {
            let bad = |what: &str| parse_error(path, n, what);
            if n == 1 {
                if !line.starts_with("image\tpath") {
                    return Err(bad(
                        "the header line `image\tpath\tlinked\tbuild_id\tload_bias`",
                    ));
                }
                return Ok(());
            }
            let f: Vec<&str> = line.split('\t').collect();
            if f.len() != 5 || f[0].is_empty() {
                return Err(bad("5 tab-separated columns"));
            }
            if rows.iter().any(|r: &ImageRow| r.name == f[0]) {
                return Err(bad("each image once (this one is listed twice)"));
            }
            rows.push(ImageRow {
                name: f[0].to_string(),
                path: PathBuf::from(f[1]),
                fixed: match f[2] {
                    "fixed" => true,
                    "pie" => false,
                    _ => return Err(bad("`fixed` or `pie`")),
                },
                build_id: (f[3] != "-").then(|| f[3].to_string()),
                bias: hex(f[4]).ok_or_else(|| bad("a 0x-prefixed hex load bias"))?,
            });
            Ok(())
        },
    )?;
    Ok(rows)
}

/// The blocks first run after one cut of thread 1 (a line of `marks.out`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Intervals before the cut.
    pub index: u64,
    /// Instructions before the cut.
    pub cut_at: u64,
    /// (block id, instructions between the cut and the block's first execution after it).
    pub events: Vec<(u32, u64)>,
}

/// Reads `marks.out`.
pub fn read_windows(path: &Path) -> Result<Vec<Window>, RundirError> {
    let mut out: Vec<Window> = Vec::new();
    for_lines(path, MARKS_LINE, |n, line| {
        let bad = |what: &str| parse_error(path, n, what);
        let mut f = line.split(' ');
        let mut num = || f.next().and_then(|s| s.parse::<u64>().ok());
        let (Some(index), Some(cut_at)) = (num(), num()) else {
            return Err(bad("`INDEX CUT id:delta ...`"));
        };
        if out.last().is_some_and(|w| w.index >= index) {
            return Err(bad("cut indexes in increasing order"));
        }
        let mut events = Vec::new();
        for tok in f {
            let (id, d) = tok
                .split_once(':')
                .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
                .ok_or_else(|| bad("`id:delta` pairs"))?;
            events.push((id, d));
        }
        out.push(Window {
            index,
            cut_at,
            events,
        });
        Ok(())
    })?;
    Ok(out)
}

/// Thread N's vector file in a run directory.
pub fn thread_file(dir: &Path, number: u32) -> PathBuf {
    bbv_profile::thread_file(&dir.join(crate::files::BB), number)
}

/// The vectors a run clustered: `global.bb` (slices, looppoint mode), `bb.all` (every
/// thread's intervals, `--threads all`) or `bb.out`.
pub fn clustered_input(dir: &Path, s: &Summary) -> PathBuf {
    dir.join(if s.regions_mode == Regions::Looppoint {
        files::GLOBAL_BB
    } else if s.clustered == Clustered::All {
        files::BB_ALL
    } else {
        files::BB
    })
}

/// Reads SimPoint's `VALUE INDEX` lines (or `LABEL DISTANCE`: the second number's value is
/// not kept then, so any number is accepted).
pub fn read_pairs<T: std::str::FromStr>(path: &Path) -> Result<Vec<(T, usize)>, RundirError> {
    let mut out = Vec::new();
    for_lines(path, PAIR_LINE, |n, l| {
        let mut f = l.split_whitespace();
        let v = f.next().and_then(|s| s.parse().ok());
        let i = f.next().and_then(|s| {
            s.parse()
                .ok()
                .or_else(|| s.parse::<f64>().ok().filter(|x| x.is_finite()).map(|_| 0))
        });
        out.push(
            v.zip(i)
                .ok_or_else(|| parse_error(path, n, "`VALUE INDEX`"))?,
        );
        Ok(())
    })?;
    Ok(out)
}

/// The second number of each `simpoint.labels` line: the interval's distance to its
/// cluster's centre.
pub fn read_label_distances(path: &Path) -> Result<Vec<f64>, RundirError> {
    let mut out = Vec::new();
    for_lines(path, PAIR_LINE, |n, l| {
        let d = l.split_whitespace().nth(1).and_then(|d| d.parse().ok());
        out.push(d.ok_or_else(|| parse_error(path, n, "`CLUSTER DISTANCE`"))?);
        Ok(())
    })?;
    Ok(out)
}

/// Parses `id:count` tokens (`bad` makes the error naming the file and line).
pub fn parse_id_pairs<'a, A: std::str::FromStr, B: std::str::FromStr, E>(
    tokens: impl IntoIterator<Item = &'a str>,
    bad: impl Fn() -> E,
) -> Result<Vec<(A, B)>, E> {
    tokens
        .into_iter()
        .map(|t| {
            let (a, b) = t.split_once(':').ok_or_else(&bad)?;
            Ok((a.parse().map_err(|_| bad())?, b.parse().map_err(|_| bad())?))
        })
        .collect()
}

/// A simulation point as SimPoint chose it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Chosen {
    /// Cluster number.
    pub cluster: usize,
    /// Interval (0-based).
    pub interval: u64,
    /// Weight.
    pub weight: f64,
}

/// The chosen points (from `simpoint.simpoints` and `.weights`), heaviest first, and every
/// clustered unit's cluster (`simpoint.labels`).
pub fn chosen(dir: &Path) -> Result<(Vec<Chosen>, Vec<usize>), RundirError> {
    let prefix = dir.join(crate::files::SIMPOINT);
    let points = read_pairs::<u64>(&prefix.with_extension("simpoints"))?;
    let weights = read_pairs::<f64>(&prefix.with_extension("weights"))?;
    // Labels lines are `CLUSTER DISTANCE`.
    let labels = read_pairs::<usize>(&prefix.with_extension("labels"))?;
    let labels: Vec<usize> = labels.into_iter().map(|(l, _)| l).collect();
    let weight_of = check::weights(&prefix.with_extension("weights"), &weights)?;
    check::points_and_labels(dir, &points, &labels)?;
    let mut chosen: Vec<Chosen> = points
        .iter()
        .map(|&(interval, cluster)| {
            let weight = weight_of.get(&cluster).copied().ok_or_else(|| {
                RundirError::Invalid(format!(
                    "{}: cluster {cluster} has a simulation point but no weight",
                    prefix.with_extension("weights").display()
                ))
            })?;
            Ok(Chosen {
                cluster,
                interval,
                weight,
            })
        })
        .collect::<Result<_, RundirError>>()?;
    if let Some(c) = weight_of
        .keys()
        .find(|c| !points.iter().any(|p| p.1 == **c))
    {
        return Err(RundirError::Invalid(format!(
            "{}: cluster {c} has a weight but no simulation point in simpoint.simpoints",
            prefix.with_extension("weights").display()
        )));
    }
    chosen.sort_by(|x, y| {
        y.weight
            .total_cmp(&x.weight)
            .then(x.interval.cmp(&y.interval))
    });
    Ok((chosen, labels))
}

/// Refuses a chosen point beyond the `n` rows (`unit`s: intervals or slices) clustered.
pub fn check_chosen(dir: &Path, chosen: &[Chosen], n: u64, unit: &str) -> Result<(), RundirError> {
    match chosen.iter().find(|c| c.interval >= n) {
        Some(c) => Err(RundirError::Invalid(format!(
            "{}: {unit} {} is beyond the {n} {unit}s of the run",
            dir.join(crate::files::SIMPOINTS).display(),
            c.interval
        ))),
        None => Ok(()),
    }
}
