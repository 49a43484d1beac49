//! `record=PATH`: ChampSim records (bbv-champsim) of every instruction thread 1 runs, written
//! to PATH (a file or a pipe) in execution order; `trace=FILE`: the records of a replay's
//! windows (`bbv trace`), each to its own path, opened when its window starts. x86-64, AArch64
//! and RISC-V 64 guests.
//!
//! A window starts at the instruction where its start event fires (the marker callbacks run
//! after the recorder's, so that instruction is pending when the event comes, and is written to
//! the windows open when it is flushed); from its end event on it takes TAIL more records, the
//! end marker's first.
//!
//! Each instruction is decoded once, at translation, into the registers ChampSim needs; its
//! record is completed at run time: whether the branch was taken (the next instruction run is
//! not the fall-through) and one address per memory operand (the lowest, when QEMU reports an
//! operand's access in parts). A record is written when the next instruction starts, the last
//! one at exit.

use std::cell::{RefCell, UnsafeCell};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use bbv_champsim::{BranchKind, Decoder, Isa, Operands};
use bbv_champsim::{Record, RECORD_BYTES};

use bbv_sift::feed::{Code, WindowSpec};

/// One translated instruction (leaked: QEMU keeps calling with it as long as the code lives):
/// its record as far as translation knows it, so that a run only copies it and fills in the
/// addresses and whether it was taken.
pub struct RecInsn {
    /// The record, not taken, no addresses.
    template: [u8; RECORD_BYTES],
    /// Its address, bytes, fall-through, branch kind and memory operands that get an address
    /// (at most 4 and 2): what both ChampSim's records and Sniper's SIFT streams need.
    pub code: Code,
}

impl RecInsn {
    /// Whether it has memory operands (and so needs the access callback).
    pub fn has_memory(&self) -> bool {
        self.code.loads + self.code.stores > 0
    }
}

/// The record of the instruction running, completed as its accesses come.
struct Pending {
    bytes: [u8; RECORD_BYTES],
    insn: &'static RecInsn,
    n_loads: u8,
    n_stores: u8,
}

/// Where a window is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Recording,
    /// Records still to write after the end event.
    Tail(u64),
    Done,
}

/// One output: the whole run (`record=`) or a window (`trace=`).
struct Output {
    path: PathBuf,
    out: Option<BufWriter<File>>,
    start: u32,
    /// A second event that also starts it, whichever comes first (the region's own start: a
    /// warmup placed at the program's entry can come after a region in the C library's
    /// start-up).
    alt: u32,
    end: u32,
    tail: u64,
    /// Records it may still take: a window whose end marker is missed stops here instead of
    /// recording to the program's end.
    left: u64,
    state: State,
}

struct Recorder {
    outputs: Vec<Output>,
    /// Windows armed (their start event is the next execution of its marker) but not open.
    armed: Vec<usize>,
    /// Outputs in Recording or Tail.
    open: Vec<usize>,
    pending: Option<Pending>,
    /// The pending record is a rep instruction's, and a later iteration is running: its
    /// accesses are not recorded.
    merging: bool,
}

/// The recorder, touched only by thread 1's callbacks (one vCPU at a time, so no lock on the
/// per-instruction path) and by the exit callback, which QEMU runs with the vCPUs stopped.
struct Exclusive(UnsafeCell<Option<Recorder>>);

// SAFETY: see `Exclusive`: never two threads at once.
unsafe impl Sync for Exclusive {}

