//! `dsh mcp --remote TARGET`: the agent's MCP client here, the daemon
//! where the code is.
//!
//! The bridge opens a stream to the target ([`target`]: the user's own
//! `ssh`, or any command that gives a stdio stream such as `docker exec
//! -i`), installs and starts `dsh mcp` there ([`bootstrap`]), and relays
//! MCP between the client's stdio and that stream. On the far side `dsh
//! mcp` is the ordinary bridge to the target's own daemon, which owns the
//! terminals, jobs, language servers, sandbox and store in the remote
//! user's directories. Nothing of this machine crosses but the client's
//! MCP messages and, once, the build: not its environment, config, keys
//! or passwords.
//!
//! The relay reads each message only as far as JSON-RPC needs, so that a
//! dropped stream is never a hang:
//!
//! * every request still unanswered when the stream ends gets an answer at
//!   once: a `tools/call` a tool error `REMOTE_DISCONNECTED` (retryable;
//!   the call may have run), anything else a JSON-RPC error;
//! * the bridge then reconnects (a few tries with back-off, and again at
//!   the next request), replays the client's `initialize`, and takes the
//!   agent's terminals and jobs back with the last resume key the target
//!   gave it (`terminal_list {resume}`), so they keep their ids;
//! * a request that arrives while the target cannot be reached gets
//!   `REMOTE_UNREACHABLE` with the reason (ssh's own words).

pub mod bootstrap;

use std::collections::{HashMap, HashSet};
use std::io::Write as _;
use std::path::PathBuf;
use std::process::ChildStdin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use self::bootstrap::{Build, Line, Stream};
use super::ClientError;
use super::bridge::BridgeEnd;
use crate::remotes::{self as hosts, target::Target};
use daemon_wire::Code;
use daemon_wire::model_view::ModelView;

/// How `dsh mcp --remote` was started.
#[derive(Debug, Clone)]
pub struct RemoteOptions {
    /// Where to.
    pub target: Target,
    /// `--preset`, passed to `dsh mcp` on the target.
    pub preset: Option<String>,
    /// The local runtime directory, where the bridge registers itself for
    /// `dsh ps` and `dsh attach` (see [`hosts`]).
    pub runtime_dir: PathBuf,
}

/// The waits between reconnection tries after a drop.
const BACKOFF: [Duration; 4] = [
    Duration::from_millis(250),
    Duration::from_secs(1),
    Duration::from_secs(3),
    Duration::from_secs(6),
];

/// How long a replayed `initialize` or the resume may take on the target.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(30);

/// How long the bridge retries a resume the target does not know yet (the
/// target's daemon sees the old connection end a moment after the drop).
const RESUME_PATIENCE: Duration = Duration::from_secs(10);

/// The prefix of a resume key in a reply (see the daemon's host).
const KEY_PREFIX: &str = "dsh-rk-";

/// How often the relay looks at whether a stream still answers.
const TICK: Duration = Duration::from_secs(1);

/// With calls in flight and nothing heard from the target for this long,
/// the bridge asks it an MCP `ping`.
const QUIET: Duration = Duration::from_secs(5);

/// A target that does not answer that `ping` within this long has stalled
/// (a paused container, a peer that stopped reading): its stream is ended,
/// which answers the calls in flight and reconnects.
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// The most lines queued for a target that does not read them; one more
/// is a stalled stream, ended like an unanswered `ping`.
const WRITE_QUEUE: usize = 1024;

enum Event {
    Client(Vec<u8>),
    ClientClosed,
    Remote(u64, Line),
    Stop,
}

/// The live stream and its generation (lines of an older one are stale).
struct Live {
    generation: u64,
    /// Lines to the target, written by a thread of their own (a target
    /// that stops reading never blocks the relay).
    writer: mpsc::SyncSender<Vec<u8>>,
    /// When the target last said anything.
    heard: Instant,
    /// The bridge's `ping` in flight: its id and when it was sent.
    ping: Option<(String, Instant)>,
    /// Why the bridge ended the stream itself, when it did.
    stalled: Option<String>,
    stream_child: std::process::Child,
    stderr: std::sync::Arc<std::sync::Mutex<std::collections::VecDeque<String>>>,
    stderr_done: mpsc::Receiver<()>,
}

