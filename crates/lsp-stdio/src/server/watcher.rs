//! A server's file watcher: the changes under its root (build output,
//! version control and dependencies left out) sent as
//! `workspace/didChangeWatchedFiles` and noted for the next query's
//! re-sync, and a fence to wait until every change made before a query was
//! seen.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_types::notification::DidChangeWatchedFiles;
use lsp_types::{DidChangeWatchedFilesParams, FileChangeType, FileEvent, Url};
use tokio::sync::watch;

use super::{Server, lock};

/// The name every fence directory starts with.
pub(super) const FENCE_PREFIX: &str = "dsh-lsp-fence-";

/// The file watcher of one server, with a private fence directory: a file
/// created there is seen by the same inotify queue after every earlier
/// event, so waiting for it flushes the changes made before a query.
pub(super) struct Watch {
    /// The watcher (its handler holds it weakly, to watch new top-level
    /// directories).
    _watcher: Arc<Mutex<Option<notify::RecommendedWatcher>>>,
    fence_dir: PathBuf,
    fence_next: Mutex<u64>,
    fence_seen: watch::Sender<u64>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.fence_dir);
    }
}

fn skip_watched(path: &Path) -> bool {
    path.components().any(|c| skip_name(c.as_os_str()))
}

/// Whether a top-level entry of a server's root is watched with all it
/// holds: a directory (not a link to one) that is not skipped.
fn watched_whole(path: &Path) -> bool {
    path.file_name().is_some_and(|name| !skip_name(name))
        && path.symlink_metadata().is_ok_and(|m| m.is_dir())
}

/// Directories whose changes a language server does not need: build
/// output, version control, dependencies and caches.
fn skip_name(name: &std::ffi::OsStr) -> bool {
    matches!(
        name.to_str(),
        Some("target" | ".git" | "node_modules" | "__pycache__" | ".venv")
    )
}

impl Server {
    /// Watches the server's root, or `None` when it cannot be watched.
    pub(super) fn watch(&self) -> Option<Watch> {
        use notify::{EventKind, RecursiveMode, Watcher, event::ModifyKind};
        static FENCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let fence_dir = std::env::temp_dir().join(format!(
            "{FENCE_PREFIX}{}-{}",
            std::process::id(),
            FENCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        if let Err(e) = std::fs::create_dir_all(&fence_dir) {
            tracing::warn!("cannot create {}: {e}", fence_dir.display());
            return None;
        }
        let fence_seen = watch::channel(0u64).0;
        let seen = fence_seen.clone();
        let socket = self.socket.clone();
        let dirty = self.dirty.clone();
        let config = self.config.clone();
        let fences = fence_dir.clone();
        let slot: Arc<Mutex<Option<notify::RecommendedWatcher>>> = Arc::new(Mutex::new(None));
        let weak_slot = Arc::downgrade(&slot);
        let root = self.root.clone();
        let handler = move |res: notify::Result<notify::Event>| {
            let Ok(event) = res else { return };
            if matches!(event.kind, EventKind::Create(_)) {
                // A new top-level directory is watched like the others, from
                // another thread (the watcher's own runs this handler).
                for dir in event
                    .paths
                    .iter()
                    .filter(|p| p.parent() == Some(root.as_path()) && watched_whole(p))
                {
                    let (dir, slot) = (dir.clone(), weak_slot.clone());
                    std::thread::spawn(move || {
                        if let Some(slot) = slot.upgrade()
                            && let Some(watcher) = lock(&slot).as_mut()
                        {
                            let _ = watcher.watch(&dir, RecursiveMode::Recursive);
                        }
                    });
                }
            }
            if let Some(n) = event
                .paths
                .iter()
                .filter(|p| p.parent() == Some(fences.as_path()))
                .filter_map(|p| p.file_name()?.to_str()?.parse::<u64>().ok())
                .max()
            {
                seen.send_modify(|s| *s = (*s).max(n));
                return;
            }
            let typ = match event.kind {
                EventKind::Create(_) => FileChangeType::CREATED,
                EventKind::Modify(ModifyKind::Metadata(_)) => return,
                EventKind::Modify(_) => FileChangeType::CHANGED,
                EventKind::Remove(_) => FileChangeType::DELETED,
                EventKind::Access(_) | EventKind::Any | EventKind::Other => return,
            };
            let mut changes = Vec::new();
            for path in event.paths.iter().filter(|p| !skip_watched(p)) {
                if let Ok(uri) = Url::from_file_path(path) {
                    changes.push(FileEvent { uri, typ });
                }
                if config.language_id(path).is_some() {
                    let mut d = lock(&dirty);
                    if d.len() < 4096 && !d.contains(path) {
                        d.push(path.clone());
                    }
                }
            }
            if !changes.is_empty() {
                let _ =
                    socket.notify::<DidChangeWatchedFiles>(DidChangeWatchedFilesParams { changes });
            }
        };
        let fail = |e: notify::Error| {
            tracing::warn!("cannot watch {}: {e}", self.root.display());
            let _ = std::fs::remove_dir_all(&fence_dir);
        };
        let mut watcher = match notify::recommended_watcher(handler) {
            Ok(w) => w,
            Err(e) => {
                fail(e);
                return None;
            }
        };
        // The root and its top-level directories, but not build output,
        // version control or dependencies: a Rust project's `target/` alone
        // can be tens of thousands of directories, each a watch to add and
        // a stream of events during every build.
        let watched = watcher
            .watch(&fence_dir, RecursiveMode::NonRecursive)
            .and_then(|()| watcher.watch(&self.root, RecursiveMode::NonRecursive));
        if let Err(e) = watched {
            fail(e);
            return None;
        }
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for entry in entries.flatten() {
                if watched_whole(&entry.path())
                    && let Err(e) = watcher.watch(&entry.path(), RecursiveMode::Recursive)
                {
                    tracing::warn!("cannot watch {}: {e}", entry.path().display());
                }
            }
        }
        *lock(&slot) = Some(watcher);
        Some(Watch {
            _watcher: slot,
            fence_dir,
            fence_next: Mutex::new(0),
            fence_seen,
        })
    }

    /// Waits until the watcher has handled every file change made before
    /// this call (bounded; without a watcher, returns at once).
    pub async fn flush_watcher(&self) {
        let Some(w) = &self.watcher else { return };
        let n = {
            let mut next = lock(&w.fence_next);
            *next += 1;
            *next
        };
        let fence = w.fence_dir.join(n.to_string());
        if std::fs::write(&fence, b"").is_err() {
            return;
        }
        let mut rx = w.fence_seen.subscribe();
        if tokio::time::timeout(Duration::from_secs(2), rx.wait_for(|seen| *seen >= n))
            .await
            .is_err()
        {
            tracing::warn!("file watcher of {} lags", self.root.display());
        }
        let _ = std::fs::remove_file(&fence);
    }
}
