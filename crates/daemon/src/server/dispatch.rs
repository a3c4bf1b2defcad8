//! One connection of the daemon: the peer check, the hello, the version
//! check, and one function per request kind.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::BufReader;
use tokio::net::UnixStream;
use tokio::net::unix::{OwnedReadHalf, OwnedWriteHalf};
use tokio::sync::oneshot;
use tools_catalog::Preset;

use super::{Busy, Control, Shared};
use daemon_client::paths::DaemonPaths;
use daemon_wire::Code;
use daemon_wire::records::SessionRecordOp;
use daemon_wire::registry::RegistryOp;
use daemon_wire::replies::{
    Accepted, LanguageServerStatus, McpAccepted, PageStatus, Reloaded, Status, UiPage,
};
use daemon_wire::{
    Hello, MAX_REQUEST_LINE, McpHello, PROTOCOL, Reply, Request, read_line, version, write_line,
};
use mcp_host::{ConnectionSetup, serve_connection};

/// The preset a bridge asked for, by name ([`Preset::from_name`]).
fn parse_preset(name: Option<&str>) -> Result<Option<Preset>, String> {
    match name {
        None => Ok(None),
        Some(name) => Preset::from_name(name)
            .map(Some)
            .ok_or_else(|| format!("unknown preset `{name}`; use minimal or full")),
    }
}

/// A write half that does not shut the socket down when dropped, so the
/// client sees the end of the connection only when the daemon is done
/// with it (see [`handle`]).
struct KeepOpen(Option<tokio::net::unix::OwnedWriteHalf>);

impl Drop for KeepOpen {
    fn drop(&mut self) {
        if let Some(half) = self.0.take() {
            half.forget();
        }
    }
}

