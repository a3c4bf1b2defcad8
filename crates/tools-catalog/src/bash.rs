//! `bash`: one-shot commands.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use output_text::{HeadTail, Sanitizer};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::io::AsyncReadExt;

use crate::{
    CallContext, Clamped, Preset, Settings, Tool, ToolError, ToolFuture, ToolReply, ToolSpec,
    clamp_ms, parse_args,
};

const DESCRIPTION: &str = "Run a command with `bash -c` and return its combined stdout and stderr once it exits. \
Each call starts a fresh shell: nothing (variables, `cd`) carries over to the next call, so use a terminal for a REPL or a multi-step session. \
Stdin is closed, so a command that asks for input fails instead of hanging. \
At `timeout_ms` the command and every process it started are killed and `timed_out` is true; \
processes it leaves running in the background are ended when it exits. \
Long output keeps its head and tail, with a marker saying how many bytes were omitted.";

/// The environment every command gets on top of the host's.
pub(crate) const COMMAND_ENV: [(&str, &str); 5] = [
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// Arguments of `bash`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BashArgs {
    /// The command line, run by `bash -c`.
    pub command: String,
    /// Working directory: absolute, or relative to the session's directory. Default: the session's directory.
    pub cwd: Option<String>,
    /// Kill the command and all its processes after this many milliseconds. Default 120000; range 1–600000.
    pub timeout_ms: Option<u64>,
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
    clamped: Option<Clamped>,
}

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
                &["INVALID_ARGUMENT", "SPAWN_FAILED"],
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
            run_foreground(cx, args, self.max_result_bytes).await
        })
    }
}

/// Resolves a `cwd` argument against the session's directory and checks
/// that it is a directory.
pub(crate) fn resolve_cwd(base: &Path, cwd: Option<&str>) -> Result<PathBuf, ToolError> {
    let Some(cwd) = cwd else {
        return Ok(base.to_path_buf());
    };
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

/// Ends a command's whole session when dropped, unless disarmed: a call
/// that is cancelled (the client gave up, the connection closed) never
/// leaves its processes behind.
struct SessionGuard {
    sid: i32,
    armed: bool,
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.armed {
            let sid = self.sid;
            std::thread::spawn(move || {
                let _ = process_tree::end_session(sid, process_tree::TERM_THEN_KILL);
            });
        }
    }
}

async fn end_session(sid: i32) -> Result<(), ToolError> {
    let ended = tokio::task::spawn_blocking(move || {
        process_tree::end_session(sid, process_tree::TERM_THEN_KILL)
    })
    .await;
    match ended {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(survivors)) => Err(ToolError::new("SPAWN_FAILED", survivors.to_string())),
        Err(join) => Err(ToolError::new("SPAWN_FAILED", join.to_string())),
    }
}

