//! The basic-block vector (BBV) contract of bbvkit.
//!
//! Every producer (QEMU plugin, LLVM runtime, GPU trace reader) writes this format and every
//! consumer (clustering, reports) reads it, so no consumer knows which producer made a file.
//!
//! The text format is the one valgrind's exp-bbv writes and SimPoint 3.2 reads: one line per
//! interval, `T` followed by `:id:value` tokens (ids 1-based, values non-negative numbers), with
//! any whitespace between the parts. Lines that do not start with `T` are ignored.
//!
//! # Design constraints
//! * Streaming: memory grows with the longest line, never with the file size.
//! * Lines up to [`MAX_LINE`] bytes (a hostile file cannot make a reader gather gigabytes),
//!   and the last line is read even without a trailing newline.
//! * Only regular files and pipes are read: a link to `/dev/zero` is refused by name.
//! * Compression (gzip, zstd) is detected from the content, not from the file name.
//! * Every error names the file, the line and the column.

mod compression;
mod error;
mod images;
mod input;
mod intervals;
mod metrics;
mod reader;
mod writer;

pub use compression::Compression;
pub use error::ProfileError;
pub use images::{image_kind, image_matches, ImageKind};
pub use input::{open_input, Input};
pub use intervals::{CountStore, CutMode, IntervalCounter};
pub use metrics::{
    metrics_header, read_metrics, read_metrics_from, CacheGeometry, MetricsRow, MetricsWriter,
    METRIC_COLUMNS,
};
pub use reader::{BbvReader, Token};
pub use writer::BbvWriter;

/// Largest block id accepted. Clustering allocates per-id state (a projection-matrix row), so an
/// absurd id in a hostile file must be an error rather than an allocation of hundreds of GB.
pub const MAX_BLOCK_ID: u32 = 1 << 26;

/// The longest line a BBV reader accepts: one interval's vector of several million distinct
/// blocks (a `:id:count` token takes 4 to 30 bytes), far more than any real program runs in one
/// interval, and little enough that a hostile line cannot exhaust memory.
pub const MAX_LINE: usize = 64 << 20;

/// Thread N's vector file, as exp-bbv names it: `bb` itself for thread 1, `BB.N` for the others.
pub fn thread_file(bb: &std::path::Path, number: u32) -> std::path::PathBuf {
    if number == 1 {
        bb.to_path_buf()
    } else {
        let mut s = bb.as_os_str().to_owned();
        s.push(format!(".{number}"));
        std::path::PathBuf::from(s)
    }
}
