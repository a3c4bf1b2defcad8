//! `dsh workspace …` and `dsh session …`: the person's view of the registry.
//!
//! Every command is one request to the daemon, which holds the store open
//! (started if none runs), so it works while agents are connected and a
//! mutation is flushed before the command prints. With `--standalone` the
//! command opens the store itself for one locked span instead. Output is
//! an aligned table or key/value block for people, or `--json` (the
//! registry's own field names) for scripts. Errors come back as one line
//! that says what to do next.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use chrono::{DateTime, Utc};
use daemon_wire::registry::{
    Archived, Created, RegistryOp, SessionJson, SessionWithWorkspace, SessionsWithWorkspaces,
    WorkspaceJson, WorkspaceWithSessions, status_word,
};
use workspace::{ClientInfo, LogEntry, SessionId, SessionRecord, Workspace, WorkspaceId};

use daemon::registry::RegistryAccess;

use crate::output::{cell, emit, key_values, table, to_json};

/// How many log entries `dsh session show` prints without `--tail`.
const DEFAULT_TAIL: usize = 20;
/// The widest a title gets in a table (`show` prints it whole).
const MAX_TITLE_CELL: usize = 40;

const WORKSPACE_LIST_HELP: &str = "\
Columns: ID, TITLE, SESSIONS (member sessions), UPDATED (UTC), STATUS (`ok`, or
`missing` when the directory is gone; the record is kept), PATH.

Example:
  dsh workspace list
  dsh workspace list --json | jq -r '.[].id'";

const WORKSPACE_CREATE_HELP: &str = "\
PATH is resolved to its real path first, so symlinked, `..` and trailing-slash
spellings of one directory are one workspace: creating it again prints the
existing workspace and changes nothing. New workspaces go to the top of the list.

Example:
  dsh workspace create ~/src/dsh --title 'dsh core'";

const WORKSPACE_SHOW_HELP: &str = "\
Prints the workspace's fields and its sessions in their order.

Example:
  dsh workspace show 0b9e6c1e-5f0a-4c57-9a4e-1f1f0c6a2d3b";

const WORKSPACE_RENAME_HELP: &str = "\
Titles are for display only: they need not be unique, and the path never changes.

Example:
  dsh workspace rename 0b9e6c1e-5f0a-4c57-9a4e-1f1f0c6a2d3b 'dsh core'";

const WORKSPACE_MOVE_HELP: &str = "\
Only the moved workspace changes position; without --before it goes to the end.

Example:
  dsh workspace move 0b9e6c1e-5f0a-4c57-9a4e-1f1f0c6a2d3b --before 7d1f8a52-93c4-4e0b-8f6e-2b5d9c0e4a11";

const WORKSPACE_RM_HELP: &str = "\
Removes the registration only: the directory, its files and the sessions' logs
are kept. Agents that connect from the directory later register it again.

Example:
  dsh workspace rm 0b9e6c1e-5f0a-4c57-9a4e-1f1f0c6a2d3b";

const SESSION_LIST_HELP: &str = "\
Every recorded session, newest first; with --workspace, that workspace's
members in its order. Columns: ID, CREATED (UTC), CLIENT, ARCHIVED, WORKSPACE
(title), CWD.

Example:
  dsh session list
  dsh session list --workspace 0b9e6c1e-5f0a-4c57-9a4e-1f1f0c6a2d3b --json";

const SESSION_SHOW_HELP: &str = "\
Prints the session's fields, its workspace, and the last tool calls of its log
(20 by default; --json prints the whole log unless --tail is given).

Example:
  dsh session show 5f3c2a10-8d4e-4b7f-a1c2-9e8d7f6a5b4c --tail 50";

const SESSION_MOVE_HELP: &str = "\
Only the moved session changes position in its workspace; without --before, it goes last.

Example:
  dsh session move 5f3c2a10-8d4e-4b7f-a1c2-9e8d7f6a5b4c --before 9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";

const SESSION_ARCHIVE_HELP: &str = "\
Archiving only marks the session (its record, log and membership stay); unarchive clears it.

Example:
  dsh session archive 5f3c2a10-8d4e-4b7f-a1c2-9e8d7f6a5b4c
  dsh session unarchive 5f3c2a10-8d4e-4b7f-a1c2-9e8d7f6a5b4c";

