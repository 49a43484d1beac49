//! The guest process's kernel-visible state, for checkpoints: its mappings, open descriptors,
//! signal dispositions and mask, and program break, kept from its system calls.
//!
//! QEMU's own mappings share the host process's map, so the guest's cannot be read from
//! `/proc/self/maps` alone: they are the loader's (the program's, the interpreter's and the
//! vDSO's segments, found from the auxiliary vector on the initial stack, and the stack's own
//! mapping) and then whatever the guest's mmap, mremap, munmap, mprotect and brk made of them.
//! Guest memory is read through `/proc/self/mem`, which neither faults on a bad guest pointer
//! nor cares for the protections QEMU puts on pages holding translated code.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use bbv_plugin_contract::checkpoint::{Mapping, SigAction};
use bbv_plugin_contract::sysno::{self, x86_64};

const PAGE: u64 = 4096;

fn page_down(a: u64) -> u64 {
    a & !(PAGE - 1)
}

fn page_up(a: u64) -> u64 {
    a.saturating_add(PAGE - 1) & !(PAGE - 1)
}

/// Host address minus guest address (0 for an x86-64 guest on an x86-64 host, in practice).
pub static GUEST_BASE: AtomicU64 = AtomicU64::new(0);

/// One mapping of the guest's model.
#[derive(Clone, Debug, PartialEq)]
struct Area {
    end: u64,
    prot: u32,
    name: String,
    /// A shared mapping: the checkpoint's private copy stops writing through to the file.
    shared: bool,
}

/// Non-overlapping mappings keyed by start.
#[derive(Default, Debug)]
pub struct AreaMap(BTreeMap<u64, Area>);

impl AreaMap {
    /// Cuts [start, end) out of every mapping.
    fn remove(&mut self, start: u64, end: u64) {
        let hit: Vec<u64> = self
            .0
            .range(..end)
            .filter(|(&s, a)| a.end > start && s < end)
            .map(|(&s, _)| s)
            .collect();
        for s in hit {
            let a = self.0.remove(&s).expect("listed above");
            if s < start {
                self.0.insert(
                    s,
                    Area {
                        end: start,
                        ..a.clone()
                    },
                );
            }
            if a.end > end {
                self.0.insert(end, a);
            }
        }
    }

    fn insert(&mut self, start: u64, end: u64, prot: u32, name: String, shared: bool) {
        if start >= end {
            return;
        }
        self.remove(start, end);
        self.0.insert(
            start,
            Area {
                end,
                prot,
                name,
                shared,
            },
        );
    }

    fn protect(&mut self, start: u64, end: u64, prot: u32) {
        let parts: Vec<(u64, Area)> = self
            .0
            .range(..end)
            .filter(|(_, a)| a.end > start)
            .map(|(&s, a)| (s, a.clone()))
            .collect();
        for (s, a) in parts {
            let (from, to) = (s.max(start), a.end.min(end));
            self.insert(from, to, prot, a.name, a.shared);
        }
    }

    /// The mapping holding `addr`.
    fn at(&self, addr: u64) -> Option<(u64, &Area)> {
        let (&s, a) = self.0.range(..=addr).next_back()?;
        (addr < a.end).then_some((s, a))
    }

    /// The mappings in address order, neighbours of the same kind merged.
    pub fn list(&self) -> Vec<Mapping> {
        let mut out: Vec<Mapping> = Vec::new();
        for (&start, a) in &self.0 {
            match out.last_mut() {
                Some(m) if m.end == start && m.prot == a.prot && m.name == a.name => m.end = a.end,
                _ => out.push(Mapping {
                    start,
                    end: a.end,
                    prot: a.prot,
                    name: a.name.clone(),
                }),
            }
        }
        out
    }
}

/// A system call waiting for its return.
struct Pending {
    nr: i64,
    args: [u64; 6],
    /// rt_sigaction's new disposition, read at entry.
    action: Option<SigAction>,
    /// rt_sigprocmask's set, read at entry.
    set: Option<u64>,
}

