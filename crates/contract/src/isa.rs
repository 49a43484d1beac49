//! The guest instruction sets bbv runs: the host tells them from a program's ELF header
//! (bbv-collect), the plugin from QEMU's target name, and the tracer decodes each
//! (bbv-champsim).

/// A guest instruction set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// x86-64 (`qemu-x86_64`).
    X86_64,
    /// AArch64, A64 (`qemu-aarch64`).
    Aarch64,
    /// RISC-V 64, RV64GC (`qemu-riscv64`).
    Riscv64,
}

impl Isa {
    /// The QEMU user-mode executable for this ISA.
    pub fn qemu_name(self) -> &'static str {
        match self {
            Isa::X86_64 => "qemu-x86_64",
            Isa::Aarch64 => "qemu-aarch64",
            Isa::Riscv64 => "qemu-riscv64",
        }
    }

    /// The ISA of QEMU's target name (`x86_64-linux-user`, `aarch64`, `riscv64`, ...).
    pub fn of_target(target: &str) -> Option<Isa> {
        [Isa::X86_64, Isa::Aarch64, Isa::Riscv64]
            .into_iter()
            .find(|isa| target.starts_with(&isa.qemu_name()["qemu-".len()..]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn target_names() {
        assert_eq!(Isa::of_target("x86_64-linux-user"), Some(Isa::X86_64));
        assert_eq!(Isa::of_target("aarch64"), Some(Isa::Aarch64));
        assert_eq!(Isa::of_target("riscv64-linux-user"), Some(Isa::Riscv64));
        assert_eq!(Isa::of_target("i386"), None);
        assert_eq!(Isa::of_target("riscv32"), None);
    }
}
