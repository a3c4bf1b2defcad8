//! The process on the other end of a Unix socket, as the kernel names
//! it: its pid (`SO_PEERCRED`) and a pidfd pinning it (`SO_PEERPIDFD`),
//! and whether a pinned process is still alive. A server checks who
//! connected with these; a client, who listens.

use std::os::fd::{AsFd, AsRawFd, FromRawFd as _, OwnedFd};

/// The pid of the process that connected `socket` (or that `socket` is
/// connected to), as the kernel recorded it at `connect`; `None` when it
/// cannot tell.
pub fn peer_pid(socket: &impl AsFd) -> Option<i32> {
    use nix::sys::socket::{getsockopt, sockopt::PeerCredentials};
    getsockopt(socket, PeerCredentials).ok().map(|c| c.pid())
}

/// A pidfd of the process that connected `socket`, where the kernel gives
/// one (`SO_PEERPIDFD`, Linux 6.5): `Ok(None)` on a kernel without it,
/// the errno on any other failure — usually the peer is gone (reaped
/// peers fail with `ESRCH` or, before Linux 6.16, `EINVAL`).
pub fn peer_pidfd(socket: &impl AsRawFd) -> Result<Option<OwnedFd>, i32> {
    let mut fd: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a getsockopt into an int of the size given.
    let done = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERPIDFD,
            (&raw mut fd).cast(),
            &raw mut len,
        )
    };
    if done == 0 && fd >= 0 {
        // SAFETY: the kernel handed us this new descriptor.
        return Ok(Some(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
    match std::io::Error::last_os_error().raw_os_error() {
        Some(libc::ENOPROTOOPT) => Ok(None),
        Some(errno) => Err(errno),
        None => Err(libc::EINVAL),
    }
}

/// Whether the process behind `pidfd` has not exited (a zombie has, but
/// keeps its pid: it counts as alive here, as its pid cannot be reused).
pub fn pidfd_alive(pidfd: &OwnedFd) -> bool {
    // SAFETY: signal 0 only checks; the descriptor is a valid pidfd.
    let sent = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            0,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    // EPERM: it exists, but is not ours to signal.
    sent == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Opens a pidfd for `pid`: once open it names that one process, whatever
/// later reuses the number.
pub fn pidfd_open(pid: i32) -> std::io::Result<OwnedFd> {
    crate::end::pidfd_open(pid).map_err(std::io::Error::from)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn the_peer_of_a_socket_pair_is_this_process_and_a_pidfd_tells_life() {
        let (a, _b) = std::os::unix::net::UnixStream::pair().unwrap();
        assert_eq!(peer_pid(&a), Some(std::process::id() as i32));
        let me = pidfd_open(std::process::id() as i32).unwrap();
        assert!(pidfd_alive(&me));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pinned = pidfd_open(child.id() as i32).unwrap();
        child.wait().unwrap();
        assert!(!pidfd_alive(&pinned));
    }
}
