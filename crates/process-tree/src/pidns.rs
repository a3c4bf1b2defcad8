//! A PID namespace per session, so that the kernel, not a helper that might
//! be killed with the host, ends every process of it when the host dies.
//!
//! **Why.** A session's leader dies with the host (its parent-death
//! signal), and so does whatever reads the terminal in the foreground (the
//! hang-up). A background process (`server &`, a daemonised build) has
//! neither: it outlives the host unless the guardian ends it, and a
//! `kill -9` of every dsh process at once, or an OOM kill of the host's
//! group, takes the guardian too. When the first process (the *init*) of a
//! PID namespace dies, the kernel kills every other process in it, and no
//! process can leave a PID namespace.
//!
//! **The shape.** Three processes where there was one:
//!
//! * the *leader* (the session leader the host holds, in the host's
//!   namespace): after the site's steps (and the sandbox's entry into its
//!   user namespace, which gives the right to make the others) it unshares
//!   a PID and a mount namespace, starts the two others, and becomes the
//!   *waiter* — this helper binary with [`WAIT_ARG`] — which waits for the
//!   program and exits the way it did (the same code, or killed by the same
//!   signal), so the host sees what it always saw;
//! * the *init* (pid 1 inside), started with `CLONE_PARENT` so that it is
//!   the host's child, not the leader's: armed to die with the host, it
//!   mounts the namespace's own `/proc` (so `ps`, `kill` and pid files
//!   inside agree) and becomes this binary with [`INIT_ARG`], which only
//!   reaps orphans;
//! * the *program* (pid 2 inside), in a process group of its own that it
//!   puts in the terminal's foreground, runs the program's steps (the
//!   sandbox's restrictions) and `exec`s it.
//!
//! When the program exits, so does the waiter, and the host ends what the
//! program left as it always did — with its escalation, and counted
//! ("1 background process(es) still running at exit were ended") — but
//! now also what left the session inside the namespace (`setsid cmd &`),
//! and then kills the init ([`crate::Leader::end_session`]). The init
//! outlives the leader for that: were it the leader's child, its death
//! signal would end the namespace, unsignalled and uncounted, the moment
//! the program exits. When the host dies, its spawner thread's death
//! kills the leader and the init (parent-death signals), and the init's
//! death makes the kernel kill the rest.
//!
//! **Cost.** Two more `clone`s sharing the host's memory (as the leader's
//! own) and two `exec`s of this binary, which does nothing before its
//! check; `cargo xtask bench spawn` measures it.
//!
//! **Where it cannot be had.** Making a PID namespace needs
//! `CAP_SYS_ADMIN` in the caller's user namespace: root has it, and so has
//! a process inside the sandbox's user namespace. Elsewhere (no sandbox,
//! not root) `unshare` fails and the session runs as before, without one;
//! [`Spawned::program`](crate::Spawned::program) is then the leader. When
//! the namespace's `/proc` cannot be mounted (a container that masks parts
//! of the host's), the namespace is kept and `/proc` stays the host's.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::Path;
use std::sync::OnceLock;

/// The argument that makes the helper binary a namespace's init.
pub const INIT_ARG: &str = "--dsh-pid-namespace-init";
/// The argument that makes the helper binary the leader's waiter.
pub const WAIT_ARG: &str = "--dsh-pid-namespace-wait";

pub(crate) const INIT_ARG_C: &CStr = c"--dsh-pid-namespace-init";
pub(crate) const WAIT_ARG_C: &CStr = c"--dsh-pid-namespace-wait";
/// The name both helpers show in `ps`.
pub(crate) const HELPER_NAME: &CStr = c"dsh";

/// The helper binary, opened `O_PATH` once: `exec`ed through the
/// descriptor, it is found inside any mount namespace and survives an
/// upgrade that replaces the file.
static HELPER: OnceLock<OwnedFd> = OnceLock::new();

/// Names the binary that serves as every namespace's init and every
/// leader's waiter: one whose `main` calls [`run_helper_if_asked`] before
/// anything else (the host's own). Until it is set, no session gets a
/// namespace. Setting it again is a no-op.
pub fn set_helper(path: &Path) -> io::Result<()> {
    if HELPER.get().is_some() {
        return Ok(());
    }
    use std::os::unix::fs::OpenOptionsExt;
    // `O_PATH` (std adds `O_CLOEXEC`): enough to `exec`, nothing to read.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH)
        .open(path)?;
    let _ = HELPER.set(file.into());
    Ok(())
}

/// The helper's descriptor, once set.
pub(crate) fn helper_fd() -> Option<RawFd> {
    HELPER.get().map(AsRawFd::as_raw_fd)
}

/// Whether sessions that ask for a namespace can get one here: a helper
/// is set (the kernel decides at each spawn).
pub fn helper_is_set() -> bool {
    HELPER.get().is_some()
}

