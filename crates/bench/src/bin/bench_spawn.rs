//! What one `bash -c true` costs through the spawn path, next to the two
//! ways `std::process::Command` starts it: `posix_spawn` (no `pre_exec`
//! step: the floor) and `fork` (any `pre_exec` step: how this path
//! started children before it used `clone(CLONE_VM | CLONE_VFORK)`).
//!
//! Each series spawns, waits for the exit and reaps; the spawn path's
//! series also proves the session empty (`Leader::session_is_over`), as
//! every `bash` call does. The series take turns in rounds.
//!
//! Measured twice: in this small process, and after it has grown to the
//! size of a running `dsh mcp` (17 MB touched, 16 threads) — the size a
//! `fork` pays for in page tables, and `clone(CLONE_VM)` does not.
//!
//! Two more series: the leader unsharing a PID and a mount namespace and
//! then running the program itself (what making the namespaces costs),
//! and the program in a PID namespace of its own, as terminals and jobs
//! run (`process_tree::pidns`: two more `clone`s, an init and a waiter
//! that run in place, a `/proc` mount). They need root here (inside a
//! sandbox, the sandbox's user namespace gives the right); without, they
//! are skipped.
//!
//! Each run of the spawn path is timed in stages, and the table gives
//! each stage's median: the spawn call (until the program's `exec`), the
//! run to the exit the host observes, the proof that the session is
//! empty (with a namespace: ending its init) and the reap.
//!
//! Run: `cargo xtask bench spawn` (release build; `--quick` for a short
//! smoke run on the debug build), or
//! `cargo run --release -p bench --bin bench_spawn [-- --quick]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::Instant;

use process_tree::{ChildIo, SessionCommand};

/// How much memory a running `dsh mcp` has touched, and its threads.
const HOST_BYTES: usize = 17 << 20;
const HOST_THREADS: usize = 16;

