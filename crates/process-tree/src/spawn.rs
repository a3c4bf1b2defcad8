//! The one spawn path: every child a session leader, armed to die with the
//! host, held unreaped by a [`Leader`] until its owner is done with it.
//!
//! **Where children are started.** `PR_SET_PDEATHSIG` fires when the
//! *thread* that created the child exits, not the process. Children are
//! therefore started on one spawner thread that lives as long as the
//! process (it never returns), so the death signal means "the host died".
//! How a child is started (`clone(CLONE_VM | CLONE_VFORK)`, not `fork`) is
//! the `child` module's.
//!
//! **Why the leader is held.** A session id is its leader's pid. While the
//! leader is unreaped (running, or a zombie), the kernel cannot give that
//! pid to anyone else, so "every process of session N" means exactly our
//! session. A [`Leader`] observes the exit without reaping (`waitid` with
//! `WNOWAIT`, on a pidfd when the kernel has them) and reaps only in
//! [`Leader::reap`] or on drop, after which it never signals again.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
#[cfg(doc)]
use std::process::Command;
use std::process::{ChildStderr, ChildStdin, ChildStdout, ExitStatus};
use std::sync::atomic::AtomicI32;
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, RwLock};

use nix::sys::signal::Signal;

use crate::child::{ChildIo, NamespacePlan, Plan, Request, Started};
use crate::end::{EndReport, Step, Survivors, pidfd_open};
use crate::scan::{ProcessInfo, live_descendants, live_session_members, process_info};

/// A step run in the child between its start and `exec`.
///
/// The child shares the host's memory until `exec` (see
/// [`SessionCommand`]), while the host's other threads run on. A step
/// must therefore make only async-signal-safe calls (no allocation, no
/// locks), as the closure of
/// [`std::os::unix::process::CommandExt::pre_exec`] must, and also: write
/// nothing but its own stack (no statics, nothing it captured), never
/// panic (no indexing, `unwrap` or overflow that could), and change no
/// user or group id (`set*id`): raw system calls that read what the step
/// captured.
pub type PreExecStep = Arc<dyn Fn() -> io::Result<()> + Send + Sync>;

/// Steps the host runs in every child, after the spawn path's own.
static HOST_STEPS: RwLock<Vec<PreExecStep>> = RwLock::new(Vec::new());

/// Adds a step the host wants run in *every* child it spawns (a sandbox,
/// resource limits): the last steps before `exec`, after `setsid`, the
/// parent-death signal and the spawn site's own steps (which may need
/// what a sandbox takes away, like `TIOCSCTTY`).
///
/// # Safety
///
/// `step` runs between the child's start and `exec`, in the host's
/// memory: it must keep every rule of [`PreExecStep`].
pub unsafe fn add_pre_exec_step(step: PreExecStep) {
    HOST_STEPS
        .write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .push(step);
}

type SpawnJob = Box<dyn FnOnce() + Send>;

/// The spawner thread's queue; `None` when the thread could not start.
static SPAWNER: OnceLock<Option<Mutex<mpsc::Sender<SpawnJob>>>> = OnceLock::new();

/// Runs `job` on the spawner thread and returns its result; `None` when
/// there is no spawner thread.
fn on_spawner<T: Send + 'static>(job: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    let queue = SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("process-spawner".to_owned())
            .spawn(move || {
                // Never returns while the process lives: the sender is in a
                // static.
                while let Ok(job) = rx.recv() {
                    job();
                }
            })
            .ok()
            .map(|_| Mutex::new(tx))
    });
    let queue = queue.as_ref()?;
    let (done_tx, done_rx) = mpsc::sync_channel(1);
    let sent = queue
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .send(Box::new(move || {
            let _ = done_tx.send(job());
        }));
    sent.ok()?;
    done_rx.recv().ok()
}

