//! The two seams the registry stands on, and their plain data types.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The largest number of log entries a provider keeps per session; older entries are dropped first.
pub const LOG_CAPACITY: usize = 1000;

/// The longest argument summary a log entry keeps, in bytes (longer ones are cut on a char boundary).
pub const MAX_SUMMARY_BYTES: usize = 256;

/// A session id: a UUID chosen by whoever creates the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SessionId(pub Uuid);

impl SessionId {
    /// A fresh random session id.
    pub fn new_random() -> Self {
        Self(Uuid::new_v4())
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl FromStr for SessionId {
    type Err = uuid::Error;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Uuid::parse_str(s.trim()).map(Self)
    }
}

/// The client program on the other end of a session (MCP `clientInfo`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClientInfo {
    /// Client name, e.g. `claude-code`.
    pub name: String,
    /// Client version string.
    pub version: String,
}

/// The immutable header of a session, written once when the session starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionHeader {
    /// The session's id.
    pub id: SessionId,
    /// The directory the session works in; `None` for legacy sessions recorded without one.
    pub cwd: Option<PathBuf>,
    /// When the session was created.
    pub created_at: DateTime<Utc>,
    /// The client that opened the session, when known.
    pub client: Option<ClientInfo>,
}

/// How one logged tool call ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// When the call started.
    pub at: DateTime<Utc>,
    /// The tool's name.
    pub tool: String,
    /// A short summary of the arguments (at most [`MAX_SUMMARY_BYTES`]).
    pub argument_summary: String,
    /// `OK`, or the error code the call returned.
    pub outcome: String,
    /// How long the call took, in milliseconds.
    pub duration_ms: u64,
    /// How a successful call settled, when its tool says: a terminal
    /// send's settle reason (`prompt`, `input_wait`, `pattern`, `exit`,
    /// `idle`, `timeout`), `timeout` for a command that timed out, a job's
    /// status. Absent in entries written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The exit code a successful call reported (a command, a terminal
    /// send that ended at the prompt), when it reported one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i64>,
}

impl LogEntry {
    /// Builds an entry, cutting over-long fields so an entry stays small.
    pub fn new(
        at: DateTime<Utc>,
        tool: &str,
        argument_summary: &str,
        outcome: &str,
        duration_ms: u64,
    ) -> Self {
        Self {
            at,
            tool: cut(tool, 128),
            argument_summary: cut(argument_summary, MAX_SUMMARY_BYTES),
            outcome: cut(outcome, 64),
            duration_ms,
            reason: None,
            exit_code: None,
        }
    }

    /// The entry with how the call settled (see [`LogEntry::reason`] and
    /// [`LogEntry::exit_code`]).
    pub fn with_result(mut self, reason: Option<&str>, exit_code: Option<i64>) -> Self {
        self.reason = reason.map(|r| cut(r, 64));
        self.exit_code = exit_code;
        self
    }
}

/// Cuts `s` to at most `max` bytes on a char boundary.
pub(crate) fn cut(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_owned();
    }
    let mut end = max;
    while end > 0 && !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_owned()
}

/// The whole durable state of one storage domain, as loaded into memory.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainImage {
    /// The domain's one global record, if ever written.
    pub global: Option<Vec<u8>>,
    /// Named tables of rows, keyed by row key.
    pub tables: BTreeMap<String, BTreeMap<String, Vec<u8>>>,
}

/// One durable write to a storage domain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DomainWrite {
    /// Replace the global record.
    PutGlobal(Vec<u8>),
    /// Insert or replace a row.
    PutRow {
        /// Table name.
        table: String,
        /// Row key.
        key: String,
        /// Encoded row.
        value: Vec<u8>,
    },
    /// Remove a row (removing a missing row succeeds).
    DeleteRow {
        /// Table name.
        table: String,
        /// Row key.
        key: String,
    },
}

/// A storage failure, as a provider reports it across the seam.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StorageError {
    /// The medium failed; the write may or may not be on it.
    #[error("storage I/O failed: {message}")]
    Io {
        /// What failed.
        message: String,
    },
    /// An earlier I/O error poisoned this handle; reopen the store.
    #[error("the store handle is poisoned by an earlier I/O error ({first}); reopen the store")]
    Poisoned {
        /// The error that poisoned the handle.
        first: String,
    },
    /// Another process holds the store for longer than the bounded wait.
    #[error(
        "the store at {dir} is held by another dsh process; gave up after waiting {waited_ms} ms"
    )]
    Busy {
        /// The store directory.
        dir: PathBuf,
        /// How long the caller waited for it.
        waited_ms: u64,
    },
    /// A stored value could not be decoded.
    #[error("stored data is corrupt: {what}")]
    Corrupt {
        /// What could not be decoded.
        what: String,
    },
}

