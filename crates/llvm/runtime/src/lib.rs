//! The runtime linked into programs built by `bbv cc`: the C API of `bbv.h`, budgets, thread
//! accounting and, at exit, `BBV_OUT.count` (and in `blocks` mode `BBV_OUT.pc`, `BBV_OUT.bb`).
//!
//! # Design constraints
//! * The hot path is in the instrumented code (an add and a compare on a thread-local); the
//!   runtime only runs when a limit is passed: a budget, or the next BBV interval boundary.
//! * Threads are numbered in creation order; `pthread_create` is interposed (the executable's
//!   definition wins over libc's, also for calls from shared libraries such as libstdc++).
//! * Bad environment (`BBV_BUDGET`, `BBV_INTERVAL`, `BBV_OUT`) stops the program at start-up with
//!   status 2 and a message, rather than running it unmeasured.
//! * Output files are written to a temporary name and renamed.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bbv_profile::{BbvWriter, CutMode, IntervalCounter};

/// Where a block is, as the pass records it.
#[repr(C)]
pub struct Site {
    function: *const c_char,
    file: *const c_char,
    line: u32,
    insns: u32,
}

#[repr(C)]
struct ModuleRec {
    counts: *mut u64,
    sites: *const Site,
    n: u64,
}

extern "C" {
    fn bbv_rt_tls() -> *mut u64;
    fn bbv_rt_modules(end: *mut *const ModuleRec) -> *const ModuleRec;
    fn bbv_rt_unchecked() -> c_int;
}

/// Whether some of the program was built with `bbv cc --mode count` (no limit checks).
fn unchecked() -> bool {
    // SAFETY: reads the address of a weak symbol.
    unsafe { bbv_rt_unchecked() != 0 }
}

const UNCHECKED: &str = "this program was built with `bbv cc --mode count`, which does not check budgets (build with --mode total)";

/// The status of a program stopped by its budget: 128 + SIGXCPU, as a CPU-time limit gives.
const BUDGET_STATUS: c_int = 152;

struct ThreadRec {
    number: u32,
    tls: AtomicPtr<u64>,
    /// Counted before the last bbv_reset.
    base: AtomicU64,
    /// Total when the thread ended (valid once `done`).
    last: AtomicU64,
    done: AtomicBool,
}

impl ThreadRec {
    fn total(&self) -> u64 {
        if self.done.load(Ordering::Acquire) {
            return self.last.load(Ordering::Relaxed);
        }
        let tls = self.tls.load(Ordering::Acquire);
        // SAFETY: the thread is alive (not done), so its TLS block is; a racy read is fine.
        let now = if tls.is_null() {
            0
        } else {
            unsafe { std::ptr::read_volatile(tls) }
        };
        self.base.load(Ordering::Relaxed) + now
    }
}

struct Config {
    out: Option<String>,
    env_budget: u64,
}

static CONFIG: std::sync::OnceLock<Config> = std::sync::OnceLock::new();
static THREADS: Mutex<Vec<Arc<ThreadRec>>> = Mutex::new(Vec::new());
static NEXT_NUMBER: AtomicUsize = AtomicUsize::new(1);
static HANDLER: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    static ME: std::cell::RefCell<Option<Arc<ThreadRec>>> = const { std::cell::RefCell::new(None) };
    static BUDGET: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static GUARD: ExitGuard = const { ExitGuard };
}

/// Records a thread's final total when it ends.
struct ExitGuard;

impl Drop for ExitGuard {
    fn drop(&mut self) {
        let _ = ME.try_with(|me| {
            if let Some(rec) = me.borrow().as_ref() {
                rec.last.store(rec.total(), Ordering::Relaxed);
                rec.done.store(true, Ordering::Release);
            }
        });
    }
}

fn tls() -> *mut u64 {
    // SAFETY: the shim returns the calling thread's own two-word counter.
    unsafe { bbv_rt_tls() }
}

/// Serializes numbering with creation, so that numbers follow `pthread_create` calls (not the
/// order in which new threads happen to start) and a failed creation uses no number.
static CREATING: Mutex<()> = Mutex::new(());

fn register_thread(number: u32) -> Arc<ThreadRec> {
    let rec = Arc::new(ThreadRec {
        number,
        tls: AtomicPtr::new(tls()),
        base: AtomicU64::new(0),
        last: AtomicU64::new(0),
        done: AtomicBool::new(false),
    });
    THREADS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(rec.clone());
    ME.with(|me| *me.borrow_mut() = Some(rec.clone()));
    GUARD.with(|_| {});
    rec
}

