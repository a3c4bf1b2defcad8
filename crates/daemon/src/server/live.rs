//! One live snapshot of what the daemon serves: every connection with its
//! terminals and jobs, walked once by [`now`]. `dsh ps` ([`ps`]) and the
//! `dsh ui` page (`page::DaemonUiSource::live`) both read it, as the one
//! [`ConnectionRow`] of `daemon_wire::snapshot` ([`connection_row`]).

use std::time::{Duration, SystemTime};

use daemon_wire::ps::{
    ConnectionRow, DaemonRow, DetachedDone, DetachedRow, JobRow, LanguageServerRow, Snapshot,
    TerminalRow,
};
use daemon_wire::version;
use daemon_wire::{Code, Reply};
use mcp_host::{ConnectionFacts, Host};

/// One connection as it is now.
pub struct ConnectionNow {
    /// What the host knows of it.
    pub facts: ConnectionFacts,
    /// Its terminals.
    pub terminals: Vec<TerminalRow>,
    /// Its jobs.
    pub jobs: Vec<JobRow>,
    /// Set when its client went away and its work is kept detached.
    pub detached: Option<DetachedRow>,
}

/// How long ago `at` was (zero for a time in the future).
pub fn elapsed(at: SystemTime) -> Duration {
    at.elapsed().unwrap_or_default()
}

/// A job's row.
pub fn job_row(info: &jobs::JobInfo) -> JobRow {
    JobRow {
        id: info.id.clone(),
        kind: info.kind.as_str().to_owned(),
        status: info.status.as_str().to_owned(),
        label: info.label.clone(),
        exit_code: info.exit_code,
        detail: info.detail.clone(),
    }
}

/// Every connection of `host` with its terminals and jobs, oldest first.
pub async fn now(host: &Host) -> Vec<ConnectionNow> {
    let runtime = host.runtime();
    let mut connections = Vec::new();
    for facts in host.connections() {
        let terminals = runtime
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
                idle_s: elapsed(host.terminals().last_activity(t.id).unwrap_or(t.created_at))
                    .as_secs(),
            })
            .collect();
        let jobs = runtime
            .jobs
            .list(&facts.owner, None)
            .iter()
            .map(job_row)
            .collect();
        let detached = facts.detached.as_ref().map(|d| DetachedRow {
            for_s: elapsed(d.since).as_secs(),
            left_s: d
                .until
                .duration_since(SystemTime::now())
                .unwrap_or_default()
                .as_secs(),
        });
        connections.push(ConnectionNow {
            facts,
            terminals,
            jobs,
            detached,
        });
    }
    connections
}

/// A connection's row, as `dsh ps` and the page show it.
pub fn connection_row(c: ConnectionNow) -> ConnectionRow {
    let facts = c.facts;
    let recorded = facts.recorded.as_ref();
    let workspace = recorded.and_then(|r| r.workspace.as_ref());
    ConnectionRow {
        id: facts.id,
        client: facts.client.as_ref().map(|c| c.name.clone()),
        pid: facts.peer_pid,
        cwd: facts.cwd.as_ref().map(|c| c.display().to_string()),
        session_id: facts
            .session
            .or(recorded.map(|r| r.session))
            .map(|s| s.to_string()),
        workspace_id: workspace.map(|w| w.0.to_string()),
        workspace: workspace.map(|w| w.1.clone()),
        preset: facts.preset.to_string(),
        age_s: elapsed(facts.connected_at).as_secs(),
        host: None,
        detached: c.detached,
        terminals: c.terminals,
        jobs: c.jobs,
    }
}

/// The reply to `ps`: the daemon (up since `started_at`), the snapshot
/// and the language servers.
pub async fn ps(host: &Host, started_at: SystemTime) -> Snapshot {
    let connections = now(host).await.into_iter().map(connection_row).collect();
    Snapshot {
        daemon: DaemonRow {
            pid: std::process::id(),
            version: version(),
            uptime_s: elapsed(started_at).as_secs(),
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
    }
}

/// A person ends detached connection `connection`'s work, or gives it to
/// connected agent `give_to`.
pub async fn decide_detached(host: &Host, connection: u64, give_to: Option<u64>) -> Reply {
    let Some(facts) = host
        .connections()
        .into_iter()
        .find(|c| c.id == connection && c.detached.is_some())
    else {
        return Reply::failed(
            Code::NoDetached,
            format!("connection {connection} is not detached work; `dsh ps` marks what is"),
        );
    };
    let terminals: Vec<String> = host
        .runtime()
        .terminals
        .list(&facts.owner)
        .await
        .into_iter()
        .map(|t| t.id.to_string())
        .collect();
    let jobs: Vec<String> = host
        .runtime()
        .jobs
        .list(&facts.owner, None)
        .into_iter()
        .map(|j| j.id)
        .collect();
    let done = match give_to {
        None => {
            if !host.end_detached_now(connection).await {
                return Reply::failed(
                    Code::NoDetached,
                    format!("connection {connection} was just taken back or ended"),
                );
            }
            "ended"
        }
        Some(to) => match host.give_detached(connection, to).await {
            Ok(_) => "given",
            Err(e) => {
                return Reply::failed(e.code, e.message);
            }
        },
    };
    Reply::of(&DetachedDone {
        done: done.to_owned(),
        terminals,
        jobs,
    })
}
