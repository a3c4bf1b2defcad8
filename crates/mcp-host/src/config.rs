//! The host's TOML config file, and what the host takes of it
//! ([`HostConfig`]).
//!
//! Every key is optional; an absent default file means defaults. Unknown
//! keys and wrong types are errors that name the file, the line and the
//! key, on one line. It lives with the daemon, which reads it at start-up,
//! reads each connection's file ([`load_host`]) and reads them all again
//! on a reload.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tools_catalog::{JobsConfig, Preset, Settings, SubagentSettings};
pub use ui::UiSettings;

#[macro_use]
mod keys;
pub use keys::KeyDoc;

config_section! {
    /// The whole config file.
    pub struct Config {
        /// The preset `dsh mcp` serves when `--preset` is not given (not
        /// set: every tool).
        #[serde(deserialize_with = "preset")]
        preset: Option<Preset> = None,
        /// Limits of the tools.
        limits: Limits = Limits::default(),
        /// The agent command behind the `subagent` tool; without it,
        /// `subagent` answers `SUBAGENT_UNAVAILABLE`.
        subagent: Option<SubagentConfig> = None,
        /// Language servers beyond the built-in ones.
        lsp: LspConfig = LspConfig::default(),
        /// Where the server logs.
        log: LogConfig = LogConfig::default(),
        /// What commands, terminals, subagents and language servers may
        /// write, read and reach. The lists replace the defaults (they are
        /// not added to them): a `deny_read` that leaves out `~/.ssh` makes
        /// it readable.
        sandbox: SandboxConfig = SandboxConfig::default(),
        /// The environment they start with.
        env: EnvConfig = EnvConfig::default(),
        /// The per-user daemon.
        daemon: DaemonConfig = DaemonConfig::default(),
        /// The local web page (`dsh ui`).
        ui: UiConfig = UiConfig::default(),
    }
}

config_section! {
    /// `[ui]`.
    pub struct UiConfig {
        /// The page's port; 0 picks a free one.
        port: u16 = 0,
        /// The address to listen on instead of 127.0.0.1 (an IP address such
        /// as `0.0.0.0`); anything but loopback exposes the page to the
        /// network, still behind its token, and is logged loudly.
        listen: Option<std::net::IpAddr> = None,
    }
}

config_section! {
    /// `[daemon]`.
    pub struct DaemonConfig {
        /// With no connection, terminal or job for this long the daemon exits
        /// (`"10m"`, `"30s"`, `"1h 30m"`).
        #[serde(deserialize_with = "duration")]
        idle_exit: Duration = Duration::from_secs(600),
        /// How long an agent's terminals and jobs outlive its client: kept
        /// detached for the agent to take back with its resume key, then
        /// ended (`"0s"`: ended with the connection).
        #[serde(deserialize_with = "duration")]
        detach_grace: Duration = Duration::from_secs(600),
    }
}

/// A preset name as written in the config file (see [`Preset::from_name`]).
fn preset<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Preset>, D::Error> {
    const NAMES: &[&str] = &[Preset::Minimal.name(), Preset::Full.name()];
    let name = String::deserialize(d)?;
    match Preset::from_name(&name) {
        Some(preset) => Ok(Some(preset)),
        None => Err(serde::de::Error::unknown_variant(&name, NAMES)),
    }
}

config_section! {
    /// `[limits]`.
    pub struct Limits {
        /// Largest text a tool result carries before head+tail truncation
        /// (at least 1024).
        max_result_bytes: usize = Settings::default().max_result_bytes => |v| {
            if *v < 1024 {
                return Err(format!("must be at least 1024, got {v}"));
            }
            Ok(())
        },
        /// Background jobs one agent may have running at once.
        max_running_jobs: usize = JobsConfig::default().max_running_per_owner,
        /// Foreground `bash` and `subagent` calls one agent may have running
        /// at once (at least 1).
        max_foreground_commands: usize = JobsConfig::default().max_foreground_per_owner => |v| {
            if *v == 0 {
                return Err("must be at least 1 (0 would refuse every bash call)".into());
            }
            Ok(())
        },
        /// Settled jobs kept per agent (oldest evicted first).
        max_settled_jobs: usize = JobsConfig::default().max_settled_per_owner,
        /// Output kept per job, in bytes (the newest is kept).
        job_output_bytes: usize = JobsConfig::default().output_ring_bytes,
        /// Terminals one agent may have open at once.
        max_terminals: usize = terminal_pty::TerminalConfig::default().max_terminals_per_owner,
        /// Scrollback kept per terminal, in bytes.
        terminal_scrollback_bytes: usize = terminal_pty::TerminalConfig::default().scrollback_bytes,
    }
}

