//! The trait a terminal backend implements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    CloseOutcome, OpenRequest, Opened, Owner, ReadOutcome, ReadRequest, SendOutcome, SendRequest,
    SettleReason, SignalOutcome, StreamChunk, TerminalError, TerminalId, TerminalInfo,
    TerminalSignal,
};

/// A boxed, sendable future (the seam's async methods return these).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Interrupts a started send: SIGINT to the terminal's foreground process
/// group, then the send settles soon even if nothing answers.
pub trait SendInterrupt: Send + Sync {
    /// Interrupts the send (idempotent; a no-op once it settled).
    fn interrupt(&self);
}

/// A send that passed every check and holds the terminal's send slot.
///
/// Await [`StartedSend::settled`] inline, or hand it to a background job.
/// The slot is released when that future completes **or is dropped**.
pub struct StartedSend {
    /// The terminal.
    pub id: TerminalId,
    /// The stream cursor at which the send's output begins (for
    /// `ReadRequest::Stream { since }` while it runs).
    pub start_cursor: u64,
    /// Writes the text, waits for the settle and renders the outcome.
    pub settled: BoxFuture<'static, Result<SendOutcome, TerminalError>>,
    /// Interrupts it.
    pub interrupt: Arc<dyn SendInterrupt>,
}

impl std::fmt::Debug for StartedSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StartedSend")
            .field("id", &self.id)
            .field("start_cursor", &self.start_cursor)
            .finish_non_exhaustive()
    }
}

/// The output of a background send as it comes: the terminal's stream
/// from the send on, without the terminal's echo of the sent text.
pub trait SendOutput: Send {
    /// The next piece; `None` once the send settled and everything it
    /// printed was returned.
    fn next(&mut self) -> BoxFuture<'_, Option<String>>;
}

/// How stopping a background send went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopOutcome {
    /// SIGINT stopped the program and the send settled, for this reason
    /// (`None`: the terminal ended).
    Interrupted(Option<SettleReason>),
    /// The program ignored SIGINT; these signals were then sent to the
    /// terminal's foreground process group (none when it had stopped by
    /// then), and the terminal's own first program (a REPL, the shell) is
    /// in the foreground again. That program is never signalled this way.
    Escalated(Vec<TerminalSignal>),
    /// The program is still running.
    StillRunning,
}

/// Stops a background send: SIGINT to the terminal's foreground program,
/// then SIGTERM and SIGKILL to a program started from the terminal's
/// program that ignores it. What runs in the terminal's background is not
/// touched; the terminal stays open.
pub trait SendStop: Send + Sync {
    /// Stops the send and says how it went.
    fn stop(&self) -> BoxFuture<'static, StopOutcome>;
}

/// A send that runs in the background (a `pty-send` job): it settles on
/// its own, whether or not anyone awaits `settled`.
pub struct BackgroundSend {
    /// The terminal.
    pub id: TerminalId,
    /// Its output as it comes.
    pub output: Box<dyn SendOutput>,
    /// The outcome. Dropping it before it completes stops driving the
    /// send and frees the terminal's send slot.
    pub settled: BoxFuture<'static, Result<SendOutcome, TerminalError>>,
    /// Stops it.
    pub stop: Arc<dyn SendStop>,
}

impl std::fmt::Debug for BackgroundSend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundSend")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// A terminal backend: PTY sessions owned by agents.
///
/// Every method takes the calling [`Owner`]; a terminal is visible only to
/// the owner that opened it (others get `FOREIGN_SESSION`). Checks on every
/// send, in order: owner, closing, exited, active send.
pub trait TerminalService: Send + Sync {
    /// Starts a terminal and waits for its startup to settle.
    fn open<'a>(
        &'a self,
        owner: &'a Owner,
        request: OpenRequest,
    ) -> BoxFuture<'a, Result<Opened, TerminalError>>;

    /// Runs every check and takes the send slot, without writing yet.
    fn start_send(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<StartedSend, TerminalError>;

    /// Sends and waits for the settle: [`TerminalService::start_send`],
    /// then its `settled` future.
    fn send<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> BoxFuture<'a, Result<SendOutcome, TerminalError>> {
        match self.start_send(owner, id, request) {
            Ok(started) => started.settled,
            Err(error) => Box::pin(std::future::ready(Err(error))),
        }
    }

    /// Runs every check of [`TerminalService::start_send`] and starts the
    /// send in the background.
    fn start_background_send(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<BackgroundSend, TerminalError>;

    /// Reads the stream (non-destructive) or the screen.
    fn read<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        request: ReadRequest,
    ) -> BoxFuture<'a, Result<ReadOutcome, TerminalError>>;

    /// Waits up to `wait` for stream output after `since` (returning at
    /// once when there is some, or when the terminal's output ended), then
    /// reads it like `ReadRequest::Stream { since: Some(since), .. }`. Lets
    /// a background send's job follow its output without polling.
    fn read_wait<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        since: u64,
        max_bytes: Option<usize>,
        wait: Duration,
    ) -> BoxFuture<'a, Result<StreamChunk, TerminalError>>;

    /// Signals the foreground process group.
    fn signal<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
        signal: TerminalSignal,
    ) -> BoxFuture<'a, Result<SignalOutcome, TerminalError>>;

    /// Ends every process of the terminal's session and verifies it.
    fn close<'a>(
        &'a self,
        owner: &'a Owner,
        id: TerminalId,
    ) -> BoxFuture<'a, Result<CloseOutcome, TerminalError>>;

    /// The owner's open terminals, oldest first.
    fn list<'a>(&'a self, owner: &'a Owner) -> BoxFuture<'a, Vec<TerminalInfo>>;

    /// Closes every terminal of `owner` (the host calls this when a
    /// connection ends).
    fn end_owner<'a>(&'a self, owner: &'a Owner) -> BoxFuture<'a, ()>;
}
