//! A read-only `.git` inside a writable root, and a network of its own,
//! through shared user, mount and network namespaces.
//!
//! Landlock cannot take a subtree back out of a writable tree (a rule on
//! the workspace root covers its `.git`), and granting the root's entries
//! one by one would forbid creating new files at its top. A mount can: in a
//! private mount namespace, `.git` is bind-mounted onto itself read-only,
//! so every write beneath it fails with `EROFS`, while the rest of the root
//! stays writable. An unprivileged process needs a user namespace for
//! that.
//!
//! With the network off, the same helper also creates a network namespace:
//! it has nothing but a loopback interface (brought up), so no packet of
//! any protocol leaves it, while programs in the sandbox can still talk to
//! each other over `127.0.0.1`. Abstract Unix sockets belong to a network
//! namespace too, so those of the host are out of reach.
//!
//! The mount namespace also has a `/dev/pts` of its own: a new `devpts`
//! instance, so the pseudo-terminals of the host (the person's other
//! terminals, another agent's) are not there to be opened, while programs
//! that make terminals (`script`, `tmux`, `expect`) make them in the
//! sandbox's instance (`/dev/ptmx` allocates from the `pts` beside it).
//! The host allocates a confined terminal's own pty there too, through
//! [`Namespaces::pts`], so its name resolves inside (`tty` works).
//!
//! Creating (and later tearing down) these namespaces per spawn costs
//! milliseconds, so they are made once: a short-lived helper process
//! creates them, maps its own uid and gid to themselves, makes the mounts,
//! brings up the loopback, and the parent keeps descriptors of the
//! namespaces. Each sandboxed child then only `setns`es into them before
//! `exec` — a few system calls. Landlock, applied after, forbids the child
//! to unmount or remount anything.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};

use crate::walk::Stamp;

/// Descriptors of a user namespace, of a mount namespace with a private
/// `/dev/pts` in which some paths are read-only, and of a network
/// namespace of its own if the network is off.
#[derive(Debug)]
pub(crate) struct Namespaces {
    user: OwnedFd,
    mount: OwnedFd,
    net: Option<OwnedFd>,
    /// The root of the private `devpts` instance (`O_PATH`).
    pts: std::sync::Arc<OwnedFd>,
    /// The read-only paths and their stamps when the namespace was made.
    pub(crate) read_only: Vec<(PathBuf, Stamp)>,
    /// The hidden places and their stamps when the namespace was made.
    masks: Vec<(Mask, Stamp)>,
    /// The root (`O_PATH`) of the empty directory of each private mask,
    /// as mounted in the namespace: write access is granted on it, not on
    /// the host's directory it hides (Landlock passes a mount point over
    /// when it walks up a path, so a rule on the hidden directory never
    /// applies to what is mounted there).
    private_roots: Vec<(PathBuf, OwnedFd)>,
}

/// A place where programs outside keep their Unix sockets, hidden in the
/// mount namespace by a mount over it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Mask {
    /// Canonical, existing.
    pub(crate) path: PathBuf,
    /// What is mounted over it.
    pub(crate) kind: MaskKind,
}

/// What hides a [`Mask`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MaskKind {
    /// An empty read-only directory (dsh's own directories).
    Sealed,
    /// An empty directory of the sandbox's own, with this mode (a tmux or
    /// an X server started inside keeps its socket there).
    Private(u32),
    /// `/dev/null` over a socket.
    File,
}

/// One mask to mount, prepared before `fork`.
struct MaskTarget {
    path: CString,
    /// `tmpfs` options, or `None` for a bind of `/dev/null`.
    tmpfs: Option<(CString, libc::c_ulong)>,
}

/// One read-only bind mount to make, prepared before `fork`.
struct Target {
    path: CString,
    /// The mount flags the remount must keep (locked in a user namespace).
    keep: libc::c_ulong,
}

fn cstring(path: &Path) -> io::Result<CString> {
    CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "path contains a NUL byte"))
}

/// `ST_RELATIME` of `statvfs(3)`: the kernel's value, which the `libc`
/// crate leaves out on musl.
const ST_RELATIME: libc::c_ulong = 0x1000;