struct Relay {
    options: RemoteOptions,
    build: Build,
    host: String,
    events: mpsc::Sender<Event>,
    live: Option<Live>,
    generation: u64,
    /// The client's `initialize` request, replayed on every new stream.
    initialize: Option<Value>,
    /// Requests of the client not answered yet: id (as JSON) → method.
    pending: HashMap<String, String>,
    /// The last resume key the target gave this agent.
    resume_key: Option<String>,
    /// The MCP client's own name: the target is told another (see
    /// [`Relay::relay_client_info`]), and the bridge shapes the results
    /// it relays for this one.
    client: Option<String>,
    /// Why the last connection attempt failed.
    last_error: String,
    /// Numbers the bridge's own requests.
    own_ids: u64,
    /// This bridge's registration for `dsh ps` and `dsh attach`.
    registered: Option<hosts::Registered>,
    /// Requests of the target's (an elicitation) the client has not
    /// answered yet, on the live stream.
    server_pending: HashSet<String>,
    /// The client's `terminal_list {resume}` calls in flight: id → key.
    resuming: HashMap<String, String>,
    /// When the last round of reconnection tries failed.
    failed_at: Option<Instant>,
    /// Set by SIGTERM or SIGINT: stop trying to reconnect.
    stopping: Arc<AtomicBool>,
    /// What the model must hear in its next tool result: a reconnection
    /// that could not take its work back.
    notice: Option<String>,
}

