//! The vocabulary of dsh terminals: who owns a terminal, how it is named,
//! what can be asked of it, how a send settles, how a call fails — and the
//! one trait, [`TerminalService`], that a backend implements.
//!
//! The key design choice is that **every call carries an [`Owner`]**. An
//! owner is an identity that cannot be forged from a number, so terminal ids
//! (`pty-N`) are not secrets: a call on another owner's terminal fails with
//! [`TerminalError::ForeignSession`], it never succeeds. A second one is that
//! a send is *started* synchronously ([`TerminalService::start_send`]: every
//! ownership and busy check happens before anything is written) and *settled*
//! by a `'static` future, so a host can await it inline or hand it to a job.
//!
//! This crate is deliberately plain: no tokio runtime, no pty, no `/proc`,
//! no serialization. Async methods return boxed [`Future`]s. The model-facing
//! argument and result types live in the tool layer, which converts to and
//! from these types by hand.
//!
//! The modules: `owner` ([`Owner`], compared by pointer), `types` (terminal
//! ids, requests and outcomes, [`SettleReason`], the bounds), `error`
//! ([`TerminalError`] with stable codes), `service` ([`TerminalService`],
//! with [`StartedSend`], a send whose settlement can be awaited or
//! interrupted separately, and [`BackgroundSend`], a send the provider
//! drives, whose output comes without its echo and whose stop escalates),
//! and `views` (the person's views: [`PersonViews`] — a watch of the output,
//! the screen as plain data, the person's keys through the send slot —
//! which take no [`Owner`], and which a host hands only to the person's
//! front ends).

#![forbid(unsafe_code)]

mod error;
mod owner;
mod service;
mod types;
mod views;

pub use error::TerminalError;
pub use owner::Owner;
pub use service::{
    BackgroundSend, BoxFuture, SendInterrupt, SendOutput, SendStop, StartedSend, StopOutcome,
    TerminalService,
};
pub use types::{
    ChildStep, CloseKind, CloseOutcome, CursorPosition, DEFAULT_COLS, DEFAULT_ROWS,
    DEFAULT_SEND_TIMEOUT, ExitStatus, InputCut, LineCut, MAX_CANON_LINE, MAX_CELLS, MAX_COLS,
    MAX_ROWS, MAX_SEND_TIMEOUT, MAX_UNTIL_BYTES, MIN_COLS, MIN_ROWS, MIN_SEND_TIMEOUT, OpenRequest,
    Opened, PidNamespace, PtyDir, ReadOutcome, ReadRequest, ScreenView, SendOutcome, SendRequest,
    SettleReason, SignalOutcome, StreamChunk, SurvivingProcess, TerminalId, TerminalInfo,
    TerminalSignal, TerminalStatus,
};
pub use views::{
    AnswerError, Color, OutputFeed, PersonKeys, PersonViews, Run, ScreenSnapshot, SecretReader,
    TerminalWatch, WatchEvent, style,
};
