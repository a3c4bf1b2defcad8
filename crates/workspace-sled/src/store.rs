//! The multi-process facade: every operation opens, locks, acts and closes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use workspace::{
    LogEntry, Registry, SessionDetail, SessionHeader, SessionId, SessionPersistence, SessionRecord,
    SessionStart, Workspace, WorkspaceError, WorkspaceId,
};

use crate::sled_store::{OpenStore, SledDomain, SledSessions};

/// How a [`Store`] waits for the store's lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// The longest wait for another process to release the store (default 5 s).
    pub lock_wait: Duration,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            lock_wait: Duration::from_secs(5),
        }
    }
}

/// A store directory shared by every dsh process of a user. Holds nothing
/// open: each method is one locked span (open, re-read, act, flush, close).
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    options: StoreOptions,
}

impl Store {
    /// A store in `dir` (created on first use) with default options.
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self::with_options(dir, StoreOptions::default())
    }

    /// A store in `dir` with the given options.
    pub fn with_options(dir: impl Into<PathBuf>, options: StoreOptions) -> Self {
        Self {
            dir: dir.into(),
            options,
        }
    }

    /// The store directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Opens and locks the store for one span; drop the value to release it.
    pub fn open(&self) -> Result<OpenStore, WorkspaceError> {
        Ok(OpenStore::open(&self.dir, self.options.lock_wait)?)
    }

    /// Runs `action` on a registry freshly loaded under the lock.
    pub fn with_registry<T>(
        &self,
        action: impl FnOnce(&mut Registry<SledDomain, SledSessions>) -> Result<T, WorkspaceError>,
    ) -> Result<T, WorkspaceError> {
        let open = self.open()?;
        let mut registry = open.registry()?;
        action(&mut registry)
    }

    /// `dsh workspace list`: every workspace in display order.
    pub fn list_workspaces(&self) -> Result<Vec<Workspace>, WorkspaceError> {
        self.with_registry(|r| Ok(r.list()))
    }

    /// `dsh workspace create PATH [--title T]`.
    pub fn create_workspace(
        &self,
        path: &Path,
        title: Option<&str>,
    ) -> Result<Workspace, WorkspaceError> {
        self.with_registry(|r| r.create(path, title))
    }

    /// `dsh workspace show ID`.
    pub fn show_workspace(&self, id: WorkspaceId) -> Result<Workspace, WorkspaceError> {
        self.with_registry(|r| r.get(id).ok_or(WorkspaceError::UnknownWorkspace(id)))
    }

    /// `dsh workspace rename ID TITLE`.
    pub fn rename_workspace(
        &self,
        id: WorkspaceId,
        title: &str,
    ) -> Result<Workspace, WorkspaceError> {
        self.with_registry(|r| r.set_title(id, title))
    }

    /// `dsh workspace move ID [--before ID]`: returns every workspace in the new order.
    pub fn move_workspace(
        &self,
        id: WorkspaceId,
        before: Option<WorkspaceId>,
    ) -> Result<Vec<Workspace>, WorkspaceError> {
        self.with_registry(|r| {
            r.insert_before(id, before)?;
            Ok(r.list())
        })
    }

    /// `dsh workspace rm ID`: `false` for an unknown id.
    pub fn remove_workspace(&self, id: WorkspaceId) -> Result<bool, WorkspaceError> {
        self.with_registry(|r| r.delete(id))
    }

    /// `dsh session list [--workspace ID]`.
    pub fn list_sessions(
        &self,
        workspace: Option<WorkspaceId>,
    ) -> Result<Vec<SessionRecord>, WorkspaceError> {
        self.with_registry(|r| r.sessions(workspace))
    }

    /// `dsh session show ID`: the session and its log.
    pub fn show_session(&self, id: SessionId) -> Result<SessionDetail, WorkspaceError> {
        self.with_registry(|r| r.session_detail(id))
    }

    /// `dsh session archive ID`.
    pub fn archive_session(&self, id: SessionId) -> Result<SessionRecord, WorkspaceError> {
        self.with_registry(|r| {
            r.archive_session(id)?;
            Ok(r.session_detail(id)?.session)
        })
    }

    /// `dsh session unarchive ID`.
    pub fn unarchive_session(&self, id: SessionId) -> Result<SessionRecord, WorkspaceError> {
        self.with_registry(|r| {
            r.unarchive_session(id)?;
            Ok(r.session_detail(id)?.session)
        })
    }

    /// Records a new session and attaches it to the workspace owning its cwd
    /// (created on first use), in one locked span.
    pub fn begin_session(&self, header: &SessionHeader) -> Result<SessionStart, WorkspaceError> {
        self.with_registry(|r| r.begin_session(header))
    }

    /// Appends one tool call to a session's bounded log (no registry load).
    pub fn append_log(&self, id: SessionId, entry: &LogEntry) -> Result<(), WorkspaceError> {
        let open = self.open()?;
        Ok(open.sessions().append_log(id, entry)?)
    }

    /// [`begin_session`](Self::begin_session) on tokio's blocking pool.
    pub async fn begin_session_async(
        &self,
        header: SessionHeader,
    ) -> Result<SessionStart, WorkspaceError> {
        let store = self.clone();
        blocking(move || store.begin_session(&header)).await
    }

    /// [`append_log`](Self::append_log) on tokio's blocking pool.
    pub async fn append_log_async(
        &self,
        id: SessionId,
        entry: LogEntry,
    ) -> Result<(), WorkspaceError> {
        let store = self.clone();
        blocking(move || store.append_log(id, &entry)).await
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, WorkspaceError> + Send + 'static,
) -> Result<T, WorkspaceError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(result) => result,
        Err(e) => Err(WorkspaceError::Storage(workspace::StorageError::Io {
            message: format!("the store task failed: {e}"),
        })),
    }
}
