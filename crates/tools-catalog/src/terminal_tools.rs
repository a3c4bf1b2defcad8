//! The six terminal tools, and the `pty-send` job producer that runs a
//! send in the background.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use jobs::{Cancel, JobKind, OutputChunk, Producer, Settlement, StartError, StartOptions, Started};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use terminal_seam::{
    ChildStep, CloseKind, ExitStatus, OpenRequest, Owner, PtyDir, ReadOutcome, ReadRequest,
    SendInterrupt, SendOutcome, SendRequest, TerminalError, TerminalId, TerminalService,
    TerminalSignal, TerminalStatus,
};

use crate::bash::resolve_cwd;
use crate::context::JobSandbox;
use crate::job_tools::{job_error, started_reply};
use crate::{
    CallContext, Preset, RefusalsJson, SANDBOX_UNAVAILABLE, Settings, Tool, ToolError, ToolFuture,
    ToolReply, ToolSpec, clamp_ms, parse_args,
};

fn terminal_error(e: TerminalError) -> ToolError {
    ToolError {
        code: e.code(),
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

const TERMINAL_ERRORS: &[&str] = &[
    "NO_SESSION",
    "FOREIGN_SESSION",
    "SESSION_CLOSING",
    "INVALID_ARGUMENT",
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
                "SPAWN_FAILED",
                "DUPLICATE_NAME",
                "TERMINAL_LIMIT",
                "INVALID_ARGUMENT",
                SANDBOX_UNAVAILABLE,
            ],
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
                .prepare(&cx.cwd, cx.env.clone(), false)
                .await?;
            let sandbox = confined.status();
            let defaults = OpenRequest::default();
            let request = OpenRequest {
                command: args.command,
                cwd: Some(cwd.clone()),
                env: args.env.unwrap_or_default().into_iter().collect(),
                name: args.name,
                rows: args.rows.unwrap_or(defaults.rows),
                cols: args.cols.unwrap_or(defaults.cols),
                base_env: Some(confined.env.clone()),
                pre_exec: confined.step().map(ChildStep),
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
                leader: process_tree::process_info(opened.pid as i32)
                    .map(|p| (opened.pid, p.start_time)),
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
            Ok(ToolReply { text, structured })
        })
    }
}

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
`reason` says which: `prompt` (the shell is back; `exit_code` is the command's status), `input_wait` (the program is waiting to read, e.g. at a REPL prompt; `echo: false` means it asks for a secret: a password prompt, echo off), `pattern`, `exit`, `idle`, or `timeout` — a `timeout` does not mean the command stopped: it is still running, so read on with `terminal_read` or stop it with `terminal_signal`. \
Paths or connections the sandbox refused, as the output shows them, are named in `refusals`. \
One send at a time per terminal.",
            &[Preset::Full],
            &[
                "NO_SESSION",
                "FOREIGN_SESSION",
                "SESSION_CLOSING",
                "SESSION_EXITED",
                "SEND_ACTIVE",
                "JOB_LIMIT",
                "INVALID_ARGUMENT",
            ],
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

/// The footer's mark of an input wait with echo off.
const ECHO_OFF: &str = " · echo off: the program asks for a secret";

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
                return Ok(started_reply(&started.id, clamped, None));
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
            let outcome = crate::context::with_ticks(
                cx.progress.as_ref(),
                cx.runtime.terminals.send(&cx.owner, id, request),
                last_line,
            )
            .await
            .map_err(terminal_error)?;
            let refusals = cx
                .runtime
                .sandbox_of(&id.to_string())
                .and_then(|s| RefusalsJson::find(&s.prepared, &outcome.output, &s.current_dir()));
            Ok(send_reply(id, &outcome, clamped, refusals))
        })
    }
}

/// Which view `terminal_read` returns.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// The sanitized output stream from a byte cursor.
    Stream,
    /// The screen as a terminal renders it (for full-screen programs).
    Screen,
}

/// Arguments of `terminal_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The terminal's id (`pty-N`).
    pub id: String,
    /// Default `stream`.
    pub mode: Option<ReadMode>,
    /// Stream: byte cursor to read from (a previous `next`). Default: what you have not read yet.
    pub since: Option<u64>,
    /// Stream: most bytes to return. Default and most: the result limit (32768 unless configured).
    pub max_bytes: Option<u64>,
}

pub(crate) struct TerminalReadTool {
    spec: ToolSpec,
    max_result_bytes: usize,
}

/// The smallest `max_bytes` of a stream read.
const MIN_READ_BYTES: u64 = 64;

impl TerminalReadTool {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            spec: ToolSpec::new::<ReadArgs>(
                "terminal_read",
                "Read a terminal without typing into it: `stream` returns its output from a byte cursor (non-destructive: the same `since` returns the same text), \
`screen` returns what the screen shows now, for full-screen programs such as editors, pagers and `top`.",
                &[Preset::Full],
                TERMINAL_ERRORS,
            ),
            max_result_bytes: settings.max_result_bytes,
        }
    }
}

