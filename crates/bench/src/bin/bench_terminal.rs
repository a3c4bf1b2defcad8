//! The terminal benchmarks of the dsh host, side by side in one run:
//!
//! * settle latency of `1+1` in `python3 -q -i` — the dsh library call,
//!   dsh over MCP (the release `dsh mcp` binary driven over its stdio with
//!   plain JSON-RPC), the raw `pty-process` floor, a tmux `send-keys` +
//!   `capture-pane` loop, and a model of a fixed 50 ms poll (labelled as
//!   a model) — medians, p99 and ratios to the floor; for scale, a
//!   `terminal_list` call over the same MCP connection (a call that waits
//!   for nothing);
//! * scenario A's counts (tool calls, bytes sent and received, one-shot
//!   bash vs terminal), as `dsh demo terminal` prints them;
//! * a 100 MB output flood: MB/s and peak RSS growth, dsh vs raw, both
//!   timed from the command line to the prompt, every byte checked.
//!
//! `cargo xtask bench terminal [--quick]`, or `cargo run --release -p bench
//! --bin bench_terminal [-- rounds | -- --quick]` (default 1000 rounds;
//! `--quick`: a short smoke run whose figures are not to be quoted). It
//! runs the `dsh` binary found next to this benchmark's binary
//! (`target/release/dsh`: build it first with `cargo build --release -p
//! dsh`) or at `$DSH_BIN`.

use std::io::{BufRead as _, BufReader, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bench::terminal::{
    POLL_MODEL, Plan, Row, Stats, flood_rounds, interval_poll_python_settle, raw_pty_python_settle,
    render_flood, render_table, service_python_settle, tmux_python_settle,
};
use serde_json::{Value, json};
use terminal_pty::PtyTerminals;
use terminal_seam::Owner;
use tools_catalog::{CallContext, Catalog, JobsConfig, Preset, Runtime, Settings};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const RAW: &str = "raw pty-process floor (write, read to prompt)";
const MCP: &str = "dsh over MCP (dsh mcp, JSON-RPC on stdio)";

fn row(label: &str, mut samples: Vec<Duration>) -> Option<Row> {
    Stats::of(&mut samples).map(|stats| Row {
        label: label.to_owned(),
        stats,
    })
}

/// The `dsh` binary: `$DSH_BIN`, else `dsh` next to this benchmark's
/// binary (in `target/<profile>/`).
fn dsh_bin() -> Result<PathBuf, BoxError> {
    if let Some(path) = std::env::var_os("DSH_BIN") {
        return Ok(PathBuf::from(path));
    }
    let exe = std::env::current_exe()?;
    let candidate = exe
        .parent()
        .map(|dir| dir.join("dsh"))
        .ok_or("cannot locate the target directory")?;
    if candidate.is_file() {
        Ok(candidate)
    } else {
        Err(format!(
            "{} not found: build it first (`cargo build --release -p dsh`) or set DSH_BIN",
            candidate.display()
        )
        .into())
    }
}

/// A command in a new session, so it can be ended with everything it
/// started.
fn in_new_session(program: &Path) -> Command {
    let mut command = Command::new(program);
    // SAFETY: `setsid` is async-signal-safe and touches no memory of the
    // parent; it is the only thing run between fork and exec.
    unsafe {
        command.pre_exec(process_tree::setsid_in_child);
    }
    command
}

/// Ends the session of a child we spawned as a session leader and reaps
/// the child.
fn end_child(mut child: Child) {
    let sid = child.id() as i32;
    if let Err(survivors) = process_tree::end_session(sid, process_tree::TERM_THEN_KILL) {
        eprintln!("could not end session {sid}: {survivors:?}");
    }
    let _ = child.wait();
}

/// A minimal MCP client over a `dsh mcp` child's stdio: newline-delimited
/// JSON-RPC, one request at a time.
struct McpClient {
    child: Option<Child>,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl McpClient {
    /// Starts `dsh mcp` with an empty config and a private data dir under
    /// `scratch`, and initializes the session.
    fn start(bin: &Path, scratch: &Path) -> Result<Self, BoxError> {
        let config = scratch.join("config.toml");
        std::fs::write(&config, "")?;
        // A project directory of its own, with no language server to warm:
        // run from a Rust project (this repository), dsh starts
        // rust-analyzer, and its indexing is measured too (see
        // docs/subsystems/terminal.md, Throughput).
        let work = scratch.join("work");
        std::fs::create_dir_all(work.join(".git"))?;
        let mut child = in_new_session(bin)
            .arg("mcp")
            .arg("--standalone")
            .arg("--config")
            .arg(&config)
            .arg("--data-dir")
            .arg(scratch.join("data"))
            .current_dir(&work)
            .env("DSH_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            end_child(child);
            return Err("dsh mcp has no stdio pipes".into());
        };
        let mut client = Self {
            child: Some(child),
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            next_id: 0,
        };
        client.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "bench_terminal", "version": "0" }
            }),
        )?;
        client.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
        Ok(client)
    }

    fn send(&mut self, message: &Value) -> Result<(), BoxError> {
        let stdin = self.stdin.as_mut().ok_or("dsh mcp's stdin is closed")?;
        let mut line = serde_json::to_vec(message)?;
        line.push(b'\n');
        stdin.write_all(&line)?;
        stdin.flush()?;
        Ok(())
    }

    /// Sends a request and returns its `result`, skipping notifications.
    fn request(&mut self, method: &str, params: Value) -> Result<Value, BoxError> {
        self.next_id += 1;
        let id = self.next_id;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err(format!("dsh mcp closed its stdout during `{method}`").into());
            }
            let message: Value = serde_json::from_str(&line)?;
            if message["id"] != json!(id) || message.get("method").is_some() {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(format!("`{method}` failed: {error}").into());
            }
            return Ok(message["result"].clone());
        }
    }

    /// Calls a tool; a tool error (`isError`) is an error here.
    fn call_tool(&mut self, name: &str, arguments: Value) -> Result<Value, BoxError> {
        let result = self.request(
            "tools/call",
            json!({ "name": name, "arguments": arguments }),
        )?;
        if result["isError"] == json!(true) {
            return Err(format!("{name} failed: {}", result["content"]).into());
        }
        Ok(result["structuredContent"].clone())
    }

    /// Closes stdin (the client disconnects), lets the server end its
    /// terminals and exit, then verifies its session is empty.
    fn finish(mut self) {
        drop(self.stdin.take());
        if let Some(mut child) = self.child.take() {
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            end_child(child);
        }
    }
}

