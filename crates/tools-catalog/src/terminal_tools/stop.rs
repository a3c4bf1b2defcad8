//! `terminal_signal` and `terminal_close`: stopping a program, ending a
//! terminal, and replies that claim no more than was verified.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use terminal_seam::{CloseKind, TerminalId, TerminalSignal};

use super::{TerminalCloseTool, TerminalSignalTool, exit_json, parse_id, terminal_error};
use crate::error::Code;
use crate::{CallContext, Effect, Preset, Tool, ToolFuture, ToolReply, ToolSpec, parse_args};

/// A signal the model may send.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
pub enum SignalArg {
    /// Interrupt (Ctrl-C).
    #[serde(rename = "SIGINT")]
    Int,
    /// Ask to terminate.
    #[serde(rename = "SIGTERM")]
    Term,
    /// Kill the foreground program (never the terminal's own shell).
    #[serde(rename = "SIGKILL")]
    Kill,
    /// Quit with a core dump (Ctrl-\).
    #[serde(rename = "SIGQUIT")]
    Quit,
    /// Suspend (Ctrl-Z).
    #[serde(rename = "SIGTSTP")]
    Tstp,
    /// Resume a suspended program.
    #[serde(rename = "SIGCONT")]
    Cont,
    /// Hang up.
    #[serde(rename = "SIGHUP")]
    Hup,
}

impl From<SignalArg> for TerminalSignal {
    fn from(s: SignalArg) -> Self {
        match s {
            SignalArg::Int => TerminalSignal::Int,
            SignalArg::Term => TerminalSignal::Term,
            SignalArg::Kill => TerminalSignal::Kill,
            SignalArg::Quit => TerminalSignal::Quit,
            SignalArg::Tstp => TerminalSignal::Tstp,
            SignalArg::Cont => TerminalSignal::Cont,
            SignalArg::Hup => TerminalSignal::Hup,
        }
    }
}

/// Arguments of `terminal_signal`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SignalArgs {
    /// The terminal's id (`pty-N`).
    pub id: String,
    /// The signal.
    pub signal: SignalArg,
}

impl TerminalSignalTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<SignalArgs>(
            "terminal_signal",
            "Send a signal to the program in the foreground of a terminal (SIGINT interrupts it, like Ctrl-C). \
SIGKILL is refused for the terminal's own shell: to end the terminal use `terminal_close`.",
            &[Preset::Full],
            &[
                Code::NoSession,
                Code::ForeignSession,
                Code::SessionClosing,
                Code::SessionExited,
                Code::UseClose,
                Code::InvalidArgument,
            ],
            Effect::EndsOwnWork { idempotent: false },
        ))
    }
}

impl Tool for TerminalSignalTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: SignalArgs = parse_args(args)?;
            let id = parse_id(&args.id)?;
            let signal = TerminalSignal::from(args.signal);
            let outcome = cx
                .runtime
                .terminals
                .signal(&cx.owner, id, signal)
                .await
                .map_err(terminal_error)?;
            Ok(ToolReply {
                text: format!(
                    "{} sent to process group {} of {id}",
                    signal.as_str(),
                    outcome.delivered_to_pgid
                ),
                structured: json!({ "delivered_to_pgid": outcome.delivered_to_pgid }),
            })
        })
    }
}

/// Arguments of `terminal_close`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CloseArgs {
    /// The terminal's id (`pty-N`).
    pub id: String,
}

impl TerminalCloseTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<CloseArgs>(
            "terminal_close",
            "Close a terminal: end every process of its session, background jobs included, and return once none is left (any that cannot be ended are named); the terminal is hung up.",
            &[Preset::Full],
            &[Code::NoSession, Code::ForeignSession, Code::InvalidArgument],
            Effect::EndsOwnWork { idempotent: true },
        ))
    }
}

impl Tool for TerminalCloseTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: CloseArgs = parse_args(args)?;
            let id = parse_id(&args.id)?;
            let outcome = cx
                .runtime
                .terminals
                .close(&cx.owner, id)
                .await
                .map_err(terminal_error)?;
            Ok(close_reply(id, &outcome))
        })
    }
}

/// The reply of `terminal_close`: it claims no more than the close verified.
fn close_reply(id: TerminalId, outcome: &terminal_seam::CloseOutcome) -> ToolReply {
    let (exit_code, signal) = exit_json(outcome.exit);
    let mut structured = json!({ "outcome": outcome.outcome.as_str() });
    if !exit_code.is_null() {
        structured["exit_code"] = exit_code;
    }
    if !signal.is_null() {
        structured["signal"] = signal;
    }
    let text = match outcome.outcome {
        CloseKind::Closed if outcome.survivors.is_empty() => {
            format!("{id} closed; no process of its session is left")
        }
        CloseKind::Closed => {
            structured["survivors"] = json!(
                outcome
                    .survivors
                    .iter()
                    .map(|p| json!({ "pid": p.pid, "command": p.command }))
                    .collect::<Vec<_>>()
            );
            let named: Vec<String> = outcome
                .survivors
                .iter()
                .map(|p| format!("pid {} ({})", p.pid, p.command))
                .collect();
            format!(
                "{id} closed, but {} process(es) of its session survived SIGKILL: {}; they may be stuck in the kernel — check them with `ps -o pid,stat,wchan -p <pid>`",
                named.len(),
                named.join(", ")
            )
        }
        CloseKind::AlreadyClosing => format!("{id} was already closing"),
    };
    ToolReply { text, structured }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use terminal_seam::{CloseOutcome, SurvivingProcess};

    #[test]
    fn a_close_that_left_survivors_names_them_and_says_so() {
        let reply = close_reply(
            TerminalId(3),
            &CloseOutcome {
                outcome: CloseKind::Closed,
                exit: None,
                survivors: vec![SurvivingProcess {
                    pid: 4242,
                    command: "fuse-stuck --mount /x".to_owned(),
                }],
            },
        );
        assert_eq!(
            reply.text,
            "pty-3 closed, but 1 process(es) of its session survived SIGKILL: pid 4242 (fuse-stuck --mount /x); they may be stuck in the kernel — check them with `ps -o pid,stat,wchan -p <pid>`"
        );
        assert_eq!(
            reply.structured,
            json!({
                "outcome": "closed",
                "survivors": [{ "pid": 4242, "command": "fuse-stuck --mount /x" }]
            })
        );
        let clean = close_reply(
            TerminalId(3),
            &CloseOutcome {
                outcome: CloseKind::Closed,
                exit: Some(terminal_seam::ExitStatus {
                    code: None,
                    signal: Some(1),
                }),
                survivors: Vec::new(),
            },
        );
        assert_eq!(
            clean.text,
            "pty-3 closed; no process of its session is left"
        );
    }
}