/// Output flags every registry command takes.
#[derive(Debug, Clone, Copy, clap::Args)]
pub struct OutputArgs {
    /// Print JSON (the registry's field names) instead of a table.
    #[arg(long)]
    json: bool,
}

const WORKSPACE_HELP: &str = "\
A workspace is a directory you work in, with its agent sessions in an order you
choose. Agents register theirs when they connect to `dsh mcp`; these commands
let you add, rename, reorder and forget them. Every command takes --json.

Example:
  dsh workspace create . --title 'my project'
  dsh workspace list";

const SESSION_HELP: &str = "\
Each connection of an agent to `dsh mcp` is recorded as a session: its working
directory, client, creation time and a log of its tool calls. Sessions join the
workspace of their directory. Every command takes --json.

Example:
  dsh session list
  dsh session show 5f3c2a10-8d4e-4b7f-a1c2-9e8d7f6a5b4c";

/// One workspace, named by its id.
#[derive(Debug, clap::Args)]
pub struct WorkspaceArgs {
    /// The workspace id (`dsh workspace list` shows them).
    #[arg(value_parser = parse_workspace_id)]
    id: WorkspaceId,
    #[command(flatten)]
    output: OutputArgs,
}

/// One session, named by its id.
#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    /// The session id (`dsh session list` shows them).
    #[arg(value_parser = parse_session_id)]
    id: SessionId,
    #[command(flatten)]
    output: OutputArgs,
}

