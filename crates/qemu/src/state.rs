//! A thread's counters in a shared file mapping, so the host can finish the thread's files even
//! when the guest dies by a signal (QEMU 7.2 runs no plugin callback then) or is killed.
//!
//! Layout of `thread.N.state` (native-endian u64s): the [`Header`], then one count per block
//! id (index 0 unused) holding the current, unfinished interval. Read by `bbv-collect`.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;

use bbv_plugin_contract::state::{HEADER_WORDS, THREAD_MAGIC};
use bbv_profile::CountStore;

/// The thread's totals, kept current while it runs; field order is the word order of
/// `bbv_plugin_contract::state::thread`.
#[repr(C)]
pub struct Header {
    pub magic: u64,
    pub number: u64,
    /// Instructions executed.
    pub total: u64,
    /// Executions of rep string instructions (exp-bbv's "Total reps").
    pub rep_iterations: u64,
    /// Executed rep instances (exp-bbv's "Unique reps").
    pub rep_instances: u64,
    /// fldcw instructions executed.
    pub fldcw: u64,
    /// Vectors written to the thread's `.bb` file.
    pub intervals: u64,
    /// Counts that follow the header.
    pub capacity: u64,
}

/// The mapping; only the owning vCPU thread touches it while the guest runs.
pub struct Shared {
    file: File,
    base: *mut u64,
    capacity: usize,
}

// SAFETY: the mapping is owned by one guest thread at a time (see thread.rs).
unsafe impl Send for Shared {}

impl Shared {
    pub fn create(path: &Path, number: u32) -> std::io::Result<Shared> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(path)?;
        let mut s = Shared {
            file,
            base: std::ptr::null_mut(),
            capacity: 0,
        };
        s.remap(1 << 16)?;
        let h = s.header();
        h.magic = THREAD_MAGIC;
        h.number = u64::from(number);
        Ok(s)
    }

    fn remap(&mut self, capacity: usize) -> std::io::Result<()> {
        let bytes = (HEADER_WORDS + capacity) * 8;
        self.file.set_len(bytes as u64)?;
        // SAFETY: mapping our own file; the old mapping (if any) is moved or replaced whole.
        let p = unsafe {
            if self.base.is_null() {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    self.file.as_raw_fd(),
                    0,
                )
            } else {
                libc::mremap(
                    self.base as *mut _,
                    (HEADER_WORDS + self.capacity) * 8,
                    bytes,
                    libc::MREMAP_MAYMOVE,
                )
            }
        };
        if p == libc::MAP_FAILED {
            return Err(std::io::Error::last_os_error());
        }
        self.base = p as *mut u64;
        self.capacity = capacity;
        self.header().capacity = capacity as u64;
        Ok(())
    }

    pub fn header(&mut self) -> &mut Header {
        // SAFETY: the mapping starts with HEADER_WORDS words, larger than Header.
        unsafe { &mut *(self.base as *mut Header) }
    }
}

impl CountStore for Shared {
    #[inline]
    fn counts(&mut self) -> &mut [u64] {
        // SAFETY: capacity words follow the header in the mapping.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(HEADER_WORDS), self.capacity) }
    }

    fn grow(&mut self, len: usize) {
        if len > self.capacity {
            if let Err(e) = self.remap(len.next_power_of_two()) {
                crate::report_error(&format!("growing a thread's counters: {e}"));
                std::process::abort();
            }
        }
    }
}
