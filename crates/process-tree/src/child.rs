//! Starting a child the way `posix_spawn` does — `clone(CLONE_VM |
//! CLONE_VFORK)`, the child borrowing the host's memory until it `exec`s —
//! with room for steps of our own between `clone` and `exec`, which
//! `posix_spawn` has none of.
//!
//! **Why not `fork`.** `std::process::Command` forks as soon as it has a
//! `pre_exec` step, and a fork copies the page tables of the whole host
//! (tens of megabytes, a dozen threads) only for the child to throw them
//! away at `exec`: in a process of dsh's size on the 2-core benchmark
//! machine, about 0.9 ms of a 2.3 ms `bash -c true` (`cargo xtask bench
//! spawn`). Sharing the memory costs nothing to set up.
//!
//! **What sharing demands.** Until `exec`, the child runs in the host's
//! address space while the host's other threads keep running, and the
//! spawning thread is suspended (`CLONE_VFORK`). So the child:
//!
//! * only reads what the parent prepared (argument and environment
//!   vectors, candidate paths, descriptors) and writes only its own stack
//!   and the slots (a failure, the program's pid) the parent reads after
//!   `clone` returns (the init and the program's process that a leader
//!   starts for a PID namespace share this memory too, and keep the same
//!   rules);
//! * allocates nothing, takes no lock and never panics (the steps' own
//!   contract: a panic would run the host's panic hook on the host's
//!   memory); a child that dies before `exec` all the same fails the
//!   spawn, as the slot says so until the `exec`;
//! * changes no user or group id: the kernel would mark the *host's*
//!   memory undumpable, and the C library's `set*id` wrappers act on every
//!   thread of the host (entering a user namespace of the host's own user,
//!   as the sandbox does, changes neither);
//! * runs with every signal blocked (the parent blocks them around
//!   `clone`, the C library's own two included) until it has given every
//!   signal its default action, so no handler of the host ever runs on the
//!   child's side.
//!
//! It has copies, not shares, of the descriptor table, the working
//! directory and the signal actions (no `CLONE_FILES`, `CLONE_FS` or
//! `CLONE_SIGHAND`), so `dup2`, `chdir` and the resets stay its own; and,
//! not being a thread of the host, it may `setns` into a user namespace,
//! which a thread may not.

use std::ffi::{CStr, CString, OsStr, OsString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicI32, Ordering};

use crate::spawn::PreExecStep;

/// The size of the child's stack (mapped lazily; a few pages are touched).
const STACK_BYTES: usize = 256 * 1024;

/// The size of a namespace's init's stack: it only reaps.
const HELPER_STACK_BYTES: usize = 64 * 1024;

/// The search path `execvp` uses when the environment has none.
const DEFAULT_PATH: &[u8] = b"/bin:/usr/bin";

/// The shell `execvp` runs an executable without a `#!` line with.
const SHELL: &CStr = c"/bin/sh";

/// What the child reports until it is about to `exec`: a child that dies
/// before (killed, or aborted by a step that panicked) fails the spawn.
const DIED_BEFORE_EXEC: i32 = -1;

/// Where a child's standard stream comes from.
#[derive(Debug, Default)]
pub enum ChildIo {
    /// The host's own stream.
    #[default]
    Inherit,
    /// `/dev/null`.
    Null,
    /// A new pipe; the host's end is returned in [`crate::Spawned`].
    Piped,
    /// This descriptor (a pipe end, a terminal, a file).
    Fd(OwnedFd),
}

impl<T: Into<OwnedFd>> From<T> for ChildIo {
    fn from(fd: T) -> Self {
        ChildIo::Fd(fd.into())
    }
}

