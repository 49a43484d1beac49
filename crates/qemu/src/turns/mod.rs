//! Deterministic turns of a multi-threaded guest (`turns=Q`): one guest thread runs guest
//! code at a time, for Q instructions, the threads taking turns in creation order, so that the
//! interleaving of the threads depends only on the guest's own execution and a (PC, count)
//! marker falls at the same point of every thread's work in every run.
//!
//! Three rules keep the order independent of the host:
//! * A turn ends at a block boundary once the thread has run Q instructions (or [`SPIN`] in a
//!   row inside an excluded library, where OpenMP runtimes spin: their `pause` leaves QEMU's
//!   execution loop each time, so spinning costs several times an ordinary instruction), at
//!   `sched_yield`, at a futex wait and at the thread's exit. Every other system call keeps
//!   the turn.
//! * A futex wait gives the turn away only once the waiter is asleep in the kernel (its
//!   `/proc/self/task/TID/syscall` names the wait); the next holder checks that before it runs
//!   guest code, so the kernel queues waiters in turn order. A wait that does not sleep (the
//!   word changed) takes the turn back. A waiter rejoins the order when a `FUTEX_WAKE` of the
//!   guest wakes it (the return value says how many, the kernel wakes them first in, first
//!   out), or when the thread whose id it waits on exits (`pthread_join`): guest events, not
//!   the moment the host lets it run.
//! * A new thread joins the order at its parent's `clone` return. QEMU 9+ starts it on its own
//!   host thread, outside QEMU's execution loop, and there it waits until its parent has run a
//!   block since: when the first thread appears, QEMU flushes every translation on the parent
//!   right after the `clone`, stopping every vCPU, which a new thread already waiting for its
//!   turn inside a block would hold up. (QEMU 7.2 starts a thread on its parent, with no such
//!   moment: turns need QEMU 9.1 or later.)
//!
//! What cannot follow the guest alone is reported, not hidden (`DIR/schedule`, one line per
//! event with the thread and its instruction count): a system call that keeps the turn for
//! more than [`GRACE`] (a read from a terminal or a pipe, a sleep; the turn goes on without it
//! and the thread rejoins when the host returns it), a futex wait that ends without a wake of
//! the guest (a timeout, a signal), a signal handler returning (`rt_sigreturn`), a fork while
//! several threads run, and a turn holder that stops in guest code for [`STALL`]. The last is
//! QEMU's exclusive sections (an atomic step, a translation flush): they wait for every vCPU to
//! leave its execution loop, and a thread waiting for its turn inside a block callback never
//! does, so after [`STALL`] the waiters run their current block out of turn.

use bbv_plugin_contract::sysno::{generic, x86_64};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// A system call holding the turn this long gives it up.
const GRACE: Duration = Duration::from_millis(250);
/// A turn holder running guest code without a block for this long is held in an exclusive
/// section by the threads waiting in block callbacks.
const STALL: Duration = Duration::from_secs(1);
/// Longest wait for a new thread's first block, or for a futex waiter to fall asleep.
pub(super) const SETTLE: Duration = Duration::from_secs(5);
/// One sleep of a waiting thread (it re-reads the board after each).
const NAP: Duration = Duration::from_millis(5);
/// Most instructions in a row a thread runs inside an excluded library before its turn ends
/// (at most a sixteenth of the quantum).
const SPIN: u64 = 8192;
/// Events written to `DIR/schedule` at most (the count goes on).
pub(super) const MAX_REPORTED: u64 = 100;

/// Turns are on (cleared at the guest's exit and in a forked child).
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// The guest called `exit_group`: what other threads run until QEMU stops them depends on the
/// host, and is not counted.
static ENDED: AtomicBool = AtomicBool::new(false);
/// The latest instruction count a block started at (a holder that stops moving is seen by
/// the waiters).
static TICK: AtomicU64 = AtomicU64::new(0);
/// Where events go.
pub(super) static REPORT: OnceLock<PathBuf> = OnceLock::new();

