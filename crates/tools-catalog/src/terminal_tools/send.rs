//! `terminal_send`, inline and as a background job (`pty-send-N`): the
//! reply's words and data, and the job over the provider's background
//! send.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use jobs::{Cancel, JobKind, OutputChunk, Producer, Settlement, StartError, StartOptions, Started};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use terminal_seam::{
    Owner, ReadOutcome, ReadRequest, SendOutcome, SendRequest, StopOutcome, TerminalError,
    TerminalId, TerminalService,
};

use super::{ECHO_OFF, TerminalSendTool, parse_id, status_json, terminal_error};
use crate::context::JobSandbox;
use crate::error::Code;
use crate::job_tools::{job_error, started_reply};
use crate::{
    CallContext, Effect, Preset, RefusalsJson, SecretAsked, Tool, ToolError, ToolFuture, ToolReply,
    ToolSpec, clamp_ms, parse_args,
};

/// Arguments of `terminal_send`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SendArgs {
    /// The terminal's id (`pty-N`).
    pub id: String,
    /// The text to type; multi-line text is sent as is (a REPL receives every line).
    pub text: String,
    /// Press Enter after the text. Default true; false to send keys such as `\u0003` or a partial line.
    pub submit: Option<bool>,
    /// A regex (at most 4096 bytes): return as soon as it matches the new output.
    pub until: Option<String>,
    /// Most milliseconds to wait. Default 30000; range 1–600000.
    pub timeout_ms: Option<u64>,
    /// Return `{job_id}` at once; the send settles as a job read with `job_output`. Default false.
    pub run_in_background: Option<bool>,
}

impl TerminalSendTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<SendArgs>(
            "terminal_send",
            "Type text into a terminal and wait until it is ready for more input, the `until` pattern appears in the new output, the program exits, or `timeout_ms` passes — whichever comes first — then return everything it printed since (without the echo of your text). \
`reason` says which: `prompt` (the shell is back; `exit_code` is the command's status), `input_wait` (the program is waiting to read, e.g. at a REPL prompt; `echo: false` means it asks for a secret: dsh has a person answer it out of band — never type one you were not given; `answered_by_person` counts their answers, which you never see), `pattern`, `exit`, `idle`, or `timeout` — a `timeout` does not mean the command stopped: it is still running, so read on with `terminal_read` or stop it with `terminal_signal`. \
Paths or connections the sandbox refused, as the output shows them, are named in `refusals`. \
One send at a time per terminal.",
            &[Preset::Full],
            &[
                Code::NoSession,
                Code::ForeignSession,
                Code::SessionClosing,
                Code::SessionExited,
                Code::SendActive,
                Code::JobLimit,
                Code::InvalidArgument,
            ],
            Effect::RunsCommands,
        ))
    }
}

fn send_reply(
    id: TerminalId,
    outcome: &SendOutcome,
    clamped: Option<crate::Clamped>,
    refusals: Option<RefusalsJson>,
) -> ToolReply {
    let mut text = outcome.output.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    let mut status = format!("[{id} · {}", outcome.reason.as_str());
    if outcome.echo == Some(false) {
        status.push_str(ECHO_OFF);
    }
    if let Some(code) = outcome.exit_code {
        status.push_str(&format!(" · exit {code}"));
    }
    status.push_str(&format!(" · {} ms]", outcome.duration.as_millis()));
    if outcome.reason == terminal_seam::SettleReason::Timeout {
        status.push_str(" the command is still running");
    }
    text.push_str(&status);
    if let Some(cut) = &outcome.input_cut {
        text.push_str(&format!("\n[input: {}]", input_cut_note(cut)));
    }
    if let Some(cut) = &outcome.line_cut {
        text.push_str(&format!("\n[input: {}]", line_cut_note(cut)));
    }
    if let Some(refusals) = &refusals {
        text.push('\n');
        text.push_str(&refusals.line);
    }
    let mut structured = json!({
        "output": outcome.output,
        "reason": outcome.reason.as_str(),
        "exit_code": outcome.exit_code,
        "status": status_json(outcome.status),
        "truncated": outcome.truncated,
        "total_bytes": outcome.total_bytes,
        "duration_ms": outcome.duration.as_millis() as u64,
    });
    if let Some(c) = clamped {
        structured["clamped"] = json!(c);
    }
    if let Some(refusals) = refusals {
        structured["refusals"] = json!(refusals);
    }
    if let Some(cut) = &outcome.input_cut {
        structured["input_cut"] = json!({
            "written_bytes": cut.written_bytes,
            "total_bytes": cut.total_bytes,
            "unread_discarded": cut.unread_discarded,
        });
    }
    if let Some(echo) = outcome.echo {
        structured["echo"] = json!(echo);
    }
    if let Some(cut) = &outcome.line_cut {
        structured["line_cut"] = json!({
            "line": cut.line,
            "line_bytes": cut.line_bytes,
            "kept_bytes": cut.kept_bytes,
        });
    }
    ToolReply { text, structured }
}

