//! Sends that run in the background (`pty-send` jobs): the send is driven
//! by a task of its own, its output follows the terminal's stream without
//! the echo of the sent text, and stopping it escalates from SIGINT to
//! SIGTERM and SIGKILL for a program that ignores it — never for the
//! terminal's own first program, whose state (a REPL's variables, the
//! shell's directory) is the point of the terminal.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use terminal_seam::{
    BackgroundSend, BoxFuture, Owner, SendInterrupt, SendOutcome, SendOutput, SendRequest,
    SendStop, SettleReason, StopOutcome, TerminalError, TerminalId, TerminalService as _,
    TerminalSignal,
};

use crate::service::PtyTerminals;

/// How long a stop waits for the send to settle after SIGINT.
const INTERRUPT_GRACE: Duration = Duration::from_secs(3);
/// How long a stop waits after each of SIGTERM and SIGKILL.
const SIGNAL_GRACE: Duration = Duration::from_millis(1500);

/// How far an echoed line may run past the text it echoes (a prompt
/// before it, trailing blanks) before it is taken for program output.
pub(crate) const ECHO_SLACK: usize = 4096;

impl PtyTerminals {
    /// Starts a send in the background (see
    /// [`TerminalService::start_background_send`](terminal_seam::TerminalService::start_background_send)).
    pub(crate) fn start_background(
        &self,
        owner: &Owner,
        id: TerminalId,
        request: SendRequest,
    ) -> Result<BackgroundSend, TerminalError> {
        let text = request.text.clone();
        let started = self.start_send_impl(owner, id, request)?;
        let leader = self.any_session(id)?.spec.pid;
        // `None` while the send runs; then whether the program stopped (a
        // send that settles by `timeout` left it running) and why.
        let (stopped_tx, stopped_rx) =
            tokio::sync::watch::channel(None::<(bool, Option<SettleReason>)>);
        let (done_tx, done_rx) = tokio::sync::watch::channel(false);
        // The send is driven by a task of its own, so it keeps settling
        // while its job is busy being cancelled; dropping `settled` aborts
        // the task, which frees the terminal.
        let settled_send = started.settled;
        let driver = tokio::spawn(async move {
            let outcome = settled_send.await;
            let stopped = match &outcome {
                Ok(o) => (o.reason != SettleReason::Timeout, Some(o.reason)),
                Err(_) => (true, None),
            };
            let _ = stopped_tx.send(Some(stopped));
            let _ = done_tx.send(true);
            outcome
        });
        let settled: BoxFuture<'static, Result<SendOutcome, TerminalError>> =
            Box::pin(async move {
                let driver = AbortOnDrop(driver);
                driver
                    .wait()
                    .await
                    .unwrap_or(Err(TerminalError::SessionClosing { id }))
            });
        let output = without_echo(
            follow(
                self.clone(),
                owner.clone(),
                id,
                started.start_cursor,
                done_rx,
            ),
            &text,
        );
        Ok(BackgroundSend {
            id,
            output: Box::new(Output(output)),
            settled,
            stop: Arc::new(Stop {
                interrupt: started.interrupt,
                terminals: self.clone(),
                owner: owner.clone(),
                id,
                leader,
                stopped: stopped_rx,
            }),
        })
    }
}

/// A background send's output, as the seam's [`SendOutput`].
struct Output(BoxStream<'static, String>);

impl SendOutput for Output {
    fn next(&mut self) -> BoxFuture<'_, Option<String>> {
        Box::pin(self.0.next())
    }
}

/// Stops a background send (see the module doc).
struct Stop {
    interrupt: Arc<dyn SendInterrupt>,
    terminals: PtyTerminals,
    owner: Owner,
    id: TerminalId,
    /// The terminal's first process (its session leader).
    leader: i32,
    /// `None` while the send runs; then whether it stopped the program
    /// and why it settled (`None`: the terminal ended).
    stopped: tokio::sync::watch::Receiver<Option<(bool, Option<SettleReason>)>>,
}

/// True when `leader` is back in the foreground of its terminal (or gone).
fn leader_in_foreground(leader: i32) -> bool {
    process_tree::process_info(leader).is_none_or(|p| p.tpgid == p.pgid)
}

impl SendStop for Stop {
    fn stop(&self) -> BoxFuture<'static, StopOutcome> {
        let interrupt = Arc::clone(&self.interrupt);
        let terminals = self.terminals.clone();
        let owner = self.owner.clone();
        let (id, leader) = (self.id, self.leader);
        let mut stopped = self.stopped.clone();
        Box::pin(async move {
            interrupt.interrupt();
            let settled = tokio::time::timeout(INTERRUPT_GRACE, stopped.wait_for(Option::is_some))
                .await
                .ok()
                .and_then(|r| r.ok().map(|v| *v))
                .flatten();
            if let Some((true, reason)) = settled {
                return StopOutcome::Interrupted(reason);
            }
            let mut sent = Vec::new();
            for signal in [TerminalSignal::Term, TerminalSignal::Kill] {
                if leader_in_foreground(leader) {
                    break;
                }
                if terminals.signal(&owner, id, signal).await.is_ok() {
                    sent.push(signal);
                }
                let deadline = tokio::time::Instant::now() + SIGNAL_GRACE;
                while !leader_in_foreground(leader) && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            if leader_in_foreground(leader) && settled.is_some() {
                StopOutcome::Escalated(sent)
            } else {
                StopOutcome::StillRunning
            }
        })
    }
}

