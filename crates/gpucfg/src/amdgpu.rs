//! AMD: code objects (`.hsaco`) and relocatable objects (`clang -c`) disassembled by
//! `llvm-objdump -d -r`; functions, kernels (a function with a `NAME.kd` descriptor) and the
//! architecture from the ELF itself.
//!
//! Block rules: a block starts at a function's first instruction, at every branch target and
//! after every branch (`s_branch`, `s_cbranch_*`), `s_endpgm*`, `s_setpc_b64` and call
//! (`s_swappc_b64`). `s_setpc_b64 s[30:31]` in a device function is its return (the calling
//! convention's return address); any other `s_setpc_b64` jumps through registers to an
//! unknown target and makes the function degenerate. A call's callee is the symbol the
//! relocations before it name (in relocatable objects), else the function at the address its
//! `s_getpc_b64`/`s_add_u32`/`s_addc_u32` sequence computes (linked code objects). Bytes past a function symbol's size
//! (`s_nop`/`s_code_end` padding) belong to no block.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSymbol, SymbolKind};

use crate::tools::{output, Tools};
use crate::{demangle, Block, CfgError, Edge, EdgeKind, Function};

/// `EF_AMDGPU_MACH` values (the low byte of `e_flags`) and their processors.
const MACHINES: [(u32, &str); 32] = [
    (0x2a, "gfx803"),
    (0x2c, "gfx900"),
    (0x2d, "gfx902"),
    (0x2e, "gfx904"),
    (0x2f, "gfx906"),
    (0x30, "gfx908"),
    (0x31, "gfx909"),
    (0x32, "gfx90c"),
    (0x33, "gfx1010"),
    (0x34, "gfx1011"),
    (0x35, "gfx1012"),
    (0x36, "gfx1030"),
    (0x37, "gfx1031"),
    (0x38, "gfx1032"),
    (0x39, "gfx1033"),
    (0x3d, "gfx1035"),
    (0x3e, "gfx1034"),
    (0x3f, "gfx90a"),
    (0x40, "gfx940"),
    (0x41, "gfx1100"),
    (0x43, "gfx1150"),
    (0x44, "gfx1103"),
    (0x45, "gfx1036"),
    (0x46, "gfx1101"),
    (0x47, "gfx1102"),
    (0x48, "gfx1200"),
    (0x4a, "gfx1151"),
    (0x4b, "gfx941"),
    (0x4c, "gfx942"),
    (0x4e, "gfx1201"),
    (0x55, "gfx1152"),
    (0x42, "gfx1013"),
];

/// A function symbol: name, address, size.
struct Symbol {
    name: String,
    address: u64,
    size: u64,
}

/// What the ELF says: the processor, the functions and which are kernels.
fn symbols(path: &Path) -> Result<(String, Vec<Symbol>, BTreeSet<String>), CfgError> {
    let data = bbv_files::input::read_bytes(path, 1 << 30)?;
    let bad = |m: String| CfgError::Input {
        path: path.to_path_buf(),
        message: m,
    };
    let elf = ElfFile64::<object::Endianness>::parse(&*data)
        .map_err(|e| bad(format!("not an AMDGPU ELF file bbv can read: {e}")))?;
    // e_flags (little-endian, at byte 48 of a 64-bit header): the processor in its low byte.
    let mach = u32::from_le_bytes([data[48], data[49], data[50], data[51]]) & 0xff;
    let arch = MACHINES
        .iter()
        .find(|m| m.0 == mach)
        .map_or_else(|| format!("amdgcn-mach-0x{mach:x}"), |m| m.1.to_string());
    let mut functions = Vec::new();
    let mut descriptors = BTreeSet::new();
    for s in elf.symbols() {
        let Ok(name) = s.name() else { continue };
        if let Some(kernel) = name.strip_suffix(".kd") {
            descriptors.insert(kernel.to_string());
        } else if s.kind() == SymbolKind::Text && s.is_definition() {
            functions.push(Symbol {
                name: name.to_string(),
                address: s.address(),
                size: s.size(),
            });
        }
    }
    functions.sort_by_key(|f| f.address);
    // A symbol without a size runs to the next one.
    for i in 0..functions.len() {
        if functions[i].size == 0 {
            let next = functions.get(i + 1).map_or(u64::MAX, |n| n.address);
            functions[i].size = next.saturating_sub(functions[i].address);
        }
    }
    Ok((arch, functions, descriptors))
}

