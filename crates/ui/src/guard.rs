//! Who may talk to the page: the sign-in, the `Host` and the `Origin`.
//!
//! Every request — page, API, live stream — passes [`check`] first:
//!
//! 1. `Host` must name this server: `127.0.0.1`, `[::1]` or `localhost`
//!    with its port (any IP literal too when `[ui] listen` exposes it).
//!    A DNS-rebinding page reaches the port under a name of its own, so
//!    its `Host` is refused (`UI_HOST_REFUSED`, 403).
//! 2. An `Origin`, when the browser sends one, must be this very origin
//!    (`http://` and the request's `Host`); `null` and every other origin
//!    are refused (`UI_ORIGIN_REFUSED`, 403), and so is a fetch the
//!    browser marks `Sec-Fetch-Site: cross-site`. Browsers always send
//!    `Origin` on WebSocket handshakes, so no other page can open the
//!    terminal stream, the only way in that writes.
//! 3. Signed in: the server's secret in its cookie (`HttpOnly;
//!    SameSite=Strict; Path=/`) or in an `Authorization: Bearer` header
//!    (scripts read it from a file only the user can read). Compared in
//!    constant time. Missing or wrong: 401 and no data
//!    (`UI_TOKEN_REQUIRED`).
//! 4. A change through the API (any method but `GET` and `HEAD` under
//!    `/api/`: the registry's changes) also carries the token of a page
//!    this server rendered, in [`PAGE_TOKEN_HEADER`]: a fresh random one
//!    per page ([`PageTokens`]), which no other site can read. Missing,
//!    unknown or expired: 403 (`UI_PAGE_TOKEN_REFUSED`). A cross-site
//!    request with any method but `GET` and `HEAD` is refused even as a
//!    navigation.
//!
//! The secret never travels in a URL. A person signs in with a one-time
//! link: `?login=CODE`, a fresh random code for each `dsh ui`, which dies
//! on first use (or after [`LOGIN_TTL`]) and is exchanged for the cookie.
//! A used or unknown code is refused (`UI_LOGIN_USED`, 401), unless the
//! request is signed in already (a reload of the link): then it is just
//! the page. A link that signs in answers with a page that moves to the
//! address without the code (a navigation of the page's own, so the
//! strict cookie goes with it even when the link came from a file or
//! another site).
//!
//! The cookie's name carries the port: cookies are per host, not per
//! port, and two daemons (two data directories) must not evict each
//! other's.
//!
//! A link the daemon sends an MCP client for one prompt (`/answer/pty-N`,
//! `/approve/ap-N`) is no sign-in: it is a [`PageLink`], kept in a table
//! of its own ([`PageLinkTable`], at most [`MAX_PAGE_LINKS`]) so that no
//! number of them pushes out the person's own codes. Its code works once,
//! at its own page only, and is exchanged for a cookie of its own
//! (`dsh_link_PORT_SCOPE`) that opens that page, posts its form and loads
//! the page's assets — nothing else: no other page, no `/api/`, no
//! terminal stream. The link and its cookie die when the [`PageLink`] is
//! dropped (the daemon holds it while its prompt waits: answered,
//! declined, timed out or the call gone, it is dropped) and when the
//! page's form was posted with it.

use std::collections::VecDeque;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{Html, IntoResponse as _, Response};
use error_code::Code;
use subtle::ConstantTimeEq as _;

use crate::conns::SlotHandle;

/// The length of a token, in random bytes (hex-encoded: twice as many
/// characters).
pub const TOKEN_BYTES: usize = 32;

/// How long a sign-in link lives unused.
pub const LOGIN_TTL: Duration = Duration::from_secs(15 * 60);

/// The most sign-in links alive at once; a newer one retires the oldest.
pub const MAX_LOGINS: usize = 32;

/// The most links to one page ([`PageLink`]) alive at once; a newer one
/// retires the oldest.
pub const MAX_PAGE_LINKS: usize = 256;

/// The header a change carries its page's token in.
pub const PAGE_TOKEN_HEADER: &str = "x-dsh-page-token";

