//! Completing a thread's files from what the plugin left: its vectors and its shared state.
//!
//! The plugin keeps each thread's totals and unfinished interval in `thread.N.state` (see the
//! bbv-qemu crate) because QEMU 7.2 runs no plugin callback when the guest dies by a signal, so
//! the closing comment (and the `--tail` vector) are written here, after the guest has ended.

use bbv_plugin_contract::files;
use std::io::{Read, Write};
use std::path::Path;

use bbv_plugin_contract::state::{thread, HEADER_WORDS, SLOTS_MAGIC, THREAD_MAGIC};
use bbv_profile::BbvWriter;

use crate::{CollectError, Request, ThreadResult};

fn words(bytes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    bytes
        .chunks_exact(8)
        .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
}

/// Thread 1's executions the plugin's single-thread fast path counted after its last harvest
/// (`tbs` lists the slots, `tbs.state` holds their counters): (id, instructions) pairs, in no
/// particular order, and the fldcw instructions among them.
fn unharvested(dir: &Path) -> Result<(Vec<(u32, u64)>, u64), CollectError> {
    let list = dir.join(files::TBS);
    let Ok(text) = bbv_plugin_contract::read_appended(&list) else {
        return Ok((Vec::new(), 0));
    };
    let mut slots = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let f: Vec<u64> = line.split(' ').filter_map(|x| x.parse().ok()).collect();
        if f.len() != 4 || f[0] != i as u64 {
            return Err(CollectError::BlockTable {
                path: list,
                line: i + 1,
                what: "slot id insns fldcw",
            });
        }
        slots.push((f[1] as u32, f[2], f[3]));
    }
    let path = dir.join(files::TBS_STATE);
    let mut file = std::fs::File::open(&path).map_err(|e| CollectError::io(&path, e))?;
    let mut bytes = vec![0u8; (HEADER_WORDS + 2 * slots.len()) * 8];
    file.read_exact(&mut bytes)
        .map_err(|e| CollectError::io(&path, e))?;
    let w: Vec<u64> = words(&bytes).collect();
    if w[0] != SLOTS_MAGIC {
        return Err(CollectError::Plugin(format!(
            "{}: not a slot table of this plugin version",
            path.display()
        )));
    }
    let mut out = Vec::new();
    let mut fldcw = 0;
    for (i, &(id, insns, f)) in slots.iter().enumerate() {
        let (execs, harvested) = (w[HEADER_WORDS + 2 * i], w[HEADER_WORDS + 2 * i + 1]);
        let delta = execs.saturating_sub(harvested);
        if delta > 0 {
            out.push((id, delta * insns));
            fldcw += delta * f;
        }
    }
    Ok((out, fldcw))
}

pub(crate) fn finish_thread(
    dir: &Path,
    number: u32,
    req: &Request,
) -> Result<ThreadResult, CollectError> {
    let path = dir.join(files::thread_state(number));
    let bytes = std::fs::read(&path).map_err(|e| CollectError::io(&path, e))?;
    let bad = |what: &str| CollectError::Plugin(format!("{}: {what}", path.display()));
    if bytes.len() < HEADER_WORDS * 8 {
        return Err(bad("truncated thread state"));
    }
    let h: Vec<u64> = words(&bytes[..HEADER_WORDS * 8]).collect();
    if h[thread::MAGIC] != THREAD_MAGIC {
        return Err(bad("not a thread state of this plugin version"));
    }
    let (mut total, rep_iterations, rep_instances, mut fldcw, recorded) = (
        h[thread::TOTAL],
        h[thread::REP_ITERATIONS],
        h[thread::REP_INSTANCES],
        h[thread::FLDCW],
        h[thread::INTERVALS],
    );
    let mut counts: Vec<u64> = words(&bytes[HEADER_WORDS * 8..]).collect();
    if number == 1 {
        let (extra, f) = unharvested(dir)?;
        fldcw += f;
        for (id, n) in extra {
            total += n;
            if counts.len() <= id as usize {
                counts.resize(id as usize + 1, 0);
            }
            counts[id as usize] += n;
        }
    }

    let bb = dir.join(files::thread_bb(number));
    // The vector file, and what goes at its end before the closing comment.
    let mut open_file = None;
    let intervals = if req.counting.count_only {
        total / req.counting.interval
    } else {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .append(true)
            .open(&bb)
            .map_err(|e| CollectError::io(&bb, e))?;
        let mut intervals = 0u64;
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
        if req.counting.tail && intervals == recorded {
            let pairs: Vec<(u32, u64)> = counts
                .iter()
                .copied()
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
        open_file = Some((file, tail));
        intervals
    };
    let summary = format!(
        "# Thread {number}\n#   Total intervals: {intervals} (Interval Size {})\n#   Total instructions: {total}\n#   Total reps: {rep_iterations}\n#   Unique reps: {rep_instances}\n#   Total fldcw instructions: {fldcw}\n",
        req.counting.interval
    );
    let bb = match open_file {
        Some((mut file, mut tail)) => {
            tail.extend_from_slice(format!("\n\n{summary}\n").as_bytes());
            file.write_all(&tail)
                .map_err(|e| CollectError::io(&bb, e))?;
            Some(bb)
        }
        None => None,
    };
    let marks = Some(dir.join(files::thread_marks(number))).filter(|p| p.exists());
    // The plugin creates the file with the thread; it stays empty unless slicing began.
    let slices = Some(dir.join(files::thread_slices(number)))
        .filter(|p| p.metadata().is_ok_and(|m| m.len() > 0));
    Ok(ThreadResult {
        number,
        bb,
        summary,
        instructions: total,
        intervals,
        marks,
        slices,
    })
}

/// What the plugin's shared state says while the guest runs: instructions of every thread (as
/// of each thread's last cut or harvest), thread 1's intervals, and the threads seen.
pub(crate) fn progress(dir: &Path) -> crate::Progress {
    use std::io::Read;
    let mut p = crate::Progress::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return p;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(number) = name.to_str().and_then(files::state_thread) else {
            continue;
        };
        let mut head = [0u8; HEADER_WORDS * 8];
        let read = std::fs::File::open(entry.path()).and_then(|mut f| f.read_exact(&mut head));
        let h: Vec<u64> = words(&head).collect();
        if read.is_err() || h[thread::MAGIC] != THREAD_MAGIC {
            continue;
        }
        p.threads += 1;
        p.instructions += h[thread::TOTAL];
        if number == 1 {
            p.intervals = h[thread::INTERVALS];
        }
    }
    p
}
