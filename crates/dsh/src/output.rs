//! Everything `dsh` prints: one way to write to stdout, one escaping rule
//! for untrusted text (every control character — C0, DEL, C1 and the bidi
//! controls that reorder a line — is written as an escape, in tables and
//! in JSON alike), the table and key/value layouts, and the renderings of
//! the daemon's replies (`dsh ps`, `dsh daemon status`).

use std::fmt::Write as _;
use std::io::Write as _;

use daemon_client::remotes::RemoteSnapshot;
use daemon_wire::ps::Snapshot;
use daemon_wire::replies::Status;
use serde::Serialize;

/// Writes `text` to stdout; a closed pipe (`| head`) is not an error.
/// Every value in it was escaped where it was put in; as a last guard, no
/// control character but the line breaks of the layout reaches the
/// terminal.
pub fn emit(text: &str) -> anyhow::Result<()> {
    let text = escape_controls(text, true);
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(anyhow::anyhow!("cannot write to stdout: {e}")),
    }
}

/// Pretty JSON in which no string carries a raw control character: JSON
/// escapes those below U+0020 itself; DEL and the C1 controls (which some
/// terminals obey) are written as `\u00XX` too.
pub fn to_json(value: &impl Serialize) -> anyhow::Result<String> {
    let raw = serde_json::to_string_pretty(value)?;
    let mut text = String::with_capacity(raw.len() + 1);
    for c in raw.chars() {
        if c.is_control() || is_bidi_control(c) {
            // Only inside strings: JSON's own layout is ASCII whitespace.
            if c == '\n' || c == ' ' {
                text.push(c);
            } else {
                let _ = write!(text, "\\u{:04x}", u32::from(c));
            }
        } else {
            text.push(c);
        }
    }
    text.push('\n');
    Ok(text)
}

/// True for the Unicode controls that reorder text on screen (bidi
/// embeddings, overrides and isolates): they can make a path read as
/// another.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `text` with every control character (C0, DEL, C1, bidi controls)
/// written as an escape (`\u{1b}`, `\n`), so nothing it holds can move the
/// cursor, recolour, retitle or reorder a terminal. With `keep_newlines`,
/// `\n` stays a line break (for text whose lines are our own layout).
pub fn escape_controls(text: &str, keep_newlines: bool) -> String {
    if !text
        .chars()
        .any(|c| (c.is_control() && !(keep_newlines && c == '\n')) || is_bidi_control(c))
    {
        return text.to_owned();
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if keep_newlines && c == '\n' {
            out.push(c);
        } else if c.is_control() || is_bidi_control(c) {
            out.extend(c.escape_debug());
            if c.escape_debug().len() == 1 {
                // Not escaped by Rust's rules (a bidi control): spell it out.
                out.pop();
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Makes a value safe for one table cell: control characters are escaped.
pub fn cell(value: &str) -> String {
    escape_controls(value, false)
}

/// Aligned columns separated by two spaces; the last column is not padded.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (width, value) in widths.iter_mut().zip(row) {
            *width = (*width).max(value.chars().count());
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let last = row.len().saturating_sub(1);
        for (i, (value, width)) in row.iter().zip(&widths).enumerate() {
            if i == last {
                out.push_str(value);
            } else {
                let pad = width.saturating_sub(value.chars().count());
                let _ = write!(out, "{value}{:pad$}  ", "");
            }
        }
        out.push('\n');
    }
    out
}

/// A key/value block with the keys aligned.
pub fn key_values(pairs: &[(&str, String)]) -> String {
    let width = pairs.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (key, value) in pairs {
        let _ = writeln!(out, "{key:width$}  {value}");
    }
    out
}

/// `dsh daemon status` for a person.
pub fn status(status: &Status) -> String {
    let page = match &status.page {
        Some(p) => format!("http://{} · {} watching live", cell(&p.address), p.viewers),
        None => "not served (`dsh ui` serves it)".to_owned(),
    };
    format!(
        "dsh daemon running: pid {} · version {} · up {} s\nsocket       {}\ndata dir     {}\nlog          {}\nconnections  {}\nidle exit    {} s\npage         {page}\n",
        status.pid,
        cell(&status.version),
        status.uptime_s,
        cell(&status.socket.to_string_lossy()),
        cell(&status.data_dir.to_string_lossy()),
        cell(&status.log.to_string_lossy()),
        status.connections,
        // As JSON writes it (`600.0`), as this line always has.
        serde_json::json!(status.idle_exit_s),
    )
}

fn age(secs: u64) -> String {
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
    }
}

/// The snapshot for a person: one block per connection.
/// The hosts of live `dsh mcp --remote` bridges, after this machine's.
pub fn remotes(remotes: &[RemoteSnapshot]) -> String {
    let mut out = String::new();
    for r in remotes {
        let _ = write!(
            out,
            "\n── {} (dsh mcp --remote, bridge pid {}) ── ",
            cell(&r.host),
            r.bridge_pid
        );
        match (&r.snapshot, &r.error) {
            (Some(s), _) => out.push_str(&ps(s)),
            (None, e) => {
                let _ = writeln!(out, "{}", cell(e.as_deref().unwrap_or("no answer")));
            }
        }
    }
    out
}

pub fn ps(snapshot: &Snapshot) -> String {
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
            "connection {}{} · {} · pid {} · {} · up {}",
            c.id,
            c.host
                .as_deref()
                .map(|h| format!(" on {}", cell(h)))
                .unwrap_or_default(),
            cell(c.client.as_deref().unwrap_or("(client not named yet)")),
            c.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            c.preset,
            age(c.age_s)
        );
        if let Some(d) = &c.detached {
            let (away, left) = (age(d.for_s), age(d.left_s));
            let _ = writeln!(
                out,
                "  detached: the client went away {away} ago; kept {left} more for the agent's resume key (dsh ps --end {} ends it now)",
                c.id
            );
        }
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
    #![allow(clippy::unwrap_used)]
    use pretty_assertions::assert_eq;

    use super::*;
    use daemon_wire::ps::{DaemonRow, LanguageServerRow};

    #[test]
    fn table_aligns_columns_and_leaves_the_last_unpadded() {
        let rows = vec![
            vec!["a".to_owned(), "long value".to_owned(), "x".to_owned()],
            vec!["longer".to_owned(), "b".to_owned(), "y y".to_owned()],
        ];
        assert_eq!(
            table(&["K", "V", "LAST"], &rows),
            "K       V           LAST\n\
             a       long value  x\n\
             longer  b           y y\n"
        );
    }

    #[test]
    fn control_characters_never_reach_the_terminal_raw() {
        let evil = "a\u{1b}[2Jb\u{7f}c\u{9b}31md\u{202e}e\nf";
        assert_eq!(
            escape_controls(evil, false),
            "a\\u{1b}[2Jb\\u{7f}c\\u{9b}31md\\u{202e}e\\nf"
        );
        assert_eq!(
            escape_controls(evil, true),
            "a\\u{1b}[2Jb\\u{7f}c\\u{9b}31md\\u{202e}e\nf"
        );
        assert_eq!(cell(evil), escape_controls(evil, false));
        assert_eq!(cell("/tmp/x\u{1b}]0;t\u{7}"), "/tmp/x\\u{1b}]0;t\\u{7}");
        let json = to_json(&serde_json::json!({ "title": evil })).unwrap();
        assert_eq!(
            json,
            "{\n  \"title\": \"a\\u001b[2Jb\\u007fc\\u009b31md\\u202ee\\nf\"\n}\n"
        );
        let back: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(back["title"], evil);
    }

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
        let text = ps(&snapshot);
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
