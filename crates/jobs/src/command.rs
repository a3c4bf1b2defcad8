//! The command producer: an argv in a session of its own, output merged
//! into one pipe, ended by session id.

use process_tree::ChildIo;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use nix::sys::signal::Signal;
use output_text::{HeadTail, Rendered, Sanitizer};
use process_tree::{EndReport, Leader, Step, Survivors};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::Instant;

use crate::{Cancel, JobError, JobKind, OutputChunk, Producer, Settlement, StartError, Started};

/// The escalation used to kill a job: SIGINT, SIGTERM, SIGKILL over every
/// process of its session.
pub const KILL_STEPS: &[Step] = &[
    Step {
        signal: Signal::SIGINT,
        grace: Duration::from_millis(250),
    },
    Step {
        signal: Signal::SIGTERM,
        grace: Duration::from_millis(500),
    },
    Step {
        signal: Signal::SIGKILL,
        grace: Duration::from_secs(3),
    },
];

/// The environment every command gets on top of the host's, so programs
/// neither page, colour, nor prompt for credentials.
pub const QUIET_ENV: &[(&str, &str)] = &[
    ("TERM", "dumb"),
    ("NO_COLOR", "1"),
    ("PAGER", "cat"),
    ("GIT_PAGER", "cat"),
    ("GIT_TERMINAL_PROMPT", "0"),
];

/// The placeholder a subagent argv template carries for the prompt.
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";

const READ_CHUNK: usize = 16 * 1024;
/// How long a foreground run waits for its process after the cancel.
const SETTLE_AFTER_CANCEL: Duration = Duration::from_secs(5);
/// How long a foreground run reads output after the process settled.
const DRAIN_GRACE: Duration = Duration::from_secs(1);

/// A command to run: argv, environment, working directory, stdin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The job kind it runs as ([`JobKind::Bash`] or [`JobKind::Subagent`]).
    pub kind: JobKind,
    /// Program and arguments; never empty.
    pub argv: Vec<String>,
    /// Variables set on top of the base environment.
    pub env: Vec<(String, String)>,
    /// The environment the command starts from in place of the host's
    /// (a daemon passes the one its connection's client gave); `None`:
    /// the host's.
    pub base_env: Option<Vec<(String, String)>>,
    /// The working directory (default: the host's).
    pub cwd: Option<PathBuf>,
    /// Text fed on stdin, which is then closed; `None` closes stdin at once.
    pub stdin: Option<String>,
    /// The label shown by `job_list`.
    pub label: String,
    /// How processes the command leaves running when it exits are ended
    /// (default [`process_tree::TERM_THEN_KILL`]).
    pub leftover_steps: &'static [Step],
    /// A step the program's process runs last before `exec` (a
    /// sandbox's); `None`: none.
    pub pre_exec: Option<ChildStep>,
    /// Run the command's processes in a PID namespace of their own, after
    /// this step (a sandbox's entry into its user namespace, when it has
    /// one), so that the kernel ends them all when the host dies; `None`:
    /// no namespace.
    pub pid_namespace: Option<Option<ChildStep>>,
}

/// A step run in a command's child last before `exec`, such as entering a
/// sandbox; compared by identity.
#[derive(Clone)]
pub struct ChildStep(pub process_tree::PreExecStep);

impl std::fmt::Debug for ChildStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChildStep")
    }
}

impl PartialEq for ChildStep {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ChildStep {}

impl CommandSpec {
    /// `argv` run as a job of `kind`, with [`QUIET_ENV`]. An empty argv or
    /// program name is `INVALID_ARGUMENT`.
    pub fn new(kind: JobKind, argv: Vec<String>) -> Result<Self, JobError> {
        if argv.first().is_none_or(|p| p.is_empty()) {
            return Err(JobError::InvalidArgument {
                field: "command",
                message: "the command must name a program".to_owned(),
            });
        }
        Ok(Self {
            kind,
            label: argv.join(" "),
            argv,
            env: QUIET_ENV
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            cwd: None,
            base_env: None,
            stdin: None,
            leftover_steps: process_tree::TERM_THEN_KILL,
            pre_exec: None,
            pid_namespace: None,
        })
    }

