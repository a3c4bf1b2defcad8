//! The creating calls of a confined process, made for it by the
//! supervisor with the bytes it checked ([`crate::git_guard`] decides).
//!
//! Letting the kernel carry on after a check
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`) would have it read the path from
//! the process's memory again, where a second thread may have rewritten
//! it. So no call whose verdict depends on a path is continued: the
//! supervisor resolves the path itself, checks the entry it found, and a
//! worker thread makes that very entry, relative to the directory
//! descriptor it resolved, and answers the process (an opened file is
//! handed over with `SECCOMP_IOCTL_NOTIF_ADDFD`).
//!
//! The worker never widens what the process may do:
//! * it is restricted by the sandbox's own Landlock ruleset
//!   (`landlock_restrict_self` applies to the calling thread only);
//! * it resolves nothing by name from its own root: every path is walked
//!   component by component ([`Walker`]) from descriptors of the
//!   process's root, working directory or `dirfd`, so the walk stays in
//!   the process's mount namespace (its read-only `.git` mounts, its hidden
//!   socket places) and an absolute symbolic link restarts at the
//!   process's root; `..` never climbs above it;
//! * it has a file-system context of its own (`unshare(CLONE_FS)`) whose
//!   umask is set to the process's for each call;
//! * its user and groups are the host user's, which the sandbox's user
//!   namespace maps to themselves: a file comes out owned as before.
//!
//! `/proc/self` and `/proc/thread-self` in a path name the thread's own
//! `/proc/TID` (in this process's `/proc`, whichever one the thread
//! sees), and the magic links below it (`/dev/stdout` →
//! `/proc/self/fd/1`, `cwd`, `root`) are followed by the kernel from the
//! supervisor, which may look into the thread; the file found is then
//! reopened by the worker through its own `/proc/self/fd`. The magic
//! links of any other process are not followed (`EACCES`): the supervisor
//! may look where the process may not. `/dev/tty` is the process's
//! controlling terminal, found among its descriptors or, for a
//! pseudo-terminal, by name in its `/dev/pts`.
//! A FIFO opened without `O_NONBLOCK`, which waits for its other end, is
//! opened on a thread of its own, so no other call waits behind it.

use std::ffi::CString;
use std::io;
use std::mem::zeroed;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};

/// Symbolic links followed in one walk before `ELOOP`, as the kernel.
const MAX_LINKS: usize = 40;

/// `statfs` magic of procfs.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;

/// One call to make, on entries already resolved and checked.
#[derive(Debug)]
pub(crate) enum Op {
    /// Not made here: the kernel opens the terminal (see
    /// `git_guard::Plan::Continue`); never submitted.
    TakeTerminal,
    /// `mkdirat(parent, name, mode)`.
    Mkdir {
        parent: OwnedFd,
        name: CString,
        mode: u32,
    },
    /// `mknodat(parent, name, mode, dev)`.
    Mknod {
        parent: OwnedFd,
        name: CString,
        mode: u32,
        dev: u64,
    },
    /// `symlinkat(target, parent, name)`.
    Symlink {
        target: CString,
        parent: OwnedFd,
        name: CString,
    },
    /// A hard link to `old` named `name` in `parent`.
    Link {
        old: LinkSource,
        parent: OwnedFd,
        name: CString,
    },
    /// `renameat2(old_parent, old_name, parent, name, flags)`.
    Rename {
        old_parent: OwnedFd,
        old_name: CString,
        parent: OwnedFd,
        name: CString,
        flags: u32,
    },
    /// `open` of `name` in `parent`, which did not exist when resolved:
    /// created exclusively (a link or file that appeared since is opened
    /// without following, or the error answered).
    Create {
        parent: OwnedFd,
        name: CString,
        flags: i32,
        mode: u32,
    },
    /// `open` of a file that exists (`O_PATH` descriptor), with `flags`
    /// less `O_CREAT`.
    Reopen {
        file: OwnedFd,
        flags: i32,
        mode: u32,
    },
}

/// What a hard link is made to.
#[derive(Debug)]
pub(crate) enum LinkSource {
    /// This file (`O_PATH`), linked through `/proc/self/fd`.
    File(OwnedFd),
    /// The entry `name` of `parent`, not followed.
    Entry(OwnedFd, CString),
}

/// A call to make and how to answer it.
struct Job {
    listener: Arc<OwnedFd>,
    id: u64,
    umask: u32,
    op: Op,
    judge: Box<crate::git_guard::PlaceJudge>,
}

/// The worker of one sandbox: a thread restricted by the sandbox's
/// Landlock ruleset, started with the first call it makes.
#[derive(Debug, Default)]
pub(crate) struct Emulator {
    ruleset: OnceLock<OwnedFd>,
    worker: OnceLock<Option<mpsc::Sender<Job>>>,
}

impl Emulator {
    /// Gives the worker the sandbox's ruleset (before any spawn).
    pub(crate) fn set_ruleset(&self, ruleset: OwnedFd) {
        let _ = self.ruleset.set(ruleset);
    }

    /// Makes `op` for request `id` and answers it, on the worker; the
    /// process waits for the answer, this thread does not.
    pub(crate) fn submit(
        &self,
        listener: &Arc<OwnedFd>,
        id: u64,
        umask: u32,
        op: Op,
        judge: Box<crate::git_guard::PlaceJudge>,
    ) {
        let worker = self.worker.get_or_init(|| self.start());
        let job = Job {
            listener: Arc::clone(listener),
            id,
            umask,
            op,
            judge,
        };
        let sent = match worker {
            Some(sender) => sender.send(job).map_err(|e| e.0),
            None => Err(job),
        };
        if let Err(job) = sent {
            crate::connect_guard::respond(&job.listener, job.id, libc::EPERM);
        }
    }

    fn start(&self) -> Option<mpsc::Sender<Job>> {
        let ruleset = self.ruleset.get()?.try_clone().ok()?;
        let (sender, receiver) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("dsh-guard-make".to_owned())
            .stack_size(256 * 1024)
            .spawn(move || work(&ruleset, &receiver))
            .ok()?;
        Some(sender)
    }
}

/// The worker: restricts itself, then makes each call it is sent. If it
/// cannot restrict itself, it refuses every call.
fn work(ruleset: &OwnedFd, jobs: &mpsc::Receiver<Job>) {
    let restricted = restrict_this_thread(ruleset);
    while let Ok(job) = jobs.recv() {
        if restricted.is_err() {
            crate::connect_guard::respond(&job.listener, job.id, libc::EPERM);
            continue;
        }
        // The thread that asked may have been killed meanwhile: nothing
        // is made for it then.
        if !crate::connect_guard::still_valid(&job.listener, job.id) {
            continue;
        }
        // SAFETY: umask of this thread's own file-system context.
        unsafe { libc::umask(job.umask) };
        // The workers of the workspace's other sandboxes wait meanwhile.
        let links = job.judge.made_links();
        let _turn = links.one_maker();
        run(job);
    }
}

/// Gives this thread a file-system context of its own (its umask) and the
/// sandbox's Landlock domain.
fn restrict_this_thread(ruleset: &OwnedFd) -> io::Result<()> {
    // SAFETY: unshare and prctl with integer arguments; they change only
    // this thread.
    unsafe {
        if libc::unshare(libc::CLONE_FS) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    drop_capabilities()
}

/// Empties this thread's capability sets (they are per thread): run as
/// root, the worker would otherwise override permissions and make device
/// nodes the confined process, without capabilities in the host's user
/// namespace, could not.
fn drop_capabilities() -> io::Result<()> {
    /// `struct __user_cap_header_struct`.
    #[repr(C)]
    struct Header {
        version: u32,
        pid: i32,
    }
    /// `struct __user_cap_data_struct`.
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct Data {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    /// `_LINUX_CAPABILITY_VERSION_3`: two data structs, 64 capabilities.
    const VERSION_3: u32 = 0x2008_0522;
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let data = [Data {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a valid header and two data structs, as version
    // 3 reads; pid 0 is this thread.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &raw mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Makes one call and answers it. What depends on the moment is judged
/// here, just before (where a symbolic link leads, the links of a
/// directory moved) and just after (whether the entry made is a guarded
/// name by another spelling: then it is undone and refused).
fn run(job: Job) {
    let Job {
        listener,
        id,
        op,
        judge,
        ..
    } = job;
    let answer = |result: Result<(), i32>| {
        crate::connect_guard::respond(&listener, id, result.err().unwrap_or(0));
    };
    match op {
        // Answered by the kernel (`Plan::Continue`), never made here.
        Op::TakeTerminal => answer(Err(libc::EINVAL)),
        Op::Mkdir { parent, name, mode } => {
            // SAFETY: a descriptor we own and a NUL-terminated name.
            let rc = unsafe { libc::mkdirat(parent.as_raw_fd(), name.as_ptr(), mode) };
            answer(check(rc).and_then(|()| keep_made(&judge, &parent, &name, libc::AT_REMOVEDIR)));
        }
        Op::Mknod {
            parent,
            name,
            mode,
            dev,
        } => {
            // SAFETY: a descriptor we own and a NUL-terminated name.
            let rc = unsafe { libc::mknodat(parent.as_raw_fd(), name.as_ptr(), mode, dev) };
            answer(check(rc).and_then(|()| keep_made(&judge, &parent, &name, 0)));
        }
        Op::Symlink {
            target,
            parent,
            name,
        } => {
            if let Err(errno) = judge.may_point(&parent, target.as_bytes()) {
                return answer(Err(errno));
            }
            // SAFETY: a descriptor we own and NUL-terminated strings.
            let rc = unsafe { libc::symlinkat(target.as_ptr(), parent.as_raw_fd(), name.as_ptr()) };
            answer(
                check(rc)
                    .and_then(|()| keep_made(&judge, &parent, &name, 0))
                    .and_then(|()| keep_link(&judge, &parent, &name, target.as_bytes())),
            );
        }
        Op::Link { old, parent, name } => {
            // A hard link to a symbolic link is a symbolic link made here.
            let target = match &old {
                LinkSource::Entry(dir, old_name) => link_target(dir, old_name),
                LinkSource::File(file) => symlink_target(file),
            };
            if let Ok(target) = &target
                && let Err(errno) = judge.may_point(&parent, target)
            {
                return answer(Err(errno));
            }
            let rc = match &old {
                LinkSource::File(file) => match self_fd_path(file) {
                    // SAFETY: a NUL-terminated path, a descriptor we own
                    // and a NUL-terminated name.
                    Ok(path) => unsafe {
                        libc::linkat(
                            libc::AT_FDCWD,
                            path.as_ptr(),
                            parent.as_raw_fd(),
                            name.as_ptr(),
                            libc::AT_SYMLINK_FOLLOW,
                        )
                    },
                    Err(errno) => return answer(Err(errno)),
                },
                // SAFETY: descriptors we own and NUL-terminated names.
                LinkSource::Entry(dir, old_name) => unsafe {
                    libc::linkat(
                        dir.as_raw_fd(),
                        old_name.as_ptr(),
                        parent.as_raw_fd(),
                        name.as_ptr(),
                        0,
                    )
                },
            };
            answer(
                check(rc)
                    .and_then(|()| keep_made(&judge, &parent, &name, 0))
                    .and_then(|()| match &target {
                        Ok(target) => keep_link(&judge, &parent, &name, target),
                        Err(_) => Ok(()),
                    }),
            );
        }
        Op::Rename {
            old_parent,
            old_name,
            parent,
            name,
            flags,
        } => answer(rename(
            &judge,
            &old_parent,
            &old_name,
            &parent,
            &name,
            flags,
        )),
        Op::Create {
            parent,
            name,
            flags,
            mode,
        } => match create(&parent, &name, flags, mode) {
            Ok((file, created)) => {
                let made = crate::git_guard::identity(&file);
                if made.is_some_and(|made| judge.is_a_guarded_name(&parent, made)) {
                    drop(file);
                    if created {
                        // SAFETY: a descriptor we own and a NUL-terminated name.
                        unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), 0) };
                    }
                    return answer(Err(libc::EPERM));
                }
                hand_over(&listener, id, &file, flags);
            }
            Err(errno) => answer(Err(errno)),
        },
        Op::Reopen { file, flags, mode } => reopen(listener, id, file, flags, mode),
    }
}

/// Keeps entry `name` just made in `parent` unless it is a guarded name by
/// another spelling ([`crate::git_guard::PlaceJudge::is_a_guarded_name`]):
/// then removes it (`unlinkat` with `remove_flags`) and refuses.
fn keep_made(
    judge: &crate::git_guard::PlaceJudge,
    parent: &OwnedFd,
    name: &CString,
    remove_flags: i32,
) -> Result<(), i32> {
    let Some(made) = crate::git_guard::identity_at(parent, name) else {
        // Removed already by the process.
        return Ok(());
    };
    if !judge.is_a_guarded_name(parent, made) {
        return Ok(());
    }
    // SAFETY: a descriptor we own and a NUL-terminated name.
    unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), remove_flags) };
    Err(libc::EPERM)
}

/// Keeps the symbolic link `name` (to `target`) just made in `parent`,
/// remembered ([`crate::git_guard::MadeLinks`]), unless it is a way out
/// of the workspace that completes the way of a link made before into a
/// place the sandbox may write: then removes it and refuses.
fn keep_link(
    judge: &crate::git_guard::PlaceJudge,
    parent: &OwnedFd,
    name: &CString,
    target: &[u8],
) -> Result<(), i32> {
    judge.note_link(parent, name, target);
    if judge.leads_out(parent, target)
        && let Err(errno) = judge.ways_out_hold()
    {
        // SAFETY: a descriptor we own and a NUL-terminated name.
        unsafe { libc::unlinkat(parent.as_raw_fd(), name.as_ptr(), 0) };
        return Err(errno);
    }
    Ok(())
}

/// A rename: a symbolic link or a directory moved is judged where it
/// lands (both ways for an exchange); an entry that would replace a
/// guarded name by another spelling is refused before, one that lands as
/// one is moved back after.
fn rename(
    judge: &crate::git_guard::PlaceJudge,
    old_parent: &OwnedFd,
    old_name: &CString,
    parent: &OwnedFd,
    name: &CString,
    flags: u32,
) -> Result<(), i32> {
    let exchange = flags & libc::RENAME_EXCHANGE != 0;
    judge.may_move(old_parent, old_name, parent, name)?;
    if exchange {
        judge.may_move(parent, name, old_parent, old_name)?;
    }
    // An entry there that a guarded name holds too.
    let guarded = |dir: &OwnedFd, entry: &CString| {
        crate::git_guard::identity_at(dir, entry).is_some_and(|id| judge.is_a_guarded_name(dir, id))
    };
    if guarded(parent, name) || (exchange && guarded(old_parent, old_name)) {
        return Err(libc::EPERM);
    }
    // A link or a directory put in place of an entry that a remembered
    // link's way passes through: it could not be moved back whole.
    let link_or_dir = |dir: &OwnedFd, entry: &CString| {
        open_path(dir, entry.as_bytes(), libc::O_NOFOLLOW)
            .and_then(|f| file_kind(&f))
            .is_ok_and(|k| k == libc::S_IFLNK || k == libc::S_IFDIR)
    };
    if !exchange
        && crate::git_guard::identity_at(parent, name).is_some()
        && link_or_dir(old_parent, old_name)
        && judge.a_link_passes_through(parent, name)
    {
        return Err(libc::EPERM);
    }
    let call =
        |from: &OwnedFd, from_name: &CString, to: &OwnedFd, to_name: &CString, flags: u32| {
            // SAFETY: descriptors we own and NUL-terminated names.
            let rc = unsafe {
                libc::syscall(
                    libc::SYS_renameat2,
                    from.as_raw_fd(),
                    from_name.as_ptr(),
                    to.as_raw_fd(),
                    to_name.as_ptr(),
                    flags,
                )
            };
            check(rc as libc::c_int)
        };
    call(old_parent, old_name, parent, name, flags)?;
    let back = if exchange {
        libc::RENAME_EXCHANGE
    } else {
        libc::RENAME_NOREPLACE
    };
    if guarded(parent, name) || (exchange && guarded(old_parent, old_name)) {
        let _ = call(parent, name, old_parent, old_name, back);
        return Err(libc::EPERM);
    }
    // A way out moved into place (a link that leads out, or a directory
    // holding one): the links made before are judged again.
    judge.links_moved((old_parent, old_name), (parent, name), exchange);
    let way_out = |dir: &OwnedFd, entry: &CString| match link_target(dir, entry) {
        Ok(target) => judge.leads_out(dir, &target),
        Err(_) => judge.holds_a_way_out(dir, entry),
    };
    if (way_out(parent, name) || (exchange && way_out(old_parent, old_name)))
        && let Err(errno) = judge.ways_out_hold()
    {
        let _ = call(parent, name, old_parent, old_name, back);
        judge.links_moved((parent, name), (old_parent, old_name), exchange);
        return Err(errno);
    }
    Ok(())
}

fn check(rc: libc::c_int) -> Result<(), i32> {
    if rc == 0 { Ok(()) } else { Err(errno()) }
}

fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// The flags every open the worker makes carries: its descriptor is not
/// inherited by anything the host starts, and a terminal never becomes
/// the host's controlling terminal.
const OPEN_ALWAYS: i32 = libc::O_CLOEXEC | libc::O_NOCTTY;

/// Creates `name` in `parent` for an `open` with `O_CREAT`; when it
/// appeared since the walk (and the call did not ask `O_EXCL`), opens
/// what is there without following a link. Says whether it created it.
fn create(parent: &OwnedFd, name: &CString, flags: i32, mode: u32) -> Result<(OwnedFd, bool), i32> {
    let open = |flags: i32| {
        // SAFETY: a directory descriptor we own and a NUL-terminated name.
        let fd = unsafe {
            libc::openat(
                parent.as_raw_fd(),
                name.as_ptr(),
                flags | OPEN_ALWAYS | libc::O_NOFOLLOW | libc::O_NONBLOCK,
                mode,
            )
        };
        if fd < 0 {
            Err(errno())
        } else {
            // SAFETY: a new descriptor.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    let (file, created) = match open(flags | libc::O_EXCL) {
        Err(libc::EEXIST) if flags & libc::O_EXCL == 0 => (open(flags & !libc::O_CREAT)?, false),
        other => (other?, true),
    };
    restore_blocking(&file, flags);
    Ok((file, created))
}

/// Clears the `O_NONBLOCK` the worker opened with when the call did not
/// ask for it.
fn restore_blocking(file: &OwnedFd, flags: i32) {
    if flags & libc::O_NONBLOCK == 0 {
        // SAFETY: F_GETFL/F_SETFL on a descriptor we own.
        unsafe {
            let now = libc::fcntl(file.as_raw_fd(), libc::F_GETFL);
            if now >= 0 {
                libc::fcntl(file.as_raw_fd(), libc::F_SETFL, now & !libc::O_NONBLOCK);
            }
        }
    }
}

/// `/proc/self/fd/N` for `file`.
fn self_fd_path(file: &OwnedFd) -> Result<CString, i32> {
    CString::new(format!("/proc/self/fd/{}", file.as_raw_fd())).map_err(|_| libc::EINVAL)
}

/// Opens an existing file anew with the call's flags (through the
/// worker's `/proc/self/fd`, so Landlock judges it as for the process)
/// and answers. A FIFO that would wait for its other end is opened on a
/// thread of its own.
fn reopen(listener: Arc<OwnedFd>, id: u64, file: OwnedFd, flags: i32, mode: u32) {
    // `O_EXCL` means "create" only with `O_CREAT` (the file exists); with
    // `O_TMPFILE` it keeps the file from being linked, and on a block
    // device it is an exclusive open: kept there.
    let flags = if flags & libc::O_CREAT != 0 {
        flags & !(libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW)
    } else {
        flags & !libc::O_NOFOLLOW
    };
    let path = match self_fd_path(&file) {
        Ok(path) => path,
        Err(errno) => return respond_errno(&listener, id, errno),
    };
    let open = move |flags: i32| {
        // SAFETY: a NUL-terminated path.
        // The mode matters to `O_TMPFILE` only (the umask is this
        // thread's, the process's).
        let fd = unsafe { libc::open(path.as_ptr(), flags | OPEN_ALWAYS, mode) };
        if fd < 0 {
            Err(errno())
        } else {
            // SAFETY: a new descriptor.
            Ok(unsafe { OwnedFd::from_raw_fd(fd) })
        }
    };
    let waits =
        flags & libc::O_NONBLOCK == 0 && flags & libc::O_ACCMODE != libc::O_RDWR && is_fifo(&file);
    if !waits {
        match open(flags | libc::O_NONBLOCK) {
            Ok(opened) => {
                restore_blocking(&opened, flags);
                hand_over(&listener, id, &opened, flags);
            }
            Err(errno) => respond_errno(&listener, id, errno),
        }
        return;
    }
    // At most this many opens wait for a FIFO's other end at once: each
    // holds a thread (two for a reader) until it comes or the process
    // leaves the call.
    const MAX_FIFO_WAITS: usize = 64;
    static WAITING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    if WAITING.fetch_add(1, std::sync::atomic::Ordering::AcqRel) >= MAX_FIFO_WAITS {
        WAITING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        return respond_errno(&listener, id, libc::EAGAIN);
    }
    // A thread started here shares this one's Landlock domain and
    // file-system context.
    let Ok(fallback) = listener.try_clone() else {
        WAITING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        return respond_errno(&listener, id, libc::EAGAIN);
    };
    let spawned = std::thread::Builder::new()
        .name("dsh-guard-fifo".to_owned())
        .stack_size(64 * 1024)
        .spawn(move || {
            let opened = if flags & libc::O_ACCMODE == libc::O_WRONLY {
                wait_for_reader(&listener, id, || open(flags | libc::O_NONBLOCK))
            } else {
                wait_for_writer(&listener, id, &file, move || open(flags))
            };
            match opened {
                Some(Ok(opened)) => {
                    restore_blocking(&opened, flags);
                    hand_over(&listener, id, &opened, flags);
                }
                Some(Err(errno)) => respond_errno(&listener, id, errno),
                None => {}
            }
            WAITING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        });
    if spawned.is_err() {
        WAITING.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        respond_errno(&fallback, id, libc::EAGAIN);
    }
}

/// Opens a FIFO for reading, which waits for a writer, on a thread of its
/// own; `None` when the process left the call meanwhile: then this opens
/// the FIFO's write end for a moment, so that open ends and its thread
/// with it (else it would wait for ever).
fn wait_for_writer(
    listener: &OwnedFd,
    id: u64,
    file: &OwnedFd,
    open: impl FnOnce() -> Result<OwnedFd, i32> + Send + 'static,
) -> Option<Result<OwnedFd, i32>> {
    let (done, opened) = std::sync::mpsc::channel();
    let blocked = std::thread::Builder::new()
        .name("dsh-guard-fifo".to_owned())
        .stack_size(64 * 1024)
        .spawn(move || {
            let _ = done.send(open());
        });
    if blocked.is_err() {
        return Some(Err(libc::EAGAIN));
    }
    loop {
        match opened.recv_timeout(std::time::Duration::from_millis(50)) {
            Ok(result) => return Some(result),
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return Some(Err(libc::EIO)),
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {}
        }
        if !crate::connect_guard::still_valid(listener, id) {
            // The waiting open counts as a reader: a writer that does not
            // wait gets in, and the open ends.
            let Ok(path) = self_fd_path(file) else {
                return None;
            };
            // SAFETY: a NUL-terminated path; the descriptor is closed at once.
            let fd = unsafe {
                libc::open(
                    path.as_ptr(),
                    libc::O_WRONLY | libc::O_NONBLOCK | OPEN_ALWAYS,
                )
            };
            if fd >= 0 {
                // SAFETY: the descriptor just opened.
                unsafe { libc::close(fd) };
            }
            // The opened end, if any, is dropped with the channel.
            let _ = opened.recv_timeout(std::time::Duration::from_secs(1));
            return None;
        }
    }
}

/// Opens a FIFO for writing once it has a reader (`open` answers `ENXIO`
/// until then), as a blocking open would; `None` when the process left
/// the call meanwhile (a blocking open of ours would wait for ever).
fn wait_for_reader(
    listener: &OwnedFd,
    id: u64,
    open: impl Fn() -> Result<OwnedFd, i32>,
) -> Option<Result<OwnedFd, i32>> {
    let mut pause = std::time::Duration::from_millis(1);
    loop {
        match open() {
            Err(libc::ENXIO) => {}
            done => return Some(done),
        }
        if !crate::connect_guard::still_valid(listener, id) {
            return None;
        }
        // sleep-ok: no event says a FIFO got a reader; the pause grows to
        // 50 ms, and the process asked to wait for one.
        std::thread::sleep(pause);
        pause = (pause * 2).min(std::time::Duration::from_millis(50));
    }
}

fn respond_errno(listener: &OwnedFd, id: u64, errno: i32) {
    crate::connect_guard::respond(listener, id, errno);
}

fn is_fifo(file: &OwnedFd) -> bool {
    // SAFETY: plain data.
    let mut stat: libc::stat = unsafe { zeroed() };
    // SAFETY: fstat into a stat on the stack.
    let rc = unsafe { libc::fstat(file.as_raw_fd(), &raw mut stat) };
    rc == 0 && stat.st_mode & libc::S_IFMT == libc::S_IFIFO
}

/// Installs `file` in the process and answers with its number, at once
/// (`SECCOMP_ADDFD_FLAG_SEND`), close-on-exec if the call asked.
fn hand_over(listener: &OwnedFd, id: u64, file: &OwnedFd, flags: i32) {
    let mut addfd = libc::seccomp_notif_addfd {
        id,
        flags: libc::SECCOMP_ADDFD_FLAG_SEND as u32,
        srcfd: file.as_raw_fd() as u32,
        newfd: 0,
        newfd_flags: if flags & libc::O_CLOEXEC != 0 {
            libc::O_CLOEXEC as u32
        } else {
            0
        },
    };
    // SAFETY: the listener and an addfd struct of the size the ioctl names.
    let rc = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ADDFD,
            &raw mut addfd,
        )
    };
    if rc >= 0 {
        return;
    }
    match errno() {
        // The process left the call: nothing to answer.
        libc::ENOENT => {}
        // Before Linux 5.14 (no `SEND`): install, then answer with the
        // number (a process that left the call in between keeps it).
        libc::EINVAL => {
            addfd.flags = 0;
            // SAFETY: as above.
            let fd = unsafe {
                libc::ioctl(
                    listener.as_raw_fd(),
                    libc::SECCOMP_IOCTL_NOTIF_ADDFD,
                    &raw mut addfd,
                )
            };
            if fd < 0 {
                crate::connect_guard::respond(listener, id, errno());
            } else {
                crate::connect_guard::respond_value(listener, id, i64::from(fd));
            }
        }
        errno => crate::connect_guard::respond(listener, id, errno),
    }
}

/// What a walk found at the end of a path.
#[derive(Debug)]
pub(crate) enum Found {
    /// The last entry does not exist: `name` in directory `parent`.
    Missing { parent: OwnedFd, name: Vec<u8> },
    /// The last entry, as an `O_PATH` descriptor (a symbolic link itself
    /// when not followed).
    Existing(OwnedFd),
    /// The directory and the last name, untouched (a call that makes the
    /// entry and does not follow it).
    Entry { parent: OwnedFd, name: Vec<u8> },
}

/// What a walk does with the last component.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Last {
    /// Leave it (return the directory and the name).
    Keep,
    /// Follow a symbolic link there.
    Follow,
    /// Open it without following.
    NoFollow,
}

/// Resolves paths as a thread of the process would.
pub(crate) struct Walker {
    /// The process's root.
    pub(crate) root: OwnedFd,
    /// The thread's `/proc/TID` in this process's `/proc`, and its id:
    /// what `/proc/self` (and, with `task/TID`, `/proc/thread-self`) name
    /// for the thread, whichever `/proc` it sees.
    pub(crate) proc_self: OwnedFd,
    pub(crate) tid: i32,
    /// Set when a walk went through a symbolic link of `/proc`.
    pub(crate) through_proc: std::cell::Cell<bool>,
    /// The directory the last entry of the last walk was found in, when
    /// it ended on an existing entry looked up by name.
    pub(crate) last_parent: std::cell::Cell<Option<OwnedFd>>,
}

impl Walker {
    /// Resolves `path` from `start` (the process's root for an absolute
    /// one).
    pub(crate) fn resolve(&self, start: &OwnedFd, path: &[u8], last: Last) -> Result<Found, i32> {
        if path.is_empty() {
            return Err(libc::ENOENT);
        }
        self.last_parent.set(None);
        let mut pending: Vec<Vec<u8>> = Vec::new();
        push_components(&mut pending, path);
        let mut current = if path.first() == Some(&b'/') {
            dup(&self.root)?
        } else {
            dup(start)?
        };
        let mut links = 0usize;
        // Whether `current` is in the thread's own `/proc/TID`, reached
        // through `/proc/self` (its magic links are then its own).
        let mut own_proc = false;
        // `pending` holds the components still to walk, last first.
        while let Some(component) = pending.pop() {
            let is_last = pending.is_empty();
            if component == b"." && !is_last {
                continue;
            }
            if component == b".." {
                own_proc = false;
                if !same_place(&current, &self.root) {
                    current = open_path(&current, b"..", libc::O_DIRECTORY)?;
                }
                if is_last {
                    return match last {
                        Last::Keep => Err(libc::EEXIST),
                        Last::Follow | Last::NoFollow => Ok(Found::Existing(current)),
                    };
                }
                continue;
            }
            if is_last && last == Last::Keep {
                return Ok(Found::Entry {
                    parent: current,
                    name: component,
                });
            }
            let entry = match open_path(&current, &component, libc::O_NOFOLLOW) {
                Ok(entry) => entry,
                Err(libc::ENOENT) if is_last => {
                    return Ok(Found::Missing {
                        parent: current,
                        name: component,
                    });
                }
                Err(errno) => return Err(errno),
            };
            let mode = file_kind(&entry)?;
            if mode != libc::S_IFLNK || (is_last && last == Last::NoFollow) {
                if is_last {
                    self.last_parent.set(Some(current));
                    return Ok(Found::Existing(entry));
                }
                if mode != libc::S_IFDIR {
                    return Err(libc::ENOTDIR);
                }
                current = entry;
                continue;
            }
            links += 1;
            if links > MAX_LINKS {
                return Err(libc::ELOOP);
            }
            if is_proc(&current) {
                self.through_proc.set(true);
                if component == b"self" || component == b"thread-self" {
                    current = if component == b"self" {
                        dup(&self.proc_self)?
                    } else {
                        let task = format!("task/{}", self.tid);
                        open_path(&self.proc_self, task.as_bytes(), libc::O_DIRECTORY)?
                    };
                    own_proc = true;
                    if is_last {
                        return Ok(Found::Existing(current));
                    }
                    continue;
                }
                // A magic link (`fd/N`, `cwd`, `root`, `exe`) of the
                // thread's own: the kernel follows it from here. One of
                // another process is not followed (this process may look
                // into processes the confined one may not).
                if !own_proc {
                    return Err(libc::EACCES);
                }
                own_proc = false;
                let target = open_path(&current, &component, 0)?;
                if is_last {
                    return Ok(Found::Existing(target));
                }
                current = target;
                continue;
            }
            let target = read_link(&entry)?;
            if target.first() == Some(&b'/') {
                current = dup(&self.root)?;
            }
            push_components(&mut pending, &target);
        }
        // Only `.` or `/` components: the directory itself.
        match last {
            Last::Keep => Err(libc::EEXIST),
            Last::Follow | Last::NoFollow => Ok(Found::Existing(current)),
        }
    }
}

/// Pushes the components of `path` onto `pending` (which is popped from
/// the end), so that they come next, in order.
fn push_components(pending: &mut Vec<Vec<u8>>, path: &[u8]) {
    let mut parts: Vec<Vec<u8>> = path
        .split(|&b| b == b'/')
        .filter(|c| !c.is_empty())
        .map(<[u8]>::to_vec)
        .collect();
    if parts.is_empty() {
        parts.push(b".".to_vec());
    }
    pending.extend(parts.into_iter().rev());
}

fn dup(fd: &OwnedFd) -> Result<OwnedFd, i32> {
    fd.try_clone()
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))
}

/// `openat(dir, name, O_PATH | flags)`.
pub(crate) fn open_path(dir: &OwnedFd, name: &[u8], flags: i32) -> Result<OwnedFd, i32> {
    let name = CString::new(name).map_err(|_| libc::EINVAL)?;
    // SAFETY: a descriptor we own and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_PATH | libc::O_CLOEXEC | flags,
        )
    };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(crate) fn file_kind(fd: &OwnedFd) -> Result<u32, i32> {
    // SAFETY: plain data.
    let mut stat: libc::stat = unsafe { zeroed() };
    // SAFETY: fstat into a stat on the stack (works on O_PATH).
    if unsafe { libc::fstat(fd.as_raw_fd(), &raw mut stat) } != 0 {
        return Err(errno());
    }
    Ok(stat.st_mode & libc::S_IFMT)
}

/// The (device, inode, mount) of `fd`.
fn place(fd: &OwnedFd) -> Option<(u32, u32, u64, u64)> {
    // SAFETY: plain data.
    let mut stx: libc::statx = unsafe { zeroed() };
    // SAFETY: statx of the descriptor itself into a struct on the stack.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &raw mut stx,
        )
    };
    (rc == 0).then_some((
        stx.stx_dev_major,
        stx.stx_dev_minor,
        stx.stx_ino,
        stx.stx_mnt_id,
    ))
}

fn same_place(a: &OwnedFd, b: &OwnedFd) -> bool {
    matches!((place(a), place(b)), (Some(x), Some(y)) if x == y)
}

fn is_proc(dir: &OwnedFd) -> bool {
    // SAFETY: plain data.
    let mut fs: libc::statfs = unsafe { zeroed() };
    // SAFETY: fstatfs into a struct on the stack.
    let rc = unsafe { libc::fstatfs(dir.as_raw_fd(), &raw mut fs) };
    rc == 0 && fs.f_type as i64 == PROC_SUPER_MAGIC
}

/// Whether `file` is a process's memory (`/proc/PID/mem`, or a thread's).
pub(crate) fn is_process_memory(file: &OwnedFd) -> bool {
    is_proc(file)
        && std::fs::read_link(format!("/proc/self/fd/{}", file.as_raw_fd()))
            .is_ok_and(|path| path.file_name() == Some(std::ffi::OsStr::new("mem")))
}

/// The target of the symbolic link `link` (an `O_PATH` descriptor).
fn read_link(link: &OwnedFd) -> Result<Vec<u8>, i32> {
    let mut buffer = vec![0u8; libc::PATH_MAX as usize];
    // SAFETY: readlinkat of the descriptor itself into a buffer of its
    // length.
    let n = unsafe {
        libc::readlinkat(
            link.as_raw_fd(),
            c"".as_ptr(),
            buffer.as_mut_ptr().cast(),
            buffer.len(),
        )
    };
    if n < 0 {
        return Err(errno());
    }
    buffer.truncate(n as usize);
    Ok(buffer)
}

/// The target of entry `name` of `dir` if it is a symbolic link.
pub(crate) fn link_target(dir: &OwnedFd, name: &CString) -> Result<Vec<u8>, i32> {
    link_target_of(dir, name.as_bytes())
}

/// [`link_target`] for a name in bytes.
pub(crate) fn link_target_of(dir: &OwnedFd, name: &[u8]) -> Result<Vec<u8>, i32> {
    symlink_target(&open_path(dir, name, libc::O_NOFOLLOW)?)
}

/// The target of `file` (`O_PATH`) if it is a symbolic link.
pub(crate) fn symlink_target(file: &OwnedFd) -> Result<Vec<u8>, i32> {
    if file_kind(file)? != libc::S_IFLNK {
        return Err(libc::EINVAL);
    }
    read_link(file)
}

/// The path of `fd` as the kernel names it (in the process's mount
/// namespace, from its root); `None` for a file without one (removed: no
/// link is left — a name that merely ends in " (deleted)" is a name).
pub(crate) fn path_of(fd: &OwnedFd) -> Option<PathBuf> {
    let path = std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok()?;
    if !path.is_absolute() {
        return None;
    }
    if path.as_os_str().as_bytes().ends_with(b" (deleted)") {
        // SAFETY: plain data.
        let mut st: libc::stat = unsafe { zeroed() };
        // SAFETY: fstat into a stat on the stack (works on O_PATH).
        let rc = unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) };
        if rc != 0 || st.st_nlink == 0 {
            return None;
        }
    }
    Some(path)
}

/// The process's controlling terminal (what its `/dev/tty` opens), as an
/// `O_PATH` descriptor: one of its descriptors on that terminal, found
/// through `proc_dir` (`/proc/TID`), or else a pseudo-terminal's name in
/// the `/dev/pts` under its `root`.
pub(crate) fn controlling_terminal(proc_dir: &OwnedFd, root: &OwnedFd) -> Result<OwnedFd, i32> {
    let stat = read_proc_file(proc_dir, c"stat").ok_or(libc::ENXIO)?;
    // The fields after the command name, which is in parentheses.
    let after = stat.rsplit_once(')').map(|(_, rest)| rest).unwrap_or("");
    let tty: u64 = after
        .split_whitespace()
        .nth(4)
        .and_then(|v| v.parse::<i64>().ok())
        .and_then(|v| u64::try_from(v).ok())
        .filter(|&v| v != 0)
        .ok_or(libc::ENXIO)?;
    let wanted = libc::makedev(
        ((tty >> 8) & 0xfff) as u32,
        ((tty & 0xff) | ((tty >> 12) & 0xfff00)) as u32,
    );
    let fd_dir = open_path(proc_dir, b"fd", libc::O_DIRECTORY)?;
    let entries = std::fs::read_dir(format!("/proc/self/fd/{}", fd_dir.as_raw_fd()))
        .map_err(|_| libc::ENXIO)?;
    for entry in entries.filter_map(Result::ok) {
        let name = entry.file_name();
        let Ok(file) = open_path(&fd_dir, name.as_bytes(), 0) else {
            continue;
        };
        // SAFETY: plain data.
        let mut st: libc::stat = unsafe { zeroed() };
        // SAFETY: fstat into a stat on the stack.
        let rc = unsafe { libc::fstat(file.as_raw_fd(), &raw mut st) };
        if rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == wanted {
            return Ok(file);
        }
    }
    // None held: a pseudo-terminal by its name in the process's /dev/pts.
    let (major, minor) = (libc::major(wanted), libc::minor(wanted));
    if !(136..=143).contains(&major) {
        return Err(libc::ENXIO);
    }
    let name = format!("dev/pts/{}", (major - 136) * 256 + minor);
    let file = open_path(root, name.as_bytes(), libc::O_NOFOLLOW).map_err(|_| libc::ENXIO)?;
    // SAFETY: plain data.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: fstat into a stat on the stack.
    let rc = unsafe { libc::fstat(file.as_raw_fd(), &raw mut st) };
    if rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == wanted {
        Ok(file)
    } else {
        Err(libc::ENXIO)
    }
}

/// Whether `fd` is `/dev/tty` (character device 5:0).
pub(crate) fn is_dev_tty(fd: &OwnedFd) -> bool {
    // SAFETY: plain data.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: fstat into a stat on the stack.
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFCHR && st.st_rdev == libc::makedev(5, 0)
}

/// Whether `fd` is a terminal's device: a pseudo-terminal's slave
/// (majors 136–143) or a virtual console or serial line (major 4), the
/// devices a session leader takes as its controlling terminal by opening.
pub(crate) fn is_terminal_device(fd: &OwnedFd) -> bool {
    // SAFETY: plain data.
    let mut st: libc::stat = unsafe { zeroed() };
    // SAFETY: fstat into a stat on the stack (works on O_PATH).
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) };
    let major = libc::major(st.st_rdev);
    rc == 0
        && st.st_mode & libc::S_IFMT == libc::S_IFCHR
        && (major == 4 || (136..=143).contains(&major))
}

/// Whether the thread whose `/proc/TID` is `proc_dir` could take a
/// terminal as its controlling one by opening it: its process leads its
/// session, has no controlling terminal and runs one thread (no other
/// thread of it can rewrite the path while the kernel reads it again).
pub(crate) fn may_take_a_terminal(proc_dir: &OwnedFd) -> bool {
    let (Some(stat), Some(status)) = (
        read_proc_file(proc_dir, c"stat"),
        read_proc_file(proc_dir, c"status"),
    ) else {
        return false;
    };
    let one_thread = status
        .lines()
        .any(|l| l.strip_prefix("Threads:").is_some_and(|v| v.trim() == "1"));
    let tgid = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<i64>().ok());
    // The fields after the command name, which is in parentheses: state,
    // ppid, pgrp, session, tty_nr.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let session = fields.get(3).and_then(|v| v.parse::<i64>().ok());
    let tty = fields.get(4).and_then(|v| v.parse::<i64>().ok());
    one_thread && tty == Some(0) && session.is_some() && session == tgid
}

/// Whether the `len` bytes at `address` in the process of thread `tid`
/// (whose `/proc/TID` is `proc_dir`) can change only by the thread's own
/// writes, so that the kernel, reading them again, reads what was
/// checked. The thread waits in its call and runs alone
/// ([`may_take_a_terminal`]); the sandbox's filter refuses
/// `process_vm_writev`, `userfaultfd` and io_uring, and the guard refuses
/// opening any process's `/proc/PID/mem` for writing. What is left, and
/// checked here:
/// * every page is an anonymous page of the process (`/proc/TID/pagemap`
///   says neither file-backed nor shared): a shared mapping is written by
///   other processes, a file's page that was never written follows the
///   file;
/// * no other process shares the memory (`clone(CLONE_VM)`, a `vfork`
///   child's parent): `kcmp(KCMP_VM)` against every thread of every
///   other process;
/// * no Linux AIO context (an `[aio]` ring in its maps), whose reads
///   complete into the process's memory asynchronously.
///
/// Any doubt (a file that cannot be read, no `kcmp`) is a no.
pub(crate) fn memory_is_its_own(proc_dir: &OwnedFd, tid: i32, address: u64, len: usize) -> bool {
    let dir = proc_dir.as_raw_fd();
    let Ok(maps) = std::fs::read(format!("/proc/self/fd/{dir}/maps")) else {
        return false;
    };
    if maps
        .split(|&b| b == b'\n')
        .any(|line| line.ends_with(b"[aio] (deleted)"))
    {
        return false;
    }
    pages_are_anonymous(proc_dir, address, len) && no_other_process_shares_memory(proc_dir, tid)
}

/// Whether every page of the `len` bytes at `address` is present (or
/// swapped out) and anonymous, by `pagemap`: bit 63 present, bit 62
/// swapped, bit 61 a file page or shared anonymous.
fn pages_are_anonymous(proc_dir: &OwnedFd, address: u64, len: usize) -> bool {
    use std::os::unix::fs::FileExt;
    const PRESENT: u64 = 1 << 63;
    const SWAPPED: u64 = 1 << 62;
    const FILE_OR_SHARED: u64 = 1 << 61;
    let pagemap = format!("/proc/self/fd/{}/pagemap", proc_dir.as_raw_fd());
    let Ok(pagemap) = std::fs::File::open(pagemap) else {
        return false;
    };
    // SAFETY: sysconf has no preconditions.
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let Some(last) = address.checked_add(len.max(1) as u64 - 1) else {
        return false;
    };
    (address / page..=last / page).all(|n| {
        let mut entry = [0u8; 8];
        if pagemap.read_exact_at(&mut entry, n * 8).is_err() {
            return false;
        }
        let entry = u64::from_ne_bytes(entry);
        entry & (PRESENT | SWAPPED) != 0 && entry & FILE_OR_SHARED == 0
    })
}

/// Whether no process but the one of thread `tid` (whose `/proc/TID` is
/// `proc_dir`) has its memory.
fn no_other_process_shares_memory(proc_dir: &OwnedFd, tid: i32) -> bool {
    const KCMP_VM: i32 = 1;
    let kcmp = |other: i32| {
        // SAFETY: kcmp compares two processes' kernel objects; no memory.
        unsafe { libc::syscall(libc::SYS_kcmp, tid, other, KCMP_VM, 0, 0) }
    };
    // With itself it must answer "equal": else kcmp is missing or barred.
    if kcmp(tid) != 0 {
        return false;
    }
    let Some(status) = read_proc_file(proc_dir, c"status") else {
        return false;
    };
    let Some(tgid) = status
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse::<i32>().ok())
    else {
        return false;
    };
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return false;
    };
    let numbers = |dir: std::fs::ReadDir| {
        dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
    };
    // Every thread of every other process (a leader that exited leaves
    // its threads running with no memory of its own to compare). One
    // whose memory cannot be compared (another user's, one gone) is not
    // one the sandbox made share it.
    numbers(entries).filter(|&pid| pid != tgid).all(|pid| {
        match std::fs::read_dir(format!("/proc/{pid}/task")) {
            Ok(tasks) => numbers(tasks).all(|task| kcmp(task) != 0),
            Err(_) => kcmp(pid) != 0,
        }
    })
}

/// The text of file `name` of a `/proc/TID` directory, in as few reads
/// as it takes (the kernel makes the whole text on the first one; a
/// small first read, as `read_to_string` starts with, costs a read per
/// doubling).
pub(crate) fn read_proc_file(proc_dir: &impl AsRawFd, name: &std::ffi::CStr) -> Option<String> {
    // SAFETY: a descriptor of the caller's and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            proc_dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return None;
    }
    // SAFETY: a new descriptor.
    let file = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(fd) });
    let mut text = Vec::with_capacity(4096);
    loop {
        if text.len() == text.capacity() {
            text.reserve(text.capacity());
        }
        let spare = text.spare_capacity_mut();
        // SAFETY: reads into the vector's spare capacity, whose length
        // is passed.
        let n = unsafe { libc::read(file.as_raw_fd(), spare.as_mut_ptr().cast(), spare.len()) };
        match n {
            0 => break,
            // SAFETY: the kernel wrote `n` bytes there.
            n if n > 0 => unsafe { text.set_len(text.len() + n as usize) },
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return None,
        }
    }
    String::from_utf8(text).ok()
}

/// The umask of the thread whose `/proc/TID` is `proc_dir`.
pub(crate) fn thread_umask(proc_dir: &OwnedFd) -> Option<u32> {
    let status = read_proc_file(proc_dir, c"status")?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .map(str::trim)
    };
    u32::from_str_radix(field("Umask:")?, 8).ok()
}
