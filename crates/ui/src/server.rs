//! The HTTP server: its address, its routes, and the live streams.
//!
//! Routes (every one behind [`crate::guard::check`]):
//!
//! | route | what |
//! |---|---|
//! | `GET /` | workspaces, in the registry's order, with their sessions |
//! | `GET /workspaces/{id}` | one workspace's sessions (`?page=N`) |
//! | `GET /sessions/{id}` | a session's pictures and calls (`?tool=NAME`) |
//! | `GET /sessions/{id}/charts` | the pictures alone (refreshed by the page) |
//! | `GET /live` | every connected agent, its terminals and jobs |
//! | `GET /terminals/{id}` | a terminal's live screen |
//! | `GET /answer/{id}` | the form where a person answers a terminal's secret prompt |
//! | `POST /answer/{id}` | that answer (with the form's page token) |
//! | `GET /approve/{id}` | a command an agent asks to run outside the sandbox, with Run and Refuse |
//! | `POST /approve/{id}` | the person's decision (with the form's page token) |
//! | `GET /jobs/{id}` | a job's status and output |
//! | `GET /api/live` | the live list as JSON |
//! | `GET /api/live/events` | server-sent events: the live list when it changes |
//! | `GET /api/sessions/{id}/events` | server-sent events: a session's calls as they happen |
//! | `GET /api/jobs/{id}/events` | server-sent events: a job's status and output |
//! | `GET /ws/terminals/{id}` | WebSocket: a terminal's screens; the person's keys |
//! | `GET /api/workspaces/events` | server-sent events: the workspaces when they change |
//! | `GET /api/picker` | the directory picker's listing of `?path=` (default: its start) |
//! | `POST /api/picker/choose` | a picker that asks the person itself: its choice |
//! | `POST /api/changes` | one change to the registry (see [`crate::changes`]) |
//!
//! Streams are bounded: at most [`MAX_STREAMS`] at once (then 503
//! `UI_BUSY`); each holds one frame or one chunk at a time and ends when
//! its viewer goes or the daemon stops.
//!
//! Connections are bounded too (see [`crate::conns`]): the server runs
//! its own accept loop, attributes each connection to the user at its
//! other end, caps each peer's connections that have not signed in and
//! all of them, gives a request's head [`HEADER_TIMEOUT`] to arrive (the
//! same limit ends a keep-alive connection idle that long), and backs off
//! when accepting fails (out of descriptors).

use std::convert::Infallible;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use error_code::Code;
use futures::{SinkExt as _, Stream, StreamExt as _};
use serde::Deserialize;
use terminal_seam::{PersonKeys, PersonViews, TerminalError, TerminalId};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;
use workspace::SessionId;

use crate::conns::{Conns, Limits, PeerFinder, Slot, SlotHandle};
use crate::guard::{self, Access};
use crate::pages;
use crate::screen::ScreenFeeds;
use crate::source::{CallFeed, JobTail, SourceError, UiSource};

/// The most live streams (event streams and terminal views) open at once.
pub const MAX_STREAMS: usize = 64;
/// The most a terminal view's key message may carry, in bytes.
pub const MAX_KEYS: usize = 4096;
/// A job's output sent per event, at most.
const JOB_CHUNK: usize = 64 * 1024;
/// How far behind a job view may fall before it skips to the tail.
const JOB_SKIP: u64 = 256 * 1024;
/// The tail a job page starts with, and skips to.
const JOB_TAIL: usize = 16 * 1024;
/// How long a request's head may take to arrive, from the connection's
/// start or the end of its previous answer (so also how long a
/// keep-alive connection may sit idle).
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(5);

/// Where the page listens (`[ui]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UiSettings {
    /// The port; 0 picks a free one.
    pub port: u16,
    /// The address; `None` is 127.0.0.1. Anything but loopback exposes
    /// the page to the network (still behind the token) and is logged
    /// loudly.
    pub listen: Option<IpAddr>,
}

/// Why the page could not be served.
#[derive(Debug, thiserror::Error)]
pub enum UiError {
    /// The fixed port is taken.
    #[error(
        "cannot serve the page on {addr}: the port is in use; free it, or set another `[ui] port` (0 picks a free one)"
    )]
    PortInUse {
        /// The address asked for.
        addr: SocketAddr,
    },
    /// Binding failed otherwise.
    #[error("cannot serve the page on {addr}: {reason}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// Why.
        reason: String,
    },
    /// No randomness for the token.
    #[error("cannot make the page's token: {0}")]
    Token(String),
}

impl UiError {
    /// The stable code.
    pub fn code(&self) -> Code {
        match self {
            UiError::PortInUse { .. } => Code::UiPortInUse,
            UiError::Bind { .. } => Code::UiBindFailed,
            UiError::Token(_) => Code::UiTokenFailed,
        }
    }
}

