//! [`StdioLspProvider`]: the seam's provider over one configured server
//! kind, one process per project root.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_seam::{
    Address, DefinitionItem, DefinitionResult, FileReferences, HoverContent, HoverResult, LspError,
    LspFuture, LspProvider, NumberedLine, Op, PositionQuery, ProgressSink, ReadAccess, ReadDenied,
    Reference, ReferencesDetail, ReferencesResult, Resolved, SymbolItem, SymbolScope, SymbolsQuery,
    SymbolsResult, UnavailableReason, Withheld,
};
use lsp_types::request::{
    DocumentSymbolRequest, GotoDefinition, HoverRequest, References, WorkspaceSymbolRequest,
};
use lsp_types::{
    DocumentSymbol, DocumentSymbolParams, DocumentSymbolResponse, GotoDefinitionParams,
    GotoDefinitionResponse, HoverContents, HoverParams, MarkedString, OneOf, PartialResultParams,
    Position, Range, ReferenceContext, ReferenceParams, SymbolInformation, SymbolKind,
    TextDocumentIdentifier, TextDocumentPositionParams, Url, WorkDoneProgressParams,
    WorkspaceSymbolParams, WorkspaceSymbolResponse,
};

use crate::config::{ClientOptions, ReadinessSignal, RootStrategy, ServerConfig};
use crate::pool::{ServerPool, Slot};
use crate::server::{Failure, Server, ServerProcess, path_url};
use crate::text::{self, Encoding};

/// How many of a file's symbol names a readiness self-check looks up.
const PROOF_NAMES: usize = 3;
/// Longest snippet kept for a reference, in characters.
const SNIPPET_CHARS: usize = 200;
/// Largest file read to render results.
const MAX_FILE_BYTES: u64 = 8 << 20;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A provider of the lsp seam over one kind of stdio language server
/// (rust-analyzer, pylsp, ...): one server process per project root,
/// started on first use (or by [`StdioLspProvider::start`]).
pub struct StdioLspProvider {
    config: Arc<ServerConfig>,
    options: ClientOptions,
    slots: Mutex<HashMap<PathBuf, Arc<Slot>>>,
    pool: Arc<ServerPool>,
    confine: Option<crate::Confine>,
}

impl std::fmt::Debug for StdioLspProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StdioLspProvider")
            .field("name", &self.config.name)
            .field("servers", &self.servers())
            .finish_non_exhaustive()
    }
}

/// A file read for one query.
struct FileText {
    path: PathBuf,
    text: String,
}

/// Reads files at most once per query, and none the query may not read
/// (for the lines an answer shows).
struct Files {
    access: ReadAccess,
    texts: HashMap<PathBuf, Result<Option<Arc<String>>, ReadDenied>>,
}

/// Asks the query's read policy about each file at most once (for the
/// locations an answer lists without reading them).
struct Permits {
    access: ReadAccess,
    checked: HashMap<PathBuf, Result<(), ReadDenied>>,
}

impl Permits {
    fn new(access: &ReadAccess) -> Self {
        Self {
            access: access.clone(),
            checked: HashMap::new(),
        }
    }

    /// Whether the query may read `path`, without reading it.
    fn permit(&mut self, path: &Path) -> Result<(), ReadDenied> {
        let access = &self.access;
        self.checked
            .entry(path.to_owned())
            .or_insert_with(|| access.check(path))
            .clone()
    }
}

impl Files {
    fn new(access: &ReadAccess) -> Self {
        Self {
            access: access.clone(),
            texts: HashMap::new(),
        }
    }

    /// The text of `path`: `Err` when the query may not read it (nothing
    /// was read), `None` when it cannot be read as text (missing, too
    /// big, not UTF-8).
    fn load(&mut self, path: &Path) -> Result<Option<Arc<String>>, ReadDenied> {
        let access = &self.access;
        self.texts
            .entry(path.to_owned())
            .or_insert_with(|| match path.canonicalize() {
                // Nothing there, and the policy not asked yet: still
                // refused when it refuses where the file would be.
                Err(_) => access.check(path).map(|()| None),
                Ok(real) => match text::read_resolved(path, &real, MAX_FILE_BYTES, access) {
                    Ok(text) => Ok(Some(Arc::new(text))),
                    Err(LspError::ReadDenied(denied)) => Err(denied),
                    // Not readable as text; the policy let it be read.
                    Err(_) => Ok(None),
                },
            })
            .clone()
    }

    fn line(&mut self, path: &Path, index: u32) -> Option<String> {
        let text = self.load(path).ok()??;
        text::line_at(&text, index as usize).map(str::to_owned)
    }

    /// A server position in `path` as (1-based line, 1-based column).
    fn position(&mut self, path: &Path, pos: Position, encoding: Encoding) -> (u32, u32) {
        let column = match self.line(path, pos.line) {
            Some(line) => text::from_server_offset(&line, pos.character, encoding),
            None => pos.character as usize,
        };
        (
            pos.line.saturating_add(1),
            u32::try_from(column).unwrap_or(u32::MAX).saturating_add(1),
        )
    }
}

fn url_path(url: &Url) -> PathBuf {
    url.to_file_path()
        .unwrap_or_else(|()| PathBuf::from(url.as_str()))
}

