//! What the `dsh ui` page reads of this daemon: [`DaemonUiSource`]
//! answers it from the held store, the host's live state (the snapshot of
//! `server::live`, which `dsh ps` reads too) and the host's
//! [`CallHub`](mcp_host::calls::CallHub) of tool calls as they happen. The
//! page's changes are the registry operations of the CLI, run on the
//! held store the same way ([`crate::registry::execute_held`]); its
//! directory picker is `picker-fs`, from the daemon's `$HOME`.
//!
//! The page is served by the `ui` crate; the daemon starts it on the first
//! `dsh ui` request (see `server::dispatch`).

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use picker_seam::DirectoryPicker;
use ui::{
    CallFeed, Change, Changed, JobTail, LiveView, Overview, RemoteHost, SessionSummary,
    SessionView, SourceError, UiSource, WatchingGuard, WorkspaceSummary,
};
use workspace::{
    LogEntry, SessionId, SessionPersistence as _, SessionRecord, Workspace, WorkspaceError,
};

use super::live::{connection_row, job_row};
use daemon_wire::Code;
use daemon_wire::registry::{Archived, Created, RegistryOp};
use mcp_host::Host;
use mcp_host::calls::RECENT_CALLS;
use mcp_host::store::{HeldStore, SledRegistry};

/// The page's view of this daemon.
pub struct DaemonUiSource {
    host: Arc<Host>,
    held: Arc<HeldStore>,
    watchers: Arc<AtomicUsize>,
    picker: Arc<dyn DirectoryPicker>,
    remotes: Option<Arc<daemon_client::remotes::Watch>>,
}

impl DaemonUiSource {
    /// The source of `host` and its store; `watchers` counts the people
    /// watching a live stream (the daemon does not idle-exit under them).
    /// Its directory picker browses from `$HOME`.
    pub fn new(host: Arc<Host>, held: Arc<HeldStore>, watchers: Arc<AtomicUsize>) -> Self {
        Self {
            host,
            held,
            watchers,
            picker: Arc::new(picker_fs::FsPicker::from_home()),
            remotes: None,
        }
    }

    /// The same source showing the remote hosts of the `dsh mcp --remote`
    /// bridges registered under `runtime_dir` too.
    pub fn with_remotes(self, runtime_dir: std::path::PathBuf) -> Self {
        Self {
            remotes: Some(Arc::new(daemon_client::remotes::Watch::new(runtime_dir))),
            ..self
        }
    }

    /// The same source with another directory picker.
    pub fn with_picker(self, picker: Arc<dyn DirectoryPicker>) -> Self {
        Self { picker, ..self }
    }

    fn live_sessions(&self) -> HashSet<SessionId> {
        self.host
            .connections()
            .iter()
            .filter_map(|c| c.session.or(c.recorded.as_ref().map(|r| r.session)))
            .collect()
    }
}

fn source_error(e: WorkspaceError) -> SourceError {
    SourceError::new(crate::codes::registry(&e), e.to_string())
}

fn end_of(entry: &LogEntry) -> chrono::DateTime<chrono::Utc> {
    entry.at + chrono::Duration::milliseconds(i64::try_from(entry.duration_ms).unwrap_or(0))
}

fn summary(
    registry: &mut SledRegistry,
    record: SessionRecord,
    live: &HashSet<SessionId>,
) -> Result<SessionSummary, WorkspaceError> {
    let last = registry.session_store().last_log_entry(record.id)?;
    Ok(SessionSummary {
        id: record.id,
        client: record.client.map(|c| c.name),
        cwd: record.cwd,
        started: record.created_at,
        last_activity: last.as_ref().map(end_of),
        live: live.contains(&record.id),
        archived: record.archived,
    })
}

fn overview(
    registry: &mut SledRegistry,
    live: &HashSet<SessionId>,
) -> Result<Overview, WorkspaceError> {
    let mut workspaces = Vec::new();
    for ws in registry.list() {
        let missing_dir = !ws.path.is_dir();
        let mut sessions = Vec::new();
        for record in registry.sessions(Some(ws.id))? {
            sessions.push(summary(registry, record, live)?);
        }
        workspaces.push(WorkspaceSummary {
            id: ws.id.to_string(),
            title: ws.title,
            path: ws.path,
            missing_dir,
            sessions,
        });
    }
    let mut ungrouped = Vec::new();
    for record in registry.sessions(None)? {
        if record.workspace_id.is_none() {
            ungrouped.push(summary(registry, record, live)?);
        }
    }
    Ok(Overview {
        workspaces,
        ungrouped,
    })
}

