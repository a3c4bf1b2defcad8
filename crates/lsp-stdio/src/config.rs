//! Plain configuration: one [`ServerConfig`] per language server, the
//! client's [`ClientOptions`], and the [`LanguagePreset`]s (the built-in
//! ones are data, read in [`crate::spec`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_seam::{LspError, UnavailableReason};
use serde::Deserialize;
use serde_json::Value;

/// How a server's project root is found from a file (in data:
/// `"nearest-marker"`, `"cargo-workspace"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum RootStrategy {
    /// The nearest ancestor directory holding any root marker.
    #[default]
    NearestMarker,
    /// Cargo's rule: the outermost `Cargo.toml` with a `[workspace]`
    /// table, else the nearest `Cargo.toml`.
    CargoWorkspace,
}

/// How the client knows that a server has finished loading: what proves
/// that its answers are complete. In data: `"progress"`, `"server-status"`,
/// `{ progress-ended = "TITLE" }`, `{ log-message = ["TEXT", ...] }`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReadinessSignal {
    /// Ready after `initialized` once no `$/progress` is active (servers
    /// that load nothing ahead of a query, such as pylsp).
    #[default]
    Progress,
    /// rust-analyzer's `experimental/serverStatus`: ready on a
    /// `quiescent` false→true transition.
    ServerStatus,
    /// Ready once a `$/progress` whose title contains this text has begun
    /// and ended, and no progress is active: clangd's `indexing`, gopls's
    /// `Setting up workspace`, typescript-language-server's `Initializing
    /// JS/TS language features`.
    ProgressEnded(String),
    /// Ready once the server logged (`window/logMessage`) a line
    /// containing one of these texts, and no progress is active:
    /// pyright's `Found N source files` once its file list is complete.
    LogMessage(Vec<String>),
}

/// The `$/progress` a server reports for the diagnosis each document
/// notification starts, and ends once that diagnosis is published (gopls
/// with `verboseWorkDoneProgress`): the proof that what it published for a
/// document is for the content sent, for a server whose publications do
/// not always name the version (see the server's `fresh_diagnostics`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DiagnosisProgress {
    /// The start of every such title: progress with it is the server's
    /// diagnosis, never counted as loading (a server diagnosing an edit
    /// is ready for the other queries).
    pub prefix: String,
    /// The title of the progress a `textDocument/didOpen` begins.
    pub opened: String,
    /// The title of the progress a `textDocument/didChange` begins.
    pub changed: String,
}

/// Picks the server to start for one project root: given the configured
/// server and the root, it returns the configuration to start there (see
/// [`ServerConfig::per_root`]). A preset uses it when the right server
/// depends on the project, as TypeScript's does: TypeScript 7 and later
/// have a language server of their own, earlier versions are served by
/// typescript-language-server.
#[derive(Clone)]
pub struct PerRoot(Arc<ChooseFn>);

/// The function of a [`PerRoot`]: (configured server, root) → the server
/// to start there.
type ChooseFn = dyn Fn(&ServerConfig, &Path) -> ServerConfig + Send + Sync;

impl PerRoot {
    /// A hook calling `choose(config, root)`.
    pub fn new(
        choose: impl Fn(&ServerConfig, &Path) -> ServerConfig + Send + Sync + 'static,
    ) -> PerRoot {
        PerRoot(Arc::new(choose))
    }
}

impl std::fmt::Debug for PerRoot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PerRoot(..)")
    }
}

