//! The six terminal tools: `terminal_open` and `terminal_list` here,
//! the others one module each.

mod read;
mod send;
mod stop;

pub(crate) use read::TerminalReadTool;

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use terminal_seam::{
    ChildStep, ExitStatus, OpenRequest, Owner, PidNamespace, PtyDir, TerminalError, TerminalId,
    TerminalStatus,
};

use crate::bash::resolve_cwd;
use crate::context::JobSandbox;
use crate::error::Code;
use crate::{
    CallContext, Effect, Preset, SANDBOX_UNAVAILABLE, Tool, ToolError, ToolFuture, ToolReply,
    ToolSpec, parse_args,
};

fn terminal_error(e: TerminalError) -> ToolError {
    ToolError {
        code: crate::error::terminal_code(&e),
        message: e.to_string(),
        retryable: e.retryable(),
        details: Default::default(),
    }
}

fn parse_id(id: &str) -> Result<TerminalId, ToolError> {
    id.parse().map_err(terminal_error)
}

fn status_json(status: TerminalStatus) -> Value {
    json!(status.as_str())
}

fn exit_json(exit: Option<ExitStatus>) -> (Value, Value) {
    match exit {
        Some(e) => (
            json!(e.code),
            json!(e.signal.map(process_tree::signal_name)),
        ),
        None => (Value::Null, Value::Null),
    }
}

macro_rules! simple_tool {
    ($name:ident) => {
        pub(crate) struct $name(ToolSpec);
    };
}

simple_tool!(TerminalOpenTool);
simple_tool!(TerminalSendTool);
simple_tool!(TerminalSignalTool);
simple_tool!(TerminalCloseTool);
simple_tool!(TerminalListTool);

/// The footer's mark of an input wait with echo off.
const ECHO_OFF: &str = " · echo off: the program asks for a secret";

const TERMINAL_ERRORS: &[Code] = &[
    Code::NoSession,
    Code::ForeignSession,
    Code::SessionClosing,
    Code::InvalidArgument,
];

/// Arguments of `terminal_open`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct OpenArgs {
    /// The program and its arguments, e.g. `["python3", "-q"]`. Default: an interactive bash whose prompt reports each command's exit code.
    pub command: Option<Vec<String>>,
    /// Working directory, absolute or relative to the session's directory, which is the default.
    pub cwd: Option<String>,
    /// Extra environment variables.
    pub env: Option<BTreeMap<String, String>>,
    /// A name for the terminal, unique among yours.
    pub name: Option<String>,
    /// Screen height in rows. Default 40; range 2–500, and rows × cols at most 100000.
    pub rows: Option<u16>,
    /// Screen width in columns. Default 160; range 10–500.
    pub cols: Option<u16>,
}

impl TerminalOpenTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<OpenArgs>(
            "terminal_open",
            "Start a persistent terminal (a real PTY) and return its id once the program is ready for input. \
Use it for REPLs, debuggers and anything interactive or multi-step: state (variables, `cd`, a running program) survives between `terminal_send` calls. \
Close it with `terminal_close` when done. \
`reason` is as for `terminal_send`; `input_wait` with `echo: false` means a password prompt. \
The program and everything typed into it run in `bash`'s sandbox, reported in the result (`[sandbox: …]`); `env` is applied after the environment policy.",
            &[Preset::Full],
            &[
                Code::SpawnFailed,
                Code::DuplicateName,
                Code::TerminalLimit,
                Code::InvalidArgument,
                SANDBOX_UNAVAILABLE,
            ],
            Effect::RunsCommands,
        ))
    }
}

impl Tool for TerminalOpenTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: OpenArgs = parse_args(args)?;
            let cwd = resolve_cwd(&cx.cwd, args.cwd.as_deref())?;
            let confined = cx
                .confinement
                .prepare(&cx.cwd, cx.env.clone(), crate::confine::SpawnFor::Command)
                .await?;
            let sandbox = confined.status();
            let steps = confined.child_steps();
            let defaults = OpenRequest::default();
            let request = OpenRequest {
                command: args.command,
                cwd: Some(cwd.clone()),
                env: args.env.unwrap_or_default().into_iter().collect(),
                name: args.name,
                rows: args.rows.unwrap_or(defaults.rows),
                cols: args.cols.unwrap_or(defaults.cols),
                base_env: Some(confined.env.clone()),
                pre_exec: steps.program.map(ChildStep),
                pid_namespace: steps.pid_namespace.map(|enter| PidNamespace {
                    enter: enter.map(ChildStep),
                }),
                pty_dir: confined.prepared.pty_dir().map(PtyDir),
            };
            let opened = cx
                .runtime
                .terminals
                .open(&cx.owner, request)
                .await
                .map_err(terminal_error)?;
            cx.runtime.remember(JobSandbox {
                id: opened.id.to_string(),
                prepared: confined.prepared.clone(),
                cwd,
                leader: process_tree::process_info(opened.program_pid as i32)
                    .map(|p| (opened.program_pid, p.start_time)),
            });
            let mut text = opened.output.clone();
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(&format!(
                "[{} opened{} · pid {} · {}]",
                opened.id,
                opened
                    .name
                    .as_ref()
                    .map(|n| format!(" as `{n}`"))
                    .unwrap_or_default(),
                opened.pid,
                opened.reason.as_str()
            ));
            if opened.echo == Some(false) {
                text.pop();
                text.push_str(ECHO_OFF);
                text.push(']');
            }
            text.push('\n');
            text.push_str(&sandbox.line);
            let mut structured = json!({
                "id": opened.id.to_string(),
                "pid": opened.pid,
                "status": status_json(opened.status),
                "output": opened.output,
                "reason": opened.reason.as_str(),
                "sandbox": sandbox,
            });
            if let Some(name) = opened.name {
                structured["name"] = json!(name);
            }
            if let Some(echo) = opened.echo {
                structured["echo"] = json!(echo);
            }
            Ok(cx.with_resume_key(ToolReply { text, structured }))
        })
    }
}

