//! Futex waits seen from outside: whether a waiter sleeps in the kernel yet, read from
//! `/proc/self/task/TID/syscall`, so that the next turn starts only once it does.

use std::sync::MutexGuard;
use std::time::{Duration, Instant};

use super::board::{board, Board, State};
use super::SETTLE;

/// The holder, before it runs guest code: every futex waiter asleep in the kernel first.
/// Returns the board when something changed (the turn may have gone back to a waiter
/// whose wait did not sleep), None when the holder may run.
pub(super) fn settle(b: MutexGuard<'static, Board>) -> Option<MutexGuard<'static, Board>> {
    let mut b = b;
    let pending: Vec<(u32, i32, State)> = b
        .slots
        .iter()
        .filter(|s| matches!(s.state, State::Entering { .. }))
        .map(|s| (s.number, s.tid, s.state))
        .collect();
    if pending.is_empty() {
        return None;
    }
    b.settling = true;
    drop(b);
    let start = Instant::now();
    let mut pause = Duration::from_micros(10);
    let mut asleep = Vec::new();
    loop {
        for &(number, tid, state) in &pending {
            if let State::Entering { addr, op, val, .. } = state {
                if !asleep.contains(&number) && in_futex_wait(tid, addr, op, val) {
                    asleep.push(number);
                }
            }
        }
        let mut b = board();
        let waiting = pending.iter().filter(|(n, ..)| {
            matches!(b.state(*n), Some(State::Entering { .. })) && !asleep.contains(n)
        });
        let late = waiting.count() > 0;
        if !late || start.elapsed() >= SETTLE {
            for &(number, ..) in &pending {
                if let Some(State::Entering {
                    addr, val, bits, ..
                }) = b.state(number)
                {
                    if !asleep.contains(&number) {
                        let at = b.at(number);
                        let tid = b
                            .slots
                            .iter()
                            .find(|s| s.number == number)
                            .map_or(0, |s| s.tid);
                        let seen =
                            std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall"))
                                .unwrap_or_default();
                        let why = format!(
                            "a futex wait on {addr:#x} was neither asleep nor back in time (host thread {tid}: {})",
                            seen.trim()
                        );
                        b.lost(number, at, &why);
                    }
                    let queued = b.queued;
                    b.queued += 1;
                    let state = State::Asleep {
                        addr,
                        val,
                        bits,
                        queued,
                        back: false,
                    };
                    b.set(number, state);
                }
            }
            b.settling = false;
            return Some(b);
        }
        drop(b);
        // The waiter needs a core to get into the kernel: back off rather than poll it out.
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(1));
    }
}

/// Whether host thread `tid` sleeps in the futex wait on guest word `addr` (QEMU passes the
/// guest's operation and value through; the host address differs from the guest's by QEMU's
/// page-aligned guest base).
fn in_futex_wait(tid: i32, addr: u64, op: u64, val: u32) -> bool {
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")) else {
        return false;
    };
    let mut w = text.split_whitespace();
    let hex =
        |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok());
    let nr: Option<i64> = w.next().and_then(|s| s.parse().ok());
    // The host's futex is x86-64's whatever the guest's table.
    nr == Some(bbv_plugin_contract::sysno::x86_64::FUTEX)
        && hex(w.next()).is_some_and(|a| a & 0xfff == addr & 0xfff)
        && hex(w.next()) == Some(op)
        && hex(w.next()).map(|v| v as u32) == Some(val)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::turns::gettid;
    use std::sync::atomic::Ordering;

    #[test]
    fn a_thread_asleep_in_a_futex_is_seen_in_proc() {
        let word = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(7));
        let w = word.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || {
            tx.send(gettid()).unwrap();
            // SAFETY: a futex wait on a live word, woken below.
            unsafe {
                libc::syscall(
                    libc::SYS_futex,
                    w.as_ptr(),
                    128u64,
                    7u32,
                    0usize,
                    0usize,
                    0u32,
                )
            };
        });
        let tid = rx.recv().unwrap();
        let addr = word.as_ptr() as u64;
        let start = Instant::now();
        while !in_futex_wait(tid, addr, 128, 7) {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "never seen asleep"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(!in_futex_wait(tid, addr, 128, 8), "another value");
        word.store(8, Ordering::SeqCst);
        // SAFETY: wakes the waiter above.
        unsafe { libc::syscall(libc::SYS_futex, word.as_ptr(), 129u64, 1u32) };
        h.join().unwrap();
    }
}
