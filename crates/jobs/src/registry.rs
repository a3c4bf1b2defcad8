//! The registry: identity, access, lifecycle and output of every job.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use chrono::{DateTime, Utc};
use futures::StreamExt;
use futures::stream::BoxStream;
use output_text::Sanitizer;
use terminal_seam::Owner;
use tokio::sync::{Notify, broadcast, watch};
use tokio::task::AbortHandle;
use tokio::time::Instant;

use crate::ring::OutputRing;
use crate::{JobError, JobKind, OutputChunk, Producer, Settlement, Started};

/// How long a producer's cancel may take before the job is reported
/// `failed` (the command producer's own escalation ends within ~4 s).
const CANCEL_LIMIT: Duration = Duration::from_secs(20);
/// How long the registry waits for a producer's settle future after its
/// cancel has returned.
const SETTLE_AFTER_CANCEL: Duration = Duration::from_secs(5);
/// How long output is still read after the work settled (a process that
/// escaped the session may hold the pipe open forever).
const DRAIN_GRACE: Duration = Duration::from_secs(1);
/// The longest label kept, in characters.
const LABEL_CHARS: usize = 120;
/// How many settlement events a slow subscriber may lag behind.
const EVENT_CAPACITY: usize = 256;

/// Limits of a [`JobRegistry`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobsConfig {
    /// Jobs of one owner that may be running (or stopping) at once.
    pub max_running_per_owner: usize,
    /// Settled jobs kept per owner; the oldest settled is evicted first.
    pub max_settled_per_owner: usize,
    /// Bytes of sanitized output kept per job (the newest are kept).
    pub output_ring_bytes: usize,
    /// Bytes returned by one [`JobRegistry::output`] call without `max_bytes`.
    pub default_read_bytes: usize,
    /// Foreground commands (`bash` and `subagent` calls that wait for their
    /// result) one owner may have running at once; see
    /// [`JobRegistry::begin_foreground`].
    pub max_foreground_per_owner: usize,
}

impl Default for JobsConfig {
    fn default() -> Self {
        Self {
            max_running_per_owner: 16,
            max_settled_per_owner: 32,
            output_ring_bytes: 1 << 20,
            default_read_bytes: 32 * 1024,
            max_foreground_per_owner: 16,
        }
    }
}

/// Per-job options of [`JobRegistry::start`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartOptions {
    /// A deadline from the start: when it passes the work is cancelled
    /// (every process ended, verified) and the job is `timed_out`.
    pub timeout: Option<Duration>,
}

/// A job's status, as the contract names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum JobStatus {
    /// The work is going on.
    Running,
    /// The work is being ended (kill, deadline or owner teardown).
    Stopping,
    /// The work finished on its own; see `exit_code`.
    Completed,
    /// The work could not run or ended abnormally; see `detail`.
    Failed,
    /// The work was ended by `job_kill` or by its owner going away.
    Killed,
    /// The work passed its deadline and was ended.
    TimedOut,
}

impl JobStatus {
    /// Every status, in lifecycle order (for a schema's enum).
    pub const ALL: [JobStatus; 6] = [
        JobStatus::Running,
        JobStatus::Stopping,
        JobStatus::Completed,
        JobStatus::Failed,
        JobStatus::Killed,
        JobStatus::TimedOut,
    ];

    /// The contract's name: `running`, `stopping`, `completed`, `failed`,
    /// `killed`, `timed_out`.
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Stopping => "stopping",
            JobStatus::Completed => "completed",
            JobStatus::Failed => "failed",
            JobStatus::Killed => "killed",
            JobStatus::TimedOut => "timed_out",
        }
    }

    /// Parses a contract name; `None` for anything else.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == name)
    }

    /// True once the job has an outcome (no more output will come).
    pub fn is_settled(self) -> bool {
        match self {
            JobStatus::Running | JobStatus::Stopping => false,
            JobStatus::Completed | JobStatus::Failed | JobStatus::Killed | JobStatus::TimedOut => {
                true
            }
        }
    }
}

