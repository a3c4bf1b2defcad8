//! The pages, rendered on the server: workspaces (with the controls that
//! change them and the directory picker's dialog), one workspace, a
//! session, live agents, a terminal, a job, and errors.
//!
//! Each function is pure: data in, HTML out. The live parts (a session's
//! new calls, the live list, a terminal's screen, a job's output) are
//! fragments of the same functions, pushed by the streams in
//! [`crate::server`] and swapped in by the page's small script.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use picker_seam::{Capability, Listing};
use workspace::LogEntry;

use crate::chart;
use crate::html::{Nav, ago, esc, layout, short_id, span, time};
use crate::snapshot::{JobRow, TerminalRow};
use crate::source::{
    ApprovalView, JobTail, LiveConnection, LiveView, Overview, PromptView, RemoteHost,
    SessionSummary, SessionView, WorkspaceSummary,
};

/// Sessions listed per workspace on the workspaces page (the rest are on
/// the workspace's own page).
pub const SESSIONS_PER_WORKSPACE: usize = 50;
/// Sessions per page of one workspace.
pub const SESSIONS_PER_PAGE: usize = 500;

fn status_badge(s: &SessionSummary) -> String {
    let mut out = if s.live {
        "<span class=\"badge live\" title=\"its agent is connected now\">live</span>".to_owned()
    } else {
        "<span class=\"badge ended\">ended</span>".to_owned()
    };
    if s.archived {
        out.push_str(" <span class=\"badge archived\">archived</span>");
    }
    out
}

/// What a table of sessions offers besides reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rows {
    /// Nothing: a workspace's own page.
    ReadOnly,
    /// Archiving (sessions of no workspace).
    Archive,
    /// Archiving and moving (a workspace's sessions, in its order).
    ArchiveAndMove,
}

fn session_rows(sessions: &[SessionSummary], now: DateTime<Utc>, rows: Rows) -> String {
    let mut out = String::new();
    for s in sessions {
        let id = s.id.to_string();
        let mut classes = String::from("session");
        if s.live {
            classes.push_str(" is-live");
        }
        if s.archived {
            classes.push_str(" is-archived");
        }
        let handle = match rows {
            Rows::ReadOnly => String::new(),
            Rows::Archive => "<td></td>".to_owned(),
            Rows::ArchiveAndMove => format!(
                "<td class=\"grip\"><button type=\"button\" class=\"handle\" draggable=\"true\" title=\"Drag to move this session (or press ↑ ↓)\" aria-label=\"Move session {}\">⠿</button></td>",
                esc(short_id(&id))
            ),
        };
        let archive = if rows == Rows::ReadOnly {
            String::new()
        } else {
            format!(
                "<td class=\"actions\"><button type=\"button\" class=\"archive\" data-archived=\"{}\">{}</button></td>",
                s.archived,
                if s.archived { "Unarchive" } else { "Archive" }
            )
        };
        let _ = write!(
            out,
            "<tr class=\"{classes}\" data-session=\"{}\">{handle}<td><a href=\"/sessions/{}\" title=\"{}\">{}</a></td><td>{}</td><td>{} <span class=\"dim\">{}</span></td><td>{}</td><td>{}</td>{archive}</tr>",
            esc(&id),
            esc(&id),
            esc(&id),
            esc(short_id(&id)),
            s.client
                .as_deref()
                .map_or_else(|| "<span class=\"dim\">unnamed</span>".to_owned(), esc),
            time(s.started),
            esc(&ago(now, s.started)),
            s.last_activity.map_or_else(
                || "<span class=\"dim\">no calls</span>".to_owned(),
                |at| format!(
                    "{} <span class=\"dim\">{}</span>",
                    time(at),
                    esc(&ago(now, at))
                )
            ),
            status_badge(s),
        );
    }
    out
}

/// A table of `sessions`; `after`, for a workspace's sessions cut short,
/// is the one that follows the last shown (where a session moved to the
/// end of the table goes before).
fn sessions_table(
    sessions: &[SessionSummary],
    now: DateTime<Utc>,
    rows: Rows,
    after: Option<&SessionSummary>,
) -> String {
    if sessions.is_empty() {
        return "<p class=\"empty\">No sessions yet.</p>".to_owned();
    }
    let (before, behind) = match rows {
        Rows::ReadOnly => ("", ""),
        Rows::Archive | Rows::ArchiveAndMove => ("<th></th>", "<th></th>"),
    };
    let after = after.map_or_else(String::new, |s| {
        format!(" data-after=\"{}\"", esc(&s.id.to_string()))
    });
    format!(
        "<table class=\"sessions\"><thead><tr>{before}<th>Session</th><th>Client</th><th>Started</th><th>Last activity</th><th>Status</th>{behind}</tr></thead><tbody{after}>{}</tbody></table>",
        session_rows(sessions, now, rows)
    )
}

/// A workspace's heading; on the workspaces page (`overview`) its title
/// links to its own page and it has the controls that change it.
fn workspace_heading(ws: &WorkspaceSummary, overview: bool) -> String {
    let title = if overview {
        format!(
            "<button type=\"button\" class=\"handle\" draggable=\"true\" title=\"Drag to move this workspace (or press ↑ ↓)\" aria-label=\"Move workspace {}\">⠿</button><a class=\"title\" href=\"/workspaces/{}\">{}</a>",
            esc(&ws.title),
            esc(&ws.id),
            esc(&ws.title)
        )
    } else {
        esc(&ws.title)
    };
    let live = ws.sessions.iter().filter(|s| s.live).count();
    format!(
        "<h2>{title} <span class=\"path\">{}</span>{}{}{}</h2>",
        esc(&ws.path.display().to_string()),
        if ws.missing_dir {
            " <span class=\"badge missing\" title=\"the directory is not there now\">missing directory</span>"
        } else {
            ""
        },
        if live > 0 {
            format!(" <span class=\"badge live\">{live} live</span>")
        } else {
            String::new()
        },
        if overview {
            "<span class=\"actions\"><button type=\"button\" class=\"rename\">Rename</button><button type=\"button\" class=\"remove\">Remove</button></span>"
        } else {
            ""
        }
    )
}