    /// The `bash` tool's command: `bash -c command`, stdin closed,
    /// [`QUIET_ENV`], kind [`JobKind::Bash`], labelled with the command.
    pub fn shell(command: &str) -> Self {
        Self {
            kind: JobKind::Bash,
            argv: vec!["bash".to_owned(), "-c".to_owned(), command.to_owned()],
            env: QUIET_ENV
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            cwd: None,
            base_env: None,
            stdin: None,
            label: command.to_owned(),
            leftover_steps: process_tree::TERM_THEN_KILL,
            pre_exec: None,
            pid_namespace: None,
        }
    }

    /// A subagent run from the configured argv `template`: every
    /// [`PROMPT_PLACEHOLDER`] in an argument is replaced by `prompt`; when
    /// no argument has one, the prompt goes to stdin. Kind
    /// [`JobKind::Subagent`], labelled with the prompt.
    pub fn subagent(template: &[String], prompt: &str) -> Result<Self, JobError> {
        let in_argv = template.iter().any(|a| a.contains(PROMPT_PLACEHOLDER));
        let argv = template
            .iter()
            .map(|a| a.replace(PROMPT_PLACEHOLDER, prompt))
            .collect();
        let mut spec = Self::new(JobKind::Subagent, argv)?;
        if !in_argv {
            spec.stdin = Some(prompt.to_owned());
        }
        spec.label = prompt.to_owned();
        Ok(spec)
    }

    /// Sets the working directory.
    pub fn with_cwd(mut self, cwd: impl Into<PathBuf>) -> Self {
        self.cwd = Some(cwd.into());
        self
    }

    /// Adds (or overrides) an environment variable.
    pub fn with_env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        let key = key.into();
        self.env.retain(|(k, _)| *k != key);
        self.env.push((key, value.into()));
        self
    }

    /// Feeds `text` on stdin, then closes it.
    pub fn with_stdin(mut self, text: impl Into<String>) -> Self {
        self.stdin = Some(text.into());
        self
    }

    /// Runs `step` in the child last before `exec` (after `setsid` and the
    /// parent-death signal).
    ///
    /// # Safety
    ///
    /// `step` must keep the rules of [`process_tree::PreExecStep`]
    /// (async-signal-safe; it runs in the host's memory).
    pub unsafe fn with_pre_exec(mut self, step: process_tree::PreExecStep) -> Self {
        self.pre_exec = Some(ChildStep(step));
        self
    }

    /// Runs the command in a PID namespace of its own (see
    /// [`process_tree::SessionCommand::pid_namespace`]), after `enter`.
    ///
    /// # Safety
    ///
    /// `enter` must keep the rules of [`process_tree::PreExecStep`].
    pub unsafe fn with_pid_namespace(mut self, enter: Option<process_tree::PreExecStep>) -> Self {
        self.pid_namespace = Some(enter.map(ChildStep));
        self
    }

    /// Sets how processes left running at exit are ended.
    pub fn with_leftover_steps(mut self, steps: &'static [Step]) -> Self {
        self.leftover_steps = steps;
        self
    }
}

/// A [`Producer`] that runs a [`CommandSpec`]: `bash` and `subagent` jobs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandProducer {
    spec: CommandSpec,
}

impl CommandProducer {
    /// A producer for `spec`.
    pub fn new(spec: CommandSpec) -> Self {
        Self { spec }
    }

    /// Boxed, ready for [`crate::JobRegistry::start`].
    pub fn boxed(spec: CommandSpec) -> Box<dyn Producer> {
        Box::new(Self::new(spec))
    }
}

impl Producer for CommandProducer {
    fn kind(&self) -> JobKind {
        self.spec.kind
    }

    fn label(&self) -> String {
        self.spec.label.clone()
    }

    fn start(self: Box<Self>) -> BoxFuture<'static, Result<Started, StartError>> {
        let result = spawn_command(&self.spec).map(|(started, _)| started);
        futures::future::ready(result).boxed()
    }
}

/// Ends the session once, verified; ends it on drop if nobody did. Holds
/// the leader unreaped, so the session id names this session only.
struct SessionGuard {
    leader: Arc<Leader>,
    ended: AtomicBool,
}

