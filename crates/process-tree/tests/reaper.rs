//! The orphan reaper reaps every zombie child nobody waits for — orphans
//! that called `setsid` included — and never one a leader still holds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};

mod common;
use common::session;

/// The reaper reaps every unheld zombie child of this process, so tests
/// that run it take turns: one test's `reap_adopted` would otherwise reap
/// another's plain `std` child or count its orphan.
static SERIAL: Mutex<()> = Mutex::new(());

fn one_at_a_time() -> MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Polls `/proc` (bounded) until `check` holds.
fn until(what: &str, check: impl FnMut() -> bool) {
    test_support::wait_until(what, check);
}

fn is_our_zombie(pid: i32) -> bool {
    process_tree::process_info(pid)
        .is_some_and(|p| p.is_zombie() && p.ppid == std::process::id() as i32)
}

#[test]
fn an_orphan_that_called_setsid_is_reaped() {
    let _turn = one_at_a_time();
    process_tree::become_subreaper().unwrap();
    // The shell starts a grandchild in a session of its own (like
    // `ssh-agent` or `(setsid cmd &)`) and exits; the grandchild, now our
    // adopted orphan, waits for a line on its stdin, then exits.
    let mut shell = Command::new("bash")
        .args([
            "-c",
            r#"setsid bash -c 'echo $$; read -r line' <&0 & echo started"#,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Taken now: `wait` would close it, and the grandchild would read EOF.
    let mut stdin = shell.stdin.take().unwrap();
    let mut lines = BufReader::new(shell.stdout.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let second = lines.next().unwrap().unwrap();
    let orphan: i32 = if first == "started" { &second } else { &first }
        .parse()
        .unwrap();
    shell.wait().unwrap();
    until("the orphan is adopted", || {
        process_tree::process_info(orphan).is_some_and(|p| p.ppid == std::process::id() as i32)
    });
    let info = process_tree::process_info(orphan).unwrap();
    assert_eq!((info.pid, info.sid), (orphan, orphan), "a session leader");
    // End it: the only remaining holder of the pipe's write end is us.
    writeln!(stdin, "bye").unwrap();
    drop(stdin);
    until("the orphan exits", || is_our_zombie(orphan));
    let reaped = process_tree::reap_adopted();
    assert!(reaped >= 1, "reaped {reaped}");
    assert_eq!(
        process_tree::process_info(orphan),
        None,
        "the orphan session leader is still a zombie"
    );
}

#[test]
fn a_plain_child_in_our_own_session_is_left_to_its_waiter() {
    let _turn = one_at_a_time();
    process_tree::become_subreaper().unwrap();
    let mut child = Command::new("sh").args(["-c", "exit 3"]).spawn().unwrap();
    let pid = child.id() as i32;
    until("the child exits", || is_our_zombie(pid));
    process_tree::reap_adopted();
    assert!(is_our_zombie(pid), "the orphan reaper took a plain child");
    assert_eq!(child.wait().unwrap().code(), Some(3));
}

#[test]
fn a_held_leader_keeps_its_exit_status_until_it_is_reaped() {
    let _turn = one_at_a_time();
    process_tree::become_subreaper().unwrap();
    let command = process_tree::SessionCommand::new("bash").args(["-c", "exit 7"]);
    let spawned = process_tree::spawn_session(command).unwrap();
    let leader = spawned.leader;
    let status = leader.wait_exit().unwrap();
    assert_eq!(status.code(), Some(7));
    // Seen exited, but not reaped: the pid (the session id) stays ours.
    assert!(is_our_zombie(leader.pid()));
    process_tree::reap_adopted();
    assert!(
        is_our_zombie(leader.pid()),
        "the orphan reaper took a held leader"
    );
    assert_eq!(leader.try_exit().and_then(|s| s.code()), Some(7));
    assert_eq!(leader.reap().and_then(|s| s.code()), Some(7));
    assert_eq!(process_tree::process_info(leader.pid()), None);
    // Reaped: nothing is ever signalled in its name again.
    assert_eq!(
        leader.end_session(process_tree::TERM_THEN_KILL),
        Ok(process_tree::EndReport::default())
    );
}

#[test]
fn a_dropped_leader_ends_its_session_and_is_reaped() {
    let _turn = one_at_a_time();
    let (leader, line) = session("sleep 300 & echo $!; exec sleep 301");
    let background: i32 = line.parse().unwrap();
    let sid = leader.pid();
    until("the session forms", || {
        process_tree::live_session_members(sid).len() == 2
    });
    drop(leader);
    until("the session is gone", || {
        process_tree::live_session_members(sid).is_empty()
    });
    until("both are reaped", || {
        process_tree::reap_adopted();
        process_tree::process_info(sid).is_none()
            && process_tree::process_info(background).is_none()
    });
}
