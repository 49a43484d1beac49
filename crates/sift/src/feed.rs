//! A program's threads fed into Sniper as a frontend sees them run: what QEMU's plugin calls
//! for each instruction, memory access, marker event and finished system call.
//!
//! Each window is one Sniper (one application), opened when its start event fires and
//! closed at its end event (or after its record limit). The thread whose event opened it
//! becomes Sniper's thread 0; every other thread alive then is created in Sniper from thread
//! 0's stream at once, and threads created later from their parent's stream. A thread's
//! instruction is written when that thread starts its next one (so that whether a branch was
//! taken is known), to every open window that was open when it started. At a window's end the
//! thread that ended it ends the region of interest and the application (`exit_group`, so that
//! Sniper stops threads still waiting), and every stream of it ends; at the guest's exit it
//! first waits, in Sniper, for every other thread's end (the guest ran their last instructions
//! before its exit). Its relays deliver in the background; [`Feed::finish`] waits for them.
//!
//! **A multi-threaded region is bounded in Sniper's order** ([`Bounds`]), as LoopPoint bounds
//! its regions: the guest's turns interleave the threads in equal slices, Sniper at each
//! thread's simulated speed, so the thread that reaches the end marker's count under QEMU may
//! be millions of instructions ahead of, or behind, where it is in Sniper. Every execution of
//! the region's start and end markers is sent, on the thread that ran it, as a user command
//! ([`crate::command::region`]); the window's first records say how many of each are left
//! until the region's bounds, and Sniper's region script (crates/sniper) counts them as it
//! simulates them, recording its statistics at each bound and ending Sniper at the end. Past
//! the guest's own end the window streams on (up to its limit again) until Sniper is gone.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use bbv_plugin_contract::events::{NEVER, WHOLE_RUN};

use crate::command::region;
use crate::relay::Session;

mod program;
pub mod warm;
use crate::{Instruction, MAX_ADDRESSES, MAX_SIZE};
use program::Program;

/// What a frontend learns of an instruction when it translates it.
#[derive(Clone, Debug, Default)]
pub struct Code {
    /// Its address.
    pub ip: u64,
    /// Its bytes (the first `len`).
    pub bytes: [u8; MAX_SIZE],
    /// How many bytes it has.
    pub len: u8,
    /// The address after it.
    pub fallthrough: u64,
    /// A conditional branch (see [`Instruction::branch`]).
    pub branch: bool,
    /// A jump, call or return: taken whatever runs next.
    pub always_taken: bool,
    /// Memory operands its decoder counts, read and written.
    pub loads: u8,
    /// See `loads`.
    pub stores: u8,
    /// An x86 rep string instruction (QEMU runs it once per iteration).
    pub rep: bool,
}

/// One window of the plugin's windows file: the events that bound it and the Sniper it feeds.
#[derive(Clone, Debug)]
pub struct WindowSpec {
    /// The event that opens it, and a second one that also does (whichever comes first).
    pub start: u32,
    /// See `start`.
    pub alt: u32,
    /// The event that closes it.
    pub end: u32,
    /// The event that starts its region of interest.
    pub roi: u32,
    /// Most instructions it takes (a missed end marker stops here).
    pub limit: u64,
    /// Sniper's process, watched while waiting for it.
    pub pid: Option<i32>,
    /// Sniper's FIFOs' prefix (`traceinput/trace_prefix`).
    pub prefix: PathBuf,
    /// More than one thread may run: queues spill to files next to the FIFOs instead of
    /// making the guest wait for Sniper (see [`Session::single`]), and the warmup is
    /// simulated in detail, the region of interest starting with the window and the region's
    /// bounds sent in it ([`crate::command::region`]): after cache-only warming the cores'
    /// catch-up idle counts in a multi-threaded region's time, where it cannot be told from
    /// a thread's waiting, and the figures varied by 2% from run to run (docs/sniper.md).
    pub threads: bool,
    /// With `threads`, the region's bounds as markers: counted in Sniper's order (see the
    /// module's note). None: at the `roi` and `end` events, in the guest's order.
    pub bounds: Option<Bounds>,
    /// A single thread's window: its first `condense` instructions are sent as the last touch
    /// of each of their cache lines ([`warm`]), then it streams whole (0: whole from its
    /// start).
    pub condense: u64,
}

