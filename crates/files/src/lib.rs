//! Files that appear whole or not at all, the one way bbvkit's Rust crates write an output.
//!
//! * [`AtomicFiles`]: a set of outputs, each written to a temporary file beside its
//!   destination and renamed only when every one of them was written, so that a failed or
//!   killed command leaves the previous files, not a mix.
//! * [`write_atomic`]: the same for one file; [`move_file`]: a finished file moved into place,
//!   across file systems too.
//! * [`folder`]: a folder's next state built beside it and swapped in at once ([`folder::Staged`]),
//!   one writer at a time.
//! * [`interrupt`]: the signal thread that removes registered temporaries when bbv is killed,
//!   and holds a signal off during a set of renames.
//!
//! * [`input`]: the other direction, reading within bounds: regular files and pipes only,
//!   whole files up to a size limit, lines up to a length limit, names that stay in their
//!   folder.
//! * [`child`]: another tool's output read within bounds, as it runs.
//! * [`fnv1a`]: the 64-bit digest bbvkit names contents by (a suite job's inputs, a run's
//!   identity).
//!
//! Devices and FIFOs (`/dev/null`, `/dev/stdout`) are written in place: renaming onto them
//! would replace the device itself ([`is_special_file`]).

mod atomic;
pub mod child;
pub mod folder;
pub mod input;
pub mod interrupt;

use std::path::{Path, PathBuf};

pub use atomic::{move_file, write_atomic, AtomicFiles};

/// FNV-1a (64 bits) of `bytes`, byte by byte: a stable digest (the same in every build and
/// version) for naming contents, not for security.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What can go wrong writing outputs or reading inputs.
#[derive(Debug, thiserror::Error)]
pub enum FilesError {
    /// A file could not be written, renamed or copied.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// Outputs named in a way that cannot work (two outputs at one path, no file name).
    #[error("{0}")]
    Invalid(String),
    /// An output folder is being written by another process.
    #[error("{0}")]
    Busy(String),
    /// An input is a folder, a device or a socket.
    #[error("{}: is {what}, not a regular file or a pipe", path.display())]
    NotAFile {
        /// The file.
        path: PathBuf,
        /// What it is instead (`a device`).
        what: &'static str,
    },
    /// An input is larger than its format allows.
    #[error("{}: larger than {limit} bytes (the limit for this file)", path.display())]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The limit in bytes.
        limit: u64,
    },
    /// A line is longer than its format allows.
    #[error("{}:{line}: line longer than {limit} bytes (the limit for this file)", path.display())]
    LineTooLong {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// The limit in bytes.
        limit: usize,
    },
    /// A text input holds bytes that are not UTF-8.
    #[error("{}:{line}: not UTF-8 text", path.display())]
    NotText {
        /// The file.
        path: PathBuf,
        /// 1-based line of the first such byte.
        line: u64,
    },
}

impl FilesError {
    fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FilesError::Io {
            path: path.into(),
            source,
        }
    }
}

/// Whether `path` exists and is neither a regular file nor a folder: a device such as
/// `/dev/null` or `/dev/stdout`, or a FIFO. Outputs are written into such a file in place:
/// writing a temporary file and renaming it over the path would replace the device itself.
pub fn is_special_file(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| !m.is_file() && !m.is_dir())
}

#[cfg(test)]
mod tests {
    /// FNV-1a's published 64-bit values.
    #[test]
    fn fnv1a_is_the_published_one() {
        assert_eq!(super::fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(super::fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(super::fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }
}