/// The flags of the mount holding `path` that a remount must repeat.
fn locked_flags(path: &CString) -> io::Result<libc::c_ulong> {
    // SAFETY: a valid C string and a zeroed statvfs to fill.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let pairs = [
        (libc::ST_NOSUID, libc::MS_NOSUID),
        (libc::ST_NODEV, libc::MS_NODEV),
        (libc::ST_NOEXEC, libc::MS_NOEXEC),
        (libc::ST_NOATIME, libc::MS_NOATIME),
        (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
        (ST_RELATIME, libc::MS_RELATIME),
    ];
    Ok(pairs
        .iter()
        .filter(|(st_flag, _)| st.f_flag & st_flag != 0)
        .fold(0, |acc, (_, ms)| acc | ms))
}

/// Closes a descriptor we own by number (after `fork`, in either process).
fn close(fd: RawFd) {
    // SAFETY: closing a descriptor this code opened and owns.
    unsafe { libc::close(fd) };
}

/// Writes one status record to the helper's report pipe: the step that
/// failed (0: none) and its errno.
///
/// # Safety
/// Async-signal-safe; called in the forked helper.
unsafe fn report(fd: RawFd, step: u8, errno: i32) {
    let mut rec = [0u8; 5];
    rec[0] = step;
    rec[1..].copy_from_slice(&errno.to_ne_bytes());
    // SAFETY: writing a stack buffer to a pipe we own.
    unsafe { libc::write(fd, rec.as_ptr().cast(), rec.len()) };
}

/// Writes `text` to the file `path`. Async-signal-safe.
unsafe fn write_file(path: &CStr, text: &CStr) -> bool {
    // SAFETY: plain system calls on a descriptor opened here.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        let bytes = text.to_bytes();
        let ok = fd >= 0 && libc::write(fd, bytes.as_ptr().cast(), bytes.len()) >= 0;
        if fd >= 0 {
            libc::close(fd);
        }
        ok
    }
}

/// The id of the `tty` group, which owns terminals (`None` without one).
fn tty_group() -> Option<libc::gid_t> {
    // SAFETY: `getgrnam` returns a pointer to static storage or null; read
    // at once, before any fork.
    unsafe {
        let group = libc::getgrnam(c"tty".as_ptr());
        (!group.is_null()).then(|| (*group).gr_gid)
    }
}

/// Writes the helper's id maps from outside its new user namespace: a
/// process forked before the `unshare`, which keeps the host's
/// privileges, waits until the helper has unshared and then writes the
/// helper's maps (a map of more than the writer's own id needs
/// `CAP_SETGID` over the parent namespace, which the helper gives up by
/// unsharing). Async-signal-safe: runs in the forked helper.
struct Mapper {
    pid: libc::pid_t,
    go: RawFd,
}

impl Mapper {
    /// Forks the writer; `None` (errno set) when it cannot.
    unsafe fn start(uid_map: &CStr, gid_map: &CStr) -> Option<Self> {
        // SAFETY: system calls only, on stack memory and the maps prepared
        // before the helper's fork.
        unsafe {
            let helper = libc::getpid();
            let mut ends = [0; 2];
            if libc::pipe2(ends.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
                return None;
            }
            let pid = libc::fork();
            if pid < 0 {
                return None;
            }
            if pid == 0 {
                libc::close(ends[1]);
                let mut byte = 0u8;
                if libc::read(ends[0], (&raw mut byte).cast(), 1) != 1 {
                    libc::_exit(1);
                }
                let mut path = [0u8; 40];
                let ok = proc_path(&mut path, helper, b"/uid_map")
                    .is_some_and(|p| write_file(p, uid_map))
                    && proc_path(&mut path, helper, b"/gid_map")
                        .is_some_and(|p| write_file(p, gid_map));
                libc::_exit(if ok { 0 } else { 1 });
            }
            libc::close(ends[0]);
            Some(Self { pid, go: ends[1] })
        }
    }

    /// Once the helper has unshared: denies `setgroups` (as the helper's
    /// own maps do), lets the writer write, and waits for it.
    unsafe fn finish(self) -> bool {
        // SAFETY: system calls on our pipe end and our own child.
        unsafe {
            let denied = write_file(c"/proc/self/setgroups", c"deny");
            let byte = 1u8;
            let told = denied && libc::write(self.go, (&raw const byte).cast(), 1) == 1;
            libc::close(self.go);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, 0) < 0 && errno() == libc::EINTR {}
            told && libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0
        }
    }
}

