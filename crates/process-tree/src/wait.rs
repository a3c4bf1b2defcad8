//! Waiting for a [`Leader`] to exit from async code (feature `tokio`).

use std::io;
use std::process::ExitStatus;
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

use crate::Leader;

impl Leader {
    /// Resolves when the leader has exited, with how it exited, without
    /// reaping it. Woken by the leader's pidfd; on a kernel without pidfds
    /// it checks with a backing-off pause (1 ms to 50 ms). Must run inside
    /// a tokio runtime.
    pub async fn exited(&self) -> io::Result<ExitStatus> {
        if let Some(status) = self.try_exit() {
            return Ok(status);
        }
        if let Some(fd) = self.pidfd() {
            let owned = fd.try_clone_to_owned()?;
            // SAFETY: `owned` is a valid descriptor we own; it is neither
            // closed nor replaced while the `AsyncFd` holds it.
            let watched = unsafe { AsyncFd::register_with_interest(owned, Interest::READABLE)? };
            loop {
                if let Some(status) = self.try_exit() {
                    return Ok(status);
                }
                let mut ready = watched.readable().await?;
                if let Some(status) = self.try_exit() {
                    return Ok(status);
                }
                ready.clear_ready();
            }
        }
        let mut pause = Duration::from_millis(1);
        loop {
            if let Some(status) = self.try_exit() {
                return Ok(status);
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }
}
