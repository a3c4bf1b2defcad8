//! The diagnostics a server computed for a document, and the proof that
//! they are for the content just sent and complete: pulled
//! (`textDocument/diagnostic`) where the server offers it, published for
//! the version sent otherwise, for a server that reports its diagnosis of
//! each document notification as progress (gopls) the end of the
//! diagnosis of the last one sent, and for rust-analyzer the check it runs
//! on request (`cargo check`) begun after the content was sent and
//! finished.

use std::path::Path;
use std::time::Duration;

use lsp_seam::{DiagnosticsProof, LspError};
use lsp_types::{
    Diagnostic, DocumentDiagnosticReport, DocumentDiagnosticReportResult, Url,
    WorkDoneProgressParams,
};
use serde_json::{Value, json};

use super::check_scope;
use super::status::CHECK_TITLE;
use super::{Failure, Server, Shared};
use crate::config::{DiagnosisProgress, ReadinessSignal};

/// What a server last published for one document.
#[derive(Debug, Clone)]
pub(crate) struct Published {
    /// The document version it names (`None` when it names none).
    pub version: Option<i32>,
    /// The diagnostics.
    pub items: Vec<Diagnostic>,
    /// The publication naming the highest version so far, and its
    /// diagnostics: what a later publication for an older version, or
    /// for none, does not replace (rust-analyzer sends each publication
    /// from a worker thread, so two of them can arrive in either order).
    pub newest: Option<(i32, Vec<Diagnostic>)>,
}

/// `textDocument/diagnostic` with only the document named: some servers
/// refuse a `null` where the protocol lets a field be left out.
enum PullDiagnostics {}

impl lsp_types::request::Request for PullDiagnostics {
    type Params = Value;
    type Result = DocumentDiagnosticReportResult;
    const METHOD: &'static str = "textDocument/diagnostic";
}

/// rust-analyzer's request to run its check now.
enum RunFlycheck {}

impl lsp_types::notification::Notification for RunFlycheck {
    type Params = Value;
    const METHOD: &'static str = "rust-analyzer/runFlycheck";
}

/// typescript-language-server's command that forwards a request to its
/// tsserver.
const TSSERVER_REQUEST: &str = "typescript.tsserverRequest";

/// A tsserver diagnostic (`start` 1-based line and UTF-16 `offset`,
/// `category`, `code`, `text`) as an LSP one.
fn tsserver_diagnostic(d: &Value) -> Option<Diagnostic> {
    let position = |at: &Value| -> Option<lsp_types::Position> {
        let line = at.get("line")?.as_u64()?.checked_sub(1)?;
        let offset = at.get("offset")?.as_u64()?.checked_sub(1)?;
        Some(lsp_types::Position {
            line: u32::try_from(line).ok()?,
            character: u32::try_from(offset).ok()?,
        })
    };
    let start = position(d.get("start")?)?;
    let end = d.get("end").and_then(position).unwrap_or(start);
    let severity = match d.get("category").and_then(Value::as_str) {
        Some("warning") => lsp_types::DiagnosticSeverity::WARNING,
        Some("suggestion") => lsp_types::DiagnosticSeverity::HINT,
        Some("message") => lsp_types::DiagnosticSeverity::INFORMATION,
        _ => lsp_types::DiagnosticSeverity::ERROR,
    };
    Some(Diagnostic {
        range: lsp_types::Range { start, end },
        severity: Some(severity),
        code: d
            .get("code")
            .and_then(Value::as_i64)
            .map(|c| lsp_types::NumberOrString::String(format!("TS{c}"))),
        source: Some(
            d.get("source")
                .and_then(Value::as_str)
                .unwrap_or("typescript")
                .to_owned(),
        ),
        message: d
            .get("text")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned(),
        ..Diagnostic::default()
    })
}

/// `ServerCancelled`: the server gave up a pull because the content
/// changed; asking again is right.
const SERVER_CANCELLED: i64 = -32802;

