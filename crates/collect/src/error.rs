use std::path::PathBuf;

/// Everything that can go wrong on the host side of a collection.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// The program to run could not be found.
    #[error("{name}: no such program (not a path, and not found on PATH)")]
    ProgramNotFound {
        /// What was asked for.
        name: String,
    },
    /// The program is not an ELF executable.
    #[error("{}: not an ELF executable{hint}", path.display())]
    NotElf {
        /// The file.
        path: PathBuf,
        /// Extra advice (scripts).
        hint: String,
    },
    /// The ELF's machine is not one we collect from.
    #[error("{}: {what} executables are not supported (x86_64, aarch64 and riscv64 are)", path.display())]
    UnsupportedIsa {
        /// The file.
        path: PathBuf,
        /// The machine, as the ELF header names it.
        what: String,
    },
    /// No QEMU for the guest's ISA.
    #[error("{name} not found on PATH (install Debian's qemu-user package: apt-get install qemu-user, or pass --qemu PATH)")]
    QemuNotFound {
        /// The executable looked for.
        name: String,
    },
    /// The plugin library is missing.
    #[error("the QEMU plugin {library} was not found (looked at {tried}); scripts/build builds both next to the bbv binary (libbbv_qemu.so for QEMU 6.0-8.2, libbbv_qemu_v3.so for 9.1 and later), or set BBV_PLUGIN")]
    PluginNotFound {
        /// The library for the QEMU's API level.
        library: &'static str,
        /// Where we looked.
        tried: String,
    },
    /// The QEMU cannot load any plugin of bbv's.
    #[error("{what}")]
    Unsupported {
        /// What is wrong, and what to use instead.
        what: String,
    },
    /// A file-name pattern is malformed.
    #[error("file name {pattern:?}: {why}")]
    BadPattern {
        /// The pattern.
        pattern: String,
        /// What is wrong.
        why: String,
    },
    /// QEMU stopped without letting the plugin finish (failed to start the guest, or killed).
    #[error("{0}")]
    Incomplete(String),
    /// bbv received this signal (SIGINT, SIGTERM or SIGHUP) while the guest ran: the guest
    /// got it too, and once it ended nothing was written.
    #[error("stopped by signal {0} ({name}) while the guest ran; nothing was written", name = signal_name(*.0))]
    Interrupted(i32),
    /// The plugin's metrics file is malformed.
    #[error("{0}")]
    Metrics(bbv_profile::ProfileError),
    /// The plugin reported a failure.
    #[error("the QEMU plugin failed: {0}")]
    Plugin(String),
    /// The plugin's block table is malformed (a plugin/host version mismatch).
    #[error("{}:{line}: malformed block table ({what})", path.display())]
    BlockTable {
        /// The table file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
        /// What was expected.
        what: &'static str,
    },
    /// A file of the plugin's is malformed.
    #[error(transparent)]
    Contract(#[from] bbv_plugin_contract::ContractError),
}

impl CollectError {
    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        CollectError::Io {
            path: path.into(),
            source,
        }
    }
}

/// A signal's name (`SIGTERM`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    match sig {
        libc::SIGINT => "SIGINT".into(),
        libc::SIGTERM => "SIGTERM".into(),
        libc::SIGHUP => "SIGHUP".into(),
        libc::SIGKILL => "SIGKILL".into(),
        libc::SIGSEGV => "SIGSEGV".into(),
        libc::SIGABRT => "SIGABRT".into(),
        n => format!("signal {n}"),
    }
}