impl Drop for McpClient {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if let Some(child) = self.child.take() {
            end_child(child);
        }
    }
}

/// Settle latency of `1+1` through the tool layer in process: the
/// `terminal_send` tool of a [`Catalog`] over a [`Runtime`], called with
/// JSON arguments as the MCP host calls it, without the transport.
async fn tool_layer_python_settle(rounds: usize) -> Result<Vec<Duration>, BoxError> {
    let runtime = Arc::new(Runtime::new(
        JobsConfig::default(),
        Arc::new(PtyTerminals::default()),
        lsp_seam::Router::new(),
    ));
    let catalog = Catalog::new(Preset::Full, &Settings::default());
    let cx = CallContext {
        owner: Owner::new("bench-tool-layer"),
        cwd: std::env::current_dir()?,
        runtime: runtime.clone(),
        env: None,
        progress: None,
        confinement: Arc::new(tools_catalog::Confinement::none()),
        ask: None,
        resume: None,
        secrets: None,
    };
    let call = |name: &'static str, args: Value| {
        let tool = catalog.get(name).cloned();
        let cx = &cx;
        async move {
            let tool = tool.ok_or_else(|| format!("no `{name}` tool"))?;
            tool.call(cx, args)
                .await
                .map_err(|e| BoxError::from(e.text()))
        }
    };
    let opened = call(
        "terminal_open",
        json!({ "command": ["python3", "-q", "-i"] }),
    )
    .await?;
    let id = opened.structured["id"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds + 5 {
        let started = Instant::now();
        let sent = call("terminal_send", json!({ "id": id, "text": "1+1" })).await?;
        let took = started.elapsed();
        let output = sent.structured["output"].as_str().unwrap_or_default();
        if sent.structured["reason"] != json!("input_wait") || !output.starts_with("2\n") {
            return Err(format!("unexpected settle through the tool layer: {}", sent.text).into());
        }
        if round >= 5 {
            samples.push(took);
        }
    }
    call("terminal_close", json!({ "id": id })).await?;
    runtime.end_owner(&cx.owner).await;
    Ok(samples)
}

/// What one `dsh mcp` run measures: the round trip of each call.
struct McpSamples {
    /// `terminal_send` of `1+1`: write the request, read the reply.
    settle: Vec<Duration>,
    /// `terminal_list`: a call that waits for nothing, the transport's cost.
    list: Vec<Duration>,
}

