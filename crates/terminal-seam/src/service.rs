//! The trait a terminal backend implements.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::{
    CloseOutcome, OpenRequest, Opened, Owner, ReadOutcome, ReadRequest, SendOutcome, SendRequest,
    SignalOutcome, StreamChunk, TerminalError, TerminalId, TerminalInfo, TerminalSignal,
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
