//! What Sniper writes back on a thread's reply channel, and the frontend's answer to its
//! memory requests.

use std::io::{Read, Write};

use crate::{other, SiftError};

/// Sniper's operation codes in a memory request (its `MemoryOpType`).
const MEM_READ: u32 = 1;
const MEM_WRITE: u32 = 2;

/// The largest reply payload read: Sniper's replies are a few words, and a memory request
/// holds what its model accesses (a futex word, a timespec).
const MAX_PAYLOAD: u32 = 1 << 16;

/// One reply.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// To a magic instruction: Sniper's value.
    Magic(u64),
    /// To a thread creation: the new thread's id.
    NewThread(i32),
    /// To a system call: its return value.
    Syscall(u64),
    /// Sniper's model reads (`write` false) or writes guest memory while it handles the
    /// thread's last record; a read must be answered on the stream
    /// ([`write_memory_response`]) before Sniper goes on.
    Memory {
        /// The guest address.
        address: u64,
        /// Bytes read or written.
        size: u32,
        /// A write (its bytes in `data`).
        write: bool,
        /// What a write stores.
        data: Vec<u8>,
    },
    /// To a synchronisation: Sniper's simulation mode.
    Sync(u32),
    /// Sniper stops the frontend.
    Shutdown,
}

fn malformed(why: String) -> SiftError {
    SiftError::Malformed { offset: 0, why }
}

/// Reads one reply (waiting for it as `input` does).
pub fn read_reply(input: &mut impl Read) -> Result<Reply, SiftError> {
    let mut head = [0u8; 6];
    input.read_exact(&mut head)?;
    let size = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
    if head[0] != 0 {
        return Err(malformed(format!(
            "a reply that is no record (first byte {})",
            head[0]
        )));
    }
    if size > MAX_PAYLOAD {
        return Err(malformed(format!(
            "a reply of type {} with {size} bytes",
            head[1]
        )));
    }
    let mut payload = vec![0u8; size as usize];
    input.read_exact(&mut payload)?;
    let word = |at: usize, n: usize| -> Option<u64> {
        let b = payload.get(at..at + n)?;
        let mut w = [0u8; 8];
        w[..n].copy_from_slice(b);
        Some(u64::from_le_bytes(w))
    };
    let exact = |n: u32| -> Result<(), SiftError> {
        if size == n {
            Ok(())
        } else {
            Err(malformed(format!(
                "a reply of type {} with {size} bytes (expected {n})",
                head[1]
            )))
        }
    };
    Ok(match head[1] {
        other::MAGIC_RESPONSE => {
            exact(8)?;
            Reply::Magic(word(0, 8).unwrap_or(0))
        }
        other::NEW_THREAD_RESPONSE => {
            exact(4)?;
            Reply::NewThread(word(0, 4).unwrap_or(0) as u32 as i32)
        }
        other::SYSCALL_RESPONSE => {
            exact(8)?;
            Reply::Syscall(word(0, 8).unwrap_or(0))
        }
        other::SYNC_RESPONSE => {
            exact(4)?;
            Reply::Sync(word(0, 4).unwrap_or(0) as u32)
        }
        other::SHUTDOWN => Reply::Shutdown,
        other::MEMORY_REQUEST => {
            // Address, size, lock (4-byte enum), operation (4-byte enum), then a write's data.
            let (Some(address), Some(n), Some(op)) = (word(0, 8), word(8, 4), word(16, 4)) else {
                return Err(malformed(format!("a memory request of {size} bytes")));
            };
            let data = payload[20..].to_vec();
            let write = match op as u32 {
                MEM_READ if data.is_empty() => false,
                MEM_WRITE if data.len() as u64 == n => true,
                _ => {
                    return Err(malformed(format!(
                        "a memory request with operation {op}, size {n} and {} bytes of data",
                        data.len()
                    )))
                }
            };
            Reply::Memory {
                address,
                size: n as u32,
                write,
                data,
            }
        }
        t => {
            return Err(malformed(format!(
                "a reply of type {t} ({size} bytes), which bbv does not ask for"
            )))
        }
    })
}

/// Answers a memory read of Sniper's at `address` with `data` (on the thread's stream).
pub fn write_memory_response(
    out: &mut impl Write,
    address: u64,
    data: &[u8],
) -> Result<(), SiftError> {
    write_other(
        out,
        other::MEMORY_RESPONSE,
        &[&address.to_le_bytes(), &MEM_READ.to_le_bytes(), data],
    )
}

/// Writes one "other" record: a zero byte, its type, its payload's size, the payload.
pub(crate) fn write_other(
    out: &mut impl Write,
    kind: u8,
    payload: &[&[u8]],
) -> Result<(), SiftError> {
    let size: usize = payload.iter().map(|p| p.len()).sum();
    let size = u32::try_from(size).map_err(|_| SiftError::Unrepresentable {
        address: 0,
        why: format!("a record of {size} bytes"),
    })?;
    out.write_all(&[0, kind])?;
    out.write_all(&size.to_le_bytes())?;
    for p in payload {
        out.write_all(p)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut v = vec![0, kind];
        v.extend((payload.len() as u32).to_le_bytes());
        v.extend(payload);
        v
    }

    #[test]
    fn replies_read_back_and_bad_ones_are_named() {
        let r = |b: Vec<u8>| read_reply(&mut b.as_slice());
        assert_eq!(
            r(record(other::MAGIC_RESPONSE, &7u64.to_le_bytes())).unwrap(),
            Reply::Magic(7)
        );
        assert_eq!(
            r(record(other::NEW_THREAD_RESPONSE, &3i32.to_le_bytes())).unwrap(),
            Reply::NewThread(3)
        );
        let mut req = 0x1000u64.to_le_bytes().to_vec();
        req.extend(4u32.to_le_bytes());
        req.extend(1u32.to_le_bytes());
        req.extend(MEM_READ.to_le_bytes());
        assert_eq!(
            r(record(other::MEMORY_REQUEST, &req)).unwrap(),
            Reply::Memory {
                address: 0x1000,
                size: 4,
                write: false,
                data: vec![]
            }
        );
        // A read that carries data, a short magic answer, a huge size, an unknown type.
        req.extend([1, 2, 3, 4]);
        assert!(r(record(other::MEMORY_REQUEST, &req)).is_err());
        assert!(r(record(other::MAGIC_RESPONSE, &[1, 2])).is_err());
        let mut huge = vec![0, other::SYSCALL_RESPONSE];
        huge.extend(u32::MAX.to_le_bytes());
        assert!(r(huge).unwrap_err().to_string().contains("bytes"));
        assert!(r(record(0x7e, &[]))
            .unwrap_err()
            .to_string()
            .contains("does not ask for"));
        // Cut short.
        assert!(r(vec![0, other::SYSCALL_RESPONSE, 8, 0, 0, 0, 1]).is_err());
    }

    #[test]
    fn a_memory_response_is_an_other_record() {
        let mut out = Vec::new();
        write_memory_response(&mut out, 0x1000, &5u32.to_le_bytes()).unwrap();
        assert_eq!(out[..2], [0, other::MEMORY_RESPONSE]);
        assert_eq!(u32::from_le_bytes(out[2..6].try_into().unwrap()), 16);
        assert_eq!(out[6..14], 0x1000u64.to_le_bytes());
        assert_eq!(out[18..], 5u32.to_le_bytes());
    }
}