impl std::fmt::Display for JobStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One job as `job_list` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// `kind-N`.
    pub id: String,
    /// The producer kind.
    pub kind: JobKind,
    /// A one-line description (command, text sent, prompt).
    pub label: String,
    /// The current status.
    pub status: JobStatus,
    /// The exit status, for `completed` jobs that have one.
    pub exit_code: Option<i32>,
    /// What happened, for `failed`, `killed`, `timed_out` (and facts worth
    /// knowing about a `completed` one).
    pub detail: Option<String>,
    /// When the job started.
    pub started_at: DateTime<Utc>,
    /// When the job settled.
    pub finished_at: Option<DateTime<Utc>>,
    /// Sanitized output bytes produced so far (the end cursor).
    pub output_bytes: u64,
}

/// What [`JobRegistry::start`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobStarted {
    /// The new job's id, already registered.
    pub id: String,
    /// The session id of the job's processes, when it has its own session.
    pub session_id: Option<i32>,
}

/// One read of a job's output ([`JobRegistry::output`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutputRead {
    /// The text from `from` to `next`.
    pub output: String,
    /// The cursor where `output` starts.
    pub from: u64,
    /// The cursor after `output`; pass it as `since` to continue.
    pub next: u64,
    /// Bytes asked for (before `from`) that were already evicted.
    pub dropped: u64,
    /// The job's status at the end of the call.
    pub status: JobStatus,
    /// As in [`JobInfo::exit_code`].
    pub exit_code: Option<i32>,
    /// As in [`JobInfo::detail`].
    pub detail: Option<String>,
}

/// The outcome of [`JobRegistry::kill`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillOutcome {
    /// This kill (or one already in progress) ended the job.
    Killed,
    /// The job had already settled on its own (or by its deadline).
    AlreadyFinished,
}

impl KillOutcome {
    /// The contract's name: `killed` or `already_finished`.
    pub fn as_str(self) -> &'static str {
        match self {
            KillOutcome::Killed => "killed",
            KillOutcome::AlreadyFinished => "already_finished",
        }
    }
}

/// What [`JobRegistry::kill`] returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KillReport {
    /// Whether this call ended the job.
    pub outcome: KillOutcome,
    /// The job after the call (settled).
    pub job: JobInfo,
}

/// A settlement event: job `job.id` of `owner` settled with `job.status`.
#[derive(Debug, Clone)]
pub struct JobSettled {
    /// The job's owner (compare with `==` to route the event).
    pub owner: Owner,
    /// The job as settled.
    pub job: JobInfo,
}

/// What [`JobRegistry::end_owner`] did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OwnerEnded {
    /// Running jobs that were ended.
    pub ended: usize,
    /// Jobs (settled ones included) forgotten.
    pub forgotten: usize,
    /// Jobs whose processes could not all be ended: `(id, detail)`.
    pub failures: Vec<(String, String)>,
}

/// Why a job is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopCause {
    Kill,
    Deadline(Duration),
    OwnerEnded,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Phase {
    Running,
    Stopping(StopCause),
    Settled {
        status: JobStatus,
        exit_code: Option<i32>,
        detail: Option<String>,
    },
}

struct JobState {
    ring: OutputRing,
    sanitizer: Sanitizer,
    phase: Phase,
    finished_at: Option<DateTime<Utc>>,
    /// Where a read without `since` starts: the end of the last read.
    unread: u64,
    /// The stop that decided the outcome, when one did.
    stopped_by: Option<StopCause>,
}

struct Job {
    id: String,
    kind: JobKind,
    label: String,
    owner: Owner,
    started_at: DateTime<Utc>,
    state: Mutex<JobState>,
    /// Bumped on every output append and status change; readers wait on it.
    changes: watch::Sender<u64>,
    /// Wakes the driver when a stop is requested.
    stop: Notify,
    driver: Mutex<Option<AbortHandle>>,
}