/// Writes `/proc/<pid><file>` and a NUL into `buf`, without allocating.
fn proc_path<'a>(buf: &'a mut [u8; 40], pid: libc::pid_t, file: &[u8]) -> Option<&'a CStr> {
    let mut digits = [0u8; 12];
    let mut n = u32::try_from(pid).ok()?;
    let mut len = 0;
    loop {
        digits[len] = b'0' + (n % 10) as u8;
        len += 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let mut at = 0;
    let mut put = |bytes: &[u8]| -> Option<()> {
        let end = at + bytes.len();
        buf.get_mut(at..end)?.copy_from_slice(bytes);
        at = end;
        Some(())
    };
    put(b"/proc/")?;
    for i in (0..len).rev() {
        put(&digits[i..=i])?;
    }
    put(file)?;
    put(b"\0")?;
    CStr::from_bytes_with_nul(&buf[..at]).ok()
}

/// The errno of the last failed call, without allocating.
fn errno() -> i32 {
    io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// What each failure step of the helper was doing.
const STEPS: [&str; 9] = [
    "",
    "unshare(CLONE_NEWUSER)",
    "writing the uid/gid map",
    "making mounts private",
    "bind-mounting",
    "remounting read-only",
    "bringing up the loopback",
    "mounting a private /dev/pts",
    "hiding a socket directory",
];

impl Namespaces {
    /// Creates the namespaces: a mount namespace with `paths` (canonical,
    /// existing) read-only if there are any, a network namespace if
    /// `isolate_network`.
    pub(crate) fn create(
        paths: &[PathBuf],
        masks: &[Mask],
        isolate_network: bool,
    ) -> Result<Self, String> {
        Self::try_create(paths, masks, isolate_network)
            .map_err(|e| format!("user namespaces unavailable: {e}"))
    }

    // Long on purpose: everything between `fork` and `_exit` runs in the
    // forked helper, which may only make system calls on memory prepared
    // before the fork; it stays in one function so that rule is checked by
    // reading one place.
    fn try_create(paths: &[PathBuf], masks: &[Mask], isolate_network: bool) -> io::Result<Self> {
        let mask_stamps: Vec<(Mask, Stamp)> = masks
            .iter()
            .map(|m| (m.clone(), Stamp::of(&m.path)))
            .collect();
        let mask_targets = masks
            .iter()
            .map(|m| {
                let tmpfs = match m.kind {
                    MaskKind::Sealed => Some((
                        CString::new("mode=0500,size=4k").map_err(io::Error::other)?,
                        libc::MS_RDONLY,
                    )),
                    MaskKind::Private(mode) => Some((
                        CString::new(format!("mode={mode:o},size=64m"))
                            .map_err(io::Error::other)?,
                        0,
                    )),
                    MaskKind::File => None,
                };
                Ok(MaskTarget {
                    path: cstring(&m.path)?,
                    tmpfs,
                })
            })
            .collect::<io::Result<Vec<_>>>()?;
        let stamps: Vec<(PathBuf, Stamp)> =
            paths.iter().map(|p| (p.clone(), Stamp::of(p))).collect();
        let targets = paths
            .iter()
            .map(|p| {
                let path = cstring(p)?;
                let keep = locked_flags(&path)?;
                Ok(Target { path, keep })
            })
            .collect::<io::Result<Vec<_>>>()?;
        // SAFETY: getuid/getgid cannot fail.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let uid_map = CString::new(format!("{uid} {uid} 1")).map_err(io::Error::other)?;
        let gid_map = CString::new(format!("{gid} {gid} 1")).map_err(io::Error::other)?;
        let maps = [
            (c"/proc/self/setgroups", c"deny"),
            (c"/proc/self/uid_map", uid_map.as_c_str()),
            (c"/proc/self/gid_map", gid_map.as_c_str()),
        ];
        // A host run as root maps the terminals' group too, so a program
        // that gives a new pty to that group (screen, run as root) can:
        // the map has two lines then, which only a process outside the
        // new namespace may write (see `Mapper`).
        let tty_gid = if uid == 0 { tty_group() } else { None };
        let outside_gid_map = match tty_gid.filter(|t| *t != gid) {
            Some(t) => {
                Some(CString::new(format!("{gid} {gid} 1\n{t} {t} 1")).map_err(io::Error::other)?)
            }
            None => None,
        };
        let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWNS;
        if isolate_network {
            flags |= libc::CLONE_NEWNET;
        }
        // SAFETY: an all-zero ifreq is a valid value to fill in.
        let mut lo: libc::ifreq = unsafe { std::mem::zeroed() };
        for (dst, src) in lo.ifr_name.iter_mut().zip(b"lo\0") {
            *dst = *src as libc::c_char;
        }
        // One helper at a time: a helper forked while another runs would
        // inherit that one's pipes (a fork without exec keeps every
        // descriptor), and each would wait for the other to close them.
        static HELPER: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _one_at_a_time = HELPER
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (report_r, report_w) = pipe()?;
        let (hold_r, hold_w) = pipe()?;
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: the child below only makes async-signal-safe system calls
        // on memory prepared before the fork, then `_exit`s.
        let pid = unsafe { libc::fork() };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid == 0 {
            // SAFETY: in the forked helper; see above.
            unsafe {
                close(report_r.as_raw_fd());
                close(hold_w.as_raw_fd());
                let out = report_w.as_raw_fd();
                // Keep nothing of the host's but our two pipe ends: not the
                // pipes of its commands, nor another helper's.
                close_all_but(out, hold_r.as_raw_fd());
                // Never outlive the host, which would leave us waiting.
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGKILL as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                    || libc::getppid() != parent
                {
                    libc::_exit(1);
                }
                // A session leader of its own, so the host's reaper of
                // adopted orphans leaves its exit status to us.
                libc::setsid();
                let mapper = match &outside_gid_map {
                    Some(gid_map) => match Mapper::start(&uid_map, gid_map) {
                        Some(mapper) => Some(mapper),
                        None => {
                            report(out, 2, errno());
                            libc::_exit(1);
                        }
                    },
                    None => None,
                };
                if libc::unshare(flags) != 0 {
                    report(out, 1, errno());
                    libc::_exit(1);
                }
                let mapped = match mapper {
                    Some(mapper) => mapper.finish(),
                    None => maps.iter().all(|(file, text)| write_file(file, text)),
                };
                if !mapped {
                    report(out, 2, errno());
                    libc::_exit(1);
                }
                // Mounts the host makes later still propagate in; none of
                // ours propagate out.
                if libc::mount(
                    std::ptr::null(),
                    c"/".as_ptr(),
                    std::ptr::null(),
                    libc::MS_REC | libc::MS_SLAVE,
                    std::ptr::null(),
                ) != 0
                {
                    report(out, 3, errno());
                    libc::_exit(1);
                }
                for t in &targets {
                    if libc::mount(
                        t.path.as_ptr(),
                        t.path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REC,
                        std::ptr::null(),
                    ) != 0
                    {
                        report(out, 4, errno());
                        libc::_exit(1);
                    }
                    if libc::mount(
                        std::ptr::null(),
                        t.path.as_ptr(),
                        std::ptr::null(),
                        libc::MS_BIND | libc::MS_REMOUNT | libc::MS_RDONLY | t.keep,
                        std::ptr::null(),
                    ) != 0
                    {
                        report(out, 5, errno());
                        libc::_exit(1);
                    }
                }
                // A devpts of our own over the host's: `newinstance` (the
                // default since Linux 4.7, said for older ones), a ptmx
                // anyone in the namespace may open, terminals only for
                // their owner and group.
                if libc::mount(
                    c"devpts".as_ptr(),
                    c"/dev/pts".as_ptr(),
                    c"devpts".as_ptr(),
                    libc::MS_NOSUID | libc::MS_NOEXEC,
                    c"newinstance,ptmxmode=0666,mode=0620".as_ptr().cast(),
                ) != 0
                {
                    report(out, 7, errno());
                    libc::_exit(1);
                }
                for m in &mask_targets {
                    let rc = match &m.tmpfs {
                        Some((data, flags)) => libc::mount(
                            c"tmpfs".as_ptr(),
                            m.path.as_ptr(),
                            c"tmpfs".as_ptr(),
                            libc::MS_NOSUID | libc::MS_NODEV | flags,
                            data.as_ptr().cast(),
                        ),
                        None => libc::mount(
                            c"/dev/null".as_ptr(),
                            m.path.as_ptr(),
                            std::ptr::null(),
                            libc::MS_BIND,
                            std::ptr::null(),
                        ),
                    };
                    if rc != 0 {
                        report(out, 8, errno());
                        libc::_exit(1);
                    }
                }
                if isolate_network {
                    let sock =
                        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
                    if sock < 0 || libc::ioctl(sock, libc::SIOCGIFFLAGS as _, &raw mut lo) != 0 || {
                        lo.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
                        libc::ioctl(sock, libc::SIOCSIFFLAGS as _, &raw mut lo) != 0
                    } {
                        report(out, 6, errno());
                        libc::_exit(1);
                    }
                    libc::close(sock);
                }
                report(out, 0, 0);
                // Stay alive until the parent has opened our namespaces.
                let mut byte = 0u8;
                libc::read(hold_r.as_raw_fd(), (&raw mut byte).cast(), 1);
                libc::_exit(0);
            }
        }
        drop(report_w);
        drop(hold_r);
        let outcome = read_report(&report_r).and_then(|(step, err)| {
            if step == 0 {
                let open = |kind: &str| {
                    std::fs::File::open(format!("/proc/{pid}/ns/{kind}")).map(OwnedFd::from)
                };
                let net = if isolate_network {
                    Some(open("net")?)
                } else {
                    None
                };
                // The private devpts, reached through the helper's root
                // (which resolves in its mount namespace).
                let pts = std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                    .open(format!("/proc/{pid}/root/dev/pts"))
                    .map(OwnedFd::from)?;
                // Each private mask's own directory, the same way.
                let private_roots = masks
                    .iter()
                    .filter(|m| matches!(m.kind, MaskKind::Private(_)))
                    .map(|m| {
                        let inside = format!("/proc/{pid}/root{}", m.path.display());
                        std::fs::OpenOptions::new()
                            .read(true)
                            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                            .open(inside)
                            .map(|f| (m.path.clone(), OwnedFd::from(f)))
                    })
                    .collect::<io::Result<Vec<_>>>()?;
                Ok((open("user")?, open("mnt")?, net, pts, private_roots))
            } else {
                let what = STEPS.get(usize::from(step)).copied().unwrap_or("setup");
                let e = io::Error::from_raw_os_error(err);
                Err(io::Error::new(e.kind(), format!("{what}: {e}")))
            }
        });
        drop(hold_w);
        let mut status = 0;
        // SAFETY: reaping the helper we forked.
        while unsafe { libc::waitpid(pid, &mut status, 0) } < 0 && errno() == libc::EINTR {}
        let (user, mount, net, pts, private_roots) = outcome?;
        Ok(Self {
            user,
            mount,
            net,
            pts: std::sync::Arc::new(pts),
            read_only: stamps,
            masks: mask_stamps,
            private_roots,
        })
    }

    /// The root of the namespace's own `devpts` instance (`O_PATH`): a
    /// terminal confined in these namespaces gets its pty from its `ptmx`.
    pub(crate) fn pts(&self) -> &std::sync::Arc<OwnedFd> {
        &self.pts
    }

    /// The directories mounted over the private masks, as the namespace
    /// shows them (see `private_roots`).
    pub(crate) fn private_roots(&self) -> &[(PathBuf, OwnedFd)] {
        &self.private_roots
    }

    /// Whether the network is isolated.
    pub(crate) fn isolates_network(&self) -> bool {
        self.net.is_some()
    }

    /// Whether these namespaces are what `paths`, `masks` and
    /// `isolate_network` ask for, with every path they mount over still
    /// the same file.
    pub(crate) fn is_current(
        &self,
        paths: &[PathBuf],
        masks: &[Mask],
        isolate_network: bool,
    ) -> bool {
        self.isolates_network() == isolate_network
            && self.masks.iter().map(|(m, _)| m).eq(masks)
            && self.read_only.iter().map(|(p, _)| p).eq(paths)
            && self.unchanged()
    }

    /// Whether every path these namespaces mount over is still the file it
    /// was when they were made.
    pub(crate) fn unchanged(&self) -> bool {
        let masks = self.masks.iter().map(|(m, stamp)| (&m.path, stamp));
        let read_only = self.read_only.iter().map(|(p, stamp)| (p, stamp));
        masks
            .chain(read_only)
            .all(|(path, stamp)| same_file(*stamp, Stamp::of(path)))
    }

    /// Moves the calling process into the namespaces, keeping its working
    /// directory. Async-signal-safe: no allocation, only system calls.
    pub(crate) fn enter(&self) -> io::Result<()> {
        let fail = || Err(io::Error::last_os_error());
        // SAFETY: descriptors we own.
        if unsafe { libc::setns(self.user.as_raw_fd(), libc::CLONE_NEWUSER) } != 0 {
            return fail();
        }
        if let Some(net) = &self.net
            // SAFETY: a descriptor we own.
            && unsafe { libc::setns(net.as_raw_fd(), libc::CLONE_NEWNET) } != 0
        {
            return fail();
        }
        {
            let mount = &self.mount;
            let mut cwd = [0u8; libc::PATH_MAX as usize];
            // SAFETY: a stack buffer of the given size; a descriptor we own;
            // then the C string getcwd wrote.
            unsafe {
                if libc::getcwd(cwd.as_mut_ptr().cast(), cwd.len()).is_null()
                    || libc::setns(mount.as_raw_fd(), libc::CLONE_NEWNS) != 0
                    // setns moved us to the namespace's root: go back by
                    // path, so the working directory resolves through its
                    // mounts.
                    || libc::chdir(cwd.as_ptr().cast()) != 0
                {
                    return fail();
                }
            }
        }
        Ok(())
    }
}

/// Two stamps name the same file (a directory's contents may change).
fn same_file(a: Stamp, b: Stamp) -> bool {
    a.identity() == b.identity()
}

/// Closes every descriptor from 3 up but `a` and `b`. Async-signal-safe.
///
/// # Safety
///
/// Only in a freshly forked child: descriptors owned elsewhere in the
/// process are closed under their owners.
unsafe fn close_all_but(a: RawFd, b: RawFd) {
    let (low, high) = if a < b { (a, b) } else { (b, a) };
    let ranges = [
        (3, low - 1),
        (low + 1, high - 1),
        (high + 1, libc::c_int::MAX),
    ];
    for (first, last) in ranges {
        if first > last {
            continue;
        }
        // SAFETY: a plain system call on descriptor numbers.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_close_range,
                first as libc::c_uint,
                last as libc::c_uint,
                0,
            )
        };
        if rc != 0 {
            // Kernels before 5.9: close one by one, up to the limit.
            // SAFETY: sysconf has no memory arguments.
            let max = unsafe { libc::sysconf(libc::_SC_OPEN_MAX) };
            let max = if max > 0 {
                max.min(1 << 20) as libc::c_int
            } else {
                1024
            };
            let mut fd = first;
            while fd <= last && fd < max {
                // SAFETY: closing a descriptor number; EBADF is harmless.
                unsafe { libc::close(fd) };
                fd += 1;
            }
        }
    }
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: a two-element array for pipe2 to fill.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: pipe2 returned two new descriptors that we now own.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

fn read_report(fd: &OwnedFd) -> io::Result<(u8, i32)> {
    let mut rec = [0u8; 5];
    let mut got = 0;
    while got < rec.len() {
        // SAFETY: reading into the rest of a stack buffer.
        let n = unsafe {
            libc::read(
                fd.as_raw_fd(),
                rec[got..].as_mut_ptr().cast(),
                rec.len() - got,
            )
        };
        match n {
            n if n > 0 => got += n.unsigned_abs(),
            0 => {
                return Err(io::Error::other("the namespace helper exited early"));
            }
            _ if errno() == libc::EINTR => {}
            _ => return Err(io::Error::last_os_error()),
        }
    }
    Ok((rec[0], i32::from_ne_bytes([rec[1], rec[2], rec[3], rec[4]])))
}
