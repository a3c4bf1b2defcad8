//! `dsh ps`: the daemon's snapshot (see [`crate::protocol::ps`]) as the
//! table a person reads.

use std::fmt::Write as _;

use crate::protocol::ps::Snapshot;

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
    use crate::protocol::ps::{DaemonRow, LanguageServerRow};

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