fn kind_word(kind: SymbolKind) -> &'static str {
    const WORDS: [(SymbolKind, &str); 26] = [
        (SymbolKind::FILE, "file"),
        (SymbolKind::MODULE, "module"),
        (SymbolKind::NAMESPACE, "namespace"),
        (SymbolKind::PACKAGE, "package"),
        (SymbolKind::CLASS, "class"),
        (SymbolKind::METHOD, "method"),
        (SymbolKind::PROPERTY, "property"),
        (SymbolKind::FIELD, "field"),
        (SymbolKind::CONSTRUCTOR, "constructor"),
        (SymbolKind::ENUM, "enum"),
        (SymbolKind::INTERFACE, "interface"),
        (SymbolKind::FUNCTION, "function"),
        (SymbolKind::VARIABLE, "variable"),
        (SymbolKind::CONSTANT, "constant"),
        (SymbolKind::STRING, "string"),
        (SymbolKind::NUMBER, "number"),
        (SymbolKind::BOOLEAN, "boolean"),
        (SymbolKind::ARRAY, "array"),
        (SymbolKind::OBJECT, "object"),
        (SymbolKind::KEY, "key"),
        (SymbolKind::NULL, "null"),
        (SymbolKind::ENUM_MEMBER, "enum_member"),
        (SymbolKind::STRUCT, "struct"),
        (SymbolKind::EVENT, "event"),
        (SymbolKind::OPERATOR, "operator"),
        (SymbolKind::TYPE_PARAMETER, "type_parameter"),
    ];
    WORDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("unknown", |(_, w)| w)
}

/// The 0-based last line a range covers (an end at column 0 of a later
/// line does not cover that line).
fn last_line(range: &Range) -> u32 {
    if range.end.character == 0 && range.end.line > range.start.line {
        range.end.line - 1
    } else {
        range.end.line
    }
}

fn contains(range: &Range, pos: Position) -> bool {
    (range.start.line, range.start.character) <= (pos.line, pos.character)
        && (pos.line, pos.character) <= (range.end.line, range.end.character)
}

fn position_params(uri: &Url, pos: Position) -> TextDocumentPositionParams {
    TextDocumentPositionParams {
        text_document: TextDocumentIdentifier { uri: uri.clone() },
        position: pos,
    }
}

impl StdioLspProvider {
    /// A provider for `config` with a pool of its own; nothing is started
    /// until used.
    pub fn new(config: ServerConfig, options: ClientOptions) -> StdioLspProvider {
        let pool = ServerPool::new(options.max_servers, options.idle_stop);
        StdioLspProvider::with_pool(config, options, pool)
    }

    /// A provider for `config` whose servers count against `pool` (shared
    /// with the other providers of the process).
    pub fn with_pool(
        config: ServerConfig,
        options: ClientOptions,
        pool: Arc<ServerPool>,
    ) -> StdioLspProvider {
        StdioLspProvider {
            config: Arc::new(config),
            options,
            slots: Mutex::new(HashMap::new()),
            pool,
            confine: None,
        }
    }

    /// Confines every server this provider starts with `confine` (see
    /// [`crate::Confine`]).
    pub fn with_confine(mut self, confine: Option<crate::Confine>) -> StdioLspProvider {
        self.confine = confine;
        self
    }

    /// The rust-analyzer preset, or `None` when no `rust-analyzer` binary
    /// is found in `PATH`.
    pub fn rust_analyzer(options: ClientOptions) -> Option<StdioLspProvider> {
        let config = ServerConfig::rust_analyzer();
        config.resolve_command().ok()?;
        Some(StdioLspProvider::new(config, options))
    }

    /// The server configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The project root that serves `path` (a file or a directory), found
    /// by walking up to the config's root markers.
    pub fn root_for(&self, path: &Path) -> Result<PathBuf, LspError> {
        let start = if path.is_dir() {
            path.to_owned()
        } else {
            path.parent().map(Path::to_owned).unwrap_or_default()
        };
        let has_marker = |dir: &Path| {
            self.config
                .root_markers
                .iter()
                .any(|m| dir.join(m).exists())
        };
        let found = match self.config.root_strategy {
            RootStrategy::NearestMarker => start.ancestors().find(|d| has_marker(d)),
            RootStrategy::CargoWorkspace => {
                let manifests: Vec<&Path> = start.ancestors().filter(|d| has_marker(d)).collect();
                let is_workspace = |d: &&&Path| {
                    self.config.root_markers.iter().any(|m| {
                        std::fs::read_to_string(d.join(m)).is_ok_and(|t| {
                            t.lines().any(|l| l.trim_start().starts_with("[workspace]"))
                        })
                    })
                };
                manifests
                    .iter()
                    .rev()
                    .find(is_workspace)
                    .or(manifests.first())
                    .copied()
            }
        };
        match found {
            Some(root) => Ok(root.to_owned()),
            None if self.config.require_root => Err(LspError::Unavailable {
                reason: UnavailableReason::NoProject,
                message: format!(
                    "{}: no {} in {} or any parent directory{}",
                    self.config.name,
                    self.config.root_markers.join(" or "),
                    start.display(),
                    self.config
                        .no_project_hint
                        .as_ref()
                        .map(|h| format!("; {h}"))
                        .unwrap_or_default()
                ),
            }),
            None => Ok(start),
        }
    }

