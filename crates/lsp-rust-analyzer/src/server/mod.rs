//! One running language server: the child process (in its own session),
//! the async-lsp main loop, readiness, document sync, file watching, and
//! requests with timeout and `$/cancelRequest`.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::hash::{Hash, Hasher};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use async_lsp::router::Router;
use async_lsp::{ErrorCode, MainLoop, ServerSocket};
use lsp_seam::{LspError, ReadAccess, UnavailableReason};
use lsp_types::notification::{
    Cancel, DidChangeTextDocument, DidChangeWatchedFiles, DidCloseTextDocument,
    DidOpenTextDocument, Exit, Initialized, Notification,
};
use lsp_types::request::{
    Initialize, RegisterCapability, Request, Shutdown, UnregisterCapability,
    WorkDoneProgressCreate, WorkspaceConfiguration,
};
use lsp_types::{
    CancelParams, ClientCapabilities, DidChangeTextDocumentParams,
    DidChangeWatchedFilesClientCapabilities, DidChangeWatchedFilesParams,
    DidCloseTextDocumentParams, DidOpenTextDocumentParams, DocumentSymbolClientCapabilities,
    FileChangeType, FileEvent, GeneralClientCapabilities, GotoCapability, HoverClientCapabilities,
    InitializeParams, InitializedParams, MarkupKind, NumberOrString, PositionEncodingKind,
    ProgressParams, ProgressParamsValue, ServerCapabilities, TextDocumentClientCapabilities,
    TextDocumentContentChangeEvent, TextDocumentIdentifier, TextDocumentItem, Url,
    VersionedTextDocumentIdentifier, WindowClientCapabilities, WorkDoneProgress,
    WorkspaceClientCapabilities, WorkspaceFolder,
};
use serde_json::Value;
use tokio::io::AsyncBufReadExt;
use tokio::sync::watch;
use tokio_util::compat::{TokioAsyncReadCompatExt, TokioAsyncWriteCompatExt};

use crate::config::{ClientOptions, ReadinessSignal, ServerConfig};
use crate::text::Encoding;

/// Lines of stderr kept for a `crashed` message.
const STDERR_TAIL_LINES: usize = 20;
/// Longest stderr line kept.
const STDERR_LINE_BYTES: usize = 400;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Starting, loading or indexing.
    Loading,
    /// Answers are complete.
    Ready,
    /// The server found no project (its message).
    NoProject(String),
    /// The server finished loading with `health: "error"` (its message):
    /// the project failed to load (e.g. `cargo metadata` failed), so its
    /// answers are not proof of anything. Left when it loads again.
    LoadFailed(String),
    /// The process or its pipe is gone (how).
    Dead(String),
}

/// What the client knows about the server's state.
#[derive(Debug, Clone)]
pub(crate) struct Status {
    pub phase: Phase,
    /// The latest progress message.
    pub progress: Option<String>,
    /// The latest progress percentage.
    pub percentage: Option<u32>,
    /// The server's own proof of a loaded project was seen (see
    /// [`ReadinessSignal`]).
    proof_seen: bool,
    /// rust-analyzer: a `quiescent: false` was seen.
    seen_busy: bool,
    /// rust-analyzer: the message of a `health: "warning"` that stands
    /// (e.g. a build script or the proc-macro server failed): answers may
    /// be partial, so an empty one is not trusted while it stands.
    pub warning: Option<String>,
    /// `initialized` was sent.
    initialized: bool,
    /// Active `$/progress` tokens and their latest messages.
    active: BTreeMap<String, String>,
    /// The title of each active `$/progress` token.
    titles: BTreeMap<String, String>,
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
    /// The version of each document the server last published
    /// diagnostics for (`None` when it sends no version).
    diagnostics: watch::Sender<HashMap<Url, Option<i32>>>,
}

impl Shared {
    fn update(&self, f: impl FnOnce(&mut Status)) {
        let readiness = &self.readiness;
        self.status.send_modify(|s| {
            f(s);
            if matches!(
                s.phase,
                Phase::Dead(_) | Phase::NoProject(_) | Phase::LoadFailed(_)
            ) {
                return;
            }
            let ready = match readiness {
                ReadinessSignal::Progress => s.initialized && s.active.is_empty(),
                ReadinessSignal::ServerStatus => s.phase == Phase::Ready,
                ReadinessSignal::ProgressEnded(_) | ReadinessSignal::LogMessage(_) => {
                    s.initialized && s.active.is_empty() && s.proof_seen
                }
            };
            s.phase = if ready { Phase::Ready } else { Phase::Loading };
        });
    }

    fn mark_dead(&self, how: String) {
        self.status.send_modify(|s| {
            if !matches!(s.phase, Phase::Dead(_)) {
                s.phase = Phase::Dead(how);
            }
        });
    }