impl StorageError {
    /// The stable error code.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Io { .. } => "STORAGE_IO",
            Self::Poisoned { .. } => "STORAGE_POISONED",
            Self::Busy { .. } => "STORE_BUSY",
            Self::Corrupt { .. } => "STORAGE_CORRUPT",
        }
    }
}

/// A versioned storage domain: one global record and named tables.
///
/// Reads happen once, at [`load`](StorageDomain::load); the registry serves
/// every later read from memory. Every [`write`](StorageDomain::write) must be
/// durable on the medium before it returns `Ok`. Writes are not atomic with
/// each other: the registry itself makes multi-write mutations crash-safe.
pub trait StorageDomain {
    /// Reads the domain's whole durable state.
    fn load(&mut self) -> Result<DomainImage, StorageError>;
    /// Applies one write and makes it durable before returning.
    fn write(&mut self, write: DomainWrite) -> Result<(), StorageError>;
}

/// Session persistence: session headers and a bounded per-session log of tool calls.
///
/// Headers are listed and read without reading any log.
pub trait SessionPersistence {
    /// Every stored session header, in no particular order.
    fn list_headers(&mut self) -> Result<Vec<SessionHeader>, StorageError>;
    /// One header, or `None` when no such session is stored.
    fn header(&mut self, id: SessionId) -> Result<Option<SessionHeader>, StorageError>;
    /// Stores a header durably (replacing one with the same id).
    fn put_header(&mut self, header: &SessionHeader) -> Result<(), StorageError>;
    /// Appends a log entry durably, dropping the oldest beyond [`LOG_CAPACITY`].
    fn append_log(&mut self, id: SessionId, entry: &LogEntry) -> Result<(), StorageError>;
    /// Appends entries durably, in order, dropping the oldest beyond
    /// [`LOG_CAPACITY`]: the same as appending them one by one, in one
    /// durable write where the provider can.
    fn append_logs(&mut self, id: SessionId, entries: &[LogEntry]) -> Result<(), StorageError> {
        entries
            .iter()
            .try_for_each(|entry| self.append_log(id, entry))
    }
    /// The session's log, oldest first (at most [`LOG_CAPACITY`] entries).
    fn read_log(&mut self, id: SessionId) -> Result<Vec<LogEntry>, StorageError>;
    /// The session's newest log entry, if any (a provider that can should
    /// read only that one).
    fn last_log_entry(&mut self, id: SessionId) -> Result<Option<LogEntry>, StorageError> {
        Ok(self.read_log(id)?.pop())
    }
}

impl<T: StorageDomain + ?Sized> StorageDomain for &mut T {
    fn load(&mut self) -> Result<DomainImage, StorageError> {
        (**self).load()
    }
    fn write(&mut self, write: DomainWrite) -> Result<(), StorageError> {
        (**self).write(write)
    }
}

impl<T: SessionPersistence + ?Sized> SessionPersistence for &mut T {
    fn list_headers(&mut self) -> Result<Vec<SessionHeader>, StorageError> {
        (**self).list_headers()
    }
    fn header(&mut self, id: SessionId) -> Result<Option<SessionHeader>, StorageError> {
        (**self).header(id)
    }
    fn put_header(&mut self, header: &SessionHeader) -> Result<(), StorageError> {
        (**self).put_header(header)
    }
    fn append_log(&mut self, id: SessionId, entry: &LogEntry) -> Result<(), StorageError> {
        (**self).append_log(id, entry)
    }
    fn append_logs(&mut self, id: SessionId, entries: &[LogEntry]) -> Result<(), StorageError> {
        (**self).append_logs(id, entries)
    }
    fn read_log(&mut self, id: SessionId) -> Result<Vec<LogEntry>, StorageError> {
        (**self).read_log(id)
    }
    fn last_log_entry(&mut self, id: SessionId) -> Result<Option<LogEntry>, StorageError> {
        (**self).last_log_entry(id)
    }
}
