//! Replay (`bbv replay`): counts the executions of a few instructions, the markers, and
//! records where each marker reaches the counts a region names.
//!
//! The host writes `markers=FILE`: lines `pc INDEX FILE_OFFSET_HEX IMAGE_NAME` (an instruction
//! named by the file name of the image it is mapped from and its offset in that file, so that
//! load addresses do not matter) and `target INDEX COUNT EVENT` (event EVENT happens at the
//! COUNT-th execution of marker INDEX, counted over every thread as Pin and gem5 count).
//! Each event appends one line to `DIR/events`: `EVENT POSITION id:instructions ...`, where
//! POSITION is the instructions the thread ran before the marker instruction and the pairs
//! are the instructions each block had run by then (the region's vector is the difference of
//! two such lines). After a `global` line, POSITION and the pairs cover every thread.

use bbv_plugin_contract::files;
use std::collections::{HashMap, HashSet};
use std::ffi::c_void;
use std::fmt::Write as _;
use std::fs::File;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use crate::checkpoint::{self, Registers};
use crate::{report_error, thread, Config};
use bbv_guest::maps;

struct Markers {
    /// (image file name, file offset) -> marker index.
    pcs: HashMap<(String, u64), u32>,
    images: HashSet<String>,
    /// Per marker: (count, event) in ascending count order.
    targets: Vec<Vec<(u64, u32)>>,
    hits: Vec<AtomicU64>,
    events: Mutex<Option<File>>,
    /// `global` line: positions and counts over all threads (multi-threaded regions).
    global: bool,
}

static MARKERS: OnceLock<Markers> = OnceLock::new();

/// A marker instruction inside one translated block.
pub struct Hit {
    marker: u32,
    /// Instructions from this one to the end of its block (the block's whole count is added
    /// when it starts, before this instruction runs).
    back: u64,
    /// Its guest address.
    vaddr: u64,
}

/// Reads the marker file and creates `DIR/events`.
pub fn init(dir: &Path, file: &Path) -> Result<(), String> {
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("reading the marker file {}: {e}", file.display()))?;
    let mut m = Markers {
        pcs: HashMap::new(),
        images: HashSet::new(),
        targets: Vec::new(),
        hits: Vec::new(),
        events: Mutex::new(None),
        global: false,
    };
    for (i, line) in text.lines().enumerate() {
        let bad = || format!("{}:{}: malformed marker line", file.display(), i + 1);
        let mut f = line.splitn(4, ' ');
        match f.next() {
            Some("pc") => {
                let idx: u32 = f.next().and_then(|s| s.parse().ok()).ok_or_else(bad)?;
                let off = f
                    .next()
                    .and_then(|s| u64::from_str_radix(s, 16).ok())
                    .ok_or_else(bad)?;
                let name = f.next().filter(|s| !s.is_empty()).ok_or_else(bad)?;
                if idx as usize != m.targets.len() {
                    return Err(bad());
                }
                m.images.insert(name.to_string());
                m.pcs.insert((name.to_string(), off), idx);
                m.targets.push(Vec::new());
                m.hits.push(AtomicU64::new(0));
            }
            Some("global") => m.global = true,
            Some("target") => {
                let mut num = || f.next().and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
                let (idx, count, event) = (num()?, num()?, num()?);
                let t = m.targets.get_mut(idx as usize).ok_or_else(bad)?;
                t.push((count, event as u32));
            }
            _ => return Err(bad()),
        }
    }
    for t in &mut m.targets {
        t.sort_unstable();
    }
    let events = File::create(dir.join(files::EVENTS))
        .map_err(|e| format!("creating the replay's event file: {e}"))?;
    *m.events.lock().unwrap_or_else(|e| e.into_inner()) = Some(events);
    MARKERS
        .set(m)
        .map_err(|_| "markers loaded twice".to_string())
}

/// Events of markers' first executions (windows starting there are instrumented from the start).
pub fn first_events() -> Vec<u32> {
    MARKERS.get().map_or_else(Vec::new, |m| {
        m.targets
            .iter()
            .flat_map(|t| t.iter().filter(|x| x.0 == 1).map(|x| x.1))
            .collect()
    })
}

/// Bounds each multi-threaded Sniper window's region by its markers' executions (counted in
/// Sniper's order: bbv_sift::feed::Bounds).
pub fn bound(windows: &mut [bbv_sift::feed::WindowSpec]) {
    for w in windows.iter_mut().filter(|w| w.threads) {
        if let (Some(start), Some(end)) = (marker_of(w.roi), marker_of(w.end)) {
            w.bounds = Some(bbv_sift::feed::Bounds { start, end });
        }
    }
}

/// The marker (its index) and count at which `event` happens, if a marker's.
fn marker_of(event: u32) -> Option<(u32, u64)> {
    let m = MARKERS.get()?;
    m.targets.iter().enumerate().find_map(|(i, t)| {
        let &(count, _) = t.iter().find(|x| x.1 == event)?;
        Some((i as u32, count))
    })
}

