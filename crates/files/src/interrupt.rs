//! Killed bbv cleans up after itself: SIGINT, SIGTERM and SIGHUP reach the guest, and no QEMU,
//! temporary folder or half-committed output is left behind.
//!
//! [`install`] blocks the three signals in the calling thread (call it first thing in `main`,
//! so every later thread inherits the mask) and waits for them on a thread of its own, where
//! ordinary code may run (a handler could not take a lock or remove a folder):
//! * While a child from [`spawn`] runs (a guest's QEMU under `bbv_collect::Prepared::run`,
//!   or a suite's jobs), the signal is passed on to it (QEMU passes it to the guest), unless the kernel already sent it to the whole
//!   foreground process group (a terminal's ^C or hang-up: the guest got it too). bbv waits
//!   for the guest, then stops (`bbv_collect::CollectError::Interrupted`), and
//!   nothing is written.
//! * While a [`Defer`] lives (and no such child runs), the signal is only recorded: the code
//!   that deferred it polls [`received`] and stops in its own way (a suite waiting for its Slurm
//!   array cancels the array first).
//! * Otherwise bbv removes every registered temporary path ([`Cleanup`]) and exits at once
//!   with 128 + the signal.
//!
//! Registering a path and spawning a guest take a lock the signal thread also takes, and it
//! waits for every [`Hold`] to end, so a signal never falls between a guest's spawn and its
//! registration, between a temporary path's creation and its registration, nor in the middle
//! of a set of renames. QEMU starts with the signals unblocked, and dies with bbv even when bbv is killed
//! with SIGKILL (`PR_SET_PDEATHSIG`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

/// The signals handled.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

static INSTALLED: AtomicBool = AtomicBool::new(false);
/// The first signal received (0 when none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// Live [`Hold`]s; changed only under the registry lock.
static HOLDS: AtomicUsize = AtomicUsize::new(0);
/// Live [`Defer`]s; changed only under the registry lock.
static DEFERS: AtomicUsize = AtomicUsize::new(0);

/// Paths removed if bbv is killed, by registration number, and the children signals go on to
/// (a guest's QEMU; a suite's jobs).
struct Registry {
    next: u64,
    paths: Vec<(u64, PathBuf)>,
    children: Vec<i32>,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    next: 0,
    paths: Vec::new(),
    children: Vec::new(),
});

fn registry() -> MutexGuard<'static, Registry> {
    REGISTRY.lock().unwrap_or_else(|e| e.into_inner())
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and starts the thread that acts on
/// them. Call before any other thread starts; a second call does nothing.
pub fn install() -> std::io::Result<()> {
    if INSTALLED.swap(true, Ordering::SeqCst) {
        return Ok(());
    }
    let set = signal_set();
    // SAFETY: a plain mask change of the calling thread.
    let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    if rc != 0 {
        INSTALLED.store(false, Ordering::SeqCst);
        return Err(std::io::Error::from_raw_os_error(rc));
    }
    std::thread::Builder::new()
        .name("bbv-signals".into())
        .spawn(move || serve(set))
        .map(drop)
}

/// Whether [`install`] ran: the signals are handled here.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::SeqCst)
}

/// The first of SIGINT, SIGTERM and SIGHUP bbv received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::SeqCst) {
        0 => None,
        s => Some(s),
    }
}

/// The signals acted on: those not ignored when bbv started (`nohup bbv ...` keeps ignoring
/// SIGHUP, and so does the guest, as a shell's background job ignores SIGINT).
fn signal_set() -> libc::sigset_t {
    // SAFETY: sigset_t and sigaction are plain data; a null action only queries.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(s, std::ptr::null(), &mut old);
            if old.sa_sigaction != libc::SIG_IGN {
                libc::sigaddset(&mut set, s);
            }
        }
        set
    }
}