/// A command to start as the leader of a new session: program, arguments,
/// environment, directory and standard streams, as for
/// [`std::process::Command`], plus the steps to run in the child before
/// `exec` (see [`SessionCommand::pre_exec`]).
///
/// The child is started with `clone(CLONE_VM | CLONE_VFORK)`, as
/// `posix_spawn` starts one, not forked: no copy of the host's page tables
/// (see the `child` module). In the child, in this order: the standard
/// streams, the working directory, `setsid`, every signal's default
/// action, the parent-death signal, the site's steps
/// ([`SessionCommand::pre_exec`]); with a PID namespace, its entry step
/// and the namespace (see [`crate::pidns`]: the rest runs in the
/// program's process inside it, in a process group of its own); the
/// program's steps ([`SessionCommand::program_pre_exec`]), the host's
/// steps, an empty signal mask, `exec`.
pub struct SessionCommand {
    program: OsString,
    args: Vec<OsString>,
    clear_env: bool,
    env: Vec<(OsString, Option<OsString>)>,
    cwd: Option<PathBuf>,
    stdio: [ChildIo; 3],
    steps: Vec<PreExecStep>,
    program_steps: Vec<PreExecStep>,
    /// `Some`: run the program in a PID namespace, after this step.
    pid_namespace: Option<Option<PreExecStep>>,
    parent_death: Option<Signal>,
}

impl std::fmt::Debug for SessionCommand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionCommand")
            .field("program", &self.program)
            .field("args", &self.args)
            .field("cwd", &self.cwd)
            .field("steps", &self.steps.len())
            .field("program_steps", &self.program_steps.len())
            .field("pid_namespace", &self.pid_namespace.is_some())
            .field("parent_death", &self.parent_death)
            .finish_non_exhaustive()
    }
}

/// A child started by [`SessionCommand::spawn`]: its leader and the pipes
/// it asked for.
#[derive(Debug)]
pub struct Spawned {
    /// The session's leader, held unreaped.
    pub leader: Leader,
    /// The pid of the process that runs the program: the leader's, unless
    /// the program runs in a PID namespace of its own (see
    /// [`SessionCommand::pid_namespace`]). A member of the leader's
    /// session either way.
    pub program: i32,
    /// The child's stdin, when piped.
    pub stdin: Option<ChildStdin>,
    /// The child's stdout, when piped.
    pub stdout: Option<ChildStdout>,
    /// The child's stderr, when piped.
    pub stderr: Option<ChildStderr>,
}

/// Starts `command` as the leader of a new session, killed by SIGKILL if
/// the host dies (see [`SessionCommand`]).
pub fn spawn_session(command: SessionCommand) -> io::Result<Spawned> {
    command.spawn()
}

impl SessionCommand {
    /// Runs `program` (a path, or a name looked up in the child's `PATH`)
    /// as a new session, with the host's environment, directory and
    /// streams, and SIGKILL as its parent-death signal.
    pub fn new(program: impl AsRef<OsStr>) -> Self {
        Self {
            program: program.as_ref().to_owned(),
            args: Vec::new(),
            clear_env: false,
            env: Vec::new(),
            cwd: None,
            stdio: Default::default(),
            steps: Vec::new(),
            program_steps: Vec::new(),
            pid_namespace: None,
            parent_death: Some(Signal::SIGKILL),
        }
    }

    /// Adds an argument.
    pub fn arg(mut self, arg: impl AsRef<OsStr>) -> Self {
        self.args.push(arg.as_ref().to_owned());
        self
    }