static RECORDER: Exclusive = Exclusive(UnsafeCell::new(None));
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Translations carry the recorder's callbacks: always for `record=`; for `trace=` only while a
/// window is open or about to open (armed one marker execution before its start event), so that
/// the replay runs at its own speed up to the first window and (see [`UNINSTRUMENT`]) between
/// windows. Changing it flushes every translation.
static INSTRUMENT: AtomicBool = AtomicBool::new(false);
/// Whether translations drop the recorder's callbacks again between windows. Only where QEMU
/// clears its pointer to the running block's memory callbacks on every exit from generated code
/// (QEMU 10 does, in cpu_tb_exec and cpu_loop_exit; plugin API v3, QEMU 9.1 and later): QEMU
/// 7.2 leaves it set when an exception (a syscall) ends a block, frees what it points to at
/// the next flush, and a helper's memory access after that runs freed callbacks (`bbv trace`
/// died on signal 11 or QEMU's "code should not be reached" in 2 runs of 3 on gzip). Under
/// API v1 the one flush that installs the callbacks, before the first window, comes before
/// any memory callback ran, and no flush follows.
pub(crate) const UNINSTRUMENT: bool = cfg!(feature = "api-v3");
/// The plugin's callback for a flush the recorder asks for (it re-registers everything).
static RESET: OnceLock<extern "C" fn(qemu_plugin::sys::qemu_plugin_id_t)> = OnceLock::new();
/// `count_rep=iteration`: one record per iteration of a rep string instruction.
pub static REP_ITERATIONS: AtomicBool = AtomicBool::new(false);
/// The guest's ISA, set before any translation.
static ISA: OnceLock<Isa> = OnceLock::new();

thread_local! {
    /// Translation may happen on any vCPU's thread: each has a decoder of its own (Capstone's
    /// handle is not to be shared).
    static DECODER: RefCell<Option<Decoder>> = const { RefCell::new(None) };
}

fn recorder() -> Option<&'static mut Recorder> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: see `Exclusive`; callers are thread 1's callbacks or the exit callback.
    unsafe { (*RECORDER.0.get()).as_mut() }
}

/// Whether translations carry the recorder's callbacks.
pub fn instrumenting() -> bool {
    INSTRUMENT.load(Ordering::Relaxed)
}

/// Sets the callback of the flushes the recorder asks for.
pub fn set_reset(cb: extern "C" fn(qemu_plugin::sys::qemu_plugin_id_t)) {
    let _ = RESET.set(cb);
}

/// Translations carry the recorder's callbacks (`on`) or not, flushing them when that changes.
pub(crate) fn instrument(on: bool) {
    if INSTRUMENT.swap(on, Ordering::Relaxed) != on {
        if let Some(&cb) = RESET.get() {
            crate::ffi::request_reset_with(cb);
        }
    }
}

/// The next execution of a marker fires `event`: windows it starts are armed, and translations
/// get the recorder's callbacks before that execution (at `start`, before any translation,
/// for events of a marker's first execution).
pub fn arm(event: u32, start: bool) {
    let Some(r) = recorder() else { return };
    let mut any = false;
    for (i, o) in r.outputs.iter().enumerate() {
        if o.state == State::Waiting
            && (o.start == event || o.alt == event)
            && !r.armed.contains(&i)
        {
            r.armed.push(i);
            any = true;
        }
    }
    if any {
        instrument_on(start);
    }
}

/// Translations get the recorder's callbacks: at `start` (before any translation) without a
/// flush.
pub(crate) fn instrument_on(start: bool) {
    if start {
        INSTRUMENT.store(true, Ordering::Relaxed);
    } else {
        instrument(true);
    }
}

/// Opens PATH for the records of the whole run (at plugin registration, before any vCPU runs).
pub fn init(path: &Path, isa: Isa) -> Result<(), String> {
    INSTRUMENT.store(true, Ordering::Relaxed);
    let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    install(
        vec![Output {
            path: path.to_path_buf(),
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            start: u32::MAX,
            alt: u32::MAX,
            end: u32::MAX,
            tail: 0,
            left: u64::MAX,
            state: State::Recording,
        }],
        isa,
    )
}

