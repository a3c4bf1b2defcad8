//! Life-cycle behaviour against real rust-analyzer processes: cold start,
//! edits on disk, crashes and restarts, and cleanup. Each test owns its
//! servers.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use lsp_seam::*;
use lsp_stdio::{ClientOptions, StdioLspProvider};
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
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
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
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let canvas = root.join("shapes/src/canvas.rs");
    RT.block_on(p.start(&root, &lsp_seam::SandboxTag::default()))
        .unwrap();
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
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
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

/// Retries `f` while it is `LSP_NOT_READY` or `reason`, up to `limit`
/// (only catches hangs): a server reloads when it is told a manifest
/// changed, which it may not have acted on by the first query after.
async fn until_not<T, F, Fut>(
    limit: Duration,
    reason: UnavailableReason,
    mut f: F,
) -> Result<T, LspError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, LspError>>,
{
    let start = std::time::Instant::now();
    loop {
        match f().await {
            Err(e)
                if start.elapsed() < limit
                    && (matches!(e, LspError::NotReady { .. }) || e.reason() == Some(reason)) =>
            {
                // sleep-ok: paces the retries while the server reloads
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            other => return other,
        }
    }
}

/// The wrong-empty class: a project whose load failed (here `cargo
/// metadata` fails: a workspace member's manifest cannot be read) makes
/// rust-analyzer go idle (`quiescent: true`) with `health: "error"`, and it
/// stays so; answered then, a call site resolves to nothing. Idle used to
/// be taken for ready, and every definition and hover was "nothing found"
/// for as long as one asked. Now the load error, with cargo's own words,
/// is the answer, until the project is fixed.
#[test]
fn a_project_that_failed_to_load_never_answers_nothing_and_says_why() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let manifest = root.join("shapes/Cargo.toml");
    let aside = root.join("shapes/Cargo.toml.aside");
    std::fs::rename(&manifest, &aside).unwrap();
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let main = root.join("app/src/main.rs");
    let query = at(&main, 9, "total_area");

    let (_, definition) = RT.block_on(until_ready(Duration::from_secs(120), || {
        p.definition(&query)
    }));
    let err = definition.expect_err("a project that failed to load answered a definition");
    assert_eq!(err.reason(), Some(UnavailableReason::LoadFailed), "{err}");
    assert!(!err.retryable(), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("Failed to load workspaces"),
        "the server's own message: {message}"
    );
    assert!(
        message.contains("failed to load manifest for workspace member"),
        "cargo's error: {message}"
    );
    let hover = RT.block_on(p.hover(&query)).unwrap_err();
    assert_eq!(
        hover.reason(),
        Some(UnavailableReason::LoadFailed),
        "{hover}"
    );
    let servers = p.servers();
    assert_eq!(servers.len(), 1);
    assert!(
        servers[0]
            .problem
            .as_deref()
            .is_some_and(|m| m.starts_with("load failed: ")),
        "{servers:?}"
    );

    // Fixed: the server loads the project again and answers.
    std::fs::rename(&aside, &manifest).unwrap();
    let fixed = RT
        .block_on(until_not(
            Duration::from_secs(120),
            UnavailableReason::LoadFailed,
            || p.definition(&query),
        ))
        .unwrap();
    assert_eq!(
        fixed
            .items
            .iter()
            .map(|i| (
                i.path.strip_prefix(&root).unwrap().display().to_string(),
                i.line
            ))
            .collect::<Vec<_>>(),
        vec![("shapes/src/canvas.rs".to_owned(), 17)]
    );
    assert_eq!(p.servers()[0].problem, None);
}

/// A file in no crate of a loaded project (no `mod` reaches it) is parsed
/// alone: rust-analyzer is idle and healthy, has its outline, and answers
/// nothing about it. That nothing is not proof, so it is not given.
#[test]
fn a_file_in_no_loaded_crate_never_answers_nothing() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let stray = root.join("app/src/stray.rs");
    std::fs::write(
        &stray,
        "use shapes::Canvas;\n\npub fn stray_total(canvas: &Canvas) -> f64 {\n    canvas.total_area()\n}\n",
    )
    .unwrap();
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let query = at(&stray, 4, "total_area");
    let (_, definition) = RT.block_on(until_ready(Duration::from_secs(120), || {
        p.definition(&query)
    }));
    let err = definition.expect_err("a file in no crate answered a definition");
    assert_eq!(err.reason(), Some(UnavailableReason::NoProject), "{err}");
    assert!(err.to_string().contains("in none of the crates"), "{err}");

    // The same server, asked about a file in a crate, answers.
    let main = root.join("app/src/main.rs");
    let got = RT
        .block_on(p.definition(&at(&main, 9, "total_area")))
        .unwrap();
    assert_eq!(got.items.len(), 1);
    assert_eq!(got.items[0].line, 17);
}
