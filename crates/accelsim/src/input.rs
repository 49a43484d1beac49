use std::fs::File;
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
    let file = File::open(path).map_err(io)?;
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

/// Line reader with numbering; lines come without their newline.
pub(crate) struct Lines {
    inner: Box<dyn BufRead + Send>,
    pub(crate) path: std::path::PathBuf,
    pub(crate) line_no: u64,
    buf: Vec<u8>,
}

impl Lines {
    pub(crate) fn open(path: &Path) -> Result<Lines, TraceError> {
        Ok(Lines {
            inner: open(path)?,
            path: path.to_path_buf(),
            line_no: 0,
            buf: Vec::with_capacity(256),
        })
    }

    /// The next line (trailing `\r\n` removed), or `None` at the end.
    pub(crate) fn next_line(&mut self) -> Result<Option<&str>, TraceError> {
        if self.next_bytes()?.is_none() {
            return Ok(None);
        }
        std::str::from_utf8(&self.buf)
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
        self.buf.clear();
        let n = self
            .inner
            .read_until(b'\n', &mut self.buf)
            .map_err(|source| TraceError::Io {
                path: self.path.clone(),
                line: self.line_no + 1,
                source,
            })?;
        if n == 0 {
            return Ok(None);
        }
        self.line_no += 1;
        while matches!(self.buf.last(), Some(b'\n' | b'\r')) {
            self.buf.pop();
        }
        Ok(Some(&self.buf))
    }

    /// Bytes of the line last returned.
    pub(crate) fn current_bytes(&self) -> &[u8] {
        &self.buf
    }

    pub(crate) fn error(&self, message: impl Into<String>) -> TraceError {
        TraceError::Format {
            path: self.path.clone(),
            line: self.line_no,
            message: message.into(),
        }
    }
}
