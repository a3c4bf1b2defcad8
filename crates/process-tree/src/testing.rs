//! Support for tests that must force a pid to be reused (feature
//! `testing`, which only dev-dependencies enable).
//!
//! A pid is reused only after the kernel has cycled through the others, so
//! a test cannot wait for it. In a private pid namespace it can ask for it:
//! writing `N - 1` to `/proc/sys/kernel/ns_last_pid` makes the next process
//! pid `N` when `N` is free. [`run_in_private_pid_namespace`] re-runs the
//! calling test inside one (with `unshare(1)`), and [`fork_with_pid`] tries
//! to start a process with a chosen pid.
//!
//! Creating a pid namespace needs `CAP_SYS_ADMIN` (root, as in CI). Without
//! it the test fails loudly, saying so; it never skips silently.

use std::io;
use std::process::{Child, Command};

/// Set in the environment of the test re-run inside the namespace.
const INSIDE: &str = "PROCESS_TREE_IN_PRIVATE_PID_NAMESPACE";

/// Runs the test named `test_name` (its full path, as `cargo test` prints
/// it) again inside a private pid and mount namespace, with a fresh
/// `/proc`, and panics unless it passes there. Returns `true` when called
/// from inside the namespace: the caller then runs the test's body.
///
/// ```no_run
/// #[test]
/// fn closing_spares_a_process_that_reused_the_pid() {
///     if !process_tree::testing::run_in_private_pid_namespace(
///         "closing_spares_a_process_that_reused_the_pid",
///     ) {
///         return; // it ran (and passed) inside the namespace
///     }
///     // ... the body, as pid 1 of a private namespace ...
/// }
/// ```
pub fn run_in_private_pid_namespace(test_name: &str) -> bool {
    if std::env::var_os(INSIDE).is_some() {
        return true;
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => panic!("cannot find the test binary to re-run it: {e}"),
    };
    let output = Command::new("unshare")
        .args(["--pid", "--fork", "--mount-proc"])
        .arg(&exe)
        .args(["--exact", test_name, "--nocapture", "--test-threads=1"])
        .env(INSIDE, "1")
        .output();
    let output = match output {
        Ok(output) => output,
        Err(e) => panic!(
            "this test needs unshare(1) (util-linux) and root (CAP_SYS_ADMIN) to create a \
             private pid namespace, and could not run it: {e}"
        ),
    };
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "inside a private pid namespace (this test needs root / CAP_SYS_ADMIN to create one \
         with unshare(1)), `{test_name}` failed ({}):\n--- stdout\n{stdout}\n--- stderr\n{stderr}",
        output.status
    );
    assert!(
        stdout.contains("1 passed"),
        "`{test_name}` did not run inside the namespace (wrong test name?):\n{stdout}"
    );
    false
}

/// Tries to start `command` with pid `pid` (inside a private pid namespace,
/// see [`run_in_private_pid_namespace`]): writes `pid - 1` to
/// `ns_last_pid`, spawns, and retries a few times when another process
/// (a runtime thread, say) took the number first. Returns the child,
/// whatever pid it got; the caller checks [`Child::id`].
pub fn fork_with_pid(pid: i32, mut command: impl FnMut() -> Command) -> io::Result<Child> {
    let mut last = None;
    for _ in 0..20 {
        std::fs::write("/proc/sys/kernel/ns_last_pid", format!("{}", pid - 1))?;
        let child = command().spawn()?;
        if child.id() as i32 == pid {
            return Ok(child);
        }
        if let Some(mut previous) = last.replace(child) {
            let _ = previous.kill();
            let _ = previous.wait();
        }
    }
    last.ok_or_else(|| io::Error::other("no process was started"))
}
