//! Checkpoints (`checkpoint=FILE`, `bbv checkpoint`): when a capture event fires on thread 1,
//! writes the process's registers, memory and kernel-visible state into the plugin's folder
//! (`checkpoint.E`, `checkpoint.E.mem`, `checkpoint.E.fdN`; the format is
//! [`bbv_plugin_contract::checkpoint`]).
//!
//! Registers come from QEMU's register API (plugin API v3, QEMU 9.1 and later), read in the
//! marker's callback, which QEMU then makes with the registers synced.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use bbv_plugin_contract::checkpoint::{Capture, Descriptor, FdKind, Run};
use bbv_plugin_contract::files;

use bbv_guest::state::{self as guest, Guest};

struct Plan {
    /// Event -> the capture it takes (named by its first event): a region's warmup marker
    /// may run after its start marker (a region that begins in the loader's work, a warmup
    /// from the program's entry), so the first of them captures.
    events: HashMap<u32, u32>,
    /// Captures taken.
    taken: Mutex<HashSet<u32>>,
    dir: PathBuf,
    /// Where the memory files go (`memory DIR`; the plugin's folder by default).
    memory: PathBuf,
}

static PLAN: OnceLock<Plan> = OnceLock::new();

/// Reads the capture list (`capture EVENT [EVENT]` lines, and `memory DIR` for the memory
/// files' folder) and starts following the guest's state.
pub fn init(dir: &Path, file: &Path) -> Result<(), String> {
    if cfg!(feature = "api-v1") {
        return Err("checkpoints read the guest's registers: they need QEMU 9.1 or later".into());
    }
    let text = std::fs::read_to_string(file)
        .map_err(|e| format!("reading the capture list {}: {e}", file.display()))?;
    let mut events = HashMap::new();
    let mut memory = dir.to_path_buf();
    for (i, line) in text.lines().enumerate() {
        let bad = || {
            format!(
                "{}:{}: expected capture EVENT [EVENT] or memory DIR",
                file.display(),
                i + 1
            )
        };
        if let Some(d) = line.strip_prefix("memory ") {
            memory = PathBuf::from(d);
            continue;
        }
        let list: Vec<u32> = (line.strip_prefix("capture ").ok_or_else(bad)?.split(' '))
            .map(|e| e.parse().map_err(|_| bad()))
            .collect::<Result<_, _>>()?;
        let first = *list.first().ok_or_else(bad)?;
        for e in list {
            events.insert(e, first);
        }
    }
    guest::init(&dir.join(files::STDIN))?;
    PLAN.set(Plan {
        events,
        taken: Mutex::new(HashSet::new()),
        dir: dir.to_path_buf(),
        memory,
    })
    .map_err(|_| "checkpoints set up twice".to_string())
}

/// Marker `marker` is at guest address `vaddr` (first translation): one line in
/// `checkpoint.markers`.
pub fn note_marker(marker: u32, vaddr: u64) {
    static NOTED: std::sync::Mutex<Option<HashSet<u32>>> = std::sync::Mutex::new(None);
    let Some(plan) = PLAN.get() else { return };
    let mut noted = NOTED.lock().unwrap_or_else(|e| e.into_inner());
    if !noted.get_or_insert_with(HashSet::new).insert(marker) {
        return;
    }
    let path = plan.dir.join(files::CHECKPOINT_MARKERS);
    let line = format!("{marker} {vaddr:x}\n");
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(line.as_bytes()));
    if let Err(e) = written {
        crate::report_error(&format!("writing {}: {e}", path.display()));
    }
}

/// Whether checkpoints are being taken.
pub fn active() -> bool {
    PLAN.get().is_some()
}

/// The capture marker event `event` takes, if it takes one now (each is taken once).
pub fn wants(event: u32) -> Option<u32> {
    let p = PLAN.get()?;
    let capture = *p.events.get(&event)?;
    let mut taken = p.taken.lock().unwrap_or_else(|e| e.into_inner());
    taken.insert(capture).then_some(capture)
}

/// Registers as QEMU's register API gives them: (name, bytes).
pub type Registers = Vec<(String, Vec<u8>)>;

