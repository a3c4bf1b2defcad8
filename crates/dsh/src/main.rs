//! `dsh`: serves dsh's tools to AI coding agents over MCP, prints the tool
//! catalog, and manages the registry of workspaces and sessions.
//!
//! A thin command line: it parses arguments and the config file and calls
//! the `daemon` crate, which runs the per-user daemon, the `dsh mcp`
//! bridge to it, the standalone server, `dsh demo` and the clients of
//! `dsh ps`, `dsh attach` and the registry commands. It holds no tool
//! logic of its own; that lives in `tools-catalog`.
//!
//! Beside this file: `registry_cli` (`dsh workspace …`, `dsh session …`)
//! and `output` (everything it prints, with one escaping rule for
//! untrusted text).

#![forbid(unsafe_code)]

mod output;
mod registry_cli;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};
use daemon::registry::RegistryAccess;
use daemon_client::paths::DaemonPaths;
use daemon_client::remote::RemoteOptions;
use daemon_client::remotes::{self as hosts, target::Target};
use daemon_client::{Client, ClientError, StartSpec, StatusReport, bridge};
use demo::Scenario;
use tools_catalog::Preset;

const ABOUT: &str = "Tools for AI coding agents — one-shot bash, persistent terminals, \
background jobs and language-server queries — served over the Model Context Protocol.";

const AFTER_HELP: &str = "\
Start here:
  dsh mcp                       serve the full tool set over MCP stdio (what an agent runs)
  dsh catalog                   show the tools a model will see
  dsh mcp --help                how to register dsh with an MCP client
  dsh ps                        what every connected agent runs; `dsh attach pty-N` to watch one
  dsh ui --open                 the same, and every session's history, in a local web page

Files:
  config   $XDG_CONFIG_HOME/dsh/config.toml (or --config FILE); every key optional
           (`dsh config` checks it, `dsh config --reference` lists every key)
  data     $XDG_DATA_HOME/dsh/ (or --data-dir DIR): the workspace and session store,
           and the daemon's log (daemon.log)
  socket   $XDG_RUNTIME_DIR/dsh/ (else DATA/run/): the daemon's socket
  state    $XDG_STATE_HOME/dsh/repl/: the history and profiles of REPLs run in the sandbox,
           one directory per workspace

Exit status: 0 on success, 2 for usage and config errors, 1 for anything else.";

/// The command line.
#[derive(Debug, Parser)]
#[command(name = "dsh", version, about = ABOUT, after_help = AFTER_HELP, propagate_version = true)]
struct Cli {
    #[command(flatten)]
    globals: Globals,
    #[command(subcommand)]
    command: Command,
}

