//! `syscalls=on`: thread 1's system calls in order among the replay's marker events, in the
//! plugin's `syscalls` file ([`bbv_plugin_contract::syscalls`]), so that a checkpoint's calls
//! can be compared with the profiled run's.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use bbv_plugin_contract::files;
use bbv_plugin_contract::syscalls::{Call, Entry};

struct Log {
    out: BufWriter<File>,
    /// The call under way: (number, first argument).
    pending: Option<(i64, u64)>,
}

static LOG: Mutex<Option<Log>> = Mutex::new(None);
/// Set once the log is started: the syscall callbacks also serve flow control and turns,
/// which must not take the log's lock on every call.
static ACTIVE: AtomicBool = AtomicBool::new(false);

fn with(f: impl FnOnce(&mut Log) -> std::io::Result<()>) {
    if !active() {
        return;
    }
    let mut guard = LOG.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(log) = guard.as_mut() {
        if let Err(e) = f(log) {
            crate::report_error(&format!("writing the system call log: {e}"));
            *guard = None;
        }
    }
}

/// Starts the log in the plugin's folder `dir`.
pub fn init(dir: &Path) -> Result<(), String> {
    let path = dir.join(files::SYSCALLS);
    let f = File::create(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    *LOG.lock().unwrap_or_else(|e| e.into_inner()) = Some(Log {
        out: BufWriter::new(f),
        pending: None,
    });
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Whether the log is kept.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Acquire)
}

/// A system call starts on `vcpu`.
pub fn call(vcpu: u32, nr: i64, arg0: u64) {
    if crate::thread::is_first(vcpu) {
        with(|l| {
            l.pending = Some((nr, arg0));
            Ok(())
        });
    }
}

/// It returned `ret`.
pub fn ret(vcpu: u32, ret: i64) {
    if crate::thread::is_first(vcpu) {
        with(|l| match l.pending.take() {
            Some((nr, arg0)) => l
                .out
                .write_all(Entry::Call(Call { nr, arg0, ret }).line().as_bytes()),
            None => Ok(()),
        });
    }
}

/// Marker event `event` fired on thread 1. What is buffered goes out with it, so that every
/// window up to here is whole even if the guest dies without QEMU's exit callbacks.
pub fn event(event: u32) {
    with(|l| {
        l.out.write_all(Entry::Event(event).line().as_bytes())?;
        l.out.flush()
    });
}

/// The guest exits: what is buffered goes out (not from a forked child, whose copy of the
/// buffer the parent writes).
pub fn finish() {
    if !crate::fork::forked() {
        with(|l| l.out.flush());
    }
}
