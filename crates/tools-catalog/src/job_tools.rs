//! `job_list`, `job_output`, `job_kill` and `subagent`: one registry for
//! every kind of background work.

use std::sync::Arc;
use std::time::Duration;

use jobs::{CommandProducer, CommandSpec, JobError, JobInfo, JobStatus, StartOptions};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::bash::{MAX_ARG_BYTES, resolve_cwd};
use crate::error::Code;
use crate::{
    CallContext, Clamped, ConfinedSpawn, Effect, Preset, RefusalsJson, SANDBOX_UNAVAILABLE,
    SandboxJson, Settings, Tool, ToolError, ToolFuture, ToolReply, ToolSpec, clamp_ms, parse_args,
};

/// Converts a registry error to the contract's envelope.
pub(crate) fn job_error(e: JobError) -> ToolError {
    ToolError {
        code: e.code(),
        message: e.to_string(),
        retryable: e.retryable(),
        details: Default::default(),
    }
}

/// What [`run_command`] did.
pub(crate) enum CommandCall {
    /// Started as a background job with this id.
    Started(String),
    /// Ran in the foreground to the end (or its deadline).
    Finished(jobs::CommandRun),
}

/// Runs a command for `bash` or `subagent`: as a background job of the
/// caller (its deadline enforced by the registry), or in the foreground.
pub(crate) async fn run_command(
    cx: &CallContext,
    spec: CommandSpec,
    confined: &ConfinedSpawn,
    timeout: Duration,
    background: bool,
    max_result_bytes: usize,
) -> Result<CommandCall, ToolError> {
    let mut spec = spec;
    let spec_cwd = spec.cwd.clone();
    spec.base_env = Some(confined.env.clone());
    let steps = confined.child_steps();
    if let Some(enter) = steps.pid_namespace {
        // SAFETY: a prepared sandbox's steps only make system calls.
        spec = unsafe { spec.with_pid_namespace(enter) };
    }
    if let Some(step) = steps.program {
        // SAFETY: as above.
        spec = unsafe { spec.with_pre_exec(step) };
    }
    if background {
        let started = cx
            .runtime
            .jobs
            .start(
                &cx.owner,
                CommandProducer::boxed(spec),
                StartOptions {
                    timeout: Some(timeout),
                },
            )
            .await
            .map_err(job_error)?;
        let cwd = spec_cwd.unwrap_or_else(|| cx.cwd.clone());
        cx.runtime
            .remember_sandbox(&started.id, confined.prepared.clone(), &cwd);
        return Ok(CommandCall::Started(started.id));
    }
    // Counted against the caller's foreground limit while it runs.
    let _slot = cx
        .runtime
        .jobs
        .begin_foreground(&cx.owner)
        .map_err(job_error)?;
    // The last lines of output, for progress reports while it runs.
    let tail = Arc::new(std::sync::Mutex::new(String::new()));
    let keep = tail.clone();
    let on_text = move |piece: &str| {
        if let Ok(mut t) = keep.lock() {
            t.push_str(piece);
            if t.len() > 4096 {
                let mut cut = t.len() - 2048;
                while !t.is_char_boundary(cut) {
                    cut += 1;
                }
                t.drain(..cut);
            }
        }
    };
    let last_line = move || {
        let line = tail.lock().ok().and_then(|t| last_line_of(&t));
        Box::pin(async move { line }) as futures::future::BoxFuture<'static, Option<String>>
    };
    let run = crate::context::with_ticks(
        cx.progress.as_ref(),
        jobs::run_command_observed(&spec, Some(timeout), max_result_bytes, on_text),
        last_line,
    )
    .await
    .map_err(|e| ToolError {
        code: e.code,
        message: e.message,
        retryable: e.retryable,
        details: Default::default(),
    })?;
    Ok(CommandCall::Finished(run))
}

/// The last non-empty line of `text`, at most 200 characters.
pub(crate) fn last_line_of(text: &str) -> Option<String> {
    text.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(200).collect())
}