/// The guest's system-call numbers this needs (they differ between x86-64 and the generic
/// table of AArch64 and RISC-V).
#[derive(Clone, Copy)]
pub struct Calls {
    futex: i64,
    exit: i64,
    exit_group: i64,
    clone: i64,
    sched_yield: i64,
    rt_sigreturn: i64,
    /// fork and vfork (x86-64 only).
    forks: [i64; 2],
}

impl Calls {
    /// x86-64's numbers.
    pub const X86_64: Calls = Calls {
        futex: x86_64::FUTEX,
        exit: x86_64::EXIT,
        exit_group: x86_64::EXIT_GROUP,
        clone: x86_64::CLONE,
        sched_yield: x86_64::SCHED_YIELD,
        rt_sigreturn: x86_64::RT_SIGRETURN,
        forks: [x86_64::FORK, x86_64::VFORK],
    };
    /// The generic table (AArch64, RISC-V).
    pub const GENERIC: Calls = Calls {
        futex: generic::FUTEX,
        exit: generic::EXIT,
        exit_group: generic::EXIT_GROUP,
        clone: generic::CLONE,
        sched_yield: generic::SCHED_YIELD,
        rt_sigreturn: generic::RT_SIGRETURN,
        forks: [-1, -1],
    };
}

static CALLS: OnceLock<Calls> = OnceLock::new();

const CLONE_VM: u64 = 0x100;
use bbv_plugin_contract::sysno::futex::{
    WAIT as FUTEX_WAIT, WAIT_BITSET as FUTEX_WAIT_BITSET, WAKE as FUTEX_WAKE,
    WAKE_BITSET as FUTEX_WAKE_BITSET,
};
const FUTEX_FLAGS: u64 =
    bbv_plugin_contract::sysno::futex::PRIVATE | bbv_plugin_contract::sysno::futex::CLOCK_REALTIME;

mod board;
mod futex;

pub use bbv_sift::feed::Sync;
use board::{board, seat, wake, wake_everyone, Board, Pending, State, WAKE};

/// The bits a futex operation waits or wakes with (its sixth argument for the bitset forms).
fn futex_bits(args: &[u64; 6]) -> u32 {
    match args[1] & !FUTEX_FLAGS {
        FUTEX_WAIT_BITSET | FUTEX_WAKE_BITSET => args[5] as u32,
        _ => u32::MAX,
    }
}

/// Turns on for this run: events go to `report`; `calls` are the guest's numbers.
pub fn install(report: PathBuf, calls: Calls) {
    let _ = REPORT.set(report);
    let _ = CALLS.set(calls);
    ACTIVE.store(true, Ordering::SeqCst);
}