enum StopRequest {
    Requested,
    AlreadyStopping,
    AlreadySettled,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding a lock cannot leave these states inconsistent
    // in a way worse than losing the registry, so recover the guard.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Job {
    /// Waits up to `wait` for output past `from` or for the job to settle,
    /// whichever comes first; `changes` was subscribed before `from` was
    /// read, so nothing written in between is missed.
    async fn wait_for_output(&self, from: u64, changes: &mut watch::Receiver<u64>, wait: Duration) {
        if wait.is_zero() {
            return;
        }
        let deadline = Instant::now() + wait;
        loop {
            {
                let state = lock(&self.state);
                if state.ring.end() > from || matches!(state.phase, Phase::Settled { .. }) {
                    return;
                }
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }

    fn info(&self) -> JobInfo {
        let state = lock(&self.state);
        let (status, exit_code, detail) = match &state.phase {
            Phase::Running => (JobStatus::Running, None, None),
            Phase::Stopping(_) => (JobStatus::Stopping, None, None),
            Phase::Settled {
                status,
                exit_code,
                detail,
            } => (*status, *exit_code, detail.clone()),
        };
        JobInfo {
            id: self.id.clone(),
            kind: self.kind,
            label: self.label.clone(),
            status,
            exit_code,
            detail,
            started_at: self.started_at,
            finished_at: state.finished_at,
            output_bytes: state.ring.end(),
        }
    }

    fn is_settled(&self) -> bool {
        matches!(lock(&self.state).phase, Phase::Settled { .. })
    }

    fn bump(&self) {
        self.changes.send_modify(|v| *v = v.wrapping_add(1));
    }

    fn append(&self, chunk: OutputChunk) {
        {
            let mut state = lock(&self.state);
            let text = match chunk {
                OutputChunk::Raw(bytes) => state.sanitizer.push_to_string(&bytes),
                OutputChunk::Text(text) => text,
            };
            if text.is_empty() {
                return;
            }
            state.ring.push(&text);
        }
        self.bump();
    }

    fn request_stop(&self, cause: StopCause) -> StopRequest {
        let request = {
            let mut state = lock(&self.state);
            match state.phase {
                Phase::Running => {
                    state.phase = Phase::Stopping(cause);
                    StopRequest::Requested
                }
                Phase::Stopping(_) => StopRequest::AlreadyStopping,
                Phase::Settled { .. } => StopRequest::AlreadySettled,
            }
        };
        if let StopRequest::Requested = request {
            self.stop.notify_one();
            self.bump();
        }
        request
    }

    fn stop_cause(&self) -> Option<StopCause> {
        match lock(&self.state).phase {
            Phase::Stopping(cause) => Some(cause),
            Phase::Running | Phase::Settled { .. } => None,
        }
    }

    fn settle(
        &self,
        stopped_by: Option<StopCause>,
        status: JobStatus,
        exit_code: Option<i32>,
        detail: Option<String>,
    ) {
        {
            let mut state = lock(&self.state);
            state.stopped_by = stopped_by;
            let mut tail = String::new();
            state.sanitizer.finish(&mut tail);
            if !tail.is_empty() {
                state.ring.push(&tail);
            }
            state.phase = Phase::Settled {
                status,
                exit_code,
                detail,
            };
            state.finished_at = Some(Utc::now());
        }
        self.bump();
    }

    /// Waits until the job has settled, or `limit` passes.
    async fn wait_settled(&self, limit: Duration) {
        let mut changes = self.changes.subscribe();
        let deadline = Instant::now() + limit;
        while !self.is_settled() {
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) | Err(_) => return,
            }
        }
    }
}

struct RegistryState {
    counters: HashMap<JobKind, u64>,
    jobs: HashMap<String, Arc<Job>>,
    /// Start order of the jobs in `jobs`.
    order: VecDeque<String>,
    /// Starts in flight per owner (counted against the limit).
    reserved: HashMap<Owner, usize>,
    /// Settled job ids per owner, oldest first.
    settled: HashMap<Owner, VecDeque<String>>,
    /// Foreground commands running per owner.
    foreground: HashMap<Owner, usize>,
}

struct Inner {
    config: JobsConfig,
    state: Mutex<RegistryState>,
    events: broadcast::Sender<JobSettled>,
}

