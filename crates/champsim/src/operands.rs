//! What every ISA's decoder makes of one instruction ([`Operands`]), and the register shapes
//! that make ChampSim classify a branch as the control flow it is ([`Flow`]), shared by the
//! x86-64, AArch64 and RISC-V decoders.

use crate::{BranchKind, Record, REG_FLAGS, REG_IP, REG_SP};

/// The register an indirect branch reads when its target's address names none (`jmp
/// [rip+table]`): ChampSim tells indirect from direct branches by such a register.
pub const TARGET: u8 = 255;

/// Numbers ChampSim gives a meaning to, or takes for "none": no ordinary register gets one.
pub(crate) fn reserved(n: u8) -> bool {
    matches!(n, 0 | REG_SP | REG_FLAGS | REG_IP | TARGET)
}

/// Hands out register numbers in order, skipping [`reserved`] ones.
pub(crate) struct Numbering(u8);

impl Numbering {
    pub(crate) fn new() -> Numbering {
        Numbering(1)
    }

    /// The next free number (panics past 254 numbers: the ISAs number far fewer).
    pub(crate) fn next(&mut self) -> u8 {
        while reserved(self.0) {
            self.0 += 1;
        }
        self.0 += 1;
        self.0 - 1
    }
}

/// What a record of one instruction holds besides its run-time facts (taken, addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operands {
    /// Length in bytes.
    pub len: u8,
    /// Registers written (0: none).
    pub dst_regs: [u8; 2],
    /// Registers read (0: none).
    pub src_regs: [u8; 4],
    /// Memory operands read (at most 4 recorded).
    pub loads: u8,
    /// Memory operands written (at most 2 recorded).
    pub stores: u8,
    /// The kind ChampSim will take it for.
    pub kind: BranchKind,
    /// A string instruction with a rep prefix: QEMU may run it once per iteration (x86 only).
    pub rep: bool,
}

impl Operands {
    /// An instruction of `len` bytes with no registers, memory operands or control flow: what
    /// bytes no decoder knows become.
    pub fn opaque(len: u8) -> Operands {
        Operands {
            len,
            dst_regs: [0; 2],
            src_regs: [0; 4],
            loads: 0,
            stores: 0,
            kind: BranchKind::NotBranch,
            rep: false,
        }
    }

    /// The record of one execution: `taken` = the next instruction is not the fall-through;
    /// one address per memory operand (extra ones dropped, as the record has no room).
    pub fn record(&self, ip: u64, taken: bool, loads: &[u64], stores: &[u64]) -> Record {
        let mut r = Record {
            ip,
            is_branch: self.kind != BranchKind::NotBranch,
            branch_taken: taken,
            dst_regs: self.dst_regs,
            src_regs: self.src_regs,
            ..Record::default()
        };
        for (slot, a) in r.src_mem.iter_mut().zip(loads) {
            *slot = *a;
        }
        for (slot, a) in r.dst_mem.iter_mut().zip(stores) {
            *slot = *a;
        }
        r
    }
}

/// An instruction's control flow, as its ISA defines it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Flow {
    /// Goes on at the next instruction (system calls included).
    Next,
    Jump,
    IndirectJump,
    Conditional,
    Call,
    IndirectCall,
    Return,
}

impl Flow {
    /// The kind ChampSim must see for this flow.
    pub(crate) fn kind(self) -> BranchKind {
        match self {
            Flow::Next => BranchKind::NotBranch,
            Flow::Jump => BranchKind::DirectJump,
            Flow::IndirectJump => BranchKind::Indirect,
            Flow::Conditional => BranchKind::Conditional,
            Flow::Call => BranchKind::DirectCall,
            Flow::IndirectCall => BranchKind::IndirectCall,
            Flow::Return => BranchKind::Return,
        }
    }
}

/// An instruction as a decoder saw it: registers (ChampSim's numbers; the stack pointer as
/// [`REG_SP`], flags as [`REG_FLAGS`], never the instruction pointer) and memory operands.
pub(crate) struct Seen {
    pub len: u8,
    pub flow: Flow,
    pub reads: Vec<u8>,
    pub writes: Vec<u8>,
    pub loads: u8,
    pub stores: u8,
    pub rep: bool,
}

impl Seen {
    /// An instruction of an ISA without rep string instructions; `memory` its loads and
    /// stores.
    pub(crate) fn without_rep(
        len: u8,
        flow: Flow,
        reads: Vec<u8>,
        writes: Vec<u8>,
        memory: (u8, u8),
    ) -> Seen {
        Seen {
            len,
            flow,
            reads,
            writes,
            loads: memory.0,
            stores: memory.1,
            rep: false,
        }
    }

