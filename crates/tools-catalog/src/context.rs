//! What a call runs against: the caller, the long-lived runtime, settings.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use jobs::{JobRegistry, JobsConfig};

use crate::Owner;
use crate::confine::Confinement;
use crate::job_tools::SubagentSettings;

/// Limits and switches the tools read; rebuilt on a config reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Largest text a result carries before head+tail truncation (bytes).
    pub max_result_bytes: usize,
    /// The agent command behind `subagent`; `None` makes it unavailable.
    pub subagent: Option<SubagentSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_result_bytes: 32 * 1024,
            subagent: None,
        }
    }
}

/// The long-lived services the tools borrow (terminals, jobs, language
/// servers). One runtime serves every owner and survives catalog rebuilds.
pub struct Runtime {
    /// Every background job of every owner.
    pub jobs: JobRegistry,
    /// Every terminal of every owner.
    pub terminals: Arc<dyn terminal_seam::TerminalService>,
    /// Language servers, routed by file extension.
    pub lsp: lsp_seam::Router,
    /// The sandbox each recent background command and terminal ran in,
    /// so that `job_output` and `terminal_send` can name what it refused.
    sandboxes: Mutex<VecDeque<JobSandbox>>,
    /// The built-in credential formats, compiled once (`None` when they
    /// cannot be: then nothing is redacted, and the log says why).
    redactor: std::sync::OnceLock<Option<redact::Redactor>>,
    /// Secrets no result may show again, whoever's it is (see
    /// [`Runtime::remember_secret`]).
    remembered: Mutex<Vec<Remembered>>,
    /// Counts the changes to `remembered`, so a call's redactor made
    /// before a change is known to be out of date.
    remembered_changes: std::sync::atomic::AtomicU64,
    /// Where each reader's last read of each stream left off, for the
    /// bytes redaction held back (see [`crate::redaction::redact_read`]).
    pub(crate) holds: crate::redaction::Holds,
}

/// The most secrets a runtime remembers.
pub const MAX_REMEMBERED: usize = 1024;

/// One remembered secret.
struct Remembered {
    kind: String,
    value: zeroize::Zeroizing<String>,
}

/// The sandbox a background command ran in and its directory.
#[derive(Debug, Clone)]
pub(crate) struct JobSandbox {
    /// The job's id.
    pub id: String,
    /// Its sandbox.
    pub prepared: sandbox::Prepared,
    /// Its working directory, for relative paths in its output.
    pub cwd: PathBuf,
    /// A terminal's first process (pid, start time): its current
    /// directory, once it has moved, replaces `cwd`.
    pub leader: Option<(u32, u64)>,
}

impl JobSandbox {
    /// The directory relative paths in new output are resolved against:
    /// the leader's current one while the leader is still the process
    /// that started (its start time is checked around the read, so a
    /// closed terminal's reused pid is never read), else `cwd`.
    pub(crate) fn current_dir(&self) -> PathBuf {
        let same = |pid: u32, started: u64| {
            process_tree::process_info(pid as i32).is_some_and(|p| p.start_time == started)
        };
        self.leader
            .filter(|&(pid, started)| same(pid, started))
            .and_then(|(pid, started)| {
                let dir = std::fs::read_link(format!("/proc/{pid}/cwd")).ok()?;
                same(pid, started).then_some(dir)
            })
            .unwrap_or_else(|| self.cwd.clone())
    }
}

