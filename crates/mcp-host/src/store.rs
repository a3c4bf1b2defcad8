//! The workspace store as the host uses it: held open for the daemon's
//! whole life, or taken for one operation at a time by a standalone
//! server.
//!
//! A daemon is the store's only opener: [`HeldStore`] opens sled once,
//! loads the registry once, and serves every registry operation and every
//! session record from memory, each write flushed before it returns. So no
//! operation pays for a reopen, and sled never writes the snapshot a
//! reopen after writes costs (a kill during that write is sled's known way
//! to a store that no longer opens). After an I/O error the handle is
//! dropped and the next operation reopens it. When a daemon of another
//! version takes the store over, this daemon's store forwards the session
//! records of the connections it still serves to the new daemon. Those
//! who show the registry (the page) learn of its changes through
//! [`HeldStore::changes`].

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use workspace::{Registry, SessionPersistence as _, SessionStart, StorageError, WorkspaceError};
use workspace_sled::{OpenStore, SledDomain, SledSessions, Store, StoreOptions};

use daemon_wire::records::SessionRecordOp;

/// The registry type on sled.
pub type SledRegistry = Registry<SledDomain, SledSessions>;

/// Where a daemon that handed its store over sends the session records
/// of the connections it still serves: to the daemon that has the store
/// now (the server says how; the store knows no socket).
pub type Forward = std::sync::Arc<dyn Fn(Vec<SessionRecordOp>) -> Result<(), String> + Send + Sync>;

enum Held {
    Open(Box<SledRegistry>),
    /// Not open: opened again by the next operation (after an I/O error).
    Closed,
    /// Handed over to the daemon listening on this socket; records go
    /// there.
    HandedOver(PathBuf, Forward),
}

/// The store held open by a daemon for its life.
pub struct HeldStore {
    dir: PathBuf,
    lock_wait: std::time::Duration,
    state: Mutex<Held>,
    /// Moves on after each operation that may have changed the registry.
    changed: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for HeldStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldStore")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

fn handed_over(to: &Path) -> WorkspaceError {
    WorkspaceError::Storage(StorageError::Io {
        message: format!(
            "this daemon handed the store over to a newer dsh daemon (socket {}); use that one",
            to.display()
        ),
    })
}

/// Errors after which the open handle must not be used again.
fn poisons(error: &WorkspaceError) -> bool {
    matches!(
        error,
        WorkspaceError::Storage(StorageError::Io { .. } | StorageError::Poisoned { .. })
            | WorkspaceError::Poisoned
            | WorkspaceError::RollbackFailed { .. }
    )
}

impl HeldStore {
    /// Opens the store in `dir` (waiting up to `lock_wait` for a process
    /// that holds it for one operation) and loads the registry.
    pub fn open(dir: &Path, lock_wait: std::time::Duration) -> Result<Self, WorkspaceError> {
        let store = Self {
            dir: dir.to_path_buf(),
            lock_wait,
            state: Mutex::new(Held::Closed),
            changed: tokio::sync::watch::Sender::new(0),
        };
        store.with_registry(|_| Ok(()))?;
        Ok(store)
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// A receiver whose value moves on after each operation that may have
    /// changed the registry (a registry command that mutates, a new
    /// session).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Tells the receivers of [`HeldStore::changes`] that the registry
    /// may have changed.
    pub fn announce_change(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    fn reopen(&self) -> Result<Box<SledRegistry>, WorkspaceError> {
        // The registry's seams keep the open store (and its lock) alive.
        let open = OpenStore::open(&self.dir, self.lock_wait)?;
        Ok(Box::new(open.registry()?))
    }

    /// Runs `action` on the registry (blocking: call it off the async
    /// workers). Every write in it is flushed before it returns.
    pub fn with_registry<T>(
        &self,
        action: impl FnOnce(&mut SledRegistry) -> Result<T, WorkspaceError>,
    ) -> Result<T, WorkspaceError> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Held::HandedOver(to, _) = &*state {
            return Err(handed_over(to));
        }
        if matches!(*state, Held::Closed) {
            *state = Held::Open(self.reopen()?);
        }
        let Held::Open(registry) = &mut *state else {
            return Err(WorkspaceError::Poisoned);
        };
        let result = action(registry);
        if let Err(e) = &result
            && poisons(e)
        {
            tracing::warn!("the store failed ({e}); it is reopened for the next operation");
            *state = Held::Closed;
        }
        result
    }

    /// Persists one session record (blocking). After a hand-over the
    /// record goes to the daemon that has the store now.
    pub fn record(&self, op: SessionRecordOp) -> Result<Option<SessionStart>, WorkspaceError> {
        let forward_to = match &*self.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Held::HandedOver(to, forward) => Some((to.clone(), forward.clone())),
            Held::Open(_) | Held::Closed => None,
        };
        if let Some((to, forward)) = forward_to {
            // The new daemon may still be opening the store: retry for a
            // while before the record is given up.
            let began = std::time::Instant::now();
            let mut pause = std::time::Duration::from_millis(10);
            loop {
                match forward(vec![op.clone()]) {
                    Ok(()) => return Ok(None),
                    Err(e) if began.elapsed() > std::time::Duration::from_secs(15) => {
                        return Err(WorkspaceError::Storage(StorageError::Io {
                            message: format!("forwarding to the daemon at {}: {e}", to.display()),
                        }));
                    }
                    Err(_) => {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(std::time::Duration::from_millis(200));
                    }
                }
            }
        }
        let begins = matches!(op, SessionRecordOp::Begin { .. });
        let recorded = self.with_registry(|registry| match op {
            SessionRecordOp::Begin { header } => registry.begin_session(&header).map(Some),
            SessionRecordOp::Log { session, entries } => {
                registry.session_store().append_logs(session, &entries)?;
                Ok(None)
            }
        });
        if begins {
            self.announce_change();
        }
        recorded
    }

