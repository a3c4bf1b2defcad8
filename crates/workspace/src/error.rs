//! The registry's one error enum.

use std::path::PathBuf;

use crate::WorkspaceId;
use crate::seam::{SessionId, StorageError};

/// Everything the registry can fail with; [`code`](WorkspaceError::code) is stable.
#[derive(Debug, thiserror::Error)]
pub enum WorkspaceError {
    /// The path does not exist (the original `ENOENT`).
    #[error("{path} does not exist: {source}")]
    PathNotFound {
        /// The path as given.
        path: PathBuf,
        /// The error realpath returned.
        source: std::io::Error,
    },
    /// The path could not be resolved for another reason (permissions, a loop, …).
    #[error("cannot resolve {path}: {source}")]
    PathUnresolvable {
        /// The path as given.
        path: PathBuf,
        /// The error realpath returned.
        source: std::io::Error,
    },
    /// The path exists but is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// The canonical path.
        path: PathBuf,
    },
    /// No workspace has this id.
    #[error("unknown workspace {0}")]
    UnknownWorkspace(WorkspaceId),
    /// No session header has this id.
    #[error("unknown session {0}")]
    UnknownSession(SessionId),
    /// A workspace move names an anchor that is not in the order.
    #[error("invalid workspace order: {reason}")]
    WorkspaceOrderInvalid {
        /// What is wrong.
        reason: String,
    },
    /// A session move names a session or anchor that is not on the workspace's list.
    #[error("invalid session move: {reason}")]
    WorkspaceMoveInvalid {
        /// What is wrong.
        reason: String,
    },
    /// The session's header has no cwd (a legacy session).
    #[error("session {session} has no cwd")]
    SessionCwdMissing {
        /// The session.
        session: SessionId,
    },
    /// The session's cwd cannot be resolved to an existing path.
    #[error("session {session}'s cwd {cwd} cannot be resolved: {reason}")]
    SessionCwdUnresolvable {
        /// The session.
        session: SessionId,
        /// The header's cwd.
        cwd: PathBuf,
        /// Why it cannot be resolved.
        reason: String,
    },
    /// The session's cwd resolves to something that is not a directory.
    #[error("session {session}'s cwd {cwd} is not a directory")]
    SessionCwdNotDirectory {
        /// The session.
        session: SessionId,
        /// The header's cwd.
        cwd: PathBuf,
    },
    /// The session's canonical cwd is not the workspace's path.
    #[error("session {session}'s cwd {cwd} is not the workspace's directory {path}")]
    SessionCwdMismatch {
        /// The session.
        session: SessionId,
        /// The session's canonical cwd.
        cwd: PathBuf,
        /// The workspace's path.
        path: PathBuf,
    },
    /// A title is empty or too long.
    #[error("invalid title: {reason}")]
    InvalidTitle {
        /// What is wrong.
        reason: String,
    },
    /// A session with this id is already stored with a different header.
    #[error("session {0} already exists with a different header")]
    SessionExists(SessionId),
    /// The storage seam failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// A write failed and so did undoing it; start-up recovery resolves what is left.
    #[error("{error}; rolling back also failed: {rollback}")]
    RollbackFailed {
        /// The write that failed.
        error: StorageError,
        /// The rollback write that failed.
        rollback: StorageError,
    },
    /// The stored state is inconsistent without a pending-mutation marker to explain it.
    #[error("the workspace store is inconsistent: {}", problems.join("; "))]
    Inconsistent {
        /// Every problem found (at most 20).
        problems: Vec<String>,
    },
    /// The store was written by a newer version of this registry.
    #[error("the workspace store has version {found}; this build reads version {supported}")]
    UnsupportedVersion {
        /// The version found.
        found: u32,
        /// The version this build reads.
        supported: u32,
    },
    /// An earlier rollback failed, so memory may disagree with the store; reopen it.
    #[error("the registry is poisoned by a failed rollback; reopen the store")]
    Poisoned,
}

impl WorkspaceError {
    /// The stable SCREAMING_SNAKE error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::PathNotFound { .. } => "PATH_NOT_FOUND",
            Self::PathUnresolvable { .. } => "PATH_UNRESOLVABLE",
            Self::NotADirectory { .. } => "NOT_A_DIRECTORY",
            Self::UnknownWorkspace(_) => "UNKNOWN_WORKSPACE",
            Self::UnknownSession(_) => "UNKNOWN_SESSION",
            Self::WorkspaceOrderInvalid { .. } => "WORKSPACE_ORDER_INVALID",
            Self::WorkspaceMoveInvalid { .. } => "WORKSPACE_MOVE_INVALID",
            Self::SessionCwdMissing { .. } => "SESSION_CWD_MISSING",
            Self::SessionCwdUnresolvable { .. } => "SESSION_CWD_UNRESOLVABLE",
            Self::SessionCwdNotDirectory { .. } => "SESSION_CWD_NOT_DIRECTORY",
            Self::SessionCwdMismatch { .. } => "SESSION_CWD_MISMATCH",
            Self::InvalidTitle { .. } => "INVALID_TITLE",
            Self::SessionExists(_) => "SESSION_EXISTS",
            Self::Storage(e) => e.code(),
            Self::RollbackFailed { .. } => "ROLLBACK_FAILED",
            Self::Inconsistent { .. } => "STORE_INCONSISTENT",
            Self::UnsupportedVersion { .. } => "UNSUPPORTED_VERSION",
            Self::Poisoned => "REGISTRY_POISONED",
        }
    }
}
