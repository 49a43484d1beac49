//! Waiting for a Sniper that has all its input and must end on its own.
//!
//! A simulation whose streams were cut short can deadlock: a simulated thread waits for a
//! wake that never comes, every other has ended, and Sniper waits with it, forever, using no
//! CPU. So while waiting, the CPU time of Sniper's process group is watched
//! ([`bbv_sift::watch::Stall`]); a Sniper that used none for the stall period is stopped and
//! reported, not waited for.

use std::process::{Child, ExitStatus};
use std::time::Duration;

use bbv_sift::watch::Stall;

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
    let mut watch = Stall::new(pid, stall);
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
        if watch.stalled() {
            // SAFETY: the group Sniper was started in (its id is the child's).
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            stalled = true;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
