//! Life-cycle behaviour against real rust-analyzer processes: cold start,
//! edits on disk, crashes and restarts, and cleanup. Each test owns its
//! servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use lsp_rust_analyzer::{ClientOptions, StdioLspProvider};
use lsp_seam::*;
use pretty_assertions::assert_eq;

/// Every process of every server session of `p`.
fn sessions(p: &StdioLspProvider) -> Vec<i32> {
    p.servers().iter().map(|s| s.pid).collect()
}

fn reference_lines(r: &ReferencesResult, root: &Path) -> Vec<(String, Vec<u32>)> {
    r.files
        .iter()
        .map(|f| {
            (
                f.path.strip_prefix(root).unwrap().display().to_string(),
                f.refs.iter().map(|x| x.line).collect(),
            )
        })
        .collect()
}

#[test]
fn cold_start_answers_not_ready_or_correct_never_empty_and_drop_ends_the_server() {
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(ClientOptions {
        ready_timeout: Duration::from_millis(300),
        ..options()
    })
    .unwrap();
    let canvas = root.join("shapes/src/canvas.rs");
    let query = at(&canvas, 17, "total_area");
    let (not_ready, outcome) = RT.block_on(until_ready(Duration::from_secs(120), || {
        p.references(&query)
    }));
    for e in &not_ready {
        assert!(
            matches!(e, LspError::NotReady { .. }) && e.retryable(),
            "{e:?}"
        );
    }
    let got = outcome.unwrap();
    assert_eq!(
        reference_lines(&got, &root),
        vec![
            ("app/src/main.rs".to_owned(), vec![9]),
            ("app/src/report.rs".to_owned(), vec![5]),
            ("shapes/src/canvas.rs".to_owned(), vec![17]),
        ]
    );
    assert_eq!(got.total, 3);

    let sids = sessions(&p);
    assert_eq!(sids.len(), 1);
    assert!(session_alive(sids[0]));
    drop(p);
    assert!(
        !session_alive(sids[0]),
        "server session {} survived drop",
        sids[0]
    );
}

#[test]
fn an_edit_on_disk_is_seen_by_the_next_references_and_shutdown_is_clean() {
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let canvas = root.join("shapes/src/canvas.rs");
    RT.block_on(p.start(&root)).unwrap();
    RT.block_on(p.wait_ready(&canvas, Duration::from_secs(120)))
        .unwrap();
    let before = RT
        .block_on(p.references(&at(&canvas, 17, "total_area")))
        .unwrap();
    assert_eq!(before.total, 3);

    // A new call site in a file the server has never been sent.
    let report = root.join("app/src/report.rs");
    let mut text = std::fs::read_to_string(&report).unwrap();
    text.push_str("\n/// Twice the total.\npub fn twice(canvas: &Canvas) -> f64 {\n    canvas.total_area() * 2.0\n}\n");
    std::fs::write(&report, text).unwrap();

    let after = RT
        .block_on(p.references(&at(&canvas, 17, "total_area")))
        .unwrap();
    assert_eq!(
        reference_lines(&after, &root),
        vec![
            ("app/src/main.rs".to_owned(), vec![9]),
            ("app/src/report.rs".to_owned(), vec![5, 10]),
            ("shapes/src/canvas.rs".to_owned(), vec![17]),
        ]
    );
    assert_eq!(after.total, 4);

    let sids = sessions(&p);
    assert_eq!(sids.len(), 1);
    RT.block_on(p.shutdown());
    assert_eq!(p.servers(), vec![]);
    assert!(
        !session_alive(sids[0]),
        "server session {} survived shutdown",
        sids[0]
    );
}

#[test]
fn a_killed_server_is_restarted_until_the_budget_is_spent() {
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(ClientOptions {
        restart_budget: 1,
        ..options()
    })
    .unwrap();
    let main = root.join("app/src/main.rs");
    let query = at(&main, 9, "total_area");
    let expected = RT.block_on(p.definition(&query)).unwrap();
    assert_eq!((expected.items.len(), expected.items[0].line), (1, 17));

    let kill = |p: &StdioLspProvider| {
        let pid = sessions(p)[0];
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        )
        .unwrap();
        pid
    };

    let first = kill(&p);
    let again = RT.block_on(p.definition(&query)).unwrap();
    assert_eq!(again, expected);
    let restarted = sessions(&p);
    assert_eq!(restarted.len(), 1);
    assert_ne!(restarted[0], first);

    kill(&p);
    let err = RT.block_on(p.definition(&query)).unwrap_err();
    assert_eq!(err.reason(), Some(UnavailableReason::Crashed), "{err}");
    assert!(
        err.to_string()
            .contains("was restarted 1 time(s), its budget"),
        "{err}"
    );
    assert!(!session_alive(first));
}
