//! `bash`: one-shot commands, in the foreground or as a background job.

use std::path::{Path, PathBuf};
use std::time::Duration;

use jobs::CommandSpec;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::job_tools::{CommandCall, run_command, started_reply};
use crate::{
    CallContext, Clamped, Preset, Settings, Tool, ToolError, ToolFuture, ToolReply, ToolSpec,
    clamp_ms, parse_args,
};

const DESCRIPTION: &str = "Run a command with `bash -c` and return its combined stdout and stderr once it exits. \
Each call starts a fresh shell: nothing (variables, `cd`) carries over, so use a terminal for a REPL or a multi-step session. \
Stdin is closed, so a command that asks for input fails instead of hanging. \
At `timeout_ms` the command and every process it started are killed and `timed_out` is true; \
processes it leaves running in the background are ended when it exits. \
With `run_in_background` it returns a job id at once: read the output with `job_output` (use `wait_ms` instead of polling), stop it with `job_kill`. \
Long output keeps its head and tail, with a marker saying how many bytes were omitted.";

/// Arguments of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command line, run by `bash -c`.
    pub command: String,
    /// Working directory: absolute, or relative to the session's directory. Default: the session's directory.
    pub cwd: Option<String>,
    /// Kill the command and all its processes after this many milliseconds (background jobs too). Default 120000; range 1–600000.
    pub timeout_ms: Option<u64>,
    /// Return `{job_id}` at once and keep the command running as a job. Default false.
    pub run_in_background: Option<bool>,
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
                &["INVALID_ARGUMENT", "SPAWN_FAILED", "JOB_LIMIT"],
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
            let spec = CommandSpec::shell(&args.command).with_cwd(cwd);
            let timeout = Duration::from_millis(timeout_ms);
            let run = match run_command(
                cx,
                spec,
                timeout,
                args.run_in_background.unwrap_or(false),
                self.max_result_bytes,
            )
            .await?
            {
                CommandCall::Started(id) => return Ok(started_reply(&id, clamped)),
                CommandCall::Finished(run) => run,
            };
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
    text
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
