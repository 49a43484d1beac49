//! The plugin's block table, symbolized.

use bbv_plugin_contract::blocks::{self, Entry};
use std::collections::HashMap;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::{CollectError, ModuleSymbols};

/// One block, as the PC file and reports see it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Block {
    /// 1-based id, as in the vector files.
    pub id: u32,
    /// The file the block's code was mapped from (None: anonymous memory, e.g. JIT code).
    pub module: Option<PathBuf>,
    /// Link-time address in that file (the guest address for anonymous code), so that it does
    /// not depend on where the file was loaded.
    pub address: u64,
    /// Guest address at run time.
    pub runtime_address: u64,
    /// Instructions in the block when first translated.
    pub instructions: u64,
    /// Bytes those instructions span (a block covering another block's first instruction
    /// runs that instruction too).
    pub bytes: u64,
    /// The block starts with a rep string instruction (never a marker).
    pub rep: bool,
    /// QEMU translated the block with different lengths: its executions cannot be read off
    /// its instruction counts.
    pub varies: bool,
    /// Index of its image in [`crate::Collected::images`] (None: anonymous memory).
    pub image: Option<usize>,
    /// The containing function, or empty if unknown (stripped code).
    pub function: String,
}

/// A file the guest ran code from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Its path when the guest mapped it.
    pub path: PathBuf,
    /// An executable linked at a fixed address (not position-independent).
    pub fixed: bool,
    /// GNU build id (hex).
    pub build_id: Option<String>,
    /// Run-time address minus link-time address.
    pub bias: u64,
}

impl Image {
    /// The file name markers use.
    pub fn name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Reads `DIR/blocks` and symbolizes each block.
pub(crate) fn read_blocks(path: &Path) -> Result<(Vec<Block>, Vec<Image>), CollectError> {
    let text = bbv_plugin_contract::read_appended(path).map_err(|e| CollectError::io(path, e))?;
    // QEMU's maps list every mapped file (QEMU's own libraries, the plugin, its state files):
    // only the ones blocks come from are read.
    let mut paths: HashMap<u32, PathBuf> = HashMap::new();
    let mut modules: HashMap<u32, (ModuleSymbols, usize)> = HashMap::new();
    let mut images: Vec<Image> = Vec::new();
    let mut out: Vec<Block> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |what| CollectError::BlockTable {
            path: path.into(),
            line: i + 1,
            what,
        };
        match blocks::parse_line(line).map_err(bad)? {
            Entry::Module { index, path } => {
                paths.insert(index, path);
            }
            Entry::Block(b) => {
                if b.id as usize != out.len() + 1 {
                    return Err(bad("ids in order"));
                }
                let (module, address, function, image) = match b.module {
                    None => (None, b.address, String::new(), None),
                    Some(idx) => {
                        let (m, image) = match modules.entry(idx) {
                            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                            std::collections::hash_map::Entry::Vacant(e) => {
                                let p = paths.get(&idx).ok_or_else(|| bad("a known module"))?;
                                let m = ModuleSymbols::load(p);
                                let a = m.address(b.offset);
                                images.push(Image {
                                    path: m.path.clone(),
                                    fixed: m.facts.fixed,
                                    build_id: m.facts.build_id.clone(),
                                    bias: b.address.wrapping_sub(a),
                                });
                                e.insert((m, images.len() - 1))
                            }
                        };
                        let a = m.address(b.offset);
                        let function = m.function(a).unwrap_or("").to_string();
                        (Some(m.path.clone()), a, function, Some(*image))
                    }
                };
                out.push(Block {
                    id: b.id,
                    module,
                    address,
                    runtime_address: b.address,
                    instructions: b.instructions,
                    bytes: b.bytes,
                    rep: b.rep,
                    varies: false,
                    image,
                    function,
                });
            }
            Entry::Size { id } => {
                let b = (id.checked_sub(1))
                    .and_then(|i| out.get_mut(i))
                    .ok_or_else(|| bad("a known block"))?;
                b.varies = true;
            }
        }
    }
    Ok((out, images))
}

/// Writes `blocks.tsv`: a header, then per block id its image (file name; `-` for anonymous
/// code), link-time offset in it, static instructions, function, `file:line` (or `-`), byte
/// span and kind (`-`, `rep`: starts with a rep string instruction, `varies`: translated with
/// several lengths).
pub fn write_blocks_tsv(
    out: &mut impl Write,
    blocks: &[Block],
    images: &[Image],
) -> io::Result<()> {
    // Line tables are read once per image, for that image's blocks.
    let mut sources: Vec<Option<String>> = vec![None; blocks.len()];
    for (i, image) in images.iter().enumerate() {
        let mine: Vec<usize> = (0..blocks.len())
            .filter(|&b| blocks[b].image == Some(i))
            .collect();
        let addrs: Vec<u64> = mine.iter().map(|&b| blocks[b].address).collect();
        for (b, src) in mine
            .into_iter()
            .zip(crate::elf::source_lines(&image.path, &addrs))
        {
            sources[b] = src;
        }
    }
    writeln!(
        out,
        "id\timage\toffset\tinstructions\tfunction\tsource\tbytes\tkind"
    )?;
    for (b, src) in blocks.iter().zip(sources) {
        let image = match b.image {
            Some(i) => images[i].name(),
            None => "-".into(),
        };
        let function = if b.function.is_empty() {
            "-"
        } else {
            &b.function
        };
        let kind = if b.rep {
            "rep"
        } else if b.varies {
            "varies"
        } else {
            "-"
        };
        writeln!(
            out,
            "{}\t{}\t{:#x}\t{}\t{}\t{}\t{}\t{}",
            b.id,
            clean(&image),
            b.address,
            b.instructions,
            clean(function),
            src.as_deref().map_or("-".into(), clean),
            b.bytes,
            kind
        )?;
    }
    Ok(())
}

/// Tabs and line breaks would break the table's columns.
fn clean(s: &str) -> String {
    s.replace(['\t', '\n', '\r'], " ")
}

/// Writes exp-bbv's PC file: `F:id:hexaddr:function` per block, in id order. The address is the
/// link-time address within the block's file, so that it does not depend on load addresses.
pub fn write_pc(out: &mut impl Write, blocks: &[Block]) -> io::Result<()> {
    for b in blocks {
        writeln!(out, "F:{}:{:x}:{}", b.id, b.address, b.function)?;
    }
    Ok(())
}
