//! The restorer's machine code, step by step ([`crate::restorer::assemble`] calls them in
//! order). Straight-line code per mapping and descriptor: a table-driven loop would be shorter,
//! but this runs once.

use bbv_plugin_contract::sysno::x86_64;
use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;

mod fds;
mod traps;

use crate::restorer::{filter, FdOp, Layout, Restore, Run, FILTER_LEN, SYS_BRK, SYS_EXIT_GROUP};
use crate::{CheckpointError, EXIT_EARLY, EXIT_FOREIGN_TRAP, EXIT_RESTORE_FAILED};

// The calls the restorer makes (x86-64 numbers fit an instruction's 32-bit immediate).
const SYS_WRITE: i32 = x86_64::WRITE as i32;
const SYS_OPEN: i32 = x86_64::OPEN as i32;
const SYS_CLOSE: i32 = x86_64::CLOSE as i32;
const SYS_LSEEK: i32 = x86_64::LSEEK as i32;
const SYS_MMAP: i32 = x86_64::MMAP as i32;
const SYS_MPROTECT: i32 = x86_64::MPROTECT as i32;
const SYS_MUNMAP: i32 = x86_64::MUNMAP as i32;
const SYS_RT_SIGACTION: i32 = x86_64::RT_SIGACTION as i32;
const SYS_PREAD64: i32 = x86_64::PREAD64 as i32;
const SYS_RT_SIGPROCMASK: i32 = x86_64::RT_SIGPROCMASK as i32;
const SYS_RT_SIGRETURN: i32 = x86_64::RT_SIGRETURN as i32;
const SYS_DUP2: i32 = x86_64::DUP2 as i32;
const SYS_SENDFILE: i32 = x86_64::SENDFILE as i32;
const SYS_FCNTL: i32 = x86_64::FCNTL as i32;
const SYS_CHDIR: i32 = x86_64::CHDIR as i32;
const SYS_PRCTL: i32 = x86_64::PRCTL as i32;
const SYS_ARCH_PRCTL: i32 = x86_64::ARCH_PRCTL as i32;
const SYS_SETRLIMIT: i32 = x86_64::SETRLIMIT as i32;
const SYS_SECCOMP: i32 = x86_64::SECCOMP as i32;
const SYS_MEMFD_CREATE: i32 = x86_64::MEMFD_CREATE as i32;
const SYS_PIPE2: i32 = x86_64::PIPE2 as i32;

/// The descriptor the restorer reads its own file through: above any the process had.
const EXE_FD: i32 = 1000;
/// Where the kernel's ucontext keeps rip (uc_mcontext.gregs[REG_RIP]).
const UC_RIP: i32 = 40 + 16 * 8;

/// The restorer's code: its bytes and where its handler's exit at the region's end is (under
/// QEMU, where seccomp is refused, `--check` tells a reached end by that block having run).
pub(crate) struct Assembled {
    pub code: Vec<u8>,
    pub reached: u64,
}

/// Assembles the restorer to run at `layout.base`, its segment ending at `code_end`.
pub(crate) fn assemble(
    r: &Restore,
    layout: &Layout,
    code_end: u64,
) -> Result<Assembled, CheckpointError> {
    emitted(r, layout, code_end)?.finish(layout.base)
}

/// Every step of the restorer emitted, not yet assembled (its instructions can be read).
fn emitted<'a>(
    r: &'a Restore,
    layout: &Layout,
    code_end: u64,
) -> Result<Emit<'a>, CheckpointError> {
    let mut e = Emit::new(r, layout)?;
    e.open_self()?;
    e.program_break(code_end)?;
    e.mappings()?;
    e.slot()?;
    e.descriptors()?;
    e.process()?;
    e.jump()?;
    e.handlers(layout.slot)?;
    e.brk()?;
    e.failures()?;
    e.data(layout.base, code_end)?;
    Ok(e)
}

/// The page the end marker's trap counts in: the one below the restorer's segment, which
/// no captured mapping comes within (see `elf::choose_base`). Not in the segment: under QEMU
/// a write to a page holding translated code throws that code away, so a counter beside the
/// handler would have it translated again at every trap.
fn counter_page(base: u64) -> u64 {
    base - 4096
}

/// System call `nr` (its arguments already in place); a negative return goes to `fail`.
fn checked(a: &mut CodeAssembler, nr: i32, fail: CodeLabel) -> Step {
    a.mov(eax, nr)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.js(fail)?;
    Ok(())
}

