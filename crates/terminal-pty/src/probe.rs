//! Is a process blocked reading the terminal? Read from `/proc`.
//!
//! `/proc/<pid>/syscall` names the system call a sleeping process is
//! blocked in and its arguments. A wait *on the terminal* is a `read` of a
//! descriptor that is the terminal, or a `select`/`poll`/`epoll` wait whose
//! set contains one (the sets are read from the process's memory with
//! `process_vm_readv`, or from `/proc/<pid>/fdinfo` for epoll). Freshness is
//! proved by `voluntary_ctxt_switches` in `/proc/<pid>/status`: it grows each
//! time the process blocks again.
//!
//! A descriptor *is the terminal* when it opens the terminal's own inode —
//! however it was opened: inherited, duplicated, by a path under
//! `/dev/pts` or a link to it, in the sandbox's `devpts` instance or the
//! host's — or when it opens `/dev/tty` and the terminal is the process's
//! controlling terminal. Password prompts (`getpass`, `read -s < /dev/tty`,
//! `ssh-keygen`, `ssh`) and the perl debugger read `/dev/tty`, whose link
//! names neither the terminal nor its number; comparing inodes and device
//! numbers (`stat` through the `/proc/<pid>/fd` link) sees them all.
//!
//! A set-uid program such as `sudo` or `su` started by a regular user
//! closes `syscall`, `fd` and its memory to us, but not `stat` and
//! `status`: [`sleeps_on_its_terminal`] says whether it sleeps with this
//! terminal as its controlling terminal, which the settle ladder takes,
//! with the terminal in canonical mode and echo off, as a password
//! prompt (see `settle`).

use std::fs;
use std::os::fd::{AsRawFd as _, BorrowedFd};
use std::os::unix::fs::{FileTypeExt as _, MetadataExt as _};
use std::time::Duration;

/// Which terminal a probe looks for: the identity of a pty's other end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Tty {
    /// The device of the `devpts` instance that holds it, and its inode
    /// there: unique among every instance's ptys.
    dev: u64,
    ino: u64,
    /// Its device number, which a process's controlling terminal is
    /// named by in `/proc/<pid>/stat`.
    rdev: u64,
}

/// `/dev/tty`: major 5, minor 0 — whatever the opener's controlling
/// terminal is.
const DEV_TTY: (u32, u32) = (5, 0);

impl Tty {
    /// The identity of the terminal open on `fd`.
    pub(crate) fn of(fd: BorrowedFd<'_>) -> std::io::Result<Self> {
        // SAFETY: `fstat` fills a `stat` we own, on a descriptor we borrow.
        let st = unsafe {
            let mut st: libc::stat = std::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            st
        };
        Ok(Self {
            dev: st.st_dev,
            ino: st.st_ino,
            rdev: st.st_rdev,
        })
    }

    /// The identity of the terminal device the path names (followed
    /// through links, as `/proc/<pid>/fd/<n>` is); `None` when it is not
    /// a character device or cannot be read.
    pub(crate) fn of_path(path: &str) -> Option<Self> {
        let meta = fs::metadata(path).ok()?;
        meta.file_type().is_char_device().then(|| Self {
            dev: meta.dev(),
            ino: meta.ino(),
            rdev: meta.rdev(),
        })
    }

    /// Whether a file of device `dev` and inode `ino` is this terminal.
    pub(crate) fn is(&self, dev: u64, ino: u64) -> bool {
        self.dev == dev && self.ino == ino
    }

    /// Whether a process's `tty_nr` (in `/proc/<pid>/stat`) names this
    /// terminal's device number. Every `devpts` instance gives the same
    /// numbers out, so that alone does not make it this terminal: the
    /// process must also be in the terminal's session, or hold it by a
    /// descriptor (see `holders::holders`).
    pub(crate) fn is_controlling(&self, tty_nr: u32) -> bool {
        terminal_of(tty_nr) == Some(device(self.rdev))
    }

