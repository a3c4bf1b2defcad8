//! The typed client of the daemon's one-shot requests: one method per
//! request kind, each returning the kind's reply type from the protocol.
//! The binary talks to the daemon through it and never builds a
//! [`Request`] itself.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{ClientError, StartSpec, holder_of, request};
use crate::holder::pid_alive;
use crate::paths::DaemonPaths;
use daemon_wire::ps::{DetachedDone, Snapshot};
use daemon_wire::registry::RegistryOp;
use daemon_wire::replies::{Reloaded, Status, UiPage};
use daemon_wire::{Reply, Request};

/// A daemon's client: where it is, and how to start one when none
/// answers (only the requests that may start one use it).
#[derive(Debug, Clone)]
pub struct Client {
    paths: DaemonPaths,
    start: Option<StartSpec>,
}

impl Client {
    /// A client of the daemon at `paths` that never starts one.
    pub fn new(paths: DaemonPaths) -> Self {
        Self { paths, start: None }
    }

    /// A client of the daemon at `paths` that starts one (as `start`
    /// says) when none answers.
    pub fn starting(paths: DaemonPaths, start: StartSpec) -> Self {
        Self {
            paths,
            start: Some(start),
        }
    }

    /// The daemon's files.
    pub fn paths(&self) -> &DaemonPaths {
        &self.paths
    }

    fn call(&self, request: Request) -> Result<Reply, ClientError> {
        self::request(&self.paths, request, self.start.as_ref())
    }

    /// `dsh daemon status`: the daemon's facts.
    pub fn status(&self) -> Result<Status, ClientError> {
        decode(&self.call(Request::Status)?, "the daemon's")
    }

    /// `dsh daemon status`, to the end: the daemon's facts, or, for a
    /// daemon that holds the data directory but cannot be reached through
    /// the socket, what it recorded and why it is unreachable.
    pub fn status_report(&self) -> Result<StatusReport, ClientError> {
        let error = match self.status() {
            Ok(status) => return Ok(StatusReport::Running(status)),
            Err(e @ (ClientError::SocketLost { .. } | ClientError::NotTheDaemon(_))) => e,
            Err(e) => return Err(e),
        };
        let Some(holder) = holder_of(&self.paths, &error) else {
            return Err(error);
        };
        let info = holder.info;
        Ok(StatusReport::Unreachable(Unreachable {
            data_dir: self.paths.data_dir.clone(),
            error: error.to_string(),
            log: self.paths.log.clone(),
            pid: info.pid,
            reachable: false,
            socket: info.socket,
            started_at: info.started_at,
            version: info.version,
        }))
    }

    /// `dsh daemon stop`: the daemon ends every connection, terminal and
    /// job, then exits. Its pid, to wait for.
    pub fn stop(&self) -> Result<u32, ClientError> {
        // Answered across versions: only the reply's own pid is read.
        Ok(self.call(Request::Stop)?.pid)
    }

    /// `dsh daemon stop`, to the end: the daemon is asked over its socket
    /// and waited for (it ends every terminal and job first). One the
    /// socket does not lead to is found through its lock instead (checked
    /// to be the daemon `daemon.json` names), sent SIGTERM and waited for.
    pub fn stop_and_wait(&self) -> Result<Stopped, ClientError> {
        match self.stop() {
            Ok(pid) => {
                wait_for_exit(&self.paths, pid, "", || pid_alive(pid))?;
                Ok(Stopped::Asked { pid })
            }
            Err(
                e @ (ClientError::NotRunning { .. }
                | ClientError::SocketLost { .. }
                | ClientError::NotTheDaemon(_)),
            ) => self.stop_through_the_lock(e),
            Err(e) => Err(e),
        }
    }

