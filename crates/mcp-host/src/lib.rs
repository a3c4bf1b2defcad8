//! The MCP server: one [`Host`] (the long-lived runtime, the store, the
//! language servers) and one [`Connection`] per MCP client.
//!
//! Beside them, what the host reads and records: the config file and what
//! the host takes of it ([`config`]), the store held open for a daemon's
//! life or taken per operation ([`store`]), each connection's session log
//! ([`session_log`]) and the calls it carries to the page as they happen
//! ([`calls`]); and the duties of a process that runs a host: the
//! subreaper, the orphan reaper and the guardian ([`processes`]).
//!
//! Of the daemon's crates this one names only the wire (`daemon-wire`): it
//! does not listen on a socket (the `daemon` crate does) or reach a daemon
//! (`daemon-client` does), and it holds no tool logic (`tools-catalog`
//! does).
//!
//! The host is the same whether one stdio client is served in process
//! (`dsh mcp --standalone`) or many socket clients by the daemon. A
//! connection has its own [`Owner`], its own tool layer (the preset and
//! config file its bridge asked for), its own working directory and the
//! environment its client gave `dsh mcp`; it only borrows the host, so a
//! config reload swaps a connection's tool layer without touching its
//! terminals or jobs.
//!
//! The modules:
//!
//! * this file — [`Host`] and [`Connection`], the rmcp `ServerHandler`. A
//!   connection speaks the `initialize` revisions and 2026-07-28, where the
//!   client's first request of any kind (`server/discover`) begins the
//!   session and `subscriptions/listen` streams carry tool-list changes.
//!   What a result carries is decided per client
//!   (`daemon_wire::model_view`): the text alone for the agent clients that
//!   show `structuredContent` instead of it (Claude Code, Codex, Gemini CLI;
//!   cut to fit Codex's own limit), text and `structuredContent` for every
//!   other. A call runs as a task its request awaits, so one that needs a
//!   person's page is parked for the client's retry; `mcp_progress` turns a
//!   call's progress reports into `notifications/progress`.
//! * `links` — a call asks its client to open a link for the person: an
//!   `elicitation/create` request, or over 2026-07-28 the request's
//!   `InputRequiredResult`.
//! * `tasks` — for a client with the Tasks extension, a long call becomes a
//!   task that follows its job.
//! * `secrets` — sends a person to the page's answer form, or says how to
//!   answer, for a secret prompt; its `approvals` holds the commands waiting
//!   for a person's Run or Refuse (`sandbox: "off"`).
//! * `detach` — a connection's terminals and jobs kept detached after its
//!   client went away, and handed back for the resume key.
//! * [`config`] — the TOML config file and its conversion into the host's
//!   [`config::HostConfig`]: the daemon reads it at start-up, reads each
//!   connection's file and reads them all again on a reload, with no
//!   callback into the binary.
//! * [`store`] — the store held for the daemon's life, with a watch of its
//!   changes for the page; [`session_log`] and [`calls`] — the session log
//!   and the calls it publishes to the page, off every call's reply path.
//! * [`processes`] — the subreaper, the orphan reaper, and the guardian the
//!   binary's hidden `__guardian` subcommand runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use daemon_wire::Code;
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
use tools_catalog::{Asker, CallContext, Catalog, Confinement, Owner, Preset, Runtime, ToolError};
use workspace::{ClientInfo, SessionHeader, SessionId};

use crate::session_log::{LogPolicy, SessionRecorder};

pub mod calls;
pub mod config;
mod detach;
mod links;
pub mod processes;
mod secrets;
pub mod session_log;
pub mod store;
mod tasks;
pub use detach::{Agent, AgentCell, Detached, KEY_PREFIX, TakeBackLock};
use detach::{ConnectionResume, current, new_agent};
pub use secrets::{PageLinks, PromptView};

use crate::config::HostConfig;
use crate::store::StoreAccess;

/// The tools as configured right now for one connection.
pub struct ToolLayer {
    /// The config the layer was built from.
    pub config: HostConfig,
    /// The tools served.
    pub catalog: Catalog,
    /// The sandbox and environment policy of the processes they start.
    pub confinement: Arc<Confinement>,
}

/// What the kernel offers for sandboxing, probed once per process (an
/// invalid `DSH_SANDBOX_TEST_PRETEND` is kept as the error).
fn availability() -> Result<tools_catalog::sandbox::Availability, String> {
    static PROBED: OnceLock<Result<tools_catalog::sandbox::Availability, String>> = OnceLock::new();
    PROBED
        .get_or_init(|| tools_catalog::sandbox::Availability::probe().map_err(|e| e.to_string()))
        .clone()
}

/// The confinement of `config`, closing `private` (the host's own
/// directories) too.
fn confinement(config: &HostConfig, private: &[PathBuf]) -> Confinement {
    let mut dirs = config.private_dirs.clone();
    dirs.extend(private.iter().cloned());
    dirs.extend(config.log.0.iter().cloned());
    let confinement = Confinement::new(
        config.sandbox.clone(),
        config.env.clone(),
        availability(),
        dirs,
    );
    match &config.repl_state {
        Some(base) => {
            confinement.with_repl_state(tools_catalog::sandbox::ReplState::new(base.clone()))
        }
        None => confinement,
    }
}

impl ToolLayer {
    /// The layer of `config`; `preset` wins over the config's. `private`
    /// names the host's directories no sandboxed process may touch.
    pub fn build(config: HostConfig, preset: Option<Preset>, private: &[PathBuf]) -> Self {
        let preset = preset.or(config.preset).unwrap_or(Preset::Full);
        let catalog = Catalog::new(preset, &config.settings);
        let confinement = Arc::new(confinement(&config, private));
        session_sandboxes::register(&confinement);
        Self {
            config,
            catalog,
            confinement,
        }
    }

    /// What `tools/list` returns.
    fn mcp_tools(&self) -> Vec<rmcp::model::Tool> {
        mcp_tools(&self.catalog)
    }
}

/// The tools of `catalog` as `tools/list` lists them.
fn mcp_tools(catalog: &Catalog) -> Vec<rmcp::model::Tool> {
    catalog
        .tools()
        .iter()
        .map(|t| {
            let s = t.spec();
            let mut tool =
                rmcp::model::Tool::new(s.name, s.description, Arc::new(s.input_schema.clone()))
                    .annotate(annotations(s.effect.hints()));
            if ALWAYS_LOADED.contains(&s.name) {
                let mut meta = rmcp::model::MetaObject::default();
                meta.insert("anthropic/alwaysLoad".to_owned(), Value::Bool(true));
                tool.meta = Some(meta);
            }
            tool
        })
        .collect()
}

