//! One thread's records on their way to Sniper: the producer (QEMU's plugin, which must never
//! wait for Sniper, or the guest's threads would wait on each other through it) queues them,
//! its relay writes them at Sniper's pace. Bytes stay in memory up to [`MEMORY`], then go to a
//! spill file, in order either way; a bounded queue (a single-threaded stream, where nothing
//! can wait on anything through Sniper) makes the producer wait instead of spilling.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// Queued bytes kept in memory per thread; more go to the spill file.
const MEMORY: usize = 64 << 20;
/// A chunk the producer hands over (fewer, larger hand-overs: Sniper reads in its own time).
const CHUNK: usize = 256 << 10;

/// Bytes, or a record the relay acts on (`C`: what it needs to).
pub(crate) enum Item<C> {
    Bytes(Vec<u8>),
    Spilled { offset: u64, len: usize },
    Control(C),
}

struct State<C> {
    items: VecDeque<Item<C>>,
    in_memory: usize,
    spill: Option<File>,
    spill_end: u64,
    closed: bool,
    /// The relay is gone: nothing more is read.
    gone: bool,
}

/// The queue between a producer and its relay.
pub(crate) struct Queue<C> {
    state: Mutex<State<C>>,
    ready: Condvar,
    /// Signalled when the relay took something (or went).
    room: Condvar,
    spill_path: PathBuf,
    bounded: bool,
}

impl<C> Queue<C> {
    /// A queue spilling to `spill_path`, or (`bounded`) making its producer wait.
    pub(crate) fn new(spill_path: PathBuf, bounded: bool) -> Arc<Queue<C>> {
        Arc::new(Queue {
            state: Mutex::new(State {
                items: VecDeque::new(),
                in_memory: 0,
                spill: None,
                spill_end: 0,
                closed: false,
                gone: false,
            }),
            ready: Condvar::new(),
            room: Condvar::new(),
            spill_path,
            bounded,
        })
    }

    /// The relay stops reading (done or failed): a producer waiting for room goes on.
    pub(crate) fn relay_gone(&self) {
        self.lock().gone = true;
        self.room.notify_all();
    }

