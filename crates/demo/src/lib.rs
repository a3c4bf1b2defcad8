//! `dsh demo`: the seed's scenarios, run live through the real host.
//!
//! A scripted client plays the model: it builds the [`Host`] `dsh mcp`
//! serves from, with the default config (the default sandbox and
//! environment policy included), takes one connection's tool layer from
//! it and calls the tools with the JSON arguments a model would send, so
//! the transcript shows exactly what a model sends and reads — the sandbox
//! line of each result included. Every step checks the program's answer; a
//! step that does not answer as scripted fails the demo (exit status 1).
//!
//! * `terminal` (scenario A): debug a small Python function in three steps,
//!   once with one-shot `bash` (every step resends the earlier code, since
//!   nothing survives a call) and once with a Python REPL in a terminal;
//!   then a table of tool calls, bytes sent and received, and time.
//! * `jobs` (scenario B): a background `bash`, a background `terminal_send`
//!   and a background `subagent` in one `job_list`, read with `job_output`,
//!   one stopped with `job_kill`, and the final statuses.
//!
//! The demo reads no config file and writes nothing outside a scratch
//! directory that it removes (its workspace, and the history a confined
//! REPL keeps); everything it started is ended and checked gone before it
//! returns.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tools_catalog::{CallContext, Owner, Runtime, ToolReply};

use mcp_host::config::{Config, SubagentConfig};
use mcp_host::store::StoreAccess;
use mcp_host::{Host, ToolLayer};

/// Which scenario to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    /// Debug a Python function in three steps: one-shot bash vs a terminal.
    Terminal,
    /// Three kinds of background work in one job list.
    Jobs,
}

impl Scenario {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Terminal => "terminal",
            Scenario::Jobs => "jobs",
        }
    }

    /// What it shows, in one line.
    pub fn summary(self) -> &'static str {
        match self {
            Scenario::Terminal => {
                "Debug a Python function in three steps: one-shot bash vs a terminal"
            }
            Scenario::Jobs => "Three kinds of background work in one job list",
        }
    }
}

/// Runs a scenario and prints its transcripts and counts.
pub fn run(scenario: Scenario) -> anyhow::Result<()> {
    let tokio = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let outcome = tokio.block_on(async {
        // Orphans of the demo's commands come back to this process and are
        // reaped, and a guardian ends them if the demo is killed, as in
        // `dsh mcp`.
        mcp_host::processes::start();
        let scratch = ScratchDir::create()?;
        let outcome = match scenario {
            Scenario::Terminal => scenario_terminal(scratch.path()).await,
            Scenario::Jobs => scenario_jobs(scratch.path()).await,
        };
        let removed = scratch.remove();
        outcome?;
        removed
    });
    tokio.shutdown_timeout(Duration::from_secs(1));
    outcome
}

/// Writes to stdout; a closed stdout (`dsh demo | head`) is not an error.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// A scratch directory, removed when the demo ends (and on drop).
struct ScratchDir(Option<PathBuf>);

impl ScratchDir {
    fn create() -> anyhow::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!("dsh-demo-{}-{nanos:x}", std::process::id()));
        std::fs::create_dir(&path)
            .with_context(|| format!("could not create a scratch directory {}", path.display()))?;
        // The canonical path, so every tool reports the same directory.
        let path = path.canonicalize().unwrap_or(path);
        Ok(Self(Some(path)))
    }

    fn path(&self) -> &Path {
        self.0.as_deref().unwrap_or(Path::new("/"))
    }

    fn remove(mut self) -> anyhow::Result<()> {
        match self.0.take() {
            Some(path) => std::fs::remove_dir_all(&path)
                .with_context(|| format!("could not remove {}", path.display())),
            None => Ok(()),
        }
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        if let Some(path) = self.0.take() {
            let _ = std::fs::remove_dir_all(path);
        }
    }
}

/// The host `dsh mcp` serves from, built from `config` as a standalone
/// server builds it, and the tool layer of one connection to it (the
/// config's tools, sandbox and environment policy). Its store and the
/// history a confined REPL keeps are in `scratch`.
fn host(config: &Config, scratch: &Path) -> (Arc<Host>, Arc<ToolLayer>) {
    let mut config = config.host();
    config.repl_state = Some(scratch.join("repl-state"));
    let data_dir = scratch.join("data");
    let host = Arc::new(Host::new(
        config.clone(),
        StoreAccess::per_operation(&data_dir),
        vec![
            data_dir.clone(),
            daemon_client::paths::runtime_dir(&data_dir),
        ],
    ));
    let layer = ToolLayer::build(config, None, &host.connection_private(None));
    (host, Arc::new(layer))
}

