//! `dsh mcp --standalone`: one MCP client on stdin/stdout, served in this
//! process with no daemon (for embedders and sandboxes where no daemon may
//! run). The store is taken for one operation at a time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tools_catalog::Preset;

use crate::host::{ConfigLoader, ConnectionSetup, Host, HostConfig, serve_connection};
use crate::store::StoreAccess;

/// How `dsh mcp --standalone` was started.
pub struct StandaloneOptions {
    /// `--preset`.
    pub preset: Option<Preset>,
    /// `--config`, re-read on reload.
    pub config_path: Option<PathBuf>,
    /// The store's directory.
    pub data_dir: PathBuf,
    /// Reads the config file.
    pub loader: ConfigLoader,
}

/// Serves one client on stdin/stdout until it disconnects or the process
/// is asked to stop; SIGHUP reloads the config.
pub async fn serve_stdio(config: HostConfig, options: StandaloneOptions) -> anyhow::Result<()> {
    crate::processes::start();
    let host = Arc::new(Host::new(
        config.clone(),
        options.loader,
        StoreAccess::per_operation(&options.data_dir),
        vec![options.data_dir.clone(), crate::paths::runtime_dir()],
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
    let read = match readiness_stream(libc::STDIN_FILENO, Direction::Read) {
        Some(Stream::Pipe(fd)) => tokio::net::unix::pipe::Receiver::from_owned_fd(fd)
            .ok()
            .map(|r| Box::new(r) as Reader),
        Some(Stream::Socket(socket)) => Some(Box::new(socket) as Reader),
        None => None,
    };
    let write = match readiness_stream(libc::STDOUT_FILENO, Direction::Write) {
        Some(Stream::Pipe(fd)) => tokio::net::unix::pipe::Sender::from_owned_fd(fd)
            .ok()
            .map(|w| Box::new(w) as Writer),
        Some(Stream::Socket(socket)) => Some(Box::new(socket) as Writer),
        None => None,
    };
    (
        read.unwrap_or_else(|| Box::new(tokio::io::stdin())),
        write.unwrap_or_else(|| Box::new(tokio::io::stdout())),
    )
}

#[derive(Clone, Copy, PartialEq)]
enum Direction {
    Read,
    Write,
}

enum Stream {
    Pipe(std::os::fd::OwnedFd),
    Socket(tokio::net::UnixStream),
}

/// A duplicate of `fd` ready for the runtime, when it is a pipe open in
/// `direction` or a Unix socket; `None` for anything else (a terminal, a
/// file), which the caller serves the blocking way.
fn readiness_stream(fd: std::os::fd::RawFd, direction: Direction) -> Option<Stream> {
    use std::os::fd::{AsFd, BorrowedFd};
    // SAFETY: stdin and stdout stay open for the life of the process.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    let stat = nix::sys::stat::fstat(borrowed).ok()?;
    let kind = stat.st_mode & libc::S_IFMT;
    let own = borrowed.as_fd().try_clone_to_owned().ok()?;
    if kind == libc::S_IFIFO {
        let flags = nix::fcntl::fcntl(own.as_fd(), nix::fcntl::FcntlArg::F_GETFL).ok()?;
        let mode = flags & libc::O_ACCMODE;
        let fits = match direction {
            Direction::Read => mode == libc::O_RDONLY || mode == libc::O_RDWR,
            Direction::Write => mode == libc::O_WRONLY || mode == libc::O_RDWR,
        };
        return fits.then_some(Stream::Pipe(own));
    }
    if kind == libc::S_IFSOCK {
        let socket = std::os::unix::net::UnixStream::from(own);
        socket.set_nonblocking(true).ok()?;
        return tokio::net::UnixStream::from_std(socket)
            .ok()
            .map(Stream::Socket);
    }
    None
}