/// The one-line message that tells a model a background job settled.
pub fn settled_job_message(job: &JobInfo) -> String {
    let mut message = format!(
        "job {} ({}) {}",
        job.id,
        job.kind.as_str(),
        job.status.as_str()
    );
    if let Some(code) = job.exit_code {
        message.push_str(&format!(" with exit code {code}"));
    }
    if let Some(detail) = &job.detail {
        message.push_str(&format!(": {detail}"));
    }
    message.push_str(&format!(
        "; read its output with job_output {{\"job_id\": \"{}\"}}",
        job.id
    ));
    message
}

/// The reply of a call that started a background job.
pub(crate) fn started_reply(
    id: &str,
    clamped: Option<Clamped>,
    sandbox: Option<&SandboxJson>,
) -> ToolReply {
    let mut structured = json!({ "job_id": id });
    let mut text = format!(
        "started {id} in the background: read its output with job_output {{\"job_id\": \"{id}\", \"wait_ms\": 30000}} (it returns as soon as there is output), stop it with job_kill"
    );
    if let Some(sandbox) = sandbox {
        structured["sandbox"] = json!(sandbox);
        text.push('\n');
        text.push_str(&sandbox.line);
    }
    if let Some(c) = clamped {
        structured["clamped"] = json!(c);
    }
    ToolReply { text, structured }
}

fn job_json(job: &JobInfo) -> Value {
    let mut v = json!({
        "id": job.id,
        "kind": job.kind.as_str(),
        "label": job.label,
        "status": job.status.as_str(),
        "started_at": job.started_at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        "output_bytes": job.output_bytes,
    });
    if let Some(code) = job.exit_code {
        v["exit_code"] = json!(code);
    }
    if let Some(detail) = &job.detail {
        v["detail"] = json!(detail);
    }
    if let Some(at) = job.finished_at {
        v["finished_at"] = json!(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
    }
    v
}

/// One status word, with its exit code or detail.
fn status_words(status: JobStatus, exit_code: Option<i32>, detail: Option<&str>) -> String {
    let mut s = status.as_str().to_owned();
    if let Some(code) = exit_code {
        s.push_str(&format!(", exit {code}"));
    }
    if let Some(detail) = detail {
        s.push_str(&format!(": {detail}"));
    }
    s
}

/// A job status as an argument.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum StatusArg {
    /// Still running.
    Running,
    /// Being stopped.
    Stopping,
    /// Exited by itself.
    Completed,
    /// Could not run or was ended from outside.
    Failed,
    /// Ended by `job_kill`.
    Killed,
    /// Ended at its deadline.
    TimedOut,
}

impl From<StatusArg> for JobStatus {
    fn from(s: StatusArg) -> Self {
        match s {
            StatusArg::Running => JobStatus::Running,
            StatusArg::Stopping => JobStatus::Stopping,
            StatusArg::Completed => JobStatus::Completed,
            StatusArg::Failed => JobStatus::Failed,
            StatusArg::Killed => JobStatus::Killed,
            StatusArg::TimedOut => JobStatus::TimedOut,
        }
    }
}

/// Arguments of `job_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobListArgs {
    /// Only jobs with this status. Default: all of your jobs.
    pub status: Option<StatusArg>,
}

pub(crate) struct JobListTool(ToolSpec);

impl JobListTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<JobListArgs>(
            "job_list",
            "List your background jobs (from `bash`, `terminal_send` and `subagent` with `run_in_background`), oldest first, with their status and how much output each has.",
            &[Preset::Full],
            &[Code::InvalidArgument],
            Effect::ReadOnly,
        ))
    }
}

