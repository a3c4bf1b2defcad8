//! What the `dsh ui` page reads of this daemon: [`DaemonUiSource`]
//! answers it from the held store and the host's live state, and
//! [`CallHub`] carries every connection's tool calls to it as they happen.
//!
//! The page is served by the `ui` crate; the daemon starts it on the first
//! `dsh ui` request (see [`crate::daemon`]). [`launch_file`] is how `dsh
//! ui --open` hands a browser its sign-in link without a command line.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use futures::future::BoxFuture;
use tokio::sync::broadcast;
use ui::{
    CallFeed, JobTail, LiveCall, LiveConnection, LiveJob, LiveTerminal, LiveView, Overview,
    SessionSummary, SessionView, SourceError, UiSource, WatchingGuard, WorkspaceSummary,
};
use workspace::{LogEntry, SessionId, SessionPersistence as _, SessionRecord, WorkspaceError};

use crate::host::Host;
use crate::session_log::CallPublisher;
use crate::store::{HeldStore, SledRegistry};

/// How many of the newest calls (of all sessions) are kept for a page
/// that opens after they were made but before the store has them.
const RECENT_CALLS: usize = 512;
/// How many calls a slow page may fall behind before it reloads.
const CALL_CHANNEL: usize = 1024;

/// Every connection's tool calls as they happen: the newest few, and a
/// broadcast of each new one.
pub struct CallHub {
    recent: Mutex<VecDeque<LiveCall>>,
    tx: broadcast::Sender<LiveCall>,
}

impl Default for CallHub {
    fn default() -> Self {
        Self {
            recent: Mutex::new(VecDeque::with_capacity(RECENT_CALLS)),
            tx: broadcast::channel(CALL_CHANNEL).0,
        }
    }
}

impl std::fmt::Debug for CallHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallHub").finish_non_exhaustive()
    }
}

impl CallPublisher for CallHub {
    fn publish(&self, session: SessionId, entry: &LogEntry) {
        let call = LiveCall {
            session,
            entry: entry.clone(),
        };
        let mut recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        if recent.len() == RECENT_CALLS {
            recent.pop_front();
        }
        recent.push_back(call.clone());
        // Sent under the lock, so a feed taken meanwhile sees each call
        // exactly once: in its recent list or on its receiver.
        let _ = self.tx.send(call);
    }
}

impl CallHub {
    /// The newest calls and every later one.
    pub fn feed(&self) -> CallFeed {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        CallFeed {
            live: self.tx.subscribe(),
            recent: recent.iter().cloned().collect(),
        }
    }

    /// The newest calls of `session`, oldest first.
    fn recent_of(&self, session: SessionId) -> Vec<LogEntry> {
        let recent = self.recent.lock().unwrap_or_else(|e| e.into_inner());
        recent
            .iter()
            .filter(|c| c.session == session)
            .map(|c| c.entry.clone())
            .collect()
    }
}

/// The page's view of this daemon.
pub struct DaemonUiSource {
    host: Arc<Host>,
    held: Arc<HeldStore>,
    watchers: Arc<AtomicUsize>,
}

