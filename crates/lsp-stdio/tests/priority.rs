//! Language servers index in the background at a lower priority, so the
//! programs terminals wait on win the core from them.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use lsp_stdio::{SERVER_NICE, ServerConfig, StdioLspProvider};

/// The nice value of `pid` (field 19 of /proc/PID/stat).
fn nice_of(pid: i32) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The command name may hold spaces: count fields after its `)`.
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    after.split_whitespace().nth(16).unwrap().parse().unwrap()
}

#[test]
fn a_language_server_runs_below_the_host_s_priority() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let config = ServerConfig {
        root_markers: vec!["stub.toml".into()],
        ..stub_config(None)
    };
    std::fs::write(dir.path().join("stub.toml"), "").unwrap();
    let provider = StdioLspProvider::new(config, options());
    RT.block_on(provider.start(dir.path(), &lsp_seam::SandboxTag::default()))
        .unwrap();
    let pid = provider.servers()[0].pid;
    // A host already lower than that (a niced test run) cannot raise it.
    let host = nice_of(std::process::id() as i32);
    assert_eq!(nice_of(pid), SERVER_NICE.max(host));
}