/// What the kernel kept of a line too long for a canonical-mode terminal.
fn line_cut_note(cut: &terminal_seam::LineCut) -> String {
    format!(
        "line {} is {} bytes, but the terminal (canonical mode, end-of-file character disabled) keeps {} bytes of a line: the program received {} bytes of it and the rest was dropped; write long input to a file and pass its path instead",
        cut.line, cut.line_bytes, cut.kept_bytes, cut.kept_bytes
    )
}

/// What happened to a send's text that the program did not take in time.
fn input_cut_note(cut: &terminal_seam::InputCut) -> String {
    let (written, total) = (cut.written_bytes, cut.total_bytes);
    if written == 0 {
        format!(
            "none of the {total} bytes was written: the program is not reading its input; send it again once it does"
        )
    } else if cut.unread_discarded {
        format!(
            "only {written} of {total} bytes were written: the program was not reading its input, so the input it had not read was discarded and nothing of this send will run; send it again once it reads"
        )
    } else {
        format!(
            "only {written} of {total} bytes were written: the program was not reading its input, and the part written could not be discarded — it may run when the program reads"
        )
    }
}

impl Tool for TerminalSendTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: SendArgs = parse_args(args)?;
            let id = parse_id(&args.id)?;
            let (timeout_ms, clamped) = clamp_ms("timeout_ms", args.timeout_ms, 30_000, 1, 600_000);
            let request = SendRequest {
                text: args.text,
                submit: args.submit.unwrap_or(true),
                until: args.until,
                timeout: Duration::from_millis(timeout_ms),
            };
            if args.run_in_background.unwrap_or(false) {
                let producer = PtySendProducer {
                    terminals: cx.runtime.terminals.clone(),
                    owner: cx.owner.clone(),
                    id,
                    request,
                };
                let started = cx
                    .runtime
                    .jobs
                    .start(
                        &cx.owner,
                        Box::new(producer),
                        StartOptions { timeout: None },
                    )
                    .await
                    .map_err(job_error)?;
                // The job may outlive the terminal, and its leader's pid
                // with it: the job keeps the directory of now.
                if let Some(sandbox) = cx.runtime.sandbox_of(&id.to_string()) {
                    cx.runtime.remember(JobSandbox {
                        id: started.id.clone(),
                        cwd: sandbox.current_dir(),
                        leader: None,
                        prepared: sandbox.prepared,
                    });
                }
                return Ok(cx.with_resume_key(started_reply(&started.id, clamped, None)));
            }
            let terminals = cx.runtime.terminals.clone();
            let owner = cx.owner.clone();
            let last_line = move || {
                let terminals = terminals.clone();
                let owner = owner.clone();
                Box::pin(async move {
                    match terminals.read(&owner, id, ReadRequest::Screen).await {
                        Ok(ReadOutcome::Screen(view)) => {
                            crate::job_tools::last_line_of(&view.screen)
                        }
                        Ok(ReadOutcome::Stream(_)) | Err(_) => None,
                    }
                }) as BoxFuture<'static, Option<String>>
            };
            let timeout = request.timeout;
            let sent: String = request.text.chars().take(200).collect();
            let outcome = crate::context::with_ticks(
                cx.progress.as_ref(),
                cx.runtime.terminals.send(&cx.owner, id, request),
                last_line,
            )
            .await
            .map_err(terminal_error)?;
            let (outcome, answered, note) =
                answer_secret_prompts(cx, id, &sent, outcome, timeout).await?;
            let refusals = cx
                .runtime
                .sandbox_of(&id.to_string())
                .and_then(|s| RefusalsJson::find(&s.prepared, &outcome.output, &s.current_dir()));
            let mut reply = send_reply(id, &outcome, clamped, refusals);
            if answered > 0 {
                reply.structured["answered_by_person"] = json!(answered);
            }
            if let Some(note) = note {
                reply.text.push_str(&format!("\n[{note}]"));
                reply.structured["secret_prompt"] = json!(note);
            }
            Ok(reply)
        })
    }
}

/// At most this many secret prompts of one send are put to a person (a
/// passphrase and its confirmation; a retry after a typo).
const MAX_SECRET_PROMPTS: usize = 3;