    /// [`Client::stop_and_wait`] for a daemon the socket does not lead to
    /// (`error` says why).
    fn stop_through_the_lock(&self, error: ClientError) -> Result<Stopped, ClientError> {
        let Some(holder) = holder_of(&self.paths, &error) else {
            if let ClientError::NotRunning { data_dir, .. } = error {
                return Ok(Stopped::NotRunning { data_dir });
            }
            return Err(error);
        };
        let (pid, socket) = (holder.info.pid, holder.info.socket.clone());
        if !holder.terminate() {
            // Nothing was sent: it exited meanwhile, or could not be
            // signalled.
            if holder.runs() {
                return Err(ClientError::Unreachable(format!(
                    "could not send SIGTERM to the dsh daemon (pid {pid}), found through its lock                      as its socket {} did not lead to it; it still runs: stop it as the user it                      runs as (its log is {})",
                    socket.display(),
                    self.paths.log.display()
                )));
            }
            return Ok(Stopped::Gone { pid, socket });
        }
        wait_for_exit(&self.paths, pid, " of SIGTERM", || holder.runs())?;
        Ok(Stopped::Signalled { pid, socket })
    }

    /// Every connection re-reads its config (a bridge's SIGHUP).
    pub fn reload(&self) -> Result<Reloaded, ClientError> {
        decode(&self.call(Request::Reload)?, "the daemon's")
    }

    /// `dsh ps`: every connection with its terminals and jobs.
    pub fn ps(&self) -> Result<Snapshot, ClientError> {
        decode(&self.call(Request::Ps)?, "the daemon's")
    }

    /// `dsh ps --end N` / `--give N --to M`: a person ends detached
    /// work, or gives it to a connected agent.
    pub fn decide_detached(
        &self,
        connection: u64,
        give_to: Option<u64>,
    ) -> Result<DetachedDone, ClientError> {
        decode(
            &self.call(Request::Detached {
                connection,
                give_to,
            })?,
            "the daemon's",
        )
    }

    /// `dsh answer`: a person's answer to terminal `id`'s secret prompt.
    pub fn answer(
        &self,
        id: &str,
        secret: zeroize::Zeroizing<String>,
    ) -> Result<daemon_wire::replies::Answered, ClientError> {
        decode(
            &self.call(Request::Answer {
                id: id.to_owned(),
                secret: daemon_wire::Secret(secret),
            })?,
            "the daemon's",
        )
    }

    /// `dsh answer`: what the person is asked before answering `id`.
    pub fn asking(&self, id: &str) -> Result<daemon_wire::replies::Asking, ClientError> {
        decode(
            &self.call(Request::Asking { id: id.to_owned() })?,
            "the daemon's",
        )
    }

    /// `dsh approve`: the commands waiting for a person's approval.
    pub fn approvals(&self) -> Result<daemon_wire::replies::Approvals, ClientError> {
        decode(&self.call(Request::Approvals)?, "the daemon's")
    }

    /// `dsh approve ap-N`: a person runs (`run`) or refuses a waiting
    /// command.
    pub fn approve(
        &self,
        id: &str,
        run: bool,
    ) -> Result<daemon_wire::replies::Decided, ClientError> {
        decode(
            &self.call(Request::Approve {
                id: id.to_owned(),
                run,
            })?,
            "the daemon's",
        )
    }

    /// `dsh ui`: the page (started on the first request) and a fresh
    /// sign-in link.
    pub fn ui(&self) -> Result<UiPage, ClientError> {
        decode(&self.call(Request::Ui)?, "the daemon's")
    }

    /// One registry operation (`dsh workspace …`, `dsh session …`); `T`
    /// is the operation's result type (see [`RegistryOp`]).
    pub fn registry<T: DeserializeOwned>(&self, op: RegistryOp) -> Result<T, ClientError> {
        decode(&self.call(Request::Registry { op })?, "the registry's")
    }

