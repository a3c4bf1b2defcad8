//! The guardian: a small process that ends the host's sessions when the
//! host dies.
//!
//! A parent-death signal reaches only the leader of a session; `sleep 1000
//! &` in a terminal's shell survives its shell's SIGKILL. So the host
//! starts a guardian (its own binary, re-executed with a hidden
//! subcommand that calls [`serve_guardian`]) and tells it, over a pipe,
//! each session it starts and ends: `S <sid> <start time>` and `E <sid>
//! <start time>` lines. Only the host holds the pipe's write end (it is
//! close-on-exec), so end-of-file means the host is gone; the guardian
//! then ends every session it still knows and exits.
//!
//! **Never a reused pid.** A session is matched by its leader's pid *and*
//! start time. When the leader still exists with that start time, the
//! session id still means our session: every member is ended. When another
//! process has that pid, the number was reused, which the kernel allows
//! only once no process is left in the session: nothing of that number is
//! ours. When the leader is already gone (reaped by init after the host
//! died), the session id is still held by whatever members remain, and a
//! pid can only be reused after the session emptied, which — the host
//! holding its leaders unreaped — can only happen after the host died. So
//! members that started before the guardian saw end-of-file, and their
//! descendants, are ours; anything younger in a session of that number
//! belongs to someone else and is left alone. Each signal goes through a pidfd after re-checking
//! the start time (see [`crate::signal_process`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, BufRead, Write};
use std::os::fd::AsFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::scan::{ProcessInfo, all_processes, ticks_since_boot};

/// How long a record may wait for room in the pipe before it is dropped.
const RECORD_WAIT: Duration = Duration::from_secs(1);

struct Link {
    pipe: Mutex<std::io::PipeWriter>,
    pid: u32,
    /// Set after the first failed record, so a dead guardian is reported
    /// once, not at every spawn.
    failed: std::sync::atomic::AtomicBool,
}

static LINK: OnceLock<Link> = OnceLock::new();

/// Starts the guardian and reports to it every session spawned from now on
/// (and those already held). `command` must run this program's
/// [`serve_guardian`] (e.g. the host's own binary with a hidden
/// subcommand); its stdin is replaced by the record pipe. The guardian runs
/// in a session of its own, with no parent-death signal: it must outlive
/// the host. Returns its pid; a second call starts nothing and returns the
/// first guardian's pid.
pub fn start_guardian(mut command: Command) -> io::Result<u32> {
    if let Some(link) = LINK.get() {
        return Ok(link.pid);
    }
    // Both ends are close-on-exec: only the guardian's stdin (a dup made at
    // spawn) and our writer stay open, so no other child holds the pipe.
    let (reader, writer) = std::io::pipe()?;
    command.stdin(Stdio::from(reader)).stdout(Stdio::null());
    // SAFETY: setsid is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn()?;
    let pid = child.id();
    // Not held: if the guardian dies, the orphan reaper reaps it.
    drop(child);
    drop(command);
    set_nonblocking(&writer)?;
    let link = Link {
        pipe: Mutex::new(writer),
        pid,
        failed: std::sync::atomic::AtomicBool::new(false),
    };
    if LINK.set(link).is_err() {
        // Another thread won the race; ours reads end-of-file and exits.
        return Ok(LINK.get().map_or(pid, |l| l.pid));
    }
    for (sid, start_time) in crate::spawn::held_leaders() {
        session_started(sid, start_time);
    }
    Ok(pid)
}

/// The guardian's pid, when one was started.
pub fn guardian_pid() -> Option<u32> {
    LINK.get().map(|l| l.pid)
}

fn set_nonblocking(fd: &impl AsFd) -> io::Result<()> {
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFL(
            nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK,
        ),
    )?;
    Ok(())
}

/// Tells the guardian a session started.
pub(crate) fn session_started(sid: i32, start_time: u64) {
    record(&format!("S {sid} {start_time}\n"));
}

/// Tells the guardian a session is over (its leader is about to be reaped).
pub(crate) fn session_ended(sid: i32, start_time: u64) {
    record(&format!("E {sid} {start_time}\n"));
}