/// `dsh workspace` subcommands.
#[derive(Debug, clap::Subcommand)]
#[command(after_help = WORKSPACE_HELP)]
pub enum WorkspaceCommand {
    /// List workspaces in display order.
    #[command(after_help = WORKSPACE_LIST_HELP)]
    List {
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Register a directory as a workspace (or show the one that owns it).
    #[command(after_help = WORKSPACE_CREATE_HELP)]
    Create {
        /// The directory; it must exist.
        path: PathBuf,
        /// Display title [default: the directory's name].
        #[arg(long, value_name = "T")]
        title: Option<String>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Show one workspace and its sessions.
    #[command(after_help = WORKSPACE_SHOW_HELP)]
    Show(WorkspaceArgs),
    /// Change a workspace's title.
    #[command(after_help = WORKSPACE_RENAME_HELP)]
    Rename {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// The new title.
        title: String,
    },
    /// Move a workspace before another one, or to the end of the list.
    #[command(after_help = WORKSPACE_MOVE_HELP)]
    Move {
        #[command(flatten)]
        ws: WorkspaceArgs,
        /// Put it just before this workspace [default: at the end].
        #[arg(long, value_name = "ID", value_parser = parse_workspace_id)]
        before: Option<WorkspaceId>,
    },
    /// Forget a workspace; its directory and its sessions' logs are kept.
    #[command(after_help = WORKSPACE_RM_HELP)]
    Rm(WorkspaceArgs),
}

/// `dsh session` subcommands.
#[derive(Debug, clap::Subcommand)]
#[command(after_help = SESSION_HELP)]
pub enum SessionCommand {
    /// List sessions, newest first, or one workspace's sessions in its order.
    #[command(after_help = SESSION_LIST_HELP)]
    List {
        /// Only this workspace's sessions, in the workspace's order.
        #[arg(long, value_name = "ID", value_parser = parse_workspace_id)]
        workspace: Option<WorkspaceId>,
        #[command(flatten)]
        output: OutputArgs,
    },
    /// Show one session: its fields, its workspace and the tail of its log.
    #[command(after_help = SESSION_SHOW_HELP)]
    Show {
        #[command(flatten)]
        session: SessionArgs,
        /// How many of the latest log entries to print [default: 20; with --json, all].
        #[arg(long, value_name = "N")]
        tail: Option<usize>,
    },
    /// Move a session before another of its workspace, or to the end.
    #[command(after_help = SESSION_MOVE_HELP)]
    Move {
        #[command(flatten)]
        session: SessionArgs,
        /// Put it just before this session [default: at the end].
        #[arg(long, value_name = "ID", value_parser = parse_session_id)]
        before: Option<SessionId>,
    },
    /// Mark a session archived (nothing is deleted).
    #[command(after_help = SESSION_ARCHIVE_HELP)]
    Archive(SessionArgs),
    /// Clear a session's archived mark.
    #[command(after_help = SESSION_ARCHIVE_HELP)]
    Unarchive(SessionArgs),
}

fn parse_workspace_id(s: &str) -> Result<WorkspaceId, String> {
    s.parse().map_err(|_| {
        "not a workspace id (ids are UUIDs; `dsh workspace list` shows them)".to_owned()
    })
}

fn parse_session_id(s: &str) -> Result<SessionId, String> {
    s.parse()
        .map_err(|_| "not a session id (ids are UUIDs; `dsh session list` shows them)".to_owned())
}

/// Runs a `dsh workspace` command.
pub fn run_workspace(command: WorkspaceCommand, backend: &RegistryAccess) -> anyhow::Result<()> {
    let text = match command {
        WorkspaceCommand::List { output } => {
            let list: Vec<Workspace> = backend.call(RegistryOp::WorkspaceList)?;
            if output.json {
                to_json(&list.iter().map(WorkspaceJson::new).collect::<Vec<_>>())?
            } else if list.is_empty() {
                "no workspaces yet — `dsh workspace create PATH` adds one; agents add theirs \
                 when they connect\n"
                    .to_owned()
            } else {
                workspace_table(&list)
            }
        }
        WorkspaceCommand::Create {
            path,
            title,
            output,
        } => {
            let Created { workspace, created } = backend.call(RegistryOp::WorkspaceCreate {
                path,
                title: title.clone(),
            })?;
            if output.json {
                to_json(&WorkspaceJson {
                    created: Some(created),
                    ..WorkspaceJson::new(&workspace)
                })?
            } else if created {
                format!(
                    "created workspace {} \"{}\" for {}\n",
                    workspace.id,
                    cell(&workspace.title),
                    shown(&workspace.path)
                )
            } else {
                let mut line = format!(
                    "{} is already workspace {} \"{}\"; nothing changed",
                    shown(&workspace.path),
                    workspace.id,
                    cell(&workspace.title)
                );
                if title.as_deref().is_some_and(|t| t != workspace.title) {
                    line.push_str(" (to change its title: `dsh workspace rename ID TITLE`)");
                }
                line.push('\n');
                line
            }
        }
        WorkspaceCommand::Show(WorkspaceArgs { id, output }) => {
            let WorkspaceWithSessions {
                workspace,
                sessions,
            } = backend.call(RegistryOp::WorkspaceShow { id })?;
            if output.json {
                to_json(&WorkspaceJson {
                    sessions: Some(&sessions),
                    ..WorkspaceJson::new(&workspace)
                })?
            } else {
                workspace_detail(&workspace, &sessions)
            }
        }
        WorkspaceCommand::Rename { ws, title } => {
            let w: Workspace = backend.call(RegistryOp::WorkspaceRename { id: ws.id, title })?;
            if ws.output.json {
                to_json(&WorkspaceJson::new(&w))?
            } else {
                format!("renamed workspace {} to \"{}\"\n", w.id, cell(&w.title))
            }
        }
        WorkspaceCommand::Move { ws, before } => {
            let order: Vec<_> = backend.call(RegistryOp::WorkspaceMove { id: ws.id, before })?;
            if ws.output.json {
                to_json(&order.iter().map(WorkspaceJson::new).collect::<Vec<_>>())?
            } else {
                move_confirmation(ws.id, &order)
            }
        }
        WorkspaceCommand::Rm(WorkspaceArgs { id, output }) => {
            let removed: Workspace = backend.call(RegistryOp::WorkspaceRemove { id })?;
            if output.json {
                to_json(&WorkspaceJson {
                    removed: Some(true),
                    ..WorkspaceJson::new(&removed)
                })?
            } else {
                format!(
                    "removed workspace {} \"{}\" from the registry; the directory {} and its \
                     sessions' logs are kept\n",
                    removed.id,
                    cell(&removed.title),
                    shown(&removed.path)
                )
            }
        }
    };
    emit(&text)
}

/// Runs a `dsh session` command.
pub fn run_session(command: SessionCommand, backend: &RegistryAccess) -> anyhow::Result<()> {
    let text = match command {
        SessionCommand::List { workspace, output } => {
            let SessionsWithWorkspaces {
                sessions,
                workspaces,
            } = backend.call(RegistryOp::SessionList { workspace })?;
            if output.json {
                to_json(&sessions)?
            } else if sessions.is_empty() {
                match workspace {
                    Some(id) => format!(
                        "workspace {id} has no sessions yet — agents that connect from its \
                         directory are added to it\n"
                    ),
                    None => "no sessions yet — every agent connection to `dsh mcp` records one\n"
                        .to_owned(),
                }
            } else {
                session_table(&sessions, &workspaces)
            }
        }
        SessionCommand::Show { session: a, tail } => {
            let SessionWithWorkspace { detail, workspace } =
                backend.call(RegistryOp::SessionShow { id: a.id })?;
            let total = detail.log.len();
            let keep = match (tail, a.output.json) {
                (Some(n), _) => n.min(total),
                (None, true) => total,
                (None, false) => DEFAULT_TAIL.min(total),
            };
            let log = &detail.log[total - keep..];
            if a.output.json {
                to_json(&SessionJson {
                    session: &detail.session,
                    log,
                    log_total: total,
                })?
            } else {
                session_detail(&detail.session, workspace.as_ref(), log, total)
            }
        }
        SessionCommand::Move { session: a, before } => {
            let (id, output) = (a.id, a.output);
            let w: Workspace = backend.call(RegistryOp::SessionMove { id, before })?;
            let at = w.session_ids.iter().position(|s| *s == id);
            let (at, n, title) = (at.map_or(0, |i| i + 1), w.session_ids.len(), &w.title);
            if output.json {
                to_json(&WorkspaceJson::new(&w))?
            } else {
                let ws = format!("{} \"{}\"", w.id, title_cell(title));
                format!("moved session {id} to position {at} of {n} in workspace {ws}\n")
            }
        }
        SessionCommand::Archive(a) => set_archived(backend, a, true)?,
        SessionCommand::Unarchive(a) => set_archived(backend, a, false)?,
    };
    emit(&text)
}

/// Sets session `a`'s archived mark `to` and says so.
fn set_archived(backend: &RegistryAccess, a: SessionArgs, to: bool) -> anyhow::Result<String> {
    let SessionArgs { id, output } = a;
    let Archived { was, record } = backend.call(RegistryOp::SessionArchive { id, archived: to })?;
    if output.json {
        return to_json(&record);
    }
    let word = if to { "archived" } else { "unarchived" };
    Ok(if was == to {
        format!("session {id} was already {word}; nothing changed\n")
    } else {
        format!("{word} session {id}\n")
    })
}

fn time(at: &DateTime<Utc>) -> String {
    at.format("%Y-%m-%d %H:%M:%S").to_string()
}

fn client(client: Option<&ClientInfo>) -> String {
    match client {
        Some(c) if c.version.is_empty() => cell(&c.name),
        Some(c) => format!("{} {}", cell(&c.name), cell(&c.version)),
        None => "-".to_owned(),
    }
}

fn path_cell(path: Option<&Path>) -> String {
    path.map_or_else(|| "-".to_owned(), shown)
}

/// A path as printed: control characters escaped.
fn shown(path: &Path) -> String {
    cell(&path.to_string_lossy())
}

/// A title cut to [`MAX_TITLE_CELL`] characters for a table.
fn title_cell(title: &str) -> String {
    let title = cell(title);
    if title.chars().count() <= MAX_TITLE_CELL {
        return title;
    }
    let mut cut: String = title.chars().take(MAX_TITLE_CELL - 1).collect();
    cut.push('…');
    cut
}

fn workspace_table(list: &[Workspace]) -> String {
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|w| {
            vec![
                w.id.to_string(),
                title_cell(&w.title),
                w.session_ids.len().to_string(),
                time(&w.updated_at),
                status_word(w.status()).to_owned(),
                path_cell(Some(&w.path)),
            ]
        })
        .collect();
    table(
        &["ID", "TITLE", "SESSIONS", "UPDATED (UTC)", "STATUS", "PATH"],
        &rows,
    )
}

fn workspace_detail(workspace: &Workspace, sessions: &[SessionRecord]) -> String {
    let mut out = key_values(&[
        ("id", workspace.id.to_string()),
        ("title", cell(&workspace.title)),
        ("path", path_cell(Some(&workspace.path))),
        ("status", status_word(workspace.status()).to_owned()),
        ("created", format!("{} UTC", time(&workspace.created_at))),
        ("updated", format!("{} UTC", time(&workspace.updated_at))),
        ("sessions", sessions.len().to_string()),
    ]);
    out.push('\n');
    if sessions.is_empty() {
        out.push_str("no sessions yet — agents that connect from this directory are added here\n");
        return out;
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                time(&s.created_at),
                client(s.client.as_ref()),
                yes_no(s.archived),
            ]
        })
        .collect();
    out.push_str(&table(
        &["SESSION ID", "CREATED (UTC)", "CLIENT", "ARCHIVED"],
        &rows,
    ));
    out
}

