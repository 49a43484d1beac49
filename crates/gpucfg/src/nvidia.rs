//! NVIDIA: SASS from `nvdisasm -c`, cubins out of fat binaries and executables by `cuobjdump`.
//!
//! Block rules, those of `nvdisasm -bbcfg` (and so NVBit's CFG): a block starts at a function's
//! first instruction, at every label nvdisasm prints (branch targets, reconvergence points of
//! `BSSY`, exits) and after every instruction that may transfer control (the static column of
//! `bbv_gpu::control`'s table: `BRA`, `BRX`, `BRXU`, `JMP`, `JMX`, `JMXU`, `CALL`, `RET`, `EXIT`,
//! `KILL`, `BPT`, `RTT`, guarded or not). A kernel's
//! section holds the kernel, then its device functions (labels `$kernel$function`); each is a
//! function of its own. The padding at the end of a section (a branch to itself that nothing
//! else reaches, then `NOP`s) belongs to no block. `BRX`/`JMX` make a function degenerate; their
//! successors are the `BRANCH_TARGETS` nvdisasm lists.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

use crate::sass::{self, Instruction, INSTRUCTION_BYTES};
use rayon::prelude::*;

use crate::tools::{output, Tools};
use crate::{demangle, Block, CfgError, Edge, EdgeKind, Function, Kind};

/// How an instruction transfers control.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flow {
    Next,
    Branch,
    Indirect,
    Call,
    Return,
    Exit,
}

/// By the static column of [`bbv_gpu::control`]'s table (`nvdisasm -bbcfg`'s rules).
fn flow(insn: &Instruction) -> Flow {
    use bbv_gpu::control::{self, Flow as F};
    match control::rule(insn.base()) {
        Some(op) if op.static_cfg => match op.flow {
            F::Branch => Flow::Branch,
            F::Indirect => Flow::Indirect,
            F::Call => Flow::Call,
            F::Return => Flow::Return,
            F::Exit => Flow::Exit,
            F::Reconverge => Flow::Next,
        },
        _ => Flow::Next,
    }
}

/// The CFGs of one cubin (`shown` names it in messages and outputs).
pub fn cubin(path: &Path, shown: &Path, tools: &mut Tools) -> Result<Vec<Function>, CfgError> {
    disassemble(&tools.nvdisasm()?, path, shown)
}

