//! The restorer: machine code that rebuilds the captured process and jumps into it, and the
//! handlers that stop it at the region's end. Straight-line code per mapping and descriptor
//! (a table-driven loop would be shorter, but this is read once and runs once).

use bbv_plugin_contract::checkpoint::SigAction;
use bbv_plugin_contract::sysno::x86_64;

/// A file's bytes the checkpoint carries: (path, start, length).
pub(crate) type Blob = (std::path::PathBuf, u64, u64);

/// A mapping to make: [start, start + len) with mmap's protections.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Area {
    pub start: u64,
    pub len: u64,
    pub prot: u32,
}

/// Kept pages in the checkpoint's file.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Run {
    pub addr: u64,
    pub offset: u64,
    pub len: u64,
    /// Mapped from the file (code: QEMU's plugin names it by the file and offset, which
    /// `--check` needs) rather than read into the anonymous mapping (data: a mapping made of
    /// one piece, as the program's was, so that mremap can move it).
    pub mapped: bool,
}

/// What the restorer does with one descriptor.
#[derive(Clone, Debug)]
pub(crate) enum FdOp {
    /// A memfd holding `blob`'s bytes, at `offset`; reopened read-only when the descriptor
    /// was (`read_only`), so that its flags read as they did.
    Content {
        fd: i32,
        blob: Blob,
        offset: u64,
        read_only: bool,
    },
    /// open(path, flags), then lseek to `offset`.
    Open {
        fd: i32,
        path: std::path::PathBuf,
        flags: u32,
        offset: Option<u64>,
    },
    /// Closed at the capture.
    Close { fd: i32 },
    /// A pipe with both ends in the process: a new, empty one at both numbers, each end with
    /// its O_NONBLOCK as it was.
    Pipe { read: (i32, u32), write: (i32, u32) },
}

/// The registers the jump restores.
pub(crate) struct Regs {
    /// rax, rbx, rcx, rdx, rsi, rdi, rbp, rsp, r8-r15.
    pub gpr: [u64; 16],
    pub rip: u64,
    pub fs_base: u64,
    pub gs_base: u64,
    /// An FXSAVE area.
    pub fx: [u8; 512],
}

/// Everything the restorer restores.
pub(crate) struct Restore {
    pub areas: Vec<Area>,
    /// The kept pages, already in the checkpoint's file, each within one mapping.
    pub runs: Vec<Run>,
    pub fds: Vec<FdOp>,
    pub cwd: String,
    pub sigactions: Vec<SigAction>,
    pub sigmask: u64,
    pub regs: Regs,
    pub end_pc: u64,
    pub end_count: u64,
    /// The end instruction's bytes (at least 15, or to the end of its mapping).
    pub end_code: Vec<u8>,
    /// The program break, and where its heap starts.
    pub brk: u64,
    pub heap_start: u64,
    pub cpu_seconds: u64,
}

/// Where the restorer finds things in its own file: the file offset of every blob (after the
/// kept pages and the restorer's segment), in the order [`Restore::blobs`] lists them.
pub(crate) struct Layout {
    pub base: u64,
    pub blob_offsets: Vec<u64>,
    /// The page near the end instruction that holds its moved copy, and the copy.
    pub slot: u64,
    pub moved: Vec<u8>,
}

impl Restore {
    /// The descriptors' bytes the checkpoint carries, in file order.
    pub fn blobs(&self) -> Vec<&Blob> {
        (self.fds.iter())
            .filter_map(|op| match op {
                FdOp::Content { blob, .. } => Some(blob),
                _ => None,
            })
            .collect()
    }
}

/// exit_group, which the seccomp filter watches.
pub(crate) const SYS_EXIT_GROUP: i32 = x86_64::EXIT_GROUP as i32;
/// exit, which it watches too.
const SYS_EXIT: i32 = x86_64::EXIT as i32;

