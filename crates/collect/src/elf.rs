//! Guest ISA from the ELF header, and symbols of mapped files.

use std::path::{Path, PathBuf};

use object::{Object, ObjectSegment, ObjectSymbol, SymbolKind};

use crate::CollectError;

pub use bbv_plugin_contract::Isa;

/// Reads the ELF header of `path` and returns its ISA.
pub fn isa_of_elf(path: &Path) -> Result<Isa, CollectError> {
    use std::io::Read;
    let mut head = [0u8; 20];
    let mut f = std::fs::File::open(path).map_err(|e| CollectError::io(path, e))?;
    let n = f.read(&mut head).map_err(|e| CollectError::io(path, e))?;
    if n < 20 || &head[..4] != b"\x7fELF" {
        let hint = if head.starts_with(b"#!") {
            " (it is a script: run its interpreter, e.g. `bbv collect -- python3 SCRIPT`)"
                .to_string()
        } else {
            String::new()
        };
        return Err(CollectError::NotElf {
            path: path.into(),
            hint,
        });
    }
    let little = head[5] == 1;
    let machine = if little {
        u16::from_le_bytes([head[18], head[19]])
    } else {
        u16::from_be_bytes([head[18], head[19]])
    };
    let class64 = head[4] == 2;
    match (machine, class64) {
        (62, true) => Ok(Isa::X86_64),
        (183, true) => Ok(Isa::Aarch64),
        (243, true) => Ok(Isa::Riscv64),
        _ => {
            let name = match machine {
                3 => "i386",
                40 => "ARM (32-bit)",
                8 => "MIPS",
                20 => "PowerPC",
                21 => "PowerPC64",
                22 => "s390",
                243 => "RISC-V 32-bit",
                62 => "x86-64 (32-bit class)",
                _ => "",
            };
            let what = if name.is_empty() {
                format!("ELF machine {machine}")
            } else {
                name.to_string()
            };
            Err(CollectError::UnsupportedIsa {
                path: path.into(),
                what,
            })
        }
    }
}

/// What an ELF file's headers say: how it is linked, its build id, entry point and segments.
/// Read once per file (`bbv replay` needs all of it for every marker image).
#[derive(Clone, Debug, Default)]
pub struct ElfFacts {
    /// An executable linked at a fixed address (ELF type EXEC), not position-independent.
    pub fixed: bool,
    /// The GNU build id, in hex, if the file has one.
    pub build_id: Option<String>,
    /// The link-time entry address.
    pub entry: u64,
    /// (file offset, size, virtual address) of each loadable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl ElfFacts {
    /// Reads `path`; None if it cannot be read or is not an object file.
    pub fn read(path: &Path) -> Option<ElfFacts> {
        let data = map(path)?;
        Some(ElfFacts::of(&object::File::parse(&*data).ok()?))
    }

    fn of(file: &object::File) -> ElfFacts {
        ElfFacts {
            fixed: file.kind() == object::ObjectKind::Executable,
            build_id: hex_build_id(file),
            entry: file.entry(),
            segments: file
                .segments()
                .map(|seg| (seg.file_range(), seg.address()))
                .filter(|&((_, size), _)| size > 0)
                .map(|((off, size), a)| (off, size, a))
                .collect(),
        }
    }

    /// The link-time address of a file offset (the offset itself if no segment covers it).
    pub fn address(&self, offset: u64) -> u64 {
        self.segments
            .iter()
            .find(|&&(o, s, _)| offset >= o && offset < o + s)
            .map_or(offset, |&(o, _, a)| offset - o + a)
    }

    /// The file offset of link-time address `addr` (the inverse of [`Self::address`]).
    pub fn file_offset(&self, addr: u64) -> Option<u64> {
        self.segments
            .iter()
            .find(|&&(_, s, a)| addr >= a && addr < a + s)
            .map(|&(o, _, a)| addr - a + o)
    }
}

fn hex_build_id(file: &object::File) -> Option<String> {
    let id = file.build_id().ok()??;
    Some(id.iter().map(|b| format!("{b:02x}")).collect())
}

/// Function symbols of one file and its file-offset to address mapping.
pub struct ModuleSymbols {
    /// The file.
    pub path: PathBuf,
    /// Its headers.
    pub facts: ElfFacts,
    /// (address, size, name), sorted by address.
    functions: Vec<(u64, u64, String)>,
}

