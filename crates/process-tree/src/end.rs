//! Signalling and verifiably ending every process of a session.

use std::collections::BTreeMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

use crate::scan::{ProcessInfo, command_line, live_session_members, process_info};

/// One step of an escalation: send `signal`, then wait up to `grace` for
/// the session to empty.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// The signal sent to every live member.
    pub signal: Signal,
    /// How long to wait for the members to exit before the next step.
    pub grace: Duration,
}

/// The escalation used for commands: SIGTERM, then SIGKILL.
pub const TERM_THEN_KILL: &[Step] = &[
    Step {
        signal: Signal::SIGTERM,
        grace: Duration::from_millis(500),
    },
    Step {
        signal: Signal::SIGKILL,
        grace: Duration::from_secs(3),
    },
];

/// A process named in a report: its pid and command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// Its pid.
    pub pid: i32,
    /// Its command line, shortened (see [`command_line`]).
    pub command: String,
}

impl Member {
    fn of(p: &ProcessInfo) -> Self {
        Self {
            pid: p.pid,
            command: command_line(p.pid),
        }
    }
}

impl std::fmt::Display for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "pid {} ({})", self.pid, self.command)
    }
}

/// How [`end_session`] went.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndReport {
    /// Signals that were actually sent, in order.
    pub signals_sent: Vec<Signal>,
    /// How many distinct live processes were seen in the session.
    pub processes_seen: usize,
    /// The processes this call signalled that are now gone: exactly what
    /// was ended (a process that exited before it was signalled is not in
    /// it).
    pub ended: Vec<Member>,
}

/// The session could not be emptied.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
#[error(
    "{} process(es) of session {sid} survived {}: {}",
    survivors.len(),
    last_signal.map_or("every signal", |s| s.as_str()),
    list(survivors)
)]
pub struct Survivors {
    /// The session id.
    pub sid: i32,
    /// The last signal sent, if any.
    pub last_signal: Option<Signal>,
    /// The processes still alive after the last step.
    pub survivors: Vec<Member>,
}

/// `pid 1 (a), pid 2 (b)`, at most five named.
pub(crate) fn list(members: &[Member]) -> String {
    let mut parts: Vec<String> = members.iter().take(5).map(Member::to_string).collect();
    if members.len() > 5 {
        parts.push(format!("and {} more", members.len() - 5));
    }
    parts.join(", ")
}

/// Opens a pidfd for `pid`: once open it names that one process, whatever
/// later reuses the number.
pub(crate) fn pidfd_open(pid: i32) -> Result<OwnedFd, Errno> {
    // SAFETY: plain syscall; on success it returns a new descriptor we own.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(Errno::last());
    }
    // SAFETY: a fresh descriptor returned by the kernel, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Sends `signal` through a pidfd.
pub(crate) fn pidfd_send_signal(fd: &OwnedFd, signal: Signal) -> Result<(), Errno> {
    // SAFETY: plain syscall on a descriptor we own; no siginfo, no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            signal as i32,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc < 0 { Err(Errno::last()) } else { Ok(()) }
}

/// Sends `signal` to the process `seen` describes, if that process still
/// exists: the pid is pinned with a pidfd first and its start time and
/// session checked after, so a pid reused since the scan is never
/// signalled. True when the signal was delivered.
pub fn signal_process(seen: &ProcessInfo, signal: Signal) -> bool {
    let same = || {
        process_info(seen.pid)
            .is_some_and(|now| now.start_time == seen.start_time && now.sid == seen.sid)
    };
    match pidfd_open(seen.pid) {
        Ok(fd) => same() && pidfd_send_signal(&fd, signal).is_ok(),
        Err(Errno::ESRCH) => false,
        // No pidfds (a kernel before 5.3): the check narrows the window.
        Err(_) => same() && kill(Pid::from_raw(seen.pid), signal).is_ok(),
    }
}

/// Sends `signal` to every live member of session `sid` (each checked as
/// [`signal_process`] does); returns how many were signalled.
///
/// The caller must know `sid` is still the session it means: hold its
/// leader unreaped (a [`crate::Leader`] does), or accept the risk.
pub fn signal_session(sid: i32, signal: Signal) -> usize {
    live_session_members(sid)
        .iter()
        .filter(|p| signal_process(p, signal))
        .count()
}

/// Ends every process of session `sid`, following `steps`, and verifies
/// that none survives. Zombies count as gone; zombies that are this
/// process's adopted children are reaped on the way (see
/// [`crate::reap_adopted`]).
///
/// Returns as soon as the session is empty; sends nothing to an empty
/// session (one `/proc` scan). Blocks for at most the sum of the steps'
/// graces. The caller must know `sid` is still the session it means (see
/// [`signal_session`]); [`crate::Leader::end_session`] does.
pub fn end_session(sid: i32, steps: &[Step]) -> Result<EndReport, Survivors> {
    end_members(sid, steps, &|| live_session_members(sid))
}

/// [`end_session`] for the processes `members` lists each time it is
/// called (the live ones), named `sid`'s in a report.
pub(crate) fn end_members(
    sid: i32,
    steps: &[Step],
    members: &dyn Fn() -> Vec<ProcessInfo>,
) -> Result<EndReport, Survivors> {
    let mut report = EndReport::default();
    let first = members();
    if first.is_empty() {
        // The common case after a command exits on its own: one scan.
        return Ok(report);
    }
    // Every live process seen (named when first seen, so the ones that
    // are ended can still be named), and whether this call signalled it.
    let mut seen: BTreeMap<(i32, u64), (Member, bool)> = BTreeMap::new();
    let mut note = |p: &ProcessInfo, signalled: bool| {
        let entry = seen
            .entry((p.pid, p.start_time))
            .or_insert_with(|| (Member::of(p), false));
        entry.1 |= signalled;
    };
    let mut live = first;
    let mut last_signal = None;
    for step in steps {
        for p in &live {
            note(p, false);
            let signalled = signal_process(p, step.signal);
            note(p, signalled);
        }
        report.signals_sent.push(step.signal);
        last_signal = Some(step.signal);
        if wait_until_none(members, step.grace) {
            live = Vec::new();
            break;
        }
        live = members();
        if live.is_empty() {
            break;
        }
    }
    crate::reap::reap_adopted();
    if !live.is_empty() {
        live = members();
    }
    for p in &live {
        note(p, false);
    }
    report.processes_seen = seen.len();
    let alive: Vec<(i32, u64)> = live.iter().map(|p| (p.pid, p.start_time)).collect();
    report.ended = seen
        .iter()
        .filter(|(key, (_, signalled))| *signalled && !alive.contains(key))
        .map(|(_, (member, _))| member.clone())
        .collect();
    if live.is_empty() {
        Ok(report)
    } else {
        Err(Survivors {
            sid,
            last_signal,
            survivors: live
                .iter()
                .map(|p| {
                    seen.get(&(p.pid, p.start_time))
                        .map_or_else(|| Member::of(p), |(m, _)| m.clone())
                })
                .collect(),
        })
    }
}

/// Polls until session `sid` has no live member or `grace` passes; true
/// when it emptied. Polls tightly at first and backs off.
pub fn wait_until_empty(sid: i32, grace: Duration) -> bool {
    wait_until_none(&|| live_session_members(sid), grace)
}

/// Polls until `members` lists nothing or `grace` passes; true when it
/// did.
pub(crate) fn wait_until_none(members: &dyn Fn() -> Vec<ProcessInfo>, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    let mut pause = Duration::from_micros(200);
    loop {
        if members().is_empty() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(20));
    }
}
