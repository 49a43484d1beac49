//! The board every thread's turn is decided on: the threads in creation order, whose turn it
//! is, and the futex waits in the order the kernel queued them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Instant;

use super::{MAX_REPORTED, REPORT};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum State {
    /// Runs guest code when it holds the turn.
    Ready,
    /// In a system call that keeps the turn when it holds it.
    Call {
        since: Instant,
    },
    /// Creating a thread: waits for it to reach its first block, holding the turn.
    Spawning,
    /// Entering a futex wait, not yet seen asleep.
    Entering {
        addr: u64,
        op: u64,
        val: u32,
        bits: u32,
    },
    /// Asleep in a futex wait, `queued`-th of all waits; `back` once the kernel returned it
    /// (before its waker's own return says whom it woke).
    Asleep {
        addr: u64,
        val: u32,
        bits: u32,
        queued: u64,
        back: bool,
    },
    /// Woken by the guest (by the wake of this id, see [`Board::wakes`]): eligible, back in
    /// guest code once the host returns it.
    Woken(u64),
    /// Lost the turn in a system call that did not return in time.
    Away,
    Exited,
}

pub(super) struct Slot {
    pub(super) number: u32,
    pub(super) tid: i32,
    pub(super) state: State,
    /// Reached its first block.
    pub(super) arrived: bool,
    /// Instructions run as of its last turn boundary or system call (for reports).
    pub(super) at: u64,
}

impl Slot {
    pub(super) fn eligible(&self) -> bool {
        matches!(self.state, State::Ready | State::Woken(_))
    }
}

pub(super) struct Board {
    /// In creation order (ascending numbers).
    pub(super) slots: Vec<Slot>,
    pub(super) turn: Option<u32>,
    pub(super) queued: u64,
    /// A holder is checking futex waiters (it runs no guest code meanwhile).
    pub(super) settling: bool,
    /// Threads a `clone` returned but not yet started (QEMU 9+ starts a thread on its own
    /// host thread, in whatever order the host runs them), with the number their parent gave
    /// them: they start once their parent has run a block since (`released`).
    pub(super) pending: Vec<Pending>,
    pub(super) events: u64,
    /// Wakes of the guest so far (each names the waiters it woke, for Sniper's model).
    pub(super) wakes: u64,
}

pub(super) static BOARD: Mutex<Board> = Mutex::new(Board {
    slots: Vec::new(),
    turn: None,
    queued: 0,
    settling: false,
    pending: Vec::new(),
    events: 0,
    wakes: 0,
});

pub(super) struct Pending {
    pub(super) tid: i32,
    pub(super) number: u32,
    pub(super) parent: u32,
    pub(super) released: bool,
}
pub(super) static WAKE: Condvar = Condvar::new();
/// Where thread N waits for its turn (`SEATS[N % 64]`): a turn change wakes the new holder
/// alone, not every waiting thread.
pub(super) static SEATS: [Condvar; 64] = [const { Condvar::new() }; 64];

/// The condition variable thread `number` waits for its turn on.
pub(super) fn seat(number: u32) -> &'static Condvar {
    &SEATS[number as usize % SEATS.len()]
}

/// Wakes every thread, waiting for its turn or for anything else (turns end, a fork).
pub(super) fn wake_everyone() {
    WAKE.notify_all();
    SEATS.iter().for_each(Condvar::notify_all);
}

pub(super) fn board() -> MutexGuard<'static, Board> {
    BOARD.lock().unwrap_or_else(|e| e.into_inner())
}

impl Board {
    pub(super) fn slot(&mut self, number: u32) -> Option<&mut Slot> {
        self.slots.iter_mut().find(|s| s.number == number)
    }

    pub(super) fn state(&self, number: u32) -> Option<State> {
        self.slots
            .iter()
            .find(|s| s.number == number)
            .map(|s| s.state)
    }

    pub(super) fn set(&mut self, number: u32, state: State) {
        if let Some(s) = self.slot(number) {
            s.state = state;
        }
    }

    /// The first eligible thread after `number` in creation order, round the ring (`number`
    /// itself last).
    pub(super) fn next_after(&self, number: u32) -> Option<u32> {
        let after = self.slots.iter().filter(|s| s.number > number);
        let before = self.slots.iter().filter(|s| s.number <= number);
        after.chain(before).find(|s| s.eligible()).map(|s| s.number)
    }

