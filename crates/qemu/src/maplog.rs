//! A text file the plugin appends to through a shared mapping of it: the block and slot
//! tables, one line per new block.
//!
//! A `write` per line cost two system calls per translated block (4,400 for `/bin/true`, tens
//! of thousands for an interpreter). Through the mapping a line is a copy into the page cache,
//! which keeps it when QEMU dies of a signal without running the plugin's exit (QEMU 7.2): the
//! file is then its lines followed by zeros up to the mapped size, and the host reads it up to
//! the first NUL (text lines never hold one). The files are the plugin's own, read only by the
//! host, so they keep that form at a normal exit too.

use std::fs::File;
use std::os::unix::io::AsRawFd;
use std::path::Path;

/// Bytes mapped at first; the mapping doubles when full.
const FIRST: usize = 256 * 1024;

/// An append-only text file written through a shared mapping.
pub struct MapLog {
    file: File,
    base: *mut u8,
    cap: usize,
    len: usize,
}

// SAFETY: the mapping is only touched through &mut MapLog, behind the callers' locks.
unsafe impl Send for MapLog {}

impl MapLog {
    /// Creates (or empties) `path`.
    pub fn create(path: &Path) -> std::io::Result<MapLog> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        let mut log = MapLog {
            file,
            base: std::ptr::null_mut(),
            cap: 0,
            len: 0,
        };
        log.grow(FIRST)?;
        Ok(log)
    }

    /// Maps the file at `cap` bytes (zero-filled past its lines).
    fn grow(&mut self, cap: usize) -> std::io::Result<()> {
        self.file.set_len(cap as u64)?;
        // SAFETY: a new shared mapping of our own file; the old one is unmapped only after
        // the new one exists, and nothing else points into it.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                cap,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                self.file.as_raw_fd(),
                0,
            );
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            if !self.base.is_null() {
                libc::munmap(self.base as *mut libc::c_void, self.cap);
            }
            self.base = p as *mut u8;
        }
        self.cap = cap;
        Ok(())
    }

    /// Appends `text` (whole lines).
    pub fn append(&mut self, text: &[u8]) -> std::io::Result<()> {
        if crate::fork::forked() {
            // A forked child's copy of the table is not the parent's to extend.
            return Ok(());
        }
        if self.len + text.len() > self.cap {
            let mut cap = (self.cap * 2).max(FIRST);
            while self.len + text.len() > cap {
                cap *= 2;
            }
            self.grow(cap)?;
        }
        // SAFETY: len + text.len() <= cap, inside the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr(), self.base.add(self.len), text.len());
        }
        self.len += text.len();
        Ok(())
    }
}
