//! What `bbv collect` (the host) and its QEMU plugin (bbv-qemu) agree on, in one place:
//!
//! * [`PluginConfig`]: what the host asks for, written as QEMU's `key=value` plugin
//!   arguments ([`PluginConfig::to_args`]) and parsed back in the plugin
//!   ([`PluginConfig::parse`]);
//! * [`files`]: the name of every file the plugin writes into its directory;
//! * [`state`]: the layout of the shared mappings the plugin keeps while the guest runs;
//! * [`events`]: the reader of the marker events a replay writes;
//! * [`checkpoint`]: a captured guest process (`bbv checkpoint`);
//! * [`syscalls`]: thread 1's system calls among a replay's events;
//! * [`sysno`]: system call numbers and what bbv does with each call;
//! * [`Isa`]: the guest instruction sets, as the host and the plugin each tell them.
//!
//! Both sides depend on this crate, so a field or a file name is spelled once.

pub mod blocks;
pub mod checkpoint;
mod config;
pub mod events;
pub mod files;
mod isa;
pub mod state;
pub mod syscalls;
pub mod sysno;

pub use config::{MetricsConfig, PluginConfig};
pub use isa::Isa;

/// The environment variable that makes the plugin panic in one of its callbacks (`tb_trans`:
/// the first block translated; `exit`: at the guest's exit): how the tests reach the plugin's
/// guard at the C boundary. Real runs leave it unset.
pub const INJECT_PANIC_ENV: &str = "BBV_PLUGIN_INJECT_PANIC";

/// What can go wrong reading a file of the plugin's.
#[derive(Debug, thiserror::Error)]
pub enum ContractError {
    /// The file could not be read.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: std::path::PathBuf,
        /// The cause.
        source: std::io::Error,
    },
    /// A line is not what the plugin writes.
    #[error("{}:{line}: expected {what}", path.display())]
    Parse {
        /// The file.
        path: std::path::PathBuf,
        /// 1-based line.
        line: usize,
        /// What was expected.
        what: String,
    },
}

/// The complete lines of a file a process appends to: one killed while appending leaves its
/// last line unfinished, which is left out.
pub fn whole_lines(text: &str) -> &str {
    &text[..text.rfind('\n').map_or(0, |i| i + 1)]
}

/// The complete lines of a file the plugin appends to through a shared mapping: the text up
/// to the first NUL (the mapping's unwritten end), without an unfinished last line (a process
/// killed while appending).
pub fn read_appended(path: &std::path::Path) -> std::io::Result<String> {
    let mut text = std::fs::read_to_string(path)?;
    text.truncate(text.find('\0').unwrap_or(text.len()));
    let whole = crate::whole_lines(&text).len();
    text.truncate(whole);
    Ok(text)
}
