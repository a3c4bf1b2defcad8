//! Host-side bookkeeping: each MCP connection is recorded as a session in
//! the workspace registry, and each tool call is appended to its log.
//!
//! None of this sits on a tool call's reply path: records go through a
//! bounded queue to one writer task per connection, which batches log
//! entries into one store opening. A busy or broken store degrades the
//! log (with a warning in the server's log), never the tools.

use std::time::Duration;

use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;
use workspace::{LogEntry, SessionHeader, SessionId, WorkspaceId};

use crate::store::StoreAccess;
use daemon_wire::records::SessionRecordOp;

/// How many records may wait for the writer before new ones are dropped.
const QUEUE: usize = 1024;

/// How long no call must have come before the writer opens the store.
const QUIET: Duration = Duration::from_millis(100);

/// The longest a record waits for such a quiet moment.
const MAX_DELAY: Duration = Duration::from_secs(2);

/// How often the writer empties the queue while it gathers a batch.
const DRAIN_EVERY: Duration = Duration::from_millis(20);

enum Record {
    Begin(SessionHeader),
    Call(LogEntry),
}

/// Where a recorded session landed, once it is recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// The session's id.
    pub session: SessionId,
    /// Its workspace (id and title), when it joined one.
    pub workspace: Option<(WorkspaceId, String)>,
}

/// What the session log keeps of a call's arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogPolicy {
    /// Keep `bash` commands, `subagent` prompts and `terminal_open` argv
    /// (the `[log] commands` key); otherwise only their size is kept.
    pub commands: bool,
}

/// Where the calls of every session are published as they happen (for
/// the `dsh ui` page), besides the store.
pub trait CallPublisher: Send + Sync {
    /// One call of `session`, just made.
    fn publish(&self, session: SessionId, entry: &LogEntry);
}

/// The sending half: cheap to clone, never blocks.
#[derive(Clone)]
pub struct SessionRecorder {
    tx: mpsc::Sender<Record>,
    policy: LogPolicy,
    writer: Arc<Mutex<Option<tokio::task::JoinHandle<()>>>>,
    recorded: Arc<Mutex<Option<Recorded>>>,
    /// The session's id, from the moment it begins (before the store has
    /// it).
    session: Arc<Mutex<Option<SessionId>>>,
    publisher: Option<Arc<dyn CallPublisher>>,
}

impl SessionRecorder {
    /// Starts the writer task for one connection.
    pub fn start(store: StoreAccess, policy: LogPolicy) -> Self {
        let (tx, rx) = mpsc::channel(QUEUE);
        let recorded = Arc::new(Mutex::new(None));
        let writer = tokio::spawn(write_records(store, rx, recorded.clone()));
        Self {
            tx,
            policy,
            writer: Arc::new(Mutex::new(Some(writer))),
            recorded,
            session: Arc::new(Mutex::new(None)),
            publisher: None,
        }
    }

    /// The recorder, also publishing each call to `publisher`.
    pub fn publishing(mut self, publisher: Arc<dyn CallPublisher>) -> Self {
        self.publisher = Some(publisher);
        self
    }

    /// The session's id once it began (it may not be in the store yet).
    pub fn session_id(&self) -> Option<SessionId> {
        self.session.lock().ok().and_then(|s| *s)
    }

    /// The session as recorded, once the writer recorded it.
    pub fn recorded(&self) -> Option<Recorded> {
        self.recorded.lock().ok().and_then(|r| r.clone())
    }

    /// Lets the writer finish what is queued, waiting at most `bound`.
    /// Every other clone must be gone, or the queue stays open until then.
    pub async fn finish(self, bound: Duration) {
        let writer = self.writer.lock().ok().and_then(|mut w| w.take());
        drop(self);
        if let Some(writer) = writer
            && tokio::time::timeout(bound, writer).await.is_err()
        {
            tracing::warn!("the session log writer did not finish in time");
        }
    }

    /// Records the session's header and attaches it to its workspace.
    pub fn begin(&self, header: SessionHeader) {
        if let Ok(mut session) = self.session.lock() {
            *session = Some(header.id);
        }
        self.send(Record::Begin(header));
    }