/// A tool's hints as `tools/list` states them. `readOnlyHint` always
/// (every client reads it); each other hint where it differs from the
/// protocol's default for a tool that states none (`destructiveHint` true,
/// `idempotentHint` false, `openWorldHint` true), and `destructiveHint` and
/// `idempotentHint` only where `readOnlyHint` is false, the only case
/// where the protocol gives them a meaning. What is left out means the
/// same to every client, and the catalog is paid for on every request.
fn annotations(hints: tools_catalog::Hints) -> rmcp::model::ToolAnnotations {
    let mut stated = rmcp::model::ToolAnnotations::new();
    stated.read_only_hint = Some(hints.read_only);
    if !hints.read_only {
        stated.destructive_hint = (!hints.destructive).then_some(false);
        stated.idempotent_hint = hints.idempotent.then_some(true);
    }
    stated.open_world_hint = (!hints.open_world).then_some(false);
    stated
}

/// The tools Claude Code lists to the model from the first turn instead of
/// behind its tool-search step (`_meta["anthropic/alwaysLoad"]`): the
/// shell, which nearly every task starts with, so the model does not spend
/// a whole turn finding it. The others load on demand.
const ALWAYS_LOADED: &[&str] = &["bash"];

/// What a connection is, as `dsh ps` shows it.
#[derive(Debug, Clone)]
pub struct ConnectionFacts {
    /// The connection's number in this host.
    pub id: u64,
    /// Its owner (the terminals and jobs it started).
    pub owner: Owner,
    /// The MCP client, once it said who it is.
    pub client: Option<ClientInfo>,
    /// The session's directory, once known.
    pub cwd: Option<PathBuf>,
    /// The recorded session and its workspace, once recorded.
    pub recorded: Option<crate::session_log::Recorded>,
    /// The preset it is served.
    pub preset: Preset,
    /// When it connected.
    pub connected_at: SystemTime,
    /// The pid of the process on the other end (the bridge), when known.
    pub peer_pid: Option<i32>,
    /// The session's id once it began (before the store may have it).
    pub session: Option<SessionId>,
    /// Set when its client went away and its work is kept detached.
    pub detached: Option<Detached>,
}

struct ConnectionEntry {
    agent: AgentCell,
    /// Cancelled when the connection ends, or to end it.
    closed: CancellationToken,
    /// Held while an agent is taken back into this connection.
    take_back: TakeBackLock,
    detached: Option<Detached>,
    layer: Arc<ArcSwap<ToolLayer>>,
    config_path: Option<PathBuf>,
    preset: Option<Preset>,
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    client: Arc<OnceLock<ClientInfo>>,
    listeners: Listeners,
    cwd: watch::Receiver<Option<PathBuf>>,
    recorder: SessionRecorder,
    connected_at: SystemTime,
    peer_pid: Option<i32>,
    /// When its client last sent anything.
    seen: detach::Seen,
}

/// What a reload needs of one connection: its config file, preset, layer,
/// peer and `subscriptions/listen` streams.
type ReloadTarget = (
    Option<PathBuf>,
    Option<Preset>,
    Arc<ArcSwap<ToolLayer>>,
    Arc<OnceLock<Peer<RoleServer>>>,
    Listeners,
);

/// The open `subscriptions/listen` streams of a connection (MCP 2026-07-28
/// and later), where its tool-list changes are announced.
type Listeners = Arc<Mutex<Vec<(rmcp::service::SubscriptionSink, CancellationToken)>>>;

/// The long-lived part of the server: one per process.
pub struct Host {
    runtime: Arc<Runtime>,
    /// The terminal provider: the runtime's `TerminalService` and the
    /// person's views are this one service.
    terminals: Arc<terminal_pty::PtyTerminals>,
    warmups: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    lsp_providers: Vec<Arc<lsp_stdio::StdioLspProvider>>,
    store: StoreAccess,
    config: HostConfig,
    connections: Mutex<BTreeMap<u64, ConnectionEntry>>,
    next_connection: std::sync::atomic::AtomicU64,
    /// Pinged whenever a connection comes or goes.
    changed: tokio::sync::Notify,
    /// The host's own directories (data, runtime), closed to sandboxed
    /// processes.
    private: Vec<PathBuf>,
    /// Every connection's tool calls as they happen (for `dsh ui`).
    calls: Arc<crate::calls::CallHub>,
    /// The resume keys of detached work that was ended.
    expired: detach::Expired,
    /// Secret prompts waiting for a person.
    prompts: secrets::Prompts,
    /// Set once the redactor's rules began compiling.
    redactor_warmed: std::sync::Once,
}

impl Host {
    /// A host whose runtime is built from `config`. Call it inside a tokio
    /// runtime.
    /// `private` names the host's own directories (its data and runtime
    /// directories), which no sandboxed process may read or write.
    pub fn new(config: HostConfig, store: StoreAccess, private: Vec<PathBuf>) -> Self {
        let servers = Arc::new(confinement(&config, &private));
        // `writable`: the server's project root bounded by the asking
        // session's workspace, the one directory its sandbox may write;
        // `sandbox`: the asking session's sandbox, which the server runs
        // in (none: the host's own).
        let confine: lsp_stdio::Confine = Arc::new(move |writable: &Path, sandbox| {
            let confinement = if sandbox.0.is_empty() {
                servers.clone()
            } else {
                session_sandboxes::find(sandbox).ok_or_else(|| {
                    "the sandbox of the session that asked for it is gone (its connection \
                     closed); ask again from a connected session"
                        .to_owned()
                })?
            };
            let spawn = confinement
                .prepare_blocking(writable, None, tools_catalog::SpawnFor::LanguageServer)
                .map_err(|e| format!("{}: {}", e.code, e.message))?;
            let steps = spawn.child_steps();
            Ok(lsp_stdio::Confined {
                pre_exec: steps.program,
                pid_namespace: steps.pid_namespace,
                env: Some(
                    spawn
                        .env
                        .into_iter()
                        .map(|(k, v)| (k.into(), v.into()))
                        .collect(),
                ),
                build_dir: spawn.build_dir,
            })
        });
        // The config was validated when it was read, so this only fails on
        // a config built in code; then no language server is routed.
        let (router, lsp_providers) = lsp_stdio::build_router_confined(&config.lsp, Some(confine))
            .unwrap_or_else(|e| {
                tracing::error!("language servers disabled: {e}");
                (lsp_seam::Router::new(), Vec::new())
            });
        let terminals = Arc::new(terminal_pty::PtyTerminals::new(config.terminals.clone()));
        let runtime = Arc::new(Runtime::new(
            config.jobs.clone(),
            Arc::clone(&terminals) as Arc<dyn terminal_seam::TerminalService>,
            router,
        ));
        Self {
            warmups: Mutex::new(Vec::new()),
            lsp_providers,
            runtime,
            terminals,
            store,
            config,
            connections: Mutex::new(BTreeMap::new()),
            next_connection: std::sync::atomic::AtomicU64::new(1),
            changed: tokio::sync::Notify::new(),
            private,
            calls: Arc::new(crate::calls::CallHub::default()),
            expired: detach::Expired::default(),
            prompts: secrets::Prompts::default(),
            redactor_warmed: std::sync::Once::new(),
        }
    }

