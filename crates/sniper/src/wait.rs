//! Waiting for a Sniper that has all its input and must end on its own.
//!
//! A simulation whose streams were cut short can deadlock: a simulated thread waits for a
//! wake that never comes, every other has ended, and Sniper waits with it, forever, using no
//! CPU. So while waiting, the CPU time of Sniper's process group is watched; a Sniper that
//! used none for the stall period is stopped and reported, not waited for.

use std::process::{Child, ExitStatus};
use std::time::{Duration, Instant};

/// How long Sniper may use no CPU at all, once its streams are written, before it is taken
/// as deadlocked. Far more than a loaded host leaves a runnable process unscheduled.
pub const STALL: Duration = Duration::from_secs(60);

/// How a waited-for Sniper ended, with the CPU seconds it and the processes it waited for
/// (the simulator) used.
pub(crate) struct Waited {
    /// Its exit status; None when it stalled and was killed.
    pub status: Option<ExitStatus>,
    pub cpu: f64,
}

/// Waits for `child` (run-sniper, leader of its own process group), killing the group once
/// it used no CPU for `stall`.
pub(crate) fn wait(child: Child, stall: Duration) -> std::io::Result<Waited> {
    use std::os::unix::process::ExitStatusExt;
    let pid = child.id() as i32;
    let mut last = group_ticks(pid);
    let mut changed = Instant::now();
    let mut looked = Instant::now();
    let mut stalled = false;
    loop {
        let mut status = 0;
        // SAFETY: a zeroed rusage for wait4 to fill.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        let flags = if stalled { 0 } else { libc::WNOHANG };
        // SAFETY: our own child, waited for here only (std's Child is not waited after this).
        let r = unsafe { libc::wait4(pid, &mut status, flags, &mut ru) };
        if r == pid {
            let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
            return Ok(Waited {
                status: (!stalled).then(|| ExitStatus::from_raw(status)),
                cpu: secs(ru.ru_utime) + secs(ru.ru_stime),
            });
        }
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(e);
            }
            continue;
        }
        std::thread::sleep(Duration::from_millis(50));
        if looked.elapsed() < Duration::from_secs(1) {
            continue;
        }
        looked = Instant::now();
        let now = group_ticks(pid);
        if now != last {
            (last, changed) = (now, Instant::now());
        } else if changed.elapsed() >= stall {
            // SAFETY: the group Sniper was started in (its id is the child's).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            stalled = true;
        }
    }
}

/// The CPU clock ticks the live processes of group `pgid` used so far (from /proc).
fn group_ticks(pgid: i32) -> u64 {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            e.file_name()
                .to_string_lossy()
                .bytes()
                .all(|b| b.is_ascii_digit())
        })
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter_map(|s| stat_ticks(&s).filter(|&(g, _)| g == pgid))
        .map(|(_, t)| t)
        .sum()
}

/// A /proc/PID/stat line's process group and user + system ticks.
fn stat_ticks(stat: &str) -> Option<(i32, u64)> {
    // The command name, in parentheses, may hold spaces and parentheses itself.
    let rest = &stat[stat.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state, ppid, pgrp, ..., utime (14th field of the line), stime.
    let pgrp = f.get(2)?.parse().ok()?;
    let ticks = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
    Some((pgrp, ticks))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_lines_give_group_and_ticks() {
        let line = "4892 (sniper (x) 1) S 4635 4630 4630 0 -1 4194560 100 0 0 0 \
                    1234 56 0 0 20 0 5 0 100 1000 10";
        assert_eq!(stat_ticks(line), Some((4630, 1290)));
        assert_eq!(stat_ticks("12 (x) S 1"), None);
        assert_eq!(stat_ticks("no name"), None);
    }

    #[test]
    fn a_process_that_sleeps_is_stopped_and_one_that_works_is_not() {
        use std::os::unix::process::CommandExt;
        let spawn = |script: &str| {
            std::process::Command::new("bash")
                .args(["-c", script])
                .process_group(0)
                .spawn()
                .unwrap()
        };
        let start = Instant::now();
        let w = wait(spawn("sleep 30"), Duration::from_secs(2)).unwrap();
        assert!(w.status.is_none());
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        // A child that works for longer than the stall period ends on its own.
        let busy = "while [ $SECONDS -lt 4 ]; do :; done; exit 3";
        let w = wait(spawn(busy), Duration::from_secs(2)).unwrap();
        assert_eq!(w.status.and_then(|s| s.code()), Some(3));
        assert!(w.cpu > 0.0);
    }
}
