//! Watching Sniper's processes from the outside: whether one still runs, and whether its
//! process group has used any CPU lately.
//!
//! A Sniper whose simulated threads wait for one another forever (a wake that never comes, a
//! barrier on a thread that ended) uses no CPU at all, yet runs: nothing but its CPU time
//! tells it from a Sniper that is slow. Both the relays ([`crate::relay`], while every
//! stream waits for Sniper) and the wait for its end (bbv-sniper) count a Sniper that used no
//! CPU for [`STALL`] as deadlocked.

use std::time::{Duration, Instant};

/// How long Sniper may use no CPU at all while it has all it needs to go on (its streams
/// written, or every stream waiting for it) before it is taken as deadlocked. Far more than a
/// loaded host leaves a runnable process unscheduled.
pub const STALL: Duration = Duration::from_secs(60);

/// Whether process `pid` still runs (not ended, not a zombie waiting to be reaped).
pub fn running(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, r)| !r.trim_start().starts_with('Z'))
        })
        .unwrap_or(false)
}

/// The CPU clock ticks the live processes of group `pgid` used so far (from /proc).
pub fn group_ticks(pgid: i32) -> u64 {
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

/// A process group's CPU time sampled once a second: stalled once `stall`'s worth of
/// consecutive samples saw it unchanged. Samples are counted, not the time between the first
/// and the last, so that a watcher stopped for a while (the whole job suspended) does not take
/// the pause for a stall.
pub struct Stall {
    pgid: i32,
    needed: u32,
    last: Option<u64>,
    same: u32,
    looked: Option<Instant>,
}

impl Stall {
    /// A watch on group `pgid` that calls `stall` of unchanged CPU time a stall.
    pub fn new(pgid: i32, stall: Duration) -> Stall {
        Stall {
            pgid,
            needed: stall.as_secs().max(1) as u32,
            last: None,
            same: 0,
            looked: None,
        }
    }

    /// Takes a sample if a second has passed since the last one; whether the group has now
    /// used no CPU for the stall period.
    pub fn stalled(&mut self) -> bool {
        if self
            .looked
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return self.same >= self.needed;
        }
        self.looked = Some(Instant::now());
        let now = group_ticks(self.pgid);
        match self.last.replace(now) {
            Some(before) if before == now => self.same += 1,
            _ => self.same = 0,
        }
        self.same >= self.needed
    }

    /// Starts over: what was seen so far does not count (Sniper was not the one waited for).
    pub fn reset(&mut self) {
        (self.last, self.same, self.looked) = (None, 0, None);
    }
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

    /// `argv` started as the leader of a process group of its own.
    fn group(argv: &[&str]) -> std::process::Child {
        use std::os::unix::process::CommandExt;
        let mut c = std::process::Command::new(argv[0]);
        c.args(&argv[1..]).process_group(0).spawn().unwrap()
    }

    /// Samples `w` every 100 ms for up to `secs`: whether it saw a stall, and when.
    fn watch(w: &mut Stall, secs: u64) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(secs) {
            if w.stalled() {
                return Some(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        None
    }

    #[test]
    fn a_group_that_sleeps_stalls_and_one_that_works_does_not() {
        let mut sleeper = group(&["sleep", "30"]);
        let mut w = Stall::new(sleeper.id() as i32, Duration::from_secs(2));
        // The first sample only sets the mark; two unchanged ones a second apart follow.
        let took = watch(&mut w, 8).expect("a sleeping group stalls");
        assert!(took >= Duration::from_secs(2), "{took:?}");
        // Started over: the samples count again from nothing.
        w.reset();
        assert!(!w.stalled());
        let mut busy = group(&["bash", "-c", "while [ $SECONDS -lt 30 ]; do :; done"]);
        let mut w = Stall::new(busy.id() as i32, Duration::from_secs(2));
        assert_eq!(watch(&mut w, 5), None, "a working group does not stall");
        for c in [&mut sleeper, &mut busy] {
            // SAFETY: the group the child leads.
            unsafe { libc::kill(-(c.id() as i32), libc::SIGKILL) };
            c.wait().unwrap();
        }
        assert!(!running(sleeper.id() as i32));
        assert!(running(std::process::id() as i32));
    }
}
