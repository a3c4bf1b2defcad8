//! `dsh`: serves dsh's tools to AI coding agents over MCP stdio, prints the
//! tool catalog, and manages the registry of workspaces and sessions.
//!
//! The binary is the only place that chooses and wires providers: it reads
//! the config, builds the long-lived runtime (terminals, jobs, language
//! servers) and lends it to the MCP transport. It holds no tool logic of
//! its own; that lives in `tools-catalog`.

mod config;
mod demo;
mod logging;
mod registry_cli;
mod serve;
mod session_log;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use tools_catalog::Preset;

const ABOUT: &str = "Tools for AI coding agents — one-shot bash, persistent terminals, \
background jobs and language-server queries — served over the Model Context Protocol.";

const AFTER_HELP: &str = "\
Start here:
  dsh mcp                       serve the full tool set over MCP stdio (what an agent runs)
  dsh catalog                   show the tools a model will see
  dsh mcp --help                how to register dsh with an MCP client

Files:
  config   $XDG_CONFIG_HOME/dsh/config.toml (or --config FILE); every key optional
  data     $XDG_DATA_HOME/dsh/ (or --data-dir DIR): the workspace and session store

Exit status: 0 on success, 2 for usage and config errors, 1 for anything else.";

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, about = ABOUT, after_help = AFTER_HELP, propagate_version = true)]
struct Cli {
    /// Read the config from FILE instead of $XDG_CONFIG_HOME/dsh/config.toml.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Keep the workspace and session store in DIR instead of $XDG_DATA_HOME/dsh.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the tools over MCP on stdin/stdout (logs go to stderr).
    #[command(after_help = MCP_HELP)]
    Mcp {
        /// Which tools to serve [default: the config's `preset`, else full].
        #[arg(long, value_enum)]
        preset: Option<PresetArg>,
        /// Also append the log to FILE.
        #[arg(long, value_name = "FILE")]
        log_file: Option<PathBuf>,
    },
    /// Manage workspaces: the directories you work in, each with its agent sessions.
    #[command(subcommand)]
    Workspace(registry_cli::WorkspaceCommand),
    /// Browse agent sessions: one per MCP connection, grouped by workspace.
    #[command(subcommand)]
    Session(registry_cli::SessionCommand),
    /// Run a scenario live and print what a model would send and receive.
    Demo {
        /// `terminal`: debug a Python function with one-shot bash vs a terminal; `jobs`: three kinds of background work in one list.
        #[arg(value_enum, default_value = "terminal")]
        scenario: demo::Scenario,
    },
    /// Print the tool catalog: names, descriptions, argument schemas, error codes.
    Catalog {
        /// The preset to show.
        #[arg(long, value_enum, default_value = "full")]
        preset: PresetArg,
        /// Markdown for people, JSON for scripts.
        #[arg(long, value_enum, default_value = "md")]
        format: Format,
    },
}

const MCP_HELP: &str = "\
Register with an MCP client (the client starts dsh itself; dsh speaks MCP on stdio):
  Claude Code:  claude mcp add dsh -- dsh mcp
  Codex:        add to ~/.codex/config.toml
                  [mcp_servers.dsh]
                  command = \"dsh\"
                  args = [\"mcp\"]
  Any client:   {\"mcpServers\": {\"dsh\": {\"command\": \"dsh\", \"args\": [\"mcp\"]}}}

Presets: `minimal` serves `bash` only; `full` (default) serves everything.
Reload: send SIGHUP to re-read the config; live terminals and jobs are kept.
Logs: stderr (stdout is the protocol); filter with DSH_LOG=debug.";

#[derive(Debug, Clone, Copy, ValueEnum)]
enum PresetArg {
    /// `bash` only.
    Minimal,
    /// Every tool.
    Full,
}

impl From<PresetArg> for Preset {
    fn from(p: PresetArg) -> Self {
        match p {
            PresetArg::Minimal => Preset::Minimal,
            PresetArg::Full => Preset::Full,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Format {
    /// Markdown.
    Md,
    /// JSON.
    Json,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        // Messages quote paths, titles and keys: no control character in
        // them reaches the terminal unescaped.
        Err(Failure::Usage(message)) => {
            eprintln!("dsh: {}", registry_cli::escape_controls(&message, false));
            ExitCode::from(2)
        }
        Err(Failure::Other(err)) => {
            eprintln!(
                "dsh: {}",
                registry_cli::escape_controls(&format!("{err:#}"), false)
            );
            ExitCode::from(1)
        }
    }
}

/// Why a command failed, which decides the exit status.
enum Failure {
    /// Usage and config errors: exit 2.
    Usage(String),
    /// Everything else: exit 1.
    Other(anyhow::Error),
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Failure::Other(err)
    }
}

impl From<config::ConfigError> for Failure {
    fn from(err: config::ConfigError) -> Self {
        Failure::Usage(err.to_string())
    }
}

/// The store's directory: `--data-dir`, else `$XDG_DATA_HOME/dsh`.
fn data_dir(explicit: Option<PathBuf>) -> PathBuf {
    explicit.unwrap_or_else(|| {
        dirs::data_dir()
            .unwrap_or_else(|| PathBuf::from(".local/share"))
            .join("dsh")
    })
}

fn run(cli: Cli) -> Result<(), Failure> {
    match cli.command {
        Command::Mcp { preset, log_file } => {
            let (config, config_path) = config::load(cli.config.as_deref())?;
            let log_file = log_file.or_else(|| config.log.file.clone());
            logging::init(config.log.level.as_deref(), log_file.as_deref())
                .map_err(Failure::Other)?;
            let options = serve::Options {
                preset: preset.map(Preset::from),
                config_arg: cli.config.clone(),
                data_dir: data_dir(cli.data_dir.clone()),
            };
            match &config_path {
                Some(p) => tracing::info!("config: {}", p.display()),
                None => tracing::info!("config: none found, using defaults"),
            }
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .map_err(|e| Failure::Other(e.into()))?;
            let served = runtime.block_on(serve::serve_stdio(config, options));
            // Tasks still blocked on stdin must not hold the exit.
            runtime.shutdown_timeout(std::time::Duration::from_secs(1));
            Ok(served?)
        }
        Command::Workspace(command) => Ok(registry_cli::run_workspace(
            command,
            &data_dir(cli.data_dir),
        )?),
        Command::Session(command) => {
            Ok(registry_cli::run_session(command, &data_dir(cli.data_dir))?)
        }
        Command::Demo { scenario } => Ok(demo::run(scenario)?),
        Command::Catalog { preset, format } => {
            let text = match format {
                Format::Md => tools_catalog::catalog_markdown_for(Preset::from(preset)),
                Format::Json => {
                    serde_json::to_string_pretty(&tools_catalog::catalog_json(preset.into()))
                        .map_err(|e| Failure::Other(e.into()))?
                }
            };
            let mut out = std::io::stdout().lock();
            let _ = writeln!(out, "{text}");
            Ok(())
        }
    }
}
