//! What the page reads, and the changes a person makes on it: the
//! [`UiSource`] trait the daemon implements, and the plain data it
//! returns.
//!
//! The page never touches the store, the connections or the job registry
//! itself: it asks its source, which answers from the daemon's held store
//! and live state, and makes a [`Change`] through the same registry
//! operations as the CLI. Directories to choose come from the source's
//! [`DirectoryPicker`]. Terminals are the exception — their screens and the
//! person's keyboard go through the terminal provider's person views
//! (`TerminalWatch`, `PersonTyping`), exactly as `dsh attach` does.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use error_code::Code;
use futures::future::BoxFuture;
use picker_seam::DirectoryPicker;
use serde::{Deserialize, Serialize};
use workspace::{LogEntry, SessionId, WorkspaceId};

use daemon_wire::snapshot::{ConnectionRow, JobRow, TerminalRow};

/// A failure of the source, with a stable code and a message that says
/// what to do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct SourceError {
    /// The stable code (`NO_SESSION`, `NO_JOB`, `STORE_BUSY`, …).
    pub code: Code,
    /// One line for a person.
    pub message: String,
}

impl SourceError {
    /// An error with `code` and `message`.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// Whether the thing asked for does not exist (an HTTP 404).
    pub fn is_not_found(&self) -> bool {
        matches!(
            self.code,
            Code::NoSession
                | Code::NoJob
                | Code::NoWorkspace
                | Code::NoDetached
                | Code::NoSecretPrompt
                | Code::NoApproval
                | Code::NoConnection
                | Code::UnknownWorkspace
                | Code::UnknownSession
        )
    }
}

/// One session as the workspaces page lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionSummary {
    /// Its id.
    pub id: SessionId,
    /// The MCP client's name, when it said it.
    pub client: Option<String>,
    /// Its working directory.
    pub cwd: Option<PathBuf>,
    /// When it started.
    pub started: DateTime<Utc>,
    /// When its last logged tool call ended, if it made one.
    pub last_activity: Option<DateTime<Utc>>,
    /// Whether its MCP connection is open now.
    pub live: bool,
    /// Whether it is archived.
    pub archived: bool,
}

/// One workspace with its sessions, in the registry's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceSummary {
    /// Its id.
    pub id: String,
    /// Its title.
    pub title: String,
    /// Its directory.
    pub path: PathBuf,
    /// Whether the directory is missing now.
    pub missing_dir: bool,
    /// Its sessions, in the workspace's order.
    pub sessions: Vec<SessionSummary>,
}

/// Everything the workspaces page shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overview {
    /// The workspaces, in the registry's order.
    pub workspaces: Vec<WorkspaceSummary>,
    /// Sessions that belong to no workspace, newest first.
    pub ungrouped: Vec<SessionSummary>,
}

/// One session with its log, for its page.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionView {
    /// The session.
    pub summary: SessionSummary,
    /// Its workspace (id, title), if it joined one.
    pub workspace: Option<(String, String)>,
    /// Its logged tool calls, oldest first.
    pub log: Vec<LogEntry>,
}

/// A remote host that a live `dsh mcp --remote` bridge on this machine
/// serves, with what its own daemon showed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RemoteHost {
    /// The host, as its rows name it (`devbox`).
    pub host: String,
    /// The bridge's target (`ssh://devbox/src/app`, `exec:…`).
    pub target: String,
    /// The bridge's pid on this machine.
    pub bridge_pid: u32,
    /// The agents connected to the host's daemon; their terminal and job
    /// ids are qualified with the host (`devbox:pty-3`), as `dsh attach`
    /// takes them here. Empty while the host is first asked.
    pub connections: Vec<ConnectionRow>,
    /// Whether the host has answered yet.
    pub answered: bool,
    /// Why the host could not be asked, when it could not.
    pub error: Option<String>,
}

