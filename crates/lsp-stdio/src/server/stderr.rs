//! What a server prints on its stderr: read to its end by a task of its
//! own, the last lines kept for a `crashed` message, and the last error a
//! command the server ran printed (`cargo metadata`'s, say) kept apart for
//! a `load_failed` one.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncBufReadExt;

use super::{Server, Shared, lock};

/// Lines of stderr kept for a `crashed` message.
const STDERR_TAIL_LINES: usize = 20;
/// Longest stderr line kept.
const STDERR_LINE_BYTES: usize = 400;
/// Most lines kept of one error a server's command printed.
const STDERR_ERROR_LINES: usize = 12;

/// The last `error: …` block of a server's stderr (see
/// [`StderrError::note`]).
#[derive(Debug, Default)]
pub(super) struct StderrError {
    /// The block's lines, its `error:` line first.
    pub(super) lines: Vec<String>,
    /// Whether lines still join the block.
    open: bool,
}

impl StderrError {
    /// rust-analyzer logs a failed command's stderr after its own log
    /// line: the block is a line starting with `error:` and the lines
    /// after it up to the next log line (which starts with a timestamp or
    /// a level).
    pub(super) fn note(&mut self, line: &str) {
        if line.starts_with("error:") || line.starts_with("error[") {
            self.lines = vec![line.to_owned()];
            self.open = true;
            return;
        }
        let log_line = line
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c.is_ascii_uppercase())
            && !line.starts_with("Caused by");
        if log_line {
            self.open = false;
        } else if self.open && self.lines.len() < STDERR_ERROR_LINES && !line.trim().is_empty() {
            self.lines.push(line.to_owned());
        }
    }
}

/// Reads the server's stderr to its end: each line (cut to
/// [`STDERR_LINE_BYTES`]) goes to the debug log, the tail and the error
/// block; the end is marked in `stderr_closed`.
pub(super) fn spawn_reader(shared: Arc<Shared>, name: String, stderr: tokio::process::ChildStderr) {
    tokio::spawn(async move {
        let mut lines = tokio::io::BufReader::new(stderr).lines();
        while let Ok(Some(mut line)) = lines.next_line().await {
            tracing::debug!(server = %name, "stderr: {line}");
            if line.len() > STDERR_LINE_BYTES {
                let mut cut = STDERR_LINE_BYTES;
                while !line.is_char_boundary(cut) {
                    cut -= 1;
                }
                line.truncate(cut);
            }
            lock(&shared.stderr_error).note(&line);
            let mut tail = lock(&shared.stderr);
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        shared.stderr_closed.send_replace(true);
    });
}

impl Server {
    /// Waits (briefly) until a dead server's stderr has been read to its
    /// end, so its last lines can be reported.
    pub async fn stderr_drained(&self) {
        let mut rx = self.shared.stderr_closed.subscribe();
        let _ =
            tokio::time::timeout(Duration::from_millis(500), rx.wait_for(|closed| *closed)).await;
    }

    /// The last lines of stderr, formatted for an error message.
    pub fn stderr_tail_text(&self) -> String {
        let tail = lock(&self.shared.stderr);
        if tail.is_empty() {
            String::new()
        } else {
            format!(
                "; last stderr lines:\n{}",
                tail.iter().cloned().collect::<Vec<_>>().join("\n")
            )
        }
    }
}
