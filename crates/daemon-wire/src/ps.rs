//! The reply to `ps`: every connection of the daemon with its terminals
//! and jobs, and its language servers (`dsh ps --json` prints it).

use serde::{Deserialize, Serialize};

pub use crate::snapshot::{ConnectionRow, DetachedRow, JobRow, TerminalRow};

/// The whole snapshot (`dsh ps --json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Snapshot {
    /// The daemon.
    pub daemon: DaemonRow,
    /// Its connections, oldest first.
    pub connections: Vec<ConnectionRow>,
    /// The language servers it runs, by root.
    #[serde(default)]
    pub language_servers: Vec<LanguageServerRow>,
}

/// One language server process.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LanguageServerRow {
    /// Its configured name (`rust-analyzer`, …).
    pub server: String,
    /// Its pid (its session id).
    pub pid: i32,
    /// The project root it serves.
    pub root: String,
    /// The project's load error or warning the server reports, when one
    /// stands: queries on that project say it too.
    pub problem: Option<String>,
}

/// The daemon itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DaemonRow {
    /// Its pid.
    pub pid: u32,
    /// Its version.
    pub version: String,
    /// Seconds since it started.
    pub uptime_s: u64,
}

/// What a person's decision about detached work did.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DetachedDone {
    /// `ended` or `given`.
    pub done: String,
    /// The terminals it concerned, `pty-N`.
    pub terminals: Vec<String>,
    /// The jobs it concerned.
    pub jobs: Vec<String>,
}