/// Everything the child needs, prepared in the parent: C strings, their
/// pointer vectors, and the descriptors to put on 0, 1 and 2.
pub(crate) struct Plan {
    /// Kept alive for the pointers in `argv_ptrs`.
    _argv: Vec<CString>,
    argv_ptrs: Vec<*const libc::c_char>,
    _envp: Vec<CString>,
    envp_ptrs: Vec<*const libc::c_char>,
    /// The paths `exec` tries in turn (one, when the program names a
    /// path; else one per `PATH` entry).
    candidates: Vec<CString>,
    /// Per candidate, the argument vector that runs it as a script of
    /// `/bin/sh` when it is an executable without a `#!` line (`ENOEXEC`),
    /// as `execvp` does.
    shell_argv_ptrs: Vec<Vec<*const libc::c_char>>,
    cwd: Option<CString>,
    /// The descriptor each of stdin, stdout and stderr gets (`None`:
    /// inherited); each is 3 or above, so no `dup2` overwrites another's
    /// source.
    stdio: [Option<OwnedFd>; 3],
    /// The host's ends of piped streams.
    parent_ends: [Option<OwnedFd>; 3],
    /// Run in the leader, before the namespace (if any) is made.
    steps: Vec<PreExecStep>,
    /// Run in the program's process, last before `exec`.
    program_steps: Vec<PreExecStep>,
    /// The PID namespace to run the program in (see [`crate::pidns`]).
    namespace: Option<NamespacePlan>,
    parent_death: Option<(libc::c_int, libc::pid_t)>,
}

/// What the leader needs to put the program in a PID namespace.
pub(crate) struct NamespacePlan {
    /// The step that gives the right to make one (a sandbox's entry into
    /// its user namespace), run first.
    pub(crate) enter: Option<PreExecStep>,
}

/// What the child tells the parent, in the memory they share.
struct Slots {
    /// The errno of a failed step or `exec`; [`DIED_BEFORE_EXEC`] until
    /// the program is about to `exec`; 0 after.
    failure: AtomicI32,
    /// The pid of the process that runs the program (0: the leader).
    program: AtomicI32,
    /// The pid of the namespace's init (0: none).
    init: AtomicI32,
    /// Why `unshare` of the namespaces failed (0: it did not, or was not
    /// asked for).
    unshare_errno: AtomicI32,
    /// Why the namespace's `/proc` was not mounted (0: it was).
    proc_errno: AtomicI32,
    /// Non-zero until the leader is done with the plan and these slots:
    /// cleared by the kernel when the leader `exec`s or exits
    /// (`CLONE_CHILD_CLEARTID`), or by the leader itself when it stays
    /// on as the waiter; a futex word the host waits on.
    pending: AtomicI32,
}

/// How a child started (see [`Plan::start`]).
pub(crate) struct Started {
    /// The leader.
    pub(crate) pid: libc::pid_t,
    /// The process that runs the program (the leader without a namespace).
    pub(crate) program: libc::pid_t,
    /// The namespace's init, a child of the host (0: no namespace).
    pub(crate) init: libc::pid_t,
    /// Why a namespace that was asked for was not made (0: made, or not
    /// asked for).
    pub(crate) unshare_errno: i32,
    /// Why the namespace's `/proc` is the host's (0: its own).
    pub(crate) proc_errno: i32,
    /// Where the waiter leaves the program's wait status (with a
    /// namespace).
    pub(crate) status: Option<std::sync::Arc<AtomicI32>>,
}

fn c_string(bytes: &[u8]) -> io::Result<CString> {
    CString::new(bytes).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            "an argument, environment entry or path contains a NUL byte",
        )
    })
}

fn pointers(strings: &[CString]) -> Vec<*const libc::c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// A descriptor number 3 or above for `fd` (close-on-exec in the host).
fn above_stdio(fd: OwnedFd) -> io::Result<OwnedFd> {
    if fd.as_raw_fd() > 2 {
        return Ok(fd);
    }
    // SAFETY: fcntl on a descriptor we own; the result is a new one we own.
    let raw = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 3) };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor nobody else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(raw) })
}

fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let (reader, writer) = std::io::pipe()?;
    Ok((reader.into(), writer.into()))
}

/// What a spawn site asked for, before it is prepared.
pub(crate) struct Request<'a> {
    pub(crate) program: &'a OsStr,
    pub(crate) args: &'a [OsString],
    pub(crate) clear_env: bool,
    pub(crate) env: &'a [(OsString, Option<OsString>)],
    pub(crate) cwd: Option<&'a Path>,
    pub(crate) stdio: [ChildIo; 3],
    pub(crate) steps: Vec<PreExecStep>,
    pub(crate) program_steps: Vec<PreExecStep>,
    pub(crate) namespace: Option<NamespacePlan>,
}

