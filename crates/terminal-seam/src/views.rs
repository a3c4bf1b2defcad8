//! What a person sees of a terminal and how they type into it, beside the
//! agent that owns it: `dsh attach` and the `dsh ui` page.
//!
//! Unlike [`TerminalService`](crate::TerminalService), these views take no
//! [`Owner`](crate::Owner): they are for the person at the machine, whose
//! authority is the daemon's socket or the page's token, never for a
//! model. A host hands [`PersonViews`] only to those front ends, so the
//! tool layer cannot reach a terminal it does not own through them.
//!
//! A [`TerminalWatch`] is the screen, then a copy of every later chunk of
//! output; it moves none of the owner's cursors and nothing a send's
//! settle detection reads. [`PersonKeys`] lets a person type through the
//! terminal's one send slot: a keystroke is refused (`SEND_ACTIVE`) while
//! an agent's send is active, and once the person typed, the slot stays
//! theirs until they stop typing and the terminal waits for input again.
//! Nobody injects characters into someone else's command.

use std::sync::Arc;
use std::time::SystemTime;

use crate::{BoxFuture, TerminalError, TerminalId};

/// What a watch of a terminal's output reports next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchEvent {
    /// A chunk of output, as the program wrote it.
    Output(Arc<[u8]>),
    /// The watcher fell behind and chunks were dropped: redraw from
    /// [`PersonViews::screen_now`].
    Lagged,
    /// The terminal's output ended.
    Ended,
}

/// The output of a watched terminal, chunk by chunk.
pub trait OutputFeed: Send {
    /// Waits for the next event. Cancel-safe: dropping the future before
    /// it completes loses nothing.
    fn next(&mut self) -> BoxFuture<'_, WatchEvent>;

    /// The next event if one is waiting; `None` when nothing is.
    fn try_next(&mut self) -> Option<WatchEvent>;
}

/// A live view of a terminal.
pub struct TerminalWatch {
    /// Escape sequences that clear a terminal and draw the current screen.
    pub screen: Vec<u8>,
    /// The terminal's size (rows, columns).
    pub size: (u16, u16),
    /// Later output.
    pub output: Box<dyn OutputFeed>,
}

impl std::fmt::Debug for TerminalWatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TerminalWatch")
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// A color of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Color {
    /// The terminal's default.
    #[default]
    Default,
    /// An index into the 256-color palette.
    Idx(u8),
    /// A true color.
    Rgb(u8, u8, u8),
}

/// Style bits of a [`Run`].
pub mod style {
    /// Bold.
    pub const BOLD: u8 = 1;
    /// Italic.
    pub const ITALIC: u8 = 2;
    /// Underlined.
    pub const UNDERLINE: u8 = 4;
    /// Foreground and background swapped.
    pub const INVERSE: u8 = 8;
    /// Dim.
    pub const DIM: u8 = 16;
}

/// Consecutive cells of one row with the same colors and style.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Run {
    /// The cells' text (a wide character once, blank cells as spaces).
    pub text: String,
    /// Foreground.
    pub fg: Color,
    /// Background.
    pub bg: Color,
    /// [`style`] bits.
    pub flags: u8,
}

/// A terminal's screen as plain data: what its emulator shows now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenSnapshot {
    /// Rows.
    pub rows: u16,
    /// Columns.
    pub cols: u16,
    /// The cursor (row, column), from 0.
    pub cursor: (u16, u16),
    /// Whether the program hid the cursor.
    pub cursor_hidden: bool,
    /// Whether the program asked for application cursor keys.
    pub app_cursor: bool,
    /// Whether the alternate screen is shown (a full-screen program).
    pub alt: bool,
    /// Per row, its runs; trailing blank cells are left out.
    pub lines: Vec<Vec<Run>>,
}

/// A person's right to type into one terminal (see the module doc).
pub trait PersonKeys: Send + Sync {
    /// Writes keys the person typed: `SEND_ACTIVE` while an agent's send
    /// holds the terminal (nothing is written), `SESSION_CLOSING` /
    /// `SESSION_EXITED` when it is over.
    fn write<'a>(&'a self, bytes: &'a [u8]) -> BoxFuture<'a, Result<(), TerminalError>>;

