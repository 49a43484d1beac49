//! System call numbers, in one place: x86-64's table (with what `bbv checkpoint --check`
//! compares of each call and which calls hand the program a new descriptor), and the few
//! numbers of the generic table (AArch64, RISC-V 64) that the plugin's thread scheduling needs.
//! The plugin tracks the guest's memory and descriptors by them, the checkpoint's emitted code
//! makes them, and `--check` names and compares them.

/// One x86-64 system call and what bbv knows of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Syscall {
    /// Its number.
    pub nr: i64,
    /// Its name, as the kernel spells it.
    pub name: &'static str,
    /// Its first argument is a descriptor (or a number the program chose), which a checkpoint
    /// must pass the same; other first arguments are addresses, which may differ harmlessly.
    pub fd_first: bool,
    /// It returns a new descriptor (the lowest number free).
    pub returns_fd: bool,
    /// Its result is an address, a process or thread id or a time: only whether it succeeded
    /// says anything about the program.
    pub outcome_only: bool,
}

const fn call(nr: i64, name: &'static str) -> Syscall {
    Syscall {
        nr,
        name,
        fd_first: false,
        returns_fd: false,
        outcome_only: false,
    }
}

const fn fd_first(nr: i64, name: &'static str) -> Syscall {
    Syscall {
        fd_first: true,
        ..call(nr, name)
    }
}

const fn new_fd(nr: i64, name: &'static str) -> Syscall {
    Syscall {
        returns_fd: true,
        ..call(nr, name)
    }
}

const fn outcome(nr: i64, name: &'static str) -> Syscall {
    Syscall {
        outcome_only: true,
        ..call(nr, name)
    }
}

/// x86-64's numbers by name, for the code that makes or matches one call.
pub mod x86_64 {
    #![allow(missing_docs)]
    pub const READ: i64 = 0;
    pub const WRITE: i64 = 1;
    pub const OPEN: i64 = 2;
    pub const CLOSE: i64 = 3;
    pub const LSEEK: i64 = 8;
    pub const MMAP: i64 = 9;
    pub const MPROTECT: i64 = 10;
    pub const MUNMAP: i64 = 11;
    pub const BRK: i64 = 12;
    pub const RT_SIGACTION: i64 = 13;
    pub const RT_SIGPROCMASK: i64 = 14;
    pub const RT_SIGRETURN: i64 = 15;
    pub const PREAD64: i64 = 17;
    pub const READV: i64 = 19;
    pub const PIPE: i64 = 22;
    pub const SCHED_YIELD: i64 = 24;
    pub const MREMAP: i64 = 25;
    pub const DUP2: i64 = 33;
    pub const SENDFILE: i64 = 40;
    pub const SOCKETPAIR: i64 = 53;
    pub const CLONE: i64 = 56;
    pub const FORK: i64 = 57;
    pub const VFORK: i64 = 58;
    pub const EXIT: i64 = 60;
    pub const FCNTL: i64 = 72;
    pub const CHDIR: i64 = 80;
    pub const PRCTL: i64 = 157;
    pub const ARCH_PRCTL: i64 = 158;
    pub const SETRLIMIT: i64 = 160;
    pub const FUTEX: i64 = 202;
    pub const EXIT_GROUP: i64 = 231;
    pub const DUP3: i64 = 292;
    pub const PIPE2: i64 = 293;
    pub const SECCOMP: i64 = 317;
    pub const MEMFD_CREATE: i64 = 319;
    pub const CLOSE_RANGE: i64 = 436;
}

/// The generic table's numbers (AArch64, RISC-V 64) that the plugin's scheduling needs.
pub mod generic {
    #![allow(missing_docs)]
    pub const FUTEX: i64 = 98;
    pub const EXIT: i64 = 93;
    pub const EXIT_GROUP: i64 = 94;
    pub const SCHED_YIELD: i64 = 124;
    pub const RT_SIGRETURN: i64 = 139;
    pub const CLONE: i64 = 220;
}

/// `futex` operations (the second argument; the same on every Linux architecture).
pub mod futex {
    /// Sleep while the word holds the value given.
    pub const WAIT: u64 = 0;
    /// Wake up to N sleepers.
    pub const WAKE: u64 = 1;
    /// [`WAIT`] with a mask of wakes it answers to.
    pub const WAIT_BITSET: u64 = 9;
    /// [`WAKE`] of the sleepers whose mask meets this one's.
    pub const WAKE_BITSET: u64 = 10;
    /// Added to an operation: the futex is private to the process.
    pub const PRIVATE: u64 = 128;
    /// Added to an operation: timeouts on the realtime clock.
    pub const CLOCK_REALTIME: u64 = 256;
}