impl SessionGuard {
    fn end(&self, steps: &[Step]) -> Result<EndReport, Survivors> {
        let report = self.leader.end_session(steps);
        if report.is_ok() {
            self.ended.store(true, Ordering::SeqCst);
        }
        report
    }

    async fn end_async(self: Arc<Self>, steps: &'static [Step]) -> Result<EndReport, String> {
        // The common case after a command exits: nothing of it is left.
        // One pass over /proc proves it right here; only a session with
        // something to end goes to the blocking pool, whose escalation
        // waits.
        if self.leader.session_is_over() {
            self.ended.store(true, Ordering::SeqCst);
            return Ok(EndReport::default());
        }
        let sid = self.leader.pid();
        match tokio::task::spawn_blocking(move || self.end(steps)).await {
            Ok(report) => report.map_err(|s| s.to_string()),
            Err(e) => Err(format!("ending session {sid} failed: {e}")),
        }
    }
}

impl Drop for SessionGuard {
    fn drop(&mut self) {
        if self.ended.load(Ordering::SeqCst) {
            return;
        }
        let leader = self.leader.clone();
        let end = move || {
            if let Err(survivors) = leader.end_session(KILL_STEPS) {
                tracing::warn!(%survivors, "processes survived the end of a dropped job");
            }
            let _ = leader.reap();
        };
        // On an async worker (a cancelled foreground call), do not block it:
        // the runtime's blocking pool runs the escalation. Elsewhere (the
        // registry dropped at exit) end the session right here.
        match tokio::runtime::Handle::try_current() {
            Ok(handle) if handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
                drop(handle.spawn_blocking(end));
            }
            Ok(_) | Err(_) => end(),
        }
    }
}

struct SessionCancel(Arc<SessionGuard>);

impl Cancel for SessionCancel {
    fn cancel(&self) -> BoxFuture<'static, Result<String, String>> {
        self.0
            .clone()
            .end_async(KILL_STEPS)
            .map(|r| r.map(|_| "every process of the job was ended".to_owned()))
            .boxed()
    }
}

/// How a command's leader process ended, and what was left of its session.
#[derive(Debug, Clone, PartialEq, Eq)]
struct ExitFacts {
    exit_code: Option<i32>,
    signal: Option<i32>,
    /// Leftover processes ended after the leader exited (exactly those
    /// signalled and verified gone).
    leftovers: usize,
    error: Option<String>,
    /// Leftovers that could not be ended, named.
    cleanup_failed: Option<String>,
}

impl ExitFacts {
    fn detail(&self) -> Option<String> {
        let mut parts = Vec::new();
        if let Some(error) = &self.error {
            parts.push(error.clone());
        }
        if let Some(survivors) = &self.cleanup_failed {
            parts.push(format!(
                "what it left running could not be ended: {survivors}"
            ));
        }
        if self.leftovers > 0 {
            parts.push(format!(
                "{} background process(es) still running at exit were ended",
                self.leftovers
            ));
        }
        (!parts.is_empty()).then(|| parts.join("; "))
    }

    /// How the leader ended, in words.
    fn how(&self) -> String {
        match (self.exit_code, self.signal) {
            (Some(code), _) => format!("exited with status {code}"),
            (None, Some(signal)) => format!(
                "terminated by {}, not by dsh",
                process_tree::signal_name(signal)
            ),
            (None, None) => "could not be waited for".to_owned(),
        }
    }

    fn settlement(&self) -> Settlement {
        if let Some(survivors) = &self.cleanup_failed {
            let mut detail = format!(
                "{}, but what it left running could not be ended: {survivors}",
                self.how()
            );
            if let Some(error) = &self.error {
                detail.push_str("; ");
                detail.push_str(error);
            }
            return Settlement::Failed { detail };
        }
        match (self.exit_code, self.signal) {
            (Some(code), _) => Settlement::Finished {
                exit_code: Some(code),
                detail: self.detail(),
            },
            (None, Some(_)) => {
                let mut detail = self.how();
                if let Some(more) = self.detail() {
                    detail.push_str("; ");
                    detail.push_str(&more);
                }
                Settlement::Failed { detail }
            }
            (None, None) => Settlement::Failed {
                detail: self
                    .detail()
                    .unwrap_or_else(|| "the process could not be waited for".to_owned()),
            },
        }
    }
}