config_section! {
    /// `[subagent]`.
    pub struct SubagentConfig without Default {
        /// The argv; `{prompt}` is replaced by the prompt (without it, the
        /// prompt goes to stdin).
        command: Vec<String> => |command| {
            if command.is_empty() {
                return Err(
                    "must name a program, e.g. [\"my-agent\", \"--print\", \"{prompt}\"]".into(),
                );
            }
            Ok(())
        },
        /// Default time limit of a run, in milliseconds (1 to 3600000).
        #[serde(default)]
        timeout_ms: Option<u64> = None => |timeout| match timeout {
            Some(t) if !(1..=3_600_000).contains(t) => {
                Err(format!("must be from 1 to 3600000 (one hour), got {t}"))
            }
            _ => Ok(()),
        },
    }
}

config_section! {
    /// `[lsp]`.
    pub struct LspConfig {
        /// A language server with no query for this long stops (and starts
        /// again on the next query), e.g. `"10m"`; `"0s"` never stops one.
        #[serde(deserialize_with = "duration")]
        idle_stop: Duration = lsp_stdio::ClientOptions::default()
            .idle_stop
            .unwrap_or_default(),
        /// Start the language servers of a session's directory when it
        /// connects, ahead of its first query.
        eager: bool = true,
        /// The most language servers running at once; one more stops the
        /// least recently used.
        max_servers: usize = lsp_stdio::ClientOptions::default().max_servers,
        /// The largest file a language-server query reads, in bytes.
        max_file_bytes: u64 = lsp_stdio::ClientOptions::default().max_file_bytes,
        /// `[lsp.servers.NAME]`: one table per server.
        servers: BTreeMap<String, LspServerConfig> = BTreeMap::new(),
    }
}

/// A duration written as `"10m"`, `"90s"`, `"1h 30m"`.
fn duration<'de, D: serde::Deserializer<'de>>(d: D) -> Result<std::time::Duration, D::Error> {
    let text = String::deserialize(d)?;
    humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!(
            "{e}: write a duration such as \"10m\", \"90s\" or \"1h 30m\""
        ))
    })
}

/// One `[lsp.servers.NAME]` table: the schema of the built-in presets too.
pub use lsp_stdio::ServerSpec as LspServerConfig;

/// The reference names `[lsp.servers.NAME]` tables and points to where
/// their keys are described.
impl keys::ConfigValue for BTreeMap<String, LspServerConfig> {
    fn toml_type() -> String {
        "tables, one per server (their keys: [lsp.md](subsystems/lsp.md#configuration))".to_owned()
    }

    fn to_toml(&self) -> Option<toml::Value> {
        self.is_empty()
            .then(|| toml::Value::Table(toml::Table::new()))
    }
}

config_section! {
    /// `[log]`.
    pub struct LogConfig {
        /// Also append the log to this file.
        file: Option<PathBuf> = None,
        /// A `tracing` filter such as `info` or `dsh=debug` (the `DSH_LOG`
        /// environment variable wins).
        level: Option<String> = None,
        /// Keep the commands of `bash` calls (and the prompts of `subagent`
        /// calls, the argv of `terminal_open`) in the session log; `false`
        /// records only their length.
        commands: bool = true,
    }
}

config_section! {
    /// `[sandbox]`. The lists replace the defaults (they are not added to
    /// them): a `deny_read` that leaves out `~/.ssh` makes it readable.
    pub struct SandboxConfig {
        /// What a sandboxed process may write: the workspace, the temp dir and
        /// the caches (`workspace-write`), the temp dir only (`read-only`), or
        /// anything (`off`: no sandbox).
        mode: SandboxMode = SandboxMode::WorkspaceWrite,
        /// Writable paths besides the workspace root and the temp dir
        /// (workspace-write only); absolute or `~/…`.
        writable: Vec<String> = sandbox::SandboxPolicy::default().writable,
        /// Let `.git` at the top of the workspace be written.
        git_writable: bool = sandbox::SandboxPolicy::default().git_writable,
        /// Paths no sandboxed process may read or write; absolute or `~/…`.
        deny_read: Vec<String> = sandbox::SandboxPolicy::default().deny_read,
        /// Let TCP/UDP connections leave the sandbox.
        network: bool = sandbox::SandboxPolicy::default().network,
        /// Unix sockets (or directories of them) of the host's programs that
        /// stay reachable; absolute or `~/…`. By default the known ones are
        /// hidden (the session bus, tmux, screen, X, Docker, the system bus,
        /// the ssh agent).
        unix_sockets: Vec<String> = sandbox::SandboxPolicy::default().unix_sockets,
        /// Refuse to run anything (`SANDBOX_UNAVAILABLE`) when the kernel
        /// cannot enforce the above.
        required: bool = sandbox::SandboxPolicy::default().required,
    }
}

/// A sandbox mode as written in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum SandboxMode {
    /// Writes in the workspace, the temp dir and the caches.
    WorkspaceWrite,
    /// Writes in the temp dir only.
    ReadOnly,
    /// No sandbox.
    Off,
}

impl SandboxMode {
    /// Every mode, in the order the reference lists them.
    pub const ALL: [SandboxMode; 3] = [Self::WorkspaceWrite, Self::ReadOnly, Self::Off];
}

named_value!(SandboxMode);

