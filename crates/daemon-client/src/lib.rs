//! Reaching the daemon: connect, starting it when none answers, and say
//! hello; the typed [`Client`] of the CLI's one-shot requests (`dsh
//! workspace …`, `dsh session …`, `dsh daemon status|stop`, `dsh ps`,
//! `dsh ui`), and the client halves of `dsh attach` ([`attach`]) and
//! `dsh mcp` ([`bridge`]); `dsh mcp --remote` ([`remote`]). What finds a
//! daemon is here too, since the server uses it as a client does: where a
//! data directory's daemon keeps its files ([`paths`]), who holds its lock
//! ([`holder`]), and the remote hosts of live bridges ([`remotes`]).
//!
//! Of the daemon's crates this one names only the wire (`daemon-wire`):
//! never the MCP host or the server, and never the store (a registry
//! command with `--standalone` runs on the store through the `daemon`
//! crate's `RegistryAccess`).
//!
//! A client that may start a daemon runs `dsh daemon --spawned` detached
//! (a session of its own, stdio to the daemon's log file) and waits for a
//! daemon of its own version to answer. Many clients racing to start one
//! end with exactly one: every candidate takes the daemon lock first, and
//! the losers exit quietly. A daemon of another version is asked by the
//! new one to hand the store over (see the daemon's `server` module).
//!
//! The modules, besides those above: `api` ([`Client`]: one method per
//! request kind, so `dsh` never builds a request; `dsh daemon stop` through
//! the lock, and what `dsh daemon status` reports, when the socket does not
//! lead to the daemon), [`answer`] (the answer a person types on a terminal
//! to a secret prompt) and [`open`] (`dsh ui --open`'s launch file).
//! [`remote`] is `dsh mcp --remote`: the bootstrap that installs the static
//! build on the target and starts `dsh mcp` there (`remote::bootstrap`),
//! and the MCP-aware relay that answers the calls in flight when the stream
//! drops or stalls (an unanswered `ping` ends it), reconnects, takes the
//! agent's work back, and tells the model when it could not. [`remotes`]
//! holds where a bridge goes and the local command that opens a stdio
//! stream there ([`remotes::target`]), the bridges' registrations, each
//! host's `dsh ps` asked over the bridge's own ssh connection, `dsh attach
//! HOST:pty-N`, and the `Watch` that asks them in the background for the
//! page.

use std::io::{BufReader, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub mod answer;
mod api;
pub mod attach;
pub mod bridge;
pub mod holder;
pub mod open;
pub mod paths;
pub mod remote;
pub mod remotes;

pub use api::{Client, StatusReport, Stopped, Unreachable};

use crate::paths::DaemonPaths;
use daemon_wire::exchange::read_result;
use daemon_wire::{
    Code, Failure, Hello, LineError, MAX_REPLY_LINE, Reply, Request, read_line_blocking,
    write_line_blocking,
};

/// How long a daemon may take to answer a hello before the client looks
/// at it: a stopped (or gone) one is reported then.
pub const HELLO_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long a daemon that runs (a loaded machine slows it) may take to
/// answer a hello.
pub const HELLO_PATIENCE: Duration = Duration::from_secs(15);
/// How long a client waits for a daemon it started to answer.
pub const START_TIMEOUT: Duration = Duration::from_secs(15);

/// Blocks SIGHUP, SIGTERM and SIGINT in the calling thread, and so in
/// every thread it starts afterwards (threads inherit the mask), for one
/// thread to take them with [`on_stop_signals`]. Call it before starting
/// any other thread.
pub(crate) fn block_stop_signals() -> nix::sys::signal::SigSet {
    use nix::sys::signal::{SigSet, Signal};
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGHUP);
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    let _ = signals.thread_block();
    signals
}

/// Takes the `signals` [`block_stop_signals`] blocked on a thread of
/// their own: `on_hup` for each SIGHUP, then `on_stop` for the first
/// SIGTERM or SIGINT, which ends the thread.
pub(crate) fn on_stop_signals(
    signals: nix::sys::signal::SigSet,
    on_hup: impl Fn() + Send + 'static,
    on_stop: impl FnOnce() + Send + 'static,
) {
    std::thread::spawn(move || {
        loop {
            match signals.wait() {
                Ok(nix::sys::signal::Signal::SIGHUP) => on_hup(),
                Ok(_) => {
                    on_stop();
                    return;
                }
                Err(_) => return,
            }
        }
    });
}

