//! The remote hosts live `dsh mcp --remote` bridges serve, as this
//! machine's other dsh processes see them: [`target`] names where a bridge
//! goes and opens the stream there; this module keeps the bridges'
//! registrations and asks their hosts what they run. People see every
//! host: `dsh ps`, `dsh attach` and the page here reach the daemons of
//! those targets. The client (the bridge, `dsh ps`, `dsh attach`) and the
//! server (the page) both use it; it uses neither.
//!
//! Each bridge registers itself while it runs: `RUNTIME/remotes/PID.json`
//! (the runtime directory is private, the file 0600) names its target, its
//! host and the build it installed there, and — for ssh — the control
//! socket of its connection. ssh runs as a multiplexing master on that
//! socket (`ControlMaster=auto`, per bridge and connection, nothing on any
//! network port), so `dsh ps` and `dsh attach` ride the bridge's own ssh
//! connection: no new login, no second authentication. A registration
//! whose bridge is gone is ignored and removed.
//!
//! On the far side they run the installed build's own `dsh ps --json` and
//! `dsh attach`, as the remote user; ids come back qualified with the host
//! (`devbox:pty-3`), which is also how `dsh attach` names them here.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

pub mod target;

use self::target::{Target, TargetError};
use daemon_wire::ps::Snapshot;

/// Why a remote host could not be asked, or a person's command on it
/// did not run.
#[derive(Debug, thiserror::Error)]
pub enum RemoteError {
    /// The bridge's registered target does not parse.
    #[error(transparent)]
    Target(#[from] TargetError),
    /// The command that reaches the host could not be run.
    #[error("cannot reach {host}: {source}")]
    Unreachable {
        /// The host.
        host: String,
        /// Why.
        source: std::io::Error,
    },
    /// The host did not answer `dsh ps` in time.
    #[error("{host} did not answer within {secs} s")]
    Timeout {
        /// The host.
        host: String,
        /// How long it was given.
        secs: u64,
    },
    /// The host's answer was not a `dsh ps --json`.
    #[error("{host} answered no dsh ps: {said}")]
    NoPs {
        /// The host.
        host: String,
        /// The last line of its stderr (`nothing on stderr`).
        said: String,
    },
    /// The id is not `pty-N`.
    #[error("`{id}` is not a terminal id (pty-N)")]
    NotATerminal {
        /// The id as given.
        id: String,
    },
    /// An `exec:` target has no terminal for a person's command.
    #[error(
        "{host} is an exec: target, which has no terminal to {verb} through; run `dsh {verb} {id}` inside it (e.g. with docker exec -it)"
    )]
    ExecTarget {
        /// The host.
        host: String,
        /// The command (`attach`, `answer`).
        verb: &'static str,
        /// The terminal.
        id: String,
    },
    /// The far side's command failed.
    #[error("dsh {verb} on {host} ended: {status}")]
    Ended {
        /// The command (`attach`, `answer`).
        verb: &'static str,
        /// The host.
        host: String,
        /// How it ended.
        status: std::process::ExitStatus,
    },
}

/// How long a host may take to answer `dsh ps`.
const PS_TIMEOUT: Duration = Duration::from_secs(15);

/// A live bridge, as it registered itself.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Registration {
    /// The bridge's pid.
    pub pid: u32,
    /// The target as given (`ssh://…`, `exec:…`).
    pub target: String,
    /// Its host, as rows name it.
    pub host: String,
    /// The installed build's file name in the remote data directory.
    pub build: String,
    /// The control socket of the bridge's ssh connection, when it has one.
    pub control: Option<PathBuf>,
}

/// The directory of the registrations.
pub fn directory(runtime_dir: &Path) -> PathBuf {
    runtime_dir.join("remotes")
}

/// A bridge's registration, removed when dropped.
pub struct Registered {
    path: PathBuf,
    record: Registration,
}

impl Registered {
    /// Registers this bridge (best effort: a bridge that cannot register
    /// still serves; `dsh ps` just does not see it).
    pub fn new(runtime_dir: &Path, record: Registration) -> Option<Self> {
        let dir = directory(runtime_dir);
        crate::paths::ensure_private_dir(runtime_dir).ok()?;
        crate::paths::ensure_private_dir(&dir).ok()?;
        let path = dir.join(format!("{}.json", record.pid));
        let registered = Self { path, record };
        registered.write().ok()?;
        Some(registered)
    }

    /// The control socket for connection `generation` (ssh only); none
    /// when its path would be too long for a Unix socket (ssh adds 17
    /// bytes while it makes it): then `dsh ps` and `dsh attach` log in anew.
    pub fn control_for(&self, generation: u64) -> Option<PathBuf> {
        let path = self
            .path
            .with_file_name(format!("{}-{generation}.ssh", self.record.pid));
        (path.as_os_str().len() + 17 < 104).then_some(path)
    }