/// What one client paid for a run: the numbers of the counts table.
#[derive(Debug, Clone, Copy, Default)]
struct Counts {
    /// Tool calls made.
    calls: usize,
    /// Bytes of arguments JSON sent.
    sent: usize,
    /// Bytes of result text received.
    received: usize,
    /// Time spent waiting for results.
    wall: Duration,
}

/// Plays the model: calls tools as the MCP host does (same catalog, same
/// call context, the arguments as JSON) and prints each call and result.
struct ScriptedClient {
    layer: Arc<ToolLayer>,
    cx: CallContext,
    counts: Counts,
}

impl ScriptedClient {
    /// A client with its own `owner`, whose session's directory is `cwd`,
    /// calling the tools of `layer` on `host`'s runtime.
    fn new(host: &Host, layer: &Arc<ToolLayer>, owner: Owner, cwd: &Path) -> Self {
        Self {
            layer: layer.clone(),
            cx: CallContext {
                owner,
                cwd: cwd.to_path_buf(),
                runtime: host.runtime().clone(),
                env: None,
                progress: None,
                confinement: layer.confinement.clone(),
                ask: None,
                resume: None,
                secrets: None,
            },
            counts: Counts::default(),
        }
    }

    /// Calls `tool` with `args`, prints the call and its result text, and
    /// counts it. A failed call is printed as the model would read it and
    /// returned as an error (no step of a scenario is meant to fail).
    async fn call(&mut self, tool: &str, args: Value) -> anyhow::Result<ToolReply> {
        let handle = self
            .layer
            .catalog
            .get(tool)
            .cloned()
            .ok_or_else(|| anyhow!("the catalog has no `{tool}` tool"))?;
        let sent = serde_json::to_string(&args)?;
        emit(&format!("\n→ {tool} {sent}\n"));
        let started = Instant::now();
        let outcome = handle.call(&self.cx, args).await;
        let took = started.elapsed();
        let text = match &outcome {
            Ok(reply) => reply.text.clone(),
            Err(e) => e.text(),
        };
        emit(&format!("← ({} ms)\n{}\n", took.as_millis(), indent(&text)));
        self.counts.calls += 1;
        self.counts.sent += sent.len();
        self.counts.received += text.len();
        self.counts.wall += took;
        outcome.map_err(|e| anyhow!("`{tool}` failed: {}", e.text()))
    }
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A string field of a structured result.
fn field<'a>(reply: &'a ToolReply, name: &str) -> &'a str {
    reply.structured[name].as_str().unwrap_or_default()
}

/// Checks that the program's output is what the script expects.
fn expect_output(step: &str, got: &str, ok: bool, want: &str) -> anyhow::Result<()> {
    if ok {
        return Ok(());
    }
    bail!(
        "{step}: the program printed {got:?}, but the scripted scenario expects {want:?}; \
         the demo is deterministic, so this is a defect"
    )
}

