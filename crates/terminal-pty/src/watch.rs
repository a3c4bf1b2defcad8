//! People watching and joining a terminal (`dsh attach`, the `dsh ui`
//! page), beside the agent that owns it: the provider's side of
//! [`PersonViews`] (see there for the rules).
//!
//! A person's keys go through the terminal's one send slot: once the
//! person typed, the slot stays theirs — so an agent's send gets
//! `SEND_ACTIVE` — until they stopped typing for [`PERSON_QUIET`] and the
//! terminal waits for input again (or exited).

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use terminal_seam::{
    AnswerError, BoxFuture, Color, OutputFeed, PersonKeys, PersonViews, Run, ScreenSnapshot,
    SecretReader, TerminalError, TerminalId, TerminalWatch, WatchEvent, style,
};
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

use crate::probe::{WaitState, group_members, wait_state};
use crate::service::PtyTerminals;
use crate::session::{Session, SlotGuard};

/// How long after a person's last keystroke the slot may be released.
pub(crate) const PERSON_QUIET: Duration = Duration::from_secs(1);
/// How long a person's answer waits for the program to read a secret.
const ANSWER_GRACE: Duration = Duration::from_secs(2);
/// How often a held person slot is checked for release.
const RELEASE_CHECK: Duration = Duration::from_millis(100);

/// A terminal's output tap, as the seam's [`OutputFeed`].
struct Tap(tokio::sync::broadcast::Receiver<Arc<[u8]>>);

impl OutputFeed for Tap {
    fn next(&mut self) -> BoxFuture<'_, WatchEvent> {
        Box::pin(async move {
            match self.0.recv().await {
                Ok(bytes) => WatchEvent::Output(bytes),
                Err(RecvError::Lagged(_)) => WatchEvent::Lagged,
                Err(RecvError::Closed) => WatchEvent::Ended,
            }
        })
    }

    fn try_next(&mut self) -> Option<WatchEvent> {
        match self.0.try_recv() {
            Ok(bytes) => Some(WatchEvent::Output(bytes)),
            Err(TryRecvError::Lagged(_)) => Some(WatchEvent::Lagged),
            Err(TryRecvError::Closed) => Some(WatchEvent::Ended),
            Err(TryRecvError::Empty) => None,
        }
    }
}

struct PersonSlot {
    /// True while the release task holds the send slot for the person.
    held: bool,
    last_key: Instant,
}

/// A person's right to type into one terminal.
struct PersonTyping {
    session: Arc<Session>,
    slot: Arc<Mutex<PersonSlot>>,
}

/// A vt100 color as the seam's.
fn color(c: vt100::Color) -> Color {
    match c {
        vt100::Color::Default => Color::Default,
        vt100::Color::Idx(i) => Color::Idx(i),
        vt100::Color::Rgb(r, g, b) => Color::Rgb(r, g, b),
    }
}

/// Style bits of a cell.
fn flags(cell: &vt100::Cell) -> u8 {
    let bits = [
        (cell.bold(), style::BOLD),
        (cell.italic(), style::ITALIC),
        (cell.underline(), style::UNDERLINE),
        (cell.inverse(), style::INVERSE),
        (cell.dim(), style::DIM),
    ];
    bits.iter()
        .filter(|(on, _)| *on)
        .fold(0, |acc, (_, bit)| acc | bit)
}

/// One row as runs of one style; trailing blank cells are left out.
fn row_runs(screen: &vt100::Screen, row: u16, cols: u16) -> Vec<Run> {
    // The last column with something visible.
    let last = (0..cols).rev().find(|&col| {
        screen.cell(row, col).is_some_and(|c| {
            (c.has_contents() && c.contents() != " ")
                || c.bgcolor() != vt100::Color::Default
                || c.inverse()
        })
    });
    let mut runs: Vec<Run> = Vec::new();
    let Some(last) = last else { return runs };
    for col in 0..=last {
        let Some(cell) = screen.cell(row, col) else {
            continue;
        };
        if cell.is_wide_continuation() {
            continue;
        }
        let (fg, bg, bits) = (color(cell.fgcolor()), color(cell.bgcolor()), flags(cell));
        let text = if cell.has_contents() {
            cell.contents()
        } else {
            " "
        };
        match runs.last_mut() {
            Some(run) if run.fg == fg && run.bg == bg && run.flags == bits => {
                run.text.push_str(text);
            }
            _ => runs.push(Run {
                text: text.to_owned(),
                fg,
                bg,
                flags: bits,
            }),
        }
    }
    runs
}