/// The guest's first instruction: the loader's mappings, from its stack pointer
/// (`registers`, read there).
pub fn first_instruction(registers: Registers) {
    if PLAN.get().is_none() {
        return;
    }
    let Some(rsp) = registers
        .into_iter()
        .find(|(n, _)| n == "rsp")
        .and_then(|(_, b)| Some(u64::from_le_bytes(b.get(..8)?.try_into().ok()?)))
    else {
        guest::with(|g| g.problems.push("no rsp register from QEMU".into()));
        return;
    };
    let base = guest::GUEST_BASE.load(std::sync::atomic::Ordering::Relaxed);
    let stack = bbv_guest::maps::area_at(rsp.wrapping_add(base))
        .map(|(s, e)| (s.wrapping_sub(base), e.wrapping_sub(base)));
    guest::with(|g| g.start(rsp, stack));
}

/// A system call starts on `vcpu`.
pub fn syscall(vcpu: u32, nr: i64, args: [u64; 6]) {
    // Flow control and turns register the syscall callbacks too: no lock for them.
    if active() {
        guest::with(|g| g.syscall(vcpu, nr, args));
    }
}

/// It returns.
pub fn syscall_ret(vcpu: u32, ret: i64) {
    if active() {
        guest::with(|g| g.syscall_ret(vcpu, ret));
    }
}

/// Where the process stands when a capture event fires.
pub struct Moment {
    /// The marker instruction, not yet run.
    pub pc: u64,
    /// Thread 1's instructions before it.
    pub instructions: u64,
    /// (marker, executions before this instruction).
    pub hits: Vec<(u32, u64)>,
    /// More than one thread runs.
    pub several: bool,
}

/// Captures the process at marker event `event`, with `registers` read there.
pub fn capture(event: u32, at: Moment, registers: Registers) {
    let Some(plan) = PLAN.get() else { return };
    let Moment {
        pc,
        instructions,
        hits,
        several,
    } = at;
    let result = guest::with(|g| -> std::io::Result<()> {
        let mut c = Capture {
            pc,
            instructions,
            registers,
            maps: g.areas.list(),
            hits,
            sigmask: g.sigmask,
            brk: g.brk,
            sigactions: g.actions.values().copied().collect(),
            cwd: std::env::current_dir()
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default(),
            problems: g.problems.clone(),
            ..Capture::default()
        };
        if several {
            c.problems
                .push("several threads run: a checkpoint restores thread 1 only".into());
        }
        for m in g.shared_writable() {
            c.problems.push(format!(
                "shared writable mapping {m}: the checkpoint's copy is private"
            ));
        }
        c.data = memory(g, &c, &plan.memory.join(files::checkpoint_memory(event)))?;
        c.fds = descriptors(g, event, &plan.dir, &mut c.problems);
        if g.stdin_recorded() {
            c.stdin_consumed = Some(g.stdin_bytes);
        }
        let text = c.to_text();
        bbv_files::write_atomic(
            &plan.dir.join(files::checkpoint_state(event)),
            text.as_bytes(),
        )
        .map_err(std::io::Error::other)
    });
    if let Some(Err(e)) = result {
        crate::report_error(&format!("writing checkpoint {event}: {e}"));
    }
}

/// Where the kept pages go: the memory file and the runs so far.
struct Kept {
    out: BufWriter<File>,
    runs: Vec<Run>,
    offset: u64,
}

impl Kept {
    /// Keeps the non-zero pages of `bytes`, read from guest address `addr`.
    fn pages(&mut self, addr: u64, bytes: &[u8]) -> std::io::Result<()> {
        for (i, page) in bytes.chunks(PAGE).enumerate() {
            if page.iter().all(|&b| b == 0) {
                continue;
            }
            let at = addr + (i * PAGE) as u64;
            self.out.write_all(page)?;
            match self.runs.last_mut() {
                Some(r) if r.addr + r.len == at && r.offset + r.len == self.offset => {
                    r.len += PAGE as u64
                }
                _ => self.runs.push(Run {
                    addr: at,
                    len: PAGE as u64,
                    offset: self.offset,
                }),
            }
            self.offset += PAGE as u64;
        }
        Ok(())
    }
}

const PAGE: usize = 4096;

