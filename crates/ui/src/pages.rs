//! The pages, rendered on the server: workspaces (with the controls that
//! change them and the directory picker's dialog), one workspace, a
//! session, live agents, a terminal, a job, and errors.
//!
//! Each function is pure: data in, HTML out, written as [`maud`]
//! templates (which escape every value they insert) and finished by
//! [`page`]. The live parts (a session's new calls, the live list, a
//! terminal's screen, a job's output) are fragments of the same
//! functions, pushed by the streams in [`crate::server`] and swapped in
//! by the page's small script.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use error_code::Code;
use maud::{Markup, PreEscaped, html};
use picker_seam::{Capability, Entry, Listing};
use workspace::LogEntry;

use crate::chart;
use crate::html::{Nav, PageData, ago, layout, page, short_id, span, time};
use crate::source::{
    ApprovalView, JobTail, LiveView, Overview, PromptView, RemoteHost, SessionSummary, SessionView,
    WorkspaceSummary,
};
use daemon_wire::snapshot::{ConnectionRow, JobRow, TerminalRow};

/// Sessions listed per workspace on the workspaces page (the rest are on
/// the workspace's own page).
pub const SESSIONS_PER_WORKSPACE: usize = 50;
/// Sessions per page of one workspace.
pub const SESSIONS_PER_PAGE: usize = 500;

