//! Wake-up latency of a blocking `output(wait)` after a job prints a line,
//! next to what a model polling every 250 ms or every 5 s would see.
//!
//! A real python3 job prints lines at random intervals, each carrying the
//! CLOCK_MONOTONIC instant it was printed. One reader blocks in
//! `JobRegistry::output` with a wait and stamps the instant it wakes. The
//! pollers are computed from the same print instants: a poller of period P
//! (at 64 evenly spread phases) sees a line at its next poll after the
//! print, plus the measured cost of one non-blocking read.
//!
//! Run: `cargo run --release -p jobs --example bench_jobs` (or `cargo xtask bench jobs`)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use jobs::{CommandProducer, CommandSpec, JobKind, JobRegistry, JobsConfig, Owner, StartOptions};

const LINES: usize = 300;
const PHASES: u64 = 64;

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes into the timespec we own.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn percentile(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

fn ms(ns: u64) -> String {
    if ns < 100_000 {
        format!("{:.1} µs", ns as f64 / 1e3)
    } else {
        format!("{:.3} ms", ns as f64 / 1e6)
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = process_tree::become_subreaper();
    let registry = JobRegistry::new(JobsConfig::default());
    let owner = Owner::new("bench");

    // Cost of one non-blocking read (what each poll pays on the server).
    let idle = registry
        .start(
            &owner,
            CommandProducer::boxed(CommandSpec::shell("echo x; sleep 300")),
            StartOptions::default(),
        )
        .await
        .unwrap();
    let mut poll_costs = Vec::new();
    for _ in 0..2000 {
        let begun = monotonic_ns();
        registry
            .output(&owner, &idle.id, Some(0), None, Duration::ZERO)
            .await
            .unwrap();
        poll_costs.push(monotonic_ns() - begun);
    }
    registry.kill(&owner, &idle.id).await.unwrap();
    poll_costs.sort_unstable();
    let poll_cost = percentile(&poll_costs, 0.5);

    let script = format!(
        "import random, sys, time\n\
         random.seed(7)\n\
         for i in range({LINES}):\n\
         \x20   time.sleep(random.uniform(0.005, 0.045))\n\
         \x20   sys.stdout.write(f'{{time.monotonic_ns()}}\\n'); sys.stdout.flush()\n"
    );
    let spec =
        CommandSpec::new(JobKind::Bash, vec!["python3".into(), "-c".into(), script]).unwrap();
    let job = registry
        .start(
            &owner,
            CommandProducer::boxed(spec),
            StartOptions::default(),
        )
        .await
        .unwrap();

    let mut cursor = 0;
    let mut pending = String::new();
    let mut printed = Vec::new();
    let mut wait_latency = Vec::new();
    let mut wait_calls = 0u64;
    let mut first_print = None;
    let mut last_print = 0;
    loop {
        let read = registry
            .output(&owner, &job.id, Some(cursor), None, Duration::from_secs(10))
            .await
            .unwrap();
        let woke = monotonic_ns();
        wait_calls += 1;
        cursor = read.next;
        pending.push_str(&read.output);
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Ok(at) = line.trim().parse::<u64>() {
                printed.push(at);
                first_print.get_or_insert(at);
                last_print = at;
                wait_latency.push(woke.saturating_sub(at));
            }
        }
        if read.status.is_settled() && read.next == cursor && read.output.is_empty() {
            break;
        }
    }
    assert_eq!(printed.len(), LINES, "every line should have been read");
    wait_latency.sort_unstable();
    let span = last_print - first_print.unwrap_or(last_print);

    let mut rows = vec![(
        "output(wait) — blocking".to_owned(),
        percentile(&wait_latency, 0.5),
        percentile(&wait_latency, 0.99),
        wait_calls as f64,
    )];
    for (name, period) in [
        ("poll every 250 ms", 250_000_000u64),
        ("poll every 5 s", 5_000_000_000u64),
    ] {
        let mut latency = Vec::with_capacity(printed.len() * PHASES as usize);
        for k in 0..PHASES {
            let phase = period * k / PHASES;
            for &at in &printed {
                // Next poll instant at or after `at` on the grid phase + n·period.
                let past = (at - phase) % period;
                let next_poll = at + (period - past) % period;
                latency.push(next_poll - at + poll_cost);
            }
        }
        latency.sort_unstable();
        let calls = span as f64 / period as f64 + 1.0;
        rows.push((
            name.to_owned(),
            percentile(&latency, 0.5),
            percentile(&latency, 0.99),
            calls,
        ));
    }

    println!(
        "job printed {LINES} lines over {:.2} s (5–45 ms apart); one non-blocking read costs {} (median)\n",
        span as f64 / 1e9,
        ms(poll_cost)
    );
    println!(
        "| {:<24} | {:>12} | {:>12} | {:>10} | {:>16} |",
        "reader", "median", "p99", "calls", "median vs wait"
    );
    println!(
        "|{:-<26}|{:->14}|{:->14}|{:->12}|{:->18}|",
        "", "", "", "", ""
    );
    let base = rows[0].1.max(1);
    for (name, median, p99, calls) in &rows {
        println!(
            "| {:<24} | {:>12} | {:>12} | {:>10.0} | {:>15.0}x |",
            name,
            ms(*median),
            ms(*p99),
            calls,
            *median as f64 / base as f64
        );
    }
    println!(
        "\nA blocking reader makes one call per wake-up (several lines may arrive in one); \
         a poller's calls are the span divided by its period, most of them empty when output is sparse."
    );
}
