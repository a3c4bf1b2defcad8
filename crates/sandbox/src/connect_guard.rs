//! The guard of `connect`: which Unix sockets a confined process may reach
//! by path.
//!
//! Landlock (up to the ABI this crate targets) does not govern connecting
//! to a pathname Unix socket, and the mount namespace can hide only the
//! places known to hold them. So every confined process carries a seccomp
//! filter that hands each `connect` to a supervisor thread in the host
//! (`SECCOMP_RET_USER_NOTIF`); it is joined after the main filter into one
//! program ([`chain`]), so a spawn loads one filter, not two. The
//! supervisor decides and, when it allows, makes the connection itself,
//! on the process's own socket
//! (duplicated with `pidfd_getfd`) and with the address it copied and
//! checked: nothing the process changes after the check (the address in
//! its memory, the socket behind its descriptor) reaches the kernel, which
//! is why it answers "continue" (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`, not
//! safe for a decision that depends on memory the process owns) to one
//! call only: a single-threaded session leader taking a terminal as its
//! controlling one (`git_guard::Plan::Continue`).
//!
//! A pathname socket may be reached when
//! * the policy's `unix_sockets` lists it or a directory holding it, or
//! * a process of the same sandbox holds it (it is in the sandbox's mount
//!   namespace; without one, it is a confined descendant of this process):
//!   `tmux`, `ssh -M`, a test server the command started.
//!
//! An abstract socket may be reached when a process of the same sandbox
//! holds it (what Landlock's scope allows, now also below ABI 6). Anything
//! else is refused with `EACCES` (`EPERM` for an abstract name, as
//! Landlock's scope answers). Sockets of other families are connected as
//! asked, except TCP when the policy has Landlock refuse it (`EACCES`, as
//! Landlock would): a socket keeps its network namespace, so a sandbox
//! with a network of its own stays inside it.
//!
//! What differs from a connection the process makes itself: the server
//! sees the host, or the marked child, as its peer in `SO_PEERCRED` (same
//! user).
//! A Unix datagram socket could send to any socket file by path
//! (`sendto`, or `sendmsg`, whose address lies in memory no filter can
//! read) without a `connect`; so the same filter refuses to make one
//! (`socket` or `socketpair` of `AF_UNIX` with `SOCK_DGRAM`, or
//! `SOCK_RAW`, which `AF_UNIX` makes a datagram socket). Stream and
//! seqpacket sockets reach another socket only through `connect`. The
//! logging and service-manager sockets are hidden in the mount namespace
//! as well.
//!
//! Each confined spawn creates the filter's listener in the child, before
//! `exec`, and sends it (with a `NETLINK_SOCK_DIAG` socket in the child's
//! network namespace, to list that namespace's Unix sockets) over a
//! socket pair to one of its [`Guard`]'s threads, which serves it until
//! every process under the filter has exited and then waits for the next
//! listener. A thread that takes one while no other waits first starts
//! another, so every live process tree has a thread of its own and a
//! spawn usually finds one waiting; at most two wait idle.
//! A host already under a seccomp listener (a dsh inside a dsh sandbox, or
//! a container runtime's) cannot give its children one of their own: it
//! starts no guard, and the status says so ([`host_has_listener`]).
//!
//! A socket is judged by who holds it: a holder is found through
//! `sock_diag` (by the socket file's superblock device and inode, or an
//! abstract name), then in `/proc/PID/fd`, confirmed by the socket's
//! cookie. A socket this process holds is never the sandbox's, even in
//! the hands of a child that has not yet run `exec`. A listed socket is
//! connected from a short-lived child marked as confined
//! (`no_new_privs`, a seccomp filter), so a server that refuses confined
//! peers (a dsh daemon) refuses it; a socket of the sandbox from the
//! supervisor itself.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::io;
use std::mem::{size_of, zeroed};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Connections made on threads of their own (blocking sockets) at once,
/// per listener; past it the supervisor connects before it reads the next
/// request.
const MAX_WAITING_CONNECTS: usize = 32;

/// How long a refusal of a socket is remembered (a burst of user lookups
/// through `nss-systemd` asks for the same socket many times).
const REFUSAL_MEMORY: Duration = Duration::from_secs(2);

/// What the supervisor allows.
#[derive(Debug, Clone)]
pub(crate) struct GuardPolicy {
    /// `unix_sockets`, resolved: a socket at or under one of these paths
    /// may be reached.
    pub listed: Vec<PathBuf>,
    /// Whether the sandbox has a mount namespace of its own (then "the
    /// same sandbox" is "in the same mount namespace").
    pub mount_namespace: bool,
    /// Whether Landlock refuses TCP `connect` in this sandbox.
    pub tcp_refused: bool,
    /// The workspace roots where no repository may be made
    /// ([`crate::git_guard`]); empty: the guard of repositories is off.
    pub git_roots: Arc<[PathBuf]>,
    /// The (device, inode) of each of `git_roots`, in order: a directory
    /// whose path is elsewhere but that has one of them above it is in the
    /// workspace (a second view of it).
    pub git_root_ids: Vec<Option<(u64, u64)>>,
    /// Each of `git_roots`' place in its file system (its mount's root
    /// and the names below the mount point): a place in another mount of
    /// that file system below it is in the workspace.
    pub git_root_places: Vec<Option<PathBuf>>,
    /// What the guard learnt of such mounts.
    pub git_mounts: Arc<crate::git_guard::Mounts>,
    /// The symbolic links the sandbox made in the workspace, judged again
    /// when a way out of it is made.
    pub git_links: Arc<crate::git_guard::MadeLinks>,
    /// Every path the sandbox may write (a symbolic link in the workspace
    /// may not lead out of it into one of these).
    pub writable: Arc<[PathBuf]>,
    /// The worker that makes the creating calls the guard allowed.
    pub emulator: Arc<crate::emulate::Emulator>,
}

/// A sandbox's guard: the socket pair its children send their listeners
/// over. Dropping it ends the waiting threads once no child that may still
/// send holds the other end.
pub(crate) struct Guard {
    child_end: OwnedFd,
    program: Vec<libc::sock_filter>,
    emulator: Arc<crate::emulate::Emulator>,
}

impl std::fmt::Debug for Guard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Guard")
            .field("child_end", &self.child_end)
            .field("program_len", &self.program.len())
            .finish()
    }
}

