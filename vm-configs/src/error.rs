//! Why a partition-plan TOML was rejected, phrased so the message names the
//! partition and the field to fix. A partition's broken rule is a
//! `rules::Rejection` (the `no_std` rules the hypervisor and the manager
//! use too), so its message is the same wherever the partition comes from.

use std::io;
use std::path::PathBuf;

use crate::rules::{Problem, Rejection};

/// A config that cannot become a payload.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file (or an image it names) could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The TOML is malformed or has the wrong shape (unknown field, wrong
    /// type, bad size); `message` is the TOML parser's, which points at the
    /// offending key.
    #[error("{}{message}", origin_prefix(origin))]
    Syntax {
        /// The file, when the text came from one.
        origin: Option<PathBuf>,
        message: String,
    },
    /// The config declares no `[[partition]]`.
    #[error("the config declares no [[partition]]")]
    NoPartitions,
    /// A `[board]` field is unusable.
    #[error("board: {field}: {problem}")]
    Board {
        field: &'static str,
        problem: Problem,
    },
    /// A partition field breaks a rule: `partition "NAME": FIELD: PROBLEM`.
    #[error(transparent)]
    Partition(#[from] Rejection),
    /// The encoded plan did not decode back to itself (a bug in the
    /// encoder, never in the config).
    #[error("the encoded plan does not round-trip through Plan::decode: {0}")]
    Encoding(String),
}

fn origin_prefix(origin: &Option<PathBuf>) -> String {
    origin
        .as_ref()
        .map(|path| format!("{}: ", path.display()))
        .unwrap_or_default()
}

impl ConfigError {
    /// The partition the error is about, if any.
    pub fn partition(&self) -> Option<&str> {
        match self {
            ConfigError::Partition(rejection) => Some(&rejection.partition),
            _ => None,
        }
    }

    /// The field the error is about, if any.
    pub fn field(&self) -> Option<&str> {
        match self {
            ConfigError::Partition(rejection) => Some(&rejection.field),
            ConfigError::Board { field, .. } => Some(field),
            _ => None,
        }
    }

    /// The rule that was broken, if the error is about a field.
    pub fn problem(&self) -> Option<&Problem> {
        match self {
            ConfigError::Partition(rejection) => Some(&rejection.problem),
            ConfigError::Board { problem, .. } => Some(problem),
            _ => None,
        }
    }
}