fn status_badge(s: &SessionSummary) -> Markup {
    html! {
        @if s.live {
            span class="badge live" title="its agent is connected now" { "live" }
        } @else {
            span class="badge ended" { "ended" }
        }
        @if s.archived {
            " "
            span class="badge archived" { "archived" }
        }
    }
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

/// `<time>` and how long ago, dimmed.
fn moment(at: DateTime<Utc>, now: DateTime<Utc>) -> Markup {
    html! {
        (time(at)) " " span class="dim" { (ago(now, at)) }
    }
}

fn session_row(s: &SessionSummary, now: DateTime<Utc>, rows: Rows) -> Markup {
    let id = s.id.to_string();
    let mut classes = String::from("session");
    if s.live {
        classes.push_str(" is-live");
    }
    if s.archived {
        classes.push_str(" is-archived");
    }
    html! {
        tr class=(classes) data-session=(id) {
            @match rows {
                Rows::ReadOnly => {}
                Rows::Archive => { td {} }
                Rows::ArchiveAndMove => {
                    td class="grip" {
                        button type="button" class="handle" draggable="true"
                            title="Drag to move this session (or press ↑ ↓)"
                            aria-label={ "Move session " (short_id(&id)) } { "⠿" }
                    }
                }
            }
            td { a href={ "/sessions/" (id) } title=(id) { (short_id(&id)) } }
            td {
                @match &s.client {
                    Some(client) => { (client) }
                    None => { span class="dim" { "unnamed" } }
                }
            }
            td { (moment(s.started, now)) }
            td {
                @match s.last_activity {
                    Some(at) => { (moment(at, now)) }
                    None => { span class="dim" { "no calls" } }
                }
            }
            td { (status_badge(s)) }
            @if rows != Rows::ReadOnly {
                td class="actions" {
                    button type="button" class="archive" data-archived=(s.archived) {
                        (if s.archived { "Unarchive" } else { "Archive" })
                    }
                }
            }
        }
    }
}

/// A table of `sessions`; `after`, for a workspace's sessions cut short,
/// is the one that follows the last shown (where a session moved to the
/// end of the table goes before).
fn sessions_table(
    sessions: &[SessionSummary],
    now: DateTime<Utc>,
    rows: Rows,
    after: Option<&SessionSummary>,
) -> Markup {
    if sessions.is_empty() {
        return html! { p class="empty" { "No sessions yet." } };
    }
    let controls = rows != Rows::ReadOnly;
    html! {
        table class="sessions" {
            thead {
                tr {
                    @if controls { th {} }
                    th { "Session" }
                    th { "Client" }
                    th { "Started" }
                    th { "Last activity" }
                    th { "Status" }
                    @if controls { th {} }
                }
            }
            tbody data-after=[after.map(|s| s.id.to_string())] {
                @for s in sessions {
                    (session_row(s, now, rows))
                }
            }
        }
    }
}

/// A workspace's heading; on the workspaces page (`overview`) its title
/// links to its own page and it has the controls that change it.
fn workspace_heading(ws: &WorkspaceSummary, overview: bool) -> Markup {
    let live = ws.sessions.iter().filter(|s| s.live).count();
    html! {
        h2 {
            @if overview {
                button type="button" class="handle" draggable="true"
                    title="Drag to move this workspace (or press ↑ ↓)"
                    aria-label={ "Move workspace " (ws.title) } { "⠿" }
                a class="title" href={ "/workspaces/" (ws.id) } { (ws.title) }
            } @else {
                (ws.title)
            }
            " "
            span class="path" { (ws.path.display()) }
            @if ws.missing_dir {
                " "
                span class="badge missing" title="the directory is not there now" {
                    "missing directory"
                }
            }
            @if live > 0 {
                " "
                span class="badge live" { (live) " live" }
            }
            @if overview {
                span class="actions" {
                    button type="button" class="rename" { "Rename" }
                    button type="button" class="remove" { "Remove" }
                }
            }
        }
    }
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
    let body = html! {
        h1 { "Workspaces" }
        div class="toolbar" {
            button type="button" id="new-workspace" { "New workspace…" }
        }
        div id="notice" class="notice" role="status" aria-live="polite" {}
        div id="workspaces" { (workspaces_list(overview, now)) }
        (picker_dialog())
        (confirm_dialog())
    };
    let picker = match picker {
        Capability::Browse { .. } => "browse",
        Capability::Dialog => "dialog",
    };
    let data = PageData {
        page_token: Some(page_token),
        picker: Some(picker),
        ..PageData::default()
    };
    page(layout(
        "Workspaces",
        "workspaces",
        Nav::Workspaces,
        data,
        body,
    ))
}

/// The part of the workspaces page that changes: the counts, every
/// workspace with its newest sessions, and the sessions of no workspace
/// (what a change answers with and the page's stream pushes).
pub fn workspaces_fragment(overview: &Overview, now: DateTime<Utc>) -> String {
    page(workspaces_list(overview, now))
}

fn workspaces_list(overview: &Overview, now: DateTime<Utc>) -> Markup {
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
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    html! {
        p class="summary" {
            (overview.workspaces.len()) " workspace" (plural(overview.workspaces.len()))
            " · " (total) " session" (plural(total)) " · "
            span id="live-count" { (live) }
            " live now"
        }
        @if overview.workspaces.is_empty() && overview.ungrouped.is_empty() {
            p class="empty" {
                "No workspaces yet. Create one with “New workspace…”, or "
                code { "dsh workspace create PATH" }
                "; agents that connect through "
                code { "dsh mcp" }
                " add theirs."
            }
        }
        @for ws in &overview.workspaces {
            @let shown = ws.sessions.len().min(SESSIONS_PER_WORKSPACE);
            section class="workspace" id={ "ws-" (ws.id) } data-workspace=(ws.id) {
                (workspace_heading(ws, true))
                (sessions_table(
                    &ws.sessions[..shown],
                    now,
                    Rows::ArchiveAndMove,
                    ws.sessions.get(shown),
                ))
                @if ws.sessions.len() > shown {
                    p class="more" {
                        a href={ "/workspaces/" (ws.id) } {
                            "all " (ws.sessions.len()) " sessions →"
                        }
                    }
                }
            }
        }
        @if !overview.ungrouped.is_empty() {
            @let shown = overview.ungrouped.len().min(SESSIONS_PER_WORKSPACE);
            section class="workspace ungrouped" {
                h2 {
                    "Sessions in no workspace "
                    span class="dim" { (overview.ungrouped.len()) }
                }
                (sessions_table(&overview.ungrouped[..shown], now, Rows::Archive, None))
            }
        }
    }
}

/// The dialog of a new workspace: the directory picker (a list to walk
/// for a picker that browses, a button for one that asks the person
/// itself), the path and the title.
fn picker_dialog() -> Markup {
    html! {
        dialog id="picker" aria-labelledby="picker-heading" {
            h2 id="picker-heading" { "New workspace" }
            p class="hint" {
                "Choose its directory — open directories below, or type a path — then create it. The title is the directory's name unless you give one."
            }
            div class="picker-bar" data-for="browse" {
                button type="button" id="picker-up" { "↑ Up" }
                button type="button" id="picker-home" { "Home" }
                label { input type="checkbox" id="picker-hidden"; " Show hidden" }
            }
            p id="picker-where" class="mono picker-where" data-for="browse" {}
            ul id="picker-list" class="picker-list" data-for="browse" {}
            div class="picker-bar" data-for="dialog" {
                button type="button" id="picker-choose" { "Choose a directory…" }
            }
            label class="field" {
                "Directory "
                input id="picker-path" class="mono" type="text" spellcheck="false"
                    autocomplete="off";
            }
            label class="field" {
                "Title "
                input id="picker-title" type="text" placeholder="the directory's name"
                    autocomplete="off";
            }
            div id="picker-notice" class="notice" role="status" aria-live="polite" {}
            div class="toolbar" {
                button type="button" id="picker-create" class="primary" { "Create workspace" }
                button type="button" id="picker-cancel" { "Cancel" }
            }
        }
    }
}

/// The dialog that asks before a workspace is removed.
fn confirm_dialog() -> Markup {
    html! {
        dialog id="confirm" aria-labelledby="confirm-text" {
            p id="confirm-text" {}
            p class="hint" {
                "Only the registration goes: the directory, its files and its sessions' logs stay, and its sessions become sessions of no workspace."
            }
            div class="toolbar" {
                button type="button" id="confirm-yes" class="danger" { "Remove" }
                button type="button" id="confirm-no" { "Cancel" }
            }
        }
    }
}

/// A directory picker's listing as the picker's list: a button per
/// directory that opens it, refused ones with why, hidden ones marked
/// (the page shows them on request).
pub fn picker_entries(listing: &Listing) -> String {
    page(html! {
        @for entry in &listing.entries {
            (picker_entry(listing, entry))
        }
        @if listing.entries.is_empty() {
            li class="empty" { "No directories here." }
        }
        @if listing.truncated {
            li class="dim" { "More than a listing shows: type the path of the one you want." }
        }
    })
}

fn picker_entry(listing: &Listing, entry: &Entry) -> Markup {
    let name = entry.name.to_string_lossy();
    let hidden = if name.starts_with('.') {
        " hidden-entry"
    } else {
        ""
    };
    // A symlink shows where it leads, unless it leads nowhere (a loop).
    let link = (entry.symlink && entry.path != listing.dir.join(&entry.name)).then(|| {
        html! {
            " "
            span class="dim" { "→ " (entry.path.display()) }
        }
    });
    let (code, why) = match (entry.refused, entry.path.to_str()) {
        (Some(refusal), _) => (crate::codes::picker_refusal(refusal), refusal.words()),
        (None, None) => (
            Code::InvalidArgument,
            "its path is not UTF-8: use `dsh workspace create`",
        ),
        (None, Some(path)) => {
            return html! {
                li class={ "dir" (hidden) } {
                    button type="button" class="dir" data-path=(path) {
                        (name)
                        @if let Some(link) = link { (link) }
                    }
                }
            };
        }
    };
    html! {
        li class={ "refused" (hidden) } data-code=(code.as_str()) {
            span class="name" { (name) }
            @if let Some(link) = link { (link) }
            " "
            span class="why" { (why) }
        }
    }
}

/// One workspace with all its sessions, page `page_number` (0-based) of
/// [`SESSIONS_PER_PAGE`].
pub fn workspace(ws: &WorkspaceSummary, page_number: usize, now: DateTime<Utc>) -> String {
    let pages = ws.sessions.len().div_ceil(SESSIONS_PER_PAGE).max(1);
    let shown = page_number.min(pages - 1);
    let start = shown * SESSIONS_PER_PAGE;
    let end = (start + SESSIONS_PER_PAGE).min(ws.sessions.len());
    let body = html! {
        p class="crumbs" { a href="/" { "Workspaces" } }
        h1 { (ws.title) }
        (workspace_heading(ws, false))
        p class="summary" { (ws.sessions.len()) " sessions" }
        (sessions_table(&ws.sessions[start..end], now, Rows::ReadOnly, None))
        @if pages > 1 {
            p class="pages" {
                @for p in 0..pages {
                    @if p == shown {
                        strong { (p + 1) }
                    } @else {
                        a href={ "/workspaces/" (ws.id) "?page=" (p) } { (p + 1) }
                    }
                    " "
                }
            }
        }
    };
    page(layout(
        &ws.title,
        "workspace",
        Nav::Workspaces,
        PageData::default(),
        body,
    ))
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
    page(call_row_html(entry))
}

fn call_row_html(entry: &LogEntry) -> Markup {
    let failed = entry.outcome != "OK";
    html! {
        tr class=(if failed { "call failed" } else { "call" }) data-key=(call_key(entry))
            data-tool=(entry.tool) {
            td { (time(entry.at)) }
            td class="tool" { (entry.tool) }
            td class="arg" title=(entry.argument_summary) {
                (argument(&entry.tool, &entry.argument_summary))
            }
            td class="num" { (chart::duration_text(entry.duration_ms)) }
            td class="outcome" {
                span class="swatch" data-color=(chart::call_color(entry)) {}
                (outcome(entry))
            }
        }
    }
}

/// The pictures of a session (the timeline strip, the terminal sends).
pub fn session_charts(log: &[LogEntry]) -> String {
    page(charts(log))
}

fn charts(log: &[LogEntry]) -> Markup {
    html! {
        @if let Some(timeline) = chart::timeline(log) {
            h2 { "When calls happened and how long they took" }
            (timeline)
            @if let Some(sends) = chart::terminal_sends(log) {
                h2 { "Terminal sends: latency and settle reason" }
                (sends)
            }
        } @else {
            p class="empty" { "No tool calls yet." }
        }
    }
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
    let active = |on: bool| on.then_some("active");
    let body = html! {
        p class="crumbs" {
            a href="/" { "Workspaces" }
            @if let Some((wid, title)) = &view.workspace {
                " › "
                a href={ "/workspaces/" (wid) } { (title) }
            }
        }
        h1 { "Session " span class="mono" { (short_id(&id)) } " " (status_badge(s)) }
        dl class="facts" {
            dt { "Id" }
            dd class="mono" { (id) }
            dt { "Client" }
            dd { (s.client.as_deref().unwrap_or("unnamed")) }
            dt { "Directory" }
            dd class="mono" {
                @match &s.cwd {
                    Some(cwd) => { (cwd.display()) }
                    None => { "—" }
                }
            }
            dt { "Started" }
            dd { (moment(s.started, now)) }
            dt { "Last activity" }
            dd {
                @match s.last_activity {
                    Some(at) => { (moment(at, now)) }
                    None => { "no calls" }
                }
            }
            dt { "Calls" }
            dd { (view.log.len()) }
        }
        section id="charts" class="charts" { (charts(&view.log)) }
        nav class="filter" {
            "Tool: "
            a href={ "/sessions/" (id) } class=[active(tool.is_none())] {
                "all " span class="dim" { (view.log.len()) }
            }
            @for (name, n) in &counts {
                " "
                a href={ "/sessions/" (id) "?tool=" (name) } class=[active(tool == Some(*name))] {
                    (name) " " span class="dim" { (n) }
                }
            }
        }
        table class="timeline" {
            thead {
                tr {
                    th { "Time" }
                    th { "Tool" }
                    th { "Argument" }
                    th { "Duration" }
                    th { "Outcome" }
                }
            }
            tbody id="calls" {
                @for e in view.log.iter().rev().filter(|e| tool.is_none_or(|t| e.tool == t)) {
                    (call_row_html(e))
                }
            }
        }
        @if !view.log.is_empty() {
            p class="dim" { "The session log keeps the newest 1,000 calls of a session." }
        }
    };
    let data = PageData {
        session: Some(&id),
        live: s.live.then_some("true"),
        tool,
        ..PageData::default()
    };
    page(layout(
        &format!("Session {}", short_id(&id)),
        "session",
        Nav::Workspaces,
        data,
        body,
    ))
}

/// The id cell of a terminal or job row: a link to its page here, or, on
/// a remote host (whose screens and output this page does not carry), the
/// qualified id as text.
fn id_cell(kind: &str, id: &str, remote: bool) -> Markup {
    html! {
        @if remote {
            span class="mono" { (id) }
        } @else {
            a href={ "/" (kind) "/" (id) } { (id) }
        }
    }
}

fn terminal_row(t: &TerminalRow, remote: bool) -> Markup {
    html! {
        tr data-terminal=(t.id) {
            td { (id_cell("terminals", &t.id, remote)) }
            td { (t.name.as_deref().unwrap_or_default()) }
            td class="mono" { (t.command) }
            td { (t.status) }
            td {
                @if t.active_send {
                    span class="badge sending" title="an agent's send is waiting to settle" {
                        "sending"
                    }
                }
            }
            td { (span(Duration::from_secs(t.idle_s))) }
        }
    }
}

fn job_row(j: &JobRow, remote: bool) -> Markup {
    html! {
        tr data-job=(j.id) {
            td { (id_cell("jobs", &j.id, remote)) }
            td { (j.kind) }
            td { span class={ "badge job-" (j.status) } { (j.status) } }
            td class="mono" { (j.label) }
            td {
                @if let Some(code) = j.exit_code { "exit " (code) }
            }
        }
    }
}

/// A connected agent's section; `host` names the remote host it is
/// connected on, `None` for this machine's daemon.
fn connection_section(c: &ConnectionRow, host: Option<&str>) -> Markup {
    let remote = host.is_some();
    html! {
        section class="agent" data-connection=(c.id) data-host=[host] {
            h2 {
                (c.client.as_deref().unwrap_or("unnamed client"))
                " "
                span class="dim" {
                    "connection " (c.id)
                    @if let Some(h) = host { " on " (h) }
                    " · pid "
                    @match c.pid {
                        Some(pid) => { (pid) }
                        None => { "?" }
                    }
                    " · connected " (span(Duration::from_secs(c.age_s)))
                }
            }
            @if let Some(d) = &c.detached {
                p class="detached" {
                    "Detached: the client went away " (span(Duration::from_secs(d.for_s)))
                    " ago; its terminals and jobs are kept for the agent to take back for "
                    (span(Duration::from_secs(d.left_s))) " more ("
                    span class="mono" { "dsh ps --end " (c.id) }
                    @if let Some(h) = host { " on " (h) }
                    " ends them now)."
                }
            }
            p {
                @if let Some(w) = &c.workspace {
                    "workspace " strong { (w) } " · "
                }
                @match &c.cwd {
                    Some(cwd) => { span class="mono" { (cwd) } }
                    None => { span class="dim" { "no directory yet" } }
                }
                @if let Some(session) = &c.session_id {
                    @if remote {
                        // Its log is in the host's store, not in this one.
                        " · session " (short_id(session))
                    } @else {
                        " · "
                        a href={ "/sessions/" (session) } { "session " (short_id(session)) }
                    }
                }
            }
            (table_of(
                "terminals",
                "No terminals.",
                &["Terminal", "Name", "Command", "Status", "", "Idle"],
                c.terminals.iter().map(|t| terminal_row(t, remote)),
            ))
            (table_of(
                "jobs",
                "No jobs.",
                &["Job", "Kind", "Status", "Runs", "Exit"],
                c.jobs.iter().map(|j| job_row(j, remote)),
            ))
        }
    }
}

/// A table of `class` with its column `headings` and `rows`, or the
/// sentence `empty` when there is no row.
fn table_of(
    class: &str,
    empty: &str,
    headings: &[&str],
    rows: impl Iterator<Item = Markup>,
) -> Markup {
    let rows: Vec<Markup> = rows.collect();
    html! {
        @if rows.is_empty() {
            p class="empty" { (empty) }
        } @else {
            table class=(class) {
                thead {
                    tr {
                        @for heading in headings { th { (heading) } }
                    }
                }
                tbody {
                    @for row in rows { (row) }
                }
            }
        }
    }
}

/// A remote host's section: what its daemon showed, or why it could not
/// be asked.
fn remote_section(r: &RemoteHost) -> Markup {
    html! {
        section class="remote" data-host=(r.host) {
            h2 class="host" {
                (r.host) " "
                span class="dim" {
                    "remote host · " span class="mono" { (r.target) }
                    " · bridge pid " (r.bridge_pid)
                }
            }
            @if let Some(error) = &r.error {
                p class="error" { (r.host) " could not be asked: " (error) }
            } @else if !r.answered {
                p class="empty" { "Asking " (r.host) "…" }
            } @else if r.connections.is_empty() {
                p class="empty" { "No agent is connected to dsh on " (r.host) " now." }
            } @else {
                p class="hint" {
                    "Watch a terminal of " (r.host) " from this machine with "
                    span class="mono" { "dsh attach " (r.host) ":pty-N" }
                    " (add " span class="mono" { "--write" } " to type)."
                }
                @for c in &r.connections { (connection_section(c, Some(&r.host))) }
            }
        }
    }
}

/// The live list: every connected agent with its terminals and jobs, then
/// every remote host served from here with its own.
pub fn live_fragment(view: &LiveView) -> String {
    page(live_list(view))
}

fn live_list(view: &LiveView) -> Markup {
    html! {
        (approvals_section(&view.approvals))
        @if view.connections.is_empty() {
            p class="empty" { "No agent is connected to this dsh daemon now." }
        }
        @for c in &view.connections { (connection_section(c, None)) }
        @for r in &view.remotes { (remote_section(r)) }
    }
}

/// The live page.
pub fn live(view: &LiveView) -> String {
    let body = html! {
        h1 { "Live" }
        p class="summary" {
            "Every agent connected to this dsh daemon, its terminals and its jobs, and those on the remote hosts that "
            span class="mono" { "dsh mcp --remote" }
            " bridges here serve. Updates by itself."
        }
        div id="live" { (live_list(view)) }
    };
    page(layout("Live", "live", Nav::Live, PageData::default(), body))
}

/// A terminal's page: the live screen, read-only until the person takes
/// the keyboard.
pub fn terminal(connection: &ConnectionRow, t: &TerminalRow) -> String {
    let body = html! {
        p class="crumbs" { a href="/live" { "Live" } " › " (c_label(connection)) }
        h1 {
            "Terminal " (t.id)
            @if let Some(name) = &t.name {
                " " span class="dim" { "[" (name) "]" }
            }
        }
        p class="mono" { (t.command) }
        div class="toolbar" {
            button id="take" type="button" { "Take the keyboard" }
            button id="release" type="button" hidden { "Give the keyboard back" }
            span id="kbd-state" class="kbd-state" { "Read-only: you are watching." }
        }
        p class="hint" {
            "Taking the keyboard lets your keys reach the program. Keys are refused while an agent's send is active; while you type (until you pause for a second and the program waits for input again) the agent's sends get "
            code { (Code::SendActive.as_str()) }
            "."
        }
        div id="notice" class="notice" role="status" aria-live="polite" {}
        div id="screen" class="screen" tabindex="0" aria-label="terminal screen" {}
        p id="term-end" class="ended" hidden {}
    };
    let data = PageData {
        terminal: Some(&t.id),
        ..PageData::default()
    };
    page(layout(
        &format!("Terminal {}", t.id),
        "terminal",
        Nav::Live,
        data,
        body,
    ))
}

fn c_label(c: &ConnectionRow) -> String {
    format!(
        "{} (connection {})",
        c.client.as_deref().unwrap_or("unnamed client"),
        c.id
    )
}

/// The facts of a job (status, exit code, detail) as a fragment.
pub fn job_facts(job: &JobRow) -> String {
    page(facts_of(job))
}

fn facts_of(job: &JobRow) -> Markup {
    html! {
        dl class="facts" {
            dt { "Kind" }
            dd { (job.kind) }
            dt { "Status" }
            dd { span class={ "badge job-" (job.status) } { (job.status) } }
            dt { "Runs" }
            dd class="mono" { (job.label) }
            dt { "Exit code" }
            dd {
                @match job.exit_code {
                    Some(code) => { (code) }
                    None => { "—" }
                }
            }
            dt { "Detail" }
            dd { (job.detail.as_deref().unwrap_or("—")) }
        }
    }
}

/// A job's page: its status and the tail of its output, live.
pub fn job(connection: Option<&ConnectionRow>, tail: &JobTail) -> String {
    let body = html! {
        p class="crumbs" {
            a href="/live" { "Live" }
            @if let Some(c) = connection { " › " (c_label(c)) }
        }
        h1 { "Job " (tail.job.id) }
        div id="job-facts" { (facts_of(&tail.job)) }
        h2 { "Output " span class="dim" id="job-bytes" { (tail.end) " bytes" } }
        pre id="job-output" class="output" { (tail.output) }
    };
    let next = tail.next.to_string();
    let data = PageData {
        job: Some(&tail.job.id),
        next: Some(&next),
        ..PageData::default()
    };
    page(layout(
        &format!("Job {}", tail.job.id),
        "job",
        Nav::Live,
        data,
        body,
    ))
}

/// A page that moves on to `to` at once by itself (a meta refresh: the
/// content security policy allows no inline script), with a link there
/// reading `link` for a browser that does not. `served`: this server
/// answers with it, so it names the page's icon (which a browser asks
/// for otherwise); a page opened from a file names none.
pub fn move_on(to: &str, link: &str, served: bool) -> String {
    page(html! {
        (PreEscaped("<!doctype html>"))
        html lang="en" {
            head {
                meta charset="utf-8";
                meta http-equiv="refresh" content={ "0;url=" (to) };
                title { "dsh" }
                @if served {
                    link rel="icon" href="/assets/icon.svg" type="image/svg+xml";
                }
            }
            body { p { a href=(to) { (link) } } }
        }
        "\n"
    })
}

/// The page where a person answers terminal `id`'s secret prompt.
pub fn answer(
    id: &str,
    waiting: Option<&PromptView>,
    screen_line: Option<&str>,
    page_token: &str,
) -> String {
    let body = html! {
        p class="crumbs" {
            a href="/live" { "Live" } " › " a href={ "/terminals/" (id) } { (id) }
        }
        h1 { "Answer " (id) "'s prompt" }
        @match waiting {
            Some(p) => {
                p {
                    "The agent " strong { (p.agent) } " waits: "
                    span class="mono" { (p.command) } " in " (id) " asks"
                }
                p class="prompt mono" { (p.prompt) }
                @if let Some(reader) = &p.reader { p class="reader" { (reader) } }
            }
            None => {
                p {
                    "No agent's send waits for an answer in " (id)
                    ". What you type is typed only if a program there reads a secret now (with echo off)."
                }
                @if let Some(line) = screen_line { p class="prompt mono" { (line) } }
            }
        }
        form method="post" action={ "/answer/" (id) } class="answer" {
            input type="hidden" name="page_token" value=(page_token);
            label {
                "Answer "
                input type="password" name="secret" autocomplete="off" autofocus required;
            }
            " "
            button type="submit" { "Answer" }
        }
        p class="hint" {
            "The answer goes to the program only: the agent, its client, the session log and this page never see it."
        }
    };
    page(layout(
        &format!("Answer {id}"),
        "answer",
        Nav::Live,
        PageData::default(),
        body,
    ))
}

/// The page after a person answered.
pub fn answered(id: &str, how: &str) -> String {
    let body = html! {
        h1 { "Answered" }
        p { "Your answer to " (id) " was " (how) ". You can close this page." }
        p { a href={ "/terminals/" (id) } { "Watch the terminal" } }
    };
    page(layout(
        "Answered",
        "answered",
        Nav::Live,
        PageData::default(),
        body,
    ))
}

/// The commands waiting for a person's approval, as the live page lists
/// them (nothing when none waits).
fn approvals_section(approvals: &[ApprovalView]) -> Markup {
    html! {
        @if !approvals.is_empty() {
            section class="approvals" {
                h2 { "Waiting for your approval" }
                ul {
                    @for a in approvals {
                        li {
                            a href={ "/approve/" (a.id) } { (a.id) }
                            " " strong { (a.agent) } " asks to run "
                            span class="mono" {
                                (a.command.lines().next().unwrap_or_default())
                                @if a.command.lines().count() > 1 { " …" }
                            }
                            " outside the sandbox "
                            span class="dim" { "(waiting " (span(a.waited)) ")" }
                        }
                    }
                }
            }
        }
    }
}

/// The page where a person runs or refuses a command an agent asks to run
/// outside the sandbox: the question exactly as the agent's call renders
/// it, the agent, the directory, and the two buttons (which carry the
/// page's token).
pub fn approve(id: &str, waiting: Option<&ApprovalView>, page_token: &str) -> String {
    let body = match waiting {
        None => html! {
            p class="crumbs" { a href="/live" { "Live" } }
            h1 { (id) }
            p {
                "No command waits for approval as " (id)
                " now: it was decided, or its call ended (answered, timed out or cancelled). Nothing runs from this page."
            }
        },
        Some(a) => html! {
            p class="crumbs" { a href="/live" { "Live" } " › " (a.id) }
            h1 { "Run a command outside the sandbox?" }
            p {
                "The agent " strong { (a.agent) } " asks, in "
                span class="mono" { (a.cwd.display()) }
                " (waiting " (span(a.waited)) "):"
            }
            pre class="question mono" { (a.question) }
            form method="post" action={ "/approve/" (a.id) } class="approve" {
                input type="hidden" name="page_token" value=(page_token);
                button type="submit" name="decision" value="run" { "Run" }
                " "
                button type="submit" name="decision" value="refuse" autofocus { "Refuse" }
            }
            p class="hint" {
                "Run lets this one command run with all of your rights, once. Refuse tells the agent you refused. Only a choice here or with "
                span class="mono" { "dsh approve" }
                " on your terminal counts: what the agent's client answers never runs anything."
            }
        },
    };
    page(layout(
        &format!("Approve {id}"),
        "approve",
        Nav::Live,
        PageData::default(),
        body,
    ))
}

/// The page after a person ran or refused a command.
pub fn decided(id: &str, run: bool, what: &str) -> String {
    let body = html! {
        h1 { (if run { "Approved" } else { "Refused" }) }
        p { (what) ". You can close this page." }
        p { a href="/live" { "Live" } }
    };
    page(layout(
        &format!("{id} decided"),
        "decided",
        Nav::Live,
        PageData::default(),
        body,
    ))
}

/// An error page: what went wrong and what to do.
pub fn error(code: Code, message: &str) -> String {
    let body = html! {
        h1 { (code.as_str()) }
        p { (message) }
        p { a href="/" { "Workspaces" } " · " a href="/live" { "Live" } }
    };
    page(layout(
        code.as_str(),
        "error",
        Nav::Workspaces,
        PageData::default(),
        body,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use workspace::SessionId;

    fn remote(answered: bool, error: Option<&str>, connections: Vec<ConnectionRow>) -> LiveView {
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
        let agent = ConnectionRow {
            id: 3,
            client: Some("claude-code".into()),
            pid: Some(42),
            cwd: None,
            session_id: Some(SessionId::new_random().to_string()),
            workspace_id: None,
            workspace: None,
            preset: "full".into(),
            age_s: 5,
            host: Some("devbox".into()),
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
