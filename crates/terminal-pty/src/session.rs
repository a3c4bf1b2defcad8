//! One terminal: its pty, reader and waiter tasks, and the settle ladder.

use std::collections::HashMap;
use std::os::fd::RawFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::Poll;
use std::time::{Duration, Instant, SystemTime};

use regex::Regex;
use terminal_seam::{
    CloseKind, CloseOutcome, CursorPosition, ExitStatus, Owner, ScreenView, SendInterrupt,
    SendOutcome, SettleReason, SignalOutcome, StreamChunk, TerminalError, TerminalId,
    TerminalSignal, TerminalStatus,
};
use tokio::io::{AsyncRead, AsyncWriteExt, ReadBuf};
use tokio::sync::Notify;

use crate::echo::{sent_lines, strip_echo};
use crate::output::{Marker, Output};
use crate::probe::{WaitState, group_members, voluntary_switches, wait_state};

/// How long the watch spins (yielding) after a write or new output.
const TIGHT_PHASE: Duration = Duration::from_millis(2);
/// For how long after a write new output renews the tight phase: a
/// program that answers and then blocks for more input (a REPL printing
/// `2` then `>>> `) is caught at once even when it was scheduled late,
/// while a command that prints for longer is watched by backed-off probes.
const TIGHT_AFTER_OUTPUT_UNTIL: Duration = Duration::from_millis(50);
/// The longest pause between two input-wait probes.
const MAX_PAUSE: Duration = Duration::from_millis(50);
/// A fresh input wait must hold this long, with no new output, to count:
/// output the program wrote just before blocking may still be in flight
/// inside the kernel.
const INPUT_WAIT_CONFIRM: Duration = Duration::from_micros(150);
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
    drain_buf: Vec<u8>,
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
    pub tty: PathBuf,
    pub master: RawFd,
    pub rows: u16,
    pub cols: u16,
    pub result_limit: usize,
    pub idle_fallback: Duration,
}

/// One terminal.
pub(crate) struct Session {
    pub spec: SessionSpec,
    pub created_at: SystemTime,
    writer: tokio::sync::Mutex<pty_process::OwnedWritePty>,
    state: Mutex<State>,
    changed: Notify,
    busy: AtomicBool,
    closing: AtomicBool,
    closed: AtomicBool,
}