    /// Compiles the redactor's rules off the first call's path, once,
    /// when the first MCP connection comes (not at start: a daemon that
    /// serves no agent spends nothing on them).
    fn warm_redactor(&self) {
        self.redactor_warmed.call_once(|| {
            let runtime = Arc::clone(&self.runtime);
            let _ = std::thread::Builder::new()
                .name("dsh-redact-warm".to_owned())
                .spawn(move || drop(runtime.redactor()));
        });
    }

    /// Every connection's tool calls as they happen.
    pub fn calls(&self) -> &Arc<crate::calls::CallHub> {
        &self.calls
    }

    /// The runtime every connection borrows.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// The person's views of every terminal (`dsh attach`, the page).
    pub fn terminals(&self) -> Arc<dyn terminal_seam::PersonViews> {
        Arc::clone(&self.terminals) as Arc<dyn terminal_seam::PersonViews>
    }

    /// The config the host was started with.
    pub fn config(&self) -> &HostConfig {
        &self.config
    }

    /// The store the host records sessions in.
    pub fn store(&self) -> &StoreAccess {
        &self.store
    }

    /// Reads a connection's config file (`None`: defaults).
    pub fn load_config(&self, path: Option<&Path>) -> Result<HostConfig, String> {
        crate::config::load_host(path)
    }

