//! One terminal: its pty, reader and waiter tasks, and the settle ladder.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, Instant, SystemTime};

use process_tree::Leader;
use regex::Regex;
use terminal_seam::{
    CloseKind, CloseOutcome, CursorPosition, ExitStatus, InputCut, Owner, ScreenView,
    SendInterrupt, SendOutcome, SettleReason, SignalOutcome, StreamChunk, SurvivingProcess,
    TerminalError, TerminalId, TerminalSignal, TerminalStatus,
};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::Notify;

use crate::canon;
use crate::echo::{sent_lines, strip_echo};
use crate::output::{Marker, Output};
use crate::probe::{
    Tty, WaitState, group_members, switches_and_threads, thread_ids, voluntary_switches, wait_state,
};

/// How long the watch spins (yielding) after a write or new output.
const TIGHT_PHASE: Duration = Duration::from_millis(2);
/// For how long after a write new output renews the tight phase: a
/// program that answers and then blocks for more input (a REPL printing
/// `2` then `>>> `) is caught at once even when it was scheduled late,
/// while a command that prints for longer is watched by backed-off probes.
const TIGHT_AFTER_OUTPUT_UNTIL: Duration = Duration::from_millis(50);
/// The longest a watch spins before its task goes back to the runtime.
const SPIN_SLICE: Duration = Duration::from_millis(2);
/// The longest pause between two input-wait probes.
const MAX_PAUSE: Duration = Duration::from_millis(50);
/// A fresh input wait must hold this long, with no new output, to count:
/// output the program wrote just before blocking may still be in flight
/// inside the kernel.
const INPUT_WAIT_CONFIRM: Duration = Duration::from_micros(150);
/// A wait on the terminal with a time limit this short is the program
/// waiting a moment for more input of its own accord — the rest of an
/// escape sequence after `Esc` (vim: 100 ms), the answer to a terminal
/// query — and it will go on by itself when the time runs out. It counts
/// as an input wait only once a whole limit passed with no output: a
/// program that polls its input in short waits and prints nothing is
/// waiting for input all the same. Longer limits are ordinary waits:
/// prompt_toolkit (ipython) waits at its prompt in 500 ms rounds.
const SHORT_TIMED_WAIT: Duration = Duration::from_millis(250);
/// Added to a short wait's limit before it counts: the time the program
/// needs to print once its wait ran out.
const TIMED_WAIT_MARGIN: Duration = Duration::from_millis(25);
/// How often, at most, the whole foreground group is scanned from /proc
/// (the leader is probed on every step); backing off to
/// [`MAX_GROUP_SCAN_PAUSE`] as the command runs on.
const GROUP_SCAN_EVERY: Duration = Duration::from_millis(50);
/// The longest pause between two scans of the foreground group.
const MAX_GROUP_SCAN_PAUSE: Duration = Duration::from_secs(1);
/// After an interrupt, how long a send waits for a natural settle.
const INTERRUPT_GRACE: Duration = Duration::from_secs(1);
/// How much recent output an `until` pattern sees once the head is full.
const PATTERN_WINDOW: usize = 16 * 1024;
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
    answered: HashMap<i32, Option<u64>>,
}