    fn lock(&self) -> MutexGuard<'_, State<C>> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn push_bytes(&self, bytes: Vec<u8>) -> io::Result<()> {
        let mut s = self.lock();
        while self.bounded && !s.gone && s.in_memory > 0 && s.in_memory + bytes.len() > MEMORY {
            s = self.room.wait(s).unwrap_or_else(|p| p.into_inner());
        }
        if s.gone {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the stream's reader is gone",
            ));
        }
        if self.bounded || s.in_memory + bytes.len() <= MEMORY {
            s.in_memory += bytes.len();
            s.items.push_back(Item::Bytes(bytes));
        } else {
            if s.spill.is_none() {
                let f = File::options()
                    .read(true)
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .open(&self.spill_path)
                    .map_err(|e| {
                        io::Error::new(e.kind(), format!("{}: {e}", self.spill_path.display()))
                    })?;
                s.spill = Some(f);
            }
            let offset = s.spill_end;
            if let Some(f) = &s.spill {
                f.write_all_at(&bytes, offset)?;
            }
            s.spill_end += bytes.len() as u64;
            s.items.push_back(Item::Spilled {
                offset,
                len: bytes.len(),
            });
        }
        self.ready.notify_one();
        Ok(())
    }

    pub(crate) fn push_control(&self, c: C) {
        self.lock().items.push_back(Item::Control(c));
        self.ready.notify_one();
    }

    /// No more items will come.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_one();
    }

    /// The next item, waiting for one; None once the queue is closed and empty, or when `stop`
    /// is set.
    pub(crate) fn pop(&self, stop: &AtomicBool) -> Option<Item<C>> {
        let mut s = self.lock();
        loop {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            if let Some(item) = s.items.pop_front() {
                if let Item::Bytes(b) = &item {
                    s.in_memory -= b.len();
                    self.room.notify_all();
                }
                return Some(item);
            }
            if s.closed {
                return None;
            }
            // Everything spilled has been read: the file starts over.
            if s.spill_end > 0 {
                if let Some(f) = &s.spill {
                    let _ = f.set_len(0);
                }
                s.spill_end = 0;
            }
            s = self
                .ready
                .wait_timeout(s, Duration::from_millis(200))
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// Bytes an [`Item::Spilled`] names.
    pub(crate) fn read_spilled(&self, offset: u64, len: usize) -> io::Result<Vec<u8>> {
        let s = self.lock();
        let f = s
            .spill
            .as_ref()
            .ok_or_else(|| io::Error::other("no spill file"))?;
        let mut buf = vec![0u8; len];
        f.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }
}

impl<C> Drop for Queue<C> {
    fn drop(&mut self) {
        if self.lock().spill.is_some() {
            let _ = std::fs::remove_file(&self.spill_path);
        }
    }
}

/// The producer's end: a [`Write`] that hands chunks to the queue.
pub(crate) struct Spool<C> {
    buf: Vec<u8>,
    pub(crate) queue: Arc<Queue<C>>,
}

impl<C> Spool<C> {
    pub(crate) fn new(queue: Arc<Queue<C>>) -> Spool<C> {
        Spool {
            buf: Vec::with_capacity(CHUNK),
            queue,
        }
    }
}

impl<C> Write for Spool<C> {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.buf.extend_from_slice(b);
        if self.buf.len() >= CHUNK {
            self.flush()?;
        }
        Ok(b.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if !self.buf.is_empty() {
            let chunk = std::mem::replace(&mut self.buf, Vec::with_capacity(CHUNK));
            self.queue.push_bytes(chunk)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_come_out_in_order_from_memory_and_the_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let q = Queue::<()>::new(dir.path().join("spill"), false);
        let stop = AtomicBool::new(false);
        // Past the memory bound: the rest spills.
        let big = vec![7u8; MEMORY - 10];
        q.push_bytes(big).unwrap();
        q.push_bytes(vec![1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])
            .unwrap();
        q.push_control(());
        q.push_bytes(vec![9]).unwrap();
        q.close();
        let mut got = Vec::new();
        while let Some(item) = q.pop(&stop) {
            match item {
                Item::Bytes(b) => got.push(b.len()),
                Item::Spilled { offset, len } => {
                    let b = q.read_spilled(offset, len).unwrap();
                    got.push(1000 + b.len());
                    assert_eq!(b[0], 1);
                }
                Item::Control(_) => got.push(0),
            }
        }
        assert_eq!(got, [MEMORY - 10, 1011, 0, 1]);
        assert!(dir.path().join("spill").exists());
        drop(q);
        assert!(!dir.path().join("spill").exists());
    }

    #[test]
    fn a_bounded_queue_makes_the_producer_wait_and_fails_once_the_relay_is_gone() {
        let q = Queue::<()>::new(PathBuf::from("/nonexistent/spill"), true);
        q.push_bytes(vec![0; MEMORY]).unwrap();
        let q2 = q.clone();
        let producer = std::thread::spawn(move || q2.push_bytes(vec![1; 10]));
        std::thread::sleep(Duration::from_millis(100));
        assert!(!producer.is_finished(), "it did not wait");
        let stop = AtomicBool::new(false);
        assert!(matches!(q.pop(&stop), Some(Item::Bytes(b)) if b.len() == MEMORY));
        producer.join().unwrap().unwrap();
        assert!(matches!(q.pop(&stop), Some(Item::Bytes(b)) if b.len() == 10));
        q.push_bytes(vec![0; MEMORY]).unwrap();
        let q3 = q.clone();
        let producer = std::thread::spawn(move || q3.push_bytes(vec![1; 10]));
        q.relay_gone();
        assert!(producer.join().unwrap().is_err());
    }
}