impl Plan {
    /// Prepares `request`; `parent_death`: the signal the child gets when
    /// the spawning thread dies, checked against the host's pid.
    pub(crate) fn new(request: Request<'_>, parent_death: Option<libc::c_int>) -> io::Result<Self> {
        let argv: Vec<CString> = std::iter::once(request.program)
            .chain(request.args.iter().map(OsString::as_os_str))
            .map(|a| c_string(a.as_bytes()))
            .collect::<io::Result<_>>()?;
        let mut env: std::collections::BTreeMap<OsString, OsString> = if request.clear_env {
            Default::default()
        } else {
            std::env::vars_os().collect()
        };
        for (key, value) in request.env {
            match value {
                Some(value) => env.insert(key.clone(), value.clone()),
                None => env.remove(key),
            };
        }
        let envp: Vec<CString> = env
            .iter()
            .map(|(k, v)| c_string(&[k.as_bytes(), b"=", v.as_bytes()].concat()))
            .collect::<io::Result<_>>()?;
        let program = request.program.as_bytes();
        let candidates = if program.contains(&b'/') {
            vec![c_string(program)?]
        } else if program.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::ENOENT));
        } else {
            let path = env
                .get(OsStr::new("PATH"))
                .map_or(DEFAULT_PATH, |p| p.as_bytes());
            path.split(|b| *b == b':')
                .map(|dir| {
                    // An empty entry is the working directory, as for execvp.
                    let dir: &[u8] = if dir.is_empty() { b"." } else { dir };
                    c_string(&[dir, b"/", program].concat())
                })
                .collect::<io::Result<_>>()?
        };
        let shell_argv_ptrs = candidates
            .iter()
            .map(|path| {
                std::iter::once(SHELL.as_ptr())
                    .chain(std::iter::once(path.as_ptr()))
                    .chain(argv.iter().skip(1).map(|a| a.as_ptr()))
                    .chain(std::iter::once(std::ptr::null()))
                    .collect()
            })
            .collect();
        let cwd = request
            .cwd
            .map(|d| c_string(d.as_os_str().as_bytes()))
            .transpose()?;
        let mut stdio: [Option<OwnedFd>; 3] = Default::default();
        let mut parent_ends: [Option<OwnedFd>; 3] = Default::default();
        for (i, io) in request.stdio.into_iter().enumerate() {
            stdio[i] = match io {
                ChildIo::Inherit => None,
                ChildIo::Null => {
                    let file = std::fs::OpenOptions::new()
                        .read(i == 0)
                        .write(i != 0)
                        .open("/dev/null")?;
                    Some(above_stdio(file.into())?)
                }
                ChildIo::Piped => {
                    let (reader, writer) = pipe()?;
                    let (theirs, ours) = if i == 0 {
                        (reader, writer)
                    } else {
                        (writer, reader)
                    };
                    parent_ends[i] = Some(ours);
                    Some(above_stdio(theirs)?)
                }
                ChildIo::Fd(fd) => Some(above_stdio(fd)?),
            };
        }
        let parent = std::process::id() as libc::pid_t;
        Ok(Self {
            argv_ptrs: pointers(&argv),
            _argv: argv,
            envp_ptrs: pointers(&envp),
            _envp: envp,
            candidates,
            shell_argv_ptrs,
            cwd,
            stdio,
            parent_ends,
            steps: request.steps,
            program_steps: request.program_steps,
            namespace: request.namespace,
            parent_death: parent_death.map(|signal| (signal, parent)),
        })
    }

    /// The host's ends of the piped streams; the child's ends close here.
    pub(crate) fn into_parent_ends(mut self) -> [Option<OwnedFd>; 3] {
        std::mem::take(&mut self.parent_ends)
    }

    /// Starts the child and returns its pid once it has `exec`ed; the
    /// child's `errno` when a step or the `exec` failed (the child is
    /// reaped then).
    ///
    /// Without a namespace the leader is started as `posix_spawn` starts
    /// a child (`CLONE_VFORK`: this thread sleeps until it `exec`s or
    /// exits). With one, the leader stays on as the waiter without an
    /// `exec`, so this thread sleeps on the `pending` slot instead, which
    /// the kernel clears when the leader `exec`s or exits and the leader
    /// clears once it no longer reads the plan. The leader's stack and
    /// the init's then outlive this call ([`crate::helpers`]).
    pub(crate) fn start(&self) -> io::Result<Started> {
        let slots = Slots {
            failure: AtomicI32::new(DIED_BEFORE_EXEC),
            program: AtomicI32::new(0),
            init: AtomicI32::new(0),
            unshare_errno: AtomicI32::new(0),
            proc_errno: AtomicI32::new(0),
            pending: AtomicI32::new(1),
        };
        let namespaced = self.namespace.is_some() && crate::raw::AVAILABLE;
        let mut stack = Stack::new(STACK_BYTES)?;
        // The program's stack (it runs until it `exec`s, while the leader
        // waits) and the init's (it never `exec`s).
        let mut program_stack = None;
        let mut init_stack = None;
        if namespaced {
            program_stack = Some(Stack::new(STACK_BYTES)?);
            init_stack = Some(Stack::new(HELPER_STACK_BYTES)?);
        }
        let status = std::sync::Arc::new(AtomicI32::new(crate::helpers::NO_STATUS));
        let args = LeaderArgs {
            plan: self,
            slots: &slots,
            program_stack: program_stack.as_mut().map(Stack::top),
            init_stack: init_stack.as_mut().map(Stack::top),
            status: &status,
        };
        let flags = if namespaced && crate::raw::CLONE_TAKES_CLEAR_TID {
            libc::CLONE_VM | libc::CLONE_CHILD_CLEARTID | libc::SIGCHLD
        } else if namespaced {
            // The leader sets the word itself (see `leader_child`).
            libc::CLONE_VM | libc::SIGCHLD
        } else {
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD
        };
        let blocked = BlockedSignals::all()?;
        // SAFETY: the leader runs `leader_child` on its own stack and only
        // reads the plan and writes the slots (see the module docs) until
        // `pending` is clear: with CLONE_VFORK `clone` returns after that,
        // else this thread waits for it below before anything it points
        // at is dropped.
        let pid = unsafe {
            libc::clone(
                leader_child,
                stack.top(),
                flags,
                (&raw const args).cast_mut().cast(),
                std::ptr::null_mut::<libc::pid_t>(),
                std::ptr::null_mut::<libc::c_void>(),
                slots.pending.as_ptr(),
            )
        };
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if namespaced {
            wait_until_clear(&slots.pending);
        }
        drop(blocked);
        let errno = slots.failure.load(Ordering::Acquire);
        // Written by the kernel as the init starts (CLONE_PARENT_SETTID),
        // so known here even if the leader died right after.
        let init = slots.init.load(Ordering::Acquire);
        let program = slots.program.load(Ordering::Acquire);
        if errno != 0 || (init > 0 && program <= 0) {
            // The leader has exited (or is exiting) short of waiting for a
            // program: end the init it started, a child of ours (the
            // namespace, and a program started in it, die with it), and
            // reap both before their stacks go.
            if init > 0 {
                // SAFETY: our own child, not yet reaped: its pid is its own.
                unsafe { libc::kill(init, libc::SIGKILL) };
            }
            for child in [pid, init].into_iter().filter(|&p| p > 0) {
                reap_child(child);
            }
            return Err(if errno == DIED_BEFORE_EXEC || errno == 0 {
                io::Error::other("the new process died before it could run the program")
            } else {
                io::Error::from_raw_os_error(errno)
            });
        }
        if program > 0 {
            // The leader waits and the init reaps on these stacks, in
            // this memory, until each has exited.
            crate::helpers::keep(pid, stack, crate::helpers::Helper::Waiter(status.clone()));
            if let Some(init_stack) = init_stack {
                crate::helpers::keep(init, init_stack, crate::helpers::Helper::Init);
            }
        }
        Ok(Started {
            pid,
            program: if program > 0 { program } else { pid },
            init: if program > 0 { init } else { 0 },
            unshare_errno: slots.unshare_errno.load(Ordering::Acquire),
            proc_errno: if program > 0 {
                slots.proc_errno.load(Ordering::Acquire)
            } else {
                0
            },
            status: (program > 0).then_some(status),
        })
    }
}

