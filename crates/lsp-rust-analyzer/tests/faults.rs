//! Fault injection with a deliberately faulty stub server (a real python3
//! process): request timeouts send `$/cancelRequest`, and a server that
//! keeps crashing ends as `crashed` with the tail of its stderr.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use lsp_rust_analyzer::{ClientOptions, ServerConfig, StdioLspProvider};
use lsp_seam::*;
use pretty_assertions::assert_eq;

fn stub(log: &std::path::Path, options: ClientOptions) -> StdioLspProvider {
    let config = ServerConfig {
        name: "stub".into(),
        command: "python3".into(),
        args: vec![fixture("stub_server.py").display().to_string()],
        env: [("STUB_LOG".to_owned(), log.display().to_string())].into(),
        extensions: [(".stub".to_owned(), "stub".to_owned())].into(),
        ..ServerConfig::default()
    };
    require_binary(&config, "install python3");
    StdioLspProvider::new(config, options)
}

#[test]
fn a_timed_out_request_is_cancelled_on_the_server() {
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