fn std_command() -> Command {
    let mut command = Command::new("bash");
    command
        .args(["-c", "true"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

fn floor() {
    assert!(std_command().status().unwrap().success());
}

fn forked() {
    let mut command = std_command();
    // SAFETY: setsid is async-signal-safe.
    unsafe { command.pre_exec(process_tree::setsid_in_child) };
    assert!(command.status().unwrap().success());
}

/// The stages of one spawn path run, in milliseconds: the spawn call (to
/// the program's `exec`), the program's run to its exit, the proof that
/// the session is empty (ending a namespace's init), the reap.
type Stages = [f64; 4];

fn staged(command: SessionCommand, namespaced: bool) -> Stages {
    let t0 = Instant::now();
    let spawned = command.spawn().unwrap();
    let t1 = Instant::now();
    if namespaced {
        assert_ne!(
            spawned.program,
            spawned.leader.pid(),
            "no PID namespace was made"
        );
    }
    assert!(spawned.leader.wait_exit().unwrap().success());
    let t2 = Instant::now();
    while !spawned.leader.session_is_over() {
        // A namespace's init is ended by the first look that finds
        // nothing else.
        std::thread::yield_now();
    }
    let t3 = Instant::now();
    assert!(spawned.leader.reap().is_some());
    let t4 = Instant::now();
    let ms = |a: Instant, b: Instant| (b - a).as_secs_f64() * 1e3;
    [ms(t0, t1), ms(t1, t2), ms(t2, t3), ms(t3, t4)]
}

fn bash_true() -> SessionCommand {
    SessionCommand::new("bash")
        .args(["-c", "true"])
        .stdin(ChildIo::Null)
        .stdout(ChildIo::Null)
        .stderr(ChildIo::Null)
}

fn session_staged() -> Stages {
    staged(bash_true(), false)
}

/// The namespaces alone: the leader unshares a PID and a mount namespace
/// (as the PID namespace path does) and then runs the program itself,
/// outside them — what making them costs, without an init or a waiter.
fn unshare_only() -> Stages {
    let step: process_tree::PreExecStep = std::sync::Arc::new(|| {
        // SAFETY: plain system call in the child.
        if unsafe { libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    });
    // SAFETY: the step makes one system call on no memory.
    staged(unsafe { bash_true().pre_exec(step) }, false)
}

fn namespaced_staged() -> Stages {
    // SAFETY: no entry step.
    staged(unsafe { bash_true().pid_namespace(None) }, true)
}

fn floor_staged() -> Stages {
    let t0 = Instant::now();
    floor();
    [t0.elapsed().as_secs_f64() * 1e3, 0.0, 0.0, 0.0]
}

fn forked_staged() -> Stages {
    let t0 = Instant::now();
    forked();
    [t0.elapsed().as_secs_f64() * 1e3, 0.0, 0.0, 0.0]
}

type Series = (&'static str, fn() -> Stages);

const SERIES: [Series; 5] = [
    ("std posix_spawn (no pre_exec): the floor", floor_staged),
    ("std fork (a setsid pre_exec)", forked_staged),
    ("process_tree::SessionCommand + proof", session_staged),
    (
        "… + unshare(PID, mount) in the leader, no init",
        unshare_only,
    ),
    ("… in a PID namespace of its own + proof", namespaced_staged),
];

/// The stages a spawn path run is timed in (see [`Stages`]).
const STAGES: [&str; 4] = ["spawn call", "run to exit", "proof", "reap"];

/// Whether this process may make a PID namespace (root).
fn namespaces_here() -> bool {
    // SAFETY: plain system call.
    unsafe { libc::geteuid() == 0 }
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn measure(n: usize, rounds: usize) {
    let series = if namespaces_here() {
        &SERIES[..]
    } else {
        &SERIES[..3]
    };
    let mut samples: Vec<Vec<Stages>> = vec![Vec::new(); series.len()];
    for (_, run) in series {
        for _ in 0..n / 10 {
            run();
        }
    }
    for _ in 0..rounds {
        for (i, (_, run)) in series.iter().enumerate() {
            for _ in 0..n / rounds {
                samples[i].push(run());
            }
        }
    }
    println!(
        "| what | median ms | p99 ms | ratio | mean ms | {} |",
        STAGES.join(" | ")
    );
    println!("|---|---|---|---|---|{}", "---|".repeat(STAGES.len()));
    let mut floor_median = 0.0;
    for (i, (name, _)) in series.iter().enumerate() {
        let runs = &samples[i];
        let mut totals: Vec<f64> = runs.iter().map(|s| s.iter().sum()).collect();
        totals.sort_by(f64::total_cmp);
        let median = percentile(&totals, 0.5);
        if i == 0 {
            floor_median = median;
        }
        let mean = |f: &dyn Fn(&Stages) -> f64| runs.iter().map(f).sum::<f64>() / runs.len() as f64;
        let stages: Vec<String> = (0..STAGES.len())
            .map(|stage| format!("{:.3}", mean(&|s| s[stage])))
            .collect();
        println!(
            "| {name} | {median:.3} | {:.3} | {:.2}x | {:.3} | {} |",
            percentile(&totals, 0.99),
            median / floor_median,
            mean(&|s| s.iter().sum()),
            stages.join(" | ")
        );
    }
    println!(
        "\nstages: the mean of each stage (they add up to the mean); the std series are one \
         stage: spawn, wait, reap"
    );
}

fn main() {
    process_tree::pidns::enable();
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, rounds) = if quick { (30, 3) } else { (300, 3) };
    println!("`bash -c true`, spawned, waited for and reaped: {n} each, in {rounds} rounds\n");
    if !namespaces_here() {
        println!("not root: the PID namespace series are skipped\n");
    }
    println!(
        "this process as it starts ({} KiB resident):\n",
        process_tree::resident_kib()
    );
    measure(n, rounds);
    let mut ballast = vec![0u8; HOST_BYTES];
    for page in ballast.chunks_mut(4096) {
        page[0] = 1;
    }
    for _ in 1..HOST_THREADS {
        std::thread::spawn(|| {
            loop {
                std::thread::park();
            }
        });
    }
    println!(
        "\ngrown to a running dsh's size ({} KiB resident, {HOST_THREADS} threads):\n",
        process_tree::resident_kib()
    );
    measure(n, rounds);
    std::hint::black_box(&ballast);
}