fn serve(set: libc::sigset_t) {
    loop {
        // SAFETY: siginfo_t is plain data that sigwaitinfo fills in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `set` and `info` are valid for the call.
        let sig = unsafe { libc::sigwaitinfo(&set, &mut info) };
        if sig <= 0 {
            continue;
        }
        let _ = RECEIVED.compare_exchange(0, sig, Ordering::SeqCst, Ordering::SeqCst);
        let reg = registry();
        if !reg.children.is_empty() {
            if info.si_code != libc::SI_KERNEL {
                for &child in &reg.children {
                    // SAFETY: signals a child of ours, not reaped before it leaves the list.
                    unsafe { libc::kill(child, sig) };
                }
            }
            continue;
        }
        if DEFERS.load(Ordering::SeqCst) > 0 {
            continue;
        }
        // Let a set of renames under way finish first.
        let mut reg = reg;
        while HOLDS.load(Ordering::SeqCst) > 0 {
            drop(reg);
            std::thread::sleep(std::time::Duration::from_millis(1));
            reg = registry();
        }
        for (_, path) in &reg.paths {
            if path.is_dir() {
                let _ = std::fs::remove_dir_all(path);
            } else {
                let _ = std::fs::remove_file(path);
            }
        }
        say_farewell(sig);
        // Other threads may be mid-write: leave without running anything else of bbv's.
        // SAFETY: _exit ends the process; the registry lock is held, so no Cleanup or Hold
        // starts meanwhile.
        unsafe { libc::_exit(128 + sig) };
    }
}

/// Whole lines saying what bbv's outputs hold when signal N stops it.
type Farewell = fn(i32) -> String;

/// What bbv says when a signal stops it (set by [`farewell`]).
static FAREWELL: Mutex<Option<Farewell>> = Mutex::new(None);

/// Sets what bbv prints (whole lines) when a signal stops it: what its outputs hold now.
pub fn farewell(say: Farewell) {
    *FAREWELL.lock().unwrap_or_else(|e| e.into_inner()) = Some(say);
}

/// Prints, once per process, what bbv's outputs hold now that `sig` stops it: from the
/// signal thread as it ends bbv, or from the main thread when bbv ends on its own after the
/// signal (a guest that got it, or a command that finished meanwhile).
pub fn say_farewell(sig: i32) {
    static SAID: AtomicBool = AtomicBool::new(false);
    if SAID.swap(true, Ordering::SeqCst) {
        return;
    }
    let line = match *FAREWELL.lock().unwrap_or_else(|e| e.into_inner()) {
        Some(say) => say(sig),
        None => format!("bbv: stopped by {}: no output was changed\n", name(sig)),
    };
    // SAFETY: a plain write of a buffer we own; no lock that another thread may hold.
    unsafe { libc::write(2, line.as_ptr().cast(), line.len()) };
}

/// A handled signal's name.
pub fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// A path removed if bbv is killed while this lives: a temporary file or folder.
#[derive(Debug)]
pub struct Cleanup(u64);

impl Cleanup {
    /// Creates a temporary file or folder with `make`, which returns it and its path, and
    /// registers the path, with no killing signal acted on in between.
    pub fn create<T>(
        make: impl FnOnce() -> std::io::Result<(T, PathBuf)>,
    ) -> std::io::Result<(T, Cleanup)> {
        let mut reg = registry();
        let (made, path) = make()?;
        let id = reg.next;
        reg.next += 1;
        reg.paths.push((id, path));
        Ok((made, Cleanup(id)))
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        registry().paths.retain(|(id, _)| *id != self.0);
    }
}

/// Holds off a killing signal while it lives: a set of renames that must happen together.
pub struct Hold(());

/// See [`Hold`].
pub fn hold() -> Hold {
    let _reg = registry();
    HOLDS.fetch_add(1, Ordering::SeqCst);
    Hold(())
}