/// What the guest holds.
pub struct Guest {
    /// Its mappings.
    pub areas: AreaMap,
    /// Its open descriptors.
    pub fds: BTreeSet<i32>,
    /// Those of them it was started with above 2 (passed down by what started it), while
    /// they still hold what they held then.
    pub inherited: BTreeSet<i32>,
    /// Dispositions it set.
    pub actions: BTreeMap<u32, SigAction>,
    /// Its blocked signals.
    pub sigmask: u64,
    /// Its break, and where its heap starts.
    pub brk: u64,
    heap_start: Option<u64>,
    pending: HashMap<u32, Pending>,
    /// The stdin stream's file and bytes so far, when stdin is not a regular file.
    stdin: Option<File>,
    /// Bytes of stdin read so far.
    pub stdin_bytes: u64,
    /// Something the model could not follow.
    pub problems: Vec<String>,
    mem: Option<File>,
}

static GUEST: Mutex<Option<Guest>> = Mutex::new(None);

/// Starts tracking; `stdin_stream` records what the guest reads from a stdin that is not a
/// regular file.
pub fn init(stdin_stream: &Path) -> Result<(), String> {
    // SAFETY: fstat of fd 0 into a zeroed struct.
    let stdin_regular = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(0, &mut st) == 0 && (st.st_mode & libc::S_IFMT) == libc::S_IFREG
    };
    let stdin = if stdin_regular {
        None
    } else {
        Some(
            File::create(stdin_stream)
                .map_err(|e| format!("creating {}: {e}", stdin_stream.display()))?,
        )
    };
    let inherited = inherited();
    let fds = (0..3)
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .chain(inherited.iter().copied())
        .collect();
    *GUEST.lock().unwrap_or_else(|e| e.into_inner()) = Some(Guest {
        areas: AreaMap::default(),
        fds,
        inherited,
        actions: BTreeMap::new(),
        sigmask: 0,
        brk: 0,
        heap_start: None,
        pending: HashMap::new(),
        stdin,
        stdin_bytes: 0,
        problems: Vec::new(),
        mem: File::open("/proc/self/mem").ok(),
    });
    Ok(())
}

/// The descriptors above 2 open without close-on-exec as the plugin starts (before QEMU opens
/// the guest's program): what started QEMU passed them down, and the guest has them too.
/// QEMU's own and the plugin's are close-on-exec.
fn inherited() -> BTreeSet<i32> {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return BTreeSet::new();
    };
    (entries.flatten())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&fd| fd > 2)
        // SAFETY: F_GETFD only reads the descriptor's flags.
        .filter(|&fd| {
            let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
            flags >= 0 && flags & libc::FD_CLOEXEC == 0
        })
        .collect()
}

/// Runs `f` on the model, when tracking.
pub fn with<R>(f: impl FnOnce(&mut Guest) -> R) -> Option<R> {
    let mut g = GUEST.lock().unwrap_or_else(|e| e.into_inner());
    g.as_mut().map(f)
}

