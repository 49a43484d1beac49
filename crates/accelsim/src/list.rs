use std::path::{Path, PathBuf};

use crate::input::Lines;
use crate::TraceError;

/// One command of `kernelslist.g`.
#[derive(Clone, Debug, PartialEq)]
pub enum Command {
    /// `MemcpyHtoD,<device pointer>,<bytes>`.
    MemcpyHtoD {
        /// Device address.
        address: u64,
        /// Byte count.
        bytes: u64,
        /// The line as written.
        text: String,
    },
    /// A kernel launch: its trace file, resolved against the list's folder.
    Kernel {
        /// Trace file.
        path: PathBuf,
        /// The name as written in the list.
        text: String,
    },
}

/// The longest kernel trace file name in a list (Accel-Sim writes `kernel-N.traceg`).
pub const MAX_NAME: usize = 1024;

/// A parsed `kernelslist.g`.
#[derive(Clone, Debug)]
pub struct KernelList {
    /// The list file.
    pub path: PathBuf,
    /// Commands in order.
    pub commands: Vec<Command>,
}

impl KernelList {
    /// Reads a kernel list; kernel files are resolved relative to its folder (not opened).
    pub fn open(path: &Path) -> Result<KernelList, TraceError> {
        let dir = path.parent().unwrap_or(Path::new("."));
        let mut lines = Lines::open(path)?;
        let mut commands = Vec::new();
        while let Some(line) = lines.next_line()? {
            // Leading blanks are kept: Accel-Sim would not see `kernel` at the start.
            let line = line.trim_end().to_string();
            let line = line.as_str();
            if line.trim_start().is_empty() || line.starts_with('#') {
                continue;
            }
            if let Some(rest) = line.strip_prefix("MemcpyHtoD,") {
                let mut parts = rest.split(',');
                let (Some(addr), Some(bytes), None) = (parts.next(), parts.next(), parts.next())
                else {
                    return Err(lines.error(format!(
                        "expected 'MemcpyHtoD,<hex address>,<bytes>', found '{}'",
                        q(line)
                    )));
                };
                let address = u64::from_str_radix(addr.trim().trim_start_matches("0x"), 16)
                    .map_err(|_| lines.error(format!("bad device address '{}'", q(addr))))?;
                let bytes = bytes
                    .trim()
                    .parse()
                    .map_err(|_| lines.error(format!("bad byte count '{}'", q(bytes))))?;
                commands.push(Command::MemcpyHtoD {
                    address,
                    bytes,
                    text: line.to_string(),
                });
            } else if !line.starts_with("kernel") {
                // Accel-Sim takes a launch only from a line that starts with `kernel` and skips
                // any other silently: counting it would make the list mean another run here.
                return Err(lines.error(format!(
                    "'{}': Accel-Sim reads a launch only from a line that starts with 'kernel' \
                     (a trace file in the list's folder) and would skip this one; name the trace \
                     kernel-N.traceg in the list's folder (a symbolic link will do) or delete the line",
                    q(line)
                )));
            } else if line.len() > MAX_NAME {
                return Err(lines.error(format!(
                    "a kernel trace file name of {} bytes, more than the {MAX_NAME} allowed: '{}'",
                    line.len(),
                    q(line)
                )));
            } else if line.contains(',') || line.contains(char::is_whitespace) {
                return Err(lines.error(format!(
                    "expected a kernel trace file name or a MemcpyHtoD command, found '{}'",
                    q(line)
                )));
            } else {
                commands.push(Command::Kernel {
                    path: dir.join(line),
                    text: line.to_string(),
                });
            }
        }
        Ok(KernelList {
            path: path.to_path_buf(),
            commands,
        })
    }

    /// The kernel trace files in launch order.
    pub fn kernels(&self) -> impl Iterator<Item = &Path> {
        self.commands.iter().filter_map(|c| match c {
            Command::Kernel { path, .. } => Some(path.as_path()),
            _ => None,
        })
    }
}

fn q(s: &str) -> String {
    bbv_files::input::quote(s.as_bytes())
}