/// One disassembled instruction.
#[derive(Clone, Debug)]
struct Insn {
    offset: u64,
    bytes: u64,
    mnemonic: String,
    operands: String,
    /// `<symbol+0xN>` printed after a branch.
    annotation: Option<(String, u64)>,
    /// The symbol of the relocations printed after it.
    relocation: Option<String>,
}

/// Parses `llvm-objdump -d -r` output.
fn parse(text: &str, path: &Path) -> Result<Vec<Insn>, CfgError> {
    let mut out: Vec<Insn> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let err = |message: String| CfgError::Parse {
            path: path.to_path_buf(),
            line: i as u64 + 1,
            message,
        };
        if let Some(rel) = line.strip_prefix("\t\t") {
            // `0000000000000144:  R_AMDGPU_REL32_LO\tsym+0x4`
            if let Some(sym) = rel.split('\t').nth(1) {
                let sym = sym.split(['+', '-']).next().unwrap_or(sym).trim();
                if let Some(last) = out.last_mut() {
                    last.relocation = Some(sym.to_string());
                }
            }
            continue;
        }
        let Some(body) = line.strip_prefix('\t') else {
            continue;
        };
        let Some((asm, comment)) = body.split_once("//") else {
            continue;
        };
        let comment = comment.trim();
        let (offset, rest) = comment
            .split_once(':')
            .ok_or_else(|| err(format!("no offset in: {line}")))?;
        let offset = u64::from_str_radix(offset.trim(), 16)
            .map_err(|_| err(format!("bad offset in: {line}")))?;
        let (words, annotation) = match rest.split_once('<') {
            Some((w, a)) => (w, a.strip_suffix('>')),
            None => (rest, None),
        };
        let bytes = 4 * words.split_whitespace().count() as u64;
        if bytes == 0 {
            return Err(err(format!("no encoding in: {line}")));
        }
        let annotation = annotation.and_then(|a| match a.split_once("+0x") {
            Some((s, o)) => u64::from_str_radix(o, 16).ok().map(|o| (s.to_string(), o)),
            None => Some((a.to_string(), 0)),
        });
        let asm = asm.trim();
        let (mnemonic, operands) = asm.split_once(char::is_whitespace).unwrap_or((asm, ""));
        out.push(Insn {
            offset,
            bytes,
            mnemonic: mnemonic.to_string(),
            operands: operands.trim().to_string(),
            annotation,
            relocation: None,
        });
    }
    Ok(out)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Flow {
    Next,
    Jump,
    Conditional,
    Call,
    Return,
    Indirect,
    Exit,
}

fn flow(insn: &Insn, kernel: bool) -> Flow {
    let m = insn.mnemonic.as_str();
    match m {
        "s_branch" => Flow::Jump,
        "s_swappc_b64" => Flow::Call,
        "s_setpc_b64" if !kernel && insn.operands == "s[30:31]" => Flow::Return,
        "s_setpc_b64" => Flow::Indirect,
        _ if m.starts_with("s_cbranch_") => Flow::Conditional,
        _ if m.starts_with("s_endpgm") => Flow::Exit,
        _ => Flow::Next,
    }
}

/// A branch's target: from the annotation, else from its 16-bit word offset.
fn target(insn: &Insn, addresses: &BTreeMap<&str, u64>) -> Option<u64> {
    if let Some((sym, off)) = &insn.annotation {
        if let Some(a) = addresses.get(sym.as_str()) {
            return Some(a + off);
        }
    }
    let imm: i64 = insn.operands.split(',').next()?.trim().parse().ok()?;
    let simm = imm as u16 as i16 as i64;
    Some((insn.offset as i64 + 4 + 4 * simm) as u64)
}

