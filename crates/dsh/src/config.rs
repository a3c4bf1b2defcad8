//! The host's TOML config file.
//!
//! Every key is optional; an absent default file means defaults. Unknown
//! keys and wrong types are errors that name the file, the line and the
//! key, on one line.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use tools_catalog::{JobsConfig, Preset, Settings, SubagentSettings};

/// The whole config file.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// The preset `dsh mcp` serves when `--preset` is not given.
    pub preset: Option<PresetName>,
    /// Limits of the tools.
    pub limits: Limits,
    /// The agent command behind the `subagent` tool.
    pub subagent: Option<SubagentConfig>,
    /// Language servers beyond the built-in ones.
    pub lsp: LspConfig,
    /// Where the server logs.
    pub log: LogConfig,
}

/// A preset name as written in the config file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PresetName {
    /// `bash` only.
    Minimal,
    /// Every tool.
    Full,
}

impl From<PresetName> for Preset {
    fn from(p: PresetName) -> Self {
        match p {
            PresetName::Minimal => Preset::Minimal,
            PresetName::Full => Preset::Full,
        }
    }
}

/// `[limits]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Largest text a tool result carries before head+tail truncation.
    pub max_result_bytes: usize,
    /// Background jobs one agent may have running at once.
    pub max_running_jobs: usize,
    /// Foreground `bash` and `subagent` calls one agent may have running at once.
    pub max_foreground_commands: usize,
    /// Settled jobs kept per agent (oldest evicted first).
    pub max_settled_jobs: usize,
    /// Output kept per job, in bytes (the newest is kept).
    pub job_output_bytes: usize,
    /// Terminals one agent may have open at once.
    pub max_terminals: usize,
    /// Scrollback kept per terminal, in bytes.
    pub terminal_scrollback_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        let jobs = JobsConfig::default();
        let terminals = terminal_pty::TerminalConfig::default();
        Self {
            max_result_bytes: Settings::default().max_result_bytes,
            max_running_jobs: jobs.max_running_per_owner,
            max_foreground_commands: jobs.max_foreground_per_owner,
            max_settled_jobs: jobs.max_settled_per_owner,
            job_output_bytes: jobs.output_ring_bytes,
            max_terminals: terminals.max_terminals_per_owner,
            terminal_scrollback_bytes: terminals.scrollback_bytes,
        }
    }
}

/// `[subagent]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubagentConfig {
    /// The argv; `{prompt}` is replaced by the prompt (without it, the
    /// prompt goes to stdin).
    pub command: Vec<String>,
    /// Default time limit of a run.
    #[serde(default)]
    pub timeout_ms: Option<u64>,
}

/// `[lsp]`.
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LspConfig {
    /// `[lsp.servers.NAME]`: one table per server.
    pub servers: BTreeMap<String, LspServerConfig>,
}

/// One `[lsp.servers.NAME]` table.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LspServerConfig {
    /// The server's executable (a name looked up on `PATH`, or a path).
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// File extension (`.py`) → LSP language id (`python`).
    pub extensions: BTreeMap<String, String>,
    /// Files whose presence marks a project root (nearest wins).
    #[serde(default)]
    pub root_markers: Vec<String>,
    /// `initializationOptions` sent at start.
    #[serde(default)]
    pub initialization_options: Option<toml::Value>,
    /// Settings served to `workspace/configuration`.
    #[serde(default)]
    pub settings: Option<toml::Value>,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct LogConfig {
    /// Also append the log to this file.
    pub file: Option<PathBuf>,
    /// A `tracing` filter such as `info` or `dsh=debug` (the `DSH_LOG`
    /// environment variable wins).
    pub level: Option<String>,
    /// Keep the commands of `bash` calls (and the prompts of `subagent`
    /// calls, the argv of `terminal_open`) in the session log; `false`
    /// records only their length.
    pub commands: bool,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            file: None,
            level: None,
            commands: true,
        }
    }
}

impl Config {
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

    /// The language servers to route to (the rust-analyzer preset is added
    /// when its binary is found and no configured server claims `.rs`).
    pub fn lsp(&self) -> lsp_rust_analyzer::LspConfig {
        let to_json =
            |v: &Option<toml::Value>| v.as_ref().and_then(|v| serde_json::to_value(v).ok());
        let servers = self
            .lsp
            .servers
            .iter()
            .map(|(name, s)| {
                let server = lsp_rust_analyzer::ServerConfig {
                    name: name.clone(),
                    command: s.command.clone(),
                    args: s.args.clone(),
                    env: s.env.clone(),
                    extensions: s
                        .extensions
                        .iter()
                        .map(|(ext, lang)| (ext.to_lowercase(), lang.clone()))
                        .collect(),
                    initialization_options: to_json(&s.initialization_options),
                    settings: to_json(&s.settings),
                    root_markers: s.root_markers.clone(),
                    ..lsp_rust_analyzer::ServerConfig::default()
                };
                (name.clone(), server)
            })
            .collect();
        lsp_rust_analyzer::LspConfig {
            servers,
            options: lsp_rust_analyzer::ClientOptions::default(),
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
    if let Err(e) = lsp_rust_analyzer::build_router(&config.lsp()) {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: text
                .lines()
                .position(|l| l.contains("extensions"))
                .map(|i| i + 1),
            key: Some("lsp.servers".into()),
            message: e.to_string(),
        });
    }
    if let Some(t) = config.subagent.as_ref().and_then(|s| s.timeout_ms)
        && !(1..=3_600_000).contains(&t)
    {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: text
                .lines()
                .position(|l| l.trim_start().starts_with("timeout_ms"))
                .map(|i| i + 1),
            key: Some("subagent.timeout_ms".into()),
            message: format!("must be from 1 to 3600000 (one hour), got {t}"),
        });
    }
    if config
        .subagent
        .as_ref()
        .is_some_and(|s| s.command.is_empty())
    {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: text
                .lines()
                .position(|l| l.trim_start().starts_with("command"))
                .map(|i| i + 1),
            key: Some("subagent.command".into()),
            message: "must name a program, e.g. [\"my-agent\", \"--print\", \"{prompt}\"]".into(),
        });
    }
    if config.limits.max_foreground_commands == 0 {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: text
                .lines()
                .position(|l| l.trim_start().starts_with("max_foreground_commands"))
                .map(|i| i + 1),
            key: Some("limits.max_foreground_commands".into()),
            message: "must be at least 1 (0 would refuse every bash call)".into(),
        });
    }
    if config.limits.max_result_bytes < 1024 {
        return Err(ConfigError {
            path: path.to_path_buf(),
            line: text
                .lines()
                .position(|l| l.trim_start().starts_with("max_result_bytes"))
                .map(|i| i + 1),
            key: Some("limits.max_result_bytes".into()),
            message: format!(
                "must be at least 1024, got {}",
                config.limits.max_result_bytes
            ),
        });
    }
    Ok(config)
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
        assert_eq!(c.preset, Some(PresetName::Minimal));
        assert_eq!(c.limits.max_result_bytes, 4096);
        assert_eq!(c.lsp.servers["pylsp"].extensions[".py"], "python");
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
    fn syntax_error_has_a_line() {
        let e = err("[limits\n");
        assert!(e.starts_with("config error: c.toml:1: "), "{e}");
        assert!(!e.contains('\n'));
    }
}