    /// Waits until a connection comes or goes.
    pub async fn connections_changed(&self) {
        self.changed.notified().await;
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, ConnectionEntry>> {
        self.connections.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many MCP connections are open.
    pub fn connection_count(&self) -> usize {
        self.entries().len()
    }

    /// Every open connection, oldest first.
    pub fn connections(&self) -> Vec<ConnectionFacts> {
        self.entries()
            .iter()
            .map(|(id, e)| {
                let client = e.client.get().cloned();
                ConnectionFacts {
                    id: *id,
                    owner: current(&e.agent).0,
                    client,
                    cwd: e.cwd.borrow().clone(),
                    recorded: e.recorder.recorded(),
                    preset: e.layer.load().catalog.preset(),
                    connected_at: e.connected_at,
                    peer_pid: e.peer_pid,
                    session: e.recorder.session_id(),
                    detached: e.detached.clone(),
                }
            })
            .collect()
    }

    /// Starts the language servers for a session's directory ahead of its
    /// first query, in the session's sandbox `sandbox` (errors wait for
    /// that query to report them).
    fn warm_language_servers(&self, cwd: &Path, sandbox: lsp_seam::SandboxTag) {
        if !self.config.lsp_eager {
            return;
        }
        for provider in &self.lsp_providers {
            let provider = provider.clone();
            let cwd = cwd.to_path_buf();
            let sandbox = sandbox.clone();
            let warmup = tokio::spawn(async move {
                if let Err(e) = provider.start(&cwd, &sandbox).await {
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
    pub async fn stop_language_servers(&self) {
        if let Ok(mut warmups) = self.warmups.lock() {
            for warmup in warmups.drain(..) {
                warmup.abort();
            }
        }
        futures::future::join_all(self.lsp_providers.iter().map(|p| p.shutdown())).await;
    }

    /// The language-server processes running now (pid, server, root).
    pub fn language_servers(&self) -> Vec<lsp_stdio::ServerProcess> {
        self.lsp_providers
            .iter()
            .flat_map(|p| p.servers())
            .collect()
    }

    /// The directories closed to a connection's sandboxed processes: the
    /// host's, and the connection's config file.
    pub fn connection_private(&self, config_path: Option<&Path>) -> Vec<PathBuf> {
        let mut private = self.private.clone();
        private.extend(config_path.map(Path::to_path_buf));
        private
    }

    /// Re-reads every connection's config and rebuilds its tool layer;
    /// live terminals and jobs are untouched. Connections whose tool list
    /// changed are told so. Returns how many connections were reloaded.
    pub async fn reload(&self) -> usize {
        let targets: Vec<ReloadTarget> = self
            .entries()
            .values()
            .map(|e| {
                (
                    e.config_path.clone(),
                    e.preset,
                    e.layer.clone(),
                    e.peer.clone(),
                    e.listeners.clone(),
                )
            })
            .collect();
        let mut reloaded = 0;
        for (path, preset, layer, peer, listeners) in targets {
            let config = match self.load_config(path.as_deref()) {
                Ok(config) => config,
                Err(e) => {
                    tracing::error!("reload failed, keeping the old config: {e}");
                    continue;
                }
            };
            let needs_restart = self.config.fixed_differences(&config);
            if !needs_restart.is_empty() {
                tracing::warn!(
                    "reload: changes to {} take effect when dsh restarts; the rest is applied now",
                    needs_restart.join(", ")
                );
            }
            let new = ToolLayer::build(config, preset, &self.connection_private(path.as_deref()));
            let changed = layer.load().mcp_tools() != new.mcp_tools();
            layer.store(Arc::new(new));
            reloaded += 1;
            tracing::info!(tools_changed = changed, "config reloaded");
            if changed {
                announce_tool_list_changed(peer.get(), &listeners).await;
            }
        }
        reloaded
    }
}

/// How one connection is set up.
#[derive(Debug, Clone, Default)]
pub struct ConnectionSetup {
    /// A label for logs.
    pub label: String,
    /// `--preset`.
    pub preset: Option<Preset>,
    /// The config file of its tools (re-read on reload).
    pub config_path: Option<PathBuf>,
    /// Its tools' config, already read.
    pub config: Option<HostConfig>,
    /// The session's directory when the client names no root.
    pub fallback_cwd: Option<PathBuf>,
    /// The environment every process it starts gets (`None`: the host's).
    pub env: Option<Arc<Vec<(String, String)>>>,
    /// The pid on the other end, when known.
    pub peer_pid: Option<i32>,
}

/// One MCP client.
#[derive(Clone)]
pub struct Connection {
    host: Arc<Host>,
    /// Its number in the host.
    id: u64,
    /// The agent it acts as (a resume swaps it).
    agent: AgentCell,
    /// Held while an agent is taken back into it, and while it ends.
    take_back: TakeBackLock,
    layer: Arc<ArcSwap<ToolLayer>>,
    /// The session's directory: the client's first root, else the bridge's.
    /// `None` until the client has been asked for its roots.
    cwd: watch::Receiver<Option<PathBuf>>,
    cwd_tx: Arc<watch::Sender<Option<PathBuf>>>,
    fallback_cwd: PathBuf,
    env: Option<Arc<Vec<(String, String)>>>,
    peer: Arc<OnceLock<Peer<RoleServer>>>,
    /// Who the client is, once it said so (in `initialize`, or on its
    /// first request of MCP 2026-07-28).
    client: Arc<OnceLock<ClientInfo>>,
    /// Its `subscriptions/listen` streams.
    listeners: Listeners,
    /// Its calls that run on while the client shows a link (2026-07-28).
    parked: links::ParkedCalls,
    /// Its MCP tasks, each following one of its jobs.
    tasks: rmcp::task_manager::TaskManager,
    recorder: SessionRecorder,
    /// Cancelled when the client closes its end: calls still running stop
    /// at once, so teardown starts before a client gives up waiting.
    closed: CancellationToken,
}

impl Connection {
    async fn session_cwd(&self) -> PathBuf {
        let mut rx = self.cwd.clone();
        let waited =
            tokio::time::timeout(Duration::from_secs(2), rx.wait_for(Option::is_some)).await;
        match waited {
            Ok(Ok(cwd)) => cwd.clone().unwrap_or_else(|| self.fallback_cwd.clone()),
            _ => self.fallback_cwd.clone(),
        }
    }

    /// Begins the session: its directory is known from now on, its
    /// language servers warm up, and it is recorded in the registry.
    fn begin(&self, cwd: PathBuf) {
        self.cwd_tx.send_replace(Some(cwd.clone()));
        self.host
            .warm_language_servers(&cwd, self.layer.load().confinement.tag());
        self.recorder.begin(SessionHeader {
            id: SessionId::new_random(),
            cwd: Some(cwd),
            created_at: chrono::Utc::now(),
            client: self.client.get().cloned(),
        });
    }

    /// A client of MCP 2026-07-28 or later sends no `initialize` and no
    /// `initialized`: it says who it is and what it can do on every
    /// request, in `_meta`. Its first request (whichever it is) begins
    /// the session at once, in the bridge's directory — the directory the
    /// client started `dsh mcp` in — so no call ever waits for a
    /// handshake that does not come. (A server of this protocol cannot
    /// send requests of its own, so it cannot ask for the client's roots
    /// outside a call.)
    fn begin_stateless(&self, context: &RequestContext<RoleServer>) {
        if !is_stateless(context) || self.peer.set(context.peer.clone()).is_err() {
            return;
        }
        if let Some(info) = context.client_info() {
            let _ = self.client.set(ClientInfo {
                name: info.name,
                version: info.version,
            });
        }
        self.begin(self.fallback_cwd.clone());
    }
}

/// What a call's reply needs once the call ends, however long after its
/// request it does.
pub(crate) struct CallRecord {
    tool: String,
    args: Value,
    at: chrono::DateTime<chrono::Utc>,
    started: Instant,
    redactor: Arc<tools_catalog::redaction::LiveRedactor>,
    progress_sent: Option<tokio::task::JoinHandle<()>>,
    owner: u64,
    view: ModelView,
}

/// How long a parked call waits for its client to send it again.
const PARKED_FOR: Duration = Duration::from_secs(600);

impl Connection {
    /// What this request's client shows its model of a result.
    fn model_view(&self, context: &RequestContext<RoleServer>) -> ModelView {
        let client = context
            .client_info()
            .map(|c| c.name)
            .or_else(|| self.client.get().map(|c| c.name.clone()));
        ModelView::of(client.as_deref())
    }

    /// How a call of this request sends its client a link, and where it
    /// asks for one when the protocol has the request answer for it.
    fn link_sender(
        &self,
        context: &RequestContext<RoleServer>,
    ) -> (
        links::LinkSender,
        tokio::sync::mpsc::Receiver<links::LinkAskFrom>,
    ) {
        let (asks, link_asks) = tokio::sync::mpsc::channel(1);
        let elicitation = context.client_capabilities().and_then(|c| c.elicitation);
        let url = elicitation.as_ref().is_some_and(|e| e.url.is_some());
        let sender = match (url, is_stateless(context)) {
            (true, true) => links::LinkSender::InputRequired(asks),
            (true, false) => links::LinkSender::Request(context.peer.clone()),
            (false, _) if elicitation.is_some() => links::LinkSender::None(
                "this client supports only form elicitation, which cannot open a page for the person (and a client may accept a form on its own)".to_owned(),
            ),
            (false, _) => links::LinkSender::None(
                "this client supports no URL elicitation, so it cannot open a page for the person".to_owned(),
            ),
        };
        (sender, link_asks)
    }

    /// Waits for a running call: its end is the reply; a link it asks the
    /// client to open parks it, and the reply is the `InputRequiredResult`
    /// carrying the link, answered by the client's retry.
    async fn await_call(
        &self,
        mut running: links::Parked,
        context: &RequestContext<RoleServer>,
    ) -> CallToolResponse {
        let outcome = tokio::select! {
            ended = &mut running.call => ended.unwrap_or_else(|_| {
                Err(ToolError::new(Code::Cancelled, "the call was ended"))
            }),
            Some(links::LinkAskFrom(ask)) = running.asks.recv() => {
                static PARKS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                let n = PARKS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let state = format!("dsh-call-{}-{n}", self.id);
                let key = "open".to_owned();
                let mut requests = rmcp::model::InputRequests::new();
                requests.insert(
                    key.clone(),
                    rmcp::model::InputRequest::Elicitation(rmcp::model::ElicitRequest::new(ask.params)),
                );
                running.waiting = Some((key, ask.answer));
                self.park(state.clone(), running);
                return CallToolResponse::InputRequired(rmcp::model::InputRequiredResult::new(
                    Some(requests),
                    Some(state),
                ));
            }
            () = context.ct.cancelled() => {
                running.call.abort();
                Err(ToolError::new(Code::Cancelled, "the client cancelled this call"))
            }
            () = self.closed.cancelled() => {
                running.call.abort();
                Err(ToolError::new(Code::Cancelled, "the client disconnected"))
            }
        };
        CallToolResponse::from(self.finish(running.record, outcome).await)
    }

    /// A call as an MCP task: it starts as a background job, and the
    /// reply is the task that follows it (see [`tasks`]); a call that
    /// fails to start is answered as usual.
    async fn start_task(
        &self,
        tool: Arc<dyn tools_catalog::Tool>,
        layer: Arc<ToolLayer>,
        cx: CallContext,
        args: Value,
        record: CallRecord,
    ) -> CallToolResponse {
        let started = tool.call(&cx, tasks::in_background(args)).await;
        let job_id = started
            .as_ref()
            .ok()
            .and_then(|r| r.structured["job_id"].as_str().map(str::to_owned));
        let Some(job_id) = job_id else {
            return CallToolResponse::from(self.finish(record, started).await);
        };
        let connection = self.clone();
        let task = tasks::follow(&self.tasks, layer, &cx, job_id, move |outcome| {
            Box::pin(async move { connection.finish(record, outcome).await })
        });
        CallToolResponse::Task(rmcp::model::CreateTaskResult::new(task))
    }

    /// Keeps a call for its client's retry; one never retried is ended.
    fn park(&self, state: String, parked: links::Parked) {
        if let Ok(mut calls) = self.parked.lock() {
            calls.insert(state.clone(), parked);
        }
        let calls = self.parked.clone();
        tokio::spawn(async move {
            tokio::time::sleep(PARKED_FOR).await;
            let left = calls.lock().ok().and_then(|mut c| c.remove(&state));
            if let Some(parked) = left {
                parked.call.abort();
            }
        });
    }

    /// The client's retry of a parked call: its answer goes to the call,
    /// which is waited for again.
    async fn resume_parked(
        &self,
        state: &str,
        responses: Option<&rmcp::model::InputResponses>,
        context: &RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let parked = self.parked.lock().ok().and_then(|mut c| c.remove(state));
        let Some(mut parked) = parked else {
            return Err(McpError::invalid_params(
                "requestState names no call waiting here: it ended, was already resumed, or belongs to another connection",
                None,
            ));
        };
        if let Some((key, answer)) = parked.waiting.take() {
            let _ = answer.send(links::outcome_of_response(
                responses.and_then(|r| r.get(&key)),
            ));
        }
        Ok(self.await_call(parked, context).await)
    }

    /// The reply of an ended call: secrets redacted, its progress sent
    /// first, the call logged, shaped for the client's model.
    async fn finish(
        &self,
        record: CallRecord,
        mut outcome: Result<tools_catalog::ToolReply, ToolError>,
    ) -> CallToolResult {
        // Secrets in what the model would read are replaced by markers.
        // As of now: a secret remembered while the call ran (a person's
        // answer, another agent's new resume key) is redacted too.
        if let Some(redactor) = record.redactor.current() {
            tools_catalog::redaction::redact_outcome_with(&redactor, &mut outcome);
        }
        if let Some(sent) = record.progress_sent {
            let _ = tokio::time::timeout(Duration::from_secs(1), sent).await;
        }
        let code = outcome.as_ref().err().map_or("OK", |e| e.code.as_str());
        self.recorder.call(
            record.at,
            &record.tool,
            &record.args,
            code,
            record.started.elapsed(),
            outcome.as_ref().ok().map(|reply| &reply.structured),
        );
        tracing::info!(
            tool = %record.tool,
            outcome = code,
            ms = record.started.elapsed().as_millis() as u64,
            owner = record.owner,
            "tool call"
        );
        to_mcp_result(outcome, record.view)
    }
}

/// Whether a request declares, in its own `_meta`, a protocol without the
/// `initialize` handshake (2026-07-28 and later).
fn is_stateless(context: &RequestContext<RoleServer>) -> bool {
    context
        .meta
        .protocol_version()
        .is_some_and(|v| !v.has_initialize())
}

/// Tells a connection's client that its tool list changed: by the
/// notification of the `initialize` protocols, or on each of its
/// `subscriptions/listen` streams (2026-07-28 and later), which close as
/// their requests end.
async fn announce_tool_list_changed(peer: Option<&Peer<RoleServer>>, listeners: &Listeners) {
    if let Some(peer) = peer.filter(|p| p.peer_info().is_some())
        && let Err(e) = peer.notify_tool_list_changed().await
    {
        tracing::warn!("could not announce the new tool list: {e}");
    }
    let sinks: Vec<rmcp::service::SubscriptionSink> = listeners
        .lock()
        .map(|mut l| {
            l.retain(|(_, ended)| !ended.is_cancelled());
            l.iter().map(|(sink, _)| sink.clone()).collect()
        })
        .unwrap_or_default();
    for sink in sinks {
        let notification = rmcp::model::ServerNotification::ToolListChangedNotification(
            rmcp::model::ToolListChangedNotification::default(),
        );
        if let Err(e) = sink.send(notification).await {
            tracing::debug!("could not announce the new tool list on a listen stream: {e}");
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
                .enable_tasks()
                .build(),
        )
        .with_server_info(Implementation::new("dsh", env!("CARGO_PKG_VERSION")))
        .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        self.begin_stateless(&context);
        Ok(ListToolsResult::with_all_items(
            self.layer.load().mcp_tools(),
        ))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        self.begin_stateless(&context);
        if let Some(state) = &request.request_state {
            return self
                .resume_parked(state, request.input_responses.as_ref(), &context)
                .await;
        }
        let layer = self.layer.load_full();
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
        let args = request
            .arguments
            .clone()
            .map(Value::Object)
            .unwrap_or(Value::Null);
        // What the model must not read, in the reply and in progress.
        // Remade when a secret is remembered during the call.
        let redactor = Arc::new(tools_catalog::redaction::LiveRedactor::new(
            self.host.runtime.clone(),
            self.env.as_deref().cloned(),
            layer.confinement.clone(),
            args.clone(),
        ));
        let (progress, progress_sent) = mcp_progress(&request, &context, redactor.clone());
        let resume: Option<Arc<dyn tools_catalog::Resume>> =
            (!self.host.config.detach_grace.is_zero() && detach::can_mint()).then(|| {
                Arc::new(ConnectionResume {
                    host: self.host.clone(),
                    agent: self.agent.clone(),
                    id: self.id,
                    recorder: self.recorder.clone(),
                    lock: self.take_back.clone(),
                    shows: redactor.clone(),
                }) as Arc<dyn tools_catalog::Resume>
            });
        let owner = current(&self.agent).0;
        let (links, link_asks) = self.link_sender(&context);
        let secrets: Arc<dyn tools_catalog::SecretPrompts> = Arc::new(secrets::ConnectionSecrets {
            host: self.host.clone(),
            links: links.clone(),
            agent: self
                .client
                .get()
                .map_or_else(|| owner.label().to_owned(), |c| c.name.clone()),
        });
        let cx = CallContext {
            owner: owner.clone(),
            cwd: self.session_cwd().await,
            runtime: self.host.runtime.clone(),
            env: self.env.clone(),
            progress,
            confinement: layer.confinement.clone(),
            ask: asker(
                &self.host,
                links,
                self.client
                    .get()
                    .map_or_else(|| owner.label().to_owned(), |c| c.name.clone()),
            ),
            resume,
            secrets: Some(secrets),
        };
        let record = CallRecord {
            tool: request.name.to_string(),
            args: args.clone(),
            at: chrono::Utc::now(),
            started: Instant::now(),
            redactor,
            progress_sent,
            owner: owner.serial(),
            view: self.model_view(&context),
        };
        if tasks::eligible(&record.tool, &args)
            && context
                .client_capabilities()
                .is_some_and(|c| c.supports_tasks())
        {
            return Ok(self.start_task(tool, layer, cx, args, record).await);
        }
        let name = record.tool.clone();
        let call = tokio::spawn(async move {
            let outcome = std::panic::AssertUnwindSafe(tool.call(&cx, args))
                .catch_unwind()
                .await;
            // Progress notifications queued during the call go out before
            // its reply: the sink closes with the context.
            drop(cx);
            outcome.unwrap_or_else(|_| {
                Err(ToolError::new(
                    Code::Internal,
                    format!("the `{name}` tool failed unexpectedly; the server is still running — try again or use another approach"),
                ))
            })
        });
        let running = links::Parked {
            call,
            asks: link_asks,
            waiting: None,
            record,
        };
        Ok(self.await_call(running, &context).await)
    }

    async fn on_initialized(&self, context: NotificationContext<RoleServer>) {
        let peer = context.peer.clone();
        let _ = self.peer.set(peer.clone());
        let info = peer.peer_info();
        if let Some(i) = &info {
            let _ = self.client.set(ClientInfo {
                name: i.client_info.name.clone(),
                version: i.client_info.version.clone(),
            });
        }
        let wants_roots = info.is_some_and(|i| i.capabilities.roots.is_some());
        if !wants_roots {
            self.begin(self.fallback_cwd.clone());
            return;
        }
        let connection = self.clone();
        #[allow(deprecated)]
        tokio::spawn(async move {
            let roots = tokio::time::timeout(Duration::from_secs(2), peer.list_roots()).await;
            let cwd = match roots {
                Ok(Ok(result)) => result.roots.first().and_then(|r| root_path(&r.uri)),
                _ => None,
            };
            connection.begin(cwd.unwrap_or_else(|| connection.fallback_cwd.clone()));
        });
    }

    async fn discover(
        &self,
        context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::DiscoverResult, McpError> {
        self.begin_stateless(&context);
        Ok(rmcp::model::DiscoverResult::from_server_info(
            self.supported_protocol_versions().into_owned(),
            self.get_info(),
        ))
    }

    fn accepted_subscription_filter(
        &self,
        _requested: &rmcp::model::SubscriptionFilter,
    ) -> Option<rmcp::model::SubscriptionFilter> {
        Some(
            rmcp::model::SubscriptionFilter::builder()
                .tools_list_changed()
                .build(),
        )
    }

    async fn listen(&self, context: rmcp::service::SubscriptionContext) -> Result<(), McpError> {
        self.begin_stateless(context.request_context());
        let ended = CancellationToken::new();
        if let Ok(mut listeners) = self.listeners.lock() {
            listeners.push((context.sink().clone(), ended.clone()));
        }
        tokio::select! {
            () = context.cancelled() => {}
            () = self.closed.cancelled() => {}
        }
        ended.cancel();
        Ok(())
    }

    async fn get_task(
        &self,
        request: rmcp::model::GetTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<rmcp::model::GetTaskResult, McpError> {
        self.tasks
            .get_task(&request.task_id)
            .map(rmcp::model::GetTaskResult::new)
    }

    async fn cancel_task(
        &self,
        request: rmcp::model::CancelTaskParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<(), McpError> {
        self.tasks.cancel_task(&request.task_id)
    }
}

/// How long a person has to answer a question put through the client.
const ASK_TIMEOUT: Duration = Duration::from_secs(300);

/// An asker that waits (up to [`ASK_TIMEOUT`]) for a person to approve a
/// command in the page or with `dsh approve`, and sends the client the
/// page's link when it can open one; `None` when the host serves no page.
/// No answer of the client's approves anything.
fn asker(host: &Arc<Host>, links: links::LinkSender, agent: String) -> Option<Asker> {
    secrets::approval_asker(host.clone(), links, agent, ASK_TIMEOUT)
}

/// When a tool call carries a `progressToken`: a sink whose reports become
/// MCP `notifications/progress` for that token (numbered 1, 2, …, sent in
/// order), and the task sending them, which ends once every clone of the
/// sink is dropped. Without a token: nothing.
fn mcp_progress(
    request: &CallToolRequestParams,
    context: &RequestContext<RoleServer>,
    redactor: Arc<tools_catalog::redaction::LiveRedactor>,
) -> (
    Option<tools_catalog::ProgressSink>,
    Option<tokio::task::JoinHandle<()>>,
) {
    let token = request
        .meta
        .as_ref()
        .and_then(|m| m.get_progress_token())
        .or_else(|| context.meta.get_progress_token());
    let Some(token) = token else {
        return (None, None);
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<tools_catalog::ProgressReport>(64);
    let peer = context.peer.clone();
    let sending = tokio::spawn(async move {
        let mut n = 0.0;
        while let Some(report) = rx.recv().await {
            n += 1.0;
            let mut param = rmcp::model::ProgressNotificationParam::new(token.clone(), n);
            // A running command's last line may hold a secret.
            let message = match redactor.current() {
                Some(r) => r.redact(&report.message).text.into_owned(),
                None => report.message,
            };
            param.message = Some(match report.percentage {
                Some(p) if !message.contains('%') => format!("{message} ({p}%)"),
                Some(_) | None => message,
            });
            if let Err(e) = peer.notify_progress(param).await {
                tracing::debug!("could not send a progress notification: {e}");
                return;
            }
        }
    });
    let sink = tools_catalog::ProgressSink::new(move |report| {
        // Lossy by design: a slow client misses reports, never slows a call.
        let _ = tx.try_send(report);
    });
    (Some(sink), Some(sending))
}

use daemon_wire::model_view::ModelView;

fn to_mcp_result(
    outcome: Result<tools_catalog::ToolReply, ToolError>,
    view: ModelView,
) -> CallToolResult {
    let (text, structured, is_error) = match outcome {
        Ok(reply) => (reply.text, reply.structured, false),
        Err(err) => (err.text(), err.structured(), true),
    };
    match view {
        ModelView::TextAndStructured => {
            let mut result = if is_error {
                CallToolResult::structured_error(structured)
            } else {
                CallToolResult::structured(structured)
            };
            result.content = vec![ContentBlock::text(text)];
            result
        }
        ModelView::TextOnly { cut } => {
            let text = match cut.and_then(|cut| tools_catalog::render::fit_rendered(&text, cut)) {
                Some(fitted) => fitted,
                None => text,
            };
            if is_error {
                CallToolResult::error(vec![ContentBlock::text(text)])
            } else {
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
        }
    }
}

/// A reader that cancels a token when it reaches end-of-file.
struct EofSignal<R> {
    inner: R,
    on_eof: CancellationToken,
    /// Set to now whenever the client sends something.
    seen: detach::Seen,
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
        } else if buf.filled().len() > before {
            detach::seen_now(&self.seen);
        }
        polled
    }
}

/// Tells the client when one of its background jobs settles (an MCP
/// logging notification naming the job, its status and how to read it).
async fn forward_job_events(
    runtime: Arc<Runtime>,
    agent: AgentCell,
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
        if event.owner != current(&agent).0 {
            continue;
        }
        let Some(peer) = peer.get() else { continue };
        let job = &event.job;
        let message = tools_catalog::settled_job_message(job);
        let message = match runtime.redactor() {
            Some(r) => r.redact(&message).text.into_owned(),
            None => message,
        };
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

/// Serves one MCP client on `read`/`write` until it disconnects or `stop`
/// is cancelled, then ends everything the connection started (verified)
/// and lets its session log catch up.
pub async fn serve_connection<R, W>(
    host: Arc<Host>,
    setup: ConnectionSetup,
    read: R,
    write: W,
    stop: CancellationToken,
) -> anyhow::Result<()>
where
    R: tokio::io::AsyncRead + Send + Unpin + 'static,
    W: tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let config = setup.config.unwrap_or_else(|| host.config.clone());
    let policy = LogPolicy {
        commands: config.log_commands,
    };
    let layer = Arc::new(ArcSwap::from_pointee(ToolLayer::build(
        config,
        setup.preset,
        &host.connection_private(setup.config_path.as_deref()),
    )));
    let (cwd_tx, cwd) = watch::channel(None);
    let id = host
        .next_connection
        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    host.warm_redactor();
    let agent = new_agent(&setup.label);
    let take_back: TakeBackLock = Arc::default();
    let connection = Connection {
        take_back: take_back.clone(),
        recorder: SessionRecorder::start(host.store.clone(), policy).publishing(host.calls.clone()),
        id,
        agent: agent.clone(),
        layer: layer.clone(),
        cwd: cwd.clone(),
        cwd_tx: Arc::new(cwd_tx),
        fallback_cwd: setup.fallback_cwd.unwrap_or_else(server_cwd),
        env: setup.env,
        peer: Arc::new(OnceLock::new()),
        client: Arc::new(OnceLock::new()),
        listeners: Listeners::default(),
        parked: links::ParkedCalls::default(),
        tasks: rmcp::task_manager::TaskManager::new(),
        closed: CancellationToken::new(),
        host: host.clone(),
    };
    let recorder = connection.recorder.clone();
    let closed = connection.closed.clone();
    let seen = detach::Seen::new(Mutex::new(Instant::now()));
    let parked = connection.parked.clone();
    let tasks = connection.tasks.clone();
    host.entries().insert(
        id,
        ConnectionEntry {
            agent: agent.clone(),
            closed: closed.clone(),
            take_back: take_back.clone(),
            detached: None,
            layer: layer.clone(),
            config_path: setup.config_path,
            preset: setup.preset,
            peer: connection.peer.clone(),
            client: connection.client.clone(),
            listeners: connection.listeners.clone(),
            cwd,
            recorder: recorder.clone(),
            connected_at: SystemTime::now(),
            peer_pid: setup.peer_pid,
            seen: seen.clone(),
        },
    );
    host.changed.notify_waiters();
    let events = tokio::spawn(forward_job_events(
        host.runtime.clone(),
        agent.clone(),
        connection.peer.clone(),
    ));
    let read = EofSignal {
        inner: read,
        on_eof: closed.clone(),
        seen,
    };
    let served = match connection.serve((read, write)).await {
        Ok(service) => {
            tracing::info!(
                connection = id,
                preset = %layer.load().catalog.preset(),
                "MCP connection serving"
            );
            let cancel = service.cancellation_token();
            let waiting = service.waiting();
            tokio::pin!(waiting);
            tokio::select! {
                reason = &mut waiting => {
                    tracing::info!(connection = id, "client disconnected: {reason:?}");
                }
                () = stop.cancelled() => {
                    cancel.cancel();
                    let _ = waiting.await;
                }
                // Ended from outside: its agent was taken over.
                () = closed.cancelled() => {
                    cancel.cancel();
                    let _ = waiting.await;
                }
            }
            Ok(())
        }
        Err(e) => Err(anyhow::anyhow!("MCP initialization failed: {e}")),
    };
    // The connection is gone. With work left and a grace period, the work
    // stays, detached, for the agent to take back; else end everything
    // it started, verified, and let the session log catch up — together,
    // as a client may not wait long.
    closed.cancel();
    events.abort();
    tasks.shutdown();
    // Calls parked for a retry that can no longer come.
    for (_, parked) in parked
        .lock()
        .map(|mut p| p.drain().collect::<Vec<_>>())
        .unwrap_or_default()
    {
        parked.call.abort();
    }
    // A take-back under way finishes first: then the agent read here is
    // the one this connection ends as.
    let _ended = take_back.lock().await;
    let owner = current(&agent).0;
    let grace = host.config.detach_grace;
    if !grace.is_zero() && !stop.is_cancelled() {
        let work = host.work_of(&owner).await;
        if work.0 + work.1 > 0 {
            host.detach(id, grace, work);
            return served;
        }
    }
    host.entries().remove(&id);
    host.retire_keys(&agent);
    tokio::join!(
        host.runtime.end_owner(&owner),
        recorder.finish(Duration::from_secs(2)),
    );
    host.changed.notify_waiters();
    served
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Read-only tools say so (Codex runs only those without asking, and
    /// Claude Code runs them in plan mode and in parallel); the others
    /// say what they do, in the fewest bytes that mean it.
    #[test]
    fn every_tool_states_its_hints() {
        let catalog = Catalog::new(Preset::Full, &tools_catalog::Settings::default());
        let listed = serde_json::to_value(mcp_tools(&catalog)).unwrap();
        let of = |name: &str| {
            listed
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["name"] == name)
                .unwrap()["annotations"]
                .clone()
        };
        let read_only = serde_json::json!({"readOnlyHint": true, "openWorldHint": false});
        for name in [
            "terminal_read",
            "terminal_list",
            "job_list",
            "job_output",
            "lsp",
        ] {
            assert_eq!(of(name), read_only, "{name}");
        }
        for name in ["bash", "terminal_open", "terminal_send", "subagent"] {
            assert_eq!(
                of(name),
                serde_json::json!({"readOnlyHint": false}),
                "{name}"
            );
        }
        for name in ["terminal_close", "job_kill"] {
            assert_eq!(
                of(name),
                serde_json::json!({"readOnlyHint": false, "idempotentHint": true, "openWorldHint": false}),
                "{name}"
            );
        }
        assert_eq!(
            of("terminal_signal"),
            serde_json::json!({"readOnlyHint": false, "openWorldHint": false})
        );
        let always: Vec<_> = listed
            .as_array()
            .unwrap()
            .iter()
            .filter(|t| t["_meta"]["anthropic/alwaysLoad"] == true)
            .map(|t| t["name"].clone())
            .collect();
        assert_eq!(always, vec![serde_json::json!("bash")]);
    }

    /// The agent clients that show `structuredContent` instead of the text
    /// get the text alone; Codex's fits inside its own cut, with dsh's
    /// marker; every other client gets both, as before.
    #[test]
    fn each_client_gets_the_result_its_model_can_read() {
        let reply = |text: String| {
            Ok(tools_catalog::ToolReply {
                text,
                structured: serde_json::json!({"exit_code": 0}),
            })
        };
        let sdk = to_mcp_result(
            reply("hi\n[exit 0 · 1 ms]".into()),
            ModelView::of(Some("mcp")),
        );
        assert_eq!(
            sdk.structured_content,
            Some(serde_json::json!({"exit_code": 0}))
        );
        for client in ["claude-code", "codex-mcp-client", "gemini-cli-mcp-client"] {
            let r = to_mcp_result(
                reply("hi\n[exit 0 · 1 ms]".into()),
                ModelView::of(Some(client)),
            );
            assert_eq!(r.structured_content, None, "{client}");
            assert_eq!(r.content[0].as_text().unwrap().text, "hi\n[exit 0 · 1 ms]");
            let e = to_mcp_result(
                Err(ToolError::new(Code::NoJob, "no job bash-9")),
                ModelView::of(Some(client)),
            );
            assert_eq!(e.is_error, Some(true));
            assert_eq!(e.structured_content, None);
            assert_eq!(
                e.content[0].as_text().unwrap().text,
                "[error NO_JOB] no job bash-9"
            );
        }
        let long: String = (0..20_000).map(|i| format!("{i}\n")).collect();
        let codex = to_mcp_result(reply(long.clone()), ModelView::of(Some("codex-mcp-client")));
        let text = &codex.content[0].as_text().unwrap().text;
        assert!(
            text.len() <= daemon_wire::model_view::CODEX_WHOLE_BYTES + 64,
            "{}",
            text.len()
        );
        assert!(text.contains(" bytes omitted …]") && text.ends_with("19999\n"));
        let claude = to_mcp_result(reply(long.clone()), ModelView::of(Some("claude-code")));
        assert_eq!(claude.content[0].as_text().unwrap().text, long);
    }

    /// The most bytes the `tools` array of a `tools/list` result may take:
    /// every client pays for it on every request it makes.
    const MAX_CATALOG_BYTES: usize = 12_500;

    /// Measures the `tools` of the result as it goes over the wire (compact
    /// JSON, UTF-8), for every preset.
    #[test]
    fn the_listed_catalog_fits_its_byte_budget() {
        let mut over = Vec::new();
        for preset in Preset::ALL {
            let catalog = Catalog::new(preset, &tools_catalog::Settings::default());
            let result =
                serde_json::to_value(ListToolsResult::with_all_items(mcp_tools(&catalog))).unwrap();
            let tools = result["tools"].as_array().unwrap();
            assert_eq!(tools.len(), catalog.tools().len());
            let bytes = serde_json::to_string(&result["tools"]).unwrap().len();
            if bytes > MAX_CATALOG_BYTES {
                let per_tool: Vec<String> = tools
                    .iter()
                    .map(|t| {
                        let size = serde_json::to_string(t).unwrap().len();
                        format!("{} {size}", t["name"].as_str().unwrap_or("?"))
                    })
                    .collect();
                over.push(format!(
                    "`{preset}`: {bytes} bytes ({})",
                    per_tool.join(", ")
                ));
            }
        }
        assert!(
            over.is_empty(),
            "the tools/list catalog is over {MAX_CATALOG_BYTES} bytes: {}",
            over.join("; ")
        );
    }
}

/// The sandboxes of the connections' tool layers, by name
/// ([`tools_catalog::Confinement::tag`]): a language server started for a
/// session runs in that session's sandbox, which the host's confine hook
/// finds here. Layers alike share a name; a name is kept while a layer of
/// it lives.
mod session_sandboxes {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex, Weak};

    use tools_catalog::Confinement;

    type Registry = HashMap<String, Vec<Weak<Confinement>>>;

    static SANDBOXES: Mutex<Option<Registry>> = Mutex::new(None);

    /// Makes `confinement` findable by its name.
    pub(crate) fn register(confinement: &Arc<Confinement>) {
        let tag = confinement.tag();
        let mut registry = SANDBOXES.lock().unwrap_or_else(|e| e.into_inner());
        let registry = registry.get_or_insert_with(Registry::new);
        for alike in registry.values_mut() {
            alike.retain(|c| c.strong_count() > 0);
        }
        registry.retain(|_, alike| !alike.is_empty());
        registry
            .entry(tag.0)
            .or_default()
            .push(Arc::downgrade(confinement));
    }

    /// A live confinement named `tag`.
    pub(crate) fn find(tag: &lsp_seam::SandboxTag) -> Option<Arc<Confinement>> {
        let registry = SANDBOXES.lock().unwrap_or_else(|e| e.into_inner());
        registry
            .as_ref()?
            .get(&tag.0)?
            .iter()
            .find_map(Weak::upgrade)
    }
}