config_section! {
    /// `[env]`.
    pub struct EnvConfig {
        /// `all`, `core` or `none` of the server's environment.
        inherit: EnvInherit = EnvInherit::All,
        /// Keep names matching `*KEY*`, `*SECRET*`, `*TOKEN*`, `*PASSWORD*`.
        ignore_default_excludes: bool = false,
        /// More name patterns to drop (added to the default excludes).
        exclude: Vec<String> = Vec::new(),
        /// When not empty, keep only names matching one of these patterns.
        include_only: Vec<String> = Vec::new(),
        /// Variables set last.
        set: BTreeMap<String, String> = BTreeMap::new(),
    }
}

/// `[env] inherit` as written in the config file.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EnvInherit {
    /// Everything.
    #[default]
    All,
    /// The core set (`PATH`, `HOME`, `USER`, `LANG`, `LC_*`, …).
    Core,
    /// Nothing.
    None,
}

impl EnvInherit {
    /// Every choice, in the order the reference lists them.
    pub const ALL: [EnvInherit; 3] = [Self::All, Self::Core, Self::None];
}

named_value!(EnvInherit);

/// Every key of the config file, in the order declared: a section's row,
/// then its keys' (the rows `docs/config.md` is written from).
pub fn reference() -> Vec<KeyDoc> {
    let mut rows = Vec::new();
    <Config as keys::ConfigValue>::rows("", None, false, "", &mut rows);
    rows.retain(|r| !r.key.is_empty());
    rows
}

/// The reference of every key, its type, default and doc, as Markdown
/// (`docs/config.md`, written by `cargo xtask codegen`).
pub fn reference_markdown() -> String {
    keys::markdown(&reference())
}

impl Config {
    /// The `[sandbox]` policy.
    pub fn sandbox_policy(&self) -> sandbox::SandboxPolicy {
        let s = &self.sandbox;
        sandbox::SandboxPolicy {
            mode: match s.mode {
                SandboxMode::WorkspaceWrite => sandbox::Mode::WorkspaceWrite,
                SandboxMode::ReadOnly => sandbox::Mode::ReadOnly,
                SandboxMode::Off => sandbox::Mode::Off,
            },
            writable: s.writable.clone(),
            git_writable: s.git_writable,
            deny_read: s.deny_read.clone(),
            network: s.network,
            unix_sockets: s.unix_sockets.clone(),
            required: s.required,
        }
    }

    /// The `[env]` policy.
    pub fn env_policy(&self) -> sandbox::EnvPolicy {
        let e = &self.env;
        sandbox::EnvPolicy {
            inherit: match e.inherit {
                EnvInherit::All => sandbox::Inherit::All,
                EnvInherit::Core => sandbox::Inherit::Core,
                EnvInherit::None => sandbox::Inherit::None,
            },
            ignore_default_excludes: e.ignore_default_excludes,
            exclude: e.exclude.clone(),
            include_only: e.include_only.clone(),
            set: e.set.clone(),
        }
    }

    /// The tool settings this config asks for.
    pub fn settings(&self) -> Settings {
        Settings {
            max_result_bytes: self.limits.max_result_bytes,
            subagent: self.subagent.as_ref().map(|s| SubagentSettings {
                command: s.command.clone(),
                timeout_ms: s.timeout_ms,
            }),
        }
    }

    /// The language servers the file configures, and the client's bounds;
    /// the built-in languages (`lsp_stdio`'s presets file) serve the
    /// extensions none of them claims (see `lsp_stdio::build_router`).
    pub fn lsp(&self) -> lsp_stdio::LspConfig {
        let servers = self
            .lsp
            .servers
            .iter()
            .map(|(name, s)| (name.clone(), s.to_config(name)))
            .collect();
        lsp_stdio::LspConfig {
            servers,
            options: lsp_stdio::ClientOptions {
                idle_stop: (!self.lsp.idle_stop.is_zero()).then_some(self.lsp.idle_stop),
                max_servers: self.lsp.max_servers.max(1),
                max_file_bytes: self.lsp.max_file_bytes,
                ..lsp_stdio::ClientOptions::default()
            },
        }
    }

    /// The terminal service's limits (fixed for the life of the process).
    pub fn terminals(&self) -> terminal_pty::TerminalConfig {
        terminal_pty::TerminalConfig {
            max_terminals_per_owner: self.limits.max_terminals,
            scrollback_bytes: self.limits.terminal_scrollback_bytes,
            max_result_bytes: self.limits.max_result_bytes,
            ..terminal_pty::TerminalConfig::default()
        }
    }

