use std::io::{self, BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver};
use std::thread;

use crate::compression::Compression;
use crate::ProfileError;

/// An opened BBV input: decompressed bytes plus what was detected.
pub struct Input {
    /// Decompressed content.
    pub reader: Box<dyn BufRead + Send>,
    /// Compression found in the file.
    pub compression: Compression,
    /// Path, for error messages.
    pub path: PathBuf,
}

/// Decompressed bytes per hand-over between the threads (small: memory is part of the bar).
const CHUNK: usize = 128 << 10;

/// Opens `path`, detecting gzip or zstd from its content.
///
/// Compressed input is decompressed on a separate thread so that inflating and parsing overlap.
pub fn open_input(path: &Path) -> Result<Input, ProfileError> {
    let io_err = |source| ProfileError::Io {
        path: path.to_path_buf(),
        source,
    };
    let file = bbv_files::input::open(path)?;
    let mut buf = BufReader::with_capacity(64 * 1024, file);
    let compression = Compression::detect(buf.fill_buf().map_err(io_err)?);
    let reader: Box<dyn BufRead + Send> = match compression {
        Compression::None => Box::new(buf),
        Compression::Gzip => Box::new(BufReader::with_capacity(
            CHUNK,
            Pipelined::spawn(flate2::bufread::MultiGzDecoder::new(buf)),
        )),
        Compression::Zstd => {
            let dec = zstd::stream::read::Decoder::with_buffer(buf).map_err(io_err)?;
            Box::new(BufReader::with_capacity(CHUNK, Pipelined::spawn(dec)))
        }
    };
    Ok(Input {
        reader,
        compression,
        path: path.to_path_buf(),
    })
}

/// A reader fed by a background thread that runs the (decompressing) inner reader.
struct Pipelined {
    rx: Receiver<io::Result<Vec<u8>>>,
    current: Vec<u8>,
    pos: usize,
    done: bool,
}

impl Pipelined {
    fn spawn<R: Read + Send + 'static>(mut inner: R) -> Pipelined {
        let (tx, rx) = sync_channel::<io::Result<Vec<u8>>>(2);
        thread::spawn(move || loop {
            let mut chunk = vec![0u8; CHUNK];
            let mut filled = 0;
            let result = loop {
                match inner.read(&mut chunk[filled..]) {
                    Ok(0) => break Ok(true),
                    Ok(n) => {
                        filled += n;
                        if filled == chunk.len() {
                            break Ok(false);
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => break Err(e),
                }
            };
            chunk.truncate(filled);
            match result {
                Ok(eof) => {
                    if !chunk.is_empty() && tx.send(Ok(chunk)).is_err() {
                        return;
                    }
                    if eof {
                        return;
                    }
                }
                Err(e) => {
                    if !chunk.is_empty() && tx.send(Ok(chunk)).is_err() {
                        return;
                    }
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        });
        Pipelined {
            rx,
            current: Vec::new(),
            pos: 0,
            done: false,
        }
    }
}

impl Read for Pipelined {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        while self.pos == self.current.len() {
            if self.done {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Ok(chunk)) => {
                    self.current = chunk;
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.done = true;
                    return Err(e);
                }
                Err(_) => {
                    self.done = true;
                    return Ok(0);
                }
            }
        }
        let n = out.len().min(self.current.len() - self.pos);
        out[..n].copy_from_slice(&self.current[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}
