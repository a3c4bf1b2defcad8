//! A server's process: confined by the host's hook, spawned in a session
//! of its own at a lower priority with a temp dir of its own, watched for
//! its exit without being reaped, and ended by session id (a clean
//! `shutdown`, a kill, or the drop).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_seam::{LspError, UnavailableReason};
use lsp_types::notification::Exit;
use lsp_types::request::Shutdown;

use super::watcher::FENCE_PREFIX;
use super::{Phase, Server, Shared};
use crate::config::ServerConfig;
use crate::{Confine, Confined};

/// A server process just spawned, with its pipes.
pub(super) struct Spawned {
    /// The process, held unreaped (see [`Server`]'s `leader`).
    pub(super) leader: Arc<process_tree::Leader>,
    pub(super) stdin: tokio::process::ChildStdin,
    pub(super) stdout: tokio::process::ChildStdout,
    pub(super) stderr: tokio::process::ChildStderr,
    /// The pid the server is told is its client's (`initialize`'s
    /// `processId`); `None` for a confined server.
    pub(super) client_pid: Option<u32>,
    /// The server's own temp dir, its `TMPDIR`.
    pub(super) temp: PrivateTemp,
}

/// What `confine` (the host's hook) gives the server that may write
/// inside `root`, in the session sandbox named `sandbox`, asked off the
/// async threads; the spawn is refused when the hook refuses.
pub(super) async fn confine(
    config: &ServerConfig,
    root: &Path,
    sandbox: lsp_seam::SandboxTag,
    confine: Option<Confine>,
) -> Result<Confined, LspError> {
    Ok(match confine {
        Some(confine) => {
            let at = root.to_owned();
            tokio::task::spawn_blocking(move || confine(&at, &sandbox))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
                .map_err(|message| LspError::Unavailable {
                    reason: UnavailableReason::SpawnFailed,
                    message: format!(
                        "{}: not started for {}: {message}",
                        config.name,
                        root.display()
                    ),
                })?
        }
        None => Confined::default(),
    })
}

/// Spawns `program` (the server of `config`) in `root`, in a session of
/// its own, with its stdio piped, the environment `confined` leaves it and
/// `confined`'s step run last before `exec`.
pub(super) fn spawn(
    config: &ServerConfig,
    program: &Path,
    root: &Path,
    confined: Confined,
) -> Result<Spawned, LspError> {
    let mut session = process_tree::SessionCommand::new(program);
    if let Some(env) = &confined.env {
        session = session.env_clear().envs(env.iter().map(|(k, v)| (k, v)));
    }
    let temp = PrivateTemp::new();
    if let Some(dir) = &temp.0 {
        session = session.env("TMPDIR", dir);
    }
    session = session
        .args(&config.args)
        .envs(&config.env)
        .current_dir(root)
        .stdin(process_tree::ChildIo::Piped)
        .stdout(process_tree::ChildIo::Piped)
        .stderr(process_tree::ChildIo::Piped);
    let spawn_failed = |e: std::io::Error| LspError::Unavailable {
        reason: UnavailableReason::SpawnFailed,
        message: format!(
            "{}: could not start {}: {e}",
            config.name,
            program.display()
        ),
    };
    // The one spawn path: a session of its own, killed if the host dies
    // (and its whole session ended by the host's guardian; in a PID
    // namespace, when the hook gives one, by the kernel even if the
    // guardian dies too).
    // A confined server may not signal the host (the sandbox scopes
    // signals), so it cannot probe the host's pid with `kill(pid, 0)`:
    // pyright took the EPERM for a dead client and exited. In a PID
    // namespace the host's pid names no process at all. It is told no
    // pid then; the parent-death signal, the guardian and the namespace
    // end it if the host dies.
    let client_pid =
        (confined.pre_exec.is_none() && confined.pid_namespace.is_none()).then(std::process::id);
    // SAFETY: `setpriority` is a plain system call, async-signal-safe.
    session = unsafe { session.pre_exec(Arc::new(background_priority)) };
    if let Some(step) = confined.pre_exec {
        // SAFETY: a `Confine` hook returns async-signal-safe steps only.
        session = unsafe { session.pre_exec(step) };
    }
    if let Some(enter) = confined.pid_namespace {
        // SAFETY: as above.
        session = unsafe { session.pid_namespace(enter) };
    }
    let spawned = session.spawn().map_err(spawn_failed)?;
    let leader = Arc::new(spawned.leader);
    let (Some(stdin), Some(stdout), Some(stderr)) = (spawned.stdin, spawned.stdout, spawned.stderr)
    else {
        return Err(spawn_failed(std::io::Error::other("no stdio pipes")));
    };
    let stdin = tokio::process::ChildStdin::from_std(stdin).map_err(spawn_failed)?;
    let stdout = tokio::process::ChildStdout::from_std(stdout).map_err(spawn_failed)?;
    let stderr = tokio::process::ChildStderr::from_std(stderr).map_err(spawn_failed)?;
    Ok(Spawned {
        leader,
        stdin,
        stdout,
        stderr,
        client_pid,
        temp,
    })
}

