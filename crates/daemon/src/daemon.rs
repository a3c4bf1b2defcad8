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
    /// Its start time in clock ticks after boot, as `/proc/PID/stat`
    /// shows it: with the pid, it names this one process (absent from
    /// the files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// Whether it serves on its socket: a daemon that holds the lock but
    /// does not listen is starting (it may wait for the store) or
    /// stopping.
    #[serde(default)]
    pub listening: bool,
    /// The socket file it bound (device, inode), while it listens: a
    /// file at the socket's path that is not this one was put there by
    /// someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_id: Option<(u64, u64)>,
}

/// A daemon found through the data directory's lock and `daemon.json`
/// rather than its socket, and checked to be that daemon: the process
/// `daemon.json` names runs, has the start time recorded there, runs the
/// `dsh` program, and holds the lock (`/proc/locks`).
#[derive(Debug, Clone)]
pub struct Holder {
    /// What it recorded.
    pub info: DaemonInfo,
    /// The process, as read while checking it.
    pub process: process_tree::ProcessInfo,
}

/// The daemon that holds `paths`' lock, when one does and it is the
/// process `daemon.json` names (see [`Holder`]). Never a stranger: a pid
/// whose process does not hold the lock is not taken for the daemon.
pub fn find_holder(paths: &DaemonPaths) -> Option<Holder> {
    let info = read_info(&paths.info)?;
    let pid = i32::try_from(info.pid).ok()?;
    let process = process_tree::process_info(pid).filter(|p| !p.is_zombie())?;
    if info.start_time.is_some_and(|t| t != process.start_time) {
        return None;
    }
    if !runs_this_program(pid) || !holds_lock(pid, &paths.lock) {
        return None;
    }
    // What was read was of that process, not of one that reused its pid.
    process_tree::process_info(pid).filter(|p| p.start_time == process.start_time)?;
    Some(Holder { info, process })
}

impl Holder {
    /// Sends SIGTERM (the daemon stops as `dsh daemon stop` asks it to),
    /// through a pidfd after its start time is checked again. False when
    /// it was gone.
    pub fn terminate(&self) -> bool {
        process_tree::signal_process(&self.process, nix::sys::signal::Signal::SIGTERM)
    }

    /// Whether the process still runs (a zombie or a reused pid is gone).
    pub fn runs(&self) -> bool {
        process_tree::process_info(self.process.pid)
            .is_some_and(|p| p.start_time == self.process.start_time && !p.is_zombie())
    }
}

/// Whether process `pid` runs the same program as this one (the file
/// name of `/proc/PID/exe`: an upgrade may have replaced the file).
fn runs_this_program(pid: i32) -> bool {
    let name = |path: PathBuf| {
        let text = path.to_string_lossy().into_owned();
        let text = text.strip_suffix(" (deleted)").unwrap_or(&text).to_owned();
        Path::new(&text).file_name().map(|n| n.to_os_string())
    };
    let theirs = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(name);
    let ours = std::env::current_exe().ok().and_then(name);
    theirs.is_some() && theirs == ours
}

/// Whether process `pid` holds the `flock` of `lock`, per `/proc/locks`.
fn holds_lock(pid: i32, lock: &Path) -> bool {
    lock_holders(lock).is_some_and(|holders| holders.contains(&pid))
}

/// Whether anyone holds `paths`' daemon lock, per `/proc/locks`, whoever
/// `daemon.json` names (false when that cannot be read). A daemon
/// candidate that found the lock held leaves, whatever it read of the
/// holder: while this is true, starting another one is pointless.
pub fn lock_is_held(paths: &DaemonPaths) -> bool {
    lock_holders(&paths.lock).is_some_and(|holders| !holders.is_empty())
}

/// The pids holding the `flock` of `lock`, per `/proc/locks`; `None` when
/// that cannot be read.
fn lock_holders(lock: &Path) -> Option<Vec<i32>> {
    let id = locks_id(lock)?;
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    Some(flock_holders(&locks, id))
}

/// A file as `/proc/locks` names it: its filesystem's device (major,
/// minor) and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LocksId {
    /// The device, as the kernel prints it: the superblock's, which is not
    /// always the `st_dev` that `stat` gives (btrfs gives every subvolume
    /// a device of its own), so it is read from the line of the file's
    /// mount in `/proc/self/mountinfo` when the kernel names that mount
    /// (`statx`, Linux 5.8); `None` before that, and only the inode is
    /// compared.
    dev: Option<(u32, u32)>,
    /// The inode.
    ino: u64,
}