/// Why the daemon could not be reached, or refused.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No daemon runs and none may be started.
    #[error("no dsh daemon is running for {data_dir} (socket {socket})")]
    NotRunning {
        /// The data directory.
        data_dir: PathBuf,
        /// The socket looked for.
        socket: PathBuf,
    },
    /// A daemon holds the data directory (found through its lock and
    /// `daemon.json`) but cannot be reached: its socket was removed or
    /// replaced, or it listens where another runtime directory leads and
    /// that socket fails the checks a client makes before it goes there.
    #[error("{message}")]
    SocketLost {
        /// The daemon, as found and checked (see
        /// [`crate::holder::find_holder`]).
        holder: Box<crate::holder::Holder>,
        /// What happened and what to do.
        message: String,
    },
    /// The socket is held by a process that is not the daemon
    /// `daemon.json` names; nothing was sent to it.
    #[error("{0}")]
    NotTheDaemon(String),
    /// The daemon refused the request or it failed there.
    #[error("{0}")]
    Refused(Failure),
    /// Anything else, with a message that says why.
    #[error("{0}")]
    Unreachable(String),
}

/// How a client starts a daemon when none answers.
#[derive(Debug, Clone)]
pub struct StartSpec {
    /// The `dsh` executable.
    pub program: PathBuf,
    /// `--config` for the daemon (its language servers, limits, log).
    pub config: Option<PathBuf>,
}

impl StartSpec {
    /// This executable, with `config` (made absolute: the daemon's
    /// working directory is not the caller's).
    pub fn this_program(config: Option<PathBuf>) -> Result<Self, ClientError> {
        let config = config.map(|p| std::path::absolute(&p).unwrap_or(p));
        let program = std::env::current_exe().map_err(|e| {
            ClientError::Unreachable(format!(
                "cannot find the dsh executable to start a daemon: {e}"
            ))
        })?;
        Ok(Self { program, config })
    }
}

/// A connection that said hello and was accepted.
pub struct Connected {
    /// The socket, positioned after the reply (buffered bytes included).
    pub stream: BufReader<UnixStream>,
    /// The daemon's reply.
    pub reply: Reply,
}

fn daemon_pid_hint(paths: &DaemonPaths) -> String {
    daemon_wire::info::read_info(&paths.info)
        .map(|i| format!(" (pid {})", i.pid))
        .unwrap_or_default()
}