    /// A terminal no descriptor is (for tests).
    #[cfg(test)]
    pub(crate) fn none() -> Self {
        Self {
            dev: u64::MAX,
            ino: u64::MAX,
            rdev: u64::MAX,
        }
    }
}

/// What a probe of one process found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WaitState {
    /// Blocked reading the terminal, in thread `tid` (the process's own
    /// id for its main thread), for at most `limit` (`None`: no limit).
    /// `alone`: the wait is a `read` of the terminal, on nothing else.
    OnTerminal {
        tid: i32,
        limit: Option<Duration>,
        alone: bool,
    },
    /// Running, or blocked on something else.
    Other,
    /// `/proc` does not tell (no permission, no such file).
    Unobservable,
    /// The process is gone.
    Gone,
}

#[cfg(target_arch = "x86_64")]
mod nr {
    pub const READ: i64 = 0;
    pub const READV: i64 = 19;
    pub const POLL: i64 = 7;
    pub const SELECT: i64 = 23;
    pub const PSELECT6: i64 = 270;
    pub const PPOLL: i64 = 271;
    pub const EPOLL_WAIT: i64 = 232;
    pub const EPOLL_PWAIT: i64 = 281;
    pub const EPOLL_PWAIT2: i64 = 441;
}

#[cfg(not(target_arch = "x86_64"))]
mod nr {
    // The generic table (aarch64, riscv64, loongarch64).
    pub const READ: i64 = 63;
    pub const READV: i64 = 65;
    pub const POLL: i64 = -100;
    pub const SELECT: i64 = -101;
    pub const PSELECT6: i64 = 72;
    pub const PPOLL: i64 = 73;
    pub const EPOLL_WAIT: i64 = -102;
    pub const EPOLL_PWAIT: i64 = 22;
    pub const EPOLL_PWAIT2: i64 = 441;
}

/// Probes `pid`: is it blocked waiting for input from the terminal `tty`?
///
/// Its main thread first, then every other thread: a program may read
/// the terminal from a thread of its own while its main thread waits on
/// something else — Tcl's notifier thread `select`s on it for `expect`
/// and `tclsh` while the main thread waits in `futex`, the BEAM's poller
/// thread for `erl` while the main thread sleeps in `pselect6`, the REPL
/// thread of `python3 -m asyncio` while the main thread runs the event
/// loop's `epoll_wait`, a JVM's reader thread.
pub(crate) fn wait_state(pid: i32, tty: &Tty) -> WaitState {
    match thread_wait(pid, pid, tty).0 {
        WaitState::Other => thread_ids(pid)
            .into_iter()
            .filter(|tid| *tid != pid)
            .map(|tid| thread_wait(pid, tid, tty).0)
            .find(|state| matches!(state, WaitState::OnTerminal { .. }))
            .unwrap_or(WaitState::Other),
        state @ (WaitState::OnTerminal { .. } | WaitState::Unobservable | WaitState::Gone) => state,
    }
}

