//! Finding the members of a session: the quick pass over `/proc` finds
//! exactly what reading every process's `stat` finds.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeSet;

use pretty_assertions::assert_eq;

mod common;
use common::session;

#[test]
fn the_session_scan_finds_what_reading_every_stat_finds() {
    // A member in a process group of its own, a zombie member, and a
    // process that left for a session of its own. The zombie is a child
    // that exits only once its parent has become `sleep`, which never
    // waits: had it exited first, its parent (still bash) could have
    // reaped it.
    let zombie = r#"bash -c 'until read -r c < /proc/$PPID/comm && [ "$c" = sleep ]; do :; done'"#;
    let (leader, line) = session(&format!(
        "set -m; sleep 310 & ({zombie} & exec sleep 311) & set +m; setsid sleep 312 & echo $!; wait"
    ));
    let sid = leader.pid();
    let left: i32 = line.parse().unwrap();
    let by_stat = || -> BTreeSet<(i32, char)> {
        process_tree::all_processes()
            .iter()
            .filter(|p| p.sid == sid)
            .map(|p| (p.pid, if p.is_zombie() { 'Z' } else { 'L' }))
            .collect()
    };
    let by_scan = || -> BTreeSet<(i32, char)> {
        process_tree::session_members(sid)
            .iter()
            .map(|p| (p.pid, if p.is_zombie() { 'Z' } else { 'L' }))
            .collect()
    };
    // What was last seen, for the failure message.
    let seen = std::sync::Mutex::new(String::new());
    let formed = std::panic::catch_unwind(|| {
        test_support::wait_until("the session forms, with its zombie", || {
            let members = by_stat();
            let outside = process_tree::process_info(left);
            *seen.lock().unwrap() = format!("members {members:?}, the one that left: {outside:?}");
            members.iter().filter(|(_, s)| *s == 'Z').count() == 1
                && members.iter().filter(|(_, s)| *s == 'L').count() == 3
                && outside.is_some_and(|p| p.sid == left)
        });
    });
    assert!(
        formed.is_ok(),
        "the session never formed as expected; last seen: {}",
        seen.lock().unwrap()
    );
    let members = by_scan();
    assert_eq!(members, by_stat());
    assert!(!members.iter().any(|(pid, _)| *pid == left), "{members:?}");
    assert_eq!(
        process_tree::live_session_members(sid).len(),
        3,
        "{members:?}"
    );
    leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert_eq!(process_tree::live_session_members(sid), vec![]);
    let outside = process_tree::process_info(left).unwrap();
    process_tree::signal_process(&outside, nix::sys::signal::Signal::SIGKILL);
    assert!(leader.reap().is_some());
}

#[test]
fn a_session_is_over_once_its_leader_exited_and_no_member_lives() {
    // The leader prints its background child's pid and exits; the child
    // keeps the session alive until it is ended.
    let (leader, line) = session("sleep 320 & echo $!");
    let sid = leader.pid();
    let left: i32 = line.parse().unwrap();
    leader.wait_exit().unwrap();
    test_support::wait_until("the leader is a zombie", || {
        process_tree::process_info(sid).is_some_and(|p| p.is_zombie())
    });
    assert!(process_tree::process_info(left).is_some_and(|p| p.sid == sid));
    assert!(!leader.session_is_over());
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert_eq!(report.ended.len(), 1, "{report:?}");
    assert!(leader.session_is_over());
    assert!(leader.reap().is_some());
    assert!(leader.session_is_over());
}

#[test]
fn a_running_leader_is_not_over() {
    let (leader, _) = session("echo ready; exec sleep 321");
    assert!(!leader.session_is_over());
    leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert!(leader.session_is_over());
    assert!(leader.reap().is_some());
}
