//! Settle latency of `1+1` in a Python REPL — this service, the raw pty
//! floor, a tmux polling loop, a model of a fixed 50 ms poll — and an
//! output flood, side by side in one run.
//!
//! `cargo run --release -p bench --bin bench_pty [-- rounds | -- --quick]`
//! (`--quick`: a short smoke run whose figures are not to be quoted).

use std::time::Duration;

use bench::terminal::{
    POLL_MODEL, Plan, Row, Stats, flood_rounds, interval_poll_python_settle, raw_pty_python_settle,
    render_flood, render_table, service_python_settle, tmux_python_settle,
};
use terminal_pty::PtyTerminals;
use terminal_seam::Owner;

const RAW: &str = "raw pty-process floor (write, read to prompt)";

fn row(label: &str, mut samples: Vec<Duration>) -> Option<Row> {
    Stats::of(&mut samples).map(|stats| Row {
        label: label.to_owned(),
        stats,
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let plan = Plan::from_args();
    let _ = process_tree::become_subreaper();
    let service = PtyTerminals::default();
    let owner = Owner::new("bench");

    let mut rows = Vec::new();
    rows.extend(row(
        "dsh library call (PtyTerminals::send)",
        service_python_settle(&service, &owner, plan.rounds).await?,
    ));
    rows.extend(row(
        RAW,
        tokio::task::spawn_blocking(move || raw_pty_python_settle(plan.rounds)).await??,
    ));
    match tokio::task::spawn_blocking(move || tmux_python_settle(plan.tmux_rounds)).await? {
        Ok(samples) => rows.extend(row("tmux send-keys + capture-pane loop", samples)),
        Err(e) => eprintln!("tmux row skipped: {e}"),
    }
    rows.extend(row(
        POLL_MODEL,
        tokio::task::spawn_blocking(move || {
            interval_poll_python_settle(plan.poll_rounds, Duration::from_millis(50))
        })
        .await??,
    ));
    if plan.quick {
        println!("--quick: a smoke run, not figures to quote\n");
    }
    println!(
        "`cargo run --release -p bench --bin bench_pty`: settle latency, {} timed sends per row\n",
        plan.rounds
    );
    println!("{}", render_table(&rows, RAW));

    let floods = flood_rounds(&service, &owner, &plan).await?;
    println!(
        "`cargo run --release -p bench --bin bench_pty`: a flood, dsh and raw in turn, {} rounds\n",
        plan.flood_rounds
    );
    println!("{}", render_flood(&floods));
    Ok(())
}