/// Probes thread `tid` of process `pid`; with the system call it is
/// blocked in, when one.
fn thread_wait(pid: i32, tid: i32, tty: &Tty) -> (WaitState, Option<i64>) {
    let path = if tid == pid {
        format!("/proc/{pid}/syscall")
    } else {
        format!("/proc/{pid}/task/{tid}/syscall")
    };
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return (WaitState::Gone, None),
        Err(_) => return (WaitState::Unobservable, None),
    };
    let mut fields = text.split_whitespace();
    let Some(first) = fields.next() else {
        return (WaitState::Unobservable, None);
    };
    if first == "running" || first.starts_with('-') {
        return (WaitState::Other, None);
    }
    let Ok(number) = first.parse::<i64>() else {
        return (WaitState::Unobservable, None);
    };
    let args: Vec<u64> = fields
        .take(6)
        .filter_map(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .collect();
    let arg = |i: usize| args.get(i).copied().unwrap_or(0);
    // (on the terminal, for at most how long)
    let (on_terminal, limit) = match number {
        n if n == nr::READ || n == nr::READV => (fd_is(pid, arg(0) as i32, tty), None),
        n if n == nr::SELECT => (
            select_has_tty(pid, arg(0), arg(1), tty),
            time_limit(pid, arg(4), Clock::Timeval),
        ),
        n if n == nr::PSELECT6 => (
            select_has_tty(pid, arg(0), arg(1), tty),
            time_limit(pid, arg(4), Clock::Timespec),
        ),
        n if n == nr::POLL => (poll_has_tty(pid, arg(0), arg(1), tty), millis_limit(arg(2))),
        n if n == nr::PPOLL => (
            poll_has_tty(pid, arg(0), arg(1), tty),
            time_limit(pid, arg(2), Clock::Timespec),
        ),
        n if n == nr::EPOLL_WAIT || n == nr::EPOLL_PWAIT => {
            (epoll_has_tty(pid, arg(0) as i32, tty), millis_limit(arg(3)))
        }
        n if n == nr::EPOLL_PWAIT2 => (
            epoll_has_tty(pid, arg(0) as i32, tty),
            time_limit(pid, arg(3), Clock::Timespec),
        ),
        _ => (false, None),
    };
    if on_terminal {
        let alone = number == nr::READ || number == nr::READV;
        (WaitState::OnTerminal { tid, limit, alone }, Some(number))
    } else {
        (WaitState::Other, Some(number))
    }
}

/// The descriptors thread `tid` of process `pid` waits on, read as
/// [`thread_wait`] reads them: the one a `read` reads, the read set of a
/// `select`, the `POLLIN` entries of a `poll`, what an epoll watches.
/// Empty when it waits on none (or is not seen).
pub(crate) fn wait_set(pid: i32, tid: i32) -> Vec<i32> {
    let path = if tid == pid {
        format!("/proc/{pid}/syscall")
    } else {
        format!("/proc/{pid}/task/{tid}/syscall")
    };
    let Ok(text) = fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut fields = text.split_whitespace();
    let Some(number) = fields.next().and_then(|f| f.parse::<i64>().ok()) else {
        return Vec::new();
    };
    let args: Vec<u64> = fields
        .take(6)
        .filter_map(|f| u64::from_str_radix(f.trim_start_matches("0x"), 16).ok())
        .collect();
    let arg = |i: usize| args.get(i).copied().unwrap_or(0);
    match number {
        n if n == nr::READ || n == nr::READV => vec![arg(0) as i32],
        n if n == nr::SELECT || n == nr::PSELECT6 => {
            let nfds = arg(0).min(1024) as usize;
            read_memory(pid, arg(1), nfds.div_ceil(64) * 8)
                .map(|set| {
                    (0..nfds)
                        .filter(|fd| set[fd / 8] & (1 << (fd % 8)) != 0)
                        .map(|fd| fd as i32)
                        .collect()
                })
                .unwrap_or_default()
        }
        n if n == nr::POLL || n == nr::PPOLL => {
            let nfds = arg(1).min(256) as usize;
            read_memory(pid, arg(0), nfds * 8)
                .map(|raw| {
                    raw.chunks_exact(8)
                        .filter(|e| i16::from_ne_bytes([e[4], e[5]]) & libc::POLLIN != 0)
                        .map(|e| i32::from_ne_bytes([e[0], e[1], e[2], e[3]]))
                        .collect()
                })
                .unwrap_or_default()
        }
        n if n == nr::EPOLL_WAIT || n == nr::EPOLL_PWAIT || n == nr::EPOLL_PWAIT2 => {
            fs::read_to_string(format!("/proc/{pid}/fdinfo/{}", arg(0) as i32))
                .map(|info| {
                    info.lines()
                        .filter_map(|l| l.strip_prefix("tfd:"))
                        .filter_map(|rest| rest.split_whitespace().next()?.parse::<i32>().ok())
                        .collect()
                })
                .unwrap_or_default()
        }
        _ => Vec::new(),
    }
}

