//! A long command costs (almost) no CPU while a send waits for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::Fixture;
use pretty_assertions::assert_eq;
use terminal_seam::SettleReason;

/// CPU time (user + system) this process used so far.
fn cpu_time() -> Duration {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    // Fields 14 and 15 (utime, stime) are at 11 and 12 after the name.
    let ticks: u64 = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    // SAFETY: plain sysconf.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / hz)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_a_long_command_does_not_spin() {
    let f = Fixture::new();
    let id = f.open_shell().await;
    let before = cpu_time();
    let out = f.send(id, "sleep 3; echo done").await;
    let used = cpu_time() - before;
    eprintln!("cpu used while waiting: {used:?}");
    assert_eq!(
        (out.output.as_str(), out.reason),
        ("done\n", SettleReason::Prompt)
    );
    // A spinning watch would use about 3 s of CPU here.
    assert!(
        used < Duration::from_millis(600),
        "used {used:?} of CPU in a 3 s wait"
    );
}