/// Arguments of `terminal_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Your resume key (`dsh-rk-…`, from an earlier reply of yours): after
    /// your client restarted, takes back your earlier terminals and jobs.
    pub resume: Option<String>,
}

impl TerminalListTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<ListArgs>(
            "terminal_list",
            "List your open terminals with their status and whether a send is in progress. \
After your client restarted, pass `resume` (the resume key an earlier reply gave you) to take back your terminals and jobs under their ids; read on from where you left off.",
            &[Preset::Full],
            &[
                Code::InvalidArgument,
                Code::ResumeKeyUnknown,
                Code::ResumeKeyInUse,
                Code::ResumeKeyForeign,
                Code::ResumeExpired,
                Code::ResumeNotEmpty,
                Code::ResumeBusy,
            ],
            Effect::ReadOnly,
        ))
    }
}

/// Takes back a detached agent's work for `terminal_list`'s `resume`:
/// the caller's owner from now on, and the reply's first line.
async fn resume_for(cx: &CallContext, key: &str) -> Result<(Owner, String), ToolError> {
    let Some(resume) = &cx.resume else {
        return Err(ToolError::new(
            Code::ResumeKeyUnknown,
            "this server keeps no work across a client restart ([daemon] detach_grace is 0, or it runs standalone), so no key takes anything back",
        ));
    };
    let resumed = resume.resume(key.trim()).await?;
    let jobs = cx.runtime.jobs.list(&resumed.owner, None).len();
    let line = if resumed.owner == cx.owner {
        "this resume key is already yours".to_owned()
    } else if resumed.detached_for.is_zero() {
        format!(
            "took over your terminals and {jobs} job(s) from your earlier connection, which is ended (job_list lists the jobs; terminal_read and job_output read on from where you left off)"
        )
    } else {
        format!(
            "resumed after {} s detached: your terminals and {jobs} job(s) are yours again (job_list lists the jobs; terminal_read and job_output read on from where you left off)",
            resumed.detached_for.as_secs()
        )
    };
    Ok((resumed.owner, line))
}

impl Tool for TerminalListTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: ListArgs = parse_args(args)?;
            let (owner, mut text) = match &args.resume {
                Some(key) => {
                    let (owner, line) = resume_for(cx, key).await?;
                    (owner, format!("{line}\n"))
                }
                None => (cx.owner.clone(), String::new()),
            };
            let terminals = cx.runtime.terminals.list(&owner).await;
            if terminals.is_empty() {
                text.push_str("no terminals (terminal_open starts one)");
            }
            let list: Vec<Value> = terminals
                .iter()
                .map(|t| {
                    let created = chrono::DateTime::<chrono::Utc>::from(t.created_at)
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                    text.push_str(&format!(
                        "{}{}  {}{}  pid {}  {}  {}\n",
                        t.id,
                        t.name
                            .as_ref()
                            .map(|n| format!(" ({n})"))
                            .unwrap_or_default(),
                        t.status.as_str(),
                        if t.active_send {
                            ", send in progress"
                        } else {
                            ""
                        },
                        t.pid,
                        t.command.join(" "),
                        t.cwd.display()
                    ));
                    json!({
                        "id": t.id.to_string(),
                        "name": t.name,
                        "pid": t.pid,
                        "command": t.command,
                        "cwd": t.cwd.display().to_string(),
                        "status": status_json(t.status),
                        "active_send": t.active_send,
                        "created_at": created,
                    })
                })
                .collect();
            let reply = ToolReply {
                text: text.trim_end().to_owned(),
                structured: json!({ "terminals": list }),
            };
            // A key is single-use: the work taken back gets a new one.
            Ok(if owner == cx.owner {
                reply
            } else {
                cx.with_resume_key(reply)
            })
        })
    }
}
