//! Who may talk to the page: the token, the `Host` and the `Origin`.
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
//! 3. The token: from the cookie, an `Authorization: Bearer` header, or
//!    the `token` query parameter of the printed URL (then kept in an
//!    `HttpOnly; SameSite=Strict; Path=/` cookie, and a page is
//!    redirected to its address without it). Compared in constant time.
//!    Missing or wrong: 401 and no data (`UI_TOKEN_REQUIRED`).
//!
//! The cookie's name carries the port: cookies are per host, not per
//! port, and two daemons (two data directories) must not evict each
//! other's.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse as _, Response};
use subtle::ConstantTimeEq as _;

/// The length of a token, in random bytes (hex-encoded: twice as many
/// characters).
pub const TOKEN_BYTES: usize = 32;

/// A fresh random token.
pub fn new_token() -> Result<String, getrandom::Error> {
    let mut bytes = [0u8; TOKEN_BYTES];
    getrandom::fill(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

/// The access rules of one server.
#[derive(Debug, Clone)]
pub struct Access {
    token: String,
    port: u16,
    /// Any IP literal is an acceptable `Host` (the server listens beyond
    /// loopback on purpose).
    exposed: bool,
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
}

impl Refusal {
    /// The stable code.
    pub fn code(self) -> &'static str {
        match self {
            Refusal::MalformedHost => "INVALID_REQUEST",
            Refusal::Host => "UI_HOST_REFUSED",
            Refusal::Origin => "UI_ORIGIN_REFUSED",
            Refusal::Token => "UI_TOKEN_REQUIRED",
        }
    }

    /// The HTTP status.
    pub fn status(self) -> StatusCode {
        match self {
            Refusal::MalformedHost => StatusCode::BAD_REQUEST,
            Refusal::Host | Refusal::Origin => StatusCode::FORBIDDEN,
            Refusal::Token => StatusCode::UNAUTHORIZED,
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
                "this page needs its token: open the URL `dsh ui` prints (it carries the token), or run `dsh ui` again"
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
        }
    }

    /// The token.
    pub fn token(&self) -> &str {
        &self.token
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

/// The query without its `token` parameter, and that token.
fn strip_token(query: Option<&str>) -> (Option<String>, Option<String>) {
    let Some(query) = query else {
        return (None, None);
    };
    let mut token = None;
    let rest: Vec<&str> = query
        .split('&')
        .filter(|pair| match pair.strip_prefix("token=") {
            Some(t) => {
                token = Some(t.to_owned());
                false
            }
            None => !pair.is_empty(),
        })
        .collect();
    let rest = (!rest.is_empty()).then(|| rest.join("&"));
    (rest, token)
}

/// A refusal as a response: a one-line body, no data.
pub fn refused(refusal: Refusal) -> Response {
    let body = format!("{}: {}\n", refusal.code(), refusal.message());
    let mut response = (refusal.status(), body).into_response();
    if refusal == Refusal::Token {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"dsh ui\""),
        );
    }
    harden(response.headers_mut());
    response
}

/// The headers every response carries: a strict content security policy
/// (scripts and styles from this server only, no framing), no caching,
/// no referrer, no sniffing.
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
        HeaderValue::from_static("no-referrer"),
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
    if cross_site && !navigation {
        return refused(Refusal::Origin);
    }
    let (rest, query_token) = strip_token(request.uri().query());
    let by_query = query_token.is_some_and(|t| access.token_matches(&t));
    if !by_query && !access.carried_token(request.headers()) {
        return refused(Refusal::Token);
    }
    let cookie = by_query.then(|| {
        format!(
            "{}={}; HttpOnly; SameSite=Strict; Path=/",
            access.cookie_name(),
            access.token()
        )
    });
    // A page opened from the printed URL moves to its address without the
    // token, so the token stays out of the history and the address bar.
    let path = request.uri().path();
    let is_page = request.method() == axum::http::Method::GET
        && !path.starts_with("/api/")
        && !path.starts_with("/ws/")
        && !path.starts_with("/assets/");
    let mut response = if by_query && is_page {
        let location = match &rest {
            Some(q) => format!("{path}?{q}"),
            None => path.to_owned(),
        };
        let mut r = StatusCode::SEE_OTHER.into_response();
        if let Ok(v) = HeaderValue::from_str(&location) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        r
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
    fn the_token_leaves_the_query() {
        assert_eq!(
            strip_token(Some("token=abc&tool=bash")),
            (Some("tool=bash".to_owned()), Some("abc".to_owned()))
        );
        assert_eq!(
            strip_token(Some("token=abc")),
            (None, Some("abc".to_owned()))
        );
        assert_eq!(strip_token(None), (None, None));
    }
}