/// Connects and says `hello`. With `start`, a daemon is started when none
/// answers (or when the one that answers is of another version) and
/// waited for.
///
/// The daemon of `paths`' data directory is reached where it listens: at
/// the socket it recorded in `daemon.json` when that is not the one this
/// process computed (its runtime directory differs from the daemon's) and
/// the daemon is found through its lock, the socket checked
/// ([`recorded_elsewhere`]); else at `paths.socket`. This process's own
/// runtime directory is needed only in the second case.
pub(crate) fn connect(
    paths: &DaemonPaths,
    hello: &Hello,
    start: Option<&StartSpec>,
) -> Result<Connected, ClientError> {
    let own_dir = paths.ensure_runtime_dir().map_err(|e| e.to_string());
    let began = Instant::now();
    let mut started: Option<std::process::Child> = None;
    // Whether this client started a daemon (candidate) at all.
    let mut spawned = false;
    let mut last_mismatch: Option<Reply> = None;
    let mut first_gone: Option<Instant> = None;
    loop {
        let followed = recorded_elsewhere(paths);
        let target = match (&followed, &own_dir) {
            (Some(recorded), _) => recorded,
            (None, Ok(())) => paths,
            (None, Err(e)) => return Err(ClientError::Unreachable(e.clone())),
        };
        match UnixStream::connect(&target.socket) {
            Ok(stream) => match say_hello(target, stream, hello) {
                // The daemon closed the connection unanswered: it was
                // exiting (killed, stopping) as this client connected, and
                // its socket is about to be stale. Connect again: that is
                // refused (and handled as a stale socket) or answered.
                // (While a daemon this client started takes over, this is
                // the old one leaving: go on waiting, below.)
                Err(NoAnswer::Gone(e)) if started.is_none() => {
                    if first_gone.get_or_insert_with(Instant::now).elapsed() > HELLO_TIMEOUT {
                        return Err(e);
                    }
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                }
                Err(NoAnswer::Gone(_)) => {}
                // While a daemon this client started takes over from one of
                // another version, the old one may not answer for a moment.
                Err(NoAnswer::Failed(ClientError::Unreachable(_))) if started.is_some() => {}
                Err(NoAnswer::Failed(e)) => return Err(e),
                Ok(Ok(connected)) => {
                    if let Some(child) = started.take() {
                        reap_in_background(child);
                    }
                    return Ok(connected);
                }
                Ok(Err(reply)) => {
                    let Some(failure) = reply.error.clone() else {
                        return Err(ClientError::Unreachable("empty reply".into()));
                    };
                    if failure.code != Code::VersionMismatch || start.is_none() {
                        return Err(ClientError::Refused(failure));
                    }
                    last_mismatch = Some(reply);
                }
            },
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::NotFound | std::io::ErrorKind::ConnectionRefused
                ) =>
            {
                if start.is_none() {
                    return Err(
                        lost_socket(paths).unwrap_or_else(|| ClientError::NotRunning {
                            data_dir: paths.data_dir.clone(),
                            socket: paths.socket.clone(),
                        }),
                    );
                }
            }
            Err(e) => {
                return Err(ClientError::Unreachable(format!(
                    "cannot connect to the dsh daemon at {}: {e}",
                    target.socket.display()
                )));
            }
        }
        let Some(spec) = start else {
            return Err(ClientError::NotRunning {
                data_dir: paths.data_dir.clone(),
                socket: paths.socket.clone(),
            });
        };
        match &mut started {
            // A daemon is started only when none holds the lock, or to
            // take over from one of another version. One that holds it
            // and does not answer is starting (it answers once it
            // listens, wherever that is), stopping (it releases the lock,
            // and then one is started), or has lost its socket (said at
            // once).
            None if last_mismatch.is_none() && crate::holder::lock_is_held(paths) => {
                if let Some(lost) = lost_socket(paths) {
                    return Err(lost);
                }
            }
            None => {
                started = Some(spawn_daemon(paths, spec)?);
                spawned = true;
            }
            Some(child) => match child.try_wait() {
                Ok(Some(status)) if !status.success() => {
                    return Err(ClientError::Unreachable(format!(
                        "the dsh daemon could not start ({status}): {}",
                        log_tail(&paths.log)
                    )));
                }
                // It found the lock held (by a daemon of this version, as
                // far as it could tell) and left it the place. That one
                // answers once it listens, unless it already listens
                // elsewhere (its socket was removed); once nobody holds
                // the lock, start another. Whether anybody holds it is
                // what the candidate tested, not whether the holder
                // passes as the daemon `daemon.json` names: a holder that
                // does not would otherwise have a candidate started every
                // poll, each leaving at once.
                Ok(Some(_)) => {
                    if let Some(holder) = crate::holder::find_holder(paths)
                        && let Some(lost) = lost_socket_of(paths, holder)
                    {
                        return Err(lost);
                    }
                    if !crate::holder::lock_is_held(paths) {
                        started = None;
                    }
                }
                Ok(None) | Err(_) => {}
            },
        }
        if began.elapsed() > START_TIMEOUT {
            if let Some(child) = started.take() {
                reap_in_background(child);
            }
            return Err(not_started_in_time(
                paths,
                hello,
                last_mismatch.as_ref(),
                spawned,
            ));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Why no daemon answered within [`START_TIMEOUT`]: the running one of
/// another version did not hand over, the one this client started did not
/// listen, or the one that holds the lock did not start listening.
fn not_started_in_time(
    paths: &DaemonPaths,
    hello: &Hello,
    last_mismatch: Option<&Reply>,
    spawned: bool,
) -> ClientError {
    let why = match last_mismatch {
        Some(reply) => format!(
            "the running daemon (pid {}) is dsh {} and this is dsh {}; the new daemon did not take over within {} s: {}",
            reply.pid,
            reply.version,
            hello.version,
            START_TIMEOUT.as_secs(),
            log_tail(&paths.log)
        ),
        None if spawned => format!(
            "a dsh daemon was started but did not answer on {} within {} s: {}",
            paths.socket.display(),
            START_TIMEOUT.as_secs(),
            log_tail(&paths.log)
        ),
        None => format!(
            "the dsh daemon{} that holds {} did not start listening within {} s (see \
             `dsh daemon status`): {}",
            daemon_pid_hint(paths),
            paths.lock.display(),
            START_TIMEOUT.as_secs(),
            log_tail(&paths.log)
        ),
    };
    ClientError::Unreachable(why)
}

/// The daemon that holds the data directory's lock, after a request
/// failed with `error`: the one the client found already when its socket
/// was lost, else looked for (see [`crate::holder::find_holder`]).
pub fn holder_of(paths: &DaemonPaths, error: &ClientError) -> Option<crate::holder::Holder> {
    if let ClientError::SocketLost { holder, .. } = error {
        return Some(holder.as_ref().clone());
    }
    crate::holder::find_holder(paths)
}

/// The paths of the daemon of `paths`' data directory at the socket it
/// recorded in `daemon.json`, when that is not `paths.socket` (the
/// daemon was started with another `DSH_RUNTIME_DIR` or
/// `XDG_RUNTIME_DIR`, or with none) and may be used: the daemon listens,
/// it is found through its lock and checked to be the process the file
/// names ([`crate::holder::find_holder`]), and the socket passes
/// [`crate::paths::check_recorded_socket`]. `None` otherwise: the client
/// looks where it computed.
fn recorded_elsewhere(paths: &DaemonPaths) -> Option<DaemonPaths> {
    // Read cheaply first: where the daemon listens where this process
    // looks (the usual case), nothing else is read.
    let recorded = daemon_wire::info::read_info(&paths.info)?;
    if !recorded.listening || recorded.socket == paths.socket {
        return None;
    }
    let holder = crate::holder::find_holder(paths)?;
    let info = &holder.info;
    if !info.listening || info.socket == paths.socket {
        return None;
    }
    crate::paths::check_recorded_socket(&info.socket, info.socket_id).ok()?;
    Some(paths.at_socket(&info.socket))
}

/// The error for a daemon that holds the data directory and has bound a
/// socket no client can use: its socket was removed while it ran (or
/// replaced: the client then found no listener), or, when it listens
/// where another runtime directory leads, that socket fails the checks of
/// [`crate::paths::check_recorded_socket`].
fn lost_socket(paths: &DaemonPaths) -> Option<ClientError> {
    lost_socket_of(paths, crate::holder::find_holder(paths)?)
}

/// [`lost_socket`] for the daemon `holder`, found already.
fn lost_socket_of(paths: &DaemonPaths, holder: crate::holder::Holder) -> Option<ClientError> {
    use crate::paths::PathsError;
    if !holder.info.listening {
        return None;
    }
    let pid = holder.info.pid;
    let socket = &holder.info.socket;
    let checked = if *socket == paths.socket {
        // Recorded after the bind: a file with another identity (or none)
        // is not the daemon's socket, however recently this client looked.
        // (A daemon that recorded no identity is taken at its word.)
        match holder.info.socket_id {
            None => return None,
            Some(bound) => {
                use std::os::unix::fs::MetadataExt as _;
                let now = std::fs::symlink_metadata(socket)
                    .ok()
                    .map(|m| (m.dev(), m.ino()));
                if now == Some(bound) {
                    return None;
                }
                Err(PathsError::SocketGone {
                    socket: socket.clone(),
                })
            }
        }
    } else {
        crate::paths::check_recorded_socket(socket, holder.info.socket_id)
    };
    let message = match checked {
        // It can be reached there: the caller goes there.
        Ok(()) => return None,
        Err(PathsError::SocketGone { .. }) => format!(
            "the dsh daemon (pid {pid}) of {} no longer has its socket {} (it was removed or \
             replaced while the daemon ran), so no client can reach it: run `dsh daemon stop`, \
             which finds the daemon through its lock, and try again",
            paths.data_dir.display(),
            socket.display()
        ),
        Err(e) => format!(
            "the dsh daemon (pid {pid}) of {} listens on {}, which this command will not use: \
             {e}. Fix that, or run `dsh daemon stop`, which finds the daemon through its lock, \
             and try again",
            paths.data_dir.display(),
            socket.display()
        ),
    };
    Some(ClientError::SocketLost {
        holder: Box::new(holder),
        message,
    })
}

/// Why a hello got no reply.
enum NoAnswer {
    /// The connection was closed or reset before any answer: the daemon
    /// went away.
    Gone(ClientError),
    /// Anything else.
    Failed(ClientError),
}

/// Checks, before anything is sent (a hello carries the session's
/// environment), that the process listening on the socket is the daemon
/// that holds the lock of the data directory, as its `daemon.json` says.
/// The runtime directory may be writable by commands the daemon confines
/// (when it falls back into the temp dir); the data directory never is.
/// A mismatch is answered like a daemon that went away (the client tries
/// again: a daemon taking over writes its file before it binds the
/// socket), and named if it lasts.
fn check_peer(paths: &DaemonPaths, stream: &UnixStream) -> Result<(), NoAnswer> {
    let recorded = match daemon_wire::info::try_read_info(&paths.info) {
        // The data directory is closed to what the daemon confines.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(NoAnswer::Failed(ClientError::Unreachable(format!(
                "this process may not read {} ({e}): {}",
                paths.info.display(),
                daemon_wire::SANDBOXED_CLIENT_WHY
            ))));
        }
        read => read.ok().flatten().map(|i| i.pid as i32),
    };
    let peer = process_tree::peer_pid(stream);
    if peer.is_some() && peer == recorded {
        return Ok(());
    }
    // Pid 0: the holder is outside this process's PID namespace (this
    // client runs in a dsh terminal or job, each in a namespace of its
    // own), where no pid of the daemon can be compared. The daemon checks
    // who connected, and refuses a confined client, before it reads the
    // hello or serves anything.
    if peer == Some(0) && recorded.is_some() {
        return Ok(());
    }
    let who = peer.map_or_else(|| "an unknown process".to_owned(), |p| format!("pid {p}"));
    let expected = recorded.map_or_else(
        || format!("no daemon is recorded in {}", paths.info.display()),
        |p| format!("the daemon recorded in {} is pid {p}", paths.info.display()),
    );
    Err(NoAnswer::Gone(ClientError::NotTheDaemon(format!(
        "the socket {} is held by {who}, but {expected}: nothing was sent to it. \
         Stop the process that holds it (or remove the socket) and try again",
        paths.socket.display()
    ))))
}