/// Spawns `spec` in a new session; its settle future also yields the exit
/// facts (for foreground runs) through the second return value.
fn spawn_command(
    spec: &CommandSpec,
) -> Result<(Started, tokio::sync::oneshot::Receiver<ExitFacts>), StartError> {
    let program = spec.argv.first().map_or("", String::as_str);
    let fail = |e: std::io::Error| StartError::spawn_failed(program, &e);
    let (reader, writer) = std::io::pipe().map_err(fail)?;
    let mut session = process_tree::SessionCommand::new(program);
    if let Some(base) = &spec.base_env {
        session = session.env_clear().envs(base.iter().map(|(k, v)| (k, v)));
    }
    session = session
        .args(spec.argv.iter().skip(1))
        .envs(spec.env.iter().map(|(k, v)| (k, v)))
        .stdout(writer.try_clone().map_err(fail)?)
        .stderr(writer)
        .stdin(if spec.stdin.is_some() {
            ChildIo::Piped
        } else {
            ChildIo::Null
        });
    if let Some(cwd) = &spec.cwd {
        session = session.current_dir(cwd);
    }
    // The spawn path drops the command, and with it our copies of the
    // pipe's write end, so the output reaches end-of-file when the
    // command's processes close theirs.
    if let Some(enter) = &spec.pid_namespace {
        // SAFETY: `with_pid_namespace`'s caller promised an
        // async-signal-safe step.
        session = unsafe { session.pid_namespace(enter.as_ref().map(|s| s.0.clone())) };
    }
    if let Some(step) = &spec.pre_exec {
        // SAFETY: `with_pre_exec`'s caller promised an async-signal-safe step.
        session = unsafe { session.program_pre_exec(step.0.clone()) };
    }
    let spawned = session.spawn().map_err(fail)?;
    let leader = Arc::new(spawned.leader);
    let sid = leader.pid();
    let guard = Arc::new(SessionGuard {
        leader: leader.clone(),
        ended: AtomicBool::new(false),
    });
    if let (Some(text), Some(stdin)) = (spec.stdin.clone(), spawned.stdin) {
        match tokio::net::unix::pipe::Sender::from_owned_fd(OwnedFd::from(stdin)) {
            Ok(mut stdin) => {
                tokio::spawn(async move {
                    // A program that exits without reading its input is not an error.
                    let _ = stdin.write_all(text.as_bytes()).await;
                    let _ = stdin.shutdown().await;
                });
            }
            Err(e) => tracing::warn!("could not feed the command's stdin: {e}"),
        }
    }
    let receiver =
        tokio::net::unix::pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(fail)?;
    let output = futures::stream::unfold(receiver, |mut receiver| async move {
        let mut buf = vec![0u8; READ_CHUNK];
        match receiver.read(&mut buf).await {
            Ok(0) | Err(_) => None,
            Ok(n) => {
                buf.truncate(n);
                Some((OutputChunk::Raw(buf), receiver))
            }
        }
    })
    .boxed();
    let (facts_tx, facts_rx) = tokio::sync::oneshot::channel();
    let settle_guard = guard.clone();
    let leftover_steps = spec.leftover_steps;
    let settle = async move {
        let status = leader.exited().await;
        // The leader is gone; anything it left running in its session is
        // ended, verified, before the job settles, so no job outlives its
        // status and the detail counts exactly what was ended. When nothing
        // is left this is one /proc scan.
        let (leftovers, cleanup_failed) = match settle_guard.end_async(leftover_steps).await {
            Ok(report) => {
                let _ = leader.reap();
                (report.ended.len(), None)
            }
            Err(survivors) => (0, Some(survivors)),
        };
        let facts = match status {
            Ok(status) => ExitFacts {
                exit_code: status.code(),
                signal: status.signal(),
                leftovers,
                error: None,
                cleanup_failed,
            },
            Err(e) => ExitFacts {
                exit_code: None,
                signal: None,
                leftovers,
                error: Some(format!("waiting for the process failed: {e}")),
                cleanup_failed,
            },
        };
        let settlement = facts.settlement();
        let _ = facts_tx.send(facts);
        settlement
    }
    .boxed();
    let started = Started {
        output,
        settle,
        cancel: Arc::new(SessionCancel(guard)),
        session_id: Some(sid),
    };
    Ok((started, facts_rx))
}