/// Marks the server dead when its process exits.
pub(super) fn spawn_exit_waiter(shared: Arc<Shared>, leader: Arc<process_tree::Leader>) {
    tokio::spawn(async move {
        // Seen without reaping: the pid stays ours until the drop.
        let how = match leader.exited().await {
            Ok(status) => format!("the process exited ({status})"),
            Err(e) => format!("waiting for the process failed: {e}"),
        };
        shared.mark_dead(how);
    });
}

impl Server {
    /// Asks the server to shut down and exit, then ends its session.
    pub async fn shutdown(&self) {
        if self.is_alive() {
            let grace = self.options.shutdown_grace;
            if self.request::<Shutdown>((), grace).await.is_ok() {
                let _ = self.notify::<Exit>(());
            }
            let mut rx = self.shared.status.subscribe();
            let _ = tokio::time::timeout(grace, rx.wait_for(|s| matches!(s.phase, Phase::Dead(_))))
                .await;
        }
        let leader = self.leader.clone();
        let _ = tokio::task::spawn_blocking(move || end_server_session(&leader)).await;
    }

    /// Kills the server now (used to restart a stuck server).
    pub fn kill(&self) {
        end_server_session(&self.leader);
        self.shared.mark_dead("killed by the client".into());
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        end_server_session(&self.leader);
        // Verified empty: the pid can go. (Otherwise the leader's own drop
        // kills what is left and hands it to the orphan reaper.)
        let _ = self.leader.reap();
    }
}

/// Ends the server's session: `SIGTERM`, then `SIGKILL`, verified.
fn end_server_session(leader: &process_tree::Leader) {
    let pid = leader.pid();
    let steps = [
        process_tree::Step {
            signal: nix::sys::signal::Signal::SIGTERM,
            grace: Duration::from_millis(200),
        },
        process_tree::Step {
            signal: nix::sys::signal::Signal::SIGKILL,
            grace: Duration::from_secs(2),
        },
    ];
    if let Err(e) = leader.end_session(&steps) {
        tracing::warn!("language server session {pid} survived: {e}");
    }
}

/// A directory made for one server, removed when dropped.
pub(super) struct PrivateTemp(Option<PathBuf>);

impl PrivateTemp {
    /// Makes `dsh-lsp-tmp-<host pid>-<n>` (0700) in the temp dir; `None`
    /// inside when it cannot be made (the server then gets the shared one).
    fn new() -> Self {
        use std::os::unix::fs::DirBuilderExt;
        static DIRS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        remove_stale(&[PRIVATE_TEMP_PREFIX, FENCE_PREFIX]);
        let dir = std::env::temp_dir().join(format!(
            "{PRIVATE_TEMP_PREFIX}{}-{}",
            std::process::id(),
            DIRS.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => Self(Some(dir)),
            Err(e) => {
                tracing::warn!("cannot create {}: {e}", dir.display());
                Self(None)
            }
        }
    }
}

impl Drop for PrivateTemp {
    fn drop(&mut self) {
        if let Some(dir) = &self.0 {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

const PRIVATE_TEMP_PREFIX: &str = "dsh-lsp-tmp-";

/// Removes the directories named `<prefix><pid>-<n>` for any of
/// `prefixes` (servers' temp dirs, fences) left by hosts that no longer
/// exist (killed before their cleanup ran), in one pass over the temp dir.
fn remove_stale(prefixes: &[&str]) {
    let Ok(entries) = std::fs::read_dir(std::env::temp_dir()) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(rest) = name
            .to_str()
            .and_then(|n| prefixes.iter().find_map(|p| n.strip_prefix(p)))
        else {
            continue;
        };
        let Some(pid) = rest.split('-').next().and_then(|p| p.parse::<i32>().ok()) else {
            continue;
        };
        if process_tree::process_info(pid).is_none() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// The nice value language servers run at.
pub const SERVER_NICE: i32 = 10;

/// Lowers the calling process's priority to [`SERVER_NICE`] (its threads
/// inherit it). A language server indexes in the background, for seconds
/// on a large project; at the same priority it took the core from the
/// program a terminal was waiting on, and on a two-core machine that was
/// most of the settle tail. Interactive work wins the core now; the server
/// still gets every idle cycle. Best effort: a server that cannot be
/// lowered runs as it is.
fn background_priority() -> std::io::Result<()> {
    // SAFETY: changes only this (new, not yet exec'd) process's nice
    // value; `PRIO_PROCESS` with 0 names the caller.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, SERVER_NICE);
    }
    Ok(())
}