/// A remote host as the page shows it, from what its daemon answered to
/// `dsh ps` (ids already qualified with the host).
fn remote_host(r: daemon_client::remotes::RemoteSnapshot) -> RemoteHost {
    let connections = r
        .snapshot
        .as_ref()
        .map(|s| s.connections.clone())
        .unwrap_or_default();
    RemoteHost {
        answered: r.snapshot.is_some(),
        host: r.host,
        target: r.target,
        bridge_pid: r.bridge_pid,
        connections,
        error: r.error,
    }
}

/// The registry operation of a page's change: the CLI's.
fn registry_op(change: Change) -> RegistryOp {
    match change {
        Change::WorkspaceCreate { path, title } => RegistryOp::WorkspaceCreate { path, title },
        Change::WorkspaceRename { id, title } => RegistryOp::WorkspaceRename { id, title },
        Change::WorkspaceMove { id, before } => RegistryOp::WorkspaceMove { id, before },
        Change::WorkspaceRemove { id } => RegistryOp::WorkspaceRemove { id },
        Change::SessionMove { id, before } => RegistryOp::SessionMove { id, before },
        Change::SessionArchive { id, archived } => RegistryOp::SessionArchive { id, archived },
    }
}

fn decode<T: serde::de::DeserializeOwned>(data: serde_json::Value) -> Result<T, SourceError> {
    serde_json::from_value(data).map_err(|e| {
        SourceError::new(
            Code::Internal,
            format!("the registry's answer did not decode: {e}"),
        )
    })
}

/// `1 of 3`: where `at` is in a list of `len`.
fn position(at: Option<usize>, len: usize) -> String {
    at.map_or_else(|| "?".to_owned(), |i| (i + 1).to_string()) + &format!(" of {len}")
}

/// What the registry's answer to `op` says, in one line for the person.
fn said(op: &RegistryOp, data: serde_json::Value) -> Result<String, SourceError> {
    Ok(match op {
        RegistryOp::WorkspaceCreate { .. } => {
            let Created { workspace, created } = decode(data)?;
            if created {
                format!(
                    "created workspace “{}” for {}",
                    workspace.title,
                    workspace.path.display()
                )
            } else {
                format!(
                    "{} is already workspace “{}”; nothing changed",
                    workspace.path.display(),
                    workspace.title
                )
            }
        }
        RegistryOp::WorkspaceRename { .. } => {
            let workspace: Workspace = decode(data)?;
            format!("renamed the workspace to “{}”", workspace.title)
        }
        RegistryOp::WorkspaceMove { id, .. } => {
            let order: Vec<Workspace> = decode(data)?;
            let at = order.iter().position(|w| w.id == *id);
            let title = at.map_or("", |i| order[i].title.as_str());
            format!(
                "moved workspace “{title}” to place {}",
                position(at, order.len())
            )
        }
        RegistryOp::WorkspaceRemove { .. } => {
            let workspace: Workspace = decode(data)?;
            format!(
                "removed workspace “{}” from the registry; the directory {} and its sessions' logs are kept",
                workspace.title,
                workspace.path.display()
            )
        }
        RegistryOp::SessionMove { id, .. } => {
            let workspace: Workspace = decode(data)?;
            let at = workspace.session_ids.iter().position(|s| s == id);
            format!(
                "moved session {} to place {} in “{}”",
                ui::html::short_id(&id.to_string()),
                position(at, workspace.session_ids.len()),
                workspace.title
            )
        }
        RegistryOp::SessionArchive { id, archived } => {
            let Archived { was, .. } = decode(data)?;
            let id = id.to_string();
            let short = ui::html::short_id(&id);
            match (was == *archived, *archived) {
                (true, true) => format!("session {short} was archived already; nothing changed"),
                (true, false) => format!("session {short} was not archived; nothing changed"),
                (false, true) => format!("archived session {short}"),
                (false, false) => format!("unarchived session {short}"),
            }
        }
        RegistryOp::WorkspaceList
        | RegistryOp::WorkspaceShow { .. }
        | RegistryOp::SessionList { .. }
        | RegistryOp::SessionShow { .. } => String::new(),
    })
}

