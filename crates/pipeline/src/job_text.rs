//! `summary.txt`: what `bbv run` prints when the guest has ended.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::path::Path;

use crate::markers::Profile;
use crate::rundir::{BlockRow, Marker, Summary};
use crate::validate::Validation;

fn show(m: &Marker) -> String {
    format!("{}+{} #{}", m.image, m.offset, m.count)
}

/// Instructions per function in a vector (blocks without a symbol named `image+offset`),
/// most first.
pub(crate) fn function_totals(v: &[(u32, u64)], blocks: &[BlockRow]) -> Vec<(String, u64)> {
    let mut by_fn: HashMap<String, u64> = HashMap::new();
    for &(id, x) in v {
        let name = match blocks.get((id as usize).wrapping_sub(1)) {
            Some(b) if b.function != "-" && !b.function.is_empty() => b.function.clone(),
            Some(b) => format!(
                "{}+{:#x}",
                b.image.as_deref().unwrap_or("anonymous"),
                b.offset
            ),
            None => format!("block {id}"),
        };
        *by_fn.entry(name).or_default() += x;
    }
    let mut list: Vec<(String, u64)> = by_fn.into_iter().collect();
    list.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    list
}

/// The three functions holding the most instructions, with their shares of `total`.
fn top3(list: &[(String, u64)], total: u64) -> String {
    list.iter()
        .take(3)
        .map(|(n, x)| format!("{n} {:.0}%", 100.0 * *x as f64 / total.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The text summary of a finished run directory.
pub fn summary_text(
    dir: &Path,
    s: &Summary,
    profile: &Profile,
    blocks: &[BlockRow],
    validation: Option<&Validation>,
) -> String {
    let mut r = String::new();
    what_ran(&mut r, s);
    if s.intervals == 0 {
        let _ = writeln!(
            r,
            "no complete interval to cluster: the run is shorter than --interval {} (try a smaller one, or --tail)",
            s.interval
        );
        return r;
    }
    if s.clustered == crate::rundir::Clustered::All {
        let _ = writeln!(
            r,
            "simpoints: in {}/simpoint.simpoints (rows of bb.all: every thread's intervals in thread order); markers are placed for --threads main runs",
            dir.display()
        );
        return r;
    }
    points(&mut r, s, profile, blocks, validation);
    if let Some(v) = validation {
        r.push_str(&crate::validate::table(v));
    }
    let looppoint = s.regions_mode == crate::rundir::Regions::Looppoint;
    let _ = writeln!(
        r,
        "files: {}/ (report.html, summary.json, regions.csv, regions.json, regions.sniper.txt, gem5/, nemu/, blocks.tsv, {}bb.out, pc.out, simpoint.*{})",
        // The folder's own name while the command writes its staged next state.
        bbv_files::folder::plain(&dir.display().to_string()),
        if looppoint { "global.bb, slices.tsv, " } else { "" },
        if validation.is_some() { ", metrics.csv, validation.json" } else { "" }
    );
    r
}

/// The instructions per thread and what was clustered: slices or intervals.
fn what_ran(r: &mut String, s: &Summary) {
    let n = s.threads.len();
    let _ = writeln!(
        r,
        "instructions: {} in {n} thread{}{}",
        s.instructions,
        if n == 1 { "" } else { "s" },
        s.cpu
            .as_ref()
            .map(|c| format!(" (guest CPU {c})"))
            .unwrap_or_default()
    );
    if n > 1 {
        for t in &s.threads {
            let _ = writeln!(r, "  thread {}: {}", t.thread, t.instructions);
        }
    }
    if let Some(root) = &s.sysroot {
        let _ = writeln!(
            r,
            "sysroot: {root} (the guest's loader and libraries, qemu -L)"
        );
    }
    if let Some(first) = s.schedule_events.first() {
        let _ = writeln!(
            r,
            "schedule: deterministic turns, but not reproducible: {} event{} the order could not follow (summary.json's schedule_events), first: {first}",
            s.schedule_events.len(),
            if s.schedule_events.len() == 1 { "" } else { "s" },
        );
    }
    if s.regions_mode == crate::rundir::Regions::Looppoint {
        let _ = writeln!(
            r,
            "regions: looppoint ({}); {} filtered instructions (without {})",
            s.regions_reason,
            s.filtered_instructions.unwrap_or(0),
            if s.exclude.is_empty() {
                "any image".to_string()
            } else {
                s.exclude.join(", ")
            }
        );
        let _ = writeln!(
            r,
            "slices: {} complete, of {} filtered instructions per thread that ran; {}",
            s.intervals,
            s.interval,
            if s.turn_quantum > 0 {
                format!(
                    "threads in deterministic turns of {} instructions (replay follows the same order)",
                    s.turn_quantum
                )
            } else if s.flow_quantum > 0 {
                format!(
                    "threads paced within {} instructions (replay paces them alike)",
                    s.flow_quantum
                )
            } else {
                "threads unpaced".to_string()
            }
        );
    } else {
        if n > 1 {
            let _ = writeln!(r, "regions: intervals ({})", s.regions_reason);
        }
        let _ = writeln!(
            r,
            "intervals: {} of {} instructions ({})",
            s.intervals,
            s.interval,
            if s.clustered == crate::rundir::Clustered::All {
                "all threads"
            } else {
                "main thread"
            }
        );
    }
}

/// The points' table: weight, interval, start, hottest functions and markers.
fn points(
    r: &mut String,
    s: &Summary,
    profile: &Profile,
    blocks: &[BlockRow],
    validation: Option<&Validation>,
) {
    let looppoint = s.regions_mode == crate::rundir::Regions::Looppoint;
    let rule = match validation {
        Some(v) if v.target_error.is_some() => "by --target-error",
        _ if s.every_k => "by BIC over every k",
        _ => "by BIC",
    };
    let unit = if looppoint { "slices" } else { "intervals" };
    // k cannot exceed the vectors clustered: a larger --max-k is clamped, and said so.
    let clamped = if s.intervals > 0 && s.max_k as u64 > s.intervals {
        format!(" limited to the {} {unit}", s.intervals)
    } else {
        String::new()
    };
    let picked = validation.map_or("", |v| v.pick.note());
    let _ = writeln!(
        r,
        "simpoints: {} (k chosen {rule}, --max-k {}{clamped}{picked})",
        s.points.len(),
        s.max_k
    );
    let _ = writeln!(
        r,
        "  weight  {}  start instruction  hottest functions",
        if looppoint { "   slice" } else { "interval" }
    );
    for p in &s.points {
        let hot = if looppoint {
            top3(&p.functions, p.length)
        } else {
            profile
                .kept
                .get(&p.interval)
                .map(|v| top3(&function_totals(v, blocks), v.iter().map(|x| x.1).sum()))
                .unwrap_or_default()
        };
        let _ = writeln!(
            r,
            "  {:6.4}  {:>8}  {:>17}  {hot}",
            p.weight, p.interval, p.start_instruction
        );
        let _ = write!(
            r,
            "          start {}  end {}",
            show(&p.start),
            show(&p.end)
        );
        match &p.warmup {
            Some(w) => {
                let _ = writeln!(r, "  warmup {}", show(w));
            }
            None => r.push('\n'),
        }
        if let Some(rep) = p.stand_in_for {
            let _ = writeln!(
                r,
                "          (stands in for interval {rep}, SimPoint's representative: no marker delimits it)"
            );
        }
    }
}