    /// True while the person holds the terminal's send slot.
    fn holds_slot(&self) -> bool;
}

/// Why a person's answer to a secret prompt was not typed.
#[derive(Debug, thiserror::Error)]
pub enum AnswerError {
    /// The terminal is unknown, over, or an agent's send holds it.
    #[error(transparent)]
    Terminal(#[from] TerminalError),
    /// The terminal does not wait for a secret now.
    #[error(
        "{id} does not wait for a secret now (a program that asks for one reads the terminal with echo off); nothing was typed"
    )]
    NoSecretPrompt {
        /// The terminal.
        id: TerminalId,
    },
    /// The answer is not typed where it is asked for (for example a
    /// `sudo` prompt inside the sandbox, which cannot be real).
    #[error("{id}: {why}")]
    Refused {
        /// The terminal.
        id: TerminalId,
        /// Why, and what to do instead.
        why: String,
    },
}

impl AnswerError {
    /// The stable code: the terminal's, `NO_SECRET_PROMPT` or
    /// `ANSWER_REFUSED`.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Terminal(e) => e.code(),
            Self::NoSecretPrompt { .. } => "NO_SECRET_PROMPT",
            Self::Refused { .. } => "ANSWER_REFUSED",
        }
    }
}

/// The process that reads a terminal's secret prompt, as the person who
/// answers it should know it: the executable the kernel runs, not the
/// command line an agent chose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecretReader {
    /// Its process id (as the daemon sees it).
    pub pid: u32,
    /// Its executable (`/proc/PID/exe`); `None` when the kernel hides it
    /// (a set-uid program run by a regular user).
    pub exe: Option<std::path::PathBuf>,
    /// Its name as the kernel keeps it (`comm`), for when `exe` is hidden.
    pub name: String,
    /// Whether it runs with `no_new_privs` (inside dsh's sandbox): a
    /// set-uid program such as `sudo` or `su` cannot gain privileges there.
    pub no_new_privs: bool,
}

/// The person's views of every terminal, whoever owns it.
pub trait PersonViews: Send + Sync {
    /// Starts watching terminal `id`.
    fn watch(&self, id: TerminalId) -> Result<TerminalWatch, TerminalError>;

    /// The screen of terminal `id` now, as escape sequences that redraw it.
    fn screen_now(&self, id: TerminalId) -> Result<Vec<u8>, TerminalError>;

    /// The screen of terminal `id` now, as plain data.
    fn screen_copy(&self, id: TerminalId) -> Result<ScreenSnapshot, TerminalError>;

    /// When terminal `id` last printed (or opened); `None` when unknown.
    fn last_activity(&self, id: TerminalId) -> Option<SystemTime>;

    /// Whether terminal `id` is gone (closed, or its program exited).
    fn is_over(&self, id: TerminalId) -> bool;

    /// Lets a person type into terminal `id`.
    fn person_typing(&self, id: TerminalId) -> Result<Box<dyn PersonKeys>, TerminalError>;

    /// Whether a program in terminal `id` waits now to read a secret (the
    /// terminal in canonical mode with echo off, its foreground process
    /// blocked reading it).
    fn waits_for_secret(&self, id: TerminalId) -> bool;

    /// The process of terminal `id` that waits now to read a secret (see
    /// [`PersonViews::waits_for_secret`]); `None` when none does or it
    /// cannot be told.
    fn secret_reader(&self, id: TerminalId) -> Option<SecretReader> {
        let _ = id;
        None
    }

    /// Types a person's answer to the secret prompt terminal `id` shows
    /// now, and Enter, through the send slot (held only for the write):
    /// refused while a send holds the terminal, and unless a program
    /// waits to read it with echo off. The provider keeps nothing of it.
    fn answer_secret<'a>(
        &'a self,
        id: TerminalId,
        secret: &'a [u8],
    ) -> BoxFuture<'a, Result<(), AnswerError>>;
}