impl Tool for JobListTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: JobListArgs = parse_args(args)?;
            let jobs = cx
                .runtime
                .jobs
                .list(&cx.owner, args.status.map(JobStatus::from));
            let mut text = String::new();
            if jobs.is_empty() {
                text.push_str("no jobs");
            }
            for job in &jobs {
                text.push_str(&format!(
                    "{}  {}  {} bytes  {}\n",
                    job.id,
                    status_words(job.status, job.exit_code, job.detail.as_deref()),
                    job.output_bytes,
                    job.label.lines().next().unwrap_or_default()
                ));
            }
            let structured = json!({ "jobs": jobs.iter().map(job_json).collect::<Vec<_>>() });
            Ok(ToolReply {
                text: text.trim_end().to_owned(),
                structured,
            })
        })
    }
}

/// Arguments of `job_output`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobOutputArgs {
    /// The job's id, e.g. `bash-1`.
    pub job_id: String,
    /// Byte cursor to read from (a previous `next`). Default: where your last read of this job ended.
    pub since: Option<u64>,
    /// Most bytes to return. Default and most: the result limit (32768 unless configured).
    pub max_bytes: Option<u64>,
    /// Wait up to this many milliseconds for new output or the job's end. Default 0; range 0–600000.
    pub wait_ms: Option<u64>,
}

#[derive(Serialize)]
struct JobOutputResult {
    output: String,
    from: u64,
    next: u64,
    dropped: u64,
    status: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clamped: Option<Clamped>,
    /// What the job's sandbox refused, as this output shows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    refusals: Option<RefusalsJson>,
}

pub(crate) struct JobOutputTool(ToolSpec, usize);

impl JobOutputTool {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self(
            ToolSpec::new::<JobOutputArgs>(
                "job_output",
                "Read a background job's output from a byte cursor, without consuming it (the same `since` returns the same text). \
With `wait_ms` the call waits until new output arrives or the job ends, so never poll in a loop: pass the last `next` as `since` and a generous `wait_ms`. \
Paths or connections the sandbox refused, as the output shows them, are named in `refusals`.",
                &[Preset::Full],
                &[Code::NoJob, Code::ForeignJob, Code::InvalidArgument],
                Effect::ReadOnly,
            ),
            settings.max_result_bytes,
        )
    }
}

impl Tool for JobOutputTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: JobOutputArgs = parse_args(args)?;
            let (wait_ms, wait_clamped) = clamp_ms("wait_ms", args.wait_ms, 0, 0, 600_000);
            let limit = self.1 as u64;
            let (max_bytes, bytes_clamped) = clamp_ms("max_bytes", args.max_bytes, limit, 1, limit);
            let clamped = wait_clamped.or(bytes_clamped);
            let read = cx
                .runtime
                .jobs
                .output(
                    &cx.owner,
                    &args.job_id,
                    args.since,
                    Some(max_bytes as usize),
                    Duration::from_millis(wait_ms),
                )
                .await
                .map_err(job_error)?;
            let mut read = read;
            let held = redact_job_read(cx, &args.job_id, &mut read).await;
            let mut text = read.output.clone();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            if read.dropped > 0 {
                text.insert_str(
                    0,
                    &format!(
                        "[{} earlier bytes were dropped from the job's buffer]\n",
                        read.dropped
                    ),
                );
            }
            text.push_str(&format!(
                "[{} {} · next {}]",
                args.job_id,
                status_words(read.status, read.exit_code, read.detail.as_deref()),
                read.next
            ));
            if held > 0 {
                text.push_str(&format!(
                    "\n[{held} bytes before next may begin a secret: held back; the next read shows them]"
                ));
            }
            let refusals = cx
                .runtime
                .sandbox_of(&args.job_id)
                .and_then(|s| RefusalsJson::find(&s.prepared, &read.output, &s.current_dir()));
            if let Some(refusals) = &refusals {
                text.push('\n');
                text.push_str(&refusals.line);
            }
            let result = JobOutputResult {
                output: read.output,
                from: read.from,
                next: read.next,
                dropped: read.dropped,
                status: read.status.as_str(),
                exit_code: read.exit_code,
                detail: read.detail,
                clamped,
                refusals,
            };
            let mut reply = ToolReply::new(text, &result);
            if held > 0 {
                reply.structured["held"] = json!(held);
            }
            Ok(reply)
        })
    }
}

