//! What the client knows of a server's state: its [`Phase`] and latest
//! progress, kept up to date from the server's notifications (`$/progress`,
//! rust-analyzer's `experimental/serverStatus`, `window/logMessage`) by the
//! server's [`ReadinessSignal`], and the wait for it to be ready.

use std::collections::BTreeMap;
use std::time::Duration;

use lsp_seam::{LspError, UnavailableReason};
use lsp_types::{NumberOrString, ProgressParams, ProgressParamsValue, WorkDoneProgress};
use serde_json::Value;

use super::stderr::StderrError;
use super::{Failure, Server, Shared, lock};
use crate::config::ReadinessSignal;

/// Where a server is in its life.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Starting, loading or indexing.
    Loading,
    /// Answers are complete.
    Ready,
    /// The server found no project (its message).
    NoProject(String),
    /// The server finished loading with `health: "error"` (its message):
    /// the project failed to load (e.g. `cargo metadata` failed), so its
    /// answers are not proof of anything. Left when it loads again.
    LoadFailed(String),
    /// The process or its pipe is gone (how).
    Dead(String),
}

/// What the client knows about the server's state.
#[derive(Debug, Clone)]
pub(crate) struct Status {
    pub phase: Phase,
    /// The latest progress message.
    pub progress: Option<String>,
    /// The latest progress percentage.
    pub percentage: Option<u32>,
    /// The server's own proof of a loaded project was seen (see
    /// [`ReadinessSignal`]).
    proof_seen: bool,
    /// rust-analyzer: a `quiescent: false` was seen.
    seen_busy: bool,
    /// rust-analyzer: how many `quiescent: false` statuses were seen (a
    /// load, which may restart or cancel its check).
    pub busy_reports: u64,
    /// rust-analyzer: the message of a `health: "warning"` that stands
    /// (e.g. a build script or the proc-macro server failed): answers may
    /// be partial, so an empty one is not trusted while it stands.
    pub warning: Option<String>,
    /// `initialized` was sent.
    initialized: bool,
    /// Active `$/progress` tokens and their latest messages.
    active: BTreeMap<String, String>,
    /// The title of each active `$/progress` token.
    titles: BTreeMap<String, String>,
    /// How many runs of the server's check (a `$/progress` whose title
    /// starts with [`CHECK_TITLE`]) have begun.
    pub checks_begun: u64,
    /// The message the last check ended with, if any.
    pub check_end: Option<String>,
    /// What the last check reported while it ran: for rust-analyzer's,
    /// each target it compiled (`NAME (KINDS)`).
    pub check_reports: Vec<String>,
    /// How many diagnosis progresses (see
    /// [`crate::config::DiagnosisProgress`]) have begun, by title.
    diagnoses_begun: BTreeMap<String, u64>,
}

/// The start of the title of rust-analyzer's `$/progress` for the check
/// it runs (`cargo check`, or the configured `cargo` command).
pub(crate) const CHECK_TITLE: &str = "cargo ";

impl Status {
    /// Whether a check (see [`CHECK_TITLE`]) is running.
    pub fn check_active(&self) -> bool {
        self.titles.values().any(|t| t.starts_with(CHECK_TITLE))
    }

    /// How many diagnosis progresses titled `title` have begun.
    pub fn diagnoses_begun(&self, title: &str) -> u64 {
        self.diagnoses_begun.get(title).copied().unwrap_or(0)
    }

    /// Whether a progress whose title starts with `prefix` (a diagnosis)
    /// is running.
    pub fn diagnosis_active(&self, prefix: &str) -> bool {
        self.titles.values().any(|t| t.starts_with(prefix))
    }
}

impl Status {
    /// A server just started, waiting for what `readiness` names.
    pub(super) fn new(readiness: &ReadinessSignal) -> Self {
        let waiting_for = match readiness {
            ReadinessSignal::ProgressEnded(title) => {
                Some(format!("waiting for the server's \"{title}\" to finish"))
            }
            ReadinessSignal::LogMessage(_) => {
                Some("waiting for the server to report its project loaded".to_owned())
            }
            ReadinessSignal::Progress | ReadinessSignal::ServerStatus => None,
        };
        Status {
            phase: Phase::Loading,
            progress: waiting_for,
            percentage: None,
            proof_seen: false,
            titles: BTreeMap::new(),
            seen_busy: false,
            busy_reports: 0,
            warning: None,
            initialized: false,
            active: BTreeMap::new(),
            checks_begun: 0,
            check_end: None,
            check_reports: Vec::new(),
            diagnoses_begun: BTreeMap::new(),
        }
    }
}

