//! The `dsh ui` page at the HTTP level: the real server on a real port,
//! reading a real sled store on disk through the daemon's source, driven
//! by raw HTTP/1.1 requests (so a test can send what a browser never
//! would: another `Host`, a foreign `Origin`, a malformed request).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

use daemon::server::page::DaemonUiSource;
use daemon_wire::records::SessionRecordOp;
use mcp_host::Host;
use mcp_host::config::{HostConfig, UiSettings};
use mcp_host::store::{HeldStore, StoreAccess};
use pretty_assertions::assert_eq;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;
use workspace::{ClientInfo, LogEntry, SessionHeader, SessionId};

fn host_config() -> HostConfig {
    HostConfig {
        preset: None,
        settings: tools_catalog::Settings::default(),
        jobs: tools_catalog::JobsConfig::default(),
        terminals: terminal_pty::TerminalConfig::default(),
        lsp: lsp_stdio::LspConfig::default(),
        log: (None, None),
        log_commands: true,
        lsp_eager: false,
        idle_exit: Duration::from_secs(600),
        detach_grace: Duration::ZERO,
        ui: UiSettings::default(),
        sandbox: tools_catalog::sandbox::SandboxPolicy::default(),
        env: tools_catalog::sandbox::EnvPolicy::default(),
        private_dirs: Vec::new(),
        repl_state: None,
    }
}

struct Page {
    _tmp: tempfile::TempDir,
    server: Option<ui::UiServer>,
    port: u16,
    token: String,
    held: Arc<HeldStore>,
    /// The temp dir: the store is in `data/`, the picker starts here.
    dir: PathBuf,
}

impl Page {
    fn cookie(&self) -> (String, String) {
        (
            "Cookie".to_owned(),
            format!("dsh_ui_{}={}", self.port, self.token),
        )
    }

    /// GET `path` with the token's cookie and the right Host.
    async fn get(&self, path: &str) -> Response {
        let (k, v) = self.cookie();
        request(self.port, &get_text(self.port, path, &[(&k, &v)])).await
    }

    /// The token of a workspaces page rendered now.
    async fn page_token(&self) -> String {
        let home = self.get("/").await;
        home.body
            .split("data-page-token=\"")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .expect("the workspaces page carries its token")
            .to_owned()
    }

    /// POSTs `body` to `path` with the cookie, the right Host and
    /// `headers`.
    async fn post(&self, path: &str, body: &str, headers: &[(&str, &str)]) -> Response {
        let (k, v) = self.cookie();
        let mut all = vec![(k.as_str(), v.as_str())];
        all.extend_from_slice(headers);
        request(self.port, &post_text(self.port, path, body, &all)).await
    }

    /// POSTs a change with the page token `token`, as the page does.
    async fn change(&self, token: &str, change: serde_json::Value) -> Response {
        let headers = [
            ("x-dsh-page-token", token),
            ("Content-Type", "application/json"),
        ];
        self.post("/api/changes", &change.to_string(), &headers)
            .await
    }

    async fn stop(mut self) {
        if let Some(server) = self.server.take() {
            server.stop().await;
        }
    }
}

/// A page over a fresh store in a temp dir, filled by `fill`.
async fn page_with(fill: impl FnOnce(&HeldStore, &Path) + Send + 'static) -> Page {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let held = tokio::task::spawn_blocking(move || {
        let held = HeldStore::open(&dir.join("data"), Duration::from_secs(5)).unwrap();
        fill(&held, &dir);
        held
    })
    .await
    .unwrap();
    let held = Arc::new(held);
    let host = Arc::new(Host::new(
        host_config(),
        StoreAccess::Held(held.clone()),
        Vec::new(),
    ));
    let dir = std::fs::canonicalize(tmp.path()).unwrap();
    let source = DaemonUiSource::new(host, held.clone(), Arc::new(AtomicUsize::new(0)))
        .with_picker(Arc::new(picker_fs::FsPicker::new(&dir)));
    let server = ui::start(
        Arc::new(source),
        &UiSettings::default(),
        CancellationToken::new(),
    )
    .await
    .unwrap();
    let url = server.login_url().unwrap();
    assert!(url.starts_with("http://127.0.0.1:"), "{url}");
    let token = server.token().to_owned();
    Page {
        _tmp: tmp,
        port: server.addr().port(),
        server: Some(server),
        token,
        held,
        dir,
    }
}

#[derive(Debug)]
struct Response {
    status: u16,
    head: String,
    body: String,
}

impl Response {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
        })
    }
}

