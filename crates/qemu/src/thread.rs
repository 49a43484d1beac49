//! Per-guest-thread counting state, indexed by vCPU (each guest thread is one vCPU in user mode).
//!
//! A thread's completed intervals go to `thread.N.bb` with one write each, and its totals and
//! unfinished interval live in `thread.N.state` (a shared mapping), so nothing is lost when the
//! process dies without running any plugin callback; the host writes the closing comment.

use std::fs::File;
use std::io::{self, Write};
use std::sync::atomic::{AtomicPtr, AtomicU32, Ordering};

use bbv_profile::{BbvWriter, CutMode, IntervalCounter};

use crate::blocks::TbInfo;
use crate::state::Shared;
use crate::{report_error, CONFIG};

/// vCPU indexes are reused, so this bounds live threads, not threads over the run.
const MAX_VCPUS: usize = 4096;

#[allow(clippy::declare_interior_mutable_const)]
const EMPTY: AtomicPtr<Thread> = AtomicPtr::new(std::ptr::null_mut());
static THREADS: [AtomicPtr<Thread>; MAX_VCPUS] = [EMPTY; MAX_VCPUS];
static NEXT_NUMBER: AtomicU32 = AtomicU32::new(1);

struct Thread {
    counter: IntervalCounter<Shared>,
    out: Option<File>,
    line: Vec<u8>,
    last_rep: u64,
}

/// A new guest thread (called on its parent's thread, so numbers follow creation order).
pub fn start(vcpu: u32) {
    let Some(cfg) = CONFIG.get() else { return };
    let Some(slot) = THREADS.get(vcpu as usize) else {
        report_error(&format!(
            "more than {MAX_VCPUS} guest threads alive at once"
        ));
        return;
    };
    let number = NEXT_NUMBER.fetch_add(1, Ordering::Relaxed);
    let shared = match Shared::create(&cfg.dir.join(format!("thread.{number}.state")), number) {
        Ok(s) => s,
        Err(e) => return report_error(&format!("creating thread {number}'s counters: {e}")),
    };
    let out = if cfg.count_only {
        None
    } else {
        match File::create(cfg.dir.join(format!("thread.{number}.bb"))) {
            Ok(f) => Some(f),
            Err(e) => return report_error(&format!("creating thread {number}'s vector file: {e}")),
        }
    };
    let mode = if cfg.exact {
        CutMode::Exact
    } else {
        CutMode::BlockEnd
    };
    let t = Box::new(Thread {
        counter: IntervalCounter::with_store(cfg.interval, mode, shared),
        out,
        line: Vec::new(),
        last_rep: 0,
    });
    // The previous owner of a reused index has exited; its state stays for the host to read.
    slot.store(Box::into_raw(t), Ordering::Release);
}

/// Counts one execution of a translated block on `vcpu`.
#[inline]
pub fn exec(vcpu: u32, tb: &TbInfo) {
    let Some(slot) = THREADS.get(vcpu as usize) else {
        return;
    };
    let p = slot.load(Ordering::Relaxed);
    if p.is_null() {
        return;
    }
    // SAFETY: only the vCPU's own host thread executes its blocks, and states are never freed.
    let t = unsafe { &mut *p };
    if tb.rep_first && t.last_rep == tb.pc {
        // Another iteration of the rep instance the previous block started: counted already.
        t.counter.store_mut().header().rep_iterations += 1;
        return;
    }
    t.last_rep = tb.rep_last;
    if tb.rep_last != 0 || tb.fldcw != 0 {
        let h = t.counter.store_mut().header();
        if tb.rep_last != 0 {
            h.rep_iterations += 1;
            h.rep_instances += 1;
        }
        h.fldcw += tb.fldcw;
    }
    let Thread {
        counter, out, line, ..
    } = t;
    let before = counter.intervals();
    let _ = counter.add(tb.id, tb.insns, &mut |pairs| write_vector(out, line, pairs));
    let (total, intervals) = (counter.total(), counter.intervals());
    let h = counter.store_mut().header();
    h.total = total;
    if intervals != before {
        h.intervals = intervals;
    }
}

fn write_vector(
    out: &mut Option<File>,
    line: &mut Vec<u8>,
    pairs: &[(u32, u64)],
) -> io::Result<()> {
    if let Some(f) = out {
        line.clear();
        let mut w = BbvWriter::new(&mut *line);
        w.write_vector(pairs)?;
        // One write per interval: a vector is in the file whole, or not at all.
        if let Err(e) = f.write_all(line) {
            report_error(&format!("writing a vector file: {e}"));
            *out = None;
        }
    }
    Ok(())
}

/// The thread running on `vcpu` is exiting; its files are already complete.
pub fn finish_vcpu(vcpu: u32) {
    if let Some(slot) = THREADS.get(vcpu as usize) {
        slot.store(std::ptr::null_mut(), Ordering::Release);
    }
}