    /// Starts (without waiting for readiness) the server for the project
    /// containing `dir`, e.g. the session's own root.
    /// Only a directory inside a project (a root marker other than `.git`
    /// above it) starts anything: `no_project` otherwise.
    pub async fn start(&self, dir: &Path) -> Result<(), LspError> {
        let dir = absolute(dir)?;
        let has_project_marker = dir.ancestors().any(|d| {
            self.config
                .root_markers
                .iter()
                .any(|m| m != ".git" && d.join(m).exists())
        });
        if !has_project_marker {
            return Err(LspError::Unavailable {
                reason: UnavailableReason::NoProject,
                message: format!(
                    "{}: no project marker above {}",
                    self.config.name,
                    dir.display()
                ),
            });
        }
        let root = self.root_for(&dir)?;
        self.server_for(&root).await.map(|_| ())
    }

    /// Waits until the server for `path`'s project is ready, starting it
    /// if needed; `LSP_NOT_READY` after `timeout`.
    pub async fn wait_ready(&self, path: &Path, timeout: Duration) -> Result<(), LspError> {
        let path = absolute(path)?;
        let root = self.root_for(&path)?;
        let server = self.server_for(&root).await?;
        server
            .wait_ready(timeout, &|_, _| {})
            .await
            .map_err(|f| match f {
                Failure::Lsp(e) => e,
                Failure::Dead | Failure::ContentModified => LspError::Unavailable {
                    reason: UnavailableReason::Crashed,
                    message: format!("{}: died while loading", self.config.name),
                },
            })
    }

    /// The running server processes.
    pub fn servers(&self) -> Vec<ServerProcess> {
        let slots: Vec<(PathBuf, Arc<Slot>)> = lock(&self.slots)
            .iter()
            .map(|(r, s)| (r.clone(), s.clone()))
            .collect();
        let mut out = Vec::new();
        for (root, slot) in slots {
            if let Ok(guard) = slot.server.try_lock()
                && let Some(server) = guard.as_ref()
                && server.is_alive()
            {
                out.push(ServerProcess {
                    name: server.config.name.clone(),
                    root,
                    pid: server.pid(),
                    encoding: server.encoding,
                    problem: server.load_problem(),
                });
            }
        }
        out.sort_by(|a, b| a.root.cmp(&b.root));
        out
    }

    /// Shuts every server down cleanly (`shutdown`, `exit`), then ends
    /// their sessions.
    pub async fn shutdown(&self) {
        let slots: Vec<Arc<Slot>> = lock(&self.slots).drain().map(|(_, s)| s).collect();
        for slot in slots {
            let server = slot.server.lock().await.take();
            if let Some(server) = server {
                server.shutdown().await;
            }
        }
    }

    /// A handle to send requests as is to the server of `path`'s project
    /// (started if needed): no document sync, readiness wait or
    /// conversion. For measuring the provider's overhead.
    pub async fn raw_server(&self, path: &Path) -> Result<RawServer, LspError> {
        let path = absolute(path)?;
        let root = self.root_for(&path)?;
        Ok(RawServer {
            server: self.server_for(&root).await?,
            timeout: self.options.request_timeout,
        })
    }

    /// The slot of `root`, tracked by the pool.
    fn slot(&self, root: &Path) -> Arc<Slot> {
        let slot = lock(&self.slots)
            .entry(root.to_owned())
            .or_default()
            .clone();
        self.pool.track(&self.config.name, root, &slot);
        slot
    }

    /// The live server for `root`: started if absent, restarted (within
    /// the budget) if dead.
    async fn server_for(&self, root: &Path) -> Result<Arc<Server>, LspError> {
        let slot = self.slot(root);
        let mut guard = slot.server.lock().await;
        if let Some(server) = guard.as_ref() {
            if server.is_alive() {
                return Ok(server.clone());
            }
            server.stderr_drained().await;
            let tail = server.stderr_tail_text();
            let how = match server.status().phase {
                crate::server::Phase::Dead(how) => how,
                crate::server::Phase::Loading
                | crate::server::Phase::Ready
                | crate::server::Phase::NoProject(_)
                | crate::server::Phase::LoadFailed(_) => "unknown".into(),
            };
            let used = slot.restarts.load(Ordering::SeqCst);
            if used >= self.options.restart_budget {
                return Err(LspError::Unavailable {
                    reason: UnavailableReason::Crashed,
                    message: format!(
                        "{} for {} died ({how}) and was restarted {used} time(s), its budget{tail}",
                        server.config.name,
                        root.display()
                    ),
                });
            }
            slot.restarts.fetch_add(1, Ordering::SeqCst);
            tracing::info!(
                "restarting {} for {} after it died ({how})",
                server.config.name,
                root.display()
            );
            *guard = None;
        }
        self.pool.ensure_reaper();
        self.pool.make_room(&slot);
        // The server for this root (a preset may choose it per root).
        let server = Server::start(
            Arc::new(self.config.for_root(root)),
            root.to_owned(),
            self.options.clone(),
            self.confine.clone(),
        )
        .await
        .map_err(|e| self.with_hint(e))?;
        *guard = Some(server.clone());
        Ok(server)
    }

    /// Replaces a stuck server without charging the crash budget.
    async fn restart_stuck(&self, root: &Path, stuck: &Arc<Server>) {
        let slot = lock(&self.slots).get(root).cloned();
        if let Some(slot) = slot {
            let mut guard = slot.server.lock().await;
            if guard.as_ref().is_some_and(|s| Arc::ptr_eq(s, stuck)) {
                stuck.kill();
                *guard = None;
            }
        }
    }

