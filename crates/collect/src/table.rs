//! The plugin's block table, symbolized.

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
    /// The containing function, or empty if unknown (stripped code).
    pub function: String,
}

/// Reads `DIR/blocks` and symbolizes each block.
pub(crate) fn read_blocks(path: &Path) -> Result<Vec<Block>, CollectError> {
    let mut text = std::fs::read_to_string(path).map_err(|e| CollectError::io(path, e))?;
    // A process killed while the plugin appended a line leaves it unfinished: drop it.
    let whole = text.rfind('\n').map_or(0, |i| i + 1);
    text.truncate(whole);
    // QEMU's maps list every mapped file (QEMU's own libraries, the plugin, its state files):
    // only the ones blocks come from are read.
    let mut paths: HashMap<u32, PathBuf> = HashMap::new();
    let mut modules: HashMap<u32, ModuleSymbols> = HashMap::new();
    let mut blocks = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let bad = |what| CollectError::BlockTable {
            path: path.into(),
            line: i + 1,
            what,
        };
        let mut f = line.splitn(3, ' ');
        match f.next() {
            Some("module") => {
                let idx = f
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad("module index"))?;
                let p = f.next().ok_or_else(|| bad("module path"))?;
                paths.insert(idx, PathBuf::from(p));
            }
            Some("block") => {
                let mut f = line.split(' ').skip(1);
                let id: u32 = f
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad("block id"))?;
                let module = f.next().ok_or_else(|| bad("module"))?;
                let hex = |s: Option<&str>| s.and_then(|s| u64::from_str_radix(s, 16).ok());
                let offset = hex(f.next()).ok_or_else(|| bad("file offset"))?;
                let vaddr = hex(f.next()).ok_or_else(|| bad("address"))?;
                let insns = f
                    .next()
                    .and_then(|s| s.parse().ok())
                    .ok_or_else(|| bad("instructions"))?;
                if id as usize != blocks.len() + 1 {
                    return Err(bad("ids in order"));
                }
                let (module, address, function) = if module == "-" {
                    (None, vaddr, String::new())
                } else {
                    let idx: u32 = module.parse().map_err(|_| bad("module index"))?;
                    let m = match modules.entry(idx) {
                        std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                        std::collections::hash_map::Entry::Vacant(e) => {
                            let p = paths.get(&idx).ok_or_else(|| bad("a known module"))?;
                            e.insert(ModuleSymbols::load(p))
                        }
                    };
                    let a = m.address(offset);
                    (
                        Some(m.path.clone()),
                        a,
                        m.function(a).unwrap_or("").to_string(),
                    )
                };
                blocks.push(Block {
                    id,
                    module,
                    address,
                    runtime_address: vaddr,
                    instructions: insns,
                    function,
                });
            }
            _ => return Err(bad("`module` or `block`")),
        }
    }
    Ok(blocks)
}

/// Writes exp-bbv's PC file: `F:id:hexaddr:function` per block, in id order. The address is the
/// link-time address within the block's file, so that it does not depend on load addresses.
pub fn write_pc(out: &mut impl Write, blocks: &[Block]) -> io::Result<()> {
    for b in blocks {
        writeln!(out, "F:{}:{:x}:{}", b.id, b.address, b.function)?;
    }
    Ok(())
}