/// Sends `s` a synthetic access to each of `lines`' lines touched since instruction `since`
/// ([`warm`]); false when Sniper is gone.
fn send_lines(
    s: &mut crate::relay::ThreadStream,
    lines: Option<&warm::Lines>,
    since: u64,
    isa: Option<u32>,
) -> bool {
    let lines = lines.map(|l| l.since(since)).unwrap_or_default();
    (lines.into_iter()).all(|(a, write)| {
        s.instruction(&warm::touch_instruction(isa, a, write))
            .is_ok()
    })
}

/// A multi-threaded region's bounds: each a marker (the frontend's number for it) and the
/// execution of it, counted over every thread, where the region starts or ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bounds {
    /// The start marker and its count.
    pub start: (u32, u64),
    /// The end marker and its count.
    pub end: (u32, u64),
}

/// How a thread's system call ended, as far as Sniper's model of it goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Sync {
    /// It created thread `0` (a guest thread number).
    Created(u32),
    /// A futex wait on `addr` expecting `val`; `woken_by` names the wake that ended it (None:
    /// it did not sleep, or no wake of the guest ended it).
    Waited {
        /// The futex word.
        addr: u64,
        /// The value the wait expected.
        val: u32,
        /// The wake's id.
        woken_by: Option<u64>,
    },
    /// A futex wake of `addr` that woke `woken` threads, named `id`.
    Woke {
        /// The futex word.
        addr: u64,
        /// Threads woken in the guest.
        woken: u32,
        /// Its id (the waits it ended name it).
        id: u64,
    },
    /// The thread ends, waking the threads that join it: `(word, how many)` per word, one
    /// wake named `id`.
    Exited {
        /// The words joined on.
        joiners: Vec<(u64, u32)>,
        /// The wake's id.
        id: u64,
    },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Open,
    Done,
}

struct Window {
    spec: WindowSpec,
    state: State,
    left: u64,
    /// The instruction count when it opened: instructions started earlier are not its own.
    opened: u64,
    armed: bool,
    /// Past its end in the guest, streaming until Sniper is gone (its region script ends it
    /// at the region's end in Sniper's order: see [`Bounds`]) or the limit again.
    overrun: bool,
    /// Instructions still to condense ([`WindowSpec::condense`]).
    condensing: u64,
    program: Option<Program>,
}

/// A thread's instruction under way, completed as its accesses come.
struct Pending {
    code: &'static Code,
    /// When it started (see [`Window::opened`]).
    seq: u64,
    addresses: [u64; MAX_ADDRESSES],
    n_addresses: u8,
    n_loads: u8,
    n_stores: u8,
    /// Which of `addresses` were written (bit k: the k-th).
    written: u8,
    /// A later iteration of the same rep instruction runs: its accesses are not recorded.
    merging: bool,
}

/// The feed of every window of one replay.
pub struct Feed {
    windows: Vec<Window>,
    /// By guest thread number.
    pending: Vec<Option<Pending>>,
    /// Guest threads alive, by number (creation order).
    live: Vec<u32>,
    /// Executions of each marker so far, over every thread (see [`Feed::marker`]).
    counts: Vec<u64>,
    /// The thread that ran last: at the guest's exit, the one that ends the program.
    last: u32,
    isa: Option<u32>,
    merge_rep: bool,
    seq: u64,
    /// A window is open or about to open (see [`Feed::busy`]), kept as windows change: every
    /// instruction asks.
    busy: bool,
    /// Sessions of closed windows whose relays may still be delivering.
    closing: Vec<Session>,
    errors: Vec<String>,
    /// The newest lines' last touches, kept while a window condenses.
    lines: Option<warm::Lines>,
}