impl Session {
    /// Wraps a spawned child and starts its reader and waiter tasks.
    pub fn start(
        spec: SessionSpec,
        pty: pty_process::Pty,
        child: tokio::process::Child,
        nonce: &str,
        scrollback: usize,
    ) -> Arc<Self> {
        let (reader, writer) = pty.into_split();
        let out = Output::new(nonce, scrollback, spec.rows, spec.cols, spec.result_limit);
        let session = Arc::new(Self {
            spec,
            created_at: SystemTime::now(),
            writer: tokio::sync::Mutex::new(writer),
            state: Mutex::new(State {
                out,
                exit: None,
                unread: 0,
                drain_buf: vec![0; 64 * 1024],
            }),
            changed: Notify::new(),
            busy: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            closed: AtomicBool::new(false),
        });
        tokio::spawn(read_loop(Arc::clone(&session), reader));
        tokio::spawn(wait_loop(Arc::clone(&session), child));
        session
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
        let State { out, drain_buf, .. } = st;
        for _ in 0..DRAIN_READS {
            if out.eof {
                return;
            }
            // SAFETY: the buffer is ours and writable for its length; the
            // master descriptor stays open while `self` (its writer) lives.
            let n = unsafe {
                libc::read(
                    self.spec.master,
                    drain_buf.as_mut_ptr().cast(),
                    drain_buf.len(),
                )
            };
            if n > 0 {
                out.ingest(&drain_buf[..n as usize]);
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

    /// The foreground process group of the terminal.
    fn foreground_pgid(&self) -> Option<i32> {
        // SAFETY: plain ioctl on a descriptor we keep open.
        let pgid = unsafe { libc::tcgetpgrp(self.spec.master) };
        (pgid > 0).then_some(pgid)
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
        let mut writer = self.writer.lock().await;
        writer.write_all(bytes).await?;
        writer.flush().await
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

    /// Ends every process of the session, verified. The caller made sure
    /// this runs once (the `closing` flag).
    pub async fn close(self: &Arc<Self>) -> CloseOutcome {
        if self.closing.swap(true, Ordering::AcqRel) {
            return CloseOutcome {
                outcome: CloseKind::AlreadyClosing,
                exit: self.lock().exit,
            };
        }
        self.changed.notify_waiters();
        let sid = self.spec.pid;
        let ended =
            tokio::task::spawn_blocking(move || process_tree::end_session(sid, CLOSE_STEPS)).await;
        match ended {
            Ok(Ok(_report)) => {}
            Ok(Err(survivors)) => tracing::warn!(%survivors, "terminal close left processes"),
            Err(join) => tracing::warn!(%join, "terminal close task failed"),
        }
        // The waiter reaps the first process; wait for it (bounded).
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(exit) = self.lock().exit {
                self.closed.store(true, Ordering::Release);
                self.changed.notify_waiters();
                return CloseOutcome {
                    outcome: CloseKind::Closed,
                    exit: Some(exit),
                };
            }
            if Instant::now() >= deadline {
                self.closed.store(true, Ordering::Release);
                return CloseOutcome {
                    outcome: CloseKind::Closed,
                    exit: None,
                };
            }
            let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
        }
    }

    /// Ends every process at once, synchronously (the service is dropping).
    pub fn kill_now(&self) {
        if self.closing.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Err(survivors) = process_tree::end_session(self.spec.pid, DROP_STEPS) {
            tracing::warn!(%survivors, "terminal processes survived");
        }
    }
}

/// The held send slot; dropping it frees the slot.
pub(crate) struct SlotGuard(Arc<Session>);

impl Drop for SlotGuard {
    fn drop(&mut self) {
        self.0.busy.store(false, Ordering::Release);
    }
}

async fn read_loop(session: Arc<Session>, mut reader: pty_process::OwnedReadPty) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let done = std::future::poll_fn(|cx| {
            let mut st = session.lock();
            if st.out.eof {
                return Poll::Ready(true);
            }
            let mut read_buf = ReadBuf::new(&mut buf);
            match Pin::new(&mut reader).poll_read(cx, &mut read_buf) {
                Poll::Ready(Ok(())) if read_buf.filled().is_empty() => {
                    st.out.finish();
                    Poll::Ready(true)
                }
                Poll::Ready(Ok(())) => {
                    st.out.ingest(read_buf.filled());
                    Poll::Ready(false)
                }
                // EIO once the child side is closed: the end of the output.
                Poll::Ready(Err(_)) => {
                    st.out.finish();
                    Poll::Ready(true)
                }
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        session.changed.notify_waiters();
        if done {
            break;
        }
    }
}

async fn wait_loop(session: Arc<Session>, mut child: tokio::process::Child) {
    let status = child.wait().await;
    let exit = match status {
        Ok(status) => ExitStatus {
            code: status.code(),
            signal: status.signal(),
        },
        Err(_) => ExitStatus {
            code: None,
            signal: None,
        },
    };
    session.lock().exit = Some(exit);
    session.changed.notify_waiters();
}

/// Interrupts a running send.
pub(crate) struct Interrupt {
    session: Weak<Session>,
    at: Mutex<Option<Instant>>,
    settled: AtomicBool,
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
            at: Mutex::new(None),
            settled: AtomicBool::new(false),
        }
    }

    fn since(&self) -> Option<Instant> {
        *self.at.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl SendInterrupt for Interrupt {
    fn interrupt(&self) {
        if self.settled.load(Ordering::Acquire) {
            return;
        }
        {
            let mut at = self.at.lock().unwrap_or_else(|e| e.into_inner());
            if at.is_some() {
                return;
            }
            *at = Some(Instant::now());
        }
        if let Some(session) = self.session.upgrade() {
            if let Some(pgid) = session.foreground_pgid() {
                // SAFETY: plain syscall.
                unsafe { libc::killpg(pgid, libc::SIGINT) };
            }
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
    pid: i32,
    switches: Option<u64>,
    since: Instant,
    generation: u64,
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
    let tty = session.spec.tty.clone();
    let fresh_required = plan.bytes.is_some();

    // Baseline before the write: the foreground group and its leader's
    // context-switch count.
    let fg_at_write = session.foreground_pgid();
    let mut baseline: HashMap<i32, Option<u64>> = HashMap::new();
    if let Some(fg) = fg_at_write {
        baseline.insert(fg, voluntary_switches(fg));
    }
    {
        let mut st = session.lock();
        session.drain(&mut st);
        st.out.begin_capture();
    }
    if let Some(bytes) = &plan.bytes {
        let write = async {
            let mut writer = session.writer.lock().await;
            writer.write_all(bytes).await?;
            writer.flush().await
        };
        // A failed write means the terminal is gone: the ladder sees `exit`.
        let _ = tokio::time::timeout_at(deadline.into(), write).await;
    }

    let write_done = Instant::now();
    let mut last_generation = u64::MAX;
    let mut pattern_generation = u64::MAX;
    let mut activity = Instant::now();
    let mut unobservable = false;
    let mut wait_seen: Option<WaitSeen> = None;
    let mut last_probe: Option<Instant> = None;
    let mut last_group_scan: Option<Instant> = None;
    let mut group: Vec<i32> = Vec::new();

    let (reason, exit_code) = loop {
        let notified = session.changed.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        let now = Instant::now();

        let (generation, marker, exit, pattern_hit) = {
            let mut st = session.lock();
            session.drain(&mut st);
            let generation = st.out.generation;
            let marker: Option<Marker> =
                st.out.capture().and_then(|c| c.last_marker).map(|(_, m)| m);
            let mut hit = false;
            if let (Some(re), Some(capture)) = (&plan.until, st.out.capture())
                && generation != pattern_generation
            {
                pattern_generation = generation;
                hit = if capture.is_whole() {
                    re.is_match(&strip_echo(&capture.head, &plan.lines).0)
                } else {
                    re.is_match(&capture.tail_text(PATTERN_WINDOW))
                };
            }
            (generation, marker, st.exit, hit)
        };
        if generation != last_generation {
            last_generation = generation;
            activity = now;
        }

        // 1. prompt: our marker came back and the shell is reading again.
        if let Some(marker) = marker
            && session.spec.our_shell
        {
            match wait_state(session.spec.pid, &tty) {
                WaitState::OnTerminal | WaitState::Unobservable | WaitState::Gone => {
                    break (SettleReason::Prompt, Some(marker.status));
                }
                WaitState::Other => {}
            }
        }
        // 2. the `until` pattern.
        if pattern_hit {
            break (SettleReason::Pattern, None);
        }
        // 3. exit.
        if let Some(exit) = exit {
            break (SettleReason::Exit, exit.code);
        }
        // 4. input wait, fresh since the write. The leader of the
        // foreground group is probed on every step; the whole group is
        // scanned from /proc only after the tight phase, now and then.
        let since_write = now - write_done;
        let tight = since_write < TIGHT_PHASE
            || (since_write < TIGHT_AFTER_OUTPUT_UNTIL && now - activity < TIGHT_PHASE);
        let probe_due = wait_seen.is_some()
            || tight
            || last_probe.is_none_or(|t| now - t >= probe_pause(now - activity));
        if probe_due {
            last_probe = Some(now);
            let mut found = None;
            if let Some(fg) = session.foreground_pgid() {
                if since_write >= TIGHT_PHASE
                    && last_group_scan.is_none_or(|t| {
                        now - t >= (since_write / 4).clamp(GROUP_SCAN_EVERY, MAX_GROUP_SCAN_PAUSE)
                    })
                {
                    group = group_members(session.spec.pid, fg);
                    last_group_scan = Some(now);
                }
                let others = group.iter().copied().filter(|p| *p != fg);
                for pid in std::iter::once(fg).chain(others) {
                    match wait_state(pid, &tty) {
                        WaitState::OnTerminal => {
                            let switches = voluntary_switches(pid);
                            let fresh = !fresh_required
                                || Some(fg) != fg_at_write
                                || match baseline.get(&pid) {
                                    Some(before) => *before != switches,
                                    None => {
                                        baseline.insert(pid, switches);
                                        false
                                    }
                                };
                            if fresh {
                                found = Some((pid, switches));
                                break;
                            }
                        }
                        WaitState::Unobservable => unobservable = true,
                        WaitState::Other | WaitState::Gone => {}
                    }
                }
            }
            match (found, wait_seen) {
                (Some((pid, switches)), Some(seen))
                    if seen.pid == pid
                        && seen.switches == switches
                        && seen.generation == generation =>
                {
                    if now - seen.since >= INPUT_WAIT_CONFIRM {
                        break (SettleReason::InputWait, None);
                    }
                }
                (Some((pid, switches)), _) => {
                    wait_seen = Some(WaitSeen {
                        pid,
                        switches,
                        since: now,
                        generation,
                    });
                }
                (None, _) => wait_seen = None,
            }
        }
        // 5. idle, only where waits cannot be observed.
        if unobservable && wait_seen.is_none() && now - activity >= session.spec.idle_fallback {
            break (SettleReason::Idle, None);
        }
        // 6. interrupted and nothing answered; 7. timeout.
        if interrupt
            .since()
            .is_some_and(|t| now - t >= INTERRUPT_GRACE)
            || now >= deadline
        {
            break (SettleReason::Timeout, None);
        }

        if wait_seen.is_some() || tight {
            tokio::task::yield_now().await;
            continue;
        }
        let pause = probe_pause(now - activity).min(deadline.saturating_duration_since(now));
        let _ = tokio::time::timeout(pause, notified).await;
    };

    let outcome = render(&session, &plan, reason, exit_code, started);
    drop(slot);
    Ok(outcome)
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
