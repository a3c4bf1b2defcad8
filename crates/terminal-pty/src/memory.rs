//! Handing the memory of closed terminals back to the system.
//!
//! A terminal's buffers (screen grid, scrollback, capture) are allocated on
//! whichever runtime thread opened or fed it, and glibc keeps one heap per
//! thread ("arena"). Freed chunks in the middle of those heaps are reused
//! but not returned, so without help a long-running server that opened and
//! closed many terminals stays at its high-water mark even though almost
//! nothing is in use. After a terminal is freed, [`release_freed_memory`]
//! asks glibc (`malloc_trim`) to return the free pages of every arena —
//! once per burst of closes, on a blocking thread.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Closes often come in bursts (an owner's terminals end together): one
/// trim covers a burst.
const BURST: Duration = Duration::from_millis(200);

static PENDING: AtomicBool = AtomicBool::new(false);

/// Schedules one return of freed memory to the system, unless one is
/// already pending. Outside a tokio runtime it trims at once.
pub(crate) fn release_freed_memory() {
    if PENDING.swap(true, Ordering::AcqRel) {
        return;
    }
    match tokio::runtime::Handle::try_current() {
        Ok(handle) => {
            handle.spawn(async {
                tokio::time::sleep(BURST).await;
                PENDING.store(false, Ordering::Release);
                let _ = tokio::task::spawn_blocking(trim).await;
            });
        }
        Err(_) => {
            PENDING.store(false, Ordering::Release);
            trim();
        }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn trim() {
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() {}
