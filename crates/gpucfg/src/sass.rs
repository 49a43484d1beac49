//! SASS from `nvdisasm -c`: the instructions of every function in a cubin, and each function's
//! basic blocks and control-flow edges.
//!
//! Blocks start at a function's first instruction, at every label (branch targets and
//! reconvergence points: nvdisasm labels only addresses something refers to) and after every
//! instruction that may transfer control (the same opcodes [`bbv_gpu::blocks::is_control`] cuts
//! traced blocks at, so static and traced blocks agree).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::CfgError;

/// One SASS instruction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instruction {
    /// Offset in its function's section.
    pub offset: u64,
    /// Guard predicate (`P0`, `!P0`), if any other than always-true.
    pub guard: Option<String>,
    /// Opcode with its modifiers (`ISETP.GE.AND`).
    pub opcode: String,
    /// The operands as printed.
    pub operands: String,
    /// A label a branch or call refers to (the text between the backquoted parentheses).
    pub target: Option<String>,
    /// An indirect branch's possible targets (`BRX`'s `BRANCH_TARGETS` list), in order.
    pub branch_targets: Vec<String>,
}

impl Instruction {
    /// The opcode without modifiers.
    pub fn base(&self) -> &str {
        self.opcode.split('.').next().unwrap_or("")
    }
}

/// One function (a kernel's section, with its out-of-line subroutines, which nvdisasm prints
/// inside the kernel's section).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Function {
    /// Section symbol: the kernel's mangled name.
    pub name: String,
    /// Instructions by offset.
    pub instructions: Vec<Instruction>,
    /// Labels by name: offset of the instruction that follows them (subroutines included).
    pub labels: BTreeMap<String, u64>,
    /// The SM architecture nvdisasm printed (`.target sm_80`), when it did.
    pub arch: Option<String>,
}

/// How a block ends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    /// Falls into the next block (or a conditional branch that may).
    Falls,
    /// Never falls through (unconditional branch, exit or return).
    Jumps,
    /// An indirect branch: targets unknown.
    Indirect,
}

/// A static basic block.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StaticBlock {
    /// Offset of its first instruction.
    pub start: u64,
    /// Instructions in it.
    pub size: u32,
    /// Offsets of the blocks control may go to next (calls return to the next block).
    pub successors: Vec<u64>,
    /// How it ends.
    pub exit: Exit,
}

/// A function's control-flow graph.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Cfg {
    /// Blocks in address order.
    pub blocks: Vec<StaticBlock>,
}

impl Cfg {
    /// Offsets where blocks start.
    pub fn leaders(&self) -> BTreeSet<u64> {
        self.blocks.iter().map(|b| b.start).collect()
    }

    /// The block holding `offset`, by index.
    pub fn block_of(&self, offset: u64) -> Option<usize> {
        let i = self.blocks.partition_point(|b| b.start <= offset);
        i.checked_sub(1)
    }
}

/// Size in bytes of one instruction (Volta and later; the cubins CUPTI's SASS metrics cover).
pub const INSTRUCTION_BYTES: u64 = 16;

/// Parses `nvdisasm -c` output (`what` names the source in errors).
pub fn parse(text: &str, what: &Path) -> Result<Vec<Function>, CfgError> {
    let mut functions: Vec<Function> = Vec::new();
    let mut pending_labels: Vec<String> = Vec::new();
    let mut arch: Option<String> = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if let Some(t) = line.strip_prefix(".target") {
            arch = t.split_whitespace().next().map(str::to_string);
            continue;
        }
        let err = |message: String| CfgError::Parse {
            path: what.to_path_buf(),
            line: i as u64 + 1,
            message,
        };
        if let Some(rest) = line.strip_prefix(".section") {
            let name = rest.trim().split(',').next().unwrap_or("").trim();
            if let Some(kernel) = name.strip_prefix(".text.") {
                functions.push(Function {
                    name: kernel.to_string(),
                    arch: arch.clone(),
                    ..Function::default()
                });
                pending_labels.clear();
            }
            continue;
        }
        if line.starts_with("/*") {
            let Some(f) = functions.last_mut() else {
                return Err(err("an instruction outside any .text section".into()));
            };
            let insn =
                instruction(line).ok_or_else(|| err(format!("not an instruction: {line}")))?;
            // nvdisasm prints every instruction of a section in address order: a gap, a repeat
            // or a step back is a listing cut or garbled on its way (its CFG would be wrong).
            let want = match (f.instructions.last(), fixed_width(f.arch.as_deref())) {
                (None, true) => Some(0),
                (Some(last), true) => Some(last.offset + INSTRUCTION_BYTES),
                _ => None,
            };
            let stepped = f.instructions.last().is_none_or(|l| insn.offset > l.offset);
            if want.is_some_and(|w| w != insn.offset) || !stepped {
                return Err(err(format!(
                    "instruction at {:#x} where {} was due: not nvdisasm's listing of this section, or a garbled one",
                    insn.offset,
                    want.map_or("a later offset".to_string(), |w| format!("{w:#x}"))
                )));
            }
            for l in pending_labels.drain(..) {
                f.labels.insert(l, insn.offset);
            }
            f.instructions.push(insn);
            continue;
        }
        if let Some(label) = line.strip_suffix(':') {
            if !label.contains(char::is_whitespace) && !label.starts_with(".text.") {
                pending_labels.push(label.to_string());
            }
        }
    }
    Ok(functions)
}

