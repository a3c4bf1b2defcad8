//! What a child starts with, whatever the host was started with.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Read;
use std::process::{Command, Stdio};

/// The signals a process ignores, from its `/proc` status.
fn ignored(status: &str) -> u64 {
    let mask = status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .expect("a SigIgn line");
    u64::from_str_radix(mask.trim(), 16).unwrap()
}

fn bit(signal: libc::c_int) -> u64 {
    1 << (signal - 1)
}

#[test]
fn a_child_does_not_inherit_signals_the_host_ignores() {
    // As when the host runs under `nohup`, or as a background job of a
    // shell without job control. This test binary holds only this test:
    // the dispositions are the process's.
    let inherited = [libc::SIGINT, libc::SIGQUIT, libc::SIGHUP, libc::SIGTERM];
    for signal in inherited {
        // SAFETY: plain syscall.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let mut plain = Command::new("cat")
        .arg("/proc/self/status")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut status = String::new();
    plain
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut status)
        .unwrap();
    plain.wait().unwrap();
    for signal in inherited {
        assert_ne!(
            ignored(&status) & bit(signal),
            0,
            "a plain spawn inherits ignored signal {signal}: the check below would prove nothing"
        );
    }

    let command = process_tree::SessionCommand::new("cat")
        .arg("/proc/self/status")
        .stdout(process_tree::ChildIo::Piped);
    let spawned = process_tree::spawn_session(command).unwrap();
    let mut status = String::new();
    spawned.stdout.unwrap().read_to_string(&mut status).unwrap();
    spawned.leader.wait_exit().unwrap();
    assert!(spawned.leader.reap().is_some());
    // Signals 32 and 33 are the C library's own; it refuses to change
    // them, in the host as in the child.
    let reserved = bit(32) | bit(33);
    assert_eq!(ignored(&status) & !reserved, 0, "{status}");
}
