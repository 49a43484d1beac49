//! Executable checkpoints of x86-64 Linux processes (`bbv checkpoint`).
//!
//! A checkpoint is a static ELF with no interpreter: the captured process's non-zero pages
//! (the plugin's memory file, finished in place), a small restorer generated here as machine
//! code, and the bytes of the files it had open. Run natively or under `qemu-x86_64`, the restorer
//!
//! 1. maps every captured mapping at its address (`MAP_FIXED_NOREPLACE`: an address this
//!    process already uses is reported, never overwritten) and the kept pages over them from
//!    its own file, then gives each mapping its protections;
//! 2. recreates the descriptors: a file the region may read gets its captured bytes (a memfd
//!    at the same number and offset), stdin from a pipe or terminal the bytes the run read from
//!    it after the capture, a file open for writing a file in the checkpoint's folder; stdout
//!    and stderr stay the caller's;
//! 3. restores the working directory, the signal dispositions and mask, the TLS base, the
//!    x87/SSE state and the general registers, and jumps to the captured instruction;
//! 4. stops at the region's end: an `int3` on the end marker's instruction counts its
//!    executions (each one before the last runs a moved copy of the instruction) and the
//!    process exits 0 at the count the profile names. A program that exits by itself before
//!    then exits 101 (a seccomp filter traps its exit natively), and a CPU-time limit ends one
//!    that runs off course (SIGXCPU).
//!
//! What QEMU's register API cannot give is set as the ABI leaves it at a call boundary (the
//! arithmetic flags, computed lazily by QEMU, clear; the x87 tag word empty; AVX's upper halves
//! zero); `bbv checkpoint --check` shows whether a region noticed.

mod displace;
mod elf;
mod emit;
mod image;
mod restorer;

pub use image::{build, Built, Inputs};

/// What can go wrong building a checkpoint.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The capture cannot make a checkpoint.
    #[error("{0}")]
    Invalid(String),
    /// The restorer could not be assembled (a bug).
    #[error("assembling the restorer: {0}")]
    Assemble(String),
}

impl From<iced_x86::IcedError> for CheckpointError {
    fn from(e: iced_x86::IcedError) -> Self {
        CheckpointError::Assemble(e.to_string())
    }
}

/// Exit status of a checkpoint that could not restore the process (a message says why).
pub const EXIT_RESTORE_FAILED: i32 = 100;
/// Exit status of a checkpoint whose program exited before the region's end.
pub const EXIT_EARLY: i32 = 101;
/// Exit status of a checkpoint that got a SIGTRAP not its own.
pub const EXIT_FOREIGN_TRAP: i32 = 102;

const FNV_PRIME: u64 = 0x0100_0000_01b3;

/// FNV-1a's step over 8-byte little-endian words, the last partial word byte by byte: a
/// fingerprint that reads a checkpoint at memory speed, the same however the bytes are cut.
struct Fnv {
    h: u64,
    pending: Vec<u8>,
}

impl Fnv {
    fn new() -> Fnv {
        Fnv {
            h: 0xcbf2_9ce4_8422_2325,
            pending: Vec::with_capacity(8),
        }
    }

    fn update(&mut self, mut bytes: &[u8]) {
        if !self.pending.is_empty() {
            let take = (8 - self.pending.len()).min(bytes.len());
            self.pending.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
            if self.pending.len() < 8 {
                return;
            }
            let w = u64::from_le_bytes(self.pending[..].try_into().expect("8 bytes"));
            self.h = (self.h ^ w).wrapping_mul(FNV_PRIME);
            self.pending.clear();
        }
        let words = bytes.chunks_exact(8);
        self.pending.extend_from_slice(words.remainder());
        for w in words {
            let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
            self.h = (self.h ^ w).wrapping_mul(FNV_PRIME);
        }
    }

    fn finish(&self) -> u64 {
        (self.pending.iter()).fold(self.h, |h, &b| (h ^ b as u64).wrapping_mul(FNV_PRIME))
    }
}

/// What `checkpoints.json` records of each file ([`Fnv`], 64 bits), so that `--check` refuses
/// a checkpoint changed since (a copy cut short, a disk error).
pub fn fingerprint(mut r: impl std::io::Read) -> std::io::Result<u64> {
    let mut f = Fnv::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 {
            return Ok(f.finish());
        }
        f.update(&buf[..n]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_fingerprint_does_not_depend_on_how_the_bytes_are_cut() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = fingerprint(&bytes[..]).unwrap();
        for cut in [1, 3, 8, 13, 999] {
            let mut f = Fnv::new();
            for piece in bytes.chunks(cut) {
                f.update(piece);
            }
            assert_eq!(f.finish(), whole, "pieces of {cut}");
        }
        let mut other = bytes.clone();
        other[500] ^= 1;
        assert_ne!(fingerprint(&other[..]).unwrap(), whole);
    }
}
