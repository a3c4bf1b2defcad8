//! Whoever holds the terminal counts: a reader that is not the foreground
//! group's leader (the last of a pipe), a reader in a session of its own,
//! a reader on a thread other than the main one; and a wait beside a pipe
//! to another process is provisional. Real programs: bash, python3, sh,
//! setsid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::{SendOutcome, SendRequest, SettleReason, TerminalId};

/// A send that must settle on its own long before its (generous) time
/// limit: a wait that is not seen shows as `timeout`.
async fn send(f: &Fixture, id: TerminalId, text: &str) -> SendOutcome {
    f.send_req(
        id,
        SendRequest::line(text).with_timeout(Duration::from_secs(20)),
    )
    .await
}

/// Writes `text` to a script file in `dir`, the test's own temporary
/// directory (removed when the test drops it); returns its path.
fn script(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_program_of_a_pipe_is_seen_waiting_at_each_line() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    let scripts = tempfile::tempdir().unwrap();
    let id = f.open_shell().await;
    // `true` leads the group and exits; the reader is the pipe's end,
    // reading the terminal (its stdin is the pipe).
    let path = script(
        &scripts,
        "pipe_end.py",
        "import sys\ntty = open(\"/dev/tty\")\nwhile True:\n    sys.stdout.write(\"p> \"); sys.stdout.flush()\n    print(\"got\", tty.readline().strip().upper())\n",
    );
    let start = send(&f, id, &format!("true | python3 {path}")).await;
    assert_eq!(
        (start.reason, start.output.ends_with("p> ")),
        (SettleReason::InputWait, true),
        "{start:?}"
    );
    for word in ["one", "two"] {
        let line = send(&f, id, word).await;
        assert_eq!(
            (line.reason, line.output.as_str()),
            (
                SettleReason::InputWait,
                format!("got {}\np> ", word.to_uppercase()).as_str()
            ),
            "{line:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_in_a_session_of_its_own_is_seen_waiting() {
    if !test_support::needs(&["python3", "setsid"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_shell().await;
    let start = send(&f, id, "setsid -w python3 -q -i").await;
    assert_eq!(start.reason, SettleReason::InputWait, "{start:?}");
    assert!(start.output.ends_with(">>> "), "{start:?}");
    let answer = send(&f, id, "6 * 7").await;
    assert_eq!(
        (answer.reason, answer.output.as_str()),
        (SettleReason::InputWait, "42\n>>> "),
        "{answer:?}"
    );
    let done = send(&f, id, "exit()").await;
    assert_eq!(
        (done.reason, done.exit_code),
        (SettleReason::Prompt, Some(0)),
        "{done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_a_side_thread_is_seen_while_the_main_thread_waits_on_a_pipe() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    let scripts = tempfile::tempdir().unwrap();
    let id = f.open_shell().await;
    let path = script(
        &scripts,
        "side_thread.py",
        "import os, threading\nr, w = os.pipe()\ndef reader():\n    while True:\n        l = input(\"t> \")\n        if l == \"quit\":\n            break\n        print(\"got\", l)\n    os.write(w, b\"x\")\nthreading.Thread(target=reader, daemon=True).start()\nos.read(r, 1)\n",
    );
    let start = send(&f, id, &format!("python3 {path}")).await;
    assert_eq!(
        (start.reason, start.output.ends_with("t> ")),
        (SettleReason::InputWait, true),
        "{start:?}"
    );
    let line = send(&f, id, "abc").await;
    assert_eq!(
        (line.reason, line.output.as_str()),
        (SettleReason::InputWait, "got abc\nt> "),
        "{line:?}"
    );
    let done = send(&f, id, "quit").await;
    assert_eq!(done.reason, SettleReason::Prompt, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_beside_a_pipe_to_another_process_holds_for_the_answer() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    let scripts = tempfile::tempdir().unwrap();
    let id = f.open_shell().await;
    // The reader waits on the terminal and, in the same `select`, on a
    // pipe from a helper that answers each line a while later: the reply
    // must carry the answer, not settle at the reader's wait before it.
    // sleep-ok: the helper under test answers late on purpose; the test waits on the reply
    let helper = "while read l; do sleep 0.2; echo answer $l; done";
    // The reader's first prompt comes after half a second, a round trip
    // like a remote login's: the hold adapts to the quiet stretches seen
    // in this terminal (twice the longest), so it covers the helper's
    // 0.2 s answers however fast the machine starts Python.
    let path = script(
        &scripts,
        "relay.py",
        &format!(
            // sleep-ok: the program under test pauses before its prompt on purpose
            "import select, subprocess, sys, time\np = subprocess.Popen([\"sh\", \"-c\", \"{helper}\"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\nsys.stdout.write(\"starting\\n\"); sys.stdout.flush(); time.sleep(0.5)\nsys.stdout.write(\"q> \"); sys.stdout.flush()\nwhile True:\n    ready, _, _ = select.select([sys.stdin, p.stdout], [], [])\n    if sys.stdin in ready:\n        l = sys.stdin.readline()\n        if l.strip() == \"quit\":\n            break\n        p.stdin.write(l.encode()); p.stdin.flush()\n    if p.stdout in ready:\n        sys.stdout.write(p.stdout.readline().decode() + \"q> \"); sys.stdout.flush()\n"
        ),
    );
    let start = send(&f, id, &format!("python3 {path}")).await;
    assert_eq!(start.reason, SettleReason::InputWait, "{start:?}");
    for word in ["one", "two"] {
        let line = send(&f, id, word).await;
        assert_eq!(
            (line.reason, line.output.as_str()),
            (
                SettleReason::InputWait,
                format!("answer {word}\nq> ").as_str()
            ),
            "{line:?}"
        );
    }
    let done = send(&f, id, "quit").await;
    assert_eq!(done.reason, SettleReason::Prompt, "{done:?}");
}