/// Every connected agent, oldest first, and the remote hosts served from
/// here: the page's live list, and `/api/live` (without the approvals;
/// `remotes` only when there is one, as in `dsh ps --json`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LiveView {
    /// The connections.
    pub connections: Vec<ConnectionRow>,
    /// The remote hosts of live `dsh mcp --remote` bridges, oldest bridge
    /// first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub remotes: Vec<RemoteHost>,
    /// Commands agents ask to run outside the sandbox, waiting for a
    /// person's decision, oldest first.
    #[serde(skip)]
    pub approvals: Vec<ApprovalView>,
}

impl LiveView {
    /// The terminal `id` and the connection that owns it.
    pub fn terminal(&self, id: &str) -> Option<(&ConnectionRow, &TerminalRow)> {
        self.connections
            .iter()
            .find_map(|c| c.terminals.iter().find(|t| t.id == id).map(|t| (c, t)))
    }

    /// The job `id` and the connection that owns it.
    pub fn job(&self, id: &str) -> Option<(&ConnectionRow, &JobRow)> {
        self.connections
            .iter()
            .find_map(|c| c.jobs.iter().find(|j| j.id == id).map(|j| (c, j)))
    }
}

/// A job's state and a stretch of its output, read without moving its
/// owner's cursor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobTail {
    /// The job.
    pub job: JobRow,
    /// Its sanitized output from `from` to `next`.
    pub output: String,
    /// Where `output` starts (a byte cursor).
    pub from: u64,
    /// Where it ends; pass it back to continue.
    pub next: u64,
    /// Bytes before `from` that were already evicted.
    pub dropped: u64,
    /// The end of its output so far.
    pub end: u64,
}

/// A tool call as it happens, for sessions whose page is open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveCall {
    /// The session that made it.
    pub session: SessionId,
    /// The call, as the session log keeps it.
    pub entry: LogEntry,
}

/// Tool calls as they happen: the newest few already made (which the
/// store may not have yet: the session log writes in batches), then a
/// receiver of every later one (lossy for a slow reader: `Lagged`). Taken
/// together, so no call falls between the two.
#[derive(Debug)]
pub struct CallFeed {
    /// The newest calls already made, oldest first.
    pub recent: Vec<LiveCall>,
    /// Every call from now on.
    pub live: tokio::sync::broadcast::Receiver<LiveCall>,
}

/// A change a person makes on the workspaces page: each is the registry
/// operation of a CLI command, and is durable when
/// [`UiSource::change`] returns.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Change {
    /// `dsh workspace create PATH [--title T]`.
    WorkspaceCreate {
        /// The directory (absolute).
        path: PathBuf,
        /// Its title; the directory's name when `None`.
        title: Option<String>,
    },
    /// `dsh workspace rename ID TITLE`.
    WorkspaceRename {
        /// The workspace.
        id: WorkspaceId,
        /// The new title.
        title: String,
    },
    /// `dsh workspace move ID [--before ID]`.
    WorkspaceMove {
        /// The workspace.
        id: WorkspaceId,
        /// The workspace it goes before; the end when `None`.
        before: Option<WorkspaceId>,
    },
    /// `dsh workspace rm ID`.
    WorkspaceRemove {
        /// The workspace.
        id: WorkspaceId,
    },
    /// `dsh session move ID [--before ID]`, within the session's workspace.
    SessionMove {
        /// The session.
        id: SessionId,
        /// The session it goes before; the end when `None`.
        before: Option<SessionId>,
    },
    /// `dsh session archive ID` / `dsh session unarchive ID`.
    SessionArchive {
        /// The session.
        id: SessionId,
        /// The new mark.
        archived: bool,
    },
}

/// What a [`Change`] did, for the person.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Changed {
    /// One line: what changed, or that nothing needed to.
    pub said: String,
}

/// Something held while a person watches a live stream (the daemon counts
/// it as activity, so it does not exit under a watching person).
pub type WatchingGuard = Box<dyn Send + Sync>;

