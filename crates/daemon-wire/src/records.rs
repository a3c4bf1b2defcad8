//! The session records a daemon writes to its store, and forwards (the
//! `record` kind) to the daemon it handed its store over to.

use serde::{Deserialize, Serialize};
use workspace::{LogEntry, SessionHeader, SessionId};

/// One thing the session log writes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum SessionRecordOp {
    /// Record a session's header and attach it to its workspace.
    Begin {
        /// The header.
        header: SessionHeader,
    },
    /// Append tool calls to a session's log.
    Log {
        /// The session.
        session: SessionId,
        /// The calls, oldest first.
        entries: Vec<LogEntry>,
    },
}
