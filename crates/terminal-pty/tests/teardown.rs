//! Closing a terminal: only its own processes are signalled (never a
//! process that reused its first process's pid), the pty is hung up even
//! when an escaped process holds it, nothing is left behind; and typed text
//! the program did not take is reported, never left to run glued to the
//! next send.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_pty::TerminalConfig;
use terminal_seam::{CloseKind, InputCut, OpenRequest, SendRequest, SettleReason, TerminalService};

const HANG: Duration = Duration::from_secs(30);

async fn until(what: &str, check: impl FnMut() -> bool) {
    test_support::wait_until_async(what, check).await;
}

fn alive(pid: i32) -> bool {
    process_tree::process_info(pid).is_some_and(|p| !p.is_zombie())
}

#[test]
fn closing_spares_a_process_that_took_the_exited_first_processs_pid() {
    // Needs root (CAP_SYS_ADMIN) to make a private pid namespace, where the
    // test can ask for a given pid (ns_last_pid).
    if !test_support::needs(&["unshare"]) || !test_support::needs_root("a private pid namespace") {
        return;
    }
    if !process_tree::testing::run_in_private_pid_namespace(
        "closing_spares_a_process_that_took_the_exited_first_processs_pid",
    ) {
        return;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let f = Fixture::new();
        // A terminal whose program exits at once.
        let opened = f
            .service
            .open(
                &f.owner,
                OpenRequest {
                    command: Some(vec!["true".into()]),
                    ..OpenRequest::default()
                },
            )
            .await
            .unwrap();
        assert_eq!(opened.reason, SettleReason::Exit);
        let pid = opened.pid as i32;
        // Another program now asks for that pid, as the leader of a session
        // of its own (the user's tmux, another agent's terminal).
        let mut other = process_tree::testing::fork_with_pid(pid, || {
            let mut c = std::process::Command::new("setsid");
            c.args(["sleep", "1000"]);
            c
        })
        .unwrap();
        let other_pid = other.id() as i32;
        until("the other program runs", || {
            process_tree::command_line(other_pid) == "sleep 1000"
        })
        .await;
        let closed = f.service.close(&f.owner, opened.id).await.unwrap();
        assert_eq!(closed.outcome, CloseKind::Closed);
        let spared = alive(other_pid);
        let _ = other.kill();
        let _ = other.wait();
        assert!(
            spared,
            "closing the terminal killed pid {other_pid}, which was not its process{}",
            if other_pid == pid {
                " (it had reused the pid)"
            } else {
                ""
            }
        );
        assert_ne!(
            other_pid, pid,
            "the exited first process was reaped before close: its pid could be reused"
        );
    });
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_hangs_up_the_terminal_when_an_escaped_process_holds_it() {
    let f = Fixture::new();
    // Warm up the runtime's own descriptors (signal pipe, blocking pool).
    let id = f.open_shell().await;
    f.service.close(&f.owner, id).await.unwrap();
    let before = open_fds();
    let mut escaped = Escaped(Vec::new());
    for _ in 0..20 {
        let id = f.open_shell().await;
        // `setsid` leaves the terminal's session but keeps the terminal
        // open as its stdin, stdout and stderr.
        // Started from a shell without job control, `setsid` does not
        // fork, so `$!` is the escaped process itself.
        let sent = f
            .send(id, "sh -c 'setsid sleep 1e9 & echo escaped=$!'")
            .await;
        let pid: i32 = sent
            .output
            .lines()
            .find_map(|l| l.strip_prefix("escaped="))
            .and_then(|p| p.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid in {:?}", sent.output));
        escaped.0.push(pid);
        until("the process has left the terminal's session", || {
            process_tree::process_info(pid).is_some_and(|p| p.sid == pid)
                && process_tree::command_line(pid) == "sleep 1e9"
        })
        .await;
        let closed = f.service.close(&f.owner, id).await.unwrap();
        assert_eq!(
            (closed.outcome, closed.survivors),
            (CloseKind::Closed, Vec::new())
        );
    }
    // The escaped processes are not the terminals' any more; they live on
    // (not ours to end), but the terminals' descriptors are all gone.
    until(
        "no descriptor is left open after 20 closes (pty masters kept open by escaped processes)",
        || open_fds() <= before,
    )
    .await;
    for pid in &escaped.0 {
        assert!(alive(*pid), "pid {pid} was not the terminal's to end");
    }
    let pids = escaped.0.clone();
    drop(escaped);
    // Adopted by us (a subreaper) and reaped by the orphan reaper: no zombie.
    until("the escaped processes are reaped", || {
        process_tree::reap_adopted();
        pids.iter()
            .all(|p| process_tree::process_info(*p).is_none())
    })
    .await;
}

/// The escaped processes a test started; killed when it ends, pass or fail.
struct Escaped(Vec<i32>);

impl Drop for Escaped {
    fn drop(&mut self) {
        for pid in &self.0 {
            if let Some(info) = process_tree::process_info(*pid)
                && process_tree::command_line(*pid) == "sleep 1e9"
            {
                process_tree::signal_process(&info, nix::sys::signal::Signal::SIGKILL);
            }
        }
    }
}

/// A program that puts its terminal in raw mode, reads one line (`go`),
/// then stops reading until SIGUSR1, and then reports the next line it
/// reads: its length and its last characters.
const NOT_READING: &str = r#"
import os, signal, sys, tty
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
tty.setraw(0)
def line():
    got = b""
    while not got.endswith(b"\r"):
        got += os.read(0, 1)
    return got[:-1]
sys.stdout.write("ready\r\n"); sys.stdout.flush()
line()
sys.stdout.write("busy\r\n"); sys.stdout.flush()
signal.sigwait([signal.SIGUSR1])
got = line()
sys.stdout.write("len=%d tail=%s\r\n" % (len(got), got[-8:].decode()))
sys.stdout.flush()
line()
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_the_program_did_not_read_is_reported_and_never_runs_glued_to_the_next_send() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::with_config(TerminalConfig {
        max_send_bytes: 4 << 20,
        ..TerminalConfig::default()
    });
    let opened = f
        .service
        .open(
            &f.owner,
            OpenRequest {
                command: Some(vec!["python3".into(), "-c".into(), NOT_READING.into()]),
                ..OpenRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(opened.reason, SettleReason::InputWait, "{opened:?}");
    let busy = f
        .send_req(
            opened.id,
            SendRequest::line("go")
                .with_until("busy")
                .with_timeout(HANG),
        )
        .await;
    assert_eq!(busy.reason, SettleReason::Pattern, "{busy:?}");
    // Far more than a terminal buffers for a program that is not reading.
    let text = "x".repeat(1 << 20);
    let cut = f
        .send_req(
            opened.id,
            SendRequest::line(&text).with_timeout(Duration::from_millis(1500)),
        )
        .await;
    assert_eq!(cut.reason, SettleReason::Timeout, "{}", cut.output);
    let input = cut.input_cut.expect("a send cut short must say so");
    assert!(input.written_bytes < input.total_bytes, "{input:?}");
    assert_eq!(
        input,
        InputCut {
            written_bytes: input.written_bytes,
            total_bytes: (1 << 20) + 1,
            unread_discarded: true,
        }
    );
    // The program resumes reading: the next send's line arrives alone.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(opened.pid as i32),
        nix::sys::signal::Signal::SIGUSR1,
    )
    .unwrap();
    let cursor = f.stream(opened.id, None).await.next;
    f.send_req(opened.id, SendRequest::line("END").with_timeout(HANG))
        .await;
    // However the send settled, the program's report follows in the stream.
    let report = test_support::wait_for_async("the program's report in the stream", || {
        let f = &f;
        async move {
            let text = f.stream(opened.id, Some(cursor)).await.output;
            text.lines()
                .find(|l| l.starts_with("len=") && l.contains("tail="))
                .map(str::to_owned)
        }
    })
    .await;
    assert_eq!(report, "len=3 tail=END");
    f.service.close(&f.owner, opened.id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_terminal_opened_for_an_owner_being_torn_down_is_ended_too() {
    let f = Fixture::new();
    // The owner's connection ended; an open of its was still in flight.
    f.service.end_owner(&f.owner).await;
    let opened = f
        .service
        .open(
            &f.owner,
            OpenRequest {
                command: Some(vec!["sleep".into(), "4243".into()]),
                ..OpenRequest::default()
            },
        )
        .await;
    assert_eq!(
        opened.as_ref().map_err(|e| e.code()),
        Err("SESSION_CLOSING"),
        "{opened:?}"
    );
    assert_eq!(f.service.list(&f.owner).await, vec![]);
    // Nothing it started is left.
    until("the terminal's program is gone", || {
        process_tree::reap_adopted();
        !process_tree::all_processes()
            .iter()
            .any(|p| !p.is_zombie() && process_tree::command_line(p.pid) == "sleep 4243")
    })
    .await;
}
