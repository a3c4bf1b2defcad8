//! Interrupting a running send: `SIGINT` to the foreground group, then,
//! if it ignores it, the escalation the send's caller asked for.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use terminal_seam::SendInterrupt;

use crate::session::Session;

/// Interrupts a running send.
pub(crate) struct Interrupt {
    session: Weak<Session>,
    /// One lock for the whole decision to signal, so that `interrupt` and
    /// the send's `follow` never both signal the same group.
    state: Mutex<InterruptState>,
    settled: AtomicBool,
}

#[derive(Default)]
struct InterruptState {
    /// When the interrupt was asked for, or last followed to a new
    /// foreground group.
    at: Option<Instant>,
    /// The foreground group SIGINT last went to.
    signalled: Option<Signalled>,
}

/// A group SIGINT went to, and what its leader was running then.
#[derive(Clone, Copy)]
struct Signalled {
    pgid: i32,
    /// The leader's image just before the signal went out; `None` once
    /// the signal was repeated, or when the image could not be read.
    image: Option<Image>,
}

/// What a process is running, as far as only an `exec` changes it: the
/// executable, and where its stack started (an `exec` builds a new
/// address space, placed anew; renaming the process changes neither).
#[derive(Clone, Copy, PartialEq, Eq)]
struct Image {
    /// The executable's device and inode.
    exe: (u64, u64),
    /// `startstack` of `/proc/<pid>/stat`.
    stack: u64,
}

impl Image {
    fn of(pid: i32) -> Option<Self> {
        use std::os::unix::fs::MetadataExt;
        let exe = std::fs::metadata(format!("/proc/{pid}/exe")).ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        // Fields after the command name, which may hold spaces: `state`
        // is field 3, `startstack` field 28.
        let stack = stat
            .get(stat.rfind(')')? + 1..)?
            .split_whitespace()
            .nth(25)?
            .parse()
            .ok()?;
        Some(Self {
            exe: (exe.dev(), exe.ino()),
            stack,
        })
    }
}

/// Marks the send settled (interrupts become no-ops) when the send's
/// future completes or is dropped.
pub(crate) struct SettledOnDrop(pub(crate) Arc<Interrupt>);

impl Drop for SettledOnDrop {
    fn drop(&mut self) {
        self.0.settled.store(true, Ordering::Release);
    }
}

impl Interrupt {
    fn new(session: &Arc<Session>) -> Self {
        Self {
            session: Arc::downgrade(session),
            state: Mutex::new(InterruptState::default()),
            settled: AtomicBool::new(false),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, InterruptState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn since(&self) -> Option<Instant> {
        self.state().at
    }

    /// Once interrupted and until settled, a program that took the
    /// foreground after the SIGINT went out gets it too: a SIGINT that
    /// reached the shell while it was starting the program (between its
    /// fork and the program taking the terminal) is otherwise lost, and
    /// the program runs on. The shell's own group is never signalled
    /// here: it is at its prompt again, or about to be.
    ///
    /// The group signalled last gets SIGINT once more when its leader
    /// has `exec`ed since: the signal reached the shell's forked child
    /// before it became the program (the child still runs the shell's
    /// handler, and `exec` forgets what it caught), or a program that
    /// answered SIGINT by becoming another one.
    pub(crate) fn follow(&self, session: &Session) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        // Read before the state is locked: `interrupt` takes the
        // session's lock while it holds the state's.
        let Some(fg) = session.foreground_pgid() else {
            return;
        };
        let mut state = self.state();
        if state.at.is_none() || fg == session.spec.pid {
            return;
        }
        match state.signalled {
            Some(Signalled { pgid, image }) if pgid == fg => {
                let Some(image) = image else {
                    return;
                };
                if Image::of(fg).is_none_or(|now| now == image) {
                    return;
                }
                // SAFETY: plain syscall.
                unsafe { libc::killpg(fg, libc::SIGINT) };
                state.signalled = Some(Signalled { pgid, image: None });
            }
            _ => signal(&mut state, fg),
        }
        state.at = Some(Instant::now());
    }
}

/// Sends SIGINT to `pgid` and records it in `state`, with its leader's
/// image just before: a leader that runs another image later `exec`ed
/// after the signal was sent.
fn signal(state: &mut InterruptState, pgid: i32) {
    let image = Image::of(pgid);
    // SAFETY: plain syscall.
    unsafe { libc::killpg(pgid, libc::SIGINT) };
    state.signalled = Some(Signalled { pgid, image });
}

impl SendInterrupt for Interrupt {
    fn interrupt(&self) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        let session = self.session.upgrade();
        {
            let mut state = self.state();
            if state.at.is_some() {
                return;
            }
            state.at = Some(Instant::now());
            if let Some(pgid) = session.as_ref().and_then(|s| s.foreground_pgid()) {
                signal(&mut state, pgid);
            }
        }
        if let Some(session) = session {
            session.changed.notify_waiters();
        }
    }
}

/// Creates the interrupt handle of a send.
pub(crate) fn interrupt_for(session: &Arc<Session>) -> Arc<Interrupt> {
    Arc::new(Interrupt::new(session))
}