impl DaemonUiSource {
    /// The source of `host` and its store; `watchers` counts the people
    /// watching a live stream (the daemon does not idle-exit under them).
    pub fn new(host: Arc<Host>, held: Arc<HeldStore>, watchers: Arc<AtomicUsize>) -> Self {
        Self {
            host,
            held,
            watchers,
        }
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
    SourceError::new(e.code(), e.to_string())
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

fn job_row(info: &jobs::JobInfo) -> LiveJob {
    LiveJob {
        id: info.id.clone(),
        kind: info.kind.as_str().to_owned(),
        status: info.status.as_str().to_owned(),
        label: info.label.clone(),
        exit_code: info.exit_code,
        detail: info.detail.clone(),
    }
}

fn elapsed(since: SystemTime) -> Duration {
    since.elapsed().unwrap_or_default()
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
            .map_err(|e| SourceError::new("INTERNAL", format!("the store task failed: {e}")))?
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
            .map_err(|e| SourceError::new("INTERNAL", format!("the store task failed: {e}")))?;
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
            let runtime = self.host.runtime();
            let mut connections = Vec::new();
            for facts in self.host.connections() {
                let terminals = runtime
                    .terminals
                    .list(&facts.owner)
                    .await
                    .into_iter()
                    .map(|t| LiveTerminal {
                        id: t.id.to_string(),
                        name: t.name,
                        command: t.command.join(" "),
                        status: t.status.as_str().to_owned(),
                        active_send: t.active_send,
                        idle: elapsed(
                            self.host
                                .terminals()
                                .last_activity(t.id)
                                .unwrap_or(t.created_at),
                        ),
                    })
                    .collect();
                let jobs = runtime
                    .jobs
                    .list(&facts.owner, None)
                    .iter()
                    .map(job_row)
                    .collect();
                let recorded = facts.recorded.clone();
                connections.push(LiveConnection {
                    id: facts.id,
                    client: facts.client.as_ref().map(|c| c.name.clone()),
                    pid: facts.peer_pid,
                    cwd: facts.cwd.clone(),
                    session: facts.session.or(recorded.as_ref().map(|r| r.session)),
                    workspace: recorded
                        .as_ref()
                        .and_then(|r| r.workspace.as_ref())
                        .map(|w| w.1.clone()),
                    age: elapsed(facts.connected_at),
                    terminals,
                    jobs,
                });
            }
            LiveView { connections }
        })
    }

    fn terminals(&self) -> &terminal_pty::PtyTerminals {
        self.host.terminals()
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
            Ok(JobTail {
                job: job_row(&info),
                output: read.output,
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
}

/// Writes a page that moves on to the sign-in link `url` into a file only
/// this user can read (0600, in `ui-open/` under `runtime_dir`, made
/// 0700), for a browser to open: the link never appears on the browser's
/// command line, which every user of the machine can read (`ps`). Launch
/// files of earlier runs whose links have expired are removed first.
/// Returns the file.
pub fn launch_file(runtime_dir: &std::path::Path, url: &str) -> Result<std::path::PathBuf, String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let dir = runtime_dir.join("ui-open");
    crate::paths::ensure_private_dir(&dir).map_err(|e| e.to_string())?;
    if let Ok(entries) = std::fs::read_dir(&dir) {
        for entry in entries.flatten() {
            let expired = entry
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age > ui::guard::LOGIN_TTL);
            if expired {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    let stamp = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let file = dir.join(format!("page-{}-{stamp}.html", std::process::id()));
    let page = ui::pages::move_on(url, "Open the dsh page", false);
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&file)
        .and_then(|mut f| f.write_all(page.as_bytes()))
        .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    Ok(file)
}

/// `path` as a `file://` URL (made absolute against the current
/// directory first: a relative `DSH_RUNTIME_DIR` names a relative path).
pub fn file_url(path: &std::path::Path) -> Result<String, String> {
    let absolute = std::path::absolute(path)
        .map_err(|e| format!("cannot make {} absolute: {e}", path.display()))?;
    url::Url::from_file_path(&absolute)
        .map(String::from)
        .map_err(|()| format!("{} cannot be named by a file:// URL", absolute.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_launch_file_is_named_by_an_absolute_escaped_file_url() {
        assert_eq!(
            file_url(std::path::Path::new("/run/dsh 1/ui-open/page-1.html")).as_deref(),
            Ok("file:///run/dsh%201/ui-open/page-1.html")
        );
        // A relative runtime directory: the URL still names the file, from
        // wherever the tests run (a directory whose name needs escaping
        // too).
        let here = std::env::current_dir().unwrap_or_default();
        let url = file_url(std::path::Path::new("rel/page.html")).unwrap_or_default();
        assert!(url.starts_with("file:///") && !url.contains(' '), "{url}");
        assert_eq!(
            url::Url::parse(&url)
                .ok()
                .and_then(|u| u.to_file_path().ok()),
            Some(here.join("rel/page.html"))
        );
    }
}