impl tokio::io::AsyncWrite for KeepOpen {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.0.as_mut() {
            Some(half) => std::pin::Pin::new(half).poll_write(cx, buf),
            None => std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.0.as_mut() {
            Some(half) => std::pin::Pin::new(half).poll_flush(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        // The MCP transport shuts down when the client is gone; the socket
        // stays open until the connection's teardown is over.
        match self.0.as_mut() {
            Some(half) => std::pin::Pin::new(half).poll_flush(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }
}

/// Serves one connection: the peer check, the hello, the version check,
/// then the request's kind.
pub(super) async fn handle(shared: Arc<Shared>, stream: UnixStream) {
    let peer_pid = stream.peer_cred().ok().and_then(|c| c.pid());
    // Checked at once, before the hello: the sooner the peer is looked
    // up, the less time a client that exits has to let its pid be reused.
    let refused = super::peer::check(peer_pid, &stream).err();
    // A second descriptor of the socket keeps it open after the MCP
    // transport dropped its halves, until everything the connection
    // started has ended: a bridge exits only then, as a standalone server
    // did.
    let keep = std::os::fd::AsFd::as_fd(&stream).try_clone_to_owned().ok();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let hello: Hello = match tokio::time::timeout(
        Duration::from_secs(10),
        read_line(&mut reader, MAX_REQUEST_LINE),
    )
    .await
    {
        Ok(Ok(hello)) => hello,
        Ok(Err(e)) => {
            tracing::warn!("closing a connection that sent a malformed hello: {e}");
            let reply = Reply::failed(Code::MalformedHello, e.to_string());
            let _ = write_line(&mut write, &reply).await;
            return;
        }
        Err(_) => {
            tracing::warn!("closing a connection that sent no hello within 10 s");
            return;
        }
    };
    if let Some(refusal) = refused {
        // A process that a dsh sandbox may confine (one this daemon
        // started, or any process more confined than the daemon) could
        // start unconfined processes through a connection of its own.
        tracing::warn!(
            peer = peer_pid.unwrap_or(0),
            kind = hello.request.kind(),
            why = refusal.log_reason(),
            "refused a client that may run in a sandbox"
        );
        let reply = Reply::failed(Code::SandboxedClient, refusal.message());
        let _ = write_line(&mut write, &reply).await;
        return;
    }
    let request = hello.request;
    if hello.protocol != PROTOCOL || (request.needs_same_version() && hello.version != version()) {
        tracing::info!(
            client = %hello.version,
            kind = request.kind(),
            "refused a client of another version"
        );
        let reply = Reply::failed(
            Code::VersionMismatch,
            format!(
                "this dsh daemon is version {} and the client is {}; a client only talks to a daemon of its own version",
                version(),
                hello.version
            ),
        );
        let _ = write_line(&mut write, &reply).await;
        return;
    }
    let one_shot = match &request {
        Request::Mcp(_) | Request::Attach { .. } => false,
        Request::Registry { .. }
        | Request::Status
        | Request::Stop
        | Request::Reload
        | Request::Ps
        | Request::Detached { .. }
        | Request::Answer { .. }
        | Request::Asking { .. }
        | Request::Approvals
        | Request::Approve { .. }
        | Request::Ui
        | Request::Handover { .. }
        | Request::Record { .. } => true,
    };
    // One-shot requests are accepted at once and answered when done, so a
    // client tells a slow operation from a daemon that does not answer.
    if one_shot
        && write_line(&mut write, &Reply::of(&Accepted { accepted: true }))
            .await
            .is_err()
    {
        return;
    }
    let reply = match request {
        Request::Mcp(mcp) => {
            return mcp_session(&shared, mcp, peer_pid, reader, write, keep).await;
        }
        Request::Attach { id, write: typing } => {
            let _busy = Busy::new(&shared.busy);
            super::attach::serve(
                &shared.host,
                &id,
                typing,
                reader,
                write,
                shared.stop.clone(),
            )
            .await;
            return;
        }
        Request::Registry { op } => registry(&shared, op).await,
        Request::Status => Reply::of(&status(&shared).await),
        Request::Stop => {
            let reply = Reply::of(&status(&shared).await);
            let _ = write_line(&mut write, &reply).await;
            let _ = shared.control.send(Control::Stop("dsh daemon stop")).await;
            return;
        }
        Request::Reload => Reply::of(&Reloaded {
            reloaded: shared.host.reload().await,
        }),
        Request::Ps => {
            let _busy = Busy::new(&shared.busy);
            Reply::of(&super::live::ps(&shared.host, shared.started_at).await)
        }
        Request::Detached {
            connection,
            give_to,
        } => {
            let _busy = Busy::new(&shared.busy);
            super::live::decide_detached(&shared.host, connection, give_to).await
        }
        Request::Answer { id, secret } => {
            let _busy = Busy::new(&shared.busy);
            answer(&shared, &id, secret).await
        }
        Request::Asking { id } => match id.parse::<terminal_seam::TerminalId>() {
            Ok(id) => Reply::of(&daemon_wire::replies::Asking {
                question: shared.host.answer_question(id),
            }),
            Err(e) => Reply::failed(crate::codes::terminal(&e), e.to_string()),
        },
        Request::Approvals => approvals(&shared),
        Request::Approve { id, run } => approve(&shared, &id, run),
        Request::Ui => {
            let _busy = Busy::new(&shared.busy);
            match serve_page(&shared).await {
                Ok(page) => Reply::of(&page),
                Err(e) => Reply::failed(e.code(), e.to_string()),
            }
        }
        Request::Handover { socket } => handover(&shared, socket).await,
        Request::Record { records } => record(&shared, records).await,
    };
    let _ = write_line(&mut write, &reply).await;
}

/// `approvals`: the commands waiting for a person's approval.
fn approvals(shared: &Shared) -> Reply {
    Reply::of(&daemon_wire::replies::Approvals {
        approvals: shared
            .host
            .waiting_approvals()
            .into_iter()
            .map(|a| daemon_wire::replies::WaitingApproval {
                id: a.id,
                agent: a.agent,
                cwd: a.cwd,
                question: a.question,
                command: a.command,
                waited_secs: a.waited.as_secs(),
            })
            .collect(),
    })
}

/// `approve`: a person's decision on a waiting command.
fn approve(shared: &Shared, id: &str, run: bool) -> Reply {
    match shared.host.person_decides(id, run) {
        Ok(what) => {
            tracing::info!(approval = %id, run, "a person decided (dsh approve)");
            Reply::of(&daemon_wire::replies::Decided { what })
        }
        Err(e) => Reply::failed(e.code(), e.to_string()),
    }
}

/// `mcp`: the connection's preset and config, the reply (with what
/// differs from the daemon's own settings), then the MCP session until
/// it ends.
async fn mcp_session(
    shared: &Shared,
    mcp: McpHello,
    peer_pid: Option<i32>,
    reader: BufReader<OwnedReadHalf>,
    mut write: OwnedWriteHalf,
    keep: Option<OwnedFd>,
) {
    let preset = match parse_preset(mcp.preset.as_deref()) {
        Ok(p) => p,
        Err(e) => {
            let _ = write_line(&mut write, &Reply::failed(Code::InvalidArgument, e)).await;
            return;
        }
    };
    let config_path = mcp.config.clone().or_else(|| shared.config_path.clone());
    let config = match shared.host.load_config(config_path.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            let _ = write_line(&mut write, &Reply::failed(Code::ConfigError, e)).await;
            return;
        }
    };
    let warnings: Vec<String> = shared
        .host
        .config()
        .fixed_differences(&config)
        .into_iter()
        .map(|k| {
            format!(
                "the running dsh daemon (pid {}) uses its own [{k}] settings; this connection's differ and apply after `dsh daemon stop`",
                std::process::id()
            )
        })
        .collect();
    let reply = Reply::of(&McpAccepted { warnings });
    if write_line(&mut write, &reply).await.is_err() {
        return;
    }
    let setup = ConnectionSetup {
        label: format!("mcp-{}", peer_pid.unwrap_or(0)),
        preset,
        config_path,
        config: Some(config),
        fallback_cwd: Some(mcp.cwd),
        env: Some(Arc::new(mcp.env)),
        peer_pid,
    };
    if let Err(e) = serve_connection(
        shared.host.clone(),
        setup,
        reader,
        KeepOpen(Some(write)),
        shared.stop.clone(),
    )
    .await
    {
        tracing::warn!("an MCP connection ended with an error: {e}");
    }
    drop(keep);
}

/// `registry`: one operation on the held store.
async fn registry(shared: &Shared, op: RegistryOp) -> Reply {
    let _busy = Busy::new(&shared.busy);
    let held = shared.held.clone();
    let result =
        tokio::task::spawn_blocking(move || crate::registry::execute_held(&held, &op)).await;
    match result {
        Ok(Ok(data)) => Reply::ok(data),
        Ok(Err(failure)) => Reply::failed(failure.code, failure.message),
        Err(e) => Reply::failed(Code::Internal, format!("the registry task failed: {e}")),
    }
}

/// `handover`: the accept loop stops listening, closes the store and
/// releases the lock; the reply says it is done.
async fn handover(shared: &Shared, socket: PathBuf) -> Reply {
    let (done_tx, done_rx) = oneshot::channel();
    let sent = shared
        .control
        .send(Control::Handover(socket, done_tx))
        .await;
    match (sent, done_rx.await) {
        (Ok(()), Ok(())) => Reply::ok(serde_json::Value::Null),
        _ => Reply::failed(Code::HandoverFailed, "the daemon is stopping"),
    }
}

/// `record`: session records forwarded by a daemon that handed its store
/// over to this one.
async fn record(shared: &Shared, records: Vec<SessionRecordOp>) -> Reply {
    let _busy = Busy::new(&shared.busy);
    let held = shared.held.clone();
    let result = tokio::task::spawn_blocking(move || {
        for record in records {
            held.record(record)?;
        }
        Ok::<(), workspace::WorkspaceError>(())
    })
    .await;
    match result {
        Ok(Ok(())) => Reply::ok(serde_json::Value::Null),
        Ok(Err(e)) => Reply::failed(crate::codes::registry(&e), e.to_string()),
        Err(e) => Reply::failed(Code::Internal, e.to_string()),
    }
}

/// The web page, started on the first request: its address and a fresh
/// one-time sign-in link (each request mints one). The secret itself
/// goes to a file only this user can read, beside the socket, for
/// scripts; it is never in a reply, an argument or the environment.
async fn serve_page(shared: &Shared) -> Result<UiPage, ui::UiError> {
    serve_page_then(shared, |page| {
        Ok(UiPage {
            url: page.login_url()?,
            address: page.addr().to_string(),
            exposed: page.exposed(),
            // Only a file that was written: scripts read the secret there.
            token_file: page.token_file().map(Path::to_path_buf),
        })
    })
    .await
}

/// A link to the page at `path` alone (see [`ui::UiServer::page_link`]),
/// the page started first when it is not running.
pub(super) async fn page_link(shared: &Shared, path: &str) -> Result<ui::PageLink, ui::UiError> {
    serve_page_then(shared, |page| page.page_link(path)).await
}

/// Starts the page on the first call, then `then` with it.
async fn serve_page_then<T>(
    shared: &Shared,
    then: impl FnOnce(&ui::UiServer) -> Result<T, ui::UiError>,
) -> Result<T, ui::UiError> {
    let mut held = shared.ui.lock().await;
    let page = match &mut *held {
        Some(page) => page,
        None => {
            let source = super::page::DaemonUiSource::new(
                shared.host.clone(),
                shared.held.clone(),
                shared.watchers.clone(),
            )
            .with_remotes(shared.paths.runtime_dir.clone());
            let settings = shared.host.config().ui.clone();
            let mut server =
                ui::start(Arc::new(source), &settings, shared.stop.child_token()).await?;
            let token_file = ui_token_file(&shared.paths);
            if let Err(e) = server.keep_token_at(&token_file) {
                tracing::warn!(
                    "ui: cannot write the page's token file {}: {e}",
                    token_file.display()
                );
            }
            held.insert(server)
        }
    };
    then(page)
}

/// Where the page's secret is kept for scripts: beside the socket, in the
/// private runtime directory (`dsh-KEY.ui-token`).
fn ui_token_file(paths: &DaemonPaths) -> PathBuf {
    paths.socket.with_extension("ui-token")
}

/// `status` (and `stop`, before it stops).
async fn status(shared: &Shared) -> Status {
    let uptime = shared.started_at.elapsed().unwrap_or_default();
    // The page, once `dsh ui` asked for it: where, and how many people
    // watch a live part of it now.
    let page = shared.ui.lock().await.as_ref().map(|p| PageStatus {
        address: p.addr().to_string(),
        exposed: p.exposed(),
        viewers: shared.watchers.load(Ordering::Acquire),
    });
    Status {
        page,
        pid: std::process::id(),
        version: version(),
        socket: shared.paths.socket.clone(),
        data_dir: shared.paths.data_dir.clone(),
        log: shared.paths.log.clone(),
        uptime_s: uptime.as_secs(),
        connections: shared.host.connection_count(),
        idle_exit_s: shared.host.config().idle_exit.as_secs_f64(),
        language_servers: shared
            .host
            .language_servers()
            .into_iter()
            .map(|s| LanguageServerStatus {
                pid: s.pid,
                server: s.name,
                root: s.root,
                problem: s.problem,
            })
            .collect(),
    }
}

/// `answer`: a person's answer to terminal `id`'s secret prompt.
async fn answer(shared: &Shared, id: &str, secret: daemon_wire::Secret) -> Reply {
    let id: terminal_seam::TerminalId = match id.parse() {
        Ok(id) => id,
        Err(e) => {
            let e: terminal_seam::TerminalError = e;
            return Reply::failed(crate::codes::terminal(&e), e.to_string());
        }
    };
    match shared.host.person_answers(id, secret.0).await {
        Ok(how) => {
            tracing::info!(terminal = %id, "a person answered a secret prompt (dsh answer)");
            Reply::of(&daemon_wire::replies::Answered {
                how: how.to_owned(),
            })
        }
        Err(e) => Reply::failed(crate::codes::answer(&e), e.to_string()),
    }
}