impl Drop for Hold {
    fn drop(&mut self) {
        HOLDS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// While this lives, a killing signal is recorded for [`received`] and nothing else: the caller
/// polls and stops in its own way.
pub struct Defer(());

/// See [`Defer`].
pub fn defer() -> Defer {
    let _reg = registry();
    DEFERS.fetch_add(1, Ordering::SeqCst);
    Defer(())
}

impl Drop for Defer {
    fn drop(&mut self) {
        let _reg = registry();
        DEFERS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Spawns a child (the guest's QEMU, a suite's job) that signals go on to from its first
/// instruction, and that dies with bbv. Wait for it with [`ended`], then reap it.
pub fn spawn(cmd: &mut std::process::Command) -> std::io::Result<std::process::Child> {
    dies_with_bbv(cmd);
    let mut reg = registry();
    let child = cmd.spawn()?;
    reg.children.push(child.id() as i32);
    Ok(child)
}

/// Makes `cmd`'s process start with the signals unblocked (bbv's threads block them, and the
/// mask is inherited across exec) and die with bbv, even when bbv is killed with SIGKILL: for
/// helpers such as ChampSim that bbv waits for but passes no signal to (a terminal's ^C reaches
/// them directly; otherwise bbv's exit kills them).
pub fn dies_with_bbv(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    let set = signal_set();
    // SAFETY: prctl and pthread_sigmask are async-signal-safe. PR_SET_PDEATHSIG asks the
    // kernel to kill the child when the thread that spawned it ends (with bbv, at the latest).
    unsafe {
        cmd.pre_exec(move || {
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            Ok(())
        });
    }
}

/// Waits until a child from [`spawn`] has ended, without reaping it, then stops passing
/// signals to it; true when it ended (false only when `block` is false and it still runs).
pub fn ended(pid: u32, block: bool) -> std::io::Result<bool> {
    let flags = libc::WEXITED | libc::WNOWAIT | if block { 0 } else { libc::WNOHANG };
    loop {
        // SAFETY: siginfo_t is plain data that waitid fills in.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid pointers; the child is ours and not yet reaped.
        let rc = unsafe { libc::waitid(libc::P_PID, pid, &mut info, flags) };
        if rc < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        // SAFETY: waitid filled si_pid (0 when WNOHANG found nothing).
        if unsafe { info.si_pid() } == 0 {
            return Ok(false);
        }
        registry().children.retain(|&c| c != pid as i32);
        return Ok(true);
    }
}

/// The prefix of a temporary folder of this process: `PREFIX<pid>-`, so that a later run can
/// tell an orphan (of a bbv killed with SIGKILL) from a live run's ([`remove_orphans`]).
pub fn tagged(prefix: &str) -> String {
    format!("{prefix}{}-", std::process::id())
}

/// Whether process `pid` is gone (not merely another user's).
pub(crate) fn gone(pid: i32) -> bool {
    // SAFETY: signal 0 only asks whether the process exists.
    pid > 0
        && unsafe { libc::kill(pid, 0) } != 0
        && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
}

/// Removes the files in `dir` named `.NAME.PID.partial` (an output being written, renamed into
/// place when whole) whose process no longer exists: what a bbv killed with SIGKILL left.
pub fn remove_orphan_partials(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(stem) = name.to_str().and_then(|n| n.strip_suffix(".partial")) else {
            continue;
        };
        let pid = stem.rsplit('.').next().and_then(|p| p.parse::<i32>().ok());
        if stem.starts_with('.') && pid.is_some_and(gone) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// Removes the folders in `dir` named by [`tagged`]`(prefix)` of processes that no longer
/// exist: what a bbv killed with SIGKILL left behind.
pub fn remove_orphans(dir: &Path, prefix: &str) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(rest) = name.to_str().and_then(|n| n.strip_prefix(prefix)) else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if gone(pid) {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A dead process's partial output goes; a live one's (this test's), another file and a
    /// partial not named by a process stay.
    #[test]
    fn only_dead_processes_partials_are_removed() {
        let t = tempfile::tempdir().unwrap();
        let d = t.path();
        // Above Linux's largest pid (2^22): no such process.
        let dead = d.join(".region-1.champsim.xz.99999999.partial");
        let live = d.join(format!(
            ".region-2.champsim.xz.{}.partial",
            std::process::id()
        ));
        let other = d.join("region-3.champsim.xz");
        let odd = d.join(".region-4.champsim.xz.partial");
        for f in [&dead, &live, &other, &odd] {
            std::fs::write(f, "x").unwrap();
        }
        remove_orphan_partials(d);
        assert!(!dead.exists());
        assert!(live.exists() && other.exists() && odd.exists());
    }
}
