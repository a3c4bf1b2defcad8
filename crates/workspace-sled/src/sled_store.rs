//! The two seams on one open sled database, guarded by the store's file lock.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use workspace::{
    DomainImage, DomainWrite, LOG_CAPACITY, LogEntry, Registry, SessionHeader, SessionId,
    SessionPersistence, StorageDomain, StorageError, WorkspaceError,
};

const GLOBAL_TREE: &str = "workspace/global";
const GLOBAL_KEY: &[u8] = b"global";
const TABLE_PREFIX: &str = "workspace/table/";
const HEADERS_TREE: &str = "sessions/headers";
const LOG_TREE: &str = "sessions/log";

struct Handle {
    // Field order is drop order: the database closes, then what it wrote is
    // made private, then the lock goes.
    db: sled::Db,
    poisoned: Mutex<Option<String>>,
    _private: PrivateOnDrop,
    _lock: Flock<File>,
}

/// Makes the store's files private when dropped (after the database closed).
struct PrivateOnDrop(PathBuf);

impl Drop for PrivateOnDrop {
    fn drop(&mut self) {
        // Best effort: the directory itself is already 0700.
        let _ = make_private(&self.0);
    }
}

/// Creates the store directory, 0700 (its parents as the umask says).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    if let Some(parent) = dir.parent()
        && !parent.as_os_str().is_empty()
    {
        std::fs::create_dir_all(parent)?;
    }
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Makes the store readable by its owner only: the store directory and
/// every directory sled keeps under `db/` 0700, the lock and sled's files
/// 0600 (sled creates them 0644 less the umask). Nothing else in the
/// directory is touched, and symlinks are not followed.
fn make_private(dir: &Path) -> std::io::Result<()> {
    fn tighten(path: &Path, meta: &std::fs::Metadata, mode: u32) -> std::io::Result<()> {
        if meta.permissions().mode() & 0o777 != mode {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        }
        Ok(())
    }
    tighten(dir, &std::fs::symlink_metadata(dir)?, 0o700)?;
    let lock = dir.join("lock");
    if let Ok(meta) = std::fs::symlink_metadata(&lock)
        && meta.is_file()
    {
        tighten(&lock, &meta, 0o600)?;
    }
    let mut pending = vec![dir.join("db")];
    while let Some(dir) = pending.pop() {
        let meta = match std::fs::symlink_metadata(&dir) {
            Ok(meta) if meta.is_dir() => meta,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        tighten(&dir, &meta, 0o700)?;
        for entry in std::fs::read_dir(&dir)? {
            let path = entry?.path();
            let meta = match std::fs::symlink_metadata(&path) {
                Ok(meta) => meta,
                // sled renames and removes snapshot files as it goes.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if meta.is_dir() {
                pending.push(path);
            } else if meta.is_file() {
                match tighten(&path, &meta, 0o600) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    other => other?,
                }
            }
        }
    }
    Ok(())
}

/// Removes the snapshot files a writer killed mid-write left behind. sled
/// (0.34) writes a new snapshot as `snap.N.generating` and renames it to
/// `snap.N` once complete, but on open it reads the newest `snap.*` file,
/// `.generating` ones included: one left half-written by a kill makes the
/// store fail to open with "Read corrupted data". sled writes snapshots
/// only while it opens, and this runs with the store's lock held before
/// sled opens, so no such file is being written now; the complete
/// snapshot before it, and the log, still hold everything acknowledged.
fn remove_torn_snapshots(db_path: &Path) -> std::io::Result<()> {
    let entries = match std::fs::read_dir(db_path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in entries {
        let path = entry?.path();
        let torn = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("snap.") && n.ends_with(".generating"));
        if torn {
            std::fs::remove_file(&path)?;
        }
    }
    Ok(())
}

/// The store, open and locked for the span of one operation. Cheap to clone;
/// the lock is released when the last clone (and every seam handle) is dropped.
#[derive(Clone)]
pub struct OpenStore {
    handle: Arc<Handle>,
}

