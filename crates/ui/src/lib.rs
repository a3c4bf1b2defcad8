//! The local web page of `dsh ui`: where a person watches every agent at
//! once — the workspaces and their sessions, each session's timeline of
//! tool calls with its pictures, the connected agents with their
//! terminals (live screens, and the keyboard on request) and their jobs
//! (status and output, live) — and where a person organises the
//! workspaces: creates one through a directory picker, renames, reorders,
//! removes them, reorders and archives sessions.
//!
//! * [`server`] — [`start`] binds 127.0.0.1 (a free port unless
//!   [`UiSettings::port`] fixes one; another address only when
//!   [`UiSettings::listen`] asks, logged loudly) and serves the routes.
//! * [`guard`] — the sign-in (one-time links, the cookie, the bearer
//!   token), `Host` and `Origin` checks every request passes first, and
//!   the page tokens every change carries.
//! * [`conns`] — who each connection's peer is, and the caps on
//!   connections per peer and in all.
//! * [`snapshot`] — the rows of the live snapshot as JSON carries them,
//!   shared with `dsh ps --json`.
//! * [`source`] — [`UiSource`], what the page reads and the changes it
//!   makes; the daemon implements it over its held store and its live
//!   state.
//! * [`changes`] — the workspaces page's changes (a POST carrying the
//!   page's token), its directory picker and its live updates.
//! * [`pages`], [`chart`], [`html`] — the HTML and SVG, rendered on the
//!   server.
//! * [`screen`] — terminal screens rendered from the emulator dsh keeps,
//!   one shared, rate-limited feed per watched terminal.
//!
//! This crate opens no store, lists no directory and starts no program:
//! it reads and changes through its source, and a person's keys go
//! through the terminal's one send slot (the seam's `PersonKeys`), under
//! the same rule as `dsh attach --write`. It knows terminals only through
//! the seam's `PersonViews`, and directories only through the picker
//! seam's `DirectoryPicker`.

#![forbid(unsafe_code)]

pub mod accept;
mod assets;
pub mod changes;
pub mod chart;
pub mod conns;
pub mod guard;
pub mod html;
pub mod pages;
pub mod screen;
pub mod server;
pub mod source;

pub use accept::{AcceptBackoff, is_resource_error};
pub use guard::PageLink;
pub use server::{UiError, UiServer, UiSettings, start};
pub use source::{
    ApprovalView, CallFeed, JobTail, LiveCall, LiveView, Overview, PromptView, RemoteHost,
    SessionSummary, SessionView, SourceError, UiSource, WatchingGuard, WorkspaceSummary,
};
pub use source::{Change, Changed};