fn me() -> Option<Arc<ThreadRec>> {
    ME.try_with(|me| me.borrow().clone()).ok().flatten()
}

fn fail_start(msg: &str) -> ! {
    eprintln!("bbv: {msg}");
    // SAFETY: ending the process before main, as documented for a bad environment.
    unsafe { libc::_exit(2) }
}

fn env_number(name: &str) -> Option<u64> {
    let v = std::env::var_os(name)?;
    let s = v.to_str().unwrap_or("");
    match s.trim().replace('_', "").parse::<u64>() {
        Ok(n) if n > 0 => Some(n),
        _ => fail_start(&format!(
            "{name}={}: expected a positive whole number of instructions",
            v.to_string_lossy()
        )),
    }
}

extern "C" fn init() {
    let out = std::env::var_os("BBV_OUT").map(|v| {
        let s = v.to_string_lossy().into_owned();
        if s.is_empty() {
            fail_start("BBV_OUT is empty: expected a file-name prefix");
        }
        let p = std::path::Path::new(&s);
        let dir = match p.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => std::path::PathBuf::from("."),
        };
        if !dir.is_dir() {
            fail_start(&format!(
                "BBV_OUT={s}: directory {} does not exist",
                dir.display()
            ));
        }
        s
    });
    let interval = env_number("BBV_INTERVAL").unwrap_or(100_000_000);
    let env_budget = env_number("BBV_BUDGET").unwrap_or(0);
    if env_budget > 0 && unchecked() {
        fail_start(&format!("BBV_BUDGET={env_budget}: {UNCHECKED}"));
    }
    let _ = CONFIG.set(Config { out, env_budget });
    let _ = register_thread(NEXT_NUMBER.fetch_add(1, Ordering::Relaxed) as u32);
    blocks::init(interval);
    BUDGET.with(|b| b.set(env_budget));
    set_limit();
    // SAFETY: registering a plain extern "C" function.
    unsafe { libc::atexit(at_exit) };
}

#[used]
#[link_section = ".init_array"]
static INIT: extern "C" fn() = init;

/// Recomputes the calling thread's limit: its budget, or the next interval boundary.
fn set_limit() {
    let budget = BUDGET.with(|b| b.get());
    let mut limit = if budget == 0 { u64::MAX } else { budget };
    if let Some(rec) = me() {
        if rec.number == 1 {
            if let Some(next) = blocks::next_boundary() {
                let base = rec.base.load(Ordering::Relaxed);
                limit = limit.min(next.saturating_sub(base).saturating_sub(1));
            }
        }
    }
    // SAFETY: the calling thread's own counter.
    unsafe { *tls().add(1) = limit };
}

/// Instructions counted on the calling thread since it started or last called `bbv_reset`.
#[no_mangle]
pub extern "C" fn bbv_count() -> u64 {
    // SAFETY: the calling thread's own counter.
    unsafe { *tls() }
}

/// Restarts the calling thread's count at zero.
#[no_mangle]
pub extern "C" fn bbv_reset() {
    let now = bbv_count();
    if let Some(rec) = me() {
        rec.base.fetch_add(now, Ordering::Relaxed);
    }
    // SAFETY: the calling thread's own counter.
    unsafe { *tls() = 0 };
    set_limit();
}

/// Stops the calling thread once its count exceeds `n` (0 removes the budget).
#[no_mangle]
pub extern "C" fn bbv_set_budget(n: u64) {
    if n > 0 && unchecked() {
        eprintln!("bbv: bbv_set_budget({n}): {UNCHECKED}");
        // SAFETY: ending the program as a bad environment does, rather than run it unlimited.
        unsafe { libc::exit(2) };
    }
    BUDGET.with(|b| b.set(n));
    set_limit();
}

/// What to call when a budget runs out (NULL restores the default).
#[no_mangle]
pub extern "C" fn bbv_on_budget(
    handler: Option<extern "C" fn(u64, *const c_char, *const c_char, c_uint)>,
) {
    HANDLER.store(
        handler.map_or(std::ptr::null_mut(), |h| h as *mut c_void),
        Ordering::Release,
    );
}

