//! The SIFT reader: the records [`crate::Writer`] writes, read back.

use std::collections::HashMap;
use std::io::Read;

use crate::{other, Instruction, SiftError, MAGIC, MAX_SIZE, OPTION_ICACHE_VARIABLE};

/// One record read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// An executed instruction, its bytes from the code records before it.
    Instruction(Instruction),
    /// The end of the stream.
    End,
}

/// Reads a SIFT stream written with variable-size code records (as [`crate::Writer`] writes
/// it), record by record.
pub struct Reader<R: Read> {
    input: R,
    offset: u64,
    next: Option<u64>,
    code: HashMap<u64, Vec<u8>>,
    ended: bool,
}

impl<R: Read> Reader<R> {
    /// Reads the header.
    pub fn new(input: R) -> Result<Self, SiftError> {
        let mut r = Reader {
            input,
            offset: 0,
            next: None,
            code: HashMap::new(),
            ended: false,
        };
        let mut header = [0u8; 16];
        r.bytes(&mut header)?;
        let word = |at: usize| u32::from_le_bytes(header[at..at + 4].try_into().unwrap_or([0; 4]));
        if word(0) != MAGIC {
            return Err(r.malformed(0, "not a SIFT trace (no SIFT magic number)".into()));
        }
        let options = u64::from_le_bytes(header[8..].try_into().unwrap_or([0; 8]));
        if word(4) != 0 || options != OPTION_ICACHE_VARIABLE {
            return Err(r.malformed(
                4,
                format!(
                    "header size {} and options {options:#x}: only an uncompressed 64-bit trace with per-instruction code records is read",
                    word(4)
                ),
            ));
        }
        Ok(r)
    }

    fn malformed(&self, offset: u64, why: String) -> SiftError {
        SiftError::Malformed { offset, why }
    }

