//! The terminal tools' contract, in-process: `terminal_open`, `_send`,
//! `_read`, `_signal`, `_list` and `_close` over real PTYs, a real Python
//! REPL and a real bash, called with the JSON a model sends and checked
//! for the results and error codes the catalog promises.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::{Model, runtime, session_dir, session_is_gone};
use pretty_assertions::assert_eq;
use serde_json::json;
use tools_catalog::Code;
use tools_catalog::Settings;

/// The steps of `dsh demo terminal`: state (data, a function) survives
/// between sends, so each step sends only the new code.
const SETUP: &str = "data = [12, 18, 15]\ndef mean(xs):\n    return sum(xs) / (len(xs) + 1)\n";
const FIX: &str = "def mean(xs):\n    return sum(xs) / len(xs)\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_repl_keeps_its_state_between_sends_and_closes_cleanly() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let (_dir, cwd) = session_dir();
    let model = Model::new(runtime(), "repl", &cwd, &Settings::default());

    let opened = model
        .reply(
            "terminal_open",
            json!({ "command": ["python3", "-q"], "name": "repl" }),
        )
        .await;
    let s = &opened.structured;
    assert_eq!(
        (s["id"].as_str(), s["reason"].as_str()),
        (Some("pty-1"), Some("input_wait"))
    );
    assert_eq!(s["name"], "repl");
    let pid = s["pid"].as_i64().expect("terminal_open reports the pid");
    assert!(opened.text.contains("pty-1"), "{}", opened.text);

    // step 1: define the data and the function; only the REPL's answer
    // comes back, not the echo of the code
    let r = model
        .ok("terminal_send", json!({ "id": "pty-1", "text": SETUP }))
        .await;
    assert_eq!(r["reason"], "input_wait");
    assert!(!r["output"].as_str().unwrap().contains("def mean"), "{r}");
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "mean(data)" }),
        )
        .await;
    assert_eq!(r["reason"], "input_wait");
    assert!(r["output"].as_str().unwrap().starts_with("11.25\n"), "{r}");

    // step 2: inspect; `data` survived the call
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "sum(data), len(data)" }),
        )
        .await;
    assert!(
        r["output"].as_str().unwrap().starts_with("(45, 3)\n"),
        "{r}"
    );

    // step 3: fix and re-run
    model
        .ok("terminal_send", json!({ "id": "pty-1", "text": FIX }))
        .await;
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "mean(data)" }),
        )
        .await;
    assert!(r["output"].as_str().unwrap().starts_with("15.0\n"), "{r}");

    // the scrollback, read from the start, holds what was printed
    let read = model
        .ok("terminal_read", json!({ "id": "pty-1", "since": 0 }))
        .await;
    let scrollback = read["output"].as_str().unwrap();
    assert!(
        scrollback.contains("11.25") && scrollback.contains("15.0"),
        "{read}"
    );

    // one terminal, listed with its name and status
    let listed = model.ok("terminal_list", json!({})).await;
    let terminals = listed["terminals"].as_array().unwrap();
    assert_eq!(terminals.len(), 1, "{listed}");
    assert_eq!(
        (
            &terminals[0]["id"],
            &terminals[0]["name"],
            &terminals[0]["status"]
        ),
        (&json!("pty-1"), &json!("repl"), &json!("running"))
    );

    // closing ends the REPL's whole session; a second close says so
    let closed = model.ok("terminal_close", json!({ "id": "pty-1" })).await;
    assert_eq!(closed["outcome"], "closed");
    session_is_gone(pid).await;
    let again = model.ok("terminal_close", json!({ "id": "pty-1" })).await;
    assert_eq!(again["outcome"], "already_closing");
    let e = model
        .err("terminal_send", json!({ "id": "pty-1", "text": "1" }))
        .await;
    assert!(
        e["code"] == "SESSION_CLOSING" || e["code"] == "NO_SESSION",
        "{e}"
    );
    model.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_shell_reports_prompts_exit_codes_and_its_state() {
    let (_dir, cwd) = session_dir();
    let model = Model::new(runtime(), "shell", &cwd, &Settings::default());
    let opened = model.ok("terminal_open", json!({})).await;
    assert_eq!(opened["reason"], "prompt");

    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "cd /etc && export GREETING=hi; false" }),
        )
        .await;
    assert_eq!(
        (&r["reason"], &r["exit_code"]),
        (&json!("prompt"), &json!(1))
    );
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "echo $PWD $GREETING" }),
        )
        .await;
    assert_eq!(
        (&r["output"], &r["reason"], &r["exit_code"]),
        (&json!("/etc hi\n"), &json!("prompt"), &json!(0))
    );

    // `until` settles on the pattern while the command still runs; an
    // interrupt ends it and the shell is back
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "echo start; echo marker-42; sleep 30", "until": "marker-\\d+" }),
        )
        .await;
    assert_eq!(r["reason"], "pattern");
    assert!(r["output"].as_str().unwrap().contains("marker-42"), "{r}");
    let pid = opened["pid"].as_i64().unwrap();
    test_support::wait_until_async("`sleep 30` runs in the terminal", || {
        process_tree::live_session_members(i32::try_from(pid).unwrap())
            .iter()
            .any(|p| process_tree::command_line(p.pid).starts_with("sleep"))
    })
    .await;
    let signalled = model
        .ok(
            "terminal_signal",
            json!({ "id": "pty-1", "signal": "SIGINT" }),
        )
        .await;
    assert!(signalled.is_object());
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "echo after" }),
        )
        .await;
    assert_eq!(r["reason"], "prompt");
    assert!(r["output"].as_str().unwrap().ends_with("after\n"), "{r}");

    // a screen read gives the visible screen and its size
    let view = model
        .ok("terminal_read", json!({ "id": "pty-1", "mode": "screen" }))
        .await;
    assert!(view["screen"].as_str().unwrap().contains("after"), "{view}");
    assert_eq!((&view["rows"], &view["cols"]), (&json!(40), &json!(160)));

    model.ok("terminal_close", json!({ "id": "pty-1" })).await;
    session_is_gone(pid).await;
    model.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminal_errors_carry_their_stable_codes() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let (_dir, cwd) = session_dir();
    let rt = runtime();
    let model = Model::new(rt.clone(), "errors", &cwd, &Settings::default());
    let other = Model::new(rt, "someone-else", &cwd, &Settings::default());

    // no such terminal; not an id at all
    let e = model
        .err("terminal_send", json!({ "id": "pty-9", "text": "x" }))
        .await;
    assert_eq!(
        (&e["code"], &e["retryable"]),
        (&json!("NO_SESSION"), &json!(false))
    );
    let e = model
        .err("terminal_send", json!({ "id": "nine", "text": "x" }))
        .await;
    assert_eq!(e["code"], "INVALID_ARGUMENT");

    // arguments: a missing field, an unknown signal, a missing directory
    let e = model.err("terminal_send", json!({ "id": "pty-1" })).await;
    assert_eq!(
        e,
        json!({ "code": Code::InvalidArgument, "message": "missing field `text`", "retryable": false })
    );
    let e = model
        .err(
            "terminal_open",
            json!({ "cwd": cwd.join("nope").display().to_string() }),
        )
        .await;
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert!(e["message"].as_str().unwrap().starts_with("cwd: "), "{e}");

    // a name is unique among one owner's terminals
    let opened = model.ok("terminal_open", json!({ "name": "main" })).await;
    let e = model.err("terminal_open", json!({ "name": "main" })).await;
    assert_eq!(e["code"], "DUPLICATE_NAME");

    // SIGKILL is what terminal_close is for; other signals are refused
    let e = model
        .err(
            "terminal_signal",
            json!({ "id": "pty-1", "signal": "SIGKILL" }),
        )
        .await;
    assert_eq!(e["code"], "USE_CLOSE");
    let e = model
        .err(
            "terminal_signal",
            json!({ "id": "pty-1", "signal": "SIGUSR1" }),
        )
        .await;
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert!(
        e["message"].as_str().unwrap().starts_with("signal: "),
        "{e}"
    );

    // one send at a time: a background send holds the terminal
    let started = model
        .ok(
            "terminal_send",
            json!({ "id": "pty-1", "text": "sleep 300", "run_in_background": true }),
        )
        .await;
    let job = started["job_id"].as_str().unwrap().to_owned();
    let e = model
        .err(
            "terminal_send",
            json!({ "id": "pty-1", "text": "echo second" }),
        )
        .await;
    assert_eq!(
        (&e["code"], &e["retryable"]),
        (&json!("SEND_ACTIVE"), &json!(true))
    );
    let killed = model.ok("job_kill", json!({ "job_id": job })).await;
    assert_eq!(killed["outcome"], "killed");

    // another owner's terminal is not yours to use
    let e = other
        .err("terminal_send", json!({ "id": "pty-1", "text": "echo x" }))
        .await;
    assert_eq!(e["code"], "FOREIGN_SESSION");
    let e = other.err("terminal_close", json!({ "id": "pty-1" })).await;
    assert_eq!(e["code"], "FOREIGN_SESSION");

    // a program that exited takes no more input
    let python = model
        .ok("terminal_open", json!({ "command": ["python3", "-q"] }))
        .await;
    let id = python["id"].as_str().unwrap().to_owned();
    let r = model
        .ok("terminal_send", json!({ "id": id, "text": "exit()" }))
        .await;
    assert_eq!(r["reason"], "exit");
    let e = model
        .err("terminal_send", json!({ "id": id, "text": "1" }))
        .await;
    assert_eq!(e["code"], "SESSION_EXITED");

    // a program that cannot start
    let e = model
        .err(
            "terminal_open",
            json!({ "command": ["/nonexistent/program"] }),
        )
        .await;
    assert_eq!(e["code"], "SPAWN_FAILED");

    model.end().await;
    other.end().await;
    session_is_gone(opened["pid"].as_i64().unwrap()).await;
}
