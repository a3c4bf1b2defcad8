//! The changes a person makes on the workspaces page, its directory
//! picker, and its live updates.
//!
//! * `POST /api/changes` — one [`Change`] as JSON (`{"op":
//!   "workspace_rename", "id": …, "title": …}`), with `Content-Type:
//!   application/json` and the page's token (the guard checks it, with
//!   the `Host`, the `Origin` and the sign-in). A new workspace's
//!   directory must be absolute and one the picker would let the person
//!   choose (no device tree, symlink loop, or directory they cannot list);
//!   the rest (missing, not a directory) the registry says. The source
//!   makes the change through the registry, as the CLI does, and it is
//!   durable before the answer: `{"said": …, "html": …}`, the workspaces as they are now,
//!   which the page shows. A refusal is `{"error": {"code", "message"}}`,
//!   the registry's own (404 for what is not there, 409 for what the
//!   registry refuses, 503 when the store is busy).
//! * `GET /api/workspaces/events` — server-sent events: the workspaces
//!   again whenever they differ from what was sent — a change from
//!   anywhere (another page, the CLI, an agent's new session), an agent
//!   connecting, a directory gone missing (looked at every
//!   [`STATUS_EVERY`]). So two pages editing at once see each other's
//!   changes. It does not count as watching: a tab left on the workspaces
//!   page does not keep the daemon from its idle exit.
//! * `GET /api/picker?path=` — the source's directory picker's listing
//!   of a directory (its start without `path`), rendered as the picker's
//!   list; `POST /api/picker/choose` asks a picker that asks the person
//!   itself.

use std::path::PathBuf;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse as _, Response};
use axum::routing::{get, post};
use error_code::Code;
use picker_seam::PickerError;
use serde::Deserialize;
use tokio::sync::OwnedSemaphorePermit;

use crate::pages;
use crate::server::{Failure, Shared, event, permit, sse};
use crate::source::{Change, Overview, SourceError};

/// How often the workspaces stream looks again when nothing told it of a
/// change (a directory that went missing tells nobody).
pub const STATUS_EVERY: Duration = Duration::from_secs(3);

/// The largest change a page sends, in bytes.
pub const MAX_CHANGE: usize = 64 * 1024;

/// The routes of this module.
pub(crate) fn routes() -> Router<Shared> {
    Router::new()
        .route("/api/changes", post(change))
        .route("/api/workspaces/events", get(workspaces_events))
        .route("/api/picker", get(picker_list))
        .route("/api/picker/choose", post(picker_choose))
}

/// Whether `code` is one of the registry's refusals of a change: what the
/// person asked cannot be done as asked (409), unlike a store that failed
/// (500).
fn refusal(code: Code) -> bool {
    matches!(
        code,
        Code::PathNotFound
            | Code::PathUnresolvable
            | Code::NotADirectory
            | Code::InvalidTitle
            | Code::WorkspaceOrderInvalid
            | Code::WorkspaceMoveInvalid
            | Code::SessionCwdMissing
            | Code::SessionCwdUnresolvable
            | Code::SessionCwdNotDirectory
            | Code::SessionCwdMismatch
            | Code::InvalidArgument
    )
}

fn refused_change(e: SourceError) -> Failure {
    let status = if e.is_not_found() {
        StatusCode::NOT_FOUND
    } else if refusal(e.code) {
        StatusCode::CONFLICT
    } else if e.code == Code::StoreBusy {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::INTERNAL_SERVER_ERROR
    };
    Failure::new(status, e.code, e.message).json()
}

fn invalid(message: impl Into<String>) -> Failure {
    Failure::new(StatusCode::BAD_REQUEST, Code::InvalidArgument, message).json()
}

fn json_response(value: &serde_json::Value) -> Response {
    (
        [(header::CONTENT_TYPE, "application/json")],
        value.to_string(),
    )
        .into_response()
}

/// The workspaces as the page shows them, now.
async fn fragment(app: &Shared) -> Result<String, Failure> {
    let overview = app.source.overview().await.map_err(refused_change)?;
    Ok(pages::workspaces_fragment(&overview, chrono::Utc::now()))
}

async fn change(
    State(app): State<Shared>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Failure> {
    let json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().starts_with("application/json"));
    if !json {
        return Err(Failure::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Code::InvalidArgument,
            "a change is JSON: send it with Content-Type: application/json",
        )
        .json());
    }
    if body.len() > MAX_CHANGE {
        return Err(invalid(format!(
            "a change is at most {MAX_CHANGE} bytes, got {}",
            body.len()
        )));
    }
    let change: Change = serde_json::from_slice(&body)
        .map_err(|e| invalid(format!("not a change the page knows: {e}")))?;
    if let Change::WorkspaceCreate { path, .. } = &change {
        choosable(&app, path).await?;
    }
    let changed = app.source.change(change).await.map_err(refused_change)?;
    // Durable now: the page shows the registry as it is after the change.
    let html = fragment(&app).await?;
    Ok(json_response(
        &serde_json::json!({ "said": changed.said, "html": html }),
    ))
}