impl Shared {
    /// Keeps what the server published for a document
    /// (`textDocument/publishDiagnostics`).
    pub(super) fn on_diagnostics(&self, params: &Value) {
        let Some(uri) = params
            .get("uri")
            .and_then(Value::as_str)
            .and_then(|u| Url::parse(u).ok())
        else {
            return;
        };
        let version = params
            .get("version")
            .and_then(Value::as_i64)
            .and_then(|v| i32::try_from(v).ok());
        let items: Vec<Diagnostic> = params
            .get("diagnostics")
            .cloned()
            .and_then(|d| serde_json::from_value(d).ok())
            .unwrap_or_default();
        self.diagnostics.send_modify(|d| {
            if d.len() >= 4096 && !d.contains_key(&uri) {
                d.clear();
            }
            let before = d.remove(&uri).and_then(|p| p.newest);
            let newest = match (version, before) {
                (Some(v), Some((w, _))) if v >= w => Some((v, items.clone())),
                (Some(v), None) => Some((v, items.clone())),
                (_, before) => before,
            };
            d.insert(
                uri,
                Published {
                    version,
                    items,
                    newest,
                },
            );
        });
    }
}

impl Server {
    /// The diagnostics the server computes for `text`, the content of
    /// `path` now: the text is sent again as a new version, then they are
    /// pulled, or awaited as published for that version, or (rust-analyzer)
    /// taken once its check of the content has run. Waits up to `timeout`
    /// for them; `LSP_NOT_READY` saying how long the server has been
    /// checking when they are not there by then.
    pub async fn fresh_diagnostics(
        &self,
        path: &Path,
        text: &str,
        language_id: &str,
        timeout: Duration,
    ) -> Result<(Vec<Diagnostic>, DiagnosticsProof), Failure> {
        let started = tokio::time::Instant::now();
        let deadline = started + timeout;
        let uri = super::path_url(path)?;
        let not_ready = |what: String| {
            Failure::Lsp(LspError::NotReady {
                progress: Some(format!(
                    "{} has been checking {} for {} ms ({what}); ask again",
                    self.config.name,
                    path.display(),
                    started.elapsed().as_millis()
                )),
                waited_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
            })
        };
        // The content was synced by the query (a new version when it
        // changed).
        if self.content_versions(path).is_none() {
            self.sync_document(path, text, language_id)?;
        }
        if self.config.readiness == ReadinessSignal::ServerStatus {
            return self
                .checked_diagnostics(path, text, &uri, deadline, &not_ready)
                .await;
        }
        if self.supports("diagnosticProvider") {
            return self.pulled_diagnostics(&uri, deadline, &not_ready).await;
        }
        if self.tsserver_request_command() {
            return self.tsserver_diagnostics(&uri, deadline, &not_ready).await;
        }
        if let Some(progress) = &self.config.diagnosis_progress {
            return self
                .diagnosed_diagnostics(progress, path, &uri, deadline, &not_ready)
                .await;
        }
        // Published for a version that is this content: the answer. Else
        // the content is sent again (see `resend_document`) and what is
        // published for it awaited. A server may publish for the first
        // version of the content after the resend (clangd then skips the
        // last version: its inputs are the same as the first's).
        let this_content = |d: &std::collections::HashMap<Url, Published>| {
            let (since, touch) = self.content_versions(path)?;
            d.get(&uri)
                .and_then(|p| p.version)
                .filter(|&v| v >= since && Some(v) != touch)
        };
        let mut rx = self.shared.diagnostics.subscribe();
        if this_content(&rx.borrow_and_update()).is_none() {
            self.resend_document(path, text)?;
        }
        let published = rx.wait_for(|d| this_content(d).is_some());
        match tokio::time::timeout_at(deadline, published).await {
            Ok(Ok(map)) => {
                let version = this_content(&map).unwrap_or_default();
                let items = map.get(&uri).map(|p| p.items.clone()).unwrap_or_default();
                Ok((items, DiagnosticsProof::Published { version }))
            }
            Ok(Err(_)) => Err(Failure::Dead),
            Err(_) => {
                let last = self
                    .shared
                    .diagnostics
                    .borrow()
                    .get(&uri)
                    .map(|p| p.version);
                let since = self.content_versions(path).map_or(0, |(since, _)| since);
                let last = match last {
                    Some(Some(v)) => format!("version {v}"),
                    Some(None) => "one naming no version".to_owned(),
                    None => "none".to_owned(),
                };
                Err(not_ready(format!(
                    "no diagnostics published yet for the file's current content (its versions \
                     from {since}; the last published for the file: {last})"
                )))
            }
        }
    }