/// The workspaces page: every workspace in the registry's order with its
/// newest sessions, then the sessions of no workspace, and the controls
/// that change them. `page_token` is what the page's changes carry;
/// `picker` what its directory picker offers.
pub fn workspaces(
    overview: &Overview,
    now: DateTime<Utc>,
    page_token: &str,
    picker: &Capability,
) -> String {
    let body = format!(
        "<h1>Workspaces</h1><div class=\"toolbar\"><button type=\"button\" id=\"new-workspace\">New workspace…</button></div>\
<div id=\"notice\" class=\"notice\" role=\"status\" aria-live=\"polite\"></div>\
<div id=\"workspaces\">{}</div>{}{}",
        workspaces_fragment(overview, now),
        picker_dialog(),
        confirm_dialog(),
    );
    let picker = match picker {
        Capability::Browse { .. } => "browse",
        Capability::Dialog => "dialog",
    };
    layout(
        "Workspaces",
        "workspaces",
        Nav::Workspaces,
        &[("page-token", page_token), ("picker", picker)],
        &body,
    )
}

/// The part of the workspaces page that changes: the counts, every
/// workspace with its newest sessions, and the sessions of no workspace
/// (what a change answers with and the page's stream pushes).
pub fn workspaces_fragment(overview: &Overview, now: DateTime<Utc>) -> String {
    let total: usize = overview
        .workspaces
        .iter()
        .map(|w| w.sessions.len())
        .sum::<usize>()
        + overview.ungrouped.len();
    let live = overview
        .workspaces
        .iter()
        .flat_map(|w| &w.sessions)
        .chain(&overview.ungrouped)
        .filter(|s| s.live)
        .count();
    let mut body = format!(
        "<p class=\"summary\">{} workspace{} · {total} session{} · <span id=\"live-count\">{live}</span> live now</p>",
        overview.workspaces.len(),
        if overview.workspaces.len() == 1 {
            ""
        } else {
            "s"
        },
        if total == 1 { "" } else { "s" },
    );
    if overview.workspaces.is_empty() && overview.ungrouped.is_empty() {
        body.push_str(
            "<p class=\"empty\">No workspaces yet. Create one with “New workspace…”, or <code>dsh workspace create PATH</code>; agents that connect through <code>dsh mcp</code> add theirs.</p>",
        );
    }
    for ws in &overview.workspaces {
        let _ = write!(
            body,
            "<section class=\"workspace\" id=\"ws-{}\" data-workspace=\"{}\">{}",
            esc(&ws.id),
            esc(&ws.id),
            workspace_heading(ws, true)
        );
        let shown = ws.sessions.len().min(SESSIONS_PER_WORKSPACE);
        body.push_str(&sessions_table(
            &ws.sessions[..shown],
            now,
            Rows::ArchiveAndMove,
            ws.sessions.get(shown),
        ));
        if ws.sessions.len() > shown {
            let _ = write!(
                body,
                "<p class=\"more\"><a href=\"/workspaces/{}\">all {} sessions →</a></p>",
                esc(&ws.id),
                ws.sessions.len()
            );
        }
        body.push_str("</section>");
    }
    if !overview.ungrouped.is_empty() {
        let shown = overview.ungrouped.len().min(SESSIONS_PER_WORKSPACE);
        let _ = write!(
            body,
            "<section class=\"workspace ungrouped\"><h2>Sessions in no workspace <span class=\"dim\">{}</span></h2>{}</section>",
            overview.ungrouped.len(),
            sessions_table(&overview.ungrouped[..shown], now, Rows::Archive, None)
        );
    }
    body
}

/// The dialog of a new workspace: the directory picker (a list to walk
/// for a picker that browses, a button for one that asks the person
/// itself), the path and the title.
fn picker_dialog() -> String {
    "<dialog id=\"picker\" aria-labelledby=\"picker-heading\"><h2 id=\"picker-heading\">New workspace</h2>\
<p class=\"hint\">Choose its directory — open directories below, or type a path — then create it. The title is the directory's name unless you give one.</p>\
<div class=\"picker-bar\" data-for=\"browse\"><button type=\"button\" id=\"picker-up\">↑ Up</button><button type=\"button\" id=\"picker-home\">Home</button>\
<label><input type=\"checkbox\" id=\"picker-hidden\"> Show hidden</label></div>\
<p id=\"picker-where\" class=\"mono picker-where\" data-for=\"browse\"></p>\
<ul id=\"picker-list\" class=\"picker-list\" data-for=\"browse\"></ul>\
<div class=\"picker-bar\" data-for=\"dialog\"><button type=\"button\" id=\"picker-choose\">Choose a directory…</button></div>\
<label class=\"field\">Directory <input id=\"picker-path\" class=\"mono\" type=\"text\" spellcheck=\"false\" autocomplete=\"off\"></label>\
<label class=\"field\">Title <input id=\"picker-title\" type=\"text\" placeholder=\"the directory's name\" autocomplete=\"off\"></label>\
<div id=\"picker-notice\" class=\"notice\" role=\"status\" aria-live=\"polite\"></div>\
<div class=\"toolbar\"><button type=\"button\" id=\"picker-create\" class=\"primary\">Create workspace</button><button type=\"button\" id=\"picker-cancel\">Cancel</button></div></dialog>"
        .to_owned()
}

/// The dialog that asks before a workspace is removed.
fn confirm_dialog() -> String {
    "<dialog id=\"confirm\" aria-labelledby=\"confirm-text\"><p id=\"confirm-text\"></p>\
<p class=\"hint\">Only the registration goes: the directory, its files and its sessions' logs stay, and its sessions become sessions of no workspace.</p>\
<div class=\"toolbar\"><button type=\"button\" id=\"confirm-yes\" class=\"danger\">Remove</button><button type=\"button\" id=\"confirm-no\">Cancel</button></div></dialog>"
        .to_owned()
}

