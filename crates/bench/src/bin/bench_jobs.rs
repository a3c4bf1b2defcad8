//! Wake-up latency of a blocking `output(wait)` after a job prints a line,
//! next to real pollers that call a non-blocking read every 250 ms or
//! every 5 s — all reading the same job at the same time.
//!
//! A real python3 job prints lines at random intervals, each carrying the
//! CLOCK_MONOTONIC instant it was printed. One reader blocks in
//! `JobRegistry::output` with a wait; the pollers (four per period, their
//! timers started at evenly spread phases) each call `output` without a
//! wait on every tick of their timer. Every reader has its own cursor,
//! stamps the instant each line reached it, and counts its calls and the
//! empty ones.
//!
//! Run: `cargo xtask bench jobs` (release build; `--quick` for a short
//! smoke run on the debug build), or
//! `cargo run --release -p bench --bin bench_jobs [-- --quick]`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use jobs::{CommandProducer, CommandSpec, JobKind, JobRegistry, JobsConfig, Owner, StartOptions};

/// Pollers per period, their first ticks spread evenly over the period.
const PHASES: u32 = 4;

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

/// What one reader saw: per line, print-to-seen latency; its calls.
#[derive(Default)]
struct Reading {
    latency: Vec<u64>,
    printed: Vec<u64>,
    calls: u64,
    empty_calls: u64,
}

impl Reading {
    /// Takes in one read's text, stamping every complete line with `seen`.
    fn take(&mut self, pending: &mut String, text: &str, seen: u64) {
        self.calls += 1;
        if text.is_empty() {
            self.empty_calls += 1;
        }
        pending.push_str(text);
        while let Some(end) = pending.find('\n') {
            let line: String = pending.drain(..=end).collect();
            if let Ok(at) = line.trim().parse::<u64>() {
                self.printed.push(at);
                self.latency.push(seen.saturating_sub(at));
            }
        }
    }
}

/// The blocking reader: one `output(wait)` after another until the job
/// has settled and everything is read.
async fn blocking_reader(registry: Arc<JobRegistry>, owner: Owner, id: String) -> Reading {
    let mut reading = Reading::default();
    let (mut cursor, mut pending) = (0, String::new());
    loop {
        let read = registry
            .output(&owner, &id, Some(cursor), None, Duration::from_secs(10))
            .await
            .unwrap();
        reading.take(&mut pending, &read.output, monotonic_ns());
        cursor = read.next;
        if read.status.is_settled() && read.output.is_empty() {
            return reading;
        }
    }
}

/// A poller: a non-blocking `output` on every tick of a `period` timer
/// whose first tick comes after `phase`, until the job has settled and
/// everything is read.
async fn poller(
    registry: Arc<JobRegistry>,
    owner: Owner,
    id: String,
    period: Duration,
    phase: Duration,
) -> Reading {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + phase, period);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut reading = Reading::default();
    let (mut cursor, mut pending) = (0, String::new());
    loop {
        ticks.tick().await;
        let read = registry
            .output(&owner, &id, Some(cursor), None, Duration::ZERO)
            .await
            .unwrap();
        reading.take(&mut pending, &read.output, monotonic_ns());
        cursor = read.next;
        if read.status.is_settled() && read.output.is_empty() {
            return reading;
        }
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let lines: usize = if quick { 60 } else { 300 };
    let _ = process_tree::become_subreaper();
    let registry = Arc::new(JobRegistry::new(JobsConfig::default()));
    let owner = Owner::new("bench");

    let script = format!(
        "import random, sys, time\n\
         random.seed(7)\n\
         for i in range({lines}):\n\
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

    let mut readers = vec![(
        "output(wait) — blocking".to_owned(),
        vec![tokio::spawn(blocking_reader(
            registry.clone(),
            owner.clone(),
            job.id.clone(),
        ))],
    )];
    for (name, period) in [
        ("poll every 250 ms", Duration::from_millis(250)),
        ("poll every 5 s", Duration::from_secs(5)),
    ] {
        let tasks = (0..PHASES)
            .map(|k| {
                tokio::spawn(poller(
                    registry.clone(),
                    owner.clone(),
                    job.id.clone(),
                    period,
                    period * k / PHASES,
                ))
            })
            .collect();
        readers.push((format!("{name} (×{PHASES} phases)"), tasks));
    }

    let mut rows = Vec::new();
    let mut span = 0;
    for (name, tasks) in readers {
        let mut merged = Reading::default();
        for task in tasks {
            let reading = task.await.unwrap();
            assert_eq!(
                reading.printed.len(),
                lines,
                "{name}: every line should have been read"
            );
            if let (Some(first), Some(last)) = (reading.printed.first(), reading.printed.last()) {
                span = last - first;
            }
            merged.latency.extend(reading.latency);
            merged.calls += reading.calls;
            merged.empty_calls += reading.empty_calls;
        }
        merged.latency.sort_unstable();
        rows.push((name, merged));
    }

    println!(
        "job printed {lines} lines over {:.2} s (5–45 ms apart){}\n",
        span as f64 / 1e9,
        if quick {
            "; --quick: a smoke run, not figures to quote"
        } else {
            ""
        }
    );
    println!(
        "| {:<34} | {:>12} | {:>12} | {:>16} | {:>16} |",
        "reader", "median", "p99", "calls per reader", "median vs wait"
    );
    println!(
        "|{:-<36}|{:->14}|{:->14}|{:->18}|{:->18}|",
        "", "", "", "", ""
    );
    let base = percentile(&rows[0].1.latency, 0.5).max(1);
    for (name, reading) in &rows {
        let per_reader = (reading.latency.len() / lines).max(1) as f64;
        let median = percentile(&reading.latency, 0.5);
        println!(
            "| {:<34} | {:>12} | {:>12} | {:>16} | {:>15.0}x |",
            name,
            ms(median),
            ms(percentile(&reading.latency, 0.99)),
            format!(
                "{:.0} ({:.0} empty)",
                reading.calls as f64 / per_reader,
                reading.empty_calls as f64 / per_reader
            ),
            median as f64 / base as f64
        );
    }
    println!(
        "\nEvery reader ran against the same job at the same time, each with its own cursor. \
         A blocking reader makes one call per wake-up (several lines may arrive in one); \
         a poller's calls follow its timer, and most are empty when output is sparse."
    );
}