/// Counts one watching person while alive.
struct Watching(Arc<AtomicUsize>);

impl Drop for Watching {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl UiSource for DaemonUiSource {
    fn overview(&self) -> BoxFuture<'_, Result<Overview, SourceError>> {
        Box::pin(async move {
            let live = self.live_sessions();
            let held = self.held.clone();
            tokio::task::spawn_blocking(move || {
                held.with_registry(|r| overview(r, &live))
                    .map_err(source_error)
            })
            .await
            .map_err(|e| SourceError::new(Code::Internal, format!("the store task failed: {e}")))?
        })
    }

    fn session(&self, id: SessionId) -> BoxFuture<'_, Result<SessionView, SourceError>> {
        Box::pin(async move {
            let live = self.live_sessions();
            let held = self.held.clone();
            let stored = tokio::task::spawn_blocking(move || {
                held.with_registry(|r| {
                    let detail = r.session_detail(id)?;
                    let workspace = detail
                        .session
                        .workspace_id
                        .and_then(|w| r.get(w))
                        .map(|w| (w.id.to_string(), w.title));
                    Ok((detail, workspace))
                })
                .map_err(source_error)
            })
            .await
            .map_err(|e| SourceError::new(Code::Internal, format!("the store task failed: {e}")))?;
            let (detail, workspace) = stored?;
            let mut log = detail.log;
            // The session log writes in batches: the newest calls may be
            // on their way to the store still.
            let newest = log.last().map(|e| e.at);
            let known: HashSet<String> = log
                .iter()
                .rev()
                .take(RECENT_CALLS)
                .map(ui::pages::call_key)
                .collect();
            for entry in self.host.calls().recent_of(id) {
                if newest.is_none_or(|at| entry.at >= at)
                    && !known.contains(&ui::pages::call_key(&entry))
                {
                    log.push(entry);
                }
            }
            let record = detail.session;
            Ok(SessionView {
                summary: SessionSummary {
                    id: record.id,
                    client: record.client.map(|c| c.name),
                    cwd: record.cwd,
                    started: record.created_at,
                    last_activity: log.last().map(end_of),
                    live: live.contains(&record.id),
                    archived: record.archived,
                },
                workspace,
                log,
            })
        })
    }

    fn live(&self) -> BoxFuture<'_, LiveView> {
        Box::pin(async move {
            let connections = super::live::now(&self.host)
                .await
                .into_iter()
                .map(connection_row)
                .collect();
            let remotes = self
                .remotes
                .as_ref()
                .map(|w| w.latest().into_iter().map(remote_host).collect())
                .unwrap_or_default();
            LiveView {
                connections,
                remotes,
                approvals: self.host.waiting_approvals(),
            }
        })
    }

    fn waiting_prompt(&self, id: terminal_seam::TerminalId) -> Option<ui::PromptView> {
        self.host.waiting_prompt(id).map(|p| ui::PromptView {
            prompt: p.prompt,
            command: p.command,
            agent: p.agent,
            reader: p.reader,
        })
    }

    fn answer(
        &self,
        id: terminal_seam::TerminalId,
        secret: zeroize::Zeroizing<String>,
    ) -> BoxFuture<'_, Result<String, SourceError>> {
        Box::pin(async move {
            match self.host.person_answers(id, secret).await {
                Ok(how) => {
                    tracing::info!(terminal = %id, "a person answered a secret prompt in the page");
                    Ok(how.to_owned())
                }
                Err(e) => Err(SourceError::new(crate::codes::answer(&e), e.to_string())),
            }
        })
    }

    fn waiting_approval(&self, id: &str) -> Option<ui::ApprovalView> {
        self.host.waiting_approval(id)
    }

    fn decide(&self, id: &str, run: bool) -> Result<String, SourceError> {
        let decided = self
            .host
            .person_decides(id, run)
            .map_err(|e| SourceError::new(e.code(), e.to_string()))?;
        tracing::info!(approval = %id, run, "a person decided in the page");
        Ok(decided)
    }

    fn terminals(&self) -> Arc<dyn terminal_seam::PersonViews> {
        Arc::new(RedactedScreens {
            views: self.host.terminals(),
            redactor: self.host.runtime().redactor(),
        })
    }

    fn job(
        &self,
        id: &str,
        since: Option<u64>,
        max_bytes: usize,
        wait: Duration,
    ) -> BoxFuture<'_, Result<JobTail, SourceError>> {
        let id = id.to_owned();
        Box::pin(async move {
            let (info, read) = self
                .host
                .runtime()
                .jobs
                .watch_output(&id, since, max_bytes, wait)
                .await
                .map_err(|e| SourceError::new(e.code(), e.to_string()))?;
            // The page shows no secret a job printed.
            let output = match self.host.runtime().redactor() {
                Some(r) => r.redact(&read.output).text.into_owned(),
                None => read.output,
            };
            Ok(JobTail {
                job: job_row(&info),
                output,
                from: read.from,
                next: read.next,
                dropped: read.dropped,
                end: info.output_bytes,
            })
        })
    }

    fn calls(&self) -> CallFeed {
        self.host.calls().feed()
    }

    fn connections_changed(&self) -> BoxFuture<'_, ()> {
        Box::pin(self.host.connections_changed())
    }

    fn watching(&self) -> WatchingGuard {
        self.watchers.fetch_add(1, Ordering::AcqRel);
        Box::new(Watching(self.watchers.clone()))
    }

    fn change(&self, change: Change) -> BoxFuture<'_, Result<Changed, SourceError>> {
        Box::pin(async move {
            let op = registry_op(change);
            let held = self.held.clone();
            let run = op.clone();
            let data =
                tokio::task::spawn_blocking(move || crate::registry::execute_held(&held, &run))
                    .await
                    .map_err(|e| {
                        SourceError::new(Code::Internal, format!("the store task failed: {e}"))
                    })?
                    .map_err(|f| SourceError::new(f.code, f.message))?;
            Ok(Changed {
                said: said(&op, data)?,
            })
        })
    }

    fn registry_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.held.changes()
    }

    fn directory_picker(&self) -> Arc<dyn DirectoryPicker> {
        self.picker.clone()
    }
}