impl Feed {
    /// A feed of `windows` for a program of instruction set `isa` (None: x86; else one of
    /// [`crate::isa`]), its thread 1 running; `merge_rep`: a rep string instruction's
    /// iterations make one instruction. A window whose start is [`WHOLE_RUN`] opens at once,
    /// its region of interest with it when its `roi` is [`NEVER`].
    pub fn new(windows: Vec<WindowSpec>, isa: Option<u32>, merge_rep: bool) -> Feed {
        let mut f = Feed {
            windows: (windows.into_iter())
                .map(|spec| Window {
                    left: spec.limit,
                    spec,
                    state: State::Waiting,
                    opened: 0,
                    armed: false,
                    overrun: false,
                    condensing: 0,
                    program: None,
                })
                .collect(),
            pending: Vec::new(),
            live: vec![1],
            counts: Vec::new(),
            last: 1,
            isa,
            merge_rep,
            seq: 0,
            busy: false,
            closing: Vec::new(),
            errors: Vec::new(),
            lines: None,
        };
        for i in 0..f.windows.len() {
            if f.windows[i].spec.start == WHOLE_RUN {
                f.open(i, 1);
                // Its region of interest from the first instruction too, unless an event
                // starts it (a region warmed from the run's start).
                let whole = f.windows[i].spec.roi == NEVER;
                let p = f.windows[i].program.as_mut();
                if let Some(p) = p.filter(|p| !p.in_roi && whole) {
                    p.in_roi = p.streams.get_mut(&1).is_some_and(|s| s.start_roi().is_ok());
                }
            }
        }
        f
    }

    /// Whether any window is open or about to open (instructions must come).
    pub fn busy(&self) -> bool {
        self.busy
    }

    fn refresh(&mut self) {
        self.busy = (self.windows.iter())
            .any(|w| w.state == State::Open || (w.state == State::Waiting && w.armed));
    }

    /// The next execution of a marker fires `event`: true when that opens a window (its
    /// instruction must come).
    pub fn arm(&mut self, event: u32) -> bool {
        let mut any = false;
        for w in &mut self.windows {
            if w.state == State::Waiting && (w.spec.start == event || w.spec.alt == event) {
                w.armed = true;
                any = true;
            }
        }
        self.refresh();
        any
    }

    /// Errors met since the last call (a window that could not open), to report.
    pub fn take_errors(&mut self) -> Vec<String> {
        std::mem::take(&mut self.errors)
    }

    fn open(&mut self, i: usize, thread: u32) {
        let spec = &self.windows[i].spec;
        let mut session = match spec.threads {
            true => {
                let dir = spec.prefix.parent().map(PathBuf::from).unwrap_or_default();
                Session::new(spec.prefix.clone(), dir, spec.pid)
            }
            false => Session::single(spec.prefix.clone(), spec.pid),
        };
        let opened = (|| {
            let mut streams = BTreeMap::new();
            let mut first = session.thread0()?;
            self.isa.map_or(Ok(()), |isa| first.isa(isa))?;
            if spec.threads {
                // What is left of each bound from here (this execution of the marker that opens
                // the window is sent by `marker`, after this); without bounds, one hit each
                // from the guest's own events.
                let left = |(m, n): (u32, u64)| {
                    n.saturating_sub(self.counts.get(m as usize).copied().unwrap_or(0))
                };
                let (to_start, to_end) =
                    spec.bounds.map_or((1, 1), |b| (left(b.start), left(b.end)));
                first.user(region::START_AFTER, to_start)?;
                first.user(region::END_AFTER, to_end)?;
            }
            // The threads alive join at once, created by the first (Sniper knows no other).
            for &t in self.live.iter().filter(|&&t| t != thread) {
                let mut s = first.new_thread(&mut session)?;
                self.isa.map_or(Ok(()), |isa| s.isa(isa))?;
                streams.insert(t, s);
            }
            streams.insert(thread, first);
            if spec.threads {
                if let Some(s) = streams.get_mut(&thread) {
                    s.start_roi()?;
                }
            }
            Ok::<_, crate::SiftError>(streams)
        })();
        let at = self.pending_seq(thread).unwrap_or(self.seq);
        let w = &mut self.windows[i];
        w.armed = false;
        match opened {
            Ok(streams) => {
                w.state = State::Open;
                // The instruction pending on `thread` (the marker's) is the window's first.
                w.opened = at;
                w.condensing = if w.spec.threads { 0 } else { w.spec.condense };
                if w.condensing > 0 && self.lines.is_none() {
                    self.lines = Some(warm::Lines::new(warm::LINES));
                }
                w.program = Some(Program {
                    session,
                    streams,
                    first: thread,
                    in_roi: w.spec.threads,
                    wakes: HashSet::new(),
                    threads: w.spec.threads,
                    ended: Vec::new(),
                });
            }
            Err(e) => {
                session.abort();
                w.state = State::Done;
                let why = format!("{}: {e}", w.spec.prefix.display());
                self.errors.push(why);
            }
        }
        self.refresh();
    }

    fn pending_seq(&self, thread: u32) -> Option<u64> {
        let p = self.pending.get(thread as usize)?.as_ref()?;
        Some(p.seq)
    }

