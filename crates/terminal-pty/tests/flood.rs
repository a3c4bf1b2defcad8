//! A 100 MB output flood: memory stays bounded by the ring, the totals
//! are exact, and the service answers other calls meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::{ReadOutcome, ReadRequest, SendRequest, SettleReason, TerminalService};

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