/// The person's views as the page shows them: every screen with its
/// secrets redacted row by row (a row that held one loses its colours);
/// the rest as it is. `dsh attach` reads the views unredacted: it draws a
/// person's own terminal.
struct RedactedScreens {
    views: Arc<dyn terminal_seam::PersonViews>,
    redactor: Option<redact::Redactor>,
}

impl terminal_seam::PersonViews for RedactedScreens {
    fn watch(
        &self,
        id: terminal_seam::TerminalId,
    ) -> Result<terminal_seam::TerminalWatch, terminal_seam::TerminalError> {
        self.views.watch(id)
    }

    fn screen_now(
        &self,
        id: terminal_seam::TerminalId,
    ) -> Result<Vec<u8>, terminal_seam::TerminalError> {
        self.views.screen_now(id)
    }

    fn screen_copy(
        &self,
        id: terminal_seam::TerminalId,
    ) -> Result<terminal_seam::ScreenSnapshot, terminal_seam::TerminalError> {
        let mut screen = self.views.screen_copy(id)?;
        if let Some(redactor) = &self.redactor {
            for runs in &mut screen.lines {
                let row: String = runs.iter().map(|r| r.text.as_str()).collect();
                let redacted = redactor.redact(&row);
                if redacted.count > 0 {
                    *runs = vec![terminal_seam::Run {
                        text: redacted.text.into_owned(),
                        fg: terminal_seam::Color::Default,
                        bg: terminal_seam::Color::Default,
                        flags: 0,
                    }];
                }
            }
        }
        Ok(screen)
    }

    fn last_activity(&self, id: terminal_seam::TerminalId) -> Option<std::time::SystemTime> {
        self.views.last_activity(id)
    }

    fn is_over(&self, id: terminal_seam::TerminalId) -> bool {
        self.views.is_over(id)
    }

    fn person_typing(
        &self,
        id: terminal_seam::TerminalId,
    ) -> Result<Box<dyn terminal_seam::PersonKeys>, terminal_seam::TerminalError> {
        self.views.person_typing(id)
    }

    fn waits_for_secret(&self, id: terminal_seam::TerminalId) -> bool {
        self.views.waits_for_secret(id)
    }

    fn answer_secret<'a>(
        &'a self,
        id: terminal_seam::TerminalId,
        secret: &'a [u8],
    ) -> terminal_seam::BoxFuture<'a, Result<(), terminal_seam::AnswerError>> {
        self.views.answer_secret(id, secret)
    }
}
