//! The seam through a tiny in-test provider: the provided `send` is
//! `start_send` then its settle future, and errors pass through unchanged.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use pretty_assertions::assert_eq;
use terminal_seam::{
    BoxFuture, CloseKind, CloseOutcome, OpenRequest, Opened, Owner, ReadOutcome, ReadRequest,
    SendInterrupt, SendOutcome, SendRequest, SettleReason, SignalOutcome, StartedSend, StreamChunk,
    TerminalError, TerminalId, TerminalInfo, TerminalService, TerminalSignal, TerminalStatus,
};

/// Echoes every send back; one terminal, `pty-1`, owned by `owner`.
struct EchoTerminals {
    owner: Owner,
    busy: Arc<AtomicBool>,
    interrupted: Arc<Mutex<bool>>,
}

struct Flag(Arc<Mutex<bool>>);

impl SendInterrupt for Flag {
    fn interrupt(&self) {
        *self.0.lock().unwrap() = true;
    }
}

impl TerminalService for EchoTerminals {
    fn open<'a>(
        &'a self,
        _owner: &'a Owner,
        _request: OpenRequest,
    ) -> BoxFuture<'a, Result<Opened, TerminalError>> {
        Box::pin(async { Err(TerminalError::TerminalLimit { limit: 1 }) })
    }

    fn start_send(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<StartedSend, TerminalError> {
        if id != TerminalId(1) {
            return Err(TerminalError::NoSession { id });
        }
        if *owner != self.owner {
            return Err(TerminalError::ForeignSession { id });
        }
        if self.busy.swap(true, Ordering::AcqRel) {
            return Err(TerminalError::SendActive { id });
        }
        let busy = Arc::clone(&self.busy);
        Ok(StartedSend {
            id,
            start_cursor: 0,
            settled: Box::pin(async move {
                busy.store(false, Ordering::Release);
                Ok(SendOutcome {
                    output: request.text,
                    reason: SettleReason::InputWait,
                    exit_code: None,
                    status: TerminalStatus::Running,
                    truncated: false,
                    total_bytes: 0,
                    duration: Duration::ZERO,
                    input_cut: None,
                    echo: Some(true),
                    line_cut: None,
                })
            }),
            interrupt: Arc::new(Flag(Arc::clone(&self.interrupted))),
        })
    }

    fn start_background_send(
        &self,
        _owner: &Owner,
        id: TerminalId,
        _request: SendRequest,
    ) -> Result<terminal_seam::BackgroundSend, TerminalError> {
        Err(TerminalError::SendActive { id })
    }

    fn read<'a>(
        &'a self,
        _owner: &'a Owner,
        id: TerminalId,
        _request: ReadRequest,
    ) -> BoxFuture<'a, Result<ReadOutcome, TerminalError>> {
        Box::pin(async move { Err(TerminalError::NoSession { id }) })
    }

    fn read_wait<'a>(
        &'a self,
        _owner: &'a Owner,
        id: TerminalId,
        _since: u64,
        _max_bytes: Option<usize>,
        _wait: Duration,
    ) -> BoxFuture<'a, Result<StreamChunk, TerminalError>> {
        Box::pin(async move { Err(TerminalError::NoSession { id }) })
    }

    fn signal<'a>(
        &'a self,
        _owner: &'a Owner,
        id: TerminalId,
        _signal: TerminalSignal,
    ) -> BoxFuture<'a, Result<SignalOutcome, TerminalError>> {
        Box::pin(async move { Err(TerminalError::UseClose { id }) })
    }

    fn close<'a>(
        &'a self,
        _owner: &'a Owner,
        _id: TerminalId,
    ) -> BoxFuture<'a, Result<CloseOutcome, TerminalError>> {
        Box::pin(async {
            Ok(CloseOutcome {
                outcome: CloseKind::AlreadyClosing,
                exit: None,
                survivors: Vec::new(),
            })
        })
    }

    fn list<'a>(&'a self, _owner: &'a Owner) -> BoxFuture<'a, Vec<TerminalInfo>> {
        Box::pin(async { Vec::new() })
    }

    fn end_owner<'a>(&'a self, _owner: &'a Owner) -> BoxFuture<'a, ()> {
        Box::pin(async {})
    }
}

/// Polls a future that never waits.
fn ready<T>(future: BoxFuture<'_, T>) -> T {
    let mut future = future;
    match future
        .as_mut()
        .poll(&mut Context::from_waker(Waker::noop()))
    {
        Poll::Ready(value) => value,
        Poll::Pending => panic!("the test provider never waits"),
    }
}

#[test]
fn provided_send_is_start_send_then_settled_and_errors_pass_through() {
    let owner = Owner::new("a");
    let service = EchoTerminals {
        owner: owner.clone(),
        busy: Arc::new(AtomicBool::new(false)),
        interrupted: Arc::new(Mutex::new(false)),
    };
    let dyn_service: &dyn TerminalService = &service;
    let done = ready(dyn_service.send(&owner, TerminalId(1), SendRequest::line("hi"))).unwrap();
    assert_eq!(
        (done.output.as_str(), done.reason),
        ("hi", SettleReason::InputWait)
    );

    let held = dyn_service
        .start_send(&owner, TerminalId(1), SendRequest::line("slow"))
        .unwrap();
    let busy = ready(dyn_service.send(&owner, TerminalId(1), SendRequest::line("x"))).unwrap_err();
    assert_eq!((busy.code(), busy.retryable()), ("SEND_ACTIVE", true));
    held.interrupt.interrupt();
    assert!(*service.interrupted.lock().unwrap());
    assert_eq!(ready(held.settled).unwrap().output, "slow");

    let stranger = Owner::new("a");
    let foreign =
        ready(dyn_service.send(&stranger, TerminalId(1), SendRequest::line("x"))).unwrap_err();
    assert_eq!(foreign.code(), "FOREIGN_SESSION");
}

#[test]
fn settle_reasons_match_exhaustively_from_outside() {
    // Adding a reason must fail to compile here (no wildcard arm).
    let names: Vec<&str> = [
        SettleReason::Prompt,
        SettleReason::InputWait,
        SettleReason::Pattern,
        SettleReason::Exit,
        SettleReason::Idle,
        SettleReason::Timeout,
    ]
    .into_iter()
    .map(|r| match r {
        SettleReason::Prompt => "prompt",
        SettleReason::InputWait => "input_wait",
        SettleReason::Pattern => "pattern",
        SettleReason::Exit => "exit",
        SettleReason::Idle => "idle",
        SettleReason::Timeout => "timeout",
    })
    .collect();
    let as_str: Vec<&str> = [
        SettleReason::Prompt,
        SettleReason::InputWait,
        SettleReason::Pattern,
        SettleReason::Exit,
        SettleReason::Idle,
        SettleReason::Timeout,
    ]
    .into_iter()
    .map(SettleReason::as_str)
    .collect();
    assert_eq!(names, as_str);
}
