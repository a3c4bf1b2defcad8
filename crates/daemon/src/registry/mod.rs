//! The registry operations behind `dsh workspace …` and `dsh session …`:
//! what a daemon runs on its held store for the CLI and the page
//! ([`execute_held`]; or the CLI runs on a store of its own with
//! `--standalone`), and the one-line messages its errors become. The
//! operations and their results are the protocol's
//! ([`daemon_wire::registry`]).

use std::path::Path;

mod access;
pub use access::RegistryAccess;

use serde::Serialize;
use workspace::{StorageError, WorkspaceError};

use daemon_wire::Failure;
use daemon_wire::registry::{
    Archived, Created, RegistryOp, SessionWithWorkspace, SessionsWithWorkspaces,
    WorkspaceWithSessions,
};
use mcp_host::store::{HeldStore, SledRegistry};

fn json(value: impl Serialize) -> Result<serde_json::Value, WorkspaceError> {
    serde_json::to_value(value).map_err(|e| {
        WorkspaceError::Storage(StorageError::Io {
            message: format!("cannot encode the result: {e}"),
        })
    })
}

/// Runs `op` on `registry`; every write is flushed before this returns.
/// Errors are one line that says what to do next (`data_dir` is named in
/// the ones about the store).
pub fn execute(
    registry: &mut SledRegistry,
    op: &RegistryOp,
    data_dir: &Path,
) -> Result<serde_json::Value, Failure> {
    run(registry, op).map_err(|e| match (&e, op) {
        (
            WorkspaceError::WorkspaceOrderInvalid { .. },
            RegistryOp::WorkspaceMove {
                before: Some(anchor),
                ..
            },
        ) => Failure {
            code: crate::codes::registry(&e),
            message: format!(
                "cannot move before {anchor}: no workspace has that id; `dsh workspace list` shows the ids"
            ),
        },
        _ => explain(e, data_dir),
    })
}

/// Runs `op` on the daemon's held store (blocking: call it off the async
/// workers): the one path of the CLI's registry commands and the page's
/// changes. Every write is flushed before this returns, and then those
/// who show the registry are told ([`HeldStore::changes`]).
pub fn execute_held(held: &HeldStore, op: &RegistryOp) -> Result<serde_json::Value, Failure> {
    let dir = held.dir();
    let result = held
        .with_registry(|r| Ok(execute(r, op, dir)))
        .unwrap_or_else(|e| Err(explain(e, dir)));
    if op.mutates() {
        held.announce_change();
    }
    result
}

fn run(registry: &mut SledRegistry, op: &RegistryOp) -> Result<serde_json::Value, WorkspaceError> {
    match op {
        RegistryOp::WorkspaceList => json(registry.list()),
        RegistryOp::WorkspaceCreate { path, title } => {
            let existed = registry.resolve_by_path(path)?.is_some();
            let workspace = registry.create(path, title.as_deref())?;
            json(Created {
                workspace,
                created: !existed,
            })
        }
        RegistryOp::WorkspaceShow { id } => {
            let workspace = registry
                .get(*id)
                .ok_or(WorkspaceError::UnknownWorkspace(*id))?;
            let sessions = registry.sessions(Some(*id))?;
            json(WorkspaceWithSessions {
                workspace,
                sessions,
            })
        }
        RegistryOp::WorkspaceRename { id, title } => json(registry.set_title(*id, title)?),
        RegistryOp::WorkspaceMove { id, before } => {
            registry.insert_before(*id, *before)?;
            json(registry.list())
        }
        RegistryOp::WorkspaceRemove { id } => {
            let workspace = registry
                .get(*id)
                .ok_or(WorkspaceError::UnknownWorkspace(*id))?;
            registry.delete(*id)?;
            json(workspace)
        }
        RegistryOp::SessionList { workspace } => {
            let sessions = registry.sessions(*workspace)?;
            json(SessionsWithWorkspaces {
                sessions,
                workspaces: registry.list(),
            })
        }
        RegistryOp::SessionShow { id } => {
            let detail = registry.session_detail(*id)?;
            let workspace = detail.session.workspace_id.and_then(|w| registry.get(w));
            json(SessionWithWorkspace { detail, workspace })
        }
        RegistryOp::SessionMove { id, before } => {
            let Some(workspace) = registry
                .list()
                .into_iter()
                .find(|w| w.session_ids.contains(id))
            else {
                // Unknown, or in no workspace.
                registry.session_detail(*id)?;
                return Err(WorkspaceError::WorkspaceMoveInvalid {
                    reason: format!(
                        "session {id} is in no workspace, and only a workspace's sessions are in an order"
                    ),
                });
            };
            json(registry.insert_session_before(workspace.id, *id, *before)?)
        }
        RegistryOp::SessionArchive { id, archived } => {
            let was = registry.is_archived(*id);
            if *archived {
                registry.archive_session(*id)?;
            } else {
                registry.unarchive_session(*id)?;
            }
            let record = registry.session_detail(*id)?.session;
            json(Archived { was, record })
        }
    }
}