/// The most page tokens alive at once; a newer one retires the oldest.
pub const MAX_PAGE_TOKENS: usize = 1024;

/// How long a page token lives after the page was rendered or last made
/// a change.
pub const PAGE_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// A fresh random token (the secret, or a sign-in code).
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The tokens of the pages this server rendered: a page's changes carry
/// its own (a per-page CSRF token). At most [`MAX_PAGE_TOKENS`] are kept,
/// each for [`PAGE_TOKEN_TTL`] after its last use.
#[derive(Debug, Default)]
pub struct PageTokens {
    live: Mutex<VecDeque<(String, Instant)>>,
}

impl PageTokens {
    /// A fresh token for a page being rendered.
    pub fn mint(&self) -> Result<String, getrandom::Error> {
        let token = new_token()?;
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(_, used)| used.elapsed() < PAGE_TOKEN_TTL);
        while live.len() >= MAX_PAGE_TOKENS {
            live.pop_front();
        }
        live.push_back((token.clone(), Instant::now()));
        Ok(token)
    }

    /// Whether `candidate` is a live page token (each compared in
    /// constant time); a match lives on from now.
    pub fn check(&self, candidate: &str) -> bool {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        live.retain(|(_, used)| used.elapsed() < PAGE_TOKEN_TTL);
        let found = live
            .iter()
            .position(|(t, _)| bool::from(candidate.as_bytes().ct_eq(t.as_bytes())));
        match found.and_then(|at| live.remove(at)) {
            Some((token, _)) => {
                live.push_back((token, Instant::now()));
                true
            }
            None => false,
        }
    }
}

/// One link to one page: its code (until used), the page, and the
/// session its cookie carries once the code was used.
#[derive(Debug)]
struct Scoped {
    id: u64,
    path: String,
    code: Option<String>,
    minted: Instant,
    session: Option<String>,
}

/// The links to one page each that are alive, oldest first (see the
/// module docs): a table of their own, apart from the sign-in codes.
#[derive(Debug, Default)]
pub struct PageLinkTable {
    live: Mutex<VecDeque<Scoped>>,
    next: std::sync::atomic::AtomicU64,
}

/// A link that opens the page at its path once (its code, exchanged for
/// a cookie good for that page alone); it and its cookie die when this is
/// dropped.
pub struct PageLink {
    url: String,
    id: u64,
    table: std::sync::Weak<PageLinkTable>,
}

impl PageLink {
    /// The URL to send: the page's address with its one-time code.
    pub fn url(&self) -> &str {
        &self.url
    }
}

impl std::fmt::Debug for PageLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PageLink").field("id", &self.id).finish()
    }
}

impl Drop for PageLink {
    fn drop(&mut self) {
        if let Some(table) = self.table.upgrade() {
            table.revoke(self.id);
        }
    }
}

/// The session of a link to one page that a request was let in with: the
/// page's form revokes it once posted.
#[derive(Debug, Clone, Copy)]
pub struct LinkSession(u64);

/// The name of the cookie of a link to `path` (its letters, digits and
/// dashes; anything else an underscore).
fn link_cookie_name(port: u16, path: &str) -> String {
    let scope: String = path
        .trim_start_matches('/')
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("dsh_link_{port}_{scope}")
}