fn io(e: impl std::fmt::Display) -> StorageError {
    StorageError::Io {
        message: e.to_string(),
    }
}

impl OpenStore {
    /// Takes the store's lock (waiting up to `lock_wait`) and opens sled under `dir`.
    pub fn open(dir: &Path, lock_wait: Duration) -> Result<Self, StorageError> {
        let started = Instant::now();
        create_private_dir(dir).map_err(|e| io(format!("cannot create {}: {e}", dir.display())))?;
        let lock_path = dir.join("lock");
        let mut file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&lock_path)
            .map_err(|e| io(format!("cannot open {}: {e}", lock_path.display())))?;
        let busy = |dir: &Path| StorageError::Busy {
            dir: dir.to_owned(),
            waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        };
        let mut backoff = Duration::from_millis(1);
        let lock = loop {
            match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
                Ok(lock) => break lock,
                Err((f, Errno::EWOULDBLOCK | Errno::EINTR)) => {
                    file = f;
                    let elapsed = started.elapsed();
                    if elapsed >= lock_wait {
                        return Err(busy(dir));
                    }
                    std::thread::sleep(backoff.min(lock_wait - elapsed));
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err((_, e)) => return Err(io(format!("cannot lock {}: {e}", lock_path.display()))),
            }
        };
        let db_path = dir.join("db");
        remove_torn_snapshots(&db_path).map_err(|e| {
            io(format!(
                "cannot clear a half-written snapshot in {}: {e}",
                db_path.display()
            ))
        })?;
        // sled takes a lock of its own; in this process a just-closed database
        // may hold it for a moment longer, so that one is retried too.
        let db = loop {
            match sled::Config::new()
                .path(&db_path)
                .flush_every_ms(None)
                .open()
            {
                Ok(db) => break db,
                Err(sled::Error::Io(e)) if e.to_string().contains("could not acquire lock") => {
                    let elapsed = started.elapsed();
                    if elapsed >= lock_wait {
                        return Err(busy(dir));
                    }
                    std::thread::sleep(backoff.min(lock_wait - elapsed));
                    backoff = (backoff * 2).min(Duration::from_millis(50));
                }
                Err(e) => {
                    return Err(io(format!(
                        "cannot open the store at {}: {e}",
                        dir.display()
                    )));
                }
            }
        };
        // What sled created (its config, log, snapshot) is private before
        // anything is written to it.
        make_private(dir).map_err(|e| io(format!("cannot make {} private: {e}", dir.display())))?;
        Ok(Self {
            handle: Arc::new(Handle {
                db,
                poisoned: Mutex::new(None),
                _private: PrivateOnDrop(dir.to_path_buf()),
                _lock: lock,
            }),
        })
    }

    /// The storage-domain seam on this store.
    pub fn domain(&self) -> SledDomain {
        SledDomain {
            store: self.clone(),
        }
    }

    /// The session-persistence seam on this store.
    pub fn sessions(&self) -> SledSessions {
        SledSessions {
            store: self.clone(),
        }
    }

    /// Starts a registry on this store (recovery, checks, bootstrap).
    pub fn registry(&self) -> Result<Registry<SledDomain, SledSessions>, WorkspaceError> {
        Registry::open(self.domain(), self.sessions())
    }

    /// How many handles share this open store (the harness of the tests reads it).
    pub fn handles(&self) -> usize {
        Arc::strong_count(&self.handle)
    }

    /// Runs one sled action: refused when poisoned; an error poisons.
    fn run<T>(&self, action: impl FnOnce(&sled::Db) -> sled::Result<T>) -> Result<T, StorageError> {
        let mut poisoned = self
            .handle
            .poisoned
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(first) = poisoned.as_ref() {
            return Err(StorageError::Poisoned {
                first: first.clone(),
            });
        }
        action(&self.handle.db).map_err(|e| {
            let message = e.to_string();
            *poisoned = Some(message.clone());
            StorageError::Io { message }
        })
    }

    /// Runs a write and flushes before returning.
    fn durable(
        &self,
        action: impl FnOnce(&sled::Db) -> sled::Result<()>,
    ) -> Result<(), StorageError> {
        self.run(|db| {
            action(db)?;
            db.flush()?;
            Ok(())
        })
    }
}

