//! Tidy checks over the test sources, run by `cargo test -p xtask`.
//!
//! Tests synchronise on events (output, notifications, `/proc` state),
//! never on a sleep of a guessed length: a sleep that is long enough on an
//! idle machine is too short on a loaded one. Polling for a condition goes
//! through the helpers made for it (the `test-support` crate,
//! `tests/e2e/waiting.py`), which are the only test code that sleeps. The
//! few other sleeps that are not synchronisation (a child program's own
//! work, pacing the retries of a not-ready answer) carry a
//! `sleep-ok: <why>` comment on the same line or the line above.

use std::path::{Path, PathBuf};

/// The comment that allows one sleep, followed by the reason.
const ALLOW: &str = "sleep-ok:";

/// Files that may sleep: the polling helpers themselves.
const HELPERS: &[&str] = &["tests/e2e/waiting.py"];

/// 1-based numbers of the lines of `text` that call a sleep without a
/// `sleep-ok:` reason on that line or the one above.
pub fn unexplained_sleeps(text: &str) -> Vec<usize> {
    let lines: Vec<&str> = text.lines().collect();
    let allowed = |line: &str| {
        line.find(ALLOW)
            .is_some_and(|at| !line[at + ALLOW.len()..].trim().is_empty())
    };
    lines
        .iter()
        .enumerate()
        .filter(|(i, line)| {
            let above = i.checked_sub(1).map(|j| lines[j]);
            let allowed_above = above.is_some_and(|a| allowed(a) && !calls_sleep(a));
            calls_sleep(line) && !allowed(line) && !allowed_above
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Whether `line` calls a function named `sleep` (`thread::sleep(`,
/// `tokio::time::sleep(`, `time.sleep(`, `anyio.sleep(`, a bare `sleep(`),
/// as opposed to a shell's `sleep 300` or a name such as `nanosleep(`.
fn calls_sleep(line: &str) -> bool {
    line.match_indices("sleep(").any(|(at, _)| {
        !line[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
    })
}

/// The test sources: `crates/*/tests/**/*.rs` and `tests/e2e/**/*.py`.
pub fn test_sources(root: &Path) -> std::io::Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for krate in std::fs::read_dir(root.join("crates"))? {
        let tests = krate?.path().join("tests");
        if tests.is_dir() {
            collect(&tests, "rs", &mut found)?;
        }
    }
    collect(&root.join("tests/e2e"), "py", &mut found)?;
    found.retain(|path| !HELPERS.iter().any(|helper| path.ends_with(helper)));
    found.sort();
    Ok(found)
}

/// Every file under `dir` (recursively) whose extension is `extension`.
pub fn collect(dir: &Path, extension: &str, found: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect(&path, extension, found)?;
        } else if path.extension().is_some_and(|e| e == extension) {
            found.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// No test file sleeps to synchronise (see the module doc).
    #[test]
    fn test_files_do_not_sleep_to_synchronise() {
        let root = crate::root();
        let files = test_sources(&root).unwrap();
        assert!(files.len() >= 20, "found only {files:?}");
        let offenders: Vec<String> = files
            .iter()
            .flat_map(|path| {
                let text = std::fs::read_to_string(path).unwrap();
                let shown = path
                    .strip_prefix(&root)
                    .unwrap_or(path)
                    .display()
                    .to_string();
                unexplained_sleeps(&text)
                    .into_iter()
                    .map(move |line| format!("{shown}:{line}"))
            })
            .collect();
        assert!(
            offenders.is_empty(),
            "these test lines sleep instead of waiting for an event; wait on the event \
             (or poll with test_support / waiting.py), or say why with `{ALLOW} <reason>`:\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn the_check_finds_sleep_calls_and_honours_the_reason() {
        let text = "\
tokio::time::sleep(Duration::from_millis(100)).await;
std::thread::sleep(d);
    time.sleep(1.5)
await anyio.sleep(0.3)
let out = f.send(id, \"sleep 300 & echo $$\").await;
nanosleep(ts);
// sleep-ok: the child's own work
time.sleep(300)
tokio::time::sleep(d).await; // sleep-ok: pacing retries
time.sleep(1)  # sleep-ok:
";
        assert_eq!(unexplained_sleeps(text), vec![1, 2, 3, 4, 10]);
    }
}
