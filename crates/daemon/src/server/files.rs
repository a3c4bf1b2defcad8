//! The daemon's files: the lock it holds for its life (taken from a
//! daemon of another version by asking it to hand over), the record in
//! `daemon.json`, and the socket it binds and leaves.

use std::fs::File;
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use tokio::net::UnixListener;

use super::DaemonError;
use daemon_client::holder::pid_alive;
use daemon_client::paths::DaemonPaths;
use daemon_wire::exchange::request_at;
use daemon_wire::info::{DaemonInfo, read_info};
use daemon_wire::{Code, Reply, Request, version};

/// Takes the daemon lock of `paths`, asking a daemon of another version to
/// hand over first.
pub(super) fn take_lock(paths: &DaemonPaths) -> Result<Flock<File>, DaemonError> {
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
                let reply = request_at(&info.socket, handover);
                match reply {
                    Ok(reply) if reply.error.is_none() => asked = true,
                    // It will not change its mind: this daemon runs more
                    // confined than it (see `super::peer`).
                    Ok(Reply {
                        error: Some(failure),
                        ..
                    }) if failure.code == Code::SandboxedClient => {
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

/// This process's record as the daemon of `paths`, started now: not
/// listening yet. Built once; [`listening_on`] gives what changes.
pub(super) fn this_daemon(paths: &DaemonPaths) -> DaemonInfo {
    DaemonInfo {
        pid: std::process::id(),
        version: version(),
        socket: paths.socket.clone(),
        started_at: chrono::Utc::now().to_rfc3339(),
        start_time: process_tree::process_info(std::process::id() as i32).map(|p| p.start_time),
        listening: false,
        socket_id: None,
    }
}

/// `recorded` with the identity of the socket it listens on, or without
/// one (`None`: not listening).
pub(super) fn listening_on(recorded: &DaemonInfo, socket_id: Option<(u64, u64)>) -> DaemonInfo {
    DaemonInfo {
        listening: socket_id.is_some(),
        socket_id,
        ..recorded.clone()
    }
}

/// Writes `DATA/daemon.json` (atomically, 0600): when the lock is taken,
/// with the socket's identity once it is bound (`listening`), and without
/// it again when the daemon stops listening.
pub(super) fn write_info(paths: &DaemonPaths, info: &DaemonInfo) -> Result<(), DaemonError> {
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
pub(super) fn bind(paths: &DaemonPaths) -> Result<(UnixListener, (u64, u64)), DaemonError> {
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
pub(super) fn stop_listening(paths: &DaemonPaths, recorded: &DaemonInfo, identity: (u64, u64)) {
    if let Err(e) = write_info(paths, &listening_on(recorded, None)) {
        tracing::warn!("{e}");
    }
    unlink_own_socket(&paths.socket, identity);
}

/// Removes the socket if it is still the one this daemon bound.
pub(super) fn unlink_own_socket(path: &Path, identity: (u64, u64)) {
    if let Ok(meta) = std::fs::metadata(path)
        && (meta.dev(), meta.ino()) == identity
    {
        let _ = std::fs::remove_file(path);
    }
}
