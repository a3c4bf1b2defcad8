//! Shared helpers: fixture copies, a shared runtime, binary checks.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::{LazyLock, Mutex, Once, PoisonError};
use std::time::{Duration, Instant};

use lsp_seam::{Address, LspError, PositionQuery};
use lsp_stdio::{ClientOptions, ServerConfig};

/// One runtime per test binary, so warm servers outlive single tests.
pub static RT: LazyLock<tokio::runtime::Runtime> = LazyLock::new(|| {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
});

/// The repository's `tests/fixtures/lsp/NAME`.
pub fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/lsp")
        .join(name)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

/// A fresh copy of fixture `name` in a temp dir (canonical path).
pub fn fixture_copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("lsp-fixture-")
        .tempdir()
        .unwrap();
    let root = dir.path().join(name);
    copy_dir(&fixture(name), &root);
    let root = root.canonicalize().unwrap();
    (dir, root)
}

/// Fails (never skips) when `binary` is not on PATH, saying what to install.
pub fn require_binary(config: &ServerConfig, install: &str) {
    if let Err(e) = config.resolve_command() {
        panic!("{e}\nThis test needs a real language server: {install}");
    }
}

/// The stub language server (`tests/fixtures/lsp/stub_server.py`) for
/// `.stub` files, logging what it is told to `log` when given; fails unless
/// python3 is installed.
pub fn stub_config(log: Option<&Path>) -> ServerConfig {
    let config = ServerConfig {
        name: "stub".into(),
        command: "python3".into(),
        args: vec![fixture("stub_server.py").display().to_string()],
        env: log
            .map(|log| ("STUB_LOG".to_owned(), log.display().to_string()))
            .into_iter()
            .collect(),
        extensions: [(".stub".to_owned(), "stub".to_owned())].into(),
        ..ServerConfig::default()
    };
    require_binary(&config, "install python3");
    config
}

/// Fails unless rust-analyzer is installed.
pub fn require_rust_analyzer() {
    require_binary(
        &ServerConfig::preset("rust-analyzer").unwrap(),
        "run `rustup component add rust-analyzer`",
    );
}

/// Options for tests: the defaults, with a generous readiness wait.
pub fn options() -> ClientOptions {
    ClientOptions {
        ready_timeout: Duration::from_secs(60),
        ..ClientOptions::default()
    }
}

/// A query addressing `symbol` on `line`.
pub fn at(path: &Path, line: u32, symbol: &str) -> PositionQuery {
    PositionQuery {
        workspace: lsp_seam::Workspace::Unbounded,
        progress: Default::default(),
        access: Default::default(),
        path: path.to_owned(),
        line,
        address: Address::Symbol {
            name: symbol.into(),
            occurrence: 1,
        },
    }
}

/// Retries `f` while it is `LSP_NOT_READY`, up to `limit` (only catches
/// hangs); returns every outcome seen, the last one first-class.
pub async fn until_ready<T, F, Fut>(
    limit: Duration,
    mut f: F,
) -> (Vec<LspError>, Result<T, LspError>)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LspError>>,
{
    let start = Instant::now();
    let mut not_ready = Vec::new();
    loop {
        match f().await {
            Err(e @ LspError::NotReady { .. }) if start.elapsed() < limit => {
                not_ready.push(e);
                // sleep-ok: paces the retries of a not-ready answer
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return (not_ready, other),
        }
    }
}

/// Whether any process of session `sid` is still alive.
pub fn session_alive(sid: i32) -> bool {
    !process_tree::live_session_members(sid).is_empty()
}

type Cleanup = Box<dyn FnOnce() + Send>;

static AT_EXIT: Mutex<Vec<Cleanup>> = Mutex::new(Vec::new());

/// Runs `cleanup` when the test process exits. For a fixture held in a
/// `static`, which is never dropped: its servers and temp dir would
/// otherwise outlive the run.
pub fn at_exit(cleanup: impl FnOnce() + Send + 'static) {
    static REGISTER: Once = Once::new();
    REGISTER.call_once(|| {
        // SAFETY: registers a plain function of no arguments; the C
        // library calls it once, from `exit`.
        let registered = unsafe { libc::atexit(run_at_exit) };
        assert_eq!(registered, 0, "atexit failed");
    });
    AT_EXIT
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Box::new(cleanup));
}

extern "C" fn run_at_exit() {
    let cleanups = std::mem::take(&mut *AT_EXIT.lock().unwrap_or_else(PoisonError::into_inner));
    for cleanup in cleanups {
        // A panic must not unwind into the C library.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(cleanup));
    }
}
