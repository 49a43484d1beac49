//! Every guest thread streamed live into one Sniper, the threads synchronising in Sniper as
//! they did in the guest.
//!
//! The guest runs natively under QEMU (with bbv's deterministic turns) and never waits for
//! Sniper: each thread's records go to a queue ([`crate::spool`]) and a relay thread of its own
//! writes them to the thread's FIFO at Sniper's pace, answering Sniper's requests. Sniper
//! learns of a new thread from its parent's stream (its reply is the id that names the
//! child's FIFOs) and of synchronisation from `futex` records that its syscall model
//! emulates: a wait blocks the simulated thread until a wake of another simulated thread.
//!
//! **Why Sniper's futex model sees what the guest did.** The guest's calls ran natively, so
//! the frontend knows how each ended: a wait that did not sleep, or one woken by a given wake
//! (bbv's turns name the wake). Sniper reads the futex word through the waiting thread's
//! frontend while it holds its thread lock; the relay answers with the value the wait expects
//! (so Sniper blocks the thread) only while the wake that woke it in the guest has not yet
//! been handled by Sniper, and with another value (so the wait returns at once, as a wait
//! whose wake came first in simulated time) once it has. A wake is marked handled when Sniper
//! asks for its word, also under that lock, so the two cannot cross. A wake is sent with the
//! number of threads it woke in the guest; a wait that did not sleep in the guest does not
//! block in Sniper either. Sniper thus times each wait from the simulated moment of its wake,
//! and no simulated thread waits for a wake that Sniper already handled.
//!
//! **A Sniper that deadlocks mid-stream** (its simulated threads waiting for one another
//! forever) is given up, not waited for: when every relay of the session waits for Sniper (to
//! read its records, to answer, to open its FIFO) and Sniper used no CPU for the stall period
//! ([`crate::watch`]), each relay ends with an error that says so. A relay waiting for its
//! guest thread's next records does not count: a guest that is only idle (a sleep, a read of
//! a terminal) leaves Sniper waiting for it, rightly.

use std::collections::HashSet;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use bbv_plugin_contract::sysno::{futex, x86_64};

use crate::spool::{Item, Queue, Spool};
use crate::watch::{running, Stall, STALL};
use crate::{command, read_reply, write_memory_response, Instruction, Reply, SiftError, Writer};

/// A record whose reply the relay waits for (and acts on).
pub(crate) enum Control {
    Magic,
    /// A [`command::USER`] command (bbv's region script's). Its reply is not waited for (a
    /// region sends one per execution of its markers): the relay reads it later (see
    /// [`Relay::owed`]).
    User,
    NewThread(Arc<Binding>),
    /// A futex wake with its id, or a wait with the value it expects and the id of the wake
    /// that ended it in the guest (None: it did not sleep, or no wake of the guest ended it).
    Wake(u64),
    Wait {
        val: u32,
        partner: Option<u64>,
    },
    ExitGroup,
}

/// A stream's Sniper thread id, once its parent's relay learns it, and whether its relay
/// has connected to Sniper since.
pub(crate) struct Binding {
    state: Mutex<(Option<u64>, bool)>,
    set: Condvar,
}

impl Binding {
    fn new(id: Option<u64>) -> Arc<Binding> {
        Arc::new(Binding {
            state: Mutex::new((id, false)),
            set: Condvar::new(),
        })
    }

    fn update(&self, f: impl FnOnce(&mut (Option<u64>, bool))) {
        f(&mut self.state.lock().unwrap_or_else(|p| p.into_inner()));
        self.set.notify_all();
    }

    /// Waits until `ready` holds of the state; what `ready` returns.
    fn wait<T>(
        &self,
        shared: &Shared,
        ready: impl Fn(&(Option<u64>, bool)) -> Option<T>,
    ) -> Result<T, String> {
        let mut g = self.state.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(t) = ready(&g) {
                return Ok(t);
            }
            shared.check()?;
            g = self
                .set
                .wait_timeout(g, Duration::from_millis(200))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }
}