/// The options every command takes.
#[derive(Debug, clap::Args)]
struct Globals {
    /// Read the config from FILE instead of $XDG_CONFIG_HOME/dsh/config.toml.
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Keep the workspace and session store in DIR instead of $XDG_DATA_HOME/dsh.
    #[arg(long, global = true, value_name = "DIR")]
    data_dir: Option<PathBuf>,
    /// Work without the daemon: `dsh mcp` serves in this process, and the
    /// registry commands open the store themselves.
    #[arg(long, global = true)]
    standalone: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve the tools over MCP on stdin/stdout (logs go to stderr).
    #[command(after_help = MCP_HELP)]
    Mcp {
        /// Which tools to serve [default: the config's `preset`, else full].
        #[arg(long, value_enum)]
        preset: Option<PresetArg>,
        /// Also append the log to FILE (with --standalone; the daemon logs to its own file).
        #[arg(long, value_name = "FILE")]
        log_file: Option<PathBuf>,
        /// Serve from a dsh on another host: ssh://[user@]host[:port][/path] or exec:COMMAND.
        #[arg(long, value_name = "TARGET", conflicts_with = "log_file", value_parser = Target::parse)]
        remote: Option<Target>,
    },
    /// Run the per-user daemon in the foreground, or show or stop the running one.
    #[command(after_help = DAEMON_HELP)]
    Daemon {
        #[command(subcommand)]
        action: Option<DaemonAction>,
        /// Started by a client: exit quietly when another daemon already runs.
        #[arg(long, hide = true)]
        spawned: bool,
    },
    /// Show every agent connected to the daemon, with its terminals and jobs.
    Ps {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// End detached connection N's terminals and jobs now.
        #[arg(long, value_name = "N", conflicts_with = "give")]
        end: Option<u64>,
        /// Give detached connection N's terminals and jobs to connected agent --to M.
        #[arg(long, value_name = "N", requires = "to")]
        give: Option<u64>,
        #[arg(long, value_name = "M", requires = "give", hide = true)]
        to: Option<u64>,
    },
    /// Answer a program's secret prompt in an agent's terminal (read here with echo off; the agent never sees it).
    Answer {
        /// The terminal, as the agent's reply or `dsh ps` names it (`pty-N`; `HOST:pty-N` for a remote host's).
        id: String,
    },
    /// Approve or refuse a command an agent asks to run outside the sandbox (without ID: list the waiting ones).
    Approve {
        /// The request, as the list or the page names it (`ap-N`).
        id: Option<String>,
        /// Refuse it (without this, the command is shown and you type yes or no on your terminal).
        #[arg(long, requires = "id")]
        refuse: bool,
        /// Print the list as JSON.
        #[arg(long, conflicts_with = "id")]
        json: bool,
    },
    /// Watch an agent's terminal live in yours (q or Ctrl-C leaves); --write to type.
    #[command(after_help = ATTACH_HELP)]
    Attach {
        /// The terminal, as `dsh ps` shows it (`pty-N`).
        id: String,
        /// Let your keys reach the program (refused while an agent's send is active; Ctrl-] leaves).
        #[arg(long)]
        write: bool,
    },
    /// Print a one-time sign-in link to the local web page where you watch every agent (--open opens it).
    #[command(after_help = UI_HELP)]
    Ui {
        /// Open the page in your browser ($BROWSER, else xdg-open).
        #[arg(long)]
        open: bool,
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
        scenario: ScenarioArg,
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
    /// Read the config file as `dsh mcp` would: say which file was read, or its first error.
    Config {
        /// Print every key instead, with its type, default and meaning (docs/config.md).
        #[arg(long)]
        reference: bool,
    },
    /// Internal: ends dsh's sessions when dsh dies (started by dsh itself).
    #[command(name = mcp_host::processes::GUARDIAN_SUBCOMMAND, hide = true)]
    Guardian,
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

const DAEMON_HELP: &str = "\
`dsh mcp` starts the daemon when none runs (detached, logging to DATA/daemon.log) and
it exits after `[daemon] idle_exit` (default 10m) with no connection, terminal or job.
One daemon serves one data directory; its socket is in $XDG_RUNTIME_DIR/dsh/ (else
DATA/run/). SIGHUP reloads every connection's config; SIGTERM or `dsh daemon stop`
ends every terminal and job, then exits.";

const ATTACH_HELP: &str = "\
The view shows the terminal's screen, then its output as it arrives; it never changes
what the agent sees. With --write your keys go to the program, but never into an agent's
command: while an agent's send is active they are refused, and while you type (until
you pause and the program waits for input again) the agent's sends get SEND_ACTIVE.";

const UI_HELP: &str = "\
The page: the workspaces and their sessions, each session's tool calls (with a timeline
chart and each terminal send's latency and settle reason), and every connected agent's
terminals (live screens) and jobs (live output). On it you create workspaces (choosing
the directory in a picker), rename, drag to reorder and remove them, and drag and archive
sessions, as `dsh workspace` and `dsh session` do; two pages show each other's changes.

Where: the daemon (started if none runs) serves it on 127.0.0.1, on a free port unless
`[ui] port` fixes one; `[ui] listen = \"IP\"` binds another address (a warning: anyone who
reaches it and is signed in can watch and type). The page lives as long as the daemon;
a new daemon (after `[daemon] idle_exit` with no agent and nobody watching live, or
`dsh daemon stop`) has a new port and secret: run `dsh ui` again.
`dsh daemon status` shows the address and how many people watch.

Access: every `dsh ui` prints a fresh sign-in link that works once (and for 15 minutes);
opening it sets a cookie that keeps your browser signed in. `--open` hands the browser a
file only you can read, so the link never appears on a command line (`ps` shows those to
every user). Scripts send `Authorization: Bearer SECRET`, the secret read from the file
dsh-*.ui-token beside the daemon's socket (0600). Every request without the cookie or the
bearer token is refused (401), and so are a used link (401), another host name or
another site, and a change without the token of a page the server showed (403).

Typing: terminals are read-only until you press \"Take the keyboard\"; then keys follow
`dsh attach --write`: never into an agent's send, and its sends get SEND_ACTIVE as you type.

Examples:
  dsh ui                 print a one-time sign-in link
  dsh ui --open          open the page in your browser ($BROWSER, else xdg-open)";

/// `dsh daemon` subcommands.
#[derive(Debug, Subcommand)]
enum DaemonAction {
    /// Show the running daemon: pid, version, socket, log, connections.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Stop the running daemon: every terminal and job is ended first.
    Stop,
}

/// A preset on the command line: its names are the presets' own
/// ([`Preset::name`]), so `tools-catalog` is the one parser of a name.
#[derive(Debug, Clone, Copy)]
struct PresetArg(Preset);

impl ValueEnum for PresetArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[PresetArg(Preset::Minimal), PresetArg(Preset::Full)]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        let help = match self.0 {
            Preset::Minimal => "`bash` only",
            Preset::Full => "Every tool",
        };
        Some(clap::builder::PossibleValue::new(self.0.name()).help(help))
    }
}

