//! The branch kinds ChampSim tells apart, from the special registers a record reads and writes.

use crate::{Record, REG_FLAGS, REG_IP, REG_SP};

/// What ChampSim takes a record for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BranchKind {
    /// Writes the instruction pointer and reads nothing else.
    DirectJump,
    /// Writes the instruction pointer from another register.
    Indirect,
    /// Reads the instruction pointer and the flags (or another register), writes the pointer.
    Conditional,
    /// Reads and writes the stack and instruction pointers.
    DirectCall,
    /// A direct call that also reads another register.
    IndirectCall,
    /// Reads and writes the stack pointer, writes the instruction pointer without reading it.
    Return,
    /// Writes the instruction pointer in a pattern none of the above matches.
    Other,
    /// Does not write the instruction pointer.
    NotBranch,
}

impl BranchKind {
    /// Taken whenever it runs (ChampSim, like Pin's tracer, takes every jump, call and return).
    pub fn always_taken(self) -> bool {
        matches!(
            self,
            BranchKind::DirectJump
                | BranchKind::Indirect
                | BranchKind::DirectCall
                | BranchKind::IndirectCall
                | BranchKind::Return
        )
    }

    /// Every kind, in ChampSim's order (its `branch_type` enum).
    pub const ALL: [BranchKind; 8] = [
        BranchKind::DirectJump,
        BranchKind::Indirect,
        BranchKind::Conditional,
        BranchKind::DirectCall,
        BranchKind::IndirectCall,
        BranchKind::Return,
        BranchKind::Other,
        BranchKind::NotBranch,
    ];

    /// ChampSim's name for the kind.
    pub fn name(self) -> &'static str {
        match self {
            BranchKind::DirectJump => "BRANCH_DIRECT_JUMP",
            BranchKind::Indirect => "BRANCH_INDIRECT",
            BranchKind::Conditional => "BRANCH_CONDITIONAL",
            BranchKind::DirectCall => "BRANCH_DIRECT_CALL",
            BranchKind::IndirectCall => "BRANCH_INDIRECT_CALL",
            BranchKind::Return => "BRANCH_RETURN",
            BranchKind::Other => "BRANCH_OTHER",
            BranchKind::NotBranch => "NOT_BRANCH",
        }
    }

    /// The kind ChampSim derives for `r` (register 0 is no register).
    pub fn of(r: &Record) -> BranchKind {
        let writes = |x: u8| r.dst_regs.contains(&x);
        let reads = |x: u8| r.src_regs.contains(&x);
        let (writes_sp, writes_ip) = (writes(REG_SP), writes(REG_IP));
        let (reads_sp, reads_flags, reads_ip) = (reads(REG_SP), reads(REG_FLAGS), reads(REG_IP));
        let reads_other = r
            .src_regs
            .iter()
            .any(|&x| x != 0 && x != REG_SP && x != REG_FLAGS && x != REG_IP);
        if !writes_ip {
            return BranchKind::NotBranch;
        }
        match (reads_sp, reads_ip, writes_sp, reads_flags, reads_other) {
            (false, _, _, false, false) => BranchKind::DirectJump,
            (false, false, _, false, true) => BranchKind::Indirect,
            (false, true, false, f, o) if f || o => BranchKind::Conditional,
            (true, true, true, false, false) => BranchKind::DirectCall,
            (true, true, true, false, true) => BranchKind::IndirectCall,
            (true, false, true, _, _) => BranchKind::Return,
            _ => BranchKind::Other,
        }
    }
}