impl Shared {
    pub(super) fn update(&self, f: impl FnOnce(&mut Status)) {
        let readiness = &self.readiness;
        self.status.send_modify(|s| {
            f(s);
            if matches!(
                s.phase,
                Phase::Dead(_) | Phase::NoProject(_) | Phase::LoadFailed(_)
            ) {
                return;
            }
            let ready = match readiness {
                ReadinessSignal::Progress => s.initialized && s.active.is_empty(),
                ReadinessSignal::ServerStatus => s.phase == Phase::Ready,
                ReadinessSignal::ProgressEnded(_) | ReadinessSignal::LogMessage(_) => {
                    s.initialized && s.active.is_empty() && s.proof_seen
                }
            };
            s.phase = if ready { Phase::Ready } else { Phase::Loading };
        });
    }

    /// Notes that `initialized` was sent.
    pub(super) fn mark_initialized(&self) {
        self.update(|s| s.initialized = true);
    }

    pub(super) fn mark_dead(&self, how: String) {
        self.status.send_modify(|s| {
            if !matches!(s.phase, Phase::Dead(_)) {
                s.phase = Phase::Dead(how);
            }
        });
    }

    pub(super) fn on_progress(&self, params: ProgressParams) {
        let token = match params.token {
            NumberOrString::Number(n) => n.to_string(),
            NumberOrString::String(s) => s,
        };
        let ProgressParamsValue::WorkDone(work) = params.value;
        let proof = match &self.readiness {
            ReadinessSignal::ProgressEnded(title) => Some(title.as_str()),
            ReadinessSignal::Progress
            | ReadinessSignal::ServerStatus
            | ReadinessSignal::LogMessage(_) => None,
        };
        let diagnosis = |title: &str| {
            self.diagnosis_prefix
                .as_deref()
                .is_some_and(|p| title.starts_with(p))
        };
        self.update(|s| match work {
            // A diagnosis is counted and tracked, but is not loading: the
            // server stays ready for the other queries.
            WorkDoneProgress::Begin(b) if diagnosis(&b.title) => {
                *s.diagnoses_begun.entry(b.title.clone()).or_default() += 1;
                s.titles.insert(token, b.title);
            }
            WorkDoneProgress::Report(_) if s.titles.get(&token).is_some_and(|t| diagnosis(t)) => {}
            WorkDoneProgress::Begin(b) => {
                let text = join_progress(&b.title, b.message.as_deref(), b.percentage);
                s.progress = Some(text.clone());
                s.percentage = b.percentage;
                s.active.insert(token.clone(), text);
                if b.title.starts_with(CHECK_TITLE) {
                    s.checks_begun += 1;
                    s.check_reports.clear();
                }
                s.titles.insert(token, b.title);
            }
            WorkDoneProgress::Report(r) => {
                let title = s.titles.get(&token).cloned().unwrap_or_default();
                if title.starts_with(CHECK_TITLE)
                    && let Some(m) = &r.message
                    && s.check_reports.len() < 100_000
                {
                    s.check_reports.push(m.clone());
                }
                let text = join_progress(&title, r.message.as_deref(), r.percentage);
                s.progress = Some(text.clone());
                s.percentage = r.percentage.or(s.percentage);
                s.active.insert(token, text);
            }
            WorkDoneProgress::End(end) => {
                s.active.remove(&token);
                let title = s.titles.remove(&token).unwrap_or_default();
                if title.starts_with(CHECK_TITLE) {
                    s.check_end = end.message;
                }
                if proof.is_some_and(|p| title.contains(p)) {
                    s.proof_seen = true;
                }
            }
        });
    }

    pub(super) fn on_log_message(&self, params: &Value) {
        let ReadinessSignal::LogMessage(texts) = &self.readiness else {
            return;
        };
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .unwrap_or_default();
        if texts.iter().any(|t| message.contains(t.as_str())) {
            self.update(|s| s.proof_seen = true);
        }
    }