    /// Adds arguments.
    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.args
            .extend(args.into_iter().map(|a| a.as_ref().to_owned()));
        self
    }

    /// Sets an environment variable (later settings win).
    pub fn env(mut self, key: impl AsRef<OsStr>, value: impl AsRef<OsStr>) -> Self {
        self.env
            .push((key.as_ref().to_owned(), Some(value.as_ref().to_owned())));
        self
    }

    /// Sets environment variables.
    pub fn envs<I, K, V>(mut self, vars: I) -> Self
    where
        I: IntoIterator<Item = (K, V)>,
        K: AsRef<OsStr>,
        V: AsRef<OsStr>,
    {
        for (k, v) in vars {
            self = self.env(k, v);
        }
        self
    }

    /// Removes an environment variable.
    pub fn env_remove(mut self, key: impl AsRef<OsStr>) -> Self {
        self.env.push((key.as_ref().to_owned(), None));
        self
    }

    /// Starts from an empty environment instead of the host's (settings
    /// made before are dropped, as with [`Command::env_clear`]).
    pub fn env_clear(mut self) -> Self {
        self.clear_env = true;
        self.env.clear();
        self
    }

    /// The child's working directory.
    pub fn current_dir(mut self, dir: impl AsRef<Path>) -> Self {
        self.cwd = Some(dir.as_ref().to_owned());
        self
    }

    /// Where the child's stdin comes from.
    pub fn stdin(mut self, io: impl Into<ChildIo>) -> Self {
        self.stdio[0] = io.into();
        self
    }

    /// Where the child's stdout goes.
    pub fn stdout(mut self, io: impl Into<ChildIo>) -> Self {
        self.stdio[1] = io.into();
        self
    }

    /// Where the child's stderr goes.
    pub fn stderr(mut self, io: impl Into<ChildIo>) -> Self {
        self.stdio[2] = io.into();
        self
    }

    /// Adds a step run in the child after `setsid` and the parent-death
    /// signal, before the host's steps (e.g. `TIOCSCTTY` for a terminal, or
    /// a per-command sandbox step, which should be added last).
    ///
    /// # Safety
    ///
    /// As [`add_pre_exec_step`]: `step` must keep every rule of
    /// [`PreExecStep`] (it runs in the host's memory).
    pub unsafe fn pre_exec(mut self, step: PreExecStep) -> Self {
        self.steps.push(step);
        self
    }

    /// Adds a step run in the process that runs the program, last before
    /// `exec` and before the host's steps: a sandbox's restrictions. The
    /// same process as [`SessionCommand::pre_exec`]'s steps unless the
    /// program runs in a PID namespace, where these run in the program's
    /// process inside it and those in the leader outside.
    ///
    /// # Safety
    ///
    /// As [`SessionCommand::pre_exec`].
    pub unsafe fn program_pre_exec(mut self, step: PreExecStep) -> Self {
        self.program_steps.push(step);
        self
    }

    /// Runs the program in a PID namespace of its own whose init dies with
    /// the host (or when [`Leader::end_session`] is done with the rest),
    /// so that the kernel ends every process of the session
    /// when the host dies, whatever else dies with it (see the `pidns`
    /// module). `enter` runs in the leader after its own steps, before the
    /// namespace is made: a step that gives the right to make one (a
    /// sandbox's entry into its user namespace). Until the host enables
    /// namespaces ([`crate::pidns::enable`]), or where the kernel refuses
    /// the namespace, the session runs without one.
    ///
    /// # Safety
    ///
    /// As [`SessionCommand::pre_exec`], for `enter`.
    pub unsafe fn pid_namespace(mut self, enter: Option<PreExecStep>) -> Self {
        self.pid_namespace = Some(enter);
        self
    }

    /// The signal the child gets when the host dies (`None`: none).
    pub fn parent_death(mut self, signal: Option<Signal>) -> Self {
        self.parent_death = signal;
        self
    }

    /// Starts the child on the spawner thread and returns the held leader.
    pub fn spawn(self) -> io::Result<Spawned> {
        let mut command = self;
        command.program_steps.extend(
            HOST_STEPS
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .iter()
                .cloned(),
        );
        let parent_death = command.parent_death;
        let on_thread = move |parent_death: Option<Signal>| spawn_here(command, parent_death);
        // The job is handed back if the spawner thread is missing, so the
        // spawn then runs here, without a death signal: a death signal
        // armed on an arbitrary thread would fire when that thread exits.
        let job = Arc::new(Mutex::new(Some(on_thread)));
        let remote = job.clone();
        let result = on_spawner(move || {
            let spawn = remote
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .take();
            spawn.map(|spawn| spawn(parent_death))
        })
        .flatten();
        match result {
            Some(spawned) => spawned,
            None => {
                let spawn = job
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .take();
                match spawn {
                    Some(spawn) => spawn(None),
                    None => Err(io::Error::other("the spawner thread failed mid-spawn")),
                }
            }
        }
    }
}