/// A running page.
pub struct UiServer {
    /// `http://HOST:PORT`, without a path.
    base: String,
    addr: SocketAddr,
    exposed: bool,
    access: Arc<Access>,
    /// The file holding the secret for scripts, once written.
    token_file: Option<std::path::PathBuf>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for UiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UiServer")
            .field("addr", &self.addr)
            .field("exposed", &self.exposed)
            .finish_non_exhaustive()
    }
}

impl UiServer {
    /// A fresh one-time sign-in link: it opens the page once (and sets
    /// the cookie that keeps the person signed in), within
    /// [`guard::LOGIN_TTL`].
    pub fn login_url(&self) -> Result<String, UiError> {
        let code = self
            .access
            .mint_login()
            .map_err(|e| UiError::Token(e.to_string()))?;
        Ok(format!("{}/?login={code}", self.base))
    }

    /// A link to the page at `path` alone (which starts with `/`: an
    /// answer or an approval page), for a client to open: its code works
    /// once, its cookie opens that page and posts its form, nothing else,
    /// and both die when the link is dropped or the form was posted. Kept
    /// apart from the person's sign-in codes, which no number of these
    /// pushes out.
    pub fn page_link(&self, path: &str) -> Result<guard::PageLink, UiError> {
        self.access
            .page_links()
            .mint(&self.base, path)
            .map_err(|e| UiError::Token(e.to_string()))
    }

    /// The secret a signed-in request carries (its cookie's value, or an
    /// `Authorization: Bearer` header). Never put it in a URL, an argument
    /// or an environment variable: other users can read those.
    pub fn token(&self) -> &str {
        self.access.token()
    }

    /// Writes the secret to `path` for scripts (`Authorization: Bearer`),
    /// readable by this user only (0600, replaced atomically); removed
    /// when the server stops.
    pub fn keep_token_at(&mut self, path: &std::path::Path) -> std::io::Result<()> {
        write_private(path, self.access.token())?;
        self.token_file = Some(path.to_path_buf());
        Ok(())
    }

    /// The file holding the secret for scripts, when
    /// [`UiServer::keep_token_at`] wrote it.
    pub fn token_file(&self) -> Option<&std::path::Path> {
        self.token_file.as_deref()
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Whether it listens beyond loopback.
    pub fn exposed(&self) -> bool {
        self.exposed
    }

    /// Stops serving: every stream ends, the listener closes, the file
    /// of the secret goes.
    pub async fn stop(self) {
        self.stop.cancel();
        // Only while it holds this server's secret: a daemon that took
        // over may have written its own there since.
        if let Some(path) = &self.token_file
            && std::fs::read_to_string(path).is_ok_and(|t| t.trim() == self.access.token())
        {
            let _ = std::fs::remove_file(path);
        }
        let _ = tokio::time::timeout(Duration::from_secs(2), self.task).await;
    }
}

/// Writes `text` to `path` as a file only this user can read: created
/// 0600 beside it, then renamed over it.
fn write_private(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".{}.tmp", std::process::id()));
    let tmp = std::path::PathBuf::from(tmp);
    let _ = std::fs::remove_file(&tmp);
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .and_then(|mut f| {
            f.write_all(text.as_bytes())?;
            f.write_all(b"\n")?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

pub(crate) struct App {
    pub(crate) source: Arc<dyn UiSource>,
    feeds: ScreenFeeds,
    streams: Arc<Semaphore>,
    pub(crate) stop: CancellationToken,
    /// The tokens the pages' changes carry.
    pub(crate) page_tokens: Arc<guard::PageTokens>,
    /// The links to one page each (a posted form ends its link).
    page_links: Arc<guard::PageLinkTable>,
}

pub(crate) type Shared = Arc<App>;

/// Starts serving the page for `source` on the address `settings` name;
/// it stops when `stop` is cancelled (or [`UiServer::stop`]).
pub async fn start(
    source: Arc<dyn UiSource>,
    settings: &UiSettings,
    stop: CancellationToken,
) -> Result<UiServer, UiError> {
    let ip = settings.listen.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let wanted = SocketAddr::new(ip, settings.port);
    let listener = tokio::net::TcpListener::bind(wanted).await.map_err(|e| {
        if e.kind() == std::io::ErrorKind::AddrInUse {
            UiError::PortInUse { addr: wanted }
        } else {
            UiError::Bind {
                addr: wanted,
                reason: e.to_string(),
            }
        }
    })?;
    let addr = listener.local_addr().map_err(|e| UiError::Bind {
        addr: wanted,
        reason: e.to_string(),
    })?;
    let exposed = !ip.is_loopback();
    let token = guard::new_token().map_err(|e| UiError::Token(e.to_string()))?;
    let url_host = match ip {
        IpAddr::V4(v4) if v4.is_unspecified() => "127.0.0.1".to_owned(),
        IpAddr::V6(v6) if v6.is_unspecified() => "[::1]".to_owned(),
        IpAddr::V4(v4) => v4.to_string(),
        IpAddr::V6(v6) => format!("[{v6}]"),
    };
    let base = format!("http://{url_host}:{}", addr.port());
    let access = Arc::new(Access::new(token, addr, exposed));
    let app = Arc::new(App {
        source,
        feeds: ScreenFeeds::default(),
        streams: Arc::new(Semaphore::new(MAX_STREAMS)),
        stop: stop.clone(),
        page_tokens: access.page_tokens(),
        page_links: access.page_links(),
    });
    let router = router(app, access.clone());
    let conns = Conns::new(Limits::default(), nix::unistd::getuid().as_raw());
    let task = tokio::spawn(accept_loop(listener, router, conns, stop.clone()));
    if exposed {
        tracing::warn!(
            address = %addr,
            "THE dsh ui PAGE LISTENS BEYOND LOOPBACK ([ui] listen): anyone who can reach {addr} and has the token can watch every agent and type into their terminals"
        );
    } else {
        tracing::info!(address = %addr, "the dsh ui page is served");
    }
    Ok(UiServer {
        base,
        addr,
        exposed,
        access,
        token_file: None,
        stop,
        task,
    })
}

/// Whether an accept error concerns only the one connection (it went
/// before it was accepted): then the next accept goes on at once.
fn connection_error(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::ConnectionAborted
            | std::io::ErrorKind::ConnectionRefused
            | std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::Interrupted
    )
}

/// Accepts connections until `stop`: each is attributed to its peer,
/// admitted under the caps of [`Conns`] (or closed at once), and served
/// on its own task. When accepting fails for want of descriptors or
/// memory, it waits before the next try as [`crate::AcceptBackoff`] says
/// (10 ms doubling up to 1 s; the log says so once per 10 s).
async fn accept_loop(
    listener: tokio::net::TcpListener,
    router: Router,
    conns: Arc<Conns>,
    stop: CancellationToken,
) {
    let mut finder = PeerFinder::default();
    let mut backoff = crate::AcceptBackoff::new("the page");
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        while tasks.try_join_next().is_some() {}
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => break,
        };
        let (stream, peer) = match accepted {
            Ok(a) => {
                backoff.succeeded(std::time::Instant::now());
                a
            }
            Err(e) if connection_error(&e) => continue,
            Err(e) => {
                backoff.failed(&e, std::time::Instant::now());
                if let Some(at) = backoff.resume_at() {
                    tokio::select! {
                        () = tokio::time::sleep_until(at.into()) => {}
                        () = stop.cancelled() => break,
                    }
                }
                continue;
            }
        };
        let local = stream.local_addr().unwrap_or(peer);
        let who = finder.find(peer, local);
        let Some(slot) = conns.admit(who) else {
            tracing::warn!(
                peer = %peer,
                "ui: closed a new connection: the page holds as many connections as it serves"
            );
            drop(stream);
            continue;
        };
        tasks.spawn(serve_connection(stream, slot, router.clone(), stop.clone()));
        // Let the new connection read a request it sent at once before
        // the next accept can push it out.
        tokio::task::yield_now().await;
    }
    // Stopping: every connection ends on its own (its streams end with
    // `stop`), within a bound.
    let _ = tokio::time::timeout(Duration::from_secs(2), async {
        while tasks.join_next().await.is_some() {}
    })
    .await;
    tasks.abort_all();
}