/// The result of a foreground [`run_command`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRun {
    /// The sanitized output, head and tail kept within the limit.
    pub output: Rendered,
    /// The exit status, when the process exited by itself.
    pub exit_code: Option<i32>,
    /// The signal that ended the process, when one did.
    pub signal: Option<i32>,
    /// True when the deadline passed and every process was ended.
    pub timed_out: bool,
    /// Wall time from spawn to settlement.
    pub duration: Duration,
    /// Facts worth knowing (leftover processes ended, a failed kill).
    pub detail: Option<String>,
}

/// Runs `spec` in the foreground to the end, or until `timeout` passes (then
/// every process of its session is ended, verified, and `timed_out` is
/// set). Output is sanitized and kept head and tail within
/// `max_output_bytes`. For the foreground `subagent` (and `bash`) tools.
pub async fn run_command(
    spec: &CommandSpec,
    timeout: Option<Duration>,
    max_output_bytes: usize,
) -> Result<CommandRun, StartError> {
    run_command_observed(spec, timeout, max_output_bytes, |_| {}).await
}

/// [`run_command`], handing each piece of sanitized output to `on_text` as
/// it arrives (to report progress while the command runs).
pub async fn run_command_observed(
    spec: &CommandSpec,
    timeout: Option<Duration>,
    max_output_bytes: usize,
    on_text: impl Fn(&str) + Sync,
) -> Result<CommandRun, StartError> {
    let begun = Instant::now();
    let (started, facts) = spawn_command(spec)?;
    let Started {
        mut output,
        mut settle,
        cancel,
        session_id: _,
    } = started;
    let text = std::sync::Mutex::new((Sanitizer::new(), HeadTail::new(max_output_bytes)));
    let reader = async {
        while let Some(chunk) = output.next().await {
            let mut guard = text
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let (sanitizer, head_tail) = &mut *guard;
            match chunk {
                OutputChunk::Raw(bytes) => {
                    let piece = sanitizer.push_to_string(&bytes);
                    on_text(&piece);
                    head_tail.push_str(&piece);
                }
                OutputChunk::Text(piece) => {
                    on_text(&piece);
                    head_tail.push_str(&piece);
                }
            }
        }
    };
    let deadline = timeout.map(|t| begun + t);
    let lifecycle = async {
        tokio::select! {
            _ = &mut settle => (false, None),
            () = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => futures::future::pending().await,
                }
            } => {
                let cancelled = cancel.cancel().await.err();
                let _ = tokio::time::timeout(SETTLE_AFTER_CANCEL, &mut settle).await;
                (true, cancelled)
            }
        }
    };
    let mut reader = std::pin::pin!(reader);
    let mut lifecycle = std::pin::pin!(lifecycle);
    let mut reader_done = false;
    let (timed_out, cancel_error) = loop {
        tokio::select! {
            () = &mut reader, if !reader_done => reader_done = true,
            result = &mut lifecycle => break result,
        }
    };
    if !reader_done {
        let _ = tokio::time::timeout(DRAIN_GRACE, &mut reader).await;
    }
    let duration = begun.elapsed();
    let facts = facts.await.ok();
    let mut guard = text
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (sanitizer, head_tail) = &mut *guard;
    let mut tail = String::new();
    sanitizer.finish(&mut tail);
    head_tail.push_str(&tail);
    let mut detail = facts.as_ref().and_then(ExitFacts::detail);
    if let Some(error) = cancel_error {
        detail = Some(format!("the command could not be ended: {error}"));
    }
    Ok(CommandRun {
        output: head_tail.render(),
        exit_code: if timed_out {
            None
        } else {
            facts.as_ref().and_then(|f| f.exit_code)
        },
        signal: facts.as_ref().and_then(|f| f.signal),
        timed_out,
        duration,
        detail,
    })
}