    /// Marker event `event` fired on guest thread `thread`: windows open, regions of interest
    /// start, windows close.
    pub fn event(&mut self, thread: u32, event: u32) {
        for i in 0..self.windows.len() {
            let spec = &self.windows[i].spec;
            if self.windows[i].state == State::Waiting && (spec.start == event || spec.alt == event)
            {
                self.open(i, thread);
            }
            let w = &mut self.windows[i];
            if w.state != State::Open {
                continue;
            }
            let (threads, bounded) = (w.spec.threads, w.spec.bounds.is_some());
            if w.spec.roi == event && w.condensing > 0 {
                // The replay reached the region before the profile's warmup length (it
                // diverged): the lines so far, and the region whole.
                w.condensing = 0;
                let s = w.program.as_mut().and_then(|p| p.streams.get_mut(&thread));
                if !s.is_some_and(|s| send_lines(s, self.lines.as_ref(), w.opened, self.isa)) {
                    self.close(i, thread);
                    continue;
                }
            }
            let w = &mut self.windows[i];
            if w.spec.roi == event {
                // Before the pending instruction (the region's first) is written.
                let started = match w.program.as_mut() {
                    // Sniper's region script counts the start marker's executions.
                    Some(_) if bounded => true,
                    // Inside the region of interest since the window opened (see
                    // `WindowSpec::threads`): the region's figures start at a marker.
                    Some(p) if threads => {
                        let s = p.streams.get_mut(&thread);
                        s.is_some_and(|s| s.user(region::HIT, region::HIT_START).is_ok())
                    }
                    Some(p) if !p.in_roi => {
                        p.in_roi = true;
                        let s = p.streams.get_mut(&thread);
                        s.is_some_and(|s| s.start_roi().is_ok())
                    }
                    _ => true,
                };
                if !started {
                    self.close(i, thread);
                }
            } else if w.spec.end == event && bounded {
                // Sniper's region may end later: stream on (up to the limit again).
                if !w.overrun {
                    w.overrun = true;
                    w.left = w.spec.limit;
                }
            } else if w.spec.end == event {
                if threads {
                    if let Some(s) = w.program.as_mut().and_then(|p| p.streams.get_mut(&thread)) {
                        let _ = s.user(region::HIT, region::HIT_END);
                    }
                }
                self.close(i, thread);
            }
        }
    }

    /// Guest thread `thread` runs marker `marker` (the frontend's number for it), its `n`-th
    /// execution over every thread: before its instruction, when it bounds an open window's
    /// region (see [`Bounds`]). Called at every execution, after its events.
    pub fn marker(&mut self, thread: u32, marker: u32, n: u64) {
        let m = marker as usize;
        if self.counts.len() <= m {
            self.counts.resize(m + 1, 0);
        }
        self.counts[m] = n;
        if !self.busy {
            return;
        }
        for i in 0..self.windows.len() {
            let w = &mut self.windows[i];
            let Some(b) = w.spec.bounds.filter(|_| w.state == State::Open) else {
                continue;
            };
            let hit = (u64::from(b.start.0 == marker) * region::HIT_START)
                | (u64::from(b.end.0 == marker) * region::HIT_END);
            let Some(s) = w.program.as_mut().and_then(|p| p.streams.get_mut(&thread)) else {
                continue;
            };
            if hit != 0 && s.user(region::HIT, hit).is_err() {
                self.close(i, thread);
            }
        }
    }

    /// Guest thread `thread` starts instruction `code`.
    pub fn exec(&mut self, thread: u32, code: &'static Code) {
        let t = thread as usize;
        if self.pending.len() <= t {
            self.pending.resize_with(t + 1, || None);
        }
        self.last = thread;
        if !self.busy() {
            self.pending[t] = None;
            return;
        }
        if let Some(p) = self.pending[t].as_mut() {
            if code.rep && self.merge_rep && p.code.ip == code.ip {
                p.merging = true;
                return;
            }
        }
        self.flush(thread, Some(code.ip));
        self.seq += 1;
        self.pending[t] = Some(Pending {
            code,
            seq: self.seq,
            addresses: [0; MAX_ADDRESSES],
            n_addresses: 0,
            n_loads: 0,
            n_stores: 0,
            written: 0,
            merging: false,
        });
    }

