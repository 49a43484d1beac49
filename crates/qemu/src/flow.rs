//! Flow control of a multi-threaded guest (`flow=Q`): no running thread gets more than Q
//! instructions ahead of the slowest running one.
//!
//! Without it, how far each thread has got when a global (PC, count) marker is reached depends
//! on how the host happened to schedule them, so a region's length on replay drifts by tens of
//! percent for threads that do not synchronise often (xz, pigz workers). With it, the threads
//! advance in step in every run, as LoopPoint's tools run them (Pin's flow control), and the
//! markers mean the same work each time.
//!
//! A thread in a system call does not run: it may wait there for another thread (a futex, a
//! pipe), so it leaves the board at the call and comes back at the return, no further behind
//! than the slowest running thread (its time in the kernel is not work it owes). A thread that
//! is ahead waits on a condition variable. QEMU may need every vCPU out of its execution loop
//! (a translation flush, an exclusive atomic step) while one of them waits here, which would
//! block the thread being waited for: so a wait gives up when the slowest thread has not moved
//! for [`STALL`], and the run goes on unpaced for that moment rather than hang.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Longest wait for a slowest thread that does not move.
const STALL: Duration = Duration::from_millis(100);
/// One sleep of a waiting thread (it re-reads the board after each).
const NAP: Duration = Duration::from_millis(2);

/// Each known thread's progress (instructions, rebased at system-call returns) and whether it
/// is running guest code now.
struct Board {
    threads: Vec<Entry>,
}

struct Entry {
    number: u32,
    progress: u64,
    running: bool,
}

impl Board {
    fn entry(&mut self, number: u32) -> &mut Entry {
        match self.threads.iter().position(|e| e.number == number) {
            Some(i) => &mut self.threads[i],
            None => {
                self.threads.push(Entry {
                    number,
                    progress: 0,
                    running: false,
                });
                self.threads.last_mut().expect("just pushed")
            }
        }
    }

    /// The slowest running thread other than `number`.
    fn slowest_other(&self, number: u32) -> Option<u64> {
        self.threads
            .iter()
            .filter(|e| e.running && e.number != number)
            .map(|e| e.progress)
            .min()
    }

    /// Where a thread joining now starts: level with the slowest running thread, or with the
    /// furthest thread when none runs.
    fn level(&self, number: u32) -> u64 {
        self.slowest_other(number)
            .unwrap_or_else(|| self.threads.iter().map(|e| e.progress).max().unwrap_or(0))
    }
}

static BOARD: Mutex<Board> = Mutex::new(Board {
    threads: Vec::new(),
});
static WAKE: Condvar = Condvar::new();
/// Threads sleeping in [`Pace::check`] (so that others notify only when someone listens).
static WAITERS: AtomicU32 = AtomicU32::new(0);

fn board() -> MutexGuard<'static, Board> {
    BOARD.lock().unwrap_or_else(|e| e.into_inner())
}

/// One thread's pace: its progress and where it next looks at the board.
pub struct Pace {
    number: u32,
    quantum: u64,
    progress: u64,
    next: u64,
    /// In a system call.
    in_syscall: bool,
    /// In an excluded library: the OpenMP runtimes spin at barriers, and a spinning thread
    /// that counted as progress would be held back waiting for the very thread it waits for.
    outside: bool,
}

impl Pace {
    /// Thread `number` starts (on its creator's host thread): level with the running threads.
    pub fn new(number: u32, quantum: u64) -> Pace {
        let mut b = board();
        let progress = b.level(number);
        let e = b.entry(number);
        e.progress = progress;
        e.running = true;
        Pace {
            number,
            quantum: quantum.max(1),
            progress,
            next: progress + step(quantum),
            in_syscall: false,
            outside: false,
        }
    }

    /// The thread runs a block of `insns` instructions, in an excluded library or not.
    #[inline]
    pub fn on_block(&mut self, insns: u64, excluded: bool) {
        if excluded != self.outside {
            self.outside = excluded;
            self.update();
        }
        if excluded {
            return;
        }
        self.progress += insns;
        if self.progress >= self.next {
            self.check();
        }
    }