fn disassemble(nvdisasm: &Path, path: &Path, shown: &Path) -> Result<Vec<Function>, CfgError> {
    let mut cmd = Command::new(nvdisasm);
    cmd.arg("-c").arg(path);
    let text = output(cmd, shown)?;
    let sections = sass::parse(&String::from_utf8_lossy(&text), shown)?;
    // A disassembler that printed nothing (or another cubin's code) must not pass for a cubin
    // without kernels: every code section of the cubin is in the listing.
    let missing: Vec<String> = kernel_sections(path)
        .into_iter()
        .filter(|k| !sections.iter().any(|s| &s.name == k))
        .collect();
    if !missing.is_empty() {
        return Err(CfgError::Tool(format!(
            "{}: {} printed no code for {} of its kernel sections ({}): a broken or mismatched \
             nvdisasm ($BBV_NVDISASM)",
            shown.display(),
            nvdisasm.display(),
            missing.len(),
            missing
                .iter()
                .take(3)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(sections.iter().flat_map(functions).collect())
}

/// The kernels a cubin holds code for: its non-empty `.text.NAME` sections (none when it is
/// not an ELF this can read: nvdisasm's own error says why).
fn kernel_sections(path: &Path) -> Vec<String> {
    use object::{Object, ObjectSection};
    let Ok(data) = std::fs::read(path) else {
        return Vec::new();
    };
    let Ok(elf) = object::File::parse(&*data) else {
        return Vec::new();
    };
    elf.sections()
        .filter(|s| s.size() > 0)
        .filter_map(|s| Some(s.name().ok()?.strip_prefix(".text.")?.to_string()))
        .collect()
}

/// The CFGs in `nvdisasm -c`'s output (`shown` names the cubin in errors).
pub fn from_sass(text: &str, shown: &Path) -> Result<Vec<Function>, CfgError> {
    let sections = sass::parse(text, shown)?;
    Ok(sections.iter().flat_map(functions).collect())
}

/// The CFGs of every cubin in a fat binary or a host ELF, extracted by `cuobjdump`.
pub fn embedded(path: &Path, kind: Kind, tools: &mut Tools) -> Result<Vec<Function>, CfgError> {
    let (dir, names) = extract(path, kind, tools)?;
    // A library holds hundreds of cubins and nvdisasm takes most of the time: one per core.
    let nvdisasm = tools.nvdisasm()?;
    let per_cubin: Vec<Result<Vec<Function>, CfgError>> = names
        .par_iter()
        .map(|name| disassemble(&nvdisasm, &dir.path().join(name), &path.join(name)))
        .collect();
    let mut all = Vec::new();
    for r in per_cubin {
        all.extend(r?);
    }
    Ok(all)
}

/// Every cubin of a fat binary or host ELF, extracted by `cuobjdump` into a temporary folder
/// (removed when dropped), with their file names in the file's order.
pub fn extract(
    path: &Path,
    kind: Kind,
    tools: &mut Tools,
) -> Result<(tempfile::TempDir, Vec<String>), CfgError> {
    let abs = std::path::absolute(path).map_err(|e| CfgError::Input {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let dir = tempfile::Builder::new()
        .prefix("bbv-gpu-cfg-")
        .tempdir()
        .map_err(CfgError::Temp)?;
    let mut cmd = Command::new(tools.cuobjdump()?);
    cmd.args(["-xelf", "all"]).arg(&abs).current_dir(dir.path());
    let listing = output(cmd, path)?;
    let names: Vec<String> = String::from_utf8_lossy(&listing)
        .lines()
        .filter_map(|l| l.split_once("Extracting ELF file"))
        .filter_map(|(_, r)| r.split_once(':').map(|(_, n)| n.trim().to_string()))
        .collect();
    if names.is_empty() {
        return Err(CfgError::Input {
            path: path.to_path_buf(),
            message: format!(
                "no cubin in this {} (PTX only, or no device code): nothing to disassemble",
                kind.name()
            ),
        });
    }
    Ok((dir, names))
}

/// A section's kernel and device functions, padding dropped.
fn functions(section: &sass::Function) -> Vec<Function> {
    // Device functions start at their `$kernel$name` labels.
    let mut starts: Vec<(u64, &str)> = section
        .labels
        .iter()
        .filter(|(l, _)| l.starts_with('$'))
        .map(|(l, &o)| (o, l.as_str()))
        .collect();
    starts.sort_unstable();
    let first = section.instructions.first().map_or(0, |i| i.offset);
    let mut bounds = vec![(first, None)];
    bounds.extend(starts.iter().map(|&(o, l)| (o, Some(l))));
    let arch = section.arch.clone().unwrap_or_else(|| "unknown".into());
    let mut out = Vec::new();
    for (i, &(start, label)) in bounds.iter().enumerate() {
        let end = bounds.get(i + 1).map_or(u64::MAX, |b| b.0);
        let insns: Vec<&Instruction> = section
            .instructions
            .iter()
            .filter(|x| x.offset >= start && x.offset < end)
            .collect();
        let insns = without_padding(insns, &section.labels, &section.instructions);
        if insns.is_empty() && label.is_some() {
            continue;
        }
        let mangled = match label {
            // `$kernel$name`: the name after the kernel's.
            Some(l) => l
                .strip_prefix('$')
                .and_then(|r| r.strip_prefix(section.name.as_str()))
                .and_then(|r| r.strip_prefix('$'))
                .unwrap_or(l)
                .to_string(),
            None => section.name.clone(),
        };
        let (blocks, degenerate) = blocks(&insns, start, &section.labels, &section.name);
        out.push(Function {
            name: demangle(&mangled),
            mangled,
            arch: arch.clone(),
            kernel: label.is_none(),
            parent: label.map(|_| section.name.clone()),
            offset: start,
            degenerate,
            blocks,
        });
    }
    out
}

/// `insns` without the section's trailing padding: `NOP`s, and a branch to itself that no other
/// instruction targets and nothing falls into.
fn without_padding<'a>(
    mut insns: Vec<&'a Instruction>,
    labels: &BTreeMap<String, u64>,
    all: &[Instruction],
) -> Vec<&'a Instruction> {
    while insns.last().is_some_and(|i| i.base() == "NOP") {
        insns.pop();
    }
    let n = insns.len();
    if n >= 2 {
        let last = insns[n - 1];
        let own = last.target.as_ref().and_then(|t| labels.get(t)) == Some(&last.offset);
        let before = insns[n - 2];
        let falls_in = before.guard.is_some() || matches!(flow(before), Flow::Next | Flow::Call);
        let reached = all
            .iter()
            .any(|x| x.offset != last.offset && x.target == last.target);
        if last.base() == "BRA" && last.guard.is_none() && own && !falls_in && !reached {
            insns.pop();
        }
    }
    insns
}

/// The blocks of one function's instructions (`base` its first offset) and whether it is
/// degenerate.
fn blocks(
    insns: &[&Instruction],
    base: u64,
    labels: &BTreeMap<String, u64>,
    kernel: &str,
) -> (Vec<Block>, bool) {
    let labelled: std::collections::BTreeSet<u64> = labels.values().copied().collect();
    let mut index: BTreeMap<u64, usize> = BTreeMap::new();
    let mut starts: Vec<usize> = Vec::new();
    for (k, insn) in insns.iter().enumerate() {
        let after_control = k > 0 && flow(insns[k - 1]) != Flow::Next;
        if k == 0 || labelled.contains(&insn.offset) || after_control {
            index.insert(insn.offset, starts.len());
            starts.push(k);
        }
    }
    let end = insns.last().map(|i| i.offset + INSTRUCTION_BYTES);
    let to = |offset: u64| index.get(&offset).copied();
    let mut degenerate = false;
    let mut out = Vec::with_capacity(starts.len());
    for (b, &k0) in starts.iter().enumerate() {
        let k1 = starts.get(b + 1).copied().unwrap_or(insns.len());
        let body = &insns[k0..k1];
        let last = body[body.len() - 1];
        let next = last.offset + INSTRUCTION_BYTES;
        let edge = Edge::to;
        let target = last.target.as_ref().and_then(|t| labels.get(t)).copied();
        let mut succ = Vec::new();
        match flow(last) {
            Flow::Next => {}
            Flow::Branch => match target {
                Some(t) => succ.push(edge(to(t), EdgeKind::Taken)),
                None => succ.push(edge(None, EdgeKind::Indirect)),
            },
            Flow::Indirect => {
                degenerate = true;
                if last.branch_targets.is_empty() {
                    succ.push(edge(None, EdgeKind::Indirect));
                }
                for t in &last.branch_targets {
                    succ.push(edge(labels.get(t).and_then(|&o| to(o)), EdgeKind::Taken));
                }
            }
            Flow::Call => {
                // `$kernel$callee` is a device function of this section; anything else is
                // outside what nvdisasm shows.
                let callee = last.target.as_ref().and_then(|t| {
                    t.strip_prefix('$')
                        .and_then(|r| r.strip_prefix(kernel))
                        .and_then(|r| r.strip_prefix('$'))
                        .map(str::to_string)
                });
                succ.push(Edge {
                    block: callee.as_ref().map(|_| 0),
                    kind: EdgeKind::Call,
                    callee,
                });
            }
            Flow::Return => succ.push(edge(None, EdgeKind::Return)),
            Flow::Exit => succ.push(edge(None, EdgeKind::Exit)),
        }
        let falls = match flow(last) {
            Flow::Next | Flow::Call => true,
            _ => last.guard.is_some(),
        };
        if falls && Some(next) != end {
            succ.push(edge(to(next), EdgeKind::FallThrough));
        }
        out.push(Block {
            start: body[0].offset - base,
            opcodes: body.iter().map(|i| i.opcode.clone()).collect(),
            successors: succ,
        });
    }
    (out, degenerate)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECTION: &str = "
	.target	sm_80
	.section	.text.k,\"ax\",@progbits
k:
.text.k:
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/               @P0 EXIT ;
.L_x_2:
        /*0020*/                   BRXU UR4 -0x30       (*\"BRANCH_TARGETS .L_x_3,.L_x_4\"*);
.L_x_3:
        /*0030*/                   CALL.REL.NOINC `($k$_Z1fi) ;
.L_x_4:
        /*0040*/                   EXIT ;
$k$_Z1fi:
        /*0050*/                   MOV R2, R4 ;
        /*0060*/                   RET.REL.NODEC R2 `(k) ;
.L_x_5:
        /*0070*/                   BRA `(.L_x_5);
        /*0080*/                   NOP;
        /*0090*/                   NOP;
";

    #[test]
    fn kernels_device_functions_and_padding() {
        let sections = sass::parse(SECTION, Path::new("t")).unwrap();
        let fs = functions(&sections[0]);
        assert_eq!(fs.len(), 2);
        let (k, f) = (&fs[0], &fs[1]);
        assert!(k.kernel && k.degenerate && k.arch == "sm_80");
        assert_eq!(
            crate::shape(&k.blocks),
            vec![
                (0x00, 2, vec![(None, "exit"), (Some(1), "fall-through")]),
                (0x20, 1, vec![(Some(2), "taken"), (Some(3), "taken")]),
                (0x30, 1, vec![(Some(0), "call"), (Some(3), "fall-through")]),
                (0x40, 1, vec![(None, "exit")]),
            ]
        );
        assert_eq!(k.blocks[2].successors[0].callee.as_deref(), Some("_Z1fi"));
        assert_eq!((f.name.as_str(), f.mangled.as_str()), ("f(int)", "_Z1fi"));
        assert_eq!((f.offset, f.parent.as_deref()), (0x50, Some("k")));
        assert!(!f.kernel && !f.degenerate);
        assert_eq!(
            crate::shape(&f.blocks),
            vec![(0x00, 2, vec![(None, "return")])]
        );
    }
}