    /// Adds the install hint to a failed start (e.g. a server that exits
    /// at once because a dependency is missing).
    fn with_hint(&self, e: LspError) -> LspError {
        match (e, &self.config.install_hint) {
            (
                LspError::Unavailable {
                    reason: UnavailableReason::SpawnFailed,
                    message,
                },
                Some(hint),
            ) => LspError::Unavailable {
                reason: UnavailableReason::SpawnFailed,
                message: format!("{message}\n{hint}"),
            },
            (e, _) => e,
        }
    }

    /// Whether a live server runs for `root`.
    fn is_running(&self, root: &Path) -> bool {
        let slot = lock(&self.slots).get(root).cloned();
        slot.is_some_and(|s| {
            s.server
                .try_lock()
                .map_or(true, |g| g.as_ref().is_some_and(|s| s.is_alive()))
        })
    }

    /// Runs `query` against the server of `path`'s project: syncs
    /// documents, waits for readiness, retries `ContentModified`, restarts
    /// a stuck or dead server. What it waits for goes to `progress`.
    async fn run<T, F, Fut>(
        &self,
        op: Op,
        path: &Path,
        progress: &ProgressSink,
        access: &ReadAccess,
        query: F,
    ) -> Result<T, LspError>
    where
        F: Fn(Arc<Server>, Arc<FileText>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let path = absolute(path)?;
        // Before anything is read, started or sent: a file the caller may
        // not read is not queried at all.
        access.check(&path)?;
        if !path.is_file() {
            return Err(LspError::FileNotFound { path });
        }
        let report = |message: &str, percentage: Option<u32>| progress.report(message, percentage);
        let Some(language_id) = self.config.language_id(&path).map(str::to_owned) else {
            return Err(LspError::Unavailable {
                reason: UnavailableReason::NoProvider,
                message: format!("{} does not handle {}", self.config.name, path.display()),
            });
        };
        let root = self.root_for(&path)?;
        let _in_flight = self.slot(&root).begin_query();
        let mut stuck_restarts = 0;
        let max_attempts = self.options.restart_budget + 3;
        for _ in 0..max_attempts {
            if !self.is_running(&root) {
                report(
                    &format!(
                        "starting {} for {}",
                        self.config.for_root(&root).name,
                        root.display()
                    ),
                    None,
                );
            }
            let server = self.server_for(&root).await?;
            let text = text::read_capped(&path, self.options.max_file_bytes, access)?;
            let file = Arc::new(FileText {
                path: path.clone(),
                text,
            });
            let outcome = async {
                server.flush_watcher().await;
                let mut changed = server.refresh_documents(access)?;
                changed.retain(|(p, _)| *p != file.path);
                server.sync_document(&file.path, &file.text, &language_id)?;
                server
                    .wait_ready(self.options.ready_timeout, &report)
                    .await?;
                if server.config.wait_for_diagnostics && !changed.is_empty() {
                    server
                        .wait_diagnostics(&changed, self.options.ready_timeout)
                        .await?;
                }
                let mut retries = 0;
                loop {
                    match query(server.clone(), file.clone()).await {
                        Err(Failure::ContentModified)
                            if retries < self.options.content_modified_retries =>
                        {
                            tokio::time::sleep(Duration::from_millis(50 << retries)).await;
                            retries += 1;
                            server.refresh_documents(access)?;
                            server
                                .wait_ready(self.options.ready_timeout, &report)
                                .await?;
                        }
                        other => return other,
                    }
                }
            }
            .await;
            match outcome {
                Ok(v) => return Ok(v),
                Err(Failure::Lsp(LspError::Timeout { timeout_ms, .. })) => {
                    return Err(LspError::Timeout { op, timeout_ms });
                }
                Err(Failure::Lsp(e)) => return Err(e),
                Err(Failure::Dead) => {
                    // The connection broke: make sure the slot sees it dead.
                    server.kill();
                    continue;
                }
                Err(Failure::ContentModified) if stuck_restarts == 0 => {
                    stuck_restarts += 1;
                    self.restart_stuck(&root, &server).await;
                }
                Err(Failure::ContentModified) => {
                    return Err(LspError::ServerError {
                        code: Some(-32801),
                        message: "content modified: the server kept answering ContentModified, also after a restart".into(),
                    });
                }
            }
        }
        Err(LspError::Unavailable {
            reason: UnavailableReason::Crashed,
            message: format!("{} kept dying for {}", self.config.name, root.display()),
        })
    }

    /// An error by which the server says there is nothing at the position
    /// (see [`ServerConfig::nothing_here_errors`]) is an empty answer.
    fn nothing_here<T>(
        server: &Server,
        answer: Result<Option<T>, Failure>,
    ) -> Result<Option<T>, Failure> {
        match answer {
            Err(Failure::Lsp(LspError::ServerError { message, .. }))
                if server
                    .config
                    .nothing_here_errors
                    .iter()
                    .any(|m| message.contains(m.as_str())) =>
            {
                Ok(None)
            }
            other => other,
        }
    }

    fn unsupported(&self, server: &Server, capability: &str, op: Op) -> Result<(), Failure> {
        if server.supports(capability) {
            Ok(())
        } else {
            Err(Failure::Lsp(LspError::UnsupportedOperation {
                op,
                server: server.config.name.clone(),
            }))
        }
    }

