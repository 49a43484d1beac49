//! The CFGs as JSON, Graphviz DOT or tab-separated lines.

use std::io::{self, Write};

use serde_json::{json, Value};

use crate::{Edge, FileCfg, Function};

/// The output formats of `bbv gpu cfg`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// One JSON document (the layout in docs/gpu-cfg.md).
    Json,
    /// One Graphviz digraph, a cluster per function.
    Dot,
    /// One line per block.
    Tsv,
}

impl std::str::FromStr for Format {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "json" => Ok(Format::Json),
            "dot" => Ok(Format::Dot),
            "tsv" => Ok(Format::Tsv),
            _ => Err(format!("{s}: not json, dot or tsv")),
        }
    }
}

/// Writes `files` in `format`.
pub fn write(out: &mut impl Write, files: &[FileCfg], format: Format) -> io::Result<()> {
    match format {
        Format::Json => json_out(out, files),
        Format::Dot => dot(out, files),
        Format::Tsv => tsv(out, files),
    }
}

fn edge_json(e: &Edge) -> Value {
    // A successor outside any block (indirect, a call out of the file) has no "block".
    let mut v = json!({"kind": e.kind.name()});
    if let Some(b) = e.block {
        v["block"] = json!(b);
    }
    if let Some(c) = &e.callee {
        v["callee"] = json!(c);
    }
    v
}

fn function_json(f: &Function) -> Value {
    let blocks: Vec<Value> = f
        .blocks
        .iter()
        .map(|b| {
            json!({
                "start": b.start,
                "instructions": b.opcodes.len(),
                "opcodes": b.opcodes,
                "successors": b.successors.iter().map(edge_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    let mut v = json!({
        "name": f.name,
        "mangled": f.mangled,
        "arch": f.arch,
        "kind": if f.kernel { "kernel" } else { "function" },
        "offset": f.offset,
        "degenerate": f.degenerate,
        "instructions": f.instructions(),
        "blocks": blocks,
    });
    if let Some(p) = &f.parent {
        v["parent"] = json!(p);
    }
    v
}

fn json_out(out: &mut impl Write, files: &[FileCfg]) -> io::Result<()> {
    let files: Vec<Value> = files
        .iter()
        .map(|f| {
            json!({
                "path": f.path.to_string_lossy(),
                "format": f.kind.name(),
                "kernels": f.functions.iter().map(function_json).collect::<Vec<_>>(),
            })
        })
        .collect();
    serde_json::to_writer(&mut *out, &json!({ "files": files }))?;
    writeln!(out)
}

/// The index of the function a call edge of `caller` enters, in the same file.
fn callee_index(functions: &[Function], caller: &Function, e: &Edge) -> Option<usize> {
    let name = e.callee.as_deref()?;
    // On NVIDIA each kernel's section has its own copy of a device function.
    let section = match (
        &caller.parent,
        caller.arch.starts_with("sm_") && caller.kernel,
    ) {
        (Some(p), _) => Some(p.as_str()),
        (None, true) => Some(caller.mangled.as_str()),
        (None, false) => None,
    };
    functions
        .iter()
        .position(|f| f.arch == caller.arch && f.mangled == name && f.parent.as_deref() == section)
}

fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

fn dot(out: &mut impl Write, files: &[FileCfg]) -> io::Result<()> {
    writeln!(out, "digraph cfg {{")?;
    writeln!(
        out,
        "  node [shape=box, fontname=\"monospace\", fontsize=10];"
    )?;
    for (fi, file) in files.iter().enumerate() {
        for (i, f) in file.functions.iter().enumerate() {
            writeln!(out, "  subgraph \"cluster_{fi}_{i}\" {{")?;
            let what = if f.kernel { "kernel" } else { "function" };
            let degenerate = if f.degenerate { ", degenerate" } else { "" };
            writeln!(
                out,
                "    label=\"{} ({what}, {}{degenerate}) {}\";",
                quote(&f.name),
                f.arch,
                quote(&file.path.to_string_lossy())
            )?;
            for (b, block) in f.blocks.iter().enumerate() {
                let first = block.opcodes.first().map_or("", String::as_str);
                let last = block.opcodes.last().map_or("", String::as_str);
                writeln!(
                    out,
                    "    n{fi}_{i}_{b} [label=\"{:#06x}: {} instructions\\n{}\\n..{}\"];",
                    block.start,
                    block.opcodes.len(),
                    quote(first),
                    quote(last)
                )?;
            }
            for (b, block) in f.blocks.iter().enumerate() {
                for e in &block.successors {
                    let kind = e.kind.name();
                    let target = match (e.kind, e.block) {
                        (crate::EdgeKind::Call, Some(t)) => {
                            callee_index(&file.functions, f, e).map(|c| format!("n{fi}_{c}_{t}"))
                        }
                        (_, Some(t)) => Some(format!("n{fi}_{i}_{t}")),
                        (_, None) => None,
                    };
                    match target {
                        Some(t) => {
                            let style = if e.kind == crate::EdgeKind::Call {
                                ", style=dashed"
                            } else {
                                ""
                            };
                            writeln!(out, "    n{fi}_{i}_{b} -> {t} [label=\"{kind}\"{style}];")?
                        }
                        None => {
                            writeln!(
                                out,
                                "    x{fi}_{i}_{b}_{kind} [label=\"{kind}\", shape=plaintext];"
                            )?;
                            writeln!(out, "    n{fi}_{i}_{b} -> x{fi}_{i}_{b}_{kind};")?
                        }
                    }
                }
            }
            writeln!(out, "  }}")?;
        }
    }
    writeln!(out, "}}")
}

fn tsv(out: &mut impl Write, files: &[FileCfg]) -> io::Result<()> {
    writeln!(
        out,
        "file\tarch\tfunction\tkind\tdegenerate\tblock\tstart\tinstructions\tsuccessors"
    )?;
    for file in files {
        for f in &file.functions {
            for (b, block) in f.blocks.iter().enumerate() {
                let succ: Vec<String> = block
                    .successors
                    .iter()
                    .map(|e| match e.block {
                        Some(t) => format!("{t}:{}", e.kind.name()),
                        None => format!("-:{}", e.kind.name()),
                    })
                    .collect();
                writeln!(
                    out,
                    "{}\t{}\t{}\t{}\t{}\t{b}\t{}\t{}\t{}",
                    file.path.display(),
                    f.arch,
                    f.mangled,
                    if f.kernel { "kernel" } else { "function" },
                    f.degenerate,
                    block.start,
                    block.opcodes.len(),
                    succ.join(",")
                )?;
            }
        }
    }
    Ok(())
}
