//! What `bbv simulate` says while ChampSim runs: the regions' simulations, then the whole
//! run's, each with the time left at the rate so far. A status line for every heartbeat, and
//! (for a log) a line per region finished and per tenth of the whole run.

use std::sync::Mutex;
use std::time::Instant;

use crate::simulate::SimulateWatcher;

/// A sink for one message.
pub type Say<'a> = Box<dyn Fn(String) + Sync + 'a>;

/// Progress of `bbv simulate` into a status line (`status`) and, when given, plain lines.
pub struct SimProgress<'a> {
    status: Say<'a>,
    lines: Option<Say<'a>>,
    /// When each phase (regions, whole run) started.
    started: Mutex<[Option<Instant>; 2]>,
    /// Regions finished, tenths of the whole run: what the lines said last.
    said: Mutex<(usize, u64)>,
}

impl<'a> SimProgress<'a> {
    /// Progress into `status`, and into `lines` at each region's end and each tenth of the
    /// whole run.
    pub fn new(status: Say<'a>, lines: Option<Say<'a>>) -> SimProgress<'a> {
        SimProgress {
            status,
            lines,
            started: Mutex::new([None, None]),
            said: Mutex::new((0, 0)),
        }
    }

    /// `, about 3 min left` from the rate since `phase` started.
    fn left(&self, phase: usize, done: u64, total: u64) -> String {
        let mut started = self.started.lock().unwrap_or_else(|e| e.into_inner());
        let since = *started[phase].get_or_insert_with(Instant::now);
        let secs = since.elapsed().as_secs_f64();
        if done == 0 || secs < 1.0 {
            return String::new();
        }
        let left = secs * total.saturating_sub(done) as f64 / done as f64;
        format!(", about {} left", duration(left))
    }

    fn tell(&self, msg: String, line: bool) {
        if let (true, Some(l)) = (line, &self.lines) {
            l(msg.clone());
        }
        (self.status)(msg);
    }
}

/// `42 s`, `7 min`, `2 h 05 min`.
pub fn duration(secs: f64) -> String {
    match secs {
        s if s < 90.0 => format!("{s:.0} s"),
        s if s < 5400.0 => format!("{:.0} min", s / 60.0),
        s => format!(
            "{} h {:02.0} min",
            (s / 3600.0) as u64,
            (s % 3600.0 / 60.0).floor()
        ),
    }
}

/// `1.23 G` instructions and the like.
fn si(x: u64) -> String {
    match x as f64 {
        x if x >= 1e9 => format!("{:.2} G", x / 1e9),
        x if x >= 1e6 => format!("{:.1} M", x / 1e6),
        x if x >= 1e3 => format!("{:.1} k", x / 1e3),
        x => format!("{x:.0}"),
    }
}

impl SimulateWatcher for SimProgress<'_> {
    fn regions(&self, retired: u64, total: u64, finished: usize, regions: usize) {
        let msg = format!(
            "ChampSim: {finished} of {regions} regions simulated, {:.0}% of their {} instructions{}",
            100.0 * retired as f64 / total.max(1) as f64,
            si(total),
            self.left(0, retired, total)
        );
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        let line = finished > said.0;
        said.0 = finished;
        drop(said);
        self.tell(msg, line);
    }

    fn whole(&self, retired: u64, total: u64) {
        let msg = format!(
            "ChampSim, the whole run: {} of {} instructions ({:.0}%){}",
            si(retired),
            si(total),
            100.0 * retired as f64 / total.max(1) as f64,
            self.left(1, retired, total)
        );
        let tenth = 10 * retired / total.max(1);
        let mut said = self.said.lock().unwrap_or_else(|e| e.into_inner());
        let line = tenth > said.1;
        said.1 = tenth;
        drop(said);
        self.tell(msg, line);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn lines_come_per_region_and_per_tenth() {
        let lines = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(Mutex::new(0));
        let (l, s) = (lines.clone(), status.clone());
        let p = SimProgress::new(
            Box::new(move |_| *s.lock().unwrap() += 1),
            Some(Box::new(move |m| l.lock().unwrap().push(m))),
        );
        p.regions(0, 100, 0, 2);
        p.regions(40, 100, 0, 2);
        p.regions(50, 100, 1, 2);
        p.regions(100, 100, 2, 2);
        for i in 0..=100 {
            p.whole(i * 10_000_000, 1_000_000_000);
        }
        let lines = lines.lock().unwrap();
        assert_eq!(lines.len(), 2 + 10, "{lines:?}");
        assert!(lines[0]
            .starts_with("ChampSim: 1 of 2 regions simulated, 50% of their 100 instructions"));
        assert!(
            lines[11].starts_with("ChampSim, the whole run: 1.00 G of 1.00 G instructions (100%)")
        );
        assert_eq!(*status.lock().unwrap(), 4 + 101);
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(42.4), "42 s");
        assert_eq!(duration(420.0), "7 min");
        assert_eq!(duration(7500.0), "2 h 05 min");
    }
}