/// Fixed facts about a session, given at spawn.
pub(crate) struct SessionSpec {
    pub id: TerminalId,
    pub owner: Owner,
    pub name: Option<String>,
    pub command: Vec<String>,
    pub cwd: PathBuf,
    pub pid: i32,
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
    changed: Notify,
    /// Woken when the master is closed.
    hangup: Notify,
    busy: AtomicBool,
    closing: AtomicBool,
    closed: AtomicBool,
}

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
    fn drain(&self, st: &mut State) {
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
    async fn write_input(&self, data: &[u8], written: &mut usize) -> io::Result<()> {
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
    fn modes(&self) -> Option<libc::termios> {
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
    fn echoes(&self) -> Option<bool> {
        let modes = self.modes()?;
        let canonical = modes.c_lflag & libc::ICANON != 0;
        Some(!canonical || modes.c_lflag & libc::ECHO != 0)
    }

    /// Waits until the program took the piece of a long line just written
    /// (see `canon`): nothing is left in the terminal's input queue and a
    /// thread of the foreground process waits on the terminal again, woken
    /// since the write (`before`: the counts taken before it). False when
    /// the program is gone or the deadline passed.
    async fn piece_taken(
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
    fn unread_input(&self) -> Option<usize> {
        let slave = self.other_end()?;
        let mut queued: libc::c_int = 0;
        // SAFETY: FIONREAD writes an int we own.
        let ok = unsafe { libc::ioctl(slave.as_raw_fd(), libc::FIONREAD, &mut queued) } == 0;
        ok.then(|| usize::try_from(queued).unwrap_or(0))
    }

    /// Discards the input the program has not read yet (the terminal's
    /// input queue), so a partly written send cannot run later glued to the
    /// next one. True when the queue was flushed.
    fn discard_unread_input(&self) -> bool {
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
fn switch_counts(pid: i32) -> HashMap<i32, Option<u64>> {
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
    if written <= 0 {
        // Nothing to read: nothing to wait for either.
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
struct SettledOnDrop(Arc<Interrupt>);

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

    fn since(&self) -> Option<Instant> {
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
    fn follow(&self, session: &Session) {
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

/// A send ready to run.
pub(crate) struct SendPlan {
    /// The bytes to write; `None` for the startup of a new terminal.
    pub bytes: Option<Vec<u8>>,
    /// The sent text as echoed lines.
    pub lines: Vec<String>,
    pub until: Option<Regex>,
    pub timeout: Duration,
}

impl SendPlan {
    /// The plan for a model's send.
    pub fn new(text: &str, submit: bool, until: Option<Regex>, timeout: Duration) -> Self {
        let mut bytes = text.as_bytes().to_vec();
        if submit {
            bytes.push(b'\r');
        }
        Self {
            bytes: Some(bytes),
            lines: sent_lines(text, submit),
            until,
            timeout,
        }
    }

    /// The plan for waiting out a new terminal's startup.
    pub fn startup(timeout: Duration) -> Self {
        Self {
            bytes: None,
            lines: Vec::new(),
            until: None,
            timeout,
        }
    }
}

/// Creates the interrupt handle of a send.
pub(crate) fn interrupt_for(session: &Arc<Session>) -> Arc<Interrupt> {
    Arc::new(Interrupt::new(session))
}

/// Candidate for an input-wait settle, awaiting confirmation.
#[derive(Clone, Copy, PartialEq, Eq)]
struct WaitSeen {
    /// The waiting thread (the process's id for its main thread).
    tid: i32,
    switches: Option<u64>,
    since: Instant,
    generation: u64,
    /// How long the wait must hold, from `since`, with no new output.
    hold: Duration,
    /// The time limit of a short timed wait (see [`SHORT_TIMED_WAIT`]).
    timed: Option<Duration>,
}

impl WaitSeen {
    fn new(
        tid: i32,
        switches: Option<u64>,
        limit: Option<Duration>,
        now: Instant,
        generation: u64,
    ) -> Self {
        let timed = limit.filter(|l| *l <= SHORT_TIMED_WAIT);
        Self {
            tid,
            switches,
            since: now,
            generation,
            hold: timed.map_or(INPUT_WAIT_CONFIRM, |l| l + TIMED_WAIT_MARGIN),
            timed,
        }
    }
}

/// Writes the text and waits for the first rung of the settle ladder.
pub(crate) async fn run_send(
    session: Arc<Session>,
    slot: SlotGuard,
    plan: SendPlan,
    interrupt: Arc<Interrupt>,
) -> Result<SendOutcome, TerminalError> {
    let _settled = SettledOnDrop(Arc::clone(&interrupt));
    let started = Instant::now();
    let deadline = started + plan.timeout;
    let tty = session.spec.tty;
    let fresh_required = plan.bytes.is_some();

    // Baseline before the write: the foreground group and its leader's
    // context-switch count.
    let fg_at_write = session.foreground_pgid();
    let mut baseline: HashMap<i32, Option<u64>> = HashMap::new();
    if let Some(fg) = fg_at_write {
        // A program may read the terminal from another thread (see
        // `probe::wait_state`): their counts too, before the write.
        baseline = switch_counts(fg);
    }
    {
        let mut st = session.lock();
        session.drain(&mut st);
        // A new terminal's startup continues the capture its session
        // began with (`Session::start`); a send begins its own.
        if plan.bytes.is_some() || st.out.capture().is_none() {
            st.out.begin_capture();
        }
    }
    let mut input_cut = None;
    let mut line_cut = None;
    if let Some(bytes) = &plan.bytes {
        // A line longer than a canonical-mode terminal keeps is passed on
        // in pieces, or reported (see `canon`).
        let long = bytes.len() > canon::PIECE;
        let pieces = match long
            .then(|| session.modes())
            .flatten()
            .map(|m| canon::plan(bytes, &m))
        {
            Some(canon::Plan::Pieces(pieces)) => Some(pieces),
            Some(canon::Plan::Cut(cut)) => {
                line_cut = Some(cut);
                None
            }
            Some(canon::Plan::AsIs) | None => None,
        };
        let pieces: Vec<&[u8]> = match &pieces {
            Some(pieces) => pieces.iter().map(Vec::as_slice).collect(),
            None => vec![bytes.as_slice()],
        };
        let mut write = InputWrite {
            session: &session,
            total: pieces.iter().map(|p| p.len()).sum(),
            written: 0,
            done: false,
        };
        // A program that is not reading its input fills the terminal's
        // buffer, and the write waits; it is bounded by the send's timeout.
        // A failed write means the terminal is gone: the ladder sees `exit`.
        let mut before = HashMap::new();
        for (i, piece) in pieces.iter().enumerate() {
            if i > 0 && !session.piece_taken(&tty, &before, deadline).await {
                break;
            }
            if i == 0 {
                before.clone_from(&baseline);
            } else if let Some(fg) = session.foreground_pgid() {
                // The counts before this write: for the next piece, and
                // for the watch after the last one (a wait between two
                // pieces is not new since the last write).
                before = switch_counts(fg);
                baseline.clone_from(&before);
            }
            let mut done = 0;
            let wrote =
                tokio::time::timeout_at(deadline.into(), session.write_input(piece, &mut done))
                    .await;
            write.written += done;
            if !matches!(wrote, Ok(Ok(()))) {
                break;
            }
        }
        input_cut = write.finish();
    }

    let mut watch = Watch {
        session: &session,
        plan: &plan,
        interrupt: &interrupt,
        tty: &tty,
        deadline,
        fresh_required,
        fg_at_write,
        baseline,
        write_done: Instant::now(),
        last_generation: u64::MAX,
        pattern_generation: u64::MAX,
        activity: Instant::now(),
        unobservable: false,
        wait_seen: None,
        last_probe: None,
        last_group_scan: None,
        group: Vec::new(),
        answered: HashMap::new(),
    };
    // Spinning (probing without a pause) blocks the thread: on a
    // multi-thread runtime it is done in `block_in_place`, so the worker's
    // other tasks move to another thread meanwhile.
    let can_block = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);

    let (reason, exit_code) = loop {
        let notified = session.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let pause = match watch.step(Instant::now()) {
            Step::Settled(reason, code) => break (reason, code),
            Step::Spin if can_block => match tokio::task::block_in_place(|| watch.spin()) {
                Some((reason, code)) => break (reason, code),
                // Back to the runtime between two slices, so a caller that
                // gave up on the send (or a cancellation) is seen.
                None => {
                    tokio::task::yield_now().await;
                    continue;
                }
            },
            Step::Spin => {
                std::thread::yield_now();
                tokio::task::yield_now().await;
                continue;
            }
            Step::Pause(pause) => pause,
        };
        let _ = tokio::time::timeout(pause, notified).await;
    };

    let mut outcome = render(&session, &plan, reason, exit_code, started);
    outcome.input_cut = input_cut;
    outcome.line_cut = line_cut;
    if reason == SettleReason::InputWait {
        outcome.echo = session.echoes();
    }
    drop(slot);
    Ok(outcome)
}

/// What the watch does next.
enum Step {
    Settled(SettleReason, Option<i32>),
    /// Probe again at once (the tight phase, or a wait being confirmed).
    Spin,
    /// Wait this long for output before the next probe.
    Pause(Duration),
}

/// A send's watch over its program, one step at a time (the settle
/// ladder, in order).
struct Watch<'a> {
    session: &'a Session,
    plan: &'a SendPlan,
    interrupt: &'a Interrupt,
    tty: &'a Tty,
    deadline: Instant,
    fresh_required: bool,
    fg_at_write: Option<i32>,
    baseline: HashMap<i32, Option<u64>>,
    write_done: Instant,
    last_generation: u64,
    pattern_generation: u64,
    activity: Instant,
    unobservable: bool,
    wait_seen: Option<WaitSeen>,
    last_probe: Option<Instant>,
    last_group_scan: Option<Instant>,
    group: Vec<i32>,
    /// A copy of the session's `answered`.
    answered: HashMap<i32, Option<u64>>,
}

impl Watch<'_> {
    /// Steps with no pause until the watch settles or wants one.
    ///
    /// The thread gives its core away between the steps (`sched_yield`),
    /// not only its time: the program just woken by the write is often
    /// queued on this very core (the scheduler puts a wakee near its
    /// waker), and a program that waited there for the tight phase to end
    /// was the whole settle tail. Spinning as a task that yields to the
    /// runtime did the same harm another way: each return woke an idle
    /// worker to steal the task, and workers taking turns on the core kept
    /// the program from it. Not enough when every CPU is busy: there a
    /// trace showed the program queued a whole slice behind the spin, its
    /// `sched_yield`s notwithstanding (docs/subsystems/terminal.md,
    /// Throughput).
    ///
    /// Returns after at most [`SPIN_SLICE`] all the same (`None`, as when
    /// a pause is due), so the task is polled by its runtime now and then.
    fn spin(&mut self) -> Option<(SettleReason, Option<i32>)> {
        let began = Instant::now();
        loop {
            std::thread::yield_now();
            let now = Instant::now();
            match self.step(now) {
                Step::Settled(reason, code) => return Some((reason, code)),
                Step::Spin if now - began < SPIN_SLICE => {}
                Step::Spin | Step::Pause(_) => return None,
            }
        }
    }

    /// The tight phase: the first moments after the write, renewed by
    /// output for a while.
    fn tight(&self, now: Instant) -> bool {
        let since_write = now - self.write_done;
        since_write < TIGHT_PHASE
            || (since_write < TIGHT_AFTER_OUTPUT_UNTIL && now - self.activity < TIGHT_PHASE)
    }

    fn step(&mut self, now: Instant) -> Step {
        let session = self.session;
        let plan = self.plan;
        // Right after the write, or while a wait is being confirmed, the
        // watch reads the terminal itself rather than wait for the reader
        // task to be scheduled; later the reader's notifications suffice.
        let eager = self.wait_seen.is_some() || self.tight(now);
        let (generation, marker, exit, pattern_hit) = {
            let mut st = session.lock();
            if eager {
                session.drain(&mut st);
            }
            let generation = st.out.generation;
            let marker: Option<Marker> =
                st.out.capture().and_then(|c| c.last_marker).map(|(_, m)| m);
            let mut hit = false;
            if let (Some(re), Some(capture)) = (&plan.until, st.out.capture())
                && generation != self.pattern_generation
            {
                self.pattern_generation = generation;
                hit = if capture.is_whole() {
                    re.is_match(&strip_echo(&capture.head, &plan.lines).0)
                } else {
                    re.is_match(&capture.tail_text(PATTERN_WINDOW))
                };
            }
            if st.answered != self.answered {
                self.answered.clone_from(&st.answered);
            }
            (generation, marker, st.exit, hit)
        };
        if generation != self.last_generation {
            self.last_generation = generation;
            self.activity = now;
        }

        // 1. prompt: our marker came back and the shell is reading again.
        if let Some(marker) = marker
            && session.spec.our_shell
        {
            match wait_state(session.spec.pid, self.tty) {
                WaitState::OnTerminal { .. } | WaitState::Unobservable | WaitState::Gone => {
                    return Step::Settled(SettleReason::Prompt, Some(marker.status));
                }
                WaitState::Other => {}
            }
        }
        // 2. the `until` pattern.
        if pattern_hit {
            return Step::Settled(SettleReason::Pattern, None);
        }
        // 3. exit.
        if let Some(exit) = exit {
            return Step::Settled(SettleReason::Exit, exit.code);
        }
        // 4. input wait, fresh since the write. The leader of the
        // foreground group is probed on every step; the whole group is
        // scanned from /proc only after the tight phase, now and then.
        // (Tight again: output this step may have renewed it.)
        let since_write = now - self.write_done;
        let tight = self.tight(now);
        let probe_due = self.wait_seen.is_some()
            || tight
            || self
                .last_probe
                .is_none_or(|t| now - t >= probe_pause(now - self.activity));
        if probe_due {
            self.last_probe = Some(now);
            let mut found = None;
            if let Some(fg) = session.foreground_pgid() {
                if since_write >= TIGHT_PHASE
                    && self.last_group_scan.is_none_or(|t| {
                        now - t >= (since_write / 4).clamp(GROUP_SCAN_EVERY, MAX_GROUP_SCAN_PAUSE)
                    })
                {
                    self.group = group_members(session.spec.pid, fg);
                    self.last_group_scan = Some(now);
                }
                let others = self.group.iter().copied().filter(|p| *p != fg);
                for pid in std::iter::once(fg).chain(others) {
                    match wait_state(pid, self.tty) {
                        WaitState::OnTerminal { tid, limit } => {
                            let switches = voluntary_switches(tid);
                            // Not woken since the terminal answered its
                            // query: it has the answer still to read.
                            if self.answered.get(&tid) == Some(&switches) {
                                continue;
                            }
                            let fresh = !self.fresh_required
                                || Some(fg) != self.fg_at_write
                                || match self.baseline.get(&tid) {
                                    Some(before) => *before != switches,
                                    None => {
                                        self.baseline.insert(tid, switches);
                                        false
                                    }
                                };
                            if fresh {
                                found = Some((tid, switches, limit));
                                break;
                            }
                        }
                        WaitState::Unobservable => self.unobservable = true,
                        WaitState::Other | WaitState::Gone => {}
                    }
                }
            }
            match (found, self.wait_seen.as_mut()) {
                // The same wait, still with no output: confirmed once it
                // held long enough. A program waiting in short timed
                // waits is followed from one to the next (its switches
                // move each time); a longer one starts the hold again.
                (Some((tid, switches, limit)), Some(seen))
                    if seen.tid == tid
                        && seen.generation == generation
                        && (seen.switches == switches
                            || (seen.timed.is_some()
                                && limit.is_some_and(|l| l <= SHORT_TIMED_WAIT))) =>
                {
                    match (seen.timed, limit) {
                        (Some(held), Some(new)) if new > held => {
                            *seen = WaitSeen::new(tid, switches, limit, now, generation);
                        }
                        _ => {
                            if now - seen.since >= seen.hold {
                                // A program that has not read what was
                                // sent is not waiting for more: it was
                                // busy (or descheduled) when it looked
                                // like it waited. The hold starts again.
                                if session.unread_input().is_none_or(|n| n == 0) {
                                    return Step::Settled(SettleReason::InputWait, None);
                                }
                                seen.since = now;
                            }
                            seen.switches = switches;
                        }
                    }
                }
                (Some((tid, switches, limit)), _) => {
                    self.wait_seen = Some(WaitSeen::new(tid, switches, limit, now, generation));
                }
                // Between two short timed waits of a program that prints
                // nothing: still the same quiet stretch.
                (None, Some(seen)) if seen.timed.is_some() && seen.generation == generation => {}
                (None, _) => self.wait_seen = None,
            }
        }
        // 5. idle, only where waits cannot be observed.
        if self.unobservable
            && self.wait_seen.is_none()
            && now - self.activity >= session.spec.idle_fallback
        {
            return Step::Settled(SettleReason::Idle, None);
        }
        // 6. interrupted and nothing answered; 7. timeout.
        self.interrupt.follow(session);
        if self
            .interrupt
            .since()
            .is_some_and(|t| now - t >= INTERRUPT_GRACE)
            || now >= self.deadline
        {
            return Step::Settled(SettleReason::Timeout, None);
        }
        match self.wait_seen {
            // Confirming a wait: spin, the answer is a moment away.
            Some(seen) if seen.timed.is_none() => return Step::Spin,
            // A short timed wait: look again as its limit runs out.
            Some(seen) if !tight => {
                let left = (seen.since + seen.hold).saturating_duration_since(now);
                return Step::Pause(
                    left.clamp(Duration::from_micros(200), Duration::from_millis(5))
                        .min(self.deadline.saturating_duration_since(now)),
                );
            }
            _ if tight => return Step::Spin,
            _ => {}
        }
        Step::Pause(
            probe_pause(now - self.activity).min(self.deadline.saturating_duration_since(now)),
        )
    }
}

/// A send's write in progress. Text the program did not take in time is
/// never left half-typed: when only part of it was written (the write
/// timed out, or the send was dropped mid-write), the terminal's unread
/// input is discarded, so no partial line runs later glued to the next
/// send.
struct InputWrite<'a> {
    session: &'a Session,
    total: usize,
    written: usize,
    done: bool,
}

impl InputWrite<'_> {
    /// What to report: `None` when everything was written.
    fn finish(&mut self) -> Option<InputCut> {
        self.done = true;
        if self.written >= self.total {
            return None;
        }
        let discarded = self.written > 0 && self.session.discard_unread_input();
        Some(InputCut {
            written_bytes: self.written as u64,
            total_bytes: self.total as u64,
            unread_discarded: discarded,
        })
    }
}

impl Drop for InputWrite<'_> {
    fn drop(&mut self) {
        if !self.done && self.written > 0 && self.written < self.total {
            self.session.discard_unread_input();
        }
    }
}

/// The pause between input-wait probes after `quiet` without output:
/// short right after output, backing off to [`MAX_PAUSE`].
fn probe_pause(quiet: Duration) -> Duration {
    (quiet / 4).clamp(Duration::from_millis(1), MAX_PAUSE)
}

fn render(
    session: &Session,
    plan: &SendPlan,
    reason: SettleReason,
    exit_code: Option<i32>,
    started: Instant,
) -> SendOutcome {
    let mut st = session.lock();
    session.drain(&mut st);
    let capture = st.out.end_capture();
    let status = session.status(&st);
    let limit = session.spec.result_limit;
    let Some(capture) = capture else {
        return SendOutcome {
            output: String::new(),
            reason,
            exit_code,
            status,
            truncated: false,
            total_bytes: 0,
            duration: started.elapsed(),
            input_cut: None,
            echo: None,
            line_cut: None,
        };
    };
    let end = match (reason, capture.last_marker) {
        (SettleReason::Prompt, Some((at, _))) => at,
        _ => capture.total,
    };
    st.unread = st.unread.max(capture.start_cursor + end);
    drop(st);
    let (head, gap, tail) = capture.parts(end);
    let (head, _removed) = strip_echo(&head, &plan.lines);
    let rendered = render_parts(&head, gap, &tail, limit);
    SendOutcome {
        output: rendered.text,
        reason,
        exit_code,
        status,
        truncated: rendered.truncated,
        total_bytes: rendered.total_bytes,
        duration: started.elapsed(),
        input_cut: None,
        echo: None,
        line_cut: None,
    }
}

/// Renders `head`, `gap` unseen bytes and `tail` within about `limit`
/// bytes: whole when it fits, else head + one marker line + tail.
pub(crate) fn render_parts(
    head: &str,
    gap: u64,
    tail: &str,
    limit: usize,
) -> output_text::Rendered {
    let total = head.len() as u64 + gap + tail.len() as u64;
    if gap == 0 && (head.len() + tail.len()) <= limit {
        let mut text = head.to_owned();
        text.push_str(tail);
        return output_text::Rendered {
            text,
            truncated: false,
            total_bytes: total,
            omitted_bytes: 0,
        };
    }
    let half = (limit / 2).max(16);
    let joined;
    let (head_src, tail_src) = if gap == 0 {
        joined = format!("{head}{tail}");
        (joined.as_str(), joined.as_str())
    } else {
        (head, tail)
    };
    let mut head_cut = half.min(head_src.len());
    while !head_src.is_char_boundary(head_cut) {
        head_cut -= 1;
    }
    let mut tail_cut = tail_src.len().saturating_sub(half);
    if gap == 0 {
        tail_cut = tail_cut.max(head_cut);
    }
    while !tail_src.is_char_boundary(tail_cut) {
        tail_cut += 1;
    }
    let kept_head = &head_src[..head_cut];
    let kept_tail = &tail_src[tail_cut..];
    let omitted = total - kept_head.len() as u64 - kept_tail.len() as u64;
    let mut text = String::with_capacity(kept_head.len() + kept_tail.len() + 48);
    text.push_str(kept_head);
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push_str(&output_text::omission_marker(omitted));
    text.push('\n');
    text.push_str(kept_tail);
    output_text::Rendered {
        text,
        truncated: true,
        total_bytes: total,
        omitted_bytes: omitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn renders_whole_or_head_marker_tail_with_exact_totals() {
        let whole = render_parts("abc\n", 0, "", 100);
        assert_eq!(whole.text, "abc\n");
        assert!(!whole.truncated);
        let cut = render_parts(&"a".repeat(100), 1000, &"z".repeat(100), 64);
        assert_eq!(cut.total_bytes, 1200);
        assert_eq!(
            cut.text,
            format!(
                "{}\n[… 1136 bytes omitted …]\n{}",
                "a".repeat(32),
                "z".repeat(32)
            )
        );
        let long = render_parts(&"x".repeat(50), 0, "", 40);
        assert_eq!(long.omitted_bytes, 10);
        assert!(long.truncated);
    }
}
