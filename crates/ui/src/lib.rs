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
//!   [`UiSettings::listen`] asks, logged loudly) and serves the routes,
//!   the event streams (at most [`server::MAX_STREAMS`] live at once;
//!   `/api/live` serialises the `LiveView` the page shows) and the
//!   terminal WebSocket, with "take the keyboard" through the seam's
//!   `PersonKeys`.
//! * [`guard`] — the sign-in (one-time links, the cookie, the bearer
//!   token, compared in constant time; one-time `?login=` links exchanged
//!   for the cookie), `Host` and `Origin` checks every request passes
//!   first, and the page tokens (`PageTokens`) a change through the API —
//!   a method but `GET` under `/api/` — carries.
//! * [`conns`] — who each connection's peer is (its uid, from the
//!   kernel's socket table), and the caps on connections per peer and in
//!   all; the page has its own accept loop, with a
//!   [`server::HEADER_TIMEOUT`] for a request's head and an idle
//!   connection, and back-off on accept errors ([`accept`]).
//! * the rows of the live snapshot as JSON carries them are the wire's
//!   (`daemon_wire::snapshot`), shared with `dsh ps --json`.
//! * [`source`] — [`UiSource`], what the page reads and the changes it
//!   makes; the daemon implements it over its held store and its live
//!   state. Terminals come through it as the seam's `PersonViews`, screens
//!   as its plain `ScreenSnapshot`, directories to choose as
//!   `picker-seam`'s `DirectoryPicker`.
//! * [`changes`] — the workspaces page's changes (a POST carrying the
//!   page's token), its directory picker and its live updates.
//! * [`pages`], [`chart`], [`html`] — the HTML and SVG, rendered on the
//!   server: maud templates that escape every value they insert, and
//!   [`html::page`], which shows control characters as escapes; and the
//!   embedded assets (`assets/ui.css`, `assets/ui.js`, an icon: no
//!   third-party code).
//! * [`screen`] — terminal screens rendered from the emulator dsh keeps,
//!   one shared, rate-limited feed per watched terminal: a viewer holds
//!   one frame at a time, never a queue, so its cost does not grow with a
//!   program's output.
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
mod codes;
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