    fn bytes(&mut self, buf: &mut [u8]) -> Result<(), SiftError> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => SiftError::Malformed {
                offset: self.offset,
                why: "the trace ends inside a record (cut short: no end record)".into(),
            },
            _ => SiftError::Io(e),
        })?;
        self.offset += buf.len() as u64;
        Ok(())
    }

    fn u64(&mut self) -> Result<u64, SiftError> {
        let mut b = [0u8; 8];
        self.bytes(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// The next record; None after the end record.
    pub fn next_record(&mut self) -> Result<Option<Record>, SiftError> {
        loop {
            if self.ended {
                return Ok(None);
            }
            let at = self.offset;
            let mut first = [0u8; 1];
            self.bytes(&mut first)?;
            let b = first[0];
            let (size, flags, address) = if b & 0x0f != 0 {
                let Some(next) = self.next else {
                    return Err(
                        self.malformed(at, "a follow-on instruction with none before it".into())
                    );
                };
                (b & 0x0f, b >> 4, next)
            } else if b != 0 {
                let mut f = [0u8; 1];
                self.bytes(&mut f)?;
                (b >> 4, f[0], self.u64()?)
            } else {
                let mut head = [0u8; 5];
                self.bytes(&mut head)?;
                let len = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize;
                match head[0] {
                    other::END if len == 0 => {
                        self.ended = true;
                        return Ok(Some(Record::End));
                    }
                    other::ICACHE_VARIABLE if (9..=8 + MAX_SIZE).contains(&len) => {
                        let address = self.u64()?;
                        let mut code = vec![0u8; len - 8];
                        self.bytes(&mut code)?;
                        self.code.insert(address, code);
                        continue;
                    }
                    t => {
                        return Err(self.malformed(
                            at,
                            format!(
                                "a record of type {t} and {len} bytes, which bbv does not write"
                            ),
                        ))
                    }
                }
            };
            let count = usize::from(flags & 3);
            let mut memory = Vec::with_capacity(count);
            for _ in 0..count {
                memory.push(self.u64()?);
            }
            let bytes = self.code.get(&address).cloned().unwrap_or_default();
            if bytes.len() != usize::from(size) {
                return Err(self.malformed(
                    at,
                    format!(
                        "instruction at {address:#x} of {size} bytes, but {} bytes of code were sent for it",
                        bytes.len()
                    ),
                ));
            }
            self.next = Some(address.wrapping_add(size.into()));
            return Ok(Some(Record::Instruction(Instruction {
                address,
                bytes,
                memory,
                branch: flags & 4 != 0,
                taken: flags & 8 != 0,
            })));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Writer;

    fn insn(address: u64, bytes: &[u8], memory: &[u64], branch: bool, taken: bool) -> Instruction {
        Instruction {
            address,
            bytes: bytes.to_vec(),
            memory: memory.to_vec(),
            branch,
            taken,
        }
    }

    /// A loop (add, a load, a taken and a last not-taken branch), then a jump elsewhere and
    /// code rewritten in place: read back as written, the follow-on instructions in the
    /// one-byte form.
    #[test]
    fn instructions_read_back_as_written() {
        let body = [
            insn(0x401000, &[0x48, 0x83, 0xc0, 0x01], &[], false, false),
            insn(
                0x401004,
                &[0x48, 0x8b, 0x1e],
                &[0x7fff_0000_1000],
                false,
                false,
            ),
            insn(0x401007, &[0x75, 0xf7], &[], true, true),
        ];
        let mut all: Vec<Instruction> = (0..3).flat_map(|_| body.clone()).collect();
        all.last_mut().unwrap().taken = false;
        all.push(insn(0x402000, &[0xc3], &[0x7fff_0000_2000], true, true));
        all.push(insn(0x401000, &[0x90, 0x90, 0x90, 0x90], &[], false, false));
        let mut w = Writer::new(Vec::new()).unwrap();
        for i in &all {
            w.instruction(i).unwrap();
        }
        assert_eq!(w.instructions(), all.len() as u64);
        let bytes = w.end().unwrap();
        // Header; code records (the loop's 3, the return, the rewritten one); 10-byte records
        // where control went elsewhere (3 loop starts, the return, the rewritten one), one byte
        // for the 6 that follow on; 4 data addresses; the end record.
        let code = (6 + 8) * 5 + (4 + 3 + 2 + 1 + 4);
        assert_eq!(bytes.len(), 16 + code + 5 * 10 + 6 + 4 * 8 + 6);
        let mut r = Reader::new(&bytes[..]).unwrap();
        let mut back = Vec::new();
        while let Some(Record::Instruction(i)) = r.next_record().unwrap() {
            back.push(i);
        }
        assert_eq!(back, all);
        assert_eq!(r.next_record().unwrap(), None);
    }

    /// One address per operand Sniper decodes: the accesses seen, padded for operands that
    /// made none, at most three; a branch flag only where it was one, taken only then.
    #[test]
    fn addresses_follow_the_operands() {
        let i = Instruction::from_accesses(7, &[0x90], &[0x10, 0x20], 3, (false, true));
        assert_eq!((i.memory, i.taken), (vec![0x10, 0x20, 0x20], false));
        let i = Instruction::from_accesses(7, &[0x90], &[0x10; 0], 1, (true, true));
        assert_eq!((i.memory, i.taken), (vec![0], true));
        let i = Instruction::from_accesses(7, &[0x90], &[1, 2, 3, 4], 2, (false, false));
        assert_eq!(i.memory, [1, 2, 3]);
    }

    #[test]
    fn what_the_format_cannot_hold_is_refused() {
        let mut w = Writer::new(Vec::new()).unwrap();
        for (i, why) in [
            (insn(1, &[], &[], false, false), "0 bytes long"),
            (insn(1, &[0x90; 16], &[], false, false), "16 bytes long"),
            (
                insn(1, &[0x90], &[1, 2, 3, 4], false, false),
                "4 data addresses",
            ),
        ] {
            let e = w.instruction(&i).unwrap_err().to_string();
            assert!(e.contains(why), "{why}: {e}");
        }
    }

    #[test]
    fn cut_or_foreign_streams_are_refused() {
        let mut w = Writer::new(Vec::new()).unwrap();
        w.instruction(&insn(0x1000, &[0x90], &[], false, false))
            .unwrap();
        let bytes = w.end().unwrap();
        let cut = &bytes[..bytes.len() - 3];
        let mut r = Reader::new(cut).unwrap();
        assert!(matches!(r.next_record(), Ok(Some(Record::Instruction(_)))));
        let e = r.next_record().unwrap_err().to_string();
        assert!(e.contains("cut short"), "{e}");
        let e = Reader::new(&b"ELF\x7f and more bytes"[..])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("no SIFT magic"), "{e}");
    }
}