/// What the relays of one Sniper share.
struct Shared {
    prefix: PathBuf,
    spill_dir: PathBuf,
    pid: Option<i32>,
    /// One thread: its producer waits for its relay instead of spilling.
    bounded: bool,
    /// Give up (the caller aborts).
    stop: AtomicBool,
    /// Sniper ended the application (a thread's `exit_group`): the other threads' streams are
    /// no longer read, which is not an error.
    ended: AtomicBool,
    /// Wakes Sniper has handled.
    wakes: Mutex<HashSet<u64>>,
    streams: AtomicU64,
    /// Relays running, and those of them waiting for their guest thread's records.
    relays: AtomicU64,
    idle: AtomicU64,
    /// Sniper's CPU time while every relay waits for it (None: no process to watch).
    watch: Mutex<Option<Stall>>,
    /// Sniper was found deadlocked.
    stuck: AtomicBool,
}

/// A count held up while it lives: a relay running, or waiting for its guest.
struct Held<'a>(&'a AtomicU64);

impl<'a> Held<'a> {
    fn new(count: &'a AtomicU64) -> Held<'a> {
        count.fetch_add(1, Ordering::SeqCst);
        Held(count)
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shared {
    /// Err when the relays must stop waiting: asked to, or Sniper is gone.
    fn check(&self) -> Result<(), String> {
        if self.stop.load(Ordering::Relaxed) {
            return Err("stopped".into());
        }
        if let Some(pid) = self.pid {
            if !running(pid) {
                return Err(format!("Sniper (process {pid}) ended"));
            }
            if self.deadlocked() {
                return Err(format!(
                    "Sniper (process {pid}) used no CPU while every stream waited for it \
                     (its simulated threads waiting for one another: a deadlock in Sniper), \
                     and was given up"
                ));
            }
        }
        Ok(())
    }

    /// Whether Sniper stalled while every relay waited for it (see the module's note).
    fn deadlocked(&self) -> bool {
        if self.stuck.load(Ordering::Relaxed) {
            return true;
        }
        let mut watch = self.watch.lock().unwrap_or_else(|p| p.into_inner());
        let Some(watch) = watch.as_mut() else {
            return false;
        };
        let relays = self.relays.load(Ordering::SeqCst);
        if relays == 0 || self.idle.load(Ordering::SeqCst) > 0 {
            watch.reset();
            return false;
        }
        let stuck = watch.stalled();
        self.stuck.store(stuck, Ordering::Relaxed);
        stuck
    }

    fn fifo(&self, thread: u64, response: bool) -> PathBuf {
        fifo(&self.prefix, thread, response)
    }
}

/// Sniper's FIFO for thread `thread` of application 0 whose FIFOs are named from `prefix`
/// (`traceinput/trace_prefix`), its replies' when `response`.
pub fn fifo(prefix: &Path, thread: u64, response: bool) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(format!(
        "{}.app0.th{thread}.sift",
        if response { "_response" } else { "" }
    ));
    PathBuf::from(name)
}

/// The streams of one live Sniper simulation (one application).
pub struct Session {
    shared: Arc<Shared>,
    relays: Vec<JoinHandle<Result<(), String>>>,
}

/// One guest thread's stream.
pub struct ThreadStream {
    writer: Writer<Spool<Control>>,
}

impl Session {
    /// Streams for the Sniper whose FIFOs are named from `prefix` (`PREFIX.app0.thN.sift` and
    /// `PREFIX_response.app0.thN.sift`, as `traceinput/trace_prefix` names them), spilling
    /// queued records to files in `spill_dir`; `pid`, Sniper's process, is watched while
    /// waiting for it.
    pub fn new(prefix: PathBuf, spill_dir: PathBuf, pid: Option<i32>) -> Session {
        Session::with(prefix, spill_dir, pid, false)
    }

    /// A session of one thread's stream: its producer waits for Sniper once 64 MiB of
    /// records are queued (no spill file grows with the run's length; with one thread no
    /// wait of the guest's can depend on Sniper's progress).
    pub fn single(prefix: PathBuf, pid: Option<i32>) -> Session {
        let dir = prefix.parent().map(Path::to_path_buf).unwrap_or_default();
        Session::with(prefix, dir, pid, true)
    }

    /// The session, with Sniper given up as deadlocked after `stall` without CPU while every
    /// stream waits for it ([`STALL`] by default).
    pub fn stall(self, stall: Duration) -> Session {
        let pid = self.shared.pid;
        *self.shared.watch.lock().unwrap_or_else(|p| p.into_inner()) =
            pid.map(|p| Stall::new(p, stall));
        self
    }

    fn with(prefix: PathBuf, spill_dir: PathBuf, pid: Option<i32>, bounded: bool) -> Session {
        Session {
            shared: Arc::new(Shared {
                prefix,
                spill_dir,
                pid,
                bounded,
                stop: AtomicBool::new(false),
                ended: AtomicBool::new(false),
                wakes: Mutex::new(HashSet::new()),
                streams: AtomicU64::new(0),
                relays: AtomicU64::new(0),
                idle: AtomicU64::new(0),
                watch: Mutex::new(pid.map(|p| Stall::new(p, STALL))),
                stuck: AtomicBool::new(false),
            }),
            relays: Vec::new(),
        }
    }

    /// The first thread's stream (Sniper's thread 0).
    pub fn thread0(&mut self) -> Result<ThreadStream, SiftError> {
        self.stream(Binding::new(Some(0)))
    }

    fn stream(&mut self, binding: Arc<Binding>) -> Result<ThreadStream, SiftError> {
        let n = self.shared.streams.fetch_add(1, Ordering::Relaxed);
        let queue = Queue::new(
            self.shared.spill_dir.join(format!("spill.{n}")),
            self.shared.bounded,
        );
        let shared = self.shared.clone();
        let q = queue.clone();
        let relay = std::thread::Builder::new()
            .name(format!("bbv-sift-relay-{n}"))
            .spawn(move || relay(&shared, &q, &binding))?;
        self.relays.push(relay);
        Ok(ThreadStream {
            writer: Writer::new(Spool::new(queue))?,
        })
    }

    /// Waits for every relay to deliver its stream (each must have been ended); the first
    /// error, if any.
    pub fn finish(self) -> Result<(), String> {
        let mut first = None;
        for r in self.relays {
            let e = match r.join() {
                Ok(Ok(())) => continue,
                Ok(Err(e)) => e,
                Err(_) => "a relay panicked".into(),
            };
            first.get_or_insert(e);
        }
        first.map_or(Ok(()), Err)
    }

    /// Makes every relay give up its waiting (Sniper failed, or the replay did).
    pub fn abort(&self) {
        self.shared.stop.store(true, Ordering::Relaxed);
    }
}

impl ThreadStream {
    /// Writes one executed instruction.
    pub fn instruction(&mut self, i: &Instruction) -> Result<(), SiftError> {
        self.writer.instruction(i)
    }

    /// Hands what was written so far to the relay, which otherwise waits for a chunk's worth
    /// (or the next record Sniper answers).
    pub fn flush(&mut self) -> Result<(), SiftError> {
        Ok(self.writer.get_mut().flush()?)
    }

    fn control(&mut self, c: Control) -> Result<(), SiftError> {
        let spool = self.writer.get_mut();
        spool.flush()?;
        spool.queue.push_control(c);
        Ok(())
    }

    /// The instructions after this are of instruction set `isa` (one of [`crate::isa`]).
    pub fn isa(&mut self, isa: u32) -> Result<(), SiftError> {
        self.writer.isa_record(isa)
    }

    /// A magic instruction (one of [`crate::command`]), at the instruction about to run.
    pub fn magic(&mut self, cmd: u64) -> Result<(), SiftError> {
        self.writer.magic_record([cmd, 0, 0])?;
        self.control(Control::Magic)
    }

    /// The region of interest starts.
    pub fn start_roi(&mut self) -> Result<(), SiftError> {
        self.magic(command::ROI_START)
    }

    /// A user command (`arg0` one of [`command::region`]'s), at the instruction about to run.
    pub fn user(&mut self, arg0: u64, arg1: u64) -> Result<(), SiftError> {
        self.writer.magic_record([command::USER, arg0, arg1])?;
        self.control(Control::User)
    }

    /// The region of interest ends.
    pub fn end_roi(&mut self) -> Result<(), SiftError> {
        self.magic(command::ROI_END)
    }

    /// The thread creates a thread: its stream, which Sniper reads once it handled this.
    pub fn new_thread(&mut self, session: &mut Session) -> Result<ThreadStream, SiftError> {
        let binding = Binding::new(None);
        self.writer.new_thread_record()?;
        self.control(Control::NewThread(binding.clone()))?;
        session.stream(binding)
    }

    /// A `FUTEX_WAKE` on `uaddr` that woke `woken` threads in the guest; `id` names it to the
    /// waits it ended.
    pub fn futex_wake(&mut self, uaddr: u64, woken: u32, id: u64) -> Result<(), SiftError> {
        let args = [uaddr, futex::WAKE | futex::PRIVATE, woken.into(), 0, 0, 0];
        self.writer.syscall_record(x86_64::FUTEX as u16, args)?;
        self.control(Control::Wake(id))
    }

    /// A `FUTEX_WAIT` on `uaddr` expecting `val`, ended in the guest by wake `partner` (None:
    /// it did not sleep, or ended without a wake).
    pub fn futex_wait(
        &mut self,
        uaddr: u64,
        val: u32,
        partner: Option<u64>,
    ) -> Result<(), SiftError> {
        let args = [uaddr, futex::WAIT | futex::PRIVATE, val.into(), 0, 0, 0];
        self.writer.syscall_record(x86_64::FUTEX as u16, args)?;
        self.control(Control::Wait { val, partner })
    }

    /// The program ends (Sniper stops every thread of it).
    pub fn exit_group(&mut self, code: i32) -> Result<(), SiftError> {
        let args = [code as u64, 0, 0, 0, 0, 0];
        self.writer
            .syscall_record(x86_64::EXIT_GROUP as u16, args)?;
        self.control(Control::ExitGroup)
    }

    /// Ends the stream (its relay delivers what is queued, then the end record).
    pub fn end(self) -> Result<(), SiftError> {
        let spool = self.writer.end()?;
        spool.queue.close();
        Ok(())
    }
}

/// A FIFO end that never waits for a Sniper that is gone or a relay asked to stop.
struct Fifo<'a> {
    file: File,
    shared: &'a Shared,
    /// Its user is done with it (the reply reader stops).
    quit: Option<&'a AtomicBool>,
}

impl Fifo<'_> {
    fn poll(&self, events: i16) -> io::Result<()> {
        loop {
            let mut p = libc::pollfd {
                fd: self.file.as_raw_fd(),
                events,
                revents: 0,
            };
            // SAFETY: one valid pollfd.
            let n = unsafe { libc::poll(&mut p, 1, 200) };
            if n > 0 {
                return Ok(());
            }
            if self.quit.is_some_and(|q| q.load(Ordering::Relaxed)) {
                return Err(io::Error::other("finished"));
            }
            self.shared.check().map_err(io::Error::other)?;
        }
    }
}

