//! Settle latency of `1+1` in a Python REPL — this service, the raw pty
//! floor, a tmux polling loop, a fixed 50 ms poll — and a 100 MB output
//! flood, side by side in one run.
//!
//! `cargo run --release -p terminal-pty --example bench_pty [rounds]`

use std::time::Duration;

use terminal_pty::PtyTerminals;
use terminal_pty::bench::{
    Row, Stats, fixed_poll_python_settle, raw_flood, raw_pty_python_settle, render_flood,
    render_table, service_flood, service_python_settle, tmux_python_settle,
};
use terminal_seam::Owner;

const RAW: &str = "raw pty-process floor (write, read to prompt)";

fn row(label: &str, mut samples: Vec<Duration>) -> Option<Row> {
    Stats::of(&mut samples).map(|stats| Row {
        label: label.to_owned(),
        stats,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(300);
    let _ = process_tree::become_subreaper();
    let service = PtyTerminals::default();
    let owner = Owner::new("bench");

    let mut rows = Vec::new();
    rows.extend(row(
        "dsh library call (PtyTerminals::send)",
        service_python_settle(&service, &owner, rounds).await?,
    ));
    rows.extend(row(
        RAW,
        tokio::task::spawn_blocking(move || raw_pty_python_settle(rounds)).await??,
    ));
    match tokio::task::spawn_blocking(move || tmux_python_settle(rounds.min(200))).await? {
        Ok(samples) => rows.extend(row("tmux send-keys + capture-pane loop", samples)),
        Err(e) => eprintln!("tmux row skipped: {e}"),
    }
    let poll_rounds = (rounds / 5).clamp(10, 60);
    rows.extend(row(
        "fixed 50 ms poll (the original's design)",
        tokio::task::spawn_blocking(move || {
            fixed_poll_python_settle(poll_rounds, Duration::from_millis(50))
        })
        .await??,
    ));
    println!("{}", render_table(&rows, RAW));

    let bytes = 100_000_000;
    let dsh = service_flood(&service, &owner, bytes).await?;
    let raw = tokio::task::spawn_blocking(move || raw_flood(bytes)).await??;
    println!("{}", render_flood(&dsh, &raw));
    Ok(())
}
