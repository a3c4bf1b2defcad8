//! Waiting helpers for the tests of the other crates.
//!
//! A test synchronises on an event: output it saw, a notification, a
//! process appearing or disappearing in `/proc`. When the event has no
//! notification of its own (a process leaving `/proc`, a file growing, a
//! status changing), the test polls for it with [`wait_until`] or
//! [`wait_until_async`] instead of sleeping for a guessed while: the wait
//! ends as soon as the condition holds, and only a hang — nothing for
//! [`HANG`] — fails the test, so it passes on a loaded machine too.
//!
//! This crate is the one place test code may sleep; a tidy check in
//! `xtask` fails when a test file calls a sleep for synchronisation.
//! It is not part of the product: only dev-dependencies name it.
//!
//! It also holds the one switch between the two test tiers ([`needs`]):
//! plain `cargo test` on a machine with only Rust runs every test whose
//! programs are there and says which it skipped; `cargo xtask test`
//! installs them and sets [`ALL_TESTS`], and then a missing program fails
//! the test instead.

#![forbid(unsafe_code)]

use std::time::{Duration, Instant};

/// The variable that makes every test run: set (to anything but empty)
/// by `cargo xtask test`, which installs what the tests need.
pub const ALL_TESTS: &str = "DSH_TEST_ALL";

/// Whether every program in `programs` is on `PATH`, for a test that runs
/// them. Without one it is skipped (false, after a line on stderr saying
/// what it needs), unless [`ALL_TESTS`] is set: then it fails, naming
/// what is missing, since a skipped test there would hide a missing
/// install.
#[track_caller]
pub fn needs(programs: &[&str]) -> bool {
    let missing: Vec<&str> = programs.iter().copied().filter(|p| !on_path(p)).collect();
    missing.is_empty() || skip(&format!("{} on PATH", missing.join(", ")))
}

/// Skips the calling test for want of `what` (false, after a line on
/// stderr), or fails it when [`ALL_TESTS`] is set.
#[track_caller]
fn skip(what: &str) -> bool {
    let caller = std::panic::Location::caller();
    assert!(
        std::env::var_os(ALL_TESTS).is_none_or(|v| v.is_empty()),
        "{caller}: this test needs {what}; `cargo xtask test` installs what it can"
    );
    eprintln!(
        "{caller}: skipped: needs {what} (`cargo xtask test`, or {ALL_TESTS}=1 cargo test with it there, runs it)"
    );
    false
}

/// Whether this test runs as root, for a test that needs what only root
/// may do (`what`: a private PID namespace made with `unshare(1)`, say).
/// As [`needs`]: skipped (false, with a line on stderr) unless
/// [`ALL_TESTS`] is set, where it fails.
#[track_caller]
pub fn needs_root(what: &str) -> bool {
    use std::os::unix::fs::MetadataExt as _;
    // /proc/self belongs to the process's effective user.
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0) || skip(&format!("root for {what}"))
}

/// Whether `program` names an executable file on `PATH` (or is a path to
/// one).
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    let executable = |p: &std::path::Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.contains('/') {
        return executable(std::path::Path::new(program));
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

/// The bound every wait here uses: long enough that only a hang reaches it.
pub const HANG: Duration = Duration::from_secs(30);

/// Pauses between polls: short at first (most events come quickly), then
/// backing off so a long wait costs no CPU.
fn pauses() -> impl Iterator<Item = Duration> {
    [1, 2, 5, 10, 20]
        .into_iter()
        .chain(std::iter::repeat(50))
        .map(Duration::from_millis)
}

/// Polls `condition` until it holds; panics naming `what` after [`HANG`].
#[track_caller]
pub fn wait_until(what: &str, condition: impl FnMut() -> bool) {
    wait_until_within(HANG, what, condition);
}

/// [`wait_until`] with a bound of its own, for the few waits that may
/// legitimately take longer than [`HANG`] on a loaded machine.
#[track_caller]
pub fn wait_until_within(limit: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    for pause in pauses() {
        if condition() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waited {limit:?} and still not: {what}"
        );
        std::thread::sleep(pause);
    }
}

/// Polls `probe` until it returns `Some`, and returns that value; panics
/// naming `what` after [`HANG`].
#[track_caller]
pub fn wait_for<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let mut found = None;
    wait_until(what, || {
        found = probe();
        found.is_some()
    });
    match found {
        Some(value) => value,
        None => unreachable!("wait_until returns only once the probe answered"),
    }
}

/// Starts `command` with its stdout piped and returns once the child
/// printed its first line, which must be `ready`: the event a helper
/// process of a test (a server, a process holding a terminal) announces
/// its set-up by. Panics when it prints something else or exits first.
#[track_caller]
pub fn spawn_ready(command: &mut std::process::Command) -> std::process::Child {
    use std::io::BufRead as _;
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{command:?} could not start: {e}"));
    let mut line = String::new();
    if let Some(stdout) = child.stdout.take() {
        let _ = std::io::BufReader::new(stdout).read_line(&mut line);
    }
    assert_eq!(line.trim(), "ready", "{command:?} did not say it was ready");
    child
}

/// The async form of [`wait_until`] for tests on a tokio runtime: the
/// pauses yield to the runtime instead of blocking a worker.
pub async fn wait_until_async(what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = Instant::now() + HANG;
    for pause in pauses() {
        if condition() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "waited {HANG:?} and still not: {what}"
        );
        tokio::time::sleep(pause).await;
    }
}

/// Polls an async `probe` until it returns `Some`, and returns that
/// value; panics naming `what` after [`HANG`].
pub async fn wait_for_async<T, F, Fut>(what: &str, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + HANG;
    for pause in pauses() {
        if let Some(value) = probe().await {
            return value;
        }
        assert!(
            Instant::now() < deadline,
            "waited {HANG:?} and still not: {what}"
        );
        tokio::time::sleep(pause).await;
    }
    unreachable!("the pauses never end")
}

/// Polls `probe` until it returns `want`, and returns what it saw last:
/// `want`, or after [`HANG`] the value that differs, for an `assert_eq!`
/// that shows the difference.
pub async fn wait_for_equal_async<T: PartialEq>(want: &T, mut probe: impl FnMut() -> T) -> T {
    let deadline = Instant::now() + HANG;
    for pause in pauses() {
        let seen = probe();
        if seen == *want || Instant::now() >= deadline {
            return seen;
        }
        tokio::time::sleep(pause).await;
    }
    unreachable!("the pauses never end")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_condition_that_comes_true_ends_the_wait() {
        let mut calls = 0;
        wait_until("the third call", || {
            calls += 1;
            calls == 3
        });
        assert_eq!(calls, 3);
        let mut n = 0;
        assert_eq!(
            wait_for("a value", || {
                n += 1;
                (n == 2).then_some("found")
            }),
            "found"
        );
    }

    #[test]
    #[should_panic(expected = "and still not: never")]
    fn a_condition_that_never_holds_fails_at_the_deadline() {
        wait_until_within(Duration::from_millis(20), "never", || false);
    }

    #[tokio::test]
    async fn the_async_forms_end_on_the_condition_too() {
        let mut calls = 0;
        wait_until_async("the second call", || {
            calls += 1;
            calls == 2
        })
        .await;
        assert_eq!(calls, 2);
        let mut n = 0;
        let got = wait_for_async("a value", || {
            n += 1;
            let ready = n == 3;
            async move { ready.then_some(n) }
        })
        .await;
        assert_eq!(got, 3);
        let mut n = 0;
        let last = wait_for_equal_async(&4, || {
            n += 1;
            n
        })
        .await;
        assert_eq!(last, 4);
    }
}