/// Whether the person may choose `path` for a new workspace on the page:
/// an absolute path, and for a browsing picker one it would not refuse (a
/// device tree, a symlink loop, a directory the person cannot list). What
/// else is wrong with it (missing, not a directory) the registry says, in
/// its own words.
async fn choosable(app: &Shared, path: &std::path::Path) -> Result<(), Failure> {
    if !path.is_absolute() {
        return Err(invalid(format!(
            "{} is not an absolute path: give the whole path of the directory, from /",
            path.display()
        )));
    }
    let picker = app.source.directory_picker();
    if !matches!(picker.capability(), picker_seam::Capability::Browse { .. }) {
        return Ok(());
    }
    let dir = path.to_path_buf();
    match tokio::task::spawn_blocking(move || picker.list(&dir)).await {
        Ok(Err(
            e @ (PickerError::DeviceTree { .. }
            | PickerError::SymlinkLoop { .. }
            | PickerError::Unreadable { .. }),
        )) => Err(picker_failure(&e)),
        Ok(_) | Err(_) => Ok(()),
    }
}

async fn workspaces_events(State(app): State<Shared>) -> Result<Response, Failure> {
    let permit = permit(&app, true)?;
    struct Watch {
        app: Shared,
        changes: tokio::sync::watch::Receiver<u64>,
        last: Option<Overview>,
        first: bool,
        _permit: OwnedSemaphorePermit,
    }
    let changes = app.source.registry_changes();
    let state = Watch {
        app,
        changes,
        last: None,
        first: true,
        _permit: permit,
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if !st.first {
                let stop = st.app.stop.clone();
                tokio::select! {
                    changed = st.changes.changed() => {
                        if changed.is_err() {
                            return None;
                        }
                    }
                    () = st.app.source.connections_changed() => {}
                    () = tokio::time::sleep(STATUS_EVERY) => {}
                    () = stop.cancelled() => return None,
                }
            }
            st.first = false;
            st.changes.borrow_and_update();
            // A store that fails for a moment is asked again next time.
            let Ok(overview) = st.app.source.overview().await else {
                continue;
            };
            if st.last.as_ref() != Some(&overview) {
                let html = pages::workspaces_fragment(&overview, chrono::Utc::now());
                st.last = Some(overview);
                let e = event("workspaces", &serde_json::json!({ "html": html }));
                return Some((e, st));
            }
        }
    });
    Ok(sse(stream))
}

fn picker_failure(e: &PickerError) -> Failure {
    let status = match e {
        PickerError::NotAbsolute { .. } => StatusCode::BAD_REQUEST,
        PickerError::NotFound { .. } => StatusCode::NOT_FOUND,
        PickerError::NotADirectory { .. }
        | PickerError::SymlinkLoop { .. }
        | PickerError::DeviceTree { .. }
        | PickerError::Unsupported { .. } => StatusCode::CONFLICT,
        PickerError::Unreadable { .. } => StatusCode::FORBIDDEN,
        PickerError::Io { .. } => StatusCode::INTERNAL_SERVER_ERROR,
    };
    Failure::new(status, crate::codes::picker(e), e.to_string()).json()
}

#[derive(Debug, Deserialize)]
struct PickerQuery {
    path: Option<String>,
}

/// A path as the page can send it back: only one that is UTF-8.
fn page_path(path: &std::path::Path) -> Option<&str> {
    path.to_str()
}

async fn picker_list(
    State(app): State<Shared>,
    Query(q): Query<PickerQuery>,
) -> Result<Response, Failure> {
    let picker = app.source.directory_picker();
    let dir = match (q.path.filter(|p| !p.trim().is_empty()), picker.capability()) {
        (Some(p), _) => PathBuf::from(p.trim()),
        (None, picker_seam::Capability::Browse { start }) => start,
        // Its `list` says it does not list.
        (None, picker_seam::Capability::Dialog) => PathBuf::from("/"),
    };
    let listing = tokio::task::spawn_blocking(move || picker.list(&dir))
        .await
        .map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                Code::Internal,
                format!("the picker's task failed: {e}"),
            )
            .json()
        })?
        .map_err(|e| picker_failure(&e))?;
    Ok(json_response(&serde_json::json!({
        "dir": page_path(&listing.dir),
        "shown": listing.dir.display().to_string(),
        "parent": listing.parent.as_deref().and_then(page_path),
        "html": pages::picker_entries(&listing),
    })))
}

async fn picker_choose(State(app): State<Shared>) -> Result<Response, Failure> {
    let picker = app.source.directory_picker();
    let chosen = tokio::task::spawn_blocking(move || picker.choose())
        .await
        .map_err(|e| {
            Failure::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                Code::Internal,
                format!("the picker's task failed: {e}"),
            )
            .json()
        })?
        .map_err(|e| picker_failure(&e))?;
    let path = match &chosen {
        Some(p) => Some(page_path(p).ok_or_else(|| {
            invalid(format!(
                "{} is not UTF-8, which the page cannot send back; create it with `dsh workspace create`",
                p.display()
            ))
        })?),
        None => None,
    };
    Ok(json_response(&serde_json::json!({ "path": path })))
}