/// How `/proc/locks` names the file at `path`.
fn locks_id(path: &Path) -> Option<LocksId> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: all-zero bytes are a valid `statx` (integers only).
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a buffer of the size the call
    // writes.
    let done = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            0,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &raw mut stx,
        )
    };
    if done != 0 || stx.stx_mask & libc::STATX_INO == 0 {
        return None;
    }
    let dev = if stx.stx_mask & libc::STATX_MNT_ID != 0 {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        Some(mount_device(&mountinfo, stx.stx_mnt_id)?)
    } else {
        None
    };
    Some(LocksId {
        dev,
        ino: stx.stx_ino,
    })
}

/// The device (major, minor) of mount `mnt_id` in the text of
/// `/proc/PID/mountinfo` (`36 25 0:32 / /home rw … - btrfs …`).
fn mount_device(mountinfo: &str, mnt_id: u64) -> Option<(u32, u32)> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let id: u64 = fields.next()?.parse().ok()?;
        if id != mnt_id {
            return None;
        }
        let (major, minor) = fields.nth(1)?.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

/// The pids holding a `flock` on the file `id` names in the text of
/// `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`: the
/// device's major and minor in hex, then the inode; a waiter's line,
/// `1: -> FLOCK …`, holds nothing).
fn flock_holders(locks: &str, id: LocksId) -> Vec<i32> {
    let names = |field: &str| {
        let mut parts = field.split(':');
        let (major, minor, ino) = (parts.next()?, parts.next()?, parts.next()?);
        let dev = (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        let ino: u64 = ino.parse().ok()?;
        Some(ino == id.ino && id.dev.is_none_or(|ours| ours == dev))
    };
    locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            match fields.as_slice() {
                [_, "FLOCK", _, _, pid, file, ..] if names(file)? => pid.parse().ok(),
                _ => None,
            }
        })
        .collect()
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
                    // It will not change its mind: this daemon runs more
                    // confined than it (see `crate::peer`).
                    Ok(Reply {
                        error: Some(failure),
                        ..
                    }) if failure.code == "SANDBOXED_CLIENT" => {
                        return Err(DaemonError::Failed(format!(
                            "the running dsh daemon (pid {}, version {}) refused to hand the store over: {}",
                            info.pid, info.version, failure.message
                        )));
                    }
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

impl DaemonInfo {
    /// This process's record as the daemon of `paths`, started now: not
    /// listening yet. Built once; [`DaemonInfo::listening_on`] gives what
    /// changes.
    fn of_this_daemon(paths: &DaemonPaths) -> Self {
        Self {
            pid: std::process::id(),
            version: version(),
            socket: paths.socket.clone(),
            started_at: chrono::Utc::now().to_rfc3339(),
            start_time: process_tree::process_info(std::process::id() as i32).map(|p| p.start_time),
            listening: false,
            socket_id: None,
        }
    }

    /// The record with the identity of the socket it listens on, or
    /// without one (`None`: not listening).
    fn listening_on(&self, socket_id: Option<(u64, u64)>) -> Self {
        Self {
            listening: socket_id.is_some(),
            socket_id,
            ..self.clone()
        }
    }
}

