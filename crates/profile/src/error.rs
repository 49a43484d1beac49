use std::fmt;
use std::io;
use std::path::PathBuf;

/// Errors from reading or writing BBV files.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    /// The file could not be opened or read.
    #[error("{path}: {source}")]
    Io {
        /// File concerned.
        path: PathBuf,
        /// Underlying error.
        source: io::Error,
    },
    /// The compressed stream is truncated or corrupt.
    #[error("{path}:{line}: corrupt or truncated {compression} data: {source}")]
    Decompress {
        /// File concerned.
        path: PathBuf,
        /// Line being read when the stream failed.
        line: u64,
        /// Detected compression.
        compression: crate::compression::Compression,
        /// Underlying error.
        source: io::Error,
    },
    /// A line of a table file (such as `metrics.csv`) is wrong.
    #[error("{path}:{line}: {message}")]
    Table {
        /// File concerned.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// What was wrong and what was expected.
        message: String,
    },
    /// A file is not one bbv reads (a device, a folder) or exceeds a limit.
    #[error(transparent)]
    Files(#[from] bbv_files::FilesError),
    /// A line is longer than [`crate::MAX_LINE`].
    #[error("{path}:{line}: line longer than {limit} bytes (the limit for a vector)")]
    LineTooLong {
        /// File concerned.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// The limit.
        limit: usize,
    },
    /// A line does not follow the BBV syntax.
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        /// File concerned.
        path: PathBuf,
        /// 1-based line number.
        line: u64,
        /// 1-based byte column.
        column: usize,
        /// What was wrong and what was expected.
        message: SyntaxMessage,
    },
}

/// What a syntax error found; kept as an enum so hot paths build no strings.
#[derive(Debug, Clone, PartialEq)]
pub enum SyntaxMessage {
    /// A `T` line without any `:id:value` token.
    EmptyTLine,
    /// A token did not start with `:`.
    ExpectedColon(char),
    /// The id is missing or not a positive integer.
    BadId,
    /// The id is zero (ids are 1-based).
    ZeroId,
    /// The id exceeds [`crate::MAX_BLOCK_ID`].
    IdTooLarge,
    /// The value is missing or not a number.
    BadValue,
    /// The value is negative.
    NegativeValue,
    /// The value is infinite or NaN.
    NonFiniteValue,
    /// Unexpected bytes after a value.
    TrailingGarbage(char),
}

impl fmt::Display for SyntaxMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SyntaxMessage::EmptyTLine => write!(
                f,
                "'T' line with no ':id:value' token (SimPoint 3.2 would silently stop reading here)"
            ),
            SyntaxMessage::ExpectedColon(c) => {
                write!(f, "expected ':' before a block id, found {c:?}")
            }
            SyntaxMessage::BadId => write!(f, "expected a block id (positive integer)"),
            SyntaxMessage::ZeroId => write!(f, "block id 0: ids are 1-based"),
            SyntaxMessage::IdTooLarge => {
                write!(f, "block id larger than the limit {}", crate::MAX_BLOCK_ID)
            }
            SyntaxMessage::BadValue => write!(f, "expected a non-negative number after ':id:'"),
            SyntaxMessage::NegativeValue => write!(f, "negative count"),
            SyntaxMessage::NonFiniteValue => write!(f, "count is infinite or NaN"),
            SyntaxMessage::TrailingGarbage(c) => {
                write!(
                    f,
                    "unexpected {c:?} after a count (expected whitespace or ':')"
                )
            }
        }
    }
}