    /// What the host (a daemon or a standalone server) needs.
    pub fn host(&self) -> HostConfig {
        HostConfig {
            preset: self.preset,
            settings: self.settings(),
            jobs: self.jobs(),
            terminals: self.terminals(),
            lsp: self.lsp(),
            log: (self.log.file.clone(), self.log.level.clone()),
            log_commands: self.log.commands,
            lsp_eager: self.lsp.eager,
            idle_exit: self.daemon.idle_exit,
            detach_grace: self.daemon.detach_grace,
            sandbox: self.sandbox_policy(),
            env: self.env_policy(),
            private_dirs: default_path()
                .and_then(|p| p.parent().map(std::path::Path::to_path_buf))
                .into_iter()
                .collect(),
            repl_state: repl_state_dir(),
            ui: UiSettings {
                port: self.ui.port,
                listen: self.ui.listen,
            },
        }
    }

    /// The job registry's limits (fixed for the life of the process).
    pub fn jobs(&self) -> JobsConfig {
        JobsConfig {
            max_running_per_owner: self.limits.max_running_jobs,
            max_foreground_per_owner: self.limits.max_foreground_commands,
            max_settled_per_owner: self.limits.max_settled_jobs,
            output_ring_bytes: self.limits.job_output_bytes,
            default_read_bytes: self.limits.max_result_bytes,
        }
    }
}

/// What the host needs from the config file.
#[derive(Debug, Clone, PartialEq)]
pub struct HostConfig {
    /// The preset served when the client names none.
    pub preset: Option<Preset>,
    /// The tools' settings (result limit, subagent command).
    pub settings: Settings,
    /// The job registry's limits (fixed for the host's life).
    pub jobs: JobsConfig,
    /// The terminal service's limits (fixed for the host's life).
    pub terminals: terminal_pty::TerminalConfig,
    /// The language servers (fixed for the host's life).
    pub lsp: lsp_stdio::LspConfig,
    /// The log's file and filter (fixed for the host's life).
    pub log: (Option<PathBuf>, Option<String>),
    /// Whether the session log keeps commands, prompts and argv (`[log]
    /// commands`; per connection).
    pub log_commands: bool,
    /// Whether a session's language servers start when it connects (`[lsp]
    /// eager`; fixed for the host's life).
    pub lsp_eager: bool,
    /// How long a daemon with no connection, terminal or job waits before
    /// it exits.
    pub idle_exit: Duration,
    /// How long a connection's terminals and jobs are kept detached after
    /// its client went away (zero: ended with it).
    pub detach_grace: Duration,
    /// The sandbox of every process started for a model (`[sandbox]`;
    /// per connection, hot-reloadable; language servers keep theirs until
    /// the host restarts).
    pub sandbox: tools_catalog::sandbox::SandboxPolicy,
    /// The environment policy of those processes (`[env]`; as `sandbox`).
    pub env: tools_catalog::sandbox::EnvPolicy,
    /// Directories of the host that no sandboxed process may read or
    /// write (its config directory); the host adds its data and runtime
    /// directories.
    pub private_dirs: Vec<PathBuf>,
    /// Where confined commands' REPLs and shells keep their history and
    /// profiles, one directory per workspace (`$XDG_STATE_HOME/dsh/repl`);
    /// `None`: they get none.
    pub repl_state: Option<PathBuf>,
    /// Where the `dsh ui` page listens (fixed for the host's life).
    pub ui: UiSettings,
}

impl HostConfig {
    /// The keys that take effect only when the host restarts and differ
    /// between `self` and `other`.
    pub fn fixed_differences(&self, other: &HostConfig) -> Vec<&'static str> {
        let fixed = [
            (
                "lsp",
                self.lsp != other.lsp || self.lsp_eager != other.lsp_eager,
            ),
            ("log", self.log != other.log),
            (
                "limits (jobs, terminals)",
                self.jobs != other.jobs || self.terminals != other.terminals,
            ),
            (
                "daemon",
                self.idle_exit != other.idle_exit || self.detach_grace != other.detach_grace,
            ),
            (
                "sandbox and env of running language servers",
                self.sandbox != other.sandbox || self.env != other.env,
            ),
            ("ui", self.ui != other.ui),
        ];
        fixed.iter().filter(|(_, c)| *c).map(|(k, _)| *k).collect()
    }
}

/// A config file that could not be used; displays on one line as
/// `FILE:LINE: KEY: what is wrong`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("config error: {}{}: {}{}", path.display(), line.map(|l| format!(":{l}")).unwrap_or_default(), key.as_ref().map(|k| format!("{k}: ")).unwrap_or_default(), message)]
pub struct ConfigError {
    /// The file.
    pub path: PathBuf,
    /// The 1-based line, when known.
    pub line: Option<usize>,
    /// The dotted key, when known.
    pub key: Option<String>,
    /// What is wrong.
    pub message: String,
}

/// Where confined REPLs keep their state: `$XDG_STATE_HOME/dsh/repl`
/// (`~/.local/state/dsh/repl` by default).
pub fn repl_state_dir() -> Option<PathBuf> {
    dirs::state_dir().map(|d| d.join("dsh").join("repl"))
}

/// The default config file: `$XDG_CONFIG_HOME/dsh/config.toml`.
pub fn default_path() -> Option<PathBuf> {
    dirs::config_dir().map(|d| d.join("dsh").join("config.toml"))
}

