//! A window's program in Sniper: its threads' streams, and what each thread's system calls
//! write to them.

use std::collections::{BTreeMap, HashSet};

use super::Sync;
use crate::relay::{Session, ThreadStream};

/// The streams of one open window.
pub(super) struct Program {
    pub(super) session: Session,
    /// By guest thread number.
    pub(super) streams: BTreeMap<u32, ThreadStream>,
    /// The thread that opened it (Sniper's thread 0).
    pub(super) first: u32,
    pub(super) in_roi: bool,
    /// Wakes written to it (a wait ended by a wake before the window opened does not block).
    pub(super) wakes: HashSet<u64>,
    /// Several threads: each thread's stream ends with a wake the program's exit waits for
    /// (see [`Program::join_all`]).
    pub(super) threads: bool,
    /// Threads whose streams ended so (the exiting thread waits for each).
    pub(super) ended: Vec<u32>,
}

/// The futex word of thread `t`'s end (see [`Program::join_all`]): above any user-space
/// address, so no guest futex is on it; Sniper reads it from the frontend, never from memory.
fn end_word(t: u32) -> u64 {
    0xffff_ff00_0000_0000 | (u64::from(t) << 2)
}

/// The id of thread `t`'s end wake: apart from the turns' wake ids, which count up from 0.
fn end_wake(t: u32) -> u64 {
    (1 << 63) | u64::from(t)
}

impl Program {
    /// Writes what `thread`'s system call did to its stream.
    pub(super) fn write(
        &mut self,
        thread: u32,
        sync: &Sync,
        isa: Option<u32>,
    ) -> Result<(), crate::SiftError> {
        match sync {
            Sync::Created(child) => {
                let Some(parent) = self.streams.get_mut(&thread) else {
                    return Ok(());
                };
                let mut s = parent.new_thread(&mut self.session)?;
                isa.map_or(Ok(()), |isa| s.isa(isa))?;
                self.streams.insert(*child, s);
            }
            Sync::Waited {
                addr,
                val,
                woken_by,
            } => {
                let Some(s) = self.streams.get_mut(&thread) else {
                    return Ok(());
                };
                let partner = woken_by.filter(|id| self.wakes.contains(id));
                s.futex_wait(*addr, *val, partner)?;
            }
            Sync::Woke { addr, woken, id } => {
                let Some(s) = self.streams.get_mut(&thread) else {
                    return Ok(());
                };
                s.futex_wake(*addr, *woken, *id)?;
                self.wakes.insert(*id);
            }
            Sync::Exited { joiners, id } => {
                let Some(mut s) = self.streams.remove(&thread) else {
                    return Ok(());
                };
                for &(addr, n) in joiners {
                    s.futex_wake(addr, n, *id)?;
                }
                if !joiners.is_empty() {
                    self.wakes.insert(*id);
                }
                if self.threads {
                    end_part(thread, &mut s, &mut self.wakes, &mut self.ended)?;
                }
                s.end()?;
            }
        }
        Ok(())
    }

    /// The thread that ends the program when `thread` ran last: `thread`, or the first when
    /// its stream is not this window's.
    pub(super) fn lead(&self, thread: u32) -> u32 {
        match self.streams.contains_key(&thread) {
            true => thread,
            false => self.first,
        }
    }

    /// The guest exits on thread `lead`: in the guest every other thread's last instruction
    /// came before its exit, so in Sniper the exit waits until every other thread has been
    /// simulated to its end. Without it a program whose threads end the work without a
    /// futex the exit waits on (a main thread woken by a signal, a pipe, a poll) ended in
    /// Sniper as soon as its own last instruction was simulated, the others' work unsimulated.
    pub(super) fn join_all(&mut self, lead: u32) -> Result<(), crate::SiftError> {
        if !self.threads {
            return Ok(());
        }
        let lead = self.lead(lead);
        for (&t, s) in self.streams.iter_mut().filter(|(&t, _)| t != lead) {
            end_part(t, s, &mut self.wakes, &mut self.ended)?;
        }
        let Some(s) = self.streams.get_mut(&lead) else {
            return Ok(());
        };
        for &t in self.ended.iter().filter(|&&t| t != lead) {
            s.futex_wait(end_word(t), 0, Some(end_wake(t)))?;
        }
        Ok(())
    }
}

/// Ends thread `t`'s part of a program of several threads: the wake of its end word, which the
/// program's exit waits for (see [`Program::join_all`]).
fn end_part(
    t: u32,
    s: &mut ThreadStream,
    wakes: &mut HashSet<u64>,
    ended: &mut Vec<u32>,
) -> Result<(), crate::SiftError> {
    s.futex_wake(end_word(t), 1, end_wake(t))?;
    wakes.insert(end_wake(t));
    ended.push(t);
    Ok(())
}