    /// Guest thread `thread`'s instruction under way accesses `vaddr`.
    pub fn access(&mut self, thread: u32, vaddr: u64, store: bool) {
        let Some(Some(p)) = self.pending.get_mut(thread as usize) else {
            return;
        };
        if p.merging {
            return;
        }
        let (n, operands) = match store {
            true => (&mut p.n_stores, p.code.stores),
            false => (&mut p.n_loads, p.code.loads),
        };
        // A new operand (or any access of an instruction whose operands the decoder does not
        // know); a further access is a part of one already seen (a wide access split).
        let seen = &p.addresses[..usize::from(p.n_addresses)];
        let mut at = seen.iter().position(|&a| a == vaddr);
        if *n < operands || operands == 0 {
            *n = n.saturating_add(1);
            if at.is_none() && usize::from(p.n_addresses) < MAX_ADDRESSES {
                at = Some(usize::from(p.n_addresses));
                p.addresses[usize::from(p.n_addresses)] = vaddr;
                p.n_addresses += 1;
            }
        }
        if let Some(k) = at.filter(|_| store) {
            p.written |= 1 << k;
        }
    }

    /// Writes `thread`'s pending instruction to the windows it belongs to: taken when `next`
    /// is not its fall-through.
    fn flush(&mut self, thread: u32, next: Option<u64>) {
        let Some(p) = self.pending.get_mut(thread as usize).and_then(Option::take) else {
            return;
        };
        let c = p.code;
        let taken = c.always_taken || next.is_some_and(|n| n != c.fallthrough);
        // Built once a window streams it: while every window condenses, none does.
        let mut insn = None;
        let build = || {
            Instruction::from_accesses(
                c.ip,
                &c.bytes[..usize::from(c.len)],
                &p.addresses[..usize::from(p.n_addresses)],
                usize::from(c.loads + c.stores),
                (c.branch, taken),
            )
        };
        if !self.condensing() {
            self.lines = None;
        } else if let Some(lines) = self.lines.as_mut() {
            lines.touch(c.ip, p.seq, false);
            for (k, &a) in p.addresses[..usize::from(p.n_addresses)].iter().enumerate() {
                lines.touch(a, p.seq, p.written & (1 << k) != 0);
            }
        }
        for i in 0..self.windows.len() {
            let w = &mut self.windows[i];
            if w.state != State::Open || p.seq < w.opened {
                continue;
            }
            let Some(s) = w.program.as_mut().and_then(|p| p.streams.get_mut(&thread)) else {
                continue;
            };
            let ok = match w.condensing {
                0 => s.instruction(insn.get_or_insert_with(build)).is_ok(),
                _ => {
                    w.condensing -= 1;
                    // The window's lines since it opened, then its stream from the next.
                    w.condensing > 0 || send_lines(s, self.lines.as_ref(), w.opened, self.isa)
                }
            };
            w.left = w.left.saturating_sub(1);
            // A Sniper gone (as it goes at a bounded region's end), or the limit reached.
            if !ok || w.left == 0 {
                self.close(i, thread);
            }
        }
    }

    /// Whether a window is condensing its instructions.
    fn condensing(&self) -> bool {
        (self.windows.iter()).any(|w| w.state == State::Open && w.condensing > 0)
    }

    /// Guest thread `thread`'s system call ended as `sync` says.
    pub fn sync(&mut self, thread: u32, sync: Sync) {
        // The call's own instruction first.
        self.flush(thread, None);
        match &sync {
            Sync::Created(child) => {
                if let Err(at) = self.live.binary_search(child) {
                    self.live.insert(at, *child);
                }
            }
            Sync::Exited { .. } => self.live.retain(|&t| t != thread),
            _ => {}
        }
        for i in 0..self.windows.len() {
            if self.windows[i].state != State::Open {
                continue;
            }
            let Some(p) = self.windows[i].program.as_mut() else {
                continue;
            };
            let ok = match p.write(thread, &sync, self.isa) {
                Ok(()) => true,
                // A bounded region's Sniper ends at the region's end: its own report says
                // whether it got there.
                Err(_) if self.windows[i].spec.bounds.is_some() => false,
                Err(e) => {
                    self.errors.push(e.to_string());
                    false
                }
            };
            if !ok {
                self.close(i, thread);
            }
        }
    }

