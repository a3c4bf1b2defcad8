//! Nothing of a host's sessions outlives the host: its leaders die with it
//! (the parent-death signal, armed on a thread that outlives the spawning
//! one) and the guardian ends the rest of each session, pid-reuse-safe.
//!
//! The test binary plays three parts, chosen by an environment variable:
//! the test itself, a host (which starts a guardian and sessions, then
//! waits to be killed), and the guardian.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::process::Command;
use std::time::Duration;

mod common;
use common::session;

const ROLE: &str = "PROCESS_TREE_GUARDIAN_TEST_ROLE";
const TEST: &str = "a_sigkilled_host_leaves_nothing_of_its_sessions";

fn until(what: &str, check: impl FnMut() -> bool) {
    test_support::wait_until(what, check);
}

fn this_test(role: &str) -> Command {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, role);
    command
}

/// The host: starts a guardian, then two sessions — one spawned from a
/// thread that exits at once — and prints every pid, then waits forever.
fn host() -> ! {
    process_tree::start_guardian(this_test("guardian")).unwrap();
    let script = "sleep 1000 & echo $!; set -m; sleep 1001 & echo $!; exec sleep 1002";
    let spawn = move || {
        let command = process_tree::SessionCommand::new("bash")
            .args(["-c", script])
            .stdout(process_tree::ChildIo::Piped);
        let spawned = process_tree::spawn_session(command).unwrap();
        let mut lines = BufReader::new(spawned.stdout.unwrap()).lines();
        let a = lines.next().unwrap().unwrap();
        let b = lines.next().unwrap().unwrap();
        (spawned.leader, a, b)
    };
    let (first, a1, b1) = spawn();
    // The parent-death signal must not fire when this short-lived thread
    // exits: the fork happened on the spawner thread.
    let (second, a2, b2) = std::thread::spawn(spawn).join().unwrap();
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "\nPIDS {} {a1} {b1} {} {a2} {b2}",
        first.pid(),
        second.pid()
    )
    .unwrap();
    out.flush().unwrap();
    drop(out);
    loop {
        // sleep-ok: this child only waits to be killed with its sessions
        std::thread::sleep(Duration::from_secs(60));
    }
}

#[test]
fn a_sigkilled_host_leaves_nothing_of_its_sessions() {
    match std::env::var(ROLE).as_deref() {
        Ok("host") => host(),
        Ok("guardian") => {
            let report = process_tree::serve_guardian(std::io::stdin());
            eprintln!("guardian: {report:?}");
            std::process::exit(0);
        }
        _ => {}
    }
    process_tree::become_subreaper().unwrap();
    // Held by a leader: the other tests of this binary reap every zombie
    // child no leader holds, and the host's exit status is this test's.
    let command = process_tree::SessionCommand::new(std::env::current_exe().unwrap())
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(ROLE, "host")
        .stdout(process_tree::ChildIo::Piped);
    let host = process_tree::spawn_session(command).unwrap();
    let mut line = String::new();
    let mut reader = BufReader::new(host.stdout.unwrap());
    loop {
        line.clear();
        assert_ne!(
            reader.read_line(&mut line).unwrap(),
            0,
            "the host printed no pids"
        );
        // libtest's own "test … " may precede it on the same line.
        if let Some(at) = line.find("PIDS ") {
            line.drain(..at + 5);
            break;
        }
    }
    let pids: Vec<i32> = line
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 6);
    let alive = |pid: &i32| process_tree::process_info(*pid).is_some_and(|p| !p.is_zombie());
    until("every process runs", || pids.iter().all(alive));
    let start_times: Vec<u64> = pids
        .iter()
        .map(|p| process_tree::process_info(*p).unwrap().start_time)
        .collect();
    // The second leader outlived the thread that asked for it.
    assert!(alive(&pids[3]));

    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(host.leader.pid()),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    host.leader.wait_exit().unwrap();
    assert!(host.leader.reap().is_some());
    let same_process_alive = |(pid, start): (&i32, &u64)| {
        process_tree::process_info(*pid).is_some_and(|p| !p.is_zombie() && p.start_time == *start)
    };
    until("every process of both sessions is gone", || {
        process_tree::reap_adopted();
        !pids.iter().zip(start_times.iter()).any(same_process_alive)
    });
}

#[test]
fn after_the_host_died_a_younger_process_in_a_reused_session_is_spared() {
    let (leader, line) = session("sleep 1003 & echo $!");
    let sleeper: i32 = line.parse().unwrap();
    let sid = leader.pid();
    leader.wait_exit().unwrap();
    // The leader is gone (reaped, as init does after the host died); its
    // member keeps the session id taken.
    let known: BTreeMap<i32, u64> = [(sid, leader.start_time())].into();
    assert!(leader.reap().is_some());
    assert!(process_tree::process_info(sid).is_none());
    let member = process_tree::process_info(sleeper).unwrap();
    assert_eq!(member.sid, sid);
    // Started after end-of-file: someone else's, spared.
    let spared = process_tree::guardian::end_orphaned_sessions(&known, member.start_time - 1);
    assert_eq!((spared.ended, spared.survivors.len()), (0, 0));
    assert!(process_tree::process_info(sleeper).is_some_and(|p| !p.is_zombie()));
    // Started before end-of-file: ours, ended.
    let ended = process_tree::guardian::end_orphaned_sessions(&known, member.start_time);
    assert_eq!((ended.ended, ended.survivors.len()), (1, 0));
}

#[test]
fn a_new_session_led_by_a_reused_pid_is_spared_even_when_it_started_before_eof() {
    let (leader, line) = session("sleep 1004 & echo $!; exec sleep 1005");
    let sleeper: i32 = line.parse().unwrap();
    let sid = leader.pid();
    until("the leader runs sleep", || {
        process_tree::command_line(sid) == "sleep 1005"
    });
    // The guardian knew an older process with this pid: its session had
    // emptied (a pid is not reused while any process is in its session),
    // so this one, though it started before end-of-file, is someone
    // else's.
    let stale: BTreeMap<i32, u64> = [(sid, leader.start_time() - 1)].into();
    let eof = process_tree::ticks_since_boot().unwrap();
    let report = process_tree::guardian::end_orphaned_sessions(&stale, eof);
    let alive = |pid: i32| process_tree::process_info(pid).is_some_and(|p| !p.is_zombie());
    let spared = (alive(sid), alive(sleeper));
    let ended = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    assert!(leader.reap().is_some());
    assert_eq!((report.ended, report.survivors.len()), (0, 0));
    assert_eq!(spared, (true, true));
    assert_eq!(ended.ended.len(), 2);
}
