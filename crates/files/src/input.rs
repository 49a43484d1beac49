//! Reading what a user hands over, within bounds: only regular files and pipes are opened
//! (a link to `/dev/zero` or a folder is refused by name), whole-file reads stop at a size
//! limit, and lines stop at a length limit, each error naming the file, the line and the
//! limit. Messages quote at most [`QUOTE_BYTES`] of the input.

use std::fs::File;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::path::{Path, PathBuf};

use crate::FilesError;

/// The most bytes of a user's input an error message repeats.
pub const QUOTE_BYTES: usize = 200;

/// Opens `path` for reading if it is a regular file or a named pipe (process substitution,
/// `mkfifo`). Devices, sockets and folders are refused: reading `/dev/zero` would never end.
pub fn open(path: &Path) -> Result<File, FilesError> {
    // Checked before opening as well as after: opening some devices has effects.
    let meta = std::fs::metadata(path).map_err(|e| FilesError::io(path, e))?;
    refuse_special(path, &meta)?;
    let file = File::open(path).map_err(|e| FilesError::io(path, e))?;
    let meta = file.metadata().map_err(|e| FilesError::io(path, e))?;
    refuse_special(path, &meta)?;
    Ok(file)
}

fn refuse_special(path: &Path, meta: &std::fs::Metadata) -> Result<(), FilesError> {
    use std::os::unix::fs::FileTypeExt;
    let t = meta.file_type();
    let what = if t.is_file() || t.is_fifo() {
        return Ok(());
    } else if t.is_dir() {
        "a folder"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a file"
    };
    Err(FilesError::NotAFile {
        path: path.to_path_buf(),
        what,
    })
}

/// Reads all of `path` (a regular file or a pipe) as UTF-8 text, refusing more than `limit`
/// bytes.
pub fn read_text(path: &Path, limit: u64) -> Result<String, FilesError> {
    let bytes = read_bytes(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        let at = e.utf8_error().valid_up_to();
        let bytes = e.as_bytes();
        FilesError::NotText {
            path: path.to_path_buf(),
            line: 1 + memchr::memchr_iter(b'\n', &bytes[..at]).count() as u64,
        }
    })
}

/// Reads all of `path` (a regular file or a pipe), refusing more than `limit` bytes.
pub fn read_bytes(path: &Path, limit: u64) -> Result<Vec<u8>, FilesError> {
    let file = open(path)?;
    let size = file.metadata().map(|m| m.len()).unwrap_or(0);
    if size > limit {
        return Err(FilesError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    let mut bytes = Vec::with_capacity(size as usize);
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| FilesError::io(path, e))?;
    if bytes.len() as u64 > limit {
        return Err(FilesError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(bytes)
}

/// A text file read line by line, no line longer than a limit.
pub struct Lines<R = BufReader<File>> {
    reader: R,
    path: PathBuf,
    max: usize,
    buf: Vec<u8>,
    line: u64,
}

impl Lines {
    /// Opens `path` (see [`open`]); lines longer than `max` bytes are an error.
    pub fn open(path: &Path, max: usize) -> Result<Self, FilesError> {
        Ok(Lines::new(BufReader::new(open(path)?), path, max))
    }
}

impl<R: BufRead> Lines<R> {
    /// Reads lines from `reader`; `path` names it in messages.
    pub fn new(reader: R, path: &Path, max: usize) -> Self {
        Lines {
            reader,
            path: path.to_path_buf(),
            max,
            buf: Vec::new(),
            line: 0,
        }
    }

    /// The number of the line last returned (1-based; 0 before the first).
    pub fn line(&self) -> u64 {
        self.line
    }

    /// The file, for messages.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next line without its `\n` (or `\r\n`), and its number; `None` at the end of
    /// the file.
    pub fn next_line(&mut self) -> Result<Option<(u64, &str)>, FilesError> {
        self.buf.clear();
        let mut ended = false;
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(FilesError::io(&self.path, e)),
            };
            if chunk.is_empty() {
                break;
            }
            let (take, done) = match memchr::memchr(b'\n', chunk) {
                Some(i) => (i + 1, true),
                None => (chunk.len(), false),
            };
            if self.buf.len() + take - usize::from(done) > self.max {
                return Err(FilesError::LineTooLong {
                    path: self.path.clone(),
                    line: self.line + 1,
                    limit: self.max,
                });
            }
            self.buf.extend_from_slice(&chunk[..take]);
            self.reader.consume(take);
            if done {
                ended = true;
                break;
            }
        }
        if self.buf.is_empty() && !ended {
            return Ok(None);
        }
        self.line += 1;
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        match std::str::from_utf8(&self.buf) {
            Ok(s) => Ok(Some((self.line, s))),
            Err(_) => Err(FilesError::NotText {
                path: self.path.clone(),
                line: self.line,
            }),
        }
    }
}

/// Whether `name` (read from a file bbv wrote, but maybe edited) names a file of the folder it
/// is joined to: one plain component, not empty, absolute, `..` or a path through others.
pub fn is_file_name(name: &str) -> bool {
    let mut parts = Path::new(name).components();
    matches!(
        (parts.next(), parts.next()),
        (Some(std::path::Component::Normal(_)), None)
    )
}

/// The last `n` non-blank lines (trimmed) of the file at `path`, from its last 4 KiB only (a
/// tool's log can be large): what a message quotes of another tool's output. None readable:
/// empty.
pub fn last_lines(path: &Path, n: usize) -> Vec<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut tail = Vec::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map_or(0, |m| m.len());
        let _ = f.seek(SeekFrom::Start(len.saturating_sub(4096)));
        let _ = f.take(4096).read_to_end(&mut tail);
    }
    let text = String::from_utf8_lossy(&tail);
    let lines: Vec<String> = (text.lines().map(str::trim))
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    lines[lines.len().saturating_sub(n)..].to_vec()
}