/// The guest exits: says how many events went unwritten.
pub fn finish() {
    let b = board();
    if b.events > MAX_REPORTED {
        if let Some(path) = REPORT.get() {
            let line = format!("{} more events\n", b.events - MAX_REPORTED);
            let _ = std::fs::OpenOptions::new()
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }
}

/// Whether turns are on.
#[inline]
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// In a forked child (one thread, its parent's board copied mid-use): off.
pub fn forked() {
    ACTIVE.store(false, Ordering::SeqCst);
}

fn gettid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

/// The number of the thread starting on this host thread (outside QEMU's execution loop),
/// given at its parent's `clone` return, once the parent has run a block since (None when
/// that never came: numbered as it starts, reported).
pub fn number_of_new_thread() -> Option<u32> {
    let tid = gettid();
    let start = Instant::now();
    let mut b = board();
    loop {
        if let Some(i) = b.pending.iter().position(|p| p.tid == tid && p.released) {
            return Some(b.pending.remove(i).number);
        }
        if !active() || start.elapsed() >= SETTLE {
            b.lost(
                0,
                0,
                &format!("thread of host id {tid} started without its clone"),
            );
            return None;
        }
        b = WAKE
            .wait_timeout(b, NAP)
            .unwrap_or_else(|e| e.into_inner())
            .0;
    }
}

/// Why a wait for the turn ended.
#[derive(PartialEq)]
enum Got {
    Turn,
    /// Turns are off now (the guest exits).
    Off,
    /// The holder stalled in guest code: this thread runs its block out of turn.
    OutOfTurn,
}

/// One thread's side of the turns.
pub struct Turn {
    number: u32,
    quantum: u64,
    /// Instructions in this turn so far.
    used: u64,
    /// Instructions in a row inside excluded libraries.
    outside: u64,
    /// Their limit per turn.
    spin: u64,
    /// Instructions the thread has run.
    total: u64,
    holding: bool,
    /// Created a thread that waits for this one's next block.
    spawned: bool,
    /// Out of the order for good (exited; QEMU may still run a restarted exit).
    gone: bool,
    /// The system call in progress: number and arguments, and whether the thread held the
    /// turn when it entered it.
    call: (i64, [u64; 6]),
    entered_holding: bool,
}

impl Turn {
    /// Thread `number` starts, on its own host thread.
    pub fn new(number: u32, quantum: u64) -> Turn {
        let mut b = board();
        b.insert(number, 0);
        if b.turn.is_none() {
            b.turn = Some(number);
        }
        WAKE.notify_all();
        Turn {
            number,
            quantum: quantum.max(1),
            spin: (quantum / 16).clamp(1, SPIN),
            used: 0,
            outside: 0,
            total: 0,
            holding: false,
            spawned: false,
            gone: false,
            call: (-1, [0; 6]),
            entered_holding: false,
        }
    }

    /// A block of `insns` instructions starts, in an excluded library or not; false when it
    /// runs after the guest's exit and must not count.
    #[inline]
    pub fn on_block(&mut self, insns: u64, excluded: bool) -> bool {
        if !active() || self.gone {
            return !ENDED.load(Ordering::Relaxed);
        }
        if excluded {
            self.outside += insns;
        } else {
            self.outside = 0;
        }
        if !self.holding || self.used >= self.quantum || self.outside > self.spin || self.spawned {
            self.boundary();
        }
        self.used += insns;
        self.total += insns;
        // A plain store (no locked add on every block): waiters only look for a change.
        TICK.store(self.total, Ordering::Relaxed);
        !ENDED.load(Ordering::Relaxed)
    }

    #[cold]
    fn boundary(&mut self) {
        let mut b = board();
        self.arrive(&mut b);
        if self.spawned {
            // QEMU's flush after the clone is done: the new threads may start.
            self.spawned = false;
            let me = self.number;
            b.pending
                .iter_mut()
                .filter(|p| p.parent == me)
                .for_each(|p| p.released = true);
            WAKE.notify_all();
            if self.holding && self.used < self.quantum && self.outside <= self.spin {
                return;
            }
        }
        let total = self.total;
        match b.slot(self.number) {
            Some(s) if s.state == State::Exited => {
                // An exit QEMU restarted: the thread runs on outside the order.
                self.holding = false;
                self.gone = true;
                return;
            }
            Some(s) => {
                s.at = total;
                // A system call whose return never came (QEMU restarted it).
                if !s.eligible() {
                    s.state = State::Ready;
                }
            }
            None => {}
        }
        if self.holding && b.turn == Some(self.number) {
            b.pass(self.number);
        }
        self.outside = 0;
        let got = self.wait(b, true);
        self.holding = got == Got::Turn;
        self.used = 0;
    }

    /// The thread is running on its own host thread (its first block or system call).
    fn arrive(&self, b: &mut Board) {
        if let Some(s) = b.slot(self.number).filter(|s| !s.arrived) {
            s.arrived = true;
            s.tid = gettid();
            WAKE.notify_all();
        }
    }

    /// Waits until the thread holds the turn (in a block callback: `in_block`).
    fn wait(&self, mut b: MutexGuard<'static, Board>, in_block: bool) -> Got {
        let me = self.number;
        let mut tick = TICK.load(Ordering::Relaxed);
        let mut moved = Instant::now();
        loop {
            if !active() {
                return Got::Off;
            }
            if b.turn.is_none() && b.slots.iter().any(|s| s.number == me && s.eligible()) {
                b.turn = Some(me);
            }
            if b.turn == Some(me) {
                match futex::settle(b) {
                    Some(back) => b = back,
                    None => return Got::Turn,
                }
                continue;
            }
            b = seat(me)
                .wait_timeout(b, NAP)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            let Some(holder) = b.turn else { continue };
            match b.state(holder) {
                Some(State::Call { since }) if since.elapsed() >= GRACE => {
                    b.set(holder, State::Away);
                    b.pass(holder);
                    let at = b.at(holder);
                    b.lost(
                        holder,
                        at,
                        "a system call kept the turn too long; the turn went on",
                    );
                }
                Some(State::Ready)
                    if in_block
                        && !b.settling
                        && b.slots.iter().any(|s| s.number == holder && s.arrived) =>
                {
                    let now = TICK.load(Ordering::Relaxed);
                    if now != tick {
                        tick = now;
                        moved = Instant::now();
                    } else if moved.elapsed() >= STALL {
                        b.lost(
                            me,
                            self.total,
                            "ran a block out of turn (QEMU waited for every thread)",
                        );
                        return Got::OutOfTurn;
                    }
                }
                _ => moved = Instant::now(),
            }
        }
    }

    /// The thread enters system call `nr` with arguments `args`; what Sniper's model of it
    /// needs at once (a thread's exit).
    pub fn syscall(&mut self, nr: i64, args: [u64; 6]) -> Option<Sync> {
        if !active() {
            return None;
        }
        let calls = CALLS.get()?;
        if self.gone {
            return None;
        }
        self.call = (nr, args);
        self.entered_holding = self.holding;
        let me = self.number;
        let mut b = board();
        self.arrive(&mut b);
        let total = self.total;
        if let Some(s) = b.slot(me) {
            s.at = total;
        }
        if nr == calls.exit_group {
            ENDED.store(true, Ordering::SeqCst);
            ACTIVE.store(false, Ordering::SeqCst);
            wake_everyone();
        } else if nr == calls.exit {
            return self.leave(&mut b);
        } else if nr == calls.futex
            && matches!(args[1] & !FUTEX_FLAGS, FUTEX_WAIT | FUTEX_WAIT_BITSET)
        {
            let bits = futex_bits(&args);
            let (addr, op, val) = (args[0], args[1], args[2] as u32);
            b.set(
                me,
                State::Entering {
                    addr,
                    op,
                    val,
                    bits,
                },
            );
            b.pass(me);
            self.holding = false;
        } else if nr == calls.rt_sigreturn {
            b.lost(me, self.total, "a signal handler returned");
            b.set(
                me,
                State::Call {
                    since: Instant::now(),
                },
            );
        } else if calls.forks.contains(&nr) || (nr == calls.clone && args[0] & CLONE_VM == 0) {
            let live = b.slots.iter().filter(|s| s.state != State::Exited).count();
            if live > 1 {
                b.lost(
                    me,
                    self.total,
                    "forked while several threads ran (QEMU stops them all)",
                );
                ACTIVE.store(false, Ordering::SeqCst);
                wake_everyone();
            }
            b.set(
                me,
                State::Call {
                    since: Instant::now(),
                },
            );
        } else if nr == calls.clone {
            b.set(me, State::Spawning);
        } else {
            b.set(
                me,
                State::Call {
                    since: Instant::now(),
                },
            );
        }
        None
    }

    /// The thread's system call returns `ret`. `created` numbers a thread its `clone` created.
    /// What Sniper's model of the call needs (a wait, a wake, a thread created).
    pub fn syscall_ret(&mut self, ret: i64, created: impl FnOnce() -> u32) -> Option<Sync> {
        if !active() || self.gone {
            return None;
        }
        let calls = CALLS.get()?;
        let (nr, args) = self.call;
        self.call = (-1, [0; 6]);
        let me = self.number;
        let mut b = board();
        let mut sync = None;
        match b.state(me) {
            Some(State::Entering { addr, val, .. }) => {
                // The wait did not sleep: nobody ran meanwhile, the turn comes back.
                sync = Some(Sync::Waited {
                    addr,
                    val,
                    woken_by: None,
                });
                b.set(me, State::Ready);
                if self.entered_holding {
                    b.turn = Some(me);
                    self.holding = true;
                }
                WAKE.notify_all();
            }
            Some(State::Asleep {
                addr,
                val,
                bits,
                queued,
                ..
            }) => {
                let (woken, waited) = self.woken(b, (addr, val, bits, queued), ret);
                b = woken;
                sync = Some(waited);
            }
            Some(State::Woken(id)) if nr == calls.futex => {
                // Woken by the guest's wake `id` (or its joined thread's exit) before the
                // kernel returned it.
                sync = Some(Sync::Waited {
                    addr: args[0],
                    val: args[2] as u32,
                    woken_by: Some(id),
                });
                b.set(me, State::Ready);
            }
            Some(State::Spawning) if ret > 0 => {
                // In the order from now on, whenever its host thread starts.
                let number = created();
                b.insert(number, ret as i32);
                b.pending.push(Pending {
                    tid: ret as i32,
                    number,
                    parent: me,
                    released: false,
                });
                self.spawned = true;
                b.set(me, State::Ready);
                sync = Some(Sync::Created(number));
            }
            Some(State::Call { .. }) if nr == calls.futex && ret > 0 => {
                let op = args[1] & !FUTEX_FLAGS;
                if op == FUTEX_WAKE || op == FUTEX_WAKE_BITSET {
                    let (addr, bits) = (args[0], futex_bits(&args));
                    let id = wake(&mut b, me, self.total, addr, bits, ret as u64);
                    let woken = u32::try_from(ret).unwrap_or(u32::MAX);
                    sync = Some(Sync::Woke { addr, woken, id });
                }
                b.set(me, State::Ready);
            }
            Some(State::Exited) | None => return None,
            _ => b.set(me, State::Ready),
        }
        if nr == calls.sched_yield && b.turn == Some(me) {
            b.pass(me);
        }
        if b.turn != Some(me) || !self.holding {
            let got = self.wait(b, false);
            self.holding = got == Got::Turn;
            self.used = 0;
        }
        sync
    }

    /// A futex wait on `addr` expecting `val` (`bits`, `queued`-th asleep) returned `ret`:
    /// the waker's return says who woke it, and may come after this one. Ready again; the
    /// wait for Sniper's model.
    fn woken(
        &self,
        mut b: MutexGuard<'static, Board>,
        (addr, val, bits, queued): (u64, u32, u32, u64),
        ret: i64,
    ) -> (MutexGuard<'static, Board>, Sync) {
        let me = self.number;
        let back = State::Asleep {
            addr,
            val,
            bits,
            queued,
            back: true,
        };
        b.set(me, back);
        let start = Instant::now();
        while ret == 0 && b.state(me) == Some(back) && active() && start.elapsed() < SETTLE {
            b = WAKE
                .wait_timeout(b, NAP)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        let woken_by = match b.state(me) {
            Some(State::Woken(id)) => Some(id),
            _ => {
                let why = format!(
                    "a futex wait on {addr:#x} ended without a wake of the guest's ({ret})"
                );
                b.lost(me, self.total, &why);
                None
            }
        };
        b.set(me, State::Ready);
        let waited = Sync::Waited {
            addr,
            val,
            woken_by,
        };
        (b, waited)
    }

    /// The thread exits: out of the order for good. Threads joining it (waiting on its id, as
    /// `pthread_join` does; QEMU wakes them) rejoin, woken by one wake of the exit's.
    fn leave(&mut self, b: &mut Board) -> Option<Sync> {
        let me = self.number;
        if b.state(me) == Some(State::Exited) {
            return None;
        }
        let tid = b.slots.iter().find(|s| s.number == me).map_or(0, |s| s.tid);
        let id = b.new_wake();
        let mut joiners: Vec<(u64, u32)> = Vec::new();
        for s in b.slots.iter_mut() {
            if let State::Asleep { addr, val, .. } = s.state {
                if tid != 0 && val == tid as u32 {
                    s.state = State::Woken(id);
                    match joiners.iter_mut().find(|j| j.0 == addr) {
                        Some(j) => j.1 += 1,
                        None => joiners.push((addr, 1)),
                    }
                }
            }
        }
        b.set(me, State::Exited);
        b.pass(me);
        self.holding = false;
        self.gone = true;
        WAKE.notify_all();
        Some(Sync::Exited { joiners, id })
    }

    /// The thread's vCPU goes away.
    pub fn exit(&mut self) -> Option<Sync> {
        if active() && !self.gone {
            let mut b = board();
            return self.leave(&mut b);
        }
        None
    }
}
