//! `dsh mcp`: a bridge between the MCP client's stdio and the daemon.
//!
//! It connects (starting the daemon when none answers), says hello with
//! what its connection needs — version, preset, config file, working
//! directory and its whole environment — and, once accepted, copies bytes
//! both ways on two plain threads. No MCP byte crosses before the daemon
//! accepted the hello, so a bridge never speaks MCP to a daemon of another
//! version. SIGHUP asks the daemon to reload; SIGTERM and SIGINT close the
//! connection as a client closing stdin does. When the daemon goes away
//! first, the bridge says so in one line and exits 1.

use std::io::{Read as _, Write as _};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use super::{Client, ClientError, StartSpec, connect};
use crate::holder::pid_alive;
use crate::paths::DaemonPaths;
use daemon_wire::replies::McpAccepted;
use daemon_wire::{Hello, McpHello, Request};

/// How `dsh mcp` (the bridge) was started.
#[derive(Debug, Clone)]
pub struct BridgeOptions {
    /// The daemon's files.
    pub paths: DaemonPaths,
    /// `--preset`.
    pub preset: Option<String>,
    /// The config file of this connection (`--config`, else the default
    /// file when it exists).
    pub config: Option<PathBuf>,
    /// How to start a daemon when none answers.
    pub start: StartSpec,
}

/// How a bridge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BridgeEnd {
    /// The client closed its end (or the bridge was asked to stop) and the
    /// daemon finished the connection.
    Closed,
    /// The daemon went away first; the message says so.
    DaemonGone(String),
}

enum Event {
    DaemonClosed,
    Stop,
}

/// The environment as pairs; variables that are not UTF-8 cannot cross
/// the socket and are left out (named in the log).
fn environment() -> Vec<(String, String)> {
    let mut env = Vec::new();
    for (key, value) in std::env::vars_os() {
        match (key.into_string(), value.into_string()) {
            (Ok(k), Ok(v)) => env.push((k, v)),
            (Ok(k), Err(_)) => eprintln!("dsh: ${k} is not UTF-8; commands run without it"),
            (Err(_), _) => eprintln!(
                "dsh: an environment variable's name is not UTF-8; commands run without it"
            ),
        }
    }
    env
}

/// Runs the bridge until the client or the daemon ends the connection.
pub fn run(options: BridgeOptions) -> Result<BridgeEnd, ClientError> {
    // Signals are taken by one thread with sigwait: block them everywhere
    // first (threads inherit the mask).
    let signals = super::block_stop_signals();

    let hello = Hello::new(Request::Mcp(McpHello {
        preset: options.preset.clone(),
        config: options.config.clone(),
        cwd: std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")),
        env: environment(),
    }));
    let connected = connect(&options.paths, &hello, Some(&options.start))?;
    let daemon_pid = connected.reply.pid;
    // A reply that does not read as one carries no warnings.
    let accepted: McpAccepted = connected.reply.decode().unwrap_or_default();
    for warning in &accepted.warnings {
        eprintln!("dsh: {warning}");
    }
    let leftover = connected.stream.buffer().to_vec();
    let socket = connected.stream.into_inner();
    let upstream = socket
        .try_clone()
        .map_err(|e| ClientError::Unreachable(format!("cannot use the socket: {e}")))?;
    let closer = socket
        .try_clone()
        .map_err(|e| ClientError::Unreachable(format!("cannot use the socket: {e}")))?;
    let stdin_closed = Arc::new(AtomicBool::new(false));
    let (events_tx, events) = mpsc::channel::<Event>();

    // client → daemon
    {
        let stdin_closed = stdin_closed.clone();
        std::thread::spawn(move || {
            copy_up(upstream, &stdin_closed);
        });
    }
    // daemon → client
    {
        let events_tx = events_tx.clone();
        std::thread::spawn(move || {
            copy_down(socket, &leftover);
            let _ = events_tx.send(Event::DaemonClosed);
        });
    }
    // signals
    {
        let paths = options.paths.clone();
        let closer = closer.try_clone().ok();
        super::on_stop_signals(
            signals,
            move || {
                let paths = paths.clone();
                std::thread::spawn(move || match Client::new(paths).reload() {
                    Ok(_) => {}
                    Err(e) => eprintln!("dsh: reload failed: {e}"),
                });
            },
            move || {
                if let Some(closer) = &closer {
                    let _ = closer.shutdown(Shutdown::Write);
                }
                let _ = events_tx.send(Event::Stop);
            },
        );
    }
    let stopping = match events.recv() {
        Ok(Event::DaemonClosed) | Err(_) => false,
        Ok(Event::Stop) => {
            // Give the daemon a moment to end what the connection
            // started, as a standalone server would before exiting.
            let _ = events.recv_timeout(Duration::from_secs(10));
            true
        }
    };
    let _ = closer.shutdown(Shutdown::Both);
    if stopping || stdin_closed.load(Ordering::Acquire) {
        return Ok(BridgeEnd::Closed);
    }
    // A killed daemon's socket closes while the process is still exiting.
    let gone_by = std::time::Instant::now() + Duration::from_secs(1);
    while pid_alive(daemon_pid) && std::time::Instant::now() < gone_by {
        std::thread::sleep(Duration::from_millis(10));
    }
    let state = if pid_alive(daemon_pid) {
        "closed this connection (it is stopping, or a new connection took this agent's work with its resume key)"
    } else {
        "exited"
    };
    Ok(BridgeEnd::DaemonGone(format!(
        "the dsh daemon (pid {daemon_pid}) {state}; this MCP connection is over — restart the agent's dsh server (its terminals and jobs are gone; the log is {})",
        options.paths.log.display()
    )))
}

fn copy_up(mut socket: UnixStream, stdin_closed: &AtomicBool) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if socket.write_all(&buf[..n]).is_err() {
                    break;
                }
            }
        }
    }
    stdin_closed.store(true, Ordering::Release);
    let _ = socket.shutdown(Shutdown::Write);
}

fn copy_down(mut socket: UnixStream, leftover: &[u8]) {
    let mut stdout = std::io::stdout().lock();
    if !leftover.is_empty() && (stdout.write_all(leftover).is_err() || stdout.flush().is_err()) {
        return;
    }
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match socket.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                if stdout.write_all(&buf[..n]).is_err() || stdout.flush().is_err() {
                    return;
                }
            }
        }
    }
}