impl ModuleSymbols {
    /// Reads `path`; a file that cannot be read or parsed gives a module without symbols (the
    /// guest may have deleted it, or mapped something that is not an ELF).
    pub fn load(path: &Path) -> ModuleSymbols {
        let mut m = ModuleSymbols {
            path: path.into(),
            facts: ElfFacts::default(),
            functions: Vec::new(),
        };
        let Some(data) = map(path) else {
            return m;
        };
        let Ok(file) = object::File::parse(&*data) else {
            return m;
        };
        m.facts = ElfFacts::of(&file);
        let debug = m.facts.build_id.as_deref().and_then(detached_debug);
        let debug_file = debug.as_deref().and_then(|d| object::File::parse(d).ok());
        let extra = debug_file.iter().flat_map(|f| f.symbols());
        for sym in file.symbols().chain(file.dynamic_symbols()).chain(extra) {
            // Assembly labels without a .type directive are NOTYPE symbols.
            let code = match sym.kind() {
                SymbolKind::Text => true,
                SymbolKind::Unknown => sym.section_index().is_some() && sym.is_definition(),
                _ => false,
            };
            if !code || sym.address() == 0 {
                continue;
            }
            if let Ok(name) = sym.name() {
                // `$x`/`$d` are ARM mapping symbols, not functions.
                if !name.is_empty() && !name.starts_with('$') {
                    m.functions
                        .push((sym.address(), sym.size(), demangle(name)));
                }
            }
        }
        // Keep one name per address (the symbol table's own, before the dynamic table's).
        m.functions.sort_by_key(|f| f.0);
        m.functions.dedup_by_key(|f| f.0);
        m
    }

    /// The link-time address of a file offset (the offset itself if no segment covers it).
    pub fn address(&self, offset: u64) -> u64 {
        self.facts.address(offset)
    }

    /// The function containing `addr`, if the symbol tables say.
    pub fn function(&self, addr: u64) -> Option<&str> {
        let i = self
            .functions
            .partition_point(|f| f.0 <= addr)
            .checked_sub(1)?;
        let (start, size, name) = &self.functions[i];
        (*size == 0 || addr < start + size).then_some(name.as_str())
    }
}

/// Distributions strip binaries and ship their symbol tables and DWARF apart, found by build
/// id (Debian's *-dbgsym / libc6-dbg under /usr/lib/debug/.build-id); same addresses.
fn detached_debug(build_id: &str) -> Option<memmap2::Mmap> {
    if build_id.len() < 4 {
        return None;
    }
    map(Path::new(&format!(
        "/usr/lib/debug/.build-id/{}/{}.debug",
        &build_id[..2],
        &build_id[2..]
    )))
}

/// `path` mapped read-only: symbolizing reads a few parts of files of megabytes (a C library's
/// detached debug file is 4 MB), and reading them whole cost a copy and fresh pages each run.
pub(crate) fn map(path: &Path) -> Option<memmap2::Mmap> {
    let f = std::fs::File::open(path).ok()?;
    // SAFETY: the mapping is private and read-only; the files are the guest's binaries and
    // their debug files, which nothing here writes (a file truncated meanwhile would fault,
    // as reading a changing binary is undefined for any tool).
    unsafe { memmap2::Mmap::map(&f) }.ok()
}

/// `file:line` of each link-time address of `path`, from its DWARF line tables (or its
/// detached debug file's); None where there is no line information.
pub fn source_lines(path: &Path, addrs: &[u64]) -> Vec<Option<String>> {
    let none = || vec![None; addrs.len()];
    let Some(data) = map(path) else {
        return none();
    };
    let Ok(file) = object::File::parse(&*data) else {
        return none();
    };
    let id = hex_build_id(&file);
    let has_lines = |f: &object::File| f.section_by_name(".debug_line").is_some();
    if has_lines(&file) {
        return lines_from(&file, addrs).unwrap_or_else(none);
    }
    let Some(debug) = id.as_deref().and_then(detached_debug) else {
        return none();
    };
    match object::File::parse(&*debug) {
        Ok(f) if has_lines(&f) => lines_from(&f, addrs).unwrap_or_else(none),
        _ => none(),
    }
}

