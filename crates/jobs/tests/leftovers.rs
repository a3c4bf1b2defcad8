//! A finished job settles only after what it left running is ended, and
//! says exactly what was ended; a kill says only what it verified; a job
//! started while its owner is torn down is ended too.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use jobs::{
    Cancel, CommandProducer, CommandSpec, JobInfo, JobKind, JobStatus, OutputChunk, Owner,
    Producer, Settlement, StartError, StartOptions, Started,
};
use pretty_assertions::assert_eq;

mod common;
use common::{registry, settled, start_spec};

fn live_pids(sid: i32) -> Vec<(i32, String)> {
    process_tree::live_session_members(sid)
        .iter()
        .map(|p| (p.pid, process_tree::command_line(p.pid)))
        .collect()
}

async fn run_to_settlement(command: &str) -> (JobInfo, Vec<(i32, String)>) {
    let registry = registry();
    let owner = Owner::new("t");
    let started = start_spec(&registry, &owner, CommandSpec::shell(command)).await;
    let info = settled(&registry, &owner, &started.id).await;
    // Checked the moment the job reads settled: nothing of it may be left.
    let left = live_pids(started.session_id.unwrap());
    (info, left)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_in_a_group_of_their_own_are_ended_before_the_job_settles() {
    // Job control gives the background sleep its own process group, so the
    // leader's group is empty when it exits.
    let (info, left) = run_to_settlement("set -m; sleep 300 & echo started").await;
    assert_eq!(left, vec![]);
    assert_eq!(
        (info.status, info.exit_code, info.detail.as_deref()),
        (
            JobStatus::Completed,
            Some(0),
            Some("1 background process(es) still running at exit were ended")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timeout_wrapper_in_the_background_is_ended_and_counted() {
    if !test_support::needs(&["pgrep"]) {
        return;
    }
    // `timeout` runs its command in a process group of its own: two
    // processes are left, both in other groups than the leader's. The
    // command ignores SIGTERM, so `timeout` (which survives SIGTERM while
    // its command runs) cannot end it first and take it from the count:
    // both are ended by SIGKILL. The shell exits only once the command
    // runs `sleep`, with SIGTERM ignored.
    let (info, left) = run_to_settlement(
        "timeout 300 bash -c 'trap \"\" TERM; exec sleep 300' & \
         until pgrep -P $! -x sleep >/dev/null; do :; done; echo started",
    )
    .await;
    assert_eq!(left, vec![]);
    assert_eq!(
        (info.status, info.detail.as_deref()),
        (
            JobStatus::Completed,
            Some("2 background process(es) still running at exit were ended")
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_that_leaves_nothing_reports_nothing() {
    let (info, left) = run_to_settlement("echo done; exit 4").await;
    assert_eq!(left, vec![]);
    assert_eq!(
        (info.status, info.exit_code, info.detail.as_deref()),
        (JobStatus::Completed, Some(4), None)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leftovers_that_cannot_be_ended_make_the_job_failed_and_are_named() {
    // Fault injection: the cleanup stops at SIGTERM, which the leftover
    // ignores (a real process; only the escalation is shortened).
    static STEPS: [process_tree::Step; 1] = [process_tree::Step {
        signal: nix::sys::signal::Signal::SIGTERM,
        grace: Duration::from_millis(200),
    }];
    let steps: &'static [process_tree::Step] = &STEPS;
    let registry = registry();
    let owner = Owner::new("t");
    // The leader waits until the leftover runs `sleep` (ignoring SIGTERM):
    // its name, not its command line, which the subshell it was forked as
    // shares with the script (`305` included) before the trap is set.
    let spec = CommandSpec::shell(
        "(trap '' TERM; exec sleep 305) & until [ \"$(cat /proc/$!/comm)\" = sleep ]; do :; done",
    )
    .with_leftover_steps(steps);
    let started = start_spec(&registry, &owner, spec).await;
    let info = settled(&registry, &owner, &started.id).await;
    let sid = started.session_id.unwrap();
    let detail = info.detail.clone().unwrap_or_default();
    let pid: i32 = detail
        .rsplit_once("pid ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no pid named in {detail:?}"));
    assert_eq!(
        (info.status, info.exit_code, detail),
        (
            JobStatus::Failed,
            None,
            format!(
                "exited with status 0, but what it left running could not be ended: \
                 1 process(es) of session {sid} survived SIGTERM: pid {pid} (sleep 305)"
            )
        )
    );
    // Once the job has settled, the producer's last resort (SIGKILL when
    // its handle is dropped) ends the survivor.
    let left = test_support::wait_for_equal_async(&Vec::new(), || live_pids(sid)).await;
    assert_eq!(left, Vec::new());
}

/// A producer shaped like the terminal's background send: its cancel
/// interrupts the foreground program only, and says so.
struct InterruptOnly {
    cancelled: Arc<AtomicBool>,
}

struct InterruptOnlyCancel(
    Arc<AtomicBool>,
    std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
);

impl Cancel for InterruptOnlyCancel {
    fn cancel(&self) -> BoxFuture<'static, Result<String, String>> {
        self.0.store(true, Ordering::SeqCst);
        if let Some(tx) = self.1.lock().unwrap().take() {
            let _ = tx.send(());
        }
        futures::future::ready(Ok(
            "the program in pty-1 was interrupted (SIGINT) and pty-1 is ready for input; \
             processes it started in the background are not touched"
                .to_owned(),
        ))
        .boxed()
    }
}

impl Producer for InterruptOnly {
    fn kind(&self) -> JobKind {
        JobKind::PtySend
    }
    fn label(&self) -> String {
        "pty-1: make".into()
    }
    fn start(self: Box<Self>) -> BoxFuture<'static, Result<Started, StartError>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let started = Started {
            output: futures::stream::iter(vec![OutputChunk::Text("building\n".into())]).boxed(),
            settle: async move {
                let _ = rx.await;
                Settlement::Finished {
                    exit_code: Some(130),
                    detail: None,
                }
            }
            .boxed(),
            cancel: Arc::new(InterruptOnlyCancel(
                self.cancelled,
                std::sync::Mutex::new(Some(tx)),
            )),
            session_id: None,
        };
        futures::future::ready(Ok(started)).boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_says_what_the_cancel_verified_not_more() {
    let registry = registry();
    let owner = Owner::new("t");
    let cancelled = Arc::new(AtomicBool::new(false));
    let started = registry
        .start(
            &owner,
            Box::new(InterruptOnly {
                cancelled: cancelled.clone(),
            }),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let report = registry.kill(&owner, &started.id).await.unwrap();
    assert!(cancelled.load(Ordering::SeqCst));
    assert_eq!(
        (report.job.status, report.job.detail.as_deref()),
        (
            JobStatus::Killed,
            Some(
                "killed by job_kill; the program in pty-1 was interrupted (SIGINT) and pty-1 is \
                 ready for input; processes it started in the background are not touched"
            )
        )
    );
}

/// A command producer whose start waits for a gate, so a test can tear the
/// owner down while the start is in flight.
struct Gated {
    gate: tokio::sync::oneshot::Receiver<()>,
    spec: CommandSpec,
}

impl Producer for Gated {
    fn kind(&self) -> JobKind {
        JobKind::Bash
    }
    fn label(&self) -> String {
        self.spec.label.clone()
    }
    fn start(self: Box<Self>) -> BoxFuture<'static, Result<Started, StartError>> {
        async move {
            let _ = self.gate.await;
            CommandProducer::boxed(self.spec).start().await
        }
        .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_started_while_its_owner_is_torn_down_is_ended_too() {
    let registry = Arc::new(registry());
    let owner = Owner::new("t");
    let (open_gate, gate) = tokio::sync::oneshot::channel();
    let starting = {
        let registry = registry.clone();
        let owner = owner.clone();
        tokio::spawn(async move {
            registry
                .start(
                    &owner,
                    Box::new(Gated {
                        gate,
                        spec: CommandSpec::shell("echo $$; exec sleep 306"),
                    }),
                    StartOptions::default(),
                )
                .await
        })
    };
    // The owner goes away while the start is in flight...
    let ended = registry.end_owner(&owner).await;
    assert_eq!(ended.ended, 0);
    // ...and then the start completes.
    open_gate.send(()).unwrap();
    let started = starting.await.unwrap();
    let sid = match started {
        Ok(started) => started.session_id.unwrap(),
        Err(e) => panic!("the start failed instead: {e}"),
    };
    let left = test_support::wait_for_equal_async(&Vec::new(), || live_pids(sid)).await;
    assert_eq!(
        left,
        Vec::new(),
        "the late job of an ended owner is still running"
    );
    // It is not kept for an owner that no longer exists.
    test_support::wait_until_async("the ended owner's job is forgotten", || {
        registry.list(&owner, None).is_empty()
    })
    .await;
}
