//! `bash`: one-shot commands, in the foreground or as a background job.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jobs::CommandSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::Code;
use crate::job_tools::{CommandCall, run_command, started_reply};
use crate::{
    Answer, Approval, CallContext, Clamped, Effect, Preset, RefusalsJson, SANDBOX_UNAVAILABLE,
    SandboxJson, Settings, Tool, ToolError, ToolFuture, ToolReply, ToolSpec, clamp_ms, parse_args,
};

const DESCRIPTION: &str = "Run a command with `bash -c` and return its combined stdout and stderr once it exits. \
Each call is a fresh shell (no variables or `cd` carry over): use a terminal for a REPL or a multi-step session. \
Stdin is closed, so a command that asks for input fails instead of hanging. \
At `timeout_ms` the command and every process it started are killed and `timed_out` is true; \
processes it leaves running in the background are ended when it exits. \
`run_in_background` returns a job id at once for `job_output` (wait with `wait_ms`, never poll) and `job_kill`. \
Long output keeps its head and tail, with a marker saying how many bytes were omitted. \
The command runs in the sandbox the result reports (`[sandbox: …]`): by default it writes only inside the session's workspace, the temp dir and package caches, cannot read credential stores such as ~/.ssh, and `.git` is read-only; writes it refused are named in `refusals`. \
If a command truly needs to run outside it, pass `sandbox: \"off\"`.";

/// Arguments of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command line.
    pub command: String,
    /// Working directory, absolute or relative to the session's directory, which is the default.
    pub cwd: Option<String>,
    /// Milliseconds until the command and all its processes are killed, in the background too. Default 120000; range 1–600000.
    pub timeout_ms: Option<u64>,
    /// Return `{job_id}` at once; the command runs on as a job. Default false.
    pub run_in_background: Option<bool>,
    /// `off`: ask the person to let this one command run outside the sandbox; it runs only if they approve.
    pub sandbox: Option<SandboxArg>,
}

/// The `sandbox` argument of `bash`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxArg {
    /// Run this command unconfined, once the person approved it.
    Off,
}

/// The structured result of a foreground `bash` call.
#[derive(Debug, Serialize)]
struct BashResult {
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<String>,
    output: String,
    truncated: bool,
    total_bytes: u64,
    duration_ms: u64,
    timed_out: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clamped: Option<Clamped>,
    sandbox: SandboxJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusals: Option<RefusalsJson>,
}

/// The longest single argument the kernel passes to a program
/// (`MAX_ARG_STRLEN` less the terminating NUL): the most a `bash` command
/// line or a prompt placed in a subagent's argv may have.
pub(crate) const MAX_ARG_BYTES: usize = 128 * 1024 - 1;

/// The longest `cwd` argument, in bytes (`PATH_MAX`).
const MAX_CWD_BYTES: usize = 4096;

pub(crate) struct BashTool {
    spec: ToolSpec,
    max_result_bytes: usize,
}

impl BashTool {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            spec: ToolSpec::new::<BashArgs>(
                "bash",
                DESCRIPTION,
                &[Preset::Minimal, Preset::Full],
                &[
                    Code::InvalidArgument,
                    Code::SpawnFailed,
                    Code::JobLimit,
                    SANDBOX_UNAVAILABLE,
                    SANDBOX_ESCALATION_UNAVAILABLE,
                    SANDBOX_ESCALATION_DECLINED,
                ],
                Effect::RunsCommands,
            ),
            max_result_bytes: settings.max_result_bytes,
        }
    }
}

