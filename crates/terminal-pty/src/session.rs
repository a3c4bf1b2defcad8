//! One terminal: its pty, its reader and waiter tasks, the send slot, and
//! what the settle ladder (`settle.rs`) and an interrupt (`interrupt.rs`)
//! read of it.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use process_tree::Leader;
use terminal_seam::{
    CloseKind, CloseOutcome, CursorPosition, ExitStatus, Owner, ScreenView, SignalOutcome,
    StreamChunk, SurvivingProcess, TerminalError, TerminalId, TerminalSignal, TerminalStatus,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::holders::{Holder, locks_memory};
use crate::output::Output;
use crate::probe::{
    Tty, WaitState, sleeps_on_its_terminal, switches_and_threads, thread_ids, voluntary_switches,
    wait_state,
};

/// Raw reads per drain, so a flood cannot hold the lock forever.
const DRAIN_READS: usize = 16;
/// The read buffer of a terminal. A pty master hands out at most what its
/// line discipline holds (4 KiB) per read, so a bigger buffer only costs
/// memory for every open terminal.
const READ_BUF: usize = 16 * 1024;

/// Escalation on close: hang up, terminate, kill.
const CLOSE_STEPS: &[process_tree::Step] = &[
    process_tree::Step {
        signal: nix::sys::signal::Signal::SIGHUP,
        grace: Duration::from_millis(300),
    },
    process_tree::Step {
        signal: nix::sys::signal::Signal::SIGTERM,
        grace: Duration::from_millis(300),
    },
    process_tree::Step {
        signal: nix::sys::signal::Signal::SIGKILL,
        grace: Duration::from_secs(3),
    },
];

/// Escalation when the service is dropped (synchronous, so shorter).
pub(crate) const DROP_STEPS: &[process_tree::Step] = &[
    process_tree::Step {
        signal: nix::sys::signal::Signal::SIGHUP,
        grace: Duration::from_millis(100),
    },
    process_tree::Step {
        signal: nix::sys::signal::Signal::SIGKILL,
        grace: Duration::from_secs(2),
    },
];

/// Everything the reader, the waiter and the sends share, behind one lock.
pub(crate) struct State {
    pub out: Output,
    pub exit: Option<ExitStatus>,
    /// The owner's "not read yet" cursor.
    pub unread: u64,
    buf: Vec<u8>,
    /// The pty master; `None` once the terminal was hung up (closed), even
    /// if an escaped process still holds the other end. Every use of the
    /// descriptor goes through this lock, so it is never used after close.
    master: Option<AsyncFd<OwnedFd>>,
    /// The voluntary switches of the foreground process's threads just
    /// before the terminal last answered a query: a thread still at its
    /// count has not woken to read the answer, so its wait is not one for
    /// input (see `answer_queries`).
    pub(crate) answered: HashMap<i32, Option<u64>>,
}

/// Fixed facts about a session, given at spawn.
pub(crate) struct SessionSpec {
    pub id: TerminalId,
    pub owner: Owner,
    pub name: Option<String>,
    pub command: Vec<String>,
    pub cwd: PathBuf,
    /// The program's process (the shell): the session's leader, unless
    /// the terminal runs in a PID namespace of its own.
    pub pid: i32,
    /// The session id: the leader's pid.
    pub sid: i32,
    pub our_shell: bool,
    pub tty: Tty,
    pub rows: u16,
    pub cols: u16,
    pub result_limit: usize,
    pub idle_fallback: Duration,
}

/// One terminal.
pub(crate) struct Session {
    pub spec: SessionSpec,
    pub created_at: SystemTime,
    /// The first process, held unreaped until close: its pid (the session
    /// id) cannot be reused meanwhile, so ending "session N" never reaches
    /// another program.
    leader: Arc<Leader>,
    /// One writer at a time, so two writes never interleave.
    write_lock: tokio::sync::Mutex<()>,
    state: Mutex<State>,
    pub(crate) changed: Notify,
    /// Woken when the master is closed.
    hangup: Notify,
    busy: AtomicBool,
    closing: AtomicBool,
    closed: AtomicBool,
    /// What earlier sends learnt of who reads this terminal.
    known: Mutex<Known>,
}

/// What the sends of a terminal learnt of who reads it, for the next one.
#[derive(Debug, Default)]
struct Known {
    /// Processes other than the foreground group's leader seen holding
    /// the terminal (members of the foreground group, a multiplexer's
    /// server, a dialog a daemon started): their counts are taken before
    /// the next write, as the leader's are.
    holders: Vec<Holder>,
    /// The longest quiet stretch seen before the last output of the
    /// latest send whose reader kept a connection to another process
    /// (see `settle`, the hold of a provisional wait).
    remote_gap: Option<Duration>,
    /// Processes seen waiting beside the terminal on a connection to
    /// another process (ssh's to its server): their later waits are
    /// provisional too, even one caught when it looks otherwise. A pid
    /// reused by another program of this terminal only costs that program
    /// the hold, never an early answer.
    remote_readers: Vec<i32>,
}

/// The most processes remembered as holding one terminal.
const MAX_KNOWN_HOLDERS: usize = 32;

impl Session {
    /// Wraps a spawned child and its pty master (non-blocking) and starts
    /// the reader and waiter tasks. Must run inside a tokio runtime.
    pub fn start(
        spec: SessionSpec,
        master: OwnedFd,
        leader: Leader,
        nonce: &str,
        scrollback: usize,
    ) -> io::Result<Arc<Self>> {
        // SAFETY: `master` is a valid descriptor we own; it is only closed
        // by dropping the `AsyncFd` that holds it.
        let master = unsafe {
            AsyncFd::register_with_interest(master, Interest::READABLE | Interest::WRITABLE)?
        };
        let mut out = Output::new(nonce, scrollback, spec.rows, spec.cols, spec.result_limit);
        // The startup's capture begins before the reader task can take a
        // byte: a program that prints at once (a shell's prompt) is read
        // into it even when the opening task is slow to get to its settle.
        out.begin_capture();
        let session = Arc::new(Self {
            spec,
            created_at: SystemTime::now(),
            leader: Arc::new(leader),
            write_lock: tokio::sync::Mutex::new(()),
            state: Mutex::new(State {
                out,
                exit: None,
                unread: 0,
                buf: vec![0; READ_BUF],
                master: Some(master),
                answered: HashMap::new(),
            }),
            changed: Notify::new(),
            hangup: Notify::new(),
            busy: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            known: Mutex::new(Known::default()),
        });
        tokio::spawn(read_loop(Arc::clone(&session)));
        tokio::spawn(wait_loop(Arc::clone(&session)));
        Ok(session)
    }

    /// Locks the shared state (a poisoned lock is still usable: every
    /// update leaves the state consistent).
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads whatever the pty has ready, without waiting, and wakes every
    /// waiter when something arrived (the reader task will not: the bytes
    /// are no longer there for it).
    pub(crate) fn drain(&self, st: &mut State) {
        let before = st.out.generation;
        self.drain_raw(st);
        if st.out.generation != before {
            self.changed.notify_waiters();
        }
    }

    fn drain_raw(&self, st: &mut State) {
        let State {
            out,
            buf,
            master,
            answered,
            ..
        } = st;
        let Some(master) = master.as_ref() else {
            return;
        };
        for _ in 0..DRAIN_READS {
            if out.eof {
                return;
            }
            // SAFETY: the buffer is ours and writable for its length; the
            // master stays open while the state lock is held.
            let n = unsafe { libc::read(master.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n > 0 {
                out.ingest(&buf[..n as usize]);
                answer_queries(master.as_raw_fd(), out, answered);
                continue;
            }
            if n == 0 {
                out.finish();
                return;
            }
            let errno = nix::errno::Errno::last();
            if errno == nix::errno::Errno::EAGAIN {
                return;
            }
            // EIO: every process holding the terminal is gone.
            if errno != nix::errno::Errno::EINTR {
                out.finish();
                return;
            }
        }
    }

    /// The session's status as a model sees it.
    pub fn status(&self, st: &State) -> TerminalStatus {
        let exit = st.exit.unwrap_or(ExitStatus {
            code: None,
            signal: None,
        });
        if self.closed.load(Ordering::Acquire) {
            TerminalStatus::Closed(exit)
        } else if self.closing.load(Ordering::Acquire) {
            TerminalStatus::Closing
        } else if st.exit.is_some() {
            TerminalStatus::Exited(exit)
        } else {
            TerminalStatus::Running
        }
    }

    /// True once a close began.
    pub fn is_closing(&self) -> bool {
        self.closing.load(Ordering::Acquire)
    }

    /// True while a send holds the slot.
    pub fn is_busy(&self) -> bool {
        self.busy.load(Ordering::Acquire)
    }

    /// The foreground process group of the terminal (none once hung up).
    pub(crate) fn foreground_pgid(&self) -> Option<i32> {
        let st = self.lock();
        let master = st.master.as_ref()?;
        // SAFETY: plain ioctl on a descriptor kept open by the lock.
        let pgid = unsafe { libc::tcgetpgrp(master.as_raw_fd()) };
        (pgid > 0).then_some(pgid)
    }

    /// The session whose controlling terminal this is (`TIOCGSID` on the
    /// master); `None` when it is none's.
    pub(crate) fn terminal_session(&self) -> Option<i32> {
        let st = self.lock();
        let master = st.master.as_ref()?;
        let mut sid: libc::pid_t = 0;
        // SAFETY: an ioctl that writes one pid_t we own, on a descriptor
        // kept open by the lock.
        let rc = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGSID, &mut sid) };
        (rc == 0 && sid > 0).then_some(sid)
    }

    /// Resolves once the terminal has been hung up.
    async fn hung_up(&self) {
        loop {
            let notified = self.hangup.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if self.lock().master.is_none() {
                return;
            }
            notified.await;
        }
    }

    /// Closes the pty master: the terminal is hung up for whatever still
    /// holds it (a process that left the session with `setsid` keeps the
    /// other end, which then reads end-of-file). What was already printed
    /// is kept; the stream ends here.
    fn hang_up(&self) {
        {
            let mut st = self.lock();
            self.drain_raw(&mut st);
            st.master = None;
            st.out.finish();
        }
        self.hangup.notify_waiters();
        self.changed.notify_waiters();
    }

    /// Writes `data` to the terminal, adding each accepted byte to
    /// `written`; returns when all of it was written, or with an error when
    /// the terminal is gone. A program that does not read its input makes
    /// this wait (the caller bounds it).
    pub(crate) async fn write_input(&self, data: &[u8], written: &mut usize) -> io::Result<()> {
        let _one_writer = self.write_lock.lock().await;
        while *written < data.len() {
            let rest = &data[*written..];
            let n = tokio::select! {
                n = std::future::poll_fn(|cx| self.poll_write(cx, rest)) => n?,
                () = self.hung_up() => return Err(io::ErrorKind::BrokenPipe.into()),
            };
            *written += n;
        }
        Ok(())
    }

    fn poll_write(&self, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let st = self.lock();
        let Some(master) = st.master.as_ref() else {
            return Poll::Ready(Err(io::ErrorKind::BrokenPipe.into()));
        };
        loop {
            let mut ready = match master.poll_write_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                Poll::Ready(Err(e)) => return Poll::Ready(Err(e)),
                Poll::Pending => return Poll::Pending,
            };
            let written = ready.try_io(|fd| {
                // SAFETY: writes from a slice we borrow, on an open descriptor.
                let n = unsafe { libc::write(fd.as_raw_fd(), data.as_ptr().cast(), data.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match written {
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                Ok(result) => return Poll::Ready(result),
                // Not writable after all: readiness was cleared, poll again.
                Err(_would_block) => {}
            }
        }
    }

    /// The terminal's modes, read through the master (on Linux the
    /// master's `tcgetattr` returns the other end's); `None` once it was
    /// hung up or when the call fails.
    pub(crate) fn modes(&self) -> Option<libc::termios> {
        let st = self.lock();
        let master = st.master.as_ref()?;
        // SAFETY: `tcgetattr` fills a `termios` we own, on an open
        // descriptor (used only under the session's lock).
        unsafe {
            let mut modes: libc::termios = std::mem::zeroed();
            (libc::tcgetattr(master.as_raw_fd(), &mut modes) == 0).then_some(modes)
        }
    }

    /// Whether the terminal echoes what is typed: false only in canonical
    /// mode with echo off (a secret prompt); a line editor in raw mode
    /// echoes for itself.
    pub(crate) fn echoes(&self) -> Option<bool> {
        let modes = self.modes()?;
        let canonical = modes.c_lflag & libc::ICANON != 0;
        Some(!canonical || modes.c_lflag & libc::ECHO != 0)
    }

    fn known(&self) -> MutexGuard<'_, Known> {
        self.known.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The processes other than `leader` seen holding the terminal in
    /// earlier sends and still alive.
    pub(crate) fn known_holders(&self, leader: Option<i32>) -> Vec<Holder> {
        let mut known = self.known();
        known.holders.retain(Holder::alive);
        known
            .holders
            .iter()
            .copied()
            .filter(|h| Some(h.pid) != leader)
            .collect()
    }

    /// Remembers `found` as holding the terminal, for the next sends.
    pub(crate) fn remember_holders(&self, found: impl IntoIterator<Item = Holder>) {
        let mut known = self.known();
        for holder in found {
            if !known.holders.contains(&holder) {
                known.holders.push(holder);
            }
        }
        let excess = known.holders.len().saturating_sub(MAX_KNOWN_HOLDERS);
        known.holders.drain(..excess);
    }

    /// Whether an earlier send saw `pid` wait on a connection to another
    /// process (see [`Session::note_remote_reader`]).
    pub(crate) fn was_remote_reader(&self, pid: i32) -> bool {
        self.known().remote_readers.contains(&pid)
    }

    /// Remembers that `pid` waited on a connection to another process.
    pub(crate) fn note_remote_reader(&self, pid: i32) {
        let mut known = self.known();
        if !known.remote_readers.contains(&pid) {
            known.remote_readers.push(pid);
            let excess = known.remote_readers.len().saturating_sub(MAX_KNOWN_HOLDERS);
            known.remote_readers.drain(..excess);
        }
    }

    /// The quiet stretch noted by [`Session::note_remote_gap`], if any.
    pub(crate) fn remote_gap(&self) -> Option<Duration> {
        self.known().remote_gap
    }

    /// Notes the longest quiet stretch of a send whose reader kept a
    /// connection: the next such send holds for a multiple of it. An
    /// earlier, longer one fades by half each send.
    pub(crate) fn note_remote_gap(&self, gap: Duration) {
        let mut known = self.known();
        known.remote_gap = Some(known.remote_gap.map_or(gap, |before| gap.max(before / 2)));
    }

    /// Whether `pid`, waiting for input, reads a secret in a full-screen
    /// dialog: the screen is the alternate one, the terminal is in raw
    /// mode with echo off (as any
    /// full-screen program sets it) and the process keeps locked memory,
    /// which programs that read secrets do so the secret never reaches
    /// swap (pinentry's secure memory). Editors, pagers and REPLs lock
    /// none.
    /// Only a full-screen program (on the alternate screen) is looked at:
    /// a line editor at its prompt is in raw mode with echo off too, and
    /// reading its status costs every REPL's settle.
    pub(crate) fn secret_dialog(&self, pid: i32) -> bool {
        self.lock().out.screen().alternate_screen()
            && self
                .modes()
                .is_some_and(|m| m.c_lflag & (libc::ICANON | libc::ECHO) == 0)
            && locks_memory(pid)
    }

    /// Whether `pid`, a process whose wait `/proc` hides from us (a
    /// set-uid program run by a regular user), is at a password prompt as
    /// far as can be seen from outside: it sleeps with this terminal as
    /// its controlling terminal while the terminal is in canonical mode
    /// with echo off.
    pub(crate) fn hidden_prompt(&self, pid: i32) -> bool {
        self.echoes() == Some(false) && sleeps_on_its_terminal(pid, &self.spec.tty)
    }

    /// Waits until the program took the piece of a long line just written
    /// (see `canon`): nothing is left in the terminal's input queue and a
    /// thread of the foreground process waits on the terminal again, woken
    /// since the write (`before`: the counts taken before it). False when
    /// the program is gone or the deadline passed.
    pub(crate) async fn piece_taken(
        &self,
        tty: &Tty,
        before: &HashMap<i32, Option<u64>>,
        deadline: Instant,
    ) -> bool {
        loop {
            if self.lock().exit.is_some() {
                return false;
            }
            if let Some(fg) = self.foreground_pgid()
                && let WaitState::OnTerminal { tid, .. } = wait_state(fg, tty)
                && before.get(&tid) != Some(&voluntary_switches(tid))
                && self.unread_input() == Some(0)
            {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_micros(200)).await;
        }
    }

    /// The other end of the terminal, opened through the master (no path
    /// lookup, never our controlling terminal), for a moment's use; `None`
    /// once it was hung up or when the kernel refuses.
    fn other_end(&self) -> Option<OwnedFd> {
        let st = self.lock();
        let master = st.master.as_ref()?;
        // SAFETY: plain ioctl on an open descriptor (kept open by the
        // lock); on success it returns a new descriptor that we own.
        let slave = unsafe {
            libc::ioctl(
                master.as_raw_fd(),
                libc::TIOCGPTPEER,
                libc::O_RDWR | libc::O_NOCTTY | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        };
        // SAFETY: a fresh descriptor returned by the kernel, owned here.
        (slave >= 0).then(|| unsafe { OwnedFd::from_raw_fd(slave as RawFd) })
    }

    /// The bytes of input the program could read now (in canonical mode:
    /// of whole lines); `None` when it cannot tell.
    pub(crate) fn unread_input(&self) -> Option<usize> {
        let slave = self.other_end()?;
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes an int we own.
        let ok = unsafe { libc::ioctl(slave.as_raw_fd(), libc::FIONREAD, &mut queued) } == 0;
        ok.then(|| usize::try_from(queued).unwrap_or(0))
    }

    /// Discards the input the program has not read yet (the terminal's
    /// input queue), so a partly written send cannot run later glued to the
    /// next one. True when the queue was flushed.
    pub(crate) fn discard_unread_input(&self) -> bool {
        let Some(slave) = self.other_end() else {
            return false;
        };
        // SAFETY: plain ioctl on the descriptor we just opened.
        unsafe { libc::tcflush(slave.as_raw_fd(), libc::TCIFLUSH) == 0 }
    }

    /// Takes the send slot after the contract's checks (the owner was
    /// checked by the caller): closing, exited, active send.
    pub fn acquire(self: &Arc<Self>) -> Result<SlotGuard, TerminalError> {
        let id = self.spec.id;
        if self.is_closing() {
            return Err(TerminalError::SessionClosing { id });
        }
        if let Some(exit) = self.lock().exit {
            return Err(TerminalError::SessionExited {
                id,
                exit: Some(exit),
            });
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(TerminalError::SendActive { id });
        }
        Ok(SlotGuard(Arc::clone(self)))
    }

    /// Writes bytes a person typed (the caller holds the send slot).
    pub async fn write_person_input(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.write_input(bytes, &mut 0).await
    }

    /// Takes the send slot of a session nobody else knows yet (its
    /// startup), whatever its state: a program may exit at once.
    pub fn acquire_startup(self: &Arc<Self>) -> SlotGuard {
        self.busy.store(true, Ordering::Release);
        SlotGuard(Arc::clone(self))
    }

    /// Reads the stream from `since` (or the unread cursor).
    pub fn read_stream(
        &self,
        since: Option<u64>,
        max_bytes: usize,
    ) -> Result<StreamChunk, TerminalError> {
        let mut st = self.lock();
        self.drain(&mut st);
        let end = st.out.ring().end();
        let cursor = since.unwrap_or(st.unread);
        if cursor > end {
            return Err(TerminalError::invalid(
                "since",
                format!("cursor {cursor} is past the end of the output ({end})"),
            ));
        }
        let slice = st.out.ring().read(cursor, max_bytes);
        if since.is_none() {
            st.unread = st.unread.max(slice.next);
        }
        Ok(StreamChunk {
            output: slice.text,
            from: slice.from,
            next: slice.next,
            dropped: slice.dropped,
            truncated: slice.truncated,
        })
    }

    /// Waits (bounded) for output after `since`, then reads it.
    pub async fn read_stream_wait(
        &self,
        since: u64,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<StreamChunk, TerminalError> {
        let deadline = Instant::now() + wait;
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let chunk = self.read_stream(Some(since), max_bytes)?;
            let ended = self.lock().out.eof;
            let now = Instant::now();
            if !chunk.output.is_empty() || chunk.dropped > 0 || ended || now >= deadline {
                return Ok(chunk);
            }
            let _ = tokio::time::timeout(deadline - now, notified).await;
        }
    }

    /// The emulated screen.
    pub fn read_screen(&self) -> ScreenView {
        let mut st = self.lock();
        self.drain(&mut st);
        let screen = st.out.screen();
        let (row, col) = screen.cursor_position();
        let (rows, cols) = screen.size();
        let text = screen.contents();
        ScreenView {
            screen: text.trim_end_matches('\n').to_owned(),
            cursor: CursorPosition {
                row: row.saturating_add(1),
                col: col.saturating_add(1),
            },
            rows: rows.get(),
            cols: cols.get(),
            alternate_screen: screen.alternate_screen(),
        }
    }

    /// Signals the foreground process group.
    pub fn signal(&self, signal: TerminalSignal) -> Result<SignalOutcome, TerminalError> {
        let id = self.spec.id;
        if self.is_closing() {
            return Err(TerminalError::SessionClosing { id });
        }
        if let Some(exit) = self.lock().exit {
            return Err(TerminalError::SessionExited {
                id,
                exit: Some(exit),
            });
        }
        let pgid = self
            .foreground_pgid()
            .ok_or(TerminalError::SessionExited { id, exit: None })?;
        if signal == TerminalSignal::Kill && pgid == self.spec.pid {
            return Err(TerminalError::UseClose { id });
        }
        // SAFETY: plain syscall.
        let rc = unsafe { libc::killpg(pgid, signal.number()) };
        if rc != 0 {
            return Err(TerminalError::SessionExited { id, exit: None });
        }
        Ok(SignalOutcome {
            delivered_to_pgid: pgid,
        })
    }

    /// Ends every process of the session, verified, then hangs the
    /// terminal up and reaps the first process. The `closing` flag makes it
    /// run once. Processes that survive SIGKILL are named in the outcome.
    pub async fn close(self: &Arc<Self>) -> CloseOutcome {
        if self.closing.swap(true, Ordering::AcqRel) {
            return CloseOutcome {
                outcome: CloseKind::AlreadyClosing,
                exit: self.lock().exit,
                survivors: Vec::new(),
            };
        }
        self.changed.notify_waiters();
        let leader = Arc::clone(&self.leader);
        let ended = tokio::task::spawn_blocking(move || leader.end_session(CLOSE_STEPS)).await;
        let survivors = match ended {
            Ok(Ok(_report)) => Vec::new(),
            Ok(Err(survivors)) => {
                tracing::warn!(%survivors, "terminal close left processes");
                survivors
                    .survivors
                    .into_iter()
                    .map(|m| SurvivingProcess {
                        pid: m.pid,
                        command: m.command,
                    })
                    .collect()
            }
            Err(join) => {
                tracing::warn!(%join, "terminal close task failed");
                self.leader
                    .members()
                    .iter()
                    .map(|p| SurvivingProcess {
                        pid: p.pid,
                        command: process_tree::command_line(p.pid),
                    })
                    .collect()
            }
        };
        self.finish_close(survivors.is_empty());
        let exit = self.lock().exit;
        CloseOutcome {
            outcome: CloseKind::Closed,
            exit,
            survivors,
        }
    }

    /// Hangs up, records the first process's exit (seen without reaping it)
    /// and, when the session is verified empty, reaps it.
    fn finish_close(&self, emptied: bool) {
        self.hang_up();
        if let Some(status) = self.leader.try_exit() {
            let mut st = self.lock();
            st.exit.get_or_insert(ExitStatus {
                code: status.code(),
                signal: status.signal(),
            });
        }
        if emptied {
            let _ = self.leader.reap();
        }
        self.closed.store(true, Ordering::Release);
        self.changed.notify_waiters();
    }

    /// Ends every process at once, synchronously (the service is dropping).
    pub fn kill_now(&self) {
        if self.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        let emptied = match self.leader.end_session(DROP_STEPS) {
            Ok(_) => true,
            Err(survivors) => {
                tracing::warn!(%survivors, "terminal processes survived");
                false
            }
        };
        self.finish_close(emptied);
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        // Its buffers are freed right after this: hand the pages back.
        crate::memory::release_freed_memory();
    }
}

/// The held send slot; dropping it frees the slot.
pub(crate) struct SlotGuard(Arc<Session>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

async fn read_loop(session: Arc<Session>) {
    loop {
        let done = tokio::select! {
            done = std::future::poll_fn(|cx| session.poll_read(cx)) => done,
            () = session.hung_up() => true,
        };
        session.changed.notify_waiters();
        if done {
            break;
        }
    }
}

impl Session {
    /// Reads one chunk from the master into the output; `Ready(true)` at
    /// the end of the output (every holder of the other end is gone, or
    /// the terminal was hung up).
    fn poll_read(&self, cx: &mut Context<'_>) -> Poll<bool> {
        let mut st = self.lock();
        let State {
            out,
            buf,
            master,
            answered,
            ..
        } = &mut *st;
        if out.eof {
            return Poll::Ready(true);
        }
        let Some(master) = master.as_ref() else {
            return Poll::Ready(true);
        };
        // Several reads per wake while output keeps coming (a pty hands
        // out at most 4 KiB a read): one notification for all of them.
        let mut got = false;
        for _ in 0..DRAIN_READS {
            let mut ready = match master.poll_read_ready(cx) {
                Poll::Ready(Ok(ready)) => ready,
                Poll::Ready(Err(_)) => {
                    out.finish();
                    return Poll::Ready(true);
                }
                Poll::Pending if got => return Poll::Ready(false),
                Poll::Pending => return Poll::Pending,
            };
            let read = ready.try_io(|fd| {
                // SAFETY: reads into a buffer we own, on an open descriptor.
                let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
                if n < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(n as usize)
                }
            });
            match read {
                Ok(Ok(0)) => {
                    out.finish();
                    return Poll::Ready(true);
                }
                Ok(Ok(n)) => {
                    out.ingest(&buf[..n]);
                    answer_queries(master.as_raw_fd(), out, answered);
                    got = true;
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => {}
                // EIO once the child side is closed: the end of the output.
                Ok(Err(_)) => {
                    out.finish();
                    return Poll::Ready(true);
                }
                // Nothing to read after all: readiness was cleared.
                Err(_would_block) => {}
            }
        }
        Poll::Ready(false)
    }
}

/// The voluntary switches of each thread of process `pid` (its main
/// thread's alone when it has no other).
pub(crate) fn switch_counts(pid: i32) -> HashMap<i32, Option<u64>> {
    let (switches, threads) = switches_and_threads(pid);
    let mut counts = HashMap::from([(pid, switches)]);
    if threads > 1 {
        for tid in thread_ids(pid).into_iter().filter(|t| *t != pid) {
            counts.insert(tid, voluntary_switches(tid));
        }
    }
    counts
}

/// Writes the answers to the terminal queries the output held (see
/// `replies`) to the master `fd`, as a terminal answers: at once, as
/// input. Best effort: the few bytes do not fit only when the program
/// left its input unread, and then they are dropped.
///
/// The program that asked is blocked reading its answer until the kernel
/// hands the answer over and the scheduler runs it; on a busy machine that
/// can take longer than a wait's confirmation. So the switch counts of the
/// foreground process's threads are noted first (`answered`): a thread
/// still at its count has not read the answer yet, and its wait is no
/// wait for input.
fn answer_queries(fd: RawFd, out: &mut Output, answered: &mut HashMap<i32, Option<u64>>) {
    let replies = out.take_replies();
    if replies.is_empty() {
        return;
    }
    // SAFETY: plain ioctl on the master, which the caller holds open.
    let fg = unsafe { libc::tcgetpgrp(fd) };
    *answered = if fg > 0 {
        switch_counts(fg)
    } else {
        HashMap::new()
    };
    // SAFETY: writes from a buffer we own to the master, which the caller
    // holds open under the session's lock.
    let written = unsafe { libc::write(fd, replies.as_ptr().cast(), replies.len()) };
    // SAFETY: `tcgetattr` fills a `termios` we own (all-zero is a valid
    // one), on the master the caller holds open (a master's modes are its
    // terminal's).
    let modes = unsafe {
        let mut modes: libc::termios = std::mem::zeroed();
        (libc::tcgetattr(fd, &mut modes) == 0).then_some(modes)
    };
    let wakes = modes.is_none_or(|m| crate::canon::wakes_a_reader(&replies, &m));
    if written <= 0 || !wakes {
        // Nothing to read, or nothing the program is handed before a line
        // ends (answers typed into a line-buffered read: a program that
        // did not switch to raw mode did not ask to read them): nothing to
        // wait for either.
        answered.clear();
    }
}

/// Watches the first process and records how it exited, without reaping
/// it (the session keeps its pid until close).
async fn wait_loop(session: Arc<Session>) {
    let exit = match session.leader.exited().await {
        Ok(status) => ExitStatus {
            code: status.code(),
            signal: status.signal(),
        },
        Err(_) => ExitStatus {
            code: None,
            signal: None,
        },
    };
    session.lock().exit.get_or_insert(exit);
    session.changed.notify_waiters();
}
