//! A forked child of the guest is not followed.
//!
//! QEMU user mode forks itself when the guest forks, so the child runs guest code under the
//! plugin's callbacks with a copy of its state: its open files and shared mappings are the
//! parent's. Left alone, the child appended its own block ids to the parent's block table
//! (which the host then refused as malformed: any program that ran a subprocess failed) and
//! added its executions to the parent's counters. In the child, right after the fork, every
//! file the plugin holds in its directory is pointed at `/dev/null` and every shared mapping
//! of one is replaced by a private copy: the child keeps running and counting, and nothing of
//! it reaches the parent's files. A child that execs a program runs it natively (QEMU user
//! mode without binfmt_misc), so nothing is lost that exp-bbv would not also split off.

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

static FORKED: AtomicBool = AtomicBool::new(false);
/// The plugin's directory as the kernel names it in `/proc/self`.
static DIR: OnceLock<PathBuf> = OnceLock::new();

/// Detaches forked children from the files in `dir` (call once, at install).
pub fn install(dir: &Path) {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if DIR.set(dir).is_ok() {
        // SAFETY: registering a handler that only makes system calls on its own process.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    }
}

/// Whether this process is a forked child of the profiled one (it writes nothing).
#[inline]
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

extern "C" fn in_child() {
    FORKED.store(true, Ordering::SeqCst);
    crate::turns::forked();
    let Some(dir) = DIR.get() else { return };
    silence_files(dir);
    privatize_mappings(dir);
}

/// Points every descriptor open on a file in `dir` at `/dev/null`.
fn silence_files(dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/proc/self/fd") else {
        return;
    };
    let fds: Vec<i32> = entries
        .flatten()
        .filter_map(|e| {
            let fd: i32 = e.file_name().to_str()?.parse().ok()?;
            std::fs::read_link(e.path())
                .ok()
                .filter(|target| target.starts_with(dir))
                .map(|_| fd)
        })
        .collect();
    if fds.is_empty() {
        return;
    }
    // SAFETY: plain descriptor calls; dup2 replaces each descriptor atomically.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if null < 0 {
            return;
        }
        for fd in fds {
            libc::dup3(null, fd, libc::O_CLOEXEC);
        }
        libc::close(null);
    }
}

/// Replaces every shared mapping of a file in `dir` by a private copy-on-write mapping of the
/// same file at the same address: the child sees the same values and changes only its own.
fn privatize_mappings(dir: &Path) {
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    for line in maps.lines() {
        let Some(m) = Mapping::parse(line) else {
            continue;
        };
        if !m.shared || !Path::new(m.path).starts_with(dir) {
            continue;
        }
        let Ok(path) = CString::new(Path::new(m.path).as_os_str().as_bytes()) else {
            continue;
        };
        // SAFETY: the range is one of our own shared file mappings; MAP_FIXED replaces it
        // whole with the same file's contents, so every pointer into it stays valid.
        unsafe {
            let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
            if fd < 0 {
                continue;
            }
            libc::mmap(
                m.start as *mut libc::c_void,
                m.end - m.start,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_FIXED,
                fd,
                m.offset as libc::off_t,
            );
            libc::close(fd);
        }
    }
}

/// One line of `/proc/self/maps` that names a file.
struct Mapping<'a> {
    start: usize,
    end: usize,
    shared: bool,
    offset: u64,
    path: &'a str,
}

impl<'a> Mapping<'a> {
    fn parse(line: &'a str) -> Option<Mapping<'a>> {
        let mut fields = line.splitn(6, ' ');
        let (range, perms, offset) = (fields.next()?, fields.next()?, fields.next()?);
        let path = fields.nth(2)?.trim_start();
        let (start, end) = range.split_once('-')?;
        Some(Mapping {
            start: usize::from_str_radix(start, 16).ok()?,
            end: usize::from_str_radix(end, 16).ok()?,
            shared: perms.as_bytes().get(3) == Some(&b's'),
            offset: u64::from_str_radix(offset, 16).ok()?,
            path: path.strip_suffix(" (deleted)").unwrap_or(path),
        })
        .filter(|m| m.path.starts_with('/'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_lines() {
        let m = Mapping::parse(
            "7f0000000000-7f0000010000 rw-s 00002000 08:01 1234                       /tmp/d/tbs.state",
        )
        .unwrap();
        assert_eq!(
            (m.start, m.end, m.offset),
            (0x7f00_0000_0000, 0x7f00_0001_0000, 0x2000)
        );
        assert!(m.shared);
        assert_eq!(m.path, "/tmp/d/tbs.state");
        let anon = "7ffd0000-7ffe0000 rw-p 00000000 00:00 0                          [stack]";
        assert!(Mapping::parse(anon).is_none());
        let private = Mapping::parse("1000-2000 r-xp 00000000 08:01 9 /usr/lib/x.so").unwrap();
        assert!(!private.shared);
    }
}