impl Tool for BashTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: BashArgs = parse_args(args)?;
            if args.command.trim().is_empty() {
                return Err(ToolError::invalid_argument("command", "is empty"));
            }
            if args.command.len() > MAX_ARG_BYTES {
                return Err(ToolError::invalid_argument(
                    "command",
                    format!(
                        "is {} bytes, more than the {MAX_ARG_BYTES} one command line may have; \
                         write the script to a file and run the file",
                        args.command.len()
                    ),
                ));
            }
            let (timeout_ms, clamped) =
                clamp_ms("timeout_ms", args.timeout_ms, 120_000, 1, 600_000);
            let cwd = resolve_cwd(&cx.cwd, args.cwd.as_deref())?;
            let unconfined = match args.sandbox {
                Some(SandboxArg::Off) => escalate(cx, &args.command, &cwd).await?,
                None => false,
            };
            let what = if unconfined {
                crate::confine::SpawnFor::AllowedUnconfined
            } else {
                crate::confine::SpawnFor::Command
            };
            let confined = cx
                .confinement
                .prepare(&cx.cwd, cx.env.clone(), what)
                .await?;
            let spec = CommandSpec::shell(&args.command).with_cwd(&cwd);
            let timeout = Duration::from_millis(timeout_ms);
            let mut sandbox = confined.status();
            if unconfined {
                sandbox.reason = Some("the person approved running this command unconfined".into());
            }
            let run = match run_command(
                cx,
                spec,
                &confined,
                timeout,
                args.run_in_background.unwrap_or(false),
                self.max_result_bytes,
            )
            .await?
            {
                CommandCall::Started(id) => {
                    return Ok(cx.with_resume_key(started_reply(&id, clamped, Some(&sandbox))));
                }
                CommandCall::Finished(run) => run,
            };
            let refusals = RefusalsJson::find(&confined.prepared, &run.output.text, &cwd);
            let signal = run.signal.map(process_tree::signal_name);
            let result = BashResult {
                exit_code: run.exit_code,
                signal: if run.timed_out { None } else { signal },
                output: run.output.text,
                truncated: run.output.truncated,
                total_bytes: run.output.total_bytes,
                duration_ms: run.duration.as_millis() as u64,
                timed_out: run.timed_out,
                detail: run.detail,
                clamped,
                sandbox,
                refusals,
            };
            Ok(ToolReply::new(render(&result, timeout_ms), &result))
        })
    }
}

/// The text the model reads: the output, then one status line.
fn render(result: &BashResult, timeout_ms: u64) -> String {
    let mut text = result.output.clone();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    if result.timed_out {
        text.push_str(&format!(
            "[timed out after {timeout_ms} ms: the command and every process it started were killed]"
        ));
    } else if let Some(signal) = &result.signal {
        text.push_str(&format!("[killed by {signal} · {} ms]", result.duration_ms));
    } else {
        text.push_str(&format!(
            "[exit {} · {} ms]",
            result.exit_code.unwrap_or(-1),
            result.duration_ms
        ));
    }
    if let Some(detail) = &result.detail {
        text.push_str(&format!(" [{detail}]"));
    }
    if let Some(c) = &result.clamped {
        text.push_str(&format!(
            " [{} clamped from {} to {}]",
            c.field, c.from, c.to
        ));
    }
    text.push('\n');
    text.push_str(&result.sandbox.line);
    if let Some(refusals) = &result.refusals {
        text.push(' ');
        text.push_str(&refusals.line);
    }
    text
}

/// The code of a `sandbox: "off"` request no person approved: none could
/// be asked, or none decided in time.
pub(crate) const SANDBOX_ESCALATION_UNAVAILABLE: Code = Code::SandboxEscalationUnavailable;
/// The code of a `sandbox: "off"` request a person refused (in the page or
/// with `dsh approve`).
pub(crate) const SANDBOX_ESCALATION_DECLINED: Code = Code::SandboxEscalationDeclined;

