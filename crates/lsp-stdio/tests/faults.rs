//! Fault injection with a deliberately faulty stub server (a real python3
//! process): request timeouts send `$/cancelRequest`, and a server that
//! keeps crashing ends as `crashed` with the tail of its stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use lsp_seam::*;
use lsp_stdio::{ClientOptions, StdioLspProvider};
use pretty_assertions::assert_eq;

fn stub(log: &std::path::Path, options: ClientOptions) -> StdioLspProvider {
    StdioLspProvider::new(stub_config(Some(log)), options)
}

#[test]
fn a_timed_out_request_is_cancelled_on_the_server() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let file = dir.path().join("a.stub");
    std::fs::write(&file, "hello world\n").unwrap();
    let p = stub(
        &log,
        ClientOptions {
            request_timeout: Duration::from_millis(200),
            ..options()
        },
    );
    for _ in 0..2 {
        let err = RT.block_on(p.hover(&at(&file, 1, "world"))).unwrap_err();
        assert_eq!(
            err,
            LspError::Timeout {
                op: Op::Hover,
                timeout_ms: 200
            }
        );
        assert!(err.retryable());
    }
    // initialize was request 0; the two hovers were 1 and 2.
    let seen = test_support::wait_for("the stub logs two cancellations", || {
        let seen = std::fs::read_to_string(&log).unwrap_or_default();
        (seen.lines().count() >= 2).then_some(seen)
    });
    assert_eq!(seen, "cancel 1\ncancel 2\n");
    let pid = p.servers()[0].pid;
    drop(p);
    assert!(!session_alive(pid));
}

#[test]
fn a_server_that_keeps_crashing_is_crashed_with_its_stderr() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let file = dir.path().join("a.stub");
    std::fs::write(&file, "hello world\n").unwrap();
    let p = stub(
        &log,
        ClientOptions {
            restart_budget: 2,
            ..options()
        },
    );
    let err = RT
        .block_on(p.definition(&at(&file, 1, "hello")))
        .unwrap_err();
    assert_eq!(err.reason(), Some(UnavailableReason::Crashed), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("restarted 2 time(s), its budget")
            && message.contains("stub: fatal error: definition is broken"),
        "{message}"
    );
    // Once the budget is spent, the answer stays `crashed` without a spawn.
    let again = RT.block_on(p.hover(&at(&file, 1, "hello"))).unwrap_err();
    assert_eq!(again.reason(), Some(UnavailableReason::Crashed));
    assert_eq!(p.servers(), vec![]);
}

#[test]
fn a_server_gets_a_private_temp_dir_that_is_removed_when_it_stops() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let file = dir.path().join("a.stub");
    std::fs::write(&file, "hello world\n").unwrap();
    let p = stub(&log, options());
    // Any answer or error will do: it proves the server started.
    let _ = RT.block_on(p.hover(&at(&file, 1, "world")));
    let pid = p.servers()[0].pid;
    let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    let temp = environ
        .split(|b| *b == 0)
        .find_map(|v| v.strip_prefix(b"TMPDIR="))
        .map(|v| std::path::PathBuf::from(String::from_utf8_lossy(v).into_owned()))
        .expect("the server has a TMPDIR");
    assert_ne!(temp, std::env::temp_dir());
    assert!(temp.starts_with(std::env::temp_dir()), "{temp:?}");
    use std::os::unix::fs::PermissionsExt;
    let meta = std::fs::metadata(&temp).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    // What the server leaves there goes with it.
    std::fs::write(temp.join("left-by-the-server"), "x").unwrap();
    drop(p);
    assert!(!session_alive(pid));
    assert!(!temp.exists(), "{temp:?} is left");
}