    /// A server that reports each document notification's diagnosis as
    /// progress (gopls): waits until the diagnosis of every `didOpen` and
    /// `didChange` sent so far has begun and none is running, the
    /// document unchanged meanwhile, then takes what the server last
    /// published for it, whatever version that names.
    ///
    /// Why that is this content's, complete: gopls handles document
    /// notifications one at a time, in order, and begins the progress
    /// (`diagnosing opened files`, `diagnosing changed files`) while
    /// handling each, so the n-th such progress of a title is the n-th
    /// notification's, and once as many have begun as were sent, the last
    /// one sent (which carried this content) has begun. gopls ends it only
    /// after the diagnosis it started has published, and the publications
    /// precede the end on the connection, which the client reads in
    /// order. A diagnosis may skip its final pass when a newer one
    /// supersedes it; with none running, the newest has run in full. And
    /// gopls publishes a file's diagnostics only when they differ from the
    /// last ones it published for it (and once after each open or
    /// change), never for a snapshot older than one it published for: so
    /// with the newest diagnosis ended, the last publication received for
    /// the file is that diagnosis's result, even when it was sent earlier,
    /// for another snapshot, without a version (gopls names none for a
    /// snapshot in which the file is not open, such as the workspace's
    /// first). A notification gopls refuses begins no progress: the count
    /// is then never reached, and the answer is `LSP_NOT_READY`, never a
    /// guess.
    async fn diagnosed_diagnostics(
        &self,
        progress: &DiagnosisProgress,
        path: &Path,
        uri: &Url,
        deadline: tokio::time::Instant,
        not_ready: &(dyn Fn(String) -> Failure + Sync),
    ) -> Result<(Vec<Diagnostic>, DiagnosticsProof), Failure> {
        let mut rx = self.shared.status.subscribe();
        loop {
            let Some(sent) = self.sent_so_far(path) else {
                return Err(not_ready("the file is not open on the server".into()));
            };
            let diagnosed = rx.wait_for(|s| {
                s.diagnoses_begun(&progress.opened) >= sent.opens
                    && s.diagnoses_begun(&progress.changed) >= sent.changes
                    && !s.diagnosis_active(&progress.prefix)
            });
            match tokio::time::timeout_at(deadline, diagnosed).await {
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    return Err(not_ready(format!(
                        "its diagnosis of the content sent as version {} has not finished",
                        sent.version
                    )));
                }
            }
            // Sent again meanwhile (another query): prove the new version.
            if self.sent_so_far(path).map(|s| s.version) != Some(sent.version) {
                continue;
            }
            let published = self.shared.diagnostics.borrow().get(uri).cloned();
            let Some(published) = published else {
                // gopls publishes for every file it opens: nothing yet is
                // not proof of nothing.
                return Err(not_ready(
                    "its diagnosis ended, but it published nothing for the file yet".into(),
                ));
            };
            return Ok((
                published.items,
                DiagnosticsProof::CheckFinished {
                    check: format!("{} {}", self.config.name, progress.prefix.trim_end()),
                },
            ));
        }
    }

    /// Whether the server offers typescript-language-server's command
    /// that forwards a request to its tsserver.
    fn tsserver_request_command(&self) -> bool {
        self.capabilities
            .pointer("/executeCommandProvider/commands")
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|c| c == TSSERVER_REQUEST))
    }

    /// typescript-language-server: asks its tsserver, through
    /// `typescript.tsserverRequest`, for the file's syntactic, semantic and
    /// suggestion diagnostics (`…DiagnosticsSync`). tsserver handles
    /// requests in order, so these are for the content sent before.
    async fn tsserver_diagnostics(
        &self,
        uri: &Url,
        deadline: tokio::time::Instant,
        not_ready: &(dyn Fn(String) -> Failure + Sync),
    ) -> Result<(Vec<Diagnostic>, DiagnosticsProof), Failure> {
        let mut items = Vec::new();
        for command in [
            "syntacticDiagnosticsSync",
            "semanticDiagnosticsSync",
            "suggestionDiagnosticsSync",
        ] {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let answer = self
                .request::<lsp_types::request::ExecuteCommand>(
                    lsp_types::ExecuteCommandParams {
                        command: TSSERVER_REQUEST.to_owned(),
                        arguments: vec![json!(command), json!({ "file": uri })],
                        work_done_progress_params: WorkDoneProgressParams::default(),
                    },
                    left,
                )
                .await;
            let answer = match answer {
                Ok(v) => v.unwrap_or(Value::Null),
                Err(Failure::Lsp(LspError::Timeout { .. })) => {
                    return Err(not_ready(format!(
                        "its tsserver has not answered {command}"
                    )));
                }
                Err(e) => return Err(e),
            };
            let body = answer.get("body").unwrap_or(&answer);
            let Some(list) = body.as_array() else {
                return Err(Failure::Lsp(LspError::ServerError {
                    code: None,
                    message: format!(
                        "{} answered {command} without a list of diagnostics",
                        self.config.name
                    ),
                }));
            };
            items.extend(list.iter().filter_map(tsserver_diagnostic));
        }
        Ok((items, DiagnosticsProof::Pulled))
    }

    /// `textDocument/diagnostic`, asked again while the server cancels it
    /// because the content changed.
    async fn pulled_diagnostics(
        &self,
        uri: &Url,
        deadline: tokio::time::Instant,
        not_ready: &(dyn Fn(String) -> Failure + Sync),
    ) -> Result<(Vec<Diagnostic>, DiagnosticsProof), Failure> {
        loop {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            if left.is_zero() {
                return Err(not_ready("the server kept cancelling the request".into()));
            }
            let answer = self
                .request::<PullDiagnostics>(json!({ "textDocument": { "uri": uri } }), left)
                .await;
            match answer {
                Ok(DocumentDiagnosticReportResult::Report(DocumentDiagnosticReport::Full(r))) => {
                    return Ok((
                        r.full_document_diagnostic_report.items,
                        DiagnosticsProof::Pulled,
                    ));
                }
                Ok(
                    DocumentDiagnosticReportResult::Report(DocumentDiagnosticReport::Unchanged(_))
                    | DocumentDiagnosticReportResult::Partial(_),
                ) => {
                    return Err(Failure::Lsp(LspError::ServerError {
                        code: None,
                        message: format!(
                            "{} answered textDocument/diagnostic without the full list of the \
                             document's diagnostics",
                            self.config.name
                        ),
                    }));
                }
                Err(Failure::Lsp(LspError::ServerError {
                    code: Some(SERVER_CANCELLED),
                    ..
                })) => {
                    // sleep-ok: a short pause before asking again, bounded by the deadline.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(Failure::Lsp(LspError::Timeout { .. })) => {
                    return Err(not_ready("the request timed out and was cancelled".into()));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// rust-analyzer: asks for its check (`rust-analyzer/runFlycheck`,
    /// which restarts a check already running), waits until a check begun
    /// after the request has ended, then takes what it published for the
    /// file since (see [`Server::published_after`]). Only the check's
    /// diagnostics are kept (source other than `rust-analyzer`): the same
    /// as the project's own `cargo check` reports, not rust-analyzer's own
    /// analysis.
    ///
    /// A check's end is the same progress end whether it finished or was
    /// cancelled, and a cancelled check leaves what it had listed so far
    /// (the first of three errors, seen under a concurrent build). A check
    /// is cancelled by a later request for one (it restarts) and by a load
    /// (new build-script results, a manifest change: rust-analyzer makes
    /// its checks anew). And a check whose output directory is removed
    /// while it runs (`cargo clean`) ends as finished, having listed only
    /// the errors rustc reported before it failed to write (see
    /// `check_scope`). So the check is asked for with the server idle,
    /// and its result taken only when no later check was asked for, no
    /// check began after it ended (a restart ends the check it cancels,
    /// then begins the next; `checkOnSave` is off in the preset, so
    /// rust-analyzer begins none by itself), the server reported no load
    /// until the publication was received, and
    /// the output directory is the one there before the check; else it is
    /// asked for again, within the deadline.
    ///
    /// Nothing listed is an answer only when the check reached the file
    /// (see [`Server::check_missed`]).
    async fn checked_diagnostics(
        &self,
        path: &Path,
        text: &str,
        uri: &Url,
        deadline: tokio::time::Instant,
        not_ready: &(dyn Fn(String) -> Failure + Sync),
    ) -> Result<(Vec<Diagnostic>, DiagnosticsProof), Failure> {
        use std::sync::atomic::Ordering;
        let mut rx = self.shared.status.subscribe();
        let mut cut_short: Option<&str> = None;
        loop {
            if tokio::time::Instant::now() >= deadline
                && let Some(why) = cut_short
            {
                return Err(not_ready(format!(
                    "each `cargo check` of the content it ran was cut short ({why})"
                )));
            }
            let idle = rx.wait_for(|s| s.phase != super::Phase::Loading);
            match tokio::time::timeout_at(deadline, idle).await {
                Ok(Ok(s)) if matches!(s.phase, super::Phase::Dead(_)) => return Err(Failure::Dead),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    return Err(not_ready(
                        "it is loading the project, which cancels its `cargo check`".into(),
                    ));
                }
            }
            let (begun, busy) = {
                let s = rx.borrow_and_update();
                (s.checks_begun, s.busy_reports)
            };
            // Made if missing (the check makes it anyway), so that its
            // identity is known before the check.
            let output = check_scope::check_target_dir(
                self.config.initialization_options.as_ref(),
                &self.root,
            );
            let _ = std::fs::create_dir_all(&output);
            let output_before = check_scope::dir_identity(&output);
            // cargo compiles again only a target one of whose files is
            // newer than its last compile; one it finds fresh it does not
            // report, and rust-analyzer shows no progress for it. The
            // file's time is set to now (its content untouched), so that
            // the check compiles its target and says so: the proof an
            // empty list needs (see `check_missed`).
            if let Ok(file) = std::fs::File::options().append(true).open(path) {
                let _ = file.set_modified(std::time::SystemTime::now());
            }
            let asked = tokio::time::Instant::now();
            let request = self.checks_requested.fetch_add(1, Ordering::SeqCst) + 1;
            self.notify::<RunFlycheck>(json!({ "textDocument": { "uri": uri } }))?;
            let done = rx.wait_for(|s| s.checks_begun > begun && !s.check_active());
            let (check, reports, begun_by_end) = match tokio::time::timeout_at(deadline, done).await
            {
                Ok(Ok(status)) => (
                    match &status.warning {
                        Some(w) => Some(format!(
                            "{} / warning: {w}",
                            status.check_end.clone().unwrap_or_default()
                        )),
                        None => status.check_end.clone(),
                    },
                    status.check_reports.clone(),
                    status.checks_begun,
                ),
                Ok(Err(_)) => return Err(Failure::Dead),
                Err(_) => {
                    let running = self.shared.status.borrow().checks_begun > begun;
                    return Err(not_ready(if running {
                        "its `cargo check` of the content has not finished".into()
                    } else {
                        "its `cargo check` of the content has not started".into()
                    }));
                }
            };
            tracing::debug!(
                server = %self.config.name,
                path = %path.display(),
                check_ms = asked.elapsed().as_millis(),
                "its check of the content ended"
            );
            // What the check published for the file, received in full:
            // see `published_after`.
            let Some(items) = self.published_after(path, text, uri, deadline).await? else {
                return Err(not_ready(
                    "its `cargo check` of the content finished, but it has not published the \
                     file's diagnostics since"
                        .into(),
                ));
            };
            let (cancelled, restarted) = {
                let s = self.shared.status.borrow();
                (
                    s.busy_reports != busy
                        || self.checks_requested.load(Ordering::SeqCst) != request,
                    s.checks_begun != begun_by_end,
                )
            };
            let output_removed =
                output_before.is_none() || check_scope::dir_identity(&output) != output_before;
            if cancelled || restarted || output_removed {
                // The check may have been cut short: ask for one again.
                cut_short = Some(if output_removed {
                    "its output directory was removed while it ran, as `cargo clean` does"
                } else if restarted {
                    "another check began as it ended: it was restarted, not finished"
                } else {
                    "a load or a later request restarted it"
                });
                continue;
            }
            let items: Vec<Diagnostic> = items
                .into_iter()
                .filter(|d| d.source.as_deref() != Some("rust-analyzer"))
                .collect();
            if !items.is_empty() {
                super::lock(&self.compiled).remove(path);
            }
            if items.is_empty()
                && let Some(why) = self.check_missed(path, text, uri, &reports)
            {
                return Err(not_ready(why));
            }
            let name = format!("{CHECK_TITLE}check");
            return Ok((
                items,
                DiagnosticsProof::CheckFinished {
                    check: check
                        .filter(|m| !m.is_empty())
                        .map_or(name.clone(), |m| format!("{name} ({m})")),
                },
            ));
        }
    }

    /// Everything the server published for `path` up to now, received in
    /// full; `None` when it published nothing new by the deadline.
    ///
    /// rust-analyzer sends each publication from a worker thread of its
    /// own, so the last one of a check that ended may arrive after the
    /// answer to a later request, and two may arrive in either order (one
    /// answer taken after such a round trip listed 2 of the 3 errors its
    /// check had reported). So the document is closed and opened again
    /// with the same text as a new version: having dropped its own
    /// diagnostics of the file at the close, rust-analyzer computes them
    /// again and publishes, naming that version, with every check
    /// diagnostic it holds for the file then. A publication naming it was
    /// made after the server handled the reopening, so after everything
    /// received before (the check's end among it).
    async fn published_after(
        &self,
        path: &Path,
        text: &str,
        uri: &Url,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Vec<Diagnostic>>, Failure> {
        let mut rx = self.shared.diagnostics.subscribe();
        let Some(version) = self.reopen_document(path, text)? else {
            return Ok(None);
        };
        let newest = |d: &std::collections::HashMap<Url, Published>| {
            d.get(uri)
                .and_then(|p| p.newest.as_ref())
                .filter(|(v, _)| *v >= version)
                .map(|(_, items)| items.clone())
        };
        let reopened = tokio::time::Instant::now();
        let published = rx.wait_for(|d| newest(d).is_some());
        match tokio::time::timeout_at(deadline, published).await {
            Ok(Ok(map)) => {
                tracing::debug!(
                    server = %self.config.name,
                    path = %path.display(),
                    waited_ms = reopened.elapsed().as_millis(),
                    "published for the reopened document"
                );
                Ok(newest(&map))
            }
            Ok(Err(_)) => Err(Failure::Dead),
            Err(_) => Ok(None),
        }
    }

    /// Why a check that listed nothing for `path` is no proof that it has
    /// no problems, if it is not: it compiled none of the file's targets
    /// (its `reports`) and listed no error in another file of the file's
    /// package.
    ///
    /// A target cargo finds fresh (unchanged since it compiled it without
    /// error) is compiled again by no check, and rust-analyzer reports no
    /// progress for it: so a file whose target a whole check compiled is
    /// remembered with its content, and a later check that listed no error
    /// in any file answers for that same content.
    fn check_missed(
        &self,
        path: &Path,
        text: &str,
        uri: &Url,
        reports: &[String],
    ) -> Option<String> {
        let hash = super::documents::content_hash(text);
        let Some((package, targets)) = check_scope::file_targets(path, &self.root) else {
            return Some(format!(
                "the file is in no Cargo package under {}, so its `cargo check` cannot reach it",
                self.root.display()
            ));
        };
        if check_scope::reported(reports, &targets) {
            let mut compiled = super::lock(&self.compiled);
            if compiled.len() >= 4096 {
                compiled.clear();
            }
            compiled.insert(path.to_owned(), hash);
            return None;
        }
        let errors_anywhere = self.shared.diagnostics.borrow().values().any(|p| {
            p.items.iter().any(|d| {
                d.source.as_deref() != Some("rust-analyzer")
                    && d.severity == Some(lsp_types::DiagnosticSeverity::ERROR)
            })
        });
        if !errors_anywhere && super::lock(&self.compiled).get(path) == Some(&hash) {
            return None;
        }
        // An error in another file of the package: the package was
        // compiled. (No error anywhere is no proof: a check whose cargo
        // failed before any compiler output, its files removed under it,
        // lists none either.)
        let failed_nearby = self.shared.diagnostics.borrow().iter().any(|(u, p)| {
            u != uri
                && u.to_file_path().is_ok_and(|f| f.starts_with(&package))
                && p.items.iter().any(|d| {
                    d.source.as_deref() != Some("rust-analyzer")
                        && d.severity == Some(lsp_types::DiagnosticSeverity::ERROR)
                })
        });
        if failed_nearby {
            return None;
        }
        Some(format!(
            "its `cargo check` ended without compiling {} (a build racing it, or an error in a \
             crate it depends on): its empty list is no proof",
            targets.join(" or ")
        ))
    }
}