/// Whether any marker is being watched.
pub fn active() -> bool {
    MARKERS.get().is_some()
}

/// The marker hits of a translated block: `insn(i)` gives instruction i's host address and
/// guest address; `insns` is the block's counted length.
pub fn hits(insns: usize, insn: impl Fn(usize) -> (u64, u64)) -> Vec<(usize, &'static Hit)> {
    let Some(m) = MARKERS.get() else {
        return Vec::new();
    };
    let (h0, _) = insn(0);
    let Some((module, _)) = maps::locate(h0) else {
        return Vec::new();
    };
    match maps::file_name(module) {
        Some(name) if m.images.contains(&name) => {
            let mut out = Vec::new();
            for i in 0..insns {
                let Some((module_i, off)) = maps::locate(insn(i).0) else {
                    continue;
                };
                if module_i != module {
                    continue;
                }
                if let Some(&marker) = m.pcs.get(&(name.clone(), off)) {
                    checkpoint::note_marker(marker, insn(i).1);
                    let hit: &'static Hit = Box::leak(Box::new(Hit {
                        marker,
                        back: (insns - i) as u64,
                        vaddr: insn(i).1,
                    }));
                    out.push((i, hit));
                }
            }
            out
        }
        _ => Vec::new(),
    }
}

/// Sniper's windows count every execution of a marker, after its events (a multi-threaded
/// region is bounded in Sniper's order of them: bbv_sift::feed::Bounds).
fn feed_marker(vcpu: u32, marker: u32, n: u64) {
    if let Some(number) = thread::number(vcpu) {
        crate::feed::marker(number, marker, n);
    }
}

/// One execution of a marker instruction on `vcpu`; `registers` reads the guest's registers
/// (for a checkpoint taken here).
pub fn hit(cfg: &Config, vcpu: u32, udata: *mut c_void, registers: impl Fn() -> Registers) {
    // SAFETY: udata is a Hit leaked by `hits`, never freed.
    let hit = unsafe { &*(udata as *const Hit) };
    let Some(m) = MARKERS.get() else { return };
    let i = hit.marker as usize;
    let n = m.hits[i].fetch_add(1, Ordering::Relaxed) + 1;
    let targets = &m.targets[i];
    // ChampSim's records are thread 1's; Sniper's streams take every thread, whose marker
    // counts are the program's (`global`) in multi-threaded regions.
    let recording = thread::is_first(vcpu);
    let feeding = crate::feed::active() && (m.global || recording);
    if recording || feeding {
        // Windows that start at this marker's next execution: the recorder's callbacks are put
        // in before it.
        let next = targets.partition_point(|t| t.0 < n + 1);
        for &(_, event) in targets[next..].iter().take_while(|t| t.0 == n + 1) {
            match feeding {
                true => crate::feed::arm(event, false),
                false => crate::record::arm(event, false),
            }
        }
    }
    // Several regions may share a (marker, count): one event each.
    let first = targets.partition_point(|t| t.0 < n);
    if targets.get(first).is_none_or(|t| t.0 != n) {
        if feeding {
            feed_marker(vcpu, hit.marker, n);
        }
        return;
    }
    let mut by_id: HashMap<u32, u64> = HashMap::new();
    let position = if m.global {
        thread::snapshot_all(cfg, |id, c| *by_id.entry(id).or_default() += c)
    } else {
        thread::snapshot(vcpu, |id, c| *by_id.entry(id).or_default() += c);
        thread::position(vcpu)
    }
    .saturating_sub(hit.back);
    let mut pairs: Vec<(u32, u64)> = by_id.into_iter().collect();
    pairs.sort_unstable();
    let mut body = String::new();
    for (id, c) in pairs {
        let _ = write!(body, " {id}:{c}");
    }
    let mut text = String::new();
    for &(_, event) in targets[first..].iter().take_while(|t| t.0 == n) {
        let _ = writeln!(text, "{event} {position}{body}");
        if feeding {
            if let Some(number) = thread::number(vcpu) {
                crate::feed::event(number, event);
            }
        }
        if recording {
            crate::record::event(event);
            crate::syscall_log::event(event);
            if let Some(capture) = checkpoint::wants(event) {
                let hits = (m.hits.iter().enumerate())
                    .map(|(j, h)| {
                        let h = h.load(Ordering::Relaxed);
                        (j as u32, if j == i { h - 1 } else { h })
                    })
                    .collect();
                let at = checkpoint::Moment {
                    pc: hit.vaddr,
                    instructions: position,
                    hits,
                    several: !thread::single(),
                };
                checkpoint::capture(capture, at, registers());
            }
        }
    }
    if feeding {
        feed_marker(vcpu, hit.marker, n);
    }
    let mut guard = m.events.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(f) = guard.as_mut() {
        if let Err(e) = f.write_all(text.as_bytes()) {
            report_error(&format!("writing the replay's event file: {e}"));
            *guard = None;
        }
    }
}