fn text(p: *const c_char) -> String {
    if p.is_null() {
        String::new()
    } else {
        // SAFETY: the pass points at NUL-terminated constant strings.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }
}

/// Called by instrumented code when the thread's count passes its limit.
///
/// # Safety
/// `site` is null or points at a site record made by the pass.
#[no_mangle]
pub unsafe extern "C" fn bbv_budget_hit(site: *const Site) {
    let count = bbv_count();
    if let Some(rec) = me() {
        if rec.number == 1 {
            blocks::maybe_cut(rec.base.load(Ordering::Relaxed) + count);
        }
    }
    let budget = BUDGET.with(|b| b.get());
    if budget != 0 && count > budget {
        let (function, file, line) = if site.is_null() {
            (std::ptr::null(), std::ptr::null(), 0)
        } else {
            ((*site).function, (*site).file, (*site).line)
        };
        let h = HANDLER.load(Ordering::Acquire);
        if h.is_null() {
            let at = if line > 0 {
                format!(" at {}:{line}", text(file))
            } else {
                String::new()
            };
            eprintln!(
                "bbv: instruction budget of {budget} exhausted in {}{at} (count {count})",
                text(function)
            );
            libc::exit(BUDGET_STATUS);
        }
        // The handler is instrumented code too: remove the budget before calling it.
        BUDGET.with(|b| b.set(0));
        set_limit();
        let h: extern "C" fn(u64, *const c_char, *const c_char, c_uint) = std::mem::transmute(h);
        h(count, function, file, line);
    }
    set_limit();
}

struct Start {
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
    budget: u64,
    number: u32,
}

extern "C" fn thread_start(p: *mut c_void) -> *mut c_void {
    // SAFETY: made by pthread_create below, handed over to this thread alone.
    let start = unsafe { Box::from_raw(p as *mut Start) };
    register_thread(start.number);
    BUDGET.with(|b| b.set(start.budget));
    set_limit();
    (start.routine)(start.arg)
}

type CreateFn = unsafe extern "C" fn(
    *mut libc::pthread_t,
    *const libc::pthread_attr_t,
    extern "C" fn(*mut c_void) -> *mut c_void,
    *mut c_void,
) -> c_int;

/// Interposes libc's `pthread_create` to number threads and find their counters.
///
/// # Safety
/// As `pthread_create`.
#[no_mangle]
pub unsafe extern "C" fn pthread_create(
    thread: *mut libc::pthread_t,
    attr: *const libc::pthread_attr_t,
    routine: extern "C" fn(*mut c_void) -> *mut c_void,
    arg: *mut c_void,
) -> c_int {
    static REAL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let mut real = REAL.load(Ordering::Acquire);
    if real.is_null() {
        real = libc::dlsym(libc::RTLD_NEXT, c"pthread_create".as_ptr());
        if real.is_null() {
            return libc::ENOSYS;
        }
        REAL.store(real, Ordering::Release);
    }
    let real: CreateFn = std::mem::transmute(real);
    // A new thread inherits the environment's budget, not its creator's current one.
    let budget = CONFIG.get().map_or(0, |c| c.env_budget);
    let _creating = CREATING.lock().unwrap_or_else(|e| e.into_inner());
    let number = NEXT_NUMBER.load(Ordering::Relaxed) as u32;
    let start = Box::into_raw(Box::new(Start {
        routine,
        arg,
        budget,
        number,
    }));
    let r = real(thread, attr, thread_start, start as *mut c_void);
    if r == 0 {
        NEXT_NUMBER.store(number as usize + 1, Ordering::Relaxed);
    } else {
        drop(Box::from_raw(start));
    }
    r
}

fn write_atomically(
    path: &str,
    write: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    // A device or FIFO (/dev/null) is written in place: a rename would replace it.
    if std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir()) {
        let mut f = std::io::BufWriter::new(std::fs::OpenOptions::new().write(true).open(path)?);
        write(&mut f)?;
        return f.flush();
    }
    let tmp = format!("{path}.tmp{}", std::process::id());
    let result = (|| {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&tmp)?);
        write(&mut f)?;
        f.flush()
    })();
    match result {
        Ok(()) => std::fs::rename(&tmp, path),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

extern "C" fn at_exit() {
    let Some(cfg) = CONFIG.get() else { return };
    let Some(out) = &cfg.out else { return };
    let threads: Vec<Arc<ThreadRec>> = THREADS.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let mut totals: Vec<(u32, u64)> = threads.iter().map(|t| (t.number, t.total())).collect();
    // Threads register as they start, which need not be the order they were created in.
    totals.sort_unstable_by_key(|t| t.0);
    let sum: u64 = totals.iter().map(|t| t.1).sum();
    let r = write_atomically(&format!("{out}.count"), |w| {
        writeln!(
            w,
            "# IR instructions counted by bbv (deterministic; threads in creation order)"
        )?;
        writeln!(w, "total {sum}")?;
        for (n, t) in &totals {
            writeln!(w, "thread {n} {t}")?;
        }
        Ok(())
    });
    if let Err(e) = r.and_then(|_| blocks::finish(out)) {
        eprintln!("bbv: cannot write {out}.*: {e}");
    }
}

mod blocks {
    //! `blocks` mode: per-block executions in the modules' arrays, cut into BBV intervals on
    //! thread 1's count (other threads' executions land in the interval thread 1 is in).
    use super::*;

    struct State {
        modules: Vec<(*mut u64, *const Site, usize)>,
        last: Vec<u64>,
        counter: IntervalCounter,
        vectors: Vec<u8>,
        next: u64,
    }

    // SAFETY: the pointers are to the program's static arrays.
    unsafe impl Send for State {}

    static STATE: Mutex<Option<State>> = Mutex::new(None);

    pub fn init(interval: u64) {
        let mut end = std::ptr::null();
        // SAFETY: the shim returns the bounds of the bbv_modules section (null if absent).
        let start = unsafe { bbv_rt_modules(&mut end) };
        if start.is_null() || start == end {
            return;
        }
        let n = (end as usize - start as usize) / std::mem::size_of::<ModuleRec>();
        // SAFETY: the section holds n records made by the pass.
        let recs = unsafe { std::slice::from_raw_parts(start, n) };
        let modules: Vec<_> = recs
            .iter()
            .map(|r| (r.counts, r.sites, r.n as usize))
            .collect();
        let total: usize = modules.iter().map(|m| m.2).sum();
        *STATE.lock().unwrap_or_else(|e| e.into_inner()) = Some(State {
            modules,
            last: vec![0; total],
            counter: IntervalCounter::new(interval, CutMode::BlockEnd),
            vectors: Vec::new(),
            next: interval,
        });
    }

    pub fn next_boundary() -> Option<u64> {
        STATE.lock().ok()?.as_ref().map(|s| s.next)
    }

    fn harvest(s: &mut State) {
        let mut id = 0usize;
        for &(counts, sites, n) in &s.modules {
            for i in 0..n {
                // SAFETY: i < n, inside the module's arrays; racy reads of other threads' adds.
                let (c, insns) = unsafe {
                    (
                        std::ptr::read_volatile(counts.add(i)),
                        (*sites.add(i)).insns,
                    )
                };
                let d = c.wrapping_sub(s.last[id]);
                if d != 0 {
                    s.counter.absorb(id as u32 + 1, d * u64::from(insns));
                    s.last[id] = c;
                }
                id += 1;
            }
        }
    }

    /// Thread 1 passed its limit with `total` counted: take the cut if one is due.
    pub fn maybe_cut(total: u64) {
        let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = g.as_mut() else { return };
        if total < s.next {
            return;
        }
        harvest(s);
        let State {
            counter, vectors, ..
        } = s;
        let _ = counter.cut_pending(0, &mut |pairs| {
            BbvWriter::new(&mut *vectors).write_vector(pairs)
        });
        s.next = s.counter.next_boundary();
    }

    pub fn finish(out: &str) -> std::io::Result<()> {
        let mut g = STATE.lock().unwrap_or_else(|e| e.into_inner());
        let Some(s) = g.as_mut() else { return Ok(()) };
        write_atomically(&format!("{out}.pc"), |w| {
            let mut id = 0;
            for &(_, sites, n) in &s.modules {
                for i in 0..n {
                    id += 1;
                    // SAFETY: i < n.
                    let site = unsafe { &*sites.add(i) };
                    let file = text(site.file);
                    let file = if file.is_empty() {
                        "?".to_string()
                    } else {
                        file
                    };
                    writeln!(
                        w,
                        "{id} {} {file}:{} {}",
                        text(site.function),
                        site.line,
                        site.insns
                    )?;
                }
            }
            Ok(())
        })?;
        write_atomically(&format!("{out}.bb"), |w| w.write_all(&s.vectors))
    }
}
