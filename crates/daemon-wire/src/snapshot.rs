//! The rows of the live snapshot of a daemon, as JSON carries them: one
//! shape for `dsh ps --json` (this crate's `ps`), the page's
//! `/api/live` and the page itself — a connection with its terminals, its
//! jobs and, when its client went away, its detachment.

use serde::{Deserialize, Serialize};

/// One connected agent (an MCP connection) with its terminals and jobs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
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

/// One terminal of a connected agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TerminalRow {
    /// `pty-N`.
    pub id: String,
    /// Its name.
    pub name: Option<String>,
    /// Its argv, joined.
    pub command: String,
    /// `running`, `exited`, …
    pub status: String,
    /// Whether an agent's send is waiting to settle.
    pub active_send: bool,
    /// Seconds since it last printed (or since it opened).
    pub idle_s: u64,
}

/// One job of a connected agent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobRow {
    /// `kind-N`.
    pub id: String,
    /// Its kind (`bash`, `pty-send`, `subagent`).
    pub kind: String,
    /// Its status (`running`, `completed`, …).
    pub status: String,
    /// What it runs.
    pub label: String,
    /// Its exit code, once it has one.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// What happened, for jobs that failed, were killed or timed out.
    #[serde(default)]
    pub detail: Option<String>,
}

/// A connection whose client went away, its terminals and jobs kept for
/// the agent to take back (`terminal_list` with its resume key) or a
/// person to end (`dsh ps --end N`) or give (`dsh ps --give N --to M`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetachedRow {
    /// Seconds since the client went away.
    pub for_s: u64,
    /// Seconds until its work is ended.
    pub left_s: u64,
}
