//! Measurement helpers for benchmarks: settle latency of `1+1` in a Python
//! REPL through this service and through the designs it replaces, and
//! output-flood throughput. Used by `bench_pty` and `bench_terminal`; a host adds
//! its own rows (e.g. the same send over MCP) with [`Stats`] and
//! [`render_table`]. [`Plan`] holds the sizes of a run (`--quick` for a
//! short smoke run).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use terminal_seam::{
    OpenRequest, Owner, SendRequest, SettleReason, TerminalError, TerminalService,
};

/// The Python REPL every latency row runs.
pub const PYTHON_REPL: &[&str] = &["python3", "-q", "-i"];

/// Untimed rounds before each latency row's timed ones.
const WARM_UP: usize = 5;

/// The sizes of one benchmark run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Plan {
    /// Timed sends per latency row.
    pub rounds: usize,
    /// Timed sends of the tmux row (each costs two process spawns).
    pub tmux_rounds: usize,
    /// Timed sends of the interval-poll model (each costs about a tick).
    pub poll_rounds: usize,
    /// Bytes the flood prints.
    pub flood_bytes: u64,
    /// Rounds of the flood (dsh, then raw, in turn).
    pub flood_rounds: usize,
    /// A short smoke run whose figures are not to be quoted.
    pub quick: bool,
}

impl Plan {
    /// The sizes from the command line: `--quick` for a smoke run, else an
    /// optional number of rounds (default 1000).
    pub fn from_args() -> Self {
        let args: Vec<String> = std::env::args().skip(1).collect();
        if args.iter().any(|a| a == "--quick") {
            return Self {
                rounds: 20,
                tmux_rounds: 20,
                poll_rounds: 10,
                flood_bytes: 2_000_000,
                flood_rounds: 1,
                quick: true,
            };
        }
        let rounds = args
            .iter()
            .find_map(|a| a.parse().ok())
            .unwrap_or(1000usize);
        Self {
            rounds,
            tmux_rounds: rounds.min(200),
            poll_rounds: (rounds / 5).clamp(10, 60),
            flood_bytes: 100_000_000,
            flood_rounds: 3,
            quick: false,
        }
    }
}

/// The label of the interval-poll row: a model of a polling design, not a
/// run of a real peer.
pub const POLL_MODEL: &str = "model: completion checked every 50 ms";

/// Median and 99th percentile of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// The median.
    pub median: Duration,
    /// The 99th percentile (nearest rank).
    pub p99: Duration,
    /// The 99.9th percentile (nearest rank: the largest sample below 1000).
    pub p999: Duration,
    /// How many samples.
    pub samples: usize,
}

impl Stats {
    /// Summarizes `samples` (sorted in place); `None` when empty.
    pub fn of(samples: &mut [Duration]) -> Option<Self> {
        if samples.is_empty() {
            return None;
        }
        samples.sort();
        let n = samples.len();
        let rank = |q: f64| ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
        Some(Self {
            median: samples[rank(0.5)],
            p99: samples[rank(0.99)],
            p999: samples[rank(0.999)],
            samples: n,
        })
    }
}

/// One row of a latency table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// What was measured.
    pub label: String,
    /// Its numbers.
    pub stats: Stats,
}

/// Renders rows as a table with each row's median and p99 as a ratio to
/// the row labelled `baseline` (usually the raw pty floor).
pub fn render_table(rows: &[Row], baseline: &str) -> String {
    let base = rows.iter().find(|r| r.label == baseline).map(|r| r.stats);
    let mut out = format!(
        "| {:<50} | {:>6} | {:>11} | {:>11} | {:>11} | {:>10} | {:>10} |\n|{:-<52}|{:->8}|{:->13}|{:->13}|{:->13}|{:->12}|{:->12}|\n",
        "settle `1+1` in python3 -q -i",
        "n",
        "median",
        "p99",
        "p99.9",
        "median ×",
        "p99 ×",
        "",
        "",
        "",
        "",
        "",
        "",
        ""
    );
    for row in rows {
        let ratio = |a: Duration, b: Option<Duration>| match b {
            Some(b) if !b.is_zero() => format!("{:.1}", a.as_secs_f64() / b.as_secs_f64()),
            Some(_) | None => "-".to_owned(),
        };
        out.push_str(&format!(
            "| {:<50} | {:>6} | {:>8.3} ms | {:>8.3} ms | {:>8.3} ms | {:>10} | {:>10} |\n",
            row.label,
            row.stats.samples,
            row.stats.median.as_secs_f64() * 1e3,
            row.stats.p99.as_secs_f64() * 1e3,
            row.stats.p999.as_secs_f64() * 1e3,
            ratio(row.stats.median, base.map(|b| b.median)),
            ratio(row.stats.p99, base.map(|b| b.p99)),
        ));
    }
    out
}

