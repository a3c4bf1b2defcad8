//! `dsh daemon`: one per user and data directory.
//!
//! Start-up: take `DATA/daemon.lock` (a second daemon refuses at once,
//! naming the running one's pid and socket; a daemon of another version is
//! asked to hand the store over first), write `DATA/daemon.json`, open the
//! store and hold it, replace a stale socket, listen. Every accepted
//! connection says hello first (see [`crate::protocol`]); an MCP
//! connection is served by the same [`Host`] code as a standalone server.
//!
//! Life: SIGHUP reloads every connection's config; SIGTERM, SIGINT and
//! `dsh daemon stop` end every connection, terminal and job (verified),
//! stop the language servers, close the store and remove the socket; with
//! no connection, terminal or job for `[daemon] idle_exit` it exits the
//! same way.
//!
//! Upgrades: asked to hand over by a daemon of another version, this one
//! stops listening, removes its socket, closes the store and releases the
//! lock; it keeps serving its live connections (their session records are
//! forwarded to the new daemon) and exits when the last one ends.

use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd as _, OwnedFd};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use tokio::io::BufReader;
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tools_catalog::Preset;

use crate::host::{ConfigLoader, ConnectionSetup, Host, HostConfig, serve_connection};
use crate::paths::DaemonPaths;
use crate::protocol::{
    Hello, MAX_REQUEST_LINE, PROTOCOL, Reply, Request, read_line, version, write_line,
};
use crate::store::{HeldStore, StoreAccess};

/// Who holds a data directory's daemon lock (`DATA/daemon.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// Its pid.
    pub pid: u32,
    /// Its dsh version.
    pub version: String,
    /// Its socket.
    pub socket: PathBuf,
    /// When it started (RFC 3339).
    pub started_at: String,
}

/// Reads a daemon info file.
pub fn read_info(path: &Path) -> Option<DaemonInfo> {
    try_read_info(path).ok().flatten()
}

/// Reads a daemon info file: `Ok(None)` when it is missing or not one,
/// the error when it cannot be read.
pub fn try_read_info(path: &Path) -> std::io::Result<Option<DaemonInfo>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(serde_json::from_str(&text).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Whether `pid` runs (exists and is not a zombie), read from `/proc`.
pub fn pid_alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rfind(')')
                .map(|i| !matches!(s[i + 1..].trim_start().chars().next(), Some('Z' | 'X')))
        })
        .unwrap_or(false)
}

/// How `dsh daemon` was started.
pub struct DaemonOptions {
    /// Its files.
    pub paths: DaemonPaths,
    /// Its config (language servers, limits, log, idle exit).
    pub config: HostConfig,
    /// The config file it was read from (the default for connections that
    /// name none).
    pub config_path: Option<PathBuf>,
    /// Reads a connection's config file.
    pub loader: ConfigLoader,
    /// Started by a client: exit quietly when another daemon won the race.
    pub spawned: bool,
}

/// Why a daemon did not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// Another daemon of this version serves the data directory.
    #[error(
        "a dsh daemon already serves {data_dir}: pid {pid}, socket {socket} (`dsh daemon stop` stops it)"
    )]
    AlreadyRunning {
        /// The data directory.
        data_dir: PathBuf,
        /// Its pid.
        pid: u32,
        /// Its socket.
        socket: PathBuf,
    },
    /// Anything else, with what to do.
    #[error("{0}")]
    Failed(String),
}