/// Whether `arch` (`sm_80`) encodes every instruction in [`INSTRUCTION_BYTES`] with no control
/// words between them (Volta, sm_70, and later).
fn fixed_width(arch: Option<&str>) -> bool {
    arch.and_then(|a| a.strip_prefix("sm_"))
        .and_then(|n| {
            n.trim_end_matches(|c: char| c.is_ascii_alphabetic())
                .parse::<u32>()
                .ok()
        })
        .is_some_and(|n| n >= 70)
}

/// One instruction line: `/*0070*/  @P0 EXIT ;` (braces of dual-issue pairs dropped).
fn instruction(line: &str) -> Option<Instruction> {
    let rest = line.strip_prefix("/*")?;
    let (hex, rest) = rest.split_once("*/")?;
    let offset = u64::from_str_radix(hex.trim(), 16).ok()?;
    let body = rest.trim().trim_start_matches('\x7b').trim();
    let body = body.split(';').next()?.trim();
    let (guard, body) = match body.strip_prefix('@') {
        Some(g) => {
            let (p, r) = g.split_once(char::is_whitespace)?;
            (Some(p.to_string()), r.trim())
        }
        None => (None, body),
    };
    let guard = guard.filter(|g| g != "PT");
    let (opcode, operands) = match body.split_once(char::is_whitespace) {
        Some((o, r)) => (o, r.trim()),
        None => (body, ""),
    };
    if opcode.is_empty() {
        return None;
    }
    let target = operands
        .split_once("`(")
        .and_then(|(_, t)| t.split_once(')'))
        .map(|(t, _)| t.to_string());
    // `(*"BRANCH_TARGETS .L_x_3,.L_x_4"*)` follows the semicolon.
    let branch_targets = rest
        .split_once("BRANCH_TARGETS")
        .and_then(|(_, t)| t.split('"').next())
        .map(|list| {
            list.split(',')
                .map(|l| l.trim().to_string())
                .filter(|l| !l.is_empty())
                .collect()
        })
        .unwrap_or_default();
    Some(Instruction {
        offset,
        guard,
        opcode: opcode.to_string(),
        operands: operands.to_string(),
        target,
        branch_targets,
    })
}

/// The control-flow graph of `f`.
pub fn cfg(f: &Function) -> Cfg {
    let mut leaders: BTreeSet<u64> = f.labels.values().copied().collect();
    if let Some(first) = f.instructions.first() {
        leaders.insert(first.offset);
    }
    for insn in &f.instructions {
        if bbv_gpu::blocks::is_control(&insn.opcode) {
            leaders.insert(insn.offset + INSTRUCTION_BYTES);
        }
        if let Some(t) = insn.target.as_ref().and_then(|t| f.labels.get(t)) {
            leaders.insert(*t);
        }
    }
    let mut blocks: Vec<StaticBlock> = Vec::new();
    for insn in &f.instructions {
        if leaders.contains(&insn.offset) || blocks.is_empty() {
            blocks.push(StaticBlock {
                start: insn.offset,
                size: 0,
                successors: Vec::new(),
                exit: Exit::Falls,
            });
        }
        let b = blocks.last_mut().expect("a block");
        b.size += 1;
        let next = insn.offset + INSTRUCTION_BYTES;
        let conditional = insn.guard.is_some();
        let target = insn.target.as_ref().and_then(|t| f.labels.get(t)).copied();
        let (succ, exit): (Vec<u64>, Exit) = match insn.base() {
            "BRA" | "JMP" => match (target, conditional) {
                (Some(t), true) => (vec![t, next], Exit::Falls),
                (Some(t), false) => (vec![t], Exit::Jumps),
                (None, _) => (vec![], Exit::Indirect),
            },
            "BRX" | "JMX" => (vec![], Exit::Indirect),
            "EXIT" | "RET" | "KILL" if !conditional => (vec![], Exit::Jumps),
            _ => (vec![next], Exit::Falls),
        };
        b.successors = succ;
        b.exit = exit;
    }
    // A block cut by a label falls into it; drop edges past the function's end.
    let end = f.instructions.last().map(|i| i.offset + INSTRUCTION_BYTES);
    for b in &mut blocks {
        b.successors.retain(|s| Some(*s) != end);
        b.successors.sort_unstable();
        b.successors.dedup();
    }
    Cfg { blocks }
}

