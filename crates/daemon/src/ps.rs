//! `dsh ps`: every connection of the daemon with its terminals and jobs —
//! the snapshot the daemon takes, and the table a person reads.

use std::fmt::Write as _;
use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use crate::host::Host;

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
}

/// One terminal.
#[derive(Debug, Clone, Serialize, Deserialize)]
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

/// One job.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRow {
    /// `kind-N`.
    pub id: String,
    /// Its kind.
    pub kind: String,
    /// Its status.
    pub status: String,
    /// What it runs.
    pub label: String,
}

fn secs_since(at: SystemTime) -> u64 {
    at.elapsed().map_or(0, |d| d.as_secs())
}

/// What the daemon serves right now.
pub async fn snapshot(host: &Host, started_at: SystemTime) -> serde_json::Value {
    let mut connections = Vec::new();
    for facts in host.connections() {
        let terminals = host
            .runtime()
            .terminals
            .list(&facts.owner)
            .await
            .into_iter()
            .map(|t| TerminalRow {
                id: t.id.to_string(),
                name: t.name,
                command: t.command.join(" "),
                status: t.status.as_str().to_owned(),
                active_send: t.active_send,
                idle_s: secs_since(host.terminals().last_activity(t.id).unwrap_or(t.created_at)),
            })
            .collect();
        let jobs = host
            .runtime()
            .jobs
            .list(&facts.owner, None)
            .into_iter()
            .map(|j| JobRow {
                id: j.id,
                kind: j.kind.as_str().to_owned(),
                status: j.status.as_str().to_owned(),
                label: j.label,
            })
            .collect();
        let recorded = facts.recorded.clone();
        connections.push(ConnectionRow {
            id: facts.id,
            client: facts.client.as_ref().map(|c| c.name.clone()),
            pid: facts.peer_pid,
            cwd: facts.cwd.as_ref().map(|c| c.display().to_string()),
            session_id: recorded.as_ref().map(|r| r.session.to_string()),
            workspace_id: recorded
                .as_ref()
                .and_then(|r| r.workspace.as_ref())
                .map(|w| w.0.to_string()),
            workspace: recorded
                .as_ref()
                .and_then(|r| r.workspace.as_ref())
                .map(|w| w.1.clone()),
            preset: facts.preset.to_string(),
            age_s: secs_since(facts.connected_at),
            terminals,
            jobs,
        });
    }
    let snapshot = Snapshot {
        daemon: DaemonRow {
            pid: std::process::id(),
            version: crate::protocol::version(),
            uptime_s: secs_since(started_at),
        },
        connections,
        language_servers: host
            .language_servers()
            .into_iter()
            .map(|s| LanguageServerRow {
                server: s.name,
                pid: s.pid,
                root: s.root.display().to_string(),
                problem: s.problem,
            })
            .collect(),
    };
    serde_json::to_value(snapshot).unwrap_or(serde_json::Value::Null)
}

fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// Escapes control characters so a value stays on its line.
fn cell(value: &str) -> String {
    if value.chars().any(char::is_control) {
        value.escape_debug().to_string()
    } else {
        value.to_owned()
    }
}

/// The snapshot for a person: one block per connection.
pub fn render(snapshot: &Snapshot) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "dsh daemon pid {} · version {} · up {} · {} connection{}",
        snapshot.daemon.pid,
        snapshot.daemon.version,
        age(snapshot.daemon.uptime_s),
        snapshot.connections.len(),
        if snapshot.connections.len() == 1 {
            ""
        } else {
            "s"
        }
    );
    for s in &snapshot.language_servers {
        let _ = writeln!(
            out,
            "language server {} · pid {} · {}{}",
            cell(&s.server),
            s.pid,
            cell(&s.root),
            s.problem
                .as_deref()
                .map(|p| format!(" · {}", cell(p)))
                .unwrap_or_default()
        );
    }
    if snapshot.connections.is_empty() {
        out.push_str("no agent is connected\n");
        return out;
    }
    for c in &snapshot.connections {
        out.push('\n');
        let _ = writeln!(
            out,
            "connection {} · {} · pid {} · {} · up {}",
            c.id,
            cell(c.client.as_deref().unwrap_or("(client not named yet)")),
            c.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            c.preset,
            age(c.age_s)
        );
        let _ = writeln!(
            out,
            "  workspace {} · {}",
            cell(c.workspace.as_deref().unwrap_or("-")),
            cell(c.cwd.as_deref().unwrap_or("-"))
        );
        if c.terminals.is_empty() {
            out.push_str("  no terminals\n");
        }
        for t in &c.terminals {
            let _ = writeln!(
                out,
                "  {:<8} {:<8} {:<9} idle {:<6} {}{}",
                t.id,
                t.status,
                if t.active_send { "sending" } else { "-" },
                age(t.idle_s),
                t.name
                    .as_deref()
                    .map(|n| format!("[{}] ", cell(n)))
                    .unwrap_or_default(),
                cell(&t.command)
            );
        }
        if c.jobs.is_empty() {
            out.push_str("  no jobs\n");
        }
        for j in &c.jobs {
            let _ = writeln!(out, "  {:<12} {:<10} {}", j.id, j.status, cell(&j.label));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_language_server_s_load_error_is_shown_on_its_line() {
        let snapshot = Snapshot {
            daemon: DaemonRow {
                pid: 7,
                version: "1".into(),
                uptime_s: 5,
            },
            connections: vec![],
            language_servers: vec![
                LanguageServerRow {
                    server: "rust-analyzer".into(),
                    pid: 42,
                    root: "/w/a".into(),
                    problem: Some("load failed: Failed to load workspaces.".into()),
                },
                LanguageServerRow {
                    server: "gopls".into(),
                    pid: 43,
                    root: "/w/b".into(),
                    problem: None,
                },
            ],
        };
        let text = render(&snapshot);
        assert!(
            text.contains(
                "language server rust-analyzer · pid 42 · /w/a · load failed: Failed to load workspaces.\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("language server gopls · pid 43 · /w/b\n"),
            "{text}"
        );
        // An older daemon's snapshot (no servers) still reads.
        let old = serde_json::json!({
            "daemon": {"pid": 1, "version": "0", "uptime_s": 0},
            "connections": [],
        });
        let read: Snapshot = serde_json::from_value(old).unwrap();
        assert!(read.language_servers.is_empty());
    }
}