impl Tool for TerminalReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: ReadArgs = parse_args(args)?;
            let id = parse_id(&args.id)?;
            let limit = self.max_result_bytes as u64;
            let (max_bytes, clamped) = clamp_ms(
                "max_bytes",
                args.max_bytes,
                limit,
                MIN_READ_BYTES.min(limit),
                limit,
            );
            let request = match args.mode.unwrap_or(ReadMode::Stream) {
                ReadMode::Stream => ReadRequest::Stream {
                    since: args.since,
                    max_bytes: Some(max_bytes as usize),
                },
                ReadMode::Screen => ReadRequest::Screen,
            };
            let outcome = cx
                .runtime
                .terminals
                .read(&cx.owner, id, request)
                .await
                .map_err(terminal_error)?;
            Ok(match outcome {
                ReadOutcome::Stream(chunk) => {
                    let mut text = String::new();
                    if chunk.dropped > 0 {
                        text.push_str(&format!(
                            "[{} earlier bytes were dropped from the scrollback]\n",
                            chunk.dropped
                        ));
                    }
                    text.push_str(&chunk.output);
                    if !text.is_empty() && !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "[{id} · bytes {}–{}{}]",
                        chunk.from,
                        chunk.next,
                        if chunk.truncated {
                            " · more after next"
                        } else {
                            ""
                        }
                    ));
                    if let Some(c) = &clamped {
                        text.push_str(&format!(
                            " [{} clamped from {} to {}]",
                            c.field, c.from, c.to
                        ));
                    }
                    let mut structured = json!({
                        "output": chunk.output,
                        "from": chunk.from,
                        "next": chunk.next,
                        "dropped": chunk.dropped,
                        "truncated": chunk.truncated,
                    });
                    if let Some(c) = clamped {
                        structured["clamped"] = json!(c);
                    }
                    ToolReply { text, structured }
                }
                ReadOutcome::Screen(view) => {
                    // A large screen of wide or combining characters can
                    // exceed the result limit: keep its head and tail.
                    let screen =
                        crate::render::truncate_middle(&view.screen, self.max_result_bytes);
                    let mut text = screen.text.trim_end().to_owned();
                    text.push_str(&format!(
                        "\n[{id} screen {}x{} · cursor row {} col {}{}{}]",
                        view.rows,
                        view.cols,
                        view.cursor.row,
                        view.cursor.col,
                        if view.alternate_screen {
                            " · alternate screen"
                        } else {
                            ""
                        },
                        if screen.truncated {
                            format!(
                                " · {} of {} bytes shown",
                                screen.text.len(),
                                screen.total_bytes
                            )
                        } else {
                            String::new()
                        }
                    ));
                    ToolReply {
                        text,
                        structured: json!({
                            "screen": screen.text,
                            "cursor": { "row": view.cursor.row, "col": view.cursor.col },
                            "rows": view.rows,
                            "cols": view.cols,
                            "alternate_screen": view.alternate_screen,
                            "truncated": screen.truncated,
                            "total_bytes": screen.total_bytes,
                        }),
                    }
                }
            })
        })
    }
}

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
                "NO_SESSION",
                "FOREIGN_SESSION",
                "SESSION_CLOSING",
                "SESSION_EXITED",
                "USE_CLOSE",
                "INVALID_ARGUMENT",
            ],
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
            &["NO_SESSION", "FOREIGN_SESSION", "INVALID_ARGUMENT"],
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

/// Arguments of `terminal_list`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

impl TerminalListTool {
    pub(crate) fn new() -> Self {
        Self(ToolSpec::new::<ListArgs>(
            "terminal_list",
            "List your open terminals with their status and whether a send is in progress.",
            &[Preset::Full],
            &["INVALID_ARGUMENT"],
        ))
    }
}

impl Tool for TerminalListTool {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let _: ListArgs = parse_args(args)?;
            let terminals = cx.runtime.terminals.list(&cx.owner).await;
            let mut text = String::new();
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
            Ok(ToolReply {
                text: text.trim_end().to_owned(),
                structured: json!({ "terminals": list }),
            })
        })
    }
}

/// A terminal send running as a background job (`pty-send-N`): its output
/// is the terminal's stream from the send on, its cancel interrupts the
/// foreground program and frees the terminal for the next send.
struct PtySendProducer {
    terminals: Arc<dyn TerminalService>,
    owner: Owner,
    id: TerminalId,
    request: SendRequest,
}

