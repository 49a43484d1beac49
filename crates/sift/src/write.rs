//! The SIFT writer.

use std::collections::HashMap;
use std::io::{Read, Write};

use crate::{
    other, Instruction, SiftError, MAGIC, MAX_ADDRESSES, MAX_SIZE, OPTION_ICACHE_VARIABLE,
};

/// Writes a SIFT stream: the header at once, then one record per instruction (preceded by
/// its bytes when this address has not shown them yet, or showed others: code rewritten),
/// and the end record on [`end`](Self::end).
pub struct Writer<W: Write> {
    out: W,
    /// The address the next instruction has if it follows the last one in memory.
    next: Option<u64>,
    /// Bytes sent per instruction address.
    code: HashMap<u64, Vec<u8>>,
    instructions: u64,
}

impl<W: Write> Writer<W> {
    /// Starts a stream on `out`.
    pub fn new(mut out: W) -> Result<Self, SiftError> {
        let mut header = [0u8; 16];
        header[..4].copy_from_slice(&MAGIC.to_le_bytes());
        // Extra header bytes: none.
        header[8..].copy_from_slice(&OPTION_ICACHE_VARIABLE.to_le_bytes());
        out.write_all(&header)?;
        Ok(Writer {
            out,
            next: None,
            code: HashMap::new(),
            instructions: 0,
        })
    }

    /// Instructions written so far.
    pub fn instructions(&self) -> u64 {
        self.instructions
    }

    fn other(&mut self, kind: u8, payload: &[&[u8]]) -> Result<(), SiftError> {
        crate::reply::write_other(&mut self.out, kind, payload)
    }

    /// The output, to add what the writer does not make (the records a live relay queues).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// Writes a magic instruction record (`a` one of [`crate::command`]); Sniper answers it on
    /// the thread's reply channel ([`crate::Reply::Magic`]).
    pub fn magic_record(&mut self, [a, b, c]: [u64; 3]) -> Result<(), SiftError> {
        self.other(
            other::MAGIC,
            &[&a.to_le_bytes(), &b.to_le_bytes(), &c.to_le_bytes()],
        )
    }

    /// Writes an instruction-set change (`isa` one of [`crate::isa`]): the instructions after
    /// it are decoded as that set's.
    pub fn isa_record(&mut self, isa: u32) -> Result<(), SiftError> {
        self.other(other::ISA_CHANGE, &[&isa.to_le_bytes()])
    }

    /// Writes a thread-creation record; Sniper answers with the new thread's id
    /// ([`crate::Reply::NewThread`]) and makes its FIFOs.
    pub fn new_thread_record(&mut self) -> Result<(), SiftError> {
        self.other(other::NEW_THREAD, &[])
    }

    /// Writes a system-call record for Sniper's syscall model (`nr` in x86-64's numbering,
    /// which Sniper's model uses whatever the guest); Sniper may ask for guest memory
    /// ([`crate::Reply::Memory`]) before it answers with the return value
    /// ([`crate::Reply::Syscall`]).
    pub fn syscall_record(&mut self, nr: u16, args: [u64; 6]) -> Result<(), SiftError> {
        let mut a = [0u8; 48];
        for (k, v) in args.iter().enumerate() {
            a[8 * k..8 * k + 8].copy_from_slice(&v.to_le_bytes());
        }
        self.other(other::SYSCALL, &[&nr.to_le_bytes(), &a])
    }

    /// Writes one executed instruction.
    pub fn instruction(&mut self, i: &Instruction) -> Result<(), SiftError> {
        let bad = |why: String| SiftError::Unrepresentable {
            address: i.address,
            why,
        };
        if i.bytes.is_empty() || i.bytes.len() > MAX_SIZE {
            return Err(bad(format!(
                "{} bytes long (1 to {MAX_SIZE})",
                i.bytes.len()
            )));
        }
        if i.memory.len() > MAX_ADDRESSES {
            return Err(bad(format!(
                "{} data addresses (at most {MAX_ADDRESSES})",
                i.memory.len()
            )));
        }
        if self.code.get(&i.address) != Some(&i.bytes) {
            self.other(
                other::ICACHE_VARIABLE,
                &[&i.address.to_le_bytes(), &i.bytes],
            )?;
            self.code.insert(i.address, i.bytes.clone());
        }
        let size = i.bytes.len() as u8;
        let flags = (i.memory.len() as u8) | (u8::from(i.branch) << 2) | (u8::from(i.taken) << 3);
        if self.next == Some(i.address) {
            self.out.write_all(&[size | (flags << 4)])?;
        } else {
            // Not predicated, so executed (bit 5): Sniper reads the bit as given.
            self.out.write_all(&[size << 4, flags | 0x20])?;
            self.out.write_all(&i.address.to_le_bytes())?;
        }
        for a in &i.memory {
            self.out.write_all(&a.to_le_bytes())?;
        }
        self.next = Some(i.address.wrapping_add(size.into()));
        self.instructions += 1;
        Ok(())
    }

    /// Sends a magic instruction (`a` one of [`crate::command`]) and waits for Sniper's answer
    /// on `responses` (its response stream for this thread), which it returns.
    pub fn magic(&mut self, responses: &mut impl Read, args: [u64; 3]) -> Result<u64, SiftError> {
        self.magic_record(args)?;
        self.out.flush()?;
        match crate::read_reply(responses)? {
            crate::Reply::Magic(v) => Ok(v),
            other => Err(SiftError::Malformed {
                offset: 0,
                why: format!("Sniper answered a magic instruction with {other:?}"),
            }),
        }
    }

    /// Flushes and returns the output without an end record (the caller goes on with it).
    pub fn into_inner(mut self) -> Result<W, SiftError> {
        self.out.flush()?;
        Ok(self.out)
    }

    /// Writes the end record and flushes; returns the output.
    pub fn end(mut self) -> Result<W, SiftError> {
        self.other(other::END, &[])?;
        self.out.flush()?;
        Ok(self.out)
    }
}