/// One registry for all background work of every owner.
///
/// Share it behind an `Arc`; every method takes `&self`. Dropping it ends
/// every job that is still running (each producer ends its work when its
/// [`Started`] is dropped). Must be used inside a tokio runtime.
pub struct JobRegistry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for JobRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobRegistry")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// Removes a start reservation when dropped (a start that failed or whose
/// caller went away).
struct Reservation<'a> {
    inner: &'a Inner,
    owner: Owner,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut state = lock(&self.inner.state);
        if let Some(n) = state.reserved.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.reserved.remove(&self.owner);
            }
        }
    }
}

/// A foreground command of one owner, counted against
/// [`JobsConfig::max_foreground_per_owner`] until it is dropped. Hold it
/// for as long as the command runs.
pub struct ForegroundSlot {
    inner: Arc<Inner>,
    owner: Owner,
}

impl std::fmt::Debug for ForegroundSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ForegroundSlot")
            .field("owner", &self.owner)
            .finish()
    }
}

impl Drop for ForegroundSlot {
    fn drop(&mut self) {
        let mut state = lock(&self.inner.state);
        if let Some(n) = state.foreground.get_mut(&self.owner) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                state.foreground.remove(&self.owner);
            }
        }
    }
}

fn shorten_label(label: &str) -> String {
    let line = label
        .lines()
        .find(|l| !l.trim().is_empty())
        .unwrap_or("")
        .trim();
    let more_lines = label.trim().lines().count() > 1;
    let mut out: String = line.chars().take(LABEL_CHARS).collect();
    if more_lines || line.chars().count() > LABEL_CHARS {
        out.push('…');
    }
    out
}

