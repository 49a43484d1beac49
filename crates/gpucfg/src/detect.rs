//! What an input file is, from its first bytes and (for ELF) its header and sections.

use std::io::Read;
use std::path::Path;

use object::read::elf::ElfFile64;
use object::{Object, ObjectSection};

use crate::CfgError;

/// The kinds of input `bbv gpu cfg` reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// An NVIDIA cubin (ELF, machine EM_CUDA).
    Cubin,
    /// An NVIDIA fat binary (`nvcc -fatbin`).
    FatBinary,
    /// A host executable, shared library or object with embedded CUDA device code.
    HostElf,
    /// An AMDGPU code object or relocatable object (ELF, machine EM_AMDGPU).
    AmdGpu,
}

impl Kind {
    /// The name used in outputs.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Cubin => "cubin",
            Kind::FatBinary => "fatbin",
            Kind::HostElf => "host-elf",
            Kind::AmdGpu => "amdgpu",
        }
    }
}

const FATBIN_MAGIC: [u8; 4] = 0xBA55_ED50u32.to_le_bytes();
const ELF_MAGIC: &[u8; 4] = b"\x7fELF";
const EM_CUDA: u16 = 190;
const EM_AMDGPU: u16 = 224;
/// Executables and libraries worth reading are far below this; a larger file is refused
/// rather than mapped whole (the tools read it again anyway).
const MAX_BYTES: u64 = 4 << 30;

fn bad(path: &Path, message: impl Into<String>) -> CfgError {
    CfgError::Input {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

/// The kind of `path`, or a clear refusal.
pub fn kind(path: &Path) -> Result<Kind, CfgError> {
    let mut file = bbv_files::input::open(path)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    if len > MAX_BYTES {
        return Err(bad(
            path,
            format!("{len} bytes: larger than any GPU binary bbv reads"),
        ));
    }
    let mut head = [0u8; 4];
    let got = file.read(&mut head).map_err(|e| bad(path, e.to_string()))?;
    if got == 4 && head == FATBIN_MAGIC {
        return Ok(Kind::FatBinary);
    }
    if got < 4 || &head != ELF_MAGIC {
        return Err(bad(
            path,
            "not an ELF file or a CUDA fat binary (a cubin, fatbin, executable, library, \
             AMDGPU code object or object file is expected)",
        ));
    }
    // SAFETY: a read-only map of a file nothing here writes; object checks every offset it
    // reads against the map's length.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| bad(path, e.to_string()))?;
    let elf = ElfFile64::<object::Endianness>::parse(&*map)
        .map_err(|e| bad(path, format!("not a 64-bit ELF file bbv can read: {e}")))?;
    // The header's fields read directly: every GPU ELF is little-endian 64-bit.
    let machine = u16::from_le_bytes([map[18], map[19]]);
    match machine {
        EM_CUDA => Ok(Kind::Cubin),
        EM_AMDGPU => Ok(Kind::AmdGpu),
        _ if elf
            .sections()
            .any(|s| matches!(s.name(), Ok(".nv_fatbin" | "__nv_relfatbin"))) =>
        {
            Ok(Kind::HostElf)
        }
        _ => Err(bad(
            path,
            format!("an ELF file for machine {machine} without CUDA device code (no .nv_fatbin section) and not AMDGPU code"),
        )),
    }
}
