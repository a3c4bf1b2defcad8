//! Sandboxes prepared on many threads at once: each preparation that needs
//! namespaces forks a helper, and no helper may keep another's pipes open
//! (they would wait for each other forever).

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::mpsc;
use std::time::Duration;

use sandbox::{Availability, Sandbox, SandboxPolicy, SpawnContext};

#[test]
fn namespace_helpers_started_at_once_do_not_wait_for_each_other() {
    let base = tempfile::Builder::new()
        .prefix("sandbox-concurrent-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap();
    let base = base.path().canonicalize().unwrap();
    let home = base.join("home");
    std::fs::create_dir_all(&home).unwrap();
    const THREADS: usize = 8;
    const ROUNDS: usize = 20;
    let (done_tx, done_rx) = mpsc::channel();
    for t in 0..THREADS {
        let ws = base.join(format!("ws{t}"));
        std::fs::create_dir_all(ws.join(".git")).unwrap();
        let home = home.clone();
        let done = done_tx.clone();
        std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                // A sandbox of its own each round: every prepare creates
                // namespaces (a read-only .git, the network off).
                let policy = SandboxPolicy {
                    network: false,
                    ..SandboxPolicy::default()
                };
                let sandbox = Sandbox::new(policy, Availability::probe_kernel()).unwrap();
                let prepared = sandbox.prepare(&SpawnContext::command(&ws, &home)).unwrap();
                // Every layer held: a failed helper would leave `.git`
                // writable or the network on, and say so in `reason`.
                let status = prepared.status();
                assert!(
                    status.enforced && !status.network && status.reason.is_none(),
                    "{status:?}"
                );
            }
            done.send(t).unwrap();
        });
    }
    for _ in 0..THREADS {
        done_rx
            .recv_timeout(Duration::from_secs(60))
            .expect("concurrent preparations deadlocked");
    }
}