/// The seccomp filter: brk traps (SIGSYS; the handler keeps the captured heap's break, which
/// the kernel's, placed after the checkpoint's own segment, cannot), and so do exit and
/// exit_group unless made from [lo, hi) (the restorer's own code), so that a program ending
/// before its region's end is told apart.
pub(crate) fn filter(lo: u64, hi: u64) -> Vec<u8> {
    let ins = |code: u16, jt: u8, jf: u8, k: u32| {
        let mut v = code.to_le_bytes().to_vec();
        v.extend([jt, jf]);
        v.extend(k.to_le_bytes());
        v
    };
    let (ld, jeq, jge, ret) = (0x20, 0x15, 0x35, 0x06);
    [
        ins(ld, 0, 0, 4),
        ins(jeq, 0, 10, 0xc000_003e),
        ins(ld, 0, 0, 0),
        ins(jeq, 7, 0, SYS_BRK as u32),
        ins(jeq, 1, 0, SYS_EXIT_GROUP as u32),
        ins(jeq, 0, 6, SYS_EXIT as u32),
        ins(ld, 0, 0, 12),
        ins(jeq, 0, 3, (lo >> 32) as u32),
        ins(ld, 0, 0, 8),
        ins(jge, 0, 1, lo as u32),
        ins(jge, 0, 1, hi as u32),
        ins(ret, 0, 0, 0x0003_0000),
        ins(ret, 0, 0, 0x7fff_0000),
    ]
    .concat()
}

/// Instructions in [`filter`].
pub(crate) const FILTER_LEN: u64 = 13;
/// brk, which the filter traps.
pub(crate) const SYS_BRK: i32 = x86_64::BRK as i32;

#[cfg(test)]
mod tests {
    use super::*;

    /// What the kernel's classic BPF does with `prog` for a call `nr` made from `ip` on `arch`
    /// (`struct seccomp_data`: nr at 0, arch at 4, instruction pointer at 8): the return value.
    /// Only the instructions the filter uses (load word absolute, jeq/jge with a constant, ret).
    fn run(prog: &[u8], nr: u32, arch: u32, ip: u64) -> u32 {
        let data = |off: u32| match off {
            0 => nr,
            4 => arch,
            8 => ip as u32,
            12 => (ip >> 32) as u32,
            _ => panic!("load at {off}"),
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = &prog[pc * 8..pc * 8 + 8];
            let code = u16::from_le_bytes([i[0], i[1]]);
            let (jt, jf) = (i[2] as usize, i[3] as usize);
            let k = u32::from_le_bytes([i[4], i[5], i[6], i[7]]);
            pc += 1;
            match code {
                0x20 => acc = data(k),
                0x15 => pc += if acc == k { jt } else { jf },
                0x35 => pc += if acc >= k { jt } else { jf },
                0x06 => return k,
                _ => panic!("opcode {code:#x}"),
            }
        }
    }

    const X86_64: u32 = 0xc000_003e;
    const ALLOW: u32 = 0x7fff_0000;
    const TRAP: u32 = 0x0003_0000;

    /// brk always traps; exit and exit_group trap unless made from the restorer's own code;
    /// every other call, and any call of another architecture, is allowed.
    #[test]
    fn the_filter_traps_what_it_should() {
        let (lo, hi) = (0x7f00_0000_1000u64, 0x7f00_0000_9000u64);
        let f = filter(lo, hi);
        assert_eq!(f.len() as u64, FILTER_LEN * 8);
        let brk = SYS_BRK as u32;
        let exits = [SYS_EXIT_GROUP as u32, SYS_EXIT as u32];
        assert_eq!(run(&f, brk, X86_64, lo + 8), TRAP);
        assert_eq!(run(&f, brk, X86_64, 0x40_1000), TRAP);
        for nr in exits {
            assert_eq!(run(&f, nr, X86_64, lo), ALLOW, "{nr} from its first byte");
            assert_eq!(
                run(&f, nr, X86_64, hi - 1),
                ALLOW,
                "{nr} from its last byte"
            );
            assert_eq!(run(&f, nr, X86_64, hi), TRAP, "{nr} just past it");
            assert_eq!(run(&f, nr, X86_64, lo - 1), TRAP, "{nr} just before it");
            assert_eq!(
                run(&f, nr, X86_64, 0x40_1000),
                TRAP,
                "{nr} from the program"
            );
            // Same low half, another 4 GiB: not the restorer's code.
            assert_eq!(run(&f, nr, X86_64, lo + (1 << 32)), TRAP);
        }
        for nr in [0, 1, 9, 60 + 1000, x86_64::WRITE as u32] {
            assert_eq!(run(&f, nr, X86_64, 0x40_1000), ALLOW, "{nr}");
        }
        assert_eq!(
            run(&f, brk, 0x4000_0003, 0x40_1000),
            ALLOW,
            "i386 calls pass"
        );
    }
}