/// Runs `op` on the store in `data_dir` itself, for one locked span (the
/// registry commands' `--standalone`): as [`execute`].
pub fn execute_standalone(data_dir: &Path, op: &RegistryOp) -> Result<serde_json::Value, Failure> {
    let store = workspace_sled::Store::new(data_dir);
    match store.with_registry(|r| Ok(execute(r, op, data_dir))) {
        Ok(result) => result,
        Err(e) => Err(explain(e, data_dir)),
    }
}

/// Turns a registry error into one line that says what to do next.
pub fn explain(error: WorkspaceError, data_dir: &Path) -> Failure {
    let dir = data_dir.display();
    let message = match &error {
        WorkspaceError::UnknownWorkspace(id) => {
            format!("no workspace has id {id}; `dsh workspace list` shows the ids")
        }
        WorkspaceError::UnknownSession(id) => {
            format!("no session has id {id}; `dsh session list` shows the ids")
        }
        WorkspaceError::PathNotFound { path, .. } => format!(
            "{} does not exist; give the path of an existing directory",
            path.display()
        ),
        WorkspaceError::NotADirectory { path } => format!(
            "{} is not a directory; a workspace is a directory",
            path.display()
        ),
        WorkspaceError::PathUnresolvable { path, source } => {
            format!("cannot resolve {}: {source}", path.display())
        }
        WorkspaceError::InvalidTitle { reason } => format!("invalid title: {reason}"),
        WorkspaceError::Storage(StorageError::Busy { waited_ms, .. }) => format!(
            "the store at {dir} is held by another dsh process (waited {waited_ms} ms): \
             a dsh daemon holds it for its whole life (run the command without \
             --standalone, or `dsh daemon stop`); any other holder only for one operation, \
             so retrying works"
        ),
        WorkspaceError::Storage(
            StorageError::Io { .. } | StorageError::Poisoned { .. } | StorageError::Corrupt { .. },
        )
        | WorkspaceError::RollbackFailed { .. }
        | WorkspaceError::Poisoned => format!("{error} (store: {dir})"),
        WorkspaceError::Inconsistent { .. } => format!(
            "{error} (store: {dir}); nothing was changed — dsh will not guess how to repair it"
        ),
        WorkspaceError::UnsupportedVersion { .. } => {
            format!("{error} (store: {dir}); use a newer dsh, or another --data-dir")
        }
        WorkspaceError::WorkspaceMoveInvalid { .. } => format!(
            "{error}; `dsh session list --workspace ID` lists a workspace's sessions in their order"
        ),
        WorkspaceError::WorkspaceOrderInvalid { .. }
        | WorkspaceError::SessionCwdMissing { .. }
        | WorkspaceError::SessionCwdUnresolvable { .. }
        | WorkspaceError::SessionCwdNotDirectory { .. }
        | WorkspaceError::SessionCwdMismatch { .. }
        | WorkspaceError::SessionExists(_) => error.to_string(),
    };
    Failure {
        code: crate::codes::registry(&error),
        message,
    }
}