/// Stops a background send: SIGINT to the terminal's foreground program
/// (which frees the terminal for the next send). A program started from
/// the terminal's shell that ignores SIGINT then gets SIGTERM, then
/// SIGKILL; the terminal's own first program (a REPL, the shell) is never
/// killed this way, since that would lose the terminal's state.
struct InterruptSend {
    interrupt: Arc<dyn SendInterrupt>,
    terminals: Arc<dyn TerminalService>,
    owner: Owner,
    id: TerminalId,
    /// The terminal's first process (its session leader).
    leader: i32,
    /// `None` while the send runs; then whether it stopped the program
    /// (a send that settles by `timeout` left it running) and why it
    /// settled.
    stopped: tokio::sync::watch::Receiver<Option<(bool, &'static str)>>,
}

impl InterruptSend {
    /// True when the leader is back in the foreground of its terminal.
    fn leader_in_foreground(&self) -> bool {
        process_tree::process_info(self.leader).is_none_or(|p| p.tpgid == p.pgid)
    }
}

impl Cancel for InterruptSend {
    fn cancel(&self) -> BoxFuture<'static, Result<String, String>> {
        let me = InterruptSend {
            interrupt: self.interrupt.clone(),
            terminals: self.terminals.clone(),
            owner: self.owner.clone(),
            id: self.id,
            leader: self.leader,
            stopped: self.stopped.clone(),
        };
        Box::pin(async move {
            let id = me.id;
            // Only the foreground program is stopped: say so, and no more.
            let untouched = format!(
                "{id} stays open and what runs in its background was not touched (terminal_close ends everything in it)"
            );
            me.interrupt.interrupt();
            let mut stopped = me.stopped.clone();
            let settled =
                tokio::time::timeout(Duration::from_secs(3), stopped.wait_for(Option::is_some))
                    .await
                    .ok()
                    .and_then(|r| r.ok().map(|v| *v))
                    .flatten();
            if let Some((true, reason)) = settled {
                return Ok(format!(
                    "the send was interrupted with SIGINT and settled ({reason}); {untouched}"
                ));
            }
            let mut sent = Vec::new();
            for signal in [TerminalSignal::Term, TerminalSignal::Kill] {
                if me.leader_in_foreground() {
                    break;
                }
                if me.terminals.signal(&me.owner, me.id, signal).await.is_ok() {
                    sent.push(signal.as_str());
                }
                let deadline = tokio::time::Instant::now() + Duration::from_millis(1500);
                while !me.leader_in_foreground() && tokio::time::Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            if me.leader_in_foreground() && settled.is_some() {
                let how = if sent.is_empty() {
                    String::new()
                } else {
                    format!(
                        ", then {} to its foreground process group",
                        sent.join(" and ")
                    )
                };
                return Ok(format!(
                    "the program in {id} did not stop on SIGINT; it was sent SIGINT{how}, and {id}'s own program is in the foreground again; {untouched}"
                ));
            }
            Err(format!(
                "the program in {id} did not stop on SIGINT and is still running; stop it with terminal_signal or end the terminal with terminal_close"
            ))
        })
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
        Box::pin(async move {
            let PtySendProducer {
                terminals,
                owner,
                id,
                request,
            } = *self;
            let text = request.text.clone();
            let started = terminals
                .start_send(&owner, id, request)
                .map_err(|e| StartError {
                    code: e.code(),
                    message: e.to_string(),
                    retryable: e.retryable(),
                })?;
            let leader = terminals
                .list(&owner)
                .await
                .into_iter()
                .find(|t| t.id == id)
                .map_or(0, |t| t.pid as i32);
            // `None` while the send runs; then whether the program stopped
            // (a send that settles by `timeout` left it running).
            let (stopped_tx, stopped_rx) =
                tokio::sync::watch::channel(None::<(bool, &'static str)>);
            let (done_tx, done_rx) = tokio::sync::watch::channel(false);
            // The send is driven by a task of its own, so it keeps settling
            // while the registry is busy cancelling it; dropping the job's
            // settle future aborts the task, which frees the terminal.
            let settled_send = started.settled;
            let driver = tokio::spawn(async move {
                let outcome = settled_send.await;
                let stopped = match &outcome {
                    Ok(o) => (
                        o.reason != terminal_seam::SettleReason::Timeout,
                        o.reason.as_str(),
                    ),
                    Err(_) => (true, "the terminal ended"),
                };
                let _ = stopped_tx.send(Some(stopped));
                let _ = done_tx.send(true);
                outcome
            });
            let settle: BoxFuture<'static, Settlement> = Box::pin(async move {
                let driver = AbortOnDrop(driver);
                let outcome = match driver.wait().await {
                    Some(outcome) => outcome,
                    None => {
                        return Settlement::Failed {
                            detail: "the send stopped unexpectedly".to_owned(),
                        };
                    }
                };
                match outcome {
                    Ok(o) if o.reason == terminal_seam::SettleReason::Timeout => {
                        Settlement::TimedOut {
                            detail: format!(
                                "the send's timeout passed; the command may still be running in {id} (terminal_read)"
                            ),
                        }
                    }
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
            });
            let output = without_echo(
                follow(
                    terminals.clone(),
                    owner.clone(),
                    id,
                    started.start_cursor,
                    done_rx.clone(),
                ),
                &text,
            );
            Ok(Started {
                output,
                settle,
                cancel: Arc::new(InterruptSend {
                    interrupt: started.interrupt,
                    terminals,
                    owner,
                    id,
                    leader,
                    stopped: stopped_rx,
                }),
                session_id: None,
            })
        })
    }
}

/// The terminal's output from `cursor` on, until the send has settled and
/// everything it printed has been read.
fn follow(
    terminals: Arc<dyn TerminalService>,
    owner: Owner,
    id: TerminalId,
    cursor: u64,
    done: tokio::sync::watch::Receiver<bool>,
) -> BoxStream<'static, OutputChunk> {
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
                        return Some((
                            OutputChunk::Text(chunk.output),
                            (terminals, owner, next, done),
                        ));
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

/// How far an echoed line may run past the text it echoes (a prompt
/// before it, trailing blanks) before it is taken for program output.
const ECHO_SLACK: usize = 4096;

/// Drops the terminal's echo of the sent text from the start of a
/// background send's output, line by line (a prompt such as `>>> ` or
/// `... ` before an echoed line goes with it). Stops at the first line
/// that is not an echo, and passes everything else through unchanged.
/// It holds back at most one expected line plus [`ECHO_SLACK`] bytes (and
/// one chunk): a longer run without a newline cannot be an echo and is
/// passed on, so a program that prints without newlines (or with echo off)
/// is never buffered without bound.
fn without_echo(
    stream: BoxStream<'static, OutputChunk>,
    text: &str,
) -> BoxStream<'static, OutputChunk> {
    use futures::StreamExt as _;
    let expected: std::collections::VecDeque<String> =
        text.lines().map(|l| l.trim_end().to_owned()).collect();
    let state = (stream, expected, String::new(), false);
    Box::pin(futures::stream::unfold(
        state,
        |(mut stream, mut expected, mut pending, mut done)| async move {
            loop {
                if done || expected.is_empty() {
                    if !pending.is_empty() {
                        let out = std::mem::take(&mut pending);
                        return Some((OutputChunk::Text(out), (stream, expected, pending, true)));
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
                    Some(OutputChunk::Text(t)) => pending.push_str(&t),
                    Some(OutputChunk::Raw(bytes)) => {
                        pending.push_str(&String::from_utf8_lossy(&bytes))
                    }
                    None => {
                        done = true;
                    }
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
    use futures::StreamExt as _;
    use pretty_assertions::assert_eq;
    use terminal_seam::{CloseOutcome, SurvivingProcess};

    fn texts(chunks: Vec<&'static str>) -> BoxStream<'static, OutputChunk> {
        Box::pin(futures::stream::iter(
            chunks.into_iter().map(|c| OutputChunk::Text(c.to_owned())),
        ))
    }

    async fn collect(stream: BoxStream<'static, OutputChunk>) -> String {
        stream
            .map(|c| match c {
                OutputChunk::Text(t) => t,
                OutputChunk::Raw(b) => String::from_utf8_lossy(&b).into_owned(),
            })
            .collect::<Vec<_>>()
            .await
            .concat()
    }

    #[tokio::test]
    async fn the_echo_and_its_prompt_are_dropped_and_the_rest_kept() {
        let out = collect(without_echo(texts(vec![">>> 1+", "1\n2\n>>> "]), "1+1")).await;
        assert_eq!(out, "2\n>>> ");
    }

    #[tokio::test]
    async fn output_without_newlines_is_passed_on_not_buffered_without_bound() {
        // A program with echo off printing 10 KB chunks and no newline,
        // then running on: the filter must pass output on while it runs.
        let printed = futures::stream::iter(0..2000).then(|_| async {
            tokio::task::yield_now().await;
            OutputChunk::Text("x".repeat(10_000))
        });
        let running = printed.chain(futures::stream::pending());
        let mut filtered = without_echo(Box::pin(running), "go");
        let first = tokio::time::timeout(Duration::from_secs(10), filtered.next())
            .await
            .expect("the filter held everything back")
            .expect("the stream ended");
        let OutputChunk::Text(first) = first else {
            panic!("raw chunk")
        };
        // At most one expected line, the slack and one chunk were held.
        assert!(first.len() <= 2 + ECHO_SLACK + 10_000, "{}", first.len());
        assert!(first.bytes().all(|b| b == b'x'));
    }

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