/// close(reg).
fn close(a: &mut CodeAssembler, reg: AsmRegister64) -> Step {
    a.mov(rdi, reg)?;
    a.mov(eax, SYS_CLOSE)?;
    a.syscall()?;
    Ok(())
}

/// A fresh anonymous read-write mapping at [addr, addr + len), never over another: on a
/// taken address, to `taken`.
fn map_fresh(a: &mut CodeAssembler, addr: u64, len: u64, taken: CodeLabel) -> Step {
    a.mov(rdi, addr)?;
    a.mov(rsi, len)?;
    a.mov(edx, 3)?;
    a.mov(r10d, 0x22 | 0x10_0000)?; // MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE
    a.mov(r8, -1i64)?;
    a.xor(r9d, r9d)?;
    a.mov(eax, SYS_MMAP)?;
    a.syscall()?;
    a.cmp(rax, rdi)?;
    a.jne(taken)?;
    Ok(())
}

/// mprotect(addr, len, prot); on failure, to `fail`.
fn protect(a: &mut CodeAssembler, addr: u64, len: u64, prot: u32, fail: CodeLabel) -> Step {
    a.mov(rdi, addr)?;
    a.mov(rsi, len)?;
    a.mov(edx, prot)?;
    a.mov(eax, SYS_MPROTECT)?;
    a.syscall()?;
    a.test(rax, rax)?;
    a.jnz(fail)?;
    Ok(())
}

/// dup2(reg, fd) (on failure, to `fail`), then close(reg).
fn dup_onto(a: &mut CodeAssembler, reg: AsmRegister64, fd: i32, fail: CodeLabel) -> Step {
    a.mov(rdi, reg)?;
    a.mov(esi, fd)?;
    checked(a, SYS_DUP2, fail)?;
    close(a, reg)
}

/// Labels of the code's targets and data.
struct Labels {
    taken: CodeLabel,
    map: CodeLabel,
    protect: CodeLabel,
    fd: CodeLabel,
    exe: CodeLabel,
    exe_path: CodeLabel,
    sendfile_offset: CodeLabel,
    actions: CodeLabel,
    own: CodeLabel,
    on_trap: CodeLabel,
    on_sys: CodeLabel,
    sigreturn: CodeLabel,
    limit: CodeLabel,
    prog: CodeLabel,
    bpf: CodeLabel,
    mask: CodeLabel,
    fx: CodeLabel,
    frame: CodeLabel,
    rip: CodeLabel,
    tls: CodeLabel,
    reached: CodeLabel,
    moved: CodeLabel,
    on_brk: CodeLabel,
    brk: CodeLabel,
}

/// The assembler, what it restores and the texts its messages print.
struct Emit<'a> {
    a: CodeAssembler,
    r: &'a Restore,
    l: Labels,
    /// File offsets of the blobs not yet used, in order.
    blobs: std::vec::IntoIter<u64>,
    slot: u64,
    /// The restorer's segment's start.
    base: u64,
    moved: Vec<u8>,
    texts: Vec<(CodeLabel, Vec<u8>)>,
}

type Step = Result<(), CheckpointError>;

