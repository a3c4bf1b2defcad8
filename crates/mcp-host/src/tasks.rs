//! The MCP Tasks extension (`io.modelcontextprotocol/tasks`) on dsh's one
//! jobs registry.
//!
//! A client that declares the extension gets a task for each call that can
//! run long (`bash`, `terminal_send`, `subagent`): the call starts as a
//! background job (`bash-N`, `pty-send-N`, `subagent-N`, as
//! `run_in_background` would start it), and the task follows that job —
//! `tasks/get` reports it working until the job settles, then completed
//! with the job's output and status as the call's result; `tasks/cancel`
//! kills the job. The job is the agent's like any other: `job_list`,
//! `job_output` and `job_kill` reach the same work. Clients without the
//! extension (none of the agent CLIs measured declares it) keep
//! `run_in_background` and the `job_*` tools.

use std::sync::Arc;

use futures::future::BoxFuture;
use rmcp::model::CallToolResult;
use rmcp::task_manager::{TaskContext, TaskExit, TaskManager, TaskOptions};
use serde_json::{Value, json};
use tools_catalog::{CallContext, Code, ToolError, ToolReply};

/// The tools whose calls become tasks for a client that asks for them.
const TASK_TOOLS: &[&str] = &["bash", "terminal_send", "subagent"];

/// How long a settled task stays readable, and a running one may run:
/// as long as the longest call may (`timeout_ms` at most 600,000), twice.
const TASK_TTL_MS: u64 = 1_200_000;

/// Whether a call to `tool` with `args` becomes a task for a client that
/// declared the extension: a tool that can run long, not already asked
/// to run in the background (then the model reads it as a job).
pub(super) fn eligible(tool: &str, args: &Value) -> bool {
    TASK_TOOLS.contains(&tool) && args.get("run_in_background") != Some(&Value::Bool(true))
}

/// The call's arguments, asking for a background job.
pub(super) fn in_background(mut args: Value) -> Value {
    if let Value::Object(fields) = &mut args {
        fields.insert("run_in_background".to_owned(), Value::Bool(true));
    } else {
        args = json!({ "run_in_background": true });
    }
    args
}

/// A call context for reading and ending the job a task follows: the
/// caller's owner, nothing that asks anyone.
fn follower(cx: &CallContext) -> CallContext {
    CallContext {
        owner: cx.owner.clone(),
        cwd: cx.cwd.clone(),
        runtime: cx.runtime.clone(),
        env: cx.env.clone(),
        progress: None,
        confinement: cx.confinement.clone(),
        ask: None,
        resume: None,
        secrets: None,
    }
}

/// Starts a task that follows `job_id` until it settles; its result is
/// `finish` of the job's whole output (head and tail kept) and status.
pub(super) fn follow(
    manager: &TaskManager,
    layer: Arc<super::ToolLayer>,
    cx: &CallContext,
    job_id: String,
    finish: impl FnOnce(Result<ToolReply, ToolError>) -> BoxFuture<'static, CallToolResult>
    + Send
    + 'static,
) -> rmcp::model::Task {
    let max_result_bytes = layer.config.settings.max_result_bytes;
    let cx = follower(cx);
    let options = TaskOptions::new()
        .with_ttl_ms(TASK_TTL_MS)
        .with_status_message(format!(
            "running as job {job_id}: job_output and job_kill reach it too"
        ));
    manager.spawn(options, move |task| {
        Box::pin(async move {
            let (outcome, cancelled) =
                read_to_the_end(&layer.catalog, &cx, &job_id, max_result_bytes, &task).await;
            if cancelled {
                return Err(TaskExit::Cancelled);
            }
            Ok(finish(outcome).await)
        })
    })
}

/// Reads the job's output until it settles (waiting on the server, never
/// polling), killing it if the task is cancelled meanwhile; returns the
/// reply the call would have made, and whether the task was cancelled.
async fn read_to_the_end(
    catalog: &tools_catalog::Catalog,
    cx: &CallContext,
    job_id: &str,
    max_result_bytes: usize,
    task: &TaskContext,
) -> (Result<ToolReply, ToolError>, bool) {
    let (Some(output), Some(kill)) = (catalog.get("job_output"), catalog.get("job_kill")) else {
        return (
            Err(ToolError::new(
                Code::Internal,
                "the job tools are not served here; read the job with job_output",
            )),
            false,
        );
    };
    let mut whole = tools_catalog::render::HeadTail::new(max_result_bytes);
    let mut since = 0u64;
    let mut cancelled = false;
    loop {
        let read = output.call(
            cx,
            json!({ "job_id": job_id, "since": since, "wait_ms": 600_000 }),
        );
        let reply = tokio::select! {
            reply = read => reply,
            () = task.cancelled(), if !cancelled => {
                cancelled = true;
                let _ = kill.call(cx, json!({ "job_id": job_id })).await;
                continue;
            }
        };
        let reply = match reply {
            Ok(reply) => reply,
            Err(e) => return (Err(e), cancelled),
        };
        let chunk = reply.structured["output"].as_str().unwrap_or_default();
        whole.push_str(chunk);
        since = reply.structured["next"].as_u64().unwrap_or(since);
        let status = reply.structured["status"].as_str().unwrap_or_default();
        if chunk.is_empty() && !matches!(status, "running" | "stopping") {
            let rendered = whole.render();
            let last = reply.text.lines().last().unwrap_or_default();
            let mut text = rendered.text;
            if !text.is_empty() && !text.ends_with('\n') {
                text.push('\n');
            }
            text.push_str(last);
            let mut structured = reply.structured.clone();
            structured["output"] = json!(text.strip_suffix(last).unwrap_or(&text));
            structured["job_id"] = json!(job_id);
            structured["truncated"] = json!(rendered.truncated);
            structured["total_bytes"] = json!(rendered.total_bytes);
            return (Ok(ToolReply { text, structured }), cancelled);
        }
    }
}
