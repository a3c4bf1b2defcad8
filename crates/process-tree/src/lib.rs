//! Spawn, find, signal and verifiably end every process of a Unix session.
//!
//! Shell job control puts `cmd &` in a process group of its own, so
//! `killpg` on the leader's group misses it; a process may also be re-parented
//! away from its shell. What every descendant keeps, unless it calls
//! `setsid` itself, is the *session id*. This crate therefore works on
//! sessions: it scans `/proc/*/stat`, signals every member, escalates, and
//! checks that none is left running.
//!
//! Four guarantees rest on it, and each has its module:
//!
//! * **One spawn path** ([`spawn_session`], [`SessionCommand`]): every child
//!   is a session leader, started on one long-lived thread so its
//!   parent-death signal means "the host died", with room for the host's
//!   own `pre_exec` steps ([`add_pre_exec_step`]). It is started as
//!   `posix_spawn` starts one, with `clone(CLONE_VM | CLONE_VFORK)`: a
//!   `fork` would copy the host's page tables only to drop them at `exec`.
//! * **Never a reused pid**: a [`Leader`] keeps its child unreaped (it
//!   watches the exit with `waitid(WNOWAIT)` on a pidfd) until its owner is
//!   done, so the session id cannot name anyone else meanwhile; each process
//!   is signalled through a pidfd after its start time is re-checked
//!   ([`signal_process`]).
//! * **No zombies**: [`become_subreaper`] makes the host adopt orphaned
//!   descendants and [`reap_adopted`] reaps every zombie child no
//!   [`Leader`] holds — including orphans that called `setsid`.
//! * **Nothing outlives the host**: a [`guardian`] process, told of every
//!   session, ends them all when the host dies; and a session that asks
//!   for one runs its program in a PID namespace whose init dies with the
//!   host ([`pidns`]), so the kernel ends the rest even when the guardian
//!   dies with it.
//!
//! The core is synchronous and runtime-free: the waits are short sleeps,
//! so async callers run [`end_session`] on a blocking thread. The `tokio`
//! feature adds [`Leader::exited`]; the `testing` feature, which only
//! dev-dependencies enable, adds `testing` (forcing a pid to be reused, for
//! tests). It knows nothing of terminals or jobs.
//!
//! In the child every signal starts at its default action, so a host
//! started with SIGINT ignored (`nohup`, a background job of a script)
//! does not pass that on. A sandbox plugs in through the steps: its
//! `Prepared::enter_step` is a PID namespace's entry step
//! ([`SessionCommand::pid_namespace`]), and its `Prepared::restrict_step`
//! one of the steps that must run inside
//! ([`SessionCommand::program_pre_exec`]).
//!
//! Beside them, the process on the other end of a Unix socket
//! ([`peer_pid`], [`peer_pidfd`], [`pidfd_alive`]): a server that checks
//! who connected pins it with the same pidfds.

mod child;
mod end;
pub mod guardian;
mod helpers;
mod peer;
pub mod pidns;
mod raw;
mod reap;
mod scan;
mod spawn;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "tokio")]
mod wait;

pub use child::ChildIo;
pub use end::{
    EndReport, Member, Step, Survivors, TERM_THEN_KILL, end_session, signal_process,
    signal_session, wait_until_empty,
};
pub use guardian::{serve_guardian, start_guardian};
pub use peer::{peer_pid, peer_pidfd, pidfd_alive, pidfd_open};
pub use reap::{become_subreaper, reap_adopted};
pub use scan::{
    ProcessInfo, all_processes, command_line, live_descendants, live_session_members, parse_stat,
    proc_is_ours, process_info, resident_kib, session_members, ticks_since_boot,
};
pub use spawn::{Leader, PreExecStep, SessionCommand, Spawned, add_pre_exec_step, spawn_session};

use nix::sys::signal::Signal;

/// Makes the calling process a session leader; meant for `pre_exec` in
/// code that spawns outside [`spawn_session`] (tests, one-off tools):
///
/// ```no_run
/// # use std::os::unix::process::CommandExt;
/// let mut command = std::process::Command::new("bash");
/// // SAFETY: `setsid` is async-signal-safe and touches no memory.
/// unsafe { command.pre_exec(process_tree::setsid_in_child) };
/// ```
pub fn setsid_in_child() -> std::io::Result<()> {
    nix::unistd::setsid()
        .map(drop)
        .map_err(std::io::Error::from)
}

/// The conventional name of a signal number (`SIGKILL`), or `SIG<n>`.
pub fn signal_name(signal: i32) -> String {
    Signal::try_from(signal).map_or_else(|_| format!("SIG{signal}"), |s| s.as_str().to_owned())
}
