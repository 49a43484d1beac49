//! Progress on a terminal, nothing when stderr is not one (indicatif hides its bars then): the
//! guest's instructions, rate and intervals while it runs, then the clustering's runs.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use bbv_collect::Watcher;
use bbv_simpoint::{Observer, Run};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// One spinner line for a whole job, shown once there is something to say.
pub struct Progress {
    bar: Mutex<Option<ProgressBar>>,
    started: Instant,
    /// Most runs the k search can take, when known.
    max_runs: Option<usize>,
}

impl Progress {
    pub fn new(max_runs: Option<usize>) -> Progress {
        Progress {
            bar: Mutex::new(None),
            started: Instant::now(),
            max_runs,
        }
    }

    pub fn say(&self, msg: String) {
        let mut guard = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        let bar = guard.get_or_insert_with(|| {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed} {msg}") {
                b.set_style(style);
            }
            b.enable_steady_tick(Duration::from_millis(200));
            b
        });
        bar.set_message(msg);
    }

    /// Removes the spinner.
    pub fn done(&self) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            b.finish_and_clear();
        }
    }
}

/// `1234567890` -> `1.23 G` (with the space before the unit).
fn si(x: f64) -> String {
    match x {
        x if x >= 1e12 => format!("{:.2} T ", x / 1e12),
        x if x >= 1e9 => format!("{:.2} G ", x / 1e9),
        x if x >= 1e6 => format!("{:.1} M ", x / 1e6),
        x if x >= 1e3 => format!("{:.1} k ", x / 1e3),
        x => format!("{x:.0} "),
    }
}

impl Watcher for Progress {
    fn progress(&self, p: &bbv_collect::Progress) {
        let secs = self.started.elapsed().as_secs_f64().max(1e-3);
        let threads = match p.threads {
            0 | 1 => String::new(),
            n => format!(", {n} threads"),
        };
        self.say(format!(
            "guest running: {}instructions ({}instructions/s), {} intervals{threads}",
            si(p.instructions as f64),
            si(p.instructions as f64 / secs),
            p.intervals
        ));
    }
}

/// `clustering: k-means run 3 of at most 7, k = 15` (`run` 0-based).
pub fn run_started(run: usize, max_runs: Option<usize>, k: usize) -> String {
    let of = max_runs
        .map(|m| format!(" of at most {m}"))
        .unwrap_or_default();
    format!("clustering: k-means run {}{of}, k = {k}", run + 1)
}

impl Observer for Progress {
    fn run_started(&self, run: usize, k: usize) {
        self.say(run_started(run, self.max_runs, k));
    }

    fn run_finished(&self, run: usize, result: &Run) {
        self.say(format!(
            "clustering: k-means run {} (k = {}) done",
            run + 1,
            result.k
        ));
    }
}

/// `bbv simulate`'s progress ([`bbv_replay::simulate_progress`] says what): on a terminal
/// the spinner line, elsewhere (a log) plain lines.
pub fn simulate(p: &Progress) -> bbv_replay::simulate_progress::SimProgress<'_> {
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    bbv_replay::simulate_progress::SimProgress::new(
        Box::new(|m| p.say(m)),
        (!terminal).then_some(Box::new(|m: String| eprintln!("{m}")) as Box<_>),
    )
}

/// `bbv suite run`'s bar: jobs ended out of all, with done/running/failed counts.
pub fn suite_bar(jobs: u64) -> Option<ProgressBar> {
    let b = ProgressBar::with_draw_target(Some(jobs), ProgressDrawTarget::stderr());
    if let Ok(style) = ProgressStyle::with_template("{spinner} {elapsed} [{pos}/{len}] {msg}") {
        b.set_style(style);
    }
    b.enable_steady_tick(Duration::from_millis(200));
    Some(b)
}