fn yes_no(value: bool) -> String {
    if value { "yes" } else { "no" }.to_owned()
}

fn move_confirmation(id: WorkspaceId, order: &[Workspace]) -> String {
    let Some(at) = order.iter().position(|w| w.id == id) else {
        return format!("moved workspace {id}\n");
    };
    let moved = &order[at];
    let place = match order.get(at + 1) {
        Some(next) => format!("before {} \"{}\"", next.id, title_cell(&next.title)),
        None => "at the end".to_owned(),
    };
    format!(
        "moved workspace {} \"{}\" to position {} of {}, {place}\n",
        moved.id,
        title_cell(&moved.title),
        at + 1,
        order.len()
    )
}

fn session_table(sessions: &[SessionRecord], workspaces: &[Workspace]) -> String {
    let title_of = |id: Option<WorkspaceId>| {
        id.and_then(|id| workspaces.iter().find(|w| w.id == id))
            .map_or_else(|| "-".to_owned(), |w| title_cell(&w.title))
    };
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                time(&s.created_at),
                client(s.client.as_ref()),
                yes_no(s.archived),
                title_of(s.workspace_id),
                path_cell(s.cwd.as_deref()),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "CREATED (UTC)",
            "CLIENT",
            "ARCHIVED",
            "WORKSPACE",
            "CWD",
        ],
        &rows,
    )
}