/// How many sandboxes of background commands and terminals are
/// remembered: more than the jobs the registry keeps for any one agent;
/// older ones are forgotten (their output is then not searched for
/// refusals).
const SANDBOXES_KEPT: usize = 1024;

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime over the given terminal service and language-server
    /// routes, with the given job limits.
    pub fn new(
        jobs: JobsConfig,
        terminals: Arc<dyn terminal_seam::TerminalService>,
        lsp: lsp_seam::Router,
    ) -> Self {
        Self {
            jobs: JobRegistry::new(jobs),
            terminals,
            lsp,
            sandboxes: Mutex::new(VecDeque::new()),
            redactor: std::sync::OnceLock::new(),
            remembered: Mutex::new(Vec::new()),
            remembered_changes: std::sync::atomic::AtomicU64::new(0),
            holds: crate::redaction::Holds::default(),
        }
    }

    /// The redactor of the built-in credential formats (see
    /// [`crate::redaction`]), compiled on the first call, searching also
    /// for every remembered secret.
    pub fn redactor(&self) -> Option<redact::Redactor> {
        let base = self.base_redactor()?;
        let remembered = self.remembered_secrets();
        Some(if remembered.is_empty() {
            base
        } else {
            base.with_known(remembered)
        })
    }

    /// The built-in credential formats alone.
    pub(crate) fn base_redactor(&self) -> Option<redact::Redactor> {
        self.redactor
            .get_or_init(|| match redact::Redactor::builtin() {
                Ok(r) => Some(r),
                Err(e) => {
                    tracing::error!("secrets in results cannot be redacted: {e}");
                    None
                }
            })
            .clone()
    }

    /// Remembers `value` as a secret (`kind` names it in the marker that
    /// replaces it, e.g. `answer` or `resume key`) for this runtime's
    /// life: every later result, notification and log line of every owner
    /// is redacted of it. The remembered copy is wiped when forgotten or
    /// dropped. Values too short or too long to search for are left out
    /// (see [`redact::KnownSecret::is_redactable`]); at most
    /// [`MAX_REMEMBERED`] are kept, the oldest forgotten first.
    pub fn remember_secret(&self, kind: &str, value: &str) {
        if !redact::KnownSecret::is_redactable(value) {
            return;
        }
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        if remembered.iter().any(|r| *r.value == value) {
            return;
        }
        if remembered.len() >= MAX_REMEMBERED {
            remembered.remove(0);
        }
        remembered.push(Remembered {
            kind: kind.to_owned(),
            value: zeroize::Zeroizing::new(value.to_owned()),
        });
        self.remembered_changes
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    }

    /// Forgets a remembered secret (a resume key that was replaced).
    pub fn forget_secret(&self, value: &str) {
        let mut remembered = self.remembered.lock().unwrap_or_else(|e| e.into_inner());
        let before = remembered.len();
        remembered.retain(|r| *r.value != value);
        if remembered.len() != before {
            self.remembered_changes
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// How many times the remembered secrets changed: a redactor made when
    /// this was lower may miss one.
    pub fn remembered_changes(&self) -> u64 {
        self.remembered_changes
            .load(std::sync::atomic::Ordering::SeqCst)
    }

    /// The remembered secrets, as the redactor searches for them.
    pub(crate) fn remembered_secrets(&self) -> Vec<redact::KnownSecret> {
        self.remembered_secrets_but(|_| false)
    }

    /// The remembered secrets but those `shown` keeps, as the redactor
    /// searches for them.
    pub(crate) fn remembered_secrets_but(
        &self,
        shown: impl Fn(&str) -> bool,
    ) -> Vec<redact::KnownSecret> {
        self.remembered
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|r| !shown(r.value.as_str()))
            .map(|r| redact::KnownSecret::new(r.kind.clone(), r.value.as_str()))
            .collect()
    }

    /// Remembers the sandbox background job `id` runs in.
    pub(crate) fn remember_sandbox(&self, id: &str, prepared: sandbox::Prepared, cwd: &Path) {
        self.remember(JobSandbox {
            id: id.to_owned(),
            prepared,
            cwd: cwd.to_owned(),
            leader: None,
        });
    }

    /// Remembers a sandbox under its id (a job's, or a terminal's): its
    /// rules only (see [`sandbox::Prepared::rules`]), so that what is
    /// remembered holds no thread or descriptor of the sandbox.
    pub(crate) fn remember(&self, mut sandbox: JobSandbox) {
        sandbox.prepared = sandbox.prepared.rules();
        if let Ok(mut kept) = self.sandboxes.lock() {
            if kept.len() >= SANDBOXES_KEPT {
                kept.pop_front();
            }
            kept.push_back(sandbox);
        }
    }

    /// The sandbox background job (or terminal) `id` ran in, while
    /// remembered. A lookup keeps it: what is in use is never the oldest.
    pub(crate) fn sandbox_of(&self, id: &str) -> Option<JobSandbox> {
        let mut kept = self.sandboxes.lock().ok()?;
        let at = kept.iter().rposition(|s| s.id == id)?;
        let found = kept.remove(at)?;
        kept.push_back(found.clone());
        Some(found)
    }

    /// Ends everything `owner` started (running jobs, terminals) and
    /// forgets it: called when a connection ends.
    pub async fn end_owner(&self, owner: &Owner) {
        // Jobs first: a background send holds its terminal's send slot.
        let ended = self.jobs.end_owner(owner).await;
        for (id, detail) in ended.failures {
            tracing::warn!("job {id} of a closed connection could not be ended: {detail}");
        }
        self.terminals.end_owner(owner).await;
    }
}

