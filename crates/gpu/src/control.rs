//! Which SASS opcodes end a basic block: one table for the two kinds of block bbv builds.
//!
//! * Traced blocks ([`crate::blocks`], NVBit's dynamic blocks, rebuilt from the PCs of a
//!   trace) end after every instruction that may transfer control or reconverge: the branch,
//!   call, return and exit families of every architecture (Kepler's `CAL`, `JCAL`, `KIL`
//!   included) and the reconvergence instructions (`SYNC`, `BRK`, `CONT`, `BSYNC`), after which
//!   a warp may resume elsewhere.
//! * Static blocks (`bbv gpu cfg`, `nvdisasm -bbcfg`'s rules) end after a branch, call,
//!   return or exit only (Volta's `BRXU`, `JMXU`, `KILL` included); reconvergence points start
//!   blocks through the labels nvdisasm prints instead.
//!
//! The two columns of [`CONTROL_OPS`] are those differences, named once.

/// How an instruction may move control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// A direct branch or jump.
    Branch,
    /// An indirect branch or jump (targets in a register or a table).
    Indirect,
    /// A call (returns to the next instruction).
    Call,
    /// A return.
    Return,
    /// The thread ends (exit, kill, breakpoint, trap return).
    Exit,
    /// A warp reconverges (and may resume elsewhere).
    Reconverge,
}

/// One opcode's row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlOp {
    /// The opcode's base name (before the first '.').
    pub name: &'static str,
    /// How it moves control.
    pub flow: Flow,
    /// Traced blocks end after it.
    pub traced: bool,
    /// Static blocks end after it.
    pub static_cfg: bool,
}

const fn op(name: &'static str, flow: Flow, traced: bool, static_cfg: bool) -> ControlOp {
    ControlOp {
        name,
        flow,
        traced,
        static_cfg,
    }
}

/// Every opcode that ends a block of either kind.
pub const CONTROL_OPS: [ControlOp; 19] = [
    op("BRA", Flow::Branch, true, true),
    op("JMP", Flow::Branch, true, true),
    op("BRX", Flow::Indirect, true, true),
    op("JMX", Flow::Indirect, true, true),
    op("BRXU", Flow::Indirect, false, true),
    op("JMXU", Flow::Indirect, false, true),
    op("CALL", Flow::Call, true, true),
    op("CAL", Flow::Call, true, false),
    op("JCAL", Flow::Call, true, false),
    op("RET", Flow::Return, true, true),
    op("EXIT", Flow::Exit, true, true),
    op("KILL", Flow::Exit, false, true),
    op("KIL", Flow::Exit, true, false),
    op("BPT", Flow::Exit, true, true),
    op("RTT", Flow::Exit, true, true),
    op("SYNC", Flow::Reconverge, true, false),
    op("BRK", Flow::Reconverge, true, false),
    op("CONT", Flow::Reconverge, true, false),
    op("BSYNC", Flow::Reconverge, true, false),
];

/// The row of an opcode's base name, if it ends a block of either kind.
pub fn rule(base: &str) -> Option<&'static ControlOp> {
    CONTROL_OPS.iter().find(|o| o.name == base)
}

/// How many opcodes end traced blocks.
pub(crate) const TRACED: usize = {
    let mut n = 0;
    let mut i = 0;
    while i < CONTROL_OPS.len() {
        if CONTROL_OPS[i].traced {
            n += 1;
        }
        i += 1;
    }
    n
};

/// The base names that end traced blocks.
pub(crate) const TRACED_NAMES: [&str; TRACED] = {
    let mut out = [""; TRACED];
    let (mut i, mut j) = (0, 0);
    while i < CONTROL_OPS.len() {
        if CONTROL_OPS[i].traced {
            out[j] = CONTROL_OPS[i].name;
            j += 1;
        }
        i += 1;
    }
    out
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_each_opcode_once_and_the_kinds_differ_where_said() {
        for (i, a) in CONTROL_OPS.iter().enumerate() {
            assert!(
                CONTROL_OPS[i + 1..].iter().all(|b| b.name != a.name),
                "{}",
                a.name
            );
            assert!(a.traced || a.static_cfg, "{}", a.name);
        }
        let only = |traced: bool| -> Vec<&str> {
            let mut v: Vec<&str> = CONTROL_OPS
                .iter()
                .filter(|o| o.traced == traced && o.static_cfg != traced)
                .map(|o| o.name)
                .collect();
            v.sort();
            v
        };
        assert_eq!(
            only(true),
            ["BRK", "BSYNC", "CAL", "CONT", "JCAL", "KIL", "SYNC"]
        );
        assert_eq!(only(false), ["BRXU", "JMXU", "KILL"]);
        assert_eq!(TRACED, 16);
        assert_eq!(rule("BRA").map(|o| o.flow), Some(Flow::Branch));
        assert_eq!(rule("MOV"), None);
    }
}
