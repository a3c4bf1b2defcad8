//! Ending a language server's session never reaches a process that reused
//! the pid of a server that already died.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use lsp_stdio::{ServerConfig, StdioLspProvider};

#[test]
fn dropping_a_dead_server_spares_a_process_that_took_its_pid() {
    // Needs root (CAP_SYS_ADMIN) to make a private pid namespace, where the
    // test can ask for a given pid (ns_last_pid).
    if !test_support::needs(&["unshare", "python3"])
        || !test_support::needs_root("a private pid namespace")
    {
        return;
    }
    if !process_tree::testing::run_in_private_pid_namespace(
        "dropping_a_dead_server_spares_a_process_that_took_its_pid",
    ) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let config = ServerConfig {
        root_markers: vec!["stub.toml".into()],
        ..stub_config(Some(&log))
    };
    // A project the server is started for eagerly.
    std::fs::write(dir.path().join("stub.toml"), "").unwrap();
    let provider = StdioLspProvider::new(config, options());
    RT.block_on(provider.start(dir.path(), &lsp_seam::SandboxTag::default()))
        .unwrap();
    let pid = provider.servers()[0].pid;
    // The server dies on its own (as a crash would).
    let info = process_tree::process_info(pid).unwrap();
    assert!(process_tree::signal_process(
        &info,
        nix::sys::signal::Signal::SIGKILL
    ));
    test_support::wait_until("the server dies", || {
        process_tree::process_info(pid).is_none_or(|p| p.is_zombie())
    });
    // Give the client every chance to notice (and, before the fix, to reap).
    test_support::wait_until("the death is noticed", || provider.servers().is_empty());
    // Another program asks for that pid, as a session leader of its own.
    let mut other = process_tree::testing::fork_with_pid(pid, || {
        let mut c = std::process::Command::new("setsid");
        c.args(["sleep", "1000"]);
        c
    })
    .unwrap();
    let other_pid = other.id() as i32;
    test_support::wait_until("the other program runs", || {
        process_tree::command_line(other_pid) == "sleep 1000"
    });
    drop(provider);
    let spared = process_tree::process_info(other_pid).is_some_and(|p| !p.is_zombie());
    let _ = other.kill();
    let _ = other.wait();
    assert!(
        spared,
        "dropping the provider killed pid {other_pid}, which was not its server{}",
        if other_pid == pid {
            " (it had reused the pid)"
        } else {
            ""
        }
    );
    assert_ne!(
        other_pid, pid,
        "the dead server was reaped: its pid could be reused"
    );
}
