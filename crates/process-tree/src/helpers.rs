//! The memory a PID namespace's helpers run on: the stacks of the inits
//! and of the leaders that stay on as waiters (see [`crate::pidns`]).
//!
//! They run in the host's memory, beside its threads, and never `exec`:
//! a stack unmapped while its process still ran would let that process
//! write over whatever the host maps there next. So each stack is kept
//! here, with a pidfd of the process on it, until the pidfd says the
//! process has exited (a process releases its memory before it turns
//! into a zombie). [`keep`] sweeps the ones that are done each time, so
//! what is kept is bounded by the helpers alive.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::AtomicI32;
use std::sync::{Arc, Mutex};

use crate::child::Stack;

/// The waiter's status slot before it has one to leave (a wait status is
/// never negative).
pub(crate) const NO_STATUS: i32 = i32::MIN;

struct Kept {
    /// The process on the stack; `None` when no pidfd could be had (the
    /// stack is then never unmapped: a leak, never a hazard).
    pidfd: Option<OwnedFd>,
    /// Whether this process reaps it once it has exited (an init: the
    /// host is its parent, and nothing else waits for it); a waiter is
    /// its [`crate::Leader`]'s to reap.
    reap: bool,
    _stack: Stack,
    /// The waiter's status slot, which it writes last.
    _status: Option<Arc<AtomicI32>>,
}

static KEPT: Mutex<Vec<Kept>> = Mutex::new(Vec::new());

/// What runs on a kept stack.
pub(crate) enum Helper {
    /// A leader that waits, leaving the program's status in the slot.
    Waiter(Arc<AtomicI32>),
    /// A namespace's init, reaped here once it has exited.
    Init,
}

/// Keeps `stack` (and the waiter's status slot, which it may write) until
/// `pid`, a child of this process not yet reaped, has exited; first
/// drops what was kept for processes that have (see [`sweep`]).
pub(crate) fn keep(pid: libc::pid_t, stack: Stack, helper: Helper) {
    let pidfd = crate::end::pidfd_open(pid).ok();
    let (reap, status) = match helper {
        Helper::Waiter(status) => (false, Some(status)),
        Helper::Init => (true, None),
    };
    let mut kept = lock();
    sweep_locked(&mut kept);
    kept.push(Kept {
        pidfd,
        reap,
        _stack: stack,
        _status: status,
    });
}

fn lock() -> std::sync::MutexGuard<'static, Vec<Kept>> {
    KEPT.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Drops what was kept for helpers that have exited, and reaps the inits
/// among them (unless the orphan reaper was first). Called on each spawn,
/// after an init is killed, when a leader is reaped and by the orphan
/// reaper (which the host runs after each burst of SIGCHLD), so a killed
/// init is never waited for on the way to a reply — the kernel tears its
/// namespaces down on its own time — and its stack goes soon after.
pub(crate) fn sweep() {
    sweep_locked(&mut lock());
}

fn sweep_locked(kept: &mut Vec<Kept>) {
    kept.retain(|k| {
        let Some(fd) = &k.pidfd else {
            return true;
        };
        if !crate::raw::pidfd_exited(fd.as_raw_fd()) {
            return true;
        }
        if k.reap {
            // SAFETY: zeroed siginfo is a valid "nothing yet" value.
            let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
            // SAFETY: waitid on a pidfd we own, into `info`; it has
            // exited, so this does not wait (ECHILD if reaped already).
            unsafe {
                libc::waitid(
                    libc::P_PIDFD,
                    fd.as_raw_fd() as libc::id_t,
                    &mut info,
                    libc::WEXITED | libc::WNOHANG,
                )
            };
        }
        false
    });
}