    /// Puts thread `number` (host thread `tid`, 0 when not yet known) in the order, Ready, if
    /// it is not there yet.
    pub(super) fn insert(&mut self, number: u32, tid: i32) {
        if self.slot(number).is_none() {
            let at = self.slots.partition_point(|s| s.number < number);
            let slot = Slot {
                number,
                tid,
                state: State::Ready,
                arrived: false,
                at: 0,
            };
            self.slots.insert(at, slot);
        }
    }

    /// `number`'s turn ends.
    pub(super) fn pass(&mut self, number: u32) {
        if self.turn == Some(number) {
            self.turn = self.next_after(number);
            if let Some(next) = self.turn {
                seat(next).notify_all();
            }
        }
    }

    /// A new wake's id.
    pub(super) fn new_wake(&mut self) -> u64 {
        self.wakes += 1;
        self.wakes
    }

    /// Instructions `number` had run at its last boundary.
    pub(super) fn at(&self, number: u32) -> u64 {
        self.slots
            .iter()
            .find(|s| s.number == number)
            .map_or(0, |s| s.at)
    }

    /// Writes one event where the host reads it.
    pub(super) fn lost(&mut self, number: u32, at: u64, why: &str) {
        self.events += 1;
        if self.events > MAX_REPORTED {
            return;
        }
        if let Some(path) = REPORT.get() {
            let line = format!("thread {number} instruction {at}: {why}\n");
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }
}

/// A `FUTEX_WAKE` of `addr` by `me` woke `n` threads: the first `n` waiting on it whose bits
/// meet `bits`, in the order they fell asleep. The wake's id.
pub(super) fn wake(b: &mut Board, me: u32, at: u64, addr: u64, bits: u32, n: u64) -> u64 {
    let mut waiting: Vec<(u64, u32)> = b
        .slots
        .iter()
        .filter_map(|s| match s.state {
            State::Asleep {
                addr: a,
                bits: m,
                queued,
                ..
            } if a == addr && m & bits != 0 => Some((queued, s.number)),
            _ => None,
        })
        .collect();
    waiting.sort_unstable();
    if (waiting.len() as u64) < n {
        let mut why = String::new();
        let _ = write!(
            why,
            "a futex wake of {addr:#x} woke {n}, {} seen waiting",
            waiting.len()
        );
        b.lost(me, at, &why);
    }
    let id = b.new_wake();
    for &(_, number) in waiting.iter().take(n as usize) {
        b.set(number, State::Woken(id));
    }
    WAKE.notify_all();
    id
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A board of threads 1, 2, ... in `states`, thread 1 holding the turn.
    fn board_of(states: &[State]) -> Board {
        let slots = (1..).zip(states).map(|(number, &state)| Slot {
            number,
            tid: 0,
            state,
            arrived: true,
            at: 0,
        });
        Board {
            slots: slots.collect(),
            turn: Some(1),
            queued: 0,
            settling: false,
            pending: Vec::new(),
            events: 0,
            wakes: 0,
        }
    }

    #[test]
    fn the_ring_passes_to_the_next_eligible_thread_in_creation_order() {
        let mut b = board_of(&[State::Ready, State::Away, State::Woken(1)]);
        b.pass(1);
        assert_eq!(b.turn, Some(3));
        b.pass(3);
        assert_eq!(b.turn, Some(1));
        b.set(1, State::Exited);
        b.set(3, State::Exited);
        b.pass(1);
        assert_eq!(b.turn, None);
    }

    #[test]
    fn wakes_follow_the_order_of_sleep_and_the_bits() {
        let asleep = |addr, bits, queued| State::Asleep {
            addr,
            val: 0,
            bits,
            queued,
            back: false,
        };
        let mut b = board_of(&[
            State::Ready,
            asleep(0x10, 1, 5),
            asleep(0x10, 3, 2),
            asleep(0x20, 1, 1),
            asleep(0x10, 2, 3),
        ]);
        assert_eq!(wake(&mut b, 1, 0, 0x10, 1, 1), 1);
        assert_eq!(
            b.state(3),
            Some(State::Woken(1)),
            "first asleep with a matching bit"
        );
        assert!(matches!(b.state(2), Some(State::Asleep { .. })));
        assert_eq!(wake(&mut b, 1, 0, 0x10, u32::MAX, 2), 2, "one id per wake");
        assert_eq!(b.state(5), Some(State::Woken(2)));
        assert_eq!(b.state(2), Some(State::Woken(2)));
        assert!(matches!(b.state(4), Some(State::Asleep { .. })));
        assert_eq!(b.events, 0);
    }
}