/// The storage domain on sled: a global tree and one tree per table.
pub struct SledDomain {
    store: OpenStore,
}

impl StorageDomain for SledDomain {
    fn load(&mut self) -> Result<DomainImage, StorageError> {
        self.store.run(|db| {
            let mut image = DomainImage {
                global: db
                    .open_tree(GLOBAL_TREE)?
                    .get(GLOBAL_KEY)?
                    .map(|v| v.to_vec()),
                ..DomainImage::default()
            };
            for name in db.tree_names() {
                let Some(table) = name.strip_prefix(TABLE_PREFIX.as_bytes()) else {
                    continue;
                };
                let table = String::from_utf8_lossy(table).into_owned();
                let rows = image.tables.entry(table).or_default();
                for entry in db.open_tree(&name)?.iter() {
                    let (k, v) = entry?;
                    rows.insert(String::from_utf8_lossy(&k).into_owned(), v.to_vec());
                }
            }
            Ok(image)
        })
    }

    fn write(&mut self, write: DomainWrite) -> Result<(), StorageError> {
        self.store.durable(|db| {
            match write {
                DomainWrite::PutGlobal(v) => {
                    db.open_tree(GLOBAL_TREE)?.insert(GLOBAL_KEY, v)?;
                }
                DomainWrite::PutRow { table, key, value } => {
                    db.open_tree(format!("{TABLE_PREFIX}{table}"))?
                        .insert(key.as_bytes(), value)?;
                }
                DomainWrite::DeleteRow { table, key } => {
                    db.open_tree(format!("{TABLE_PREFIX}{table}"))?
                        .remove(key.as_bytes())?;
                }
            }
            Ok(())
        })
    }
}

/// Session persistence on sled: a header tree keyed by id and one log tree
/// keyed by id and sequence number.
pub struct SledSessions {
    store: OpenStore,
}

fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8], what: &str) -> Result<T, StorageError> {
    serde_json::from_slice(bytes).map_err(|e| StorageError::Corrupt {
        what: format!("{what}: {e}"),
    })
}

fn encode<T: serde::Serialize>(value: &T) -> Result<Vec<u8>, StorageError> {
    serde_json::to_vec(value).map_err(|e| StorageError::Corrupt {
        what: format!("cannot encode: {e}"),
    })
}

impl SessionPersistence for SledSessions {
    fn list_headers(&mut self) -> Result<Vec<SessionHeader>, StorageError> {
        let raw = self.store.run(|db| {
            db.open_tree(HEADERS_TREE)?
                .iter()
                .values()
                .map(|v| v.map(|v| v.to_vec()))
                .collect::<Result<Vec<_>, _>>()
        })?;
        raw.iter().map(|v| decode(v, "a session header")).collect()
    }

    fn header(&mut self, id: SessionId) -> Result<Option<SessionHeader>, StorageError> {
        let raw = self
            .store
            .run(|db| db.open_tree(HEADERS_TREE)?.get(id.0.as_bytes()))?;
        raw.map(|v| decode(&v, &format!("the header of session {id}")))
            .transpose()
    }

    fn put_header(&mut self, header: &SessionHeader) -> Result<(), StorageError> {
        let value = encode(header)?;
        self.store.durable(|db| {
            db.open_tree(HEADERS_TREE)?
                .insert(header.id.0.as_bytes(), value)
                .map(drop)
        })
    }

    fn append_log(&mut self, id: SessionId, entry: &LogEntry) -> Result<(), StorageError> {
        self.append_logs(id, std::slice::from_ref(entry))
    }