/// Sleeps until the leader has cleared `pending` (see [`Plan::start`]).
/// Reads no `errno`: the leader, on this thread's thread pointer, may
/// write it meanwhile.
fn wait_until_clear(pending: &AtomicI32) {
    loop {
        let value = pending.load(Ordering::Acquire);
        if value == 0 {
            return;
        }
        // SAFETY: a valid, aligned futex word that outlives the call; a
        // shared (not private) futex, as the kernel's wake on `exec` or
        // exit is.
        unsafe {
            libc::syscall(
                libc::SYS_futex,
                pending.as_ptr(),
                libc::FUTEX_WAIT,
                value,
                std::ptr::null::<libc::timespec>(),
            )
        };
    }
}

/// What the leader needs (on the host's stack until `pending` clears).
struct LeaderArgs<'a> {
    plan: &'a Plan,
    slots: &'a Slots,
    program_stack: Option<*mut libc::c_void>,
    init_stack: Option<*mut libc::c_void>,
    /// Where the waiter leaves the program's status: an allocation the
    /// helpers' registry keeps until the waiter has exited.
    status: &'a std::sync::Arc<AtomicI32>,
}

/// The leader, from `clone` on (see [`child_main`]).
extern "C" fn leader_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the host's `LeaderArgs`, alive until
    // `pending` is clear, which the leader does last before it stops
    // reading it (or the kernel does when it `exec`s or exits).
    let args = unsafe { &*arg.cast::<LeaderArgs<'_>>() };
    if args.program_stack.is_some() && !crate::raw::CLONE_TAKES_CLEAR_TID {
        // Before anything could `exec` or exit: the host waits on it.
        crate::raw::clear_tid_at(&args.slots.pending);
    }
    child_main(args) as libc::c_int
}