impl PartialEq for PerRoot {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// One stdio language server, as the client runs it: a
/// [`crate::ServerSpec`] (a user's `[lsp.servers.NAME]` or a built-in
/// preset) with its name and its per-root hook resolved
/// ([`crate::ServerSpec::to_config`]); every field but `command` and
/// `extensions` may stay default.
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
    /// After re-sending a file that changed on disk, wait until the
    /// server published diagnostics for that version before answering
    /// (clangd updates its index of open files then).
    pub wait_for_diagnostics: bool,
    /// Outline (for a definition's body) only documents already open: a
    /// definition in a file the server does not have open gets its body
    /// from a C-family scan of the file's text instead
    /// ([`crate::text::c_construct_end`]). For clangd, which outlines only
    /// open documents, and which parses a header opened on its own without
    /// the macros of the file that includes it; its index of that open
    /// header then replaces the background index's (uses in a section the
    /// includer enables go missing from later `references`).
    pub outline_open_only: bool,
    /// The server follows `workspace/didChangeWatchedFiles` for files it
    /// has not opened: a file the watcher saw change is re-sent only when
    /// it is open, never opened for the change. Otherwise (the default) it
    /// is opened with its disk text, for servers that answer from a stale
    /// view of a file they have not opened. TypeScript 7's server needs
    /// this: it makes a project of every open file, so opening the output
    /// of a build (`out/**/*.js`) put the build's copies into later
    /// `references`.
    pub follows_watched_files: bool,
    /// One line for `LSP_UNAVAILABLE` messages: how to install the server
    /// and which config key overrides it.
    pub install_hint: Option<String>,
    /// Why a file with no root marker has no project (added to
    /// `no_project`), e.g. how to make a `compile_commands.json`.
    pub no_project_hint: Option<String>,
    /// Error messages by which the server says "nothing at this position"
    /// (gopls: `no identifier found`): once it is ready, they are an
    /// honest empty answer, not an error.
    pub nothing_here_errors: Vec<String>,
    /// The server reports each document notification's diagnosis as
    /// progress (see [`DiagnosisProgress`]); its initialization options
    /// turn that on. `None`: diagnostics are proven by version.
    pub diagnosis_progress: Option<DiagnosisProgress>,
    /// Chooses the server per project root: when set, each server is
    /// started from what it returns for its root (the routing fields —
    /// `extensions`, `root_markers`, `root_strategy`, `require_root` —
    /// stay this config's). `None`: this config as it is.
    pub per_root: Option<PerRoot>,
}

impl ServerConfig {
    /// The configuration to start for the project at `root`: what the
    /// [`ServerConfig::per_root`] hook chooses, else this one.
    pub fn for_root(&self, root: &Path) -> ServerConfig {
        let mut chosen = match &self.per_root {
            Some(PerRoot(choose)) => choose(self, root),
            None => self.clone(),
        };
        chosen.per_root = None;
        chosen
    }

    /// This configuration for a server of the project at `root` that may
    /// write only inside `writable` (a directory below `root`, or `root`
    /// itself): a build directory the configuration puts in the project
    /// (rust-analyzer's `cargo.targetDir = true`, `target/rust-analyzer`
    /// of the root) is moved into `writable`, where the server can
    /// build.
    pub fn writing_within(mut self, root: &Path, writable: &Path) -> ServerConfig {
        if writable == root {
            return self;
        }
        let target = build_dir_within(writable);
        self.replace_target_dir(|dir| *dir == Value::Bool(true), &target);
        self
    }

    /// This configuration building in `dir`, a directory out of the
    /// project the server's sandbox lets it write (see
    /// [`crate::Confined::build_dir`]): a build directory the
    /// configuration puts in the project (`cargo.targetDir = true`, or
    /// where [`ServerConfig::writing_within`] moved it for `writable`)
    /// becomes `dir`. A directory the configuration names otherwise is
    /// kept.
    pub fn building_in(mut self, writable: &Path, dir: &Path) -> ServerConfig {
        let moved = Value::String(build_dir_within(writable).display().to_string());
        self.replace_target_dir(|d| *d == Value::Bool(true) || *d == moved, dir);
        self
    }