impl<'a> Emit<'a> {
    pub fn new(r: &'a Restore, layout: &Layout) -> Result<Emit<'a>, CheckpointError> {
        let mut a = CodeAssembler::new(64)?;
        let mut l = || a.create_label();
        let l = Labels {
            taken: l(),
            map: l(),
            protect: l(),
            fd: l(),
            exe: l(),
            exe_path: l(),
            sendfile_offset: l(),
            actions: l(),
            own: l(),
            on_trap: l(),
            on_sys: l(),
            sigreturn: l(),
            limit: l(),
            prog: l(),
            bpf: l(),
            mask: l(),
            fx: l(),
            frame: l(),
            rip: l(),
            tls: l(),
            reached: l(),
            moved: l(),
            on_brk: l(),
            brk: l(),
        };
        Ok(Emit {
            a,
            r,
            l,
            blobs: layout.blob_offsets.clone().into_iter(),
            slot: layout.slot,
            base: layout.base,
            moved: layout.moved.clone(),
            texts: Vec::new(),
        })
    }

    /// A text for a message: its label and length.
    fn text(&mut self, s: &str) -> (CodeLabel, usize) {
        let l = self.a.create_label();
        self.texts.push((l, s.as_bytes().to_vec()));
        (l, s.len())
    }

    /// `write(2, text)`.
    fn say(&mut self, s: &str) -> Step {
        let (t, n) = self.text(s);
        let a = &mut self.a;
        a.mov(edi, 2)?;
        a.lea(rsi, ptr(t))?;
        a.mov(edx, n as u32)?;
        a.mov(eax, SYS_WRITE)?;
        a.syscall()?;
        Ok(())
    }

    fn exit(&mut self, status: i32) -> Step {
        let a = &mut self.a;
        a.mov(edi, status)?;
        a.mov(eax, SYS_EXIT_GROUP)?;
        a.syscall()?;
        a.hlt()?;
        Ok(())
    }

    /// A label here (followed by a nop, so that two labels never share an instruction).
    fn here(&mut self, mut label: CodeLabel) -> Step {
        self.a.set_label(&mut label)?;
        self.a.nop()?;
        Ok(())
    }

    /// Our own file, at a descriptor the process's will not meet.
    pub fn open_self(&mut self) -> Step {
        let (a, l) = (&mut self.a, &self.l);
        a.lea(rdi, ptr(l.exe_path))?;
        a.xor(esi, esi)?;
        checked(a, SYS_OPEN, l.exe)?;
        a.mov(r12, rax)?;
        a.mov(rdi, rax)?;
        a.xor(esi, esi)?;
        a.mov(edx, EXE_FD)?;
        checked(a, SYS_FCNTL, l.exe)?;
        a.mov(r15, rax)?;
        close(a, r12)
    }

    /// Under QEMU, whose break starts at the end of our segment (`code_end`) and which
    /// refuses the seccomp filter that serves brk natively: moved to the captured break while
    /// nothing is mapped up to it, then its pages given back for the captured mappings, so
    /// that the program's later brk calls grow the heap from where they did in the profile.
    /// Natively the kernel's break (placed at random above our segment) moves or refuses, and
    /// the same range is given back; the filter serves the program's calls there.
    pub fn program_break(&mut self, code_end: u64) -> Step {
        let r = self.r;
        if code_end > r.heap_start || r.brk < code_end {
            return Ok(());
        }
        let top = r.brk.div_ceil(4096) * 4096;
        let a = &mut self.a;
        a.mov(rdi, r.brk)?;
        a.mov(eax, SYS_BRK)?;
        a.syscall()?;
        if top > code_end {
            a.mov(rdi, code_end)?;
            a.mov(rsi, top - code_end)?;
            a.mov(eax, SYS_MUNMAP)?;
            a.syscall()?;
        }
        Ok(())
    }

    /// The mappings, writable while the kept pages go over them from our file; the int3 on
    /// the end instruction; then each mapping's own protections.
    pub fn mappings(&mut self) -> Step {
        let r = self.r;
        for area in &r.areas {
            map_fresh(&mut self.a, area.start, area.len, self.l.taken)?;
        }
        for run in &r.runs {
            match run.mapped {
                true => self.map_run(run)?,
                false => self.read_run(run)?,
            }
        }
        let (a, l) = (&mut self.a, &self.l);
        a.mov(rdi, r.end_pc)?;
        a.mov(byte_ptr(rdi), 0xcc)?;
        for area in &r.areas {
            protect(a, area.start, area.len, area.prot, l.protect)?;
        }
        Ok(())
    }

    /// Kept pages mapped from our file over their mapping.
    fn map_run(&mut self, run: &Run) -> Step {
        let (a, l) = (&mut self.a, &self.l);
        a.mov(rdi, run.addr)?;
        a.mov(rsi, run.len)?;
        a.mov(edx, 3)?;
        a.mov(r10d, 0x12)?; // MAP_PRIVATE | MAP_FIXED
        a.mov(r8, r15)?;
        a.mov(r9, run.offset)?;
        a.mov(eax, SYS_MMAP)?;
        a.syscall()?;
        a.cmp(rax, rdi)?;
        a.jne(l.map)?;
        Ok(())
    }

    /// Kept pages read from our file into their (writable, anonymous) mapping.
    fn read_run(&mut self, run: &Run) -> Step {
        let (mut again, done) = (self.a.create_label(), self.a.create_label());
        let (a, l) = (&mut self.a, &self.l);
        a.mov(r12, run.addr)?;
        a.mov(r13, run.len)?;
        a.mov(r14, run.offset)?;
        a.set_label(&mut again)?;
        a.test(r13, r13)?;
        a.jz(done)?;
        a.mov(rdi, r15)?;
        a.mov(rsi, r12)?;
        a.mov(rdx, r13)?;
        a.mov(r10, r14)?;
        a.mov(eax, SYS_PREAD64)?;
        a.syscall()?;
        a.test(rax, rax)?;
        a.jle(l.map)?;
        a.add(r12, rax)?;
        a.add(r14, rax)?;
        a.sub(r13, rax)?;
        a.jmp(again)?;
        self.here(done)
    }

    /// The page near the end instruction with its moved copy, executable.
    pub fn slot(&mut self) -> Step {
        let (a, l) = (&mut self.a, &self.l);
        map_fresh(a, counter_page(self.base), 4096, l.taken)?;
        map_fresh(a, self.slot, 4096, l.taken)?;
        a.lea(rsi, ptr(l.moved))?;
        a.mov(ecx, self.moved.len() as u32)?;
        a.rep().movsb()?;
        protect(a, self.slot, 4096, 5, l.protect)
    }

    /// The working directory, the program's dispositions, ours for SIGTRAP and SIGSYS, the
    /// CPU-time limit, the exit filter and the signal mask.
    pub fn process(&mut self) -> Step {
        let r = self.r;
        if !r.cwd.is_empty() {
            let (p, _) = self.text(&format!("{}\0", r.cwd));
            let ok = self.a.create_label();
            self.a.lea(rdi, ptr(p))?;
            self.a.mov(eax, SYS_CHDIR)?;
            self.a.syscall()?;
            self.a.test(rax, rax)?;
            self.a.jz(ok)?;
            self.say(&format!(
                "bbv checkpoint: cannot enter the captured working directory {}\n",
                r.cwd
            ))?;
            self.here(ok)?;
        }
        let (a, l) = (&mut self.a, &self.l);
        for (i, s) in r.sigactions.iter().enumerate() {
            a.mov(edi, s.signal)?;
            // (A label's operand takes no displacement: addresses go through registers.)
            a.lea(rsi, ptr(l.actions))?;
            a.add(rsi, 32 * i as i32)?;
            a.xor(edx, edx)?;
            a.mov(r10d, 8)?;
            a.mov(eax, SYS_RT_SIGACTION)?;
            a.syscall()?;
        }
        for (i, (signal, handler)) in [(5, l.on_trap), (31, l.on_sys)].into_iter().enumerate() {
            a.lea(rsi, ptr(l.own))?;
            a.add(rsi, 32 * i as i32)?;
            a.lea(rax, ptr(handler))?;
            a.mov(qword_ptr(rsi), rax)?;
            a.lea(rax, ptr(l.sigreturn))?;
            a.mov(qword_ptr(rsi) + 16, rax)?;
            a.mov(edi, signal)?;
            a.xor(edx, edx)?;
            a.mov(r10d, 8)?;
            a.mov(eax, SYS_RT_SIGACTION)?;
            a.syscall()?;
        }
        // Failures below only lose a check (QEMU refuses seccomp).
        a.xor(edi, edi)?; // RLIMIT_CPU
        a.lea(rsi, ptr(l.limit))?;
        a.mov(eax, SYS_SETRLIMIT)?;
        a.syscall()?;
        a.mov(edi, 38)?; // PR_SET_NO_NEW_PRIVS
        a.mov(esi, 1)?;
        a.xor(edx, edx)?;
        a.xor(r10d, r10d)?;
        a.xor(r8d, r8d)?;
        a.mov(eax, SYS_PRCTL)?;
        a.syscall()?;
        a.lea(rax, ptr(l.bpf))?;
        a.lea(rdx, ptr(l.prog))?;
        a.mov(qword_ptr(rdx) + 8, rax)?;
        a.mov(edi, 1)?; // SECCOMP_SET_MODE_FILTER
        a.xor(esi, esi)?;
        a.mov(eax, SYS_SECCOMP)?;
        a.syscall()?;
        a.mov(edi, 2)?; // SIG_SETMASK
        a.lea(rsi, ptr(l.mask))?;
        a.xor(edx, edx)?;
        a.mov(r10d, 8)?;
        a.mov(eax, SYS_RT_SIGPROCMASK)?;
        a.syscall()?;
        Ok(())
    }

    /// The registers, last: FPU/SSE from an aligned copy on the stack, the TLS bases
    /// (arch_prctl clobbers rcx and r11), then flags and general registers popped from a
    /// frame, rsp last, and the jump.
    pub fn jump(&mut self) -> Step {
        let (a, l, r) = (&mut self.a, &self.l, self.r);
        a.and(rsp, -64)?;
        a.sub(rsp, 512)?;
        a.mov(rdi, rsp)?;
        a.lea(rsi, ptr(l.fx))?;
        a.mov(ecx, 512)?;
        a.rep().movsb()?;
        a.fxrstor64(ptr(rsp))?;
        for (code, at, value) in [(0x1002, 0, r.regs.fs_base), (0x1001, 8, r.regs.gs_base)] {
            if value != 0 || at == 0 {
                a.mov(edi, code)?;
                a.lea(rsi, ptr(l.tls))?;
                a.mov(rsi, qword_ptr(rsi) + at)?;
                a.mov(eax, SYS_ARCH_PRCTL)?;
                a.syscall()?;
            }
        }
        a.lea(rsp, ptr(l.frame))?;
        a.popfq()?;
        for reg in [
            rax, rbx, rcx, rdx, rsi, rdi, rbp, r8, r9, r10, r11, r12, r13, r14, r15,
        ] {
            a.pop(reg)?;
        }
        a.pop(rsp)?;
        a.jmp(qword_ptr(l.rip))?;
        Ok(())
    }

    /// The data after the code: texts, the registers, the dispositions, the filter (its
    /// bounds, the whole segment [`lo`, `hi`), cover every instruction above) and the handler's
    /// counter.
    pub fn data(&mut self, lo: u64, hi: u64) -> Step {
        let r = self.r;
        for (mut label, bytes) in std::mem::take(&mut self.texts) {
            self.a.set_label(&mut label)?;
            self.a.db(&bytes)?;
        }
        let (a, l) = (&mut self.a, &mut self.l);
        let put = |a: &mut CodeAssembler, label: &mut CodeLabel, words: &[u64]| -> Step {
            a.set_label(label)?;
            a.dq(words)?;
            Ok(())
        };
        a.set_label(&mut l.exe_path)?;
        a.db(b"/proc/self/exe\0")?;
        a.set_label(&mut l.fx)?;
        a.db(&r.regs.fx)?;
        let g = &r.regs.gpr;
        // The frame `jump` pops: flags (arithmetic ones clear), rax-rbp, r8-r15, rsp.
        let mut frame = vec![0x202];
        frame.extend(&g[..7]);
        frame.extend(&g[8..]);
        frame.push(g[7]);
        put(a, &mut l.frame, &frame)?;
        put(a, &mut l.rip, &[r.regs.rip])?;
        put(a, &mut l.tls, &[r.regs.fs_base, r.regs.gs_base])?;
        put(a, &mut l.mask, &[r.sigmask])?;
        put(a, &mut l.limit, &[r.cpu_seconds, r.cpu_seconds + 5])?;
        let mut actions: Vec<u64> = (r.sigactions.iter())
            .flat_map(|s| [s.handler, s.flags, s.restorer, s.mask])
            .collect();
        actions.push(0);
        put(a, &mut l.actions, &actions)?;
        // SA_SIGINFO | SA_RESTORER; the handlers' addresses are stored at run time.
        let flags = 4 | 0x0400_0000;
        put(a, &mut l.own, &[0, flags, 0, 0, 0, flags, 0, 0])?;
        put(a, &mut l.prog, &[FILTER_LEN, 0])?;
        put(a, &mut l.brk, &[r.brk, r.heap_start])?;
        a.set_label(&mut l.moved)?;
        a.db(&self.moved)?;
        a.set_label(&mut l.bpf)?;
        a.db(&filter(lo, hi))?;
        put(a, &mut l.sendfile_offset, &[0])?;
        Ok(())
    }

    /// The bytes, at `ip`.
    pub fn finish(mut self, ip: u64) -> Result<Assembled, CheckpointError> {
        let out = self
            .a
            .assemble_options(ip, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
        let reached = out.label_ip(&self.l.reached)?;
        Ok(Assembled {
            code: out.inner.code_buffer,
            reached,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::restorer::{Area, Regs};
    use iced_x86::{Code, Register};

    /// A small process: a code and a stack mapping with kept pages, one descriptor of each
    /// kind, a signal handler, a working directory and a CPU limit.
    fn process() -> Restore {
        Restore {
            areas: vec![
                Area {
                    start: 0x40_0000,
                    len: 0x2000,
                    prot: 5,
                },
                Area {
                    start: 0x7ffe_0000_0000,
                    len: 0x21000,
                    prot: 3,
                },
            ],
            runs: vec![Run {
                addr: 0x40_0000,
                offset: 0x1000,
                len: 0x2000,
                mapped: true,
            }],
            fds: vec![
                FdOp::Content {
                    fd: 0,
                    blob: ("/in".into(), 0, 10),
                    offset: 4,
                    read_only: true,
                },
                FdOp::Open {
                    fd: 3,
                    path: "/etc/hostname".into(),
                    flags: 0,
                    offset: Some(5),
                },
                FdOp::Close { fd: 4 },
                FdOp::Pipe {
                    read: (5, 0),
                    write: (6, 0o4000),
                },
            ],
            cwd: "/tmp".into(),
            sigactions: vec![bbv_plugin_contract::checkpoint::SigAction {
                signal: 2,
                handler: 0x40_0100,
                flags: 0x0400_0000,
                restorer: 0x40_0200,
                mask: 0,
            }],
            sigmask: 0,
            regs: Regs {
                gpr: [0; 16],
                rip: 0x40_0010,
                fs_base: 0x7ffe_0000_1000,
                gs_base: 0,
                fx: [0; 512],
            },
            end_pc: 0x40_0020,
            end_count: 3,
            end_code: vec![0x90; 16],
            brk: 0x60_1000,
            heap_start: 0x60_0000,
            cpu_seconds: 60,
        }
    }

    /// Each system call the restorer makes, in emission order: the number moved into eax by
    /// the instruction before it.
    fn calls(insns: &[iced_x86::Instruction]) -> Vec<i32> {
        (insns.windows(2))
            .filter(|w| w[1].code() == Code::Syscall)
            .map(|w| {
                let m = &w[0];
                assert!(
                    m.code() == Code::Mov_r32_imm32 && m.op0_register() == Register::EAX,
                    "a call without its number just before it: {:?}",
                    m.code()
                );
                m.immediate32() as i32
            })
            .collect()
    }

    /// The restorer makes the calls that rebuild this process (every mapping, each kind of
    /// descriptor, the handler, the working directory, the limit, the filter, the thread
    /// pointer) and no call outside the set it is meant to make.
    #[test]
    fn the_restorer_makes_the_calls_that_rebuild_the_process() {
        let r = process();
        let (base, slot) = (0x2_0000_0000u64, 0x1_0000_0000u64);
        let mut moved = crate::displace::displaced(&r.end_code, r.end_pc, slot).unwrap();
        moved.resize(crate::displace::SLOT as usize, 0xcc);
        let layout = Layout {
            base,
            blob_offsets: vec![0x10_0000; r.blobs().len()],
            slot,
            moved,
        };
        let e = emitted(&r, &layout, base + 0x10_0000).unwrap();
        let made = calls(e.a.instructions());
        let allowed = [
            SYS_WRITE,
            SYS_OPEN,
            SYS_CLOSE,
            SYS_LSEEK,
            SYS_MMAP,
            SYS_MPROTECT,
            SYS_MUNMAP,
            SYS_RT_SIGACTION,
            SYS_PREAD64,
            SYS_RT_SIGPROCMASK,
            SYS_RT_SIGRETURN,
            SYS_DUP2,
            SYS_SENDFILE,
            SYS_FCNTL,
            SYS_CHDIR,
            SYS_PRCTL,
            SYS_ARCH_PRCTL,
            SYS_SETRLIMIT,
            SYS_SECCOMP,
            SYS_MEMFD_CREATE,
            SYS_PIPE2,
            SYS_BRK,
            SYS_EXIT_GROUP,
        ];
        for nr in &made {
            assert!(allowed.contains(nr), "call {nr}");
        }
        let count = |nr: i32| made.iter().filter(|&&m| m == nr).count();
        assert!(count(SYS_MMAP) >= r.areas.len(), "{made:?}");
        for nr in [
            SYS_MEMFD_CREATE, // the Content descriptor
            SYS_SENDFILE,
            SYS_PIPE2, // the pipe
            SYS_LSEEK, // the opened file's offset
            SYS_RT_SIGACTION,
            SYS_CHDIR,
            SYS_SETRLIMIT,
            SYS_SECCOMP,
            SYS_ARCH_PRCTL,
            SYS_RT_SIGPROCMASK,
            SYS_EXIT_GROUP,
        ] {
            assert!(count(nr) > 0, "no call {nr}: {made:?}");
        }
        assert!(
            count(SYS_OPEN) >= 2,
            "its own file and /etc/hostname: {made:?}"
        );
        let out = e.finish(base).unwrap();
        let end = base + out.code.len() as u64;
        assert!((base..end).contains(&out.reached), "{:#x}", out.reached);
    }
}