/// Writes `DATA/daemon.json` (atomically, 0600): when the lock is taken,
/// with the socket's identity once it is bound (`listening`), and without
/// it again when the daemon stops listening.
fn write_info(paths: &DaemonPaths, info: &DaemonInfo) -> Result<(), DaemonError> {
    let tmp = paths
        .info
        .with_extension(format!("json.{}", std::process::id()));
    let text =
        serde_json::to_string_pretty(info).map_err(|e| DaemonError::Failed(e.to_string()))?;
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

/// Leaves the socket path, the listener already closed: records in
/// `daemon.json` that this daemon no longer listens, then removes the
/// socket it bound. In that order a client that finds no socket finds
/// `listening` cleared, and waits for the lock (then starts a new daemon)
/// instead of taking this one, stopping or handing over, for a daemon
/// that lost its socket. A failed write is logged; the daemon stops or
/// hands over all the same.
fn stop_listening(paths: &DaemonPaths, recorded: &DaemonInfo, identity: (u64, u64)) {
    if let Err(e) = write_info(paths, &recorded.listening_on(None)) {
        tracing::warn!("{e}");
    }
    unlink_own_socket(&paths.socket, identity);
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
    if crate::paths::in_shared_temp(&paths.runtime_dir) {
        tracing::warn!(
            runtime_dir = %paths.runtime_dir.display(),
            "the runtime directory is inside the temp directory, which the sandbox leaves \
             writable: a confined command can remove or replace the daemon's socket there \
             (clients then refuse to talk to it, and `dsh daemon stop` still stops this \
             daemon through its lock); set DSH_RUNTIME_DIR or XDG_RUNTIME_DIR to a private \
             directory outside it, or leave both unset"
        );
    }
    let lock = take_lock(&paths)?;
    let recorded = DaemonInfo::of_this_daemon(&paths);
    write_info(&paths, &recorded)?;
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
    let result = runtime.block_on(serve(options, Arc::new(held), lock, recorded));
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn serve(
    options: DaemonOptions,
    held: Arc<HeldStore>,
    lock: Flock<File>,
    recorded: DaemonInfo,
) -> Result<(), DaemonError> {
    crate::processes::start();
    // Read once here: every connection is checked against them.
    if let Err(e) = crate::peer::own_marks() {
        tracing::warn!(
            "cannot read this daemon's own confinement ({e}); clients are refused until it can be read"
        );
    }
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
    if let Err(e) = write_info(&paths, &recorded.listening_on(Some(identity))) {
        // Fatal: without the socket's identity recorded, a client could
        // not tell a replaced socket from this one. The daemon exits, so
        // it leaves no socket behind, as a stop does.
        drop(listener);
        unlink_own_socket(&paths.socket, identity);
        return Err(e);
    }
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
    let mut backoff = ui::AcceptBackoff::new("the daemon");
    let reason: &str = loop {
        let resume = backoff.resume_at();
        tokio::select! {
            accepted = async {
                match &listener {
                    Some(l) => {
                        if let Some(at) = resume {
                            tokio::time::sleep_until(at.into()).await;
                        }
                        l.accept().await
                    }
                    None => futures::future::pending().await,
                }
            } => match accepted {
                Ok((stream, _)) => {
                    backoff.succeeded(Instant::now());
                    let shared = shared.clone();
                    tasks.spawn(handle(shared, stream));
                }
                Err(e) => {
                    backoff.failed(&e, Instant::now());
                }
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
                    stop_listening(&paths, &recorded, identity);
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
        stop_listening(&paths, &recorded, identity);
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

async fn handle(shared: Arc<Shared>, stream: UnixStream) {
    let peer_pid = stream.peer_cred().ok().and_then(|c| c.pid());
    // Checked at once, before the hello: the sooner the peer is looked
    // up, the less time a client that exits has to let its pid be reused.
    let refused = crate::peer::check(peer_pid, &stream).err();
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
    if let Some(refusal) = refused {
        // A process that a dsh sandbox may confine (one this daemon
        // started, or any process more confined than the daemon) could
        // start unconfined processes through a connection of its own.
        tracing::warn!(
            peer = peer_pid.unwrap_or(0),
            kind = request.kind(),
            why = refusal.log_reason(),
            "refused a client that may run in a sandbox"
        );
        let reply = Reply::failed("SANDBOXED_CLIENT", refusal.message());
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
    let mut held = shared.ui.lock().await;
    let page = match &mut *held {
        Some(page) => page,
        None => {
            let source = crate::ui_source::DaemonUiSource::new(
                shared.host.clone(),
                shared.held.clone(),
                shared.watchers.clone(),
            );
            let settings = shared.host.config().ui.clone();
            let mut server =
                ui::start(Arc::new(source), &settings, shared.stop.child_token()).await?;
            let token_file = ui_token_file(&shared.paths);
            if let Err(e) = server.keep_token_at(&token_file) {
                tracing::warn!(
                    "ui: cannot write the page's token file {}: {e}",
                    token_file.display()
                );
            }
            held.insert(server)
        }
    };
    let mut reply = serde_json::json!({
        "url": page.login_url()?,
        "address": page.addr().to_string(),
        "exposed": page.exposed(),
    });
    // Only a file that was written: scripts read the secret there.
    if let Some(file) = page.token_file() {
        reply["token_file"] = serde_json::json!(file);
    }
    Ok(reply)
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
            "pid": s.pid, "server": s.name, "root": s.root, "problem": s.problem,
        })).collect::<Vec<_>>(),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn flock_holders_are_read_from_proc_locks_and_waiters_hold_nothing() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 777 fd:01:1234 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 555 fd:01:1234 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 99 fd:01:4321 0 EOF\n\
                     4: OFDLCK ADVISORY  READ  -1 00:05:1234 0 EOF\n\
                     5: FLOCK  ADVISORY  WRITE 31 00:2a:1234 0 EOF\n\
                     6: FLOCK  ADVISORY  WRITE 32 103:02:1234 0 EOF\n";
        let id = |dev, ino| LocksId { dev, ino };
        assert_eq!(flock_holders(locks, id(Some((0xfd, 1)), 1234)), vec![4242]);
        assert_eq!(flock_holders(locks, id(Some((0xfd, 1)), 4321)), vec![99]);
        assert_eq!(
            flock_holders(locks, id(Some((0xfd, 1)), 1)),
            Vec::<i32>::new()
        );
        // the same inode number on another filesystem is another file
        assert_eq!(flock_holders(locks, id(Some((0, 42)), 1234)), vec![31]);
        assert_eq!(flock_holders(locks, id(Some((0x103, 2)), 1234)), vec![32]);
        assert_eq!(
            flock_holders(locks, id(Some((8, 1)), 1234)),
            Vec::<i32>::new()
        );
        // a kernel that does not name the mount: the inode alone
        assert_eq!(flock_holders(locks, id(None, 1234)), vec![4242, 31, 32]);
    }

    #[test]
    fn a_mount_is_found_in_mountinfo_by_its_id() {
        let mountinfo = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                         36 22 0:32 /home /home rw,relatime shared:9 - btrfs /dev/vdb rw\n";
        assert_eq!(mount_device(mountinfo, 36), Some((0, 32)));
        assert_eq!(mount_device(mountinfo, 22), Some((254, 0)));
        assert_eq!(mount_device(mountinfo, 3), None);
    }

    /// The file's name computed here matches the kernel's line for a lock
    /// this process takes, device included.
    #[test]
    fn a_real_lock_is_found_by_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::write(&path, "").unwrap();
        let id = locks_id(&path).unwrap();
        assert_eq!(lock_holders(&path), Some(vec![]));
        let lock = Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        assert_eq!(lock_holders(&path), Some(vec![std::process::id() as i32]));
        // the same inode on a device it is not on holds nothing
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        match id.dev {
            Some((major, minor)) => {
                let elsewhere = LocksId {
                    dev: Some((major + 1, minor)),
                    ..id
                };
                assert_eq!(flock_holders(&locks, elsewhere), Vec::<i32>::new());
            }
            None => eprintln!("this kernel does not name a file's mount: the inode alone"),
        }
        drop(lock);
        assert_eq!(lock_holders(&path), Some(vec![]));
    }

    fn info_of(pid: u32, start_time: Option<u64>, paths: &DaemonPaths) -> DaemonInfo {
        DaemonInfo {
            pid,
            version: version(),
            socket: paths.socket.clone(),
            started_at: "2000-01-01T00:00:00Z".into(),
            start_time,
            listening: true,
            socket_id: None,
        }
    }

    #[test]
    fn the_holder_is_found_only_when_the_recorded_process_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DaemonPaths::with_runtime_dir(&dir.path().join("data"), dir.path());
        paths.ensure_data_dir().unwrap();
        let me = std::process::id();
        let my_start = process_tree::process_info(me as i32).unwrap().start_time;
        let write = |info: &DaemonInfo| {
            std::fs::write(&paths.info, serde_json::to_string(info).unwrap()).unwrap();
        };
        // this process runs this program; it does not hold the lock yet
        write(&info_of(me, Some(my_start), &paths));
        std::fs::write(&paths.lock, "").unwrap();
        assert!(find_holder(&paths).is_none());
        let lock = Flock::lock(
            File::open(&paths.lock).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .map_err(|(_, e)| e)
        .unwrap();
        let holder = find_holder(&paths).expect("the holder");
        assert_eq!(holder.info.pid, me);
        assert!(holder.runs());
        // another start time: a process that reused the pid
        write(&info_of(me, Some(my_start + 1), &paths));
        assert!(find_holder(&paths).is_none());
        // a live child of another program, named with its real start time
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let theirs = process_tree::process_info(child.id() as i32).unwrap();
        write(&info_of(child.id(), Some(theirs.start_time), &paths));
        assert!(find_holder(&paths).is_none());
        child.kill().unwrap();
        child.wait().unwrap();
        // the lock released: nobody holds it
        write(&info_of(me, Some(my_start), &paths));
        drop(lock);
        assert!(find_holder(&paths).is_none());
    }
}