    /// Closes the store (every write was flushed when it was made) and
    /// has `forward` send later records to the daemon at `to`.
    pub fn hand_over(&self, to: &Path, forward: Forward) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        *state = Held::HandedOver(to.to_path_buf(), forward);
    }

    /// Closes the store for good (the daemon is exiting).
    pub fn close(&self) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if matches!(*state, Held::Open(_)) {
            *state = Held::Closed;
        }
    }
}

/// How a server reaches the store.
#[derive(Debug, Clone)]
pub enum StoreAccess {
    /// The daemon's store, held open.
    Held(std::sync::Arc<HeldStore>),
    /// A standalone server's: one locked span per operation.
    PerOperation(Store),
}

impl StoreAccess {
    /// A standalone server's access to the store in `dir`.
    pub fn per_operation(dir: &Path) -> Self {
        Self::PerOperation(Store::with_options(dir, StoreOptions::default()))
    }

    /// Persists one session record (blocking).
    pub fn record(&self, op: SessionRecordOp) -> Result<Option<SessionStart>, WorkspaceError> {
        match self {
            StoreAccess::Held(held) => held.record(op),
            StoreAccess::PerOperation(store) => match op {
                SessionRecordOp::Begin { header } => store.begin_session(&header).map(Some),
                SessionRecordOp::Log { session, entries } => {
                    let open = store.open()?;
                    open.sessions().append_logs(session, &entries)?;
                    Ok(None)
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use std::time::Duration;
    use workspace::{LogEntry, SessionHeader, SessionId};

    #[test]
    fn a_held_store_is_the_only_opener_and_serves_from_memory() {
        let tmp = tempfile::tempdir().unwrap();
        let held = HeldStore::open(tmp.path(), Duration::from_secs(5)).unwrap();
        let dir = tmp.path().join("ws");
        std::fs::create_dir(&dir).unwrap();
        let created = held.with_registry(|r| r.create(&dir, Some("t"))).unwrap();
        // Another opener waits for the lock and gives up: the daemon holds it.
        let other = Store::with_options(
            tmp.path(),
            StoreOptions {
                lock_wait: Duration::from_millis(50),
            },
        );
        assert!(matches!(
            other.list_workspaces(),
            Err(WorkspaceError::Storage(StorageError::Busy { .. }))
        ));
        held.close();
        // Closed, the write is on disk for the next opener.
        assert_eq!(other.list_workspaces().unwrap(), vec![created]);
    }

    #[test]
    fn records_begin_a_session_and_append_to_its_log() {
        let tmp = tempfile::tempdir().unwrap();
        let held = HeldStore::open(tmp.path(), Duration::from_secs(5)).unwrap();
        let header = SessionHeader {
            id: SessionId::new_random(),
            cwd: Some(tmp.path().to_path_buf()),
            created_at: chrono::Utc::now(),
            client: None,
        };
        let start = held
            .record(SessionRecordOp::Begin {
                header: header.clone(),
            })
            .unwrap()
            .unwrap();
        assert!(start.workspace.is_some());
        let entry = LogEntry::new(chrono::Utc::now(), "bash", "{}", "OK", 3);
        held.record(SessionRecordOp::Log {
            session: header.id,
            entries: vec![entry.clone()],
        })
        .unwrap();
        let detail = held.with_registry(|r| r.session_detail(header.id)).unwrap();
        assert_eq!(detail.log, vec![entry]);
    }
}
