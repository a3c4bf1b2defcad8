//! The background-work contract, in-process: `bash`, `terminal_send` and
//! `subagent` with `run_in_background` in one job registry, read with
//! `job_output`, listed with `job_list`, stopped with `job_kill`, each
//! settle announced — as `dsh demo jobs` plays it, over real processes.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::collections::BTreeMap;

use common::{Model, runtime, session_dir, session_is_gone};
use pretty_assertions::assert_eq;
use serde_json::{Value, json};
use tools_catalog::{Settings, SubagentSettings};

/// The stand-in for a coding agent (no real one is installed here): it
/// prints a first line, then its answer.
const STAND_IN_AGENT: &str = r#"import sys
print("agent: task:", sys.argv[1], flush=True)
print("agent: done, 1 finding", flush=True)
"#;

/// A watch loop that never ends by itself.
const WATCH_LOOP: &str = "i=0; while sleep 0.2; do i=$((i+1)); echo \"watch: rebuild $i ok\"; done";

/// A job id is `kind-N`.
#[track_caller]
fn assert_id(id: &str, kind: &str) {
    let n = id
        .strip_prefix(kind)
        .and_then(|rest| rest.strip_prefix('-'));
    assert!(
        n.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())),
        "{id:?} is not a {kind} job id"
    );
}

