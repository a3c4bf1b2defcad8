//! `dsh mcp`: the tools over MCP stdio.
//!
//! [`Host`] owns the long-lived [`Runtime`] and the current tool layer (the
//! config and the [`Catalog`] built from it). A [`Connection`] is one MCP
//! client: it has its own [`Owner`] and only borrows the host, so a config
//! reload swaps the tool layer under live connections without touching
//! their terminals or jobs, and one host could later serve many
//! connections.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use futures::FutureExt as _;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation,
    ListToolsResult, PaginatedRequestParams, ServerCapabilities, ServerConfig,
};
use rmcp::service::{NotificationContext, RequestContext};
use rmcp::{ErrorData as McpError, Peer, RoleServer, ServerHandler, ServiceExt as _};
use serde_json::Value;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tools_catalog::{CallContext, Catalog, Owner, Preset, Runtime, ToolError};

use workspace::{ClientInfo, SessionHeader, SessionId};
use workspace_sled::Store;

use crate::config::{self, Config};
use crate::session_log::{LogPolicy, SessionRecorder};

/// How `dsh mcp` was started.
#[derive(Debug, Clone)]
pub struct Options {
    /// `--preset`, which wins over the config's `preset`.
    pub preset: Option<Preset>,
    /// `--config`, re-read on reload.
    pub config_arg: Option<PathBuf>,
    /// The workspace and session store's directory.
    pub data_dir: PathBuf,
}

/// The tools as configured right now.
pub struct ToolLayer {
    /// The config the layer was built from.
    pub config: Config,
    /// The tools served.
    pub catalog: Catalog,
}

impl ToolLayer {
    fn build(config: Config, preset: Option<Preset>) -> Self {
        let preset = preset
            .or(config.preset.map(Preset::from))
            .unwrap_or(Preset::Full);
        let catalog = Catalog::new(preset, &config.settings());
        Self { config, catalog }
    }

    /// What `tools/list` returns.
    fn mcp_tools(&self) -> Vec<rmcp::model::Tool> {
        self.catalog
            .tools()
            .iter()
            .map(|t| {
                let s = t.spec();
                rmcp::model::Tool::new(s.name, s.description, Arc::new(s.input_schema.clone()))
            })
            .collect()
    }
}

/// The long-lived part of the server.
pub struct Host {
    runtime: Arc<Runtime>,
    warmups: std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>,
    lsp_providers: Vec<Arc<lsp_rust_analyzer::StdioLspProvider>>,
    store: Store,
    layer: ArcSwap<ToolLayer>,
    options: Options,
}

impl Host {
    /// A host serving `config`.
    pub fn new(config: Config, options: Options) -> Self {
        // The config was validated when it was read, so this only fails on
        // a config built in code; then no language server is routed.
        let (router, lsp_providers) = lsp_rust_analyzer::build_router(&config.lsp())
            .unwrap_or_else(|e| {
                tracing::error!("language servers disabled: {e}");
                (lsp_seam::Router::new(), Vec::new())
            });
        Self {
            warmups: std::sync::Mutex::new(Vec::new()),
            lsp_providers,
            runtime: Arc::new(Runtime::new(
                config.jobs(),
                Arc::new(terminal_pty::PtyTerminals::new(config.terminals())),
                router,
            )),
            store: Store::new(options.data_dir.clone()),
            layer: ArcSwap::from_pointee(ToolLayer::build(config, options.preset)),
            options,
        }
    }

    /// Starts the language servers for a session's directory ahead of its
    /// first query (errors wait for that query to report them).
    fn warm_language_servers(&self, cwd: &Path) {
        for provider in &self.lsp_providers {
            let provider = provider.clone();
            let cwd = cwd.to_path_buf();
            let warmup = tokio::spawn(async move {
                if let Err(e) = provider.start(&cwd).await {
                    tracing::debug!("no eager language server for {}: {e}", cwd.display());
                }
            });
            if let Ok(mut warmups) = self.warmups.lock() {
                warmups.retain(|w| !w.is_finished());
                warmups.push(warmup);
            }
        }
    }

