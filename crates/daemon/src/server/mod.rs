//! `dsh daemon`: one per user and data directory.
//!
//! Start-up: take `DATA/daemon.lock` (a second daemon refuses at once,
//! naming the running one's pid and socket; a daemon of another version is
//! asked to hand the store over first), write `DATA/daemon.json`, open the
//! store and hold it, replace a stale socket, listen. Every accepted
//! connection says hello first (see [`daemon_wire`]); an MCP
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

mod attach;
mod dispatch;
mod files;
mod live;
pub mod page;
pub mod peer;

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use nix::fcntl::Flock;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use daemon_client::paths::DaemonPaths;
use daemon_wire::exchange::request_at;
use daemon_wire::info::{DaemonInfo, read_info};
use daemon_wire::{Request, version};
use mcp_host::Host;
use mcp_host::config::HostConfig;
use mcp_host::store::{HeldStore, StoreAccess};

/// How `dsh daemon` was started.
pub struct DaemonOptions {
    /// Its files.
    pub paths: DaemonPaths,
    /// Its config (language servers, limits, log, idle exit).
    pub config: HostConfig,
    /// The config file it was read from (the default for connections that
    /// name none).
    pub config_path: Option<PathBuf>,
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

/// Sign-in links to the page for the host's secret prompts (weak: the
/// host must not keep the daemon's state alive).
struct Links(std::sync::Weak<Shared>);

impl mcp_host::PageLinks for Links {
    fn link_to<'a>(
        &'a self,
        path: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<ui::PageLink, String>> {
        Box::pin(async move {
            let shared = self.0.upgrade().ok_or("the daemon is stopping")?;
            dispatch::page_link(&shared, path)
                .await
                .map_err(|e| e.to_string())
        })
    }
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
    if daemon_client::paths::in_shared_temp(&paths.runtime_dir) {
        tracing::warn!(
            runtime_dir = %paths.runtime_dir.display(),
            "the runtime directory is inside the temp directory, which the sandbox leaves \
             writable: a confined command can remove or replace the daemon's socket there \
             (clients then refuse to talk to it, and `dsh daemon stop` still stops this \
             daemon through its lock); set DSH_RUNTIME_DIR or XDG_RUNTIME_DIR to a private \
             directory outside it, or leave both unset"
        );
    }
    let lock = match files::take_lock(&paths) {
        Ok(lock) => lock,
        // Started by a client that lost the race: the winner serves it.
        Err(DaemonError::AlreadyRunning { .. }) if options.spawned => return Ok(()),
        Err(e) => return Err(e),
    };
    let recorded = files::this_daemon(&paths);
    files::write_info(&paths, &recorded)?;
    let held = HeldStore::open(&paths.data_dir, Duration::from_secs(10)).map_err(|e| {
        DaemonError::Failed(format!(
            "cannot open the store in {}: {}",
            paths.data_dir.display(),
            crate::registry::explain(e, &paths.data_dir).message
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
    mcp_host::processes::start();
    // Read once here: every connection is checked against them.
    if let Err(e) = peer::own_marks() {
        tracing::warn!(
            "cannot read this daemon's own confinement ({e}); clients are refused until it can be read"
        );
    }
    let paths = options.paths.clone();
    let idle_exit = options.config.idle_exit;
    let host = Arc::new(Host::new(
        options.config,
        StoreAccess::Held(held.clone()),
        vec![
            paths.data_dir.clone(),
            paths.runtime_dir.clone(),
            paths.log.clone(),
        ],
    ));
    let (listener, identity) = files::bind(&paths)?;
    if let Err(e) = files::write_info(&paths, &files::listening_on(&recorded, Some(identity))) {
        // Fatal: without the socket's identity recorded, a client could
        // not tell a replaced socket from this one. The daemon exits, so
        // it leaves no socket behind, as a stop does.
        drop(listener);
        files::unlink_own_socket(&paths.socket, identity);
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
    host.set_page_links(Arc::new(Links(Arc::downgrade(&shared))));
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
                    tasks.spawn(dispatch::handle(shared, stream));
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
                    files::stop_listening(&paths, &recorded, identity);
                    held.hand_over(&to, forward_to(to.clone()));
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
    drop(listener);
    let lock = lock.map(|lock| (lock, recorded, identity));
    shut_down(&shared, tasks, lock).await;
    tracing::info!(reason, "dsh daemon stopped");
    Ok(())
}

/// Ends the daemon, the listener already closed: every connection ends
/// what it started (verified), then the jobs, the language servers and
/// the store; with the lock still held (no hand-over), the socket and
/// `daemon.json` are left before the lock is released.
async fn shut_down(
    shared: &Shared,
    mut tasks: tokio::task::JoinSet<()>,
    lock: Option<(Flock<File>, DaemonInfo, (u64, u64))>,
) {
    let paths = &shared.paths;
    if let Some((_, recorded, identity)) = &lock {
        files::stop_listening(paths, recorded, *identity);
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
    shared.host.end_detached().await;
    shared.host.runtime().jobs.shutdown().await;
    shared.host.stop_language_servers().await;
    shared.held.close();
    if let Some((lock, _, _)) = lock {
        if read_info(&paths.info).is_some_and(|i| i.pid == std::process::id()) {
            let _ = std::fs::remove_file(&paths.info);
        }
        drop(lock);
    }
}

/// Where the records of the connections this daemon still serves go once
/// it handed the store over: to the daemon listening at `socket`.
fn forward_to(socket: PathBuf) -> mcp_host::store::Forward {
    Arc::new(move |records| {
        let reply = request_at(&socket, Request::Record { records })?;
        match reply.error {
            None => Ok(()),
            Some(f) => Err(f.message),
        }
    })
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
