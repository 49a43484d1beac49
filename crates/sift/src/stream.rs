//! A stream of one thread's instructions into the FIFO Sniper reads, with Sniper's replies read
//! from its response FIFO, and a region of interest marked in it (magic instructions Sniper
//! answers): what QEMU's plugin writes for a region's window (opened at the region's warmup,
//! the region of interest from its start marker to its end marker) or for the whole run.

use std::fs::{File, OpenOptions};
use std::io::BufWriter;
use std::path::PathBuf;

use crate::{command, Instruction, Writer};

/// One thread's stream into Sniper.
pub struct Stream {
    /// The FIFO Sniper reads.
    pub path: PathBuf,
    /// Sniper's replies.
    pub replies_path: PathBuf,
    /// The event that starts the region of interest (the region's start marker).
    pub roi: u32,
    writer: Option<Writer<BufWriter<File>>>,
    replies: Option<File>,
    in_roi: bool,
}

impl Stream {
    /// A stream not yet open.
    pub fn new(path: PathBuf, replies_path: PathBuf, roi: u32) -> Stream {
        Stream {
            path,
            replies_path,
            roi,
            writer: None,
            replies: None,
            in_roi: false,
        }
    }

    /// Opens the stream (waiting for Sniper to open its side) and the replies (read and
    /// write: never waits).
    pub fn open(&mut self) -> Result<(), String> {
        let out = OpenOptions::new()
            .write(true)
            .open(&self.path)
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let replies = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.replies_path)
            .map_err(|e| format!("{}: {e}", self.replies_path.display()))?;
        let w = Writer::new(BufWriter::with_capacity(1 << 20, out)).map_err(|e| e.to_string())?;
        self.writer = Some(w);
        self.replies = Some(replies);
        Ok(())
    }

    /// Writes one instruction; false when Sniper is gone.
    pub fn instruction(&mut self, i: &Instruction) -> bool {
        self.writer
            .as_mut()
            .is_some_and(|w| w.instruction(i).is_ok())
    }

    fn magic(&mut self, cmd: u64) -> bool {
        match (self.writer.as_mut(), self.replies.as_mut()) {
            (Some(w), Some(r)) => w.magic(r, [cmd, 0, 0]).is_ok(),
            _ => false,
        }
    }

    /// The region of interest starts (at the instruction about to run); false when Sniper is
    /// gone.
    pub fn start_roi(&mut self) -> bool {
        if self.in_roi {
            return true;
        }
        self.in_roi = true;
        self.magic(command::ROI_START)
    }

    /// Ends the region of interest (if it started) and the stream.
    pub fn close(&mut self) {
        if self.in_roi {
            self.in_roi = false;
            let _ = self.magic(command::ROI_END);
        }
        if let Some(w) = self.writer.take() {
            let _ = w.end();
        }
        self.replies = None;
    }
}
