//! The JSON of `/api/live`: a connection's row is the one `dsh ps --json`
//! prints (the wire's `snapshot`), remote hosts only when there are any.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use daemon_wire::snapshot::{ConnectionRow, DetachedRow, JobRow, TerminalRow};
use pretty_assertions::assert_eq;
use ui::{LiveView, RemoteHost};

/// `/api/live` keeps the field names and values its readers know (a
/// connection's are those of `dsh ps --json`): one connection with a
/// terminal, a job and its detachment, and a remote host; `remotes`
/// only when there is one; no approvals.
#[test]
fn the_live_list_as_json_keeps_its_shape() {
    let connection = ConnectionRow {
        id: 3,
        client: Some("claude-code".into()),
        pid: Some(42),
        cwd: Some("/src/app".into()),
        session_id: Some("6f1c2d3e-1111-4222-8333-944455556666".into()),
        workspace_id: Some("ws-1".into()),
        workspace: Some("app".into()),
        preset: "full".into(),
        age_s: 61,
        host: None,
        detached: Some(DetachedRow {
            for_s: 5,
            left_s: 895,
        }),
        terminals: vec![TerminalRow {
            id: "pty-1".into(),
            name: Some("repl".into()),
            command: "python3 -q".into(),
            status: "running".into(),
            active_send: true,
            idle_s: 2,
        }],
        jobs: vec![JobRow {
            id: "bash-2".into(),
            kind: "bash".into(),
            status: "failed".into(),
            label: "make".into(),
            exit_code: Some(2),
            detail: None,
        }],
    };
    let mut view = LiveView {
        connections: vec![connection.clone()],
        remotes: Vec::new(),
        approvals: Vec::new(),
    };
    let row = serde_json::json!({
        "id": 3, "client": "claude-code", "pid": 42, "cwd": "/src/app",
        "session_id": "6f1c2d3e-1111-4222-8333-944455556666", "workspace_id": "ws-1",
        "workspace": "app", "preset": "full", "age_s": 61,
        "detached": {"for_s": 5, "left_s": 895},
        "terminals": [{"id": "pty-1", "name": "repl", "command": "python3 -q",
            "status": "running", "active_send": true, "idle_s": 2}],
        "jobs": [{"id": "bash-2", "kind": "bash", "status": "failed", "label": "make",
            "exit_code": 2, "detail": null}],
    });
    assert_eq!(
        serde_json::to_value(&view).ok(),
        Some(serde_json::json!({ "connections": [row.clone()] }))
    );
    view.connections.clear();
    view.remotes.push(RemoteHost {
        host: "devbox".into(),
        target: "ssh://devbox/src".into(),
        bridge_pid: 7,
        connections: vec![connection],
        answered: true,
        error: None,
    });
    assert_eq!(
        serde_json::to_value(&view).ok(),
        Some(serde_json::json!({
            "connections": [],
            "remotes": [{"host": "devbox", "target": "ssh://devbox/src", "bridge_pid": 7,
                "answered": true, "error": null, "connections": [row]}],
        }))
    );
}
