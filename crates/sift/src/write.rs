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
        let size: usize = payload.iter().map(|p| p.len()).sum();
        let size = u32::try_from(size).map_err(|_| SiftError::Unrepresentable {
            address: 0,
            why: format!("a record of {size} bytes"),
        })?;
        self.out.write_all(&[0, kind])?;
        self.out.write_all(&size.to_le_bytes())?;
        for p in payload {
            self.out.write_all(p)?;
        }
        Ok(())
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
    pub fn magic(
        &mut self,
        responses: &mut impl Read,
        [a, b, c]: [u64; 3],
    ) -> Result<u64, SiftError> {
        self.other(
            other::MAGIC,
            &[&a.to_le_bytes(), &b.to_le_bytes(), &c.to_le_bytes()],
        )?;
        self.out.flush()?;
        let mut head = [0u8; 6];
        responses.read_exact(&mut head)?;
        let size = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
        if head[0] != 0 || head[1] != other::MAGIC_RESPONSE || size != 8 {
            return Err(SiftError::Malformed {
                offset: 0,
                why: format!(
                    "Sniper answered a magic instruction with a record of type {} and {size} bytes",
                    head[1]
                ),
            });
        }
        let mut value = [0u8; 8];
        responses.read_exact(&mut value)?;
        Ok(u64::from_le_bytes(value))
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
