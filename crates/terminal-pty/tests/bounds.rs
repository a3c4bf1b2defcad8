//! What a client controls is bounded before anything is allocated,
//! compiled or spawned: the screen size, `until` patterns, the command,
//! the environment and the name of a terminal.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::{
    MAX_CELLS, MAX_COLS, MAX_ROWS, MAX_UNTIL_BYTES, OpenRequest, SendRequest, SettleReason,
    TerminalError, TerminalService,
};

/// The field an `INVALID_ARGUMENT` names, with its reason.
fn invalid(result: Result<impl std::fmt::Debug, TerminalError>) -> (&'static str, String) {
    match result {
        Err(TerminalError::InvalidArgument { field, reason }) => (field, reason),
        other => panic!("expected INVALID_ARGUMENT, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_screen_size_is_capped_in_rows_columns_and_cells() {
    let f = Fixture::new();
    let open = |rows: u16, cols: u16| {
        f.service.open(
            &f.owner,
            OpenRequest {
                rows,
                cols,
                ..OpenRequest::default()
            },
        )
    };
    assert_eq!(
        invalid(open(MAX_ROWS + 1, 80).await),
        ("rows", "must be between 2 and 500".to_owned())
    );
    assert_eq!(
        invalid(open(40, MAX_COLS + 1).await),
        ("cols", "must be between 10 and 500".to_owned())
    );
    assert_eq!(
        invalid(open(1000, 1000).await).0,
        "rows",
        "the old bound of 1000 × 1000 is gone"
    );
    let (field, reason) = invalid(open(400, 400).await);
    assert_eq!(field, "rows");
    assert!(
        reason.starts_with("400 rows × 400 cols is 160000 cells, more than the 100000"),
        "{reason}"
    );
    // The largest screens allowed open, and say so.
    assert_eq!(u32::from(MAX_ROWS) * 200, MAX_CELLS);
    let opened = open(MAX_ROWS, 200).await.unwrap();
    let view = match f
        .service
        .read(&f.owner, opened.id, terminal_seam::ReadRequest::Screen)
        .await
        .unwrap()
    {
        terminal_seam::ReadOutcome::Screen(view) => view,
        terminal_seam::ReadOutcome::Stream(_) => panic!("asked for the screen"),
    };
    assert_eq!((view.rows, view.cols), (MAX_ROWS, 200));
    f.service.close(&f.owner, opened.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn until_patterns_are_capped_before_they_are_compiled() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let long = "x".repeat(MAX_UNTIL_BYTES + 1);
    let (field, reason) = invalid(
        f.service
            .send(&f.owner, id, SendRequest::line("echo hi").with_until(long))
            .await,
    );
    assert_eq!(field, "until");
    assert!(
        reason.starts_with("the pattern is 4097 bytes, more than the 4096 allowed"),
        "{reason}"
    );
    // Short, but compiling to more than the regex size limit.
    let (field, reason) = invalid(
        f.service
            .send(
                &f.owner,
                id,
                SendRequest::line("echo hi").with_until("(?:\\w{100}){100}"),
            )
            .await,
    );
    assert_eq!(field, "until");
    assert!(reason.contains("size limit"), "{reason}");
    // Nothing was typed, and a pattern at the bound works.
    let at_bound = format!("(?:{}|bounded)", "y".repeat(MAX_UNTIL_BYTES - 12));
    assert_eq!(at_bound.len(), MAX_UNTIL_BYTES);
    let sent = f
        .send_req(
            id,
            SendRequest::line("echo bounded; sleep 30")
                .with_until(at_bound)
                .with_timeout(Duration::from_secs(20)),
        )
        .await;
    assert_eq!(sent.reason, SettleReason::Pattern);
    assert_eq!(sent.output, "bounded\n");
    f.service.close(&f.owner, id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn command_environment_and_name_are_capped() {
    let f = Fixture::new();
    let open = |request: OpenRequest| f.service.open(&f.owner, request);
    let big = "v".repeat(200 * 1024);

    let (field, reason) = invalid(
        open(OpenRequest {
            command: Some(vec!["echo".into(), big.clone()]),
            ..OpenRequest::default()
        })
        .await,
    );
    assert_eq!(field, "command");
    assert!(
        reason.starts_with("argument 1 is 204800 bytes, more than the 131071"),
        "{reason}"
    );

    let (field, reason) = invalid(
        open(OpenRequest {
            env: vec![("BIG".into(), big.clone())],
            ..OpenRequest::default()
        })
        .await,
    );
    assert_eq!(field, "env");
    assert!(reason.starts_with("`BIG` is 204804 bytes"), "{reason}");

    let many = (0..1025).map(|n| (format!("V{n}"), "1".into())).collect();
    assert_eq!(
        invalid(
            open(OpenRequest {
                env: many,
                ..OpenRequest::default()
            })
            .await
        ),
        (
            "env",
            "1025 variables is more than the 1024 allowed".to_owned()
        )
    );

    let fat = (0..10)
        .map(|n| (format!("V{n}"), "w".repeat(120 * 1024)))
        .collect();
    let (field, reason) = invalid(
        open(OpenRequest {
            env: fat,
            ..OpenRequest::default()
        })
        .await,
    );
    assert_eq!(field, "env");
    assert!(
        reason.starts_with("the command and the environment are 1228840 bytes together"),
        "{reason}"
    );

    // A huge bad name is quoted short in the message.
    let (field, reason) = invalid(
        open(OpenRequest {
            env: vec![(format!("{}=", "K".repeat(100_000)), "1".into())],
            ..OpenRequest::default()
        })
        .await,
    );
    assert_eq!(field, "env");
    assert!(reason.len() < 200, "{}", reason.len());

    for name in ["a\u{1b}[2Jb", &"n".repeat(65), " "] {
        assert_eq!(
            invalid(
                open(OpenRequest {
                    name: Some(name.to_owned()),
                    ..OpenRequest::default()
                })
                .await
            ),
            (
                "name",
                "must be 1 to 64 characters, without control characters".to_owned()
            )
        );
    }
    // 64 characters of several bytes each are fine.
    let opened = open(OpenRequest {
        name: Some("é".repeat(64)),
        ..OpenRequest::default()
    })
    .await
    .unwrap();
    f.service.close(&f.owner, opened.id).await.unwrap();
    assert!(f.service.list(&f.owner).await.is_empty());
}