/// Serves one connection with HTTP/1.1 (and its WebSocket upgrade) until
/// it ends, its peer's newer connections push it out, or the server
/// stops; its slot is counted until then. An upgraded connection ends
/// here at the upgrade: its WebSocket handler holds the slot from then on
/// (see [`terminal_ws`]).
async fn serve_connection(
    stream: tokio::net::TcpStream,
    slot: Arc<Slot>,
    router: Router,
    stop: CancellationToken,
) {
    use tower::ServiceExt as _;
    let _ = stream.set_nodelay(true);
    let handle = SlotHandle(slot.clone());
    let service = hyper::service::service_fn(
        move |mut request: axum::http::Request<hyper::body::Incoming>| {
            handle.0.begin_request();
            request.extensions_mut().insert(handle.clone());
            router.clone().oneshot(request)
        },
    );
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_TIMEOUT)
        .keep_alive(true);
    let connection = builder
        .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
        .with_upgrades();
    tokio::pin!(connection);
    let evicted = slot.evicted().clone();
    tokio::select! {
        _ = connection.as_mut() => {}
        () = evicted.cancelled() => {}
        () = stop.cancelled() => {
            connection.as_mut().graceful_shutdown();
            let _ = tokio::time::timeout(LAST_WORDS, connection).await;
        }
    }
    drop(slot);
}

fn router(app: Shared, access: Arc<Access>) -> Router {
    Router::new()
        .route("/", get(workspaces_page))
        .route("/workspaces/{id}", get(workspace_page))
        .route("/sessions/{id}", get(session_page))
        .route("/sessions/{id}/charts", get(session_charts))
        .route("/live", get(live_page))
        .route("/terminals/{id}", get(terminal_page))
        .route("/answer/{id}", get(answer_page).post(answer_post))
        .route("/approve/{id}", get(approve_page).post(approve_post))
        .route("/jobs/{id}", get(job_page))
        .route("/assets/{name}", get(asset))
        .route("/api/live", get(live_json))
        .route("/api/live/events", get(live_events))
        .route("/api/sessions/{id}/events", get(session_events))
        .route("/api/jobs/{id}/events", get(job_events))
        .route("/ws/terminals/{id}", get(terminal_ws))
        .merge(crate::changes::routes())
        .fallback(not_found)
        .with_state(app)
        .layer(axum::middleware::from_fn_with_state(access, guard::check))
}

