use std::io::{BufRead, BufReader};
use std::path::Path;

use crate::TraceError;

/// Opens a file, decompressing xz or zstd when its first bytes say so.
pub(crate) fn open(path: &Path) -> Result<Box<dyn BufRead + Send>, TraceError> {
    let io = |source| TraceError::Io {
        path: path.to_path_buf(),
        line: 0,
        source,
    };
    let file = bbv_files::input::open(path)?;
    let mut buf = BufReader::with_capacity(1 << 16, file);
    let head = buf.fill_buf().map_err(io)?;
    Ok(if head.starts_with(&[0xfd, b'7', b'z', b'X', b'Z', 0x00]) {
        Box::new(BufReader::with_capacity(
            1 << 16,
            xz2::bufread::XzDecoder::new_multi_decoder(buf),
        ))
    } else if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
        Box::new(BufReader::with_capacity(
            1 << 16,
            zstd::stream::read::Decoder::with_buffer(buf).map_err(io)?,
        ))
    } else {
        Box::new(buf)
    })
}

/// Line reader with numbering; lines come without their newline. Lines are split in place in
/// a large buffer (no copy per line); a line longer than the buffer grows it.
pub(crate) struct Lines {
    inner: Box<dyn BufRead + Send>,
    pub(crate) path: std::path::PathBuf,
    pub(crate) line_no: u64,
    buf: Vec<u8>,
    /// Unread bytes are `buf[pos..end]`.
    pos: usize,
    end: usize,
    /// The line last returned is `buf[line.0..line.1]`.
    line: (usize, usize),
    eof: bool,
}

/// The longest line read: a kernel's header line with a long mangled name, or an instruction
/// with a full warp's addresses, is a few kilobytes.
pub const MAX_LINE: usize = 4 << 20;

/// Bytes read at a time.
const BLOCK: usize = 1 << 18;

impl Lines {
    pub(crate) fn open(path: &Path) -> Result<Lines, TraceError> {
        Ok(Lines {
            inner: open(path)?,
            path: path.to_path_buf(),
            line_no: 0,
            buf: vec![0; BLOCK],
            pos: 0,
            end: 0,
            line: (0, 0),
            eof: false,
        })
    }

    /// The next line (trailing `\r\n` removed), or `None` at the end.
    pub(crate) fn next_line(&mut self) -> Result<Option<&str>, TraceError> {
        if self.next_bytes()?.is_none() {
            return Ok(None);
        }
        std::str::from_utf8(self.current_bytes())
            .map(Some)
            .map_err(|_| TraceError::Format {
                path: self.path.clone(),
                line: self.line_no,
                message: "line is not valid UTF-8 text".into(),
            })
    }

    /// The next line as bytes (trailing `\r\n` removed), or `None` at the end; no UTF-8 check
    /// (the body parser checks what it keeps).
    pub(crate) fn next_bytes(&mut self) -> Result<Option<&[u8]>, TraceError> {
        let mut searched = 0;
        let (start, stop) = loop {
            let from = self.pos + searched;
            if let Some(i) = crate::fast::find_newline(&self.buf[from..self.end]) {
                let nl = from + i;
                let line = (self.pos, nl);
                self.pos = nl + 1;
                break line;
            }
            searched = self.end - self.pos;
            if self.eof {
                if self.pos == self.end {
                    return Ok(None);
                }
                // The last line has no newline.
                let line = (self.pos, self.end);
                self.pos = self.end;
                break line;
            }
            self.refill()?;
        };
        let mut stop = stop;
        while stop > start && matches!(self.buf[stop - 1], b'\n' | b'\r') {
            stop -= 1;
        }
        self.line = (start, stop);
        self.line_no += 1;
        Ok(Some(&self.buf[start..stop]))
    }

