//! Reaping: the children a [`crate::Leader`] holds, and every other zombie.

use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard};

use nix::errno::Errno;
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::Pid;

use crate::scan::all_processes;

/// The pids (and start times) of children that a [`crate::Leader`] still holds: their exit
/// status belongs to it, so the orphan reaper leaves them alone. The lock
/// is also held from the child's start to its registration (see [`crate::spawn`]), so a
/// child that exits at once is never taken for an orphan.
static HELD: Mutex<BTreeMap<i32, u64>> = Mutex::new(BTreeMap::new());

/// Locks the held set (a poisoned lock is still a valid set).
pub(crate) fn held() -> MutexGuard<'static, BTreeMap<i32, u64>> {
    HELD.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Makes this process the "child subreaper" of its descendants: orphans
/// are re-parented to it instead of to init. Call once at host start-up
/// on machines whose init may not reap.
pub fn become_subreaper() -> Result<(), Errno> {
    nix::sys::prctl::set_child_subreaper(true)
}

/// Reaps every zombie child of this process that no [`crate::Leader`]
/// holds and that is not in this process's own session: adopted orphans
/// (whether or not they called `setsid`), and children whose leader was
/// dropped. Every child [`crate::spawn_session`] starts leads a session
/// of its own, and what its session leaves behind keeps that session (or
/// one it made), so none of them is in ours. A child a leader holds keeps
/// its exit status for its owner. Returns how many were reaped.
///
/// A plain child (`std` or `tokio`, started in this process's session)
/// is left to the code that waits for it. One that made a session of its
/// own (`setsid`) looks like an orphan here and may be reaped first; its
/// own wait then fails with `ECHILD`. The host therefore spawns every
/// child it waits for through [`crate::spawn_session`].
pub fn reap_adopted() -> usize {
    // The stacks of PID namespace helpers that have exited go, and the
    // inits among them are reaped, through their pidfds.
    crate::helpers::sweep();
    let me = std::process::id() as i32;
    // SAFETY: plain syscall.
    let our_session = unsafe { libc::getsid(0) };
    let zombies: Vec<i32> = all_processes()
        .into_iter()
        .filter(|p| p.ppid == me && p.is_zombie() && p.sid != our_session)
        .map(|p| p.pid)
        .collect();
    if zombies.is_empty() {
        return 0;
    }
    // Under the lock: a pid seen as a zombie child existed before the lock
    // was taken, so its spawn (which holds the lock from start to
    // registration) has registered it by now if it is held.
    let held = held();
    zombies
        .into_iter()
        .filter(|pid| !held.contains_key(pid))
        .filter(|pid| {
            matches!(
                waitpid(Pid::from_raw(*pid), Some(WaitPidFlag::WNOHANG)),
                Ok(status) if status != WaitStatus::StillAlive
            )
        })
        .count()
}