/// How a wait's time limit is written in the process's memory.
#[derive(Clone, Copy)]
enum Clock {
    /// `struct timeval`: seconds and microseconds.
    Timeval,
    /// `struct timespec`: seconds and nanoseconds.
    Timespec,
}

/// The time limit at `address` (none when it is null: no limit). The
/// kernel reads it when the wait starts; the memory holds what was asked.
fn time_limit(pid: i32, address: u64, clock: Clock) -> Option<Duration> {
    let raw = read_memory(pid, address, 16)?;
    let seconds = i64::from_ne_bytes(raw[..8].try_into().ok()?);
    let fraction = i64::from_ne_bytes(raw[8..].try_into().ok()?);
    let (seconds, fraction) = (u64::try_from(seconds).ok()?, u64::try_from(fraction).ok()?);
    let nanos = match clock {
        Clock::Timeval => fraction.saturating_mul(1_000),
        Clock::Timespec => fraction,
    };
    Some(Duration::from_secs(seconds).saturating_add(Duration::from_nanos(nanos)))
}

/// A limit in milliseconds passed as an `int` (negative: no limit).
fn millis_limit(arg: u64) -> Option<Duration> {
    let ms = arg as u32 as i32;
    (ms >= 0).then(|| Duration::from_millis(ms as u64))
}

/// The thread's `voluntary_ctxt_switches` (`pid` is any thread's id: a
/// process's main thread has the process's).
pub(crate) fn voluntary_switches(pid: i32) -> Option<u64> {
    switches_and_threads(pid).0
}

/// The thread's `voluntary_ctxt_switches` and how many threads its
/// process has (0 when unknown), from one read of `/proc/<pid>/status`.
pub(crate) fn switches_and_threads(pid: i32) -> (Option<u64>, usize) {
    let Ok(text) = fs::read_to_string(format!("/proc/{pid}/status")) else {
        return (None, 0);
    };
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    (
        field("voluntary_ctxt_switches:"),
        field("Threads:").map_or(0, |n| n as usize),
    )
}

/// The ids of process `pid`'s threads.
pub(crate) fn thread_ids(pid: i32) -> Vec<i32> {
    fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| t.ok()?.file_name().to_str()?.parse::<i32>().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// The one-letter state of thread `tid` of process `pid` (`R` running,
/// `S` asleep, `D` in an uninterruptible wait…); `None` once it is gone.
pub(crate) fn thread_state(pid: i32, tid: i32) -> Option<char> {
    let text = fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).ok()?;
    text[text.rfind(')')? + 1..]
        .split_whitespace()
        .next()?
        .chars()
        .next()
}

/// Whether descriptor `fd` of process `pid` is the terminal `tty`.
fn fd_is(pid: i32, fd: i32, tty: &Tty) -> bool {
    if fd < 0 {
        return false;
    }
    // `stat` follows the descriptor's link to the file it opens, whatever
    // name the link shows.
    let Ok(meta) = fs::metadata(format!("/proc/{pid}/fd/{fd}")) else {
        return false;
    };
    if meta.dev() == tty.dev && meta.ino() == tty.ino {
        return true;
    }
    meta.file_type().is_char_device()
        && device(meta.rdev()) == DEV_TTY
        && controlling_terminal(pid).is_some_and(|ctty| ctty == device(tty.rdev))
}

/// A device number's (major, minor).
fn device(rdev: u64) -> (u32, u32) {
    (libc::major(rdev), libc::minor(rdev))
}

/// Whether `pid` sleeps (state `S`: an interruptible wait, as a read of
/// a terminal is) and `tty` is its controlling terminal. Read from
/// `/proc/<pid>/stat`, which stays open when `syscall` is closed to us.
pub(crate) fn sleeps_on_its_terminal(pid: i32, tty: &Tty) -> bool {
    process_tree::process_info(pid)
        .is_some_and(|p| p.state == 'S' && terminal_of(p.tty_nr) == Some(device(tty.rdev)))
}

