//! The ownership discipline: one active send, foreign owners, closing,
//! exited sessions, names, the per-owner limit, background sends.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_pty::TerminalConfig;
use terminal_seam::{
    CloseKind, OpenRequest, Owner, ReadRequest, SendRequest, SettleReason, TerminalId,
    TerminalService, TerminalSignal, TerminalStatus,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_concurrent_sends_exactly_one_gets_send_active() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let a = f
        .service
        .send(&f.owner, id, SendRequest::line("sleep 0.3; echo a"));
    let b = f.service.send(&f.owner, id, SendRequest::line("echo b"));
    let (a, b) = tokio::join!(a, b);
    let codes: Vec<&str> = [&a, &b]
        .iter()
        .filter_map(|r| r.as_ref().err().map(|e| e.code()))
        .collect();
    assert_eq!(codes, vec!["SEND_ACTIVE"]);
    let err = b.unwrap_err();
    assert!(err.retryable());
    assert_eq!(a.unwrap().output, "a\n");
    // The slot is free again.
    assert_eq!(f.send(id, "echo c").await.output, "c\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_owner_gets_foreign_session_for_every_call() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let stranger = Owner::new("stranger");
    let s = &f.service;
    let codes = vec![
        s.send(&stranger, id, SendRequest::line("echo x"))
            .await
            .unwrap_err()
            .code(),
        s.read(&stranger, id, ReadRequest::Screen)
            .await
            .unwrap_err()
            .code(),
        s.read(
            &stranger,
            id,
            ReadRequest::Stream {
                since: None,
                max_bytes: None,
            },
        )
        .await
        .unwrap_err()
        .code(),
        s.signal(&stranger, id, TerminalSignal::Int)
            .await
            .unwrap_err()
            .code(),
        s.close(&stranger, id).await.unwrap_err().code(),
    ];
    assert_eq!(codes, vec!["FOREIGN_SESSION"; 5]);
    assert_eq!(s.list(&stranger).await, vec![]);
    s.end_owner(&stranger).await;
    // Untouched by all of that.
    assert_eq!(f.send(id, "echo mine").await.output, "mine\n");
    let missing = s
        .send(&f.owner, TerminalId(9999), SendRequest::line("x"))
        .await
        .unwrap_err();
    assert_eq!(missing.code(), "NO_SESSION");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_settles_an_active_send_with_exit_and_later_calls_say_closing() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let started = f
        .service
        .start_send(&f.owner, id, SendRequest::line("sleep 1000"))
        .unwrap();
    let pending = tokio::spawn(started.settled);
    f.wait_foreground(id, "sleep").await;
    let closed = f.service.close(&f.owner, id).await.unwrap();
    assert_eq!(closed.outcome, CloseKind::Closed);
    let settled = pending.await.unwrap().unwrap();
    assert_eq!(settled.reason, SettleReason::Exit);
    let again = f.service.close(&f.owner, id).await.unwrap();
    assert_eq!(again.outcome, CloseKind::AlreadyClosing);
    let err = f
        .service
        .send(&f.owner, id, SendRequest::line("echo x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SESSION_CLOSING");
    assert_eq!(f.service.list(&f.owner).await, vec![]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_closes_one_closes_the_other_is_already_closing() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let (a, b) = tokio::join!(f.service.close(&f.owner, id), f.service.close(&f.owner, id));
    let mut kinds = vec![a.unwrap().outcome, b.unwrap().outcome];
    kinds.sort_by_key(|k| k.as_str());
    assert_eq!(kinds, vec![CloseKind::AlreadyClosing, CloseKind::Closed]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exited_session_refuses_sends_and_signals_but_still_reads() {
    let f = Fixture::new();
    let id = f.open_command(&["sh", "-c", "echo bye; exit 4"]).await;
    test_support::wait_for_async("the program exits", || async {
        (f.service.list(&f.owner).await[0].status != TerminalStatus::Running).then_some(())
    })
    .await;
    let err = f
        .service
        .send(&f.owner, id, SendRequest::line("x"))
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SESSION_EXITED");
    let err = f
        .service
        .signal(&f.owner, id, TerminalSignal::Int)
        .await
        .unwrap_err();
    assert_eq!(err.code(), "SESSION_EXITED");
    assert_eq!(f.stream(id, Some(0)).await.output, "bye\n");
    let closed = f.service.close(&f.owner, id).await.unwrap();
    assert_eq!(closed.exit.and_then(|e| e.code), Some(4));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_unique_per_owner_and_the_limit_holds() {
    let f = Fixture::with_config(TerminalConfig {
        max_terminals_per_owner: 2,
        ..TerminalConfig::default()
    });
    let named = |name: &str| OpenRequest {
        name: Some(name.to_owned()),
        ..OpenRequest::default()
    };
    let a = f.service.open(&f.owner, named("build")).await.unwrap();
    assert_eq!(a.name.as_deref(), Some("build"));
    let dup = f.service.open(&f.owner, named("build")).await.unwrap_err();
    assert_eq!(dup.code(), "DUPLICATE_NAME");
    // Another owner may use the same name.
    let other = Owner::new("other");
    let o = f.service.open(&other, named("build")).await.unwrap();
    let _b = f
        .service
        .open(&f.owner, OpenRequest::default())
        .await
        .unwrap();
    let limit = f
        .service
        .open(&f.owner, OpenRequest::default())
        .await
        .unwrap_err();
    assert_eq!(limit.code(), "TERMINAL_LIMIT");
    f.service.close(&f.owner, a.id).await.unwrap();
    let again = f.service.open(&f.owner, named("build")).await.unwrap();
    assert!(again.id.0 > o.id.0);
    let bad = f
        .service
        .open(
            &f.owner,
            OpenRequest {
                command: Some(vec!["/no/such/program".into()]),
                ..OpenRequest::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code(), "TERMINAL_LIMIT");
    f.service.end_owner(&f.owner).await;
    let bad = f
        .service
        .open(
            &f.owner,
            OpenRequest {
                command: Some(vec!["/no/such/program".into()]),
                ..OpenRequest::default()
            },
        )
        .await
        .unwrap_err();
    assert_eq!(bad.code(), "SPAWN_FAILED");
    let bad_regex = f
        .service
        .start_send(&other, o.id, SendRequest::line("x").with_until("("))
        .unwrap_err();
    assert_eq!(bad_regex.code(), "INVALID_ARGUMENT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_send_future_frees_the_slot() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let started = f
        .service
        .start_send(&f.owner, id, SendRequest::line("sleep 0.2"))
        .unwrap();
    let busy = f
        .service
        .start_send(&f.owner, id, SendRequest::line("echo x"))
        .unwrap_err();
    assert_eq!(busy.code(), "SEND_ACTIVE");
    assert!(f.service.list(&f.owner).await[0].active_send);
    drop(started);
    assert!(!f.service.list(&f.owner).await[0].active_send);
    assert_eq!(f.send(id, "echo free").await.output, "free\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_reaches_a_program_that_took_the_foreground_after_it() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    // The SIGINT finds only processes that ignore it (the shell between
    // two commands, `sleep 0.5`), as when it lands while the shell starts
    // a program; the program started after it must get it too.
    interrupted_back_to_the_prompt(
        &f,
        id,
        "trap '' INT; echo begin; sleep 0.5; trap - INT; sleep 1000",
        "begin\n",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupt_reaches_a_program_its_target_became_after_it() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_shell().await;
    // The foreground program catches the SIGINT and becomes `sleep`, as
    // the shell's forked child does when the SIGINT lands before it
    // execs the program: `exec` forgets the signal, so the program the
    // group now runs must get it again.
    let line = "python3 -c \"import os, signal, time; \
                signal.signal(signal.SIGINT, lambda *_: os.execvp('sleep', ['sleep', '1000'])); \
                print('armed', flush=True); \
                time.sleep(1000)\""; // sleep-ok: the program's own work, until interrupted
    interrupted_back_to_the_prompt(&f, id, line, "armed\n").await;
}

/// Sends `line`, interrupts it once its output shows `ready`, and checks
/// that the send settles at the prompt with status 130 and the terminal
/// takes the next send.
async fn interrupted_back_to_the_prompt(f: &Fixture, id: TerminalId, line: &str, ready: &str) {
    let started = f
        .service
        .start_send(
            &f.owner,
            id,
            SendRequest::line(line).with_timeout(Duration::from_secs(60)),
        )
        .unwrap();
    let interrupt = started.interrupt.clone();
    let cursor = started.start_cursor;
    let job = tokio::spawn(started.settled);
    f.follow_until(id, cursor, |seen| seen.contains(ready))
        .await;
    interrupt.interrupt();
    let outcome = job.await.unwrap().unwrap();
    assert_eq!(
        (outcome.reason, outcome.exit_code),
        (SettleReason::Prompt, Some(130)),
        "{outcome:?}"
    );
    assert_eq!(f.send(id, "echo after").await.output, "after\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_background_send_can_be_interrupted() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let started = f
        .service
        .start_send(&f.owner, id, SendRequest::line("echo begin; sleep 1000"))
        .unwrap();
    let interrupt = started.interrupt.clone();
    let cursor = started.start_cursor;
    let job = tokio::spawn(started.settled);
    // Follow the running send's output without polling.
    let mut followed = String::new();
    let mut since = cursor;
    while !followed.contains("begin\n") {
        let chunk = f
            .service
            .read_wait(&f.owner, id, since, None, Duration::from_secs(10))
            .await
            .unwrap();
        assert!(
            !chunk.output.is_empty(),
            "read_wait returned empty before its deadline"
        );
        followed.push_str(&chunk.output);
        since = chunk.next;
    }
    // Nothing more comes while `sleep` runs: the wait ends empty.
    let quiet = f
        .service
        .read_wait(&f.owner, id, since, None, Duration::from_millis(100))
        .await
        .unwrap();
    assert_eq!(
        (quiet.output.as_str(), quiet.from, quiet.next),
        ("", since, since)
    );
    interrupt.interrupt();
    let outcome = job.await.unwrap().unwrap();
    assert_eq!(
        (outcome.reason, outcome.exit_code),
        (SettleReason::Prompt, Some(130))
    );
    // Once settled, an interrupt is a no-op: the shell at its prompt sees
    // no SIGINT (it would print `^C` and a fresh prompt).
    let quick = f
        .service
        .start_send(&f.owner, id, SendRequest::line("true"))
        .unwrap();
    let late = quick.interrupt.clone();
    assert_eq!(quick.settled.await.unwrap().exit_code, Some(0));
    let end = f.stream(id, None).await.next;
    late.interrupt();
    let quiet = f
        .service
        .read_wait(&f.owner, id, end, None, Duration::from_millis(300))
        .await
        .unwrap();
    assert_eq!(quiet.output, "");
    assert!(outcome.output.starts_with("begin\n"), "{outcome:?}");
    let progress = f.stream(id, Some(cursor)).await;
    assert!(progress.output.contains("begin\n"), "{progress:?}");
    assert_eq!(f.send(id, "echo after").await.output, "after\n");
}
