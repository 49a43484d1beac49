//! The block table ([`crate::files::BLOCKS`]): the plugin appends a line per module it first
//! sees a block in, per block as it is first translated, and per later translation of a block
//! with another length; the host reads the lines back.
//!
//! ```text
//! module INDEX PATH
//! block ID MODULE|- OFFSET(hex) ADDRESS(hex) INSTRUCTIONS BYTES r|-
//! size ID INSTRUCTIONS BYTES
//! ```

use std::fmt::Write as _;
use std::path::PathBuf;

/// A block's first translation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BlockLine {
    /// Its id (1, 2, ... in the order of the lines).
    pub id: u32,
    /// The module (index of a `module` line) it was mapped from; None for anonymous code.
    pub module: Option<u32>,
    /// Its offset in the module's file (its address when anonymous).
    pub offset: u64,
    /// Its address in this run.
    pub address: u64,
    /// Static instructions.
    pub instructions: u64,
    /// Bytes of machine code.
    pub bytes: u64,
    /// It starts with a rep string instruction.
    pub rep: bool,
}

/// One line of the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// A mapped file, by QEMU's maps index.
    Module {
        /// The index blocks name it by.
        index: u32,
        /// The file.
        path: PathBuf,
    },
    /// A block's first translation.
    Block(BlockLine),
    /// A block translated again with another length.
    Size {
        /// The block's id.
        id: usize,
    },
}

/// Appends a `module` line.
pub fn write_module(out: &mut String, index: usize, path: &str) {
    let _ = writeln!(out, "module {index} {path}");
}

/// Appends a `block` line.
pub fn write_block(out: &mut String, b: &BlockLine) {
    let _ = write!(out, "block {} ", b.id);
    match b.module {
        Some(m) => {
            let _ = write!(out, "{m}");
        }
        None => out.push('-'),
    }
    let _ = writeln!(
        out,
        " {:x} {:x} {} {} {}",
        b.offset,
        b.address,
        b.instructions,
        b.bytes,
        if b.rep { 'r' } else { '-' }
    );
}

/// Appends a `size` line.
pub fn write_size(out: &mut String, id: u32, instructions: u64, bytes: u64) {
    let _ = writeln!(out, "size {id} {instructions} {bytes}");
}

fn num<T: std::str::FromStr>(s: Option<&str>, what: &'static str) -> Result<T, &'static str> {
    s.and_then(|s| s.parse().ok()).ok_or(what)
}

fn hex(s: Option<&str>, what: &'static str) -> Result<u64, &'static str> {
    s.and_then(|s| u64::from_str_radix(s, 16).ok()).ok_or(what)
}

/// Parses a line; the error names what was expected.
pub fn parse_line(line: &str) -> Result<Entry, &'static str> {
    let mut f = line.split(' ');
    match f.next() {
        Some("module") => {
            let mut f = line.splitn(3, ' ').skip(1);
            let index = num(f.next(), "module index")?;
            let path = f.next().ok_or("module path")?;
            Ok(Entry::Module {
                index,
                path: PathBuf::from(path),
            })
        }
        Some("block") => {
            let id = num(f.next(), "block id")?;
            let module = match f.next().ok_or("module")? {
                "-" => None,
                m => Some(m.parse().map_err(|_| "module index")?),
            };
            Ok(Entry::Block(BlockLine {
                id,
                module,
                offset: hex(f.next(), "file offset")?,
                address: hex(f.next(), "address")?,
                instructions: num(f.next(), "instructions")?,
                bytes: num(f.next(), "bytes")?,
                rep: match f.next() {
                    Some("r") => true,
                    Some("-") => false,
                    _ => return Err("a rep flag"),
                },
            }))
        }
        Some("size") => Ok(Entry::Size {
            id: num(f.next(), "block id")?,
        }),
        _ => Err("`module`, `block` or `size`"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_go_there_and_back() {
        let b = BlockLine {
            id: 7,
            module: Some(3),
            offset: 0x4a0,
            address: 0x7f00_0000_04a0,
            instructions: 5,
            bytes: 17,
            rep: true,
        };
        let mut out = String::new();
        write_module(&mut out, 3, "/usr/bin/gzip with space");
        write_block(&mut out, &b);
        write_block(
            &mut out,
            &BlockLine {
                module: None,
                rep: false,
                ..b.clone()
            },
        );
        write_size(&mut out, 7, 6, 19);
        let got: Vec<Entry> = out.lines().map(|l| parse_line(l).unwrap()).collect();
        assert_eq!(
            got,
            [
                Entry::Module {
                    index: 3,
                    path: PathBuf::from("/usr/bin/gzip with space")
                },
                Entry::Block(b.clone()),
                Entry::Block(BlockLine {
                    module: None,
                    rep: false,
                    ..b
                }),
                Entry::Size { id: 7 },
            ]
        );
        assert_eq!(parse_line("block 1 - 10 zz 1 2 -"), Err("address"));
        assert_eq!(parse_line("block 1 x 10 10 1 2 -"), Err("module index"));
        assert_eq!(parse_line("block 1 - 10 10 1 2 q"), Err("a rep flag"));
        assert_eq!(parse_line("blocks"), Err("`module`, `block` or `size`"));
    }
}
