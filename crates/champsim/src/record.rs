//! The trace record ChampSim reads (`input_instr`): 64 bytes, little-endian, no padding.

use std::io::Write;

/// Bytes of one record.
pub const RECORD_BYTES: usize = 64;

/// One executed instruction as ChampSim reads it. Register 0 and address 0 mean "none".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Record {
    /// The instruction's address.
    pub ip: u64,
    /// Whether it is a branch (ChampSim decides again from the registers).
    pub is_branch: bool,
    /// Whether the next executed instruction is not the fall-through.
    pub branch_taken: bool,
    /// Registers written.
    pub dst_regs: [u8; 2],
    /// Registers read.
    pub src_regs: [u8; 4],
    /// Addresses stored to, one per memory operand.
    pub dst_mem: [u64; 2],
    /// Addresses loaded from, one per memory operand.
    pub src_mem: [u64; 4],
}

impl Record {
    /// Offset of `branch_taken` in the 64 bytes (for writers that fill records in place).
    pub const TAKEN_OFFSET: usize = 9;

    /// Offset of store address `i` (< 2) in the 64 bytes.
    pub const fn store_offset(i: usize) -> usize {
        16 + 8 * i
    }

    /// Offset of load address `i` (< 4) in the 64 bytes.
    pub const fn load_offset(i: usize) -> usize {
        32 + 8 * i
    }

    /// The record's 64 bytes.
    pub fn to_bytes(&self) -> [u8; RECORD_BYTES] {
        let mut b = [0u8; RECORD_BYTES];
        b[..8].copy_from_slice(&self.ip.to_le_bytes());
        b[8] = u8::from(self.is_branch);
        b[9] = u8::from(self.branch_taken);
        b[10..12].copy_from_slice(&self.dst_regs);
        b[12..16].copy_from_slice(&self.src_regs);
        for (i, a) in self.dst_mem.iter().chain(&self.src_mem).enumerate() {
            b[16 + 8 * i..24 + 8 * i].copy_from_slice(&a.to_le_bytes());
        }
        b
    }

    /// A record from its 64 bytes.
    pub fn from_bytes(b: &[u8; RECORD_BYTES]) -> Record {
        let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        Record {
            ip: u64_at(0),
            is_branch: b[8] != 0,
            branch_taken: b[9] != 0,
            dst_regs: [b[10], b[11]],
            src_regs: [b[12], b[13], b[14], b[15]],
            dst_mem: [u64_at(16), u64_at(24)],
            src_mem: [u64_at(32), u64_at(40), u64_at(48), u64_at(56)],
        }
    }

    /// Writes the record.
    pub fn write(&self, out: &mut impl Write) -> std::io::Result<()> {
        out.write_all(&self.to_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_layout_is_champsims() {
        let r = Record {
            ip: 0x1122_3344_5566_7788,
            is_branch: true,
            branch_taken: false,
            dst_regs: [26, 0],
            src_regs: [26, 25, 0, 0],
            dst_mem: [0, 0xaa],
            src_mem: [0xbb, 0, 0, 0xcc],
        };
        let b = r.to_bytes();
        assert_eq!(&b[..8], &0x1122_3344_5566_7788u64.to_le_bytes());
        assert_eq!(&b[8..16], &[1, 0, 26, 0, 26, 25, 0, 0]);
        assert_eq!(&b[24..32], &0xaau64.to_le_bytes());
        assert_eq!(&b[32..40], &0xbbu64.to_le_bytes());
        assert_eq!(&b[56..64], &0xccu64.to_le_bytes());
        assert_eq!(Record::from_bytes(&b), r);
        assert_eq!(b[Record::TAKEN_OFFSET], 0);
        let at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().unwrap());
        assert_eq!(at(Record::store_offset(1)), 0xaa);
        assert_eq!(at(Record::load_offset(0)), 0xbb);
        assert_eq!(at(Record::load_offset(3)), 0xcc);
    }
}