/// A directory picker's listing as the picker's list: a button per
/// directory that opens it, refused ones with why, hidden ones marked
/// (the page shows them on request).
pub fn picker_entries(listing: &Listing) -> String {
    let mut out = String::new();
    for entry in &listing.entries {
        let name = entry.name.to_string_lossy();
        let hidden = if name.starts_with('.') {
            " hidden-entry"
        } else {
            ""
        };
        // A symlink shows where it leads, unless it leads nowhere (a loop).
        let link = if entry.symlink && entry.path != listing.dir.join(&entry.name) {
            format!(
                " <span class=\"dim\">→ {}</span>",
                esc(&entry.path.display().to_string())
            )
        } else {
            String::new()
        };
        let (code, why) = match (entry.refused, entry.path.to_str()) {
            (Some(refusal), _) => (refusal.code(), refusal.words()),
            (None, None) => (
                "INVALID_ARGUMENT",
                "its path is not UTF-8: use `dsh workspace create`",
            ),
            (None, Some(path)) => {
                let _ = write!(
                    out,
                    "<li class=\"dir{hidden}\"><button type=\"button\" class=\"dir\" data-path=\"{}\">{}{link}</button></li>",
                    esc(path),
                    esc(&name)
                );
                continue;
            }
        };
        let _ = write!(
            out,
            "<li class=\"refused{hidden}\" data-code=\"{code}\"><span class=\"name\">{}</span>{link} <span class=\"why\">{why}</span></li>",
            esc(&name)
        );
    }
    if listing.entries.is_empty() {
        out.push_str("<li class=\"empty\">No directories here.</li>");
    }
    if listing.truncated {
        out.push_str(
            "<li class=\"dim\">More than a listing shows: type the path of the one you want.</li>",
        );
    }
    out
}

/// One workspace with all its sessions, `page` (0-based) of
/// [`SESSIONS_PER_PAGE`].
pub fn workspace(ws: &WorkspaceSummary, page: usize, now: DateTime<Utc>) -> String {
    let pages = ws.sessions.len().div_ceil(SESSIONS_PER_PAGE).max(1);
    let page = page.min(pages - 1);
    let start = page * SESSIONS_PER_PAGE;
    let end = (start + SESSIONS_PER_PAGE).min(ws.sessions.len());
    let mut body = format!(
        "<p class=\"crumbs\"><a href=\"/\">Workspaces</a></p><h1>{}</h1>{}<p class=\"summary\">{} sessions</p>",
        esc(&ws.title),
        workspace_heading(ws, false),
        ws.sessions.len()
    );
    body.push_str(&sessions_table(
        &ws.sessions[start..end],
        now,
        Rows::ReadOnly,
        None,
    ));
    if pages > 1 {
        body.push_str("<p class=\"pages\">");
        for p in 0..pages {
            if p == page {
                let _ = write!(body, "<strong>{}</strong> ", p + 1);
            } else {
                let _ = write!(
                    body,
                    "<a href=\"/workspaces/{}?page={p}\">{}</a> ",
                    esc(&ws.id),
                    p + 1
                );
            }
        }
        body.push_str("</p>");
    }
    layout(&ws.title, "workspace", Nav::Workspaces, &[], &body)
}

/// A string field of a JSON object.
fn field<'a>(v: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(serde_json::Value::as_str)
}

/// The argument of a call that matters to a person: the command, the
/// terminal, the job, the lsp op with its symbol. The summary is the
/// session log's JSON of the arguments (cut when long).
pub fn argument(tool: &str, summary: &str) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(summary) else {
        return summary.to_owned();
    };
    let joined = |key: &str| {
        v.get(key).and_then(|a| a.as_array()).map(|argv| {
            argv.iter()
                .map(|s| s.as_str().unwrap_or("?"))
                .collect::<Vec<_>>()
                .join(" ")
        })
    };
    let text = match tool {
        "bash" => field(&v, "command").map(str::to_owned),
        "subagent" => field(&v, "prompt").map(str::to_owned),
        "terminal_open" => {
            let command = joined("command").unwrap_or_else(|| "bash".to_owned());
            Some(match field(&v, "name") {
                Some(name) => format!("{command} [{name}]"),
                None => command,
            })
        }
        "terminal_send" => field(&v, "id").map(|id| match field(&v, "text") {
            Some(size) => format!("{id} · {size}"),
            None => id.to_owned(),
        }),
        "terminal_read" => field(&v, "id").map(|id| match field(&v, "mode") {
            Some(mode) => format!("{id} · {mode}"),
            None => id.to_owned(),
        }),
        "terminal_signal" => field(&v, "id").map(|id| match field(&v, "signal") {
            Some(sig) => format!("{id} · {sig}"),
            None => id.to_owned(),
        }),
        "terminal_close" => field(&v, "id").map(str::to_owned),
        "job_output" | "job_kill" => field(&v, "job_id").map(str::to_owned),
        "job_list" => Some(field(&v, "status").unwrap_or("all").to_owned()),
        "lsp" => field(&v, "op").map(|op| {
            let mut s = op.to_owned();
            if let Some(path) = field(&v, "path") {
                let _ = write!(s, " {path}");
                if let Some(line) = v.get("line").and_then(serde_json::Value::as_u64) {
                    let _ = write!(s, ":{line}");
                }
            }
            if let Some(symbol) = field(&v, "symbol").or_else(|| field(&v, "query")) {
                let _ = write!(s, " {symbol}");
            }
            s
        }),
        _ => None,
    };
    text.unwrap_or_else(|| summary.to_owned())
}

/// How a call ended, in words: `OK`, `OK · input_wait`, `OK · exit 1`,
/// or the error code.
pub fn outcome(entry: &LogEntry) -> String {
    let mut out = entry.outcome.clone();
    if let Some(reason) = &entry.reason {
        let _ = write!(out, " · {reason}");
    }
    if let Some(code) = entry.exit_code {
        let _ = write!(out, " · exit {code}");
    }
    out
}

/// What tells one logged call from another on a page (its start to the
/// microsecond, its tool, duration and outcome), so a call that arrives
/// both from the store and live is shown once.
pub fn call_key(entry: &LogEntry) -> String {
    format!(
        "{}|{}|{}|{}",
        entry.at.timestamp_micros(),
        entry.tool,
        entry.duration_ms,
        entry.outcome
    )
}

/// One row of a session's timeline.
pub fn call_row(entry: &LogEntry) -> String {
    let failed = entry.outcome != "OK";
    let argument = argument(&entry.tool, &entry.argument_summary);
    format!(
        "<tr class=\"call{}\" data-key=\"{}\" data-tool=\"{}\"><td>{}</td><td class=\"tool\">{}</td><td class=\"arg\" title=\"{}\">{}</td><td class=\"num\">{}</td><td class=\"outcome\"><span class=\"swatch\" data-color=\"{}\"></span>{}</td></tr>",
        if failed { " failed" } else { "" },
        esc(&call_key(entry)),
        esc(&entry.tool),
        time(entry.at),
        esc(&entry.tool),
        esc(&entry.argument_summary),
        esc(&argument),
        esc(&chart::duration_text(entry.duration_ms)),
        chart::call_color(entry),
        esc(&outcome(entry)),
    )
}