    /// Closes window `i`; `thread` ended it.
    fn close(&mut self, i: usize, thread: u32) {
        let w = &mut self.windows[i];
        w.state = State::Done;
        let program = w.program.take();
        self.refresh();
        let Some(mut p) = program else {
            return;
        };
        let lead = p.lead(thread);
        let others = p.streams.len() > 1;
        if let Some(mut s) = p.streams.remove(&lead) {
            let _ = (|| {
                if p.in_roi {
                    s.end_roi()?;
                }
                // Threads still in Sniper stop with the application.
                if others {
                    s.exit_group(0)?;
                }
                s.end()
            })();
        }
        for (_, s) in std::mem::take(&mut p.streams) {
            let _ = s.end();
        }
        self.closing.push(p.session);
    }

    /// The guest exits: the last instructions, every window closed, and every Sniper's
    /// streams delivered (or Sniper gone). Sniper's own failures are its report's: the
    /// caller reads its exit and its log.
    pub fn finish(&mut self) {
        for t in 0..self.pending.len() {
            self.flush(t as u32, None);
        }
        // The thread that exits ends each window's program, after every other thread's end:
        // in Sniper the others finish first, as in the guest.
        for i in 0..self.windows.len() {
            if self.windows[i].state != State::Open {
                continue;
            }
            // A stream that broke: Sniper's own report says why.
            if let Some(p) = self.windows[i].program.as_mut() {
                let _ = p.join_all(self.last);
            }
            self.close(i, self.last);
        }
        for s in self.closing.drain(..) {
            let _ = s.finish();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(start: u32, alt: u32) -> WindowSpec {
        WindowSpec {
            start,
            alt,
            end: 9,
            roi: start,
            limit: 100,
            pid: None,
            prefix: PathBuf::from("/nonexistent/t"),
            threads: false,
            bounds: None,
            condense: 0,
        }
    }

    /// An instruction at `ip`.
    fn code(ip: u64, loads: u8, stores: u8, rep: bool) -> &'static Code {
        Box::leak(Box::new(Code {
            ip,
            len: 2,
            fallthrough: ip + 2,
            loads,
            stores,
            rep,
            ..Code::default()
        }))
    }

    fn addresses(f: &Feed, thread: u32) -> Vec<u64> {
        let p = f.pending[thread as usize].as_ref().unwrap();
        p.addresses[..usize::from(p.n_addresses)].to_vec()
    }

    #[test]
    fn windows_arm_on_their_start_or_alt_event_and_only_then_take_instructions() {
        let mut f = Feed::new(vec![spec(1, 2), spec(3, 3)], None, true);
        assert!(!f.busy());
        // Nothing armed: an instruction is not kept.
        f.exec(1, code(0x1000, 0, 0, false));
        assert!(f.pending[1].is_none());
        assert!(!f.arm(5));
        assert!(f.arm(2), "the second event of the first window");
        assert!(f.busy());
        f.exec(1, code(0x1000, 0, 0, false));
        assert!(f.pending[1].is_some());
        assert!(f.take_errors().is_empty());
    }

    #[test]
    fn a_split_operand_is_one_address_and_rep_iterations_merge() {
        let mut f = Feed::new(vec![spec(1, 1)], None, true);
        f.arm(1);
        // One load operand accessed in two parts, then a store.
        f.exec(2, code(0x1000, 1, 1, false));
        f.access(2, 0x100, false);
        f.access(2, 0x108, false);
        f.access(2, 0x200, true);
        assert_eq!(addresses(&f, 2), [0x100, 0x200]);
        // A read-modify-write operand: one address.
        f.exec(2, code(0x1002, 1, 1, false));
        f.access(2, 0x300, false);
        f.access(2, 0x300, true);
        assert_eq!(addresses(&f, 2), [0x300]);
        // A rep instruction's later iterations add nothing to its first.
        f.exec(2, code(0x1004, 1, 1, true));
        f.access(2, 0x400, false);
        f.exec(2, code(0x1004, 1, 1, true));
        f.access(2, 0x440, false);
        assert_eq!(addresses(&f, 2), [0x400]);
        // Unless each iteration is an instruction of its own.
        let mut g = Feed::new(vec![spec(1, 1)], None, false);
        g.arm(1);
        g.exec(2, code(0x1004, 1, 0, true));
        g.access(2, 0x400, false);
        g.exec(2, code(0x1004, 1, 0, true));
        g.access(2, 0x440, false);
        assert_eq!(addresses(&g, 2), [0x440]);
    }
}