/// Writes the non-zero pages of every readable mapping, returning where each run went. Pages
/// of anonymous memory never touched (not resident: a dictionary reserved, a stack's depth)
/// are zeros, left unread.
fn memory(g: &Guest, c: &Capture, path: &Path) -> std::io::Result<Vec<Run>> {
    const CHUNK: usize = 1 << 20;
    let mut file = File::create(path)?;
    file.seek(SeekFrom::Start(files::CHECKPOINT_MEMORY_START))?;
    let mut kept = Kept {
        out: BufWriter::with_capacity(1 << 20, file),
        runs: Vec::new(),
        offset: files::CHECKPOINT_MEMORY_START,
    };
    let mut buf = vec![0u8; CHUNK];
    for m in c.maps.iter().filter(|m| m.prot & 1 != 0) {
        let anonymous = m.name.starts_with('[');
        let mut at = m.start;
        while at < m.end {
            let len = ((m.end - at) as usize).min(CHUNK);
            let resident = if anonymous {
                guest::resident(at, len)
            } else {
                vec![true; len / PAGE]
            };
            // Runs of resident pages, each read at once.
            let mut i = 0;
            while i < resident.len() {
                let n = resident[i..]
                    .iter()
                    .take_while(|&&r| r == resident[i])
                    .count();
                if resident[i] {
                    let from = at + (i * PAGE) as u64;
                    let piece = &mut buf[..n * PAGE];
                    read_pages(g, from, piece);
                    kept.pages(from, piece)?;
                }
                i += n;
            }
            at += len as u64;
        }
    }
    kept.out.into_inner().map_err(|e| e.into_error())?;
    Ok(kept.runs)
}

/// Reads guest memory at `from` into `piece` whole, or page by page where that fails (a file
/// mapping past its file's end reads as nothing), the unreadable pages as zeros.
fn read_pages(g: &Guest, from: u64, piece: &mut [u8]) {
    if g.read_into(from, piece) {
        return;
    }
    for (j, page) in piece.chunks_mut(PAGE).enumerate() {
        if !g.read_into(from + (j * PAGE) as u64, page) {
            page.fill(0);
        }
    }
}

/// The guest's open descriptors; regular files it can read are copied.
fn descriptors(g: &Guest, event: u32, dir: &Path, problems: &mut Vec<String>) -> Vec<Descriptor> {
    let mut out = Vec::new();
    for &fd in &g.fds {
        // SAFETY: fcntl and fstat on a descriptor number; a closed one answers EBADF.
        let (flags, st) = unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFL);
            let mut st: libc::stat = std::mem::zeroed();
            if flags < 0 || libc::fstat(fd, &mut st) != 0 {
                continue;
            }
            (flags as u32, st)
        };
        let kind = match st.st_mode & libc::S_IFMT {
            libc::S_IFREG => FdKind::File,
            libc::S_IFCHR => FdKind::Char,
            libc::S_IFIFO => FdKind::Pipe,
            libc::S_IFSOCK => FdKind::Socket,
            libc::S_IFDIR => FdKind::Dir,
            _ => FdKind::Other,
        };
        // SAFETY: lseek without moving.
        let offset = unsafe { libc::lseek(fd, 0, libc::SEEK_CUR) };
        let path = guest::fd_path(fd);
        let readable = flags & libc::O_ACCMODE as u32 != libc::O_WRONLY as u32;
        let copied = kind == FdKind::File
            && readable
            && copy_file(fd, flags, &st, &dir.join(files::checkpoint_file(event, fd)));
        if kind == FdKind::File && readable && !copied {
            problems.push(format!("fd {fd} ({path}): its file could not be copied"));
        }
        out.push(Descriptor {
            fd,
            flags,
            offset: u64::try_from(offset).ok(),
            kind,
            copied,
            inherited: g.inherited.contains(&fd),
            path: path.replace('\n', "?"),
        });
    }
    out
}

/// A file's identity and version: (device, inode, size, mtime seconds, nanoseconds).
type FileVersion = (u64, u64, i64, i64, i64);

/// Copies the file open as `fd` (`st`, its fstat) to `to`. A file open read-only that an
/// earlier capture copied, unchanged since, is linked to that copy instead: the input of a
/// program read over many regions is kept once.
fn copy_file(fd: i32, flags: u32, st: &libc::stat, to: &Path) -> bool {
    static COPIES: Mutex<Vec<(FileVersion, PathBuf)>> = Mutex::new(Vec::new());
    let v = (
        st.st_dev,
        st.st_ino,
        st.st_size,
        st.st_mtime,
        st.st_mtime_nsec,
    );
    let read_only = flags & libc::O_ACCMODE as u32 == libc::O_RDONLY as u32;
    let mut copies = COPIES.lock().unwrap_or_else(|e| e.into_inner());
    if read_only {
        if let Some((_, earlier)) = copies.iter().find(|(w, _)| *w == v) {
            if std::fs::hard_link(earlier, to).is_ok() {
                return true;
            }
        }
    }
    if std::fs::copy(format!("/proc/self/fd/{fd}"), to).is_err() {
        return false;
    }
    if read_only {
        copies.push((v, to.to_path_buf()));
    }
    true
}
