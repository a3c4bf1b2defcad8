//! The stream view (non-destructive, cursors, `dropped`) and the screen view.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_pty::TerminalConfig;
use terminal_seam::{
    ReadOutcome, ReadRequest, SendRequest, SettleReason, StreamChunk, TerminalService,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_reads_are_non_destructive_and_report_dropped_after_the_ring_wraps() {
    let f = Fixture::with_config(TerminalConfig {
        scrollback_bytes: 64 * 1024,
        ..TerminalConfig::default()
    });
    let id = f.open_shell().await;
    let before = f.stream(id, None).await;
    let small = f.send(id, "echo first").await;
    assert_eq!(small.output, "first\n");
    let a = f.stream(id, Some(before.next)).await;
    let b = f.stream(id, Some(before.next)).await;
    assert_eq!(a, b);
    assert_eq!(
        a,
        StreamChunk {
            output: "echo first\nfirst\n$ ".into(),
            from: before.next,
            next: before.next + 19,
            dropped: 0,
            truncated: false
        }
    );
    // The send's output counts as read: nothing new for the owner but
    // the next prompt.
    assert_eq!(f.stream(id, None).await.output, "$ ");

    // 588,895 bytes through a 64 KiB ring.
    let big = f.send(id, "seq 1 100000").await;
    assert_eq!(big.reason, SettleReason::Prompt);
    assert_eq!(big.total_bytes, 588_895);
    assert!(big.truncated);
    assert!(big.output.starts_with("1\n2\n3\n"), "{}", &big.output[..20]);
    assert!(big.output.ends_with("99999\n100000\n"));
    assert!(big.output.contains("bytes omitted …]\n"));

    let old = f.stream(id, Some(0)).await;
    assert_eq!(old, f.stream(id, Some(0)).await);
    assert!(old.dropped > 500_000, "{}", old.dropped);
    assert_eq!(old.from, old.dropped);
    // Page to the end with cursors: the pieces join up exactly.
    let mut cursor = old.from;
    let mut text = String::new();
    loop {
        let chunk = match f
            .service
            .read(
                &f.owner,
                id,
                ReadRequest::Stream {
                    since: Some(cursor),
                    max_bytes: Some(10_000),
                },
            )
            .await
            .unwrap()
        {
            ReadOutcome::Stream(c) => c,
            ReadOutcome::Screen(_) => unreachable!(),
        };
        assert_eq!(chunk.from, cursor);
        assert_eq!(chunk.dropped, 0);
        text.push_str(&chunk.output);
        cursor = chunk.next;
        if !chunk.truncated {
            break;
        }
    }
    assert!(text.ends_with("99999\n100000\n$ "));
    assert_eq!(cursor - old.from, text.len() as u64);
    assert_eq!(text.len(), 64 * 1024);
    let future = f
        .service
        .read(
            &f.owner,
            id,
            ReadRequest::Stream {
                since: Some(cursor + 1),
                max_bytes: None,
            },
        )
        .await
        .unwrap_err();
    assert_eq!(future.code(), "INVALID_ARGUMENT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn screen_mode_shows_a_full_screen_program() {
    if !test_support::needs(&["less"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_shell().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("numbers.txt");
    let lines: String = (1..=200).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&file, lines).unwrap();
    let less = f.send(id, &format!("less {}", file.display())).await;
    assert_eq!(less.reason, SettleReason::InputWait);
    let screen = match f
        .service
        .read(&f.owner, id, ReadRequest::Screen)
        .await
        .unwrap()
    {
        ReadOutcome::Screen(s) => s,
        ReadOutcome::Stream(_) => unreachable!(),
    };
    assert_eq!(
        (screen.rows, screen.cols, screen.alternate_screen),
        (40, 160, true)
    );
    let rows: Vec<&str> = screen.screen.lines().collect();
    let expected: Vec<String> = (1..=39).map(|i| format!("line {i}")).collect();
    assert_eq!(rows[..39].to_vec(), expected);
    assert!(rows[39].contains("numbers.txt"), "{:?}", rows[39]);
    assert_eq!(screen.cursor.row, 40);

    // Page down: the screen follows.
    let page = f
        .send_req(
            id,
            SendRequest {
                submit: false,
                ..SendRequest::line(" ")
            },
        )
        .await;
    assert_eq!(page.reason, SettleReason::InputWait);
    let screen = match f
        .service
        .read(&f.owner, id, ReadRequest::Screen)
        .await
        .unwrap()
    {
        ReadOutcome::Screen(s) => s,
        ReadOutcome::Stream(_) => unreachable!(),
    };
    assert_eq!(screen.screen.lines().next(), Some("line 40"));

    let quit = f
        .send_req(
            id,
            SendRequest {
                submit: false,
                ..SendRequest::line("q")
            },
        )
        .await;
    assert_eq!(
        (quit.reason, quit.exit_code),
        (SettleReason::Prompt, Some(0))
    );
    let screen = match f
        .service
        .read(&f.owner, id, ReadRequest::Screen)
        .await
        .unwrap()
    {
        ReadOutcome::Screen(s) => s,
        ReadOutcome::Stream(_) => unreachable!(),
    };
    assert!(!screen.alternate_screen);
    assert!(
        screen.screen.trim_end().ends_with("$"),
        "{:?}",
        screen.screen
    );
}