/// A failure as a page (or JSON under `/api/`).
pub(crate) struct Failure {
    status: StatusCode,
    code: Code,
    message: String,
    json: bool,
}

impl Failure {
    pub(crate) fn new(status: StatusCode, code: Code, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            json: false,
        }
    }

    pub(crate) fn json(mut self) -> Self {
        self.json = true;
        self
    }
}

impl From<SourceError> for Failure {
    fn from(e: SourceError) -> Self {
        let status = if e.is_not_found() {
            StatusCode::NOT_FOUND
        } else if e.code == Code::StoreBusy {
            StatusCode::SERVICE_UNAVAILABLE
        } else {
            StatusCode::INTERNAL_SERVER_ERROR
        };
        Self::new(status, e.code, e.message)
    }
}

impl From<TerminalError> for Failure {
    fn from(e: TerminalError) -> Self {
        let status = match &e {
            TerminalError::InvalidArgument { .. } => StatusCode::BAD_REQUEST,
            TerminalError::NoSession { .. } => StatusCode::NOT_FOUND,
            TerminalError::SessionClosing { .. } | TerminalError::SessionExited { .. } => {
                StatusCode::GONE
            }
            TerminalError::ForeignSession { .. }
            | TerminalError::SendActive { .. }
            | TerminalError::DuplicateName { .. }
            | TerminalError::UseClose { .. }
            | TerminalError::SpawnFailed { .. }
            | TerminalError::TerminalLimit { .. } => StatusCode::INTERNAL_SERVER_ERROR,
        };
        Self::new(status, crate::codes::terminal(&e), e.to_string())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        if self.json {
            let body = serde_json::json!({"error": {"code": self.code, "message": self.message}});
            (
                self.status,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        } else {
            (self.status, Html(pages::error(self.code, &self.message))).into_response()
        }
    }
}

fn parse_session(id: &str) -> Result<SessionId, Failure> {
    id.parse().map_err(|_| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidArgument,
            format!(
                "`{}` is not a session id (a UUID, as on the workspaces page)",
                id.escape_debug()
            ),
        )
    })
}

fn parse_terminal(id: &str) -> Result<TerminalId, Failure> {
    id.parse().map_err(Failure::from)
}

fn busy() -> Failure {
    Failure::new(
        StatusCode::SERVICE_UNAVAILABLE,
        Code::UiBusy,
        format!("{MAX_STREAMS} live views are open already; close some tabs and reload"),
    )
}

async fn not_found() -> Failure {
    Failure::new(
        StatusCode::NOT_FOUND,
        Code::NotFound,
        "no such page; start from the workspaces or the live page",
    )
}

/// A fresh token for a page being rendered, which its changes carry.
fn mint_page_token(app: &Shared) -> Result<String, Failure> {
    app.page_tokens.mint().map_err(|e| {
        Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::UiTokenFailed,
            format!("cannot make the page's token: {e}"),
        )
    })
}

async fn workspaces_page(State(app): State<Shared>) -> Result<Html<String>, Failure> {
    let overview = app.source.overview().await?;
    let token = mint_page_token(&app)?;
    let picker = app.source.directory_picker().capability();
    Ok(Html(pages::workspaces(
        &overview,
        chrono::Utc::now(),
        &token,
        &picker,
    )))
}

#[derive(Debug, Deserialize)]
struct PageQuery {
    page: Option<usize>,
}

async fn workspace_page(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<PageQuery>,
) -> Result<Html<String>, Failure> {
    let overview = app.source.overview().await?;
    let ws = overview
        .workspaces
        .iter()
        .find(|w| w.id == id)
        .ok_or_else(|| {
            Failure::new(
                StatusCode::NOT_FOUND,
                Code::NoWorkspace,
                format!(
                    "no workspace `{}`; the workspaces page lists them",
                    id.escape_debug()
                ),
            )
        })?;
    Ok(Html(pages::workspace(
        ws,
        q.page.unwrap_or(0),
        chrono::Utc::now(),
    )))
}

#[derive(Debug, Deserialize)]
struct ToolQuery {
    tool: Option<String>,
}

async fn session_page(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<ToolQuery>,
) -> Result<Html<String>, Failure> {
    let id = parse_session(&id)?;
    let view = app.source.session(id).await?;
    let tool = q.tool.as_deref().filter(|t| !t.is_empty());
    Ok(Html(pages::session(&view, tool, chrono::Utc::now())))
}

async fn session_charts(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let id = parse_session(&id)?;
    let view = app.source.session(id).await?;
    Ok(Html(pages::session_charts(&view.log)))
}