fn session_detail(
    session: &SessionRecord,
    workspace: Option<&Workspace>,
    log: &[LogEntry],
    total: usize,
) -> String {
    let workspace_line = match (workspace, &session.cwd) {
        (Some(w), _) => format!("{} \"{}\"", w.id, cell(&w.title)),
        (None, None) => "none (recorded without a cwd)".to_owned(),
        (None, Some(_)) => "none".to_owned(),
    };
    let mut out = key_values(&[
        ("id", session.id.to_string()),
        ("created", format!("{} UTC", time(&session.created_at))),
        ("client", client(session.client.as_ref())),
        ("cwd", path_cell(session.cwd.as_deref())),
        ("archived", yes_no(session.archived)),
        ("workspace", workspace_line),
    ]);
    out.push('\n');
    if total == 0 {
        out.push_str("no tool calls logged yet\n");
        return out;
    }
    let calls = if total == 1 {
        "tool call"
    } else {
        "tool calls"
    };
    if log.len() == total {
        let _ = writeln!(out, "log: {total} {calls}, oldest first");
    } else {
        let _ = writeln!(
            out,
            "log: the last {} of {total} {calls}, oldest first (--tail N for more)",
            log.len()
        );
    }
    if log.is_empty() {
        return out;
    }
    let rows: Vec<Vec<String>> = log
        .iter()
        .map(|e| {
            vec![
                time(&e.at),
                cell(&e.tool),
                cell(&e.outcome),
                format!("{} ms", e.duration_ms),
                cell(&e.argument_summary),
            ]
        })
        .collect();
    out.push_str(&table(
        &["AT (UTC)", "TOOL", "OUTCOME", "DURATION", "ARGUMENTS"],
        &rows,
    ));
    out
}

#[cfg(test)]
mod tests {
    use pretty_assertions::assert_eq;

    use super::*;

    #[test]
    fn cells_escape_control_characters_and_long_titles_are_cut() {
        assert_eq!(cell("a\nb\tc"), "a\\nb\\tc");
        assert_eq!(cell("plain"), "plain");
        let cut = format!("{}…", "é".repeat(MAX_TITLE_CELL - 1));
        assert_eq!(title_cell(&"é".repeat(50)), cut);
    }
}