/// Takes the daemon lock of `paths`, asking a daemon of another version to
/// hand over first.
fn take_lock(paths: &DaemonPaths) -> Result<Flock<File>, DaemonError> {
    let began = Instant::now();
    let mut asked = false;
    loop {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .read(true)
            .write(true)
            .mode(0o600)
            .open(&paths.lock)
            .map_err(|e| {
                DaemonError::Failed(format!("cannot open {}: {e}", paths.lock.display()))
            })?;
        match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => return Ok(lock),
            Err((_, Errno::EWOULDBLOCK | Errno::EINTR)) => {}
            Err((_, e)) => {
                return Err(DaemonError::Failed(format!(
                    "cannot lock {}: {e}",
                    paths.lock.display()
                )));
            }
        }
        if began.elapsed() > Duration::from_secs(15) {
            return Err(DaemonError::Failed(format!(
                "the lock {} stayed held for 15 s by a daemon that did not hand over; see `dsh daemon status`",
                paths.lock.display()
            )));
        }
        // The holder writes its info just after taking the lock.
        let holder = read_info(&paths.info).filter(|i| pid_alive(i.pid));
        match holder {
            Some(info) if info.version == version() => {
                return Err(DaemonError::AlreadyRunning {
                    data_dir: paths.data_dir.clone(),
                    pid: info.pid,
                    socket: info.socket,
                });
            }
            Some(info) if !asked => {
                tracing::info!(
                    pid = info.pid,
                    version = %info.version,
                    "a daemon of another version holds the store; asking it to hand over"
                );
                let handover = Request::Handover {
                    socket: paths.socket.clone(),
                };
                let reply = crate::client::request_at(&info.socket, handover);
                match reply {
                    Ok(reply) if reply.error.is_none() => asked = true,
                    Ok(reply) => {
                        tracing::warn!("the old daemon refused to hand over: {:?}", reply.error)
                    }
                    Err(e) => tracing::warn!("could not ask the old daemon to hand over: {e}"),
                }
            }
            Some(_) | None => {}
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Writes `DATA/daemon.json` (atomically, 0600).
fn write_info(paths: &DaemonPaths) -> Result<(), DaemonError> {
    let info = DaemonInfo {
        pid: std::process::id(),
        version: version(),
        socket: paths.socket.clone(),
        started_at: chrono::Utc::now().to_rfc3339(),
    };
    let tmp = paths
        .info
        .with_extension(format!("json.{}", std::process::id()));
    let text =
        serde_json::to_string_pretty(&info).map_err(|e| DaemonError::Failed(e.to_string()))?;
    let written = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| std::io::Write::write_all(&mut f, text.as_bytes()))
        .and_then(|()| std::fs::rename(&tmp, &paths.info));
    written.map_err(|e| DaemonError::Failed(format!("cannot write {}: {e}", paths.info.display())))
}

/// Binds the socket, replacing a stale one (the lock proves its daemon is
/// gone), mode 0600.
fn bind(paths: &DaemonPaths) -> Result<(UnixListener, (u64, u64)), DaemonError> {
    match std::fs::remove_file(&paths.socket) {
        Ok(()) => tracing::info!("replaced a stale socket {}", paths.socket.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => {
            return Err(DaemonError::Failed(format!(
                "cannot remove the stale socket {}: {e}",
                paths.socket.display()
            )));
        }
    }
    let listener = UnixListener::bind(&paths.socket).map_err(|e| {
        DaemonError::Failed(format!("cannot listen on {}: {e}", paths.socket.display()))
    })?;
    let meta = std::fs::metadata(&paths.socket)
        .map_err(|e| DaemonError::Failed(format!("{}: {e}", paths.socket.display())))?;
    let _ = std::fs::set_permissions(&paths.socket, std::fs::Permissions::from_mode(0o600));
    Ok((listener, (meta.dev(), meta.ino())))
}

/// Removes the socket if it is still the one this daemon bound.
fn unlink_own_socket(path: &Path, identity: (u64, u64)) {
    if let Ok(meta) = std::fs::metadata(path)
        && (meta.dev(), meta.ino()) == identity
    {
        let _ = std::fs::remove_file(path);
    }
}

/// What the accept loop is asked to do by a connection's handler.
enum Control {
    Stop(&'static str),
    Handover(PathBuf, oneshot::Sender<()>),
}

struct Shared {
    host: Arc<Host>,
    held: Arc<HeldStore>,
    paths: DaemonPaths,
    config_path: Option<PathBuf>,
    control: mpsc::Sender<Control>,
    /// Cancelled to end every connection.
    stop: CancellationToken,
    started_at: SystemTime,
    /// Registry requests, attaches and other short clients in flight.
    busy: AtomicUsize,
    /// People watching a live stream of the web page.
    watchers: Arc<AtomicUsize>,
    /// The web page, once `dsh ui` asked for it.
    ui: tokio::sync::Mutex<Option<ui::UiServer>>,
}

/// Runs the daemon until it is stopped, idle, or drained after a hand-over.
/// Blocking: builds its own tokio runtime.
pub fn run(options: DaemonOptions) -> Result<(), DaemonError> {
    // Whatever started us, signals reach the daemon (and, through it, the
    // programs it starts) unblocked.
    let _ = nix::sys::signal::SigSet::empty().thread_set_mask();
    let paths = options.paths.clone();
    paths
        .ensure_runtime_dir()
        .map_err(|e| DaemonError::Failed(e.to_string()))?;
    paths
        .ensure_data_dir()
        .map_err(|e| DaemonError::Failed(e.to_string()))?;
    let lock = take_lock(&paths)?;
    write_info(&paths)?;
    let held = HeldStore::open(&paths.data_dir, Duration::from_secs(10)).map_err(|e| {
        DaemonError::Failed(format!(
            "cannot open the store in {}: {}",
            paths.data_dir.display(),
            crate::registry_ops::explain(e, &paths.data_dir).message
        ))
    })?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| DaemonError::Failed(format!("cannot start the runtime: {e}")))?;
    let result = runtime.block_on(serve(options, Arc::new(held), lock));
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(
    options: DaemonOptions,
    held: Arc<HeldStore>,
    lock: Flock<File>,
) -> Result<(), DaemonError> {
    crate::processes::start();
    let paths = options.paths.clone();
    let idle_exit = options.config.idle_exit;
    let host = Arc::new(Host::new(
        options.config,
        options.loader,
        StoreAccess::Held(held.clone()),
        vec![
            paths.data_dir.clone(),
            paths.runtime_dir.clone(),
            paths.log.clone(),
        ],
    ));
    let (listener, identity) = bind(&paths)?;
    let (control_tx, mut control_rx) = mpsc::channel(8);
    let shared = Arc::new(Shared {
        host: host.clone(),
        held: held.clone(),
        paths: paths.clone(),
        config_path: options.config_path,
        control: control_tx,
        stop: CancellationToken::new(),
        started_at: SystemTime::now(),
        busy: AtomicUsize::new(0),
        watchers: Arc::new(AtomicUsize::new(0)),
        ui: tokio::sync::Mutex::new(None),
    });
    tracing::info!(
        pid = std::process::id(),
        version = %version(),
        socket = %paths.socket.display(),
        data_dir = %paths.data_dir.display(),
        "dsh daemon listening"
    );
    use tokio::signal::unix::{SignalKind, signal};
    let signal_failed = |e: std::io::Error| DaemonError::Failed(format!("signals: {e}"));
    let mut sigterm = signal(SignalKind::terminate()).map_err(signal_failed)?;
    let mut sigint = signal(SignalKind::interrupt()).map_err(signal_failed)?;
    let mut sighup = signal(SignalKind::hangup()).map_err(signal_failed)?;
    let mut tasks = tokio::task::JoinSet::new();
    let mut listener = Some(listener);
    let mut lock = Some(lock);
    let mut idle_since = Some(Instant::now());
    let tick = (idle_exit / 4).clamp(Duration::from_millis(50), Duration::from_secs(1));
    let reason: &str = loop {
        tokio::select! {
            accepted = async {
                match &listener {
                    Some(l) => l.accept().await,
                    None => futures::future::pending().await,
                }
            } => match accepted {
                Ok((stream, _)) => {
                    let shared = shared.clone();
                    tasks.spawn(handle(shared, stream));
                }
                Err(e) => tracing::warn!("accept failed: {e}"),
            },
            Some(done) = tasks.join_next(), if !tasks.is_empty() => {
                if let Err(e) = done && e.is_panic() {
                    tracing::error!("a connection's task panicked; the daemon goes on");
                }
            }
            _ = sigterm.recv() => break "SIGTERM",
            _ = sigint.recv() => break "SIGINT",
            _ = sighup.recv() => {
                let reloaded = host.reload().await;
                tracing::info!(connections = reloaded, "SIGHUP: config reloaded");
            }
            Some(control) = control_rx.recv() => match control {
                Control::Stop(why) => break why,
                Control::Handover(to, done) => {
                    // Stop listening, free the socket path, close the store
                    // and release the lock, in that order.
                    listener = None;
                    unlink_own_socket(&paths.socket, identity);
                    held.hand_over(&to);
                    lock = None;
                    // The page reads the store: the new daemon serves it.
                    if let Some(page) = shared.ui.lock().await.take() {
                        page.stop().await;
                    }
                    let _ = done.send(());
                    tracing::info!(
                        to = %to.display(),
                        connections = host.connection_count(),
                        "handed the store over to a newer daemon; serving live connections until they end"
                    );
                }
            },
            () = tokio::time::sleep(tick) => {}
        }
        let active = host.connection_count() > 0
            || shared.busy.load(Ordering::Acquire) > 0
            || shared.watchers.load(Ordering::Acquire) > 0;
        if listener.is_none() && !active {
            break "handed over, last connection ended";
        }
        match (active, idle_since) {
            (true, _) => idle_since = None,
            (false, None) => idle_since = Some(Instant::now()),
            (false, Some(since)) if since.elapsed() >= idle_exit => {
                break "idle";
            }
            (false, Some(_)) => {}
        }
    };
    tracing::info!(reason, "dsh daemon stopping");
    // No new clients; every connection ends what it started (verified).
    drop(listener);
    if lock.is_some() {
        unlink_own_socket(&paths.socket, identity);
    }
    shared.stop.cancel();
    if let Some(page) = shared.ui.lock().await.take() {
        page.stop().await;
    }
    let drained = tokio::time::timeout(Duration::from_secs(30), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    if drained.is_err() {
        tracing::warn!("some connections did not end within 30 s");
    }
    host.runtime().jobs.shutdown().await;
    host.stop_language_servers().await;
    held.close();
    if lock.is_some() {
        if read_info(&paths.info).is_some_and(|i| i.pid == std::process::id()) {
            let _ = std::fs::remove_file(&paths.info);
        }
        drop(lock);
    }
    tracing::info!(reason, "dsh daemon stopped");
    Ok(())
}

/// A guard counting a short client as activity.
struct Busy<'a>(&'a AtomicUsize);

impl<'a> Busy<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::AcqRel);
        Self(counter)
    }
}

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

fn parse_preset(name: Option<&str>) -> Result<Option<Preset>, String> {
    match name {
        None => Ok(None),
        Some("minimal") => Ok(Some(Preset::Minimal)),
        Some("full") => Ok(Some(Preset::Full)),
        Some(other) => Err(format!("unknown preset `{other}`; use minimal or full")),
    }
}

/// A write half that does not shut the socket down when dropped, so the
/// client sees the end of the connection only when the daemon is done
/// with it (see [`handle`]).
struct KeepOpen(Option<tokio::net::unix::OwnedWriteHalf>);

impl Drop for KeepOpen {
    fn drop(&mut self) {
        if let Some(half) = self.0.take() {
            half.forget();
        }
    }
}

impl tokio::io::AsyncWrite for KeepOpen {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.0.as_mut() {
            Some(half) => std::pin::Pin::new(half).poll_write(cx, buf),
            None => std::task::Poll::Ready(Err(std::io::ErrorKind::BrokenPipe.into())),
        }
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.0.as_mut() {
            Some(half) => std::pin::Pin::new(half).poll_flush(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        // The MCP transport shuts down when the client is gone; the socket
        // stays open until the connection's teardown is over.
        match self.0.as_mut() {
            Some(half) => std::pin::Pin::new(half).poll_flush(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }
}

/// Whether the client `pid` may have been started by this daemon: it
/// descends from this process (an orphan of it is reparented to the
/// daemon, its subreaper, so it stays a descendant), or its line of
/// parents cannot be followed to init — the client already exited (a
/// confined process can connect, fork and exit, leaving the connection to
/// its child, which is then no longer the peer the kernel names) or a
/// parent exited during the walk. Such a client is refused: only a chain
/// that reaches init without passing this daemon is let in.
///
/// `peer` pins the client (`SO_PEERPIDFD`): a chain that reached init is
/// trusted only if the client is still alive afterwards, so `pid` named
/// it throughout and not a process that reused its pid. Every process of
/// the chain is read again after the walk; one that changed (it exited,
/// or was reparented because its parent did) means the walk may have
/// followed a reused pid, and the walk is retried. Without a pidfd (a
/// kernel before 6.5) the peer's own pid cannot be pinned.
fn started_by_us(pid: i32, peer: Option<&OwnedFd>) -> bool {
    for _ in 0..3 {
        match walk_to_init(pid) {
            Walk::Ours => return true,
            Walk::Init(chain) => {
                if peer.is_some_and(|fd| !alive(fd)) {
                    return true;
                }
                let unchanged = chain.iter().all(|(p, seen)| {
                    process_tree::process_info(*p)
                        .is_some_and(|now| (now.ppid, now.start_time) == *seen)
                });
                if unchanged {
                    return false;
                }
            }
        }
    }
    true
}

/// Where a walk up the parents of a process ended.
enum Walk {
    /// At this daemon, or nowhere (a process of the chain was gone).
    Ours,
    /// At init (or the top of the pid namespace), through these processes
    /// and what was read of each (parent, start time).
    Init(Vec<(i32, (i32, u64))>),
}

fn walk_to_init(pid: i32) -> Walk {
    let me = std::process::id() as i32;
    let mut chain = Vec::new();
    let mut current = pid;
    // A chain of parents is finite; the bound only guards a /proc that
    // changes under the walk.
    for _ in 0..4096 {
        if current == me {
            return Walk::Ours;
        }
        if current == 1 {
            return Walk::Init(chain);
        }
        match process_tree::process_info(current) {
            Some(info) if info.ppid > 0 && info.ppid != current => {
                chain.push((current, (info.ppid, info.start_time)));
                current = info.ppid;
            }
            // The parent of a process in another pid namespace reads 0:
            // the walk reached the top of the namespace this daemon sees.
            Some(info) if info.ppid == 0 => {
                chain.push((current, (info.ppid, info.start_time)));
                return Walk::Init(chain);
            }
            _ => return Walk::Ours,
        }
    }
    Walk::Ours
}

/// Whether the process behind `pidfd` has not exited (a zombie has, but
/// keeps its pid: it counts as alive here, as its pid cannot be reused).
fn alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: signal 0 only checks; the descriptor is a valid pidfd.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    // EPERM: it exists, but is not ours to signal.
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Whether the process that connected `socket`, whose pid the kernel
/// gave as `pid`, is refused as one this daemon may have started.
fn refused_peer(pid: Option<i32>, socket: &impl AsRawFd) -> bool {
    match (pid, peer_pidfd(socket)) {
        (Some(pid), Ok(peer)) => started_by_us(pid, peer.as_ref()),
        (None, _) | (_, Err(())) => true,
    }
}

/// A pidfd of the process that connected `socket`, where the kernel gives
/// one (`SO_PEERPIDFD`, Linux 6.5): `Ok(None)` on a kernel without it,
/// `Err(())` on any other failure — the peer is gone (reaped peers fail
/// with `ESRCH` or, before Linux 6.16, `EINVAL`), which must not drop the
/// check to the unpinned walk.
fn peer_pidfd(socket: &impl AsRawFd) -> Result<Option<OwnedFd>, ()> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a getsockopt into an int of the size given.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    if done == 0 && fd >= 0 {
        // SAFETY: the kernel handed us this new descriptor.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOPROTOOPT) => Ok(None),
        _ => Err(()),
    }
}

async fn handle(shared: Arc<Shared>, stream: UnixStream) {
    let peer_pid = stream.peer_cred().ok().and_then(|c| c.pid());
    // Checked at once, before the hello: the sooner the peer is looked
    // up, the less time a client that exits has to let its pid be reused.
    let sandboxed = refused_peer(peer_pid, &stream);
    // A second descriptor of the socket keeps it open after the MCP
    // transport dropped its halves, until everything the connection
    // started has ended: a bridge exits only then, as a standalone server
    // did.
    let keep = std::os::fd::AsFd::as_fd(&stream).try_clone_to_owned().ok();
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read);
    let hello: Hello = match tokio::time::timeout(
        Duration::from_secs(10),
        read_line(&mut reader, MAX_REQUEST_LINE),
    )
    .await
    {
        Ok(Ok(hello)) => hello,
        Ok(Err(e)) => {
            tracing::warn!("closing a connection that sent a malformed hello: {e}");
            let _ = write_line(&mut write, &Reply::failed("MALFORMED_HELLO", e.to_string())).await;
            return;
        }
        Err(_) => {
            tracing::warn!("closing a connection that sent no hello within 10 s");
            return;
        }
    };
    let request = hello.request;
    if sandboxed {
        let pid = peer_pid.unwrap_or(0);
        // A process this daemon started for a model (or one of its
        // descendants, which orphans stay as the daemon is their
        // subreaper) is confined; talking to the daemon would let it start
        // unconfined processes through a connection of its own.
        tracing::warn!(
            peer = pid,
            kind = request.kind(),
            "refused a client started by this daemon"
        );
        let reply = Reply::failed(
            "SANDBOXED_CLIENT",
            format!(
                "this client is refused: {}",
                crate::protocol::SANDBOXED_CLIENT_WHY
            ),
        );
        let _ = write_line(&mut write, &reply).await;
        return;
    }
    if hello.protocol != PROTOCOL || (request.needs_same_version() && hello.version != version()) {
        tracing::info!(
            client = %hello.version,
            kind = request.kind(),
            "refused a client of another version"
        );
        let reply = Reply::failed(
            "VERSION_MISMATCH",
            format!(
                "this dsh daemon is version {} and the client is {}; a client only talks to a daemon of its own version",
                version(),
                hello.version
            ),
        );
        let _ = write_line(&mut write, &reply).await;
        return;
    }
    let one_shot = match &request {
        Request::Mcp(_) | Request::Attach { .. } => false,
        Request::Registry { .. }
        | Request::Status
        | Request::Stop
        | Request::Reload
        | Request::Ps
        | Request::Ui
        | Request::Handover { .. }
        | Request::Record { .. } => true,
    };
    // One-shot requests are accepted at once and answered when done, so a
    // client tells a slow operation from a daemon that does not answer.
    if one_shot
        && write_line(
            &mut write,
            &Reply::ok(serde_json::json!({ "accepted": true })),
        )
        .await
        .is_err()
    {
        return;
    }
    match request {
        Request::Mcp(mcp) => {
            let preset = match parse_preset(mcp.preset.as_deref()) {
                Ok(p) => p,
                Err(e) => {
                    let _ = write_line(&mut write, &Reply::failed("INVALID_ARGUMENT", e)).await;
                    return;
                }
            };
            let config_path = mcp.config.clone().or_else(|| shared.config_path.clone());
            let config = match shared.host.load_config(config_path.as_deref()) {
                Ok(c) => c,
                Err(e) => {
                    let _ = write_line(&mut write, &Reply::failed("CONFIG_ERROR", e)).await;
                    return;
                }
            };
            let warnings: Vec<String> = shared
                .host
                .config()
                .fixed_differences(&config)
                .into_iter()
                .map(|k| {
                    format!(
                        "the running dsh daemon (pid {}) uses its own [{k}] settings; this connection's differ and apply after `dsh daemon stop`",
                        std::process::id()
                    )
                })
                .collect();
            let reply = Reply::ok(serde_json::json!({ "warnings": warnings }));
            if write_line(&mut write, &reply).await.is_err() {
                return;
            }
            let setup = ConnectionSetup {
                label: format!("mcp-{}", peer_pid.unwrap_or(0)),
                preset,
                config_path,
                config: Some(config),
                fallback_cwd: Some(mcp.cwd),
                env: Some(Arc::new(mcp.env)),
                peer_pid,
            };
            if let Err(e) = serve_connection(
                shared.host.clone(),
                setup,
                reader,
                KeepOpen(Some(write)),
                shared.stop.clone(),
            )
            .await
            {
                tracing::warn!("an MCP connection ended with an error: {e}");
            }
            drop(keep);
        }
        Request::Registry { op } => {
            let _busy = Busy::new(&shared.busy);
            let held = shared.held.clone();
            let dir = shared.paths.data_dir.clone();
            let result = tokio::task::spawn_blocking(move || {
                held.with_registry(|r| Ok(crate::registry_ops::execute(r, &op, &dir)))
            })
            .await;
            let reply = match result {
                Ok(Ok(Ok(data))) => Reply::ok(data),
                Ok(Ok(Err(failure))) => Reply::failed(&failure.code, failure.message),
                Ok(Err(e)) => {
                    let f = crate::registry_ops::explain(e, &shared.paths.data_dir);
                    Reply::failed(&f.code, f.message)
                }
                Err(e) => Reply::failed("INTERNAL", format!("the registry task failed: {e}")),
            };
            let _ = write_line(&mut write, &reply).await;
        }
        Request::Status => {
            let _ = write_line(&mut write, &Reply::ok(status(&shared).await)).await;
        }
        Request::Stop => {
            let _ = write_line(&mut write, &Reply::ok(status(&shared).await)).await;
            let _ = shared.control.send(Control::Stop("dsh daemon stop")).await;
        }
        Request::Reload => {
            let reloaded = shared.host.reload().await;
            let _ = write_line(
                &mut write,
                &Reply::ok(serde_json::json!({ "reloaded": reloaded })),
            )
            .await;
        }
        Request::Ps => {
            let _busy = Busy::new(&shared.busy);
            let data = crate::ps::snapshot(&shared.host, shared.started_at).await;
            let _ = write_line(&mut write, &Reply::ok(data)).await;
        }
        Request::Ui => {
            let _busy = Busy::new(&shared.busy);
            let reply = match serve_page(&shared).await {
                Ok(data) => Reply::ok(data),
                Err(e) => Reply::failed(e.code(), e.to_string()),
            };
            let _ = write_line(&mut write, &reply).await;
        }
        Request::Attach { id, write: typing } => {
            let _busy = Busy::new(&shared.busy);
            crate::attach::serve(
                &shared.host,
                &id,
                typing,
                reader,
                write,
                shared.stop.clone(),
            )
            .await;
        }
        Request::Handover { socket } => {
            let (done_tx, done_rx) = oneshot::channel();
            let sent = shared
                .control
                .send(Control::Handover(socket, done_tx))
                .await;
            let reply = match (sent, done_rx.await) {
                (Ok(()), Ok(())) => Reply::ok(serde_json::Value::Null),
                _ => Reply::failed("HANDOVER_FAILED", "the daemon is stopping"),
            };
            let _ = write_line(&mut write, &reply).await;
        }
        Request::Record { records } => {
            let _busy = Busy::new(&shared.busy);
            let held = shared.held.clone();
            let result = tokio::task::spawn_blocking(move || {
                for record in records {
                    held.record(record)?;
                }
                Ok::<(), workspace::WorkspaceError>(())
            })
            .await;
            let reply = match result {
                Ok(Ok(())) => Reply::ok(serde_json::Value::Null),
                Ok(Err(e)) => Reply::failed(e.code(), e.to_string()),
                Err(e) => Reply::failed("INTERNAL", e.to_string()),
            };
            let _ = write_line(&mut write, &reply).await;
        }
    }
}

/// The web page, started on the first request: its address and a fresh
/// one-time sign-in link (each request mints one). The secret itself
/// goes to a file only this user can read, beside the socket, for
/// scripts; it is never in a reply, an argument or the environment.
async fn serve_page(shared: &Shared) -> Result<serde_json::Value, ui::UiError> {
    let mut page = shared.ui.lock().await;
    if page.is_none() {
        let source = crate::ui_source::DaemonUiSource::new(
            shared.host.clone(),
            shared.held.clone(),
            shared.watchers.clone(),
        );
        let settings = shared.host.config().ui.clone();
        let mut server = ui::start(Arc::new(source), &settings, shared.stop.child_token()).await?;
        let token_file = ui_token_file(&shared.paths);
        if let Err(e) = server.keep_token_at(&token_file) {
            tracing::warn!(
                "ui: cannot write the page's token file {}: {e}",
                token_file.display()
            );
        }
        *page = Some(server);
    }
    let Some(page) = page.as_ref() else {
        return Ok(serde_json::Value::Null);
    };
    Ok(serde_json::json!({
        "url": page.login_url()?,
        "address": page.addr().to_string(),
        "exposed": page.exposed(),
        "token_file": ui_token_file(&shared.paths),
    }))
}

/// Where the page's secret is kept for scripts: beside the socket, in the
/// private runtime directory (`dsh-KEY.ui-token`).
fn ui_token_file(paths: &DaemonPaths) -> std::path::PathBuf {
    paths.socket.with_extension("ui-token")
}

async fn status(shared: &Shared) -> serde_json::Value {
    let uptime = shared.started_at.elapsed().unwrap_or_default();
    // The page, once `dsh ui` asked for it: where, and how many people
    // watch a live part of it now.
    let page = shared.ui.lock().await.as_ref().map(|p| {
        serde_json::json!({
            "address": p.addr().to_string(),
            "exposed": p.exposed(),
            "viewers": shared.watchers.load(Ordering::Acquire),
        })
    });
    serde_json::json!({
        "page": page,
        "pid": std::process::id(),
        "version": version(),
        "socket": shared.paths.socket,
        "data_dir": shared.paths.data_dir,
        "log": shared.paths.log,
        "uptime_s": uptime.as_secs(),
        "connections": shared.host.connection_count(),
        "idle_exit_s": shared.host.config().idle_exit.as_secs_f64(),
        "language_servers": shared.host.language_servers().iter().map(|s| serde_json::json!({
            "pid": s.pid, "server": s.name, "root": s.root,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::{BufRead as _, BufReader};
    use std::process::{Command, Stdio};

    fn pidfd_open(pid: i32) -> OwnedFd {
        // SAFETY: plain syscall; the descriptor returned is new.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        assert!(fd >= 0, "pidfd_open: {}", std::io::Error::last_os_error());
        // SAFETY: as above.
        unsafe { OwnedFd::from_raw_fd(fd as i32) }
    }

    /// A `sleep` whose parent exited: not a descendant of this process
    /// (which is no subreaper here).
    fn orphan() -> i32 {
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        sh.wait().unwrap();
        line.trim().parse().unwrap()
    }

    fn end(pid: i32) {
        // SAFETY: plain syscall, to a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    #[test]
    fn a_child_of_this_process_is_ours_and_an_orphan_elsewhere_is_not() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(started_by_us(pid, Some(&pidfd_open(pid))));
        child.kill().unwrap();
        child.wait().unwrap();

        let stranger = orphan();
        assert!(!started_by_us(stranger, Some(&pidfd_open(stranger))));
        assert!(!started_by_us(stranger, None));
        end(stranger);
    }

    #[test]
    fn a_peer_reaped_before_the_check_is_refused_though_its_pid_names_a_stranger() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stranger = orphan();
        // This process, alive, is its own.
        let peer = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let me = std::process::id() as i32;
        assert!(refused_peer(Some(me), &accepted));
        drop(peer);
        // A peer that connected, exited and was reaped: whatever its pid
        // names now, it is refused (no pidfd, or the pidfd of a dead
        // process, depending on the kernel).
        let mut client = Command::new("python3")
            .args([
                "-c",
                "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
            ])
            .arg(&path)
            .spawn()
            .unwrap();
        assert!(client.wait().unwrap().success());
        let (accepted, _) = listener.accept().unwrap();
        let pinned = matches!(peer_pidfd(&accepted), Ok(Some(_)) | Err(()));
        if pinned {
            assert!(refused_peer(Some(stranger), &accepted));
        } else {
            eprintln!("this kernel has no SO_PEERPIDFD: the peer cannot be pinned");
        }
        end(stranger);
    }

    #[test]
    fn a_peer_that_exited_is_refused_though_its_pid_now_names_a_stranger() {
        // The peer connected and exited; its pid now names a process
        // whose parents reach init. The walk alone would let it in.
        let mut peer = Command::new("true").spawn().unwrap();
        let pinned = pidfd_open(peer.id() as i32);
        peer.wait().unwrap();
        let stranger = orphan();
        assert!(!started_by_us(stranger, None));
        assert!(started_by_us(stranger, Some(&pinned)));
        end(stranger);
    }
}
