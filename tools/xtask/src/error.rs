//! The errors an xtask command can end with.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why an xtask command failed. Each variant's message names what was being
/// done, so the one line printed on exit is enough to act on.
#[derive(Debug)]
pub enum XtaskError {
    /// The command line could not be understood.
    Usage(String),
    /// A file or directory operation failed.
    Io { context: String, source: io::Error },
    /// An external program could not be started.
    Spawn { program: String, source: io::Error },
    /// An external program ran and failed.
    Command { program: String, status: String },
    /// The partition config is invalid (names the partition and field).
    Config(pinfold_config::ConfigError),
    /// The plan breaks isolation on the board's host description (names
    /// the partition and field).
    Isolation {
        config: PathBuf,
        error: Box<pinfold_config::isolation::IsolationError>,
    },
    /// A download or extraction did not produce what was expected.
    Provision(String),
    /// An input or output file has the wrong shape.
    BadFile { path: PathBuf, why: String },
    /// One or more tests failed.
    TestsFailed { failed: usize },
}

impl fmt::Display for XtaskError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Usage(msg) => write!(f, "{msg}\n\n{}", crate::USAGE),
            Self::Io { context, source } => write!(f, "{context}: {source}"),
            Self::Spawn { program, source } => write!(f, "cannot start `{program}`: {source}"),
            Self::Command { program, status } => write!(f, "`{program}` failed ({status})"),
            Self::Config(err) => write!(f, "invalid config: {err}"),
            Self::Isolation { config, error } => {
                write!(f, "invalid config {}: {error}", config.display())
            }
            Self::Provision(msg) => write!(f, "provisioning: {msg}"),
            Self::BadFile { path, why } => write!(f, "{}: {why}", path.display()),
            Self::TestsFailed { failed } => write!(f, "{failed} test(s) failed"),
        }
    }
}

impl std::error::Error for XtaskError {}

impl From<pinfold_config::ConfigError> for XtaskError {
    fn from(err: pinfold_config::ConfigError) -> Self {
        Self::Config(err)
    }
}

/// Attaches a description of the operation to an `io::Error`.
pub trait IoContext<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, XtaskError>;
}

impl<T> IoContext<T> for io::Result<T> {
    fn context(self, what: impl FnOnce() -> String) -> Result<T, XtaskError> {
        self.map_err(|source| XtaskError::Io {
            context: what(),
            source,
        })
    }
}