/// Settle latency through a [`TerminalService`]: opens a Python REPL,
/// warms up, then times `rounds` sends of `1+1` (each checked to answer
/// `2` and settle on `input_wait`), and closes it.
pub async fn service_python_settle(
    service: &dyn TerminalService,
    owner: &Owner,
    rounds: usize,
) -> Result<Vec<Duration>, TerminalError> {
    let opened = service
        .open(
            owner,
            OpenRequest {
                command: Some(PYTHON_REPL.iter().map(|s| (*s).to_owned()).collect()),
                ..OpenRequest::default()
            },
        )
        .await?;
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds + WARM_UP {
        let started = Instant::now();
        let outcome = service
            .send(owner, opened.id, SendRequest::line("1+1"))
            .await?;
        let took = started.elapsed();
        if outcome.reason != SettleReason::InputWait || !outcome.output.starts_with("2\n") {
            return Err(TerminalError::invalid(
                "text",
                format!(
                    "unexpected settle: {:?} {:?}",
                    outcome.reason, outcome.output
                ),
            ));
        }
        if round >= WARM_UP {
            samples.push(took);
        }
    }
    service.close(owner, opened.id).await?;
    Ok(samples)
}

/// A blocking pty with a Python REPL, read by a background thread.
struct RawRepl {
    pty: Arc<pty_process::blocking::Pty>,
    child: std::process::Child,
}

impl RawRepl {
    fn start() -> std::io::Result<(Self, Vec<u8>)> {
        let (pty, pts) = pty_process::blocking::open().map_err(to_io)?;
        pty.resize(pty_process::Size::new(40, 160)).map_err(to_io)?;
        let child = pty_process::blocking::Command::new(PYTHON_REPL[0])
            .args(&PYTHON_REPL[1..])
            .env("TERM", "xterm-256color")
            .spawn(pts)
            .map_err(to_io)?;
        let mut repl = Self {
            pty: Arc::new(pty),
            child,
        };
        let mut seen = Vec::new();
        repl.read_until(&mut seen, b">>> ")?;
        Ok((repl, seen))
    }

    fn read_until(&mut self, seen: &mut Vec<u8>, end: &[u8]) -> std::io::Result<()> {
        let mut buf = [0u8; 4096];
        while !seen.ends_with(end) {
            let n = (&*self.pty).read(&mut buf)?;
            if n == 0 {
                return Err(std::io::Error::other("REPL ended"));
            }
            seen.extend_from_slice(&buf[..n]);
        }
        Ok(())
    }
}