/// Waits for our own child `pid` to exit and reaps it.
fn reap_child(pid: libc::pid_t) {
    loop {
        // SAFETY: waitpid on our own child.
        let rc = unsafe { libc::waitpid(pid, std::ptr::null_mut(), 0) };
        if rc >= 0 || io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            break;
        }
    }
}

/// The child, from `clone` to `exec`. Async-signal-safe: system calls on
/// the plan's prepared memory, and the steps (whose contract is the
/// same). Returns (and the child exits with) 127 only on failure, with
/// the errno stored in `failure`.
fn child_main(args: &LeaderArgs<'_>) -> isize {
    let errno = match prepare_and_exec(args) {
        Ok(never) => match never {},
        Err(errno) => errno,
    };
    args.slots.failure.store(
        if errno == 0 { libc::EINVAL } else { errno },
        Ordering::Release,
    );
    127
}

fn last_errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

fn check(rc: libc::c_int) -> Result<(), i32> {
    if rc < 0 { Err(last_errno()) } else { Ok(()) }
}

fn prepare_and_exec(args: &LeaderArgs<'_>) -> Result<std::convert::Infallible, i32> {
    let (plan, slots) = (args.plan, args.slots);
    for (target, source) in plan.stdio.iter().enumerate() {
        if let Some(fd) = source {
            // Every source is 3 or above: no dup2 clobbers another's source.
            // SAFETY: dup2 between descriptors of this (copied) table.
            check(unsafe { libc::dup2(fd.as_raw_fd(), target as RawFd) })?;
        }
    }
    if let Some(cwd) = &plan.cwd {
        // SAFETY: a valid C string; the working directory is the child's own.
        check(unsafe { libc::chdir(cwd.as_ptr()) })?;
    }
    // SAFETY: plain system calls.
    check(unsafe { libc::setsid() })?;
    reset_dispositions();
    if let Some((signal, parent)) = plan.parent_death {
        // SAFETY: prctl with integer arguments.
        check(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, signal as libc::c_ulong, 0, 0, 0) })?;
        // The parent may have died before the signal was armed.
        // SAFETY: plain system call.
        if unsafe { libc::getppid() } != parent {
            return Err(libc::ESRCH);
        }
    }
    for step in &plan.steps {
        step().map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    }
    if let (Some(ns), Some(_), Some(_)) = (&plan.namespace, args.program_stack, args.init_stack) {
        if let Some(enter) = &ns.enter {
            enter().map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
        }
        // SAFETY: plain system call.
        if unsafe { libc::unshare(libc::CLONE_NEWPID | libc::CLONE_NEWNS) } == 0 {
            return namespaced(args);
        }
        // Not allowed here (no user namespace, not root): run as before.
        slots.unshare_errno.store(last_errno(), Ordering::Release);
    }
    run_program(plan, &slots.failure)
}