/// Arguments of `job_kill`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct JobKillArgs {
    /// The job's id, e.g. `bash-1`.
    pub job_id: String,
}

pub(crate) struct JobKillTool(ToolSpec);

impl JobKillTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<JobKillArgs>(
            "job_kill",
            "Stop a background job: SIGINT, then SIGTERM, then SIGKILL to every process it started; return once none is left. A background `terminal_send` is interrupted instead; its terminal stays open. A job that already ended reports `already_finished`.",
            &[Preset::Full],
            &[Code::NoJob, Code::ForeignJob, Code::InvalidArgument],
            Effect::EndsOwnWork { idempotent: true },
        ))
    }
}

impl Tool for JobKillTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: JobKillArgs = parse_args(args)?;
            let report = cx
                .runtime
                .jobs
                .kill(&cx.owner, &args.job_id)
                .await
                .map_err(job_error)?;
            let text = format!(
                "{}: {} ({})",
                args.job_id,
                report.outcome.as_str(),
                status_words(
                    report.job.status,
                    report.job.exit_code,
                    report.job.detail.as_deref()
                )
            );
            Ok(ToolReply {
                text,
                structured: json!({
                    "outcome": report.outcome.as_str(),
                    "status": report.job.status.as_str(),
                }),
            })
        })
    }
}

/// Arguments of `subagent`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubagentArgs {
    /// The task for the agent, self-contained: it sees nothing of this conversation.
    pub prompt: String,
    /// Working directory, absolute or relative to the session's directory, which is the default.
    pub cwd: Option<String>,
    /// Stop the agent after this many milliseconds. Default 600000 unless configured; range 1–3600000.
    pub timeout_ms: Option<u64>,
    /// Return `{job_id}` at once and let the agent run as a job. Default false.
    pub run_in_background: Option<bool>,
}

#[derive(Serialize)]
struct SubagentResult {
    output: String,
    exit_code: Option<i32>,
    duration_ms: u64,
    truncated: bool,
    total_bytes: u64,
    timed_out: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    detail: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    clamped: Option<Clamped>,
    sandbox: SandboxJson,
    #[serde(skip_serializing_if = "Option::is_none")]
    refusals: Option<RefusalsJson>,
}

/// The longest prompt fed to a subagent on stdin, in bytes.
const MAX_STDIN_PROMPT_BYTES: usize = 1024 * 1024;

/// A prompt must fit where it goes: one argument of the agent's argv (the
/// kernel's limit), or stdin (bounded by [`MAX_STDIN_PROMPT_BYTES`]).
fn check_prompt_size(spec: &CommandSpec, prompt_bytes: usize) -> Result<(), ToolError> {
    let (too_long, limit) = match spec.stdin {
        Some(_) => (
            prompt_bytes > MAX_STDIN_PROMPT_BYTES,
            MAX_STDIN_PROMPT_BYTES,
        ),
        None => (
            spec.argv.iter().any(|a| a.len() > MAX_ARG_BYTES),
            MAX_ARG_BYTES,
        ),
    };
    if too_long {
        return Err(ToolError::invalid_argument(
            "prompt",
            format!(
                "is {prompt_bytes} bytes, more than the {limit} the agent command can take; \
                 write the details to a file and point the prompt at it"
            ),
        ));
    }
    Ok(())
}

/// The configured agent command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SubagentSettings {
    /// The argv; `{prompt}` is replaced by the prompt (without it, the
    /// prompt goes to stdin).
    pub command: Vec<String>,
    /// The default time limit.
    pub timeout_ms: Option<u64>,
}

pub(crate) struct SubagentTool {
    spec: ToolSpec,
    settings: Option<SubagentSettings>,
    max_result_bytes: usize,
}