/// The (major, minor) of process `pid`'s controlling terminal (`tty_nr`
/// in `/proc/<pid>/stat`); `None` without one.
fn controlling_terminal(pid: i32) -> Option<(u32, u32)> {
    terminal_of(process_tree::process_info(pid)?.tty_nr)
}

/// The (major, minor) a `tty_nr` names; `None` for 0 (no terminal).
fn terminal_of(tty_nr: u32) -> Option<(u32, u32)> {
    // The kernel's encoding: minor bits 0-7 and 20-31, major bits 8-19.
    (tty_nr != 0).then_some((
        (tty_nr >> 8) & 0xfff,
        (tty_nr & 0xff) | ((tty_nr >> 12) & 0xfff00),
    ))
}

/// Reads `len` bytes at `address` of process `pid`.
fn read_memory(pid: i32, address: u64, len: usize) -> Option<Vec<u8>> {
    if address == 0 || len == 0 {
        return None;
    }
    let mut buf = vec![0u8; len];
    let local = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: len,
    };
    let remote = libc::iovec {
        iov_base: address as usize as *mut libc::c_void,
        iov_len: len,
    };
    // SAFETY: `local` points at `len` writable bytes we own; the remote
    // range is only read by the kernel, which checks it.
    let n = unsafe { libc::process_vm_readv(pid, &local, 1, &remote, 1, 0) };
    (n == len as isize).then_some(buf)
}

fn select_has_tty(pid: i32, nfds: u64, readfds: u64, tty: &Tty) -> bool {
    if readfds == 0 {
        return false;
    }
    let nfds = nfds.min(1024) as usize;
    let bytes = nfds.div_ceil(64) * 8;
    match read_memory(pid, readfds, bytes) {
        Some(set) => (0..nfds)
            .filter(|fd| set[fd / 8] & (1 << (fd % 8)) != 0)
            .any(|fd| fd_is(pid, fd as i32, tty)),
        // Cannot read the set: a wait on stdin is the usual case.
        None => nfds <= 3 && fd_is(pid, 0, tty),
    }
}

fn poll_has_tty(pid: i32, fds: u64, nfds: u64, tty: &Tty) -> bool {
    let nfds = nfds.min(256) as usize;
    match read_memory(pid, fds, nfds * 8) {
        Some(raw) => raw.chunks_exact(8).any(|entry| {
            let fd = i32::from_ne_bytes([entry[0], entry[1], entry[2], entry[3]]);
            let events = i16::from_ne_bytes([entry[4], entry[5]]);
            events & libc::POLLIN != 0 && fd_is(pid, fd, tty)
        }),
        None => nfds == 1 && fd_is(pid, 0, tty),
    }
}

fn epoll_has_tty(pid: i32, epfd: i32, tty: &Tty) -> bool {
    let Ok(info) = fs::read_to_string(format!("/proc/{pid}/fdinfo/{epfd}")) else {
        return false;
    };
    info.lines()
        .filter_map(|l| l.strip_prefix("tfd:"))
        .filter_map(|rest| rest.split_whitespace().next()?.parse::<i32>().ok())
        .any(|fd| fd_is(pid, fd, tty))
}

/// The processes of process group `pgid` in session `sid`, leader first.
pub(crate) fn group_members(sid: i32, pgid: i32) -> Vec<i32> {
    let mut members: Vec<i32> = process_tree::live_session_members(sid)
        .into_iter()
        .filter(|p| p.pgid == pgid)
        .map(|p| p.pid)
        .collect();
    members.sort_by_key(|pid| (*pid != pgid, *pid));
    members
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn a_process_sleeping_elsewhere_is_not_waiting_on_a_terminal() {
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while fs::read_to_string(format!("/proc/{pid}/syscall"))
            .map(|s| s.starts_with("running"))
            .unwrap_or(true)
        {
            assert!(std::time::Instant::now() < deadline);
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(wait_state(pid, &Tty::none()), WaitState::Other);
        assert!(voluntary_switches(pid).is_some());
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(wait_state(pid, &Tty::none()), WaitState::Gone);
    }
}