    /// The next line, when it is shorter than 64 bytes and its newline is buffered, with the
    /// positions of its spaces and whether it holds a tab or a byte that is not ASCII (for
    /// [`crate::fast::short_instruction`]); nothing is consumed. `None` for a line ending in
    /// `\r` (left to [`Lines::next_bytes`], which strips it).
    #[inline(always)]
    pub(crate) fn peek_short(&self) -> Option<(&[u8], u64, bool)> {
        let h: &[u8; 64] = self.buf[self.pos..self.end].get(..64)?.try_into().ok()?;
        let (nl, sp, odd) = crate::fast::masks64(h);
        if nl == 0 {
            return None;
        }
        let n = nl.trailing_zeros() as usize;
        if n > 0 && h[n - 1] == b'\r' {
            return None;
        }
        let below = (1u64 << n) - 1;
        Some((&h[..n], sp & below, odd & below != 0))
    }

    /// Takes the line [`Lines::peek_short`] returned (`n` bytes and its newline) as the current
    /// line.
    #[inline(always)]
    pub(crate) fn take_short(&mut self, n: usize) -> &[u8] {
        self.line = (self.pos, self.pos + n);
        self.pos += n + 1;
        self.line_no += 1;
        &self.buf[self.line.0..self.line.1]
    }

    /// Moves the unread bytes to the front (growing the buffer when they fill it) and reads
    /// more after them.
    fn refill(&mut self) -> Result<(), TraceError> {
        self.buf.copy_within(self.pos..self.end, 0);
        self.end -= self.pos;
        self.pos = 0;
        if self.end == self.buf.len() {
            if self.buf.len() >= MAX_LINE {
                return Err(TraceError::Files(bbv_files::FilesError::LineTooLong {
                    path: self.path.clone(),
                    line: self.line_no + 1,
                    limit: MAX_LINE,
                }));
            }
            self.buf.resize(self.buf.len() * 2, 0);
        }
        loop {
            match self.inner.read(&mut self.buf[self.end..]) {
                Ok(0) => {
                    self.eof = true;
                    return Ok(());
                }
                Ok(n) => {
                    self.end += n;
                    return Ok(());
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(source) => {
                    return Err(TraceError::Io {
                        path: self.path.clone(),
                        line: self.line_no + 1,
                        source,
                    })
                }
            }
        }
    }

    /// Bytes of the line last returned.
    pub(crate) fn current_bytes(&self) -> &[u8] {
        &self.buf[self.line.0..self.line.1]
    }

    pub(crate) fn error(&self, message: impl Into<String>) -> TraceError {
        TraceError::Format {
            path: self.path.clone(),
            line: self.line_no,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines_of(bytes: &[u8]) -> Vec<Vec<u8>> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t");
        std::fs::write(&path, bytes).unwrap();
        let mut l = Lines::open(&path).unwrap();
        let mut out = Vec::new();
        while let Some(line) = l.next_bytes().unwrap() {
            let line = line.to_vec();
            assert_eq!(l.current_bytes(), &line[..]);
            out.push(line);
            assert_eq!(l.line_no, out.len() as u64);
        }
        out
    }

    /// What the reader must return: split at newlines, trailing CRs dropped, no empty last line.
    fn expected(bytes: &[u8]) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = bytes
            .split(|&b| b == b'\n')
            .map(|l| {
                let mut l = l.to_vec();
                while l.last() == Some(&b'\r') {
                    l.pop();
                }
                l
            })
            .collect();
        if bytes.last().is_none_or(|&b| b == b'\n') {
            v.pop();
        }
        v
    }

    #[test]
    fn lines_split_across_refills_long_lines_and_a_last_line_without_newline() {
        let mut text = Vec::new();
        for i in 0..40_000u32 {
            let len = (i as usize * 7919) % 97;
            text.extend(std::iter::repeat_n(b'a' + (i % 26) as u8, len));
            text.extend_from_slice(if i % 5 == 0 { b"\r\n" } else { b"\n" });
        }
        // Longer than two blocks: the buffer grows.
        text.extend(std::iter::repeat_n(b'x', 3 * BLOCK + 17));
        text.extend_from_slice(b"\n\n\r\nlast line without newline");
        assert_eq!(lines_of(&text), expected(&text));
        assert_eq!(lines_of(b""), expected(b""));
        assert_eq!(lines_of(b"\n"), expected(b"\n"));
        assert_eq!(lines_of(b"one"), expected(b"one"));
    }
}