/// Where a call reports what it is waiting for while it runs (a language
/// server indexing, a command still running). The host turns reports into
/// its transport's progress notifications; a call without a sink reports
/// nothing. Reports are best effort and must not block.
#[derive(Clone)]
pub struct ProgressSink(Arc<dyn Fn(ProgressReport) + Send + Sync>);

/// One progress report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProgressReport {
    /// What the call waits for, for a person or a model.
    pub message: String,
    /// How far along, when the waited-for work says so.
    pub percentage: Option<u32>,
}

impl ProgressSink {
    /// A sink that hands each report to `report`.
    pub fn new(report: impl Fn(ProgressReport) + Send + Sync + 'static) -> Self {
        Self(Arc::new(report))
    }

    /// Reports `message`.
    pub fn report(&self, message: impl Into<String>, percentage: Option<u32>) {
        (self.0)(ProgressReport {
            message: message.into(),
            percentage,
        });
    }
}

impl std::fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ProgressSink")
    }
}

/// Who is calling and from where.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The calling agent.
    pub owner: Owner,
    /// The session's working directory: relative `cwd` arguments resolve
    /// against it, and commands run in it by default.
    pub cwd: PathBuf,
    /// The runtime the call uses.
    pub runtime: Arc<Runtime>,
    /// The environment every process the caller starts gets in place of
    /// the server's own (the one its MCP client gave the bridge); `None`:
    /// the server's.
    pub env: Option<Arc<Vec<(String, String)>>>,
    /// Where a long call reports progress; `None` when the caller asked
    /// for none.
    pub progress: Option<ProgressSink>,
    /// The sandbox and environment policy of every process the call
    /// starts. Its writable root is [`CallContext::cwd`], the session's
    /// directory, never a `cwd` argument.
    pub confinement: Arc<Confinement>,
    /// Asks a person to approve a command outside the sandbox (the page,
    /// `dsh approve`); `None` when the host can reach no person.
    pub ask: Option<Asker>,
    /// Takes back the work of a detached agent (this agent before its
    /// client restarted); `None` when the host keeps no detached work.
    pub resume: Option<Arc<dyn Resume>>,
    /// Has a person answer a program's secret prompt out of band; `None`
    /// when the host cannot reach one.
    pub secrets: Option<Arc<dyn SecretPrompts>>,
}

/// A person answers a program's secret prompt (a password, a passphrase)
/// out of band: the model never sees, types or is handed the secret.
pub trait SecretPrompts: Send + Sync + std::fmt::Debug {
    /// Asks a person to answer the secret prompt terminal `id` of `owner`
    /// shows (`prompt`: its last line; `sent`: what the agent typed that
    /// led to it) and waits for them.
    fn ask<'a>(
        &'a self,
        owner: &'a Owner,
        id: terminal_seam::TerminalId,
        prompt: &'a str,
        sent: &'a str,
    ) -> futures::future::BoxFuture<'a, SecretAsked>;
}

/// How asking a person for a secret went.
pub enum SecretAsked {
    /// They answered: the tool types it (a send, so what follows settles
    /// as usual) and forgets it.
    Answered(zeroize::Zeroizing<String>),
    /// A person refused to answer (no host offers that today: a client
    /// that declines the page's link has not refused, and the prompt
    /// still waits for a person).
    Declined,
    /// Nobody could be asked in the client; the words say how a person
    /// answers instead (one line for the model).
    NotAsked(String),
}

impl std::fmt::Debug for SecretAsked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Answered(_) => f.write_str("Answered(..)"),
            Self::Declined => f.write_str("Declined"),
            Self::NotAsked(how) => f.debug_tuple("NotAsked").field(how).finish(),
        }
    }
}

/// Taking back the terminals and jobs of an agent whose client went away
/// (a restart, a crash) and whose work the host kept detached for a grace
/// period. The key is a capability: the host shows it only to the agent
/// it belongs to, in the replies that start work, and an id alone never
/// takes anything back.
pub trait Resume: Send + Sync + std::fmt::Debug {
    /// The caller's own key (it takes the caller's work back later).
    fn key(&self) -> String;

