//! A 100 MB output flood: memory stays bounded by the ring, the totals
//! are exact, and the service answers other calls meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::{
    PersonViews, ReadOutcome, ReadRequest, SendRequest, SettleReason, TerminalService, WatchEvent,
};

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_megabyte_flood_is_bounded_exact_and_responsive() {
    let f = Fixture::new();
    let flood = f.open_shell().await;
    let other = f.open_shell().await;
    // 1,000,000 lines of 99 characters + newline: exactly 100,000,000 bytes.
    let line = "0123456789".repeat(10);
    let command = format!("yes {} | head -c 100000000", &line[..99]);
    let started = f
        .service
        .start_send(
            &f.owner,
            flood,
            SendRequest::line(command).with_timeout(Duration::from_secs(600)),
        )
        .unwrap();
    let job = tokio::spawn(started.settled);

    // Responsive meanwhile: once the flood runs, another terminal
    // answers and reads return.
    f.wait_foreground(flood, "yes").await;
    let answer = f.send(other, "echo alive").await;
    assert_eq!(answer.output, "alive\n");
    let read = f
        .service
        .read(
            &f.owner,
            flood,
            ReadRequest::Stream {
                since: None,
                max_bytes: Some(1000),
            },
        )
        .await
        .unwrap();
    assert!(matches!(read, ReadOutcome::Stream(_)));

    let outcome = job.await.unwrap().unwrap();
    assert_eq!(
        (outcome.reason, outcome.exit_code),
        (SettleReason::Prompt, Some(0))
    );
    assert_eq!(outcome.total_bytes, 100_000_000);
    assert!(outcome.truncated);
    assert!(outcome.output.len() < 40 * 1024);
    let expected_tail = format!("{}\n{}\n", &line[..99], &line[..99]);
    assert!(outcome.output.ends_with(&expected_tail));

    let ReadOutcome::Stream(tail) = f
        .service
        .read(
            &f.owner,
            flood,
            ReadRequest::Stream {
                since: Some(0),
                max_bytes: Some(100),
            },
        )
        .await
        .unwrap()
    else {
        unreachable!()
    };
    // Everything but the last 4 MiB was evicted, and `dropped` says so.
    let ring = 4 * 1024 * 1024;
    assert!(tail.dropped > 100_000_000 - ring, "{}", tail.dropped);
    assert!(tail.dropped < 100_000_200 - ring + 200, "{}", tail.dropped);

    let peak = peak_rss_kib();
    assert!(peak < 150 * 1024, "peak RSS {peak} KiB");
}

/// The referee of the emulator's shortcuts: the screen after a flood
/// (plain text, colours, tabs, wide characters, a scroll region set and
/// reset, lines that wrap) is, cell for cell, the one a plain `vt100`
/// gives for the same bytes, taken from the terminal's own output tap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_screen_after_a_flood_is_the_one_a_reference_emulator_gives() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let watch = f.service.watch(id).unwrap();
    let (rows, cols) = watch.size;
    let initial = watch.screen;
    let mut output = watch.output;
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    // Every chunk, in order, while the flood runs; the rest once the send
    // settled (all of it was sent before the settle).
    let collector = tokio::spawn(async move {
        let mut bytes = Vec::new();
        loop {
            tokio::select! {
                event = output.next() => match event {
                    WatchEvent::Output(chunk) => bytes.extend_from_slice(&chunk),
                    other @ (WatchEvent::Lagged | WatchEvent::Ended) => panic!("no chunk missed, no end yet: {other:?}"),
                },
                _ = &mut stopped => break,
            }
        }
        loop {
            match output.try_next() {
                Some(WatchEvent::Output(chunk)) => bytes.extend_from_slice(&chunk),
                None => break,
                Some(other) => panic!("{other:?}"),
            }
        }
        bytes
    });
    // Last, floods that start with the cursor at the top of a full
    // screen, and below a scroll region (where lines overwrite the bottom
    // row instead of scrolling): what they leave differs from a plain
    // scroll, and the screen must show exactly that.
    let command = "yes 'a plain line of text, the kind a build prints' | head -c 3000000; \
         printf '\\033[2;10r'; seq 1 300; printf '\\033[r\\033[31mred\\033[0m\\n'; \
         for i in $(seq 1 400); do printf 'tab\\there %d \\033[1mbold\\033[0m é中文\\n' $i; done; \
         yes \"$(printf '%0250d' 7)\" | head -c 500000; printf '\\033[H'; seq 1 50000; \
         printf '\\033[2;10r\\033[20;1H'; seq 30000 -1 1; printf '\\033[r'";
    let outcome = f
        .send_req(
            id,
            SendRequest::line(command).with_timeout(Duration::from_secs(300)),
        )
        .await;
    assert_eq!(outcome.reason, SettleReason::Prompt);
    let screen = f.service.screen_copy(id).unwrap();
    stop.send(()).unwrap();
    let bytes = collector.await.unwrap();
    assert!(bytes.len() > 3_500_000, "{} bytes tapped", bytes.len());

    let size = |n| std::num::NonZeroU16::new(n).unwrap();
    let mut reference = vt100::Parser::new(size(rows), size(cols), 0);
    reference.process(&initial);
    reference.process(&bytes);
    // Cell for cell: every run's text, colours and style, the cursor and
    // the modes.
    assert_eq!(screen, terminal_pty::snapshot(reference.screen()));
}
