//! An implementation of the dsh terminal seam ([`terminal_seam::TerminalService`]),
//! based on `pty-process`: PTY sessions owned by agents.
//!
//! [`PtyTerminals`] is the session service. Each terminal has a reader task
//! feeding a sanitizer (escape stripping, line-ending folding), a bounded
//! scrollback ring addressed by byte cursors and a `vt100` screen; a waiter
//! task reaps its first process. A send settles on the first rung of the
//! ladder — our shell's private prompt marker, a *fresh* input wait of the
//! foreground process group read from `/proc`, the `until` pattern, exit,
//! the timeout (idle only where input waits cannot be observed) — watched
//! tightly right after the write and backing off after, so a REPL answers
//! in about a millisecond and a long command costs no CPU.
//!
//! This crate deliberately knows nothing of MCP, JSON or jobs: the tool
//! layer converts, the jobs registry wraps [`terminal_seam::StartedSend`].
//! It needs a tokio runtime and Linux `/proc`.
//!
//! How it behaves, rung by rung, is `docs/subsystems/terminal.md`. The
//! modules:
//!
//! * `service` — the session service: the registry of terminals, the
//!   ownership discipline, close by session id.
//! * `session` — one terminal: its pty, its reader and waiter tasks, the send
//!   slot; `Session::hidden_prompt` reads the terminal's modes and
//!   `probe::sleeps_on_its_terminal` for a set-uid program `/proc` hides.
//! * `spawn` — allocating the pty and starting the first process on it.
//! * `output` — raw bytes in; the sanitized scrollback ring, the screen,
//!   prompt markers and the capture of the active send out.
//! * `emulator` — the `vt100` screen, with plain text that scrolls off left
//!   out of the work, exactly.
//! * `settle` — the settle ladder (prompt marker, a fresh input wait proven
//!   from `/proc` with nothing left unread, pattern, exit, timeout) and what
//!   a send renders (`render_parts`: head and tail to the budget).
//! * `probe` — whether a process waits reading the terminal, from `/proc`: a
//!   descriptor is the terminal by its inode, or `/dev/tty` with the terminal
//!   as controlling terminal; other threads of a process whose main thread
//!   waits in `futex`; a wait's time limit.
//! * `holders`, `inner` — who holds the terminal and what else they wait on;
//!   the terminals inside a multiplexer (`tmux`, `screen`).
//! * `echo` — the echo of the sent text taken out of a send's output.
//! * `interrupt` — interrupting a running send.
//! * `background` — background sends: the send on a task of its own, its
//!   output without the echo, the stop's escalation.
//! * `canon` — long lines for a terminal in canonical mode.
//! * `replies` — the answers a terminal gives to a program's queries.
//! * `watch` — the person's views (`PersonViews` for [`PtyTerminals`], and
//!   `snapshot`, a `vt100` screen as the seam's plain data). A watcher moves
//!   no owner cursor and nothing a settle reads; a person's keys go through
//!   the same one send slot as an agent's.
//! * `memory` — a closed terminal's memory handed back to the system: the
//!   allocator trimmed after each burst of closes.

mod background;
mod canon;
mod echo;
mod emulator;
mod holders;
mod inner;
mod interrupt;
mod memory;
mod output;
mod probe;
mod replies;
mod service;
mod session;
mod settle;
mod spawn;
mod watch;

pub use service::{PtyTerminals, TerminalConfig};
pub use watch::snapshot;
