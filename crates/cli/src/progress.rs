//! Progress on a terminal (nothing when stderr is piped): a spinner while clustering.

use std::sync::Mutex;
use std::time::Duration;

use bbv_simpoint::{Observer, Run};
use indicatif::{ProgressBar, ProgressStyle};

/// Shows the clustering's progress once it starts (the guest's own output comes before).
pub struct Clustering {
    bar: Mutex<Option<ProgressBar>>,
}

impl Clustering {
    pub fn new() -> Clustering {
        Clustering {
            bar: Mutex::new(None),
        }
    }

    fn say(&self, msg: String) {
        let mut guard = self.bar.lock().unwrap_or_else(|e| e.into_inner());
        let bar = guard.get_or_insert_with(|| {
            let b = ProgressBar::new_spinner();
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

impl Observer for Clustering {
    fn run_started(&self, run: usize, k: usize) {
        self.say(format!("clustering: run {}, k = {k}", run + 1));
    }

    fn run_finished(&self, run: usize, result: &Run) {
        self.say(format!(
            "clustering: run {} (k = {}) done",
            run + 1,
            result.k
        ));
    }
}