/// The pictures of a session (the timeline strip, the terminal sends).
pub fn session_charts(log: &[LogEntry]) -> String {
    if log.is_empty() {
        return "<p class=\"empty\">No tool calls yet.</p>".to_owned();
    }
    let mut out = String::from("<h2>When calls happened and how long they took</h2>");
    out.push_str(&chart::timeline(log));
    let sends = chart::terminal_sends(log);
    if !sends.is_empty() {
        out.push_str("<h2>Terminal sends: latency and settle reason</h2>");
        out.push_str(&sends);
    }
    out
}

/// A session's page: facts, pictures, and its calls newest first
/// (only those of `tool` when given).
pub fn session(view: &SessionView, tool: Option<&str>, now: DateTime<Utc>) -> String {
    let s = &view.summary;
    let id = s.id.to_string();
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for e in &view.log {
        *counts.entry(e.tool.as_str()).or_default() += 1;
    }
    let mut body = format!(
        "<p class=\"crumbs\"><a href=\"/\">Workspaces</a>{}</p><h1>Session <span class=\"mono\">{}</span> {}</h1>",
        view.workspace
            .as_ref()
            .map_or_else(String::new, |(wid, title)| format!(
                " › <a href=\"/workspaces/{}\">{}</a>",
                esc(wid),
                esc(title)
            )),
        esc(short_id(&id)),
        status_badge(s)
    );
    let _ = write!(
        body,
        "<dl class=\"facts\"><dt>Id</dt><dd class=\"mono\">{}</dd><dt>Client</dt><dd>{}</dd><dt>Directory</dt><dd class=\"mono\">{}</dd><dt>Started</dt><dd>{} <span class=\"dim\">{}</span></dd><dt>Last activity</dt><dd>{}</dd><dt>Calls</dt><dd>{}</dd></dl>",
        esc(&id),
        s.client
            .as_deref()
            .map_or_else(|| "unnamed".to_owned(), esc),
        s.cwd
            .as_ref()
            .map_or_else(|| "—".to_owned(), |c| esc(&c.display().to_string())),
        time(s.started),
        esc(&ago(now, s.started)),
        s.last_activity.map_or_else(
            || "no calls".to_owned(),
            |at| format!(
                "{} <span class=\"dim\">{}</span>",
                time(at),
                esc(&ago(now, at))
            )
        ),
        view.log.len(),
    );
    let _ = write!(
        body,
        "<section id=\"charts\" class=\"charts\">{}</section>",
        session_charts(&view.log)
    );
    body.push_str("<nav class=\"filter\">Tool: ");
    let _ = write!(
        body,
        "<a href=\"/sessions/{}\"{}>all <span class=\"dim\">{}</span></a>",
        esc(&id),
        if tool.is_none() {
            " class=\"active\""
        } else {
            ""
        },
        view.log.len()
    );
    for (name, n) in &counts {
        let _ = write!(
            body,
            " <a href=\"/sessions/{}?tool={}\"{}>{} <span class=\"dim\">{n}</span></a>",
            esc(&id),
            esc(name),
            if tool == Some(*name) {
                " class=\"active\""
            } else {
                ""
            },
            esc(name)
        );
    }
    body.push_str("</nav>");
    let rows: String = view
        .log
        .iter()
        .rev()
        .filter(|e| tool.is_none_or(|t| e.tool == t))
        .map(call_row)
        .collect();
    let _ = write!(
        body,
        "<table class=\"timeline\"><thead><tr><th>Time</th><th>Tool</th><th>Argument</th><th>Duration</th><th>Outcome</th></tr></thead><tbody id=\"calls\">{rows}</tbody></table>{}",
        if view.log.is_empty() {
            ""
        } else {
            "<p class=\"dim\">The session log keeps the newest 1,000 calls of a session.</p>"
        }
    );
    let mut data = vec![("session", id.as_str())];
    if s.live {
        data.push(("live", "true"));
    }
    if let Some(t) = tool {
        data.push(("tool", t));
    }
    layout(
        &format!("Session {}", short_id(&id)),
        "session",
        Nav::Workspaces,
        &data,
        &body,
    )
}

/// The id cell of a terminal or job row: a link to its page here, or, on
/// a remote host (whose screens and output this page does not carry), the
/// qualified id as text.
fn id_cell(kind: &str, id: &str, remote: bool) -> String {
    if remote {
        format!("<span class=\"mono\">{}</span>", esc(id))
    } else {
        format!("<a href=\"/{kind}/{}\">{}</a>", esc(id), esc(id))
    }
}

fn terminal_row(t: &TerminalRow, remote: bool) -> String {
    format!(
        "<tr data-terminal=\"{}\"><td>{}</td><td>{}</td><td class=\"mono\">{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
        esc(&t.id),
        id_cell("terminals", &t.id, remote),
        t.name.as_deref().map_or_else(String::new, esc),
        esc(&t.command),
        esc(&t.status),
        if t.active_send {
            "<span class=\"badge sending\" title=\"an agent's send is waiting to settle\">sending</span>"
        } else {
            ""
        },
        esc(&span(Duration::from_secs(t.idle_s))),
    )
}

fn job_row(j: &JobRow, remote: bool) -> String {
    format!(
        "<tr data-job=\"{}\"><td>{}</td><td>{}</td><td><span class=\"badge job-{}\">{}</span></td><td class=\"mono\">{}</td><td>{}</td></tr>",
        esc(&j.id),
        id_cell("jobs", &j.id, remote),
        esc(&j.kind),
        esc(&j.status),
        esc(&j.status),
        esc(&j.label),
        j.exit_code
            .map_or_else(String::new, |c| format!("exit {c}")),
    )
}

