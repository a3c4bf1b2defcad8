//! [`StdioLspProvider`]: the seam's provider over one configured server
//! kind, one process per project root: the servers it keeps per root
//! (started, restarted within a budget, shut down) here; one query's path
//! (`query.rs`: read policy, document sync, readiness, retries), each op's
//! request and answer (`definition.rs`, `references.rs`, `hover.rs`,
//! `symbols.rs`), the files an answer shows (`files.rs`) and the proof an
//! empty answer needs (`proof.rs`).

mod definition;
mod files;
mod hover;
mod proof;
mod query;
mod references;
mod symbols;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lsp_seam::{
    DefinitionResult, HoverResult, LspError, LspFuture, LspProvider, PositionQuery,
    ReferencesResult, SymbolsQuery, SymbolsResult, UnavailableReason,
};

use crate::config::{ClientOptions, RootStrategy, ServerConfig};
use crate::pool::{ServerPool, Slot};
use crate::server::{Failure, Server, ServerProcess};

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
}
