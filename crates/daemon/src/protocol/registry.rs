//! The registry operations of `dsh workspace …` and `dsh session …` (the
//! `registry` kind) and their results, as they cross the socket.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use workspace::{SessionDetail, SessionId, SessionRecord, Workspace, WorkspaceId};

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