/// Loads the config: from `explicit` (which must exist), else from the
/// default location if a file is there, else defaults.
pub fn load(explicit: Option<&Path>) -> Result<(Config, Option<PathBuf>), ConfigError> {
    let path = match explicit {
        Some(p) => p.to_path_buf(),
        None => match default_path() {
            Some(p) if p.exists() => p,
            _ => return Ok((Config::default(), None)),
        },
    };
    let text = std::fs::read_to_string(&path).map_err(|e| ConfigError {
        path: path.clone(),
        line: None,
        key: None,
        message: format!("cannot read: {e}"),
    })?;
    let config = parse(&path, &text)?;
    Ok((config, Some(path)))
}

/// What `dsh config` says of the config file [`load`] reads from
/// `explicit` (else the default location): which file was read, or that
/// there is none and every key takes its default; an error as [`load`].
pub fn check(explicit: Option<&Path>) -> Result<String, ConfigError> {
    let (_, path) = load(explicit)?;
    Ok(match (path, default_path()) {
        (Some(path), _) => format!("config: {}: ok\n", path.display()),
        (None, Some(default)) => format!(
            "config: no file at {}: every key takes its default\n",
            default.display()
        ),
        (None, None) => "config: no config directory: every key takes its default\n".to_owned(),
    })
}

/// What the host needs of the config file at `path` (`None`: the
/// defaults); the error is one line. A daemon reads a connection's file
/// with it, and every connection's file again on a reload.
pub fn load_host(path: Option<&Path>) -> Result<HostConfig, String> {
    let loaded = match path {
        Some(p) => load(Some(p)),
        None => Ok((Config::default(), None)),
    };
    loaded.map(|(c, _)| c.host()).map_err(|e| e.to_string())
}

/// Parses config text; `path` is only for messages.
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let line_of = |span: Option<std::ops::Range<usize>>| {
        span.map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1)
    };
    let deserializer = toml::de::Deserializer::parse(text).map_err(|e| ConfigError {
        path: path.to_path_buf(),
        line: line_of(e.span()),
        key: None,
        message: e.message().trim().to_owned(),
    })?;
    let config: Config = serde_path_to_error::deserialize(deserializer).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        ConfigError {
            path: path.to_path_buf(),
            line: line_of(inner.span()),
            key: (key != ".").then_some(key),
            message: inner.message().trim().replace('\n', " "),
        }
    })?;
    if let Err(e) = lsp_stdio::build_router(&config.lsp()) {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: line_of_path(text, &["lsp", "servers"]),
            key: Some("lsp.servers".into()),
            message: e.to_string(),
        });
    }
    if let Err(e) = keys::ConfigValue::check(&config, "") {
        let parts: Vec<&str> = e.key.split('.').collect();
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: line_of_path(text, &parts),
            key: Some(e.key),
            message: e.message,
        });
    }
    if let Err(e) = config.sandbox_policy().validate() {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: line_of_path(text, &["sandbox", e.field]),
            key: Some(format!("sandbox.{}", e.field)),
            message: e.message,
        });
    }
    if let Err(e) = config.env_policy().validate() {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: line_of_path(text, &["env", e.field]),
            key: Some(format!("env.{}", e.field)),
            message: e.message,
        });
    }
    Ok(config)
}