/// Reads the windows of `trace=FILE` (each opens its path when it starts): `window ID START
/// ALT END TAIL LIMIT PATH` for ChampSim records of thread 1, `sift ID START ALT END ROI LIMIT
/// PID THREADS CONDENSE PREFIX` for every thread's SIFT streams into the Sniper of process PID
/// whose FIFOs are named from PREFIX (THREADS: 1 when one thread runs, else 2; CONDENSE:
/// [`WindowSpec::condense`]), the region of
/// interest from event ROI to END (a START of [`bbv_plugin_contract::events::WHOLE_RUN`]: the
/// whole run, its region of interest from the first instruction to the last). The SIFT
/// windows are returned, for the feed (feed.rs).
pub fn init_windows(file: &Path, isa: Isa) -> Result<Vec<WindowSpec>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let mut outputs = Vec::new();
    let mut sift = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = || format!("{}:{}: malformed window line", file.display(), i + 1);
        // The last field, a path, may hold spaces.
        let (is_sift, mut f) = match line.split_once(' ') {
            Some(("window", rest)) => (false, rest.splitn(7, ' ')),
            Some(("sift", rest)) => (true, rest.splitn(10, ' ')),
            _ => return Err(bad()),
        };
        let mut num = || f.next().and_then(|s| s.parse::<u64>().ok()).ok_or_else(bad);
        let (_id, start, alt, end) = (num()?, num()?, num()?, num()?);
        let event = |n: u64| u32::try_from(n).map_err(|_| bad());
        if is_sift {
            let (roi, limit, pid, threads, condense) = (num()?, num()?, num()?, num()?, num()?);
            let prefix = f.next().filter(|p| !p.is_empty()).ok_or_else(bad)?;
            sift.push(WindowSpec {
                start: event(start)?,
                alt: event(alt)?,
                end: event(end)?,
                roi: event(roi)?,
                limit,
                pid: Some(i32::try_from(pid).map_err(|_| bad())?),
                prefix: PathBuf::from(prefix),
                threads: threads > 1,
                bounds: None,
                condense,
            });
            continue;
        }
        let (tail, left) = (num()?, num()?);
        let path = f.next().filter(|p| !p.is_empty()).ok_or_else(bad)?;
        outputs.push(Output {
            path: PathBuf::from(path),
            out: None,
            start: event(start)?,
            alt: event(alt)?,
            end: event(end)?,
            tail,
            left,
            state: State::Waiting,
        });
    }
    install(outputs, isa)?;
    Ok(sift)
}

fn install(outputs: Vec<Output>, isa: Isa) -> Result<(), String> {
    let _ = ISA.set(isa);
    let open = (0..outputs.len())
        .filter(|&i| outputs[i].state == State::Recording)
        .collect();
    // SAFETY: registration runs before any callback.
    unsafe {
        *RECORDER.0.get() = Some(Recorder {
            armed: Vec::new(),
            outputs,
            open,
            pending: None,
            merging: false,
        });
    }
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Marker event `event` fired on thread 1: windows start or go into their tail.
pub fn event(event: u32) {
    let Some(r) = recorder() else { return };
    for i in 0..r.outputs.len() {
        let o = &mut r.outputs[i];
        if o.state == State::Waiting && (o.start == event || o.alt == event) {
            let opened = File::create(&o.path)
                .map(|f| o.out = Some(BufWriter::with_capacity(1 << 20, f)))
                .map_err(|e| format!("opening {}: {e}", o.path.display()));
            match opened {
                Ok(()) => {
                    o.state = State::Recording;
                    r.open.push(i);
                    r.armed.retain(|&j| j != i);
                }
                Err(e) => {
                    crate::report_error(&e);
                    o.state = State::Done;
                }
            }
        }
        let o = &mut r.outputs[i];
        if o.state == State::Recording && o.end == event {
            o.state = State::Tail(o.tail);
            if o.tail == 0 {
                r.close(i);
            }
        }
    }
}

/// The instruction at `ip` (its bytes), decoded for its records.
pub fn translate(bytes: &[u8], ip: u64) -> &'static RecInsn {
    let ops = ISA
        .get()
        .and_then(|&isa| {
            DECODER
                .with_borrow_mut(|d| d.get_or_insert_with(|| Decoder::new(isa)).decode(bytes, ip))
        })
        .unwrap_or(Operands::opaque(bytes.len() as u8));
    let mut code = [0u8; bbv_sift::MAX_SIZE];
    let code_len = bytes.len().min(code.len());
    code[..code_len].copy_from_slice(&bytes[..code_len]);
    Box::leak(Box::new(RecInsn {
        code: Code {
            ip,
            bytes: code,
            len: code_len as u8,
            fallthrough: ip.wrapping_add(u64::from(ops.len)),
            // Sniper's notion (bbv_sift::Instruction::branch): conditional branches only.
            branch: ops.kind == BranchKind::Conditional,
            always_taken: ops.kind.always_taken(),
            loads: ops.loads.min(4),
            stores: ops.stores.min(2),
            rep: ops.rep,
        },
        template: ops.record(ip, false, &[], &[]).to_bytes(),
    }))
}

