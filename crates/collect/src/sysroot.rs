//! A foreign guest's sysroot: where QEMU finds a dynamically linked AArch64 or RISC-V
//! program's loader and libraries (`qemu -L`), found rather than assumed.

use std::path::{Path, PathBuf};

use object::read::elf::{FileHeader, ProgramHeader};

use crate::{CollectError, Isa};

/// The program's loader (`PT_INTERP`, e.g. `/lib/ld-linux-aarch64.so.1`); None when it is
/// linked statically or is not a 64-bit little-endian ELF file.
pub fn interpreter(path: &Path) -> Option<String> {
    let data = crate::elf::map(path)?;
    let elf = object::elf::FileHeader64::<object::LittleEndian>::parse(&*data).ok()?;
    let endian = elf.endian().ok()?;
    for ph in elf.program_headers(endian, &*data).ok()? {
        if ph.p_type(endian) == object::elf::PT_INTERP {
            let bytes = ph.data(endian, &*data).ok()?;
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            return Some(String::from_utf8_lossy(&bytes[..end]).into_owned());
        }
    }
    None
}

/// Debian's sysroot of an ISA and the package that fills it.
fn debian(isa: Isa) -> Option<(&'static str, &'static str, &'static str)> {
    match isa {
        Isa::Aarch64 => Some(("/usr/aarch64-linux-gnu", "libc6-arm64-cross", "AArch64")),
        Isa::Riscv64 => Some(("/usr/riscv64-linux-gnu", "libc6-riscv64-cross", "RISC-V")),
        Isa::X86_64 => None,
    }
}

/// The sysroot `program` (of `isa`) needs: None for a program of the host's ISA or a static
/// one; else `given` (`--sysroot`, or a run's recorded sysroot), `$QEMU_LD_PREFIX`, or
/// Debian's, the first there is, and it must hold the program's loader.
pub fn find(
    program: &Path,
    isa: Isa,
    given: Option<&Path>,
) -> Result<Option<PathBuf>, CollectError> {
    let Some((default, package, name)) = debian(isa) else {
        return Ok(None);
    };
    let Some(interp) = interpreter(program) else {
        return Ok(None);
    };
    let holds = |root: &Path| root.join(interp.trim_start_matches('/')).is_file();
    let env = std::env::var_os("QEMU_LD_PREFIX").filter(|v| !v.is_empty());
    let (root, source) = match (given, &env) {
        (Some(g), _) => (g.to_path_buf(), "--sysroot, or the run's"),
        (None, Some(e)) => (PathBuf::from(e), "QEMU_LD_PREFIX"),
        (None, None) if holds(Path::new(default)) => return Ok(Some(PathBuf::from(default))),
        (None, None) => {
            return Err(CollectError::Unsupported {
                what: format!(
                    "{} is a dynamically linked {name} program and its loader {interp} is not in {default}: install Debian's {package} (or set QEMU_LD_PREFIX to a {name} sysroot)",
                    program.display()
                ),
            })
        }
    };
    if holds(&root) {
        Ok(Some(root))
    } else {
        Err(CollectError::Unsupported {
            what: format!(
                "{} ({source}) has no {interp}, the loader of {}: not a sysroot for {name} (Debian's is {default}, from {package})",
                root.display(),
                program.display()
            ),
        })
    }
}