impl PageLinkTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<Scoped>> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        // A code not used within LOGIN_TTL dies; a used one lives on
        // until its link is dropped.
        live.retain(|s| s.session.is_some() || s.minted.elapsed() < LOGIN_TTL);
        live
    }

    /// A fresh link to `path` under `base`; the oldest retires when
    /// [`MAX_PAGE_LINKS`] are alive.
    pub fn mint(self: &Arc<Self>, base: &str, path: &str) -> Result<PageLink, getrandom::Error> {
        let code = new_token()?;
        let id = self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut live = self.lock();
        while live.len() >= MAX_PAGE_LINKS {
            live.pop_front();
        }
        live.push_back(Scoped {
            id,
            path: path.to_owned(),
            code: Some(code.clone()),
            minted: Instant::now(),
            session: None,
        });
        Ok(PageLink {
            url: format!("{base}{path}?login={code}"),
            id,
            table: Arc::downgrade(self),
        })
    }

    /// Uses up `code` at `path`: the session for its cookie when it is a
    /// live code of a link to that very page (compared in constant time).
    fn redeem(&self, code: &str, path: &str) -> Option<String> {
        let mut live = self.lock();
        let scoped = live.iter_mut().find(|s| {
            s.code
                .as_ref()
                .is_some_and(|c| bool::from(code.as_bytes().ct_eq(c.as_bytes())))
        })?;
        if scoped.path != path {
            return None;
        }
        let session = new_token().ok()?;
        scoped.code = None;
        scoped.session = Some(session.clone());
        Some(session)
    }

    /// The live link session a request's cookies carry for `path` (or,
    /// for `/assets/`, for any page).
    fn session_for(&self, headers: &HeaderMap, port: u16, path: &str) -> Option<LinkSession> {
        let prefix = format!("dsh_link_{port}_");
        let live = self.lock();
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .filter(|(k, _)| k.starts_with(&prefix))
            .find_map(|(_, v)| {
                live.iter().find(|s| {
                    s.session
                        .as_ref()
                        .is_some_and(|t| bool::from(v.as_bytes().ct_eq(t.as_bytes())))
                        && (s.path == path || path.starts_with("/assets/"))
                })
            })
            .map(|s| LinkSession(s.id))
    }

    /// Ends link `id` and its session.
    fn revoke(&self, id: u64) {
        self.lock().retain(|s| s.id != id);
    }

    /// Ends the link whose session a request was let in with.
    pub fn revoke_session(&self, session: LinkSession) {
        self.revoke(session.0);
    }
}

/// The access rules of one server.
#[derive(Debug)]
pub struct Access {
    /// The secret: the cookie's value and the bearer token.
    token: String,
    port: u16,
    /// Any IP literal is an acceptable `Host` (the server listens beyond
    /// loopback on purpose).
    exposed: bool,
    /// The sign-in codes not used yet, oldest first.
    logins: Mutex<VecDeque<(String, Instant)>>,
    /// The tokens of the pages rendered.
    pages: Arc<PageTokens>,
    /// The links to one page each.
    links: Arc<PageLinkTable>,
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// No `Host`, or one that cannot be parsed (400).
    MalformedHost,
    /// A `Host` that does not name this server (403).
    Host,
    /// A foreign `Origin` or a cross-site fetch (403).
    Origin,
    /// No token or a wrong one (401).
    Token,
    /// A sign-in code used already, expired or unknown (401).
    LoginUsed,
    /// A change without the token of a page this server rendered (403).
    PageToken,
    /// The signed-in connections are at their cap (503).
    Busy,
}

impl Refusal {
    /// The stable code.
    pub fn code(self) -> Code {
        match self {
            Refusal::MalformedHost => Code::InvalidRequest,
            Refusal::Host => Code::UiHostRefused,
            Refusal::Origin => Code::UiOriginRefused,
            Refusal::Token => Code::UiTokenRequired,
            Refusal::LoginUsed => Code::UiLoginUsed,
            Refusal::PageToken => Code::UiPageTokenRefused,
            Refusal::Busy => Code::UiBusy,
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::MalformedHost => StatusCode::BAD_REQUEST,
            Refusal::Host | Refusal::Origin | Refusal::PageToken => StatusCode::FORBIDDEN,
            Refusal::Token | Refusal::LoginUsed => StatusCode::UNAUTHORIZED,
            Refusal::Busy => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// What to tell the person.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::MalformedHost => "the request has no usable Host header",
            Refusal::Host => {
                "this page answers only to the address `dsh ui` prints (127.0.0.1 or localhost with its port); open that URL"
            }
            Refusal::Origin => {
                "requests from other sites are refused; open the URL `dsh ui` prints in its own tab"
            }
            Refusal::Token => {
                "this page needs you to sign in: run `dsh ui` and open the link it prints (or `dsh ui --open`)"
            }
            Refusal::LoginUsed => {
                "this sign-in link was used already or has expired: each link `dsh ui` prints opens the page once. Signed in in this browser already? Open the workspaces below. If not, run `dsh ui` again for a new link"
            }
            Refusal::PageToken => {
                "a change needs the token of a page this server showed (the page is older than a day, or the daemon started again since): reload the page and try again"
            }
            Refusal::Busy => {
                "the page has as many signed-in connections open as it serves; close some tabs and reload"
            }
        }
    }
}