impl Guard {
    /// Starts the first thread that waits for a listener, for `policy`.
    pub(crate) fn start(policy: GuardPolicy) -> io::Result<Self> {
        let mut fds = [0 as RawFd; 2];
        // SAFETY: socketpair writes two descriptors into `fds`.
        let rc = unsafe {
            libc::socketpair(
                libc::AF_UNIX,
                libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
                0,
                fds.as_mut_ptr(),
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: both descriptors are new and ours.
        let (host_end, child_end) =
            unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let guard_git = !policy.git_roots.is_empty();
        let emulator = Arc::clone(&policy.emulator);
        start_receiver(&Arc::new(Receivers {
            host_end,
            policy: Arc::new(policy),
            idle: AtomicUsize::new(0),
        }))?;
        Ok(Self {
            child_end,
            program: notify_program(guard_git),
            emulator,
        })
    }

    /// Gives the worker that makes creating calls the sandbox's Landlock
    /// ruleset, which it restricts itself with (before any spawn; without
    /// it every such call is refused).
    pub(crate) fn set_ruleset(&self, ruleset: OwnedFd) {
        self.emulator.set_ruleset(ruleset);
    }

    /// The filter a child loads with [`install_in_child`].
    pub(crate) fn program(&self) -> &[libc::sock_filter] {
        &self.program
    }

    /// The descriptor a child sends its listener over.
    pub(crate) fn child_end(&self) -> RawFd {
        self.child_end.as_raw_fd()
    }
}

/// The filter that hands `connect` to the supervisor: a classic BPF
/// program, loaded next to the main filter (the kernel applies the
/// strictest answer of all filters, so the main filter's refusals and its
/// architecture check still win). On x86_64 it also refuses every x32
/// system call, which would otherwise reach `connect` under another
/// number, and in every mode it refuses io_uring.
///
/// With `guard_git` it also hands over the calls that create directory
/// entries ([`crate::git_guard::calls`]; an `open` only with `O_CREAT`),
/// refuses `openat2` with `ENOSYS`, and refuses `process_vm_writev` and
/// `userfaultfd` (see `emulate::memory_is_its_own`).
pub(crate) fn notify_program(guard_git: bool) -> Vec<libc::sock_filter> {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const JSET_K: u16 = (libc::BPF_JMP | libc::BPF_JSET | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let stmt = |code: u16, k: u32| libc::sock_filter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let jump = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    let connect = u32::try_from(libc::SYS_connect).unwrap_or(u32::MAX);
    let mut program = vec![stmt(LD_W_ABS, 0)]; // seccomp_data.nr
    if cfg!(target_arch = "x86_64") {
        program.push(jump(JSET_K, 0x4000_0000, 0, 1));
        program.push(stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32));
    }
    // io_uring makes connections (IORING_OP_CONNECT) without a
    // `connect` this filter would see.
    let eperm = libc::SECCOMP_RET_ERRNO | libc::EPERM as u32;
    for call in [
        libc::SYS_io_uring_setup,
        libc::SYS_io_uring_enter,
        libc::SYS_io_uring_register,
    ] {
        program.push(jump(JEQ_K, u32::try_from(call).unwrap_or(u32::MAX), 0, 1));
        program.push(stmt(RET_K, eperm));
    }
    program.extend(datagram_block(eperm));
    program.push(jump(JEQ_K, connect, 0, 1));
    program.push(stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF));
    if guard_git {
        let number = |call: i64| u32::try_from(call).unwrap_or(u32::MAX);
        program.push(jump(JEQ_K, number(libc::SYS_openat2), 0, 1));
        program.push(stmt(RET_K, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
        // What writes another process's memory (or makes its pages come
        // and go) while it waits in a call: the one call the guard lets
        // the kernel make reads its path again
        // (`emulate::memory_is_its_own`).
        for call in [libc::SYS_process_vm_writev, libc::SYS_userfaultfd] {
            program.push(jump(JEQ_K, number(call), 0, 1));
            program.push(stmt(RET_K, eperm));
        }
        for (call, flags) in crate::git_guard::calls() {
            match flags {
                None => {
                    program.push(jump(JEQ_K, number(call), 0, 1));
                    program.push(stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF));
                }
                Some(arg) => {
                    // seccomp_data: nr, arch, instruction_pointer (u64),
                    // then args; the low half of a little-endian argument.
                    let low = 16 + 8 * arg + if cfg!(target_endian = "big") { 4 } else { 0 };
                    program.push(jump(JEQ_K, number(call), 0, 4));
                    program.push(stmt(LD_W_ABS, low));
                    program.push(jump(JSET_K, crate::git_guard::OPEN_FLAGS_GUARDED, 0, 1));
                    program.push(stmt(RET_K, libc::SECCOMP_RET_USER_NOTIF));
                    program.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
                }
            }
        }
    }
    program.push(stmt(RET_K, libc::SECCOMP_RET_ALLOW));
    program
}

/// One program that answers as `first` and `then` loaded as two filters
/// would: `first` runs, and where it would allow, `then` decides. The
/// kernel takes the strictest answer of all filters, so this is the same
/// as long as `first` answers only by allowing or by something stricter
/// than handing over (`SECCOMP_RET_ERRNO`, a kill), as the main filter
/// does. Each of `first`'s allowing returns becomes an unconditional
/// jump (same length, so every other offset holds) to `then`, which
/// loads what it needs itself. Loading one filter instead of two saves
/// the kernel compiling and later freeing the second, on every spawn.
///
/// `None` when `first` returns anything but a constant or the joined
/// program is longer than the kernel takes: load the two then.
pub(crate) fn chain(
    first: &[libc::sock_filter],
    then: &[libc::sock_filter],
) -> Option<Vec<libc::sock_filter>> {
    const RET: u16 = libc::BPF_RET as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    const JA: u16 = (libc::BPF_JMP | libc::BPF_JA) as u16;
    /// `BPF_MAXINSNS`.
    const MAX_LEN: usize = 4096;
    if first.len() + then.len() > MAX_LEN {
        return None;
    }
    let mut program = Vec::with_capacity(first.len() + then.len());
    for (i, instruction) in first.iter().enumerate() {
        if instruction.code & 0x07 == RET && instruction.code != RET_K {
            return None;
        }
        if instruction.code == RET_K && instruction.k == libc::SECCOMP_RET_ALLOW {
            let k = u32::try_from(first.len() - i - 1).ok()?;
            program.push(libc::sock_filter {
                code: JA,
                jt: 0,
                jf: 0,
                k,
            });
        } else {
            program.push(*instruction);
        }
    }
    program.extend_from_slice(then);
    Some(program)
}

/// The part of the notify program that refuses (`refuse`) a Unix
/// datagram socket: `socket` or `socketpair` of `AF_UNIX` with type
/// `SOCK_DGRAM`, or `SOCK_RAW`, which `AF_UNIX` makes a datagram socket.
/// Such a socket sends to any socket file by path (`sendto`, `sendmsg`
/// with an address) without the `connect` the guard judges, and
/// `sendmsg`'s address is in memory no filter can read; every other
/// socket reaches a Unix socket only through `connect`. Expects the
/// system call number loaded; for `socket` and `socketpair` it answers,
/// for any other call it falls through with the number still loaded.
fn datagram_block(refuse: u32) -> [libc::sock_filter; 10] {
    const LD_W_ABS: u16 = (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16;
    const JEQ_K: u16 = (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16;
    const AND_K: u16 = (libc::BPF_ALU | libc::BPF_AND | libc::BPF_K) as u16;
    const RET_K: u16 = (libc::BPF_RET | libc::BPF_K) as u16;
    let number = |call: i64| u32::try_from(call).unwrap_or(u32::MAX);
    // seccomp_data: nr, arch, instruction_pointer (u64), then args; the
    // low half of a little-endian argument.
    let low = |arg: u32| 16 + 8 * arg + if cfg!(target_endian = "big") { 4 } else { 0 };
    let op = |code: u16, k: u32, jt: u8, jf: u8| libc::sock_filter { code, jt, jf, k };
    [
        // 0: socket → 2; else 1.
        op(JEQ_K, number(libc::SYS_socket), 1, 0),
        // 1: socketpair → 2; else past the block (10).
        op(JEQ_K, number(libc::SYS_socketpair), 0, 8),
        // 2, 3: the family; not AF_UNIX → allow (8).
        op(LD_W_ABS, low(0), 0, 0),
        op(JEQ_K, libc::AF_UNIX as u32, 0, 4),
        // 4, 5: the type without SOCK_NONBLOCK and SOCK_CLOEXEC.
        op(LD_W_ABS, low(1), 0, 0),
        op(AND_K, 0xf, 0, 0),
        // 6, 7: a datagram → refuse (9).
        op(JEQ_K, libc::SOCK_DGRAM as u32, 2, 0),
        op(JEQ_K, libc::SOCK_RAW as u32, 1, 0),
        // 8: allow; 9: refuse.
        op(RET_K, libc::SECCOMP_RET_ALLOW, 0, 0),
        op(RET_K, refuse, 0, 0),
    ]
}

/// In the child, before `exec` (async-signal-safe: system calls on the
/// stack and on what the parent prepared): loads `program` with a new
/// listener and sends the listener, with a diagnostics socket of the
/// child's network namespace, over `channel`. `Ok(false)` when the
/// process already has a listener above it (the outer guard decides).
pub(crate) fn install_in_child(program: &[libc::sock_filter], channel: RawFd) -> io::Result<bool> {
    // SAFETY: socket with constant arguments.
    let diag = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        )
    };
    if diag < 0 {
        return Err(io::Error::last_os_error());
    }
    let listener = match load_listening(program) {
        Ok(fd) => fd,
        Err(e) => {
            // SAFETY: our descriptor.
            unsafe { libc::close(diag) };
            return if e.raw_os_error() == Some(libc::EBUSY) {
                Ok(false)
            } else {
                Err(e)
            };
        }
    };
    let sent = send_fds(channel, [listener, diag]);
    // SAFETY: our descriptors; the supervisor holds its own copies.
    unsafe {
        libc::close(listener);
        libc::close(diag);
    }
    sent.map(|()| true)
}

/// A filter that allows everything: what the listener probe loads, and
/// what marks the connector of a listed socket as confined.
const ALLOW_ALL: [libc::sock_filter; 1] = [libc::sock_filter {
    code: (libc::BPF_RET | libc::BPF_K) as u16,
    jt: 0,
    jf: 0,
    k: libc::SECCOMP_RET_ALLOW,
}];

/// Whether this process already runs under a seccomp filter with a
/// listener (a container runtime's, or an outer dsh sandbox's guard): its
/// children then cannot get a listener of their own, and `connect` is not
/// this process's to guard. Probed once, in a short-lived child.
pub(crate) fn host_has_listener() -> bool {
    static PROBED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PROBED.get_or_init(probe_listener)
}

fn probe_listener() -> bool {
    let allow_all = ALLOW_ALL;
    let mut pipe = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return true;
    }
    // SAFETY: both are new and ours.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    let sink = write_end.as_raw_fd();
    // SAFETY: the child makes system calls on this frame only and exits.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above.
        unsafe {
            let mut answer: u8 = 2;
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 {
                answer = match load_listening(&allow_all) {
                    Ok(_) => 0,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) => 1,
                    Err(_) => 2,
                };
            }
            libc::write(sink, (&raw const answer).cast(), 1);
            libc::_exit(0);
        }
    }
    drop(write_end);
    if child < 0 {
        return true;
    }
    let mut answer = [2u8; 1];
    // SAFETY: a one-byte buffer.
    let n = unsafe { libc::read(read_end.as_raw_fd(), answer.as_mut_ptr().cast(), 1) };
    // SAFETY: our own child; ECHILD (reaped elsewhere) is fine.
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    n != 1 || answer[0] != 0
}