/// Runs the init or the waiter when this process was started as one (see
/// the module docs) and never returns then; returns at once otherwise.
/// Call it first in `main`.
pub fn run_helper_if_asked() {
    let mut args = std::env::args_os().skip(1);
    match args.next() {
        Some(arg) if arg == INIT_ARG => init_main(),
        Some(arg) if arg == WAIT_ARG => {
            let mut pid = || {
                args.next()
                    .and_then(|a| a.to_str().and_then(|a| a.parse::<libc::pid_t>().ok()))
                    .unwrap_or(0)
            };
            wait_main(pid())
        }
        Some(_) | None => {}
    }
}

/// Closes every descriptor: the helpers hold nothing (the terminal's or
/// the job's streams stay with the program only).
fn close_all() {
    // SAFETY: closes descriptors of this process; nothing here uses them.
    unsafe { libc::syscall(libc::SYS_close_range, 0u32, u32::MAX, 0u32) };
}

/// The namespace's init: reaps every orphan the namespace gives it until
/// it is killed (by the host once it has ended what the program left, or
/// by its parent-death signal). Every
/// signal stays blocked (as the leader left them): as pid 1 it ignores
/// what it does not catch anyway.
fn init_main() -> ! {
    close_all();
    // SAFETY: sigset operations on a local set.
    let mut children = unsafe { std::mem::zeroed::<libc::sigset_t>() };
    unsafe {
        libc::sigemptyset(&mut children);
        libc::sigaddset(&mut children, libc::SIGCHLD);
        libc::sigprocmask(libc::SIG_BLOCK, &children, std::ptr::null_mut());
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid into a local.
        let rc = unsafe { libc::waitpid(-1, &mut status, 0) };
        if rc < 0 && io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            // No child now: sleep until one (an orphan adopted later) exits.
            // SAFETY: waits on a blocked signal of a local set.
            unsafe { libc::sigwaitinfo(&children, std::ptr::null_mut()) };
        }
    }
}

/// The leader's waiter: waits for the program and exits as it did. Every
/// signal stays blocked (as the leader left them), so a Ctrl-C or a
/// SIGTERM to the session reaches the program only; SIGKILL ends the
/// waiter (the program, orphaned, is the init's then).
fn wait_main(program: libc::pid_t) -> ! {
    close_all();
    let no_core = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: setrlimit with a local struct; a mirrored SIGSEGV or SIGABRT
    // must not write a core file of the waiter.
    unsafe { libc::setrlimit(libc::RLIMIT_CORE, &no_core) };
    let mut program_status = None;
    if program <= 0 {
        // SAFETY: plain system call.
        unsafe { libc::_exit(127) };
    }
    loop {
        let mut status = 0;
        // SAFETY: waitpid into a local.
        let rc = unsafe { libc::waitpid(-1, &mut status, 0) };
        if rc == program {
            program_status = Some(status);
        } else if rc < 0 {
            if io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            break;
        }
    }
    mirror(program_status.unwrap_or(libc::SIGKILL))
}

/// Ends this process the way `status` (a `waitpid` status) says.
fn mirror(status: libc::c_int) -> ! {
    if libc::WIFEXITED(status) {
        // SAFETY: plain system call.
        unsafe { libc::_exit(libc::WEXITSTATUS(status)) };
    }
    let signal = if libc::WIFSIGNALED(status) {
        libc::WTERMSIG(status)
    } else {
        libc::SIGKILL
    };
    // SAFETY: resets one signal's action, unblocks it and sends it to this
    // process, which then dies of it as the program did.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut one = std::mem::zeroed::<libc::sigset_t>();
        libc::sigemptyset(&mut one);
        libc::sigaddset(&mut one, signal);
        libc::sigprocmask(libc::SIG_UNBLOCK, &one, std::ptr::null_mut());
        libc::kill(libc::getpid(), signal);
        libc::_exit(128 + signal)
    }
}

/// Writes `pid` in decimal, NUL-terminated, into `buf`. Async-signal-safe.
pub(crate) fn write_pid(buf: &mut [u8; 16], pid: libc::pid_t) {
    let mut digits = [0u8; 12];
    let mut n = pid.unsigned_abs();
    let mut len = 0;
    loop {
        if let Some(d) = digits.get_mut(len) {
            *d = b'0' + (n % 10) as u8;
        }
        len += 1;
        n /= 10;
        if n == 0 || len >= digits.len() {
            break;
        }
    }
    for (i, slot) in buf.iter_mut().enumerate() {
        *slot = if i < len {
            digits.get(len - 1 - i).copied().unwrap_or(b'0')
        } else {
            0
        };
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn pids_are_written_in_decimal() {
        let mut buf = [0xffu8; 16];
        for pid in [1, 7, 10, 4_194_304, i32::MAX] {
            write_pid(&mut buf, pid);
            let text = CStr::from_bytes_until_nul(&buf).unwrap();
            assert_eq!(text.to_str().unwrap(), pid.to_string());
        }
    }
}
