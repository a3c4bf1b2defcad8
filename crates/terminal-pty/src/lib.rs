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
