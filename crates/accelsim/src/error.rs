use std::path::PathBuf;

/// Errors reading trace files.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    /// The file could not be opened or read (or its compression is corrupt).
    #[error("{path}:{line}: {source}")]
    Io {
        /// File concerned.
        path: PathBuf,
        /// Line being read (0 when opening).
        line: u64,
        /// Underlying error.
        source: std::io::Error,
    },
    /// A file is not one bbv reads (a device, a folder) or exceeds a limit.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// The content does not follow the trace format.
    #[error("{path}:{line}: {message}")]
    Format {
        /// File concerned.
        path: PathBuf,
        /// 1-based line.
        line: u64,
        /// What was wrong and what was expected.
        message: String,
    },
}