    pub(super) fn on_server_status(&self, params: &Value) {
        if params.get("quiescent").and_then(Value::as_bool) == Some(false) {
            // A new load: an error a command printed before is not its.
            *lock(&self.stderr_error) = StderrError::default();
        }
        let health = params.get("health").and_then(Value::as_str).unwrap_or("ok");
        let quiescent = params
            .get("quiescent")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let message = params
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let no_project = health != "ok"
            && message.as_deref().is_some_and(|m| {
                m.contains("Failed to discover workspace")
                    || m.contains("failed to find any projects")
            });
        self.update(|s| {
            if no_project {
                s.phase = Phase::NoProject(message.clone().unwrap_or_default());
                return;
            }
            if message.is_some() {
                s.progress.clone_from(&message);
            }
            s.warning = match health {
                "ok" | "error" => None,
                _ => Some(
                    message
                        .clone()
                        .unwrap_or_else(|| format!("health {health}")),
                ),
            };
            if !quiescent {
                s.seen_busy = true;
                s.busy_reports += 1;
                s.phase = Phase::Loading;
            } else if s.seen_busy {
                // Idle is not proof of a loaded project: a load that failed
                // (`cargo metadata` failed, …) also ends quiescent, with
                // `health: "error"`, and rust-analyzer does not retry it
                // until a manifest changes.
                s.phase = if health == "error" {
                    Phase::LoadFailed(
                        message
                            .clone()
                            .unwrap_or_else(|| "the project failed to load".to_owned()),
                    )
                } else {
                    Phase::Ready
                };
            }
        });
    }
}

impl Server {
    /// Whether the process and its connection are alive.
    pub fn is_alive(&self) -> bool {
        !matches!(self.shared.status.borrow().phase, Phase::Dead(_))
    }

    /// The current status.
    pub fn status(&self) -> Status {
        self.shared.status.borrow().clone()
    }

    /// `load_failed` for a load that ended with `health: "error"` and
    /// `message`: the server's message, the error its command printed,
    /// and what to do.
    pub fn load_failed(&self, message: &str) -> LspError {
        let detail = lock(&self.shared.stderr_error).lines.join("\n");
        LspError::Unavailable {
            reason: UnavailableReason::LoadFailed,
            message: format!(
                "{} could not load the project at {}: {message}{}\nWhat it would answer now \
                 is no proof of anything (a call site resolves to nothing), so nothing is \
                 answered. Fix the error (for a Cargo project, `cargo metadata` in that \
                 directory shows it); the server loads the project again when a manifest \
                 changes.",
                self.config.name,
                self.root.display(),
                if detail.is_empty() {
                    String::new()
                } else {
                    format!("\n{detail}")
                }
            ),
        }
    }

    /// The project's load error or warning, when one stands (for `dsh ps`).
    pub fn load_problem(&self) -> Option<String> {
        let s = self.shared.status.borrow();
        match &s.phase {
            Phase::LoadFailed(m) => {
                let detail = lock(&self.shared.stderr_error).lines.first().cloned();
                Some(match detail {
                    Some(d) => format!("load failed: {m} ({d})"),
                    None => format!("load failed: {m}"),
                })
            }
            Phase::NoProject(m) => Some(format!("no project: {m}")),
            Phase::Loading | Phase::Ready | Phase::Dead(_) => {
                s.warning.as_ref().map(|w| format!("warning: {w}"))
            }
        }
    }

    /// Waits up to `timeout` for the server to be ready, telling
    /// `on_progress` each new progress message while it waits.
    pub async fn wait_ready(
        &self,
        timeout: Duration,
        on_progress: &(dyn Fn(&str, Option<u32>) + Send + Sync),
    ) -> Result<(), Failure> {
        let mut rx = self.shared.status.subscribe();
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
        let mut told: Option<String> = None;
        loop {
            let progress = {
                let s = rx.borrow_and_update();
                if s.phase == Phase::Loading && s.progress != told {
                    told.clone_from(&s.progress);
                    let text = s.progress.as_deref().unwrap_or("loading the project");
                    on_progress(&format!("{}: {text}", self.config.name), s.percentage);
                }
                match &s.phase {
                    Phase::Ready => return Ok(()),
                    Phase::NoProject(m) => {
                        return Err(Failure::Lsp(LspError::Unavailable {
                            reason: UnavailableReason::NoProject,
                            message: format!("{}: {m}", self.config.name),
                        }));
                    }
                    Phase::LoadFailed(m) => {
                        return Err(Failure::Lsp(self.load_failed(m)));
                    }
                    Phase::Dead(_) => return Err(Failure::Dead),
                    Phase::Loading => s.progress.clone(),
                }
            };
            match tokio::time::timeout_at(deadline, rx.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    return Err(Failure::Lsp(LspError::NotReady {
                        progress,
                        waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
                    }));
                }
            }
        }
    }
}

fn join_progress(title: &str, message: Option<&str>, percentage: Option<u32>) -> String {
    let mut text = title.to_owned();
    if let Some(m) = message.filter(|m| !m.is_empty()) {
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(m);
    }
    if let Some(p) = percentage {
        text.push_str(&format!(" ({p}%)"));
    }
    text
}