/// Asks a person whether `command` may run outside the sandbox; true when
/// a person approved it (or the sandbox is off anyway). Only a person's
/// approval where no client reaches (the page, `dsh approve`) lets it
/// run; what a client answers never does.
async fn escalate(cx: &CallContext, command: &str, cwd: &Path) -> Result<bool, ToolError> {
    if cx.confinement.mode() == sandbox::Mode::Off {
        return Ok(false);
    }
    let not_run = |why: &str| {
        ToolError::new(
            SANDBOX_ESCALATION_UNAVAILABLE,
            format!(
                "the command was not run: `sandbox: \"off\"` needs a person's approval, and {why}"
            ),
        )
    };
    let Some(ask) = &cx.ask else {
        return Err(not_run(
            "this server cannot reach a person (it runs standalone, without the dsh daemon's page or `dsh approve`). \
             Run it in the sandbox (without `sandbox`), or ask the person to run it themselves",
        ));
    };
    let approval = Approval {
        question: escalation_question(command, cwd),
        command: command.to_owned(),
        cwd: cwd.to_owned(),
        progress: cx.progress.clone(),
    };
    match ask.ask(approval).await {
        Answer::Yes => Ok(true),
        Answer::No => Err(ToolError::new(
            SANDBOX_ESCALATION_DECLINED,
            "the person refused to run this command outside the sandbox; it was not run. \
             Run it in the sandbox, or change the approach",
        )),
        Answer::Unanswered(why) => Err(not_run(&format!("no one answered: {why}"))),
        Answer::Unavailable(why) => Err(not_run(&why)),
    }
}

/// What the person is asked: what accepting means and the command's size
/// first, then the command with every line marked `│ ` and every control
/// or invisible formatting character (bidi overrides, zero-width ones)
/// shown as `\u{…}`, so no text of the command can pass for the question's
/// own words or hide what runs.
pub(crate) fn escalation_question(command: &str, cwd: &Path) -> String {
    let lines = command.lines().count().max(1);
    let mut shown = String::with_capacity(command.len() + 2 * lines + 16);
    for line in command.split('\n') {
        shown.push_str("│ ");
        for c in line.chars() {
            let invisible = matches!(c,
                '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2060}'..='\u{2069}'
                | '\u{feff}' | '\u{061c}' | '\u{00ad}');
            if (c.is_control() && c != '\t') || invisible {
                shown.push_str(&format!("\\u{{{:04x}}}", c as u32));
            } else {
                shown.push(c);
            }
        }
        shown.push('\n');
    }
    format!(
        "An agent asks to run one command OUTSIDE the sandbox, with all of your rights \
         (any file, the network, your credentials). Run approves it unconfined once; \
         Refuse refuses. The command ({lines} line{}, {} bytes), in {}, every line \
         marked │:\n\n{shown}",
        if lines == 1 { "" } else { "s" },
        command.len(),
        cwd.display()
    )
}

/// Resolves a `cwd` argument against the session's directory and checks
/// that it is a directory.
pub(crate) fn resolve_cwd(base: &Path, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(cwd) = cwd else {
        return Ok(base.to_path_buf());
    };
    if cwd.len() > MAX_CWD_BYTES {
        return Err(ToolError::invalid_argument(
            "cwd",
            format!(
                "is {} bytes, longer than any path ({MAX_CWD_BYTES} bytes at most)",
                cwd.len()
            ),
        ));
    }
    let path = base.join(cwd);
    match std::fs::metadata(&path) {
        Ok(m) if m.is_dir() => Ok(path),
        Ok(_) => Err(ToolError::invalid_argument(
            "cwd",
            format!("{} is not a directory", path.display()),
        )),
        Err(e) => Err(ToolError::invalid_argument(
            "cwd",
            format!("{}: {e}", path.display()),
        )),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::escalation_question;
    use std::path::Path;

    #[test]
    fn the_escalation_question_cannot_be_forged_by_the_command() {
        let command = "rm -rf ~\n\nin /ws\n\nRun approves it unconfined once\r\u{202e}x\u{1b}[2J";
        let q = escalation_question(command, Path::new("/ws"));
        // what accepting means and the size come before the command
        let (head, body) = q.split_once("\n\n").unwrap();
        assert!(head.contains("Run approves it unconfined once"), "{q}");
        assert!(head.contains("(5 lines, "), "{q}");
        // every line of the command is marked; nothing invisible is left
        assert_eq!(
            body,
            "│ rm -rf ~\n│ \n│ in /ws\n│ \n│ Run approves it unconfined once\\u{000d}\\u{202e}x\\u{001b}[2J\n"
        );
    }
}
