//! People watching and joining a terminal (`dsh attach`), beside the agent
//! that owns it.
//!
//! A [`TerminalWatch`] is the screen, then a copy of every later chunk of
//! output; it moves none of the owner's cursors and nothing a send's
//! settle detection reads. [`PersonTyping`] lets a person type through the
//! terminal's one send slot: a keystroke is refused (`SEND_ACTIVE`) while
//! an agent's send is active, and once the person typed, the slot stays
//! theirs — so an agent's send gets `SEND_ACTIVE` — until they stopped
//! typing for [`PERSON_QUIET`] and the terminal waits for input again (or
//! exited). Nobody injects characters into someone else's command.

use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use terminal_seam::{TerminalError, TerminalId};

use crate::probe::{WaitState, wait_state};
use crate::service::PtyTerminals;
use crate::session::{Session, SlotGuard};

/// How long after a person's last keystroke the slot may be released.
pub const PERSON_QUIET: Duration = Duration::from_secs(1);
/// How often a held person slot is checked for release.
const RELEASE_CHECK: Duration = Duration::from_millis(100);

/// A live view of a terminal.
pub struct TerminalWatch {
    /// Escape sequences that clear a terminal and draw the current screen.
    pub screen: Vec<u8>,
    /// The terminal's size (rows, columns).
    pub size: (u16, u16),
    /// Later output, chunk by chunk; `Lagged` means chunks were missed
    /// (redraw from [`PtyTerminals::screen_now`]); `Closed` that the
    /// terminal's output ended.
    pub output: tokio::sync::broadcast::Receiver<Arc<[u8]>>,
}

impl std::fmt::Debug for TerminalWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalWatch")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

struct PersonSlot {
    /// True while the release task holds the send slot for the person.
    held: bool,
    last_key: Instant,
}

/// A person's right to type into one terminal.
pub struct PersonTyping {
    session: Arc<Session>,
    slot: Arc<Mutex<PersonSlot>>,
}

impl PtyTerminals {
    /// Starts watching terminal `id`, whoever owns it.
    pub fn watch(&self, id: TerminalId) -> Result<TerminalWatch, TerminalError> {
        let session = self.any_session(id)?;
        let mut st = session.lock();
        let (screen, output) = st.out.watch();
        Ok(TerminalWatch {
            screen,
            size: (session.spec.rows, session.spec.cols),
            output,
        })
    }

    /// The screen of terminal `id` now, as escape sequences that redraw it.
    pub fn screen_now(&self, id: TerminalId) -> Result<Vec<u8>, TerminalError> {
        let session = self.any_session(id)?;
        let mut st = session.lock();
        Ok(st.out.screen_formatted())
    }

    /// A copy of terminal `id`'s screen as its emulator has it now,
    /// whoever owns it (the `dsh ui` page renders it). The session's lock
    /// is held only for the copy.
    pub fn screen_copy(&self, id: TerminalId) -> Result<vt100::Screen, TerminalError> {
        let session = self.any_session(id)?;
        let mut st = session.lock();
        Ok(st.out.screen().clone())
    }

    /// When terminal `id` last printed (or opened).
    pub fn last_activity(&self, id: TerminalId) -> Option<SystemTime> {
        let session = self.any_session(id).ok()?;
        Some(session.lock().out.last_output)
    }

    /// Whether terminal `id` is gone (closed, or its program exited).
    pub fn is_over(&self, id: TerminalId) -> bool {
        match self.any_session(id) {
            Ok(session) => session.is_closing() || session.lock().exit.is_some(),
            Err(_) => true,
        }
    }

    /// Lets a person type into terminal `id`, whoever owns it.
    pub fn person_typing(&self, id: TerminalId) -> Result<PersonTyping, TerminalError> {
        let session = self.any_session(id)?;
        Ok(PersonTyping {
            session,
            slot: Arc::new(Mutex::new(PersonSlot {
                held: false,
                last_key: Instant::now(),
            })),
        })
    }
}

impl PersonTyping {
    /// Writes keys the person typed: `SEND_ACTIVE` while an agent's send
    /// holds the terminal (nothing is written), `SESSION_CLOSING` /
    /// `SESSION_EXITED` when it is over.
    pub async fn write(&self, bytes: &[u8]) -> Result<(), TerminalError> {
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

    /// True while the person holds the terminal's send slot.
    pub fn holds_slot(&self) -> bool {
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
        WaitState::Other | WaitState::Unobservable => false,
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