/// What the page reads, implemented by the daemon.
pub trait UiSource: Send + Sync + 'static {
    /// The workspaces in the registry's order, with their sessions, and
    /// the sessions of no workspace.
    fn overview(&self) -> BoxFuture<'_, Result<Overview, SourceError>>;

    /// One session with its log (`NO_SESSION` when unknown).
    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<SessionView, SourceError>>;

    /// Every connected agent with its terminals and jobs.
    fn live(&self) -> BoxFuture<'_, LiveView>;

    /// The person's views of the terminals: screens and the keyboard.
    fn terminals(&self) -> std::sync::Arc<dyn terminal_seam::PersonViews>;

    /// Job `id` and its output from `since` (default: the last
    /// `max_bytes`), read without moving its owner's cursor; with a
    /// non-zero `wait`, first waits for output after `since` or for the
    /// job to settle (`NO_JOB` when unknown).
    fn job(
        &self,
        id: &str,
        since: Option<u64>,
        max_bytes: usize,
        wait: Duration,
    ) -> BoxFuture<'_, Result<JobTail, SourceError>>;

    /// The calls of the last moments and every call from now on, as it
    /// happens.
    fn calls(&self) -> CallFeed;

    /// Resolves when an agent connects or disconnects.
    fn connections_changed(&self) -> BoxFuture<'_, ()>;

    /// Makes `change` through the registry, as the CLI does; it is
    /// durable when this resolves. The registry's refusals come back as
    /// they are (their codes and messages).
    fn change(&self, change: Change) -> BoxFuture<'_, Result<Changed, SourceError>>;

    /// A receiver whose value moves on whenever the registry changed
    /// (through the page, the CLI, or an agent's new session).
    fn registry_changes(&self) -> tokio::sync::watch::Receiver<u64>;

    /// The directory picker of this context: one for the source's life,
    /// with one capability.
    fn directory_picker(&self) -> Arc<dyn DirectoryPicker>;

    /// Marks a person as watching until the guard is dropped.
    fn watching(&self) -> WatchingGuard;

    /// The secret prompt of terminal `id` that an agent's send waits for a
    /// person to answer; `None` when no send waits.
    fn waiting_prompt(&self, id: terminal_seam::TerminalId) -> Option<PromptView>;

    /// A person's answer to terminal `id`'s secret prompt: handed to the
    /// send that waits for it, or typed at once while a program waits
    /// with echo off (`NO_SECRET_PROMPT` otherwise). Says which.
    fn answer(
        &self,
        id: terminal_seam::TerminalId,
        secret: zeroize::Zeroizing<String>,
    ) -> BoxFuture<'_, Result<String, SourceError>>;

    /// Command `id` (`ap-N`) waiting for a person's approval to run
    /// outside the sandbox; `None` when none waits as `id`.
    fn waiting_approval(&self, id: &str) -> Option<ApprovalView>;

    /// A person's decision about command `id`: `run` lets it run outside
    /// the sandbox once, otherwise it is refused (`NO_APPROVAL` when none
    /// waits as `id`). Says what became of it.
    fn decide(&self, id: &str, run: bool) -> Result<String, SourceError>;
}

/// A command an agent asks to run outside the sandbox, waiting for a
/// person to run or refuse it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalView {
    /// `ap-N`.
    pub id: String,
    /// What is asked: what running means, then the command with every line
    /// marked and every invisible character shown as an escape.
    pub question: String,
    /// The command line (for a one-line summary).
    pub command: String,
    /// Where it would run.
    pub cwd: PathBuf,
    /// The agent (its client's name).
    pub agent: String,
    /// How long it has waited.
    pub waited: Duration,
}

/// A secret prompt an agent's send waits for a person to answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptView {
    /// The prompt (the last line the program printed).
    pub prompt: String,
    /// The terminal's command.
    pub command: String,
    /// The agent (its client's name).
    pub agent: String,
    /// Which executable reads the prompt, with a warning when it is a
    /// shell or an interpreter; `None` when it cannot be told.
    pub reader: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    /// The not-found codes are the `NO_…` and `UNKNOWN_…` ones: the page
    /// answers 404 for exactly these.
    #[test]
    fn the_not_found_codes_are_the_no_and_unknown_ones() {
        for code in Code::ALL {
            let name = code.as_str();
            let expected = name.starts_with("NO_") || name.starts_with("UNKNOWN_");
            assert_eq!(
                SourceError::new(code, "m").is_not_found(),
                expected,
                "{name}"
            );
        }
    }
}
