//! The dsh workspace registry: durable records of the directories a person
//! works in, each with a stable id, a title and an ordered list of sessions.
//!
//! The crate defines two seams and the registry over them:
//!
//! * [`StorageDomain`] — a versioned domain with one global record and named
//!   tables, read once into memory and written one durable write at a time;
//! * [`SessionPersistence`] — immutable [`SessionHeader`]s plus a bounded
//!   per-session log of tool calls, listed without reading any log;
//! * [`Registry`] — `create`, `get`, `list`, `resolve_by_path`, `delete`,
//!   `insert_before`, session archiving, and the per-workspace operations
//!   (`set_title`, `attach_session`, `insert_session_before`,
//!   `detach_session`, `status`).
//!
//! Identity is the canonical realpath: symlinked, trailing-slash and `..`
//! spellings of one directory name one workspace, and the id is a generated
//! UUID, never the path. Create and delete each take several writes, so a
//! *pending-mutation marker* is persisted first and start-up resolves exactly
//! the marked mutation; any other disagreement between the order and the
//! table fails start-up with [`WorkspaceError::Inconsistent`].
//!
//! The crate deliberately knows no backend (no sled, no files of its own), no
//! async runtime and no processes: providers implement the seams, and the
//! host decides how long a registry lives (for one operation, or longer).
//! With the `testing` feature it also ships in-memory providers,
//! fault-injecting wrappers and the conformance suite every provider runs.

#![forbid(unsafe_code)]

mod error;
mod path;
mod registry;
mod seam;
#[cfg(feature = "testing")]
pub mod testing;

pub use error::WorkspaceError;
pub use path::{canonical_dir, lexical_normalize};
pub use registry::{
    DOMAIN_VERSION, PendingRegistry, Registry, SessionDetail, SessionRecord, SessionStart, Startup,
    Workspace, WorkspaceId, WorkspaceStatus,
};
pub use seam::{
    ClientInfo, DomainImage, DomainWrite, LOG_CAPACITY, LogEntry, MAX_SUMMARY_BYTES, SessionHeader,
    SessionId, SessionPersistence, StorageDomain, StorageError,
};