    /// Makes the detached agent with `key` the caller: from then on the
    /// caller's calls run as its owner. Errors: `RESUME_KEY_UNKNOWN`,
    /// `RESUME_EXPIRED`, `RESUME_NOT_EMPTY` (the caller already started
    /// work of its own).
    fn resume<'a>(
        &'a self,
        key: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<Resumed, crate::ToolError>>;
}

/// What [`Resume::resume`] took back.
#[derive(Debug, Clone)]
pub struct Resumed {
    /// The caller's owner from now on.
    pub owner: Owner,
    /// How long the work was detached (zero when the key was the
    /// caller's own).
    pub detached_for: std::time::Duration,
}

impl CallContext {
    /// Adds the caller's resume key to the reply of a call that started
    /// work (a terminal, a background job), when the host keeps work
    /// across a client restart.
    pub(crate) fn with_resume_key(&self, mut reply: crate::ToolReply) -> crate::ToolReply {
        if let Some(resume) = &self.resume {
            let key = resume.key();
            let line = format!(
                "[resume key {key}: if your client restarts, terminal_list with resume set to it gives this back]"
            );
            // The sandbox's footer stays the last line.
            let at = match reply.text.rfind('\n') {
                Some(i) if reply.text[i + 1..].starts_with("[sandbox:") => i + 1,
                _ => {
                    reply.text.push('\n');
                    reply.text.len()
                }
            };
            reply.text.insert_str(at, &format!("{line}\n"));
            if reply.text.ends_with('\n') {
                reply.text.pop();
            }
            reply.structured["resume_key"] = serde_json::json!(key);
        }
        reply
    }
}

/// What became of a request to run a command outside the sandbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A person approved it where only a person reaches (the `dsh ui`
    /// page, `dsh approve` on their terminal).
    Yes,
    /// A person refused it there.
    No,
    /// No person decided before the wait ended: what happened (what the
    /// client did with the link, how long the wait was) and how a person
    /// approves the next time, in words for the model.
    Unanswered(String),
    /// No person could be asked (why, and what to do instead).
    Unavailable(String),
}

/// A command an agent asks to run outside the sandbox, as a person is
/// shown it.
#[derive(Debug, Clone)]
pub struct Approval {
    /// The question: what approving means, then the command with every
    /// line marked (see `escalation_question` of `bash`).
    pub question: String,
    /// The command line, as the agent sent it.
    pub command: String,
    /// Where it would run.
    pub cwd: PathBuf,
    /// Where the call reports that it waits for a person.
    pub progress: Option<ProgressSink>,
}

/// Asks a person to approve a command outside the sandbox and waits for
/// their decision. Only a person's decision where no client reaches
/// counts: an MCP client's answer to an elicitation never approves.
#[derive(Clone)]
pub struct Asker(
    Arc<dyn Fn(Approval) -> futures::future::BoxFuture<'static, Answer> + Send + Sync>,
);

impl Asker {
    /// An asker that puts each request to `ask`.
    pub fn new(
        ask: impl Fn(Approval) -> futures::future::BoxFuture<'static, Answer> + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(ask))
    }

    /// Asks for `approval` and waits for the decision.
    pub async fn ask(&self, approval: Approval) -> Answer {
        (self.0)(approval).await
    }
}

impl std::fmt::Debug for Asker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Asker")
    }
}

/// Reports `elapsed` and `last_line` every second to `sink` while `work`
/// runs (nothing in its first second), then returns its result.
pub(crate) async fn with_ticks<T>(
    sink: Option<&ProgressSink>,
    work: impl std::future::Future<Output = T>,
    last_line: impl Fn() -> futures::future::BoxFuture<'static, Option<String>>,
) -> T {
    let Some(sink) = sink else {
        return work.await;
    };
    let started = tokio::time::Instant::now();
    let mut ticks = tokio::time::interval_at(
        started + std::time::Duration::from_secs(1),
        std::time::Duration::from_secs(1),
    );
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut work = std::pin::pin!(work);
    loop {
        tokio::select! {
            result = &mut work => return result,
            _ = ticks.tick() => {
                let line = last_line().await;
                let elapsed = started.elapsed().as_secs();
                sink.report(
                    match line {
                        Some(l) => format!("running for {elapsed} s; last output: {l}"),
                        None => format!("running for {elapsed} s; no output yet"),
                    },
                    None,
                );
            }
        }
    }
}