/// Runs the bridge until the client closes or is stopped.
pub fn run(options: RemoteOptions) -> Result<BridgeEnd, ClientError> {
    let signals = super::block_stop_signals();
    let build = Build::find().map_err(|e| ClientError::Unreachable(e.to_string()))?;
    let (events, inbox) = mpsc::channel();
    spawn_client_reader(events.clone());
    let stopping = Arc::new(AtomicBool::new(false));
    {
        let events = events.clone();
        let stopping = stopping.clone();
        // SIGHUP (a reload) is the target daemon's business, not the bridge's.
        super::on_stop_signals(
            signals,
            || {},
            move || {
                stopping.store(true, Ordering::Release);
                let _ = events.send(Event::Stop);
            },
        );
    }
    let host = options.target.host();
    let registered = hosts::Registered::new(
        &options.runtime_dir,
        hosts::Registration {
            pid: std::process::id(),
            target: options.target.text(),
            host: host.clone(),
            build: build.name.clone(),
            control: None,
        },
    );
    let mut relay = Relay {
        options,
        build,
        host,
        events,
        live: None,
        generation: 0,
        initialize: None,
        pending: HashMap::new(),
        resume_key: None,
        client: None,
        last_error: String::new(),
        own_ids: 0,
        registered,
        server_pending: HashSet::new(),
        resuming: HashMap::new(),
        failed_at: None,
        stopping: stopping.clone(),
        notice: None,
    };
    relay.connect();
    loop {
        match inbox.recv_timeout(TICK) {
            Ok(Event::Client(line)) => relay.on_client_line(line),
            Ok(Event::Remote(generation, line)) => relay.on_remote_line(generation, line),
            Ok(Event::ClientClosed | Event::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => {
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
        relay.check_liveness();
    }
    relay.close();
    Ok(BridgeEnd::Closed)
}

fn spawn_client_reader(events: mpsc::Sender<Event>) {
    std::thread::spawn(move || {
        use std::io::{BufRead as _, Read as _};
        let mut stdin = std::io::stdin().lock();
        loop {
            let mut line = Vec::new();
            match (&mut stdin)
                .take(bootstrap::MAX_LINE)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    if line.last() == Some(&b'\n') {
                        line.pop();
                    }
                    if !line.iter().all(u8::is_ascii_whitespace)
                        && events.send(Event::Client(line)).is_err()
                    {
                        return;
                    }
                }
            }
        }
        let _ = events.send(Event::ClientClosed);
    });
}

/// The id of a message, as a map key.
fn id_key(message: &Value) -> Option<String> {
    message
        .get("id")
        .filter(|id| !id.is_null())
        .map(Value::to_string)
}

impl Relay {
    fn say(&self, what: &str) {
        eprintln!("dsh: {what}");
    }

    fn write_client(&self, line: &[u8]) {
        let mut out = std::io::stdout().lock();
        let _ = out.write_all(line);
        let _ = out.write_all(b"\n");
        let _ = out.flush();
    }

    /// Opens a stream and starts `dsh mcp` on it; on a reconnect, replays
    /// the client's `initialize` and takes the agent's work back.
    fn connect(&mut self) -> bool {
        let say = |what: &str| eprintln!("dsh: {what}");
        // Over ssh, each connection is a multiplexing master on a socket of
        // its own, for `dsh ps` and `dsh attach` to ride.
        let control = match (&self.options.target, &self.registered) {
            (Target::Ssh { .. }, Some(r)) => r.control_for(self.generation + 1),
            _ => None,
        };
        let stream = match bootstrap::open(
            &self.options.target,
            &self.build,
            self.options.preset.as_deref(),
            control.as_deref(),
            &say,
        ) {
            Ok(stream) => stream,
            Err(e) => {
                let e = e.to_string();
                self.say(&e);
                self.last_error = e;
                return false;
            }
        };
        let Stream {
            child,
            stdin,
            lines,
            stderr,
            stderr_done,
        } = stream;
        self.generation += 1;
        let mut live = Live {
            generation: self.generation,
            writer: spawn_writer(stdin),
            heard: Instant::now(),
            ping: None,
            stalled: None,
            stream_child: child,
            stderr,
            stderr_done,
        };
        if let Some(initialize) = self.initialize.clone()
            && let Err(e) = self.replay(&mut live, &lines, initialize)
        {
            self.last_error = format!("{} answered the reconnection badly: {e}", self.host);
            self.say(&self.last_error);
            bootstrap::finish(&mut live.stream_child, &live.stderr_done);
            return false;
        }
        let events = self.events.clone();
        let generation = self.generation;
        std::thread::spawn(move || {
            for line in lines {
                let end = matches!(line, Line::End(_));
                if events.send(Event::Remote(generation, line)).is_err() || end {
                    return;
                }
            }
            let _ = events.send(Event::Remote(generation, Line::End("end of stream".into())));
        });
        self.live = Some(live);
        self.failed_at = None;
        if let Some(r) = &mut self.registered {
            r.set_control(control);
        }
        true
    }

    /// A request of the bridge's own on `live`, answered synchronously.
    fn ask(
        &mut self,
        live: &mut Live,
        lines: &mpsc::Receiver<Line>,
        mut message: Value,
    ) -> Result<Value, ReplayError> {
        self.own_ids += 1;
        let id = format!("dsh-bridge-{}", self.own_ids);
        message["id"] = json!(id);
        send(live, &message)?;
        let deadline = Instant::now() + REPLAY_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match lines.recv_timeout(left) {
                Ok(Line::Text(line)) => {
                    let Ok(reply) = serde_json::from_slice::<Value>(&line) else {
                        continue;
                    };
                    if reply.get("id") == Some(&json!(id)) && reply.get("method").is_none() {
                        return Ok(reply);
                    }
                    // A notification or request of the target's, meanwhile.
                    if reply.get("method").is_some()
                        && let Some(id) = id_key(&reply)
                    {
                        self.server_pending.insert(id);
                    }
                    self.write_client(&line);
                }
                Ok(Line::End(why)) => return Err(ReplayError::Ended(why)),
                Err(_) => {
                    return Err(ReplayError::NoAnswer {
                        secs: REPLAY_TIMEOUT.as_secs(),
                    });
                }
            }
        }
    }

    fn replay(
        &mut self,
        live: &mut Live,
        lines: &mpsc::Receiver<Line>,
        initialize: Value,
    ) -> Result<(), ReplayError> {
        let reply = self.ask(live, lines, initialize)?;
        if let Some(error) = reply.get("error") {
            return Err(ReplayError::Initialize(error.clone()));
        }
        send(
            live,
            &json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )?;
        let Some(key) = self.resume_key.clone() else {
            return Ok(());
        };
        let deadline = Instant::now() + RESUME_PATIENCE;
        loop {
            let reply = self.ask(
                live,
                lines,
                json!({"jsonrpc": "2.0", "method": "tools/call",
                       "params": {"name": "terminal_list", "arguments": {"resume": key}}}),
            )?;
            let failed = reply.get("error").is_some()
                || reply.pointer("/result/isError") == Some(&json!(true));
            let code = reply
                .pointer("/result/structuredContent/error/code")
                .and_then(Value::as_str)
                .map(str::to_owned)
                .or_else(|| failed.then(|| "ERROR".to_owned()));
            match code.as_deref() {
                None => {
                    // A key is used once: the resume's reply carries the
                    // next one.
                    if let Some(next) = resume_key_of(&reply) {
                        self.resume_key = Some(next);
                    }
                    self.say(&format!(
                        "reconnected to {}; the agent's terminals and jobs there are its own again",
                        self.host
                    ));
                    return Ok(());
                }
                // The old connection is ending on the target right now.
                Some(code) if code == Code::ResumeBusy.as_str() && Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200)); // sleep-ok: a bounded retry while the target notices the old stream's end
                }
                Some(code) => {
                    let message = reply
                        .pointer("/result/structuredContent/error/message")
                        .or_else(|| reply.pointer("/error/message"))
                        .and_then(Value::as_str)
                        .unwrap_or("");
                    self.say(&format!(
                        "reconnected to {}, but its terminals and jobs could not be taken back: [{code}] {message}",
                        self.host
                    ));
                    self.notice = Some(format!(
                        "[dsh] The connection to {} dropped and came back, but your terminals and jobs there could not be taken back ([{code}] {message}): they may have ended with the host's dsh daemon or been ended by a person there. terminal_list and job_list show what you have now.",
                        self.host
                    ));
                    return Ok(());
                }
            }
        }
    }

    /// Tells the target the client is relayed: its name in `initialize`
    /// and in a request's `_meta` (MCP 2026-07-28) gets a suffix, so the
    /// target keeps a result's `structuredContent` (where the resume key
    /// is) for the bridge, which shapes each result for the client it
    /// knows (see [`ModelView`]). Returns whether `message` changed.
    fn relay_client_info(&mut self, message: &mut Value) -> bool {
        let mut changed = false;
        for at in [
            "/params/clientInfo/name",
            "/params/_meta/io.modelcontextprotocol~1clientInfo/name",
        ] {
            if let Some(name) = message.pointer_mut(at)
                && let Some(own) = name.as_str().filter(|n| !n.ends_with(RELAYED))
            {
                self.client.get_or_insert_with(|| own.to_owned());
                *name = json!(format!("{own}{RELAYED}"));
                changed = true;
            }
        }
        changed
    }

    fn on_client_line(&mut self, mut line: Vec<u8>) {
        let mut message: Option<Value> = serde_json::from_slice(&line).ok();
        let method = message
            .as_ref()
            .and_then(|m| m.get("method"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let id = message.as_ref().and_then(id_key);
        if let Some(m) = &mut message
            && self.relay_client_info(m)
        {
            line = m.to_string().into_bytes();
        }
        if let (Some(m), Some("initialize")) = (&mut message, method.as_deref()) {
            // The client's roots are paths of this machine: the target's
            // workspace is the URL's path, and a roots/list asked during a
            // reconnect would wait behind the relay.
            if let Some(map) = m
                .pointer_mut("/params/capabilities")
                .and_then(Value::as_object_mut)
            {
                map.remove("roots");
                // URL-mode elicitation sends the person to the target's own
                // page, on the target's loopback, which this machine's
                // browser cannot reach: the target says instead how a
                // person answers (`dsh answer HOST:pty-N`, here).
                if let Some(elicitation) = map.get_mut("elicitation").and_then(Value::as_object_mut)
                {
                    elicitation.remove("url");
                }
            }
            line = m.to_string().into_bytes();
        }
        let Some(id) = id else {
            // A notification: to the live stream, if any.
            self.write_live(&line);
            return;
        };
        let Some(method) = method else {
            // An answer to a request of the target's: only to the stream
            // that asked (an old stream's request was cancelled at its drop).
            if self.server_pending.remove(&id) {
                self.write_live(&line);
            }
            return;
        };
        let message = message.unwrap_or(Value::Null);
        if self.live.is_none() {
            let failed_lately = self
                .failed_at
                .is_some_and(|at| at.elapsed() < Duration::from_secs(5));
            if failed_lately || !self.connect() {
                let hint = match self.options.target {
                    Target::Ssh { .. } => "check the host and your ssh access to it",
                    Target::Exec { .. } => "check that the exec command reaches the target",
                };
                let reason = format!(
                    "{} cannot be reached: {}; {hint}, then call again",
                    self.host, self.last_error
                );
                self.answer_failed(&message, &method, Code::RemoteUnreachable, &reason);
                return;
            }
        }
        if method == "initialize" {
            self.initialize = Some(message.clone());
        }
        if method == "tools/call"
            && message.pointer("/params/name") == Some(&json!("terminal_list"))
            && let Some(key) = message
                .pointer("/params/arguments/resume")
                .and_then(Value::as_str)
        {
            self.resuming.insert(id.clone(), key.to_owned());
        }
        self.pending.insert(id, method);
        self.write_live(&line);
    }

    /// Queues a line for the live stream; a failed write is the stream's
    /// end, which its reader reports (and that answers what is pending). A
    /// target that stopped reading has stalled: its stream is ended.
    fn write_live(&mut self, line: &[u8]) {
        if let Some(live) = self.live.as_mut()
            && let Err(mpsc::TrySendError::Full(_)) = live.writer.try_send(line.to_vec())
        {
            let why = format!("it read none of the last {WRITE_QUEUE} messages");
            self.stall(why);
        }
    }

    /// Asks a quiet target with calls in flight whether it still answers,
    /// and ends the stream of one that does not.
    fn check_liveness(&mut self) {
        let busy = !self.pending.is_empty();
        let Some(live) = self.live.as_mut() else {
            return;
        };
        match &live.ping {
            None if busy && live.heard.elapsed() >= QUIET => {
                self.own_ids += 1;
                let id = format!("dsh-bridge-ping-{}", self.own_ids);
                let ping = json!({"jsonrpc": "2.0", "id": id, "method": "ping"});
                live.ping = Some((id, Instant::now()));
                self.write_live(ping.to_string().as_bytes());
            }
            Some((_, sent)) if sent.elapsed() >= PING_TIMEOUT => {
                let why = format!(
                    "it answered nothing for {} s, not even a ping",
                    (QUIET + PING_TIMEOUT).as_secs()
                );
                self.stall(why);
            }
            _ => {}
        }
    }

    /// Ends a stalled stream: its whole transport, so its reader sees the
    /// end and the calls in flight are answered.
    fn stall(&mut self, why: String) {
        let Some(live) = self.live.as_mut() else {
            return;
        };
        if live.stalled.is_some() {
            return;
        }
        eprintln!("dsh: {} stalled: {why}; ending the stream", self.host);
        live.stalled = Some(why);
        // Only while the leader is unreaped (it is until `dropped` waits
        // for it), so the group's id is still ours.
        if let Ok(pid) = i32::try_from(live.stream_child.id()) {
            let _ = nix::sys::signal::killpg(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
        }
    }

    fn on_remote_line(&mut self, generation: u64, line: Line) {
        let Some(live) = self.live.as_mut().filter(|l| l.generation == generation) else {
            return;
        };
        live.heard = Instant::now();
        match line {
            Line::Text(mut text) => {
                if let Ok(message) = serde_json::from_slice::<Value>(&text) {
                    // The answer to the bridge's own ping is the bridge's.
                    if live
                        .ping
                        .as_ref()
                        .is_some_and(|(id, _)| message.get("id") == Some(&json!(id)))
                    {
                        live.ping = None;
                        return;
                    }
                    match (id_key(&message), message.get("method").is_some()) {
                        (Some(id), true) => {
                            self.server_pending.insert(id);
                        }
                        (Some(id), false) => {
                            let method = self.pending.remove(&id);
                            // Most replies need neither: they pass as they came.
                            let call = method.as_deref() == Some("tools/call");
                            let qualify = call
                                && matches!(self.options.target, Target::Ssh { .. })
                                && text.windows(6).any(|w| w == b"`dsh a");
                            if call && (qualify || self.notice.is_some()) {
                                let mut reply = message.clone();
                                let mut changed =
                                    qualify && qualify_commands(&mut reply, &self.host);
                                if reply
                                    .pointer("/result/content")
                                    .is_some_and(Value::is_array)
                                    && let Some(notice) = self.notice.take()
                                {
                                    reply = with_notice(reply, &notice);
                                    changed = true;
                                }
                                if changed {
                                    text = reply.to_string().into_bytes();
                                }
                            }
                            let failed = message.get("error").is_some()
                                || message.pointer("/result/isError") == Some(&json!(true));
                            if let Some(key) = self.resuming.remove(&id).filter(|_| !failed) {
                                self.resume_key = Some(key);
                            }
                            if let Some(key) = resume_key_of(&message) {
                                self.resume_key = Some(key);
                            }
                            if call
                                && let ModelView::TextOnly { cut } =
                                    ModelView::of(self.client.as_deref())
                                && let Ok(mut reply) = serde_json::from_slice::<Value>(&text)
                                && text_only(&mut reply, cut)
                            {
                                text = reply.to_string().into_bytes();
                            }
                        }
                        (None, _) => {}
                    }
                }
                self.write_client(&text);
            }
            Line::End(why) => self.dropped(&why),
        }
    }

    /// The stream ended under a live client: answer what is pending, then
    /// reconnect.
    fn dropped(&mut self, why: &str) {
        let Some(mut live) = self.live.take() else {
            return;
        };
        let why = live.stalled.take().unwrap_or_else(|| why.to_owned());
        let status = bootstrap::finish(&mut live.stream_child, &live.stderr_done);
        let said = live
            .stderr
            .lock()
            .map(|t| t.iter().cloned().collect::<Vec<_>>().join(" / "))
            .unwrap_or_default();
        let said = if said.is_empty() {
            String::new()
        } else {
            format!("; it said: {said}")
        };
        let reason = format!(
            "the connection to {} dropped ({why}{status}{said}) before this call finished; it may have run there. dsh reconnects and keeps your terminals and jobs on {} under their ids: look (terminal_read, job_output) before you repeat a send",
            self.host, self.host
        );
        self.say(&format!(
            "the connection to {} dropped ({why}{status})",
            self.host
        ));
        for (id, method) in std::mem::take(&mut self.pending) {
            if let Ok(id) = serde_json::from_str::<Value>(&id) {
                let message = json!({ "id": id });
                self.answer_failed(&message, &method, Code::RemoteDisconnected, &reason);
            }
        }
        self.resuming.clear();
        // The target's questions to the client (an elicitation) died with
        // the stream: the client is told, and a late answer goes nowhere.
        for id in std::mem::take(&mut self.server_pending) {
            if let Ok(id) = serde_json::from_str::<Value>(&id) {
                let cancelled = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": id, "reason": format!("the connection to {} dropped", self.host)}});
                self.write_client(cancelled.to_string().as_bytes());
            }
        }
        for wait in BACKOFF {
            let until = Instant::now() + wait;
            while Instant::now() < until {
                if self.stopping.load(Ordering::Acquire) {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50)); // sleep-ok: back-off between reconnection tries, watching for a stop
            }
            if self.stopping.load(Ordering::Acquire) || self.connect() {
                return;
            }
        }
        // Calls in the next moments are answered at once rather than each
        // waiting out another try.
        self.failed_at = Some(Instant::now());
        self.say(&format!(
            "{} stays unreachable; a call from 5 s on tries again",
            self.host
        ));
    }

    /// Answers `request` with an error: a tool error for `tools/call` (the
    /// model reads it), a JSON-RPC error otherwise.
    fn answer_failed(&self, request: &Value, method: &str, code: Code, message: &str) {
        let Some(id) = request.get("id") else { return };
        let reply = if method == "tools/call" {
            json!({"jsonrpc": "2.0", "id": id, "result": {
                "content": [{"type": "text", "text": format!("[error {code}] {message}")}],
                "structuredContent": {"error": {"code": code, "message": message, "retryable": true}},
                "isError": true,
            }})
        } else {
            json!({"jsonrpc": "2.0", "id": id, "error": {
                "code": -32000, "message": format!("{code}: {message}"),
            }})
        };
        self.write_client(reply.to_string().as_bytes());
    }

    /// The client is gone: let the target's `dsh mcp` see the end of its
    /// input and finish (its daemon keeps or ends the work as for any
    /// client), then make sure the stream is over.
    fn close(&mut self) {
        let Some(Live {
            writer,
            mut stream_child,
            stderr_done,
            ..
        }) = self.live.take()
        else {
            return;
        };
        // The writer ends once it wrote what is queued, closing the
        // stream's input.
        drop(writer);
        crate::remotes::wait_within(&mut stream_child, Duration::from_secs(10));
        bootstrap::finish(&mut stream_child, &stderr_done);
    }
}

/// Queues `message` for `live`'s target.
fn send(live: &Live, message: &Value) -> Result<(), ReplayError> {
    live.writer
        .try_send(message.to_string().into_bytes())
        .map_err(|e| match e {
            mpsc::TrySendError::Full(_) => ReplayError::Full,
            mpsc::TrySendError::Disconnected(_) => ReplayError::Closed,
        })
}

/// Why a new stream did not take the client's session over: the
/// bridge's own requests on it (the client's `initialize`, replayed, and
/// the resume of the agent's work) were not answered.
#[derive(Debug, thiserror::Error)]
enum ReplayError {
    /// The stream's writer has as many lines queued as it may.
    #[error("the stream reads nothing")]
    Full,
    /// The stream's writer has ended.
    #[error("the stream closed")]
    Closed,
    /// The stream ended; how.
    #[error("{0}")]
    Ended(String),
    /// No answer in time.
    #[error("no answer within {secs} s")]
    NoAnswer {
        /// How long it was given.
        secs: u64,
    },
    /// The target answered the replayed `initialize` with an error.
    #[error("initialize failed: {0}")]
    Initialize(Value),
}

/// The thread that writes lines to the target's `stdin`, in order; it
/// ends at the first failed write (the stream's end, which its reader
/// reports) or when the relay drops its sender.
fn spawn_writer(mut stdin: ChildStdin) -> mpsc::SyncSender<Vec<u8>> {
    let (lines, queue) = mpsc::sync_channel::<Vec<u8>>(WRITE_QUEUE);
    std::thread::spawn(move || {
        for mut line in queue {
            line.push(b'\n');
            if stdin.write_all(&line).and_then(|()| stdin.flush()).is_err() {
                return;
            }
        }
    });
    lines
}

/// The target's words for a person's commands on its own terminals
/// (`dsh answer pty-3`, `dsh attach pty-3 --write`), in `reply`'s result,
/// made the commands a person runs here (`dsh answer devbox:pty-3`).
/// Whether any changed.
fn qualify_commands(reply: &mut Value, host: &str) -> bool {
    fn walk(value: &mut Value, host: &str) -> bool {
        match value {
            Value::String(s) => {
                let mut changed = false;
                for verb in ["answer", "attach"] {
                    let from = format!("`dsh {verb} pty-");
                    if s.contains(&from) {
                        *s = s.replace(&from, &format!("`dsh {verb} {host}:pty-"));
                        changed = true;
                    }
                }
                changed
            }
            Value::Array(items) => items.iter_mut().fold(false, |c, v| walk(v, host) | c),
            Value::Object(map) => map.values_mut().fold(false, |c, v| walk(v, host) | c),
            Value::Null | Value::Bool(_) | Value::Number(_) => false,
        }
    }
    reply.get_mut("result").is_some_and(|r| walk(r, host))
}

/// A tool's `reply` with `notice` as its first text (the model reads the
/// content).
fn with_notice(mut reply: Value, notice: &str) -> Value {
    if let Some(content) = reply
        .pointer_mut("/result/content")
        .and_then(Value::as_array_mut)
    {
        content.insert(0, json!({"type": "text", "text": notice}));
    }
    reply
}

/// What the bridge adds to the client's name for the target.
const RELAYED: &str = " (relayed by dsh mcp --remote)";

/// Shapes a relayed tool result for a client whose model reads the text
/// alone: no `structuredContent`, and the text cut to `cut` bytes with
/// dsh's own marker. Returns whether it changed.
fn text_only(reply: &mut Value, cut: Option<usize>) -> bool {
    let Some(result) = reply.get_mut("result").and_then(Value::as_object_mut) else {
        return false;
    };
    let mut changed = result.remove("structuredContent").is_some();
    if let (Some(cut), Some(content)) =
        (cut, result.get_mut("content").and_then(Value::as_array_mut))
    {
        for item in content {
            if let Some(text) = item.get_mut("text")
                && let Some(fitted) = text
                    .as_str()
                    .and_then(|t| tools_catalog::render::fit_rendered(t, cut))
            {
                *text = json!(fitted);
                changed = true;
            }
        }
    }
    changed
}

/// The resume key a tool's reply carries (`structuredContent.resume_key`,
/// where the target's daemon puts it; never a key-shaped string in
/// program output).
fn resume_key_of(reply: &Value) -> Option<String> {
    let key = reply
        .pointer("/result/structuredContent/resume_key")?
        .as_str()?;
    let hex = key.strip_prefix(KEY_PREFIX)?;
    (hex.len() == 32 && hex.bytes().all(|b| b.is_ascii_hexdigit())).then(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_notice_comes_first_in_the_content_and_keeps_the_rest() {
        let reply = json!({"id": 3, "result": {"content": [{"type": "text", "text": "out"}],
            "structuredContent": {"output": "out"}}});
        let said = with_notice(reply, "[dsh] lost");
        assert_eq!(said["result"]["content"][0]["text"], "[dsh] lost");
        assert_eq!(said["result"]["content"][1]["text"], "out");
        assert_eq!(said["result"]["structuredContent"]["output"], "out");
        assert_eq!(said["id"], 3);
    }

    #[test]
    fn a_persons_commands_name_the_host() {
        let mut reply = json!({"result": {"content": [{"type": "text",
            "text": "they run `dsh answer pty-3` in their own terminal, or `dsh attach pty-3 --write`"}],
            "structuredContent": {"output": "dsh answer pty-3", "hint": "`dsh answer pty-3`"}}});
        assert!(qualify_commands(&mut reply, "devbox"));
        assert_eq!(
            reply["result"]["content"][0]["text"],
            "they run `dsh answer devbox:pty-3` in their own terminal, or `dsh attach devbox:pty-3 --write`"
        );
        // Words without the backquotes of a command are left alone.
        assert_eq!(
            reply["result"]["structuredContent"]["output"],
            "dsh answer pty-3"
        );
        assert_eq!(
            reply["result"]["structuredContent"]["hint"],
            "`dsh answer devbox:pty-3`"
        );
        let mut plain = json!({"result": {"content": [{"type": "text", "text": "42"}]}});
        assert!(!qualify_commands(&mut plain, "devbox"));
    }

    /// A relayed result reaches an agent client as its text alone (the
    /// resume key read first), Codex's cut to fit its own limit.
    #[test]
    fn relayed_results_are_shaped_for_the_client() {
        let key = format!("{KEY_PREFIX}{}", "a".repeat(32));
        let reply = json!({"result": {"content": [{"type": "text", "text": "x".repeat(20_000)}],
                                      "structuredContent": {"resume_key": key}}});
        let mut claude = reply.clone();
        assert!(text_only(&mut claude, None));
        assert_eq!(claude["result"].get("structuredContent"), None);
        assert_eq!(
            claude["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .len(),
            20_000
        );
        let mut codex = reply.clone();
        assert!(text_only(&mut codex, Some(10_000)));
        let text = codex["result"]["content"][0]["text"].as_str().unwrap();
        assert!(
            text.len() < 10_100 && text.contains(" bytes omitted …]"),
            "{text}"
        );
        let mut error = json!({"error": {"code": -32601, "message": "no"}});
        assert!(!text_only(&mut error, None));
    }

    #[test]
    fn a_resume_key_is_found_in_a_reply() {
        let key = format!("{KEY_PREFIX}{}", "ab12".repeat(8));
        let reply = json!({"result": {"structuredContent": {"resume_key": key}}});
        assert_eq!(resume_key_of(&reply), Some(key.clone()));
        let printed = json!({"result": {"structuredContent": {"output": key}}});
        assert_eq!(resume_key_of(&printed), None);
        let short = json!({"result": {"structuredContent": {"resume_key": "dsh-rk-abc"}}});
        assert_eq!(resume_key_of(&short), None);
    }
}