    /// Appends one tool call to the session's log; `result` is a
    /// successful call's structured result, from which how it settled is
    /// kept (see [`settled`]).
    pub fn call(
        &self,
        at: DateTime<Utc>,
        tool: &str,
        arguments: &serde_json::Value,
        outcome: &str,
        duration: Duration,
        result: Option<&serde_json::Value>,
    ) {
        let summary = summarize(tool, arguments, self.policy);
        // A secret typed into a command line is not kept either.
        let summary = match redact::Redactor::builtin() {
            Ok(r) => r.redact(&summary).text.into_owned(),
            Err(_) => summary,
        };
        let (reason, exit_code) = result.map_or((None, None), |r| settled(tool, r));
        let entry = LogEntry::new(at, tool, &summary, outcome, duration.as_millis() as u64)
            .with_result(reason.as_deref(), exit_code);
        if let (Some(publisher), Some(session)) = (&self.publisher, self.session_id()) {
            publisher.publish(session, &entry);
        }
        self.send(Record::Call(entry));
    }

    /// Appends something that happened to the session that was not a
    /// tool call — its work detached, resumed, expired — as an entry
    /// named `event` (`detach`, `resume`, `expire`) with `summary`.
    pub fn event(&self, event: &str, summary: &str) {
        let entry = LogEntry::new(Utc::now(), event, summary, "OK", 0);
        if let (Some(publisher), Some(session)) = (&self.publisher, self.session_id()) {
            publisher.publish(session, &entry);
        }
        self.send(Record::Call(entry));
    }

    fn send(&self, record: Record) {
        if let Err(mpsc::error::TrySendError::Full(_)) = self.tx.try_send(record) {
            tracing::warn!("session log queue is full; dropping a record");
        }
    }
}

/// How a successful call settled, from its structured result: the settle
/// reason of a terminal send, `timeout` for a command that timed out, the
/// signal that ended one, a job tool's status; and the exit code it
/// reported.
pub fn settled(tool: &str, result: &serde_json::Value) -> (Option<String>, Option<i64>) {
    let text = |key: &str| result.get(key).and_then(|v| v.as_str()).map(str::to_owned);
    let exit_code = result.get("exit_code").and_then(serde_json::Value::as_i64);
    let reason = match tool {
        "bash" | "subagent" => {
            if result.get("timed_out").and_then(serde_json::Value::as_bool) == Some(true) {
                Some("timeout".to_owned())
            } else {
                text("signal")
            }
        }
        "job_output" | "job_kill" => text("status"),
        _ => text("reason"),
    };
    (reason, exit_code)
}

/// The size of a string argument, in its place.
fn size_only(value: &mut serde_json::Value) {
    let len = value.as_str().map_or(0, str::len);
    *value = serde_json::Value::String(format!("<{len} bytes>"));
}