/// Starts `command` from this thread (see [`SessionCommand`]).
fn spawn_here(command: SessionCommand, parent_death: Option<Signal>) -> io::Result<Spawned> {
    let SessionCommand {
        program,
        args,
        clear_env,
        env,
        cwd,
        stdio,
        steps,
        program_steps,
        pid_namespace,
        parent_death: _,
    } = command;
    let mut steps = steps;
    let namespace = match (pid_namespace, crate::pidns::enabled()) {
        (Some(enter), true) => Some(NamespacePlan { enter }),
        (Some(enter), false) => {
            // Not enabled: the entry step still runs, where it would have.
            steps.extend(enter);
            None
        }
        (None, _) => None,
    };
    let plan = Plan::new(
        Request {
            program: &program,
            args: &args,
            clear_env,
            env: &env,
            cwd: cwd.as_deref(),
            stdio,
            steps,
            program_steps,
            namespace,
        },
        parent_death.map(|s| s as libc::c_int),
    )?;
    // Held from clone to registration: the orphan reaper never mistakes a
    // child that exits at once for an orphan.
    let mut held = crate::reap::held();
    let started = plan.start()?;
    let pid = started.pid;
    note_namespace(&started);
    // The child is ours and unreaped: its pid, stat and pidfd are its own.
    let start_time = process_info(pid).map_or(0, |p| p.start_time);
    held.insert(pid, start_time);
    // The init, our child in the leader's session, read while the lock
    // keeps the orphan reaper from reaping it: its pid cannot have been
    // reused, so its start time names it.
    let me = std::process::id() as i32;
    let init = (started.init > 0)
        .then(|| process_info(started.init))
        .flatten()
        .filter(|p| p.ppid == me && p.sid == pid)
        .and_then(|p| Some((pidfd_open(p.pid).ok()?, p)));
    drop(held);
    let [stdin, stdout, stderr] = plan.into_parent_ends();
    let pidfd = pidfd_open(pid).ok();
    crate::guardian::session_started(pid, start_time);
    Ok(Spawned {
        program: started.program,
        leader: Leader {
            pid,
            start_time,
            pidfd,
            init,
            program_status: started.status,
            program: started.program,
            state: Mutex::new(LeaderState::default()),
        },
        stdin: stdin.map(ChildStdin::from),
        stdout: stdout.map(ChildStdout::from),
        stderr: stderr.map(ChildStderr::from),
    })
}

/// Says once, in the log, why sessions run without their own PID
/// namespace or `/proc`.
fn note_namespace(started: &Started) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static UNSHARE: AtomicBool = AtomicBool::new(false);
    static PROC: AtomicBool = AtomicBool::new(false);
    if started.unshare_errno != 0 && !UNSHARE.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            error = %io::Error::from_raw_os_error(started.unshare_errno),
            "the kernel refused a PID namespace: background processes of terminals and jobs \
             are ended by the guardian when the host dies, not by the kernel"
        );
    }
    if started.proc_errno != 0 && !PROC.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            error = %io::Error::from_raw_os_error(started.proc_errno),
            "a PID namespace's own /proc could not be mounted: its processes see the host's"
        );
    }
}

#[derive(Debug, Default)]
struct LeaderState {
    exit: Option<ExitStatus>,
    reaped: bool,
    /// Verified empty after the leader exited: nothing left to signal.
    session_over: bool,
}

/// The leader of a session this process spawned, held unreaped so its pid
/// (the session id) cannot be reused while this value lives.
///
/// Dropping it without [`Leader::reap`] kills whatever is left of the
/// session (SIGKILL, not waited for) and hands the leader to the orphan
/// reaper.
#[derive(Debug)]
pub struct Leader {
    pid: i32,
    start_time: u64,
    pidfd: Option<OwnedFd>,
    /// The init of the program's PID namespace, if it has one (and a
    /// pidfd of it): a member of the session that outlives the leader
    /// until [`Leader::end_session`] has ended the rest (see
    /// [`crate::pidns`]).
    init: Option<(OwnedFd, ProcessInfo)>,
    /// With a PID namespace, where the leader (the waiter) leaves the
    /// program's wait status before it exits: how the session ended.
    program_status: Option<Arc<AtomicI32>>,
    /// The pid of the process that runs the program (the leader's own
    /// without a namespace).
    program: i32,
    state: Mutex<LeaderState>,
}

fn decode(info: &libc::siginfo_t) -> ExitStatus {
    // SAFETY: filled by a successful waitid for a child that exited.
    let status = unsafe { info.si_status() };
    match info.si_code {
        libc::CLD_EXITED => ExitStatus::from_raw((status & 0xff) << 8),
        libc::CLD_DUMPED => ExitStatus::from_raw((status & 0x7f) | 0x80),
        _ => ExitStatus::from_raw(status & 0x7f),
    }
}