/// A connected agent's section; `host` names the remote host it is
/// connected on, `None` for this machine's daemon.
fn connection_section(c: &LiveConnection, host: Option<&str>) -> String {
    let remote = host.is_some();
    let mut out = format!(
        "<section class=\"agent\" data-connection=\"{}\"{}><h2>{} <span class=\"dim\">connection {}{} · pid {} · connected {}</span></h2>",
        c.id,
        host.map_or_else(String::new, |h| format!(" data-host=\"{}\"", esc(h))),
        c.client
            .as_deref()
            .map_or_else(|| "unnamed client".to_owned(), esc),
        c.id,
        host.map_or_else(String::new, |h| format!(" on {}", esc(h))),
        c.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
        esc(&span(Duration::from_secs(c.age_s))),
    );
    if let Some(d) = &c.detached {
        let _ = write!(
            out,
            "<p class=\"detached\">Detached: the client went away {} ago; its terminals and jobs are kept for the agent to take back for {} more (<span class=\"mono\">dsh ps --end {}</span>{} ends them now).</p>",
            esc(&span(Duration::from_secs(d.for_s))),
            esc(&span(Duration::from_secs(d.left_s))),
            c.id,
            host.map_or_else(String::new, |h| format!(" on {}", esc(h))),
        );
    }
    let _ = write!(
        out,
        "<p>{}{}{}</p>",
        c.workspace.as_deref().map_or_else(String::new, |w| format!(
            "workspace <strong>{}</strong> · ",
            esc(w)
        )),
        c.cwd.as_ref().map_or_else(
            || "<span class=\"dim\">no directory yet</span>".to_owned(),
            |d| format!("<span class=\"mono\">{}</span>", esc(d))
        ),
        c.session.map_or_else(String::new, |s| {
            let s = s.to_string();
            if remote {
                // Its log is in the host's store, not in this one.
                format!(" · session {}", esc(short_id(&s)))
            } else {
                format!(
                    " · <a href=\"/sessions/{}\">session {}</a>",
                    esc(&s),
                    esc(short_id(&s))
                )
            }
        }),
    );
    if c.terminals.is_empty() {
        out.push_str("<p class=\"empty\">No terminals.</p>");
    } else {
        let _ = write!(
            out,
            "<table class=\"terminals\"><thead><tr><th>Terminal</th><th>Name</th><th>Command</th><th>Status</th><th></th><th>Idle</th></tr></thead><tbody>{}</tbody></table>",
            c.terminals
                .iter()
                .map(|t| terminal_row(t, remote))
                .collect::<String>()
        );
    }
    if c.jobs.is_empty() {
        out.push_str("<p class=\"empty\">No jobs.</p>");
    } else {
        let _ = write!(
            out,
            "<table class=\"jobs\"><thead><tr><th>Job</th><th>Kind</th><th>Status</th><th>Runs</th><th>Exit</th></tr></thead><tbody>{}</tbody></table>",
            c.jobs
                .iter()
                .map(|j| job_row(j, remote))
                .collect::<String>()
        );
    }
    out.push_str("</section>");
    out
}

/// A remote host's section: what its daemon showed, or why it could not
/// be asked.
fn remote_section(r: &RemoteHost) -> String {
    let mut out = format!(
        "<section class=\"remote\" data-host=\"{}\"><h2 class=\"host\">{} <span class=\"dim\">remote host · <span class=\"mono\">{}</span> · bridge pid {}</span></h2>",
        esc(&r.host),
        esc(&r.host),
        esc(&r.target),
        r.bridge_pid,
    );
    if let Some(error) = &r.error {
        let _ = write!(
            out,
            "<p class=\"error\">{} could not be asked: {}</p>",
            esc(&r.host),
            esc(error)
        );
    } else if !r.answered {
        let _ = write!(out, "<p class=\"empty\">Asking {}…</p>", esc(&r.host));
    } else if r.connections.is_empty() {
        let _ = write!(
            out,
            "<p class=\"empty\">No agent is connected to dsh on {} now.</p>",
            esc(&r.host)
        );
    } else {
        let _ = write!(
            out,
            "<p class=\"hint\">Watch a terminal of {0} from this machine with <span class=\"mono\">dsh attach {0}:pty-N</span> (add <span class=\"mono\">--write</span> to type).</p>",
            esc(&r.host)
        );
        for c in &r.connections {
            out.push_str(&connection_section(c, Some(&r.host)));
        }
    }
    out.push_str("</section>");
    out
}

/// The live list: every connected agent with its terminals and jobs, then
/// every remote host served from here with its own.
pub fn live_fragment(view: &LiveView) -> String {
    let mut out = approvals_section(&view.approvals);
    out += &if view.connections.is_empty() {
        "<p class=\"empty\">No agent is connected to this dsh daemon now.</p>".to_owned()
    } else {
        view.connections
            .iter()
            .map(|c| connection_section(c, None))
            .collect()
    };
    for r in &view.remotes {
        out.push_str(&remote_section(r));
    }
    out
}

/// The live page.
pub fn live(view: &LiveView) -> String {
    let body = format!(
        "<h1>Live</h1><p class=\"summary\">Every agent connected to this dsh daemon, its terminals and its jobs, and those on the remote hosts that <span class=\"mono\">dsh mcp --remote</span> bridges here serve. Updates by itself.</p><div id=\"live\">{}</div>",
        live_fragment(view)
    );
    layout("Live", "live", Nav::Live, &[], &body)
}

/// A terminal's page: the live screen, read-only until the person takes
/// the keyboard.
pub fn terminal(connection: &LiveConnection, t: &TerminalRow) -> String {
    let body = format!(
        "<p class=\"crumbs\"><a href=\"/live\">Live</a> › {}</p><h1>Terminal {}{}</h1>\
<p class=\"mono\">{}</p>\
<div class=\"toolbar\"><button id=\"take\" type=\"button\">Take the keyboard</button>\
<button id=\"release\" type=\"button\" hidden>Give the keyboard back</button>\
<span id=\"kbd-state\" class=\"kbd-state\">Read-only: you are watching.</span></div>\
<p class=\"hint\">Taking the keyboard lets your keys reach the program. Keys are refused while an agent's send is active; while you type (until you pause for a second and the program waits for input again) the agent's sends get <code>SEND_ACTIVE</code>.</p>\
<div id=\"notice\" class=\"notice\" role=\"status\" aria-live=\"polite\"></div>\
<div id=\"screen\" class=\"screen\" tabindex=\"0\" aria-label=\"terminal screen\"></div>\
<p id=\"term-end\" class=\"ended\" hidden></p>",
        esc(&c_label(connection)),
        esc(&t.id),
        t.name.as_deref().map_or_else(String::new, |n| format!(
            " <span class=\"dim\">[{}]</span>",
            esc(n)
        )),
        esc(&t.command),
    );
    layout(
        &format!("Terminal {}", t.id),
        "terminal",
        Nav::Live,
        &[("terminal", &t.id)],
        &body,
    )
}