    /// Stops every language server cleanly (`shutdown`, `exit`, verified).
    async fn stop_language_servers(&self) {
        if let Ok(mut warmups) = self.warmups.lock() {
            for warmup in warmups.drain(..) {
                warmup.abort();
            }
        }
        futures::future::join_all(self.lsp_providers.iter().map(|p| p.shutdown())).await;
    }

    /// Re-reads the config and rebuilds the tool layer; live terminals and
    /// jobs are untouched. Returns whether the tool list changed.
    pub fn reload(&self) -> Result<bool, config::ConfigError> {
        let (config, _) = config::load(self.options.config_arg.as_deref())?;
        let old = self.layer.load();
        let fixed = [
            ("lsp", old.config.lsp != config.lsp),
            ("log", old.config.log != config.log),
            (
                "limits (jobs, terminals)",
                old.config.jobs() != config.jobs() || old.config.terminals() != config.terminals(),
            ),
        ];
        let needs_restart: Vec<&str> = fixed.iter().filter(|(_, c)| *c).map(|(k, _)| *k).collect();
        if !needs_restart.is_empty() {
            tracing::warn!(
                "reload: changes to {} take effect when dsh restarts; the rest is applied now",
                needs_restart.join(", ")
            );
        }
        let new = ToolLayer::build(config, self.options.preset);
        let changed = old.mcp_tools() != new.mcp_tools();
        self.layer.store(Arc::new(new));
        Ok(changed)
    }
}

/// One MCP client.
#[derive(Clone)]
pub struct Connection {
    host: Arc<Host>,
    owner: Owner,
    /// The session's directory: the client's first root, else ours. `None`
    /// until the client has been asked for its roots.
    cwd: watch::Receiver<Option<PathBuf>>,
    cwd_tx: Arc<watch::Sender<Option<PathBuf>>>,
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    recorder: SessionRecorder,
    /// Cancelled when the client closes its end: calls still running stop
    /// at once, so teardown starts before a client gives up waiting.
    closed: CancellationToken,
}

impl Connection {
    /// A new connection with a new owner.
    pub fn new(host: Arc<Host>, label: &str) -> Self {
        let (cwd_tx, cwd) = watch::channel(None);
        Self {
            recorder: SessionRecorder::start(
                host.store.clone(),
                LogPolicy {
                    commands: host.layer.load().config.log.commands,
                },
            ),
            host,
            owner: Owner::new(label),
            cwd,
            cwd_tx: Arc::new(cwd_tx),
            peer: Arc::new(OnceLock::new()),
            closed: CancellationToken::new(),
        }
    }

    async fn session_cwd(&self) -> PathBuf {
        let mut rx = self.cwd.clone();
        let waited =
            tokio::time::timeout(Duration::from_secs(2), rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(cwd)) => cwd.clone().unwrap_or_else(server_cwd),
            _ => server_cwd(),
        }
    }
}

fn server_cwd() -> PathBuf {
    std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/"))
}

/// The directory a root's `file://` URI names (percent-decoded), if it
/// exists.
fn root_path(uri: &str) -> Option<PathBuf> {
    let path = url::Url::parse(uri).ok()?.to_file_path().ok()?;
    path.is_dir().then_some(path)
}

const INSTRUCTIONS: &str = "dsh gives you a shell (`bash`), and in the full preset persistent terminals \
(`terminal_*`), background jobs (`job_*`) and language-server queries (`lsp`). Errors come as \
`[error CODE] message`; the message says what to do next.";