async fn run_foreground(
    cx: &CallContext,
    args: BashArgs,
    max_result_bytes: usize,
) -> Result<ToolReply, ToolError> {
    if args.command.trim().is_empty() {
        return Err(ToolError::invalid_argument("command", "is empty"));
    }
    let (timeout_ms, clamped) = clamp_ms("timeout_ms", args.timeout_ms, 120_000, 1, 600_000);
    let cwd = resolve_cwd(&cx.cwd, args.cwd.as_deref())?;
    let started = Instant::now();
    let deadline = tokio::time::Instant::from_std(started) + Duration::from_millis(timeout_ms);

    let spawn_failed =
        |e: std::io::Error| ToolError::new("SPAWN_FAILED", format!("could not start bash: {e}"));
    let (reader, writer) = std::io::pipe().map_err(spawn_failed)?;
    let mut command = tokio::process::Command::new("bash");
    command
        .arg("-c")
        .arg(&args.command)
        .current_dir(&cwd)
        .envs(COMMAND_ENV)
        .stdin(Stdio::null())
        .stdout(writer.try_clone().map_err(spawn_failed)?)
        .stderr(writer);
    // SAFETY: `setsid` is async-signal-safe and touches no memory.
    unsafe {
        command.pre_exec(process_tree::setsid_in_child);
    }
    let mut child = command.spawn().map_err(spawn_failed)?;
    // The command holds the parent's copies of the pipe's write end: drop
    // it, or the read end never sees end-of-file.
    drop(command);
    let sid = child.id().map_or(0, |pid| pid as i32);
    let mut guard = SessionGuard { sid, armed: true };
    let mut pipe =
        tokio::net::unix::pipe::Receiver::from_owned_fd(reader.into()).map_err(spawn_failed)?;

    let mut sanitizer = Sanitizer::new();
    let mut text = HeadTail::new(max_result_bytes);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut status = None;
    let mut eof = false;
    let mut timed_out = false;
    // Once the command exits, output still in flight is read until the pipe
    // closes; if something it left in the background keeps the pipe open,
    // that is ended after this short grace.
    let mut grace_end = None;
    let mut read_chunk = |n: usize, chunk: &[u8], text: &mut HeadTail| {
        let mut piece = String::new();
        sanitizer.push(&chunk[..n], &mut piece);
        text.push_str(&piece);
    };
    while !(eof && status.is_some()) {
        tokio::select! {
            read = pipe.read(&mut chunk), if !eof => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => read_chunk(n, &chunk, &mut text),
            },
            exited = child.wait(), if status.is_none() => {
                status = Some(exited.map_err(spawn_failed)?);
                grace_end = Some(tokio::time::Instant::now() + Duration::from_millis(50));
            },
            () = tokio::time::sleep_until(grace_end.unwrap_or(deadline)) => {
                timed_out = status.is_none();
                break;
            },
        }
    }
    // End whatever is left of the session: everything on a timeout, and
    // background processes of a command that exited by itself.
    end_session(sid).await?;
    guard.armed = false;
    if status.is_none() {
        status = Some(child.wait().await.map_err(spawn_failed)?);
    }
    // Every writer is gone now: collect what is left, within a bound.
    let drain_end = tokio::time::Instant::now() + Duration::from_secs(2);
    while !eof {
        tokio::select! {
            read = pipe.read(&mut chunk) => match read {
                Ok(0) | Err(_) => eof = true,
                Ok(n) => read_chunk(n, &chunk, &mut text),
            },
            () = tokio::time::sleep_until(drain_end) => break,
        }
    }
    let mut piece = String::new();
    sanitizer.finish(&mut piece);
    text.push_str(&piece);

    let rendered = text.render();
    let status =
        status.ok_or_else(|| ToolError::new("SPAWN_FAILED", "lost the command's status"))?;
    let signal = status.signal().map(process_tree::signal_name);
    let result = BashResult {
        exit_code: status.code(),
        signal: if timed_out { None } else { signal.clone() },
        output: rendered.text,
        truncated: rendered.truncated,
        total_bytes: rendered.total_bytes,
        duration_ms: started.elapsed().as_millis() as u64,
        timed_out,
        clamped,
    };
    let mut model_text = result.output.clone();
    if !model_text.is_empty() && !model_text.ends_with('\n') {
        model_text.push('\n');
    }
    let footer = if timed_out {
        format!(
            "[timed out after {timeout_ms} ms: the command and every process it started were killed]"
        )
    } else if let Some(signal) = &signal {
        format!("[killed by {signal} · {} ms]", result.duration_ms)
    } else {
        format!(
            "[exit {} · {} ms]",
            result.exit_code.unwrap_or(-1),
            result.duration_ms
        )
    };
    model_text.push_str(&footer);
    if let Some(c) = &result.clamped {
        model_text.push_str(&format!(
            " [{} clamped from {} to {}]",
            c.field, c.from, c.to
        ));
    }
    Ok(ToolReply::new(model_text, &result))
}
