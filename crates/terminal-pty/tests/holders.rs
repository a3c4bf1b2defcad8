//! Whoever holds the terminal counts: a reader that is not the foreground
//! group's leader (the last of a pipe), a reader in a session of its own,
//! a reader on a thread other than the main one; and a wait beside a pipe
//! to another process is provisional. Real programs: bash, python3, sh,
//! setsid.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::{SendOutcome, SettleReason, TerminalId};

/// A shell in a fresh terminal, and what it answered to the command line
/// that runs a Python script of the test's own.
struct Scripted {
    f: Fixture,
    id: TerminalId,
    start: SendOutcome,
    /// Holds the script (removed with it).
    _dir: tempfile::TempDir,
}

/// Writes `text` to the script `name` in a temp dir of the test's own and
/// sends `command(path)` to a fresh shell; `None` (the test is skipped)
/// without python3.
async fn run_script(
    name: &str,
    text: &str,
    command: impl FnOnce(&str) -> String,
) -> Option<Scripted> {
    if !test_support::needs(&["python3"]) {
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(name);
    std::fs::write(&path, text).unwrap();
    let f = Fixture::new();
    let id = f.open_shell().await;
    let start = f.send(id, &command(&path.display().to_string())).await;
    Some(Scripted {
        f,
        id,
        start,
        _dir: dir,
    })
}

/// Asserts that `outcome` settled as an input wait with exactly `output`.
fn assert_answer(outcome: &SendOutcome, output: &str) {
    assert_eq!(
        (outcome.reason, outcome.output.as_str()),
        (SettleReason::InputWait, output),
        "{outcome:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_program_of_a_pipe_is_seen_waiting_at_each_line() {
    // `true` leads the group and exits; the reader is the pipe's end,
    // reading the terminal (its stdin is the pipe).
    let Some(Scripted { f, id, start, _dir }) = run_script(
        "pipe_end.py",
        "import sys\ntty = open(\"/dev/tty\")\nwhile True:\n    sys.stdout.write(\"p> \"); sys.stdout.flush()\n    print(\"got\", tty.readline().strip().upper())\n",
        |path| format!("true | python3 {path}"),
    )
    .await
    else {
        return;
    };
    assert_eq!(
        (start.reason, start.output.ends_with("p> ")),
        (SettleReason::InputWait, true),
        "{start:?}"
    );
    for word in ["one", "two"] {
        let line = f.send(id, word).await;
        assert_answer(&line, &format!("got {}\np> ", word.to_uppercase()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_in_a_session_of_its_own_is_seen_waiting() {
    if !test_support::needs(&["python3", "setsid"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_shell().await;
    let start = f.send(id, "setsid -w python3 -q -i").await;
    assert_eq!(start.reason, SettleReason::InputWait, "{start:?}");
    assert!(start.output.ends_with(">>> "), "{start:?}");
    assert_answer(&f.send(id, "6 * 7").await, "42\n>>> ");
    let done = f.send(id, "exit()").await;
    assert_eq!(
        (done.reason, done.exit_code),
        (SettleReason::Prompt, Some(0)),
        "{done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reader_on_a_side_thread_is_seen_while_the_main_thread_waits_on_a_pipe() {
    let Some(Scripted { f, id, start, _dir }) = run_script(
        "side_thread.py",
        "import os, threading\nr, w = os.pipe()\ndef reader():\n    while True:\n        l = input(\"t> \")\n        if l == \"quit\":\n            break\n        print(\"got\", l)\n    os.write(w, b\"x\")\nthreading.Thread(target=reader, daemon=True).start()\nos.read(r, 1)\n",
        |path| format!("python3 {path}"),
    )
    .await
    else {
        return;
    };
    assert_eq!(
        (start.reason, start.output.ends_with("t> ")),
        (SettleReason::InputWait, true),
        "{start:?}"
    );
    assert_answer(&f.send(id, "abc").await, "got abc\nt> ");
    let done = f.send(id, "quit").await;
    assert_eq!(done.reason, SettleReason::Prompt, "{done:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_beside_a_pipe_to_another_process_holds_for_the_answer() {
    // The reader waits on the terminal and, in the same `select`, on a
    // pipe from a helper that answers each line a while later: the reply
    // must carry the answer, not settle at the reader's wait before it.
    // sleep-ok: the helper under test answers late on purpose; the test waits on the reply
    let helper = "while read l; do sleep 0.2; echo answer $l; done";
    // The reader's first prompt comes after half a second, a round trip
    // like a remote login's: the hold adapts to the quiet stretches seen
    // in this terminal (twice the longest), so it covers the helper's
    // 0.2 s answers however fast the machine starts Python.
    let Some(Scripted { f, id, start, _dir }) = run_script(
        "relay.py",
        &format!(
            // sleep-ok: the program under test pauses before its prompt on purpose
            "import select, subprocess, sys, time\np = subprocess.Popen([\"sh\", \"-c\", \"{helper}\"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)\nsys.stdout.write(\"starting\\n\"); sys.stdout.flush(); time.sleep(0.5)\nsys.stdout.write(\"q> \"); sys.stdout.flush()\nwhile True:\n    ready, _, _ = select.select([sys.stdin, p.stdout], [], [])\n    if sys.stdin in ready:\n        l = sys.stdin.readline()\n        if l.strip() == \"quit\":\n            break\n        p.stdin.write(l.encode()); p.stdin.flush()\n    if p.stdout in ready:\n        sys.stdout.write(p.stdout.readline().decode() + \"q> \"); sys.stdout.flush()\n"
        ),
        |path| format!("python3 {path}"),
    )
    .await
    else {
        return;
    };
    assert_eq!(start.reason, SettleReason::InputWait, "{start:?}");
    for word in ["one", "two"] {
        assert_answer(&f.send(id, word).await, &format!("answer {word}\nq> "));
    }
    let done = f.send(id, "quit").await;
    assert_eq!(done.reason, SettleReason::Prompt, "{done:?}");
}