impl Write for Fifo<'_> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        loop {
            match self.file.write(b) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.poll(libc::POLLOUT)?,
                r => return r,
            }
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Read for Fifo<'_> {
    fn read(&mut self, b: &mut [u8]) -> io::Result<usize> {
        loop {
            match self.file.read(b) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.poll(libc::POLLIN)?,
                r => return r,
            }
        }
    }
}

/// Opens `path` non-blocking (a FIFO to write: once its reader is there).
fn open(path: &Path, flags: i32, shared: &Shared) -> Result<File, String> {
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
    loop {
        // SAFETY: a valid C string; the descriptor is owned by the File made from it.
        let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_NONBLOCK | libc::O_CLOEXEC) };
        if fd >= 0 {
            // SAFETY: ours and open.
            return Ok(unsafe { File::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::ENXIO) {
            return Err(format!("{}: {e}", path.display()));
        }
        shared.check()?;
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn relay(shared: &Shared, queue: &Queue<Control>, binding: &Binding) -> Result<(), String> {
    // A write to a FIFO whose reader is gone fails with EPIPE here instead of raising SIGPIPE,
    // which QEMU would take for the guest's.
    // SAFETY: a signal set made and used locally, for this thread only.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGPIPE);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
    // However it ends, a producer waiting for room goes on (and fails).
    struct Gone<'a>(&'a Queue<Control>);
    impl Drop for Gone<'_> {
        fn drop(&mut self) {
            self.0.relay_gone();
        }
    }
    let _gone = Gone(queue);
    let _running = Held::new(&shared.relays);
    let id = binding.wait(shared, |s| s.0)?;
    let path = shared.fifo(id, false);
    let out = open(&path, libc::O_WRONLY, shared)?;
    let replies = open(&shared.fifo(id, true), libc::O_RDWR, shared)?;
    binding.update(|s| s.1 = true);
    // Sniper's replies are read as they come, by a thread of their own: Sniper never waits
    // to write one (a reply not yet wanted, to a user command, would otherwise fill the FIFO
    // and stop Sniper, and with it the relay's writes).
    let quit = AtomicBool::new(false);
    let (tx, rx) = mpsc::channel();
    let result = std::thread::scope(|scope| {
        let mut fifo = Fifo {
            file: replies,
            shared,
            quit: Some(&quit),
        };
        scope.spawn(move || loop {
            let r = read_reply(&mut fifo);
            let failed = r.is_err();
            if tx.send(r).is_err() || failed {
                break;
            }
        });
        let mut r = Relay {
            out: io::BufWriter::with_capacity(
                1 << 16,
                Fifo {
                    file: out,
                    shared,
                    quit: None,
                },
            ),
            replies: rx,
            owed: 0,
            shared,
        };
        let result = r.run(queue);
        quit.store(true, Ordering::Relaxed);
        result
    });
    match result {
        // Sniper stops reading the other threads once one ends the program.
        Err(_) if shared.ended.load(Ordering::Relaxed) => Ok(()),
        r => r.map_err(|e| format!("thread {id} ({}): {e}", path.display())),
    }
}

