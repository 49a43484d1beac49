//! The restorer's descriptors: each one the process had, recreated at its number (memfds
//! with the captured bytes, files reopened at their offsets, pipes), then its own file closed.

use iced_x86::code_asm::*;

use super::*;

impl Emit<'_> {
    /// Each descriptor as it was, then our file closed.
    pub fn descriptors(&mut self) -> Step {
        for op in &self.r.fds {
            match op {
                FdOp::Close { fd } => {
                    self.a.mov(edi, *fd)?;
                    self.a.mov(eax, SYS_CLOSE)?;
                    self.a.syscall()?;
                }
                FdOp::Content {
                    fd,
                    blob: (_, _, len),
                    offset,
                    read_only,
                } => self.content(*fd, *len, *offset, *read_only)?,
                FdOp::Open {
                    fd,
                    path,
                    flags,
                    offset,
                } => self.open(*fd, path, *flags, *offset)?,
                FdOp::Pipe { read, write } => self.pipe(*read, *write)?,
            }
        }
        close(&mut self.a, r15)
    }

    /// A memfd holding the next blob's `len` bytes, as descriptor `fd` at `offset`, read-only
    /// if `read_only`.
    fn content(&mut self, fd: i32, len: u64, offset: u64, read_only: bool) -> Step {
        let from = self.blobs.next().expect("one offset per blob");
        let (name, _) = self.text("bbv-checkpoint\0");
        let (mut again, done) = (self.a.create_label(), self.a.create_label());
        let (a, l) = (&mut self.a, &self.l);
        a.lea(rdi, ptr(name))?;
        a.xor(esi, esi)?;
        checked(a, SYS_MEMFD_CREATE, l.fd)?;
        a.mov(r12, rax)?;
        a.mov(rax, from)?;
        a.mov(qword_ptr(l.sendfile_offset), rax)?;
        a.mov(r13, len)?;
        a.set_label(&mut again)?;
        a.test(r13, r13)?;
        a.jz(done)?;
        a.mov(rdi, r12)?;
        a.mov(rsi, r15)?;
        a.lea(rdx, ptr(l.sendfile_offset))?;
        a.mov(r10, r13)?;
        a.mov(eax, SYS_SENDFILE)?;
        a.syscall()?;
        a.test(rax, rax)?;
        a.jle(l.fd)?;
        a.sub(r13, rax)?;
        a.jmp(again)?;
        self.here(done)?;
        if read_only {
            self.reopen_read_only()?;
        }
        self.move_fd(fd)?;
        self.seek(fd, offset)
    }

    /// The memfd in r12 opened again read-only (through /proc/self/fd, at a number of our
    /// own), the read-write one closed: fcntl(F_GETFL) then says O_RDONLY, as it did.
    fn reopen_read_only(&mut self) -> Step {
        const AT: i32 = EXE_FD + 1;
        let (path, _) = self.text(&format!("/proc/self/fd/{AT}\0"));
        let (a, l) = (&mut self.a, &self.l);
        dup_onto(a, r12, AT, l.fd)?;
        a.lea(rdi, ptr(path))?;
        a.xor(esi, esi)?; // O_RDONLY
        checked(a, SYS_OPEN, l.fd)?;
        a.mov(r12, rax)?;
        a.mov(edi, AT)?;
        a.mov(eax, SYS_CLOSE)?;
        a.syscall()?;
        Ok(())
    }

    /// open(path, flags) as descriptor `fd`; a failure is said and the descriptor stays closed.
    fn open(&mut self, fd: i32, path: &std::path::Path, flags: u32, offset: Option<u64>) -> Step {
        let (p, _) = self.text(&format!("{}\0", path.display()));
        let (next, mut opened) = (self.a.create_label(), self.a.create_label());
        let a = &mut self.a;
        a.lea(rdi, ptr(p))?;
        a.mov(esi, flags)?;
        a.mov(edx, 0o644)?;
        a.mov(eax, SYS_OPEN)?;
        a.syscall()?;
        a.test(rax, rax)?;
        a.jns(opened)?;
        self.say(&format!(
            "bbv checkpoint: cannot open {} again as descriptor {fd}; it stays closed\n",
            path.display()
        ))?;
        self.a.jmp(next)?;
        self.a.set_label(&mut opened)?;
        self.a.mov(r12, rax)?;
        self.move_fd(fd)?;
        if let Some(o) = offset {
            self.seek(fd, o)?;
        }
        self.here(next)
    }

    /// A new pipe at the numbers `read` and `write` (with their flags): its ends first moved
    /// above every number the process uses, so that neither lands on the other's number.
    fn pipe(&mut self, read: (i32, u32), write: (i32, u32)) -> Step {
        let (a, l) = (&mut self.a, &self.l);
        a.lea(rdi, ptr(l.sendfile_offset))?;
        a.xor(esi, esi)?;
        a.mov(eax, SYS_PIPE2)?;
        a.syscall()?;
        a.test(rax, rax)?;
        a.jnz(l.fd)?;
        for (at, reg) in [(0, r12), (4, r13)] {
            a.lea(rdi, ptr(l.sendfile_offset))?;
            a.mov(edi, dword_ptr(rdi) + at)?;
            a.mov(r14, rdi)?;
            a.xor(esi, esi)?; // F_DUPFD
            a.mov(edx, EXE_FD + 1)?;
            checked(a, SYS_FCNTL, l.fd)?;
            a.mov(reg, rax)?;
            close(a, r14)?;
        }
        for (reg, (fd, flags)) in [(r12, read), (r13, write)] {
            let (a, l) = (&mut self.a, &self.l);
            dup_onto(a, reg, fd, l.fd)?;
            a.mov(edi, fd)?;
            a.mov(esi, 4)?; // F_SETFL
            a.mov(edx, flags & 0o4000)?; // O_NONBLOCK
            a.mov(eax, SYS_FCNTL)?;
            a.syscall()?;
        }
        Ok(())
    }

    /// Moves the descriptor in r12 to number `fd` (dup2, close), unless it already is.
    fn move_fd(&mut self, fd: i32) -> Step {
        let same = self.a.create_label();
        let (a, l) = (&mut self.a, &self.l);
        a.cmp(r12, fd)?;
        a.je(same)?;
        dup_onto(a, r12, fd, l.fd)?;
        self.here(same)
    }

    fn seek(&mut self, fd: i32, offset: u64) -> Step {
        let a = &mut self.a;
        a.mov(edi, fd)?;
        a.mov(rsi, offset)?;
        a.xor(edx, edx)?;
        a.mov(eax, SYS_LSEEK)?;
        a.syscall()?;
        Ok(())
    }
}