impl JobRegistry {
    /// An empty registry with `config`.
    pub fn new(config: JobsConfig) -> Self {
        let (events, _) = broadcast::channel(EVENT_CAPACITY);
        Self {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(RegistryState {
                    counters: HashMap::new(),
                    jobs: HashMap::new(),
                    order: VecDeque::new(),
                    reserved: HashMap::new(),
                    settled: HashMap::new(),
                    foreground: HashMap::new(),
                }),
                events,
            }),
        }
    }

    /// The limits in force.
    pub fn config(&self) -> &JobsConfig {
        &self.inner.config
    }

    /// Subscribes to settlement events: one [`JobSettled`] per job that
    /// settles, whatever its owner, sent after the job reads as settled.
    pub fn subscribe(&self) -> broadcast::Receiver<JobSettled> {
        self.inner.events.subscribe()
    }

    /// Counts one foreground command (a `bash` or `subagent` call that
    /// waits for its result) of `owner` until the returned slot is dropped.
    /// Beyond [`JobsConfig::max_foreground_per_owner`] running at once it
    /// is `JOB_LIMIT` (retryable), so a client cannot start commands
    /// without bound by never asking for a job id.
    pub fn begin_foreground(&self, owner: &Owner) -> Result<ForegroundSlot, JobError> {
        let limit = self.inner.config.max_foreground_per_owner;
        let mut state = lock(&self.inner.state);
        let running = state.foreground.get(owner).copied().unwrap_or(0);
        if running >= limit {
            return Err(JobError::ForegroundLimit { running, limit });
        }
        *state.foreground.entry(owner.clone()).or_insert(0) += 1;
        Ok(ForegroundSlot {
            inner: self.inner.clone(),
            owner: owner.clone(),
        })
    }

    /// Foreground commands of `owner` running now (see
    /// [`JobRegistry::begin_foreground`]).
    pub fn foreground_running(&self, owner: &Owner) -> usize {
        lock(&self.inner.state)
            .foreground
            .get(owner)
            .copied()
            .unwrap_or(0)
    }

    /// Starts `producer` as a job of `owner`. The owner's running jobs are
    /// checked against the limit first (`JOB_LIMIT`); a producer that fails
    /// to start returns its own error and consumes no id. The id is
    /// registered (visible to [`JobRegistry::list`] and every other call)
    /// before this returns.
    pub async fn start(
        &self,
        owner: &Owner,
        producer: Box<dyn Producer>,
        options: StartOptions,
    ) -> Result<JobStarted, JobError> {
        let limit = self.inner.config.max_running_per_owner;
        let reservation = {
            let mut state = lock(&self.inner.state);
            let running = state
                .jobs
                .values()
                .filter(|j| j.owner == *owner && !j.is_settled())
                .count()
                + state.reserved.get(owner).copied().unwrap_or(0);
            if running >= limit {
                return Err(JobError::JobLimit { running, limit });
            }
            *state.reserved.entry(owner.clone()).or_insert(0) += 1;
            Reservation {
                inner: &self.inner,
                owner: owner.clone(),
            }
        };
        let kind = producer.kind();
        let label = shorten_label(&producer.label());
        let started = producer.start().await?;
        let session_id = started.session_id;
        let job = {
            let mut state = lock(&self.inner.state);
            let counter = state.counters.entry(kind).or_insert(0);
            *counter += 1;
            let id = format!("{}-{}", kind.as_str(), *counter);
            let (changes, _) = watch::channel(0);
            let job = Arc::new(Job {
                id: id.clone(),
                kind,
                label,
                owner: owner.clone(),
                started_at: Utc::now(),
                state: Mutex::new(JobState {
                    ring: OutputRing::new(self.inner.config.output_ring_bytes),
                    sanitizer: Sanitizer::new(),
                    phase: Phase::Running,
                    finished_at: None,
                    unread: 0,
                    stopped_by: None,
                }),
                changes,
                stop: Notify::new(),
                driver: Mutex::new(None),
            });
            state.jobs.insert(id.clone(), job.clone());
            state.order.push_back(id);
            job
        };
        // Not under the registry lock: the reservation takes it itself.
        drop(reservation);
        let driver = tokio::spawn(drive(
            self.inner.clone(),
            job.clone(),
            started,
            options.timeout,
        ));
        *lock(&job.driver) = Some(driver.abort_handle());
        // Its owner went away while it was starting ([`JobRegistry::end_owner`]
        // marks the owner first): end it like the owner's other jobs.
        if owner.is_ended() {
            job.request_stop(StopCause::OwnerEnded);
        }
        tracing::debug!(id = %job.id, owner = ?owner, "job started");
        Ok(JobStarted {
            id: job.id.clone(),
            session_id,
        })
    }

    fn lookup(&self, owner: &Owner, id: &str) -> Result<Arc<Job>, JobError> {
        let state = lock(&self.inner.state);
        match state.jobs.get(id) {
            Some(job) if job.owner == *owner => Ok(job.clone()),
            Some(_) => Err(JobError::ForeignJob { id: id.to_owned() }),
            None => Err(JobError::NoJob {
                id: id.to_owned(),
                hint: self.missing_hint(&state, id),
            }),
        }
    }

    fn missing_hint(&self, state: &RegistryState, id: &str) -> String {
        let known = JobKind::ALL.into_iter().find_map(|kind| {
            let n: u64 = id
                .strip_prefix(kind.as_str())?
                .strip_prefix('-')?
                .parse()
                .ok()?;
            Some((kind, n))
        });
        match known {
            Some((kind, n)) if n >= 1 && n <= state.counters.get(&kind).copied().unwrap_or(0) => {
                format!(
                    ": it was evicted (only the newest {} finished jobs are kept); job_list shows the jobs you have",
                    self.inner.config.max_settled_per_owner
                )
            }
            Some(_) => ": job_list shows the jobs you have".to_owned(),
            None => ": job ids look like bash-1, pty-send-1 or subagent-1".to_owned(),
        }
    }

    /// The caller's own jobs in start order, optionally only those with
    /// `status`.
    pub fn list(&self, owner: &Owner, status: Option<JobStatus>) -> Vec<JobInfo> {
        let jobs: Vec<Arc<Job>> = {
            let state = lock(&self.inner.state);
            state
                .order
                .iter()
                .filter_map(|id| state.jobs.get(id))
                .filter(|j| j.owner == *owner)
                .cloned()
                .collect()
        };
        jobs.iter()
            .map(|j| j.info())
            .filter(|info| status.is_none_or(|s| s == info.status))
            .collect()
    }

    /// One job of the caller.
    pub fn info(&self, owner: &Owner, id: &str) -> Result<JobInfo, JobError> {
        Ok(self.lookup(owner, id)?.info())
    }

    /// Reads a job's output from cursor `since` (default: where the
    /// caller's last read ended), at most `max_bytes` (default
    /// [`JobsConfig::default_read_bytes`]). With a non-zero `wait`, first
    /// blocks until there is output after the cursor, the job settles, or
    /// `wait` passes, whichever comes first; it wakes as soon as output is
    /// stored, without polling. Reading never consumes output.
    pub async fn output(
        &self,
        owner: &Owner,
        id: &str,
        since: Option<u64>,
        max_bytes: Option<usize>,
        wait: Duration,
    ) -> Result<OutputRead, JobError> {
        let job = self.lookup(owner, id)?;
        let max_bytes = max_bytes.unwrap_or(self.inner.config.default_read_bytes);
        if max_bytes == 0 {
            return Err(JobError::InvalidArgument {
                field: "max_bytes",
                message: "must be at least 1".to_owned(),
            });
        }
        // Subscribe before checking, so no change between the check and the
        // wait can be missed.
        let mut changes = job.changes.subscribe();
        let from = {
            let state = lock(&job.state);
            let from = since.unwrap_or(state.unread);
            let end = state.ring.end();
            if from > end {
                return Err(JobError::InvalidArgument {
                    field: "since",
                    message: format!(
                        "cursor {from} is past the end of the output ({end} bytes so far)"
                    ),
                });
            }
            from
        };
        job.wait_for_output(from, &mut changes, wait).await;
        let read = {
            let mut state = lock(&job.state);
            let read = state.ring.read(from, max_bytes);
            state.unread = state.unread.max(read.next);
            read
        };
        let info = job.info();
        Ok(OutputRead {
            output: read.text,
            from: read.from,
            next: read.next,
            dropped: read.dropped,
            status: info.status,
            exit_code: info.exit_code,
            detail: info.detail,
        })
    }

    /// A person's view of any job (the `dsh ui` page): its info and its
    /// output from `since` (default: the last `max_bytes`), waiting as
    /// [`JobRegistry::output`] does. No owner check — people watch every
    /// agent's work — and no cursor of the owner moves.
    pub async fn watch_output(
        &self,
        id: &str,
        since: Option<u64>,
        max_bytes: usize,
        wait: Duration,
    ) -> Result<(JobInfo, OutputRead), JobError> {
        let job = {
            let state = lock(&self.inner.state);
            match state.jobs.get(id) {
                Some(job) => job.clone(),
                None => {
                    return Err(JobError::NoJob {
                        id: id.to_owned(),
                        hint: self.missing_hint(&state, id),
                    });
                }
            }
        };
        let max_bytes = max_bytes.max(1);
        let mut changes = job.changes.subscribe();
        let from = {
            let state = lock(&job.state);
            let end = state.ring.end();
            since.map_or_else(|| end.saturating_sub(max_bytes as u64), |s| s.min(end))
        };
        job.wait_for_output(from, &mut changes, wait).await;
        let read = lock(&job.state).ring.read(from, max_bytes);
        let info = job.info();
        Ok((
            info.clone(),
            OutputRead {
                output: read.text,
                from: read.from,
                next: read.next,
                dropped: read.dropped,
                status: info.status,
                exit_code: info.exit_code,
                detail: info.detail,
            },
        ))
    }

    /// Kills a job: its producer's cancel ends the work (for commands:
    /// SIGINT, SIGTERM, SIGKILL over every process of its session, verified
    /// gone); the job reads `stopping` meanwhile and `killed` after. A job
    /// that settled first is reported `already_finished`.
    pub async fn kill(&self, owner: &Owner, id: &str) -> Result<KillReport, JobError> {
        let job = self.lookup(owner, id)?;
        match job.request_stop(StopCause::Kill) {
            StopRequest::AlreadySettled => {
                return Ok(KillReport {
                    outcome: KillOutcome::AlreadyFinished,
                    job: job.info(),
                });
            }
            StopRequest::Requested | StopRequest::AlreadyStopping => {}
        }
        job.wait_settled(stop_limit()).await;
        let info = job.info();
        // `killed` when a kill decided the outcome, even if it could not end
        // every process (the status then says `failed`, with the survivors).
        let by_kill = lock(&job.state).stopped_by == Some(StopCause::Kill);
        let outcome = if by_kill {
            KillOutcome::Killed
        } else {
            KillOutcome::AlreadyFinished
        };
        Ok(KillReport { outcome, job: info })
    }

    /// Ends `owner`'s running jobs (verified, as [`JobRegistry::kill`]
    /// does, all at once) and forgets all its jobs. Call it when the
    /// owner's connection ends.
    pub async fn end_owner(&self, owner: &Owner) -> OwnerEnded {
        // From now on a start that completes for this owner ends its job at
        // once (see `start`), so none can slip past the list taken below.
        owner.end();
        let jobs: Vec<Arc<Job>> = {
            let state = lock(&self.inner.state);
            state
                .jobs
                .values()
                .filter(|j| j.owner == *owner)
                .cloned()
                .collect()
        };
        let stopping: Vec<Arc<Job>> = jobs
            .iter()
            .filter(|j| match j.request_stop(StopCause::OwnerEnded) {
                StopRequest::Requested | StopRequest::AlreadyStopping => true,
                StopRequest::AlreadySettled => false,
            })
            .cloned()
            .collect();
        futures::future::join_all(stopping.iter().map(|j| j.wait_settled(stop_limit()))).await;
        let mut report = OwnerEnded {
            ended: stopping.len(),
            forgotten: jobs.len(),
            failures: Vec::new(),
        };
        for job in &stopping {
            let info = job.info();
            if let (JobStatus::Failed, Some(detail)) = (info.status, info.detail) {
                report.failures.push((info.id, detail));
            }
        }
        let mut guard = lock(&self.inner.state);
        let state = &mut *guard;
        for job in &jobs {
            state.jobs.remove(&job.id);
        }
        let remaining = &state.jobs;
        state.order.retain(|id| remaining.contains_key(id));
        state.settled.remove(owner);
        drop(guard);
        report
    }

    /// Ends every running job of every owner (verified) without
    /// forgetting them: a graceful shutdown before the registry is dropped.
    pub async fn shutdown(&self) {
        let jobs: Vec<Arc<Job>> = lock(&self.inner.state).jobs.values().cloned().collect();
        let stopping: Vec<Arc<Job>> = jobs
            .into_iter()
            .filter(|j| match j.request_stop(StopCause::OwnerEnded) {
                StopRequest::Requested | StopRequest::AlreadyStopping => true,
                StopRequest::AlreadySettled => false,
            })
            .collect();
        futures::future::join_all(stopping.iter().map(|j| j.wait_settled(stop_limit()))).await;
    }
}