/// The CFGs of an AMDGPU code object or relocatable object.
pub fn object(path: &Path, tools: &mut Tools) -> Result<Vec<Function>, CfgError> {
    let (arch, syms, kernels) = symbols(path)?;
    let mut cmd = Command::new(tools.llvm_objdump()?);
    cmd.args(["-d", "-r", "--no-print-imm-hex"]).arg(path);
    let text = output(cmd, path)?;
    let insns = parse(&String::from_utf8_lossy(&text), path)?;
    let addresses: BTreeMap<&str, u64> =
        syms.iter().map(|s| (s.name.as_str(), s.address)).collect();
    let mut out = Vec::new();
    for s in &syms {
        let body: Vec<&Insn> = insns
            .iter()
            .filter(|i| i.offset >= s.address && i.offset < s.address + s.size)
            .collect();
        if body.is_empty() {
            continue;
        }
        let kernel = kernels.contains(&s.name);
        let (blocks, degenerate) = blocks(&body, s.address, kernel, &addresses);
        out.push(Function {
            name: demangle(&s.name),
            mangled: s.name.clone(),
            arch: arch.clone(),
            kernel,
            parent: None,
            offset: s.address,
            degenerate,
            blocks,
        });
    }
    Ok(out)
}

fn blocks(
    body: &[&Insn],
    base: u64,
    kernel: bool,
    addresses: &BTreeMap<&str, u64>,
) -> (Vec<Block>, bool) {
    let mut leaders = BTreeSet::new();
    for (k, insn) in body.iter().enumerate() {
        if k == 0 || flow(body[k - 1], kernel) != Flow::Next {
            leaders.insert(insn.offset);
        }
        if matches!(flow(insn, kernel), Flow::Jump | Flow::Conditional) {
            if let Some(t) = target(insn, addresses) {
                leaders.insert(t);
            }
        }
    }
    let starts: Vec<usize> = (0..body.len())
        .filter(|&k| leaders.contains(&body[k].offset))
        .collect();
    let index: BTreeMap<u64, usize> = starts
        .iter()
        .enumerate()
        .map(|(b, &k)| (body[k].offset, b))
        .collect();
    let end = body.last().map(|i| i.offset + i.bytes);
    let mut degenerate = false;
    let mut callee: Option<String> = None;
    let mut pc_relative = PcRelative::default();
    let mut out = Vec::with_capacity(starts.len());
    for (b, &k0) in starts.iter().enumerate() {
        let k1 = starts.get(b + 1).copied().unwrap_or(body.len());
        let part = &body[k0..k1];
        for insn in part {
            if let Some(r) = &insn.relocation {
                callee = Some(r.clone());
            }
            pc_relative.step(insn);
        }
        let last = part[part.len() - 1];
        let next = last.offset + last.bytes;
        let edge = Edge::to;
        let mut succ = Vec::new();
        let f = flow(last, kernel);
        match f {
            Flow::Next => {}
            Flow::Jump | Flow::Conditional => {
                let t = target(last, addresses);
                match t.map(|t| index.get(&t).copied()) {
                    Some(block) => succ.push(edge(block, EdgeKind::Taken)),
                    None => succ.push(edge(None, EdgeKind::Indirect)),
                }
            }
            Flow::Call => {
                // Relocated (an object file), else computed (a linked code object).
                let name = callee.take().or_else(|| {
                    let target = pc_relative.target()?;
                    let (name, _) = addresses.iter().find(|(_, &a)| a == target)?;
                    Some(name.to_string())
                });
                succ.push(Edge {
                    block: name
                        .as_ref()
                        .filter(|n| addresses.contains_key(n.as_str()))
                        .map(|_| 0),
                    kind: EdgeKind::Call,
                    callee: name,
                });
            }
            Flow::Return => succ.push(edge(None, EdgeKind::Return)),
            Flow::Indirect => {
                degenerate = true;
                succ.push(edge(None, EdgeKind::Indirect));
            }
            Flow::Exit => succ.push(edge(None, EdgeKind::Exit)),
        }
        if matches!(f, Flow::Next | Flow::Conditional | Flow::Call) && Some(next) != end {
            succ.push(edge(index.get(&next).copied(), EdgeKind::FallThrough));
        }
        out.push(Block {
            start: part[0].offset - base,
            opcodes: part.iter().map(|i| i.mnemonic.clone()).collect(),
            successors: succ,
        });
    }
    (out, degenerate)
}

