//! Plain configuration: one [`ServerConfig`] per language server, the
//! client's [`ClientOptions`], and the built-in rust-analyzer preset.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lsp_seam::{LspError, UnavailableReason};
use serde_json::{Value, json};

/// How a server's project root is found from a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RootStrategy {
    /// The nearest ancestor directory holding any root marker.
    #[default]
    NearestMarker,
    /// Cargo's rule: the outermost `Cargo.toml` with a `[workspace]`
    /// table, else the nearest `Cargo.toml`.
    CargoWorkspace,
}

/// How the client knows that a server has finished loading.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadinessSignal {
    /// Ready after `initialized` once no `$/progress` is active.
    #[default]
    Progress,
    /// rust-analyzer's `experimental/serverStatus`: ready on a
    /// `quiescent` false→true transition.
    ServerStatus,
}

/// One stdio language server. The host fills it from
/// `[lsp.servers.NAME]`; every field but `command` and `extensions` may stay
/// default.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerConfig {
    /// The server's name (the table name), used in messages and routes.
    pub name: String,
    /// The executable: a name looked up in `PATH`, or a path.
    pub command: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Extra environment variables.
    pub env: BTreeMap<String, String>,
    /// Extension (lowercase, leading dot) → LSP language id, e.g.
    /// `".py" -> "python"`.
    pub extensions: BTreeMap<String, String>,
    /// Sent as `initializationOptions`.
    pub initialization_options: Option<Value>,
    /// Answers `workspace/configuration`: each item's dotted `section` is
    /// looked up in this object (the whole object when there is none).
    pub settings: Option<Value>,
    /// File names marking a project root (e.g. `pyproject.toml`).
    pub root_markers: Vec<String>,
    /// How the root is found from a file.
    pub root_strategy: RootStrategy,
    /// When true, a file with no root marker above it is `no_project`;
    /// when false, its own directory is the root.
    pub require_root: bool,
    /// How readiness is detected.
    pub readiness: ReadinessSignal,
}

impl ServerConfig {
    /// The built-in rust-analyzer preset (`rust-analyzer` from `PATH`).
    pub fn rust_analyzer() -> ServerConfig {
        let options = json!({
            "workspace": { "symbol": { "search": { "kind": "all_symbols" } } },
            "checkOnSave": false,
        });
        ServerConfig {
            name: "rust-analyzer".into(),
            command: "rust-analyzer".into(),
            args: vec![],
            env: BTreeMap::new(),
            extensions: BTreeMap::from([(".rs".to_owned(), "rust".to_owned())]),
            settings: Some(json!({ "rust-analyzer": options.clone() })),
            initialization_options: Some(options),
            root_markers: vec!["Cargo.toml".into()],
            root_strategy: RootStrategy::CargoWorkspace,
            require_root: true,
            readiness: ReadinessSignal::ServerStatus,
        }
    }

    /// The language id for `path`, by its final extension.
    pub fn language_id(&self, path: &Path) -> Option<&str> {
        let ext = lsp_seam::final_extension(path)?;
        self.extensions.get(&ext).map(String::as_str)
    }

    /// Finds the executable, or `binary_not_found` naming what was searched.
    pub fn resolve_command(&self) -> Result<PathBuf, LspError> {
        let not_found = |searched: String| LspError::Unavailable {
            reason: UnavailableReason::BinaryNotFound,
            message: format!(
                "{}executable `{}` not found; searched {searched}",
                if self.name.is_empty() {
                    String::new()
                } else {
                    format!("{}: ", self.name)
                },
                self.command
            ),
        };
        if self.command.is_empty() {
            return Err(not_found("nothing (empty command)".into()));
        }
        if self.command.contains('/') {
            let p = PathBuf::from(&self.command);
            return if is_executable(&p) {
                Ok(p)
            } else {
                Err(not_found(format!("the path {}", p.display())))
            };
        }
        let path_var = self
            .env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        let dirs: Vec<PathBuf> = std::env::split_paths(&path_var).collect();
        for dir in &dirs {
            let candidate = dir.join(&self.command);
            if is_executable(&candidate) {
                return Ok(candidate);
            }
        }
        let listed: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
        Err(not_found(format!("PATH: {}", listed.join(":"))))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Limits and timings of the client. Defaults suit an interactive agent.
#[derive(Debug, Clone, PartialEq)]
pub struct ClientOptions {
    /// How long a query waits for a loading server before `LSP_NOT_READY`.
    pub ready_timeout: Duration,
    /// Per-request limit; on expiry the request is cancelled (`LSP_TIMEOUT`).
    pub request_timeout: Duration,
    /// How often a server per root may be restarted after dying before
    /// queries get `crashed`.
    pub restart_budget: u32,
    /// Retries of a `ContentModified` answer before the server is restarted.
    pub content_modified_retries: u32,
    /// The most documents kept open per server (least recently used closed).
    pub max_open_documents: usize,
    /// The most lines of a definition's body returned.
    pub max_body_lines: u32,
    /// Watch each root and forward `workspace/didChangeWatchedFiles`.
    pub watch_files: bool,
    /// How long `shutdown` waits for the server to answer and exit.
    pub shutdown_grace: Duration,
}

impl Default for ClientOptions {
    fn default() -> Self {
        ClientOptions {
            ready_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(15),
            restart_budget: 3,
            content_modified_retries: 4,
            max_open_documents: 64,
            max_body_lines: 40,
            watch_files: true,
            shutdown_grace: Duration::from_secs(2),
        }
    }
}

/// Every configured server plus the client options: what the host builds
/// from its config file.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LspConfig {
    /// Configured servers by name (`[lsp.servers.NAME]`).
    pub servers: BTreeMap<String, ServerConfig>,
    /// Client options shared by all servers.
    pub options: ClientOptions,
}
