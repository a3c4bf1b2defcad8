//! Accepting connections when accepting fails: the daemon's Unix socket
//! and the page's port back off the same way.

use std::time::{Duration, Instant};

/// Whether `errno` says the process is out of descriptors or memory: a
/// condition that lasts, where retrying at once would spin.
pub fn is_resource_error(errno: i32) -> bool {
    matches!(
        errno,
        libc::EMFILE | libc::ENFILE | libc::ENOMEM | libc::ENOBUFS
    )
}

/// The accept loop's answer to failing accepts. Out of descriptors
/// (`EMFILE`, `ENFILE`) or memory (`ENOBUFS`, `ENOMEM`), `accept` fails at
/// once for as long as the condition lasts, and the connection stays in
/// the backlog: retrying at once would spin. After each failure the loop
/// waits a growing delay (10 ms, doubling, at most 1 s) before it accepts
/// again; a success resets it. The log gets the first failure at once and
/// then at most one line per [`AcceptBackoff::LOG_EVERY`], with the number
/// of failures it did not log.
#[derive(Debug)]
pub struct AcceptBackoff {
    /// Who is accepting, for the log ("the daemon", "the page").
    who: &'static str,
    /// The current delay (zero: accepting normally).
    delay: Duration,
    /// When the last failure happened.
    failed_at: Option<Instant>,
    /// When a failure was last logged.
    logged_at: Option<Instant>,
    /// Failures since then that were not logged.
    suppressed: u64,
    /// Failures since the last success.
    failures: u64,
}

impl AcceptBackoff {
    /// A loop that accepts for `who` (named in the log), accepting at once.
    pub fn new(who: &'static str) -> Self {
        Self {
            who,
            delay: Duration::ZERO,
            failed_at: None,
            logged_at: None,
            suppressed: 0,
            failures: 0,
        }
    }

    const FIRST: Duration = Duration::from_millis(10);
    const MAX: Duration = Duration::from_secs(1);
    const LOG_EVERY: Duration = Duration::from_secs(10);

    /// When accepting may resume, while backing off.
    pub fn resume_at(&self) -> Option<Instant> {
        self.failed_at.map(|at| at + self.delay)
    }

    fn log_due(&self, now: Instant) -> bool {
        self.logged_at
            .is_none_or(|at| now.duration_since(at) >= Self::LOG_EVERY)
    }

    /// An accept failed at `now`: wait longer, and log if it is time.
    /// True when it was logged.
    pub fn failed(&mut self, error: &std::io::Error, now: Instant) -> bool {
        self.delay = (self.delay * 2).clamp(Self::FIRST, Self::MAX);
        self.failed_at = Some(now);
        self.failures += 1;
        if !self.log_due(now) {
            self.suppressed += 1;
            return false;
        }
        let who = self.who;
        if error.raw_os_error().is_some_and(is_resource_error) {
            tracing::warn!(
                failures_not_logged = self.suppressed,
                retry_in_ms = self.delay.as_millis() as u64,
                "accept failed: {error}; {who} is out of file descriptors or memory; new clients \
                 wait until some are free (raise `ulimit -n`, or end what holds them)"
            );
        } else {
            tracing::warn!(
                failures_not_logged = self.suppressed,
                retry_in_ms = self.delay.as_millis() as u64,
                "accept failed: {error}; new clients of {who} wait"
            );
        }
        self.logged_at = Some(now);
        self.suppressed = 0;
        true
    }

    /// An accept succeeded: back to accepting at once.
    pub fn succeeded(&mut self, now: Instant) {
        if self.failures > 0 && self.log_due(now) {
            tracing::warn!(
                failures_not_logged = self.suppressed,
                "{} accepts connections again after {} failed accepts",
                self.who,
                self.failures
            );
            self.logged_at = Some(now);
            self.suppressed = 0;
        }
        self.delay = Duration::ZERO;
        self.failed_at = None;
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_accepts_back_off_from_10_ms_to_1_s_and_a_success_resets() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let mut backoff = AcceptBackoff::new("a test");
        let start = Instant::now();
        assert_eq!(backoff.resume_at(), None);
        let mut now = start;
        let mut delays = Vec::new();
        for _ in 0..10 {
            backoff.failed(&emfile, now);
            let resume = backoff.resume_at().map(|at| at - now);
            delays.push(resume.map(|d| d.as_millis()));
            now += Duration::from_millis(1);
        }
        assert_eq!(
            delays,
            [10, 20, 40, 80, 160, 320, 640, 1000, 1000, 1000].map(Some)
        );
        backoff.succeeded(now);
        assert_eq!(backoff.resume_at(), None);
        backoff.failed(&emfile, now);
        assert_eq!(
            backoff.resume_at().map(|at| at - now),
            Some(Duration::from_millis(10))
        );
    }

    #[test]
    fn failed_accepts_are_logged_once_per_interval_with_the_count_left_out() {
        let emfile = std::io::Error::from_raw_os_error(libc::EMFILE);
        let mut backoff = AcceptBackoff::new("a test");
        let start = Instant::now();
        // a failure every 10 ms for a minute: one line every 10 s
        let logged = (0..6000)
            .filter(|i| backoff.failed(&emfile, start + Duration::from_millis(10 * i)))
            .count();
        assert_eq!(logged, 6);
        // the next line counts the failures the log left out
        assert_eq!(backoff.suppressed, 999);
        // a brief success between failures does not restart the log
        backoff.succeeded(start + Duration::from_secs(60));
        assert!(!backoff.failed(&emfile, start + Duration::from_millis(60_010)));
        assert!(backoff.failed(&emfile, start + Duration::from_secs(71)));
        assert_eq!(backoff.suppressed, 0);
    }
}