fn c_label(c: &LiveConnection) -> String {
    format!(
        "{} (connection {})",
        c.client.as_deref().unwrap_or("unnamed client"),
        c.id
    )
}

/// The facts of a job (status, exit code, detail) as a fragment.
pub fn job_facts(job: &JobRow) -> String {
    format!(
        "<dl class=\"facts\"><dt>Kind</dt><dd>{}</dd><dt>Status</dt><dd><span class=\"badge job-{}\">{}</span></dd><dt>Runs</dt><dd class=\"mono\">{}</dd><dt>Exit code</dt><dd>{}</dd><dt>Detail</dt><dd>{}</dd></dl>",
        esc(&job.kind),
        esc(&job.status),
        esc(&job.status),
        esc(&job.label),
        job.exit_code
            .map_or_else(|| "—".to_owned(), |c| c.to_string()),
        job.detail.as_deref().map_or_else(|| "—".to_owned(), esc),
    )
}

/// A job's page: its status and the tail of its output, live.
pub fn job(connection: Option<&LiveConnection>, tail: &JobTail) -> String {
    let body = format!(
        "<p class=\"crumbs\"><a href=\"/live\">Live</a>{}</p><h1>Job {}</h1><div id=\"job-facts\">{}</div>\
<h2>Output <span class=\"dim\" id=\"job-bytes\">{} bytes</span></h2><pre id=\"job-output\" class=\"output\">{}</pre>",
        connection.map_or_else(String::new, |c| format!(" › {}", esc(&c_label(c)))),
        esc(&tail.job.id),
        job_facts(&tail.job),
        tail.end,
        esc(&tail.output),
    );
    let next = tail.next.to_string();
    layout(
        &format!("Job {}", tail.job.id),
        "job",
        Nav::Live,
        &[("job", &tail.job.id), ("next", &next)],
        &body,
    )
}

/// A page that moves on to `to` at once by itself (a meta refresh: the
/// content security policy allows no inline script), with a link there
/// reading `link` for a browser that does not. `served`: this server
/// answers with it, so it names the page's icon (which a browser asks
/// for otherwise); a page opened from a file names none.
pub fn move_on(to: &str, link: &str, served: bool) -> String {
    let to = esc(to);
    let icon = if served {
        "<link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\">"
    } else {
        ""
    };
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta http-equiv=\"refresh\" content=\"0;url={to}\"><title>dsh</title>{icon}</head>\
         <body><p><a href=\"{to}\">{}</a></p></body></html>\n",
        esc(link)
    )
}

/// The page where a person answers terminal `id`'s secret prompt.
pub fn answer(
    id: &str,
    waiting: Option<&PromptView>,
    screen_line: Option<&str>,
    page_token: &str,
) -> String {
    let about = match waiting {
        Some(p) => format!(
            "<p>The agent <strong>{}</strong> waits: <span class=\"mono\">{}</span> in {} asks</p><p class=\"prompt mono\">{}</p>{}",
            esc(&p.agent),
            esc(&p.command),
            esc(id),
            esc(&p.prompt),
            p.reader.as_deref().map_or_else(String::new, |r| format!(
                "<p class=\"reader\">{}</p>",
                esc(r)
            )),
        ),
        None => format!(
            "<p>No agent's send waits for an answer in {}. What you type is typed only if a program there reads a secret now (with echo off).</p>{}",
            esc(id),
            screen_line.map_or_else(String::new, |l| format!(
                "<p class=\"prompt mono\">{}</p>",
                esc(l)
            )),
        ),
    };
    let body = format!(
        "<p class=\"crumbs\"><a href=\"/live\">Live</a> › <a href=\"/terminals/{0}\">{0}</a></p><h1>Answer {0}'s prompt</h1>{about}\
<form method=\"post\" action=\"/answer/{0}\" class=\"answer\"><input type=\"hidden\" name=\"page_token\" value=\"{token}\"><label>Answer <input type=\"password\" name=\"secret\" autocomplete=\"off\" autofocus required></label> \
<button type=\"submit\">Answer</button></form>\
<p class=\"hint\">The answer goes to the program only: the agent, its client, the session log and this page never see it.</p>",
        esc(id),
        token = esc(page_token),
    );
    layout(&format!("Answer {id}"), "answer", Nav::Live, &[], &body)
}

/// The page after a person answered.
pub fn answered(id: &str, how: &str) -> String {
    let body = format!(
        "<h1>Answered</h1><p>Your answer to {} was {}. You can close this page.</p><p><a href=\"/terminals/{}\">Watch the terminal</a></p>",
        esc(id),
        esc(how),
        esc(id),
    );
    layout("Answered", "answered", Nav::Live, &[], &body)
}

/// The commands waiting for a person's approval, as the live page lists
/// them (nothing when none waits).
fn approvals_section(approvals: &[ApprovalView]) -> String {
    if approvals.is_empty() {
        return String::new();
    }
    let items: String = approvals
        .iter()
        .map(|a| {
            let first = a.command.lines().next().unwrap_or_default();
            let more = if a.command.lines().count() > 1 { " …" } else { "" };
            format!(
                "<li><a href=\"/approve/{id}\">{id}</a> <strong>{agent}</strong> asks to run <span class=\"mono\">{first}{more}</span> outside the sandbox <span class=\"dim\">(waiting {waited})</span></li>",
                id = esc(&a.id),
                agent = esc(&a.agent),
                first = esc(first),
                waited = esc(&span(a.waited)),
            )
        })
        .collect();
    format!(
        "<section class=\"approvals\"><h2>Waiting for your approval</h2><ul>{items}</ul></section>"
    )
}