/// The address a call sequence computes: `s_getpc_b64 s[a:b]` (the next instruction's
/// address), then `s_add_u32 sa, sa, LO` and `s_addc_u32 sb, sb, HI` (a 64-bit offset).
#[derive(Default)]
struct PcRelative {
    base: Option<(String, String, u64)>,
    lo: Option<u32>,
    hi: Option<u32>,
}

/// A 32-bit literal as llvm-objdump prints it: hex, or decimal (negative for small negatives).
fn literal(s: &str) -> Option<u32> {
    match s.strip_prefix("0x") {
        Some(h) => u32::from_str_radix(h, 16).ok(),
        None => s.parse::<i64>().ok().map(|v| v as u32),
    }
}

impl PcRelative {
    fn step(&mut self, insn: &Insn) {
        let ops: Vec<&str> = insn.operands.split(',').map(str::trim).collect();
        match (insn.mnemonic.as_str(), ops.as_slice()) {
            ("s_getpc_b64", [pair]) => {
                let regs = pair.strip_prefix("s[").and_then(|r| r.strip_suffix(']'));
                *self = PcRelative::default();
                if let Some((a, b)) = regs.and_then(|r| r.split_once(':')) {
                    let next = insn.offset + insn.bytes;
                    self.base = Some((format!("s{a}"), format!("s{b}"), next));
                }
            }
            ("s_add_u32", [d, x, lit])
                if self.base.as_ref().is_some_and(|b| &b.0 == d && d == x) =>
            {
                self.lo = literal(lit);
            }
            ("s_addc_u32", [d, x, lit])
                if self.base.as_ref().is_some_and(|b| &b.1 == d && d == x) =>
            {
                self.hi = literal(lit);
            }
            _ => {}
        }
    }

    fn target(&self) -> Option<u64> {
        let (_, _, base) = self.base.as_ref()?;
        let offset = (u64::from(self.hi?) << 32) | u64::from(self.lo?);
        Some(base.wrapping_add(offset))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = "
0000000000000000 <f>:
\ts_cmp_eq_u32 s0, 0                                         // 000000000000: BF068000
\ts_cbranch_scc1 1                                           // 000000000004: BF850001 <f+0xc>
\ts_nop 0                                                    // 000000000008: BF800000
\ts_getpc_b64 s[4:5]                                         // 00000000000C: BE841C00
\ts_add_u32 s4, s4, 0                                        // 000000000010: 8004FF04 00000000
\t\t0000000000000014:  R_AMDGPU_REL32_LO\tg+0x4
\ts_swappc_b64 s[30:31], s[4:5]                              // 000000000018: BE9E1E04
\ts_setpc_b64 s[30:31]                                       // 00000000001C: BE801D1E
";

    #[test]
    fn branches_calls_and_returns() {
        let insns = parse(TEXT, Path::new("t")).unwrap();
        assert_eq!(insns.len(), 7);
        assert_eq!(insns[4].bytes, 8);
        assert_eq!(insns[4].relocation.as_deref(), Some("g"));
        let body: Vec<&Insn> = insns.iter().collect();
        let addresses = BTreeMap::from([("f", 0u64)]);
        let (blocks, degenerate) = blocks(&body, 0, false, &addresses);
        assert!(!degenerate);
        assert_eq!(
            crate::shape(&blocks),
            vec![
                (0x0, 2, vec![(Some(2), "taken"), (Some(1), "fall-through")]),
                (0x8, 1, vec![(Some(2), "fall-through")]),
                (0xc, 3, vec![(None, "call"), (Some(3), "fall-through")]),
                (0x1c, 1, vec![(None, "return")]),
            ]
        );
        assert_eq!(blocks[2].successors[0].callee.as_deref(), Some("g"));
        // The same in a kernel: a jump through registers.
        let (_, degenerate) = super::blocks(&body, 0, true, &addresses);
        assert!(degenerate);
    }
}
