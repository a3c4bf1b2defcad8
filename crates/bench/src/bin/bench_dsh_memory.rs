//! What a long-running dsh server keeps after terminals close: resident
//! memory, descriptors, zombies and threads of the real server (the release
//! binary as `dsh mcp --standalone`, which serves in-process with the
//! daemon's host code, driven over its stdio), after 100 and after 1,000
//! cycles of
//!
//! * **python**: `terminal_open` a Python REPL → `terminal_send 1+1` →
//!   `terminal_close`, one terminal at a time (how a new user tried it);
//! * **escape**: `terminal_open` a shell → `setsid sleep 1e9 &` (a process
//!   that leaves the terminal's session but keeps the terminal open) →
//!   `terminal_close`.
//!
//! Where the terminal's processes run in a PID namespace of their own (the
//! default where the kernel allows it), the close ends the escaped sleep
//! with the namespace; without one, the escaped sleeps are not dsh's to
//! end, and the benchmark kills whatever is left at the end and checks
//! that dsh reaps every one (no zombie). Each scenario runs
//! in a fresh server whose working directory is an empty temp dir (so no
//! language server starts). `--quick` runs 10 and 40 cycles.
//!
//! `cargo run --release -p bench --bin bench_dsh_memory` (or
//! `cargo xtask bench memory`); it uses `target/release/dsh`, or `$DSH_BIN`.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How long the server is left alone before a reading: the session log
/// writes in batches every half second, and freed memory is handed back
/// after each burst of closes.
const SETTLE: Duration = Duration::from_millis(2500);

fn dsh_bin() -> Result<PathBuf, BoxError> {
    if let Some(bin) = std::env::var_os("DSH_BIN") {
        return Ok(PathBuf::from(bin));
    }
    let bin = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/release/dsh");
    if bin.exists() {
        Ok(bin)
    } else {
        Err(format!(
            "{} does not exist: run `cargo build --release -p dsh` first (or set DSH_BIN)",
            bin.display()
        )
        .into())
    }
}

/// A minimal MCP client over a `dsh mcp` child's stdio (newline-delimited
/// JSON-RPC).
struct Server {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    next_id: u64,
}

impl Server {
    fn start(bin: &Path, scratch: &Path) -> Result<Self, BoxError> {
        let mut command = Command::new(bin);
        command
            .args(["mcp", "--standalone"])
            .current_dir(scratch)
            .env("XDG_CONFIG_HOME", scratch.join("config"))
            .env("XDG_DATA_HOME", scratch.join("data"))
            .env("DSH_LOG", "warn")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        // A session of its own, so the benchmark can end all of it.
        // SAFETY: setsid is async-signal-safe.
        unsafe { command.pre_exec(process_tree::setsid_in_child) };
        let mut child = command.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("dsh mcp has no stdio pipes".into());
        };
        let mut server = Self {
            child,
            stdin: Some(stdin),
            stdout: BufReader::new(stdout),
            next_id: 1,
        };
        server.request(
            "initialize",
            json!({
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": { "name": "bench_dsh_memory", "version": "0" }
            }),
        )?;
        server.send(&json!({ "jsonrpc": "2.0", "method": "notifications/initialized" }))?;
        Ok(server)
    }

    fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    fn send(&mut self, message: &Value) -> Result<(), BoxError> {
        let stdin = self.stdin.as_mut().ok_or("dsh mcp's stdin is closed")?;
        writeln!(stdin, "{message}")?;
        stdin.flush()?;
        Ok(())
    }

    fn request(&mut self, method: &str, params: Value) -> Result<Value, BoxError> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({ "jsonrpc": "2.0", "id": id, "method": method, "params": params }))?;
        let mut line = String::new();
        loop {
            line.clear();
            if self.stdout.read_line(&mut line)? == 0 {
                return Err(format!("dsh mcp closed its stdout during `{method}`").into());
            }
            let message: Value = serde_json::from_str(&line)?;
            if message.get("id") == Some(&json!(id)) {
                if let Some(error) = message.get("error") {
                    return Err(format!("`{method}` failed: {error}").into());
                }
                return Ok(message["result"].clone());
            }
        }
    }

    fn call(&mut self, tool: &str, arguments: Value) -> Result<Value, BoxError> {
        let result = self.request(
            "tools/call",
            json!({ "name": tool, "arguments": arguments }),
        )?;
        if result["isError"] == json!(true) {
            return Err(format!("{tool} failed: {}", result["content"]).into());
        }
        Ok(result["structuredContent"].clone())
    }

    /// Closes stdin (the server ends its terminals and exits), then ends
    /// whatever is left of its session.
    fn finish(mut self) {
        drop(self.stdin.take());
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = process_tree::end_session(self.pid(), process_tree::TERM_THEN_KILL);
        let _ = self.child.wait();
    }
}

/// One reading of the server process.
#[derive(Debug, Clone, Copy)]
struct Reading {
    rss_kib: u64,
    anon_kib: u64,
    fds: usize,
    zombies: usize,
    threads: usize,
}

