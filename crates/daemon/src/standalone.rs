//! `dsh mcp --standalone`: one MCP client on stdin/stdout, served in this
//! process with no daemon (for embedders and sandboxes where no daemon may
//! run). The store is taken for one operation at a time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tools_catalog::Preset;

use mcp_host::config::HostConfig;
use mcp_host::store::StoreAccess;
use mcp_host::{ConnectionSetup, Host, serve_connection};

/// How `dsh mcp --standalone` was started.
pub struct StandaloneOptions {
    /// `--preset`.
    pub preset: Option<Preset>,
    /// `--config`, re-read on reload.
    pub config_path: Option<PathBuf>,
    /// The store's directory.
    pub data_dir: PathBuf,
}

/// [`serve_stdio`] on a runtime of its own, blocking until it is done.
pub fn run(config: HostConfig, options: StandaloneOptions) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let served = runtime.block_on(serve_stdio(config, options));
    // Tasks still blocked on stdin must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    served
}

/// Serves one client on stdin/stdout until it disconnects or the process
/// is asked to stop; SIGHUP reloads the config.
pub async fn serve_stdio(config: HostConfig, options: StandaloneOptions) -> anyhow::Result<()> {
    mcp_host::processes::start();
    // One client, and the process ends with it: nothing is kept detached.
    let config = HostConfig {
        detach_grace: Duration::ZERO,
        ..config
    };
    let host = Arc::new(Host::new(
        config.clone(),
        StoreAccess::per_operation(&options.data_dir),
        vec![
            options.data_dir.clone(),
            daemon_client::paths::runtime_dir(&options.data_dir),
        ],
    ));
    let stop = CancellationToken::new();
    let reload_host = host.clone();
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while sighup.recv().await.is_some() {
            reload_host.reload().await;
        }
    });
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        }
        stopper.cancel();
    });
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "dsh mcp serving on stdio (standalone)"
    );
    let setup = ConnectionSetup {
        label: "mcp-stdio".to_owned(),
        preset: options.preset,
        config_path: options.config_path,
        config: Some(config),
        fallback_cwd: None,
        env: None,
        peer_pid: None,
    };
    let (read, write) = stdio();
    let served = serve_connection(host.clone(), setup, read, write, stop).await;
    tokio::time::timeout(Duration::from_secs(10), host.stop_language_servers())
        .await
        .ok();
    served
}

type Reader = Box<dyn tokio::io::AsyncRead + Send + Unpin>;
type Writer = Box<dyn tokio::io::AsyncWrite + Send + Unpin>;

/// Stdin and stdout as the runtime's own readiness-driven streams when
/// they are pipes or sockets (what MCP clients give a server), else as
/// `tokio::io::stdin`/`stdout`.
///
/// Those two hand every read and every write to a thread of the blocking
/// pool, which must be woken and must wake the runtime back: two thread
/// hand-offs on the way of each request and each reply. On a loaded
/// machine that hand-off is where the tail of a call's latency was. A
/// pipe or socket set non-blocking is read and written by the task
/// itself, woken by `epoll`.
fn stdio() -> (Reader, Writer) {
    // A pipe goes through tokio's own check: a pipe, open for the
    // direction asked; anything else is served the blocking way.
    let read = match duplicate(libc::STDIN_FILENO) {
        Some(Stdio::Socket(socket)) => Some(Box::new(socket) as Reader),
        Some(Stdio::Other(fd)) => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .ok()
            .map(|r| Box::new(r) as Reader),
        None => None,
    };
    let write = match duplicate(libc::STDOUT_FILENO) {
        Some(Stdio::Socket(socket)) => Some(Box::new(socket) as Writer),
        Some(Stdio::Other(fd)) => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(|w| Box::new(w) as Writer),
        None => None,
    };
    (
        read.unwrap_or_else(|| Box::new(tokio::io::stdin())),
        write.unwrap_or_else(|| Box::new(tokio::io::stdout())),
    )
}

/// A duplicate of stdin or stdout.
enum Stdio {
    /// A Unix socket, non-blocking, registered with the runtime.
    Socket(tokio::net::UnixStream),
    /// Anything else (a pipe, a terminal, a file).
    Other(std::os::fd::OwnedFd),
}

/// A duplicate of `fd`, made ready for the runtime when it is a socket.
fn duplicate(fd: std::os::fd::RawFd) -> Option<Stdio> {
    // SAFETY: stdin and stdout stay open for the life of the process.
    let borrowed = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let stat = nix::sys::stat::fstat(borrowed).ok()?;
    let own = borrowed.try_clone_to_owned().ok()?;
    if stat.st_mode & libc::S_IFMT != libc::S_IFSOCK {
        return Some(Stdio::Other(own));
    }
    let socket = std::os::unix::net::UnixStream::from(own);
    socket.set_nonblocking(true).ok()?;
    tokio::net::UnixStream::from_std(socket)
        .ok()
        .map(Stdio::Socket)
}