/// The program's part of the child: its steps, the signal mask, `exec`.
fn run_program(plan: &Plan, failure: &AtomicI32) -> Result<std::convert::Infallible, i32> {
    for step in &plan.program_steps {
        step().map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    }
    // Every action is the default now (but the C library's own two,
    // whose handlers ignore what they did not send): unblocking runs no
    // handler of the host.
    set_mask(&0, None).map_err(|e| e.raw_os_error().unwrap_or(libc::EINVAL))?;
    // Nothing left that could die halfway: an `exec` that works reports
    // success by leaving this 0; one that fails overwrites it.
    failure.store(0, Ordering::Release);
    // As execvp: try each candidate, go on past a missing one, run one
    // without a `#!` line with /bin/sh, report EACCES if any was seen.
    let mut seen_eacces = false;
    let mut last = libc::ENOENT;
    for (path, shell_argv) in plan.candidates.iter().zip(&plan.shell_argv_ptrs) {
        // SAFETY: NUL-terminated vectors of C strings the plan keeps alive.
        unsafe {
            libc::execve(
                path.as_ptr(),
                plan.argv_ptrs.as_ptr(),
                plan.envp_ptrs.as_ptr(),
            )
        };
        last = last_errno();
        if last == libc::ENOEXEC {
            // SAFETY: as above.
            unsafe { libc::execve(SHELL.as_ptr(), shell_argv.as_ptr(), plan.envp_ptrs.as_ptr()) };
            return Err(last_errno());
        }
        match last {
            libc::EACCES => seen_eacces = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            _ => return Err(last),
        }
    }
    Err(if seen_eacces { libc::EACCES } else { last })
}

/// What the program's process needs.
struct ProgramArgs<'a> {
    plan: &'a Plan,
    slots: &'a Slots,
    /// Whether the new mount namespace stopped sending mounts back, so
    /// mounting `/proc` in it changes nothing outside.
    may_mount: bool,
}

/// The leader's part once it has unshared the namespaces: start the init
/// (on a stack of its own that outlives the spawn: it never `exec`s) and
/// the program (sharing this memory until it `exec`s), then stay on as
/// the waiter. Returns only on failure, having killed what it started.
fn namespaced(args: &LeaderArgs<'_>) -> Result<std::convert::Infallible, i32> {
    let (plan, slots) = (args.plan, args.slots);
    let (Some(program_stack), Some(init_stack)) = (args.program_stack, args.init_stack) else {
        return Err(libc::EINVAL);
    };
    // SAFETY: plain system calls with constant C strings.
    let may_mount = unsafe {
        libc::mount(
            std::ptr::null(),
            c"/".as_ptr(),
            std::ptr::null(),
            libc::MS_REC | libc::MS_SLAVE,
            std::ptr::null(),
        )
    } == 0;
    // SAFETY: plain system calls.
    let host = unsafe { libc::syscall(libc::SYS_pidfd_open, libc::getppid(), 0) } as RawFd;
    // Not "dsh mcp …" in `top`, as their command line (the host's memory)
    // says: the init is born with this name (so whatever looks at pid 1
    // inside sees it at once), then this process takes its own.
    let _ = crate::raw::prctl(libc::PR_SET_NAME, c"dsh-init".as_ptr() as usize);
    // SAFETY: the init runs `init_child` on its own stack, which the host
    // keeps until it has exited, and reads nothing but its argument (the
    // host's pidfd, a number: its copy of the descriptor table has it).
    // CLONE_PARENT makes it the host's child (a sibling of the leader):
    // it outlives the leader until the host has ended what the program
    // left, and dies with the host.
    let init = unsafe {
        libc::clone(
            init_child,
            init_stack,
            libc::CLONE_VM | libc::CLONE_PARENT | libc::CLONE_PARENT_SETTID | libc::SIGCHLD,
            host as isize as *mut libc::c_void,
            slots.init.as_ptr(),
        )
    };
    let errno = last_errno();
    let _ = crate::raw::prctl(libc::PR_SET_NAME, c"dsh-wait".as_ptr() as usize);
    if host >= 0 {
        // SAFETY: our own descriptor (the init has its own copy).
        unsafe { libc::close(host) };
    }
    if init < 0 {
        return Err(errno);
    }
    // The host reaps the init (its child) when the start fails.
    let end_init = || {
        // SAFETY: the init this process started, not yet reaped (the host
        // reaps it only after this process has exited).
        unsafe { libc::kill(init, libc::SIGKILL) };
    };
    let program_args = ProgramArgs {
        plan,
        slots,
        may_mount,
    };
    // SAFETY: the program's process runs `program_child` on the spare
    // stack, reads the plan, writes the slots and `exec`s or exits before
    // `clone` returns (CLONE_VFORK).
    let program = unsafe {
        libc::clone(
            program_child,
            program_stack,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
            (&raw const program_args).cast_mut().cast(),
        )
    };
    if program < 0 {
        let errno = last_errno();
        end_init();
        return Err(errno);
    }
    let failed = slots.failure.load(Ordering::Acquire);
    if failed != 0 {
        end_init();
        // SAFETY: our own child, dead or dying with the namespace.
        unsafe { libc::waitpid(program, std::ptr::null_mut(), 0) };
        return Err(failed);
    }
    slots.program.store(program, Ordering::Release);
    // The allocation the host keeps until this process has exited.
    let status: &AtomicI32 = args.status;
    // From here on, nothing of the host's but `status` is touched, and
    // only raw system calls are made (no `errno`: see `crate::raw`).
    crate::raw::forget_clear_tid();
    slots.pending.store(0, Ordering::Release);
    crate::raw::futex_wake(&slots.pending);
    wait_for(program, status)
}

