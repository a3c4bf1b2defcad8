//! 500 open/send/close cycles — with shells that left `sleep 1000 &`
//! running — and a dropped service leave no process, zombie or fd behind.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_pty::PtyTerminals;
use terminal_seam::{CloseKind, OpenRequest, Owner, SendRequest, SettleReason, TerminalService};

#[derive(Debug, PartialEq, Eq)]
struct Census {
    open_fds: usize,
    children: Vec<i32>,
    zombies: Vec<i32>,
}

fn census() -> Census {
    let me = std::process::id() as i32;
    let open_fds = std::fs::read_dir("/proc/self/fd").unwrap().count();
    let mine: Vec<process_tree::ProcessInfo> = process_tree::all_processes()
        .into_iter()
        .filter(|p| p.ppid == me)
        .collect();
    Census {
        open_fds,
        children: mine
            .iter()
            .filter(|p| !p.is_zombie())
            .map(|p| p.pid)
            .collect(),
        zombies: mine
            .iter()
            .filter(|p| p.is_zombie())
            .map(|p| p.pid)
            .collect(),
    }
}

/// How many pty masters and slaves this process holds open.
fn open_ptys() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target.as_os_str() == "/dev/ptmx" || target.starts_with("/dev/pts"))
        .count()
}

/// Waits (bounded) for the census to come back to `baseline`: tasks that
/// hold the last descriptors finish just after a close returns.
async fn settles_back_to(baseline: &Census) -> Census {
    test_support::wait_for_equal_async(baseline, census).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_hundred_cycles_and_a_dropped_service_leave_nothing_behind() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let f = Fixture::new();
    // Warm up the runtime's own descriptors (signal pipe, blocking pool).
    let id = f.open_shell().await;
    f.service.close(&f.owner, id).await.unwrap();
    test_support::wait_until_async(
        "the warm-up shell is gone, reaped and its pty closed",
        || {
            let now = census();
            now.children.is_empty() && now.zombies.is_empty() && open_ptys() == 0
        },
    )
    .await;
    let baseline = census();

    let mut sids = Vec::new();
    for i in 0..500 {
        let opened = f
            .service
            .open(&f.owner, OpenRequest::default())
            .await
            .unwrap();
        sids.push(opened.pid as i32);
        let text = if i % 2 == 0 {
            "sleep 1000 &"
        } else {
            "echo cycle"
        };
        let sent = f
            .service
            .send(&f.owner, opened.id, SendRequest::line(text))
            .await
            .unwrap();
        assert_eq!(sent.reason, SettleReason::Prompt, "cycle {i}: {sent:?}");
        let closed = f.service.close(&f.owner, opened.id).await.unwrap();
        assert_eq!(closed.outcome, CloseKind::Closed);
    }
    let after = settles_back_to(&baseline).await;
    assert_eq!(after, baseline);
    let survivors: Vec<i32> = sids
        .iter()
        .flat_map(|sid| process_tree::session_members(*sid))
        .map(|p| p.pid)
        .collect();
    assert_eq!(survivors, Vec::<i32>::new());

    // Dropping the service ends what is still open, background jobs too.
    let service = PtyTerminals::default();
    let owner = Owner::new("dropped");
    let mut sids = Vec::new();
    for _ in 0..4 {
        let opened = service.open(&owner, OpenRequest::default()).await.unwrap();
        service
            .send(
                &owner,
                opened.id,
                SendRequest::line("sleep 1000 & sleep 1001 &"),
            )
            .await
            .unwrap();
        sids.push(opened.pid as i32);
    }
    let python = service
        .open(
            &owner,
            OpenRequest {
                command: Some(vec!["python3".into(), "-q".into(), "-i".into()]),
                ..OpenRequest::default()
            },
        )
        .await
        .unwrap();
    sids.push(python.pid as i32);
    let live: usize = sids
        .iter()
        .map(|sid| process_tree::live_session_members(*sid).len())
        .sum();
    assert_eq!(live, 4 * 3 + 1);
    drop(service);
    let survivors: Vec<i32> = sids
        .iter()
        .flat_map(|sid| process_tree::live_session_members(*sid))
        .map(|p| p.pid)
        .collect();
    assert_eq!(survivors, Vec::<i32>::new());
    let after = settles_back_to(&baseline).await;
    assert_eq!(after, baseline);
}