/// Settle latency of `1+1` through `dsh mcp`: the time from writing the
/// `tools/call terminal_send` request to reading its reply; and, for
/// comparison, the same round trip of a `terminal_list` call.
fn mcp_python_settle(bin: &Path, scratch: &Path, rounds: usize) -> Result<McpSamples, BoxError> {
    let mut client = McpClient::start(bin, scratch)?;
    let opened = client.call_tool(
        "terminal_open",
        json!({ "command": ["python3", "-q", "-i"] }),
    )?;
    let id = opened["id"]
        .as_str()
        .ok_or("terminal_open returned no id")?
        .to_owned();
    let mut settle = Vec::with_capacity(rounds);
    let mut list = Vec::with_capacity(rounds);
    for round in 0..rounds + 5 {
        let started = Instant::now();
        let sent = client.call_tool("terminal_send", json!({ "id": id, "text": "1+1" }))?;
        let took = started.elapsed();
        let output = sent["output"].as_str().unwrap_or_default();
        if sent["reason"] != json!("input_wait") || !output.starts_with("2\n") {
            return Err(format!("unexpected settle over MCP: {sent}").into());
        }
        let started = Instant::now();
        let listed = client.call_tool("terminal_list", json!({}))?;
        let list_took = started.elapsed();
        if listed["terminals"].as_array().map(Vec::len) != Some(1) {
            return Err(format!("unexpected terminal_list over MCP: {listed}").into());
        }
        if round >= 5 {
            settle.push(took);
            list.push(list_took);
        }
    }
    client.call_tool("terminal_close", json!({ "id": id }))?;
    client.finish();
    Ok(McpSamples { settle, list })
}

/// Scenario A's counts table, as `dsh demo terminal` prints it.
fn scenario_a_counts(bin: &Path) -> Result<String, BoxError> {
    let child = in_new_session(bin)
        .args(["demo", "terminal"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let pid = child.id() as i32;
    let out = child.wait_with_output()?;
    // The demo ends what it started; this only verifies it.
    if let Err(survivors) = process_tree::end_session(pid, process_tree::TERM_THEN_KILL) {
        eprintln!("`dsh demo terminal` left processes behind: {survivors:?}");
    }
    if !out.status.success() {
        return Err(format!(
            "`dsh demo terminal` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let table = stdout
        .find("Scenario A counts")
        .map(|at| stdout[at..].trim_end().to_owned())
        .ok_or("`dsh demo terminal` printed no counts table")?;
    Ok(table)
}

/// A scratch directory, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn create() -> std::io::Result<Self> {
        let path = std::env::temp_dir().join(format!("dsh-bench-terminal-{}", std::process::id()));
        std::fs::create_dir_all(&path)?;
        Ok(Self(path))
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let plan = Plan::from_args();
    let rounds = plan.rounds;
    let bin = dsh_bin()?;
    let scratch = Scratch::create()?;
    let _ = process_tree::become_subreaper();
    let service = PtyTerminals::default();
    let owner = Owner::new("bench");

    let mut rows = Vec::new();
    rows.extend(row(
        "dsh library call (PtyTerminals::send)",
        service_python_settle(&service, &owner, rounds).await?,
    ));
    rows.extend(row(
        "dsh tool layer (terminal_send, in process)",
        tool_layer_python_settle(rounds).await?,
    ));
    let (mcp_bin, mcp_dir) = (bin.clone(), scratch.0.clone());
    let mcp = tokio::task::spawn_blocking(move || mcp_python_settle(&mcp_bin, &mcp_dir, rounds))
        .await??;
    rows.extend(row(MCP, mcp.settle));
    rows.extend(row(
        RAW,
        tokio::task::spawn_blocking(move || raw_pty_python_settle(rounds)).await??,
    ));
    match tokio::task::spawn_blocking(move || tmux_python_settle(plan.tmux_rounds)).await? {
        Ok(samples) => rows.extend(row("tmux send-keys + capture-pane loop", samples)),
        Err(e) => eprintln!("tmux row skipped: {e}"),
    }
    rows.extend(row(
        POLL_MODEL,
        tokio::task::spawn_blocking(move || {
            interval_poll_python_settle(plan.poll_rounds, Duration::from_millis(50))
        })
        .await??,
    ));
    rows.extend(row("for scale: terminal_list over MCP", mcp.list));
    if plan.quick {
        println!("--quick: a smoke run, not figures to quote\n");
    }
    println!(
        "`cargo xtask bench terminal` (crates/bench/src/bin/bench_terminal.rs): settle latency, \
         {rounds} timed sends per row after 5 warm-up sends\n"
    );
    println!("{}", render_table(&rows, RAW));
    let p99 = |label: &str| {
        rows.iter()
            .find(|r| r.label == label)
            .map(|r| r.stats.p99.as_secs_f64())
    };
    if let (Some(mcp), Some(raw)) = (p99(MCP), p99(RAW))
        && raw > 0.0
    {
        println!(
            "settle p99 over MCP / raw p99: {:.1} (goal: at most 5)\n",
            mcp / raw
        );
    }

    let demo_bin = bin.clone();
    println!(
        "{}\n",
        tokio::task::spawn_blocking(move || scenario_a_counts(&demo_bin)).await??
    );

    let floods = flood_rounds(&service, &owner, &plan).await?;
    println!(
        "`cargo xtask bench terminal`: a flood through one terminal, dsh and the raw floor \
         in turn, {} rounds (goal: dsh at least 0.8 of raw)\n",
        plan.flood_rounds
    );
    println!("{}", render_flood(&floods));
    Ok(())
}
