//! The registry and the command producer against real processes (bash,
//! python3), plus a seam test with an in-test producer shaped like the
//! host's terminal-send producer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use error_code::Code;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::future::BoxFuture;
use jobs::{
    Cancel, CommandProducer, CommandSpec, JobError, JobInfo, JobKind, JobRegistry, JobSettled,
    JobStatus, JobsConfig, KillOutcome, OutputChunk, OutputRead, Owner, Producer, Settlement,
    StartError, StartOptions, Started,
};
use pretty_assertions::assert_eq;

mod common;
use common::{HANG, registry, settled, start_shell};

async fn all_output(registry: &JobRegistry, owner: &Owner, id: &str) -> String {
    settled(registry, owner, id).await;
    registry
        .output(owner, id, Some(0), Some(usize::MAX), Duration::ZERO)
        .await
        .unwrap()
        .output
}

/// Waits until `pattern` appears in the job's output.
async fn wait_for_text(registry: &JobRegistry, owner: &Owner, id: &str, pattern: &str) {
    let begun = Instant::now();
    loop {
        let read = registry
            .output(
                owner,
                id,
                Some(0),
                Some(usize::MAX),
                Duration::from_millis(200),
            )
            .await
            .unwrap();
        if read.output.contains(pattern) {
            return;
        }
        assert!(
            begun.elapsed() < HANG,
            "never saw {pattern:?}; output so far {:?}",
            read.output
        );
        assert!(
            !read.status.is_settled(),
            "settled before {pattern:?}: {read:?}"
        );
    }
}

fn live_members(sid: i32) -> Vec<i32> {
    process_tree::live_session_members(sid)
        .iter()
        .map(|p| p.pid)
        .collect()
}

/// Processes (not zombies) whose parent is this test process, other than
/// session leaders we are still waiting for — i.e. adopted orphans.
fn pids_with_sid(sids: &[i32]) -> Vec<i32> {
    process_tree::all_processes()
        .into_iter()
        .filter(|p| sids.contains(&p.sid) && !p.is_zombie())
        .map(|p| p.pid)
        .collect()
}