    /// Records the control socket of the bridge's current connection.
    pub fn set_control(&mut self, control: Option<PathBuf>) {
        self.record.control = control;
        let _ = self.write();
    }

    fn write(&self) -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt as _;
        let text = serde_json::to_vec(&self.record).map_err(std::io::Error::other)?;
        let tmp = self.path.with_extension("json.tmp");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(&text)?;
        std::fs::rename(&tmp, &self.path)
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
        if let Some(control) = &self.record.control {
            let _ = std::fs::remove_file(control);
        }
    }
}

/// The registrations of bridges that still run, oldest first; those of
/// bridges that are gone are removed.
pub fn live(runtime_dir: &Path) -> Vec<Registration> {
    let Ok(entries) = std::fs::read_dir(directory(runtime_dir)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let Ok(record) = std::fs::read(&path)
            .map_err(drop)
            .and_then(|b| serde_json::from_slice::<Registration>(&b).map_err(drop))
        else {
            continue;
        };
        if crate::holder::pid_alive(record.pid) {
            out.push(record);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    out.sort_by_key(|r| r.pid);
    out
}

/// One remote host's answer to `dsh ps`.
#[derive(Debug, Clone, Serialize)]
pub struct RemoteSnapshot {
    /// The host.
    pub host: String,
    /// The target as the bridge was given it.
    pub target: String,
    /// The bridge's pid here.
    pub bridge_pid: u32,
    /// What its daemon showed, ids qualified with the host.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot: Option<Snapshot>,
    /// Why it could not be asked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// `value` (a JSON object: `dsh ps --json` here) with the `remotes` added
/// when there are any.
pub fn with_remotes(value: &impl Serialize, remotes: &[RemoteSnapshot]) -> serde_json::Value {
    let mut value = serde_json::to_value(value).unwrap_or_default();
    if let (Some(map), false) = (value.as_object_mut(), remotes.is_empty()) {
        map.insert(
            "remotes".into(),
            serde_json::to_value(remotes).unwrap_or_default(),
        );
    }
    value
}

/// The far side's command that runs the installed build with `args`.
fn installed(record: &Registration, args: &str) -> String {
    format!(
        "exec \"${{XDG_DATA_HOME:-$HOME/.local/share}}/dsh/bin/{}\" {args}",
        record.build
    )
}

/// The local command that runs `sh -s` (or, with `tty`, the command the
/// caller adds) on the target of `record`, over the bridge's own ssh
/// connection when it has one.
fn command(record: &Registration, tty: bool) -> Result<(Command, Target), RemoteError> {
    let target = Target::parse(&record.target)?;
    let mut command = target.command_via(record.control.as_deref(), tty);
    if !tty {
        match target {
            Target::Ssh { .. } => command.arg("sh -s"),
            Target::Exec { .. } => command.args(["sh", "-s"]),
        };
    }
    Ok((command, target))
}

/// What every live bridge's host shows.
pub fn snapshots(runtime_dir: &Path) -> Vec<RemoteSnapshot> {
    live(runtime_dir).iter().map(snapshot_of).collect()
}

fn snapshot_of(record: &Registration) -> RemoteSnapshot {
    let (snapshot, error) = match ask_ps(record) {
        Ok(s) => (Some(s), None),
        Err(e) => (None, Some(e.to_string())),
    };
    RemoteSnapshot {
        host: record.host.clone(),
        target: record.target.clone(),
        bridge_pid: record.pid,
        snapshot,
        error,
    }
}

/// How old the hosts' answers may get before [`Watch`] asks again.
const FRESH: Duration = Duration::from_secs(2);

/// The hosts' answers for the page, which reads them every second while a
/// person watches: asked on a thread of their own, at most every
/// [`FRESH`], so a host that is slow to answer (up to [`PS_TIMEOUT`])
/// never holds a page up.
pub struct Watch {
    runtime_dir: PathBuf,
    state: std::sync::Arc<std::sync::Mutex<WatchState>>,
}

#[derive(Default)]
struct WatchState {
    asked_at: Option<Instant>,
    asking: bool,
    latest: Vec<RemoteSnapshot>,
}

impl Watch {
    /// Watches the bridges registered under `runtime_dir`.
    pub fn new(runtime_dir: PathBuf) -> Self {
        Self {
            runtime_dir,
            state: std::sync::Arc::default(),
        }
    }

    /// One entry per live bridge, oldest first: its host's latest answer,
    /// or neither a snapshot nor an error while the host is first asked.
    /// Asks the hosts again in the background when the answers are stale.
    pub fn latest(&self) -> Vec<RemoteSnapshot> {
        let records = live(&self.runtime_dir);
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stale = state.asked_at.is_none_or(|at| at.elapsed() >= FRESH);
        if stale && !state.asking && !records.is_empty() {
            let shared = self.state.clone();
            let asked = records.clone();
            let started = std::thread::Builder::new()
                .name("remote-ps".into())
                .spawn(move || {
                    let answers = asked.iter().map(snapshot_of).collect();
                    let mut state = shared
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    state.latest = answers;
                    state.asked_at = Some(Instant::now());
                    state.asking = false;
                });
            state.asking = started.is_ok();
        }
        records
            .iter()
            .map(|r| {
                state
                    .latest
                    .iter()
                    .find(|s| s.bridge_pid == r.pid && s.target == r.target)
                    .cloned()
                    .unwrap_or_else(|| RemoteSnapshot {
                        host: r.host.clone(),
                        target: r.target.clone(),
                        bridge_pid: r.pid,
                        snapshot: None,
                        error: None,
                    })
            })
            .collect()
    }
}

fn ask_ps(record: &Registration) -> Result<Snapshot, RemoteError> {
    let (mut command, _) = command(record, false)?;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|source| RemoteError::Unreachable {
            host: record.host.clone(),
            source,
        })?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(format!("{}\n", installed(record, "ps --json")).as_bytes());
    }
    if wait_within(&mut child, PS_TIMEOUT).is_none() {
        let _ = child.kill();
        let _ = child.wait();
        return Err(RemoteError::Timeout {
            host: record.host.clone(),
            secs: PS_TIMEOUT.as_secs(),
        });
    }
    let mut out = Vec::new();
    let mut err = String::new();
    if let Some(mut stdout) = child.stdout.take() {
        let _ = stdout.read_to_end(&mut out);
    }
    if let Some(mut stderr) = child.stderr.take() {
        let _ = stderr.read_to_string(&mut err);
    }
    let mut snapshot: Snapshot = serde_json::from_slice(&out).map_err(|_| RemoteError::NoPs {
        host: record.host.clone(),
        said: err.lines().last().unwrap_or("nothing on stderr").to_owned(),
    })?;
    for c in &mut snapshot.connections {
        c.host = Some(record.host.clone());
        for t in &mut c.terminals {
            t.id = format!("{}:{}", record.host, t.id);
        }
        for j in &mut c.jobs {
            j.id = format!("{}:{}", record.host, j.id);
        }
    }
    Ok(snapshot)
}

/// How `child` exited, if it does within `within` (`None` also when it
/// cannot be waited for): a bounded wait for a child of a thread with no
/// exit event to wait on. The child stays unreaped when it does not exit.
pub fn wait_within(
    child: &mut std::process::Child,
    within: Duration,
) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10)); // sleep-ok: a bounded wait for a child with no exit event here
            }
            _ => return None,
        }
    }
}