/// A screen as the seam's plain data.
pub fn snapshot(screen: &vt100::Screen) -> ScreenSnapshot {
    let (rows, cols) = screen.size();
    let (rows, cols) = (rows.get(), cols.get());
    ScreenSnapshot {
        rows,
        cols,
        cursor: screen.cursor_position(),
        cursor_hidden: screen.hide_cursor(),
        app_cursor: screen.application_cursor(),
        alt: screen.alternate_screen(),
        lines: (0..rows).map(|row| row_runs(screen, row, cols)).collect(),
    }
}

impl PersonViews for PtyTerminals {
    fn watch(&self, id: TerminalId) -> Result<TerminalWatch, TerminalError> {
        let session = self.any_session(id)?;
        let mut st = session.lock();
        let (screen, output) = st.out.watch();
        Ok(TerminalWatch {
            screen,
            size: (session.spec.rows, session.spec.cols),
            output: Box::new(Tap(output)),
        })
    }

    fn screen_now(&self, id: TerminalId) -> Result<Vec<u8>, TerminalError> {
        let session = self.any_session(id)?;
        let mut st = session.lock();
        Ok(st.out.screen_formatted())
    }

    /// The session's lock is held only for the copy; the runs are made
    /// after.
    fn screen_copy(&self, id: TerminalId) -> Result<ScreenSnapshot, TerminalError> {
        let session = self.any_session(id)?;
        let screen = session.lock().out.screen().clone();
        Ok(snapshot(&screen))
    }

    fn last_activity(&self, id: TerminalId) -> Option<SystemTime> {
        let session = self.any_session(id).ok()?;
        Some(session.lock().out.last_output)
    }

    fn is_over(&self, id: TerminalId) -> bool {
        match self.any_session(id) {
            Ok(session) => session.is_closing() || session.lock().exit.is_some(),
            Err(_) => true,
        }
    }

    fn waits_for_secret(&self, id: TerminalId) -> bool {
        self.any_session(id)
            .is_ok_and(|session| waits_for_secret(&session))
    }

    fn secret_reader(&self, id: TerminalId) -> Option<SecretReader> {
        let session = self.any_session(id).ok()?;
        if !waits_for_secret(&session) {
            return None;
        }
        secret_reader(&session)
    }

    fn answer_secret<'a>(
        &'a self,
        id: TerminalId,
        secret: &'a [u8],
    ) -> BoxFuture<'a, Result<(), AnswerError>> {
        Box::pin(async move {
            let session = self.any_session(id)?;
            let guard = session.acquire()?;
            let waits = || waits_for_secret(&session);
            // A person who answers as the prompt appears may be a moment
            // ahead of the program's read: give it that moment.
            let deadline = Instant::now() + ANSWER_GRACE;
            while !waits() {
                if Instant::now() >= deadline {
                    return Err(AnswerError::NoSecretPrompt { id });
                }
                tokio::time::sleep(RELEASE_CHECK / 5).await;
            }
            let mut line = zeroize::Zeroizing::new(Vec::with_capacity(secret.len() + 1));
            line.extend_from_slice(secret);
            line.push(b'\r');
            let written = session.write_person_input(&line).await;
            drop(guard);
            written.map_err(|e| {
                AnswerError::Terminal(TerminalError::SpawnFailed {
                    command: session.spec.command.first().cloned().unwrap_or_default(),
                    reason: format!("writing to the terminal failed: {e}"),
                })
            })
        })
    }

    fn person_typing(&self, id: TerminalId) -> Result<Box<dyn PersonKeys>, TerminalError> {
        let session = self.any_session(id)?;
        Ok(Box::new(PersonTyping {
            session,
            slot: Arc::new(Mutex::new(PersonSlot {
                held: false,
                last_key: Instant::now(),
            })),
        }))
    }
}

