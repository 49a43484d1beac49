//! A single-threaded program's stream into one Sniper, with a region of interest marked in it
//! (magic instructions Sniper answers): what QEMU's plugin writes for a region's window
//! (opened at the region's warmup, the region of interest from its start marker to its end
//! marker) or for the whole run. It goes through a relay ([`crate::relay`]), so that the
//! plugin never blocks on a Sniper that died: it waits only while 64 MiB of records are queued
//! and Sniper runs.

use std::path::PathBuf;

use crate::relay::{Session, ThreadStream};
use crate::Instruction;

/// One thread's stream into Sniper.
pub struct Stream {
    /// Sniper's FIFOs' prefix (`traceinput/trace_prefix`).
    pub prefix: PathBuf,
    /// Sniper's process, watched while waiting for it.
    pub pid: Option<i32>,
    /// The event that starts the region of interest (the region's start marker).
    pub roi: u32,
    /// The instruction set, when not x86 (one of [`crate::isa`]).
    pub isa: Option<u32>,
    open: Option<(Session, ThreadStream)>,
    in_roi: bool,
}

impl Stream {
    /// A stream not yet open.
    pub fn new(prefix: PathBuf, pid: Option<i32>, roi: u32, isa: Option<u32>) -> Stream {
        Stream {
            prefix,
            pid,
            roi,
            isa,
            open: None,
            in_roi: false,
        }
    }

    /// Opens the stream (its relay opens the FIFOs once Sniper is there).
    pub fn open(&mut self) -> Result<(), String> {
        let mut session = Session::single(self.prefix.clone(), self.pid);
        let mut t = session.thread0().map_err(|e| e.to_string())?;
        if let Some(isa) = self.isa {
            t.isa(isa).map_err(|e| e.to_string())?;
        }
        self.open = Some((session, t));
        Ok(())
    }

    /// Writes one instruction; false when Sniper is gone.
    pub fn instruction(&mut self, i: &Instruction) -> bool {
        self.open
            .as_mut()
            .is_some_and(|(_, t)| t.instruction(i).is_ok())
    }

    /// The region of interest starts (at the instruction about to run); false when Sniper is
    /// gone.
    pub fn start_roi(&mut self) -> bool {
        if self.in_roi {
            return true;
        }
        self.in_roi = true;
        self.open
            .as_mut()
            .is_some_and(|(_, t)| t.start_roi().is_ok())
    }

    /// Ends the region of interest (if it started) and the stream, and waits for Sniper to
    /// have read it (or to be gone).
    pub fn close(&mut self) {
        if let Some((session, mut t)) = self.open.take() {
            if self.in_roi {
                let _ = t.end_roi();
            }
            let _ = t.end();
            // Sniper's failures are its own report's (bbv reads its exit and its log).
            let _ = session.finish();
        }
        self.in_roi = false;
    }
}
