//! The reply to `ps`: every connection of the daemon with its terminals
//! and jobs, and its language servers (`dsh ps --json` prints it).

use serde::{Deserialize, Serialize};

pub use ui::snapshot::{DetachedRow, JobRow, TerminalRow};

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

/// One MCP connection.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConnectionRow {
    /// Its number in this daemon.
    pub id: u64,
    /// The MCP client's name, once it said it.
    pub client: Option<String>,
    /// The pid of its bridge, when known.
    pub pid: Option<i32>,
    /// The session's directory.
    pub cwd: Option<String>,
    /// The recorded session's id.
    pub session_id: Option<String>,
    /// Its workspace's id.
    pub workspace_id: Option<String>,
    /// Its workspace's title.
    pub workspace: Option<String>,
    /// The preset it is served.
    pub preset: String,
    /// Seconds since it connected.
    pub age_s: u64,
    /// Its terminals.
    pub terminals: Vec<TerminalRow>,
    /// Its jobs.
    pub jobs: Vec<JobRow>,
    /// Set when its client went away and its work is kept detached.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detached: Option<DetachedRow>,
    /// The host of a remote daemon's connection, as `dsh ps` here shows
    /// it (its ids are qualified with it: `devbox:pty-3`); none for this
    /// machine's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
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