    /// Publishes the progress and waits while the thread is more than a quantum ahead.
    #[cold]
    fn check(&mut self) {
        self.next = self.progress + step(self.quantum);
        let mut b = board();
        b.entry(self.number).progress = self.progress;
        if WAITERS.load(Ordering::Relaxed) > 0 {
            WAKE.notify_all();
        }
        let mut seen = b.slowest_other(self.number);
        let mut since = Instant::now();
        while let Some(slowest) = seen {
            if self.progress <= slowest + self.quantum {
                break;
            }
            WAITERS.fetch_add(1, Ordering::Relaxed);
            b = WAKE
                .wait_timeout(b, NAP)
                .unwrap_or_else(|e| e.into_inner())
                .0;
            WAITERS.fetch_sub(1, Ordering::Relaxed);
            let now = b.slowest_other(self.number);
            if now != seen {
                seen = now;
                since = Instant::now();
            } else if since.elapsed() >= STALL {
                break;
            }
        }
    }

    /// The thread enters (`entering`) or returns from a system call.
    pub fn syscall(&mut self, entering: bool) {
        self.in_syscall = entering;
        self.update();
    }

    /// The thread exits: it never holds the others back again.
    pub fn exit(&mut self) {
        self.in_syscall = true;
        self.update();
    }

    /// Puts the thread on the board as running or not. A thread that stops running no longer
    /// holds the others back; one that runs again comes back no further behind than the
    /// slowest running thread (its time away is not work it owes).
    #[cold]
    fn update(&mut self) {
        let running = !self.in_syscall && !self.outside;
        let mut b = board();
        if running {
            self.progress = self.progress.max(b.slowest_other(self.number).unwrap_or(0));
            self.next = self.progress + step(self.quantum);
        }
        let e = b.entry(self.number);
        if e.running == running {
            return;
        }
        e.progress = self.progress;
        e.running = running;
        if !running && WAITERS.load(Ordering::Relaxed) > 0 {
            WAKE.notify_all();
        }
    }
}

/// Instructions between two looks at the board: a fraction of the quantum, so that the
/// slowest thread's progress reaches the waiting ones well before they could move on.
fn step(quantum: u64) -> u64 {
    (quantum / 4).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The board is one per process: these tests take turns.
    static TURN: Mutex<()> = Mutex::new(());

    #[test]
    fn a_thread_ahead_waits_for_the_slowest_running_one_but_not_for_one_in_a_system_call() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut a = Pace::new(9001, 1000);
        let mut b = Pace::new(9002, 1000);
        // b is in a system call: a runs on unhindered.
        b.syscall(true);
        assert_eq!(board().slowest_other(9001), None);
        a.on_block(5000, false);
        // b comes back level with a (the slowest running other), not 5000 behind.
        b.syscall(false);
        assert_eq!(b.progress, a.progress);
        // a moves more than a quantum ahead of b, which runs: a waits until b catches up.
        let moved = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flag = moved.clone();
        let h = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            flag.store(true, Ordering::SeqCst);
            for _ in 0..16 {
                b.on_block(250, false);
            }
            b.exit();
        });
        a.on_block(5000, false);
        assert!(moved.load(Ordering::SeqCst), "a went on before b moved");
        h.join().unwrap();
        a.exit();
    }

    #[test]
    fn a_thread_in_an_excluded_library_neither_counts_nor_holds_the_others_back() {
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let mut a = Pace::new(9101, 1000);
        let mut b = Pace::new(9102, 1000);
        let start = a.progress;
        a.on_block(100, true);
        assert_eq!(a.progress, start, "spinning in the runtime is not progress");
        assert_eq!(board().slowest_other(9102), None);
        b.on_block(5000, false);
        // Back in the program's code, a is level with b.
        a.on_block(10, false);
        assert_eq!(a.progress, b.progress + 10);
        a.exit();
        b.exit();
    }
}