/// Splits `host[:port]` (`[v6]:port` for IPv6) into a lower-case host and
/// a port (80 when absent).
fn split_authority(authority: &str) -> Option<(String, u16)> {
    let authority = authority.trim();
    if authority.is_empty() || authority.contains(['/', '@', ' ']) {
        return None;
    }
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (v6, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{v6}]"), port)
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) => (h.to_owned(), Some(p)),
            None => (authority.to_owned(), None),
        }
    };
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 80,
    };
    if host.is_empty() {
        return None;
    }
    Some((host.to_ascii_lowercase(), port))
}

/// The IP address a host names literally, if it does.
fn ip_literal(host: &str) -> Option<IpAddr> {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
        .parse()
        .ok()
}

impl Access {
    /// The rules of a server listening on `addr` with `token`; `exposed`
    /// when `[ui] listen` asked for an address beyond loopback.
    pub fn new(token: String, addr: SocketAddr, exposed: bool) -> Self {
        Self {
            token,
            port: addr.port(),
            exposed,
            logins: Mutex::new(VecDeque::new()),
            pages: Arc::new(PageTokens::default()),
            links: Arc::new(PageLinkTable::default()),
        }
    }

    /// The links to one page each this server let in.
    pub fn page_links(&self) -> Arc<PageLinkTable> {
        self.links.clone()
    }

    /// The tokens of the pages this server renders.
    pub fn page_tokens(&self) -> Arc<PageTokens> {
        self.pages.clone()
    }

    /// The secret (the cookie's value, the bearer token).
    pub fn token(&self) -> &str {
        &self.token
    }

    /// A fresh sign-in code: valid once, for [`LOGIN_TTL`].
    pub fn mint_login(&self) -> Result<String, getrandom::Error> {
        let code = new_token()?;
        let mut logins = self.logins.lock().unwrap_or_else(|p| p.into_inner());
        logins.retain(|(_, minted)| minted.elapsed() < LOGIN_TTL);
        while logins.len() >= MAX_LOGINS {
            logins.pop_front();
        }
        logins.push_back((code.clone(), Instant::now()));
        Ok(code)
    }

    /// Uses up `code`: whether it was a live sign-in code (each is
    /// compared in constant time).
    pub fn redeem(&self, code: &str) -> bool {
        let mut logins = self.logins.lock().unwrap_or_else(|p| p.into_inner());
        logins.retain(|(_, minted)| minted.elapsed() < LOGIN_TTL);
        let found = logins
            .iter()
            .position(|(c, _)| bool::from(code.as_bytes().ct_eq(c.as_bytes())));
        match found {
            Some(at) => {
                logins.remove(at);
                true
            }
            None => false,
        }
    }

    /// The cookie that keeps the token.
    pub fn cookie_name(&self) -> String {
        format!("dsh_ui_{}", self.port)
    }

    /// Whether `host` (a `Host` header's value) names this server.
    pub fn host_allowed(&self, host: &str) -> Result<(), Refusal> {
        let (name, port) = split_authority(host).ok_or(Refusal::MalformedHost)?;
        if port != self.port {
            return Err(Refusal::Host);
        }
        if name == "localhost" {
            return Ok(());
        }
        match ip_literal(&name) {
            Some(ip) if ip.is_loopback() || self.exposed => Ok(()),
            Some(_) | None => Err(Refusal::Host),
        }
    }