/// The page where a person runs or refuses a command an agent asks to run
/// outside the sandbox: the question exactly as the agent's call renders
/// it, the agent, the directory, and the two buttons (which carry the
/// page's token).
pub fn approve(id: &str, waiting: Option<&ApprovalView>, page_token: &str) -> String {
    let Some(a) = waiting else {
        let body = format!(
            "<p class=\"crumbs\"><a href=\"/live\">Live</a></p><h1>{}</h1><p>No command waits for approval as {} now: it was decided, or its call ended (answered, timed out or cancelled). Nothing runs from this page.</p>",
            esc(id),
            esc(id),
        );
        return layout(&format!("Approve {id}"), "approve", Nav::Live, &[], &body);
    };
    let body = format!(
        "<p class=\"crumbs\"><a href=\"/live\">Live</a> › {id}</p><h1>Run a command outside the sandbox?</h1>\
<p>The agent <strong>{agent}</strong> asks, in <span class=\"mono\">{cwd}</span> (waiting {waited}):</p>\
<pre class=\"question mono\">{question}</pre>\
<form method=\"post\" action=\"/approve/{id}\" class=\"approve\"><input type=\"hidden\" name=\"page_token\" value=\"{token}\">\
<button type=\"submit\" name=\"decision\" value=\"run\">Run</button> \
<button type=\"submit\" name=\"decision\" value=\"refuse\" autofocus>Refuse</button></form>\
<p class=\"hint\">Run lets this one command run with all of your rights, once. Refuse tells the agent you refused. Only a choice here or with <span class=\"mono\">dsh approve</span> on your terminal counts: what the agent's client answers never runs anything.</p>",
        id = esc(&a.id),
        agent = esc(&a.agent),
        cwd = esc(&a.cwd.display().to_string()),
        waited = esc(&span(a.waited)),
        question = esc(&a.question),
        token = esc(page_token),
    );
    layout(&format!("Approve {id}"), "approve", Nav::Live, &[], &body)
}

/// The page after a person ran or refused a command.
pub fn decided(id: &str, run: bool, what: &str) -> String {
    let body = format!(
        "<h1>{}</h1><p>{}. You can close this page.</p><p><a href=\"/live\">Live</a></p>",
        if run { "Approved" } else { "Refused" },
        esc(what),
    );
    layout(&format!("{id} decided"), "decided", Nav::Live, &[], &body)
}