/// The leader once the program runs: waits for it (and for anything else
/// it is given to reap), leaves its wait status in `status` for the host
/// and exits. Every signal stays blocked (as the leader left them), so a
/// Ctrl-C or a SIGTERM to the session reaches the program only; SIGKILL
/// ends the waiter (the program, orphaned, is the init's then, and the
/// host sees the waiter killed). It never dies of another signal, so no
/// core of the host's memory is ever written for it.
fn wait_for(program: libc::pid_t, status: &AtomicI32) -> ! {
    crate::raw::close_all();
    loop {
        let mut code = 0;
        let rc = crate::raw::wait_any(&mut code);
        if rc == program as isize {
            status.store(code, Ordering::Release);
        } else if rc == -(libc::EINTR as isize) {
            continue;
        } else if rc < 0 {
            break;
        }
    }
    crate::raw::exit(0)
}

/// The namespace's init: armed to die with the host (its parent), it
/// reaps every orphan the namespace gives it until it is killed (by the
/// host once it has ended what the program left, or by its parent-death
/// signal). It runs in the host's memory, on a stack of its own, beside
/// the host's threads: raw system calls only (see `crate::raw`). Every
/// signal stays blocked (as the leader left them): as pid 1 it ignores
/// what it does not catch anyway.
extern "C" fn init_child(arg: *mut libc::c_void) -> libc::c_int {
    let host = arg as isize as libc::c_int;
    let _ = crate::raw::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as usize);
    // The host may have died before the signal was armed.
    if host >= 0 && crate::raw::pidfd_exited(host) {
        crate::raw::exit(1);
    }
    crate::raw::close_all();
    loop {
        let mut code = 0;
        if crate::raw::wait_any(&mut code) == -(libc::ECHILD as isize) {
            // No child now: sleep until one (an orphan adopted later) exits.
            crate::raw::wait_sigchld();
        }
    }
}