/// Whether `pid` runs: it exists and is neither stopped, traced, a zombie
/// nor dead (from `/proc`).
fn runs(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')').map(|i| {
                !matches!(
                    s[i + 1..].trim_start().chars().next(),
                    Some('T' | 't' | 'Z' | 'X') | None
                )
            })
        })
        .unwrap_or(false)
}

/// Sends the hello and reads the reply: `Ok(Ok)` accepted, `Ok(Err)`
/// refused, `Err` unreachable. A daemon that runs is waited for up to
/// [`HELLO_PATIENCE`]; one that is stopped or gone, [`HELLO_TIMEOUT`].
fn say_hello(
    paths: &DaemonPaths,
    stream: UnixStream,
    hello: &Hello,
) -> Result<Result<Connected, Reply>, NoAnswer> {
    let unreachable = |what: String| {
        ClientError::Unreachable(format!(
            "the dsh daemon{} at {} {what}",
            daemon_pid_hint(paths),
            paths.socket.display()
        ))
    };
    let gone = |e: &std::io::Error| {
        matches!(
            e.kind(),
            std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
        )
    };
    stream
        .set_read_timeout(Some(HELLO_TIMEOUT))
        .and_then(|()| stream.set_write_timeout(Some(HELLO_TIMEOUT)))
        .map_err(|e| NoAnswer::Failed(unreachable(format!("cannot be used: {e}"))))?;
    check_peer(paths, &stream)?;
    let mut writer = &stream;
    write_line_blocking(&mut writer, hello).map_err(|e| {
        let error = unreachable(format!("did not take the request: {e}"));
        if gone(&e) {
            NoAnswer::Gone(error)
        } else {
            NoAnswer::Failed(error)
        }
    })?;
    let mut reader = BufReader::new(stream);
    let asked = Instant::now();
    let reply: Reply = loop {
        match read_line_blocking(&mut reader, MAX_REPLY_LINE) {
            Ok(reply) => break reply,
            Err(LineError::Io(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                let running =
                    daemon_wire::info::read_info(&paths.info).is_some_and(|i| runs(i.pid));
                if running && asked.elapsed() < HELLO_PATIENCE {
                    continue;
                }
                let waited = if running {
                    format!("{} s", HELLO_PATIENCE.as_secs())
                } else {
                    format!("{} ms", HELLO_TIMEOUT.as_millis())
                };
                return Err(NoAnswer::Failed(unreachable(format!(
                    "did not answer within {waited}; it may be stopped or overloaded (`dsh daemon status`; its log is {})",
                    paths.log.display()
                ))));
            }
            Err(LineError::Closed) => {
                return Err(NoAnswer::Gone(unreachable(
                    "closed the connection without an answer".into(),
                )));
            }
            Err(LineError::Io(e)) if gone(&e) => {
                return Err(NoAnswer::Gone(unreachable(format!("answered badly: {e}"))));
            }
            Err(e) => {
                return Err(NoAnswer::Failed(unreachable(format!(
                    "answered badly: {e}"
                ))));
            }
        }
    };
    let _ = reader.get_ref().set_read_timeout(None);
    let _ = reader.get_ref().set_write_timeout(None);
    if reply.error.is_some() {
        return Ok(Err(reply));
    }
    Ok(Ok(Connected {
        stream: reader,
        reply,
    }))
}

/// One request, one result; starts a daemon when `start` is given. The
/// daemon accepts at once (so an unreachable one is told apart quickly)
/// and answers when the request is done.
fn request(
    paths: &DaemonPaths,
    request: Request,
    start: Option<&StartSpec>,
) -> Result<Reply, ClientError> {
    let mut connected = connect(paths, &Hello::new(request), start)?;
    let reply = read_result(&mut connected.stream).map_err(|e| {
        ClientError::Unreachable(format!(
            "the dsh daemon (pid {}) accepted the request but {e}",
            connected.reply.pid
        ))
    })?;
    match reply.error {
        Some(failure) => Err(ClientError::Refused(failure)),
        None => Ok(reply),
    }
}

/// Starts `dsh daemon --spawned` detached: its own session, stdio to the
/// log file.
fn spawn_daemon(paths: &DaemonPaths, spec: &StartSpec) -> Result<std::process::Child, ClientError> {
    paths
        .ensure_data_dir()
        .map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&paths.log)
        .map_err(|e| {
            ClientError::Unreachable(format!(
                "cannot open the daemon's log {}: {e}",
                paths.log.display()
            ))
        })?;
    let log_err = log
        .try_clone()
        .map_err(|e| ClientError::Unreachable(format!("cannot open the daemon's log: {e}")))?;
    let mut command = std::process::Command::new(&spec.program);
    command
        .arg("--data-dir")
        .arg(&paths.data_dir)
        .args(["daemon", "--spawned"])
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(log_err);
    if let Some(config) = &spec.config {
        command.arg("--config").arg(config);
    }
    // SAFETY: setsid and sigprocmask are async-signal-safe and touch no
    // memory of ours. The daemon must not inherit the signals a bridge
    // blocks for its signal thread (nor pass them on to every terminal).
    unsafe {
        command.pre_exec(|| {
            nix::sys::signal::SigSet::empty()
                .thread_set_mask()
                .map_err(std::io::Error::from)?;
            nix::unistd::setsid()
                .map(drop)
                .map_err(std::io::Error::from)
        });
    }
    command.spawn().map_err(|e| {
        ClientError::Unreachable(format!(
            "cannot start the dsh daemon ({}): {e}",
            spec.program.display()
        ))
    })
}