    /// `dsh attach`: a live view of terminal `id` until the person
    /// leaves; the line to print then.
    pub fn attach(&self, id: &str, writable: bool) -> Result<String, ClientError> {
        match id.split_once(':') {
            // `HOST:pty-N`: a terminal of a remote bridge's host.
            Some((host, pty)) => {
                match crate::remotes::attach(&self.paths.runtime_dir, host, pty, writable) {
                    Some(attached) => attached.map_err(|e| ClientError::Unreachable(e.to_string())),
                    None => Err(ClientError::Unreachable(format!(
                        "no dsh mcp --remote bridge here serves {host} (dsh ps lists the hosts)"
                    ))),
                }
            }
            None => super::attach::run(&self.paths, id, writable),
        }
    }
}

/// What `dsh daemon status` found.
#[derive(Debug, Clone)]
pub enum StatusReport {
    /// The daemon answered.
    Running(Status),
    /// A daemon holds the data directory but cannot be reached.
    Unreachable(Unreachable),
}

/// A daemon that holds the data directory, found through its lock, that
/// cannot be reached through the socket: what it recorded, and why. As
/// JSON, its fields in this order.
#[derive(Debug, Clone, Serialize)]
pub struct Unreachable {
    /// The data directory.
    pub data_dir: PathBuf,
    /// Why it cannot be reached.
    pub error: String,
    /// Its log.
    pub log: PathBuf,
    /// Its pid.
    pub pid: u32,
    /// Always false.
    pub reachable: bool,
    /// The socket it recorded.
    pub socket: PathBuf,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Its dsh version.
    pub version: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (the daemon: version {}, started {})",
            self.error, self.version, self.started_at
        )
    }
}

/// How `dsh daemon stop` ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopped {
    /// The daemon was asked over its socket and exited.
    Asked {
        /// Its pid.
        pid: u32,
    },
    /// Its socket did not lead to it: found through its lock, it was sent
    /// SIGTERM and exited.
    Signalled {
        /// Its pid.
        pid: u32,
        /// The socket it recorded.
        socket: PathBuf,
    },
    /// Found through its lock, it was gone before the signal.
    Gone {
        /// Its pid.
        pid: u32,
        /// The socket it recorded.
        socket: PathBuf,
    },
    /// No daemon runs for the data directory.
    NotRunning {
        /// The data directory.
        data_dir: PathBuf,
    },
}

impl std::fmt::Display for Stopped {
    /// The line `dsh daemon stop` prints.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stopped::Asked { pid } => write!(
                f,
                "stopped the dsh daemon (pid {pid}); its terminals and jobs were ended"
            ),
            Stopped::Signalled { pid, socket } => write!(
                f,
                "stopped the dsh daemon (pid {pid}), found through its lock as its socket {} did \
                 not lead to it; its terminals and jobs were ended",
                socket.display()
            ),
            Stopped::Gone { pid, socket } => write!(
                f,
                "the dsh daemon (pid {pid}), found through its lock as its socket {} did not lead \
                 to it, was already gone; nothing to stop",
                socket.display()
            ),
            Stopped::NotRunning { data_dir } => write!(
                f,
                "no dsh daemon is running for {}; nothing to stop",
                data_dir.display()
            ),
        }
    }
}

/// Waits up to 60 s for the dsh daemon `pid`, asked to stop, to exit
/// (`runs` tells whether it still runs); the error says how long, `since`
/// what (`" of SIGTERM"`, or nothing), and where its log is.
fn wait_for_exit(
    paths: &DaemonPaths,
    pid: u32,
    since: &str,
    runs: impl Fn() -> bool,
) -> Result<(), ClientError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while runs() {
        if Instant::now() > deadline {
            return Err(ClientError::Unreachable(format!(
                "the dsh daemon (pid {pid}) did not exit within 60 s{since}; its log is {}",
                paths.log.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// The reply's data as `T`; `whose` answer it was, for the message.
fn decode<T: DeserializeOwned>(reply: &Reply, whose: &str) -> Result<T, ClientError> {
    reply
        .decode()
        .map_err(|e| ClientError::Unreachable(format!("{whose} answer was not understood: {e}")))
}
