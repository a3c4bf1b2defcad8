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

fn spawn_path() {
    let spawned = SessionCommand::new("bash")
        .args(["-c", "true"])
        .stdin(ChildIo::Null)
        .stdout(ChildIo::Null)
        .stderr(ChildIo::Null)
        .spawn()
        .unwrap();
    assert!(spawned.leader.wait_exit().unwrap().success());
    assert!(spawned.leader.session_is_over());
    assert!(spawned.leader.reap().is_some());
}

type Series = (&'static str, fn());

const SERIES: [Series; 3] = [
    ("std posix_spawn (no pre_exec): the floor", floor),
    ("std fork (a setsid pre_exec)", forked),
    ("process_tree::SessionCommand + proof", spawn_path),
];

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn measure(n: usize, rounds: usize) {
    let mut samples: Vec<Vec<f64>> = vec![Vec::new(); SERIES.len()];
    for (_, run) in SERIES {
        for _ in 0..n / 10 {
            run();
        }
    }
    for _ in 0..rounds {
        for (i, (_, run)) in SERIES.iter().enumerate() {
            for _ in 0..n / rounds {
                let start = Instant::now();
                run();
                samples[i].push(start.elapsed().as_secs_f64() * 1e3);
            }
        }
    }
    println!("| what | median ms | p99 ms | ratio |");
    println!("|---|---|---|---|");
    let mut floor_median = 0.0;
    for (i, (name, _)) in SERIES.iter().enumerate() {
        let s = &mut samples[i];
        s.sort_by(f64::total_cmp);
        let median = percentile(s, 0.5);
        if i == 0 {
            floor_median = median;
        }
        println!(
            "| {name} | {median:.3} | {:.3} | {:.2}x |",
            percentile(s, 0.99),
            median / floor_median
        );
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let (n, rounds) = if quick { (30, 3) } else { (300, 3) };
    println!("`bash -c true`, spawned, waited for and reaped: {n} each, in {rounds} rounds\n");
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
