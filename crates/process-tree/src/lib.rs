//! Find, signal and verifiably end every process of a Unix session.
//!
//! Shell job control puts `cmd &` in a process group of its own, so
//! `killpg` on the leader's group misses it; a process may also be re-parented
//! away from its shell. What every descendant keeps, unless it calls
//! `setsid` itself, is the *session id*. This crate therefore works on
//! sessions: it scans `/proc/*/stat`, signals every member, escalates, and
//! checks that none is left running.
//!
//! It also helps a long-lived host avoid zombies on machines whose init does
//! not reap orphans: [`become_subreaper`] makes the host adopt orphaned
//! descendants and [`reap_adopted`] reaps them.
//!
//! This crate is deliberately synchronous and runtime-free: the waits are
//! short sleeps, so async callers run [`end_session`] on a blocking thread.
//! It does not spawn processes and knows nothing of terminals or jobs.

use std::fs;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{Signal, kill};
use nix::sys::wait::{WaitPidFlag, waitpid};
use nix::unistd::Pid;

/// One process as read from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgid: i32,
    /// Session id.
    pub sid: i32,
    /// Controlling terminal's foreground process group (`tpgid`), or -1.
    pub tpgid: i32,
    /// The one-letter state (`R`, `S`, `D`, `Z`, `T`, …).
    pub state: char,
}

impl ProcessInfo {
    /// True when the process has exited and only waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn process_info(pid: i32) -> Option<ProcessInfo> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the text of a `/proc/<pid>/stat` file.
///
/// The command name is in parentheses and may itself contain spaces and
/// parentheses, so the fields are read after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcessInfo> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    let sid = fields.next()?.parse().ok()?;
    let _tty_nr = fields.next()?;
    let tpgid = fields.next()?.parse().ok()?;
    Some(ProcessInfo {
        pid,
        ppid,
        pgid,
        sid,
        tpgid,
        state,
    })
}

/// Every process currently visible in `/proc`.
pub fn all_processes() -> Vec<ProcessInfo> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| {
        let name = entry.ok()?.file_name();
        let pid: i32 = name.to_str()?.parse().ok()?;
        process_info(pid)
    })
    .collect()
}

/// The processes of session `sid` (zombies included).
pub fn session_members(sid: i32) -> Vec<ProcessInfo> {
    all_processes()
        .into_iter()
        .filter(|p| p.sid == sid)
        .collect()
}

/// The processes of session `sid` that have not exited yet.
pub fn live_session_members(sid: i32) -> Vec<ProcessInfo> {
    session_members(sid)
        .into_iter()
        .filter(|p| !p.is_zombie())
        .collect()
}

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

/// How [`end_session`] went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndReport {
    /// Signals that were actually sent, in order.
    pub signals_sent: Vec<Signal>,
    /// How many distinct processes were seen in the session.
    pub processes_seen: usize,
}

/// The session could not be emptied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("{} process(es) of session {sid} survived SIGKILL: pids {survivors:?}", survivors.len())]
pub struct Survivors {
    /// The session id.
    pub sid: i32,
    /// The pids still alive after the last step.
    pub survivors: Vec<i32>,
}

/// Sends `signal` to every live member of session `sid`; returns how many
/// were signalled.
pub fn signal_session(sid: i32, signal: Signal) -> usize {
    let mut sent = 0;
    for p in live_session_members(sid) {
        if kill(Pid::from_raw(p.pid), signal).is_ok() {
            sent += 1;
        }
    }
    sent
}

/// Ends every process of session `sid`, following `steps`, and verifies
/// that none survives. Zombies count as gone; zombies that are this
/// process's adopted children are reaped on the way (see [`reap_adopted`]).
///
/// Returns as soon as the session is empty; sends nothing to an empty
/// session. Blocks for at most the sum of the steps' graces.
pub fn end_session(sid: i32, steps: &[Step]) -> Result<EndReport, Survivors> {
    let mut report = EndReport {
        signals_sent: Vec::new(),
        processes_seen: 0,
    };
    let mut seen = std::collections::BTreeSet::new();
    let first = live_session_members(sid);
    if first.is_empty() {
        // The common case after a command exits on its own: one scan.
        return Ok(report);
    }
    let mut first = Some(first);
    for step in steps {
        let live = first.take().unwrap_or_else(|| live_session_members(sid));
        seen.extend(live.iter().map(|p| p.pid));
        if live.is_empty() {
            break;
        }
        for p in &live {
            // ESRCH: it exited between the scan and the signal.
            let _ = kill(Pid::from_raw(p.pid), step.signal);
        }
        report.signals_sent.push(step.signal);
        if wait_until_empty(sid, step.grace) {
            break;
        }
    }
    reap_adopted();
    report.processes_seen = seen.len();
    let survivors: Vec<i32> = live_session_members(sid).iter().map(|p| p.pid).collect();
    if survivors.is_empty() {
        Ok(report)
    } else {
        Err(Survivors { sid, survivors })
    }
}