/// Waits for a child on a thread of its own, so it never lingers as a
/// zombie while this process runs.
fn reap_in_background(mut child: std::process::Child) {
    std::thread::spawn(move || {
        let _ = child.wait();
    });
}

/// The last lines of the daemon's log, on one line, for a message.
pub fn log_tail(log: &Path) -> String {
    let mut text = String::new();
    if let Ok(mut file) = std::fs::File::open(log) {
        let _ = file.read_to_string(&mut text);
    }
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
    if tail.is_empty() {
        format!("its log {} is empty", log.display())
    } else {
        format!("{tail} (log: {})", log.display())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use daemon_wire::Request;
    use std::os::unix::net::UnixListener;

    fn paths_in(dir: &Path) -> DaemonPaths {
        let paths = DaemonPaths::with_runtime_dir(&dir.join("data"), &dir.join("run"));
        paths.ensure_runtime_dir().unwrap();
        paths.ensure_data_dir().unwrap();
        paths
    }

    /// A daemon killed as a client connects: its listener took the
    /// connection into its backlog and closed. The socket it left is stale,
    /// as if the client had come a moment later.
    #[test]
    fn a_daemon_that_dies_as_the_client_connects_is_taken_for_gone() {
        let dir = tempfile::tempdir().unwrap();
        let paths = paths_in(dir.path());
        let listener = UnixListener::bind(&paths.socket).unwrap();
        let dying = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            drop(stream);
            drop(listener);
        });
        let got = connect(&paths, &Hello::new(Request::Status), None);
        dying.join().unwrap();
        assert!(
            matches!(got, Err(ClientError::NotRunning { .. })),
            "{:?}",
            got.err()
        );
    }

    /// A daemon that runs but answers late (a loaded machine) is waited
    /// for; only a stopped one is given up on after `HELLO_TIMEOUT`.
    #[test]
    fn a_running_daemon_that_answers_late_is_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let paths = paths_in(dir.path());
        // this test's process stands for the daemon: it runs
        let info = serde_json::json!({
            "pid": std::process::id(), "version": version_of_test(),
            "socket": paths.socket, "started_at": "2000-01-01T00:00:00Z",
        });
        std::fs::write(&paths.info, info.to_string()).unwrap();
        let listener = UnixListener::bind(&paths.socket).unwrap();
        let slow = std::thread::spawn(move || {
            let (stream, _) = listener.accept().unwrap();
            let mut reader = BufReader::new(&stream);
            let _: Hello = read_line_blocking(&mut reader, MAX_REPLY_LINE).unwrap();
            // sleep-ok: the daemon's slowness is what this test is about
            std::thread::sleep(HELLO_TIMEOUT + Duration::from_millis(700));
            let mut writer = &stream;
            // a client that gave up has closed its end
            let _ = write_line_blocking(&mut writer, &Reply::ok(serde_json::json!({})));
        });
        let got = connect(&paths, &Hello::new(Request::Status), None);
        slow.join().unwrap();
        let connected = got.map_err(|e| e.to_string()).unwrap();
        assert_eq!(connected.reply.error, None);
    }

    /// Records this process in `daemon.json` as the daemon of `paths`,
    /// listening on `socket` (bound already, with identity `socket_id`).
    fn record_this_process(paths: &DaemonPaths, socket: &Path, socket_id: Option<(u64, u64)>) {
        let me = std::process::id();
        let info = daemon_wire::info::DaemonInfo {
            pid: me,
            version: version_of_test(),
            socket: socket.to_path_buf(),
            started_at: "2000-01-01T00:00:00Z".into(),
            start_time: process_tree::process_info(me as i32).map(|p| p.start_time),
            listening: true,
            socket_id,
        };
        std::fs::write(&paths.info, serde_json::to_string(&info).unwrap()).unwrap();
    }

    /// Takes `paths`' daemon lock, as a daemon does.
    fn take_lock(paths: &DaemonPaths) -> nix::fcntl::Flock<std::fs::File> {
        use nix::fcntl::{Flock, FlockArg};
        Flock::lock(
            std::fs::File::create(&paths.lock).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .map_err(|(_, e)| e)
        .unwrap()
    }

    /// A daemon whose runtime directory is not this client's (another
    /// `XDG_RUNTIME_DIR`, or none) is reached at the socket it recorded,
    /// once found through its lock; one whose socket's directory is open
    /// to others is not, and the client says why and what to do.
    #[test]
    fn a_daemon_in_another_runtime_dir_is_reached_through_its_record() {
        use std::os::unix::fs::{MetadataExt as _, PermissionsExt as _};
        let dir = tempfile::tempdir().unwrap();
        let paths = paths_in(dir.path());
        let theirs = DaemonPaths::with_runtime_dir(&paths.data_dir, &dir.path().join("other"));
        theirs.ensure_runtime_dir().unwrap();
        assert_ne!(theirs.socket, paths.socket);
        let _lock = take_lock(&paths);
        let listener = UnixListener::bind(&theirs.socket).unwrap();
        let meta = std::fs::metadata(&theirs.socket).unwrap();
        record_this_process(&paths, &theirs.socket, Some((meta.dev(), meta.ino())));
        let accepting = listener.try_clone().unwrap();
        let daemon = std::thread::spawn(move || {
            let (stream, _) = accepting.accept().unwrap();
            let mut reader = BufReader::new(&stream);
            let _: Hello = read_line_blocking(&mut reader, MAX_REPLY_LINE).unwrap();
            let mut writer = &stream;
            write_line_blocking(&mut writer, &Reply::ok(serde_json::json!({}))).unwrap();
        });
        let got = connect(&paths, &Hello::new(Request::Status), None);
        let connected = got.map_err(|e| e.to_string()).unwrap();
        daemon.join().unwrap();
        assert_eq!(connected.reply.error, None);
        assert!(
            !paths.socket.exists(),
            "nothing listens where this client looked"
        );

        std::fs::set_permissions(&theirs.runtime_dir, std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let got = connect(&paths, &Hello::new(Request::Status), None);
        drop(listener);
        let Err(ClientError::SocketLost { message, .. }) = got else {
            panic!("{:?}", got.err());
        };
        assert_eq!(
            message,
            format!(
                "the dsh daemon (pid {}) of {} listens on {}, which this command will not use: \
                 the runtime directory {dir} has mode 0755; it must be private (0700): run `chmod \
                 700 {dir}`. Fix that, or run `dsh daemon stop`, which finds the daemon through \
                 its lock, and try again",
                std::process::id(),
                paths.data_dir.display(),
                theirs.socket.display(),
                dir = theirs.runtime_dir.display(),
            )
        );
    }

    /// While anyone holds the lock, by a process that does not pass for
    /// the daemon `daemon.json` names (here none is named), no candidate
    /// is started: the holder is starting or stopping.
    #[test]
    fn no_candidate_is_started_while_anyone_holds_the_lock() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let paths = paths_in(dir.path());
        let lock = take_lock(&paths);
        // a candidate that would find the lock held and leave: it counts
        // its starts
        let starts = dir.path().join("starts");
        let candidate = dir.path().join("candidate");
        std::fs::write(
            &candidate,
            format!("#!/bin/sh\necho started >> {}\n", starts.display()),
        )
        .unwrap();
        std::fs::set_permissions(&candidate, std::fs::Permissions::from_mode(0o755)).unwrap();
        let spec = StartSpec {
            program: candidate,
            config: None,
        };
        let client = {
            let paths = paths.clone();
            std::thread::spawn(move || connect(&paths, &Hello::new(Request::Status), Some(&spec)))
        };
        // sleep-ok: what is checked is that no candidate starts meanwhile
        // (one would every 10 ms)
        std::thread::sleep(Duration::from_millis(500));
        let started = std::fs::read_to_string(&starts)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        // the holder turns out to be a daemon whose socket is gone: the
        // client says so and returns
        record_this_process(&paths, &paths.socket, Some((0, 0)));
        let got = client.join().unwrap();
        drop(lock);
        assert!(
            matches!(got, Err(ClientError::SocketLost { .. })),
            "{:?}",
            got.err()
        );
        assert_eq!(started, 0, "candidates started while the lock was held");
    }

    fn version_of_test() -> String {
        daemon_wire::version()
    }
}
