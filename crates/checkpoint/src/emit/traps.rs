//! The restorer's signal handlers (the end marker's trap, the early exit, trapped brk) and
//! the messages of a failed restore.

use iced_x86::code_asm::*;

use super::*;

impl Emit<'_> {
    /// SIGTRAP: the end marker's int3; before its last count the instruction runs from its
    /// moved copy at the segment's start. SIGSYS: the program exiting early. The restorer
    /// for both.
    pub fn handlers(&mut self, slot: u64) -> Step {
        let foreign = self.a.create_label();
        let (a, l, r) = (&mut self.a, &mut self.l, self.r);
        a.set_label(&mut l.on_trap)?;
        a.mov(rax, qword_ptr(rdx) + UC_RIP)?;
        a.mov(rcx, r.end_pc + 1)?;
        a.cmp(rax, rcx)?;
        a.jne(foreign)?;
        a.mov(rcx, counter_page(self.base))?;
        a.add(qword_ptr(rcx), 1)?;
        a.mov(rax, r.end_count)?;
        a.cmp(qword_ptr(rcx), rax)?;
        a.jae(l.reached)?;
        a.mov(rax, slot)?;
        a.mov(qword_ptr(rdx) + UC_RIP, rax)?;
        a.ret()?;
        a.set_label(&mut l.reached)?;
        a.xor(edi, edi)?;
        a.mov(eax, SYS_EXIT_GROUP)?;
        a.syscall()?;
        a.hlt()?;
        self.here(foreign)?;
        self.say("bbv checkpoint: a SIGTRAP that is not the end marker's\n")?;
        self.exit(EXIT_FOREIGN_TRAP)?;
        let (on_sys, on_brk) = (self.l.on_sys, self.l.on_brk);
        self.here(on_sys)?;
        // siginfo's si_syscall (at 24): brk is served, anything else is an early exit.
        self.a.cmp(dword_ptr(rsi) + 24, SYS_BRK)?;
        self.a.je(on_brk)?;
        self.say("bbv checkpoint: the program exited before the region's end marker\n")?;
        self.exit(EXIT_EARLY)?;
        let (a, l) = (&mut self.a, &mut self.l);
        a.set_label(&mut l.sigreturn)?;
        a.mov(eax, SYS_RT_SIGRETURN)?;
        a.syscall()?;
        Ok(())
    }

    /// brk, trapped: the captured heap's break moves as the kernel's would (pages mapped or
    /// unmapped above it), and ucontext's rax gets the break.
    pub fn brk(&mut self) -> Step {
        const UC_RDI: i32 = 40 + 8 * 8;
        const UC_RAX: i32 = 40 + 13 * 8;
        let (mut grow, mut shrink, mut done) = (
            self.a.create_label(),
            self.a.create_label(),
            self.a.create_label(),
        );
        let (a, l) = (&mut self.a, &mut self.l);
        a.set_label(&mut l.on_brk)?;
        a.mov(r12, rdx)?;
        a.mov(r13, qword_ptr(rdx) + UC_RDI)?; // asked for
        a.lea(r14, ptr(l.brk))?;
        a.mov(rbx, qword_ptr(r14))?; // [break, heap start]
        a.cmp(r13, qword_ptr(r14) + 8)?;
        a.jb(done)?; // 0 or below the heap: the break as it is
        let page_up = |a: &mut CodeAssembler, dst: AsmRegister64, src: AsmRegister64| -> Step {
            a.lea(dst, qword_ptr(src) + 4095)?;
            a.and(dst, -4096)?;
            Ok(())
        };
        page_up(a, r8, rbx)?; // old top
        page_up(a, r9, r13)?; // new top
        a.cmp(r9, r8)?;
        a.ja(grow)?;
        a.jb(shrink)?;
        a.mov(qword_ptr(r14), r13)?;
        a.jmp(done)?;
        a.set_label(&mut grow)?;
        a.mov(rdi, r8)?;
        a.mov(rsi, r9)?;
        a.sub(rsi, r8)?;
        a.mov(edx, 3)?;
        a.mov(r10d, 0x22 | 0x10_0000)?;
        a.mov(r15, r8)?;
        a.mov(r8, -1i64)?;
        a.xor(r9d, r9d)?;
        a.mov(eax, SYS_MMAP)?;
        a.syscall()?;
        a.cmp(rax, r15)?;
        a.jne(done)?; // taken: the break stays, as the kernel's would
        a.mov(qword_ptr(r14), r13)?;
        a.jmp(done)?;
        a.set_label(&mut shrink)?;
        a.mov(rdi, r9)?;
        a.mov(rsi, r8)?;
        a.sub(rsi, r9)?;
        a.mov(eax, SYS_MUNMAP)?;
        a.syscall()?;
        a.mov(qword_ptr(r14), r13)?;
        a.set_label(&mut done)?;
        a.mov(rax, qword_ptr(r14))?;
        a.mov(qword_ptr(r12) + UC_RAX, rax)?;
        a.ret()?;
        Ok(())
    }

    /// The messages a failed restore prints before exiting.
    pub fn failures(&mut self) -> Step {
        let fails = [
            (
                self.l.taken,
                "bbv checkpoint: a captured address range is taken in this process (by the stack \
                 or vDSO the kernel placed at random); run it again\n",
            ),
            (
                self.l.map,
                "bbv checkpoint: mapping the captured pages from the checkpoint's file failed\n",
            ),
            (
                self.l.protect,
                "bbv checkpoint: restoring a mapping's protections failed\n",
            ),
            (
                self.l.fd,
                "bbv checkpoint: recreating a descriptor with its captured bytes failed\n",
            ),
            (
                self.l.exe,
                "bbv checkpoint: cannot read the checkpoint's own file (/proc/self/exe)\n",
            ),
        ];
        for (label, msg) in fails {
            self.here(label)?;
            self.say(msg)?;
            self.exit(EXIT_RESTORE_FAILED)?;
        }
        Ok(())
    }
}