impl ServerHandler for Connection {
    // Logging notifications and roots are deprecated by a draft of the
    // protocol but are what today's clients implement.
    #[allow(deprecated)]
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_logging()
                .enable_tools()
                .enable_tool_list_changed()
                .build(),
        )
        .with_server_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        Ok(ListToolsResult::with_all_items(
            self.host.layer.load().mcp_tools(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let layer = self.host.layer.load_full();
        let Some(tool) = layer.catalog.get(&request.name).cloned() else {
            return Err(McpError::invalid_params(
                format!(
                    "unknown tool `{}`; this server has: {}",
                    request.name,
                    layer.catalog.names().join(", ")
                ),
                None,
            ));
        };
        let cx = CallContext {
            owner: self.owner.clone(),
            cwd: self.session_cwd().await,
            runtime: self.host.runtime.clone(),
        };
        let args = request.arguments.map(Value::Object).unwrap_or(Value::Null);
        let logged_args = args.clone();
        let at = chrono::Utc::now();
        let started = Instant::now();
        let call = std::panic::AssertUnwindSafe(tool.call(&cx, args)).catch_unwind();
        let outcome = tokio::select! {
            outcome = call => match outcome {
                Ok(result) => result,
                Err(_) => Err(ToolError::new(
                    "INTERNAL",
                    format!("the `{}` tool failed unexpectedly; the server is still running — try again or use another approach", request.name),
                )),
            },
            () = context.ct.cancelled() => Err(ToolError::new("CANCELLED", "the client cancelled this call")),
            () = self.closed.cancelled() => Err(ToolError::new("CANCELLED", "the client disconnected")),
        };
        let code = outcome.as_ref().err().map_or("OK", |e| e.code);
        self.recorder
            .call(at, &request.name, &logged_args, code, started.elapsed());
        tracing::info!(
            tool = %request.name,
            outcome = code,
            ms = started.elapsed().as_millis() as u64,
            "tool call"
        );
        Ok(CallToolResponse::from(to_mcp_result(outcome)))
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let peer = context.peer.clone();
        let _ = self.peer.set(peer.clone());
        let info = peer.peer_info();
        let client = info.as_ref().map(|i| ClientInfo {
            name: i.client_info.name.clone(),
            version: i.client_info.version.clone(),
        });
        let wants_roots = info.is_some_and(|i| i.capabilities.roots.is_some());
        let tx = self.cwd_tx.clone();
        let recorder = self.recorder.clone();
        let host = self.host.clone();
        let begin = move |cwd: PathBuf| {
            tx.send_replace(Some(cwd.clone()));
            host.warm_language_servers(&cwd);
            recorder.begin(SessionHeader {
                id: SessionId::new_random(),
                cwd: Some(cwd),
                created_at: chrono::Utc::now(),
                client,
            });
        };
        if !wants_roots {
            begin(server_cwd());
            return;
        }
        #[allow(deprecated)]
        tokio::spawn(async move {
            let roots = tokio::time::timeout(Duration::from_secs(2), peer.list_roots()).await;
            let cwd = match roots {
                Ok(Ok(result)) => result.roots.first().and_then(|r| root_path(&r.uri)),
                _ => None,
            };
            begin(cwd.unwrap_or_else(server_cwd));
        });
    }
}

fn to_mcp_result(outcome: Result<tools_catalog::ToolReply, ToolError>) -> CallToolResult {
    match outcome {
        Ok(reply) => {
            let mut result = CallToolResult::structured(reply.structured);
            result.content = vec![ContentBlock::text(reply.text)];
            result
        }
        Err(err) => {
            let mut result = CallToolResult::structured_error(err.structured());
            result.content = vec![ContentBlock::text(err.text())];
            result
        }
    }
}

/// Standard input that cancels a token when it reaches end-of-file.
struct EofSignal<R> {
    inner: R,
    on_eof: CancellationToken,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for EofSignal<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(result) = &polled
            && (result.is_err() || buf.filled().len() == before)
        {
            self.on_eof.cancel();
        }
        polled
    }
}