async fn live_page(State(app): State<Shared>) -> Html<String> {
    Html(pages::live(&app.source.live().await))
}

async fn terminal_page(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let tid = parse_terminal(&id)?;
    let view = app.source.live().await;
    let (connection, terminal) = view.terminal(&tid.to_string()).ok_or_else(|| {
        Failure::new(
            StatusCode::NOT_FOUND,
            Code::NoSession,
            format!("no terminal {tid} is open now; the live page lists the open ones"),
        )
    })?;
    Ok(Html(pages::terminal(connection, terminal)))
}

/// The page where a person answers a terminal's secret prompt: what asks
/// and a password box. What they type goes to the daemon and the terminal
/// only; the page never shows it back.
async fn answer_page(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let tid = parse_terminal(&id)?;
    let token = mint_page_token(&app)?;
    let waiting = app.source.waiting_prompt(tid);
    let screen_line = app.source.terminals().screen_copy(tid).ok().and_then(|s| {
        s.lines
            .iter()
            .rev()
            .map(|runs| runs.iter().map(|r| r.text.as_str()).collect::<String>())
            .find(|l| !l.trim().is_empty())
    });
    Ok(Html(pages::answer(
        &tid.to_string(),
        waiting.as_ref(),
        screen_line.as_deref(),
        &token,
    )))
}

/// The most bytes an answer may have.
const MAX_ANSWER: usize = 4096;

/// A person's answer, posted by the answer page's form.
async fn answer_post(
    State(app): State<Shared>,
    Path(id): Path<String>,
    link: Option<axum::Extension<guard::LinkSession>>,
    body: axum::body::Bytes,
) -> Result<Html<String>, Failure> {
    let tid = parse_terminal(&id)?;
    if body.len() > 3 * MAX_ANSWER + 16 {
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::InvalidArgument,
            format!("an answer is at most {MAX_ANSWER} bytes"),
        ));
    }
    // A change, like those under /api/: it carries the token of a page
    // this server showed (here in the form, as a form cannot set headers).
    let by_a_page = form_field(&body, "page_token").is_some_and(|t| app.page_tokens.check(&t));
    if !by_a_page {
        tracing::warn!("ui: refused an answer without the token of a page of this server");
        let refusal = guard::Refusal::PageToken;
        return Err(Failure::new(
            refusal.status(),
            refusal.code(),
            refusal.message(),
        ));
    }
    let secret = form_field(&body, "secret").ok_or_else(|| {
        Failure::new(
            StatusCode::BAD_REQUEST,
            Code::InvalidArgument,
            "the form had no answer; type it in the box and press Answer",
        )
    })?;
    let how = app.source.answer(tid, secret).await?;
    // A link opens one answer, once.
    if let Some(axum::Extension(session)) = link {
        app.page_links.revoke_session(session);
    }
    Ok(Html(pages::answered(&tid.to_string(), &how)))
}

/// The page where a person runs or refuses a command an agent asks to run
/// outside the sandbox.
async fn approve_page(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let token = mint_page_token(&app)?;
    let waiting = app.source.waiting_approval(&id);
    Ok(Html(pages::approve(&id, waiting.as_ref(), &token)))
}

/// A person's decision, posted by the approval page's buttons: only with
/// the token of a page this server showed.
async fn approve_post(
    State(app): State<Shared>,
    Path(id): Path<String>,
    link: Option<axum::Extension<guard::LinkSession>>,
    body: axum::body::Bytes,
) -> Result<Html<String>, Failure> {
    if body.len() > 1024 {
        return Err(Failure::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            Code::InvalidArgument,
            "a decision is a page token and `run` or `refuse`; this form was too large",
        ));
    }
    let by_a_page = form_field(&body, "page_token").is_some_and(|t| app.page_tokens.check(&t));
    if !by_a_page {
        tracing::warn!("ui: refused a decision without the token of a page of this server");
        let refusal = guard::Refusal::PageToken;
        return Err(Failure::new(
            refusal.status(),
            refusal.code(),
            refusal.message(),
        ));
    }
    let run = match form_field(&body, "decision").as_deref().map(String::as_str) {
        Some("run") => true,
        Some("refuse") => false,
        _ => {
            return Err(Failure::new(
                StatusCode::BAD_REQUEST,
                Code::InvalidArgument,
                "the form had no decision; press Run or Refuse",
            ));
        }
    };
    let what = app.source.decide(&id, run)?;
    // A link opens one decision, once.
    if let Some(axum::Extension(session)) = link {
        app.page_links.revoke_session(session);
    }
    Ok(Html(pages::decided(&id, run, &what)))
}

/// The value of `name` in a form-encoded body, decoded into memory that
/// is wiped when dropped.
fn form_field(body: &[u8], name: &str) -> Option<zeroize::Zeroizing<String>> {
    body.split(|b| *b == b'&').find_map(|pair| {
        let (key, value) = match pair.iter().position(|b| *b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &pair[pair.len()..]),
        };
        (key == name.as_bytes()).then(|| percent_decode(value))?
    })
}