/// While a send settles on a secret prompt (an input wait with echo off),
/// has a person answer it out of band and types the answer with a send of
/// its own, whose output follows; the model reads that a person answered,
/// never what. Without a way to ask, or once the person declined, the
/// reply says how a person answers instead. Returns the outcome, how
/// many prompts a person answered, and what to tell the model when a
/// prompt is left waiting.
async fn answer_secret_prompts(
    cx: &CallContext,
    id: TerminalId,
    sent: &str,
    mut outcome: SendOutcome,
    timeout: Duration,
) -> Result<(SendOutcome, usize, Option<String>), ToolError> {
    let mut answered = 0;
    let mut output = String::new();
    let mut note = None;
    while outcome.reason == terminal_seam::SettleReason::InputWait
        && outcome.echo == Some(false)
        && answered < MAX_SECRET_PROMPTS
    {
        let Some(secrets) = &cx.secrets else { break };
        let prompt = outcome
            .output
            .lines()
            .last()
            .unwrap_or_default()
            .trim()
            .to_owned();
        match secrets.ask(&cx.owner, id, &prompt, sent).await {
            SecretAsked::Answered(secret) => {
                // Whatever the program does with it (a script may write
                // it to a file), no later result of any agent shows it.
                cx.runtime.remember_secret("answer", secret.as_str());
                let request = SendRequest {
                    text: secret.to_string(),
                    submit: true,
                    until: None,
                    timeout,
                };
                let mut next = cx
                    .runtime
                    .terminals
                    .send(&cx.owner, id, request)
                    .await
                    .map_err(terminal_error)?;
                // Should the program have echoed it after all, the
                // answer is redacted like any secret the call knows.
                if let Some(redactor) = cx.runtime.redactor() {
                    let known =
                        redactor.with_known([redact::KnownSecret::new("answer", secret.as_str())]);
                    next.output = known.redact(&next.output).text.into_owned();
                }
                drop(secret);
                answered += 1;
                output.push_str(&outcome.output);
                if !output.ends_with('\n') {
                    output.push('\n');
                }
                output.push_str("[a person answered this prompt; the answer is not shown]\n");
                outcome = SendOutcome {
                    duration: outcome.duration + next.duration,
                    total_bytes: outcome.total_bytes + next.total_bytes,
                    truncated: outcome.truncated || next.truncated,
                    ..next
                };
            }
            SecretAsked::Declined => {
                note = Some("the person declined to answer this prompt; it still waits".to_owned());
                break;
            }
            SecretAsked::NotAsked(how) => {
                note = Some(how);
                break;
            }
        }
    }
    output.push_str(&outcome.output);
    Ok((SendOutcome { output, ..outcome }, answered, note))
}

/// A terminal send running as a background job (`pty-send-N`): the
/// provider drives it ([`TerminalService::start_background_send`]: its
/// output without the echo, its stop); this turns it into a job and its
/// outcomes into words.
struct PtySendProducer {
    terminals: Arc<dyn TerminalService>,
    owner: Owner,
    id: TerminalId,
    request: SendRequest,
}

/// Stops a background send through the provider, and says how it went.
struct StopSend {
    stop: Arc<dyn terminal_seam::SendStop>,
    id: TerminalId,
}

impl Cancel for StopSend {
    fn cancel(&self) -> BoxFuture<'static, Result<String, String>> {
        let stop = self.stop.stop();
        let id = self.id;
        Box::pin(async move {
            // Only the foreground program is stopped: say so, and no more.
            let untouched = format!(
                "{id} stays open and what runs in its background was not touched (terminal_close ends everything in it)"
            );
            match stop.await {
                StopOutcome::Interrupted(reason) => Ok(format!(
                    "the send was interrupted with SIGINT and settled ({}); {untouched}",
                    reason.map_or("the terminal ended", |r| r.as_str())
                )),
                StopOutcome::Escalated(sent) => {
                    let how = if sent.is_empty() {
                        String::new()
                    } else {
                        let names: Vec<&str> = sent.iter().map(|s| s.as_str()).collect();
                        format!(
                            ", then {} to its foreground process group",
                            names.join(" and ")
                        )
                    };
                    Ok(format!(
                        "the program in {id} did not stop on SIGINT; it was sent SIGINT{how}, and {id}'s own program is in the foreground again; {untouched}"
                    ))
                }
                StopOutcome::StillRunning => Err(format!(
                    "the program in {id} did not stop on SIGINT and is still running; stop it with terminal_signal or end the terminal with terminal_close"
                )),
            }
        })
    }
}

