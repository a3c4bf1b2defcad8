//! Ending a session: every member, escalating, verified, reported exactly.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use nix::sys::signal::Signal;
use pretty_assertions::assert_eq;
use process_tree::{Member, Step, Survivors};

mod common;
use common::session;

fn until(what: &str, check: impl FnMut() -> bool) {
    test_support::wait_until(what, check);
}

#[test]
fn ends_background_jobs_that_escape_the_process_group() {
    // `set -m` gives each background job its own process group, which is
    // exactly what `killpg` on the leader would miss.
    let (leader, _) =
        session("set -m; sleep 300 & sleep 301 & trap '' TERM; echo ready; sleep 302");
    let sid = leader.pid();
    // bash execs the last command: three sleeps, each in its own group.
    let commands = || {
        let mut c: Vec<String> = process_tree::live_session_members(sid)
            .iter()
            .map(|p| process_tree::command_line(p.pid))
            .collect();
        c.sort();
        c
    };
    until("the session forms", || {
        commands() == ["sleep 300", "sleep 301", "sleep 302"]
    });
    let groups: std::collections::BTreeSet<i32> = process_tree::live_session_members(sid)
        .iter()
        .map(|p| p.pgid)
        .collect();
    assert!(
        groups.len() >= 3,
        "expected separate process groups, got {groups:?}"
    );
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert_eq!(report.signals_sent, vec![Signal::SIGTERM, Signal::SIGKILL]);
    assert_eq!(report.processes_seen, 3);
    assert_eq!(report.ended.len(), 3, "{:?}", report.ended);
    assert!(
        report.ended.iter().any(|m| m.command == "sleep 301"),
        "{:?}",
        report.ended
    );
    assert_eq!(process_tree::live_session_members(sid), vec![]);
    assert!(leader.reap().is_some());
}

#[test]
fn survivors_are_named_with_their_pid_and_command() {
    let (leader, pid) = session("trap '' TERM; sleep 303 & echo $!; wait");
    let sleeper: i32 = pid.parse().unwrap();
    let sid = leader.pid();
    until("the sleeper runs sleep", || {
        process_tree::command_line(sleeper) == "sleep 303"
    });
    // `sleep` inherits the ignored SIGTERM (ignored signals stay ignored
    // across exec). The step list stops at SIGTERM.
    let steps = [Step {
        signal: Signal::SIGTERM,
        grace: Duration::from_millis(200),
    }];
    let survivors = leader.end_session(&steps).unwrap_err();
    let mut names = survivors.survivors.clone();
    names.sort_by_key(|m| m.pid);
    assert_eq!(
        Survivors {
            sid,
            last_signal: Some(Signal::SIGTERM),
            survivors: names.clone(),
        },
        survivors_sorted(survivors)
    );
    assert!(
        names.contains(&Member {
            pid: sleeper,
            command: "sleep 303".to_owned()
        }),
        "{names:?}"
    );
    let text = survivors_sorted(leader.end_session(&steps).unwrap_err()).to_string();
    assert!(
        text.starts_with(&format!(
            "2 process(es) of session {sid} survived SIGTERM: pid "
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("pid {sleeper} (sleep 303)")),
        "{text}"
    );
    // SIGKILL does end them; the report counts exactly the two.
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert_eq!(report.ended.len(), 2);
    assert!(leader.reap().is_some());
}

fn survivors_sorted(mut s: Survivors) -> Survivors {
    s.survivors.sort_by_key(|m| m.pid);
    s
}

#[test]
fn a_process_is_not_signalled_when_its_pid_names_another_process() {
    let (leader, _) = session("echo ready; exec sleep 304");
    let sid = leader.pid();
    let seen = process_tree::process_info(sid).unwrap();
    // The same pid with another start time: what a scan would have seen
    // before the pid was reused.
    let stale = process_tree::ProcessInfo {
        start_time: seen.start_time.saturating_sub(1),
        ..seen
    };
    assert!(!process_tree::signal_process(&stale, Signal::SIGKILL));
    assert!(process_tree::process_info(sid).is_some_and(|p| !p.is_zombie()));
    assert!(process_tree::signal_process(&seen, Signal::SIGKILL));
    assert_eq!(leader.wait_exit().unwrap().signal(), Some(9));
    assert!(leader.reap().is_some());
}

use std::os::unix::process::ExitStatusExt;

#[test]
fn an_empty_session_costs_one_scan_and_reports_nothing_ended() {
    let (leader, _) = session("echo ready");
    leader.wait_exit().unwrap();
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert_eq!(report, process_tree::EndReport::default());
    assert_eq!(leader.reap().and_then(|s| s.code()), Some(0));
}