fn reading(pid: i32) -> Result<Reading, BoxError> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let field = |name: &str| -> u64 {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Ok(Reading {
        rss_kib: field("VmRSS:"),
        anon_kib: field("RssAnon:"),
        fds: std::fs::read_dir(format!("/proc/{pid}/fd"))?.count(),
        zombies: process_tree::all_processes()
            .iter()
            .filter(|p| p.ppid == pid && p.is_zombie())
            .count(),
        threads: field("Threads:") as usize,
    })
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Scenario {
    Python,
    Escape,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::Python => "python: open REPL → 1+1 → close",
            Scenario::Escape => "escape: open shell → setsid sleep 1e9 & → close",
        }
    }

    fn cycle(self, server: &mut Server) -> Result<(), BoxError> {
        let (open, text) = match self {
            Scenario::Python => (json!({ "command": ["python3", "-q", "-i"] }), "1+1"),
            Scenario::Escape => (json!({}), "setsid sleep 1e9 &"),
        };
        let escaped_before = escaped(server.pid()).len();
        let opened = server.call("terminal_open", open)?;
        let id = opened["id"].clone();
        server.call("terminal_send", json!({ "id": id, "text": text }))?;
        if self == Scenario::Escape {
            // `setsid` forks first: wait until the sleep has left the
            // terminal's session (adopted by dsh or by the namespace's
            // init), or the close ends it.
            let deadline = Instant::now() + Duration::from_secs(10);
            while escaped(server.pid()).len() <= escaped_before {
                if Instant::now() > deadline {
                    return Err("the escaped sleep never left the terminal's session".into());
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let closed = server.call("terminal_close", json!({ "id": id }))?;
        if closed["outcome"] != json!("closed") || closed.get("survivors").is_some() {
            return Err(format!("unexpected close: {closed}").into());
        }
        Ok(())
    }
}

/// Escaped sleeps under the server (adopted by it, or by the init of a
/// terminal's PID namespace), in sessions of their own.
fn escaped(pid: i32) -> Vec<process_tree::ProcessInfo> {
    process_tree::process_info(pid)
        .map(|server| process_tree::live_descendants(&server))
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.sid == p.pid)
        .filter(|p| process_tree::command_line(p.pid) == "sleep 1e9")
        .collect()
}

fn run(bin: &Path, scenario: Scenario, checkpoints: &[usize]) -> Result<Vec<String>, BoxError> {
    let scratch = tempfile_dir()?;
    let mut server = Server::start(bin, &scratch)?;
    let pid = server.pid();
    // One warm-up cycle: the runtime's own threads and descriptors.
    scenario.cycle(&mut server)?;
    std::thread::sleep(SETTLE);
    let idle = reading(pid)?;
    let mut rows = vec![row(scenario, "idle (after 1 cycle)", idle, None)];
    let mut done = 1;
    let begun = Instant::now();
    for &upto in checkpoints {
        while done < upto {
            scenario.cycle(&mut server)?;
            done += 1;
        }
        std::thread::sleep(SETTLE);
        rows.push(row(
            scenario,
            &format!("after {upto} cycles"),
            reading(pid)?,
            Some(idle),
        ));
    }
    let elapsed = begun.elapsed();
    if scenario == Scenario::Escape {
        let left = escaped(pid);
        let count = left.len();
        for p in &left {
            process_tree::signal_process(p, nix::sys::signal::Signal::SIGKILL);
        }
        std::thread::sleep(SETTLE);
        rows.push(row(
            scenario,
            &format!("{count} escaped sleeps left, killed"),
            reading(pid)?,
            Some(idle),
        ));
    }
    eprintln!(
        "{}: {done} cycles in {:.1} s",
        scenario.name(),
        elapsed.as_secs_f64()
    );
    server.finish();
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(rows)
}

fn row(scenario: Scenario, when: &str, r: Reading, idle: Option<Reading>) -> String {
    let growth = idle.map_or_else(
        || "—".to_owned(),
        |i| format!("{:+.1} MiB", (r.rss_kib as f64 - i.rss_kib as f64) / 1024.0),
    );
    format!(
        "| {} | {when} | {:.1} MiB | {growth} | {:.1} MiB | {} | {} | {} |",
        scenario.name(),
        r.rss_kib as f64 / 1024.0,
        r.anon_kib as f64 / 1024.0,
        r.fds,
        r.zombies,
        r.threads
    )
}

fn tempfile_dir() -> Result<PathBuf, BoxError> {
    let dir = std::env::temp_dir().join(format!("bench-dsh-memory-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

fn main() -> Result<(), BoxError> {
    let quick = std::env::args().any(|a| a == "--quick");
    let checkpoints: &[usize] = if quick { &[10, 40] } else { &[100, 1000] };
    let bin = dsh_bin()?;
    // Orphans of the escaped sleeps' killers are ours to reap if any.
    let _ = process_tree::become_subreaper();
    let mut rows = Vec::new();
    for scenario in [Scenario::Python, Scenario::Escape] {
        rows.extend(run(&bin, scenario, checkpoints)?);
    }
    println!(
        "\n`dsh mcp --standalone` ({}) after open → send → close cycles, one terminal at a time:\n",
        bin.display()
    );
    println!("| scenario | when | RSS | vs idle | anon | fds | zombies | threads |");
    println!("|---|---|---|---|---|---|---|---|");
    for r in rows {
        println!("{r}");
    }
    Ok(())
}