impl Guest {
    /// Reads guest memory; None where any of it is not mapped.
    pub fn read(&self, addr: u64, len: usize) -> Option<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_into(addr, &mut buf).then_some(buf)
    }

    fn word(&self, addr: u64) -> Option<u64> {
        let b = self.read(addr, 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    }

    /// Reads into `buf`, false where any of it is not mapped.
    pub fn read_into(&self, addr: u64, buf: &mut [u8]) -> bool {
        let Some(mem) = self.mem.as_ref() else {
            return false;
        };
        let host = addr.wrapping_add(GUEST_BASE.load(Ordering::Relaxed));
        mem.read_exact_at(buf, host).is_ok()
    }

    /// The PT_LOAD segments of an ELF image whose program headers are at `phdr` (`n` of them),
    /// its lowest segment loaded at `base` (None: placed as its PT_PHDR says).
    fn segments(&mut self, phdr: u64, n: u64, base: Option<u64>, name: &str) {
        let Some(table) = self.read(phdr, (n * 56) as usize) else {
            self.problems
                .push(format!("{name}: program headers unreadable"));
            return;
        };
        let field = |i: usize, at: usize, w: usize| -> u64 {
            let b = &table[i * 56 + at..i * 56 + at + w];
            b.iter().rev().fold(0, |v, &x| (v << 8) | x as u64)
        };
        let loads = || (0..n as usize).filter(|&i| field(i, 0, 4) == 1);
        // PT_PHDR says where the headers were meant to be; without it the image is not moved.
        let bias = match base {
            Some(b) => b.wrapping_sub(page_down(
                loads().map(|i| field(i, 16, 8)).min().unwrap_or(0),
            )),
            None => (0..n as usize)
                .find(|&i| field(i, 0, 4) == 6)
                .map_or(0, |i| phdr.wrapping_sub(field(i, 16, 8))),
        };
        for i in loads() {
            let flags = field(i, 4, 4) as u32;
            // PF_X 1, PF_W 2, PF_R 4 -> PROT_READ 1, PROT_WRITE 2, PROT_EXEC 4.
            let prot = ((flags & 4) >> 2) | (flags & 2) | ((flags & 1) << 2);
            let start = bias.wrapping_add(field(i, 16, 8));
            let end = start.wrapping_add(field(i, 40, 8));
            self.areas.insert(
                page_down(start),
                page_up(end),
                prot,
                name.to_string(),
                false,
            );
        }
    }

    /// The loader's mappings, from the initial stack pointer: the auxiliary vector names the
    /// program's headers, the interpreter and the vDSO; `stack` is the host mapping holding
    /// `rsp` (start, end).
    pub fn start(&mut self, rsp: u64, stack: Option<(u64, u64)>) {
        let Some(argc) = self.word(rsp) else {
            self.problems.push("the initial stack is unreadable".into());
            return;
        };
        let mut p = rsp + 8 * (argc + 2);
        while self.word(p).is_some_and(|w| w != 0) {
            p += 8;
        }
        p += 8;
        let mut aux: HashMap<u64, u64> = HashMap::new();
        for _ in 0..256 {
            let (Some(k), Some(v)) = (self.word(p), self.word(p + 8)) else {
                break;
            };
            if k == 0 {
                break;
            }
            aux.insert(k, v);
            p += 16;
        }
        if let (Some(&phdr), Some(&n)) = (aux.get(&3), aux.get(&5)) {
            // The program's path is in the host's map (QEMU mapped its file).
            let host = phdr.wrapping_add(GUEST_BASE.load(Ordering::Relaxed));
            let name = crate::maps::path_at(host).unwrap_or_else(|| "[program]".into());
            self.segments(phdr, n.min(256), None, &name);
        }
        for (key, name) in [(7u64, "[interpreter]"), (33, "[vdso]")] {
            let Some(&base) = aux.get(&key).filter(|&&b| b != 0) else {
                continue;
            };
            let header = self.read(base, 64);
            if let Some(h) = header.filter(|h| h.starts_with(b"\x7fELF")) {
                let off = u64::from_le_bytes(h[32..40].try_into().expect("8 bytes"));
                let n = u16::from_le_bytes([h[56], h[57]]) as u64;
                // The interpreter's path is in the host's map (QEMU mapped its file).
                let host = base.wrapping_add(GUEST_BASE.load(Ordering::Relaxed));
                let name = match key {
                    7 => crate::maps::path_at(host).unwrap_or_else(|| name.to_string()),
                    _ => name.to_string(),
                };
                self.segments(base + off, n.min(64), Some(base), &name);
            }
        }
        if let Some((s, e)) = stack {
            self.areas.insert(s, e, 3, "[stack]".into(), false);
        }
    }

    /// A system call starts.
    pub fn syscall(&mut self, vcpu: u32, nr: i64, args: [u64; 6]) {
        let mut p = Pending {
            nr,
            args,
            action: None,
            set: None,
        };
        match nr {
            // rt_sigaction(sig, act, oact, size)
            x86_64::RT_SIGACTION if args[1] != 0 => {
                p.action = self.read(args[1], 32).map(|b| {
                    let w = |i: usize| u64::from_le_bytes(b[i * 8..i * 8 + 8].try_into().unwrap());
                    SigAction {
                        signal: args[0] as u32,
                        handler: w(0),
                        flags: w(1),
                        restorer: w(2),
                        mask: w(3),
                    }
                })
            }
            // rt_sigprocmask(how, set, oset, size)
            x86_64::RT_SIGPROCMASK if args[1] != 0 => p.set = self.word(args[1]),
            _ => {}
        }
        self.pending.insert(vcpu, p);
    }

    /// The system call started on `vcpu` returns `ret`.
    pub fn syscall_ret(&mut self, vcpu: u32, ret: i64) {
        let Some(p) = self.pending.remove(&vcpu) else {
            return;
        };
        if ret < 0 && ret > -4096 {
            return;
        }
        let a = p.args;
        let r = ret as u64;
        match p.nr {
            // read(fd, buf, n), readv(fd, iov, n)
            x86_64::READ | x86_64::READV if a[0] == 0 && ret > 0 => self.record_stdin(p.nr, a, r),
            x86_64::MMAP => {
                // mmap(addr, len, prot, flags, fd, off)
                let anon = a[3] & 0x20 != 0 || a[4] as i32 == -1;
                let name = if anon {
                    "[anon]".to_string()
                } else {
                    fd_path(a[4] as i32)
                };
                let shared = a[3] & 0x03 == 0x01 && !anon;
                self.areas
                    .insert(r, r + page_up(a[1]), a[2] as u32 & 7, name, shared);
            }
            x86_64::MPROTECT => {
                self.areas
                    .protect(page_down(a[0]), page_up(a[0] + a[1]), a[2] as u32 & 7)
            }
            x86_64::MUNMAP => self.areas.remove(page_down(a[0]), page_up(a[0] + a[1])),
            x86_64::MREMAP => {
                // mremap(old, old_len, new_len, flags, new)
                let (prot, name, shared) = self
                    .areas
                    .at(a[0])
                    .map_or((3, "[anon]".into(), false), |(_, x)| {
                        (x.prot, x.name.clone(), x.shared)
                    });
                self.areas.remove(page_down(a[0]), page_up(a[0] + a[1]));
                self.areas.insert(r, r + page_up(a[2]), prot, name, shared);
            }
            x86_64::BRK => self.brk(r),
            x86_64::RT_SIGACTION => {
                if let Some(act) = p.action {
                    self.actions.insert(act.signal, act);
                }
            }
            x86_64::RT_SIGPROCMASK => self.mask(a[0], p.set),
            x86_64::CLOSE => self.closed(|fd| fd == a[0] as i32),
            // close_range(first, last, flags)
            x86_64::CLOSE_RANGE if a[2] & 4 == 0 => {
                self.closed(|fd| (fd as u64) >= a[0] && (fd as u64) <= a[1])
            }
            // dup2, dup3: the new number
            x86_64::DUP2 | x86_64::DUP3 => self.opened(a[1] as i32),
            // pipe, pipe2, socketpair: two numbers in memory
            x86_64::PIPE | x86_64::PIPE2 | x86_64::SOCKETPAIR => {
                let at = if p.nr == x86_64::SOCKETPAIR {
                    a[3]
                } else {
                    a[0]
                };
                if let Some(b) = self.read(at, 8) {
                    for c in b.chunks(4) {
                        self.opened(i32::from_le_bytes(c.try_into().expect("4 bytes")));
                    }
                }
            }
            // fcntl(F_DUPFD, F_DUPFD_CLOEXEC)
            x86_64::FCNTL if a[1] == 0 || a[1] == 1030 => self.opened(ret as i32),
            nr if sysno::x86_64(nr).is_some_and(|c| c.returns_fd) => self.opened(ret as i32),
            _ => {}
        }
    }

    /// The descriptors `which` says were closed.
    fn closed(&mut self, which: impl Fn(i32) -> bool) {
        self.fds.retain(|&fd| !which(fd));
        self.inherited.retain(|&fd| !which(fd));
    }

    /// Descriptor `fd` now holds something the guest opened.
    fn opened(&mut self, fd: i32) {
        self.fds.insert(fd);
        self.inherited.remove(&fd);
    }

    fn brk(&mut self, r: u64) {
        let start = *self.heap_start.get_or_insert(page_up(r));
        let (old, new) = (page_up(self.brk).max(start), page_up(r).max(start));
        if new > old {
            self.areas.insert(old, new, 3, "[heap]".into(), false);
        } else if new < old {
            self.areas.remove(new, old);
        }
        self.brk = r;
    }

    fn mask(&mut self, how: u64, set: Option<u64>) {
        let Some(set) = set else { return };
        // SIGKILL and SIGSTOP cannot be blocked.
        let set = set & !((1 << 8) | (1 << 18));
        match how {
            0 => self.sigmask |= set,
            1 => self.sigmask &= !set,
            2 => self.sigmask = set,
            _ => {}
        }
    }

    fn record_stdin(&mut self, nr: i64, a: [u64; 6], mut n: u64) {
        let Some(mut out) = self.stdin.take() else {
            return;
        };
        let pieces: Vec<(u64, u64)> = if nr == x86_64::READ {
            vec![(a[1], n)]
        } else {
            (0..a[2].min(1024))
                .filter_map(|i| Some((self.word(a[1] + 16 * i)?, self.word(a[1] + 16 * i + 8)?)))
                .collect()
        };
        for (buf, len) in pieces {
            let take = len.min(n);
            if take == 0 {
                break;
            }
            match self.read(buf, take as usize) {
                Some(bytes) if out.write_all(&bytes).is_ok() => self.stdin_bytes += take,
                _ => {
                    self.problems
                        .push("recording the bytes read from stdin failed".into());
                    return;
                }
            }
            n -= take;
        }
        self.stdin = Some(out);
    }

    /// Whether stdin's bytes are being recorded (it is not a regular file).
    pub fn stdin_recorded(&self) -> bool {
        self.stdin.is_some()
    }

    /// Shared mappings that are writable (a checkpoint's copy no longer writes the file).
    pub fn shared_writable(&self) -> Vec<String> {
        self.areas
            .0
            .iter()
            .filter(|(_, a)| a.shared && a.prot & 2 != 0)
            .map(|(s, a)| format!("{:x}-{:x} {}", s, a.end, a.name))
            .collect()
    }
}