    fn on_progress(&self, params: ProgressParams) {
        let token = match params.token {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s,
        };
        let ProgressParamsValue::WorkDone(work) = params.value;
        let proof = match &self.readiness {
            ReadinessSignal::ProgressEnded(title) => Some(title.as_str()),
            ReadinessSignal::Progress
            | ReadinessSignal::ServerStatus
            | ReadinessSignal::LogMessage(_) => None,
        };
        self.update(|s| match work {
            WorkDoneProgress::Begin(b) => {
                let text = join_progress(&b.title, b.message.as_deref(), b.percentage);
                s.progress = Some(text.clone());
                s.percentage = b.percentage;
                s.active.insert(token.clone(), text);
                s.titles.insert(token, b.title);
            }
            WorkDoneProgress::Report(r) => {
                let title = s.titles.get(&token).cloned().unwrap_or_default();
                let text = join_progress(&title, r.message.as_deref(), r.percentage);
                s.progress = Some(text.clone());
                s.percentage = r.percentage.or(s.percentage);
                s.active.insert(token, text);
            }
            WorkDoneProgress::End(_) => {
                s.active.remove(&token);
                let title = s.titles.remove(&token).unwrap_or_default();
                if proof.is_some_and(|p| title.contains(p)) {
                    s.proof_seen = true;
                }
            }
        });
    }

    fn on_log_message(&self, params: &Value) {
        let ReadinessSignal::LogMessage(texts) = &self.readiness else {
            return;
        };
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if texts.iter().any(|t| message.contains(t.as_str())) {
            self.update(|s| s.proof_seen = true);
        }
    }

    fn on_diagnostics(&self, params: &Value) {
        let Some(uri) = params
            .get("uri")
            .and_then(Value::as_str)
            .and_then(|u| Url::parse(u).ok())
        else {
            return;
        };
        let version = params
            .get("version")
            .and_then(Value::as_i64)
            .and_then(|v| i32::try_from(v).ok());
        self.diagnostics.send_modify(|d| {
            if d.len() >= 4096 && !d.contains_key(&uri) {
                d.clear();
            }
            d.insert(uri, version);
        });
    }

    fn on_server_status(&self, params: &Value) {
        if params.get("quiescent").and_then(Value::as_bool) == Some(false) {
            // A new load: an error a command printed before is not its.
            *lock(&self.stderr_error) = StderrError::default();
        }
        let health = params.get("health").and_then(Value::as_str).unwrap_or("ok");
        let quiescent = params
            .get("quiescent")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let no_project = health != "ok"
            && message.as_deref().is_some_and(|m| {
                m.contains("Failed to discover workspace")
                    || m.contains("failed to find any projects")
            });
        self.update(|s| {
            if no_project {
                s.phase = Phase::NoProject(message.clone().unwrap_or_default());
                return;
            }
            if message.is_some() {
                s.progress.clone_from(&message);
            }
            s.warning = match health {
                "ok" | "error" => None,
                _ => Some(
                    message
                        .clone()
                        .unwrap_or_else(|| format!("health {health}")),
                ),
            };
            if !quiescent {
                s.seen_busy = true;
                s.phase = Phase::Loading;
            } else if s.seen_busy {
                // Idle is not proof of a loaded project: a load that failed
                // (`cargo metadata` failed, …) also ends quiescent, with
                // `health: "error"`, and rust-analyzer does not retry it
                // until a manifest changes.
                s.phase = if health == "error" {
                    Phase::LoadFailed(
                        message
                            .clone()
                            .unwrap_or_else(|| "the project failed to load".to_owned()),
                    )
                } else {
                    Phase::Ready
                };
            }
        });
    }

    fn configuration(&self, items: &[lsp_types::ConfigurationItem]) -> Vec<Value> {
        items
            .iter()
            .map(|item| {
                let Some(settings) = &self.settings else {
                    return Value::Null;
                };
                match &item.section {
                    None => settings.clone(),
                    Some(section) => section
                        .split('.')
                        .try_fold(settings, |v, key| v.get(key))
                        .cloned()
                        .unwrap_or(Value::Null),
                }
            })
            .collect()
    }
}

fn join_progress(title: &str, message: Option<&str>, percentage: Option<u32>) -> String {
    let mut text = title.to_owned();
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(m);
    }
    if let Some(p) = percentage {
        text.push_str(&format!(" ({p}%)"));
    }
    text
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

/// One document the server has open.
#[derive(Debug)]
struct OpenDocument {
    version: i32,
    hash: u64,
    stamp: Option<(SystemTime, u64)>,
    last_used: u64,
    language_id: String,
}

#[derive(Debug, Default)]
struct OpenDocuments {
    docs: HashMap<PathBuf, OpenDocument>,
    clock: u64,
}

fn content_hash(text: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    text.hash(&mut h);
    h.finish()
}

