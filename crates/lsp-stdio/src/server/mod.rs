//! One running language server, and the steps that start it: its process
//! (`process.rs`: confined, spawned in a session of its own, ended by
//! session id), the JSON-RPC connection (`connection.rs`: the async-lsp
//! main loop, requests with timeout and `$/cancelRequest`), its stderr
//! (`stderr.rs`), the `initialize` handshake (`handshake.rs`), what the
//! client knows of its readiness (`status.rs`), the documents it has open
//! (`documents.rs`), the diagnostics it computed (`diagnostics.rs`) and
//! its file watcher (`watcher.rs`).

mod check_scope;
mod connection;
mod diagnostics;
mod documents;
mod handshake;
mod process;
mod status;
mod stderr;
mod watcher;

use std::collections::{HashMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use async_lsp::ServerSocket;
use lsp_seam::LspError;
use lsp_types::Url;
use serde_json::Value;
use tokio::sync::watch;

use crate::config::{ClientOptions, ReadinessSignal, ServerConfig};
use crate::text::Encoding;
use documents::OpenDocuments;
pub(crate) use documents::path_url;
use process::PrivateTemp;
pub use process::SERVER_NICE;
pub(crate) use status::{Phase, Status};
use stderr::StderrError;
use watcher::Watch;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// State shared between the main loop's handlers and the client.
struct Shared {
    status: watch::Sender<Status>,
    stderr: Mutex<VecDeque<String>>,
    /// The last error a command the server ran printed on its stderr
    /// (`error: …` and the lines that explain it, e.g. `cargo metadata`'s),
    /// kept apart from the tail, which later log lines push out.
    stderr_error: Mutex<StderrError>,
    /// True once stderr reached end of file.
    stderr_closed: watch::Sender<bool>,
    settings: Option<Value>,
    readiness: ReadinessSignal,
    /// The title start of the server's diagnosis progress, if it reports
    /// one (see [`crate::config::DiagnosisProgress`]).
    diagnosis_prefix: Option<String>,
    /// What the server last published for each document
    /// (`textDocument/publishDiagnostics`).
    diagnostics: watch::Sender<HashMap<Url, diagnostics::Published>>,
}

impl Shared {
    /// The state of a server of `config` just started.
    fn new(config: &ServerConfig) -> Self {
        Shared {
            status: watch::channel(Status::new(&config.readiness)).0,
            stderr: Mutex::new(VecDeque::new()),
            stderr_error: Mutex::new(StderrError::default()),
            stderr_closed: watch::channel(false).0,
            settings: config.settings.clone(),
            readiness: config.readiness.clone(),
            diagnosis_prefix: config.diagnosis_progress.as_ref().map(|d| d.prefix.clone()),
            diagnostics: watch::channel(HashMap::new()).0,
        }
    }
}

/// Why a request to one server failed, before conversion to [`LspError`].
#[derive(Debug)]
pub(crate) enum Failure {
    /// A seam error to return as is.
    Lsp(LspError),
    /// The server died (EOF, exit, broken pipe).
    Dead,
    /// The server answered `ContentModified` (-32801).
    ContentModified,
}

impl From<LspError> for Failure {
    fn from(e: LspError) -> Self {
        Failure::Lsp(e)
    }
}

/// Facts about a running server, for diagnostics and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerProcess {
    /// The server's configured name.
    pub name: String,
    /// The project root it serves.
    pub root: PathBuf,
    /// Its pid, which is also its session id.
    pub pid: i32,
    /// The position encoding it agreed to.
    pub encoding: Encoding,
    /// The project's load error or warning the server reports, when one
    /// stands (`load failed: …`, `warning: …`, `no project: …`).
    pub problem: Option<String>,
}

/// One running language server.
pub(crate) struct Server {
    pub config: Arc<ServerConfig>,
    pub root: PathBuf,
    pub encoding: Encoding,
    pub capabilities: Value,
    pid: i32,
    /// The server process, held unreaped until the server is dropped, so
    /// ending "session `pid`" never reaches a process that reused the pid.
    leader: Arc<process_tree::Leader>,
    socket: ServerSocket,
    next_id: Mutex<i32>,
    /// How many checks (rust-analyzer's `runFlycheck`) were asked for: a
    /// later request restarts, so cancels, a check still running.
    checks_requested: std::sync::atomic::AtomicU64,
    /// rust-analyzer: the content (hash) each file had when a whole check
    /// compiled its target without error (see `check_missed`).
    compiled: Mutex<HashMap<PathBuf, u64>>,
    shared: Arc<Shared>,
    docs: Mutex<OpenDocuments>,
    dirty: Arc<Mutex<Vec<PathBuf>>>,
    options: ClientOptions,
    watcher: Option<Watch>,
    /// The server's own temp dir (its `TMPDIR`), removed after it ended:
    /// servers leave files there (rust-analyzer a copy of `Cargo.lock` per
    /// load, pyright its caches) that would otherwise pile up.
    _temp: PrivateTemp,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("name", &self.config.name)
            .field("root", &self.root)
            .field("pid", &self.pid)
            .finish_non_exhaustive()
    }
}

impl Server {
    /// Spawns the server for `root` in a new session and initializes it;
    /// its sandbox (the host's `confine`, for the session sandbox named
    /// `sandbox`) lets it write inside `writable`.
    pub async fn start(
        config: Arc<ServerConfig>,
        root: PathBuf,
        writable: PathBuf,
        sandbox: lsp_seam::SandboxTag,
        options: ClientOptions,
        confine: Option<crate::Confine>,
    ) -> Result<Arc<Server>, LspError> {
        let program = config.resolve_command()?;
        let confined = process::confine(&config, &writable, sandbox, confine).await?;
        let config = match &confined.build_dir {
            Some(dir) => Arc::new(config.as_ref().clone().building_in(&writable, dir)),
            None => config,
        };
        let spawned = process::spawn(&config, &program, &root, confined)?;
        let shared = Arc::new(Shared::new(&config));
        let socket = connection::connect(shared.clone(), spawned.stdin, spawned.stdout);
        stderr::spawn_reader(shared.clone(), config.name.clone(), spawned.stderr);
        process::spawn_exit_waiter(shared.clone(), spawned.leader.clone());
        let mut server = Server {
            config,
            root,
            encoding: Encoding::Utf16,
            capabilities: Value::Null,
            pid: spawned.leader.pid(),
            leader: spawned.leader,
            socket,
            next_id: Mutex::new(0),
            checks_requested: std::sync::atomic::AtomicU64::new(0),
            compiled: Mutex::new(HashMap::new()),
            shared,
            docs: Mutex::new(OpenDocuments::default()),
            dirty: Arc::new(Mutex::new(Vec::new())),
            options,
            watcher: None,
            _temp: spawned.temp,
        };
        server.initialize(spawned.client_pid).await?;
        if server.options.watch_files {
            server.watcher = server.watch();
        }
        Ok(Arc::new(server))
    }

    /// The server's pid (= its session id).
    pub fn pid(&self) -> i32 {
        self.pid
    }
}
