//! The data of the daemon's replies ([`super::Reply::data`]), one type
//! per request kind: the daemon encodes them and the client decodes them,
//! so neither looks a field up by name.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The first line of a one-shot request: accepted, the result follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Accepted {
    /// Always true.
    pub accepted: bool,
}

/// The reply to an `mcp` hello; the MCP session follows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct McpAccepted {
    /// What the person should know about this connection (its config
    /// differs from the daemon's where the daemon's applies).
    #[serde(default)]
    pub warnings: Vec<String>,
}

/// The reply to `status` (and to `stop`: the daemon as it was asked).
/// Every field has a default, as `status` is answered across versions.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Status {
    /// The page, once `dsh ui` asked for it.
    pub page: Option<PageStatus>,
    /// The daemon's pid.
    pub pid: u32,
    /// Its dsh version.
    pub version: String,
    /// Its socket.
    pub socket: PathBuf,
    /// Its data directory.
    pub data_dir: PathBuf,
    /// Its log file.
    pub log: PathBuf,
    /// Seconds since it started.
    pub uptime_s: u64,
    /// Its MCP connections.
    pub connections: usize,
    /// `[daemon] idle_exit`, in seconds.
    pub idle_exit_s: f64,
    /// The language servers it runs.
    pub language_servers: Vec<LanguageServerStatus>,
}

/// The page, as `status` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PageStatus {
    /// Where it listens.
    pub address: String,
    /// Whether it listens beyond this machine.
    pub exposed: bool,
    /// How many people watch a live part of it now.
    pub viewers: usize,
}

/// One language server, as `status` reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct LanguageServerStatus {
    /// Its pid.
    pub pid: i32,
    /// Its configured name.
    pub server: String,
    /// The project root it serves.
    pub root: PathBuf,
    /// The project's load error or warning, when one stands.
    pub problem: Option<String>,
}

/// The reply to `reload`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reloaded {
    /// How many connections re-read their config.
    pub reloaded: usize,
}

/// The reply to `ui`: where the page is, and a fresh sign-in link.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UiPage {
    /// The one-time sign-in link.
    pub url: String,
    /// Where the page listens.
    pub address: String,
    /// Whether it listens beyond this machine.
    pub exposed: bool,
    /// The file that holds the page's secret for scripts, when written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_file: Option<PathBuf>,
}

/// The reply to `attach`; frames follow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachAccepted {
    /// The terminal's rows.
    pub rows: u16,
    /// Its columns.
    pub cols: u16,
    /// Whether the person may type.
    pub write: bool,
}

/// What became of a person's answer (`dsh answer`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Answered {
    /// `handed to the agent's waiting send, which typed it` or `typed
    /// into the terminal`.
    pub how: String,
}

/// What a person is asked before answering a secret prompt (`dsh
/// answer`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Asking {
    /// The prompt, the executable that reads it and any warning.
    pub question: String,
}

/// A command waiting for a person's approval (`dsh approve`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WaitingApproval {
    /// `ap-N`.
    pub id: String,
    /// The agent that asks.
    pub agent: String,
    /// Where the command would run.
    pub cwd: PathBuf,
    /// The question, the command marked line by line.
    pub question: String,
    /// The command line.
    pub command: String,
    /// Seconds it has waited.
    pub waited_secs: u64,
}

/// The commands waiting for a person's approval, oldest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Approvals {
    /// The commands.
    pub approvals: Vec<WaitingApproval>,
}

/// What became of a person's decision (`dsh approve ap-N`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Decided {
    /// One line: approved or refused, and for whom.
    pub what: String,
}