fn lines_from(file: &object::File, addrs: &[u64]) -> Option<Vec<Option<String>>> {
    use object::ObjectSection;
    use std::borrow::Cow;
    let endian = if file.is_little_endian() {
        gimli::RunTimeEndian::Little
    } else {
        gimli::RunTimeEndian::Big
    };
    let load = |id: gimli::SectionId| -> Result<Cow<[u8]>, gimli::Error> {
        Ok(file
            .section_by_name(id.name())
            .and_then(|s| s.uncompressed_data().ok())
            .unwrap_or(Cow::Borrowed(&[])))
    };
    let owned = gimli::DwarfSections::load(load).ok()?;
    let dwarf = owned.borrow(|s| gimli::EndianSlice::new(s, endian));
    let ctx = addr2line::Context::from_dwarf(dwarf).ok()?;
    Some(
        addrs
            .iter()
            .map(|&a| {
                let loc = ctx.find_location(a).ok()??;
                let file = loc.file?;
                let short = file.rsplit('/').next().unwrap_or(file);
                Some(match loc.line {
                    Some(l) => format!("{short}:{l}"),
                    None => short.to_string(),
                })
            })
            .collect(),
    )
}

fn demangle(name: &str) -> String {
    if name.starts_with("_Z") {
        if let Ok(sym) = cpp_demangle::Symbol::new(name) {
            if let Ok(text) = sym.demangle(&cpp_demangle::DemangleOptions::default()) {
                return text;
            }
        }
    }
    name.to_string()
}

/// Resolves a program name as a shell would: a name with a slash is a path, others are looked
/// up on PATH.
pub fn resolve_program(name: &str) -> Result<PathBuf, CollectError> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return if p.is_file() {
            Ok(p)
        } else if p.is_dir() {
            Err(CollectError::Unsupported {
                what: format!("{name}: a folder, not a program"),
            })
        } else {
            Err(CollectError::ProgramNotFound { name: name.into() })
        };
    }
    find_on_path(name).ok_or_else(|| CollectError::ProgramNotFound { name: name.into() })
}

/// The first executable file called `name` in a PATH directory.
pub fn find_on_path(name: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// QEMU's version, from `QEMU --version` (`qemu-x86_64 version 7.2.22 (...)`).
pub fn qemu_version(qemu: &Path) -> Option<String> {
    let out = std::process::Command::new(qemu)
        .arg("--version")
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let rest = text.split(" version ").nth(1)?;
    Some(rest.split_whitespace().next()?.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program is a file: a folder or a name found nowhere is refused, each said so.
    #[test]
    fn a_program_is_a_file() {
        let dir = std::env::temp_dir();
        let e = resolve_program(&format!("{}/", dir.display())).unwrap_err();
        assert!(e.to_string().contains("a folder, not a program"), "{e}");
        let e = resolve_program("./no-such-program-here").unwrap_err();
        assert!(e.to_string().contains("no such program"), "{e}");
        assert!(resolve_program("/bin/sh").is_ok());
    }

    /// The guest's ISA from its ELF header: this test (x86-64), the cross C libraries the
    /// AArch64 and RISC-V tests link against, and what is no ELF or no machine of ours.
    #[test]
    fn the_isa_comes_from_the_elf_header() {
        let me = std::env::current_exe().unwrap();
        assert_eq!(isa_of_elf(&me).unwrap(), Isa::X86_64);
        for (lib, isa) in [
            ("/usr/aarch64-linux-gnu/lib/libc.so.6", Isa::Aarch64),
            ("/usr/riscv64-linux-gnu/lib/libc.so.6", Isa::Riscv64),
        ] {
            let lib = Path::new(lib);
            assert!(
                lib.exists(),
                "{}: scripts/apt-packages.txt installs it",
                lib.display()
            );
            assert_eq!(isa_of_elf(lib).unwrap(), isa, "{}", lib.display());
        }
        let t = tempfile::tempdir().unwrap();
        let script = t.path().join("run.sh");
        std::fs::write(&script, "#!/bin/sh\necho hi\n").unwrap();
        match isa_of_elf(&script) {
            Err(CollectError::NotElf { hint, .. }) => assert!(hint.contains("script"), "{hint}"),
            other => panic!("{other:?}"),
        }
        // An ELF of a machine bbv does not collect from: this binary's header, as i386, and
        // RISC-V of the 32-bit class.
        let mut bytes = std::fs::read(&me).unwrap();
        for (machine, class, name) in [(3u16, 2u8, "i386"), (243, 1, "RISC-V 32-bit")] {
            bytes[18..20].copy_from_slice(&machine.to_le_bytes());
            bytes[4] = class;
            let other = t.path().join(name);
            std::fs::write(&other, &bytes).unwrap();
            match isa_of_elf(&other) {
                Err(CollectError::UnsupportedIsa { what, .. }) => assert_eq!(what, name),
                other => panic!("{name}: {other:?}"),
            }
        }
    }
}