fn get_text(port: u16, path: &str, headers: &[(&str, &str)]) -> String {
    let mut text =
        format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n");
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    text
}

fn post_text(port: u16, path: &str, body: &str, headers: &[(&str, &str)]) -> String {
    let mut text = format!(
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}

/// Sends `raw` and reads the response: the whole of it, or only the head
/// for a stream that stays open (event streams, upgrades).
async fn request(port: u16, raw: &str) -> Response {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let read = async {
        let mut chunk = [0u8; 65536];
        loop {
            let n = stream.read(&mut chunk).await.unwrap_or(0);
            if n == 0 {
                break;
            }
            buf.extend_from_slice(&chunk[..n]);
            let text = String::from_utf8_lossy(&buf);
            if let Some(end) = text.find("\r\n\r\n") {
                let head = &text[..end];
                let streaming =
                    head.contains("text/event-stream") || head.starts_with("HTTP/1.1 101");
                if streaming {
                    break;
                }
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(30), read)
        .await
        .expect("the server answered within 30 s");
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    Response {
        status,
        head: head.to_owned(),
        body: body.to_owned(),
    }
}

fn header(id: SessionId, cwd: Option<PathBuf>, n: i64) -> SessionHeader {
    SessionHeader {
        id,
        cwd,
        created_at: chrono::DateTime::from_timestamp(1_750_000_000 + n, 0).unwrap(),
        client: Some(ClientInfo {
            name: format!("client-{}", n % 3),
            version: "1".into(),
        }),
    }
}

const PAGES: [&str; 3] = ["/", "/live", "/api/live"];

/// A store with one session whose log has terminal sends, a bash call
/// and a failure; returns nothing, the page finds it.
fn one_session(held: &HeldStore, dir: &Path) {
    let ws = dir.join("project");
    std::fs::create_dir(&ws).unwrap();
    let id: SessionId = "11111111-2222-3333-4444-555555555555".parse().unwrap();
    held.record(SessionRecordOp::Begin {
        header: header(id, Some(ws), 0),
    })
    .unwrap();
    let at = |ms: i64| {
        chrono::DateTime::from_timestamp(1_750_000_100, 0).unwrap()
            + chrono::Duration::milliseconds(ms)
    };
    let entries = vec![
        LogEntry::new(
            at(0),
            "terminal_open",
            r#"{"command":["python3","-q"]}"#,
            "OK",
            110,
        ),
        LogEntry::new(
            at(200),
            "terminal_send",
            r#"{"id":"pty-1","text":"<3 bytes>"}"#,
            "OK",
            2,
        )
        .with_result(Some("input_wait"), None),
        LogEntry::new(at(400), "bash", r#"{"command":"make <all>"}"#, "OK", 1500)
            .with_result(None, Some(2)),
        LogEntry::new(
            at(2000),
            "terminal_send",
            r#"{"id":"pty-1","text":"<5 bytes>"}"#,
            "SEND_ACTIVE",
            0,
        ),
    ];
    held.record(SessionRecordOp::Log {
        session: id,
        entries,
    })
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_token_no_data_and_the_token_becomes_a_cookie() {
    let page = page_with(one_session).await;
    let port = page.port;
    let session = "/sessions/11111111-2222-3333-4444-555555555555";
    let refused = "UI_TOKEN_REQUIRED: this page needs you to sign in: run `dsh ui` and open the link it prints (or `dsh ui --open`)\n";
    let wrong = "0".repeat(64);
    for path in [
        "/",
        "/live",
        "/api/live",
        "/api/live/events",
        session,
        "/sessions/11111111-2222-3333-4444-555555555555/charts",
        "/api/sessions/11111111-2222-3333-4444-555555555555/events",
        "/ws/terminals/pty-1",
        "/jobs/bash-1",
        "/assets/ui.js",
        "/no/such/page",
    ] {
        let wrong_query = format!("{path}?token={wrong}");
        let cookie = format!("dsh_ui_{port}={wrong}");
        let bearer = format!("Bearer {wrong}");
        for (what, raw) in [
            ("no token", get_text(port, path, &[])),
            ("wrong query token", get_text(port, &wrong_query, &[])),
            ("wrong cookie", get_text(port, path, &[("Cookie", &cookie)])),
            (
                "wrong bearer",
                get_text(port, path, &[("Authorization", &bearer)]),
            ),
            (
                "another port's cookie",
                get_text(
                    port,
                    path,
                    &[("Cookie", &format!("dsh_ui_{}={}", port + 1, page.token))],
                ),
            ),
        ] {
            let r = request(port, &raw).await;
            assert_eq!((r.status, r.body.as_str()), (401, refused), "{what} {path}");
            assert_eq!(r.header("set-cookie"), None, "{what} {path}");
        }
    }
    // The secret is never taken from a URL.
    for query in ["token", "login"] {
        let r = request(
            port,
            &get_text(port, &format!("/?{query}={}", page.token), &[]),
        )
        .await;
        assert_eq!(
            (r.status, r.header("set-cookie")),
            (401, None),
            "?{query}=secret"
        );
    }
    // A sign-in link: it sets the strict cookie and moves on to the page's
    // address without the code, once.
    let server = page.server.as_ref().unwrap();
    let code = |url: String| url.split("/?login=").nth(1).unwrap().to_owned();
    let first = code(server.login_url().unwrap());
    let r = request(port, &get_text(port, &format!("/?login={first}"), &[])).await;
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains(r#"<meta http-equiv="refresh" content="0;url=/">"#),
        "{}",
        r.body
    );
    assert_eq!(
        r.header("set-cookie"),
        Some(format!(
            "dsh_ui_{port}={}; HttpOnly; SameSite=Strict; Path=/",
            page.token
        ))
    );
    let r = request(port, &get_text(port, &format!("/?login={first}"), &[])).await;
    assert_eq!((r.status, r.header("set-cookie")), (401, None));
    assert!(r.body.contains("UI_LOGIN_USED"), "{}", r.body);
    // Signed in already: a used link is just the page.
    let (ck, cv) = page.cookie();
    let r = request(
        port,
        &get_text(port, &format!("/?login={first}"), &[(&ck, &cv)]),
    )
    .await;
    assert_eq!(
        (r.status, r.header("location").as_deref()),
        (303, Some("/"))
    );
    let second = code(server.login_url().unwrap());
    let r = request(
        port,
        &get_text(port, &format!("{session}?tool=bash&login={second}"), &[]),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        r.body
            .contains(&format!("content=\"0;url={session}?tool=bash\"")),
        "{}",
        r.body
    );
    // The cookie, or a bearer header for scripts, opens everything.
    let r = page.get(session).await;
    assert_eq!(r.status, 200);
    assert!(r.body.contains("make &lt;all&gt;"), "{}", r.body);
    let bearer = format!("Bearer {}", page.token);
    let r = request(
        port,
        &get_text(port, "/api/live", &[("Authorization", &bearer)]),
    )
    .await;
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"connections":[]}"#));
    // Every answer is hardened.
    assert_eq!(r.header("x-frame-options").as_deref(), Some("DENY"));
    assert!(
        r.header("content-security-policy")
            .unwrap()
            .contains("script-src 'self'")
    );
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_link_never_moves_on_to_another_site() {
    // `//evil.example/` (and `/\evil.example/`, which browsers read the
    // same way) is a path to the server but a protocol-relative URL to a
    // browser: where a link moves on to keeps one leading slash.
    let page = page_with(|_, _| {}).await;
    let port = page.port;
    let server = page.server.as_ref().unwrap();
    let code = |url: String| url.split("/?login=").nth(1).unwrap().to_owned();
    let (ck, cv) = page.cookie();
    for path in ["//evil.example/", "/\\evil.example/", "///\\/evil.example/"] {
        let fresh = code(server.login_url().unwrap());
        let r = request(port, &get_text(port, &format!("{path}?login={fresh}"), &[])).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
        assert!(
            r.body
                .contains(r#"<meta http-equiv="refresh" content="0;url=/evil.example/">"#),
            "{path}: {}",
            r.body
        );
        assert!(
            r.body.contains(r#"<a href="/evil.example/">"#),
            "{path}: {}",
            r.body
        );
        // A used code in a signed-in browser: the 303 stays here too.
        let r = request(
            port,
            &get_text(port, &format!("{path}?tool=x&login={fresh}"), &[(&ck, &cv)]),
        )
        .await;
        assert_eq!(
            (r.status, r.header("location").as_deref()),
            (303, Some("/evil.example/?tool=x")),
            "{path}"
        );
    }
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_hosts_and_foreign_origins_are_refused() {
    let page = page_with(one_session).await;
    let port = page.port;
    let (ck, cv) = page.cookie();
    let with = |host: &str, extra: &[(&str, &str)]| {
        let mut text =
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{ck}: {cv}\r\n");
        for (k, v) in extra {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        text + "\r\n"
    };
    let own = format!("127.0.0.1:{port}");
    type Case<'a> = (String, Vec<(&'a str, String)>, u16);
    let cases: Vec<Case> = vec![
        (own.clone(), vec![], 200),
        (format!("localhost:{port}"), vec![], 200),
        (format!("[::1]:{port}"), vec![], 200),
        // DNS rebinding: a name of the attacker's that resolves here.
        (format!("evil.example:{port}"), vec![], 403),
        (format!("localhost.evil.example:{port}"), vec![], 403),
        (format!("127.0.0.1:{}", port.wrapping_add(1)), vec![], 403),
        (format!("192.168.1.20:{port}"), vec![], 403),
        (
            own.clone(),
            vec![("Origin", format!("http://127.0.0.1:{port}"))],
            200,
        ),
        (
            own.clone(),
            vec![("Origin", "http://evil.example".to_owned())],
            403,
        ),
        (
            own.clone(),
            vec![("Origin", format!("http://localhost:{port}"))],
            403,
        ),
        (
            own.clone(),
            vec![("Origin", "http://127.0.0.1:3000".to_owned())],
            403,
        ),
        (own.clone(), vec![("Origin", "null".to_owned())], 403),
        (
            own.clone(),
            vec![
                ("Sec-Fetch-Site", "cross-site".to_owned()),
                ("Sec-Fetch-Mode", "cors".to_owned()),
            ],
            403,
        ),
    ];
    for (host, extra, status) in cases {
        let extra: Vec<(&str, &str)> = extra.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let r = request(port, &with(&host, &extra)).await;
        assert_eq!(r.status, status, "Host {host} {extra:?}: {}", r.body);
        if status == 403 {
            assert!(!r.body.contains("project"), "no data: {}", r.body);
        }
    }
    // The WebSocket handshake of another site is refused before any
    // terminal is looked up.
    let upgrade = [
        ("Upgrade", "websocket"),
        ("Connection", "Upgrade"),
        ("Sec-WebSocket-Version", "13"),
        ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
        ("Origin", "http://evil.example"),
        (ck.as_str(), cv.as_str()),
    ];
    let r = request(port, &get_text(port, "/ws/terminals/pty-1", &upgrade)).await;
    assert_eq!(r.status, 403, "{}", r.body);
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_requests_get_400() {
    let page = page_with(one_session).await;
    let port = page.port;
    let (ck, cv) = page.cookie();
    for (path, code) in [
        ("/sessions/not-a-uuid", "INVALID_ARGUMENT"),
        ("/sessions/not-a-uuid/charts", "INVALID_ARGUMENT"),
        ("/terminals/pty-x", "INVALID_ARGUMENT"),
        ("/terminals/17", "INVALID_ARGUMENT"),
        ("/api/sessions/xyz/events", "INVALID_ARGUMENT"),
    ] {
        let r = page.get(path).await;
        assert_eq!(r.status, 400, "{path}: {}", r.body);
        assert!(r.body.contains(code), "{path}: {}", r.body);
    }
    let ws = page.get("/workspaces/x?page=notanumber").await;
    assert_eq!(ws.status, 400, "{}", ws.body);
    let job = page.get("/api/jobs/bash-1/events?since=-3").await;
    assert_eq!(job.status, 400, "{}", job.body);
    // Not HTTP at all, and HTTP/1.1 without a Host.
    let r = request(port, "BLAH\r\n\r\n").await;
    assert_eq!(r.status, 400, "{}", r.head);
    let r = request(
        port,
        &format!("GET / HTTP/1.1\r\nConnection: close\r\n{ck}: {cv}\r\n\r\n"),
    )
    .await;
    assert_eq!(r.status, 400, "{}", r.body);
    // GET only, but for the changes; a POST to the API needs a page's
    // token first, and then a route that takes it.
    let r = page.post("/live", "", &[]).await;
    assert_eq!(r.status, 405, "{}", r.body);
    let r = page.post("/api/live", "", &[]).await;
    assert_eq!(r.status, 403, "{}", r.body);
    assert!(r.body.starts_with("UI_PAGE_TOKEN_REFUSED: "), "{}", r.body);
    let token = page.page_token().await;
    let r = page
        .post("/api/live", "", &[("x-dsh-page-token", token.as_str())])
        .await;
    assert_eq!(r.status, 405, "{}", r.body);
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_for_an_empty_store() {
    let page = page_with(|_, _| {}).await;
    for path in PAGES {
        let r = page.get(path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    let home = page.get("/").await;
    assert!(
        home.body.contains("0 workspaces · 0 sessions"),
        "{}",
        home.body
    );
    assert!(home.body.contains("No workspaces yet."));
    let live = page.get("/live").await;
    assert!(live.body.contains("No agent is connected"));
    for (path, status, code) in [
        (
            "/sessions/11111111-2222-3333-4444-555555555555",
            404,
            "UNKNOWN_SESSION",
        ),
        (
            "/workspaces/11111111-2222-3333-4444-555555555555",
            404,
            "NO_WORKSPACE",
        ),
        ("/terminals/pty-1", 404, "NO_SESSION"),
        ("/jobs/bash-1", 404, "NO_JOB"),
        ("/no/such/page", 404, "NOT_FOUND"),
    ] {
        let r = page.get(path).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert!(r.body.contains(code), "{path}: {}", r.body);
    }
    for asset in ["/assets/ui.css", "/assets/ui.js", "/assets/icon.svg"] {
        let r = page.get(asset).await;
        assert_eq!(r.status, 200, "{asset}");
        assert!(r.body.len() > 300, "{asset}");
    }
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_shows_its_calls_pictures_and_settle_reasons() {
    let page = page_with(one_session).await;
    let session = "/sessions/11111111-2222-3333-4444-555555555555";
    let r = page.get(session).await;
    assert_eq!(r.status, 200);
    let rows: Vec<&str> = r.body.split("<tr class=\"call").skip(1).collect();
    assert_eq!(rows.len(), 4);
    // Newest first, with the argument that matters and how each ended.
    assert!(rows[0].contains("SEND_ACTIVE") && rows[0].contains("pty-1 · &lt;5 bytes&gt;"));
    assert!(rows[1].contains("make &lt;all&gt;") && rows[1].contains("OK · exit 2"));
    assert!(rows[2].contains("OK · input_wait") && rows[2].contains("2 ms"));
    assert!(rows[3].contains("python3 -q") && rows[3].contains("110 ms"));
    assert_eq!(
        r.body.matches("class=\"call\" x=").count(),
        4,
        "one bar per call"
    );
    assert_eq!(
        r.body.matches("class=\"send\"").count(),
        2,
        "one bar per send"
    );
    let bash = page.get(&format!("{session}?tool=bash")).await;
    assert_eq!(bash.body.matches("<tr class=\"call").count(), 1);
    let charts = page.get(&format!("{session}/charts")).await;
    assert_eq!(charts.status, 200);
    assert!(charts.body.contains("<svg class=\"chart timeline\""));
    let home = page.get("/").await;
    assert!(
        home.body.contains("1 workspace · 1 session"),
        "{}",
        home.body
    );
    assert!(home.body.contains("client-0"));
    assert!(
        home.body
            .contains("<span class=\"badge ended\">ended</span>")
    );
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_page_renders_for_a_store_with_1000_sessions() {
    let began = Instant::now();
    let page = page_with(|held, dir| {
        let dirs: Vec<PathBuf> = (0..3)
            .map(|i| {
                let d = dir.join(format!("ws-{i}"));
                std::fs::create_dir(&d).unwrap();
                d
            })
            .collect();
        held.with_registry(|r| {
            for n in 0..1000i64 {
                let cwd = (n >= 10).then(|| dirs[(n % 3) as usize].clone());
                r.begin_session(&header(SessionId::new_random(), cwd, n))?;
            }
            Ok(())
        })
        .unwrap();
    })
    .await;
    eprintln!("store with 1000 sessions made in {:?}", began.elapsed());
    let began = Instant::now();
    let home = page.get("/").await;
    eprintln!(
        "workspaces page: {:?}, {} bytes",
        began.elapsed(),
        home.body.len()
    );
    assert_eq!(home.status, 200);
    assert!(
        home.body.contains("3 workspaces · 1000 sessions"),
        "{}",
        &home.body[..2000]
    );
    // Fifty per workspace on the first page, then a link; and the ten of
    // no workspace.
    assert_eq!(
        home.body.matches("<tr class=\"session").count(),
        3 * 50 + 10
    );
    assert_eq!(home.body.matches("sessions →</a>").count(), 3);
    let ws_id = home
        .body
        .split("<section class=\"workspace\" id=\"ws-")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_owned();
    let ws = page.get(&format!("/workspaces/{ws_id}")).await;
    assert_eq!(ws.status, 200);
    let n = ws.body.matches("<tr class=\"session").count();
    assert!((330..=500).contains(&n), "{n} rows");
    let last = page.get(&format!("/workspaces/{ws_id}?page=9")).await;
    assert_eq!(last.status, 200);
    let a_session = ws
        .body
        .split("href=\"/sessions/")
        .nth(1)
        .and_then(|s| s.split('"').next())
        .unwrap()
        .to_owned();
    for path in [
        format!("/sessions/{a_session}"),
        format!("/sessions/{a_session}/charts"),
        "/live".to_owned(),
        "/api/live".to_owned(),
    ] {
        let r = page.get(&path).await;
        assert_eq!(r.status, 200, "{path}: {}", r.body);
    }
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_port_in_use_is_refused_with_its_code() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port();
    let tmp = tempfile::tempdir().unwrap();
    let held = Arc::new(HeldStore::open(tmp.path(), Duration::from_secs(5)).unwrap());
    let host = Arc::new(Host::new(
        host_config(),
        StoreAccess::Held(held.clone()),
        Vec::new(),
    ));
    let source = DaemonUiSource::new(host, held, Arc::new(AtomicUsize::new(0)));
    let err = ui::start(
        Arc::new(source),
        &UiSettings { port, listen: None },
        CancellationToken::new(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.code().as_str(), "UI_PORT_IN_USE");
    assert!(err.to_string().contains("[ui] port"), "{err}");
}

/// The one workspace of `one_session`.
fn the_workspace(page: &Page) -> workspace::Workspace {
    let list = page.held.with_registry(|r| Ok(r.list())).unwrap();
    assert_eq!(list.len(), 1, "{list:?}");
    list.into_iter().next().unwrap()
}

fn error_code(r: &Response) -> String {
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or_default();
    v["error"]["code"].as_str().unwrap_or("").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_needs_the_page_token_this_origin_and_json() {
    let page = page_with(one_session).await;
    let port = page.port;
    let ws = the_workspace(&page);
    let token = page.page_token().await;
    let rename =
        serde_json::json!({"op": "workspace_rename", "id": ws.id, "title": "hijacked"}).to_string();
    let json = ("Content-Type", "application/json");
    let with_token = ("x-dsh-page-token", token.as_str());
    let own = format!("http://127.0.0.1:{port}");
    let next_port = format!("http://127.0.0.1:{}", port.wrapping_add(1));
    let forged = "ab".repeat(32);
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16, &'a str);
    let cases: Vec<Case> = vec![
        ("no page token", vec![json], 403, "UI_PAGE_TOKEN_REFUSED"),
        (
            "a made-up token",
            vec![json, ("x-dsh-page-token", &forged)],
            403,
            "UI_PAGE_TOKEN_REFUSED",
        ),
        (
            "another site",
            vec![json, with_token, ("Origin", "http://evil.example")],
            403,
            "UI_ORIGIN_REFUSED",
        ),
        (
            "another port",
            vec![json, with_token, ("Origin", &next_port)],
            403,
            "UI_ORIGIN_REFUSED",
        ),
        (
            "a cross-site navigation",
            vec![
                json,
                with_token,
                ("Sec-Fetch-Site", "cross-site"),
                ("Sec-Fetch-Mode", "navigate"),
            ],
            403,
            "UI_ORIGIN_REFUSED",
        ),
        (
            "a form's body",
            vec![with_token, ("Content-Type", "text/plain")],
            415,
            "INVALID_ARGUMENT",
        ),
    ];
    for (what, headers, status, code) in cases {
        let r = page.post("/api/changes", &rename, &headers).await;
        assert_eq!(r.status, status, "{what}: {}", r.body);
        assert!(
            r.body.starts_with(&format!("{code}: ")) || error_code(&r) == code,
            "{what}: {}",
            r.body
        );
        assert_eq!(the_workspace(&page).title, "project", "{what}");
    }
    // Without the cookie: not signed in.
    let r = request(
        port,
        &post_text(port, "/api/changes", &rename, &[json, with_token]),
    )
    .await;
    assert_eq!(r.status, 401, "{}", r.body);
    // Not a change the page knows.
    for body in [
        "{".to_owned(),
        r#"{"op": "workspace_format"}"#.to_owned(),
        serde_json::json!({"op": "workspace_rename", "id": ws.id, "title": "x", "more": 1})
            .to_string(),
        serde_json::json!({"op": "workspace_create", "path": "relative/dir"}).to_string(),
        "x".repeat(ui::changes::MAX_CHANGE + 1),
    ] {
        let r = page.post("/api/changes", &body, &[json, with_token]).await;
        assert_eq!(r.status, 400, "{body:.80}: {}", r.body);
        assert_eq!(error_code(&r), "INVALID_ARGUMENT", "{}", r.body);
    }
    assert_eq!(the_workspace(&page).title, "project");
    // The page's own origin and token: the change goes through.
    let r = page
        .post(
            "/api/changes",
            &rename.replace("hijacked", "renamed"),
            &[json, with_token, ("Origin", &own)],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(the_workspace(&page).title, "renamed");
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changes_are_the_registrys_and_durable_before_the_answer() {
    let page = page_with(one_session).await;
    let token = page.page_token().await;
    let mut changes = page.held.changes();
    let seen = *changes.borrow_and_update();
    let project = the_workspace(&page);
    let other = page.dir.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(page.dir.join("file.txt"), "").unwrap();

    let r = page
        .change(
            &token,
            serde_json::json!({"op": "workspace_create", "path": other, "title": "Other <b>"}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    let answer: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(
        answer["said"],
        format!("created workspace “Other <b>” for {}", other.display())
    );
    // The answer is the registry after the change, which is on disk.
    let list = page.held.with_registry(|r| Ok(r.list())).unwrap();
    let created = &list[0];
    assert_eq!(
        (created.title.as_str(), &created.path),
        ("Other <b>", &other)
    );
    let html = answer["html"].as_str().unwrap();
    assert!(html.contains(&format!("data-workspace=\"{}\"", created.id)));
    assert!(html.contains("Other &lt;b&gt;") && !html.contains("Other <b>"));
    assert!(html.contains("2 workspaces · 1 session"), "{html}");
    assert!(
        *changes.borrow_and_update() > seen,
        "the page's stream is told"
    );

    // The registry's refusals, as they are.
    let session = "11111111-2222-3333-4444-555555555555";
    let unknown = "00000000-0000-4000-8000-000000000000";
    for (change, status, code, words) in [
        (
            serde_json::json!({"op": "workspace_create", "path": page.dir.join("file.txt")}),
            409,
            "NOT_A_DIRECTORY",
            "is not a directory; a workspace is a directory",
        ),
        (
            serde_json::json!({"op": "workspace_create", "path": page.dir.join("gone")}),
            409,
            "PATH_NOT_FOUND",
            "does not exist; give the path of an existing directory",
        ),
        (
            serde_json::json!({"op": "workspace_create", "path": "/proc/self"}),
            409,
            "PICKER_DEVICE_TREE",
            "is a device or kernel tree, not a place for a project",
        ),
        (
            serde_json::json!({"op": "workspace_rename", "id": project.id, "title": " "}),
            409,
            "INVALID_TITLE",
            "invalid title: a title cannot be empty",
        ),
        (
            serde_json::json!({"op": "workspace_move", "id": project.id, "before": unknown}),
            409,
            "WORKSPACE_ORDER_INVALID",
            "no workspace has that id",
        ),
        (
            serde_json::json!({"op": "workspace_remove", "id": unknown}),
            404,
            "UNKNOWN_WORKSPACE",
            "no workspace has id",
        ),
        (
            serde_json::json!({"op": "session_move", "id": session, "before": unknown}),
            409,
            "WORKSPACE_MOVE_INVALID",
            "is not in workspace",
        ),
        (
            serde_json::json!({"op": "session_archive", "id": unknown, "archived": true}),
            404,
            "UNKNOWN_SESSION",
            "no session has id",
        ),
    ] {
        let r = page.change(&token, change.clone()).await;
        assert_eq!(r.status, status, "{change}: {}", r.body);
        assert_eq!(error_code(&r), code, "{}", r.body);
        assert!(r.body.contains(words), "{change}: {}", r.body);
    }
    assert_eq!(page.held.with_registry(|r| Ok(r.list())).unwrap(), list);

    // Move, archive, remove: each on disk when answered.
    let r = page
        .change(
            &token,
            serde_json::json!({"op": "workspace_move", "id": created.id, "before": null}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.body
            .contains("moved workspace “Other <b>” to place 2 of 2")
    );
    let order = page.held.with_registry(|r| Ok(r.order())).unwrap();
    assert_eq!(order, vec![project.id, created.id]);
    let sid: SessionId = session.parse().unwrap();
    let archive = serde_json::json!({"op": "session_archive", "id": session, "archived": true});
    let r = page.change(&token, archive.clone()).await;
    assert!(
        r.body.contains("\"said\":\"archived session 11111111\""),
        "{}",
        r.body
    );
    assert!(page.held.with_registry(|r| Ok(r.is_archived(sid))).unwrap());
    let r = page.change(&token, archive).await;
    assert!(
        r.body.contains("was archived already; nothing changed"),
        "{}",
        r.body
    );
    let r = page
        .change(
            &token,
            serde_json::json!({"op": "workspace_remove", "id": project.id}),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(r.body.contains("Sessions in no workspace"), "{}", r.body);
    let ids: Vec<_> = page
        .held
        .with_registry(|r| Ok(r.list()))
        .unwrap()
        .iter()
        .map(|w| w.id)
        .collect();
    assert_eq!(ids, vec![created.id]);
    page.stop().await;
}

/// Reads a server-sent event stream's events, one at a time.
struct Events {
    stream: tokio::net::TcpStream,
    seen: String,
}

impl Events {
    async fn open(page: &Page, path: &str) -> Self {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", page.port))
            .await
            .unwrap();
        let (k, v) = page.cookie();
        let text = get_text(page.port, path, &[(&k, &v)]);
        stream.write_all(text.as_bytes()).await.unwrap();
        Self {
            stream,
            seen: String::new(),
        }
    }

    /// The data of the next event named `name`.
    async fn next(&mut self, name: &str) -> serde_json::Value {
        let marker = format!("event: {name}\ndata: ");
        let read = async {
            loop {
                if let Some(at) = self.seen.find(&marker) {
                    let rest = &self.seen[at + marker.len()..];
                    if let Some(end) = rest.find('\n') {
                        let data = serde_json::from_str(&rest[..end]).unwrap();
                        self.seen = rest[end..].to_owned();
                        return data;
                    }
                }
                let mut chunk = [0u8; 65536];
                let n = self.stream.read(&mut chunk).await.unwrap();
                assert!(n > 0, "the stream ended: {}", self.seen);
                self.seen.push_str(&String::from_utf8_lossy(&chunk[..n]));
            }
        };
        tokio::time::timeout(Duration::from_secs(30), read)
            .await
            .expect("an event within 30 s")
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_workspaces_stream_shows_every_change_and_a_missing_directory() {
    let page = page_with(one_session).await;
    let ws = the_workspace(&page);
    let mut events = Events::open(&page, "/api/workspaces/events").await;
    let first = events.next("workspaces").await;
    assert!(first["html"].as_str().unwrap().contains(">project</a>"));
    // A change through the CLI's path shows.
    let held = page.held.clone();
    let op = daemon_wire::registry::RegistryOp::WorkspaceRename {
        id: ws.id,
        title: "by the CLI".into(),
    };
    tokio::task::spawn_blocking(move || daemon::registry::execute_held(&held, &op))
        .await
        .unwrap()
        .unwrap();
    let next = events.next("workspaces").await;
    assert!(next["html"].as_str().unwrap().contains(">by the CLI</a>"));
    // A directory gone away shows, though nothing told the stream.
    std::fs::rename(&ws.path, page.dir.join("moved-away")).unwrap();
    let next = events.next("workspaces").await;
    assert!(
        next["html"]
            .as_str()
            .unwrap()
            .contains("badge missing\" title=\"the directory is not there now\">missing directory")
    );
    page.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_picker_lists_from_its_start_and_refuses_what_it_must() {
    let page = page_with(one_session).await;
    std::os::unix::fs::symlink("/proc", page.dir.join("kernel")).unwrap();
    let r = page.get("/api/picker").await;
    assert_eq!(r.status, 200, "{}", r.body);
    let listing: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let dir = page.dir.display().to_string();
    assert_eq!(listing["dir"], dir.as_str());
    let html = listing["html"].as_str().unwrap();
    assert!(
        html.contains(&format!(
            "<button type=\"button\" class=\"dir\" data-path=\"{dir}/project\">project</button>"
        )),
        "{html}"
    );
    assert!(
        html.contains("<li class=\"refused\" data-code=\"PICKER_DEVICE_TREE\"><span class=\"name\">kernel</span> <span class=\"dim\">→ /proc</span> <span class=\"why\">a device tree</span></li>"),
        "{html}"
    );
    for (path, status, code) in [
        ("/proc", 409, "PICKER_DEVICE_TREE"),
        ("relative", 400, "INVALID_ARGUMENT"),
        ("/no/such/dir", 404, "PICKER_NOT_FOUND"),
    ] {
        let r = page.get(&format!("/api/picker?path={path}")).await;
        assert_eq!(r.status, status, "{path}: {}", r.body);
        assert_eq!(error_code(&r), code, "{}", r.body);
    }
    // This picker browses: it asks nobody itself.
    let token = page.page_token().await;
    let r = page
        .post("/api/picker/choose", "", &[("x-dsh-page-token", &token)])
        .await;
    assert_eq!(r.status, 409, "{}", r.body);
    assert_eq!(error_code(&r), "PICKER_UNSUPPORTED");
    let home = page.get("/").await;
    assert!(home.body.contains("data-picker=\"browse\""));
    page.stop().await;
}
