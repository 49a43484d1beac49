//! `record=PATH`: ChampSim records (bbv-champsim) of every instruction thread 1 runs, written
//! to PATH (a file or a pipe) in execution order. x86-64 guests only.
//!
//! Each instruction is decoded once, at translation, into the registers ChampSim needs; its
//! record is completed at run time: whether the branch was taken (the next instruction run is
//! not the fall-through) and one address per memory operand (the lowest, when QEMU reports an
//! operand's access in parts). A record is written when the next instruction starts, the last
//! one at exit.

use std::cell::UnsafeCell;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};

use bbv_champsim::x86::{Decoder, Operands};

/// One translated instruction (leaked: QEMU keeps calling with it as long as the code lives).
pub struct RecInsn {
    ip: u64,
    ops: Operands,
}

impl RecInsn {
    /// Whether it has memory operands (and so needs the access callback).
    pub fn has_memory(&self) -> bool {
        self.ops.loads + self.ops.stores > 0
    }
}

struct Pending {
    ip: u64,
    ops: Operands,
    loads: [u64; 4],
    n_loads: usize,
    stores: [u64; 2],
    n_stores: usize,
}

struct Recorder {
    out: BufWriter<File>,
    /// The reader went away (ChampSim done with a pipe): nothing more is written.
    closed: bool,
    pending: Option<Pending>,
}

/// The recorder, touched only by thread 1's callbacks (one vCPU at a time, so no lock on the
/// per-instruction path) and by the exit callback, which QEMU runs with the vCPUs stopped.
struct Exclusive(UnsafeCell<Option<Recorder>>);

// SAFETY: see `Exclusive`: never two threads at once.
unsafe impl Sync for Exclusive {}

static RECORDER: Exclusive = Exclusive(UnsafeCell::new(None));
static ACTIVE: AtomicBool = AtomicBool::new(false);
/// Translation may happen on any vCPU's thread: the decoder has a lock of its own.
static DECODER: OnceLock<Mutex<Decoder>> = OnceLock::new();

fn recorder() -> Option<&'static mut Recorder> {
    if !ACTIVE.load(Ordering::Relaxed) {
        return None;
    }
    // SAFETY: see `Exclusive`; callers are thread 1's callbacks or the exit callback.
    unsafe { (*RECORDER.0.get()).as_mut() }
}

/// Opens PATH for the records (at plugin registration, before any vCPU runs).
pub fn init(path: &Path) -> Result<(), String> {
    let file = File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let _ = DECODER.set(Mutex::new(Decoder::new()));
    // SAFETY: registration runs before any callback.
    unsafe {
        *RECORDER.0.get() = Some(Recorder {
            out: BufWriter::with_capacity(1 << 20, file),
            closed: false,
            pending: None,
        });
    }
    ACTIVE.store(true, Ordering::Release);
    Ok(())
}

/// Whether records are being written.
pub fn active() -> bool {
    ACTIVE.load(Ordering::Relaxed)
}

/// The instruction at `ip` (its bytes), decoded for its records.
pub fn translate(bytes: &[u8], ip: u64) -> &'static RecInsn {
    let ops = DECODER
        .get()
        .and_then(|d| {
            d.lock()
                .unwrap_or_else(|e| e.into_inner())
                .decode(bytes, ip)
        })
        .unwrap_or(Operands {
            len: bytes.len() as u8,
            dst_regs: [0; 2],
            src_regs: [0; 4],
            loads: 0,
            stores: 0,
            kind: bbv_champsim::BranchKind::NotBranch,
        });
    Box::leak(Box::new(RecInsn { ip, ops }))
}

impl Recorder {
    /// Writes the pending record: taken when `next` is not its fall-through.
    fn flush(&mut self, next: Option<u64>) {
        let Some(p) = self.pending.take() else { return };
        let taken = next.is_some_and(|n| n != p.ip.wrapping_add(u64::from(p.ops.len)));
        let r = p
            .ops
            .record(p.ip, taken, &p.loads[..p.n_loads], &p.stores[..p.n_stores]);
        if !self.closed && r.write(&mut self.out).is_err() {
            self.closed = true;
        }
    }
}

/// Thread 1 starts the instruction `insn`.
pub fn exec(insn: &RecInsn) {
    let Some(r) = recorder() else { return };
    r.flush(Some(insn.ip));
    r.pending = Some(Pending {
        ip: insn.ip,
        ops: insn.ops,
        loads: [0; 4],
        n_loads: 0,
        stores: [0; 2],
        n_stores: 0,
    });
}

/// Thread 1's current instruction accesses `vaddr`.
pub fn access(vaddr: u64, store: bool) {
    let Some(r) = recorder() else { return };
    let Some(p) = r.pending.as_mut() else { return };
    let (list, n, operands) = if store {
        (&mut p.stores[..], &mut p.n_stores, p.ops.stores)
    } else {
        (&mut p.loads[..], &mut p.n_loads, p.ops.loads)
    };
    if *n < usize::from(operands).min(list.len()) {
        list[*n] = vaddr;
        *n += 1;
    } else if *n > 0 {
        // A part of an operand already seen (a wide access split): keep its lowest address.
        list[*n - 1] = list[*n - 1].min(vaddr);
    }
}

/// The guest exits: the last record, and everything out.
pub fn finish() {
    let Some(r) = recorder() else { return };
    r.flush(None);
    if !r.closed {
        let _ = r.out.flush();
    }
}