/// The 1-based line where the key at `path` (`["subagent", "timeout_ms"]`)
/// is written in `text`, from the parser's spans (a dotted key, an inline
/// table or a `[table]` header alike); `None` when it is not written.
fn line_of_path(text: &str, path: &[&str]) -> Option<usize> {
    let document = toml::de::DeTable::parse(text).ok()?;
    let mut table = document.get_ref();
    let mut start = None;
    for (depth, part) in path.iter().enumerate() {
        let (key, value) = table.iter().find(|(k, _)| k.get_ref().as_ref() == *part)?;
        start = Some(key.span().start);
        if depth + 1 < path.len() {
            let toml::de::DeValue::Table(inner) = value.get_ref() else {
                return None;
            };
            table = inner;
        }
    }
    start.map(|at| text[..at.min(text.len())].matches('\n').count() + 1)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn err(text: &str) -> String {
        parse(Path::new("c.toml"), text).unwrap_err().to_string()
    }

    #[test]
    fn empty_file_is_defaults() {
        assert_eq!(parse(Path::new("c.toml"), "").unwrap(), Config::default());
    }

    #[test]
    fn full_example_parses() {
        let c = parse(
            Path::new("c.toml"),
            r#"
preset = "minimal"
[limits]
max_result_bytes = 4096
[subagent]
command = ["my-agent", "--print", "{prompt}"]
timeout_ms = 1000
[lsp.servers.pylsp]
command = "pylsp"
extensions = { ".py" = "python" }
settings = { pylsp = { plugins = { pycodestyle = { enabled = false } } } }
"#,
        )
        .unwrap();
        assert_eq!(c.preset, Some(Preset::Minimal));
        assert_eq!(c.limits.max_result_bytes, 4096);
        assert_eq!(c.lsp.servers["pylsp"].extensions[".py"], "python");
    }

    #[test]
    fn a_checked_value_names_the_line_it_is_written_on_in_any_form() {
        // A `[table]` header, a dotted key, an inline table: the line comes
        // from the parser, not from searching the text.
        assert!(
            err("# a comment naming timeout_ms\n[subagent]\ncommand = [\"a\"]\ntimeout_ms = 0\n")
                .starts_with("config error: c.toml:4: subagent.timeout_ms:")
        );
        assert!(
            err("# limits\nlimits.max_result_bytes = 10\n")
                .starts_with("config error: c.toml:2: limits.max_result_bytes:")
        );
        assert!(
            err("\nsubagent = { command = [] }\n")
                .starts_with("config error: c.toml:2: subagent.command:")
        );
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        assert_eq!(
            err("[limits]\nmax_result_bytes = 4096\nmax_results = 3\n"),
            "config error: c.toml:3: limits.max_results: unknown field `max_results`, expected one of `max_result_bytes`, `max_running_jobs`, `max_foreground_commands`, `max_settled_jobs`, `job_output_bytes`, `max_terminals`, `terminal_scrollback_bytes`"
        );
    }

    #[test]
    fn commands_are_logged_unless_turned_off() {
        assert!(Config::default().log.commands);
        assert!(
            parse(Path::new("c.toml"), "[log]\nfile = \"/tmp/x.log\"\n")
                .unwrap()
                .log
                .commands
        );
        let off = parse(Path::new("c.toml"), "[log]\ncommands = false\n").unwrap();
        assert!(!off.log.commands);
        assert_eq!(
            err("[log]\ncommands = \"no\"\n"),
            "config error: c.toml:2: log.commands: invalid type: string \"no\", expected a boolean"
        );
    }

    #[test]
    fn the_foreground_command_limit_is_read() {
        let c = parse(
            Path::new("c.toml"),
            "[limits]\nmax_foreground_commands = 3\n",
        )
        .unwrap();
        assert_eq!(c.jobs().max_foreground_per_owner, 3);
        assert_eq!(Config::default().jobs().max_foreground_per_owner, 16);
    }

    #[test]
    fn wrong_type_names_the_key() {
        assert_eq!(
            err("[limits]\n\nmax_result_bytes = \"big\"\n"),
            "config error: c.toml:3: limits.max_result_bytes: invalid type: string \"big\", expected usize"
        );
    }

    #[test]
    fn unknown_preset_is_named() {
        assert_eq!(
            err("preset = \"huge\"\n"),
            "config error: c.toml:1: preset: unknown variant `huge`, expected `minimal` or `full`"
        );
    }

    #[test]
    fn ui_takes_a_port_and_an_ip_address() {
        let c = parse(Path::new("c.toml"), "[ui]\nport = 8765\n").unwrap();
        assert_eq!(
            c.host().ui,
            UiSettings {
                port: 8765,
                listen: None
            }
        );
        let c = parse(Path::new("c.toml"), "[ui]\nlisten = \"0.0.0.0\"\n").unwrap();
        assert_eq!(
            c.host().ui.listen,
            Some(std::net::IpAddr::from([0, 0, 0, 0]))
        );
        assert_eq!(Config::default().host().ui, UiSettings::default());
        let e = err("[ui]\nlisten = \"example.com\"\n");
        assert!(e.starts_with("config error: c.toml:2: ui.listen: "), "{e}");
        let e = err("[ui]\nport = 70000\n");
        assert!(e.starts_with("config error: c.toml:2: ui.port: "), "{e}");
    }

    #[test]
    fn idle_exit_takes_a_duration() {
        let c = parse(Path::new("c.toml"), "[daemon]\nidle_exit = \"30s\"\n").unwrap();
        assert_eq!(c.daemon.idle_exit, std::time::Duration::from_secs(30));
        let c = parse(Path::new("c.toml"), "[daemon]\nidle_exit = \"10m\"\n").unwrap();
        assert_eq!(c.daemon.idle_exit, std::time::Duration::from_secs(600));
        assert_eq!(
            Config::default().daemon.idle_exit,
            std::time::Duration::from_secs(600)
        );
        let e = err("[daemon]\nidle_exit = \"soon\"\n");
        assert!(
            e.starts_with("config error: c.toml:2: daemon.idle_exit: "),
            "{e}"
        );
        assert!(e.contains("\"10m\""), "{e}");
    }

    #[test]
    fn lsp_bounds_parse_and_reach_the_client_options() {
        let c = parse(
            Path::new("c.toml"),
            "[lsp]\nidle_stop = \"90s\"\neager = false\nmax_servers = 3\nmax_file_bytes = 1000\n",
        )
        .unwrap();
        assert!(!c.lsp.eager);
        let options = c.lsp().options;
        assert_eq!(options.idle_stop, Some(std::time::Duration::from_secs(90)));
        assert_eq!((options.max_servers, options.max_file_bytes), (3, 1000));
        let never = parse(Path::new("c.toml"), "[lsp]\nidle_stop = \"0s\"\n").unwrap();
        assert_eq!(never.lsp().options.idle_stop, None);
        let defaults = Config::default().lsp().options;
        assert_eq!(
            defaults.idle_stop,
            Some(std::time::Duration::from_secs(600))
        );
        assert!(Config::default().lsp.eager);
        let e = err("[lsp]\nidle_stop = \"soon\"\n");
        assert!(
            e.starts_with("config error: c.toml:2: lsp.idle_stop: "),
            "{e}"
        );
        assert!(e.contains("\"10m\""), "{e}");
    }

    #[test]
    fn a_server_table_takes_the_keys_of_the_presets() {
        let c = parse(
            Path::new("c.toml"),
            r#"
[lsp.servers.my-ra]
command = "rust-analyzer"
extensions = { ".RS" = "rust" }
root_markers = ["Cargo.toml"]
root_strategy = "cargo-workspace"
require_root = true
readiness = "server-status"
initialization_options = { cargo = { targetDir = true } }
install_hint = "rustup component add rust-analyzer"
"#,
        )
        .unwrap();
        let server = &c.lsp().servers["my-ra"];
        assert_eq!(server.name, "my-ra");
        assert_eq!(server.extensions[".rs"], "rust");
        assert_eq!(
            server.root_strategy,
            lsp_stdio::RootStrategy::CargoWorkspace
        );
        assert!(server.require_root);
        assert_eq!(server.readiness, lsp_stdio::ReadinessSignal::ServerStatus);
        assert_eq!(
            server.initialization_options,
            Some(serde_json::json!({ "cargo": { "targetDir": true } }))
        );
        let e = err(
            "[lsp.servers.x]\ncommand = \"x\"\nextensions = { \".x\" = \"x\" }\nreadiness = \"soon\"\n",
        );
        assert!(
            e.starts_with("config error: c.toml:4: lsp.servers.x.readiness: "),
            "{e}"
        );
        assert!(e.contains("unknown variant `soon`"), "{e}");
    }

    #[test]
    fn sandbox_and_env_default_to_the_policies_defaults() {
        let c = Config::default();
        assert_eq!(c.sandbox_policy(), sandbox::SandboxPolicy::default());
        assert_eq!(c.env_policy(), sandbox::EnvPolicy::default());
    }

    #[test]
    fn sandbox_and_env_sections_parse() {
        let c = parse(
            Path::new("c.toml"),
            r#"
[sandbox]
mode = "read-only"
writable = ["~/.cache", "/opt/cache"]
git_writable = true
deny_read = ["~/.ssh"]
network = false
unix_sockets = ["/run/docker.sock"]
required = true
[env]
inherit = "core"
ignore_default_excludes = true
exclude = ["AWS_*"]
include_only = ["PATH", "LC_*"]
set = { NO_COLOR = "1" }
"#,
        )
        .unwrap();
        assert_eq!(
            c.sandbox_policy(),
            sandbox::SandboxPolicy {
                mode: sandbox::Mode::ReadOnly,
                writable: vec!["~/.cache".into(), "/opt/cache".into()],
                git_writable: true,
                deny_read: vec!["~/.ssh".into()],
                network: false,
                unix_sockets: vec!["/run/docker.sock".into()],
                required: true,
            }
        );
        assert_eq!(
            c.env_policy(),
            sandbox::EnvPolicy {
                inherit: sandbox::Inherit::Core,
                ignore_default_excludes: true,
                exclude: vec!["AWS_*".into()],
                include_only: vec!["PATH".into(), "LC_*".into()],
                set: BTreeMap::from([("NO_COLOR".to_owned(), "1".to_owned())]),
            }
        );
    }

    #[test]
    fn sandbox_and_env_errors_name_the_key_and_line() {
        assert_eq!(
            err("[sandbox]\nmode = \"danger-full-access\"\n"),
            "config error: c.toml:2: sandbox.mode: unknown variant `danger-full-access`, expected one of `workspace-write`, `read-only`, `off`"
        );
        assert_eq!(
            err("[limits]\n[sandbox]\nnetwork = false\nwritable = [\"build\"]\n"),
            "config error: c.toml:4: sandbox.writable: \"build\" must be an absolute path or start with \"~/\""
        );
        assert_eq!(
            err("[env]\nset = { \"A=B\" = \"1\" }\n"),
            "config error: c.toml:2: env.set: \"A=B\" is not a variable name"
        );
        assert_eq!(
            err("[env]\ninherit = \"some\"\n"),
            "config error: c.toml:2: env.inherit: unknown variant `some`, expected one of `all`, `core`, `none`"
        );
    }

    /// The names serde lists after "expected" for an unknown key in the
    /// table at `section` (`""`: the top level), in its order.
    fn expected_keys(section: &str) -> Vec<String> {
        let unknown = if section.is_empty() {
            "unknown_key_of_no_section = 1\n".to_owned()
        } else {
            format!("{section}.unknown_key_of_no_section = 1\n")
        };
        let e = err(&unknown);
        let (_, expected) = e.split_once("expected").unwrap();
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect()
    }

    #[test]
    fn the_reference_lists_every_key_of_every_section_in_order() {
        let rows = reference();
        let mut sections = vec![String::new()];
        sections.extend(rows.iter().filter(|r| r.section).map(|r| r.key.clone()));
        assert!(sections.len() >= 9, "{sections:?}");
        for section in sections {
            let listed: Vec<String> = rows
                .iter()
                .filter_map(|r| {
                    let (parent, name) = r.key.rsplit_once('.').unwrap_or(("", &r.key));
                    (parent == section).then(|| name.to_owned())
                })
                .collect();
            assert_eq!(listed, expected_keys(&section), "[{section}]");
        }
    }

    #[test]
    fn every_default_the_reference_shows_parses_to_the_default() {
        let mut all = String::new();
        for row in reference().iter().filter(|r| !r.section) {
            let Some(default) = &row.default else {
                continue;
            };
            let line = format!("{} = {default}\n", row.key);
            assert_eq!(
                parse(Path::new("c.toml"), &line).unwrap(),
                Config::default(),
                "{line}"
            );
            all.push_str(&line);
        }
        assert!(all.lines().count() >= 25, "{all}");
        assert_eq!(
            parse(Path::new("c.toml"), &all).unwrap(),
            Config::default(),
            "{all}"
        );
        // a key shown without a default is unset by default, or required
        let rows = reference();
        let without: Vec<(&str, bool)> = rows
            .iter()
            .filter(|r| !r.section && r.default.is_none())
            .map(|r| (r.key.as_str(), r.required))
            .collect();
        assert_eq!(
            without,
            [
                ("preset", false),
                ("subagent.command", true),
                ("subagent.timeout_ms", false),
                ("log.file", false),
                ("log.level", false),
                ("ui.listen", false),
            ]
        );
        let c = parse(Path::new("c.toml"), "[subagent]\ncommand = [\"a\"]\n").unwrap();
        assert_eq!(c.subagent.unwrap().timeout_ms, None);
        assert_eq!(
            err("[subagent]\ntimeout_ms = 5\n"),
            "config error: c.toml:1: subagent: missing field `command`"
        );
    }

    #[test]
    fn the_reference_renders_types_and_defaults_as_toml() {
        let rows = reference();
        let row = |key: &str| rows.iter().find(|r| r.key == key).unwrap();
        assert_eq!(row("daemon.idle_exit").default.as_deref(), Some("\"10m\""));
        assert_eq!(row("limits.max_result_bytes").toml_type, "integer");
        assert_eq!(
            row("sandbox.mode").toml_type,
            "`\"workspace-write\"`, `\"read-only\"` or `\"off\"`"
        );
        assert_eq!(row("preset").toml_type, "`\"minimal\"` or `\"full\"`");
        // an enum's ALL lists what serde accepts (its unknown-variant
        // message lists the same names)
        assert_eq!(
            row("env.inherit").toml_type,
            "`\"all\"`, `\"core\"` or `\"none\"`"
        );
        assert!(row("lsp").section);
        assert!(row("lsp.servers").toml_type.contains("subsystems/lsp.md"));
        let md = reference_markdown();
        assert!(md.contains("\n## `[limits]`\n"), "{md}");
        assert!(
            md.contains("| `max_result_bytes` | integer | `32768` |"),
            "{md}"
        );
    }

    /// The README's example file parses (its values are examples, the
    /// defaults are in the generated reference).
    #[test]
    fn the_readme_example_parses() {
        let readme =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../README.md"))
                .unwrap();
        let (_, section) = readme.split_once("\n## Configuration\n").unwrap();
        let (_, example) = section.split_once("```toml\n").unwrap();
        let (example, _) = example.split_once("```").unwrap();
        let c = parse(Path::new("README.md"), example).unwrap();
        assert_ne!(c, Config::default());
    }

    #[test]
    fn check_names_the_file_read_or_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.toml");
        std::fs::write(&good, "[limits]\nmax_running_jobs = 4\n").unwrap();
        assert_eq!(
            check(Some(&good)).unwrap(),
            format!("config: {}: ok\n", good.display())
        );
        let bad = dir.path().join("bad.toml");
        std::fs::write(&bad, "[limits]\nmax_results = 3\n").unwrap();
        let e = check(Some(&bad)).unwrap_err().to_string();
        assert!(
            e.starts_with(&format!(
                "config error: {}:2: limits.max_results: unknown field",
                bad.display()
            )),
            "{e}"
        );
        assert!(check(Some(&dir.path().join("none.toml"))).is_err());
    }

    #[test]
    fn syntax_error_has_a_line() {
        let e = err("[limits\n");
        assert!(e.starts_with("config error: c.toml:1: "), "{e}");
        assert!(!e.contains('\n'));
    }
}