/// Fails when a process the demo started is still alive.
fn check_nothing_left() -> anyhow::Result<usize> {
    let me = std::process::id() as i32;
    // The guardian lives as long as the demo, by design.
    let guardian = process_tree::guardian::guardian_pid().map(|pid| pid as i32);
    // Ended sessions can take a moment to be reaped.
    let deadline = Instant::now() + Duration::from_secs(5);
    let left = loop {
        let left = process_tree::all_processes()
            .into_iter()
            .filter(|p| p.ppid == me && !p.is_zombie() && Some(p.pid) != guardian)
            .map(|p| p.pid)
            .collect::<Vec<_>>();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if left.is_empty() {
        Ok(0)
    } else {
        bail!("processes left behind by the demo: {left:?}")
    }
}

// ---------------------------------------------------------------------------
// Scenario A: one-shot bash vs a terminal
// ---------------------------------------------------------------------------

/// The data and the parser: the state every step needs.
const SETUP: &str = r#"LOG = """\
GET /api/users 200 12ms
GET /api/users 200 18ms
POST /api/orders 201 45ms
GET /api/orders 500 230ms
GET /api/users 200 15ms
POST /api/orders 201 51ms
"""

def parse(text):
    rows = []
    for line in text.splitlines():
        method, path, status, took = line.split()
        rows.append((method, path, int(status), int(took.removesuffix("ms"))))
    return rows

"#;

/// The function with the planted bug.
const BUGGY_MEAN: &str = "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n\n";

/// The fix.
const FIXED_MEAN: &str = "def mean(xs):\n    return sum(xs) / len(xs)\n\n";

/// The data the steps look at.
const SELECT: &str = "rows = parse(LOG)\n\
users = [ms for _, path, _, ms in rows if path == \"/api/users\"]\n";

/// Step 1 and 3: call the function.
const CALL: &str = "print(\"mean /api/users latency:\", mean(users))\n";

/// Step 2: inspect.
const INSPECT: &str =
    "print(\"n\", len(users), \"sum\", sum(users), \"min\", min(users), \"max\", max(users))\n";

/// One step of the task: what a model sends with one-shot bash (the
/// whole program, since nothing survives a call) and with a terminal (only
/// the new code), and the line the program must print.
struct Step {
    title: &'static str,
    bash_program: String,
    terminal_text: String,
    expected: &'static str,
}

fn steps() -> [Step; 3] {
    [
        Step {
            title: "step 1: define the data and the function, call it",
            bash_program: format!("{SETUP}{BUGGY_MEAN}{SELECT}{CALL}"),
            terminal_text: format!("{SETUP}{BUGGY_MEAN}{SELECT}{CALL}"),
            expected: "mean /api/users latency: 11.25",
        },
        Step {
            title: "step 2: inspect — a mean below the minimum is wrong",
            bash_program: format!("{SETUP}{BUGGY_MEAN}{SELECT}{INSPECT}"),
            terminal_text: INSPECT.to_owned(),
            expected: "n 3 sum 45 min 12 max 18",
        },
        Step {
            title: "step 3: fix the function and re-run",
            bash_program: format!("{SETUP}{FIXED_MEAN}{SELECT}{CALL}"),
            terminal_text: format!("{FIXED_MEAN}{CALL}"),
            expected: "mean /api/users latency: 15.0",
        },
    ]
}

async fn scenario_terminal(scratch: &Path) -> anyhow::Result<()> {
    emit(
        "Scenario A: debug a small Python function in three steps (define and call, inspect, \
fix and re-run),\nonce with only one-shot `bash`, once with a Python REPL in a terminal. \
Each call shows the arguments JSON\nthe model sends (→) and the result text it reads (←).\n",
    );
    let (host, layer) = host(&Config::default(), scratch);
    let runtime = host.runtime();

    emit(
        "\n══ A1: one-shot bash — nothing survives a call, so every step resends the earlier code ══\n",
    );
    let bash_owner = Owner::new("demo-bash");
    let mut bash = ScriptedClient::new(&host, &layer, bash_owner.clone(), scratch);
    let bash_run = with_one_shot_bash(&mut bash).await;
    runtime.end_owner(&bash_owner).await;
    bash_run?;

    emit("\n══ A2: terminal — the REPL keeps `LOG`, `parse`, `users` between calls ══\n");
    let term_owner = Owner::new("demo-terminal");
    let mut term = ScriptedClient::new(&host, &layer, term_owner.clone(), scratch);
    let term_run = with_terminal(&mut term).await;
    runtime.end_owner(&term_owner).await;
    term_run?;

    let left = tokio::task::spawn_blocking(check_nothing_left).await??;
    emit(&format!("\nprocesses left behind: {left}\n"));
    emit(&counts_table(bash.counts, term.counts));
    Ok(())
}

async fn with_one_shot_bash(client: &mut ScriptedClient) -> anyhow::Result<()> {
    for step in steps() {
        emit(&format!("\n# {}\n", step.title));
        let program = &step.bash_program;
        let reply = client
            .call(
                "bash",
                json!({ "command": format!("python3 - <<'PY'\n{program}PY") }),
            )
            .await?;
        let output = field(&reply, "output");
        let exit = reply.structured["exit_code"].as_i64();
        expect_output(
            &format!("{} (bash)", step.title),
            output,
            exit == Some(0) && output == format!("{}\n", step.expected),
            step.expected,
        )?;
    }
    Ok(())
}

async fn with_terminal(client: &mut ScriptedClient) -> anyhow::Result<()> {
    emit("\n# open a Python REPL\n");
    let opened = client
        .call(
            "terminal_open",
            json!({ "command": ["python3", "-q"], "name": "repl" }),
        )
        .await?;
    let id = field(&opened, "id").to_owned();
    for step in steps() {
        emit(&format!("\n# {}\n", step.title));
        let text = step.terminal_text.trim_end_matches('\n');
        let reply = client
            .call("terminal_send", json!({ "id": id, "text": text }))
            .await?;
        let output = field(&reply, "output");
        expect_output(
            &format!("{} (terminal)", step.title),
            output,
            field(&reply, "reason") == "input_wait"
                && output.starts_with(&format!("{}\n", step.expected)),
            step.expected,
        )?;
    }
    emit("\n# done: close the terminal\n");
    let closed = client.call("terminal_close", json!({ "id": id })).await?;
    if field(&closed, "outcome") != "closed" {
        bail!("terminal_close did not close {id}: {}", closed.text);
    }
    Ok(())
}

fn counts_table(bash: Counts, term: Counts) -> String {
    let ratio = |t: f64, b: f64| {
        if b > 0.0 {
            format!("{:.2}", t / b)
        } else {
            "-".to_owned()
        }
    };
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    let rows = [
        (
            "tool calls",
            bash.calls.to_string(),
            term.calls.to_string(),
            ratio(term.calls as f64, bash.calls as f64),
        ),
        (
            "bytes sent (arguments JSON)",
            bash.sent.to_string(),
            term.sent.to_string(),
            ratio(term.sent as f64, bash.sent as f64),
        ),
        (
            "bytes received (result text)",
            bash.received.to_string(),
            term.received.to_string(),
            ratio(term.received as f64, bash.received as f64),
        ),
        (
            "wall time of the calls",
            format!("{:.1} ms", ms(bash.wall)),
            format!("{:.1} ms", ms(term.wall)),
            ratio(ms(term.wall), ms(bash.wall)),
        ),
    ];
    let mut out = String::from("\nScenario A counts (the same three steps):\n");
    out.push_str(&format!(
        "| {:<30} | {:>13} | {:>13} | {:>15} |\n|{:-<32}|{:->15}|{:->15}|{:->17}|\n",
        "what the model pays", "one-shot bash", "terminal", "terminal ÷ bash", "", "", "", ""
    ));
    for (what, b, t, r) in rows {
        out.push_str(&format!("| {what:<30} | {b:>13} | {t:>13} | {r:>15} |\n"));
    }
    out.push_str(
        "(terminal calls include terminal_open and terminal_close; wall time includes starting python3)\n",
    );
    out
}

// ---------------------------------------------------------------------------
// Scenario B: three kinds of background work in one job list
// ---------------------------------------------------------------------------

/// The stand-in for a coding agent: no real agent is installed here, so
/// the subagent command is this small script. It prints a first line at
/// once, "works" for a moment, then answers.
const STAND_IN_AGENT: &str = r#"import sys, time
prompt = sys.argv[1]
print("agent: task:", prompt, flush=True)
time.sleep(0.8)
print("agent: mean() divides by len(xs) + 1; it should divide by len(xs)", flush=True)
print("agent: done, 1 finding", flush=True)
"#;

/// The background bash: a slow test run.
const TEST_RUN: &str =
    "for t in parse mean report; do sleep 0.3; echo \"test_$t ... ok\"; done; echo '3 passed'";

/// The background terminal send: a watch loop that never ends by itself.
const WATCH_LOOP: &str = "i=0; while sleep 1; do i=$((i+1)); echo \"watch: rebuild $i ok\"; done";

async fn scenario_jobs(scratch: &Path) -> anyhow::Result<()> {
    let agent = scratch.join("stand-in-agent.py");
    std::fs::write(&agent, STAND_IN_AGENT)
        .with_context(|| format!("could not write {}", agent.display()))?;
    let config = Config {
        subagent: Some(SubagentConfig {
            command: vec![
                "python3".to_owned(),
                agent.display().to_string(),
                "{prompt}".to_owned(),
            ],
            timeout_ms: Some(60_000),
        }),
        ..Config::default()
    };
    emit(&format!(
        "Scenario B: three different kinds of background work — a bash command, a terminal send, \
a subagent —\nin one job list, read with job_output, one stopped with job_kill.\n\
No coding agent is installed here: the subagent command is a small python3 script standing in \
for one\n(the config's `[subagent] command = {:?}`).\n\
Each call shows the arguments JSON the model sends (→) and the result text it reads (←); \
⇐ is a notification\nthe server sends when a background job ends.\n",
        config
            .subagent
            .as_ref()
            .map(|s| s.command.clone())
            .unwrap_or_default()
    ));
    let (host, layer) = host(&config, scratch);
    let runtime = host.runtime();
    let owner = Owner::new("demo-jobs");
    let mut client = ScriptedClient::new(&host, &layer, owner.clone(), scratch);
    let mut notes = notifications(runtime, &owner);
    let run = jobs_script(&mut client, &mut notes).await;
    runtime.end_owner(&owner).await;
    run?;
    let left = tokio::task::spawn_blocking(check_nothing_left).await??;
    emit(&format!("\nprocesses left behind: {left}\n"));
    Ok(())
}

/// A settled job, as the notification the MCP host sends names it.
struct Notice {
    id: String,
    message: String,
}

/// The settle notifications of `owner`'s jobs, worded as `dsh mcp` words
/// them.
fn notifications(runtime: &Runtime, owner: &Owner) -> mpsc::UnboundedReceiver<Notice> {
    let (tx, rx) = mpsc::unbounded_channel();
    let mut events = runtime.jobs.subscribe();
    let owner = owner.clone();
    tokio::spawn(async move {
        loop {
            let event = match events.recv().await {
                Ok(event) => event,
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => continue,
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            };
            if event.owner != owner {
                continue;
            }
            let job = &event.job;
            let message = tools_catalog::settled_job_message(job);
            let notice = Notice {
                id: job.id.clone(),
                message,
            };
            if tx.send(notice).is_err() {
                return;
            }
        }
    });
    rx
}

/// Prints notifications until every job of `ids` has been announced.
async fn await_notices(
    notes: &mut mpsc::UnboundedReceiver<Notice>,
    seen: &mut Vec<String>,
    ids: &[&str],
) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !ids.iter().all(|id| seen.iter().any(|s| s == id)) {
        match tokio::time::timeout_at(deadline, notes.recv()).await {
            Ok(Some(notice)) => {
                emit(&format!("\n⇐ notification: {}\n", notice.message));
                seen.push(notice.id);
            }
            Ok(None) | Err(_) => bail!("no settle notification for {ids:?} within 30 s"),
        }
    }
    Ok(())
}

/// Prints the notifications that already arrived.
fn drain_notices(notes: &mut mpsc::UnboundedReceiver<Notice>, seen: &mut Vec<String>) {
    while let Ok(notice) = notes.try_recv() {
        emit(&format!("\n⇐ notification: {}\n", notice.message));
        seen.push(notice.id);
    }
}

fn job_id(reply: &ToolReply) -> anyhow::Result<String> {
    reply.structured["job_id"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("no job id in {:?}", reply.text))
}

/// The jobs scenario, told step by step.
// Long on purpose: a script read top to bottom, each step printing what it
// shows before the next; split, the story would be in pieces.
async fn jobs_script(
    client: &mut ScriptedClient,
    notes: &mut mpsc::UnboundedReceiver<Notice>,
) -> anyhow::Result<()> {
    let mut seen = Vec::new();

    emit("\n# 1. a slow test run with bash, in the background\n");
    let reply = client
        .call(
            "bash",
            json!({ "command": TEST_RUN, "run_in_background": true }),
        )
        .await?;
    let bash = job_id(&reply)?;

    emit("\n# 2. a watch loop in a terminal, sent in the background\n");
    let opened = client.call("terminal_open", json!({})).await?;
    let terminal = field(&opened, "id").to_owned();
    let reply = client
        .call(
            "terminal_send",
            json!({ "id": terminal, "text": WATCH_LOOP, "run_in_background": true }),
        )
        .await?;
    let watch = job_id(&reply)?;

    emit("\n# 3. a subagent, in the background\n");
    let reply = client
        .call(
            "subagent",
            json!({
                "prompt": "find why mean() reports 11.25 for [12, 18, 15]",
                "run_in_background": true
            }),
        )
        .await?;
    let agent = job_id(&reply)?;

    emit("\n# 4. one list for all three kinds\n");
    let listed = client.call("job_list", json!({})).await?;
    let kinds: Vec<(String, String)> = listed.structured["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .map(|j| {
                    (
                        j["id"].as_str().unwrap_or_default().to_owned(),
                        j["kind"].as_str().unwrap_or_default().to_owned(),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want_kinds = vec![
        (bash.clone(), "bash".to_owned()),
        (watch.clone(), "pty-send".to_owned()),
        (agent.clone(), "subagent".to_owned()),
    ];
    if kinds != want_kinds {
        bail!("job_list lists {kinds:?}, the script expects {want_kinds:?}");
    }

    emit("\n# 5. follow the watch loop: job_output waits on the server for its next line\n");
    let mut since: Option<u64> = None;
    let mut followed = String::new();
    for _ in 0..5 {
        let mut args = json!({ "job_id": watch, "wait_ms": 10000 });
        if let Some(since) = since {
            args["since"] = json!(since);
        }
        let reply = client.call("job_output", args).await?;
        followed.push_str(field(&reply, "output"));
        since = reply.structured["next"].as_u64();
        if followed.contains("watch: rebuild 1 ok\n") || field(&reply, "status") != "running" {
            break;
        }
    }
    expect_output(
        "job_output of the watch loop",
        &followed,
        followed.contains("watch: rebuild 1 ok\n"),
        "watch: rebuild 1 ok",
    )?;

    emit("\n# 6. stop the watch loop; the terminal is free for the next send\n");
    let killed = client.call("job_kill", json!({ "job_id": watch })).await?;
    if (field(&killed, "outcome"), field(&killed, "status")) != ("killed", "killed") {
        bail!("job_kill of {watch} did not kill it: {}", killed.text);
    }
    // The kill's answer and its notification travel separately; wait for
    // the notification here so it is told where it belongs.
    await_notices(notes, &mut seen, &[&watch]).await?;
    let reply = client
        .call(
            "terminal_send",
            json!({ "id": terminal, "text": "echo the terminal is free again" }),
        )
        .await?;
    let output = field(&reply, "output");
    expect_output(
        "a send after the kill",
        output,
        output.contains("the terminal is free again\n"),
        "the terminal is free again",
    )?;
    drain_notices(notes, &mut seen);

    emit("\n# 7. the test run and the subagent end; the server says so\n");
    if [&bash, &agent].iter().all(|id| seen.contains(id)) {
        emit("\n  (both were announced above, while the watch loop was stopped)\n");
    }
    await_notices(notes, &mut seen, &[&bash, &agent]).await?;

    emit("\n# 8. read each one's output\n");
    let reply = client
        .call("job_output", json!({ "job_id": bash, "wait_ms": 10000 }))
        .await?;
    let want = "test_parse ... ok\ntest_mean ... ok\ntest_report ... ok\n3 passed\n";
    expect_output(
        "job_output of the test run",
        field(&reply, "output"),
        field(&reply, "output") == want && field(&reply, "status") == "completed",
        want,
    )?;
    let reply = client
        .call("job_output", json!({ "job_id": agent, "wait_ms": 10000 }))
        .await?;
    let want = "agent: task: find why mean() reports 11.25 for [12, 18, 15]\n\
agent: mean() divides by len(xs) + 1; it should divide by len(xs)\n\
agent: done, 1 finding\n";
    expect_output(
        "job_output of the subagent",
        field(&reply, "output"),
        field(&reply, "output") == want && field(&reply, "status") == "completed",
        want,
    )?;

    emit("\n# 9. the final list: exact statuses\n");
    let listed = client.call("job_list", json!({})).await?;
    let statuses: BTreeMap<String, (String, Option<i64>)> = listed.structured["jobs"]
        .as_array()
        .map(|jobs| {
            jobs.iter()
                .map(|j| {
                    (
                        j["id"].as_str().unwrap_or_default().to_owned(),
                        (
                            j["status"].as_str().unwrap_or_default().to_owned(),
                            j["exit_code"].as_i64(),
                        ),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let want: BTreeMap<String, (String, Option<i64>)> = [
        (bash.clone(), ("completed".to_owned(), Some(0))),
        (watch.clone(), ("killed".to_owned(), None)),
        (agent.clone(), ("completed".to_owned(), Some(0))),
    ]
    .into_iter()
    .collect();
    let comparable: BTreeMap<_, _> = statuses
        .into_iter()
        .map(|(id, (status, code))| {
            // A killed send may carry the interrupted command's exit code.
            let code = if status == "killed" { None } else { code };
            (id, (status, code))
        })
        .collect();
    if comparable != want {
        bail!("final job_list {comparable:?}, the script expects {want:?}");
    }

    emit("\n# 10. close the terminal\n");
    let closed = client
        .call("terminal_close", json!({ "id": terminal }))
        .await?;
    if field(&closed, "outcome") != "closed" {
        bail!("terminal_close did not close {terminal}: {}", closed.text);
    }
    Ok(())
}
