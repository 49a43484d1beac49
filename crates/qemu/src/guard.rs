//! The guard at the C boundary: a panic in any of the plugin's code is written to `DIR/error`
//! and ends QEMU at once, before anything unwinds into C; the host then reports the plugin's
//! failure (exit status 2) instead of a guest killed for no reason it can say.
//!
//! A panic hook rather than `catch_unwind` around each callback: the hook runs before any
//! unwinding, whichever callback panicked, and costs nothing on the hot ones (every block
//! executed and every memory access, billions a run), where `catch_unwind` would keep each
//! handler out of line. Without it a panic reaching an `extern "C"` function aborts QEMU with
//! a line on the guest's stderr (which the guest may have closed) and nothing for the host.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use bbv_plugin_contract::{files, INJECT_PANIC_ENV};

/// QEMU's exit status after a panic in the plugin (the shell's "could not run" family, apart
/// from any status a guest's own exit or signal gives).
pub(crate) const PANIC_EXIT: i32 = 125;

/// Where the message goes: the plugin's folder, known before its arguments are checked.
static DIR: OnceLock<PathBuf> = OnceLock::new();

/// The callback told to panic by [`INJECT_PANIC_ENV`] (read once).
static INJECTED: OnceLock<Option<String>> = OnceLock::new();

/// Installs the hook; `dir` is the plugin's folder when its arguments name one.
pub(crate) fn install(dir: Option<&Path>) {
    if let Some(d) = dir {
        let _ = DIR.set(d.to_path_buf());
    }
    std::panic::set_hook(Box::new(|info| {
        if !crate::fork::forked() {
            if let Some(d) = DIR.get() {
                let msg = format!("the plugin panicked (a bug in bbv): {info}");
                let _ = bbv_files::write_atomic(&d.join(files::ERROR), msg.as_bytes());
            }
        }
        // SAFETY: _exit ends the process at once, running no exit handler that could see the
        // plugin's state half-updated by the panicking code.
        unsafe { libc::_exit(PANIC_EXIT) }
    }));
}

/// Panics when [`INJECT_PANIC_ENV`] names `point` (a test of this guard).
#[track_caller]
pub(crate) fn inject(point: &str) {
    let named = INJECTED.get_or_init(|| std::env::var(INJECT_PANIC_ENV).ok());
    if named.as_deref() == Some(point) {
        panic!("injected at {point} by {INJECT_PANIC_ENV}");
    }
}