/// `bytes` for a message: at most [`QUOTE_BYTES`] of them, escaped, and how many more there
/// were.
pub fn quote(bytes: &[u8]) -> String {
    let shown = &bytes[..bytes.len().min(QUOTE_BYTES)];
    let mut s = String::from_utf8_lossy(shown).escape_debug().to_string();
    if bytes.len() > shown.len() {
        s.push_str(&format!("... ({} bytes more)", bytes.len() - shown.len()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_in_their_folder() {
        assert!(is_file_name("region-1.elf") && is_file_name(".region-2.partial"));
        for bad in ["", "/etc/passwd", "../x", "a/b", "..", "."] {
            assert!(!is_file_name(bad), "{bad}");
        }
    }

    fn lines(text: &[u8], max: usize) -> Result<Vec<String>, FilesError> {
        let mut l = Lines::new(text, Path::new("f"), max);
        let mut out = Vec::new();
        while let Some((_, s)) = l.next_line()? {
            out.push(s.to_string());
        }
        Ok(out)
    }

    #[test]
    fn lines_end_with_or_without_a_newline_and_lose_carriage_returns() {
        assert_eq!(lines(b"a\r\nbc\n\nd", 2).unwrap(), ["a", "bc", "", "d"]);
        assert!(lines(b"", 2).unwrap().is_empty());
    }

    #[test]
    fn a_line_over_the_limit_is_an_error_naming_file_line_and_limit() {
        assert_eq!(lines(b"ab\nabc\n", 3).unwrap(), ["ab", "abc"]);
        let e = lines(b"ab\nabcd\n", 3).unwrap_err().to_string();
        assert_eq!(e, "f:2: line longer than 3 bytes (the limit for this file)");
        // Across the reader's buffer refills too.
        let long = vec![b'x'; 100_000];
        let r = BufReader::with_capacity(16, &long[..]);
        let mut l = Lines::new(r, Path::new("f"), 1000);
        assert!(l.next_line().is_err());
    }

    #[test]
    fn invalid_utf8_names_the_line() {
        let e = lines(b"ok\n\xff\n", 10).unwrap_err().to_string();
        assert_eq!(e, "f:2: not UTF-8 text");
    }

    #[test]
    fn devices_and_folders_are_refused_and_sizes_bounded() {
        let e = read_text(Path::new("/dev/zero"), 10)
            .unwrap_err()
            .to_string();
        assert_eq!(e, "/dev/zero: is a device, not a regular file or a pipe");
        let dir = tempfile::tempdir().unwrap();
        let e = Lines::open(dir.path(), 10).err().unwrap().to_string();
        assert!(
            e.ends_with("is a folder, not a regular file or a pipe"),
            "{e}"
        );
        let link = dir.path().join("z");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(matches!(open(&link), Err(FilesError::NotAFile { .. })));
        let f = dir.path().join("f");
        std::fs::write(&f, "12345").unwrap();
        assert_eq!(read_text(&f, 5).unwrap(), "12345");
        let e = read_text(&f, 4).unwrap_err().to_string();
        assert!(
            e.ends_with("larger than 4 bytes (the limit for this file)"),
            "{e}"
        );
        std::fs::write(&f, b"a\nb\xfe").unwrap();
        assert!(read_text(&f, 10)
            .unwrap_err()
            .to_string()
            .ends_with(":2: not UTF-8 text"));
    }

    #[test]
    fn quotes_are_short() {
        assert_eq!(quote(b"a\tb"), "a\\tb");
        let q = quote(&[b'x'; 1000]);
        assert!(q.len() < 240 && q.ends_with("(800 bytes more)"), "{q}");
    }
}
