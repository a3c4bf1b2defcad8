//! [`StdioLspProvider`]: the seam's provider over one configured server
//! kind, one process per project root: the servers it keeps per root
//! (started, restarted within a budget, shut down) here; one query's path
//! (`query.rs`: read policy, document sync, readiness, retries), each op's
//! request and answer (`definition.rs`, `references.rs`, `hover.rs`,
//! `symbols.rs`, `diagnostics.rs`), the files an answer shows (`files.rs`) and the proof an
//! empty answer needs (`proof.rs`).

mod definition;
mod diagnostics;
mod files;
mod hover;
mod proof;
mod query;
mod references;
mod root;
mod symbols;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_seam::{
    DefinitionResult, DiagnosticsQuery, DiagnosticsResult, HoverResult, LspError, LspFuture,
    LspProvider, PositionQuery, ReadAccess, ReferencesResult, SandboxTag, SymbolsQuery,
    SymbolsResult, UnavailableReason, Workspace,
};

use crate::config::{ClientOptions, ServerConfig};
use crate::pool::{ServerPool, Slot};
use crate::server::{Failure, Server, ServerProcess};
use root::ServerKey;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// A provider of the lsp seam over one kind of stdio language server
/// (rust-analyzer, pylsp, ...): one server process per project root,
/// started on first use (or by [`StdioLspProvider::start`]); sessions
/// whose workspaces bound a root's writes differently get a server each
/// (see [`lsp_seam::Workspace`]).
pub struct StdioLspProvider {
    config: Arc<ServerConfig>,
    options: ClientOptions,
    slots: Mutex<HashMap<ServerKey, Arc<Slot>>>,
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
        let config = ServerConfig::preset("rust-analyzer")?;
        config.resolve_command().ok()?;
        Some(StdioLspProvider::new(config, options))
    }

    /// The server configuration.
    pub fn config(&self) -> &ServerConfig {
        &self.config
    }

    /// The project root that serves `path` (a file or a directory), found
    /// by walking up to the config's root markers (regular files or
    /// directories; a manifest is read by the queried file's rules).
    /// Blocking: queries search off the async workers.
    pub fn root_for(&self, path: &Path) -> Result<PathBuf, LspError> {
        root::find_root(&self.config, path, &ReadAccess::all())
    }

    /// Starts (without waiting for readiness) the server for the project
    /// containing `dir`, the session's own workspace (the server writes
    /// nowhere outside it), in the session's sandbox `sandbox`.
    /// Only a directory inside a project (a root marker other than `.git`
    /// above it) starts anything: `no_project` otherwise.
    pub async fn start(&self, dir: &Path, sandbox: &SandboxTag) -> Result<(), LspError> {
        let dir = absolute(dir)?;
        let at = dir.clone();
        let has_project_marker = self
            .off_workers("the search for a project", &dir, move |config| {
                Ok(root::has_project_marker(&config, &at))
            })
            .await?;
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
        let root = self.root_of(&dir, &ReadAccess::all()).await?;
        let key = ServerKey::new(
            root,
            &Workspace::Session {
                dir,
                sandbox: sandbox.clone(),
            },
        );
        self.server_for(&key).await.map(|_| ())
    }

    /// Waits until the server for `path`'s project is ready, starting it
    /// if needed (unbounded by any session's workspace); `LSP_NOT_READY`
    /// after `timeout`.
    pub async fn wait_ready(&self, path: &Path, timeout: Duration) -> Result<(), LspError> {
        let path = absolute(path)?;
        let root = self.root_of(&path, &ReadAccess::all()).await?;
        let server = self
            .server_for(&ServerKey::new(root, &Workspace::Unbounded))
            .await?;
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
            .map(|(k, s)| (k.root.clone(), s.clone()))
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
    /// (started if needed, unbounded by any session's workspace): no
    /// document sync, readiness wait or conversion. For measuring the
    /// provider's overhead.
    pub async fn raw_server(&self, path: &Path) -> Result<RawServer, LspError> {
        let path = absolute(path)?;
        let root = self.root_of(&path, &ReadAccess::all()).await?;
        let key = ServerKey::new(root, &Workspace::Unbounded);
        Ok(RawServer {
            server: self.server_for(&key).await?,
            timeout: self.options.request_timeout,
        })
    }

    /// The slot of `key`, tracked by the pool.
    fn slot(&self, key: &ServerKey) -> Arc<Slot> {
        let slot = lock(&self.slots).entry(key.clone()).or_default().clone();
        self.pool.track(&self.config.name, &key.root, &slot);
        slot
    }

    /// The live server for `key`: started if absent, restarted (within
    /// the budget) if dead.
    async fn server_for(&self, key: &ServerKey) -> Result<Arc<Server>, LspError> {
        let root = &key.root;
        let slot = self.slot(key);
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
            self.config_for(key).await?,
            root.to_owned(),
            key.writable.clone(),
            key.sandbox.clone(),
            self.options.clone(),
            self.confine.clone(),
        )
        .await
        .map_err(|e| self.with_hint(e))?;
        *guard = Some(server.clone());
        Ok(server)
    }

    /// Replaces a stuck server without charging the crash budget.
    async fn restart_stuck(&self, key: &ServerKey, stuck: &Arc<Server>) {
        let slot = lock(&self.slots).get(key).cloned();
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

    /// Whether a live server runs for `key`.
    fn is_running(&self, key: &ServerKey) -> bool {
        let slot = lock(&self.slots).get(key).cloned();
        slot.is_some_and(|s| {
            s.server
                .try_lock()
                .map_or(true, |g| g.as_ref().is_some_and(|s| s.is_alive()))
        })
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

    fn diagnostics<'a>(&'a self, query: &'a DiagnosticsQuery) -> LspFuture<'a, DiagnosticsResult> {
        Box::pin(self.diagnostics_impl(query))
    }
}