/// `application/x-www-form-urlencoded` decoding (`+` is a space); `None`
/// for a malformed escape or text that is not UTF-8.
fn percent_decode(value: &[u8]) -> Option<zeroize::Zeroizing<String>> {
    let mut out = zeroize::Zeroizing::new(Vec::with_capacity(value.len()));
    let mut i = 0;
    while i < value.len() {
        match value[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = value.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    let text = std::str::from_utf8(&out).ok()?;
    Some(zeroize::Zeroizing::new(text.to_owned()))
}

async fn job_page(
    State(app): State<Shared>,
    Path(id): Path<String>,
) -> Result<Html<String>, Failure> {
    let tail = app.source.job(&id, None, JOB_TAIL, Duration::ZERO).await?;
    let view = app.source.live().await;
    let connection = view.job(&id).map(|(c, _)| c);
    Ok(Html(pages::job(connection, &tail)))
}

async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "ui.css" => (crate::assets::CSS, "text/css; charset=utf-8"),
        "ui.js" => (crate::assets::JS, "text/javascript; charset=utf-8"),
        "icon.svg" => (crate::assets::ICON, "image/svg+xml"),
        _ => return not_found().await.into_response(),
    };
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The live list as JSON ([`LiveView`]'s shape: `remotes` only when a
/// `dsh mcp --remote` bridge here serves a host, as in `dsh ps --json`).
async fn live_json(State(app): State<Shared>) -> Response {
    let view = app.source.live().await;
    match serde_json::to_string(&view) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => Failure::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Code::Internal,
            format!("the live list did not encode: {e}"),
        )
        .json()
        .into_response(),
    }
}

/// An event whose data is JSON (which never carries a raw newline or
/// carriage return, as SSE requires).
pub(crate) fn event(name: &'static str, data: &serde_json::Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

type EventStream = futures::stream::BoxStream<'static, Result<Event, Infallible>>;

/// An event stream that holds a stream permit and a watching guard for
/// its life.
pub(crate) fn sse(stream: impl Stream<Item = Event> + Send + 'static) -> Response {
    let boxed: EventStream = stream.map(Ok).boxed();
    Sse::new(boxed)
        .keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
        .into_response()
}

pub(crate) fn permit(app: &App, json: bool) -> Result<OwnedSemaphorePermit, Failure> {
    app.streams.clone().try_acquire_owned().map_err(|_| {
        let f = busy();
        if json { f.json() } else { f }
    })
}

async fn live_events(State(app): State<Shared>) -> Result<Response, Failure> {
    let permit = permit(&app, true)?;
    let guard = app.source.watching();
    struct LiveState {
        app: Shared,
        last: String,
        first: bool,
        calls: tokio::sync::broadcast::Receiver<crate::source::LiveCall>,
        _held: (OwnedSemaphorePermit, crate::source::WatchingGuard),
    }
    let calls = app.source.calls().live;
    let state = LiveState {
        app,
        last: String::new(),
        first: true,
        calls,
        _held: (permit, guard),
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        loop {
            if !st.first {
                let stop = st.app.stop.clone();
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = st.app.source.connections_changed() => {}
                    _ = st.calls.recv() => {}
                    () = stop.cancelled() => return None,
                }
            }
            st.first = false;
            let fragment = pages::live_fragment(&st.app.source.live().await);
            if fragment != st.last {
                st.last.clone_from(&fragment);
                let e = event("live", &serde_json::json!({ "html": fragment }));
                return Some((e, st));
            }
        }
    });
    Ok(sse(stream))
}

async fn session_events(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<ToolQuery>,
) -> Result<Response, Failure> {
    let id = parse_session(&id).map_err(Failure::json)?;
    let permit = permit(&app, true)?;
    let guard = app.source.watching();
    let CallFeed { recent, live } = app.source.calls();
    let tool = q.tool.filter(|t| !t.is_empty());
    let keep = move |c: &crate::source::LiveCall| {
        c.session == id && tool.as_deref().is_none_or(|t| c.entry.tool == t)
    };
    // The calls of the last moments first (the page dedups what it has),
    // then each call as it happens.
    let replay: Vec<Event> = recent
        .iter()
        .filter(|c| keep(c))
        .map(|c| call_event(&c.entry))
        .collect();
    let stop = app.stop.clone();
    let held = (permit, guard);
    let live = futures::stream::unfold(
        (live, stop, held, keep),
        |(mut rx, stop, held, keep)| async move {
            loop {
                tokio::select! {
                    call = rx.recv() => match call {
                        Ok(c) if keep(&c) => {
                            let e = call_event(&c.entry);
                            return Some((e, (rx, stop, held, keep)));
                        }
                        Ok(_) => {}
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            let e = event("lagged", &serde_json::json!({ "missed": n }));
                            return Some((e, (rx, stop, held, keep)));
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
                    },
                    () = stop.cancelled() => return None,
                }
            }
        },
    );
    Ok(sse(futures::stream::iter(replay).chain(live)))
}