    /// Sets rust-analyzer's `cargo.targetDir`, in the initialization
    /// options and the served settings, to `dir` where `which` holds.
    fn replace_target_dir(&mut self, which: impl Fn(&Value) -> bool, dir: &Path) {
        let target = Value::String(dir.display().to_string());
        let options = self.initialization_options.iter_mut();
        let settings = self
            .settings
            .iter_mut()
            .filter_map(|s| s.get_mut("rust-analyzer"));
        for options in options.chain(settings) {
            if let Some(found) = options.pointer_mut("/cargo/targetDir")
                && which(found)
            {
                *found = target.clone();
            }
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
        let not_found = |searched: String| match (not_found(searched), &self.install_hint) {
            (LspError::Unavailable { reason, message }, Some(hint)) => LspError::Unavailable {
                reason,
                message: format!("{message}. {hint}"),
            },
            (e, _) => e,
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
        if let Some(found) = self.find_on_path(&self.command) {
            return Ok(found);
        }
        let listed: Vec<String> = self
            .path_dirs()
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        Err(not_found(format!("PATH: {}", listed.join(":"))))
    }

    /// The directories searched for a command: the `env` `PATH` if given,
    /// else the process's.
    fn path_dirs(&self) -> Vec<PathBuf> {
        let path_var = self
            .env
            .get("PATH")
            .cloned()
            .or_else(|| std::env::var("PATH").ok())
            .unwrap_or_default();
        std::env::split_paths(&path_var).collect()
    }

    /// The first executable `program` in [`ServerConfig::path_dirs`].
    pub(crate) fn find_on_path(&self, program: &str) -> Option<PathBuf> {
        self.path_dirs()
            .into_iter()
            .map(|dir| dir.join(program))
            .find(|candidate| is_executable(candidate))
    }
}

/// Where a server whose writes are bounded to `writable` builds when no
/// build directory is given: `target/rust-analyzer` there.
pub(crate) fn build_dir_within(writable: &Path) -> PathBuf {
    writable.join("target").join("rust-analyzer")
}

pub(crate) fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// A built-in language: the servers that can serve it, in order of
/// preference; the first whose binary is on `PATH` is used.
#[derive(Debug, Clone, PartialEq)]
pub struct LanguagePreset {
    /// The language, for messages (`Python`, `C/C++`, ...).
    pub language: String,
    /// Candidate servers, preferred first; all claim the same extensions.
    pub servers: Vec<ServerConfig>,
}

impl LanguagePreset {
    /// The extensions every candidate claims.
    pub fn extensions(&self) -> Vec<String> {
        self.servers
            .first()
            .map(|s| s.extensions.keys().cloned().collect())
            .unwrap_or_default()
    }

    /// The first candidate whose binary is found, else the first one (whose
    /// queries then answer `binary_not_found` with the install hint).
    pub fn choose(&self) -> Option<ServerConfig> {
        self.servers
            .iter()
            .find(|s| s.resolve_command().is_ok())
            .or(self.servers.first())
            .cloned()
    }
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
    /// A server with no query for this long is stopped cleanly (and
    /// started again by the next query); `None` keeps servers running.
    pub idle_stop: Option<Duration>,
    /// The most language servers running at once across every provider
    /// sharing a pool; starting one more stops the least recently used.
    pub max_servers: usize,
    /// The largest file a query reads; a bigger one is refused.
    pub max_file_bytes: u64,
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
            idle_stop: Some(Duration::from_secs(600)),
            max_servers: 8,
            max_file_bytes: 4 << 20,
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn target_dirs(config: &ServerConfig) -> Vec<Value> {
        let options = config.initialization_options.iter();
        let settings = config
            .settings
            .iter()
            .filter_map(|s| s.get("rust-analyzer"));
        options
            .chain(settings)
            .filter_map(|o| o.pointer("/cargo/targetDir").cloned())
            .collect()
    }

    #[test]
    fn rust_analyzer_builds_where_its_sandbox_lets_it() {
        let preset = ServerConfig::preset("rust-analyzer").unwrap();
        let (root, below, build) = (
            Path::new("/w/mono"),
            Path::new("/w/mono/svc"),
            Path::new("/s/dsh/lsp-build/svc-1"),
        );
        assert_eq!(target_dirs(&preset), [Value::Bool(true), Value::Bool(true)]);
        // Its project root writable: the preset's `target/rust-analyzer`.
        assert_eq!(
            target_dirs(&preset.clone().writing_within(root, root)),
            [Value::Bool(true), Value::Bool(true)]
        );
        // Only a directory below it writable: the build moves there.
        let within = preset.clone().writing_within(root, below);
        let moved = Value::String("/w/mono/svc/target/rust-analyzer".into());
        assert_eq!(target_dirs(&within), [moved.clone(), moved]);
        // A build directory from the host wins over both.
        let built = Value::String(build.display().to_string());
        for config in [preset.clone(), within] {
            assert_eq!(
                target_dirs(&config.building_in(below, build)),
                [built.clone(), built.clone()]
            );
        }
        // A directory a user named is theirs.
        let mut named = preset;
        for options in named.initialization_options.iter_mut() {
            *options.pointer_mut("/cargo/targetDir").unwrap() = Value::String("/mine".into());
        }
        assert_eq!(
            target_dirs(&named.building_in(below, build))[0],
            Value::String("/mine".into())
        );
    }
}