    /// Resolves a query's address to a server position and the echo.
    fn locate(
        server: &Server,
        file: &FileText,
        query: &PositionQuery,
    ) -> Result<(Url, Position, Resolved), Failure> {
        let at = text::resolve(&file.text, query.line, &query.address)?;
        let line = text::line_at(&file.text, query.line as usize - 1).unwrap_or_default();
        let pos = Position {
            line: query.line - 1,
            character: text::to_server_offset(line, at.chars, server.encoding),
        };
        let resolved = Resolved {
            path: file.path.clone(),
            line: query.line,
            column: u32::try_from(at.chars + 1).unwrap_or(u32::MAX),
            symbol: at.symbol,
        };
        Ok((path_url(&file.path)?, pos, resolved))
    }

    async fn definition_impl(&self, query: &PositionQuery) -> Result<DefinitionResult, LspError> {
        validate_line(query)?;
        self.run(
            Op::Definition,
            &query.path,
            &query.progress,
            &query.access,
            |server, file| async move {
                self.unsupported(&server, "definitionProvider", Op::Definition)?;
                let (uri, pos, resolved) = Self::locate(&server, &file, query)?;
                let answer = server
                    .request::<GotoDefinition>(
                        GotoDefinitionParams {
                            text_document_position_params: position_params(&uri, pos),
                            work_done_progress_params: WorkDoneProgressParams::default(),
                            partial_result_params: PartialResultParams::default(),
                        },
                        self.options.request_timeout,
                    )
                    .await;
                let answer = Self::nothing_here(&server, answer)?;
                // (target, name position, whole range if known)
                let targets: Vec<(Url, Position, Option<Range>)> = match answer {
                    None => vec![],
                    Some(GotoDefinitionResponse::Scalar(l)) => vec![(l.uri, l.range.start, None)],
                    Some(GotoDefinitionResponse::Array(ls)) => ls
                        .into_iter()
                        .map(|l| (l.uri, l.range.start, None))
                        .collect(),
                    Some(GotoDefinitionResponse::Link(links)) => links
                        .into_iter()
                        .map(|l| {
                            (
                                l.target_uri,
                                l.target_selection_range.start,
                                Some(l.target_range),
                            )
                        })
                        .collect(),
                };
                if targets.is_empty() {
                    self.trust_empty(&server, &file).await?;
                }
                let mut files = Files::new(&query.access);
                let mut items = Vec::new();
                let mut withheld = Withheld::default();
                for (uri, name_pos, range) in targets {
                    let path = url_path(&uri);
                    // A site in a file the caller may not read is left
                    // out before anything of it is read or sent.
                    let text = match files.load(&path) {
                        Ok(text) => text,
                        Err(denied) => {
                            withheld.add(&denied);
                            continue;
                        }
                    };
                    let range = match range {
                        Some(r) => Some(r),
                        None => {
                            self.enclosing_symbol_range(
                                &server,
                                &uri,
                                text.as_deref().map(String::as_str),
                                name_pos,
                            )
                            .await
                        }
                    };
                    let (line, column) = files.position(&path, name_pos, server.encoding);
                    let (first, last) = match range {
                        Some(r) => (
                            r.start.line.min(name_pos.line),
                            last_line(&r).max(name_pos.line),
                        ),
                        None => (name_pos.line, name_pos.line),
                    };
                    let cap = self.options.max_body_lines.max(1);
                    let shown_last = last.min(first.saturating_add(cap - 1));
                    let body: Vec<NumberedLine> = match text {
                        Some(text) => text
                            .split('\n')
                            .enumerate()
                            .skip(first as usize)
                            .take((shown_last - first + 1) as usize)
                            .map(|(i, l)| NumberedLine {
                                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                                text: l.strip_suffix('\r').unwrap_or(l).to_owned(),
                            })
                            .collect(),
                        None => vec![],
                    };
                    items.push(DefinitionItem {
                        external: !path.starts_with(&server.root),
                        path,
                        line,
                        column,
                        body_omitted_lines: last - shown_last,
                        body,
                    });
                }
                Ok(DefinitionResult {
                    resolved,
                    items,
                    withheld,
                })
            },
        )
        .await
    }

    /// Proof, before an empty answer is given, that it is not an artefact
    /// of a project that is not loaded. For servers whose readiness is
    /// their own status (rust-analyzer), idle is not proof: the file's
    /// project must be loaded with no load warning standing, and a symbol
    /// of the file's own outline must be found by a workspace search in
    /// this file (a file outside the loaded crates, or a project that
    /// failed to load, has an outline — it is parsed alone — but none of
    /// its symbols is in the index). Without the proof the query fails:
    /// `load_failed` naming the server's warning, or `no_project`.
    async fn trust_empty(&self, server: &Server, file: &FileText) -> Result<(), Failure> {
        if server.config.readiness != ReadinessSignal::ServerStatus {
            return Ok(());
        }
        let not_proven = |why: String| {
            Failure::Lsp(LspError::Unavailable {
                reason: UnavailableReason::LoadFailed,
                message: format!(
                    "{} answered nothing for {}, but {why}: an empty answer would not be proof \
                     of nothing, so none is given. Fix the problem (for a Cargo project, `cargo \
                     metadata` and `cargo check` in {} show it); the server loads the project \
                     again when a manifest changes.",
                    server.config.name,
                    file.path.display(),
                    server.root.display()
                ),
            })
        };
        if let Some(warning) = server.status().warning {
            return Err(not_proven(format!(
                "it reports a problem with the project: {warning}"
            )));
        }
        if self.file_is_indexed(server, file).await? {
            return Ok(());
        }
        Err(Failure::Lsp(LspError::Unavailable {
            reason: UnavailableReason::NoProject,
            message: format!(
                "{} answered nothing for {}, but the file is in none of the crates it loaded \
                 for {} (none of the file's own symbols is found by a workspace search), so an \
                 empty answer would not be proof of nothing. A file is in a crate when a \
                 target's root reaches it through `mod` declarations.",
                server.config.name,
                file.path.display(),
                server.root.display()
            ),
        }))
    }