    /// The record's registers, shaped as ChampSim's classifier expects for the flow:
    /// conditional branches read the instruction pointer (and what they test), jumps write it,
    /// calls read and write the stack and instruction pointers (whether or not the ISA's call
    /// touches the stack), returns read the stack pointer and write both; indirect branches
    /// read their target's registers ([`TARGET`] when none is named). Other instructions keep
    /// their registers; what does not fit the record's 2 and 4 slots is dropped, the special
    /// registers first in line.
    pub(crate) fn operands(self) -> Operands {
        let plain = |v: &[u8]| -> Vec<u8> {
            v.iter()
                .copied()
                .filter(|&n| n != 0 && n != REG_SP && n != REG_FLAGS && n != REG_IP)
                .collect()
        };
        let target = |reads: &[u8]| -> Vec<u8> {
            let t = plain(reads);
            if t.is_empty() {
                vec![TARGET]
            } else {
                t
            }
        };
        let (dst, src): (Vec<u8>, Vec<u8>) = match self.flow {
            Flow::Jump => (vec![REG_IP], vec![]),
            Flow::IndirectJump => (vec![REG_IP], target(&self.reads)),
            Flow::Conditional => {
                let mut src = vec![REG_IP];
                let tested = plain(&self.reads);
                // With nothing else to test (RISC-V's `beq zero, zero`), the flags stand in:
                // ChampSim takes a branch reading the pointer alone for a direct jump.
                if self.reads.contains(&REG_FLAGS) || tested.is_empty() {
                    src.push(REG_FLAGS);
                }
                src.extend(tested);
                let mut dst = vec![REG_IP];
                dst.extend(plain(&self.writes));
                (dst, src)
            }
            Flow::Call => (vec![REG_IP, REG_SP], vec![REG_IP, REG_SP]),
            Flow::IndirectCall => {
                let mut src = vec![REG_IP, REG_SP];
                src.extend(target(&self.reads));
                (vec![REG_IP, REG_SP], src)
            }
            Flow::Return => {
                let mut src = vec![REG_SP];
                src.extend(plain(&self.reads));
                (vec![REG_IP, REG_SP], src)
            }
            Flow::Next => (
                without_ip(self.writes.clone()),
                without_ip(self.reads.clone()),
            ),
        };
        let mut ops = Operands {
            len: self.len,
            loads: self.loads,
            stores: self.stores,
            rep: self.rep,
            ..Operands::opaque(self.len)
        };
        for (slot, n) in ops.dst_regs.iter_mut().zip(dedup(dst)) {
            *slot = n;
        }
        for (slot, n) in ops.src_regs.iter_mut().zip(dedup(src)) {
            *slot = n;
        }
        ops.kind = BranchKind::of(&ops.record(0, false, &[], &[]));
        ops
    }
}

fn without_ip(mut v: Vec<u8>) -> Vec<u8> {
    v.retain(|&n| n != REG_IP);
    v
}

/// First occurrences, no zeros.
fn dedup(v: Vec<u8>) -> Vec<u8> {
    let mut out = Vec::with_capacity(v.len());
    for n in v {
        if n != 0 && !out.contains(&n) {
            out.push(n);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(flow: Flow, reads: &[u8], writes: &[u8]) -> Operands {
        Seen {
            len: 4,
            flow,
            reads: reads.to_vec(),
            writes: writes.to_vec(),
            loads: 0,
            stores: 0,
            rep: false,
        }
        .operands()
    }

    #[test]
    fn every_flow_is_classified_as_itself_whatever_it_reads() {
        let flows = [
            Flow::Next,
            Flow::Jump,
            Flow::IndirectJump,
            Flow::Conditional,
            Flow::Call,
            Flow::IndirectCall,
            Flow::Return,
        ];
        // 0 is "no register": a decoder may hand it over for an operand that is none.
        let sets: [&[u8]; 7] = [
            &[],
            &[0],
            &[0, 7],
            &[REG_FLAGS],
            &[7, 8],
            &[REG_SP, 7],
            &[REG_FLAGS, 7, 8, 9, 10],
        ];
        for flow in flows {
            for reads in sets {
                for writes in sets {
                    let o = seen(flow, reads, writes);
                    assert_eq!(o.kind, flow.kind(), "{flow:?} {reads:?} {writes:?}: {o:?}");
                }
            }
        }
    }

    #[test]
    fn numbers_skip_the_special_registers() {
        let mut n = Numbering::new();
        let all: Vec<u8> = (0..100).map(|_| n.next()).collect();
        assert!(all.iter().all(|&x| !reserved(x)));
        assert_eq!(all[..6], [1, 2, 3, 4, 5, 7]);
    }
}