/// An error page: what went wrong and what to do.
pub fn error(code: &str, message: &str) -> String {
    let body = format!(
        "<h1>{}</h1><p>{}</p><p><a href=\"/\">Workspaces</a> · <a href=\"/live\">Live</a></p>",
        esc(code),
        esc(message)
    );
    layout(code, "error", Nav::Workspaces, &[], &body)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use workspace::SessionId;

    fn remote(answered: bool, error: Option<&str>, connections: Vec<LiveConnection>) -> LiveView {
        LiveView {
            connections: Vec::new(),
            remotes: vec![RemoteHost {
                host: "devbox".into(),
                target: "ssh://devbox/src".into(),
                bridge_pid: 7,
                connections,
                answered,
                error: error.map(str::to_owned),
            }],
            approvals: Vec::new(),
        }
    }

    /// The person is told which executable reads the prompt, escaped.
    #[test]
    fn the_answer_page_names_the_reader() {
        let prompt = PromptView {
            prompt: "[sudo] password for you: ".to_owned(),
            command: "./setup.sh".to_owned(),
            agent: "codex-mcp-client".to_owned(),
            reader: Some(
                "The program reading it is /usr/bin/bash <pid 7>. WARNING: a shell".to_owned(),
            ),
        };
        let page = answer("pty-1", Some(&prompt), None, "token");
        assert!(
            page.contains(
                "The program reading it is /usr/bin/bash &lt;pid 7&gt;. WARNING: a shell"
            ),
            "{page}"
        );
    }

    fn waiting(command: &str) -> ApprovalView {
        ApprovalView {
            id: "ap-3".into(),
            question: format!("An agent asks … marked │:\n\n│ {command}\n"),
            command: command.into(),
            cwd: "/ws".into(),
            agent: "codex<x>".into(),
            waited: Duration::from_secs(4),
        }
    }

    #[test]
    fn the_approval_page_shows_the_question_escaped_and_both_buttons_with_the_token() {
        let page = approve("ap-3", Some(&waiting("rm -rf ~ </pre><script>")), "tok123");
        assert!(
            page.contains("│ rm -rf ~ &lt;/pre&gt;&lt;script&gt;"),
            "{page}"
        );
        assert!(!page.contains("<script>"), "{page}");
        assert!(
            page.contains("codex&lt;x&gt;") && page.contains("/ws"),
            "{page}"
        );
        assert!(page.contains("action=\"/approve/ap-3\""), "{page}");
        assert!(
            page.contains("name=\"page_token\" value=\"tok123\""),
            "{page}"
        );
        assert!(page.contains("value=\"run\">Run</button>"), "{page}");
        assert!(
            page.contains("value=\"refuse\" autofocus>Refuse</button>"),
            "{page}"
        );
        let gone = approve("ap-9", None, "tok123");
        assert!(
            gone.contains("No command waits") && !gone.contains("<form"),
            "{gone}"
        );
    }

    #[test]
    fn the_live_list_links_every_waiting_approval() {
        let mut view = remote(true, None, Vec::new());
        assert!(!live_fragment(&view).contains("Waiting for your approval"));
        view.approvals.push(waiting("make install\nrm x"));
        let live = live_fragment(&view);
        assert!(
            live.contains("<a href=\"/approve/ap-3\">ap-3</a>"),
            "{live}"
        );
        assert!(live.contains("make install …"), "{live}");
    }

    #[test]
    fn a_remote_host_shows_each_of_its_states_and_links_nothing_of_this_daemon() {
        let asking = live_fragment(&remote(false, None, Vec::new()));
        assert!(asking.contains("No agent is connected to this dsh daemon"));
        assert!(asking.contains("data-host=\"devbox\"") && asking.contains("Asking devbox…"));
        let failed = live_fragment(&remote(
            false,
            Some("devbox did not answer within 15 s"),
            Vec::new(),
        ));
        assert!(failed.contains("devbox could not be asked: devbox did not answer within 15 s"));
        let idle = live_fragment(&remote(true, None, Vec::new()));
        assert!(idle.contains("No agent is connected to dsh on devbox now."));
        let agent = LiveConnection {
            id: 3,
            client: Some("claude-code".into()),
            pid: Some(42),
            cwd: None,
            session: Some(SessionId::new_random()),
            workspace: None,
            age_s: 5,
            terminals: vec![TerminalRow {
                id: "devbox:pty-1".into(),
                name: None,
                command: "python3 -q".into(),
                status: "running".into(),
                active_send: false,
                idle_s: 1,
            }],
            jobs: vec![JobRow {
                id: "devbox:bash-2".into(),
                kind: "bash".into(),
                status: "running".into(),
                label: "cargo build".into(),
                exit_code: None,
                detail: None,
            }],
            detached: None,
        };
        let busy = live_fragment(&remote(true, None, vec![agent]));
        assert!(busy.contains("connection 3 on devbox"), "{busy}");
        assert!(busy.contains("dsh attach devbox:pty-N"));
        // The host's terminals, jobs and sessions have no page here.
        assert!(busy.contains("devbox:pty-1") && busy.contains("devbox:bash-2"));
        for here in ["href=\"/terminals/", "href=\"/jobs/", "href=\"/sessions/"] {
            assert!(!busy.contains(here), "{here} in {busy}");
        }
    }

    #[test]
    fn the_argument_that_matters_is_picked() {
        assert_eq!(
            argument("bash", r#"{"command":"cargo test"}"#),
            "cargo test"
        );
        assert_eq!(
            argument("terminal_send", r#"{"id":"pty-2","text":"<3 bytes>"}"#),
            "pty-2 · <3 bytes>"
        );
        assert_eq!(
            argument(
                "terminal_open",
                r#"{"command":["python3","-q"],"name":"repl"}"#
            ),
            "python3 -q [repl]"
        );
        assert_eq!(
            argument(
                "lsp",
                r#"{"op":"definition","path":"src/lib.rs","line":12,"symbol":"Foo"}"#
            ),
            "definition src/lib.rs:12 Foo"
        );
        assert_eq!(argument("job_output", r#"{"job_id":"bash-3"}"#), "bash-3");
        // Cut summaries are shown as they are.
        assert_eq!(argument("bash", r#"{"command":"ec…"#), r#"{"command":"ec…"#);
    }

    #[test]
    fn a_page_that_moves_on_names_its_address_escaped() {
        assert_eq!(
            move_on("/x?a=1&b=\"2\"", "Open <it>", false),
            "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
             <meta http-equiv=\"refresh\" content=\"0;url=/x?a=1&amp;b=&quot;2&quot;\">\
             <title>dsh</title></head><body><p><a href=\"/x?a=1&amp;b=&quot;2&quot;\">\
             Open &lt;it&gt;</a></p></body></html>\n"
        );
        assert!(move_on("/", "Open", true).contains(
            "<title>dsh</title><link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\"></head>"
        ));
    }

    #[test]
    fn outcomes_say_how_a_call_settled() {
        let at = DateTime::<Utc>::from_timestamp(0, 0).unwrap_or_default();
        let e = LogEntry::new(at, "terminal_send", "{}", "OK", 3);
        assert_eq!(outcome(&e), "OK");
        assert_eq!(
            outcome(&e.clone().with_result(Some("prompt"), Some(2))),
            "OK · prompt · exit 2"
        );
        let e = LogEntry::new(at, "terminal_send", "{}", "SEND_ACTIVE", 0);
        assert_eq!(outcome(&e), "SEND_ACTIVE");
    }

    #[test]
    fn a_picker_listing_opens_directories_and_says_why_it_refuses_the_rest() {
        use picker_seam::{Entry, Refusal};
        use std::os::unix::ffi::OsStringExt as _;
        use std::path::PathBuf;
        let entry = |name: std::ffi::OsString, path: &str, symlink, refused| Entry {
            name,
            path: PathBuf::from(path),
            symlink,
            refused,
        };
        let listing = Listing {
            dir: PathBuf::from("/home/me"),
            parent: Some(PathBuf::from("/home")),
            entries: vec![
                entry(".config".into(), "/home/me/.config", false, None),
                entry("a&b".into(), "/home/me/a&b", false, None),
                entry("docs".into(), "/srv/docs", true, None),
                entry("kernel".into(), "/proc", true, Some(Refusal::DeviceTree)),
                entry(
                    "loop".into(),
                    "/home/me/loop",
                    true,
                    Some(Refusal::SymlinkLoop),
                ),
                entry(
                    std::ffi::OsString::from_vec(b"bad\xff".to_vec()),
                    "/home/me/bad\u{fffd}",
                    false,
                    None,
                ),
            ],
            truncated: true,
        };
        let mut raw = listing.clone();
        // A path that is not UTF-8 cannot go back to the server as text.
        raw.entries[5].path =
            PathBuf::from(std::ffi::OsString::from_vec(b"/home/me/bad\xff".to_vec()));
        assert_eq!(
            picker_entries(&raw),
            "<li class=\"dir hidden-entry\"><button type=\"button\" class=\"dir\" data-path=\"/home/me/.config\">.config</button></li>\
<li class=\"dir\"><button type=\"button\" class=\"dir\" data-path=\"/home/me/a&amp;b\">a&amp;b</button></li>\
<li class=\"dir\"><button type=\"button\" class=\"dir\" data-path=\"/srv/docs\">docs <span class=\"dim\">→ /srv/docs</span></button></li>\
<li class=\"refused\" data-code=\"PICKER_DEVICE_TREE\"><span class=\"name\">kernel</span> <span class=\"dim\">→ /proc</span> <span class=\"why\">a device tree</span></li>\
<li class=\"refused\" data-code=\"PICKER_SYMLINK_LOOP\"><span class=\"name\">loop</span> <span class=\"why\">a symlink loop</span></li>\
<li class=\"refused\" data-code=\"INVALID_ARGUMENT\"><span class=\"name\">bad\u{fffd}</span> <span class=\"why\">its path is not UTF-8: use `dsh workspace create`</span></li>\
<li class=\"dim\">More than a listing shows: type the path of the one you want.</li>"
        );
        let empty = Listing {
            entries: Vec::new(),
            truncated: false,
            ..listing
        };
        assert_eq!(
            picker_entries(&empty),
            "<li class=\"empty\">No directories here.</li>"
        );
    }
}