    fn append_logs(&mut self, id: SessionId, entries: &[LogEntry]) -> Result<(), StorageError> {
        if entries.is_empty() {
            return Ok(());
        }
        let values = entries.iter().map(encode).collect::<Result<Vec<_>, _>>()?;
        self.store.durable(|db| {
            let tree = db.open_tree(LOG_TREE)?;
            let prefix = id.0.as_bytes();
            // One scan of the stored keys, one batch, one flush: the new
            // entries, and the removal of the oldest beyond the capacity
            // (new ones included, when a batch alone is longer than the log
            // may be).
            let stored = tree
                .scan_prefix(prefix)
                .keys()
                .collect::<Result<Vec<_>, _>>()?;
            let next = stored.last().map_or(0, |key| seq_of(key).saturating_add(1));
            let excess = (stored.len() + values.len()).saturating_sub(LOG_CAPACITY);
            let mut batch = sled::Batch::default();
            for key in stored.iter().take(excess) {
                batch.remove(key.clone());
            }
            let new_dropped = excess.saturating_sub(stored.len());
            for (offset, value) in values.into_iter().enumerate().skip(new_dropped) {
                batch.insert(log_key(id, next.saturating_add(offset as u64)), value);
            }
            tree.apply_batch(batch)
        })
    }

    fn read_log(&mut self, id: SessionId) -> Result<Vec<LogEntry>, StorageError> {
        let raw = self.store.run(|db| {
            db.open_tree(LOG_TREE)?
                .scan_prefix(id.0.as_bytes())
                .values()
                .map(|v| v.map(|v| v.to_vec()))
                .collect::<Result<Vec<_>, _>>()
        })?;
        raw.iter()
            .map(|v| decode(v, &format!("a log entry of session {id}")))
            .collect()
    }

    fn last_log_entry(&mut self, id: SessionId) -> Result<Option<LogEntry>, StorageError> {
        let raw = self.store.run(|db| {
            db.open_tree(LOG_TREE)?
                .scan_prefix(id.0.as_bytes())
                .values()
                .next_back()
                .transpose()
                .map(|v| v.map(|v| v.to_vec()))
        })?;
        raw.map(|v| decode(&v, &format!("a log entry of session {id}")))
            .transpose()
    }
}

fn log_key(id: SessionId, seq: u64) -> Vec<u8> {
    let mut key = id.0.as_bytes().to_vec();
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

fn seq_of(key: &[u8]) -> u64 {
    let mut seq = [0u8; 8];
    if let Some(tail) = key.get(16..24) {
        seq.copy_from_slice(tail);
    }
    u64::from_be_bytes(seq)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn an_io_error_poisons_the_handle_until_the_store_is_reopened() {
        let tmp = tempfile::tempdir().unwrap();
        let open = OpenStore::open(tmp.path(), Duration::from_secs(5)).unwrap();
        let mut domain = open.domain();
        domain
            .write(DomainWrite::PutGlobal(b"{}".to_vec()))
            .unwrap();
        let failed = open.run(|_| -> sled::Result<()> {
            Err(sled::Error::Io(std::io::Error::other("disk on fire")))
        });
        assert_eq!(
            failed,
            Err(StorageError::Io {
                message: "IO error: disk on fire".into()
            })
        );
        let refused = domain.write(DomainWrite::PutGlobal(b"{\"x\":1}".to_vec()));
        assert_eq!(
            refused,
            Err(StorageError::Poisoned {
                first: "IO error: disk on fire".into()
            })
        );
        assert_eq!(
            open.sessions().list_headers().map_err(|e| e.code()),
            Err("STORAGE_POISONED")
        );
        drop((domain, open));
        let reopened = OpenStore::open(tmp.path(), Duration::from_secs(5)).unwrap();
        assert_eq!(
            reopened.domain().load().unwrap().global,
            Some(b"{}".to_vec())
        );
    }
}
