//! The host's process duties, started once per process by the daemon and
//! by `dsh mcp --standalone`: adopt and reap orphans, and run the guardian
//! that ends every session the host started if the host dies.

use std::time::Duration;

/// The hidden subcommand of the `dsh` binary that runs the guardian (see
/// [`start`] and [`serve_guardian`]).
pub const GUARDIAN_SUBCOMMAND: &str = "__guardian";

/// Makes this process a child subreaper, starts the guardian (this binary
/// re-executed with [`GUARDIAN_SUBCOMMAND`]) and a task that reaps adopted
/// orphans after each burst of SIGCHLD. Call inside the tokio runtime,
/// before anything is spawned. Each failure is logged; the host still
/// serves.
pub fn start() {
    // Orphans of our commands come back to us (and are reaped) instead of
    // becoming zombies under an init that may not reap.
    if let Err(e) = process_tree::become_subreaper() {
        tracing::warn!("could not become a child subreaper: {e}");
    }
    // `/proc/self/exe` still runs this binary when the file was replaced or
    // deleted since dsh started.
    let mut guardian = std::process::Command::new("/proc/self/exe");
    guardian.arg(GUARDIAN_SUBCOMMAND);
    match process_tree::start_guardian(guardian) {
        Ok(pid) => tracing::debug!(pid, "guardian started"),
        Err(e) => tracing::warn!(
            "could not start the guardian ({e}): if dsh is killed, what its terminals and jobs started in the background keeps running"
        ),
    }
    // Terminals and jobs run in PID namespaces whose init dies with dsh:
    // the kernel ends them when dsh dies, even with the guardian.
    process_tree::pidns::enable();
    match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
        Ok(mut sigchld) => {
            tokio::spawn(async move {
                // One /proc scan per burst of SIGCHLDs: a zombie may wait a
                // moment, a busy server must not scan /proc after every
                // command.
                while sigchld.recv().await.is_some() {
                    tokio::time::sleep(Duration::from_millis(250)).await;
                    let _ = tokio::task::spawn_blocking(process_tree::reap_adopted).await;
                }
            });
        }
        Err(e) => tracing::warn!("cannot watch SIGCHLD; orphans are not reaped: {e}"),
    }
}

/// The guardian's process: reads session records on stdin until the host
/// is gone, then ends what is left of them.
pub fn serve_guardian() {
    let report = process_tree::serve_guardian(std::io::stdin().lock());
    if !report.survivors.is_empty() {
        eprintln!(
            "dsh guardian: {} process(es) of dsh's sessions survived SIGKILL: pids {:?}",
            report.survivors.len(),
            report.survivors
        );
    }
}