fn settled_view(info: &JobInfo) -> (JobStatus, Option<i32>) {
    (info.status, info.exit_code)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_three_is_completed_with_exit_code_three() {
    let registry = registry();
    let owner = Owner::new("t");
    let started = start_shell(&registry, &owner, "echo out; echo err >&2; exit 3").await;
    assert_eq!(started.id, "bash-1");
    let info = settled(&registry, &owner, &started.id).await;
    assert_eq!(settled_view(&info), (JobStatus::Completed, Some(3)));
    assert_eq!(info.detail, None);
    assert_eq!(info.kind, JobKind::Bash);
    assert_eq!(info.label, "echo out; echo err >&2; exit 3");
    assert!(info.finished_at.is_some());
    assert_eq!(
        all_output(&registry, &owner, &started.id).await,
        "out\nerr\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_killed_from_outside_is_failed_not_completed() {
    let registry = registry();
    let owner = Owner::new("t");
    let started = start_shell(&registry, &owner, "echo before; kill -KILL $$").await;
    let info = settled(&registry, &owner, &started.id).await;
    assert_eq!(
        (info.status, info.exit_code, info.detail.as_deref()),
        (
            JobStatus::Failed,
            None,
            Some("terminated by SIGKILL, not by dsh")
        )
    );
    assert_eq!(all_output(&registry, &owner, &started.id).await, "before\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_killed_mid_run_is_killed_never_completed() {
    let registry = registry();
    let owner = Owner::new("t");
    // The trap makes the shell exit 0 on SIGINT: a registry that believed
    // the process would call this `completed`.
    let started = start_shell(
        &registry,
        &owner,
        "trap 'exit 0' INT; echo started; sleep 300 & wait",
    )
    .await;
    let sid = started.session_id.unwrap();
    wait_for_text(&registry, &owner, &started.id, "started").await;
    assert_eq!(
        registry.info(&owner, &started.id).unwrap().status,
        JobStatus::Running
    );
    let report = tokio::time::timeout(HANG, registry.kill(&owner, &started.id))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(report.outcome, KillOutcome::Killed);
    assert_eq!(settled_view(&report.job), (JobStatus::Killed, None));
    assert_eq!(live_members(sid), Vec::<i32>::new());
    // Still killed when read again, and a second kill finds it finished.
    assert_eq!(
        registry.info(&owner, &started.id).unwrap().status,
        JobStatus::Killed
    );
    let again = registry.kill(&owner, &started.id).await.unwrap();
    assert_eq!(
        (again.outcome, again.job.status),
        (KillOutcome::AlreadyFinished, JobStatus::Killed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_reads_stopping_while_it_is_being_killed() {
    let registry = Arc::new(registry());
    let owner = Owner::new("t");
    // Ignores SIGINT and SIGTERM: only the SIGKILL step ends it, so the
    // kill takes a while and `stopping` is observable.
    let started = start_shell(
        &registry,
        &owner,
        "trap '' INT TERM; echo ready; while :; do sleep 0.05; done",
    )
    .await;
    wait_for_text(&registry, &owner, &started.id, "ready").await;
    let kill = tokio::spawn({
        let registry = registry.clone();
        let owner = owner.clone();
        let id = started.id.clone();
        async move { registry.kill(&owner, &id).await }
    });
    // The kill spends at least the SIGINT and SIGTERM graces (750 ms) on a
    // job that ignores both: the first status after `running` is `stopping`.
    let mut status = JobStatus::Running;
    test_support::wait_until_async("the job leaves `running`", || {
        status = registry.info(&owner, &started.id).unwrap().status;
        status != JobStatus::Running
    })
    .await;
    assert_eq!(status, JobStatus::Stopping);
    let report = kill.await.unwrap().unwrap();
    assert_eq!(
        (report.outcome, report.job.status),
        (KillOutcome::Killed, JobStatus::Killed)
    );
    assert_eq!(live_members(started.session_id.unwrap()), Vec::<i32>::new());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn past_its_deadline_a_job_is_timed_out_and_its_tree_is_gone() {
    let registry = registry();
    let owner = Owner::new("t");
    let started = registry
        .start(
            &owner,
            CommandProducer::boxed(CommandSpec::shell("sleep 300 & echo begun; sleep 301")),
            // Long enough for bash to start both sleeps and print on a
            // loaded machine: the deadline must find a whole tree to end.
            StartOptions {
                timeout: Some(Duration::from_secs(3)),
            },
        )
        .await
        .unwrap();
    let sid = started.session_id.unwrap();
    let info = settled(&registry, &owner, &started.id).await;
    assert_eq!(settled_view(&info), (JobStatus::TimedOut, None));
    assert_eq!(
        info.detail.as_deref(),
        Some("timeout_ms 3000 passed; every process of the job was ended")
    );
    assert_eq!(pids_with_sid(&[sid]), Vec::<i32>::new());
    assert_eq!(all_output(&registry, &owner, &started.id).await, "begun\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_leaves_no_background_process_behind() {
    let registry = registry();
    let owner = Owner::new("t");
    let started = start_shell(&registry, &owner, "sleep 300 & echo done").await;
    let info = settled(&registry, &owner, &started.id).await;
    assert_eq!(settled_view(&info), (JobStatus::Completed, Some(0)));
    assert_eq!(
        info.detail.as_deref(),
        Some("1 background process(es) still running at exit were ended")
    );
    assert_eq!(
        pids_with_sid(&[started.session_id.unwrap()]),
        Vec::<i32>::new()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_wakes_on_a_printed_line_and_returns_at_the_deadline_otherwise() {
    let registry = registry();
    let owner = Owner::new("t");
    let started = start_shell(&registry, &owner, "read -t 300 line < /dev/zero; sleep 300").await;
    // Nothing is printed: the wait returns at its deadline, empty.
    let begun = Instant::now();
    let read = registry
        .output(&owner, &started.id, None, None, Duration::from_millis(300))
        .await
        .unwrap();
    let waited = begun.elapsed();
    assert_eq!(
        (read.output.as_str(), read.status),
        ("", JobStatus::Running)
    );
    assert!(
        waited >= Duration::from_millis(300),
        "returned early: {waited:?}"
    );
    assert!(waited < HANG);
    registry.kill(&owner, &started.id).await.unwrap();

    // A line printed one second in wakes a 60 s wait.
    let started = start_shell(&registry, &owner, "sleep 1; echo line; sleep 300").await;
    let begun = Instant::now();
    let read = registry
        .output(&owner, &started.id, Some(0), None, Duration::from_secs(60))
        .await
        .unwrap();
    let waited = begun.elapsed();
    assert_eq!(
        (read.output.as_str(), read.from, read.next),
        ("line\n", 0, 5)
    );
    assert!(
        waited < Duration::from_secs(20),
        "the wait did not wake: {waited:?}"
    );
    registry.kill(&owner, &started.id).await.unwrap();

    // Settlement wakes a wait that has no new output to show.
    let started = start_shell(&registry, &owner, "sleep 0.5").await;
    let read = registry
        .output(&owner, &started.id, None, None, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(
        (read.output.as_str(), read.status, read.exit_code),
        ("", JobStatus::Completed, Some(0))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rereading_a_cursor_returns_the_same_text_and_wrapping_reports_dropped() {
    let _ = process_tree::become_subreaper();
    let registry = JobRegistry::new(JobsConfig {
        output_ring_bytes: 1000,
        ..JobsConfig::default()
    });
    let owner = Owner::new("t");
    // 100 lines of 10 bytes, with colour escapes and CRLF to sanitize.
    let started = start_shell(
        &registry,
        &owner,
        r#"for i in $(seq 100 199); do printf '\033[31mline %s\033[0m\r\n' $i; done"#,
    )
    .await;
    settled(&registry, &owner, &started.id).await;
    // Lines are 9 bytes after sanitizing: `line 150` starts at 450.
    let first = registry
        .output(&owner, &started.id, Some(450), Some(27), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        first,
        OutputRead {
            output: "line 150\nline 151\nline 152\n".into(),
            from: 450,
            next: 477,
            dropped: 0,
            status: JobStatus::Completed,
            exit_code: Some(0),
            detail: None,
        }
    );
    let again = registry
        .output(&owner, &started.id, Some(450), Some(27), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(again, first);
    // 100 lines of 9 bytes fit the 1000-byte ring: nothing dropped yet.
    let whole = registry
        .output(
            &owner,
            &started.id,
            Some(0),
            Some(usize::MAX),
            Duration::ZERO,
        )
        .await
        .unwrap();
    assert_eq!((whole.from, whole.next, whole.dropped), (0, 900, 0));

    let started = start_shell(
        &registry,
        &owner,
        "for i in $(seq 1000 1199); do echo \"line $i\"; done",
    )
    .await;
    settled(&registry, &owner, &started.id).await;
    // 200 lines of 10 bytes = 2000 bytes; the newest 1000 are kept.
    let read = registry
        .output(&owner, &started.id, Some(0), Some(20), Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        (read.output.as_str(), read.from, read.next, read.dropped),
        ("line 1100\nline 1101\n", 1000, 1020, 1000)
    );
    assert_eq!(
        registry.info(&owner, &started.id).unwrap().output_bytes,
        2000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_without_since_continue_where_the_last_read_ended() {
    let registry = registry();
    let owner = Owner::new("t");
    let mut events = registry.subscribe();
    let started = start_shell(&registry, &owner, "echo one; echo two").await;
    // Wait without reading (a read would move the unread cursor).
    let event = tokio::time::timeout(HANG, events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.job.id, started.id);
    let a = registry
        .output(&owner, &started.id, None, Some(4), Duration::ZERO)
        .await
        .unwrap();
    let b = registry
        .output(&owner, &started.id, None, None, Duration::ZERO)
        .await
        .unwrap();
    let c = registry
        .output(&owner, &started.id, None, None, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(
        [a, b, c].map(|r| (r.output, r.from, r.next)),
        [
            ("one\n".into(), 0, 4),
            ("two\n".into(), 4, 8),
            (String::new(), 8, 8)
        ]
    );
    let past = registry
        .output(&owner, &started.id, Some(9), None, Duration::ZERO)
        .await
        .unwrap_err();
    assert_eq!(past.code(), Code::InvalidArgument);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owners_see_only_their_own_jobs() {
    let registry = registry();
    let alice = Owner::new("alice");
    let bob = Owner::new("bob");
    let started = start_shell(&registry, &alice, "exit 0").await;
    settled(&registry, &alice, &started.id).await;
    for error in [
        registry
            .output(&bob, &started.id, None, None, Duration::ZERO)
            .await
            .unwrap_err(),
        registry.kill(&bob, &started.id).await.unwrap_err(),
        registry.info(&bob, &started.id).unwrap_err(),
    ] {
        assert_eq!(
            error,
            JobError::ForeignJob {
                id: "bash-1".into()
            }
        );
        assert_eq!((error.code(), error.retryable()), (Code::ForeignJob, false));
    }
    assert_eq!(registry.list(&bob, None), vec![]);
    let missing = registry.kill(&alice, "bash-99").await.unwrap_err();
    assert_eq!(missing.code(), Code::NoJob);
    assert_eq!(
        missing.to_string(),
        "no job bash-99: job_list shows the jobs you have"
    );
    let malformed = registry.info(&alice, "job7").unwrap_err();
    assert_eq!(
        malformed.to_string(),
        "no job job7: job ids look like bash-1, pty-send-1 or subagent-1"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn running_jobs_per_owner_are_capped() {
    let _ = process_tree::become_subreaper();
    let registry = JobRegistry::new(JobsConfig {
        max_running_per_owner: 2,
        ..JobsConfig::default()
    });
    let owner = Owner::new("t");
    let other = Owner::new("other");
    let a = start_shell(&registry, &owner, "sleep 300").await;
    let _b = start_shell(&registry, &owner, "sleep 300").await;
    let error = registry
        .start(
            &owner,
            CommandProducer::boxed(CommandSpec::shell("sleep 300")),
            StartOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(
        error,
        JobError::JobLimit {
            running: 2,
            limit: 2
        }
    );
    assert_eq!((error.code(), error.retryable()), (Code::JobLimit, true));
    assert!(error.to_string().contains("job_kill"), "{error}");
    // Another owner is not affected; killing one makes room.
    start_shell(&registry, &other, "exit 0").await;
    registry.kill(&owner, &a.id).await.unwrap();
    let c = start_shell(&registry, &owner, "sleep 300").await;
    assert_eq!(c.id, "bash-4"); // the refused start consumed no id
    let ended = registry.end_owner(&owner).await;
    assert_eq!(
        (ended.ended, ended.forgotten, ended.failures),
        (2, 3, vec![])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settled_jobs_are_retained_up_to_the_bound_oldest_evicted_first() {
    let _ = process_tree::become_subreaper();
    let registry = JobRegistry::new(JobsConfig {
        max_settled_per_owner: 2,
        ..JobsConfig::default()
    });
    let owner = Owner::new("t");
    let mut events = registry.subscribe();
    for _ in 0..3 {
        start_shell(&registry, &owner, "exit 0").await;
        // The settle event is sent after the eviction it caused.
        tokio::time::timeout(HANG, events.recv())
            .await
            .unwrap()
            .unwrap();
    }
    let ids: Vec<String> = registry
        .list(&owner, None)
        .into_iter()
        .map(|j| j.id)
        .collect();
    assert_eq!(ids, vec!["bash-2".to_owned(), "bash-3".to_owned()]);
    let evicted = registry.info(&owner, "bash-1").unwrap_err();
    assert_eq!(evicted.code(), Code::NoJob);
    assert!(evicted.to_string().contains("evicted"), "{evicted}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_status_and_settlements_are_published() {
    let registry = registry();
    let owner = Owner::new("t");
    let mut events = registry.subscribe();
    let done = start_shell(&registry, &owner, "exit 4").await;
    let running = start_shell(&registry, &owner, "sleep 300").await;
    let event: JobSettled = tokio::time::timeout(HANG, events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(event.owner, owner);
    assert_eq!(
        (event.job.id.as_str(), event.job.status, event.job.exit_code),
        ("bash-1", JobStatus::Completed, Some(4))
    );
    let ids = |status| -> Vec<String> {
        registry
            .list(&owner, status)
            .into_iter()
            .map(|j| j.id)
            .collect()
    };
    assert_eq!(ids(Some(JobStatus::Running)), vec![running.id.clone()]);
    assert_eq!(ids(Some(JobStatus::Completed)), vec![done.id.clone()]);
    assert_eq!(ids(None), vec![done.id.clone(), running.id.clone()]);
    assert_eq!(JobStatus::parse("timed_out"), Some(JobStatus::TimedOut));
    assert_eq!(JobStatus::parse("done"), None);
    registry.kill(&owner, &running.id).await.unwrap();
    let event = tokio::time::timeout(HANG, events.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        (event.job.id, event.job.status),
        (running.id, JobStatus::Killed)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_an_owner_leaves_no_process_behind() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let registry = registry();
    let owner = Owner::new("t");
    let keeper = Owner::new("keeper");
    let mut sids = Vec::new();
    let mut ids = Vec::new();
    for command in [
        "sleep 300",
        "set -m; sleep 301 & sleep 302 & wait",
        "trap '' INT TERM; sleep 303 & (trap '' INT TERM; sleep 304) ; wait",
        // sleep-ok: the job's own work, not synchronisation
        "python3 -c 'import time; print(\"py\", flush=True); time.sleep(300)'",
    ] {
        let started = start_shell(&registry, &owner, command).await;
        sids.push(started.session_id.unwrap());
        ids.push(started.id);
    }
    let kept = start_shell(&registry, &keeper, "sleep 300").await;
    wait_for_text(&registry, &owner, &ids[3], "py").await;
    // At least 7 processes: sleep; bash + 2 sleeps; bash + sleep + a
    // subshell (or its sleep); python.
    test_support::wait_until_async("7 processes run in the jobs' sessions", || {
        pids_with_sid(&sids).len() >= 7
    })
    .await;
    let ended = tokio::time::timeout(HANG, registry.end_owner(&owner))
        .await
        .unwrap();
    assert_eq!(
        (ended.ended, ended.forgotten, ended.failures),
        (4, 4, vec![])
    );
    assert_eq!(pids_with_sid(&sids), Vec::<i32>::new());
    process_tree::reap_adopted();
    let zombies: Vec<i32> = process_tree::all_processes()
        .into_iter()
        .filter(|p| sids.contains(&p.sid))
        .map(|p| p.pid)
        .collect();
    assert_eq!(zombies, Vec::<i32>::new());
    assert_eq!(registry.list(&owner, None), vec![]);
    assert_eq!(
        registry.info(&owner, &ids[0]).unwrap_err().code(),
        Code::NoJob
    );
    // The other owner's job is untouched.
    assert_eq!(
        registry.info(&keeper, &kept.id).unwrap().status,
        JobStatus::Running
    );
    registry.end_owner(&keeper).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_registry_ends_every_job() {
    let registry = registry();
    let owner = Owner::new("t");
    let started = start_shell(&registry, &owner, "sleep 300 & echo up; sleep 301").await;
    wait_for_text(&registry, &owner, &started.id, "up").await;
    let sid = started.session_id.unwrap();
    drop(registry);
    test_support::wait_until_async("every process of the dropped registry's job ends", || {
        pids_with_sid(&[sid]).is_empty()
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spawn_failures_return_the_producers_code_and_consume_no_id() {
    let registry = registry();
    let owner = Owner::new("t");
    let spec = CommandSpec::new(JobKind::Bash, vec!["/nonexistent/program".into()]).unwrap();
    let error = registry
        .start(
            &owner,
            CommandProducer::boxed(spec),
            StartOptions::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(error.code(), Code::SpawnFailed);
    assert_eq!(registry.list(&owner, None), vec![]);
    assert_eq!(start_shell(&registry, &owner, "exit 0").await.id, "bash-1");
    assert_eq!(
        CommandSpec::new(JobKind::Bash, vec![]).unwrap_err().code(),
        Code::InvalidArgument
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn subagent_templates_take_the_prompt_in_argv_or_on_stdin() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let registry = registry();
    let owner = Owner::new("t");
    let dir = tempfile::tempdir().unwrap();
    let in_argv = CommandSpec::subagent(
        &[
            "bash".into(),
            "-c".into(),
            "echo \"argv: $1 in $PWD\"".into(),
            "agent".into(),
            "{prompt}".into(),
        ],
        "fix it",
    )
    .unwrap()
    .with_cwd(dir.path());
    assert_eq!(in_argv.stdin, None);
    let on_stdin = CommandSpec::subagent(
        &[
            "python3".into(),
            "-c".into(),
            "import sys; print('stdin:', sys.stdin.read())".into(),
        ],
        "fix it",
    )
    .unwrap();
    assert_eq!(on_stdin.stdin.as_deref(), Some("fix it"));
    let a = registry
        .start(
            &owner,
            CommandProducer::boxed(in_argv),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let b = registry
        .start(
            &owner,
            CommandProducer::boxed(on_stdin),
            StartOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!((a.id.as_str(), b.id.as_str()), ("subagent-1", "subagent-2"));
    let cwd = dir.path().canonicalize().unwrap();
    assert_eq!(
        all_output(&registry, &owner, &a.id).await,
        format!("argv: fix it in {}\n", cwd.display())
    );
    assert_eq!(
        all_output(&registry, &owner, &b.id).await,
        "stdin: fix it\n"
    );
    assert_eq!(registry.info(&owner, &a.id).unwrap().label, "fix it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreground_runs_report_exit_codes_and_kill_at_the_deadline() {
    let _ = process_tree::become_subreaper();
    let run = jobs::run_command(&CommandSpec::shell("echo hi; exit 3"), None, 1024)
        .await
        .unwrap();
    assert_eq!(
        (
            run.output.text.as_str(),
            run.exit_code,
            run.signal,
            run.timed_out
        ),
        ("hi\n", Some(3), None, false)
    );
    let spec = CommandSpec::shell("sleep 300 & echo begun; sleep 301");
    // Long enough for bash to start both sleeps and print on a loaded
    // machine: the deadline must find a whole tree to end.
    let run = jobs::run_command(&spec, Some(Duration::from_secs(3)), 1024)
        .await
        .unwrap();
    assert_eq!(
        (run.output.text.as_str(), run.exit_code, run.timed_out),
        ("begun\n", None, true)
    );
    assert!(run.duration >= Duration::from_secs(3));
}

/// A producer shaped like the host's terminal-send producer: text chunks,
/// a cancel that "interrupts and releases the slot", a settle that yields
/// a reason and an exit code.
struct FakeSend {
    slot_released: Arc<AtomicBool>,
    finish: Option<tokio::sync::oneshot::Receiver<Settlement>>,
    cancel_fails: bool,
}

struct FakeInterrupt {
    slot_released: Arc<AtomicBool>,
    settle: std::sync::Mutex<Option<tokio::sync::oneshot::Sender<Settlement>>>,
    fails: bool,
}

impl Cancel for FakeInterrupt {
    fn cancel(&self) -> BoxFuture<'static, Result<String, String>> {
        if self.fails {
            return futures::future::ready(Err("pid 4242 survived SIGKILL".to_owned())).boxed();
        }
        self.slot_released.store(true, Ordering::SeqCst);
        if let Some(tx) = self.settle.lock().unwrap().take() {
            let _ = tx.send(Settlement::Finished {
                exit_code: Some(130),
                detail: Some("reason: prompt".into()),
            });
        }
        futures::future::ready(Ok("the command was interrupted".to_owned())).boxed()
    }
}

impl Producer for FakeSend {
    fn kind(&self) -> JobKind {
        JobKind::PtySend
    }
    fn label(&self) -> String {
        "make test\n".into()
    }
    fn start(mut self: Box<Self>) -> BoxFuture<'static, Result<Started, StartError>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let finish = self.finish.take();
        let chunks = futures::stream::iter(vec![
            OutputChunk::Text("compiling\n".into()),
            OutputChunk::Text("ok\n".into()),
        ]);
        let settle = async move {
            match finish {
                Some(finish) => finish.await.unwrap_or(Settlement::Failed {
                    detail: "gone".into(),
                }),
                None => rx.await.unwrap_or(Settlement::Failed {
                    detail: "gone".into(),
                }),
            }
        };
        futures::future::ready(Ok(Started {
            output: futures::StreamExt::boxed(chunks),
            settle: settle.boxed(),
            cancel: Arc::new(FakeInterrupt {
                slot_released: self.slot_released.clone(),
                settle: std::sync::Mutex::new(Some(tx)),
                fails: self.cancel_fails,
            }),
            session_id: None,
        }))
        .boxed()
    }
}

#[tokio::test]
async fn an_external_producer_fits_the_seam() {
    let registry = JobRegistry::new(JobsConfig::default());
    let owner = Owner::new("t");
    let (finish_tx, finish_rx) = tokio::sync::oneshot::channel();
    let released = Arc::new(AtomicBool::new(false));
    let settles = registry
        .start(
            &owner,
            Box::new(FakeSend {
                slot_released: released.clone(),
                finish: Some(finish_rx),
                cancel_fails: false,
            }),
            StartOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(settles.id, "pty-send-1");
    finish_tx
        .send(Settlement::Finished {
            exit_code: None,
            detail: Some("reason: input_wait".into()),
        })
        .unwrap();
    let info = settled(&registry, &owner, &settles.id).await;
    assert_eq!(
        (
            info.status,
            info.exit_code,
            info.detail.as_deref(),
            info.label.as_str()
        ),
        (
            JobStatus::Completed,
            None,
            Some("reason: input_wait"),
            "make test"
        )
    );
    assert_eq!(
        all_output(&registry, &owner, &settles.id).await,
        "compiling\nok\n"
    );
    assert!(!released.load(Ordering::SeqCst));

    // Killing one: the cancel runs, and the producer's own report of how
    // the interrupted command ended (exit 130) does not make it `completed`.
    let killed = registry
        .start(
            &owner,
            Box::new(FakeSend {
                slot_released: released.clone(),
                finish: None,
                cancel_fails: false,
            }),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let report = registry.kill(&owner, &killed.id).await.unwrap();
    assert_eq!(
        (report.outcome, report.job.status, report.job.exit_code),
        (KillOutcome::Killed, JobStatus::Killed, None)
    );
    assert!(released.load(Ordering::SeqCst));

    // A cancel that cannot end the work: the job says so, it is not `killed`.
    let stuck = registry
        .start(
            &owner,
            Box::new(FakeSend {
                slot_released: released.clone(),
                finish: None,
                cancel_fails: true,
            }),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let report = registry.kill(&owner, &stuck.id).await.unwrap();
    assert_eq!(
        (
            report.outcome,
            report.job.status,
            report.job.detail.as_deref()
        ),
        (
            KillOutcome::Killed,
            JobStatus::Failed,
            Some("the job could not be ended: pid 4242 survived SIGKILL")
        )
    );
}