impl Recorder {
    /// Writes the pending record to every open output: taken when `next` is not its
    /// fall-through.
    fn flush(&mut self, next: Option<u64>) {
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        if self.open.is_empty() {
            self.pending = None;
            return;
        }
        // A jump to its own fall-through is still taken (ChampSim and Pin's tracer say so).
        let c = &p.insn.code;
        let taken = c.always_taken || next.is_some_and(|n| n != c.fallthrough);
        p.bytes[Record::TAKEN_OFFSET] = u8::from(taken);
        let bytes = p.bytes;
        self.pending = None;
        let mut k = 0;
        while k < self.open.len() {
            let i = self.open[k];
            let o = &mut self.outputs[i];
            let ok = o.out.as_mut().is_some_and(|w| w.write_all(&bytes).is_ok());
            o.left = o.left.saturating_sub(1);
            let finished = o.left == 0
                || match o.state {
                    State::Tail(left) => {
                        o.state = State::Tail(left - 1);
                        left == 1
                    }
                    _ => false,
                };
            // A reader gone (ChampSim done with a pipe) or a tail complete: closed.
            if !ok || finished {
                self.close(i);
            } else {
                k += 1;
            }
        }
    }

    fn close(&mut self, i: usize) {
        let o = &mut self.outputs[i];
        if let Some(mut w) = o.out.take() {
            let _ = w.flush();
        }
        let window = o.start != u32::MAX;
        o.state = State::Done;
        self.open.retain(|&j| j != i);
        // Between windows the replay runs without the recorder's callbacks.
        if UNINSTRUMENT && window && self.open.is_empty() && self.armed.is_empty() {
            self.pending = None;
            instrument(false);
        }
    }
}

/// Thread 1 starts the instruction `insn`.
pub fn exec(insn: &'static RecInsn) {
    let Some(r) = recorder() else { return };
    // Between windows under plugin API v1 (see UNINSTRUMENT) nothing is pending: a window's
    // first record, its start marker's instruction, runs after the window is armed.
    if r.open.is_empty() && r.armed.is_empty() {
        r.pending = None;
        return;
    }
    // Counting rep instances (`count_rep=instance`): QEMU runs a rep string instruction once per
    // iteration, and its iterations make one record (the first iteration's addresses).
    if insn.code.rep
        && !REP_ITERATIONS.load(Ordering::Relaxed)
        && r.pending
            .as_ref()
            .is_some_and(|p| p.insn.code.ip == insn.code.ip)
    {
        r.merging = true;
        return;
    }
    r.merging = false;
    r.flush(Some(insn.code.ip));
    r.pending = Some(Pending {
        bytes: insn.template,
        insn,
        n_loads: 0,
        n_stores: 0,
    });
}

/// Thread 1's current instruction accesses `vaddr`.
pub fn access(vaddr: u64, store: bool) {
    let Some(r) = recorder() else { return };
    if r.merging {
        return;
    }
    let Some(p) = r.pending.as_mut() else { return };
    let (n, operands, offset): (_, _, fn(usize) -> usize) = if store {
        (&mut p.n_stores, p.insn.code.stores, Record::store_offset)
    } else {
        (&mut p.n_loads, p.insn.code.loads, Record::load_offset)
    };
    if *n < operands {
        let o = offset(usize::from(*n));
        p.bytes[o..o + 8].copy_from_slice(&vaddr.to_le_bytes());
        *n += 1;
    } else if *n > 0 {
        // A part of an operand already seen (a wide access split): keep its lowest address.
        let o = offset(usize::from(*n) - 1);
        let seen = u64::from_le_bytes(p.bytes[o..o + 8].try_into().unwrap_or([0xff; 8]));
        let lowest = seen.min(vaddr);
        p.bytes[o..o + 8].copy_from_slice(&lowest.to_le_bytes());
    }
}

/// The guest exits: the last record, and everything out.
pub fn finish() {
    let Some(r) = recorder() else { return };
    r.flush(None);
    for i in r.open.clone() {
        r.close(i);
    }
}