/// `dsh attach HOST:pty-N`: the far side's `dsh attach`, through the
/// bridge's connection with a terminal. `None` when no live bridge serves
/// HOST.
pub fn attach(
    runtime_dir: &Path,
    host: &str,
    id: &str,
    write: bool,
) -> Option<Result<String, RemoteError>> {
    let record = live(runtime_dir).into_iter().find(|r| r.host == host)?;
    let args = if write {
        format!("attach {id} --write")
    } else {
        format!("attach {id}")
    };
    Some(with_terminal(&record, id, "attach", &args).map(|()| format!("left {}:{id}", record.host)))
}

/// `dsh answer HOST:pty-N`: the far side's `dsh answer`, through the
/// bridge's connection with a terminal, so the far side reads the answer
/// from this person's terminal with echo off and it crosses only inside
/// ssh. `None` when no live bridge serves HOST.
pub fn answer(runtime_dir: &Path, host: &str, id: &str) -> Option<Result<(), RemoteError>> {
    let record = live(runtime_dir).into_iter().find(|r| r.host == host)?;
    Some(with_terminal(
        &record,
        id,
        "answer",
        &format!("answer {id}"),
    ))
}

/// Runs the installed build with `args` on `record`'s host, over its
/// bridge's connection with this terminal as the far side's.
fn with_terminal(
    record: &Registration,
    id: &str,
    verb: &'static str,
    args: &str,
) -> Result<(), RemoteError> {
    if !id.starts_with("pty-") || !id[4..].bytes().all(|b| b.is_ascii_digit()) {
        return Err(RemoteError::NotATerminal { id: id.into() });
    }
    let (mut command, target) = command(record, true)?;
    if matches!(target, Target::Exec { .. }) {
        return Err(RemoteError::ExecTarget {
            host: record.host.clone(),
            verb,
            id: id.into(),
        });
    }
    command.arg(installed(record, args));
    let status = command
        .status()
        .map_err(|source| RemoteError::Unreachable {
            host: record.host.clone(),
            source,
        })?;
    if status.success() {
        Ok(())
    } else {
        Err(RemoteError::Ended {
            verb,
            host: record.host.clone(),
            status,
        })
    }
}