/// Polls until session `sid` has no live member or `grace` passes; true
/// when it emptied. Polls tightly at first and backs off.
pub fn wait_until_empty(sid: i32, grace: Duration) -> bool {
    let deadline = Instant::now() + grace;
    let mut pause = Duration::from_micros(200);
    loop {
        if live_session_members(sid).is_empty() {
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

/// Makes the calling process a session leader; meant for `pre_exec`, so
/// every child the host spawns is a session leader that [`end_session`] can
/// end as a whole:
///
/// ```no_run
/// # use std::os::unix::process::CommandExt;
/// let mut command = std::process::Command::new("bash");
/// // SAFETY: `setsid` is async-signal-safe and touches no memory.
/// unsafe { command.pre_exec(process_tree::setsid_in_child) };
/// ```
pub fn setsid_in_child() -> std::io::Result<()> {
    nix::unistd::setsid()
        .map(drop)
        .map_err(std::io::Error::from)
}

/// The conventional name of a signal number (`SIGKILL`), or `SIG<n>`.
pub fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("SIG{signal}"), |s| s.as_str().to_owned())
}

/// Makes this process the "child subreaper" of its descendants: orphans
/// are re-parented to it instead of to init. Call once at host start-up
/// on machines whose init may not reap.
pub fn become_subreaper() -> Result<(), Errno> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Reaps zombie children of this process that were *adopted* (re-parented
/// orphans). Direct children that the host spawned itself are session
/// leaders (`pid == sid`) and are left for their owner's `wait`, so this
/// never steals an exit status. Returns how many were reaped.
pub fn reap_adopted() -> usize {
    let me = std::process::id() as i32;
    let mut reaped = 0;
    for p in all_processes() {
        if p.ppid == me
            && p.is_zombie()
            && p.pid != p.sid
            && waitpid(Pid::from_raw(p.pid), Some(WaitPidFlag::WNOHANG)).is_ok()
        {
            reaped += 1;
        }
    }
    reaped
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};

    #[test]
    fn parses_stat_with_parentheses_in_name() {
        let text = "4242 (we ird) (name)) S 1 4242 4242 0 -1 4194560 0 0";
        assert_eq!(
            parse_stat(text),
            Some(ProcessInfo {
                pid: 4242,
                ppid: 1,
                pgid: 4242,
                sid: 4242,
                tpgid: -1,
                state: 'S'
            })
        );
    }

    #[test]
    fn ends_background_jobs_that_escape_the_process_group() {
        let _ = become_subreaper();
        // `set -m` gives each background job its own process group, which
        // is exactly what `killpg` on the leader would miss.
        let mut command = Command::new("bash");
        command
            .args([
                "-c",
                "set -m; sleep 300 & sleep 301 & trap '' TERM; sleep 302",
            ])
            .stdin(Stdio::null());
        // SAFETY: setsid is async-signal-safe.
        unsafe {
            command.pre_exec(setsid_in_child);
        }
        let mut child = command.spawn().unwrap();
        let sid = child.id() as i32;
        let deadline = Instant::now() + Duration::from_secs(5);
        while live_session_members(sid).len() < 3 {
            assert!(Instant::now() < deadline, "session never formed");
            std::thread::sleep(Duration::from_millis(5));
        }
        let groups: std::collections::BTreeSet<i32> =
            live_session_members(sid).iter().map(|p| p.pgid).collect();
        assert!(
            groups.len() >= 3,
            "expected separate process groups, got {groups:?}"
        );
        let report = end_session(sid, TERM_THEN_KILL).unwrap();
        assert_eq!(report.signals_sent, vec![Signal::SIGTERM, Signal::SIGKILL]);
        assert!(report.processes_seen >= 3);
        assert_eq!(live_session_members(sid), vec![]);
        let _ = child.wait();
    }
}
