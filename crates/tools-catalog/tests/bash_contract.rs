//! The `bash` tool's contract, in-process: one-shot commands run by the
//! real command producer, their results (output in order, exit code,
//! timeouts that end the whole tree, head+tail truncation) and the errors
//! a model's mistakes get.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use common::{Model, runtime, session_dir, session_is_gone};
use pretty_assertions::assert_eq;
use serde_json::json;
use tools_catalog::Code;
use tools_catalog::Settings;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_one_shot_command_reports_its_output_and_exit_code() {
    let (_dir, cwd) = session_dir();
    let model = Model::new(runtime(), "bash", &cwd, &Settings::default());

    let reply = model
        .reply("bash", json!({ "command": "echo hello" }))
        .await;
    let r = &reply.structured;
    assert_eq!(
        (
            &r["exit_code"],
            &r["output"],
            &r["timed_out"],
            &r["truncated"],
            &r["total_bytes"]
        ),
        (
            &json!(0),
            &json!("hello\n"),
            &json!(false),
            &json!(false),
            &json!(6)
        )
    );
    assert!(
        reply.text.starts_with("hello\n[exit 0 · "),
        "{}",
        reply.text
    );

    // a failing command is a result, not an error; stderr is in order
    let r = model
        .ok(
            "bash",
            json!({ "command": "echo out; echo err >&2; echo out2; exit 3" }),
        )
        .await;
    assert_eq!(
        (&r["exit_code"], &r["output"]),
        (&json!(3), &json!("out\nerr\nout2\n"))
    );

    // it runs in the session's directory, or the `cwd` given; stdin is closed
    std::fs::create_dir(cwd.join("sub")).unwrap();
    let r = model
        .ok("bash", json!({ "command": "pwd; cat; echo rc=$?" }))
        .await;
    assert_eq!(r["output"], format!("{}\nrc=0\n", cwd.display()));
    let r = model
        .ok("bash", json!({ "command": "pwd", "cwd": "sub" }))
        .await;
    assert_eq!(r["output"], format!("{}\n", cwd.join("sub").display()));

    // a timeout ends the whole tree, background children included (the
    // deadline leaves bash time to print its pid under load)
    let r = model
        .ok(
            "bash",
            json!({ "command": "echo $$; sleep 300 & sleep 301 & sleep 30", "timeout_ms": 3000 }),
        )
        .await;
    assert_eq!(
        (&r["timed_out"], &r["exit_code"]),
        (&json!(true), &json!(null))
    );
    let sid: i64 = r["output"].as_str().unwrap().trim().parse().unwrap();
    session_is_gone(sid).await;

    // a huge output keeps its head and tail, and the counts are exact
    let r = model
        .ok(
            "bash",
            json!({ "command": "head -c 1000000 /dev/zero | tr '\\0' a; echo; echo END" }),
        )
        .await;
    assert_eq!(
        (&r["truncated"], &r["total_bytes"]),
        (&json!(true), &json!(1_000_005))
    );
    let out = r["output"].as_str().unwrap();
    assert!(
        out.len() <= Settings::default().max_result_bytes + 100,
        "{}",
        out.len()
    );
    assert!(out.starts_with("aaaa") && out.ends_with("a\nEND\n"));
    assert!(out.contains(" bytes omitted …]"), "{}", &out[..200]);

    // an out-of-range limit is clamped, and the result says so
    let r = model
        .ok(
            "bash",
            json!({ "command": "echo hi", "timeout_ms": 9_000_000 }),
        )
        .await;
    assert_eq!(
        r["clamped"],
        json!({ "field": "timeout_ms", "from": 9_000_000, "to": 600_000 })
    );
    model.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_models_mistakes_get_invalid_argument_naming_the_field() {
    let (_dir, cwd) = session_dir();
    let model = Model::new(runtime(), "mistakes", &cwd, &Settings::default());

    let e = model.err("bash", json!({})).await;
    assert_eq!(
        e,
        json!({ "code": Code::InvalidArgument, "message": "missing field `command`", "retryable": false })
    );
    let e = model
        .err("bash", json!({ "command": "true", "timeout_ms": "soon" }))
        .await;
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert!(
        e["message"].as_str().unwrap().starts_with("timeout_ms: "),
        "{e}"
    );
    let e = model.err("bash", json!({ "command": 5 })).await;
    assert!(
        e["message"].as_str().unwrap().starts_with("command: "),
        "{e}"
    );
    let e = model
        .err("bash", json!({ "command": "true", "colour": "blue" }))
        .await;
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    assert!(e["message"].as_str().unwrap().contains("colour"), "{e}");
    let e = model
        .err(
            "bash",
            json!({ "command": "true", "cwd": cwd.join("nope").display().to_string() }),
        )
        .await;
    assert_eq!(e["code"], "INVALID_ARGUMENT");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.starts_with("cwd: ") && message.contains("nope"),
        "{e}"
    );
    model.end().await;
}