impl SubagentTool {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            spec: ToolSpec::new::<SubagentArgs>(
                "subagent",
                "Hand a self-contained task to another coding agent and return its final output. \
Use `run_in_background` to keep working meanwhile: it returns a job id for `job_output` / `job_kill`. \
The agent runs in `bash`'s sandbox (the result reports it): it too writes only inside the workspace, the temp dir and package caches.",
                &[Preset::Full],
                &[
                    Code::SubagentUnavailable,
                    Code::InvalidArgument,
                    Code::SpawnFailed,
                    Code::JobLimit,
                    SANDBOX_UNAVAILABLE,
                ],
                Effect::RunsCommands,
            ),
            settings: settings.subagent.clone(),
            max_result_bytes: settings.max_result_bytes,
        }
    }
}

impl Tool for SubagentTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: SubagentArgs = parse_args(args)?;
            let Some(settings) = &self.settings else {
                return Err(ToolError::new(
                    Code::SubagentUnavailable,
                    "no subagent command is configured on this server (the `[subagent] command` key of the dsh config); do the task yourself",
                ));
            };
            if args.prompt.trim().is_empty() {
                return Err(ToolError::invalid_argument("prompt", "is empty"));
            }
            let default = settings.timeout_ms.unwrap_or(600_000);
            let (timeout_ms, clamped) =
                clamp_ms("timeout_ms", args.timeout_ms, default, 1, 3_600_000);
            let cwd = resolve_cwd(&cx.cwd, args.cwd.as_deref())?;
            let spec = CommandSpec::subagent(&settings.command, &args.prompt)
                .map_err(job_error)?
                .with_cwd(&cwd);
            check_prompt_size(&spec, args.prompt.len())?;
            let confined = cx
                .confinement
                .prepare(&cx.cwd, cx.env.clone(), crate::confine::SpawnFor::Command)
                .await?;
            let sandbox = confined.status();
            let timeout = Duration::from_millis(timeout_ms);
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
            let result = SubagentResult {
                output: run.output.text,
                exit_code: run.exit_code,
                duration_ms: run.duration.as_millis() as u64,
                truncated: run.output.truncated,
                total_bytes: run.output.total_bytes,
                timed_out: run.timed_out,
                detail: run.detail,
                clamped,
                sandbox,
                refusals,
            };
            let mut text = result.output.clone();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&if result.timed_out {
                format!("[subagent timed out after {timeout_ms} ms and was stopped]")
            } else {
                format!(
                    "[subagent exit {} · {} ms]",
                    result.exit_code.unwrap_or(-1),
                    result.duration_ms
                )
            });
            text.push('\n');
            text.push_str(&result.sandbox.line);
            if let Some(refusals) = &result.refusals {
                text.push(' ');
                text.push_str(&refusals.line);
            }
            Ok(ToolReply::new(text, &result))
        })
    }
}

/// A job's output, redacted with the output around it (see
/// [`crate::redaction::redact_read`]): `from` moves back when it shows
/// what the previous read held back. Returns the bytes held back now. No
/// cursor of the owner moves for the look back.
async fn redact_job_read(cx: &CallContext, id: &str, read: &mut jobs::OutputRead) -> u64 {
    let read_range: crate::redaction::ReadRange<'_> = Box::new(move |since, len| {
        Box::pin(async move {
            match cx
                .runtime
                .jobs
                .output(&cx.owner, id, Some(since), Some(len), Duration::ZERO)
                .await
            {
                // A read returns at least a few bytes: keep what was asked.
                Ok(r) if r.from == since => r.output.get(..len).map(str::to_owned),
                _ => None,
            }
        })
    });
    // More may follow this read: the job runs, or its output goes on
    // past what this read returned.
    let total = cx
        .runtime
        .jobs
        .list(&cx.owner, None)
        .into_iter()
        .find(|j| j.id == id)
        .map_or(read.next, |j| j.output_bytes);
    let live = matches!(read.status, JobStatus::Running | JobStatus::Stopping) || read.next < total;
    let shown =
        crate::redaction::redact_read(cx, id, read.from, read.next, &read.output, live, read_range)
            .await;
    read.from = shown.from;
    read.output = shown.text;
    shown.held
}