impl Drop for RawRepl {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn to_io(e: pty_process::Error) -> std::io::Error {
    match e {
        pty_process::Error::Io(io) => io,
        other @ (pty_process::Error::Rustix(_)
        | pty_process::Error::TokioAsyncFd(_)
        | pty_process::Error::Unsplit(..)) => std::io::Error::other(other.to_string()),
    }
}

/// The floor: raw `pty-process`, write `1+1\r`, block reading until the
/// answer and the next prompt arrived.
pub fn raw_pty_python_settle(rounds: usize) -> std::io::Result<Vec<Duration>> {
    let (mut repl, _) = RawRepl::start()?;
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds + WARM_UP {
        let mut seen = Vec::new();
        let started = Instant::now();
        (&*repl.pty).write_all(b"1+1\r")?;
        repl.read_until(&mut seen, b"2\r\n>>> ")?;
        if round >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    Ok(samples)
}

/// A model of a polling design (no real peer is run here): completion is
/// checked by a non-blocking read of the pty on each
/// tick of a fixed `interval` timer that runs independently of the sends,
/// as a poll loop does. Each send is written at a random instant between
/// two ticks (a client does not write in step with the server's timer),
/// and is timed until the tick whose read finds the answer and the prompt.
pub fn interval_poll_python_settle(
    rounds: usize,
    interval: Duration,
) -> std::io::Result<Vec<Duration>> {
    let (repl, _) = RawRepl::start()?;
    let fd = std::os::fd::AsFd::as_fd(&*repl.pty);
    let flags = nix::fcntl::OFlag::from_bits_truncate(
        nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).map_err(std::io::Error::from)?,
    );
    nix::fcntl::fcntl(
        fd,
        nix::fcntl::FcntlArg::F_SETFL(flags | nix::fcntl::OFlag::O_NONBLOCK),
    )
    .map_err(std::io::Error::from)?;
    // Everything the pty holds now, without blocking.
    let drain = |seen: &mut Vec<u8>| -> std::io::Result<()> {
        let mut buf = [0u8; 4096];
        loop {
            match (&*repl.pty).read(&mut buf) {
                Ok(0) => return Err(std::io::Error::other("REPL ended")),
                Ok(n) => seen.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    };
    let grid = Instant::now();
    let next_tick = |after: Instant| {
        let ticks = (after - grid).as_nanos() / interval.as_nanos() + 1;
        grid + interval * u32::try_from(ticks).unwrap_or(u32::MAX)
    };
    let mut random = 0x9e37_79b9_7f4a_7c15_u64;
    let mut samples = Vec::with_capacity(rounds);
    for round in 0..rounds + WARM_UP {
        random ^= random << 13;
        random ^= random >> 7;
        random ^= random << 17;
        std::thread::sleep(interval.mul_f64((random % 1000) as f64 / 1000.0));
        let mut seen = Vec::new();
        drain(&mut seen)?;
        seen.clear();
        let started = Instant::now();
        (&*repl.pty).write_all(b"1+1\r")?;
        loop {
            let tick = next_tick(Instant::now());
            std::thread::sleep(tick.saturating_duration_since(Instant::now()));
            drain(&mut seen)?;
            if seen.ends_with(b"2\r\n>>> ") {
                break;
            }
            if started.elapsed() > Duration::from_secs(10) {
                return Err(std::io::Error::other("poll never saw the prompt"));
            }
        }
        if round >= WARM_UP {
            samples.push(started.elapsed());
        }
    }
    Ok(samples)
}

/// What tmux-based agent tools do: `tmux send-keys`, then `capture-pane`
/// back to back until the answer shows. Sends `N+1` with a distinct `N`
/// per round so a stale pane never counts. The tmux server reads no
/// configuration (`-f /dev/null`) and gets the same warm-up rounds as the
/// other rows.
pub fn tmux_python_settle(rounds: usize) -> std::io::Result<Vec<Duration>> {
    // A socket of its own, removed afterwards (tmux leaves it behind).
    let socket = std::env::temp_dir().join(format!("dsh-bench-tmux-{}.sock", std::process::id()));
    // `-f /dev/null`: no user configuration (hooks, status line, plugins).
    let tmux = |args: &[&str]| -> std::io::Result<std::process::Output> {
        Command::new("tmux")
            .args(["-f", "/dev/null", "-S"])
            .arg(&socket)
            .args(args)
            .stdin(Stdio::null())
            .output()
    };
    let mut argv = vec!["new-session", "-d", "-s", "b", "-x", "160", "-y", "40"];
    argv.extend_from_slice(PYTHON_REPL);
    let started = tmux(&argv)?;
    if !started.status.success() {
        return Err(std::io::Error::other(
            String::from_utf8_lossy(&started.stderr).into_owned(),
        ));
    }
    let result = (|| {
        let pane_ready = |want: &str| -> std::io::Result<bool> {
            let out = tmux(&["capture-pane", "-p", "-t", "b"])?;
            let text = String::from_utf8_lossy(&out.stdout);
            let lines: Vec<&str> = text
                .lines()
                .map(str::trim_end)
                .filter(|l| !l.is_empty())
                .collect();
            Ok(lines.len() >= 2
                && lines[lines.len() - 1] == ">>>"
                && lines[lines.len() - 2] == want)
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !tmux(&["capture-pane", "-p", "-t", "b"])
            .map(|o| String::from_utf8_lossy(&o.stdout).contains(">>>"))?
        {
            if Instant::now() > deadline {
                return Err(std::io::Error::other("tmux REPL never started"));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut samples = Vec::with_capacity(rounds);
        for round in 0..rounds + WARM_UP {
            let n = 1000 + round;
            let expr = format!("{n}+1");
            let want = (n + 1).to_string();
            let started = Instant::now();
            tmux(&["send-keys", "-t", "b", &expr, "Enter"])?;
            while !pane_ready(&want)? {
                if started.elapsed() > Duration::from_secs(10) {
                    return Err(std::io::Error::other("tmux never showed the answer"));
                }
            }
            if round >= WARM_UP {
                samples.push(started.elapsed());
            }
        }
        Ok(samples)
    })();
    let _ = tmux(&["kill-server"]);
    let _ = std::fs::remove_file(&socket);
    result
}

/// Result of a flood: both rows time the same span, from writing the
/// command line to a shell at its prompt until the prompt is back after
/// the last byte, and both have checked that every byte arrived.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Flood {
    /// Bytes of program output, counted as they arrived.
    pub bytes: u64,
    /// Wall time of the span.
    pub elapsed: Duration,
    /// Peak growth of this process's resident memory during the run, KiB.
    pub peak_rss_growth_kib: u64,
}

impl Flood {
    /// Throughput in MB/s (10^6 bytes).
    pub fn mb_per_s(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.elapsed.as_secs_f64()
    }
}

/// Samples resident memory until dropped; reports the peak growth.
struct RssWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
    base: u64,
}

impl RssWatch {
    fn start() -> Self {
        let base = process_tree::resident_kib();
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !flag.load(Ordering::Relaxed) {
                peak = peak.max(process_tree::resident_kib());
                std::thread::sleep(Duration::from_millis(2));
            }
            peak.max(process_tree::resident_kib())
        });
        Self {
            stop,
            thread: Some(thread),
            base,
        }
    }

    fn finish(mut self) -> u64 {
        self.stop.store(true, Ordering::Relaxed);
        let peak = self.thread.take().and_then(|t| t.join().ok()).unwrap_or(0);
        peak.saturating_sub(self.base)
    }
}

/// The flood table: each round's dsh flood next to the raw read that
/// followed it, each round's ratio, and the median of the ratios (the raw
/// read alone varies from run to run: rounds taken in turn keep the ratio
/// steady).
pub fn render_flood(rounds: &[(Flood, Flood)]) -> String {
    let bytes = rounds.first().map_or(0, |(dsh, _)| dsh.bytes);
    let mut out = format!(
        "| flood: `yes | head -c {bytes}`, one command line, until the prompt is back | round | bytes (all checked) | seconds | MB/s | peak RSS growth | dsh / raw |\n|---|---:|---:|---:|---:|---:|---:|\n"
    );
    let mut ratios = Vec::new();
    for (round, (dsh, raw)) in rounds.iter().enumerate() {
        let ratio = dsh.mb_per_s() / raw.mb_per_s();
        ratios.push(ratio);
        for (label, flood, ratio) in [
            (
                "dsh send (sanitize + ring + screen + capture)",
                dsh,
                format!("{ratio:.2}"),
            ),
            (
                "raw pty-process read of the same shell, discarded",
                raw,
                String::new(),
            ),
        ] {
            out.push_str(&format!(
                "| {label} | {} | {} | {:.2} | {:.1} | {:.1} MiB | {ratio} |\n",
                round + 1,
                flood.bytes,
                flood.elapsed.as_secs_f64(),
                flood.mb_per_s(),
                flood.peak_rss_growth_kib as f64 / 1024.0
            ));
        }
    }
    ratios.sort_by(f64::total_cmp);
    if let Some(median) = ratios.get(ratios.len() / 2) {
        out.push_str(&format!(
            "dsh / raw throughput, median of {} rounds: {median:.2}",
            ratios.len()
        ));
    }
    out
}

/// The shell command that prints exactly `bytes` bytes of 100-byte lines.
pub fn flood_command(bytes: u64) -> String {
    format!("yes {} | head -c {bytes}", &"0123456789".repeat(10)[..99])
}

fn short_count(what: &str, got: u64, want: u64) -> std::io::Error {
    std::io::Error::other(format!(
        "{what}: {got} bytes of output arrived, {want} were printed"
    ))
}

/// A flood through a [`TerminalService`] (default shell, one send); fails
/// unless the send counted every byte.
pub async fn service_flood(
    service: &dyn TerminalService,
    owner: &Owner,
    bytes: u64,
) -> Result<Flood, TerminalError> {
    let opened = service.open(owner, OpenRequest::default()).await?;
    let watch = RssWatch::start();
    let started = Instant::now();
    let outcome = service
        .send(
            owner,
            opened.id,
            SendRequest::line(flood_command(bytes)).with_timeout(Duration::from_secs(600)),
        )
        .await?;
    let elapsed = started.elapsed();
    let peak = watch.finish();
    service.close(owner, opened.id).await?;
    if outcome.reason != SettleReason::Prompt || outcome.total_bytes != bytes {
        return Err(TerminalError::invalid(
            "text",
            format!(
                "the flood settled by {:?} with {} bytes; {bytes} were printed",
                outcome.reason, outcome.total_bytes
            ),
        ));
    }
    Ok(Flood {
        bytes: outcome.total_bytes,
        elapsed,
        peak_rss_growth_kib: peak,
    })
}

/// The plan's flood rounds: in each, a flood through `service`
/// ([`service_flood`]), then the raw read ([`raw_flood`]).
pub async fn flood_rounds(
    service: &dyn TerminalService,
    owner: &Owner,
    plan: &Plan,
) -> Result<Vec<(Flood, Flood)>, Box<dyn std::error::Error + Send + Sync>> {
    let bytes = plan.flood_bytes;
    let mut rounds = Vec::with_capacity(plan.flood_rounds);
    for _ in 0..plan.flood_rounds {
        let dsh = service_flood(service, owner, bytes).await?;
        let raw = tokio::task::spawn_blocking(move || raw_flood(bytes)).await??;
        rounds.push((dsh, raw));
    }
    Ok(rounds)
}

/// The floor: an interactive bash on a raw `pty-process` pty, the same
/// command line written to it at its prompt, the output read and
/// discarded (but counted) until the prompt is back. Fails unless every
/// byte arrived.
pub fn raw_flood(bytes: u64) -> std::io::Result<Flood> {
    const PROMPT: &[u8] = b"<raw-flood-prompt> ";
    let (mut pty, pts) = pty_process::blocking::open().map_err(to_io)?;
    pty.resize(pty_process::Size::new(40, 160)).map_err(to_io)?;
    // No readline (the tty echoes the line), no rc files, a prompt that
    // the output cannot contain.
    let mut child = pty_process::blocking::Command::new("bash")
        .args(["--norc", "--noprofile", "--noediting", "-i"])
        .env("PS1", std::str::from_utf8(PROMPT).unwrap_or("$ "))
        .env("TERM", "dumb")
        .spawn(pts)
        .map_err(to_io)?;
    let result = (|| {
        let mut buf = vec![0u8; 64 * 1024];
        let mut tail: Vec<u8> = Vec::new();
        while !tail.ends_with(PROMPT) {
            let n = pty.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::Error::other("bash ended before its prompt"));
            }
            tail.extend_from_slice(&buf[..n]);
        }
        let command = format!("{}\n", flood_command(bytes));
        let watch = RssWatch::start();
        let started = Instant::now();
        pty.write_all(command.as_bytes())?;
        // The echo of the line ends with the first `\r\n`; the program's
        // bytes follow (each `\n` sent as `\r\n` by the pty), then the
        // prompt. Count every byte but the `\r`s; keep the last few to see
        // the prompt arrive.
        let mut echo: Option<Vec<u8>> = Some(Vec::new());
        let mut counted = 0u64;
        let mut window: Vec<u8> = Vec::new();
        let mut take = |data: &[u8]| {
            counted += data.iter().filter(|&&b| b != b'\r').count() as u64;
            window.extend_from_slice(data);
            let excess = window.len().saturating_sub(PROMPT.len());
            window.drain(..excess);
            window.ends_with(PROMPT)
        };
        loop {
            let n = pty.read(&mut buf)?;
            if n == 0 {
                return Err(std::io::Error::other("bash ended during the flood"));
            }
            let done = match echo.as_mut() {
                None => take(&buf[..n]),
                Some(line) => {
                    line.extend_from_slice(&buf[..n]);
                    match line.windows(2).position(|w| w == b"\r\n") {
                        None => false,
                        Some(end) => {
                            let after = line.split_off(end + 2);
                            echo = None;
                            take(&after)
                        }
                    }
                }
            };
            if done {
                break;
            }
        }
        let elapsed = started.elapsed();
        let peak = watch.finish();
        let got = counted.saturating_sub(PROMPT.len() as u64);
        if got != bytes {
            return Err(short_count("raw flood", got, bytes));
        }
        Ok(Flood {
            bytes: got,
            elapsed,
            peak_rss_growth_kib: peak,
        })
    })();
    let _ = child.kill();
    let _ = child.wait();
    result
}