/// The output of background job `id`, read with a server-side wait
/// (`since`/`next`) until it has ended.
async fn settled(model: &Model, id: &str) -> Value {
    let mut since = 0;
    let mut output = String::new();
    loop {
        let r = model
            .ok(
                "job_output",
                json!({ "job_id": id, "since": since, "wait_ms": 10000 }),
            )
            .await;
        output.push_str(r["output"].as_str().unwrap());
        since = r["next"].as_u64().expect("job_output reports `next`");
        if r["status"] != "running" {
            let mut r = r;
            r["output"] = json!(output);
            return r;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_kinds_of_background_work_share_one_job_list() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let (_dir, cwd) = session_dir();
    let agent = cwd.join("stand-in-agent.py");
    std::fs::write(&agent, STAND_IN_AGENT).unwrap();
    let settings = Settings {
        subagent: Some(SubagentSettings {
            command: vec![
                "python3".to_owned(),
                agent.display().to_string(),
                "{prompt}".to_owned(),
            ],
            timeout_ms: Some(60_000),
        }),
        ..Settings::default()
    };
    let rt = runtime();
    let model = Model::new(rt.clone(), "jobs", &cwd, &settings);
    let mut events = rt.jobs.subscribe();

    // 1. a slow test run with bash, in the background
    let started = model
        .reply(
            "bash",
            json!({
                "command": "for t in parse mean; do echo \"test_$t ... ok\"; done; echo '2 passed'; exit 3",
                "run_in_background": true
            }),
        )
        .await;
    let bash = started.structured["job_id"].as_str().unwrap().to_owned();
    assert_id(&bash, "bash");
    assert!(started.text.contains(&bash), "{}", started.text);

    // 2. a watch loop in a terminal, sent in the background
    let opened = model.ok("terminal_open", json!({})).await;
    let terminal = opened["id"].as_str().unwrap().to_owned();
    let watch = model
        .ok(
            "terminal_send",
            json!({ "id": terminal, "text": WATCH_LOOP, "run_in_background": true }),
        )
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_id(&watch, "pty-send");

    // 3. a subagent, in the background
    let subagent = model
        .ok(
            "subagent",
            json!({ "prompt": "find the bug in mean()", "run_in_background": true }),
        )
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_id(&subagent, "subagent");

    // 4. one list for all three kinds, oldest first
    let listed = model.ok("job_list", json!({})).await;
    let kinds: Vec<(&str, &str)> = listed["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| (j["id"].as_str().unwrap(), j["kind"].as_str().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        [
            (bash.as_str(), "bash"),
            (watch.as_str(), "pty-send"),
            (subagent.as_str(), "subagent")
        ]
    );

    // 5. follow the watch loop: job_output waits for new output
    let mut since = 0;
    let mut followed = String::new();
    while !followed.contains("watch: rebuild 2 ok\n") {
        let r = model
            .ok(
                "job_output",
                json!({ "job_id": watch, "since": since, "wait_ms": 10000 }),
            )
            .await;
        assert_eq!(r["status"], "running", "{r}");
        followed.push_str(r["output"].as_str().unwrap());
        since = r["next"].as_u64().unwrap();
    }
    assert!(
        followed.starts_with("watch: rebuild 1 ok\n"),
        "{followed:?}"
    );
    assert!(
        !followed.contains("while sleep"),
        "the echo of the send is left out"
    );

    // 6. the terminal is busy until the send is stopped; then it is free
    let e = model
        .err("terminal_send", json!({ "id": terminal, "text": "echo x" }))
        .await;
    assert_eq!(e["code"], "SEND_ACTIVE");
    let killed = model.ok("job_kill", json!({ "job_id": watch })).await;
    assert_eq!(killed, json!({ "outcome": "killed", "status": "killed" }));
    let again = model.ok("job_kill", json!({ "job_id": watch })).await;
    assert_eq!(
        again,
        json!({ "outcome": "already_finished", "status": "killed" })
    );
    let r = model
        .ok(
            "terminal_send",
            json!({ "id": terminal, "text": "echo the terminal is free again" }),
        )
        .await;
    assert!(
        r["output"]
            .as_str()
            .unwrap()
            .ends_with("the terminal is free again\n"),
        "{r}"
    );

    // 7. the test run and the subagent end with their output and codes
    let done = settled(&model, &bash).await;
    assert_eq!(
        (&done["status"], &done["exit_code"], &done["output"]),
        (
            &json!("completed"),
            &json!(3),
            &json!("test_parse ... ok\ntest_mean ... ok\n2 passed\n")
        )
    );
    let answered = settled(&model, &subagent).await;
    assert_eq!(
        (&answered["status"], &answered["output"]),
        (
            &json!("completed"),
            &json!("agent: task: find the bug in mean()\nagent: done, 1 finding\n")
        )
    );

    // 8. each settle was announced once, naming how to read the output
    let mut notices = BTreeMap::new();
    while notices.len() < 3 {
        let event = tokio::time::timeout(test_support::HANG, events.recv())
            .await
            .expect("a settle notification")
            .unwrap();
        let message = tools_catalog::settled_job_message(&event.job);
        assert!(
            message.contains(&format!("job_output {{\"job_id\": \"{}\"}}", event.job.id)),
            "{message}"
        );
        notices.insert(event.job.id.clone(), event.job.status.as_str().to_owned());
    }
    let want: BTreeMap<String, String> = [
        (bash.clone(), "completed".to_owned()),
        (watch.clone(), "killed".to_owned()),
        (subagent.clone(), "completed".to_owned()),
    ]
    .into_iter()
    .collect();
    assert_eq!(notices, want);

    // 9. the final list, and a filter by status
    let statuses: BTreeMap<String, String> = model.ok("job_list", json!({})).await["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| {
            (
                j["id"].as_str().unwrap().to_owned(),
                j["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(statuses, want);
    let killed_only = model.ok("job_list", json!({ "status": "killed" })).await;
    assert_eq!(killed_only["jobs"].as_array().unwrap().len(), 1);
    assert_eq!(killed_only["jobs"][0]["id"], watch.as_str());

    // 10. close the terminal; nothing of it is left
    let closed = model.ok("terminal_close", json!({ "id": terminal })).await;
    assert_eq!(closed["outcome"], "closed");
    session_is_gone(opened["pid"].as_i64().unwrap()).await;
    model.end().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_errors_carry_their_stable_codes() {
    let (_dir, cwd) = session_dir();
    let rt = runtime();
    let model = Model::new(rt.clone(), "jobs-errors", &cwd, &Settings::default());
    let other = Model::new(rt, "someone-else", &cwd, &Settings::default());

    let e = model
        .err("job_output", json!({ "job_id": "bash-99" }))
        .await;
    assert_eq!(
        (&e["code"], &e["retryable"]),
        (&json!("NO_JOB"), &json!(false))
    );
    let e = model.err("job_kill", json!({ "job_id": "bash-99" })).await;
    assert_eq!(e["code"], "NO_JOB");
    let e = model.err("job_output", json!({})).await;
    assert_eq!(
        e,
        json!({ "code": "INVALID_ARGUMENT", "message": "missing field `job_id`", "retryable": false })
    );

    // another owner's job is not yours to read or kill
    let job = model
        .ok(
            "bash",
            json!({ "command": "echo $$; sleep 300", "run_in_background": true }),
        )
        .await["job_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let first = model
        .ok("job_output", json!({ "job_id": job, "wait_ms": 10000 }))
        .await;
    assert_eq!(first["status"], "running");
    let sid: i64 = first["output"].as_str().unwrap().trim().parse().unwrap();
    let e = other.err("job_output", json!({ "job_id": job })).await;
    assert_eq!(e["code"], "FOREIGN_JOB");
    let e = other.err("job_kill", json!({ "job_id": job })).await;
    assert_eq!(e["code"], "FOREIGN_JOB");
    assert_eq!(other.ok("job_list", json!({})).await, json!({ "jobs": [] }));

    // without a configured agent there is no subagent
    let e = model.err("subagent", json!({ "prompt": "anything" })).await;
    assert_eq!(e["code"], "SUBAGENT_UNAVAILABLE");

    // ending the owner (its connection closed) ends its running job
    model.end().await;
    session_is_gone(sid).await;
    other.end().await;
}
