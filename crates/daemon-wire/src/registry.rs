//! The registry operations of `dsh workspace …` and `dsh session …` (the
//! `registry` kind) and their results, as they cross the socket.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use workspace::{
    LogEntry, SessionDetail, SessionId, SessionRecord, Workspace, WorkspaceId, WorkspaceStatus,
};

/// One registry operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum RegistryOp {
    /// Every workspace in display order.
    WorkspaceList,
    /// Register a directory (an absolute path: the daemon's working
    /// directory is not the caller's).
    WorkspaceCreate {
        /// The directory.
        path: PathBuf,
        /// Its title.
        title: Option<String>,
    },
    /// One workspace and its sessions.
    WorkspaceShow {
        /// The workspace.
        id: WorkspaceId,
    },
    /// Change a title.
    WorkspaceRename {
        /// The workspace.
        id: WorkspaceId,
        /// The new title.
        title: String,
    },
    /// Move a workspace before another, or to the end.
    WorkspaceMove {
        /// The workspace.
        id: WorkspaceId,
        /// The anchor.
        before: Option<WorkspaceId>,
    },
    /// Forget a workspace.
    WorkspaceRemove {
        /// The workspace.
        id: WorkspaceId,
    },
    /// Sessions, newest first, or one workspace's in its order.
    SessionList {
        /// Only this workspace's.
        workspace: Option<WorkspaceId>,
    },
    /// One session with its log.
    SessionShow {
        /// The session.
        id: SessionId,
    },
    /// Move a session before another of its workspace, or to the end.
    SessionMove {
        /// The session.
        id: SessionId,
        /// The anchor.
        before: Option<SessionId>,
    },
    /// Set or clear a session's archived mark.
    SessionArchive {
        /// The session.
        id: SessionId,
        /// The new mark.
        archived: bool,
    },
}

impl RegistryOp {
    /// Whether the operation may write.
    pub fn mutates(&self) -> bool {
        match self {
            RegistryOp::WorkspaceList
            | RegistryOp::WorkspaceShow { .. }
            | RegistryOp::SessionList { .. }
            | RegistryOp::SessionShow { .. } => false,
            RegistryOp::WorkspaceCreate { .. }
            | RegistryOp::WorkspaceRename { .. }
            | RegistryOp::WorkspaceMove { .. }
            | RegistryOp::WorkspaceRemove { .. }
            | RegistryOp::SessionMove { .. }
            | RegistryOp::SessionArchive { .. } => true,
        }
    }
}

/// `workspace_create`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Created {
    /// The workspace that owns the path now.
    pub workspace: Workspace,
    /// False when the path was already a workspace.
    pub created: bool,
}

/// `workspace_show`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WorkspaceWithSessions {
    /// The workspace.
    pub workspace: Workspace,
    /// Its sessions in order.
    pub sessions: Vec<SessionRecord>,
}

/// `session_list`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionsWithWorkspaces {
    /// The sessions.
    pub sessions: Vec<SessionRecord>,
    /// Every workspace (for titles).
    pub workspaces: Vec<Workspace>,
}

/// `session_show`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SessionWithWorkspace {
    /// The session and its log.
    pub detail: SessionDetail,
    /// Its workspace.
    pub workspace: Option<Workspace>,
}

/// `session_archive`'s result.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Archived {
    /// The mark before.
    pub was: bool,
    /// The session after.
    pub record: SessionRecord,
}

/// A workspace as `--json` prints it: the registry's fields (in its order) plus the live
/// `status` and what a command adds.
#[derive(Serialize)]
pub struct WorkspaceJson<'a> {
    /// The workspace.
    #[serde(flatten)]
    pub workspace: &'a Workspace,
    /// `ok` or `missing` (its directory), as found now.
    pub status: &'static str,
    /// For `create`: whether it was created (else it existed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// For `rm`: removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub removed: Option<bool>,
    /// For `show`: its sessions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sessions: Option<&'a [SessionRecord]>,
}

impl<'a> WorkspaceJson<'a> {
    /// The workspace with its status and nothing added.
    pub fn new(workspace: &'a Workspace) -> Self {
        Self {
            workspace,
            status: status_word(workspace.status()),
            created: None,
            removed: None,
            sessions: None,
        }
    }
}

/// One session as JSON: the registry's fields plus, for `show`, its log.
#[derive(Serialize)]
pub struct SessionJson<'a> {
    /// The session.
    #[serde(flatten)]
    pub session: &'a SessionRecord,
    /// The part of its log shown.
    pub log: &'a [LogEntry],
    /// How many entries its log has.
    pub log_total: usize,
}

/// A workspace's status as the CLI and the page print it.
pub fn status_word(status: WorkspaceStatus) -> &'static str {
    match status {
        WorkspaceStatus::Ok => "ok",
        WorkspaceStatus::MissingDir => "missing",
    }
}