fn call_event(entry: &workspace::LogEntry) -> Event {
    event(
        "call",
        &serde_json::json!({ "key": pages::call_key(entry), "html": pages::call_row(entry) }),
    )
}

#[derive(Debug, Deserialize)]
struct SinceQuery {
    since: Option<u64>,
}

fn job_event(tail: &JobTail, skipped: u64) -> Event {
    event(
        "job",
        &serde_json::json!({
            "facts": pages::job_facts(&tail.job),
            "status": tail.job.status,
            "output": tail.output,
            "from": tail.from,
            "next": tail.next,
            "end": tail.end,
            "dropped": tail.dropped + skipped,
        }),
    )
}

async fn job_events(
    State(app): State<Shared>,
    Path(id): Path<String>,
    Query(q): Query<SinceQuery>,
) -> Result<Response, Failure> {
    // Unknown jobs fail here, before the stream starts.
    let first = app
        .source
        .job(&id, q.since, JOB_CHUNK, Duration::ZERO)
        .await
        .map_err(|e| Failure::from(e).json())?;
    let permit = permit(&app, true)?;
    let guard = app.source.watching();
    struct JobState {
        app: Shared,
        id: String,
        cursor: u64,
        first: Option<JobTail>,
        done: bool,
        status: String,
        _held: (OwnedSemaphorePermit, crate::source::WatchingGuard),
    }
    let state = JobState {
        app,
        id,
        cursor: first.next,
        status: String::new(),
        first: Some(first),
        done: false,
        _held: (permit, guard),
    };
    let stream = futures::stream::unfold(state, |mut st| async move {
        if let Some(first) = st.first.take() {
            st.status.clone_from(&first.job.status);
            return Some((job_event(&first, 0), st));
        }
        loop {
            if st.done {
                return None;
            }
            let read = {
                let stop = st.app.stop.clone();
                let job =
                    st.app
                        .source
                        .job(&st.id, Some(st.cursor), JOB_CHUNK, Duration::from_secs(15));
                tokio::select! {
                    r = job => r,
                    () = stop.cancelled() => return None,
                }
            };
            let Ok(mut tail) = read else { return None };
            let mut skipped = 0;
            // Far behind: skip to the tail rather than stream it all.
            if tail.end.saturating_sub(tail.next) > JOB_SKIP {
                let Ok(t) = st
                    .app
                    .source
                    .job(&st.id, None, JOB_TAIL, Duration::ZERO)
                    .await
                else {
                    return None;
                };
                skipped = t.from.saturating_sub(st.cursor);
                tail = t;
            }
            let settled = !matches!(tail.job.status.as_str(), "running" | "stopping");
            let changed = tail.next != st.cursor || tail.job.status != st.status || skipped > 0;
            st.cursor = tail.next;
            st.status.clone_from(&tail.job.status);
            if settled && tail.next >= tail.end {
                st.done = true;
            }
            if changed {
                return Some((job_event(&tail, skipped), st));
            }
        }
    });
    Ok(sse(stream))
}

/// A terminal's WebSocket. The connection's slot goes with the socket:
/// hyper's connection future ends at the upgrade, while the socket lives
/// on here, so the slot is held until the view ends and the socket is
/// closed (it counts against the caps of [`Conns`] until then).
async fn terminal_ws(
    State(app): State<Shared>,
    Path(id): Path<String>,
    slot: Option<axum::Extension<SlotHandle>>,
    ws: WebSocketUpgrade,
) -> Result<Response, Failure> {
    let id = parse_terminal(&id).map_err(Failure::json)?;
    let permit = permit(&app, true)?;
    let feed = app
        .feeds
        .subscribe(&app.source.terminals(), id)
        .map_err(|e| Failure::from(e).json())?;
    let guard = app.source.watching();
    Ok(ws
        .max_message_size(64 * 1024)
        .max_frame_size(64 * 1024)
        .on_upgrade(move |socket| async move {
            serve_terminal(app, id, feed, socket).await;
            drop((permit, guard, slot));
        }))
}

/// What the page sends on a terminal view.
#[derive(Debug, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum ViewerMessage {
    /// Let my keys reach the program.
    Take,
    /// Back to read-only.
    Release,
    /// Keys, as the bytes a terminal would send.
    Keys { data: String },
}

fn json_text(value: &serde_json::Value) -> Message {
    Message::Text(value.to_string().into())
}

fn notice(code: Code, text: &str) -> Message {
    json_text(&serde_json::json!({"t": "notice", "code": code, "text": text}))
}

/// How long the last words to a viewer (the daemon stopping, the reply
/// to its close) may wait on a viewer that does not read.
const LAST_WORDS: Duration = Duration::from_secs(1);

/// Replies to a viewer's messages waiting to be sent; more are dropped (a
/// viewer that sends faster than it reads gets no more notices).
const REPLIES: usize = 16;

type Sink = futures::stream::SplitSink<WebSocket, Message>;
type Incoming = futures::stream::SplitStream<WebSocket>;