impl PersonTyping {
    async fn write_keys(&self, bytes: &[u8]) -> Result<(), TerminalError> {
        {
            let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
            if !slot.held {
                let guard = self.session.acquire()?;
                slot.held = true;
                let weak = Arc::downgrade(&self.slot);
                tokio::spawn(release_when_ready(Arc::clone(&self.session), weak, guard));
            }
            slot.last_key = Instant::now();
        }
        self.session
            .write_person_input(bytes)
            .await
            .map_err(|e| TerminalError::SpawnFailed {
                command: self
                    .session
                    .spec
                    .command
                    .first()
                    .cloned()
                    .unwrap_or_default(),
                reason: format!("writing to the terminal failed: {e}"),
            })
    }
}

impl PersonKeys for PersonTyping {
    fn write<'a>(&'a self, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), TerminalError>> {
        Box::pin(self.write_keys(bytes))
    }

    fn holds_slot(&self) -> bool {
        self.slot.lock().unwrap_or_else(|e| e.into_inner()).held
    }
}

impl std::fmt::Debug for PersonTyping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PersonTyping")
            .field("id", &self.session.spec.id)
            .finish_non_exhaustive()
    }
}

/// Whether a program waits to read a secret from the terminal now.
fn waits_for_secret(session: &Session) -> bool {
    !session.is_closing()
        && session.lock().exit.is_none()
        && session.echoes() == Some(false)
        && ready_for_input(session)
}

/// The process of the foreground group that reads the terminal: the
/// member blocked reading it, else (a wait `/proc` hides) the leader.
fn secret_reader(session: &Session) -> Option<SecretReader> {
    let pgid = session.foreground_pgid()?;
    let members = group_members(session.spec.sid, pgid);
    let pid = members
        .iter()
        .copied()
        .find(|&pid| {
            matches!(
                wait_state(pid, &session.spec.tty),
                WaitState::OnTerminal { .. }
            )
        })
        .unwrap_or(pgid);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    Some(SecretReader {
        pid: u32::try_from(pid).ok()?,
        exe: std::fs::read_link(format!("/proc/{pid}/exe")).ok(),
        name: field("Name:").unwrap_or_default(),
        no_new_privs: field("NoNewPrivs:").is_some_and(|v| v == "1"),
    })
}

/// Whether the terminal waits for input now (its foreground process is
/// blocked reading it), or is over.
fn ready_for_input(session: &Session) -> bool {
    if session.is_closing() || session.lock().exit.is_some() {
        return true;
    }
    let Some(pgid) = session.foreground_pgid() else {
        return true;
    };
    match wait_state(pgid, &session.spec.tty) {
        WaitState::OnTerminal { .. } | WaitState::Gone => true,
        WaitState::Other => false,
        // A set-uid program's password prompt, seen from outside (as the
        // settle ladder sees it).
        WaitState::Unobservable => session.hidden_prompt(pgid),
    }
}

/// Releases the person's slot once they stopped typing and the terminal
/// waits for input again, even after they left.
async fn release_when_ready(
    session: Arc<Session>,
    slot: Weak<Mutex<PersonSlot>>,
    guard: SlotGuard,
) {
    loop {
        tokio::time::sleep(RELEASE_CHECK).await;
        let Some(slot) = slot.upgrade() else {
            // The person left: keep the slot until the command they typed
            // is done, then let it go.
            while !ready_for_input(&session) {
                tokio::time::sleep(RELEASE_CHECK).await;
            }
            drop(guard);
            return;
        };
        let quiet = slot
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .last_key
            .elapsed()
            >= PERSON_QUIET;
        if quiet && ready_for_input(&session) {
            let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
            if slot.last_key.elapsed() >= PERSON_QUIET {
                slot.held = false;
                drop(guard);
                return;
            }
        }
    }
}