/// Per page of guest memory [addr, addr + len) (whole pages): whether it is resident. Where
/// the kernel cannot say, every page is.
pub fn resident(addr: u64, len: usize) -> Vec<bool> {
    let pages = len / PAGE as usize;
    let host = addr.wrapping_add(GUEST_BASE.load(Ordering::Relaxed));
    let mut vec = vec![0u8; pages];
    // SAFETY: mincore only reads the page tables of [host, host + len) and writes one byte per
    // page into vec.
    let ok = unsafe { libc::mincore(host as *mut libc::c_void, len, vec.as_mut_ptr()) } == 0;
    vec.iter().map(|&b| !ok || b & 1 != 0).collect()
}

/// The path of the host descriptor `fd` (the guest's own number in user mode).
pub fn fd_path(fd: i32) -> String {
    std::fs::read_link(format!("/proc/self/fd/{fd}"))
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "[anon]".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn areas_split_and_merge() {
        let mut m = AreaMap::default();
        m.insert(0x1000, 0x5000, 3, "a".into(), false);
        m.protect(0x2000, 0x3000, 1);
        let l = m.list();
        assert_eq!(l.len(), 3);
        assert_eq!((l[1].start, l[1].end, l[1].prot), (0x2000, 0x3000, 1));
        m.protect(0x2000, 0x3000, 3);
        assert_eq!(m.list().len(), 1, "merged back");
        m.remove(0x4000, 0x9000);
        m.insert(0x0, 0x1800, 5, "b".into(), false);
        let l = m.list();
        assert_eq!(
            l.iter().map(|x| (x.start, x.end)).collect::<Vec<_>>(),
            [(0, 0x1800), (0x1800, 0x4000)]
        );
        assert_eq!(m.at(0x1800).map(|x| x.0), Some(0x1800));
        assert!(m.at(0x4000).is_none());
    }
}
