//! A session whose program runs in a PID namespace of its own: the
//! program sees itself inside (its own `/proc`), the leader exits as the
//! program did, what the program leaves is ended and counted by the host
//! (what left the session with `setsid` included) and the init with it,
//! and a SIGKILLed host with no guardian leaves nothing — the kernel ends
//! it.
//!
//! It has no libtest harness: a check SIGKILLs a host (this binary run
//! again in the host's role), and `main` runs each check in turn.
//! Making a PID namespace takes root or a user namespace that gives
//! `CAP_SYS_ADMIN`; where neither is at hand the checks say so and pass
//! only the part that still holds (the session runs without one).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Command, Stdio};
use std::time::Duration;

const ROLE: &str = "PROCESS_TREE_PIDNS_TEST_ROLE";

fn until(what: &str, check: impl FnMut() -> bool) {
    test_support::wait_until(what, check);
}

fn namespaced(script: &str) -> process_tree::Spawned {
    let command = process_tree::SessionCommand::new("sh")
        .args(["-c", script])
        .stdout(process_tree::ChildIo::Piped);
    // SAFETY: no entry step.
    let command = unsafe { command.pid_namespace(None) };
    process_tree::spawn_session(command).unwrap()
}

/// Whether this machine gives a PID namespace without a sandbox (root).
fn namespaces_here() -> bool {
    // SAFETY: plain system call.
    unsafe { libc::geteuid() == 0 }
}

fn the_program_runs_inside_and_the_leader_exits_as_it_did() {
    let spawned = namespaced("echo $$; cat /proc/1/comm; sleep 1000 >/dev/null & echo $!; exit 3");
    let mut out = String::new();
    let leader = spawned.leader;
    BufReader::new(spawned.stdout.unwrap())
        .read_to_string(&mut out)
        .unwrap();
    let status = leader.wait_exit().unwrap();
    assert_eq!(status.code(), Some(3), "{out}");
    let lines: Vec<&str> = out.lines().collect();
    if namespaces_here() {
        assert_ne!(spawned.program, leader.pid());
        // pid 1 is the init; the program is the first process after it.
        assert_eq!(lines.first(), Some(&"2"), "{out}");
        // Its own /proc, where pid 1 is the init, not the host's init.
        assert_eq!(lines.get(1).map(|l| l.trim()), Some("dsh-init"), "{out}");
        // What the program starts is numbered inside too.
        let background: i32 = lines.get(2).unwrap().parse().unwrap();
        assert!((3..100).contains(&background), "{out}");
    } else {
        assert_eq!(spawned.program, leader.pid());
    }
    // The background `sleep` outlives the program until the host ends
    // it, as without a namespace: it is counted, and then nothing is left.
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    let ended: Vec<&str> = report.ended.iter().map(|m| m.command.as_str()).collect();
    assert_eq!(ended, ["sleep 1000"], "{report:?}");
    assert!(leader.session_is_over());
    // Killed, not waited for: gone as soon as the kernel is done with it.
    until("the init to be gone", || inits() == 0);
    leader.reap();
}

fn a_program_ended_while_it_runs_is_counted_without_its_waiter() {
    let spawned = namespaced("exec sleep 1001");
    let leader = spawned.leader;
    until("the program to run sleep", || {
        std::fs::read_to_string(format!("/proc/{}/comm", spawned.program))
            .is_ok_and(|c| c.trim() == "sleep")
    });
    assert!(leader.try_exit().is_none());
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    // Only the program is the session's to end and count: the waiter,
    // dsh's own, is not one of its processes.
    let ended: Vec<&str> = report.ended.iter().map(|m| m.command.as_str()).collect();
    assert_eq!(ended, ["sleep 1001"], "{report:?}");
    until("the waiter to follow the program", || {
        leader.try_exit().is_some()
    });
    assert_eq!(leader.try_exit().unwrap().signal(), Some(libc::SIGTERM));
    until("the init to be gone", || inits() == 0);
    assert!(leader.reap().is_some());
}

/// The live namespace inits this process started.
fn inits() -> usize {
    let me = std::process::id() as i32;
    process_tree::all_processes()
        .iter()
        .filter(|p| p.ppid == me && !p.is_zombie())
        .filter(|p| {
            std::fs::read_to_string(format!("/proc/{}/comm", p.pid))
                .is_ok_and(|comm| comm.trim() == "dsh-init")
        })
        .count()
}