/// A scenario of `dsh demo` on the command line.
#[derive(Debug, Clone, Copy)]
struct ScenarioArg(Scenario);

impl ValueEnum for ScenarioArg {
    fn value_variants<'a>() -> &'a [Self] {
        &[ScenarioArg(Scenario::Terminal), ScenarioArg(Scenario::Jobs)]
    }

    fn to_possible_value(&self) -> Option<clap::builder::PossibleValue> {
        Some(clap::builder::PossibleValue::new(self.0.name()).help(self.0.summary()))
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
        Err(Failure::Exit(code)) => ExitCode::from(code),
        // Messages quote paths, titles and keys: no control character in
        // them reaches the terminal unescaped.
        Err(Failure::Usage(message)) => {
            eprintln!("dsh: {}", output::escape_controls(&message, false));
            ExitCode::from(2)
        }
        Err(Failure::Other(err)) => {
            eprintln!(
                "dsh: {}",
                output::escape_controls(&format!("{err:#}"), false)
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
    /// Already reported: exit with this status.
    Exit(u8),
}

impl From<ClientError> for Failure {
    fn from(err: ClientError) -> Self {
        Failure::Other(anyhow::anyhow!(err.to_string()))
    }
}

impl From<anyhow::Error> for Failure {
    fn from(err: anyhow::Error) -> Self {
        Failure::Other(err)
    }
}

impl From<mcp_host::config::ConfigError> for Failure {
    fn from(err: mcp_host::config::ConfigError) -> Self {
        Failure::Usage(err.to_string())
    }
}

/// First contact: a person who starts `dsh mcp` on a terminal sees, once,
/// what it is waiting for and what to do instead. Nothing is printed when
/// stdin is not a terminal (an MCP client started it).
fn first_contact_hint() {
    use std::io::IsTerminal as _;
    if std::io::stdin().is_terminal() {
        eprintln!(
            "dsh mcp is waiting for an MCP client on stdin (it speaks JSON-RPC, not commands).\n\
             Register it with your agent instead, e.g. `claude mcp add dsh -- dsh mcp` (see `dsh mcp --help`),\n\
             or try `dsh demo` to watch the tools at work. Press Ctrl-D to quit."
        );
    }
}

impl Globals {
    /// The daemon's files for `--data-dir`.
    fn paths(&self) -> DaemonPaths {
        DaemonPaths::new(&daemon_client::paths::data_dir(self.data_dir.clone()))
    }

    /// Where the registry commands run: in the daemon (started if needed),
    /// or on the store directly with --standalone.
    fn registry(&self) -> Result<RegistryAccess, ClientError> {
        let data_dir = daemon_client::paths::data_dir(self.data_dir.clone());
        RegistryAccess::new(data_dir, self.standalone, self.config.clone())
    }
}

fn run(cli: Cli) -> Result<(), Failure> {
    let Cli {
        globals: cli,
        command,
    } = cli;
    match command {
        Command::Mcp {
            preset,
            remote: Some(target),
            ..
        } => {
            first_contact_hint();
            let preset = preset.map(|p| p.0.name().to_owned());
            let runtime_dir = cli.paths().runtime_dir;
            let options = RemoteOptions {
                target,
                preset,
                runtime_dir,
            };
            Ok(daemon_client::remote::run(options).map(drop)?)
        }
        Command::Mcp {
            preset, log_file, ..
        } if cli.standalone => mcp_standalone(&cli, preset.map(|p| p.0), log_file),
        Command::Mcp { preset, .. } => mcp_bridge(&cli, preset.map(|p| p.0)),
        Command::Daemon {
            action: None,
            spawned,
        } => daemon_run(&cli, spawned),
        Command::Daemon {
            action: Some(DaemonAction::Status { json }),
            ..
        } => daemon_status(&cli.paths(), json),
        Command::Daemon {
            action: Some(DaemonAction::Stop),
            ..
        } => daemon_stop(&cli.paths()),
        Command::Ps {
            json,
            end,
            give,
            to,
        } => match end.or(give) {
            Some(n) => {
                let done =
                    Client::new(cli.paths()).decide_detached(n, to.filter(|_| give.is_some()))?;
                let what = [done.terminals, done.jobs].concat().join(", ");
                let line = format!("connection {n}: {} ({what})\n", done.done);
                Ok(output::emit(&line)?)
            }
            None => ps(&cli.paths(), json),
        },
        Command::Answer { id } => {
            if let Some((host, pty)) = id.split_once(':') {
                // A remote host's terminal: its own `dsh answer` reads it.
                let answered =
                    hosts::answer(&cli.paths().runtime_dir, host, pty).ok_or_else(|| {
                        anyhow::Error::msg(format!(
                            "no dsh mcp --remote bridge here serves {host} (dsh ps lists the hosts)"
                        ))
                    })?;
                return Ok(answered.map_err(|e| anyhow::Error::msg(e.to_string()))?);
            }
            let client = Client::new(cli.paths());
            let question = client.asking(&id)?.question;
            let prompt = daemon_client::answer::question(&id, &question);
            let secret =
                daemon_client::answer::read_secret(&prompt).map_err(anyhow::Error::from)?;
            let done = client.answer(&id, secret)?;
            eprintln!("dsh: your answer was {}", done.how);
            Ok(())
        }
        Command::Approve { id, refuse, json } => approve(&cli.paths(), id, refuse, json),
        Command::Attach { id, write } => {
            let line = Client::new(cli.paths()).attach(&id, write)?;
            eprintln!("dsh: {line}");
            Ok(())
        }
        Command::Ui { open } => ui(&cli, &cli.paths(), open),
        Command::Workspace(command) => Ok(registry_cli::run_workspace(command, &cli.registry()?)?),
        Command::Session(command) => Ok(registry_cli::run_session(command, &cli.registry()?)?),
        Command::Demo { scenario } => Ok(demo::run(scenario.0)?),
        Command::Guardian => {
            mcp_host::processes::serve_guardian();
            Ok(())
        }
        Command::Config { reference: true } => {
            Ok(output::emit(&mcp_host::config::reference_markdown())?)
        }
        Command::Config { reference: false } => Ok(output::emit(&mcp_host::config::check(
            cli.config.as_deref(),
        )?)?),
        Command::Catalog { preset, format } => {
            let text = match format {
                Format::Md => tools_catalog::catalog_markdown_for(preset.0),
                Format::Json => format!("{:#}", tools_catalog::catalog_json(preset.0)),
            };
            Ok(output::emit(&format!("{text}\n"))?)
        }
    }
}

/// `dsh mcp --standalone`: one client served in this process.
fn mcp_standalone(
    cli: &Globals,
    preset: Option<Preset>,
    log_file: Option<PathBuf>,
) -> Result<(), Failure> {
    daemon::memory::tune_allocator();
    let (config, config_path) = mcp_host::config::load(cli.config.as_deref())?;
    let log_file = log_file.or_else(|| config.log.file.clone());
    daemon::logging::init(config.log.level.as_deref(), log_file.as_deref())
        .map_err(Failure::Other)?;
    match &config_path {
        Some(p) => tracing::info!("config: {}", p.display()),
        None => tracing::info!("config: none found, using defaults"),
    }
    first_contact_hint();
    let options = daemon::standalone::StandaloneOptions {
        preset,
        config_path,
        data_dir: daemon_client::paths::data_dir(cli.data_dir.clone()),
    };
    Ok(daemon::standalone::run(config.host(), options)?)
}

/// `dsh mcp`: a bridge to the daemon (started when none runs).
fn mcp_bridge(cli: &Globals, preset: Option<Preset>) -> Result<(), Failure> {
    // The config is checked here, so a bad one is this command's error
    // (exit 2), before any daemon is involved. The connection's tools come
    // from the file it was read from (made absolute: the daemon's working
    // directory is not ours).
    let (_, config_path) = mcp_host::config::load(cli.config.as_deref())?;
    first_contact_hint();
    let options = bridge::BridgeOptions {
        paths: cli.paths(),
        preset: preset.map(|p| p.name().to_owned()),
        config: config_path.map(|p| std::path::absolute(&p).unwrap_or(p)),
        start: StartSpec::this_program(cli.config.clone())?,
    };
    match bridge::run(options)? {
        bridge::BridgeEnd::Closed => Ok(()),
        bridge::BridgeEnd::DaemonGone(line) => {
            eprintln!("dsh: {line}");
            Err(Failure::Exit(1))
        }
    }
}

/// `dsh daemon`: the daemon, in the foreground.
fn daemon_run(cli: &Globals, spawned: bool) -> Result<(), Failure> {
    daemon::memory::tune_allocator();
    let (config, config_path) = mcp_host::config::load(cli.config.as_deref())?;
    daemon::logging::init(config.log.level.as_deref(), config.log.file.as_deref())
        .map_err(Failure::Other)?;
    let options = daemon::server::DaemonOptions {
        paths: cli.paths(),
        config: config.host(),
        config_path: config_path.map(|p| std::path::absolute(&p).unwrap_or(p)),
        spawned,
    };
    daemon::server::run(options).map_err(|e| Failure::Other(anyhow::anyhow!(e.to_string())))
}

/// `dsh approve`: lists the commands waiting for a person's approval, or
/// decides one: `--refuse` refuses it; otherwise its question is shown on
/// the person's terminal and they type yes or no there.
fn approve(
    paths: &DaemonPaths,
    id: Option<String>,
    refuse: bool,
    json: bool,
) -> Result<(), Failure> {
    let client = Client::new(paths.clone());
    let Some(id) = id else {
        let waiting = client.approvals()?;
        if json {
            return Ok(output::emit(&output::to_json(&waiting)?)?);
        }
        if waiting.approvals.is_empty() {
            return Ok(output::emit(
                "no command waits for approval (an agent's bash call with sandbox: \"off\" waits here while it runs)\n",
            )?);
        }
        let mut text = String::new();
        for a in &waiting.approvals {
            let first = a.command.lines().next().unwrap_or_default();
            let more = if a.command.lines().count() > 1 {
                " …"
            } else {
                ""
            };
            text.push_str(&format!(
                "{}  {}  {}  waiting {} s  {first}{more}\n",
                a.id,
                a.agent,
                a.cwd.display(),
                a.waited_secs
            ));
        }
        text.push_str(
            "dsh approve ID shows one and asks you; dsh approve ID --refuse refuses it\n",
        );
        return Ok(output::emit(&text)?);
    };
    let run = if refuse {
        false
    } else {
        let waiting = client.approvals()?;
        let Some(a) = waiting
            .approvals
            .iter()
            .find(|a| a.id == id || a.id.strip_prefix("ap-") == Some(id.as_str()))
        else {
            return Err(anyhow::anyhow!(
                "no command waits for approval as `{id}` (it was decided, or its call ended); dsh approve lists the waiting ones"
            )
            .into());
        };
        let question = format!("{} ({}) asks:\n{}", a.id, a.agent, a.question);
        let shown = output::escape_controls(&question, true);
        match daemon_client::answer::decide_on_tty(&shown).map_err(anyhow::Error::from)? {
            Some(run) => run,
            None => {
                eprintln!("dsh: nothing was decided (type yes or no); {id} still waits");
                return Ok(());
            }
        }
    };
    let done = client.approve(&id, run)?;
    eprintln!("dsh: {}", done.what);
    Ok(())
}

/// `dsh daemon status`; for a daemon that holds the data directory but
/// cannot be reached through the socket, what it recorded and why it is
/// unreachable (exit 1).
fn daemon_status(paths: &DaemonPaths, json: bool) -> Result<(), Failure> {
    let text = match Client::new(paths.clone()).status_report()? {
        StatusReport::Running(status) if json => output::to_json(&status)?,
        StatusReport::Running(status) => output::status(&status),
        StatusReport::Unreachable(daemon) if json => {
            output::emit(&output::to_json(&daemon)?)?;
            return Err(Failure::Exit(1));
        }
        StatusReport::Unreachable(daemon) => {
            return Err(Failure::Other(anyhow::anyhow!(daemon.to_string())));
        }
    };
    Ok(output::emit(&text)?)
}

/// `dsh daemon stop`.
fn daemon_stop(paths: &DaemonPaths) -> Result<(), Failure> {
    let stopped = Client::new(paths.clone()).stop_and_wait()?;
    Ok(output::emit(&format!("{stopped}\n"))?)
}

/// `dsh ps`.
fn ps(paths: &DaemonPaths, json: bool) -> Result<(), Failure> {
    let remotes = hosts::snapshots(&paths.runtime_dir);
    let text = match Client::new(paths.clone()).ps() {
        Ok(snapshot) if json => output::to_json(&hosts::with_remotes(&snapshot, &remotes))?,
        Ok(snapshot) => output::ps(&snapshot) + &output::remotes(&remotes),
        Err(ClientError::NotRunning { .. }) if json => {
            let none = serde_json::json!({"daemon": null, "connections": []});
            output::to_json(&hosts::with_remotes(&none, &remotes))?
        }
        Err(ClientError::NotRunning { data_dir, .. }) => format!(
            "no dsh daemon is running for {}, so no agent is connected here\n{}",
            data_dir.display(),
            output::remotes(&remotes)
        ),
        Err(e) => return Err(e.into()),
    };
    Ok(output::emit(&text)?)
}

/// `dsh ui [--open]`.
fn ui(cli: &Globals, paths: &DaemonPaths, open: bool) -> Result<(), Failure> {
    let start = StartSpec::this_program(cli.config.clone())?;
    let page = Client::starting(paths.clone(), start).ui()?;
    if page.exposed {
        eprintln!(
            "dsh: warning: [ui] listen exposes the page beyond this machine ({}); anyone who reaches it and signs in (each link works once, for 15 minutes) or holds the secret of its token file can watch every agent and type into its terminals",
            output::cell(&page.address)
        );
    }
    if open {
        match daemon_client::open::open_in_browser(&paths.runtime_dir, &page.url) {
            Ok(browser) => {
                eprintln!(
                    "dsh: opened the page in `{browser}` (through a file only you can read); `dsh ui` prints a link for another browser"
                );
                return Ok(());
            }
            Err(e) => eprintln!("dsh: {e}"),
        }
    }
    Ok(output::emit(&format!("{}\n", page.url))?)
}
