//! Waits on the terminal however a program reads it — fd 0, `/dev/tty`,
//! a path under `/dev/pts` — the echo-off signal of a secret prompt, and
//! lines longer than a canonical-mode terminal keeps. Real programs: bash,
//! python3, perl, cat.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::{SendOutcome, SendRequest, SettleReason};

fn on(outcome: &SendOutcome) -> (SettleReason, Option<bool>) {
    (outcome.reason, outcome.echo)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_of_dev_tty_with_echo_off_is_a_secret_input_wait() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let ask = f.send(id, "read -s -p 'pw: ' p < /dev/tty").await;
    assert_eq!(
        (ask.output.as_str(), on(&ask)),
        ("pw: ", (SettleReason::InputWait, Some(false))),
        "{ask:?}"
    );
    let answer = f.send(id, "hunter2").await;
    assert_eq!(
        (answer.reason, answer.exit_code),
        (SettleReason::Prompt, Some(0))
    );
    assert!(!answer.output.contains("hunter2"), "{answer:?}");
    let check = f.send(id, "echo ${#p}").await;
    assert_eq!(check.output, "7\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn python_getpass_settles_as_a_secret_prompt_twice() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_shell().await;
    let first = f.send(
        id,
        "python3 -c 'import getpass; a = getpass.getpass(\"one: \"); b = getpass.getpass(\"two: \"); print(len(a), len(b))'",
    )
    .await;
    assert_eq!(
        (first.output.as_str(), on(&first)),
        ("one: ", (SettleReason::InputWait, Some(false))),
        "{first:?}"
    );
    let second = f.send(id, "abc").await;
    assert_eq!(
        (second.output.as_str(), on(&second)),
        ("\ntwo: ", (SettleReason::InputWait, Some(false))),
        "{second:?}"
    );
    let done = f.send(id, "defgh").await;
    assert_eq!(
        (done.output.as_str(), done.reason, done.exit_code),
        ("\n3 5\n", SettleReason::Prompt, Some(0)),
        "{done:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_perl_debugger_reading_dev_tty_settles_at_each_prompt() {
    if !test_support::needs(&["perl"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_command(&["perl", "-de0"]).await;
    let step = f.send(id, "p 6*7").await;
    assert_eq!(on(&step), (SettleReason::InputWait, Some(true)), "{step:?}");
    assert!(step.output.contains("42"), "{step:?}");
    assert!(step.output.contains("DB<2>"), "{step:?}");
    let again = f.send(id, "$x = 5; print $x + 1").await;
    assert_eq!(
        on(&again),
        (SettleReason::InputWait, Some(true)),
        "{again:?}"
    );
    assert!(again.output.contains('6'), "{again:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_through_the_pts_path_or_a_dup_is_a_wait_with_echo_on() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let by_path = f.send(id, "read -p 'name: ' n < \"$(tty)\"").await;
    assert_eq!(
        (by_path.output.as_str(), on(&by_path)),
        ("name: ", (SettleReason::InputWait, Some(true))),
        "{by_path:?}"
    );
    let answered = f.send(id, "ada").await;
    assert_eq!(answered.reason, SettleReason::Prompt, "{answered:?}");
    let dup = f
        .send(id, "exec 7<&0; read -p 'again: ' m <&7; exec 7<&-")
        .await;
    assert_eq!(
        (dup.output.as_str(), on(&dup)),
        ("again: ", (SettleReason::InputWait, Some(true))),
        "{dup:?}"
    );
    let done = f.send(id, "lovelace").await;
    assert_eq!(done.reason, SettleReason::Prompt, "{done:?}");
    assert_eq!(f.send(id, "echo $n $m").await.output, "ada lovelace\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_editor_prompt_is_not_a_secret() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    let id = f.open_command(&["python3", "-q", "-i"]).await;
    let answer = f.send(id, "1+1").await;
    assert_eq!(
        (answer.output.as_str(), on(&answer)),
        ("2\n>>> ", (SettleReason::InputWait, Some(true))),
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_line_longer_than_the_terminal_keeps_reaches_cat_whole() {
    let f = Fixture::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    let id = f.open_shell().await;
    let start = f.send(id, &format!("cat > '{}'", file.display())).await;
    assert_eq!(start.reason, SettleReason::InputWait, "{start:?}");
    let line: String = (0..6_000)
        .map(|i| (b'a' + (i % 26) as u8) as char)
        .collect();
    let sent = f.send(id, &line).await;
    assert_eq!(sent.reason, SettleReason::InputWait, "{sent:?}");
    assert_eq!(sent.line_cut, None);
    let second = f.send(id, "end").await;
    assert_eq!(second.reason, SettleReason::InputWait, "{second:?}");
    let eof = f
        .send_req(
            id,
            SendRequest {
                text: "\u{4}".into(),
                submit: false,
                ..SendRequest::line("")
            }
            .with_timeout(Duration::from_secs(20)),
        )
        .await;
    assert_eq!((eof.reason, eof.exit_code), (SettleReason::Prompt, Some(0)));
    let written = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        written.len(),
        6_005,
        "6,000 bytes, a newline, `end` and a newline"
    );
    assert_eq!(written, format!("{line}\nend\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_veof_a_long_line_is_reported_with_what_the_kernel_kept() {
    let f = Fixture::new();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("f");
    let id = f.open_shell().await;
    let start = f
        .send(
            id,
            &format!(
                "stty eof undef; head -c 5000 > '{}'; stty sane",
                file.display()
            ),
        )
        .await;
    assert_eq!(start.reason, SettleReason::InputWait, "{start:?}");
    let line = "x".repeat(6_000);
    let sent = f.send(id, &line).await;
    let cut = sent.line_cut.expect("the cut is reported");
    assert_eq!(
        (cut.line, cut.line_bytes, cut.kept_bytes),
        (1, 6_000, 4_095)
    );
    // The program got what the kernel kept: 4,095 bytes and the newline.
    let done = f.send(id, &"y".repeat(1_000)).await;
    assert_eq!(done.reason, SettleReason::Prompt, "{done:?}");
    assert_eq!(std::fs::read(&file).unwrap().len(), 5_000);
    assert!(std::fs::read(&file).unwrap()[..4_096].ends_with(b"x\n"));
}