/// The longest a stop can take: cancel (bounded by the producer), the
/// settle wait after it, and the output drain, with margin.
fn stop_limit() -> Duration {
    CANCEL_LIMIT + SETTLE_AFTER_CANCEL + DRAIN_GRACE + Duration::from_secs(10)
}

impl Drop for JobRegistry {
    fn drop(&mut self) {
        let state = lock(&self.inner.state);
        for job in state.jobs.values() {
            if let Some(driver) = lock(&job.driver).take() {
                // The aborted driver drops the producer's `Started`, whose
                // `Drop` ends the work.
                driver.abort();
            }
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => futures::future::pending().await,
    }
}

async fn pump(job: Arc<Job>, mut output: BoxStream<'static, OutputChunk>) {
    while let Some(chunk) = output.next().await {
        job.append(chunk);
    }
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Runs one job from start to settlement.
async fn drive(inner: Arc<Inner>, job: Arc<Job>, started: Started, timeout: Option<Duration>) {
    let Started {
        output,
        mut settle,
        cancel,
        session_id: _,
    } = started;
    let mut pump = AbortOnDrop(tokio::spawn(pump(job.clone(), output)));
    let deadline = timeout.map(|t| Instant::now() + t);
    let natural = tokio::select! {
        settlement = &mut settle => Some(settlement),
        () = job.stop.notified() => None,
        () = sleep_until(deadline) => {
            if let Some(t) = timeout {
                job.request_stop(StopCause::Deadline(t));
            }
            None
        }
    };
    let mut stopped_by = None;
    let (status, exit_code, detail) = match natural {
        Some(Settlement::Finished { exit_code, detail }) => {
            (JobStatus::Completed, exit_code, detail)
        }
        Some(Settlement::Failed { detail }) => (JobStatus::Failed, None, Some(detail)),
        Some(Settlement::TimedOut { detail }) => (JobStatus::TimedOut, None, Some(detail)),
        None => {
            // A stop was requested, and the first outcome wins: whatever
            // the work reports after its cancel, the job is what was asked.
            let cause = job.stop_cause().unwrap_or(StopCause::Kill);
            stopped_by = Some(cause);
            let cancelled = tokio::time::timeout(CANCEL_LIMIT, cancel.cancel())
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "the cancel did not finish within {} s",
                        CANCEL_LIMIT.as_secs()
                    ))
                });
            let settled_after = tokio::time::timeout(SETTLE_AFTER_CANCEL, &mut settle).await;
            // The detail repeats what the cancel verified, and no more.
            match (cancelled, settled_after) {
                (Err(survivors), _) => (
                    JobStatus::Failed,
                    None,
                    Some(format!("the job could not be ended: {survivors}")),
                ),
                (Ok(_), Err(_)) => (
                    JobStatus::Failed,
                    None,
                    Some("the job was cancelled but did not settle".to_owned()),
                ),
                (Ok(stopped), Ok(_)) => match cause {
                    StopCause::Kill => (
                        JobStatus::Killed,
                        None,
                        Some(format!("killed by job_kill; {stopped}")),
                    ),
                    StopCause::OwnerEnded => (
                        JobStatus::Killed,
                        None,
                        Some(format!("killed because its agent disconnected; {stopped}")),
                    ),
                    StopCause::Deadline(t) => (
                        JobStatus::TimedOut,
                        None,
                        Some(format!("timeout_ms {} passed; {stopped}", t.as_millis())),
                    ),
                },
            }
        }
    };
    drop(settle);
    drop(cancel);
    // Output the work printed before it ended is still in the pipe: read it
    // all before the job reads as settled, so a reader woken by the
    // settlement sees everything.
    if tokio::time::timeout(DRAIN_GRACE, &mut pump.0)
        .await
        .is_err()
    {
        tracing::debug!(id = %job.id, "output still open after settlement; stopped reading it");
    }
    drop(pump);
    job.settle(stopped_by, status, exit_code, detail);
    let info = job.info();
    tracing::debug!(id = %job.id, status = %info.status, "job settled");
    {
        let mut state = lock(&inner.state);
        if job.owner.is_ended() {
            // Nobody can read it any more: forget it rather than keep it for
            // an owner that no longer exists.
            state.jobs.remove(&job.id);
            let id = job.id.clone();
            state.order.retain(|o| *o != id);
        } else if state.jobs.contains_key(&job.id) {
            let limit = inner.config.max_settled_per_owner;
            let settled = state.settled.entry(job.owner.clone()).or_default();
            settled.push_back(job.id.clone());
            let mut evicted = Vec::new();
            while settled.len() > limit {
                if let Some(old) = settled.pop_front() {
                    evicted.push(old);
                }
            }
            for old in &evicted {
                state.jobs.remove(old);
            }
            if !evicted.is_empty() {
                state.order.retain(|id| !evicted.contains(id));
            }
        }
    }
    // No subscriber is not an error.
    let _ = inner.events.send(JobSettled {
        owner: job.owner.clone(),
        job: info,
    });
}