/// Loads `program` with `SECCOMP_FILTER_FLAG_NEW_LISTENER`.
fn load_listening(program: &[libc::sock_filter]) -> io::Result<RawFd> {
    let len =
        u16::try_from(program.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let fprog = libc::sock_fprog {
        len,
        filter: program.as_ptr().cast_mut(),
    };
    // WAIT_KILLABLE_RECV (5.19): once the supervisor has a request, only
    // a fatal signal ends the wait, so a call it made is never made again
    // by a restarted system call.
    let listen = libc::SECCOMP_FILTER_FLAG_NEW_LISTENER;
    let killable = libc::SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV;
    let spec = libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW;
    for flags in [
        listen | killable | spec,
        listen | killable,
        listen | spec,
        listen,
    ] {
        // SAFETY: a valid program; the kernel copies it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &raw const fprog,
            )
        };
        if rc >= 0 {
            return RawFd::try_from(rc).map_err(|_| io::Error::from_raw_os_error(libc::EBADF));
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINVAL) {
            return Err(error);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// Sends two descriptors in one message (async-signal-safe).
fn send_fds(channel: RawFd, fds: [RawFd; 2]) -> io::Result<()> {
    // Room for a cmsghdr and two ints, aligned for cmsghdr.
    #[repr(C)]
    struct Control {
        header: libc::cmsghdr,
        fds: [RawFd; 2],
    }
    // SAFETY: plain data; zero is a valid value for every field.
    let mut control: Control = unsafe { zeroed() };
    // SAFETY: CMSG_LEN is arithmetic.
    control.header.cmsg_len = unsafe { libc::CMSG_LEN(size_of::<[RawFd; 2]>() as u32) } as _;
    control.header.cmsg_level = libc::SOL_SOCKET;
    control.header.cmsg_type = libc::SCM_RIGHTS;
    control.fds = fds;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: plain data.
    let mut message: libc::msghdr = unsafe { zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = (&raw mut control).cast();
    message.msg_controllen = size_of::<Control>() as _;
    // SAFETY: every pointer in `message` points into this frame.
    let rc = unsafe { libc::sendmsg(channel, &raw const message, libc::MSG_NOSIGNAL) };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// At most this many of a guard's threads wait for a listener; one that
/// is done with its process tree while as many others wait ends.
const MAX_IDLE_RECEIVERS: usize = 2;

/// A guard's receiving threads: each waits for a listener a child sends,
/// serves it until no process of that tree is left, and waits again. A
/// thread that receives one while no other waits first starts another,
/// so there is always one to receive the next: every process tree has a
/// thread of its own, as one tree's slow call must not hold up another's,
/// and a spawn after another's end finds the thread waiting instead of
/// starting one. They end once every copy of the child end is closed.
struct Receivers {
    host_end: OwnedFd,
    policy: Arc<GuardPolicy>,
    /// How many wait in `receive_fds` (or are about to).
    idle: AtomicUsize,
}

/// Starts one more receiving thread, counted as waiting from now on.
fn start_receiver(shared: &Arc<Receivers>) -> io::Result<()> {
    shared.idle.fetch_add(1, Ordering::SeqCst);
    let theirs = Arc::clone(shared);
    let started = std::thread::Builder::new()
        .name("dsh-guard-serve".to_owned())
        .stack_size(256 * 1024)
        .spawn(move || receive(&theirs));
    if let Err(e) = started {
        shared.idle.fetch_sub(1, Ordering::SeqCst);
        return Err(e);
    }
    Ok(())
}

/// A receiving thread (see [`Receivers`]); counted as waiting on entry.
fn receive(shared: &Arc<Receivers>) {
    // The thread's diagnostics socket of this process's network
    // namespace, made at its first use and kept for every tree it serves.
    let mut host_diag = std::cell::OnceCell::new();
    loop {
        let received = receive_fds(shared.host_end.as_raw_fd());
        let others_waiting = shared.idle.fetch_sub(1, Ordering::SeqCst).saturating_sub(1);
        match received {
            Ok(Some((listener, diag))) => {
                if others_waiting == 0 && start_receiver(shared).is_err() {
                    // No thread would be left to receive the next tree's
                    // listener: this one is dropped instead, and every
                    // guarded call of that process now fails (ENOSYS),
                    // which refuses rather than allows.
                    drop((listener, diag));
                } else {
                    let policy = Arc::clone(&shared.policy);
                    host_diag = Supervisor::new(listener, diag, policy, host_diag).serve();
                }
            }
            Ok(None) => return,
            Err(e) => match e.raw_os_error() {
                Some(libc::EBADF | libc::ENOTSOCK | libc::EINVAL) => return,
                // EINTR, or short of memory or descriptors for a moment:
                // the children waiting to send are not given up.
                _ => std::thread::sleep(Duration::from_millis(10)),
            },
        }
        if shared.idle.fetch_add(1, Ordering::SeqCst) >= MAX_IDLE_RECEIVERS {
            shared.idle.fetch_sub(1, Ordering::SeqCst);
            return;
        }
    }
}

/// One message's two descriptors; `None` at the end of the stream.
fn receive_fds(socket: RawFd) -> io::Result<Option<(OwnedFd, OwnedFd)>> {
    #[repr(C)]
    struct Control {
        header: libc::cmsghdr,
        fds: [RawFd; 4],
    }
    // SAFETY: plain data.
    let mut control: Control = unsafe { zeroed() };
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: plain data.
    let mut message: libc::msghdr = unsafe { zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = (&raw mut control).cast();
    message.msg_controllen = size_of::<Control>() as _;
    loop {
        message.msg_controllen = size_of::<Control>() as _;
        message.msg_flags = 0;
        // SAFETY: every pointer in `message` points into this frame.
        let n = unsafe { libc::recvmsg(socket, &raw mut message, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Ok(None);
        }
        let mut received = Vec::new();
        // SAFETY: walking the control messages the kernel wrote.
        unsafe {
            let mut header = libc::CMSG_FIRSTHDR(&raw const message);
            while !header.is_null() {
                if (*header).cmsg_level == libc::SOL_SOCKET
                    && (*header).cmsg_type == libc::SCM_RIGHTS
                {
                    let data = libc::CMSG_DATA(header).cast::<RawFd>();
                    let count = ((*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize)
                        / size_of::<RawFd>();
                    for i in 0..count {
                        received.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                    }
                }
                header = libc::CMSG_NXTHDR(&raw const message, header);
            }
        }
        let mut fds = received.into_iter();
        if message.msg_flags & libc::MSG_CTRUNC != 0 {
            // Descriptors were lost: not a message of ours.
            continue;
        }
        if let (Some(listener), Some(diag)) = (fds.next(), fds.next()) {
            return Ok(Some((listener, diag)));
        }
        // A message without both descriptors: nothing to serve; the next.
    }
}

/// What a `connect` gets.
#[derive(Debug)]
enum Verdict {
    /// Refused with this errno, or the kernel's own error found on the way.
    Fail(i32),
    /// Connect the duplicated socket to this address.
    Connect { socket: OwnedFd, address: Address },
}

/// The address to connect to, owned by the supervisor.
#[derive(Debug)]
enum Address {
    /// The bytes the process passed (checked or not needing a check).
    Copied(Vec<u8>),
    /// A pathname socket, pinned by an `O_PATH` descriptor and reached
    /// through `/proc/self/fd/N`, so a rename after the check changes
    /// nothing.
    Pinned(OwnedFd),
    /// A pathname socket outside that the policy lists, pinned the same
    /// way and connected from a short-lived child that carries the marks
    /// of a confined process (`no_new_privs`, a seccomp filter): a server
    /// that judges its peer by those marks (a dsh daemon refuses confined
    /// clients) judges it as it would judge the process that asked.
    Listed(OwnedFd),
}

/// Serves one listener.
struct Supervisor {
    listener: Arc<OwnedFd>,
    /// A diagnostics socket in the sandbox's network namespace.
    diag: OwnedFd,
    /// One in this process's, made at its first use (`None` if it could
    /// not be made: a socket file not bound in the sandbox's namespace is
    /// then taken as bound outside).
    host_diag: std::cell::OnceCell<Option<OwnedFd>>,
    policy: Arc<GuardPolicy>,
    waiting: Arc<AtomicUsize>,
    /// Sockets refused lately, by the socket file's (device, inode) or an
    /// abstract name, and when.
    refused: HashMap<SocketKey, Instant>,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum SocketKey {
    File(u64, u64),
    Abstract(Vec<u8>),
}

impl Supervisor {
    fn new(
        listener: OwnedFd,
        diag: OwnedFd,
        policy: Arc<GuardPolicy>,
        host_diag: std::cell::OnceCell<Option<OwnedFd>>,
    ) -> Self {
        wake_on_the_same_cpu(&listener);
        Self {
            listener: Arc::new(listener),
            diag,
            host_diag,
            policy,
            waiting: Arc::new(AtomicUsize::new(0)),
            refused: HashMap::new(),
        }
    }

    /// The diagnostics socket of this process's network namespace.
    fn host_diag(&self) -> Option<&OwnedFd> {
        self.host_diag
            .get_or_init(|| {
                // SAFETY: socket with constant arguments.
                let host = unsafe {
                    libc::socket(
                        libc::AF_NETLINK,
                        libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                        libc::NETLINK_SOCK_DIAG,
                    )
                };
                // SAFETY: a new descriptor, if any.
                (host >= 0).then(|| unsafe { OwnedFd::from_raw_fd(host) })
            })
            .as_ref()
    }

    /// Serves until no process uses the filter any more; gives back the
    /// host's diagnostics socket, for the thread's next tree.
    fn serve(mut self) -> std::cell::OnceCell<Option<OwnedFd>> {
        self.serve_requests();
        self.host_diag
    }

    fn serve_requests(&mut self) {
        loop {
            let mut poll = libc::pollfd {
                fd: self.listener.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one pollfd on the stack.
            let rc = unsafe { libc::poll(&raw mut poll, 1, -1) };
            if rc < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return;
            }
            if poll.revents & libc::POLLIN == 0 {
                // POLLHUP: no process uses the filter any more.
                return;
            }
            // SAFETY: plain data, zeroed as SECCOMP_IOCTL_NOTIF_RECV asks.
            let mut request: libc::seccomp_notif = unsafe { zeroed() };
            // SAFETY: the listener and a struct of the size the ioctl names.
            let rc = unsafe {
                libc::ioctl(
                    self.listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_RECV,
                    &raw mut request,
                )
            };
            if rc != 0 {
                // ENOENT: the process was gone before we read it; EINTR.
                continue;
            }
            self.handle(&request);
        }
    }

    fn handle(&mut self, request: &libc::seccomp_notif) {
        let id = request.id;
        if i64::from(request.data.nr) != libc::SYS_connect {
            self.handle_creation(request);
            return;
        }
        let verdict = self.judge(request);
        let Some(verdict) = verdict else {
            // The request is no longer valid (the process died or left the
            // call): nothing to answer.
            return;
        };
        match verdict {
            Verdict::Fail(errno) => respond(&self.listener, id, errno),
            Verdict::Connect { socket, address } => {
                if is_nonblocking(&socket)
                    || self.waiting.load(Ordering::Acquire) >= MAX_WAITING_CONNECTS
                {
                    let errno = connect(&socket, &address);
                    respond(&self.listener, id, errno);
                    return;
                }
                // A blocking connect waits for the peer; the next request
                // must not wait behind it.
                let Ok(listener) = self.listener.try_clone() else {
                    respond(&self.listener, id, libc::EAGAIN);
                    return;
                };
                let waiting = Arc::clone(&self.waiting);
                waiting.fetch_add(1, Ordering::AcqRel);
                let spawned = std::thread::Builder::new()
                    .name("dsh-guard-conn".to_owned())
                    .stack_size(64 * 1024)
                    .spawn(move || {
                        let errno = connect(&socket, &address);
                        respond(&listener, id, errno);
                        waiting.fetch_sub(1, Ordering::AcqRel);
                    });
                if spawned.is_err() {
                    self.waiting.fetch_sub(1, Ordering::AcqRel);
                    respond(&self.listener, id, libc::EAGAIN);
                }
            }
        }
    }

    /// A call that creates a directory entry ([`crate::git_guard`]): judged
    /// here, made by the emulator's worker, never continued.
    fn handle_creation(&self, request: &libc::seccomp_notif) {
        let Ok(pid) = i32::try_from(request.pid) else {
            return;
        };
        // `/proc/TID`, opened before the validity check, names the thread
        // that asked for as long as it is held.
        let Ok(proc_dir) = open_dir(Path::new(&format!("/proc/{pid}"))) else {
            respond(&self.listener, request.id, libc::EPERM);
            return;
        };
        let read = |address| read_c_string(pid, address);
        let borrow = |fd| borrow_descriptor(pid, fd);
        let asker = crate::git_guard::Asker {
            tid: pid,
            proc_dir: &proc_dir,
            read: &read,
            borrow: &borrow,
        };
        let plan = crate::git_guard::plan(
            &asker,
            i64::from(request.data.nr),
            &request.data.args,
            &self.policy,
        );
        // What was read and borrowed was the asking thread's only if its
        // request is still pending.
        if !self.still_valid(request.id) {
            return;
        }
        match plan {
            crate::git_guard::Plan::Fail(errno) => respond(&self.listener, request.id, errno),
            crate::git_guard::Plan::Continue => respond_continue(&self.listener, request.id),
            crate::git_guard::Plan::Make { umask, op, judge } => {
                self.policy
                    .emulator
                    .submit(&self.listener, request.id, umask, op, judge);
            }
        }
    }

    /// The verdict on one request; `None` when it is no longer valid.
    fn judge(&mut self, request: &libc::seccomp_notif) -> Option<Verdict> {
        let pid = i32::try_from(request.pid).ok()?;
        let args = request.data.args;
        let target_fd = RawFd::try_from(args[0] as i32).unwrap_or(-1);
        let length = args[2] as u32 as usize;
        if length > size_of::<libc::sockaddr_storage>() {
            return Some(Verdict::Fail(libc::EINVAL));
        }
        // `/proc/TID`, opened before the validity check below, names the
        // requesting thread for as long as it is held, whatever happens
        // to the number afterwards.
        let Ok(proc_dir) = open_dir(Path::new(&format!("/proc/{pid}"))) else {
            return self
                .still_valid(request.id)
                .then_some(Verdict::Fail(libc::EPERM));
        };
        let mut address = vec![0u8; length];
        if length > 0 && read_memory(pid, args[1], &mut address).is_err() {
            return self
                .still_valid(request.id)
                .then_some(Verdict::Fail(libc::EFAULT));
        }
        let socket = match borrow_descriptor(pid, target_fd) {
            Ok(socket) => socket,
            Err(errno) => return self.still_valid(request.id).then_some(Verdict::Fail(errno)),
        };
        // The pid named the requesting thread when we read its memory and
        // opened its descriptor only if the request is still pending.
        if !self.still_valid(request.id) {
            return None;
        }
        let Some(domain) = socket_option(&socket, libc::SO_DOMAIN) else {
            return Some(Verdict::Fail(libc::ENOTSOCK));
        };
        let family = address
            .get(..2)
            .map(|b| u16::from_ne_bytes([b[0], b[1]]))
            .unwrap_or(libc::AF_UNSPEC as u16);
        if domain == libc::AF_UNIX && family == libc::AF_UNIX as u16 && length > 2 {
            return Some(self.judge_unix(&proc_dir, socket, &address[2..]));
        }
        let stream = socket_option(&socket, libc::SO_TYPE) == Some(libc::SOCK_STREAM);
        if self.policy.tcp_refused
            && stream
            && (domain == libc::AF_INET || domain == libc::AF_INET6)
            && family != libc::AF_UNSPEC as u16
        {
            return Some(Verdict::Fail(libc::EACCES));
        }
        Some(Verdict::Connect {
            socket,
            address: Address::Copied(address),
        })
    }

    /// A Unix socket address: `path` is `sun_path` as long as the process
    /// passed it.
    fn judge_unix(&mut self, proc_dir: &OwnedFd, socket: OwnedFd, path: &[u8]) -> Verdict {
        if path.first() == Some(&0) {
            let key = SocketKey::Abstract(path.to_vec());
            if self.recently_refused(&key) {
                return Verdict::Fail(libc::EPERM);
            }
            return match self.holder(proc_dir, &Wanted::Abstract(path)) {
                Holder::Sandbox => {
                    let mut address = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
                    address.extend_from_slice(path);
                    Verdict::Connect {
                        socket,
                        address: Address::Copied(address),
                    }
                }
                // No socket has the name: what the kernel answers.
                Holder::Nobody => Verdict::Fail(libc::ECONNREFUSED),
                Holder::Outside => {
                    self.refused.insert(key, Instant::now());
                    Verdict::Fail(libc::EPERM)
                }
            };
        }
        let end = path.iter().position(|&b| b == 0).unwrap_or(path.len());
        let path = Path::new(OsStr::from_bytes(&path[..end]));
        let pinned = match open_as(proc_dir, path) {
            Ok(fd) => fd,
            Err(errno) => return Verdict::Fail(errno),
        };
        let Ok(meta) = stat_fd(&pinned) else {
            return Verdict::Fail(libc::ECONNREFUSED);
        };
        if meta.st_mode & libc::S_IFMT != libc::S_IFSOCK {
            return Verdict::Fail(libc::ECONNREFUSED);
        }
        let seen = std::fs::read_link(format!("/proc/self/fd/{}", pinned.as_raw_fd())).ok();
        let listed = seen
            .as_deref()
            .is_some_and(|p| self.policy.listed.iter().any(|l| p.starts_with(l)));
        // The superblock's device, as `sock_diag` reports it (`st_dev` is a
        // subvolume's own device on btrfs).
        let Some(device) = superblock_device(proc_dir, &pinned) else {
            return Verdict::Fail(libc::EACCES);
        };
        let key = SocketKey::File(device, meta.st_ino);
        if listed {
            return Verdict::Connect {
                socket,
                address: Address::Listed(pinned),
            };
        }
        let holder = if self.recently_refused(&key) {
            Holder::Outside
        } else {
            self.holder(proc_dir, &Wanted::File(device, meta.st_ino))
        };
        match holder {
            Holder::Sandbox => Verdict::Connect {
                socket,
                address: Address::Pinned(pinned),
            },
            // A socket file nothing listens on: what the kernel answers.
            Holder::Nobody => Verdict::Fail(libc::ECONNREFUSED),
            Holder::Outside => {
                self.refused.insert(key, Instant::now());
                Verdict::Fail(libc::EACCES)
            }
        }
    }

    fn recently_refused(&mut self, key: &SocketKey) -> bool {
        let now = Instant::now();
        self.refused
            .retain(|_, when| now.duration_since(*when) < REFUSAL_MEMORY);
        self.refused.contains_key(key)
    }

    fn still_valid(&self, id: u64) -> bool {
        still_valid(&self.listener, id)
    }

    /// Who holds the Unix socket bound to `wanted`: a process of the
    /// requester's sandbox, nobody, or someone else (also when that cannot
    /// be told).
    fn holder(&self, proc_dir: &OwnedFd, wanted: &Wanted<'_>) -> Holder {
        let Ok(bound) = unix_sockets_bound_to(&self.diag, wanted) else {
            return Holder::Outside;
        };
        if bound.is_empty() {
            // A socket file may be bound in another network namespace
            // (this process's, when the sandbox has one of its own).
            if let Wanted::File(..) = wanted
                && self.host_diag().is_none_or(|host| {
                    unix_sockets_bound_to(host, wanted).is_ok_and(|found| !found.is_empty())
                })
            {
                return Holder::Outside;
            }
            return Holder::Nobody;
        }
        if self.held_in_sandbox(proc_dir, &bound) {
            Holder::Sandbox
        } else {
            Holder::Outside
        }
    }

    /// Whether a process of the requester's sandbox holds one of the
    /// sockets `bound`, and this process does not: a socket of the host
    /// is outside, even in the hands of a child that has not yet run
    /// `exec` (it holds copies of everything the host holds).
    fn held_in_sandbox(&self, proc_dir: &OwnedFd, bound: &[BoundSocket]) -> bool {
        // SAFETY: getpid cannot fail.
        let ours = unsafe { libc::getpid() };
        if holding(ours, bound) {
            return false;
        }
        let namespace = if self.policy.mount_namespace {
            match stat_at(proc_dir, "ns/mnt") {
                Some(ns) => Some(ns),
                None => return false,
            }
        } else {
            None
        };
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
            .filter(|&other| other != ours)
            .filter(|&other| match namespace {
                Some(ns) => std::fs::metadata(format!("/proc/{other}/ns/mnt"))
                    .is_ok_and(|m| (m.dev(), m.ino()) == ns),
                None => is_confined_descendant(other, ours),
            })
            .any(|other| holding(other, bound))
    }
}

/// Who holds a socket.
enum Holder {
    /// A process of the requester's sandbox.
    Sandbox,
    /// No socket is bound there.
    Nobody,
    /// Some other process.
    Outside,
}

/// What socket is looked for among the bound ones.
enum Wanted<'a> {
    /// A pathname socket: its file's device and inode.
    File(u64, u64),
    /// An abstract name (with its leading NUL).
    Abstract(&'a [u8]),
}

/// Whether `pid` has one of the sockets `bound` open: a descriptor whose
/// link names the socket's inode, confirmed by the socket's cookie (inode
/// numbers of sockets are 32-bit and wrap; cookies are never reused).
fn holding(pid: i32, bound: &[BoundSocket]) -> bool {
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let mut pidfd = None;
    fds.filter_map(Result::ok).any(|fd| {
        let Some(inode) = std::fs::read_link(fd.path()).ok().and_then(|l| {
            l.to_str()?
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse::<u64>()
                .ok()
        }) else {
            return false;
        };
        let Some(wanted) = bound.iter().find(|b| u64::from(b.inode) == inode) else {
            return false;
        };
        let Some(number) = fd
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<RawFd>().ok())
        else {
            return false;
        };
        if pidfd.is_none() {
            pidfd = pidfd_open(pid).ok();
        }
        let Some(pidfd) = &pidfd else {
            return false;
        };
        // SAFETY: pidfd_getfd on a pidfd we own; flags 0.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), number, 0u32) };
        if rc < 0 {
            return false;
        }
        // SAFETY: a new descriptor the kernel gave us.
        let copy = unsafe { OwnedFd::from_raw_fd(rc as RawFd) };
        socket_cookie(&copy) == Some(wanted.cookie)
    })
}

/// Without a mount namespace: whether `pid` runs under `no_new_privs` and
/// descends from `ancestor` (orphans are adopted by the host, a
/// subreaper, so they still descend from it).
fn is_confined_descendant(pid: i32, ancestor: i32) -> bool {
    let status = |pid: i32| std::fs::read_to_string(format!("/proc/{pid}/status")).ok();
    let field = |text: &str, name: &str| -> Option<i32> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    let Some(text) = status(pid) else {
        return false;
    };
    if field(&text, "NoNewPrivs:") != Some(1) {
        return false;
    }
    let mut parent = field(&text, "PPid:");
    for _ in 0..4096 {
        match parent {
            Some(p) if p == ancestor => return true,
            Some(p) if p > 1 => parent = status(p).and_then(|t| field(&t, "PPid:")),
            _ => return false,
        }
    }
    false
}

/// A bound Unix socket found by `sock_diag`.
#[derive(Debug, Clone, Copy)]
struct BoundSocket {
    inode: u32,
    cookie: u64,
}

/// The Unix sockets of the diagnostics socket's network namespace bound to
/// `wanted` (`NETLINK_SOCK_DIAG`, `UDIAG_SHOW_VFS` and `UDIAG_SHOW_NAME`).
fn unix_sockets_bound_to(diag: &OwnedFd, wanted: &Wanted<'_>) -> io::Result<Vec<BoundSocket>> {
    // A dump the kernel says was disturbed is asked again.
    for _ in 0..3 {
        if let Some(found) = dump_unix_sockets(diag, wanted)? {
            return Ok(found);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// One dump; `None` when the kernel flagged it `NLM_F_DUMP_INTR`.
fn dump_unix_sockets(diag: &OwnedFd, wanted: &Wanted<'_>) -> io::Result<Option<Vec<BoundSocket>>> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const UDIAG_SHOW_NAME: u32 = 1;
    const UDIAG_SHOW_VFS: u32 = 2;
    const UNIX_DIAG_NAME: u16 = 0;
    const UNIX_DIAG_VFS: u16 = 1;
    const NLM_F_DUMP_INTR: u16 = 0x10;
    static SEQUENCE: AtomicUsize = AtomicUsize::new(1);
    #[repr(C)]
    struct Request {
        header: libc::nlmsghdr,
        family: u8,
        protocol: u8,
        pad: u16,
        states: u32,
        ino: u32,
        show: u32,
        cookie: [u32; 2],
    }
    let mut buffer = vec![0u8; 64 * 1024];
    // Whatever an earlier query left unread (it failed half-way) goes.
    loop {
        // SAFETY: a buffer of its length.
        let n = unsafe {
            libc::recv(
                diag.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                libc::MSG_DONTWAIT,
            )
        };
        if n <= 0 {
            break;
        }
    }
    let sequence = SEQUENCE.fetch_add(1, Ordering::Relaxed) as u32;
    let request = Request {
        header: libc::nlmsghdr {
            nlmsg_len: size_of::<Request>() as u32,
            nlmsg_type: SOCK_DIAG_BY_FAMILY,
            nlmsg_flags: (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16,
            nlmsg_seq: sequence,
            nlmsg_pid: 0,
        },
        family: libc::AF_UNIX as u8,
        protocol: 0,
        pad: 0,
        states: u32::MAX,
        ino: 0,
        show: UDIAG_SHOW_NAME | UDIAG_SHOW_VFS,
        cookie: [u32::MAX; 2],
    };
    // SAFETY: a repr(C) request of the size the header names.
    let sent = unsafe {
        libc::send(
            diag.as_raw_fd(),
            (&raw const request).cast(),
            size_of::<Request>(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut found = Vec::new();
    let mut interrupted = false;
    loop {
        // SAFETY: a buffer of its length.
        let n = unsafe {
            libc::recv(
                diag.as_raw_fd(),
                buffer.as_mut_ptr().cast(),
                buffer.len(),
                0,
            )
        };
        if n < 0 {
            let error = io::Error::last_os_error();
            if error.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(error);
        }
        let mut messages = &buffer[..n as usize];
        while messages.len() >= 16 {
            let length =
                u32::from_ne_bytes([messages[0], messages[1], messages[2], messages[3]]) as usize;
            let kind = u16::from_ne_bytes([messages[4], messages[5]]);
            let flags = u16::from_ne_bytes([messages[6], messages[7]]);
            let seq = u32::from_ne_bytes([messages[8], messages[9], messages[10], messages[11]]);
            if length < 16 || length > messages.len() {
                return Err(io::Error::from_raw_os_error(libc::EPROTO));
            }
            let step = (length + 3) & !3;
            let body = &messages[16..length];
            messages = messages.get(step..).unwrap_or(&[]);
            if seq != sequence {
                continue;
            }
            interrupted |= flags & NLM_F_DUMP_INTR != 0;
            match i32::from(kind) {
                libc::NLMSG_DONE => return Ok((!interrupted).then_some(found)),
                libc::NLMSG_ERROR => return Err(io::Error::from_raw_os_error(libc::EPROTO)),
                _ => {}
            }
            // unix_diag_msg: family, type, state, pad, ino (u32), cookie
            // (two u32, low half first).
            if body.len() >= 16 {
                let inode = u32::from_ne_bytes([body[4], body[5], body[6], body[7]]);
                let low = u32::from_ne_bytes([body[8], body[9], body[10], body[11]]);
                let high = u32::from_ne_bytes([body[12], body[13], body[14], body[15]]);
                if attributes_match(&body[16..], wanted, UNIX_DIAG_NAME, UNIX_DIAG_VFS) {
                    found.push(BoundSocket {
                        inode,
                        cookie: u64::from(low) | (u64::from(high) << 32),
                    });
                }
            }
        }
    }
}

/// Whether a `unix_diag_msg`'s attributes name `wanted`.
fn attributes_match(
    mut attributes: &[u8],
    wanted: &Wanted<'_>,
    name_kind: u16,
    vfs_kind: u16,
) -> bool {
    while attributes.len() >= 4 {
        let length = usize::from(u16::from_ne_bytes([attributes[0], attributes[1]]));
        let kind = u16::from_ne_bytes([attributes[2], attributes[3]]);
        if length < 4 || length > attributes.len() {
            return false;
        }
        let data = &attributes[4..length];
        match wanted {
            Wanted::File(dev, ino) if kind == vfs_kind && data.len() >= 8 => {
                let vfs_ino = u32::from_ne_bytes([data[0], data[1], data[2], data[3]]);
                // The superblock's dev_t as the kernel keeps it (major in
                // the top 12 bits, minor in the low 20).
                let vfs_dev = u32::from_ne_bytes([data[4], data[5], data[6], data[7]]);
                let (major, minor) = (libc::major(*dev), libc::minor(*dev));
                if vfs_ino == *ino as u32 && vfs_dev >> 20 == major && vfs_dev & 0xf_ffff == minor {
                    return true;
                }
            }
            Wanted::Abstract(name) if kind == name_kind && data == *name => return true,
            Wanted::File(..) | Wanted::Abstract(_) => {}
        }
        let step = (length + 3) & !3;
        attributes = attributes.get(step..).unwrap_or(&[]);
    }
    false
}

/// The NUL-terminated string at `address` in `pid` (at most `PATH_MAX`
/// bytes, read a page at a time so that a string near the end of its
/// mapping is read whole); `None` when it cannot be read.
fn read_c_string(pid: i32, address: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = address;
    while out.len() < libc::PATH_MAX as usize {
        let chunk = (PAGE - at % PAGE) as usize;
        let mut buffer = vec![0u8; chunk];
        read_memory(pid, at, &mut buffer).ok()?;
        if let Some(end) = buffer.iter().position(|&b| b == 0) {
            out.extend_from_slice(&buffer[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buffer);
        at += chunk as u64;
    }
    None
}

/// Copies `buffer.len()` bytes at `address` in `pid`.
fn read_memory(pid: i32, address: u64, buffer: &mut [u8]) -> io::Result<()> {
    let local = libc::iovec {
        iov_base: buffer.as_mut_ptr().cast(),
        iov_len: buffer.len(),
    };
    let remote = libc::iovec {
        iov_base: address as usize as *mut libc::c_void,
        iov_len: buffer.len(),
    };
    // SAFETY: one local buffer of its length; the remote side is read by
    // the kernel with the access checks of ptrace.
    let n = unsafe { libc::process_vm_readv(pid, &raw const local, 1, &raw const remote, 1, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as usize != buffer.len() {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// A duplicate of descriptor `fd` of the process of thread `pid`, or the
/// errno to answer.
fn borrow_descriptor(pid: i32, fd: RawFd) -> Result<OwnedFd, i32> {
    let pidfd = pidfd_open(pid).map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))?;
    // SAFETY: pidfd_getfd on a pidfd we own; flags 0.
    let rc = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0u32) };
    if rc < 0 {
        return Err(match io::Error::last_os_error().raw_os_error() {
            Some(libc::EBADF) => libc::EBADF,
            // Not allowed to look (another user's process, …): refuse.
            _ => libc::EPERM,
        });
    }
    // SAFETY: a new descriptor (close-on-exec) the kernel gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
}

/// A pidfd for thread `pid`: a thread pidfd where the kernel has them
/// (6.9), else one for its thread group's leader.
fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    const PIDFD_THREAD: u32 = libc::O_EXCL as u32;
    let open = |pid: i32, flags: u32| {
        // SAFETY: pidfd_open with integer arguments.
        let rc = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, flags) };
        if rc < 0 {
            Err(io::Error::last_os_error())
        } else {
            // SAFETY: a new descriptor.
            Ok(unsafe { OwnedFd::from_raw_fd(rc as RawFd) })
        }
    };
    if let Ok(fd) = open(pid, PIDFD_THREAD) {
        return Ok(fd);
    }
    match open(pid, 0) {
        Ok(fd) => Ok(fd),
        Err(_) => {
            // Not a thread group's leader (ENOENT or EINVAL, by kernel).
            let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
            let tgid = status
                .lines()
                .find_map(|l| l.strip_prefix("Tgid:"))
                .and_then(|v| v.trim().parse::<i32>().ok())
                .ok_or_else(|| io::Error::from_raw_os_error(libc::ESRCH))?;
            open(tgid, 0)
        }
    }
}

/// Opens `path` (`O_PATH`) as the thread whose `/proc/TID` is `proc_dir`
/// would resolve it: inside its root (absolute symbolic links included,
/// `openat2` with `RESOLVE_IN_ROOT`), a relative path from its working
/// directory, through its mounts.
pub(crate) fn open_as(proc_dir: &OwnedFd, path: &Path) -> Result<OwnedFd, i32> {
    let root = open_at(
        proc_dir,
        Path::new("root"),
        libc::O_PATH | libc::O_DIRECTORY,
    )
    .map_err(|e| e.raw_os_error().unwrap_or(libc::EACCES))?;
    let full = if path.is_absolute() {
        path.to_path_buf()
    } else {
        // The working directory as the thread sees it, from its root.
        let link = std::fs::read_link(format!("/proc/self/fd/{}/cwd", proc_dir.as_raw_fd()))
            .map_err(|e| e.raw_os_error().unwrap_or(libc::ENOENT))?;
        if !link.is_absolute() {
            return Err(libc::ENOENT);
        }
        link.join(path)
    };
    let Ok(c_path) = std::ffi::CString::new(full.as_os_str().as_bytes()) else {
        return Err(libc::EINVAL);
    };
    #[repr(C)]
    struct OpenHow {
        flags: u64,
        mode: u64,
        resolve: u64,
    }
    const RESOLVE_IN_ROOT: u64 = 0x10;
    let how = OpenHow {
        flags: (libc::O_PATH | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_IN_ROOT,
    };
    // SAFETY: openat2 on our root descriptor, a NUL-terminated path and an
    // open_how of the size passed.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            root.as_raw_fd(),
            c_path.as_ptr(),
            &raw const how,
            size_of::<OpenHow>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::ENOENT));
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// `openat(dir, path, flags | O_CLOEXEC)`.
fn open_at(dir: &OwnedFd, path: &Path, flags: libc::c_int) -> io::Result<OwnedFd> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path relative to a descriptor we own.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), c_path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A directory opened `O_PATH`.
fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a NUL-terminated path.
    let fd = unsafe {
        libc::open(
            c_path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The (device, inode) of `name` under `dir`, following links.
fn stat_at(dir: &OwnedFd, name: &str) -> Option<(u64, u64)> {
    let c_name = std::ffi::CString::new(name).ok()?;
    // SAFETY: plain data.
    let mut stat: libc::stat = unsafe { zeroed() };
    // SAFETY: fstatat into a stat on the stack.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), c_name.as_ptr(), &raw mut stat, 0) };
    (rc == 0).then_some((stat.st_dev, stat.st_ino))
}

/// The device of the superblock `file` lives on (what `sock_diag` reports
/// as a socket file's device): its mount's `major:minor` in the thread's
/// `mountinfo` (mount ids are the same in every namespace).
fn superblock_device(proc_dir: &OwnedFd, file: &OwnedFd) -> Option<u64> {
    let fdinfo = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", file.as_raw_fd())).ok()?;
    let mount_id = fdinfo
        .lines()
        .find_map(|l| l.strip_prefix("mnt_id:"))?
        .trim()
        .to_owned();
    let mountinfo =
        std::fs::read_to_string(format!("/proc/self/fd/{}/mountinfo", proc_dir.as_raw_fd()))
            .ok()?;
    let line = mountinfo
        .lines()
        .find(|l| l.split(' ').next() == Some(mount_id.as_str()))?;
    let (major, minor) = line.split(' ').nth(2)?.split_once(':')?;
    Some(libc::makedev(major.parse().ok()?, minor.parse().ok()?))
}

fn socket_cookie(socket: &OwnedFd) -> Option<u64> {
    let mut value: u64 = 0;
    let mut length = size_of::<u64>() as libc::socklen_t;
    // SAFETY: a u64 and its length.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_COOKIE,
            (&raw mut value).cast(),
            &raw mut length,
        )
    };
    (rc == 0).then_some(value)
}

fn stat_fd(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: plain data.
    let mut stat: libc::stat = unsafe { zeroed() };
    // SAFETY: fstat into a stat on the stack.
    if unsafe { libc::fstat(fd.as_raw_fd(), &raw mut stat) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(stat)
}

fn socket_option(socket: &OwnedFd, option: libc::c_int) -> Option<libc::c_int> {
    let mut value: libc::c_int = 0;
    let mut length = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: an int and its length.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            (&raw mut value).cast(),
            &raw mut length,
        )
    };
    (rc == 0).then_some(value)
}

fn is_nonblocking(socket: &OwnedFd) -> bool {
    // SAFETY: F_GETFL reads the open file's flags.
    let flags = unsafe { libc::fcntl(socket.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

/// Connects `socket` to `address`; the errno, 0 on success.
fn connect(socket: &OwnedFd, address: &Address) -> i32 {
    let bytes = match address {
        Address::Copied(bytes) => bytes.clone(),
        Address::Pinned(file) | Address::Listed(file) => {
            let mut bytes = (libc::AF_UNIX as u16).to_ne_bytes().to_vec();
            bytes.extend_from_slice(format!("/proc/self/fd/{}", file.as_raw_fd()).as_bytes());
            bytes.push(0);
            bytes
        }
    };
    // SAFETY: plain data; the bytes are copied into it below.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let length = bytes.len().min(size_of::<libc::sockaddr_storage>());
    // SAFETY: at most the storage's size is written.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), (&raw mut storage).cast::<u8>(), length);
    }
    if let Address::Listed(file) = address {
        return connect_marked(socket, file, &storage, length);
    }
    loop {
        // SAFETY: an address of `length` bytes.
        let rc = unsafe {
            libc::connect(
                socket.as_raw_fd(),
                (&raw const storage).cast(),
                length as libc::socklen_t,
            )
        };
        if rc == 0 {
            return 0;
        }
        let errno = io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        if errno != libc::EINTR {
            return errno;
        }
    }
}

/// Connects `socket` from a forked child marked as confined; the errno.
/// The child makes only system calls on memory prepared before the fork
/// (no allocation, no lock) and exits at once.
fn connect_marked(
    socket: &OwnedFd,
    file: &OwnedFd,
    storage: &libc::sockaddr_storage,
    length: usize,
) -> i32 {
    let allow_all = ALLOW_ALL;
    let program = libc::sock_fprog {
        len: 1,
        filter: allow_all.as_ptr().cast_mut(),
    };
    let mut pipe = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors.
    if unsafe { libc::pipe2(pipe.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return libc::EAGAIN;
    }
    // SAFETY: both are new and ours.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(pipe[0]), OwnedFd::from_raw_fd(pipe[1])) };
    let fd = socket.as_raw_fd();
    let pinned = file.as_raw_fd();
    let sink = write_end.as_raw_fd();
    // SAFETY: the child below only makes async-signal-safe system calls on
    // the stack and exits with `_exit`.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // SAFETY: as above; every pointer points into this frame.
        unsafe {
            let mut errno: i32 = 0;
            // Nothing of the host's stays open in the child: only the
            // socket to connect, the socket file it is reached through and
            // the pipe for the answer.
            let mut keep = [fd, pinned, sink];
            keep.sort_unstable();
            let mut first: RawFd = 0;
            for kept in keep {
                if first < kept {
                    libc::syscall(libc::SYS_close_range, first as u32, (kept - 1) as u32, 0u32);
                }
                first = kept.saturating_add(1);
            }
            libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32);
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &raw const program,
                ) != 0
            {
                errno = libc::EPERM;
            }
            while errno == 0 {
                if libc::connect(
                    fd,
                    (storage as *const libc::sockaddr_storage).cast(),
                    length as libc::socklen_t,
                ) == 0
                {
                    break;
                }
                errno = *libc::__errno_location();
                if errno == libc::EINTR {
                    errno = 0;
                }
            }
            libc::write(sink, (&raw const errno).cast(), size_of::<i32>());
            libc::_exit(0);
        }
    }
    drop(write_end);
    if child < 0 {
        return libc::EAGAIN;
    }
    let mut errno = [0u8; 4];
    let read = loop {
        // SAFETY: a buffer of its length.
        let n = unsafe { libc::read(read_end.as_raw_fd(), errno.as_mut_ptr().cast(), errno.len()) };
        if n >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break n;
        }
    };
    // SAFETY: waits for our own child; ECHILD (reaped elsewhere) is fine.
    unsafe { libc::waitpid(child, std::ptr::null_mut(), 0) };
    if read == 4 {
        i32::from_ne_bytes(errno)
    } else {
        libc::EIO
    }
}

/// Whether request `id` is still pending (the thread that asked is still
/// in the call).
pub(crate) fn still_valid(listener: &OwnedFd, id: u64) -> bool {
    let mut id = id;
    // SAFETY: the listener and a u64 the ioctl reads.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &raw mut id,
        ) == 0
    }
}

/// Answers request `id` with success and `value` (a descriptor's number).
pub(crate) fn respond_value(listener: &OwnedFd, id: u64, value: i64) {
    send_response(listener, id, value, 0, 0);
}

/// `SECCOMP_IOCTL_NOTIF_SET_FLAGS`: `_IOW('!', 4, __u64)`.
const SECCOMP_IOCTL_NOTIF_SET_FLAGS: libc::c_ulong = 0x4008_2104;
/// `SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP` (Linux 6.6).
const SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP: u64 = 1;

/// Asks the kernel to hand each request and each answer over on the CPU
/// of the thread that waits for it (`SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP`,
/// Linux 6.6): the asking process sleeps until the answer anyway, so its
/// supervisor runs in its place, and the process in the supervisor's,
/// instead of each waking on another CPU (on a virtual machine, about
/// 20 µs a wake). Older kernels refuse the flag; the hand-over is then as
/// before.
fn wake_on_the_same_cpu(listener: &OwnedFd) {
    // SAFETY: the listener and a flags word, by value.
    let _ = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            SECCOMP_IOCTL_NOTIF_SET_FLAGS as _,
            SECCOMP_USER_NOTIF_FD_SYNC_WAKE_UP,
        )
    };
}

/// Lets the kernel make request `id`'s call (`git_guard::Plan::Continue`).
fn respond_continue(listener: &OwnedFd, id: u64) {
    send_response(
        listener,
        id,
        0,
        0,
        libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32,
    );
}

/// Answers request `id` with `errno` (0: success).
pub(crate) fn respond(listener: &OwnedFd, id: u64, errno: i32) {
    send_response(listener, id, 0, -errno, 0);
}

/// Sends the response to request `id`: `val` (the call's result),
/// `error` (a negated errno, or 0) and `flags`.
fn send_response(listener: &OwnedFd, id: u64, val: i64, error: i32, flags: u32) {
    let mut response = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags,
    };
    // SAFETY: the listener and a response struct; ENOENT (the process left
    // the call) needs nothing more.
    unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &raw mut response,
        );
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Runs a classic BPF program as seccomp does, on `seccomp_data`
    /// made of `nr`, `arch` and `args` (the instructions the filters here
    /// use; anything else fails the test).
    fn run(program: &[libc::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = Vec::new();
        data.extend_from_slice(&nr.to_ne_bytes());
        data.extend_from_slice(&arch.to_ne_bytes());
        data.extend_from_slice(&0u64.to_ne_bytes());
        for arg in args {
            data.extend_from_slice(&arg.to_ne_bytes());
        }
        let (mut a, mut pc) = (0u32, 0usize);
        loop {
            let i = program[pc];
            let code = u32::from(i.code);
            pc += 1;
            match code {
                c if c == libc::BPF_LD | libc::BPF_W | libc::BPF_ABS => {
                    let at = i.k as usize;
                    a = u32::from_ne_bytes(data[at..at + 4].try_into().unwrap());
                }
                c if c == libc::BPF_ALU | libc::BPF_AND | libc::BPF_K => a &= i.k,
                c if c == libc::BPF_RET | libc::BPF_K => return i.k,
                c if c == libc::BPF_JMP | libc::BPF_JA => pc += i.k as usize,
                c if c & 0x07 == libc::BPF_JMP => {
                    let taken = match c & 0xf0 {
                        x if x == libc::BPF_JEQ => a == i.k,
                        x if x == libc::BPF_JGT => a > i.k,
                        x if x == libc::BPF_JGE => a >= i.k,
                        x if x == libc::BPF_JSET => a & i.k != 0,
                        _ => panic!("jump {c:#x}"),
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                _ => panic!("instruction {code:#x}"),
            }
        }
    }

    /// What the kernel answers with several filters: the strictest
    /// action; among equals, the filter loaded last.
    fn strictest(answers: &[u32]) -> u32 {
        let rank = |k: u32| (k & libc::SECCOMP_RET_ACTION_FULL) as i32;
        let mut best = answers[0];
        for &k in &answers[1..] {
            if rank(k) < rank(best) {
                best = k;
            }
        }
        best
    }

    #[test]
    // `Ioctl` is `c_ulong` or `c_int` depending on the C library.
    #[allow(clippy::unnecessary_cast)]
    fn the_joined_program_answers_as_the_two_filters_loaded_apart() {
        let number = |call: i64| u32::try_from(call).unwrap();
        let arch = 0xc000_003e; // AUDIT_ARCH_X86_64
        let inet = libc::AF_INET as u64;
        let unix = libc::AF_UNIX as u64;
        let calls: Vec<(u32, [u64; 6])> = vec![
            (number(libc::SYS_read), [0; 6]),
            (number(libc::SYS_connect), [3, 0, 16, 0, 0, 0]),
            (
                number(libc::SYS_socket),
                [inet, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_socket),
                [inet, libc::SOCK_DGRAM as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_socket),
                [inet, libc::SOCK_STREAM as u64, 132, 0, 0, 0],
            ),
            (
                number(libc::SYS_socket),
                [unix, libc::SOCK_DGRAM as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_socket),
                [unix, libc::SOCK_STREAM as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_socket),
                [17, libc::SOCK_RAW as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_socketpair),
                [unix, libc::SOCK_DGRAM as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_ioctl),
                [0, libc::TIOCSTI as u64, 0, 0, 0, 0],
            ),
            (
                number(libc::SYS_ioctl),
                [0, libc::TIOCGWINSZ as u64, 0, 0, 0, 0],
            ),
            (number(libc::SYS_sendto), [3, 0, 1, 0x2000_0000, 0, 0]),
            (number(libc::SYS_sendto), [3, 0, 1, 0, 0, 0]),
            (number(libc::SYS_sendmsg), [3, 0, 0x2000_0000, 0, 0, 0]),
            (number(libc::SYS_io_uring_setup), [0; 6]),
            (
                number(libc::SYS_openat),
                [0, 0, libc::O_RDONLY as u64, 0, 0, 0],
            ),
            (
                number(libc::SYS_openat),
                [0, 0, (libc::O_CREAT | libc::O_WRONLY) as u64, 0, 0, 0],
            ),
            (number(libc::SYS_openat2), [0; 6]),
            (number(libc::SYS_mkdirat), [0; 6]),
            (number(libc::SYS_process_vm_writev), [0; 6]),
            (number(libc::SYS_connect) | 0x4000_0000, [0; 6]),
        ];
        let networks = [
            crate::seccomp::Network::Untouched,
            crate::seccomp::Network::Block {
                tcp_by_landlock: true,
            },
            crate::seccomp::Network::Block {
                tcp_by_landlock: false,
            },
        ];
        let mut compared = 0;
        for network in networks {
            let main = crate::seccomp::as_sock_filters(&crate::seccomp::filter(network).unwrap());
            for guard_git in [false, true] {
                let notify = notify_program(guard_git);
                let joined = chain(&main, &notify).unwrap();
                for (nr, args) in &calls {
                    for arch in [arch, 0x4000_0003] {
                        let apart = strictest(&[
                            run(&main, *nr, arch, *args),
                            run(&notify, *nr, arch, *args),
                        ]);
                        let together = run(&joined, *nr, arch, *args);
                        assert_eq!(
                            together, apart,
                            "call {nr} {args:?} arch {arch:#x}, {network:?}, guard_git {guard_git}"
                        );
                        compared += 1;
                    }
                }
            }
        }
        assert_eq!(compared, 3 * 2 * calls.len() * 2);
    }

    #[test]
    fn the_notify_program_ends_in_allow_and_names_connect() {
        let program = notify_program(true);
        assert_eq!(program.last().unwrap().k, libc::SECCOMP_RET_ALLOW);
        assert!(program.iter().any(|i| i.k == libc::SECCOMP_RET_USER_NOTIF));
        assert!(program.iter().any(|i| i64::from(i.k) == libc::SYS_connect));
    }

    #[test]
    fn diagnostics_attributes_are_matched_by_name_and_by_file() {
        // A name attribute "\0abc" and a vfs attribute for dev 8:1, ino 42.
        let mut attributes = Vec::new();
        attributes.extend_from_slice(&8u16.to_ne_bytes());
        attributes.extend_from_slice(&0u16.to_ne_bytes());
        attributes.extend_from_slice(b"\0abc");
        attributes.extend_from_slice(&12u16.to_ne_bytes());
        attributes.extend_from_slice(&1u16.to_ne_bytes());
        attributes.extend_from_slice(&42u32.to_ne_bytes());
        attributes.extend_from_slice(&((8u32 << 20) | 1).to_ne_bytes());
        let dev = libc::makedev(8, 1);
        assert!(attributes_match(&attributes, &Wanted::File(dev, 42), 0, 1));
        assert!(!attributes_match(&attributes, &Wanted::File(dev, 43), 0, 1));
        assert!(!attributes_match(
            &attributes,
            &Wanted::File(libc::makedev(8, 2), 42),
            0,
            1
        ));
        assert!(attributes_match(
            &attributes,
            &Wanted::Abstract(b"\0abc"),
            0,
            1
        ));
        assert!(!attributes_match(
            &attributes,
            &Wanted::Abstract(b"\0ab"),
            0,
            1
        ));
    }
}