struct Relay<'a> {
    out: io::BufWriter<Fifo<'a>>,
    replies: Receiver<Result<Reply, SiftError>>,
    /// Replies to user commands written and not yet read: Sniper answers in order, so every
    /// reply before the next control's own is one of them.
    owed: u64,
    shared: &'a Shared,
}

impl Relay<'_> {
    fn run(&mut self, queue: &Queue<Control>) -> Result<(), String> {
        let s = |e: io::Error| e.to_string();
        let shared = self.shared;
        let pop = || {
            let _idle = Held::new(&shared.idle);
            queue.pop(&shared.stop)
        };
        while let Some(item) = pop() {
            match item {
                Item::Bytes(b) => self.out.write_all(&b).map_err(s)?,
                Item::Spilled { offset, len } => {
                    let b = queue.read_spilled(offset, len).map_err(s)?;
                    self.out.write_all(&b).map_err(s)?;
                }
                Item::Control(c) => self.control(c).map_err(|e| e.to_string())?,
            }
            self.drain().map_err(|e| e.to_string())?;
        }
        self.shared.check()?;
        self.out.flush().map_err(s)
    }

    fn reply(&mut self) -> Result<Reply, SiftError> {
        loop {
            match self.replies.recv_timeout(Duration::from_millis(200)) {
                Ok(r) => return r,
                Err(RecvTimeoutError::Timeout) => {
                    (self.shared.check()).map_err(|e| SiftError::Io(io::Error::other(e)))?
                }
                Err(RecvTimeoutError::Disconnected) => {
                    return Err(SiftError::Io(io::Error::other("Sniper's replies ended")))
                }
            }
        }
    }

    /// One user command's reply.
    fn user_reply(&mut self, r: Reply) -> Result<(), SiftError> {
        self.owed -= 1;
        match r {
            Reply::Magic(_) => Ok(()),
            r => Err(Self::unexpected("a user command", r)),
        }
    }

    /// Reads the user commands' replies that came.
    fn drain(&mut self) -> Result<(), SiftError> {
        while self.owed > 0 {
            match self.replies.try_recv() {
                Ok(r) => self.user_reply(r?)?,
                Err(_) => break,
            }
        }
        Ok(())
    }

    /// Reads every user command's reply still owed (before a control's own).
    fn settle(&mut self) -> Result<(), SiftError> {
        while self.owed > 0 {
            let r = self.reply()?;
            self.user_reply(r)?;
        }
        Ok(())
    }

    fn unexpected(what: &str, r: Reply) -> SiftError {
        SiftError::Malformed {
            offset: 0,
            why: format!("Sniper answered {what} with {r:?}"),
        }
    }

    fn control(&mut self, c: Control) -> Result<(), SiftError> {
        // A reply waited for: what was written goes to Sniper, and the user commands'
        // replies, which come first, are read before it.
        if !matches!(c, Control::User) {
            self.out.flush()?;
            self.settle()?;
        }
        match c {
            Control::Magic => match self.reply()? {
                Reply::Magic(_) => Ok(()),
                r => Err(Self::unexpected("a magic instruction", r)),
            },
            Control::User => {
                self.owed += 1;
                Ok(())
            }
            Control::NewThread(child) => match self.reply()? {
                Reply::NewThread(id) if id >= 0 => {
                    child.update(|s| s.0 = Some(id as u64));
                    // The parent goes on once Sniper's new thread has its stream: Sniper
                    // simulates the parent alone until then, for as long as the host takes.
                    (child.wait(self.shared, |s| s.1.then_some(())))
                        .map_err(|e| SiftError::Io(io::Error::other(e)))
                }
                r => Err(Self::unexpected("a new thread", r)),
            },
            Control::ExitGroup => match self.reply()? {
                Reply::Syscall(_) => {
                    self.shared.ended.store(true, Ordering::Relaxed);
                    Ok(())
                }
                r => Err(Self::unexpected("exit_group", r)),
            },
            Control::Wake(_) | Control::Wait { .. } => loop {
                match self.reply()? {
                    Reply::Syscall(_) => return Ok(()),
                    Reply::Memory {
                        address,
                        size,
                        write: false,
                        ..
                    } => {
                        let word = self.futex_word(&c);
                        let mut data = vec![0u8; size as usize];
                        let n = data.len().min(4);
                        data[..n].copy_from_slice(&word.to_le_bytes()[..n]);
                        write_memory_response(&mut self.out, address, &data)?;
                        self.out.flush()?;
                    }
                    r => return Err(Self::unexpected("a futex call", r)),
                }
            },
        }
    }

    /// The futex word Sniper reads for `c`, under its thread lock (see the module's note).
    fn futex_word(&self, c: &Control) -> u32 {
        let mut wakes = self.shared.wakes.lock().unwrap_or_else(|p| p.into_inner());
        match *c {
            Control::Wake(id) => {
                wakes.insert(id);
                0
            }
            Control::Wait {
                val,
                partner: Some(p),
            } if !wakes.contains(&p) => val,
            Control::Wait { val, .. } => val.wrapping_add(1),
            _ => 0,
        }
    }
}
