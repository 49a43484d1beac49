//! Completing a thread's files from what the plugin left: its vectors and its shared state.
//!
//! The plugin keeps each thread's totals and unfinished interval in `thread.N.state` (see the
//! bbv-qemu crate) because QEMU 7.2 runs no plugin callback when the guest dies by a signal, so
//! the closing comment (and the `--tail` vector) are written here, after the guest has ended.

use std::io::{Read, Write};
use std::path::Path;

use bbv_profile::BbvWriter;

use crate::{CollectError, Request, ThreadResult};

const MAGIC: u64 = 0x3176_6574_6174_7362;
const HEADER_WORDS: usize = 16;

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
}

pub(crate) fn finish_thread(
    dir: &Path,
    number: u32,
    req: &Request,
) -> Result<ThreadResult, CollectError> {
    let path = dir.join(format!("thread.{number}.state"));
    let bytes = std::fs::read(&path).map_err(|e| CollectError::io(&path, e))?;
    let bad = |what: &str| CollectError::Plugin(format!("{}: {what}", path.display()));
    if bytes.len() < HEADER_WORDS * 8 {
        return Err(bad("truncated thread state"));
    }
    let h: Vec<u64> = words(&bytes[..HEADER_WORDS * 8]).collect();
    if h[0] != MAGIC {
        return Err(bad("not a thread state of this plugin version"));
    }
    let (total, rep_iterations, rep_instances, fldcw, recorded) = (h[2], h[3], h[4], h[5], h[6]);
    let counts = &bytes[HEADER_WORDS * 8..];

    let bb = dir.join(format!("thread.{number}.bb"));
    let mut intervals = 0u64;
    if !req.count_only {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&bb)
            .map_err(|e| CollectError::io(&bb, e))?;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            let n = file.read(&mut buf).map_err(|e| CollectError::io(&bb, e))?;
            if n == 0 {
                break;
            }
            intervals += buf[..n].iter().filter(|&&b| b == b'\n').count() as u64;
        }
        let mut tail = Vec::new();
        // More vectors than recorded: the process died after writing the unfinished interval
        // out and before clearing it, so the counts in the state are already in the file.
        if req.tail && intervals == recorded {
            let pairs: Vec<(u32, u64)> = words(counts)
                .enumerate()
                .filter(|&(_, c)| c != 0)
                .map(|(id, c)| (id as u32, c))
                .collect();
            if !pairs.is_empty() {
                BbvWriter::new(&mut tail)
                    .write_vector(&pairs)
                    .map_err(|e| CollectError::io(&bb, e))?;
                intervals += 1;
            }
        }
        let summary = summary(
            number,
            intervals,
            req.interval,
            total,
            rep_iterations,
            rep_instances,
            fldcw,
        );
        tail.extend_from_slice(format!("\n\n{summary}\n").as_bytes());
        file.write_all(&tail)
            .map_err(|e| CollectError::io(&bb, e))?;
        return Ok(ThreadResult {
            number,
            bb: Some(bb),
            summary,
            instructions: total,
            intervals,
        });
    }
    intervals = total / req.interval;
    let summary = summary(
        number,
        intervals,
        req.interval,
        total,
        rep_iterations,
        rep_instances,
        fldcw,
    );
    Ok(ThreadResult {
        number,
        bb: None,
        summary,
        instructions: total,
        intervals,
    })
}

/// exp-bbv's closing comment block.
fn summary(
    number: u32,
    intervals: u64,
    size: u64,
    total: u64,
    reps: u64,
    unique: u64,
    fldcw: u64,
) -> String {
    format!(
        "# Thread {number}\n#   Total intervals: {intervals} (Interval Size {size})\n#   Total instructions: {total}\n#   Total reps: {reps}\n#   Unique reps: {unique}\n#   Total fldcw instructions: {fldcw}\n"
    )
}