fn what_left_the_session_inside_the_namespace_is_ended_and_counted() {
    // The program waits until the sleep has a session of its own (field 6
    // of its stat) and is `sleep` (setsid has `exec`ed it), then exits.
    let spawned = namespaced(
        "setsid sleep 1002 >/dev/null & until [ \"$(cut -d' ' -f6 /proc/$!/stat)\" = \"$!\" ] \
         && [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done",
    );
    let leader = spawned.leader;
    assert_eq!(leader.wait_exit().unwrap().code(), Some(0));
    let members: Vec<String> = leader
        .members()
        .iter()
        .map(|p| process_tree::command_line(p.pid))
        .collect();
    assert_eq!(members, ["sleep 1002"]);
    assert!(!leader.session_is_over(), "a process still runs inside");
    let report = leader.end_session(process_tree::TERM_THEN_KILL).unwrap();
    let ended: Vec<&str> = report.ended.iter().map(|m| m.command.as_str()).collect();
    assert_eq!(ended, ["sleep 1002"], "{report:?}");
    // SIGTERM was enough: it was asked to end before it was killed.
    assert_eq!(report.signals_sent, [nix::sys::signal::Signal::SIGTERM]);
    // Killed, not waited for: gone as soon as the kernel is done with it.
    until("the init to be gone", || inits() == 0);
    leader.reap();
}

fn a_program_killed_by_a_signal_kills_its_leader_the_same_way() {
    let spawned = namespaced("kill -TERM $$; sleep 5");
    let leader = spawned.leader;
    let status = leader.wait_exit().unwrap();
    assert_eq!(status.signal(), Some(libc::SIGTERM), "{status:?}");
    // Nothing else ran: the session is over, and the init ended with it.
    until("the session to be over", || leader.session_is_over());
    // Killed, not waited for: gone as soon as the kernel is done with it.
    until("the init to be gone", || inits() == 0);
    leader.reap();
}

fn a_sigkilled_host_without_a_guardian_leaves_nothing() {
    let mut host = Command::new(std::env::current_exe().unwrap())
        .env(ROLE, "host")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(host.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let sid: i32 = line.trim().parse().expect(&line);
    let sleeping = || {
        process_tree::live_session_members(sid)
            .iter()
            .filter(|p| process_tree::command_line(p.pid).starts_with("sleep"))
            .count()
    };
    until("both sleeps to run", || sleeping() == 2);
    host.kill().unwrap();
    host.wait().unwrap();
    // No guardian: only the kernel can end the background `sleep 1000`.
    // The dead are adopted here (a subreaper): an init that dies waits for
    // its namespace's last zombies to be reaped before it is gone.
    until("every process of the session to be gone", || {
        process_tree::reap_adopted();
        process_tree::live_session_members(sid).is_empty()
    });
}

/// The host: one session in a namespace, its leader's pid printed, then
/// it waits to be killed.
fn host() -> ! {
    let spawned = namespaced("sleep 1000 & exec sleep 1001");
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", spawned.leader.pid()).unwrap();
    out.flush().unwrap();
    drop(out);
    std::mem::forget(spawned);
    loop {
        // sleep-ok: this process only waits to be killed
        std::thread::sleep(Duration::from_secs(60));
    }
}

fn main() {
    process_tree::pidns::enable();
    if std::env::var(ROLE).as_deref() == Ok("host") {
        host();
    }
    process_tree::become_subreaper().unwrap();
    let checks: [(&str, fn()); 5] = [
        (
            "the_program_runs_inside_and_the_leader_exits_as_it_did",
            the_program_runs_inside_and_the_leader_exits_as_it_did,
        ),
        (
            "what_left_the_session_inside_the_namespace_is_ended_and_counted",
            what_left_the_session_inside_the_namespace_is_ended_and_counted,
        ),
        (
            "a_program_killed_by_a_signal_kills_its_leader_the_same_way",
            a_program_killed_by_a_signal_kills_its_leader_the_same_way,
        ),
        (
            "a_program_ended_while_it_runs_is_counted_without_its_waiter",
            a_program_ended_while_it_runs_is_counted_without_its_waiter,
        ),
        (
            "a_sigkilled_host_without_a_guardian_leaves_nothing",
            a_sigkilled_host_without_a_guardian_leaves_nothing,
        ),
    ];
    if !namespaces_here() {
        println!("not root: sessions run without a PID namespace here");
    }
    for (name, check) in checks {
        // Without one, a process that left the session is not the
        // session's to end, and only the guardian outlives a killed host.
        if !namespaces_here()
            && (name.starts_with("a_sigkilled")
                || name.starts_with("what_left")
                || name.starts_with("a_program_ended"))
        {
            println!("test {name} ... skipped (needs a PID namespace)");
            continue;
        }
        check();
        println!("test {name} ... ok");
    }
}