/// The terminal's output from `cursor` on, until the send has settled and
/// everything it printed has been read.
fn follow(
    terminals: PtyTerminals,
    owner: Owner,
    id: TerminalId,
    cursor: u64,
    done: tokio::sync::watch::Receiver<bool>,
) -> BoxStream<'static, String> {
    let state = (terminals, owner, cursor, done);
    Box::pin(futures::stream::unfold(
        state,
        move |(terminals, owner, cursor, mut done)| async move {
            loop {
                let settled = *done.borrow_and_update();
                let read = if settled {
                    // Settled: take what is left, then end.
                    terminals
                        .read_wait(&owner, id, cursor, None, Duration::ZERO)
                        .await
                } else {
                    tokio::select! {
                        read = terminals.read_wait(&owner, id, cursor, None, Duration::from_secs(10)) => read,
                        changed = done.changed() => match changed {
                            Ok(()) => continue,
                            Err(_) => return None,
                        },
                    }
                };
                match read {
                    Ok(chunk) if !chunk.output.is_empty() => {
                        let next = chunk.next;
                        return Some((chunk.output, (terminals, owner, next, done)));
                    }
                    Ok(_) if !settled => {
                        // Nothing new (the program may have closed the
                        // terminal): wait for the settlement, never spin.
                        let _ =
                            tokio::time::timeout(Duration::from_millis(50), done.changed()).await;
                    }
                    Ok(_) | Err(_) => return None,
                }
            }
        },
    ))
}

/// Drops the terminal's echo of the sent text from the start of a
/// background send's output, line by line (a prompt such as `>>> ` or
/// `... ` before an echoed line goes with it). Stops at the first line
/// that is not an echo, and passes everything else through unchanged.
/// It holds back at most one expected line plus [`ECHO_SLACK`] bytes (and
/// one chunk): a longer run without a newline cannot be an echo and is
/// passed on, so a program that prints without newlines (or with echo off)
/// is never buffered without bound.
pub(crate) fn without_echo(
    stream: BoxStream<'static, String>,
    text: &str,
) -> BoxStream<'static, String> {
    let expected: VecDeque<String> = text.lines().map(|l| l.trim_end().to_owned()).collect();
    let state = (stream, expected, String::new(), false);
    Box::pin(futures::stream::unfold(
        state,
        |(mut stream, mut expected, mut pending, mut done)| async move {
            loop {
                if done || expected.is_empty() {
                    if !pending.is_empty() {
                        let out = std::mem::take(&mut pending);
                        return Some((out, (stream, expected, pending, true)));
                    }
                    let chunk = stream.next().await?;
                    return Some((chunk, (stream, expected, pending, true)));
                }
                // Strip whole echoed lines at the front of `pending`.
                while let Some(newline) = pending.find('\n') {
                    let line = pending[..newline].trim_end();
                    let bare = ["$ ", ">>> ", "... ", "> "]
                        .iter()
                        .find_map(|p| line.strip_prefix(p))
                        .unwrap_or(line);
                    match expected.front() {
                        Some(want) if bare == want.as_str() || line == want.as_str() => {
                            expected.pop_front();
                            pending.drain(..=newline);
                        }
                        _ => {
                            done = true;
                            break;
                        }
                    }
                    if expected.is_empty() {
                        break;
                    }
                }
                if done || expected.is_empty() {
                    continue;
                }
                let longest_echo = expected.front().map_or(0, String::len) + ECHO_SLACK;
                if pending.len() > longest_echo {
                    // No newline within reach: not the echo we wait for.
                    done = true;
                    continue;
                }
                match stream.next().await {
                    Some(t) => pending.push_str(&t),
                    None => done = true,
                }
            }
        },
    ))
}

/// Aborts a task when dropped.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> AbortOnDrop<T> {
    /// The task's output; `None` if it panicked or was aborted.
    async fn wait(mut self) -> Option<T> {
        (&mut self.0).await.ok()
    }
}

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn texts(chunks: Vec<&'static str>) -> BoxStream<'static, String> {
        Box::pin(futures::stream::iter(chunks.into_iter().map(str::to_owned)))
    }

    #[tokio::test]
    async fn the_echo_and_its_prompt_are_dropped_and_the_rest_kept() {
        let out: Vec<String> = without_echo(texts(vec![">>> 1+", "1\n2\n>>> "]), "1+1")
            .collect()
            .await;
        assert_eq!(out.concat(), "2\n>>> ");
    }

    #[tokio::test]
    async fn output_without_newlines_is_passed_on_not_buffered_without_bound() {
        // A program with echo off printing 10 KB chunks and no newline,
        // then running on: the filter must pass output on while it runs.
        let printed = futures::stream::iter(0..2000).then(|_| async {
            tokio::task::yield_now().await;
            "x".repeat(10_000)
        });
        let running = printed.chain(futures::stream::pending());
        let mut filtered = without_echo(Box::pin(running), "go");
        let first = tokio::time::timeout(Duration::from_secs(10), filtered.next())
            .await
            .expect("the filter held everything back")
            .expect("the stream ended");
        // At most one expected line, the slack and one chunk were held.
        assert!(first.len() <= 2 + ECHO_SLACK + 10_000, "{}", first.len());
        assert!(first.bytes().all(|b| b == b'x'));
    }
}