/// Every x86-64 call bbv names or treats apart, by number.
pub const X86_64: &[Syscall] = &[
    fd_first(0, "read"),
    fd_first(1, "write"),
    new_fd(2, "open"),
    fd_first(3, "close"),
    call(4, "stat"),
    fd_first(5, "fstat"),
    call(6, "lstat"),
    call(7, "poll"),
    fd_first(8, "lseek"),
    outcome(9, "mmap"),
    call(10, "mprotect"),
    call(11, "munmap"),
    outcome(12, "brk"),
    call(13, "rt_sigaction"),
    call(14, "rt_sigprocmask"),
    call(15, "rt_sigreturn"),
    fd_first(16, "ioctl"),
    fd_first(17, "pread64"),
    fd_first(18, "pwrite64"),
    fd_first(19, "readv"),
    fd_first(20, "writev"),
    call(21, "access"),
    call(22, "pipe"),
    call(23, "select"),
    call(24, "sched_yield"),
    outcome(25, "mremap"),
    call(28, "madvise"),
    Syscall {
        fd_first: true,
        ..new_fd(32, "dup")
    },
    fd_first(33, "dup2"),
    outcome(39, "getpid"),
    fd_first(40, "sendfile"),
    new_fd(41, "socket"),
    call(42, "connect"),
    new_fd(43, "accept"),
    fd_first(44, "sendto"),
    fd_first(45, "recvfrom"),
    call(53, "socketpair"),
    outcome(56, "clone"),
    outcome(57, "fork"),
    call(58, "vfork"),
    call(59, "execve"),
    call(60, "exit"),
    call(61, "wait4"),
    call(62, "kill"),
    call(63, "uname"),
    fd_first(72, "fcntl"),
    fd_first(74, "fsync"),
    fd_first(77, "ftruncate"),
    call(79, "getcwd"),
    call(80, "chdir"),
    call(82, "rename"),
    new_fd(85, "creat"),
    call(87, "unlink"),
    call(89, "readlink"),
    outcome(96, "gettimeofday"),
    call(97, "getrlimit"),
    outcome(98, "getrusage"),
    outcome(99, "sysinfo"),
    outcome(100, "times"),
    call(102, "getuid"),
    outcome(110, "getppid"),
    call(131, "sigaltstack"),
    call(157, "prctl"),
    call(158, "arch_prctl"),
    call(160, "setrlimit"),
    outcome(186, "gettid"),
    outcome(201, "time"),
    call(202, "futex"),
    new_fd(213, "epoll_create"),
    fd_first(217, "getdents64"),
    outcome(218, "set_tid_address"),
    outcome(228, "clock_gettime"),
    call(231, "exit_group"),
    new_fd(253, "inotify_init"),
    Syscall {
        fd_first: true,
        ..new_fd(257, "openat")
    },
    fd_first(262, "newfstatat"),
    call(273, "set_robust_list"),
    new_fd(282, "signalfd"),
    new_fd(283, "timerfd_create"),
    new_fd(284, "eventfd"),
    new_fd(288, "accept4"),
    new_fd(289, "signalfd4"),
    new_fd(290, "eventfd2"),
    new_fd(291, "epoll_create1"),
    call(292, "dup3"),
    call(293, "pipe2"),
    new_fd(294, "inotify_init1"),
    call(302, "prlimit64"),
    call(317, "seccomp"),
    call(318, "getrandom"),
    new_fd(319, "memfd_create"),
    new_fd(323, "userfaultfd"),
    fd_first(332, "statx"),
    outcome(334, "rseq"),
    new_fd(434, "pidfd_open"),
    call(435, "clone3"),
    call(436, "close_range"),
    new_fd(437, "openat2"),
];

/// x86-64 call `nr`, if bbv knows it.
pub fn x86_64(nr: i64) -> Option<&'static Syscall> {
    X86_64
        .binary_search_by_key(&nr, |s| s.nr)
        .ok()
        .map(|i| &X86_64[i])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_sorted_unique_and_agrees_with_the_names() {
        assert!(X86_64.windows(2).all(|w| w[0].nr < w[1].nr));
        let named = [
            (x86_64::READ, "read"),
            (x86_64::WRITE, "write"),
            (x86_64::OPEN, "open"),
            (x86_64::CLOSE, "close"),
            (x86_64::LSEEK, "lseek"),
            (x86_64::MMAP, "mmap"),
            (x86_64::MPROTECT, "mprotect"),
            (x86_64::MUNMAP, "munmap"),
            (x86_64::BRK, "brk"),
            (x86_64::RT_SIGACTION, "rt_sigaction"),
            (x86_64::RT_SIGPROCMASK, "rt_sigprocmask"),
            (x86_64::RT_SIGRETURN, "rt_sigreturn"),
            (x86_64::PREAD64, "pread64"),
            (x86_64::READV, "readv"),
            (x86_64::PIPE, "pipe"),
            (x86_64::SCHED_YIELD, "sched_yield"),
            (x86_64::MREMAP, "mremap"),
            (x86_64::DUP2, "dup2"),
            (x86_64::SENDFILE, "sendfile"),
            (x86_64::SOCKETPAIR, "socketpair"),
            (x86_64::CLONE, "clone"),
            (x86_64::FORK, "fork"),
            (x86_64::VFORK, "vfork"),
            (x86_64::EXIT, "exit"),
            (x86_64::FCNTL, "fcntl"),
            (x86_64::CHDIR, "chdir"),
            (x86_64::PRCTL, "prctl"),
            (x86_64::ARCH_PRCTL, "arch_prctl"),
            (x86_64::SETRLIMIT, "setrlimit"),
            (x86_64::FUTEX, "futex"),
            (x86_64::EXIT_GROUP, "exit_group"),
            (x86_64::DUP3, "dup3"),
            (x86_64::PIPE2, "pipe2"),
            (x86_64::SECCOMP, "seccomp"),
            (x86_64::MEMFD_CREATE, "memfd_create"),
            (x86_64::CLOSE_RANGE, "close_range"),
        ];
        for (nr, name) in named {
            assert_eq!(x86_64(nr).map(|s| s.name), Some(name), "{nr}");
        }
        assert_eq!(x86_64(26), None);
        // A few facts checked by hand against the kernel's table.
        assert!(x86_64(257).is_some_and(|s| s.fd_first && s.returns_fd));
        assert!(x86_64(12).is_some_and(|s| s.outcome_only && !s.fd_first));
    }
}