/// Writes one record (shorter than `PIPE_BUF`, so written whole or not at
/// all), waiting up to [`RECORD_WAIT`] for room.
fn record(line: &str) {
    let Some(link) = LINK.get() else { return };
    let mut pipe = link
        .pipe
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let deadline = Instant::now() + RECORD_WAIT;
    loop {
        match pipe.write(line.as_bytes()) {
            Ok(_) => return,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                let mut fds = [nix::poll::PollFd::new(
                    pipe.as_fd(),
                    nix::poll::PollFlags::POLLOUT,
                )];
                let _ = nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(100u16));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                if !link.failed.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::warn!(
                        "the guardian (pid {}) cannot be told of sessions any more ({e}): what they start is not ended if the host dies",
                        link.pid
                    );
                }
                return;
            }
        }
    }
}

/// How [`serve_guardian`] went after the host died.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GuardianReport {
    /// Sessions still known at end-of-file.
    pub sessions: usize,
    /// Processes signalled and gone.
    pub ended: usize,
    /// Processes still alive after SIGKILL.
    pub survivors: Vec<i32>,
}

/// The guardian's main loop: reads records from `input` until end-of-file
/// (the host died or exited), then ends every session still known —
/// SIGTERM, then SIGKILL — and returns what it did.
pub fn serve_guardian(input: impl io::Read) -> GuardianReport {
    let mut sessions: BTreeMap<i32, u64> = BTreeMap::new();
    for line in io::BufReader::new(input).lines() {
        let Ok(line) = line else { break };
        let mut fields = line.split_whitespace();
        let (Some(kind), Some(sid), Some(start)) = (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (Ok(sid), Ok(start)) = (sid.parse::<i32>(), start.parse::<u64>()) else {
            continue;
        };
        match kind {
            "S" => {
                sessions.insert(sid, start);
            }
            "E" if sessions.get(&sid) == Some(&start) => {
                sessions.remove(&sid);
            }
            _ => {}
        }
    }
    let eof = ticks_since_boot().unwrap_or(u64::MAX);
    end_orphaned_sessions(&sessions, eof)
}

/// Ends the processes of `sessions` (sid → leader start time) that are
/// provably ours, `eof` being when the host was seen gone (see the module
/// doc).
pub fn end_orphaned_sessions(sessions: &BTreeMap<i32, u64>, eof: u64) -> GuardianReport {
    let mut report = GuardianReport {
        sessions: sessions.len(),
        ..GuardianReport::default()
    };
    if sessions.is_empty() {
        return report;
    }
    let steps = [
        (Signal::SIGTERM, Duration::from_millis(300)),
        (Signal::SIGKILL, Duration::from_secs(2)),
    ];
    let mut signalled: BTreeSet<(i32, u64)> = BTreeSet::new();
    let mut left = ours(sessions, eof, &all_processes());
    for (signal, grace) in steps {
        for p in &left {
            if crate::end::signal_process(p, signal) {
                signalled.insert((p.pid, p.start_time));
            }
        }
        let deadline = Instant::now() + grace;
        loop {
            left = ours(sessions, eof, &all_processes());
            if left.is_empty() || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        if left.is_empty() {
            break;
        }
    }
    let alive: BTreeSet<(i32, u64)> = left.iter().map(|p| (p.pid, p.start_time)).collect();
    report.ended = signalled.difference(&alive).count();
    report.survivors = left.iter().map(|p| p.pid).collect();
    report
}

/// The live processes of `sessions` that are provably ours.
fn ours(sessions: &BTreeMap<i32, u64>, eof: u64, all: &[ProcessInfo]) -> Vec<ProcessInfo> {
    let mut mine: BTreeSet<i32> = BTreeSet::new();
    for (&sid, &start) in sessions {
        let leader = all.iter().find(|p| p.pid == sid);
        let leader_held = leader.is_some_and(|p| p.start_time == start);
        if leader.is_some() && !leader_held {
            // The pid names another process: it was reused, which the
            // kernel allows only once no process is left in our session
            // (a session id keeps its number taken). Whatever is in a
            // session of that number now is someone else's.
            continue;
        }
        for p in all.iter().filter(|p| p.sid == sid && !p.is_zombie()) {
            if leader_held || p.start_time <= eof {
                mine.insert(p.pid);
            }
        }
    }
    // Descendants of ours in the same sessions are ours too.
    loop {
        let before = mine.len();
        for p in all {
            if sessions.contains_key(&p.sid) && !p.is_zombie() && mine.contains(&p.ppid) {
                mine.insert(p.pid);
            }
        }
        if mine.len() == before {
            break;
        }
    }
    all.iter()
        .filter(|p| mine.contains(&p.pid) && !p.is_zombie())
        .copied()
        .collect()
}