    /// Whether `origin` is this request's own origin (`http://` + its
    /// `Host`).
    pub fn origin_allowed(&self, origin: &str, host: &str) -> bool {
        let Some(authority) = origin.strip_prefix("http://") else {
            return false;
        };
        match (split_authority(authority), split_authority(host)) {
            (Some(o), Some(h)) => o == h,
            _ => false,
        }
    }

    /// Whether `candidate` is the token (constant time in its content).
    pub fn token_matches(&self, candidate: &str) -> bool {
        bool::from(candidate.as_bytes().ct_eq(self.token.as_bytes()))
    }

    /// The token a request carries in its cookie or `Authorization`
    /// header, if it matches.
    fn carried_token(&self, headers: &HeaderMap) -> bool {
        let name = self.cookie_name();
        let from_cookie = headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .filter_map(|pair| pair.trim().split_once('='))
            .any(|(k, v)| k == name && self.token_matches(v));
        let from_header = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|t| self.token_matches(t.trim()));
        from_cookie || from_header
    }
}

/// The query without its `login` parameter, and that code.
fn strip_login(query: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(query) = query else {
        return (None, None);
    };
    let mut code = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("login=") {
            Some(t) => {
                code = Some(t.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let rest = (!rest.is_empty()).then(|| rest.join("&"));
    (rest, code)
}

/// Where a sign-in link moves on to: its path, with one leading slash
/// however many it had (a browser reads `//host/…`, and `/\\host/…`
/// alike, as another site), and its query without the code.
fn local_location(path: &str, rest: Option<&str>) -> String {
    let path = path.trim_start_matches(['/', '\\']);
    match rest {
        Some(q) => format!("/{path}?{q}"),
        None => format!("/{path}"),
    }
}

/// A refusal as a response: a one-line body, no data, and the
/// connection closed after it (a peer that was refused holds nothing).
pub fn refused(refusal: Refusal) -> Response {
    let mut response = if refusal == Refusal::LoginUsed {
        // A person followed a link: a page, with the way on when the
        // browser is signed in already (a link of the page's own carries
        // the strict cookie; a navigation from a file or another site
        // does not).
        (
            refusal.status(),
            Html(crate::pages::error(refusal.code(), refusal.message())),
        )
            .into_response()
    } else {
        let body = format!("{}: {}\n", refusal.code(), refusal.message());
        (refusal.status(), body).into_response()
    };
    if matches!(refusal, Refusal::Token | Refusal::LoginUsed) {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"dsh ui\""),
        );
    }
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    harden(response.headers_mut());
    response
}

/// The answer to a sign-in link for a page: the cookie, and a page that
/// moves on to `location` by itself (a navigation of this origin's own,
/// which carries the strict cookie wherever the link came from).
fn signed_in_page(location: &str) -> Response {
    Html(crate::pages::move_on(
        location,
        "Signed in: open the page",
        true,
    ))
    .into_response()
}

/// The headers every response carries: a strict content security policy
/// (scripts and styles from this server only, no framing), no caching,
/// no referrer beyond this page's own origin (`same-origin`: with
/// `no-referrer` a browser sends `Origin: null` on the page's own form
/// posts, which the Origin check refuses), no sniffing.
fn harden(headers: &mut HeaderMap) {
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
}

/// The middleware: Host, Origin, token, in that order; then the request,
/// hardened.
pub async fn check(State(access): State<Arc<Access>>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
        .or_else(|| request.uri().authority().map(|a| a.as_str().to_owned()));
    let Some(host) = host else {
        return refused(Refusal::MalformedHost);
    };
    if let Err(refusal) = access.host_allowed(&host) {
        tracing::warn!(host = %host.escape_debug(), "ui: refused a request for another host");
        return refused(refusal);
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let allowed = origin
            .to_str()
            .is_ok_and(|o| access.origin_allowed(o, &host));
        if !allowed {
            tracing::warn!(origin = ?origin, "ui: refused a request from another origin");
            return refused(Refusal::Origin);
        }
    }
    let cross_site = headers
        .get("sec-fetch-site")
        .is_some_and(|v| v.as_bytes() == b"cross-site");
    let navigation = headers
        .get("sec-fetch-mode")
        .is_some_and(|v| v.as_bytes() == b"navigate");
    let changes = !matches!(
        *request.method(),
        axum::http::Method::GET | axum::http::Method::HEAD
    );
    if cross_site && (changes || !navigation) {
        return refused(Refusal::Origin);
    }
    let (rest, login) = strip_login(request.uri().query());
    let carried = access.carried_token(request.headers());
    // Not signed in: a link's session lets in its own page (and what the
    // page loads), by GET, HEAD or its form's POST, nothing else.
    let path = request.uri().path().to_owned();
    let link_session = if carried {
        None
    } else {
        let fits = match *request.method() {
            axum::http::Method::GET | axum::http::Method::HEAD => true,
            axum::http::Method::POST => !path.starts_with("/assets/"),
            _ => false,
        };
        fits.then(|| {
            access
                .links
                .session_for(request.headers(), access.port, &path)
        })
        .flatten()
    };
    let by_login = match &login {
        Some(code) => {
            if access.redeem(code) {
                Some(format!(
                    "{}={}; HttpOnly; SameSite=Strict; Path=/",
                    access.cookie_name(),
                    access.token()
                ))
            } else if let Some(session) = access.links.redeem(code, &path) {
                Some(format!(
                    "{}={session}; HttpOnly; SameSite=Strict; Path=/",
                    link_cookie_name(access.port, &path)
                ))
            } else if carried || link_session.is_some() {
                None
            } else {
                tracing::warn!("ui: refused a sign-in link that was used already or expired");
                return refused(Refusal::LoginUsed);
            }
        }
        None if carried || link_session.is_some() => None,
        None => return refused(Refusal::Token),
    };
    let mut request = request;
    if let Some(session) = link_session {
        request.extensions_mut().insert(session);
    }
    // Signed in: the connection leaves the share of connections that
    // have not shown the secret.
    if let Some(SlotHandle(slot)) = request.extensions().get::<SlotHandle>()
        && !slot.sign_in()
    {
        return refused(Refusal::Busy);
    }
    if changes
        && request.uri().path().starts_with("/api/")
        && !request
            .headers()
            .get(PAGE_TOKEN_HEADER)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|t| access.pages.check(t))
    {
        tracing::warn!("ui: refused a change without the token of a page of this server");
        return refused(Refusal::PageToken);
    }
    let cookie = by_login;
    // A page opened from a sign-in link moves to its address without the
    // code, so the dead code leaves the address bar.
    let is_page = request.method() == axum::http::Method::GET
        && !path.starts_with("/api/")
        && !path.starts_with("/ws/")
        && !path.starts_with("/assets/");
    let mut response = if login.is_some() && is_page {
        let location = local_location(&path, rest.as_deref());
        if cookie.is_some() {
            signed_in_page(&location)
        } else {
            let mut r = StatusCode::SEE_OTHER.into_response();
            if let Ok(v) = HeaderValue::from_str(&location) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
    } else {
        next.run(request).await
    };
    if let Some(cookie) = cookie
        && let Ok(v) = HeaderValue::from_str(&cookie)
    {
        response.headers_mut().append(header::SET_COOKIE, v);
    }
    harden(response.headers_mut());
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn access(exposed: bool) -> Access {
        Access::new(
            "ab".repeat(TOKEN_BYTES),
            SocketAddr::from(([127, 0, 0, 1], 4321)),
            exposed,
        )
    }

    #[test]
    fn hosts_are_this_server_only() {
        let a = access(false);
        for ok in [
            "127.0.0.1:4321",
            "localhost:4321",
            "LOCALHOST:4321",
            "[::1]:4321",
            "127.0.0.2:4321",
        ] {
            assert_eq!(a.host_allowed(ok), Ok(()), "{ok}");
        }
        for (bad, why) in [
            ("evil.example:4321", Refusal::Host),
            ("127.0.0.1:4322", Refusal::Host),
            ("127.0.0.1", Refusal::Host),
            ("192.168.1.2:4321", Refusal::Host),
            ("localhost.evil.example:4321", Refusal::Host),
            ("", Refusal::MalformedHost),
            ("user@127.0.0.1:4321", Refusal::MalformedHost),
            ("127.0.0.1:notaport", Refusal::MalformedHost),
            ("[::1:4321", Refusal::MalformedHost),
        ] {
            assert_eq!(a.host_allowed(bad), Err(why), "{bad}");
        }
        // Exposed on purpose: IP literals pass, names still do not.
        let a = access(true);
        assert_eq!(a.host_allowed("192.168.1.2:4321"), Ok(()));
        assert_eq!(a.host_allowed("evil.example:4321"), Err(Refusal::Host));
    }

    #[test]
    fn an_origin_must_be_the_requests_own() {
        let a = access(false);
        assert!(a.origin_allowed("http://127.0.0.1:4321", "127.0.0.1:4321"));
        assert!(a.origin_allowed("http://localhost:4321", "localhost:4321"));
        assert!(!a.origin_allowed("http://localhost:4321", "127.0.0.1:4321"));
        assert!(!a.origin_allowed("http://127.0.0.1:3000", "127.0.0.1:4321"));
        assert!(!a.origin_allowed("https://127.0.0.1:4321", "127.0.0.1:4321"));
        assert!(!a.origin_allowed("null", "127.0.0.1:4321"));
        assert!(!a.origin_allowed("http://evil.example", "127.0.0.1:4321"));
    }

    #[test]
    fn tokens_compare_whole() {
        let a = access(false);
        assert!(a.token_matches(&"ab".repeat(TOKEN_BYTES)));
        assert!(!a.token_matches(&"ab".repeat(TOKEN_BYTES - 1)));
        assert!(!a.token_matches(&format!("{}x", "ab".repeat(TOKEN_BYTES))));
        assert!(!a.token_matches(""));
        let fresh = new_token().unwrap_or_default();
        assert_eq!(fresh.len(), TOKEN_BYTES * 2);
        assert!(fresh.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_ne!(fresh, new_token().unwrap_or_default());
    }

    #[test]
    fn the_code_leaves_the_query() {
        assert_eq!(
            strip_login(Some("login=abc&tool=bash")),
            (Some("tool=bash".to_owned()), Some("abc".to_owned()))
        );
        assert_eq!(
            strip_login(Some("login=abc")),
            (None, Some("abc".to_owned()))
        );
        assert_eq!(strip_login(None), (None, None));
    }

    #[test]
    fn a_sign_in_link_moves_on_within_this_site() {
        assert_eq!(local_location("/", None), "/");
        assert_eq!(local_location("/live", Some("a=1")), "/live?a=1");
        for path in [
            "//evil.example/x",
            "/\\evil.example/x",
            "/\\//\\evil.example/x",
        ] {
            assert_eq!(local_location(path, None), "/evil.example/x", "{path}");
        }
    }

    #[test]
    fn a_sign_in_code_works_once() {
        let a = access(false);
        let code = a.mint_login().unwrap_or_default();
        let other = a.mint_login().unwrap_or_default();
        assert_eq!(code.len(), TOKEN_BYTES * 2);
        assert_ne!(code, other);
        assert!(!a.redeem(a.token()), "the secret is not a sign-in code");
        assert!(a.redeem(&code));
        assert!(!a.redeem(&code), "a code dies on first use");
        assert!(a.redeem(&other));
        assert!(!a.redeem(""));
    }

    #[test]
    fn the_newest_codes_live() {
        let a = access(false);
        let codes: Vec<String> = (0..MAX_LOGINS + 2)
            .map(|_| a.mint_login().unwrap_or_default())
            .collect();
        assert!(!a.redeem(&codes[0]) && !a.redeem(&codes[1]));
        assert!(codes[2..].iter().all(|c| a.redeem(c)));
    }

    fn with_cookie(name: &str, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(&format!("other=1; {name}={value}")) {
            headers.insert(header::COOKIE, v);
        }
        headers
    }

    #[test]
    fn a_page_link_opens_its_page_once_and_dies_with_its_prompt() {
        let a = access(false);
        let links = a.page_links();
        let link = links.mint("http://127.0.0.1:4321", "/answer/pty-1");
        let Ok(link) = link else {
            panic!("minting failed")
        };
        let code = link.url().rsplit_once("login=").map(|(_, c)| c.to_owned());
        let code = code.unwrap_or_default();
        assert!(!a.redeem(&code), "not a sign-in code");
        assert_eq!(links.redeem(&code, "/answer/pty-2"), None, "another page");
        assert_eq!(links.redeem(&code, "/"), None);
        let session = links.redeem(&code, "/answer/pty-1").unwrap_or_default();
        assert_eq!(session.len(), TOKEN_BYTES * 2);
        assert_eq!(links.redeem(&code, "/answer/pty-1"), None, "once");
        let name = link_cookie_name(4321, "/answer/pty-1");
        assert_eq!(name, "dsh_link_4321_answer_pty-1");
        let headers = with_cookie(&name, &session);
        let allowed = |path: &str| links.session_for(&headers, 4321, path).is_some();
        assert!(allowed("/answer/pty-1") && allowed("/assets/ui.css"));
        for path in [
            "/",
            "/live",
            "/api/live",
            "/answer/pty-2",
            "/terminals/pty-1",
        ] {
            assert!(!allowed(path), "{path}");
        }
        assert!(
            links
                .session_for(&with_cookie(&name, &session), 4322, "/answer/pty-1")
                .is_none(),
            "another port's cookie"
        );
        assert!(!a.carried_token(&headers), "no sign-in");
        drop(link);
        assert!(!allowed("/answer/pty-1"), "revoked with its link");
    }

    #[test]
    fn a_posted_form_ends_its_link_and_links_retire_no_sign_in_codes() {
        let a = access(false);
        let mine = a.mint_login().unwrap_or_default();
        let links = a.page_links();
        let held: Vec<PageLink> = (0..MAX_PAGE_LINKS + 1)
            .filter_map(|i| links.mint("", &format!("/approve/ap-{i}")).ok())
            .collect();
        let last = held.last().map(|l| l.url().to_owned()).unwrap_or_default();
        let code = last.rsplit_once("login=").map(|(_, c)| c).unwrap_or("");
        let path = format!("/approve/ap-{MAX_PAGE_LINKS}");
        let session = links.redeem(code, &path).unwrap_or_default();
        let headers = with_cookie(&link_cookie_name(4321, &path), &session);
        let Some(s) = links.session_for(&headers, 4321, &path) else {
            panic!("the session lets its page in")
        };
        links.revoke_session(s);
        assert!(links.session_for(&headers, 4321, &path).is_none());
        assert_eq!(links.lock().len(), MAX_PAGE_LINKS - 1, "bounded");
        assert!(a.redeem(&mine), "the person's own code lives");
    }

    #[test]
    fn a_page_token_lives_on_while_used_and_the_newest_stay() {
        let tokens = PageTokens::default();
        let first = tokens.mint().unwrap_or_default();
        assert_eq!(first.len(), TOKEN_BYTES * 2);
        assert!(
            tokens.check(&first) && tokens.check(&first),
            "used again and again"
        );
        assert!(!tokens.check(""));
        assert!(!tokens.check(&first[1..]));
        assert!(
            !access(false).page_tokens().check(&first),
            "another server's"
        );
        // Used last, the first token outlives the ones minted before its
        // use; the oldest unused ones retire.
        let more: Vec<String> = (0..MAX_PAGE_TOKENS - 1)
            .map(|_| tokens.mint().unwrap_or_default())
            .collect();
        assert!(tokens.check(&first));
        let newest = tokens.mint().unwrap_or_default();
        assert!(!tokens.check(&more[0]), "the oldest unused one retired");
        assert!(tokens.check(&first) && tokens.check(&more[1]) && tokens.check(&newest));
    }
}