impl Leader {
    fn state(&self) -> std::sync::MutexGuard<'_, LeaderState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The leader's pid, which is also the session id.
    pub fn pid(&self) -> i32 {
        self.pid
    }

    /// The leader's start time (see [`ProcessInfo::start_time`]).
    pub fn start_time(&self) -> u64 {
        self.start_time
    }

    /// A pidfd of the leader (readable once it has exited), when the
    /// kernel has pidfds.
    pub fn pidfd(&self) -> Option<BorrowedFd<'_>> {
        self.pidfd.as_ref().map(AsFd::as_fd)
    }

    /// `waitid` on the leader with `flags` (plus `WEXITED`); the status
    /// when it has exited.
    fn wait_with(&self, flags: libc::c_int) -> Option<ExitStatus> {
        // SAFETY: zeroed siginfo is a valid "nothing yet" value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let (idtype, id) = match &self.pidfd {
            Some(fd) => (libc::P_PIDFD, fd.as_raw_fd() as libc::id_t),
            None => (libc::P_PID, self.pid as libc::id_t),
        };
        loop {
            // SAFETY: plain syscall writing into `info`, which we own.
            let rc = unsafe { libc::waitid(idtype, id, &mut info, libc::WEXITED | flags) };
            if rc == 0 {
                // SAFETY: as above.
                let pid = unsafe { info.si_pid() };
                return (pid != 0).then(|| self.program_exit(decode(&info)));
            }
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return None;
            }
        }
    }

    /// How the session's program ended, given how the leader did: with a
    /// PID namespace, the status the waiter left (when it left one: a
    /// waiter that was killed leaves none, and is seen killed).
    fn program_exit(&self, leader: ExitStatus) -> ExitStatus {
        let left = self
            .program_status
            .as_ref()
            .map(|s| s.load(std::sync::atomic::Ordering::Acquire))
            .filter(|&s| s != crate::helpers::NO_STATUS);
        match left {
            Some(status) if leader.code() == Some(0) => ExitStatus::from_raw(status),
            _ => leader,
        }
    }

    /// How the leader exited, without reaping it; `None` while it runs.
    pub fn try_exit(&self) -> Option<ExitStatus> {
        let mut state = self.state();
        if state.exit.is_none() && !state.reaped {
            state.exit = self.wait_with(libc::WNOHANG | libc::WNOWAIT);
        }
        state.exit
    }

    /// Blocks until the leader exits and returns how, without reaping it.
    pub fn wait_exit(&self) -> io::Result<ExitStatus> {
        if let Some(status) = self.try_exit() {
            return Ok(status);
        }
        // Not under the state lock: others may look meanwhile.
        let status = self
            .wait_with(libc::WNOWAIT)
            .ok_or_else(io::Error::last_os_error)?;
        Ok(*self.state().exit.get_or_insert(status))
    }

    /// The live processes of the session (none once reaped): with a PID
    /// namespace, every process in it but its init, the ones that left
    /// the session included.
    pub fn members(&self) -> Vec<ProcessInfo> {
        if self.state().reaped {
            return Vec::new();
        }
        self.live_members()
    }

    fn live_members(&self) -> Vec<ProcessInfo> {
        let Some((_, init)) = &self.init else {
            return live_session_members(self.pid);
        };
        // Everything the program started is in the namespace and, once
        // the program is gone, below its init (an orphan there goes to
        // the init, the namespace's reaper, never to a reaper outside):
        // the init's descendants are all of them, found without reading
        // every process in `/proc`.
        let mut members = live_descendants(init);
        let program_lives =
            process_info(self.program).is_some_and(|p| p.sid == self.pid && !p.is_zombie());
        if program_lives {
            // The program is not below the init (it is the waiter's child,
            // or it outlived its waiter and went to this process, with
            // what it started): the session's members too, but the
            // waiter, dsh's own helper, which exits once the program has.
            for p in live_session_members(self.pid) {
                if p.pid != init.pid && p.pid != self.pid && members.iter().all(|m| m.pid != p.pid)
                {
                    members.push(p);
                }
            }
        }
        members
    }

    /// Kills the namespace's init (the kernel kills what is left in it:
    /// nothing, once the session was found empty) through its pidfd, so a
    /// reused pid is never a concern. It is not waited for: its death
    /// cannot be refused, and the namespaces' teardown that comes with it
    /// is the kernel's work, off the way to the reply; it is reaped by the
    /// next sweep of the helpers (or the orphan reaper, if first).
    fn end_init(&self) {
        let Some((pidfd, _)) = &self.init else {
            return;
        };
        // SAFETY: a pidfd we own; no siginfo.
        unsafe {
            libc::syscall(
                libc::SYS_pidfd_send_signal,
                pidfd.as_raw_fd(),
                libc::SIGKILL,
                std::ptr::null::<libc::siginfo_t>(),
                0,
            )
        };
        crate::helpers::sweep();
    }

    /// Waits, a bounded while, until the namespace's init has exited
    /// (its pidfd turns readable): a SIGKILL cannot be refused, but the
    /// kernel's teardown of the namespace takes a moment.
    fn await_init_exit(&self) {
        let Some((pidfd, _)) = &self.init else {
            return;
        };
        let mut poll = libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd on this stack, a pidfd we own.
        unsafe { libc::poll(&raw mut poll, 1, 2000) };
        crate::helpers::sweep();
    }

    /// Reaped, or its session known to be over: nothing of it is ever
    /// signalled again.
    fn done_with_session(&self) -> bool {
        let state = self.state();
        state.reaped || state.session_over
    }

    /// Whether the leader has exited and no process of its session is
    /// left alive (with a PID namespace: none but its init, which is
    /// killed then): one pass over `/proc` (see [`crate::session_members`]).
    /// Then no process can join the session again (only a member's fork
    /// could), and it is never signalled by this value again, as after
    /// [`Leader::end_session`]. False while the leader runs or a member
    /// lives.
    pub fn session_is_over(&self) -> bool {
        if self.done_with_session() {
            return true;
        }
        if self.try_exit().is_none() || !self.live_members().is_empty() {
            return false;
        }
        // Only the init is left, with nothing to reap: it ends here.
        self.end_init();
        self.state().session_over = true;
        true
    }

    /// Ends every process of the session, verified (see
    /// [`crate::end_session`]); with a PID namespace, every process in it
    /// too (one that left the session included), and then its init. Safe
    /// against pid reuse: the leader is held.
    /// After [`Leader::reap`] it signals nothing and reports nothing.
    pub fn end_session(&self, steps: &[Step]) -> Result<EndReport, Survivors> {
        if self.done_with_session() {
            return Ok(EndReport::default());
        }
        let report = crate::end::end_members(self.pid, steps, &|| self.live_members());
        self.end_init();
        // Ended on purpose (a close, a timeout): the caller is told the
        // session is over only once the init is no more than a zombie.
        self.await_init_exit();
        let report = report?;
        if self.try_exit().is_some() {
            // The leader is dead and nothing of the session is alive: no
            // process can join it again.
            self.state().session_over = true;
        }
        Ok(report)
    }

    /// Reaps the leader once it has exited and returns how it exited;
    /// `None` (and nothing done) while it still runs. From then on the
    /// session is never signalled by this value again.
    pub fn reap(&self) -> Option<ExitStatus> {
        let status = self.try_exit()?;
        let mut state = self.state();
        if !state.reaped {
            crate::guardian::session_ended(self.pid, self.start_time);
            let mut held = crate::reap::held();
            let _ = self.wait_with(libc::WNOHANG);
            held.remove(&self.pid);
            state.reaped = true;
            drop(held);
            // A waiter's stack (and an init's, killed before) goes now.
            crate::helpers::sweep();
        }
        Some(status)
    }
}

impl Drop for Leader {
    fn drop(&mut self) {
        let (reaped, over) = {
            let state = self.state();
            (state.reaped, state.session_over)
        };
        if reaped {
            return;
        }
        if !over {
            crate::end::signal_session(self.pid, Signal::SIGKILL);
        }
        if self.reap().is_none() {
            // Still dying: the orphan reaper takes it from here.
            crate::guardian::session_ended(self.pid, self.start_time);
            crate::reap::held().remove(&self.pid);
        }
    }
}

/// The pids and start times of the leaders currently held.
pub(crate) fn held_leaders() -> BTreeMap<i32, u64> {
    crate::reap::held().clone()
}