/// Runs `nvdisasm -c` on a cubin and parses it.
pub fn disassemble(nvdisasm: &Path, cubin: &Path) -> Result<Vec<Function>, CfgError> {
    disassemble_functions(nvdisasm, cubin, &[])
}

/// [`disassemble`], restricted to the functions of the given symbol indices (CUPTI's function
/// indices) when any are given: a library's cubin holds hundreds of kernels a run never
/// launches.
pub fn disassemble_functions(
    nvdisasm: &Path,
    cubin: &Path,
    indices: &[u32],
) -> Result<Vec<Function>, CfgError> {
    let mut cmd = std::process::Command::new(nvdisasm);
    cmd.arg("-c");
    if !indices.is_empty() {
        let list: Vec<String> = indices.iter().map(u32::to_string).collect();
        cmd.arg("-fun").arg(list.join(","));
    }
    cmd.arg(cubin);
    let out = crate::tools::output(cmd, cubin)?;
    let text = String::from_utf8_lossy(&out);
    parse(&text, cubin)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "
	.section	.text._Z1kPi,\"ax\",@progbits
_Z1kPi:
.text._Z1kPi:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/               @P0 EXIT ;
        /*0020*/              @!P0 BRA `(.L_x_1) ;
        /*0030*/                   CALL.REL.NOINC `($_Z1kPi$_Z1fi) ;
.L_x_1:
        /*0040*/                   EXIT ;
$_Z1kPi$_Z1fi:
        /*0050*/                   MOV R2, R4 ;
        /*0060*/                   RET.REL.NODEC R2 `(_Z1kPi) ;
.L_x_2:
        /*0070*/                   BRA `(.L_x_2);
";

    #[test]
    fn blocks_split_at_labels_and_after_control() {
        let f = parse(SAMPLE, Path::new("t")).unwrap();
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].name, "_Z1kPi");
        assert_eq!(f[0].instructions.len(), 8);
        assert_eq!(f[0].labels["$_Z1kPi$_Z1fi"], 0x50);
        assert_eq!(f[0].instructions[2].guard.as_deref(), Some("!P0"));
        assert_eq!(f[0].instructions[2].target.as_deref(), Some(".L_x_1"));
        let g = cfg(&f[0]);
        let shape: Vec<(u64, u32, Vec<u64>, Exit)> = g
            .blocks
            .iter()
            .map(|b| (b.start, b.size, b.successors.clone(), b.exit))
            .collect();
        assert_eq!(
            shape,
            vec![
                (0x00, 2, vec![0x20], Exit::Falls),
                (0x20, 1, vec![0x30, 0x40], Exit::Falls),
                (0x30, 1, vec![0x40], Exit::Falls),
                (0x40, 1, vec![], Exit::Jumps),
                (0x50, 2, vec![], Exit::Jumps),
                (0x70, 1, vec![0x70], Exit::Jumps),
            ]
        );
        assert_eq!(g.block_of(0x10), Some(0));
        assert_eq!(g.block_of(0x58), Some(4));
    }

    #[test]
    fn malformed_instructions_are_refused_with_their_line() {
        let e = parse(".section .text.k,\n/*zz*/ MOV ;", Path::new("x")).unwrap_err();
        assert!(e.to_string().starts_with("x:2: not an instruction"), "{e}");
        let e = parse("/*0000*/ MOV R1, R2 ;", Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("outside any .text section"), "{e}");
    }

    /// A listing cut, repeated or reordered on its way is refused at the line where it shows;
    /// before Volta (control words between instructions) only the order is checked.
    #[test]
    fn listings_with_gaps_or_repeats_are_refused() {
        let lines: Vec<&str> = SAMPLE.lines().collect();
        let at = |n: usize| {
            lines
                .iter()
                .position(|l| l.contains(&format!("/*00{n}0*/")))
                .unwrap()
        };
        let mut gap = lines.clone();
        gap.remove(at(3));
        let mut repeat = lines.clone();
        repeat.insert(at(3), lines[at(3)]);
        let mut swap = lines.clone();
        swap.swap(at(5), at(6));
        for (text, line, due) in [(gap, 10, "0x30"), (repeat, 10, "0x40"), (swap, 13, "0x50")] {
            let listing = format!(".target sm_80\n{}", text.join("\n"));
            let e = parse(&listing, Path::new("x")).unwrap_err().to_string();
            assert!(e.starts_with(&format!("x:{line}: instruction at ")), "{e}");
            assert!(e.contains(&format!("where {due} was due")), "{e}");
        }
        assert!(parse(&format!(".target sm_80\n{SAMPLE}"), Path::new("x")).is_ok());
        let pascal = SAMPLE.replace("/*0010*/", "/*0018*/");
        assert!(parse(&format!(".target sm_61\n{pascal}"), Path::new("x")).is_ok());
        let back = SAMPLE.replace("/*0020*/", "/*0008*/");
        let e = parse(&format!(".target sm_61\n{back}"), Path::new("x")).unwrap_err();
        assert!(e.to_string().contains("a later offset"), "{e}");
    }
}