fn file_stamp(path: &Path) -> Option<(SystemTime, u64)> {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// A path as a `file://` URL.
pub(crate) fn path_url(path: &Path) -> Result<Url, LspError> {
    Url::from_file_path(path).map_err(|()| LspError::InvalidArgument {
        field: "path".into(),
        message: format!("{} is not an absolute path", path.display()),
    })
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

/// A directory made for one server, removed when dropped.
struct PrivateTemp(Option<PathBuf>);

impl PrivateTemp {
    /// Makes `dsh-lsp-tmp-<host pid>-<n>` (0700) in the temp dir; `None`
    /// inside when it cannot be made (the server then gets the shared one).
    fn new() -> Self {
        use std::os::unix::fs::DirBuilderExt;
        static DIRS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        remove_stale(&[PRIVATE_TEMP_PREFIX, FENCE_PREFIX]);
        let dir = std::env::temp_dir().join(format!(
            "{PRIVATE_TEMP_PREFIX}{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => Self(Some(dir)),
            Err(e) => {
                tracing::warn!("cannot create {}: {e}", dir.display());
                Self(None)
            }
        }
    }
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

const PRIVATE_TEMP_PREFIX: &str = "dsh-lsp-tmp-";
const FENCE_PREFIX: &str = "dsh-lsp-fence-";

/// The file watcher of one server, with a private fence directory: a file
/// created there is seen by the same inotify queue after every earlier
/// event, so waiting for it flushes the changes made before a query.
struct Watch {
    /// The watcher (its handler holds it weakly, to watch new top-level
    /// directories).
    _watcher: Arc<Mutex<Option<notify::RecommendedWatcher>>>,
    fence_dir: PathBuf,
    fence_next: Mutex<u64>,
    fence_seen: watch::Sender<u64>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.fence_dir);
    }
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

fn skip_watched(path: &Path) -> bool {
    path.components().any(|c| skip_name(c.as_os_str()))
}

/// Whether a top-level entry of a server's root is watched with all it
/// holds: a directory (not a link to one) that is not skipped.
fn watched_whole(path: &Path) -> bool {
    path.file_name().is_some_and(|name| !skip_name(name))
        && path.symlink_metadata().is_ok_and(|m| m.is_dir())
}

/// Directories whose changes a language server does not need: build
/// output, version control, dependencies and caches.
fn skip_name(name: &std::ffi::OsStr) -> bool {
    matches!(
        name.to_str(),
        Some("target" | ".git" | "node_modules" | "__pycache__" | ".venv")
    )
}

impl Server {
    /// Spawns the server for `root` in a new session and initializes it.
    // Long on purpose: starting a server is one sequence (confine and spawn
    // it, start the transport's tasks, the initialize handshake), each step
    // using what the one before set up.
    pub async fn start(
        config: Arc<ServerConfig>,
        root: PathBuf,
        options: ClientOptions,
        confine: Option<crate::Confine>,
    ) -> Result<Arc<Server>, LspError> {
        let program = config.resolve_command()?;
        let confined = match confine {
            Some(confine) => {
                let at = root.clone();
                tokio::task::spawn_blocking(move || confine(&at))
                    .await
                    .map_err(|e| e.to_string())
                    .and_then(|r| r)
                    .map_err(|message| LspError::Unavailable {
                        reason: UnavailableReason::SpawnFailed,
                        message: format!(
                            "{}: not started for {}: {message}",
                            config.name,
                            root.display()
                        ),
                    })?
            }
            None => crate::Confined::default(),
        };
        let mut session = process_tree::SessionCommand::new(&program);
        if let Some(env) = &confined.env {
            session = session.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
        }
        let temp = PrivateTemp::new();
        if let Some(dir) = &temp.0 {
            session = session.env("TMPDIR", dir);
        }
        session = session
            .args(&config.args)
            .envs(&config.env)
            .current_dir(&root)
            .stdin(process_tree::ChildIo::Piped)
            .stdout(process_tree::ChildIo::Piped)
            .stderr(process_tree::ChildIo::Piped);
        let spawn_failed = |e: std::io::Error| LspError::Unavailable {
            reason: UnavailableReason::SpawnFailed,
            message: format!(
                "{}: could not start {}: {e}",
                config.name,
                program.display()
            ),
        };
        // The one spawn path: a session of its own, killed if the host dies
        // (and its whole session ended by the host's guardian).
        // A confined server may not signal the host (the sandbox scopes
        // signals), so it cannot probe the host's pid with `kill(pid, 0)`:
        // pyright took the EPERM for a dead client and exited. It is told
        // no pid then; the parent-death signal and the guardian end it if
        // the host dies.
        let client_pid = confined.pre_exec.is_none().then(std::process::id);
        // SAFETY: `setpriority` is a plain system call, async-signal-safe.
        session = unsafe { session.pre_exec(Arc::new(background_priority)) };
        if let Some(step) = confined.pre_exec {
            // SAFETY: a `Confine` hook returns async-signal-safe steps only.
            session = unsafe { session.pre_exec(step) };
        }
        let spawned = session.spawn().map_err(spawn_failed)?;
        let leader = Arc::new(spawned.leader);
        let pid = leader.pid();
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (spawned.stdin, spawned.stdout, spawned.stderr)
        else {
            return Err(spawn_failed(std::io::Error::other("no stdio pipes")));
        };
        let stdin = tokio::process::ChildStdin::from_std(stdin).map_err(spawn_failed)?;
        let stdout = tokio::process::ChildStdout::from_std(stdout).map_err(spawn_failed)?;
        let stderr = tokio::process::ChildStderr::from_std(stderr).map_err(spawn_failed)?;

        let waiting_for = match &config.readiness {
            ReadinessSignal::ProgressEnded(title) => {
                Some(format!("waiting for the server's \"{title}\" to finish"))
            }
            ReadinessSignal::LogMessage(_) => {
                Some("waiting for the server to report its project loaded".to_owned())
            }
            ReadinessSignal::Progress | ReadinessSignal::ServerStatus => None,
        };
        let (status_tx, _) = watch::channel(Status {
            phase: Phase::Loading,
            progress: waiting_for,
            percentage: None,
            proof_seen: false,
            titles: BTreeMap::new(),
            seen_busy: false,
            warning: None,
            initialized: false,
            active: BTreeMap::new(),
        });
        let shared = Arc::new(Shared {
            status: status_tx,
            stderr: Mutex::new(VecDeque::new()),
            stderr_error: Mutex::new(StderrError::default()),
            stderr_closed: watch::channel(false).0,
            settings: config.settings.clone(),
            readiness: config.readiness.clone(),
            diagnostics: watch::channel(HashMap::new()).0,
        });

        let (mainloop, socket) = MainLoop::new_client(|_server| {
            let mut router = Router::new(shared.clone());
            router
                .request::<WorkDoneProgressCreate, _>(|_, _| async { Ok(()) })
                .request::<RegisterCapability, _>(|_, _| async { Ok(()) })
                .request::<UnregisterCapability, _>(|_, _| async { Ok(()) })
                .request::<WorkspaceConfiguration, _>(|st, params| {
                    let values = st.configuration(&params.items);
                    async move { Ok(values) }
                })
                .unhandled_request(|_, req| {
                    let refresh = req.method.ends_with("/refresh");
                    async move {
                        if refresh {
                            Ok(Value::Null)
                        } else {
                            Err(async_lsp::ResponseError::new(
                                ErrorCode::METHOD_NOT_FOUND,
                                format!("client does not handle {}", req.method),
                            ))
                        }
                    }
                })
                .unhandled_notification(|st, notif| {
                    match notif.method.as_str() {
                        "experimental/serverStatus" => st.on_server_status(&notif.params),
                        "window/logMessage" => st.on_log_message(&notif.params),
                        "textDocument/publishDiagnostics" => st.on_diagnostics(&notif.params),
                        lsp_types::notification::Progress::METHOD => {
                            if let Ok(p) = serde_json::from_value::<ProgressParams>(notif.params) {
                                st.on_progress(p);
                            }
                        }
                        _ => {}
                    }
                    ControlFlow::Continue(())
                })
                .unhandled_event(|_, _| ControlFlow::Continue(()));
            router
        });

        let loop_shared = shared.clone();
        // The main loop panics when every socket is gone while it runs; it
        // ends instead when the server's stdout closes (the session is
        // ended on drop).
        let keep_socket = socket.clone();
        tokio::spawn(async move {
            let _keep_socket = keep_socket;
            let how = match mainloop
                .run_buffered(stdout.compat(), stdin.compat_write())
                .await
            {
                Ok(()) => "the connection closed".to_owned(),
                Err(e) => format!("the connection failed: {e}"),
            };
            loop_shared.mark_dead(how);
        });
        let err_shared = shared.clone();
        let name = config.name.clone();
        tokio::spawn(async move {
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            while let Ok(Some(mut line)) = lines.next_line().await {
                tracing::debug!(server = %name, "stderr: {line}");
                if line.len() > STDERR_LINE_BYTES {
                    let mut cut = STDERR_LINE_BYTES;
                    while !line.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    line.truncate(cut);
                }
                lock(&err_shared.stderr_error).note(&line);
                let mut tail = lock(&err_shared.stderr);
                if tail.len() == STDERR_TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
            err_shared.stderr_closed.send_replace(true);
        });
        let wait_shared = shared.clone();
        let waited = leader.clone();
        tokio::spawn(async move {
            // Seen without reaping: the pid stays ours until the drop.
            let how = match waited.exited().await {
                Ok(status) => format!("the process exited ({status})"),
                Err(e) => format!("waiting for the process failed: {e}"),
            };
            wait_shared.mark_dead(how);
        });

        let mut server = Server {
            config: config.clone(),
            root: root.clone(),
            encoding: Encoding::Utf16,
            capabilities: Value::Null,
            pid,
            leader,
            socket,
            next_id: Mutex::new(0),
            shared,
            docs: Mutex::new(OpenDocuments::default()),
            dirty: Arc::new(Mutex::new(Vec::new())),
            options: options.clone(),
            watcher: None,
            _temp: temp,
        };

        let root_url = path_url(&root)?;
        #[allow(deprecated)]
        let params = InitializeParams {
            process_id: client_pid,
            root_uri: Some(root_url.clone()),
            initialization_options: config.initialization_options.clone(),
            capabilities: client_capabilities(),
            workspace_folders: Some(vec![WorkspaceFolder {
                uri: root_url,
                name: root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "root".into()),
            }]),
            client_info: Some(lsp_types::ClientInfo {
                name: "dsh".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            ..InitializeParams::default()
        };
        let init = match server
            .request::<Initialize>(params, options.request_timeout.max(Duration::from_secs(30)))
            .await
        {
            Ok(init) => init,
            Err(failure) => {
                let why = match failure {
                    Failure::Lsp(e) => e.to_string(),
                    Failure::Dead => "the server exited during initialize".into(),
                    Failure::ContentModified => "content modified".into(),
                };
                return Err(LspError::Unavailable {
                    reason: UnavailableReason::SpawnFailed,
                    message: format!("{}: {why}{}", config.name, server.stderr_tail_text()),
                });
            }
        };
        server.encoding = match &init.capabilities.position_encoding {
            Some(e) if *e == PositionEncodingKind::UTF8 => Encoding::Utf8,
            Some(_) | None => Encoding::Utf16,
        };
        server.capabilities = capabilities_json(&init.capabilities);
        server
            .socket
            .notify::<Initialized>(InitializedParams {})
            .map_err(|_| LspError::Unavailable {
                reason: UnavailableReason::SpawnFailed,
                message: format!("{}: exited after initialize", config.name),
            })?;
        server.shared.update(|s| s.initialized = true);
        if options.watch_files {
            server.watcher = server.watch();
        }
        Ok(Arc::new(server))
    }

    fn watch(&self) -> Option<Watch> {
        use notify::{EventKind, RecursiveMode, Watcher, event::ModifyKind};
        static FENCES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let fence_dir = std::env::temp_dir().join(format!(
            "{FENCE_PREFIX}{}-{}",
            std::process::id(),
            FENCES.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        if let Err(e) = std::fs::create_dir_all(&fence_dir) {
            tracing::warn!("cannot create {}: {e}", fence_dir.display());
            return None;
        }
        let fence_seen = watch::channel(0u64).0;
        let seen = fence_seen.clone();
        let socket = self.socket.clone();
        let dirty = self.dirty.clone();
        let config = self.config.clone();
        let fences = fence_dir.clone();
        let slot: Arc<Mutex<Option<notify::RecommendedWatcher>>> = Arc::new(Mutex::new(None));
        let weak_slot = Arc::downgrade(&slot);
        let root = self.root.clone();
        let handler = move |res: notify::Result<notify::Event>| {
            let Ok(event) = res else { return };
            if matches!(event.kind, EventKind::Create(_)) {
                // A new top-level directory is watched like the others, from
                // another thread (the watcher's own runs this handler).
                for dir in event
                    .paths
                    .iter()
                    .filter(|p| p.parent() == Some(root.as_path()) && watched_whole(p))
                {
                    let (dir, slot) = (dir.clone(), weak_slot.clone());
                    std::thread::spawn(move || {
                        if let Some(slot) = slot.upgrade()
                            && let Some(watcher) = lock(&slot).as_mut()
                        {
                            let _ = watcher.watch(&dir, RecursiveMode::Recursive);
                        }
                    });
                }
            }
            if let Some(n) = event
                .paths
                .iter()
                .filter(|p| p.parent() == Some(fences.as_path()))
                .filter_map(|p| p.file_name()?.to_str()?.parse::<u64>().ok())
                .max()
            {
                seen.send_modify(|s| *s = (*s).max(n));
                return;
            }
            let typ = match event.kind {
                EventKind::Create(_) => FileChangeType::CREATED,
                EventKind::Modify(ModifyKind::Metadata(_)) => return,
                EventKind::Modify(_) => FileChangeType::CHANGED,
                EventKind::Remove(_) => FileChangeType::DELETED,
                EventKind::Access(_) | EventKind::Any | EventKind::Other => return,
            };
            let mut changes = Vec::new();
            for path in event.paths.iter().filter(|p| !skip_watched(p)) {
                if let Ok(uri) = Url::from_file_path(path) {
                    changes.push(FileEvent { uri, typ });
                }
                if config.language_id(path).is_some() {
                    let mut d = lock(&dirty);
                    if d.len() < 4096 && !d.contains(path) {
                        d.push(path.clone());
                    }
                }
            }
            if !changes.is_empty() {
                let _ =
                    socket.notify::<DidChangeWatchedFiles>(DidChangeWatchedFilesParams { changes });
            }
        };
        let fail = |e: notify::Error| {
            tracing::warn!("cannot watch {}: {e}", self.root.display());
            let _ = std::fs::remove_dir_all(&fence_dir);
        };
        let mut watcher = match notify::recommended_watcher(handler) {
            Ok(w) => w,
            Err(e) => {
                fail(e);
                return None;
            }
        };
        // The root and its top-level directories, but not build output,
        // version control or dependencies: a Rust project's `target/` alone
        // can be tens of thousands of directories, each a watch to add and
        // a stream of events during every build.
        let watched = watcher
            .watch(&fence_dir, RecursiveMode::NonRecursive)
            .and_then(|()| watcher.watch(&self.root, RecursiveMode::NonRecursive));
        if let Err(e) = watched {
            fail(e);
            return None;
        }
        if let Ok(entries) = std::fs::read_dir(&self.root) {
            for entry in entries.flatten() {
                if watched_whole(&entry.path())
                    && let Err(e) = watcher.watch(&entry.path(), RecursiveMode::Recursive)
                {
                    tracing::warn!("cannot watch {}: {e}", entry.path().display());
                }
            }
        }
        *lock(&slot) = Some(watcher);
        Some(Watch {
            _watcher: slot,
            fence_dir,
            fence_next: Mutex::new(0),
            fence_seen,
        })
    }

    /// Waits until the watcher has handled every file change made before
    /// this call (bounded; without a watcher, returns at once).
    pub async fn flush_watcher(&self) {
        let Some(w) = &self.watcher else { return };
        let n = {
            let mut next = lock(&w.fence_next);
            *next += 1;
            *next
        };
        let fence = w.fence_dir.join(n.to_string());
        if std::fs::write(&fence, b"").is_err() {
            return;
        }
        let mut rx = w.fence_seen.subscribe();
        if tokio::time::timeout(Duration::from_secs(2), rx.wait_for(|seen| *seen >= n))
            .await
            .is_err()
        {
            tracing::warn!("file watcher of {} lags", self.root.display());
        }
        let _ = std::fs::remove_file(&fence);
    }

    /// The server's pid (= its session id).
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// Whether the process and its connection are alive.
    pub fn is_alive(&self) -> bool {
        !matches!(self.shared.status.borrow().phase, Phase::Dead(_))
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// Waits (briefly) until a dead server's stderr has been read to its
    /// end, so its last lines can be reported.
    pub async fn stderr_drained(&self) {
        let mut rx = self.shared.stderr_closed.subscribe();
        let _ =
            tokio::time::timeout(Duration::from_millis(500), rx.wait_for(|closed| *closed)).await;
    }

    /// `load_failed` for a load that ended with `health: "error"` and
    /// `message`: the server's message, the error its command printed,
    /// and what to do.
    pub fn load_failed(&self, message: &str) -> LspError {
        let detail = lock(&self.shared.stderr_error).lines.join("\n");
        LspError::Unavailable {
            reason: UnavailableReason::LoadFailed,
            message: format!(
                "{} could not load the project at {}: {message}{}\nWhat it would answer now \
                 is no proof of anything (a call site resolves to nothing), so nothing is \
                 answered. Fix the error (for a Cargo project, `cargo metadata` in that \
                 directory shows it); the server loads the project again when a manifest \
                 changes.",
                self.config.name,
                self.root.display(),
                if detail.is_empty() {
                    String::new()
                } else {
                    format!("\n{detail}")
                }
            ),
        }
    }

    /// The project's load error or warning, when one stands (for `dsh ps`).
    pub fn load_problem(&self) -> Option<String> {
        let s = self.shared.status.borrow();
        match &s.phase {
            Phase::LoadFailed(m) => {
                let detail = lock(&self.shared.stderr_error).lines.first().cloned();
                Some(match detail {
                    Some(d) => format!("load failed: {m} ({d})"),
                    None => format!("load failed: {m}"),
                })
            }
            Phase::NoProject(m) => Some(format!("no project: {m}")),
            Phase::Loading | Phase::Ready | Phase::Dead(_) => {
                s.warning.as_ref().map(|w| format!("warning: {w}"))
            }
        }
    }

    /// The last lines of stderr, formatted for an error message.
    pub fn stderr_tail_text(&self) -> String {
        let tail = lock(&self.shared.stderr);
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; last stderr lines:\n{}",
                tail.iter().cloned().collect::<Vec<_>>().join("\n")
            )
        }
    }

    /// Sends a request, with a timeout that also sends `$/cancelRequest`.
    pub async fn request<R: Request>(
        &self,
        params: R::Params,
        timeout: Duration,
    ) -> Result<R::Result, Failure> {
        // async-lsp numbers outgoing requests 0, 1, 2, ... in the order they
        // reach its main loop; sending under this lock keeps our count equal
        // to the id it assigns, which `$/cancelRequest` needs.
        let (id, mut fut, early) = {
            let mut next = lock(&self.next_id);
            let id = *next;
            *next += 1;
            let mut fut = Box::pin(self.socket.request::<R>(params));
            let waker = futures::task::noop_waker();
            let early = match fut.as_mut().poll(&mut Context::from_waker(&waker)) {
                Poll::Ready(r) => Some(r),
                Poll::Pending => None,
            };
            (id, fut, early)
        };
        let outcome = match early {
            Some(r) => r,
            None => match tokio::time::timeout(timeout, &mut fut).await {
                Ok(r) => r,
                Err(_) => {
                    let _ = self.socket.notify::<Cancel>(CancelParams {
                        id: NumberOrString::Number(id),
                    });
                    return Err(Failure::Lsp(LspError::Timeout {
                        op: lsp_seam::Op::Definition,
                        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            },
        };
        match outcome {
            Ok(v) => Ok(v),
            Err(async_lsp::Error::Response(e)) if e.code == ErrorCode::CONTENT_MODIFIED => {
                Err(Failure::ContentModified)
            }
            Err(async_lsp::Error::Response(e)) => Err(Failure::Lsp(LspError::ServerError {
                code: Some(i64::from(e.code.0)),
                message: e.message,
            })),
            Err(async_lsp::Error::Deserialize(e)) => Err(Failure::Lsp(LspError::ServerError {
                code: None,
                message: format!("undecodable answer to {}: {e}", R::METHOD),
            })),
            Err(_) => Err(Failure::Dead),
        }
    }

    /// Waits up to `timeout` for the server to be ready, telling
    /// `on_progress` each new progress message while it waits.
    pub async fn wait_ready(
        &self,
        timeout: Duration,
        on_progress: &(dyn Fn(&str, Option<u32>) + Send + Sync),
    ) -> Result<(), Failure> {
        let mut rx = self.shared.status.subscribe();
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
        let mut told: Option<String> = None;
        loop {
            let progress = {
                let s = rx.borrow_and_update();
                if s.phase == Phase::Loading && s.progress != told {
                    told.clone_from(&s.progress);
                    let text = s.progress.as_deref().unwrap_or("loading the project");
                    on_progress(&format!("{}: {text}", self.config.name), s.percentage);
                }
                match &s.phase {
                    Phase::Ready => return Ok(()),
                    Phase::NoProject(m) => {
                        return Err(Failure::Lsp(LspError::Unavailable {
                            reason: UnavailableReason::NoProject,
                            message: format!("{}: {m}", self.config.name),
                        }));
                    }
                    Phase::LoadFailed(m) => {
                        return Err(Failure::Lsp(self.load_failed(m)));
                    }
                    Phase::Dead(_) => return Err(Failure::Dead),
                    Phase::Loading => s.progress.clone(),
                }
            };
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    return Err(Failure::Lsp(LspError::NotReady {
                        progress,
                        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            }
        }
    }

    fn notify<N: Notification>(&self, params: N::Params) -> Result<(), Failure> {
        self.socket.notify::<N>(params).map_err(|_| Failure::Dead)
    }

    /// Waits until the server published diagnostics for each `(path,
    /// version)` (a version at least as new), or `timeout` passes.
    pub async fn wait_diagnostics(
        &self,
        documents: &[(PathBuf, i32)],
        timeout: Duration,
    ) -> Result<(), Failure> {
        let started = tokio::time::Instant::now();
        let mut rx = self.shared.diagnostics.subscribe();
        for (path, version) in documents {
            let Ok(uri) = Url::from_file_path(path) else {
                continue;
            };
            let published = rx.wait_for(|d| match d.get(&uri) {
                Some(Some(v)) => v >= version,
                Some(None) => true,
                None => false,
            });
            match tokio::time::timeout_at(started + timeout, published).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    return Err(Failure::Lsp(LspError::NotReady {
                        progress: Some(format!(
                            "{} is still processing the edited {}",
                            self.config.name,
                            path.display()
                        )),
                        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            }
        }
        Ok(())
    }

    /// Whether `path` is open on the server.
    pub fn is_open(&self, path: &Path) -> bool {
        lock(&self.docs).docs.contains_key(path)
    }

    /// Makes the server's view of `path` equal to `text` (open or full
    /// change), closing the least recently used document beyond the bound.
    /// Returns the version sent, or `None` when the server had it already.
    pub fn sync_document(
        &self,
        path: &Path,
        text: &str,
        language_id: &str,
    ) -> Result<Option<i32>, Failure> {
        let hash = content_hash(text);
        let stamp = file_stamp(path);
        let mut docs = lock(&self.docs);
        docs.clock += 1;
        let clock = docs.clock;
        if let Some(doc) = docs.docs.get_mut(path) {
            doc.last_used = clock;
            doc.stamp = stamp;
            if doc.hash == hash {
                return Ok(None);
            }
            doc.hash = hash;
            doc.version += 1;
            let version = doc.version;
            self.notify::<DidChangeTextDocument>(DidChangeTextDocumentParams {
                text_document: VersionedTextDocumentIdentifier {
                    uri: path_url(path)?,
                    version,
                },
                content_changes: vec![TextDocumentContentChangeEvent {
                    range: None,
                    range_length: None,
                    text: text.to_owned(),
                }],
            })?;
            return Ok(Some(version));
        }
        self.notify::<DidOpenTextDocument>(DidOpenTextDocumentParams {
            text_document: TextDocumentItem {
                uri: path_url(path)?,
                language_id: language_id.to_owned(),
                version: 1,
                text: text.to_owned(),
            },
        })?;
        docs.docs.insert(
            path.to_owned(),
            OpenDocument {
                version: 1,
                hash,
                stamp,
                last_used: clock,
                language_id: language_id.to_owned(),
            },
        );
        while docs.docs.len() > self.options.max_open_documents.max(1) {
            let Some(oldest) = docs
                .docs
                .iter()
                .min_by_key(|(_, d)| d.last_used)
                .map(|(p, _)| p.clone())
            else {
                break;
            };
            docs.docs.remove(&oldest);
            self.notify::<DidCloseTextDocument>(DidCloseTextDocumentParams {
                text_document: TextDocumentIdentifier {
                    uri: path_url(&oldest)?,
                },
            })?;
        }
        Ok(Some(1))
    }

    /// Re-syncs open documents whose file changed on disk, and opens files
    /// the watcher saw change (unless the server follows
    /// `didChangeWatchedFiles` itself: `follows_watched_files`), so the
    /// next answer reflects the disk.
    /// Returns the documents sent and their versions. Files larger than
    /// `max_file_bytes`, and files `access` (the query's read policy)
    /// refuses, are left out (closed if open): the server never holds the
    /// text of a file the query could not read.
    pub fn refresh_documents(&self, access: &ReadAccess) -> Result<Vec<(PathBuf, i32)>, Failure> {
        let dirty: Vec<PathBuf> = std::mem::take(&mut *lock(&self.dirty));
        // Copied out, so that no file is looked at with the lock held.
        let open: Vec<(PathBuf, _, String)> = lock(&self.docs)
            .docs
            .iter()
            .map(|(p, d)| (p.clone(), d.stamp, d.language_id.clone()))
            .collect();
        let mut todo: Vec<(PathBuf, String)> = open
            .into_iter()
            .filter(|(p, stamp, _)| {
                file_stamp(p) != *stamp || dirty.contains(p) || access.check(p).is_err()
            })
            .map(|(p, _, lang)| (p, lang))
            .collect();
        // A file not open is opened for its change only for a server that
        // does not follow the watched-files notification itself.
        let open_changed = !self.config.follows_watched_files;
        for p in dirty {
            if open_changed
                && !todo.iter().any(|(q, _)| *q == p)
                && let Some(lang) = self.config.language_id(&p)
            {
                todo.push((p.clone(), lang.to_owned()));
            }
        }
        let mut sent = Vec::new();
        for (path, lang) in todo {
            match crate::text::read_capped(&path, self.options.max_file_bytes, access) {
                Ok(text) => {
                    if let Some(version) = self.sync_document(&path, &text, &lang)? {
                        sent.push((path, version));
                    }
                }
                Err(_) => {
                    let was_open = lock(&self.docs).docs.remove(&path).is_some();
                    if was_open {
                        self.notify::<DidCloseTextDocument>(DidCloseTextDocumentParams {
                            text_document: TextDocumentIdentifier {
                                uri: path_url(&path)?,
                            },
                        })?;
                    }
                }
            }
        }
        Ok(sent)
    }

    /// Asks the server to shut down and exit, then ends its session.
    pub async fn shutdown(&self) {
        if self.is_alive() {
            let grace = self.options.shutdown_grace;
            if self.request::<Shutdown>((), grace).await.is_ok() {
                let _ = self.notify::<Exit>(());
            }
            let mut rx = self.shared.status.subscribe();
            let _ = tokio::time::timeout(grace, rx.wait_for(|s| matches!(s.phase, Phase::Dead(_))))
                .await;
        }
        let leader = self.leader.clone();
        let _ = tokio::task::spawn_blocking(move || end_server_session(&leader)).await;
    }

    /// Kills the server now (used to restart a stuck server).
    pub fn kill(&self) {
        end_server_session(&self.leader);
        self.shared.mark_dead("killed by the client".into());
    }

    /// Whether the server declared `capability` (a field of its
    /// `ServerCapabilities`) with a value other than `false`.
    pub fn supports(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        end_server_session(&self.leader);
        // Verified empty: the pid can go. (Otherwise the leader's own drop
        // kills what is left and hands it to the orphan reaper.)
        let _ = self.leader.reap();
    }
}

/// Removes the directories named `<prefix><pid>-<n>` for any of
/// `prefixes` (servers' temp dirs, fences) left by hosts that no longer
/// exist (killed before their cleanup ran), in one pass over the temp dir.
fn remove_stale(prefixes: &[&str]) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| prefixes.iter().find_map(|p| n.strip_prefix(p)))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if process_tree::process_info(pid).is_none() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Most lines kept of one error a server's command printed.
const STDERR_ERROR_LINES: usize = 12;

/// The last `error: …` block of a server's stderr (see
/// [`StderrError::note`]).
#[derive(Debug, Default)]
struct StderrError {
    lines: Vec<String>,
    /// Whether lines still join the block.
    open: bool,
}

impl StderrError {
    /// rust-analyzer logs a failed command's stderr after its own log
    /// line: the block is a line starting with `error:` and the lines
    /// after it up to the next log line (which starts with a timestamp or
    /// a level).
    fn note(&mut self, line: &str) {
        if line.starts_with("error:") || line.starts_with("error[") {
            self.lines = vec![line.to_owned()];
            self.open = true;
            return;
        }
        let log_line = line
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            && !line.starts_with("Caused by");
        if log_line {
            self.open = false;
        } else if self.open && self.lines.len() < STDERR_ERROR_LINES && !line.trim().is_empty() {
            self.lines.push(line.to_owned());
        }
    }
}

fn end_server_session(leader: &process_tree::Leader) {
    let pid = leader.pid();
    let steps = [
        process_tree::Step {
            signal: nix::sys::signal::Signal::SIGTERM,
            grace: Duration::from_millis(200),
        },
        process_tree::Step {
            signal: nix::sys::signal::Signal::SIGKILL,
            grace: Duration::from_secs(2),
        },
    ];
    if let Err(e) = leader.end_session(&steps) {
        tracing::warn!("language server session {pid} survived: {e}");
    }
}

fn capabilities_json(caps: &ServerCapabilities) -> Value {
    serde_json::to_value(caps).unwrap_or(Value::Null)
}

fn client_capabilities() -> ClientCapabilities {
    ClientCapabilities {
        general: Some(GeneralClientCapabilities {
            position_encodings: Some(vec![
                PositionEncodingKind::UTF8,
                PositionEncodingKind::UTF16,
            ]),
            ..GeneralClientCapabilities::default()
        }),
        text_document: Some(TextDocumentClientCapabilities {
            definition: Some(GotoCapability {
                dynamic_registration: None,
                link_support: Some(true),
            }),
            hover: Some(HoverClientCapabilities {
                dynamic_registration: None,
                content_format: Some(vec![MarkupKind::Markdown, MarkupKind::PlainText]),
            }),
            document_symbol: Some(DocumentSymbolClientCapabilities {
                hierarchical_document_symbol_support: Some(true),
                ..DocumentSymbolClientCapabilities::default()
            }),
            ..TextDocumentClientCapabilities::default()
        }),
        workspace: Some(WorkspaceClientCapabilities {
            configuration: Some(true),
            workspace_folders: Some(true),
            did_change_watched_files: Some(DidChangeWatchedFilesClientCapabilities {
                dynamic_registration: Some(true),
                relative_pattern_support: Some(true),
            }),
            ..WorkspaceClientCapabilities::default()
        }),
        window: Some(WindowClientCapabilities {
            work_done_progress: Some(true),
            ..WindowClientCapabilities::default()
        }),
        experimental: Some(serde_json::json!({ "serverStatusNotification": true })),
    }
}

/// The nice value language servers run at.
pub const SERVER_NICE: i32 = 10;

/// Lowers the calling process's priority to [`SERVER_NICE`] (its threads
/// inherit it). A language server indexes in the background, for seconds
/// on a large project; at the same priority it took the core from the
/// program a terminal was waiting on, and on a two-core machine that was
/// most of the settle tail. Interactive work wins the core now; the server
/// still gets every idle cycle. Best effort: a server that cannot be
/// lowered runs as it is.
fn background_priority() -> std::io::Result<()> {
    // SAFETY: changes only this (new, not yet exec'd) process's nice
    // value; `PRIO_PROCESS` with 0 names the caller.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, SERVER_NICE);
    }
    Ok(())
}