/// A one-line summary of a call's arguments (the store caps its length).
/// Text typed into a terminal may be a password: only its length is kept.
/// Environment values may be secrets: only their names are kept. Commands
/// are kept (the log is an audit trail) unless the policy says otherwise.
fn summarize(tool: &str, arguments: &serde_json::Value, policy: LogPolicy) -> String {
    use serde_json::Value;
    let mut arguments = arguments.clone();
    match tool {
        "terminal_send" => {
            if let Some(text) = arguments.get_mut("text") {
                size_only(text);
            }
        }
        "terminal_list" => {
            // A resume key is a capability: never kept.
            if let Some(key) = arguments.get_mut("resume") {
                size_only(key);
            }
        }
        "terminal_open" => {
            if let Some(env) = arguments.get_mut("env") {
                let names: Vec<Value> = env
                    .as_object()
                    .map(|map| map.keys().cloned().map(Value::String).collect())
                    .unwrap_or_default();
                *env = Value::Array(names);
            }
            if !policy.commands
                && let Some(Value::Array(argv)) = arguments.get_mut("command")
            {
                argv.iter_mut().for_each(size_only);
            }
        }
        "bash" if !policy.commands => {
            if let Some(command) = arguments.get_mut("command") {
                size_only(command);
            }
        }
        "subagent" if !policy.commands => {
            if let Some(prompt) = arguments.get_mut("prompt") {
                size_only(prompt);
            }
        }
        _ => {}
    }
    let text = arguments.to_string();
    if text.len() <= 240 {
        return text;
    }
    let mut end = 240;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

/// Runs one record on the blocking pool.
async fn persist(
    store: &StoreAccess,
    op: SessionRecordOp,
) -> Result<Option<workspace::SessionStart>, String> {
    let store = store.clone();
    match on_log_thread(move || store.record(op)).await {
        Ok(result) => result.map_err(|e| e.to_string()),
        Err(e) => Err(e),
    }
}

/// The niceness of the thread that writes session logs: the lowest.
pub const LOG_THREAD_NICE: i32 = 19;

type LogJob = Box<dyn FnOnce() + Send>;

/// Runs `job` on the one thread that writes every session's log, which
/// runs at the lowest priority (nice [`LOG_THREAD_NICE`]); on the blocking
/// pool when that thread could not start.
///
/// A standalone server opens the store for each batch, milliseconds of
/// CPU (and the store's own threads, which inherit the priority of the
/// thread that opened it). At the priority of the tool calls, that burst
/// took a core from the program a terminal send was waiting on, every
/// half second: it was most of the settle tail over MCP on two cores. The
/// log is not urgent; the calls are.
async fn on_log_thread<T: Send + 'static>(
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T, String> {
    static THREAD: std::sync::OnceLock<Option<std::sync::mpsc::Sender<LogJob>>> =
        std::sync::OnceLock::new();
    let queue = THREAD.get_or_init(|| {
        let (tx, rx) = std::sync::mpsc::channel::<LogJob>();
        std::thread::Builder::new()
            .name("session-log".to_owned())
            .spawn(move || {
                // SAFETY: plain syscalls; on Linux PRIO_PROCESS with a
                // thread id names that thread alone.
                unsafe {
                    let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
                    libc::setpriority(libc::PRIO_PROCESS, tid, LOG_THREAD_NICE);
                }
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| tx)
    });
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let job: LogJob = Box::new(move || {
        let _ = done_tx.send(job());
    });
    let unsent = match queue {
        Some(queue) => queue.send(job).err().map(|e| e.0),
        None => Some(job),
    };
    if let Some(job) = unsent {
        // No log thread: the blocking pool, at the usual priority.
        tokio::task::spawn_blocking(job)
            .await
            .map_err(|e| format!("the store task failed: {e}"))?;
    }
    done_rx
        .await
        .map_err(|_| "the session log's thread stopped".to_owned())
}

async fn write_records(
    store: StoreAccess,
    mut rx: mpsc::Receiver<Record>,
    recorded: Arc<Mutex<Option<Recorded>>>,
) {
    let mut session: Option<SessionId> = None;
    let mut header: Option<SessionHeader> = None;
    let mut waiting: Vec<LogEntry> = Vec::new();
    let mut dropped = 0usize;
    while let Some(first) = rx.recv().await {
        // Writing costs milliseconds of CPU (a standalone server opens the
        // store for each batch): gather records until the calls pause
        // (QUIET) and write them in one go then, so the write falls
        // between an agent's bursts of calls, not in the middle of one
        // (mid-burst, it was most of the tail of a terminal send's
        // latency). A record waits at most MAX_DELAY. The queue is emptied
        // every few milliseconds meanwhile (not on every record, which
        // would wake this task on every call), so a fast client never
        // fills it; a full batch is written at once.
        let mut batch = vec![first];
        let started = tokio::time::Instant::now();
        let mut last_call = started;
        while batch.len() < QUEUE {
            let now = tokio::time::Instant::now();
            let due = (last_call + QUIET).min(started + MAX_DELAY);
            if now >= due {
                break;
            }
            tokio::time::sleep(DRAIN_EVERY.min(due - now)).await;
            let before = batch.len();
            while batch.len() < QUEUE {
                match rx.try_recv() {
                    Ok(more) => batch.push(more),
                    Err(_) => break,
                }
            }
            if batch.len() > before {
                last_call = tokio::time::Instant::now();
            }
        }
        for record in batch {
            match record {
                Record::Begin(h) => header = Some(h),
                Record::Call(entry) if waiting.len() < QUEUE => waiting.push(entry),
                Record::Call(_) => dropped += 1,
            }
        }
        if dropped > 0 {
            tracing::warn!(
                "session log: {dropped} tool calls were not recorded (store unavailable)"
            );
            dropped = 0;
        }
        // Recording the session is retried with each batch until it works.
        if let (None, Some(h)) = (session, &header) {
            let id = h.id;
            match persist(&store, SessionRecordOp::Begin { header: h.clone() }).await {
                Ok(start) => {
                    let workspace = start
                        .as_ref()
                        .and_then(|s| s.workspace.as_ref())
                        .map(|w| (w.id, w.title.clone()));
                    tracing::info!(
                        session = %id,
                        workspace = ?workspace.as_ref().map(|w| w.0.to_string()),
                        ungrouped = ?start.as_ref().and_then(|s| s.ungrouped_reason.clone()),
                        "session recorded"
                    );
                    if let Ok(mut slot) = recorded.lock() {
                        *slot = Some(Recorded {
                            session: id,
                            workspace,
                        });
                    }
                    session = Some(id);
                }
                Err(e) => tracing::warn!("could not record the session (will retry): {e}"),
            }
        }
        let Some(id) = session else { continue };
        if waiting.is_empty() {
            continue;
        }
        let entries = std::mem::take(&mut waiting);
        let written = persist(
            &store,
            SessionRecordOp::Log {
                session: id,
                entries,
            },
        )
        .await;
        if let Err(e) = written {
            tracing::warn!("could not append to the session log: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde_json::json;

    const KEEP: LogPolicy = LogPolicy { commands: true };
    const HIDE: LogPolicy = LogPolicy { commands: false };

    /// A recorder on `store` with a session begun.
    fn begun(store: &StoreAccess) -> (SessionRecorder, SessionId) {
        let recorder = SessionRecorder::start(store.clone(), KEEP);
        let id = SessionId::new_random();
        recorder.begin(SessionHeader {
            id,
            cwd: None,
            created_at: Utc::now(),
            client: None,
        });
        (recorder, id)
    }

    /// Records one `bash` call that took `took`.
    fn call(recorder: &SessionRecorder, took: Duration) {
        recorder.call(
            Utc::now(),
            "bash",
            &json!({ "command": "true" }),
            "OK",
            took,
            None,
        );
    }

    /// The session's log as the store holds it.
    fn read_log(store: &StoreAccess, id: SessionId) -> Vec<LogEntry> {
        let StoreAccess::PerOperation(store) = store else {
            unreachable!("a per-operation store")
        };
        workspace::SessionPersistence::read_log(&mut store.open().unwrap().sessions(), id).unwrap()
    }

    /// A client faster than any over MCP (a call every 200 µs:
    /// thousands in a few batch delays) loses no record: the log holds the
    /// newest entries, every one, in order. The queue is bounded, so a
    /// writer the machine starves for longer than a queue's worth of calls
    /// does drop (and says so); the client here waits whenever the queue is
    /// three-quarters full, so what is tested is that the writer empties
    /// it as it fills, not how fast a loaded machine schedules it.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_fast_client_loses_no_record() {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreAccess::per_operation(dir.path());
        let (recorder, id) = begun(&store);
        let calls = 3 * QUEUE;
        for n in 0..calls {
            std::thread::sleep(Duration::from_micros(200)); // sleep-ok: paces the calls like a very fast client
            if recorder.tx.capacity() < QUEUE / 4 {
                test_support::wait_until("the writer drains the queue", || {
                    recorder.tx.capacity() > QUEUE / 2
                });
            }
            call(&recorder, Duration::from_millis(n as u64));
        }
        recorder.finish(Duration::from_secs(60)).await;
        let log = read_log(&store, id);
        let kept = workspace::LOG_CAPACITY.min(calls);
        let want: Vec<u64> = ((calls - kept)..calls).map(|n| n as u64).collect();
        assert_eq!(log.iter().map(|e| e.duration_ms).collect::<Vec<_>>(), want);
    }

    /// The store is written from a thread at the lowest priority, so a
    /// write never takes a core from a tool call.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_log_is_written_at_the_lowest_priority() {
        let dir = tempfile::tempdir().unwrap();
        let store = StoreAccess::per_operation(dir.path());
        let (recorder, id) = begun(&store);
        call(&recorder, Duration::from_millis(1));
        recorder.finish(Duration::from_secs(60)).await;
        let log = read_log(&store, id);
        assert_eq!(log.len(), 1, "the call was written");
        let writers: Vec<i64> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .filter_map(|task| {
                let task = task.ok()?.path();
                let comm = std::fs::read_to_string(task.join("comm")).ok()?;
                (comm.trim() == "session-log").then_some(())?;
                let stat = std::fs::read_to_string(task.join("stat")).ok()?;
                // Field 19 (nice), counted from the state, field 3.
                stat[stat.rfind(')')? + 1..]
                    .split_whitespace()
                    .nth(16)?
                    .parse()
                    .ok()
            })
            .collect();
        assert_eq!(writers, vec![i64::from(LOG_THREAD_NICE)]);
    }

    #[test]
    fn environment_values_and_typed_text_are_never_kept() {
        assert_eq!(
            summarize(
                "terminal_open",
                &json!({"command": ["python3", "-q"], "env": {"API_TOKEN": "s3cr3t", "LANG": "C"}}),
                KEEP
            ),
            r#"{"command":["python3","-q"],"env":["API_TOKEN","LANG"]}"#
        );
        assert_eq!(
            summarize(
                "terminal_send",
                &json!({"id": "pty-1", "text": "hunter2"}),
                KEEP
            ),
            r#"{"id":"pty-1","text":"<7 bytes>"}"#
        );
    }

    #[test]
    fn how_a_call_settled_is_kept() {
        assert_eq!(
            settled(
                "terminal_send",
                &json!({"output": "2", "reason": "input_wait", "status": "running"})
            ),
            (Some("input_wait".to_owned()), None)
        );
        assert_eq!(
            settled(
                "terminal_send",
                &json!({"reason": "prompt", "exit_code": 1, "output": ""})
            ),
            (Some("prompt".to_owned()), Some(1))
        );
        assert_eq!(
            settled(
                "bash",
                &json!({"exit_code": null, "timed_out": true, "output": ""})
            ),
            (Some("timeout".to_owned()), None)
        );
        assert_eq!(
            settled("bash", &json!({"exit_code": 0, "timed_out": false})),
            (None, Some(0))
        );
        assert_eq!(
            settled(
                "job_kill",
                &json!({"outcome": "killed", "status": "killed"})
            ),
            (Some("killed".to_owned()), None)
        );
        assert_eq!(settled("lsp", &json!({"items": []})), (None, None));
    }

    #[test]
    fn commands_are_kept_unless_the_policy_says_no() {
        let bash = json!({"command": "make deploy", "timeout_ms": 1000});
        assert_eq!(
            summarize("bash", &bash, KEEP),
            r#"{"command":"make deploy","timeout_ms":1000}"#
        );
        assert_eq!(
            summarize("bash", &bash, HIDE),
            r#"{"command":"<11 bytes>","timeout_ms":1000}"#
        );
        assert_eq!(
            summarize("subagent", &json!({"prompt": "fix it"}), HIDE),
            r#"{"prompt":"<6 bytes>"}"#
        );
        assert_eq!(
            summarize("terminal_open", &json!({"command": ["mysql", "-pX"]}), HIDE),
            r#"{"command":["<5 bytes>","<3 bytes>"]}"#
        );
    }
}
