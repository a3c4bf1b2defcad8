//! The seam's errors, with stable codes.

use std::path::PathBuf;

use crate::{Op, ReadDenied};

/// Why no language server can answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnavailableReason {
    /// No provider is registered for the path's extension.
    NoProvider,
    /// The server's executable was not found.
    BinaryNotFound,
    /// The server's executable was found but could not be started.
    SpawnFailed,
    /// The server died more often than its restart budget allows.
    Crashed,
    /// The path belongs to no project the server can load.
    NoProject,
    /// The server tried to load the path's project and failed (its own
    /// message says why, e.g. `cargo metadata`'s error): an empty answer
    /// would not be proof of nothing.
    LoadFailed,
}

impl UnavailableReason {
    /// The reason as the contract spells it (`no_provider`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            UnavailableReason::NoProvider => "no_provider",
            UnavailableReason::BinaryNotFound => "binary_not_found",
            UnavailableReason::SpawnFailed => "spawn_failed",
            UnavailableReason::Crashed => "crashed",
            UnavailableReason::NoProject => "no_project",
            UnavailableReason::LoadFailed => "load_failed",
        }
    }
}

impl std::fmt::Display for UnavailableReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Why a query failed. Every variant has a stable [`LspError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LspError {
    /// No server can answer for this path; `reason` says why.
    #[error("language server unavailable ({reason}): {message}")]
    Unavailable {
        /// Why.
        reason: UnavailableReason,
        /// What was tried, for a person (e.g. the directories searched, or
        /// the last lines of the server's stderr).
        message: String,
    },
    /// The server is still loading or indexing; retry later.
    #[error("language server is still loading: {}", progress.as_deref().unwrap_or("no progress reported yet"))]
    NotReady {
        /// The latest progress message the server sent, if any.
        progress: Option<String>,
        /// How long this call waited, in milliseconds.
        waited_ms: u64,
    },
    /// The line, column or symbol does not exist in the file.
    #[error("{message}")]
    InvalidPosition {
        /// What is wrong.
        message: String,
        /// The text of the addressed line, when the line exists.
        line_text: Option<String>,
    },
    /// The file does not exist (or is not a readable file).
    #[error("file not found: {}", path.display())]
    FileNotFound {
        /// The path as given.
        path: PathBuf,
    },
    /// The server did not answer in time; the request was cancelled.
    #[error("{op} timed out after {timeout_ms} ms")]
    Timeout {
        /// The op that timed out.
        op: Op,
        /// The time limit that applied.
        timeout_ms: u64,
    },
    /// The server answered with an error.
    #[error("language server error{}: {message}", code.map(|c| format!(" {c}")).unwrap_or_default())]
    ServerError {
        /// The JSON-RPC error code, when the server sent one.
        code: Option<i64>,
        /// The server's message.
        message: String,
    },
    /// The server does not implement this op.
    #[error("{server} does not support {op}")]
    UnsupportedOperation {
        /// The op asked for.
        op: Op,
        /// The server's name.
        server: String,
    },
    /// The caller may not read the queried file (its sandbox refuses it);
    /// nothing of it was read or sent to a server.
    #[error("{}", .0.message(None))]
    ReadDenied(#[from] ReadDenied),
    /// An argument is malformed; `field` names it.
    #[error("invalid argument `{field}`: {message}")]
    InvalidArgument {
        /// The argument's name.
        field: String,
        /// What is wrong with it.
        message: String,
    },
}

impl LspError {
    /// The stable SCREAMING_SNAKE code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            LspError::Unavailable { .. } => "LSP_UNAVAILABLE",
            LspError::NotReady { .. } => "LSP_NOT_READY",
            LspError::InvalidPosition { .. } => "LSP_INVALID_POSITION",
            LspError::FileNotFound { .. } => "LSP_FILE_NOT_FOUND",
            LspError::Timeout { .. } => "LSP_TIMEOUT",
            LspError::ServerError { .. } => "LSP_SERVER_ERROR",
            LspError::UnsupportedOperation { .. } => "LSP_UNSUPPORTED_OPERATION",
            LspError::ReadDenied(_) => "SANDBOX_READ_DENIED",
            LspError::InvalidArgument { .. } => "INVALID_ARGUMENT",
        }
    }

    /// Whether the same call may succeed later without any change.
    pub fn retryable(&self) -> bool {
        match self {
            LspError::NotReady { .. } | LspError::Timeout { .. } => true,
            LspError::Unavailable { .. }
            | LspError::InvalidPosition { .. }
            | LspError::FileNotFound { .. }
            | LspError::ServerError { .. }
            | LspError::UnsupportedOperation { .. }
            | LspError::ReadDenied(_)
            | LspError::InvalidArgument { .. } => false,
        }
    }

    /// The unavailability reason, for `LSP_UNAVAILABLE`.
    pub fn reason(&self) -> Option<UnavailableReason> {
        match self {
            LspError::Unavailable { reason, .. } => Some(*reason),
            LspError::NotReady { .. }
            | LspError::InvalidPosition { .. }
            | LspError::FileNotFound { .. }
            | LspError::Timeout { .. }
            | LspError::ServerError { .. }
            | LspError::UnsupportedOperation { .. }
            | LspError::ReadDenied(_)
            | LspError::InvalidArgument { .. } => None,
        }
    }
}

/// Why a provider could not be registered with the [`crate::Router`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// Two providers claim the same extension.
    #[error("extension {extension} is claimed by both {existing} and {new}")]
    Conflict {
        /// The extension, lowercase with its leading dot.
        extension: String,
        /// The provider already registered for it.
        existing: String,
        /// The provider being registered.
        new: String,
    },
    /// An extension is not lowercase, lacks its leading dot, or contains
    /// another dot.
    #[error(
        "provider {provider} declares malformed extension {extension:?} (want lowercase, one leading dot, e.g. \".rs\")"
    )]
    MalformedExtension {
        /// The extension as declared.
        extension: String,
        /// The provider declaring it.
        provider: String,
    },
}

impl RegisterError {
    /// The stable SCREAMING_SNAKE code of this error.
    pub fn code(&self) -> &'static str {
        match self {
            RegisterError::Conflict { .. } => "LSP_ROUTE_CONFLICT",
            RegisterError::MalformedExtension { .. } => "LSP_ROUTE_MALFORMED",
        }
    }
}
