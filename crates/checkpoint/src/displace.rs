//! The end marker's instruction, moved: the restorer's int3 stays on it for the whole run,
//! and each execution that is not the last runs this copy instead (re-encoded for its new
//! address, then a jump back), so that counting the marker writes no code (under QEMU every
//! code write retranslates the page).

use iced_x86::{BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, Instruction};
use iced_x86::{InstructionBlock, OpKind};

use crate::CheckpointError;

/// Bytes reserved for the copy at the start of the restorer's segment.
pub(crate) const SLOT: u64 = 64;

/// The instruction at `pc` (its first bytes in `code`) re-encoded at `at`, followed by a jump
/// to the instruction after it.
pub(crate) fn displaced(code: &[u8], pc: u64, at: u64) -> Result<Vec<u8>, CheckpointError> {
    let mut d = Decoder::with_ip(64, code, pc, DecoderOptions::NONE);
    let insn = d.decode();
    if insn.is_invalid() {
        return Err(CheckpointError::Invalid(format!(
            "the end marker's instruction at {pc:#x} does not decode"
        )));
    }
    if insn.is_ip_rel_memory_operand() || (0..insn.op_count()).any(|i| branchy(insn.op_kind(i))) {
        let reach = |t: u64| t.abs_diff(at) < (1 << 31) - 4096;
        let target = if insn.is_ip_rel_memory_operand() {
            insn.ip_rel_memory_address()
        } else {
            insn.near_branch_target()
        };
        if !reach(target) {
            return Err(CheckpointError::Invalid(format!(
                "the end marker's instruction at {pc:#x} refers to {target:#x}, out of reach of its copy at {at:#x}"
            )));
        }
    }
    let back = Instruction::with_branch(Code::Jmp_rel32_64, insn.next_ip())?;
    let list = [insn, back];
    let out = BlockEncoder::encode(
        64,
        InstructionBlock::new(&list, at),
        BlockEncoderOptions::NONE,
    )?;
    if out.code_buffer.len() as u64 > SLOT {
        return Err(CheckpointError::Invalid(format!(
            "the end marker's instruction at {pc:#x} moved takes {} bytes",
            out.code_buffer.len()
        )));
    }
    Ok(out.code_buffer)
}

fn branchy(k: OpKind) -> bool {
    matches!(
        k,
        OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode_all(code: &[u8], ip: u64) -> Vec<Instruction> {
        Decoder::with_ip(64, code, ip, DecoderOptions::NONE)
            .into_iter()
            .collect()
    }

    #[test]
    fn a_moved_instruction_keeps_its_meaning() {
        // mov rax, [rip + 0x100] at 0x1000 reads 0x1107; moved to 0x2000 it still must.
        let code = [0x48, 0x8b, 0x05, 0x00, 0x01, 0x00, 0x00];
        let moved = displaced(&code, 0x1000, 0x2000).unwrap();
        let insns = decode_all(&moved, 0x2000);
        assert_eq!(insns[0].ip_rel_memory_address(), 0x1107);
        assert_eq!(insns[1].near_branch_target(), 0x1007);
        // jne +0x10 at 0x1000 goes to 0x1012, falls through to 0x1002.
        let moved = displaced(&[0x75, 0x10], 0x1000, 0x2000).unwrap();
        let insns = decode_all(&moved, 0x2000);
        assert_eq!(insns[0].near_branch_target(), 0x1012);
        assert_eq!(insns.last().unwrap().near_branch_target(), 0x1002);
        // Out of reach of a rel32.
        assert!(displaced(&code, 0x1000, 0x9_0000_0000).is_err());
        assert!(displaced(&[0x0f, 0xff], 0x1000, 0x2000).is_err());
    }
}