    /// The server's outline of the document `uri` (`documentSymbol`).
    async fn outline(
        &self,
        server: &Server,
        uri: &Url,
    ) -> Result<Option<DocumentSymbolResponse>, Failure> {
        server
            .request::<DocumentSymbolRequest>(
                DocumentSymbolParams {
                    text_document: TextDocumentIdentifier { uri: uri.clone() },
                    work_done_progress_params: WorkDoneProgressParams::default(),
                    partial_result_params: PartialResultParams::default(),
                },
                self.options.request_timeout,
            )
            .await
    }

    /// Whether a workspace search finds, in `file`, one of the names of
    /// its own outline (the longest few, which a search limit is least
    /// likely to crowd out). A file with no symbols is not proven.
    async fn file_is_indexed(&self, server: &Server, file: &FileText) -> Result<bool, Failure> {
        let uri = path_url(&file.path)?;
        let outline = self.outline(server, &uri).await?;
        let mut names: Vec<String> = match outline {
            None => vec![],
            Some(DocumentSymbolResponse::Flat(flat)) => flat.into_iter().map(|s| s.name).collect(),
            Some(DocumentSymbolResponse::Nested(nested)) => {
                let mut items = Vec::new();
                flatten_symbols(&nested, None, &file.path, &mut items);
                items.into_iter().map(|s| s.name).collect()
            }
        };
        // Identifiers only: `impl Shape for Circle` is an outline entry,
        // not a name a search finds.
        names.retain(|n| !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_'));
        names.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        names.dedup();
        for name in names.into_iter().take(PROOF_NAMES) {
            let found = server
                .request::<WorkspaceSymbolRequest>(
                    WorkspaceSymbolParams {
                        query: name,
                        work_done_progress_params: WorkDoneProgressParams::default(),
                        partial_result_params: PartialResultParams::default(),
                    },
                    self.options.request_timeout,
                )
                .await?;
            let here = match found {
                None => false,
                Some(WorkspaceSymbolResponse::Flat(flat)) => {
                    flat.iter().any(|s| s.location.uri == uri)
                }
                Some(WorkspaceSymbolResponse::Nested(nested)) => {
                    nested.iter().any(|s| match &s.location {
                        OneOf::Left(l) => l.uri == uri,
                        OneOf::Right(w) => w.uri == uri,
                    })
                }
            };
            if here {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The range of the innermost document symbol whose name is at `pos`
    /// (for servers that answer definitions without a whole range);
    /// `text` is the file's, read by the caller under the query's read
    /// policy.
    async fn enclosing_symbol_range(
        &self,
        server: &Server,
        uri: &Url,
        text: Option<&str>,
        pos: Position,
    ) -> Option<Range> {
        let path = url_path(uri);
        if server.config.outline_open_only && !server.is_open(&path) {
            // Not opened only to be outlined (see `outline_open_only`).
            let text = text?;
            let line = text::line_at(text, pos.line as usize)?;
            let column = text::from_server_offset(line, pos.character, server.encoding);
            let last = text::c_construct_end(text, pos.line as usize, column)?;
            return Some(Range {
                start: Position::new(pos.line, 0),
                // The last line's end.
                end: Position::new(u32::try_from(last).ok()?, u32::MAX),
            });
        }
        if !server.supports("documentSymbolProvider") {
            return None;
        }
        // Some servers (clangd) outline only documents they have open.
        if let Some(language_id) = self.config.language_id(&path)
            && let Some(text) = text.filter(|t| t.len() as u64 <= self.options.max_file_bytes)
        {
            server.sync_document(&path, text, language_id).ok()?;
        }
        let answer = self.outline(server, uri).await.ok()??;
        let ranges: Vec<(Range, Range)> = match answer {
            DocumentSymbolResponse::Flat(symbols) => symbols
                .into_iter()
                .filter(|s| s.location.uri == *uri)
                .map(|s| (s.location.range, s.location.range))
                .collect(),
            DocumentSymbolResponse::Nested(symbols) => {
                let mut out = Vec::new();
                flatten_ranges(&symbols, &mut out);
                out
            }
        };
        ranges
            .into_iter()
            .filter(|(range, selection)| {
                contains(selection, pos) || (range.start.line == pos.line && contains(range, pos))
            })
            .min_by_key(|(range, _)| last_line(range) - range.start.line)
            .map(|(range, _)| range)
    }

    async fn references_impl(&self, query: &PositionQuery) -> Result<ReferencesResult, LspError> {
        validate_line(query)?;
        self.run(
            Op::References,
            &query.path,
            &query.progress,
            &query.access,
            |server, file| async move {
                self.unsupported(&server, "referencesProvider", Op::References)?;
                let (uri, pos, resolved) = Self::locate(&server, &file, query)?;
                let locations = server
                    .request::<References>(
                        ReferenceParams {
                            text_document_position: position_params(&uri, pos),
                            work_done_progress_params: WorkDoneProgressParams::default(),
                            partial_result_params: PartialResultParams::default(),
                            context: ReferenceContext {
                                include_declaration: true,
                            },
                        },
                        self.options.request_timeout,
                    )
                    .await;
                let locations = Self::nothing_here(&server, locations)?.unwrap_or_default();
                if locations.is_empty() {
                    self.trust_empty(&server, &file).await?;
                }
                let mut files = Files::new(&query.access);
                let mut grouped: BTreeMap<PathBuf, Vec<Reference>> = BTreeMap::new();
                let mut withheld = Withheld::default();
                for loc in locations {
                    let path = url_path(&loc.uri);
                    if let Err(denied) = files.load(&path) {
                        withheld.add(&denied);
                        continue;
                    }
                    let (line, column) = files.position(&path, loc.range.start, server.encoding);
                    let snippet = files
                        .line(&path, loc.range.start.line)
                        .map(|l| l.trim().chars().take(SNIPPET_CHARS).collect());
                    grouped.entry(path).or_default().push(Reference {
                        line,
                        column,
                        snippet,
                    });
                }
                let mut total = 0;
                let files: Vec<FileReferences> = grouped
                    .into_iter()
                    .map(|(path, mut refs)| {
                        refs.sort_by_key(|r| (r.line, r.column));
                        refs.dedup_by_key(|r| (r.line, r.column));
                        total += refs.len();
                        FileReferences {
                            path,
                            count: refs.len(),
                            refs,
                        }
                    })
                    .collect();
                Ok(ReferencesResult {
                    resolved,
                    files,
                    total,
                    detail: ReferencesDetail::Full,
                    withheld,
                })
            },
        )
        .await
    }

    async fn hover_impl(&self, query: &PositionQuery) -> Result<HoverResult, LspError> {
        validate_line(query)?;
        self.run(
            Op::Hover,
            &query.path,
            &query.progress,
            &query.access,
            |server, file| async move {
                self.unsupported(&server, "hoverProvider", Op::Hover)?;
                let (uri, pos, resolved) = Self::locate(&server, &file, query)?;
                let hover = server
                    .request::<HoverRequest>(
                        HoverParams {
                            text_document_position_params: position_params(&uri, pos),
                            work_done_progress_params: WorkDoneProgressParams::default(),
                        },
                        self.options.request_timeout,
                    )
                    .await;
                let hover = Self::nothing_here(&server, hover)?;
                let markdown = hover.map(|h| match h.contents {
                    HoverContents::Scalar(s) => marked(s),
                    HoverContents::Array(v) => {
                        v.into_iter().map(marked).collect::<Vec<_>>().join("\n\n")
                    }
                    HoverContents::Markup(m) => m.value,
                });
                let markdown = markdown.filter(|m| !m.trim().is_empty());
                if markdown.is_none() {
                    self.trust_empty(&server, &file).await?;
                }
                let content = match markdown {
                    Some(m) => HoverContent::Markdown(m),
                    None => HoverContent::SourceLine(
                        text::line_at(&file.text, query.line as usize - 1)
                            .unwrap_or_default()
                            .to_owned(),
                    ),
                };
                Ok(HoverResult { resolved, content })
            },
        )
        .await
    }

    async fn symbols_impl(&self, query: &SymbolsQuery) -> Result<SymbolsResult, LspError> {
        if query.query.as_deref().is_some_and(|q| q.trim().is_empty()) {
            return Err(LspError::InvalidArgument {
                field: "query".into(),
                message: "must not be empty (omit it for the file's outline)".into(),
            });
        }
        self.run(
            Op::Symbols,
            &query.path,
            &query.progress,
            &query.access,
            |server, file| async move {
                let mut permits = Permits::new(&query.access);
                match &query.query {
                    None => {
                        self.unsupported(&server, "documentSymbolProvider", Op::Symbols)?;
                        let uri = path_url(&file.path)?;
                        let answer = self.outline(&server, &uri).await?;
                        let mut symbols = Vec::new();
                        match answer {
                            None => {}
                            Some(DocumentSymbolResponse::Flat(flat)) => {
                                symbols.extend(flat.into_iter().map(information));
                            }
                            Some(DocumentSymbolResponse::Nested(nested)) => {
                                flatten_symbols(&nested, None, &file.path, &mut symbols);
                            }
                        }
                        let withheld = permitted(&mut symbols, &mut permits);
                        symbols.sort_by_key(|s| (s.line, s.end_line));
                        Ok(SymbolsResult {
                            scope: SymbolScope::Outline {
                                path: file.path.clone(),
                            },
                            symbols,
                            withheld,
                        })
                    }
                    Some(q) => {
                        self.unsupported(&server, "workspaceSymbolProvider", Op::Symbols)?;
                        let answer = server
                            .request::<WorkspaceSymbolRequest>(
                                WorkspaceSymbolParams {
                                    query: q.clone(),
                                    work_done_progress_params: WorkDoneProgressParams::default(),
                                    partial_result_params: PartialResultParams::default(),
                                },
                                self.options.request_timeout,
                            )
                            .await?;
                        if answer.as_ref().is_none_or(|a| match a {
                            WorkspaceSymbolResponse::Flat(v) => v.is_empty(),
                            WorkspaceSymbolResponse::Nested(v) => v.is_empty(),
                        }) {
                            self.trust_empty(&server, &file).await?;
                        }
                        let mut symbols = match answer {
                            None => vec![],
                            Some(WorkspaceSymbolResponse::Flat(flat)) => {
                                flat.into_iter().map(information).collect()
                            }
                            Some(WorkspaceSymbolResponse::Nested(nested)) => nested
                                .into_iter()
                                .map(|s| {
                                    let (path, line, end_line) = match s.location {
                                        OneOf::Left(l) => (
                                            url_path(&l.uri),
                                            l.range.start.line + 1,
                                            last_line(&l.range) + 1,
                                        ),
                                        OneOf::Right(w) => (url_path(&w.uri), 1, 1),
                                    };
                                    SymbolItem {
                                        name: s.name,
                                        kind: kind_word(s.kind),
                                        path,
                                        line,
                                        end_line,
                                        container: s.container_name,
                                    }
                                })
                                .collect(),
                        };
                        let withheld = permitted(&mut symbols, &mut permits);
                        Ok(SymbolsResult {
                            scope: SymbolScope::Workspace { query: q.clone() },
                            symbols,
                            withheld,
                        })
                    }
                }
            },
        )
        .await
    }
}

/// A running server addressed directly (see
/// [`StdioLspProvider::raw_server`]).
#[derive(Debug, Clone)]
pub struct RawServer {
    server: Arc<Server>,
    timeout: Duration,
}

impl RawServer {
    /// Sends one request and awaits its answer (with the request timeout).
    pub async fn request<R: lsp_types::request::Request>(
        &self,
        params: R::Params,
    ) -> Result<R::Result, LspError> {
        self.server
            .request::<R>(params, self.timeout)
            .await
            .map_err(|f| match f {
                Failure::Lsp(e) => e,
                Failure::Dead => LspError::ServerError {
                    code: None,
                    message: "the server died".into(),
                },
                Failure::ContentModified => LspError::ServerError {
                    code: Some(-32801),
                    message: "content modified".into(),
                },
            })
    }
}

impl Drop for StdioLspProvider {
    fn drop(&mut self) {
        // Dropping the slots drops each server, which ends its session.
        lock(&self.slots).clear();
    }
}

fn validate_line(query: &PositionQuery) -> Result<(), LspError> {
    if query.line == 0 {
        return Err(LspError::InvalidArgument {
            field: "line".into(),
            message: "lines are 1-based".into(),
        });
    }
    match &query.address {
        Address::Column(0) => Err(LspError::InvalidArgument {
            field: "column".into(),
            message: "columns are 1-based".into(),
        }),
        Address::Column(_) | Address::Symbol { .. } => Ok(()),
    }
}

fn absolute(path: &Path) -> Result<PathBuf, LspError> {
    let joined = if path.is_absolute() {
        path.to_owned()
    } else {
        std::env::current_dir()
            .map_err(|_| LspError::FileNotFound {
                path: path.to_owned(),
            })?
            .join(path)
    };
    joined.canonicalize().map_err(|_| LspError::FileNotFound {
        path: path.to_owned(),
    })
}

fn marked(s: MarkedString) -> String {
    match s {
        MarkedString::String(s) => s,
        MarkedString::LanguageString(l) => format!("```{}\n{}\n```", l.language, l.value),
    }
}

/// Drops the symbols in files the query may not read; says how many.
fn permitted(symbols: &mut Vec<SymbolItem>, permits: &mut Permits) -> Withheld {
    let mut withheld = Withheld::default();
    symbols.retain(|s| match permits.permit(&s.path) {
        Ok(()) => true,
        Err(denied) => {
            withheld.add(&denied);
            false
        }
    });
    withheld
}

#[allow(deprecated)]
fn information(s: SymbolInformation) -> SymbolItem {
    SymbolItem {
        name: s.name,
        kind: kind_word(s.kind),
        path: url_path(&s.location.uri),
        line: s.location.range.start.line + 1,
        end_line: last_line(&s.location.range) + 1,
        container: s.container_name,
    }
}

fn flatten_symbols(
    symbols: &[DocumentSymbol],
    container: Option<&str>,
    path: &Path,
    out: &mut Vec<SymbolItem>,
) {
    for s in symbols {
        out.push(SymbolItem {
            name: s.name.clone(),
            kind: kind_word(s.kind),
            path: path.to_owned(),
            line: s.selection_range.start.line + 1,
            end_line: last_line(&s.range) + 1,
            container: container.map(str::to_owned),
        });
        if let Some(children) = &s.children {
            flatten_symbols(children, Some(&s.name), path, out);
        }
    }
}

fn flatten_ranges(symbols: &[DocumentSymbol], out: &mut Vec<(Range, Range)>) {
    for s in symbols {
        out.push((s.range, s.selection_range));
        if let Some(children) = &s.children {
            flatten_ranges(children, out);
        }
    }
}

impl LspProvider for StdioLspProvider {
    fn name(&self) -> &str {
        &self.config.name
    }

    fn extensions(&self) -> Vec<String> {
        self.config.extensions.keys().cloned().collect()
    }

    fn definition<'a>(&'a self, query: &'a PositionQuery) -> LspFuture<'a, DefinitionResult> {
        Box::pin(self.definition_impl(query))
    }

    fn references<'a>(&'a self, query: &'a PositionQuery) -> LspFuture<'a, ReferencesResult> {
        Box::pin(self.references_impl(query))
    }

    fn hover<'a>(&'a self, query: &'a PositionQuery) -> LspFuture<'a, HoverResult> {
        Box::pin(self.hover_impl(query))
    }

    fn symbols<'a>(&'a self, query: &'a SymbolsQuery) -> LspFuture<'a, SymbolsResult> {
        Box::pin(self.symbols_impl(query))
    }
}
