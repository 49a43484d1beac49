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

#[cfg(test)]
mod tests {
    use super::*;
    use bbv_plugin_contract::blocks::{write_block, write_module, write_size, BlockLine};

    fn line(id: u32, module: Option<u32>, offset: u64, address: u64) -> BlockLine {
        BlockLine {
            id,
            module,
            offset,
            address,
            instructions: 3,
            bytes: 9,
            rep: id == 2,
        }
    }

    /// A table as the plugin appends it (a module, a block in it, an anonymous block, a block
    /// translated again, a torn last line): each block symbolized against the real file, the
    /// image's bias from link-time to run-time addresses.
    #[test]
    fn the_plugin_table_is_read_and_symbolized() {
        let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("blocks");
        let mut s = String::new();
        write_module(&mut s, 4, exe.to_str().unwrap());
        write_block(&mut s, &line(1, Some(4), 0x2000, 0x5555_0000_2000));
        write_block(&mut s, &line(2, None, 0x7000, 0x7000));
        write_size(&mut s, 1, 4, 12);
        s.push_str("block 3 4 20"); // torn: the guest died mid-line
        std::fs::write(&path, &s).unwrap();
        let (blocks, images) = read_blocks(&path).unwrap();
        assert_eq!(blocks.len(), 2);
        let (a, b) = (&blocks[0], &blocks[1]);
        assert_eq!(a.module.as_deref(), Some(exe.as_path()));
        assert_eq!((a.image, a.varies, a.rep), (Some(0), true, false));
        assert_eq!(a.runtime_address, 0x5555_0000_2000);
        assert_eq!(images.len(), 1);
        assert_eq!(images[0].path, exe);
        assert_eq!(images[0].bias, a.runtime_address.wrapping_sub(a.address));
        assert_eq!(
            (b.module.as_ref(), b.image, b.address),
            (None, None, 0x7000)
        );
        assert!(b.rep && !b.varies && b.function.is_empty());
    }

    /// Each fault names its line and what was expected there.
    #[test]
    fn a_bad_table_names_its_line() {
        let t = tempfile::tempdir().unwrap();
        let path = t.path().join("blocks");
        let cases: [(&str, usize, &str); 4] = [
            ("block 2 - 0 0 1 1 -\n", 1, "ids in order"),
            ("block 1 7 0 0 1 1 -\n", 1, "a known module"),
            ("block 1 - 0 0 1 1 -\nsize 5 1 1\n", 2, "a known block"),
            ("module 0 /x\nnonsense\n", 2, ""),
        ];
        for (text, want_line, want) in cases {
            std::fs::write(&path, text).unwrap();
            match read_blocks(&path) {
                Err(CollectError::BlockTable { line, what, .. }) => {
                    assert_eq!(line, want_line, "{text:?}");
                    assert!(what.contains(want), "{text:?}: {what}");
                }
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }
}