/// A background send's settlement, in the job's words.
fn settlement(id: TerminalId, outcome: Result<SendOutcome, TerminalError>) -> Settlement {
    match outcome {
        Ok(o) if o.reason == terminal_seam::SettleReason::Timeout => Settlement::TimedOut {
            detail: format!(
                "the send's timeout passed; the command may still be running in {id} (terminal_read)"
            ),
        },
        Ok(o) => Settlement::Finished {
            exit_code: o.exit_code,
            detail: Some({
                let mut detail = format!("reason: {}", o.reason.as_str());
                if o.echo == Some(false) {
                    detail.push_str(ECHO_OFF);
                }
                if let Some(cut) = &o.input_cut {
                    detail.push_str(&format!("; {}", input_cut_note(cut)));
                }
                if let Some(cut) = &o.line_cut {
                    detail.push_str(&format!("; {}", line_cut_note(cut)));
                }
                detail
            }),
        },
        Err(e) => Settlement::Failed {
            detail: e.to_string(),
        },
    }
}

impl Producer for PtySendProducer {
    fn kind(&self) -> JobKind {
        JobKind::PtySend
    }

    fn label(&self) -> String {
        format!("{}: {}", self.id, self.request.text)
    }

    fn start(self: Box<Self>) -> BoxFuture<'static, Result<Started, StartError>> {
        let PtySendProducer {
            terminals,
            owner,
            id,
            request,
        } = *self;
        let started = terminals
            .start_background_send(&owner, id, request)
            .map_err(|e| StartError {
                code: crate::error::terminal_code(&e),
                message: e.to_string(),
                retryable: e.retryable(),
            });
        Box::pin(async move {
            let send = started?;
            let settled = send.settled;
            let output = futures::stream::unfold(send.output, |mut output| async move {
                let piece = output.next().await?;
                Some((OutputChunk::Text(piece), output))
            });
            Ok(Started {
                output: Box::pin(output),
                settle: Box::pin(async move { settlement(id, settled.await) }),
                cancel: Arc::new(StopSend {
                    stop: send.stop,
                    id,
                }),
                session_id: None,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_cut_send_says_how_much_was_written() {
        let outcome = SendOutcome {
            output: String::new(),
            reason: terminal_seam::SettleReason::Timeout,
            exit_code: None,
            status: terminal_seam::TerminalStatus::Running,
            truncated: false,
            total_bytes: 0,
            duration: Duration::from_millis(1500),
            input_cut: Some(terminal_seam::InputCut {
                written_bytes: 14_000,
                total_bytes: 1_048_577,
                unread_discarded: true,
            }),
            echo: None,
            line_cut: None,
        };
        let reply = send_reply(TerminalId(1), &outcome, None, None);
        assert_eq!(
            reply.text,
            "[pty-1 · timeout · 1500 ms] the command is still running\n[input: only 14000 of 1048577 bytes were written: the program was not reading its input, so the input it had not read was discarded and nothing of this send will run; send it again once it reads]"
        );
        assert_eq!(
            reply.structured["input_cut"],
            json!({ "written_bytes": 14000, "total_bytes": 1048577, "unread_discarded": true })
        );
    }

    #[test]
    fn a_secret_prompt_and_a_cut_line_are_said_in_words_and_data() {
        let outcome = SendOutcome {
            output: "pw: ".into(),
            reason: terminal_seam::SettleReason::InputWait,
            exit_code: None,
            status: terminal_seam::TerminalStatus::Running,
            truncated: false,
            total_bytes: 4,
            duration: Duration::from_millis(3),
            input_cut: None,
            echo: Some(false),
            line_cut: Some(terminal_seam::LineCut {
                line: 2,
                line_bytes: 6000,
                kept_bytes: 4095,
            }),
        };
        let reply = send_reply(TerminalId(3), &outcome, None, None);
        assert_eq!(
            reply.text,
            "pw: \n[pty-3 · input_wait · echo off: the program asks for a secret · 3 ms]\n[input: line 2 is 6000 bytes, but the terminal (canonical mode, end-of-file character disabled) keeps 4095 bytes of a line: the program received 4095 bytes of it and the rest was dropped; write long input to a file and pass its path instead]"
        );
        assert_eq!(reply.structured["echo"], json!(false));
        assert_eq!(
            reply.structured["line_cut"],
            json!({ "line": 2, "line_bytes": 6000, "kept_bytes": 4095 })
        );
        let repl = SendOutcome {
            echo: Some(true),
            line_cut: None,
            ..outcome
        };
        let reply = send_reply(TerminalId(3), &repl, None, None);
        assert_eq!(reply.text, "pw: \n[pty-3 · input_wait · 3 ms]");
        assert_eq!(reply.structured["echo"], json!(true));
    }
}