/// Serves one viewer of a terminal: its screens out, its keys in. Reading
/// and writing run side by side, so a viewer that leaves (closes, or its
/// connection ends) ends it at once, even while a frame waits on a
/// connection the viewer stopped reading.
async fn serve_terminal(
    app: Shared,
    id: TerminalId,
    feed: Arc<crate::screen::ScreenFeed>,
    socket: WebSocket,
) {
    let (mut sink, incoming) = socket.split();
    let stop = app.stop.clone();
    let terminals = app.source.terminals();
    let terminals = terminals.as_ref();
    let (replies_tx, replies) = tokio::sync::mpsc::channel(REPLIES);
    let mut last_words = None;
    tokio::select! {
        () = read_viewer(terminals, id, incoming, replies_tx) => {}
        () = write_viewer(&mut sink, terminals, id, &feed, replies) => {}
        () = stop.cancelled() => {
            last_words = Some(json_text(&serde_json::json!({"t": "end", "text": "the dsh daemon is stopping"})));
        }
    }
    // The viewer may have stopped reading: its last words are bounded.
    let _ = tokio::time::timeout(LAST_WORDS, async {
        if let Some(words) = last_words {
            sink.send(words).await?;
        }
        sink.close().await
    })
    .await;
}

/// Sends the hello, the current screen, then every newer one the viewer
/// can take, and the replies to its messages; returns when the terminal
/// ended or the connection failed.
async fn write_viewer(
    sink: &mut Sink,
    terminals: &dyn PersonViews,
    id: TerminalId,
    feed: &crate::screen::ScreenFeed,
    mut replies: tokio::sync::mpsc::Receiver<Message>,
) {
    let mut frames = feed.frames();
    let size = terminals
        .screen_copy(id)
        .map(|s| (s.rows, s.cols))
        .unwrap_or((0, 0));
    let hello = json_text(&serde_json::json!({
        "t": "hello", "id": id.to_string(), "rows": size.0, "cols": size.1, "keyboard": false,
    }));
    if sink.send(hello).await.is_err() {
        return;
    }
    frames.mark_changed();
    loop {
        tokio::select! {
            changed = frames.changed() => {
                if changed.is_err() {
                    return;
                }
                let frame = frames.borrow_and_update().clone();
                // The one serialized frame, shared: no copy per viewer.
                if sink.send(Message::Text(frame.json.clone())).await.is_err() {
                    return;
                }
                if let Some(why) = &frame.ended {
                    let _ = sink.send(json_text(&serde_json::json!({"t": "end", "text": why}))).await;
                    return;
                }
            }
            Some(reply) = replies.recv() => {
                if sink.send(reply).await.is_err() {
                    return;
                }
            }
        }
    }
}

/// Reads the viewer's messages (taking and giving back the keyboard, its
/// keys) until it closes or its connection ends.
async fn read_viewer(
    terminals: &dyn PersonViews,
    id: TerminalId,
    mut incoming: Incoming,
    replies: tokio::sync::mpsc::Sender<Message>,
) {
    let mut typing: Option<Box<dyn PersonKeys>> = None;
    loop {
        let text = match incoming.next().await {
            Some(Ok(Message::Text(text))) => text,
            Some(Ok(Message::Close(_)) | Err(_)) | None => return,
            Some(Ok(_)) => continue,
        };
        let reply = match serde_json::from_str::<ViewerMessage>(text.as_str()) {
            Err(e) => Some(notice(
                Code::InvalidArgument,
                &format!("a message the page did not understand: {e}"),
            )),
            Ok(ViewerMessage::Take) => match terminals.person_typing(id) {
                Ok(t) => {
                    typing = Some(t);
                    tracing::info!(terminal = %id, "a person took the keyboard in the web page");
                    Some(json_text(
                        &serde_json::json!({"t": "keyboard", "held": true}),
                    ))
                }
                Err(e) => Some(notice(crate::codes::terminal(&e), &e.to_string())),
            },
            Ok(ViewerMessage::Release) => {
                typing = None;
                Some(json_text(
                    &serde_json::json!({"t": "keyboard", "held": false}),
                ))
            }
            Ok(ViewerMessage::Keys { data }) => match &typing {
                None => Some(notice(
                    Code::ReadOnly,
                    "this view is read-only: take the keyboard to type",
                )),
                Some(_) if data.len() > MAX_KEYS => Some(notice(
                    Code::InvalidArgument,
                    &format!(
                        "{} bytes of keys at once is over the {MAX_KEYS}-byte limit; paste less at a time",
                        data.len()
                    ),
                )),
                Some(t) => match t.write(data.as_bytes()).await {
                    Ok(()) => None,
                    Err(TerminalError::SendActive { .. }) => Some(notice(
                        Code::SendActive,
                        &format!(
                            "an agent's send is active on {id}; your keys were not sent — try again when it settles"
                        ),
                    )),
                    Err(e) => Some(notice(crate::codes::terminal(&e), &e.to_string())),
                },
            },
        };
        if let Some(reply) = reply {
            // A viewer that does not read its replies gets no more.
            let _ = replies.try_send(reply);
        }
    }
}