/// The program's process, from `clone` to `exec`: a process group of its
/// own, in the terminal's foreground when its stdin is one, so that the
/// waiter and the init never count as what the terminal runs; the
/// namespace's own `/proc` (so `ps`, `kill` and pid files inside agree);
/// then the program's steps and `exec`. Async-signal-safe.
extern "C" fn program_child(arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` points at the leader's `ProgramArgs`, alive until this
    // process `exec`s or exits (CLONE_VFORK).
    let args = unsafe { &*arg.cast::<ProgramArgs<'_>>() };
    // SAFETY: plain system calls; every signal is still blocked, so
    // `tcsetpgrp` from a background group raises no SIGTTOU. Without a
    // controlling terminal on stdin it fails, and nothing changes.
    unsafe {
        libc::setpgid(0, 0);
        libc::tcsetpgrp(0, libc::getpid());
    }
    let proc_errno = if !args.may_mount {
        libc::EPERM
    } else {
        // SAFETY: constant C strings.
        let rc = unsafe {
            libc::mount(
                c"proc".as_ptr(),
                c"/proc".as_ptr(),
                c"proc".as_ptr(),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                std::ptr::null(),
            )
        };
        if rc == 0 { 0 } else { last_errno() }
    };
    args.slots.proc_errno.store(proc_errno, Ordering::Release);
    let errno = match run_program(args.plan, &args.slots.failure) {
        Ok(never) => match never {},
        Err(errno) => errno,
    };
    args.slots.failure.store(
        if errno == 0 { libc::EINVAL } else { errno },
        Ordering::Release,
    );
    // SAFETY: plain system call.
    unsafe { libc::_exit(127) }
}

/// Gives every signal its default action in the child. `exec` resets
/// caught signals but keeps ignored ones: a host started with SIGINT or
/// SIGQUIT ignored (by `nohup`, or as a background job of a shell without
/// job control) would otherwise pass that on, and an interrupt would
/// never reach what it runs. Only `sigaction`-style calls:
/// async-signal-safe.
fn reset_dispositions() {
    for signal in 1..=libc::SIGRTMAX() {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: plain syscall on the child's own copy of the actions;
        // signals the C library keeps for itself refuse with EINVAL,
        // which leaves them as they are.
        unsafe { libc::signal(signal, libc::SIG_DFL) };
    }
}

/// Every signal blocked on this thread until dropped (then the old mask).
///
/// The raw system call, as `posix_spawn` does it: the C library's
/// `pthread_sigmask` leaves its own two signals (32 and 33) unblocked, and
/// their handlers must not run on the child's side either.
struct BlockedSignals(u64);

/// The kernel's signal set: one bit per signal, 64 signals.
const KERNEL_SIGSET_BYTES: usize = std::mem::size_of::<u64>();

/// Sets this thread's signal mask (kernel-sized sets); the old one into
/// `old`. Async-signal-safe.
fn set_mask(new: &u64, old: Option<&mut u64>) -> io::Result<()> {
    let old = old.map_or(std::ptr::null_mut(), |o| o as *mut u64);
    // SAFETY: rt_sigprocmask on this thread with kernel-sized sets we own.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            new as *const u64,
            old,
            KERNEL_SIGSET_BYTES,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

impl BlockedSignals {
    fn all() -> io::Result<Self> {
        let mut old = 0;
        set_mask(&u64::MAX, Some(&mut old))?;
        Ok(Self(old))
    }
}

impl Drop for BlockedSignals {
    fn drop(&mut self) {
        let _ = set_mask(&self.0, None);
    }
}

/// An anonymous mapping for the child's stack, with a guard page below it
/// (an overflow faults instead of writing over the host's memory).
pub(crate) struct Stack {
    base: *mut libc::c_void,
    len: usize,
    guard: usize,
}

// SAFETY: the mapping is owned by the value alone (no other value
// refers to it); moving it to another thread moves that ownership.
unsafe impl Send for Stack {}

impl Stack {
    fn new(len: usize) -> io::Result<Self> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let total = len + page;
        // SAFETY: a fresh private anonymous mapping.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                total,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let stack = Self {
            base,
            len: total,
            guard: page,
        };
        // SAFETY: the lowest page of the mapping we just made.
        if unsafe { libc::mprotect(base, page, libc::PROT_NONE) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(stack)
    }

    /// The top of the writable part (stacks grow down), 16-byte aligned.
    fn top(&mut self) -> *mut libc::c_void {
        let usable = self.usable();
        let end = usable.as_mut_ptr_range().end as usize;
        (end & !15) as *mut libc::c_void
    }

    /// The writable part.
    fn usable(&mut self) -> &mut [u8] {
        // SAFETY: the mapping above the guard page, ours until drop.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.base.cast::<u8>().add(self.guard),
                self.len - self.guard,
            )
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, no longer used (the child has
        // exec'd or exited when `clone` returned).
        unsafe { libc::munmap(self.base, self.len) };
    }
}