/// Tells the client when one of its background jobs settles (an MCP
/// logging notification naming the job, its status and how to read it).
async fn forward_job_events(
    runtime: Arc<Runtime>,
    owner: Owner,
    peer: Arc<OnceLock<Peer<RoleServer>>>,
) {
    let mut events = runtime.jobs.subscribe();
    loop {
        let event = match events.recv().await {
            Ok(event) => event,
            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                tracing::warn!("{n} job events were missed");
                continue;
            }
            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
        };
        if event.owner != owner {
            continue;
        }
        let Some(peer) = peer.get() else { continue };
        let job = &event.job;
        let message = tools_catalog::settled_job_message(job);
        let data = serde_json::json!({
            "job_id": job.id,
            "kind": job.kind.as_str(),
            "status": job.status.as_str(),
            "exit_code": job.exit_code,
            "message": message,
        });
        #[allow(deprecated)]
        let sent = peer
            .notify_logging_message(
                rmcp::model::LoggingMessageNotificationParam::new(
                    rmcp::model::LoggingLevel::Info,
                    data,
                )
                .with_logger("dsh.jobs"),
            )
            .await;
        if let Err(e) = sent {
            tracing::debug!("could not send a job notification: {e}");
        }
    }
}

/// Serves one client on stdin/stdout until it disconnects or the process
/// is asked to stop; SIGHUP reloads the config.
pub async fn serve_stdio(config: Config, options: Options) -> anyhow::Result<()> {
    // Orphans of our commands come back to us (and are reaped) instead of
    // becoming zombies under an init that may not reap.
    if let Err(e) = process_tree::become_subreaper() {
        tracing::warn!("could not become a child subreaper: {e}");
    }
    let mut sigchld = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child())?;
    tokio::spawn(async move {
        // One /proc scan per burst of SIGCHLDs: a zombie may wait a moment,
        // a busy server must not scan /proc after every command.
        while sigchld.recv().await.is_some() {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let _ = tokio::task::spawn_blocking(process_tree::reap_adopted).await;
        }
    });

    let host = Arc::new(Host::new(config, options));
    let connection = Connection::new(host.clone(), "mcp-stdio");
    let peer_slot = connection.peer.clone();
    let recorder = connection.recorder.clone();
    let owner = connection.owner.clone();
    tokio::spawn(forward_job_events(
        host.runtime.clone(),
        owner.clone(),
        peer_slot.clone(),
    ));
    let closed = connection.closed.clone();
    let stdin = EofSignal {
        inner: tokio::io::stdin(),
        on_eof: closed.clone(),
    };
    let service = connection.serve((stdin, tokio::io::stdout())).await?;
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        preset = %host.layer.load().catalog.preset(),
        "dsh mcp serving on stdio"
    );

    let reload_host = host.clone();
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while sighup.recv().await.is_some() {
            match reload_host.reload() {
                Ok(changed) => {
                    tracing::info!(tools_changed = changed, "config reloaded");
                    if let (true, Some(peer)) = (changed, peer_slot.get())
                        && let Err(e) = peer.notify_tool_list_changed().await
                    {
                        tracing::warn!("could not announce the new tool list: {e}");
                    }
                }
                Err(e) => tracing::error!("reload failed, keeping the old config: {e}"),
            }
        }
    });

    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let cancel = service.cancellation_token();
    let waiting = service.waiting();
    tokio::pin!(waiting);
    tokio::select! {
        reason = &mut waiting => {
            tracing::info!("client disconnected: {reason:?}");
        }
        _ = sigterm.recv() => {
            tracing::info!("SIGTERM: stopping");
            cancel.cancel();
            let _ = waiting.await;
        }
        _ = tokio::signal::ctrl_c() => {
            tracing::info!("SIGINT: stopping");
            cancel.cancel();
            let _ = waiting.await;
        }
    }
    // The connection is gone: end everything it started, verified, stop
    // the language servers and let the session log catch up — together, as
    // a client may not wait long for us to exit.
    closed.cancel();
    tokio::join!(
        host.runtime.end_owner(&owner),
        host.stop_language_servers(),
        recorder.finish(Duration::from_secs(2)),
    );
    Ok(())
}
