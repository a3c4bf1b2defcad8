//! Resolving a policy against a spawn's context into a [`Prepared`]
//! sandbox — everything that allocates or opens files happens here, in the
//! parent — and the async-signal-safe step a child runs before `exec`.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use landlock::{
    ABI, Access, AccessFs, AccessNet, BitFlags, CompatLevel, Compatible, PathBeneath, Ruleset,
    RulesetAttr, RulesetCreatedAttr, Scope,
};
use seccompiler::BpfProgram;

use crate::connect_guard::{self, Guard, GuardPolicy};
use crate::context::SpawnContext;
use crate::namespaces::{Mask, MaskKind, Namespaces};
use crate::policy::{Mode, PolicyError, SandboxPolicy, expand_entry};
use crate::probe::Availability;
use crate::refused::{self, Refusals};
use crate::status::{SandboxError, SandboxStatus};
use crate::walk::{Grant, Stamp, Walk, is_within, now_nanos};

/// Device files every confined process may read and write: the null
/// devices, the terminal, and pseudo-terminals.
const DEVICES: &[&str] = &[
    "/dev/null",
    "/dev/zero",
    "/dev/full",
    "/dev/tty",
    "/dev/ptmx",
    PTS,
];

/// Where pseudo-terminals live; a private instance in the sandbox's mount
/// namespace.
const PTS: &str = "/dev/pts";

/// How many prepared contexts a [`Sandbox`] keeps.
const CACHE_ENTRIES: usize = 16;

/// A policy ready to confine spawns: probes the kernel once and keeps
/// prepared contexts, rebuilding one when a directory it depends on has
/// changed.
#[derive(Debug)]
pub struct Sandbox {
    policy: SandboxPolicy,
    availability: Availability,
    cache: Mutex<Cache>,
}

#[derive(Debug, Default)]
struct Cache {
    entries: Vec<CacheEntry>,
    clock: u64,
    /// Why user namespaces failed, once they did (not retried).
    userns_failure: Option<String>,
}

#[derive(Debug)]
struct CacheEntry {
    context: SpawnContext,
    prepared: Prepared,
    last_used: u64,
    /// Spawns served: each in a PID namespace adds its `/proc` to the
    /// ruleset (see [`Prepared::restrict_step`]), so after
    /// [`MAX_USES`] the preparation is made anew.
    uses: u32,
}

/// How many spawns one preparation serves before it is made anew: each
/// spawn in a PID namespace leaves a rule (for a `/proc` that is gone once
/// the namespace is) in the shared ruleset, and every later process's
/// Landlock domain copies the ruleset's rules.
const MAX_USES: u32 = 256;

impl Sandbox {
    /// A sandbox for `policy` on a kernel that offers `availability`.
    pub fn new(policy: SandboxPolicy, availability: Availability) -> Result<Self, PolicyError> {
        policy.validate()?;
        Ok(Self {
            policy,
            availability,
            cache: Mutex::new(Cache::default()),
        })
    }

    /// The policy.
    pub fn policy(&self) -> &SandboxPolicy {
        &self.policy
    }

    /// What the kernel offers.
    pub fn availability(&self) -> &Availability {
        &self.availability
    }

    /// The prepared sandbox for one spawn in `context`; a cached one when
    /// nothing it depends on changed. Blocking: the first call for a
    /// context lists directories and may start a helper process (a few
    /// milliseconds); later ones check a few stamps.
    ///
    /// Fails only with `required = true` and a kernel that cannot enforce
    /// the policy; otherwise a weaker sandbox is returned and its status
    /// says so.
    pub fn prepare(&self, context: &SpawnContext) -> Result<Prepared, SandboxError> {
        let mut cache = self.cache.lock().unwrap_or_else(PoisonError::into_inner);
        cache.clock += 1;
        let now = cache.clock;
        let mut previous = None;
        if let Some(i) = cache.entries.iter().position(|e| &e.context == context) {
            let entry = &mut cache.entries[i];
            if entry.uses < MAX_USES && entry.prepared.is_fresh() {
                entry.last_used = now;
                entry.uses += 1;
                return Ok(entry.prepared.clone());
            }
            previous = Some(cache.entries.swap_remove(i).prepared);
        }
        let prepared = build(
            &self.policy,
            &self.availability,
            context,
            previous.as_ref(),
            &mut cache.userns_failure,
        )?;
        if cache.entries.len() >= CACHE_ENTRIES
            && let Some(oldest) = cache
                .entries
                .iter()
                .enumerate()
                .min_by_key(|(_, e)| e.last_used)
                .map(|(i, _)| i)
        {
            cache.entries.swap_remove(oldest);
        }
        cache.entries.push(CacheEntry {
            context: context.clone(),
            prepared: prepared.clone(),
            last_used: now,
            uses: 1,
        });
        Ok(prepared)
    }
}

/// What a stamp watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Watch {
    /// That the path still names the same file (or still does not exist).
    Identity,
    /// That, and that a directory's list of entries did not change.
    Contents,
}

/// Which paths a confined process may read and write, as enforced.
#[derive(Debug, Default, Clone)]
pub(crate) struct AccessMap {
    /// Where writing is granted.
    pub(crate) write_roots: Vec<PathBuf>,
    /// Beneath the write roots, where it is not.
    pub(crate) write_holes: Vec<PathBuf>,
    /// Mounted read-only.
    pub(crate) read_only: Vec<PathBuf>,
    /// Where reading is refused.
    pub(crate) read_holes: Vec<PathBuf>,
    /// Device files that are always writable.
    pub(crate) devices: Vec<PathBuf>,
    /// Where an entry named like a repository (`.git`, `HEAD`) may not be
    /// made ([`crate::git_guard`]).
    pub(crate) no_repositories: Vec<PathBuf>,
}

impl AccessMap {
    /// Whether the sandbox lets `path` (absolute, normalized) be written.
    pub(crate) fn can_write(&self, path: &Path) -> bool {
        let under = |list: &[PathBuf]| list.iter().any(|r| is_within(path, r));
        if under(&self.no_repositories)
            && path
                .file_name()
                .is_some_and(|n| crate::git_guard::names_a_repository(n.as_encoded_bytes()))
        {
            return false;
        }
        under(&self.devices)
            || (under(&self.write_roots)
                && !under(&self.write_holes)
                && !under(&self.read_only)
                && !under(&self.read_holes))
    }

    /// Whether the sandbox lets `path` (absolute, normalized) be read.
    pub(crate) fn can_read(&self, path: &Path) -> bool {
        !self.read_holes.iter().any(|h| is_within(path, h))
    }
}

/// Where a path the sandbox does not let be read is closed from: the
/// rule a person can look up (or change) when a read is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadRule {
    /// A `deny_read` entry of the policy, as written there (`~/.ssh`).
    DenyRead(String),
    /// One of the host's own directories ([`SpawnContext::private`]).
    Private,
}

impl std::fmt::Display for ReadRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReadRule::DenyRead(entry) => write!(f, "`deny_read` entry `{entry}`"),
            ReadRule::Private => f.write_str("dsh's private directory"),
        }
    }
}

/// A sandbox resolved for one context: its status, the step a child runs
/// before `exec`, and what it allows (to name what it refused). Cheap to
/// clone; one can confine any number of spawns, concurrently.
#[derive(Debug, Clone)]
pub struct Prepared(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    status: SandboxStatus,
    /// The Landlock ruleset, enforced by `landlock_restrict_self`.
    landlock: Option<OwnedFd>,
    /// The compiled seccomp filter.
    seccomp: Option<BpfProgram>,
    /// The guard of `connect` (a filter whose listener a supervisor
    /// thread serves).
    guard: Option<Guard>,
    /// `seccomp` and the guard's filter joined into one
    /// (`connect_guard::chain`), loaded with the listener in place of the
    /// two; `None` without a guard, or if they could not be joined.
    listening: Option<Vec<libc::sock_filter>>,
    /// The filter loaded instead of `seccomp` when the guard cannot listen
    /// (an outer dsh sandbox's guard decides then): with TCP refused by
    /// Landlock, it refuses every TCP socket, since the outer guard would
    /// make the connection outside this sandbox's Landlock domain.
    seccomp_nested: Option<BpfProgram>,
    /// The namespaces that hold `.git` read-only.
    namespaces: Option<Arc<Namespaces>>,
    /// The Landlock rights a process gets on a `/proc` of its own (a PID
    /// namespace's), as on the host's; 0: none.
    proc_access: u64,
    access: AccessMap,
    /// Each read hole (`access.read_holes`) and the rule it comes from.
    hole_rules: Vec<(PathBuf, ReadRule)>,
    home: PathBuf,
    stamps: Vec<(PathBuf, Stamp, Watch)>,
    /// When the stamps were taken (nanoseconds since the epoch).
    taken_at: i128,
    /// Whether this is the rules-only view of a preparation that confines
    /// (see [`Prepared::rules`]).
    view_of_confining: bool,
    /// The rules-only view, made once.
    rules: OnceLock<Prepared>,
}

impl Prepared {
    /// No confinement (`mode = "off"`, or unavailable and not required).
    fn unconfined(status: SandboxStatus, home: &Path) -> Self {
        Self(Arc::new(Inner {
            status,
            landlock: None,
            seccomp: None,
            guard: None,
            listening: None,
            seccomp_nested: None,
            namespaces: None,
            proc_access: 0,
            access: AccessMap {
                write_roots: vec![PathBuf::from("/")],
                ..AccessMap::default()
            },
            hole_rules: Vec::new(),
            home: home.to_path_buf(),
            stamps: Vec::new(),
            taken_at: 0,
            view_of_confining: false,
            rules: OnceLock::new(),
        }))
    }

    /// This preparation's rules without what enforces them (its Landlock
    /// ruleset, filters, guard of `connect` and namespaces): what naming a
    /// refusal needs ([`Prepared::read_refusal`], [`Prepared::refusals`],
    /// [`Prepared::confines`], [`Prepared::status`]), to keep for as long
    /// as a job's or a terminal's output may be read, without holding the
    /// guard's thread and the descriptors of a preparation that has since
    /// been made anew. Made once per preparation. Not for spawning: its
    /// steps confine nothing.
    pub fn rules(&self) -> Prepared {
        if self.0.view_of_confining || !self.confines() {
            return self.clone();
        }
        self.0
            .rules
            .get_or_init(|| {
                let inner = &self.0;
                Prepared(Arc::new(Inner {
                    status: inner.status.clone(),
                    landlock: None,
                    seccomp: None,
                    guard: None,
                    listening: None,
                    seccomp_nested: None,
                    namespaces: None,
                    proc_access: inner.proc_access,
                    access: inner.access.clone(),
                    hole_rules: inner.hole_rules.clone(),
                    home: inner.home.clone(),
                    stamps: Vec::new(),
                    taken_at: inner.taken_at,
                    view_of_confining: true,
                    rules: OnceLock::new(),
                }))
            })
            .clone()
    }

    /// What results report about this sandbox.
    pub fn status(&self) -> &SandboxStatus {
        &self.0.status
    }

    /// The root (`O_PATH`) of the sandbox's own `devpts` instance, when it
    /// has one: a terminal confined by this sandbox must get its pty from
    /// the `ptmx` there (`openat(dir, "ptmx")`), so that its name resolves
    /// inside the sandbox, where the host's ptys are not visible.
    pub fn pty_dir(&self) -> Option<Arc<OwnedFd>> {
        self.0.namespaces.as_ref().map(|ns| Arc::clone(ns.pts()))
    }

    /// Whether the child step confines anything (false when unconfined).
    pub fn confines(&self) -> bool {
        self.0.landlock.is_some()
            || self.0.seccomp.is_some()
            || self.0.namespaces.is_some()
            || self.0.view_of_confining
    }

    /// The step to add to a `Command`'s `pre_exec` chain, after every
    /// other step that needs privileges or the host's namespaces (such as
    /// `setsid` and the parent-death signal) and before `exec`:
    ///
    /// ```no_run
    /// # use std::os::unix::process::CommandExt;
    /// # fn f(prepared: &sandbox::Prepared) {
    /// let mut command = std::process::Command::new("bash");
    /// let step = prepared.pre_exec_step();
    /// // SAFETY: the step only makes async-signal-safe system calls.
    /// unsafe { command.pre_exec(step) };
    /// # }
    /// ```
    ///
    /// In the child it enters the namespaces that hold `.git` read-only
    /// (if any), sets `no_new_privs`, restricts itself with the Landlock
    /// ruleset and loads the seccomp filter — in that order, each an
    /// irrevocable property inherited by everything the child starts. It
    /// allocates nothing and opens no file. An error makes the spawn fail
    /// with that error (nothing runs unconfined by accident).
    pub fn pre_exec_step(&self) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
        let inner = Arc::clone(&self.0);
        move || apply(&inner)
    }

    /// The first half of [`Prepared::pre_exec_step`], for a child that
    /// makes namespaces of its own in between: entering the sandbox's
    /// namespaces (its user namespace gives the right to make more).
    /// `None` when the sandbox has none.
    pub fn enter_step(&self) -> Option<impl Fn() -> io::Result<()> + Send + Sync + 'static> {
        let inner = Arc::clone(&self.0);
        self.0.namespaces.is_some().then_some(move || enter(&inner))
    }

    /// The second half: `no_new_privs`, Landlock and seccomp, in a child
    /// that ran [`Prepared::enter_step`] (or needs no entry). With
    /// `own_proc`, the child has mounted a `/proc` of its own (a PID
    /// namespace's) over the host's, which Landlock judges by its own
    /// rules, not by those of the `/proc` it hides: the step first grants
    /// it what the host's had (one rule added to the shared ruleset; see
    /// `MAX_USES`). It opens that one directory and allocates nothing.
    pub fn restrict_step(
        &self,
        own_proc: bool,
    ) -> impl Fn() -> io::Result<()> + Send + Sync + 'static {
        let inner = Arc::clone(&self.0);
        move || restrict(&inner, own_proc)
    }

    /// Whether the sandbox runs its processes in a user namespace of its
    /// own (where they may make further namespaces).
    pub fn has_user_namespace(&self) -> bool {
        self.0.namespaces.is_some()
    }

    /// Runs the same step as [`Prepared::pre_exec_step`] in the calling
    /// process. Only for a new child that is about to `exec` (forked, or
    /// started sharing its parent's memory: the step writes nothing but
    /// its stack and changes no user or group id).
    pub fn apply_in_child(&self) -> io::Result<()> {
        apply(&self.0)
    }

    /// Whether the sandbox lets `path` be written (`path` absolute).
    pub fn can_write(&self, path: &Path) -> bool {
        self.0
            .access
            .can_write(&refused::normalize(path, Path::new("/")))
    }

    /// Whether the sandbox lets `path` be read (`path` absolute).
    pub fn can_read(&self, path: &Path) -> bool {
        self.0
            .access
            .can_read(&refused::normalize(path, Path::new("/")))
    }

    /// The rule that keeps `path` (absolute) from being read; `None` when
    /// the sandbox lets it be read (as [`Prepared::can_read`] judges it).
    /// When rules nest (a private directory inside a denied one), the
    /// innermost.
    pub fn read_refusal(&self, path: &Path) -> Option<&ReadRule> {
        let path = refused::normalize(path, Path::new("/"));
        self.0
            .hole_rules
            .iter()
            .filter(|(hole, _)| is_within(&path, hole))
            .max_by_key(|(hole, _)| hole.components().count())
            .map(|(_, rule)| rule)
    }

    /// The paths (and the network) this sandbox refused, as far as a
    /// command's `output` shows them: error lines with "Permission
    /// denied", "Read-only file system" or "Operation not permitted" that
    /// name a path the sandbox does not allow. Relative paths are resolved
    /// against `cwd`.
    pub fn refusals(&self, output: &str, cwd: &Path) -> Refusals {
        if !self.confines() {
            return Refusals::default();
        }
        refused::find(
            output,
            cwd,
            &self.0.home,
            &self.0.access,
            !self.0.status.network,
        )
    }

    /// Whether `other` is this very preparation (a cache hit returns the
    /// same one).
    pub fn is_same(&self, other: &Prepared) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// Whether nothing this preparation depends on has changed.
    fn is_fresh(&self) -> bool {
        let inner = &self.0;
        let stamps_hold = inner.stamps.iter().all(|(path, stamp, watch)| {
            let now = Stamp::of(path);
            match watch {
                Watch::Identity => now.identity() == stamp.identity(),
                Watch::Contents => now == *stamp && !stamp.is_racy(inner.taken_at),
            }
        });
        let namespaces_hold = inner.namespaces.as_ref().is_none_or(|ns| ns.unchanged());
        stamps_hold && namespaces_hold
    }
}

/// The child step. Async-signal-safe: system calls on memory prepared by
/// the parent.
fn apply(inner: &Inner) -> io::Result<()> {
    enter(inner)?;
    restrict(inner, false)
}

/// The child step's first half: the namespaces.
fn enter(inner: &Inner) -> io::Result<()> {
    match &inner.namespaces {
        Some(ns) => ns.enter(),
        None => Ok(()),
    }
}

/// Landlock's `struct landlock_path_beneath_attr` (packed).
#[repr(C, packed)]
struct PathBeneathAttr {
    allowed_access: u64,
    parent_fd: i32,
}

/// The kernel's `LANDLOCK_RULE_PATH_BENEATH`.
const RULE_PATH_BENEATH: libc::c_int = 1;

/// Adds `/proc` (as this process sees it) to `ruleset` with `access`.
/// Async-signal-safe.
fn grant_own_proc(ruleset: &OwnedFd, access: u64) -> io::Result<()> {
    // SAFETY: a constant C string; the descriptor is closed below.
    let proc_dir = unsafe {
        libc::open(
            c"/proc".as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    };
    if proc_dir < 0 {
        return Err(io::Error::last_os_error());
    }
    let attr = PathBeneathAttr {
        allowed_access: access,
        parent_fd: proc_dir,
    };
    // SAFETY: the ruleset we own and an attribute on this stack.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_landlock_add_rule,
            ruleset.as_raw_fd(),
            RULE_PATH_BENEATH,
            &raw const attr,
            0u32,
        )
    };
    let result = if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    };
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(proc_dir) };
    result
}

/// The child step's second half: the restrictions.
fn restrict(inner: &Inner, own_proc: bool) -> io::Result<()> {
    if inner.landlock.is_none() && inner.seccomp.is_none() {
        return Ok(());
    }
    if own_proc
        && inner.proc_access != 0
        && let Some(ruleset) = &inner.landlock
    {
        grant_own_proc(ruleset, inner.proc_access)?;
    }
    // SAFETY: prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if let Some(ruleset) = &inner.landlock {
        // The raw system call on the ruleset the parent built: the crate's
        // `restrict_self` consumes the ruleset, so it cannot be reused by
        // every spawn without duplicating it in the child.
        // SAFETY: a ruleset descriptor we own; flags 0.
        let rc =
            unsafe { libc::syscall(libc::SYS_landlock_restrict_self, ruleset.as_raw_fd(), 0u32) };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    if let Some(filter) = &inner.seccomp {
        let mut filter = filter;
        let listening = match &inner.guard {
            Some(guard) => {
                let program = inner.listening.as_deref().unwrap_or(guard.program());
                connect_guard::install_in_child(program, guard.child_end())?
            }
            None => false,
        };
        if listening && inner.listening.is_some() {
            // The main filter is part of the one just loaded.
            return Ok(());
        }
        if !listening && let Some(nested) = &inner.seccomp_nested {
            filter = nested;
        }
        load_seccomp(filter)?;
    }
    Ok(())
}

/// Loads a compiled filter into the calling thread.
///
/// The raw system call rather than `seccompiler::apply_filter`, for one
/// flag: `SECCOMP_FILTER_FLAG_SPEC_ALLOW`. Without it the kernel's default
/// (`spec_store_bypass_disable=seccomp`) also forces the speculative store
/// bypass mitigation on every filtered process, which made `bash -c true`
/// more than twice as slow here; that mitigation guards code inside one
/// process (a JIT's sandbox), not the boundary this filter draws. Kernels
/// older than 4.17 refuse the flag, and get the filter without it.
fn load_seccomp(filter: &BpfProgram) -> io::Result<()> {
    let len = u16::try_from(filter.len()).map_err(|_| io::Error::from_raw_os_error(libc::E2BIG))?;
    let program = libc::sock_fprog {
        len,
        // seccompiler's `sock_filter` is `repr(C)` with the kernel's layout.
        filter: filter.as_ptr().cast::<libc::sock_filter>().cast_mut(),
    };
    for flags in [libc::SECCOMP_FILTER_FLAG_SPEC_ALLOW, 0] {
        // SAFETY: a valid program on the stack; the kernel copies it.
        let rc = unsafe {
            libc::syscall(
                libc::SYS_seccomp,
                libc::SECCOMP_SET_MODE_FILTER,
                flags,
                &raw const program,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let error = io::Error::last_os_error();
        if error.raw_os_error() != Some(libc::EINVAL) {
            return Err(error);
        }
    }
    Err(io::Error::from_raw_os_error(libc::EINVAL))
}

/// Canonical form of `path` if it exists.
fn existing(path: &Path) -> Option<PathBuf> {
    path.canonicalize().ok()
}

/// The nearest existing ancestor of a path that does not exist (to notice
/// when it is created, or to find where it would be), canonical, and the
/// rest of the path below it.
fn nearest_existing_ancestor(path: &Path) -> Option<(PathBuf, &Path)> {
    path.ancestors()
        .skip(1)
        .find_map(|a| Some((existing(a)?, path.strip_prefix(a).ok()?)))
}

/// Where the kernel finds `path` (absolute): every symlink followed, a
/// `..` taken after the symlink before it. A path that does not exist is
/// where it would be: its nearest existing ancestor resolved, the rest
/// joined on.
pub fn resolve_path(path: &Path) -> PathBuf {
    existing(path)
        .or_else(|| nearest_existing_ancestor(path).map(|(ancestor, rest)| ancestor.join(rest)))
        .unwrap_or_else(|| path.to_path_buf())
}

/// A weakness of the sandbox against its policy.
struct Gap {
    what: String,
    /// Whether `required = true` refuses to spawn because of it.
    refuses_required: bool,
}

/// Builds the preparation of `context`; `previous` may lend its namespaces.
/// In stages, each a function of its own: where writing is granted (1),
/// what stays closed (2), the REPL state directory (3), the read-only
/// `.git` (4), the namespaces (5), the devices (6), the seccomp filter
/// (7), the grants (8), the guard of `connect`, what the kernel leaves
/// open (9), the Landlock ruleset (10) and the status.
// Long on purpose: the stages are functions of their own; what is left is
// handing each stage what the stages before it found, in order.
fn build(
    policy: &SandboxPolicy,
    availability: &Availability,
    context: &SpawnContext,
    previous: Option<&Prepared>,
    userns_failure: &mut Option<String>,
) -> Result<Prepared, SandboxError> {
    let home = existing(&context.home).unwrap_or_else(|| context.home.clone());
    if policy.mode == Mode::Off {
        return Ok(Prepared::unconfined(SandboxStatus::off(), &home));
    }
    let simulated = availability.simulated_note();
    if availability.landlock_abi == 0 {
        let reason = format!(
            "the kernel has no Landlock (Linux 5.13 or later with Landlock enabled is needed){simulated}"
        );
        if policy.required {
            return Err(SandboxError::Unavailable { reason });
        }
        return Ok(Prepared::unconfined(
            SandboxStatus::unavailable(policy.mode, reason),
            &home,
        ));
    }
    let taken_at = now_nanos();
    let mut stamps: Vec<(PathBuf, Stamp, Watch)> = Vec::new();
    let mut write_roots = writable_roots(policy, context, &mut stamps);
    let (read_holes, hole_rules) = closed_paths(policy, context, &mut stamps);
    if let Some(dir) = state_dir_root(context, &write_roots, &read_holes, &mut stamps) {
        write_roots.push(dir);
    }
    let git = protected_git(policy, context, &write_roots, &read_holes, &mut stamps);
    let block_network = !policy.network;
    let mut gaps: Vec<Gap> = Vec::new();
    let masks = socket_masks(policy, context, &home, &mut stamps);
    let namespaces = namespace_stage(
        NamespaceWants {
            git: &git,
            masks: &masks,
            block_network,
        },
        availability,
        previous,
        userns_failure,
        &mut gaps,
    );
    let mut write_holes = read_holes.clone();
    if namespaces.is_none() {
        write_holes.extend(git.iter().cloned());
    }
    let net_isolated = namespaces.as_ref().is_some_and(|ns| ns.isolates_network());

    let (read_walk, write_walk) = grant_walks(
        &read_holes,
        &write_roots,
        &write_holes,
        namespaces.as_deref(),
        &mut stamps,
    );
    let devices: Vec<PathBuf> = DEVICES
        .iter()
        .map(PathBuf::from)
        .filter(|d| d.exists())
        .collect();
    let device_grants = device_grants(&devices, namespaces.as_deref(), &mut gaps);
    let root_dir = {
        let mut walk = Walk::default();
        walk.grant_except(Path::new("/"), &[]);
        walk.grants
    };

    // The network, without a namespace of its own: Landlock for TCP,
    // seccomp for the rest. The seccomp filter also refuses the
    // terminal-injection ioctls, in every confined mode.
    let fallback = block_network && !net_isolated;
    let tcp_by_landlock = fallback && availability.landlock_abi >= 4;
    let seccomp = seccomp_stage(availability, fallback, tcp_by_landlock, &mut gaps);
    let (guard, seccomp_nested) = guard_stage(
        policy,
        context,
        availability,
        GuardFacts {
            writable: &write_roots,
            seccomp: seccomp.is_some(),
            mount_namespace: namespaces.is_some(),
            tcp_by_landlock,
        },
        &mut gaps,
    );
    let network = kernel_gaps(
        availability,
        KernelFacts {
            block_network,
            fallback,
            tcp_by_landlock,
            seccomp: seccomp.is_some(),
            guard: guard.is_some(),
        },
        &mut gaps,
    );

    let ruleset = landlock_ruleset(
        availability,
        tcp_by_landlock,
        &[
            (&root_dir, Rights::ListOnly),
            (&read_walk.grants, Rights::Read),
            (&write_walk.grants, Rights::Write),
            (&device_grants, Rights::Device),
        ],
    );
    let ruleset = match ruleset {
        Ok(Some(fd)) => fd,
        Ok(None) | Err(_) => {
            let reason = match ruleset {
                Err(e) => format!("the Landlock ruleset could not be built: {e}"),
                Ok(_) => format!("the kernel refused a Landlock ruleset{simulated}"),
            };
            if policy.required {
                return Err(SandboxError::Unavailable { reason });
            }
            return Ok(Prepared::unconfined(
                SandboxStatus::unavailable(policy.mode, reason),
                &home,
            ));
        }
    };

    // The worker that makes the creating calls the guard allows is
    // restricted by this very ruleset; without a copy it refuses them all.
    if let Some(guard) = &guard
        && let Ok(copy) = ruleset.try_clone()
    {
        guard.set_ruleset(copy);
    }
    let status = enforced_status(policy, network, &gaps)?;
    let stamps = without_implied(unique_stamps(stamps));
    let read_only = namespaces
        .as_ref()
        .map(|ns: &Arc<Namespaces>| ns.read_only.iter().map(|(p, _)| p.clone()).collect())
        .unwrap_or_default();
    let no_repositories = if guard.is_some() {
        git_roots(policy, context)
    } else {
        Vec::new()
    };
    let access = AccessMap {
        write_roots,
        write_holes,
        read_only,
        read_holes,
        devices,
        no_repositories,
    };
    // As a path of the host's /proc would have them (Landlock checks a
    // new /proc mounted over it against its own rules, not the host's).
    let proc_access = if access.can_read(Path::new("/proc/self/status")) {
        (AccessFs::ReadFile | AccessFs::Execute | AccessFs::ReadDir).bits()
    } else {
        0
    };
    let listening = match (&seccomp, &guard) {
        (Some(main), Some(guard)) => {
            connect_guard::chain(&crate::seccomp::as_sock_filters(main), guard.program())
        }
        _ => None,
    };
    Ok(Prepared(Arc::new(Inner {
        status,
        landlock: Some(ruleset),
        seccomp,
        guard,
        listening,
        seccomp_nested,
        namespaces,
        proc_access,
        access,
        hole_rules,
        home,
        stamps,
        taken_at,
        view_of_confining: false,
        rules: OnceLock::new(),
    })))
}

/// `path` resolved (a symlink followed), stamped so that a change makes
/// the preparation stale: the path itself, and when it does not exist, the
/// nearest ancestor that does (whose contents tell when it appears).
fn watch(path: &Path, stamps: &mut Vec<(PathBuf, Stamp, Watch)>) -> Option<PathBuf> {
    stamps.push((path.to_path_buf(), Stamp::of(path), Watch::Identity));
    let found = existing(path);
    if found.is_none()
        && let Some((ancestor, _)) = nearest_existing_ancestor(path)
    {
        stamps.push((ancestor.clone(), Stamp::of(&ancestor), Watch::Contents));
    }
    found
}

/// Stage 1, where writing is granted: the temp dir and the caches always;
/// in `workspace-write` the root and the `writable` entries too. Each
/// resolved, once; what does not exist is left out (and stamped).
fn writable_roots(
    policy: &SandboxPolicy,
    context: &SpawnContext,
    stamps: &mut Vec<(PathBuf, Stamp, Watch)>,
) -> Vec<PathBuf> {
    let mut candidates: Vec<PathBuf> = SpawnContext::always_writable(&context.temp_dir).into();
    if policy.mode == Mode::WorkspaceWrite {
        candidates.extend(context.root.iter().cloned());
        candidates.extend(
            policy
                .writable
                .iter()
                .filter_map(|w| expand_entry(w, &context.home)),
        );
    }
    let mut roots: Vec<PathBuf> = Vec::new();
    for candidate in &candidates {
        if let Some(root) = watch(candidate, stamps)
            && !roots.contains(&root)
        {
            roots.push(root);
        }
    }
    roots
}

/// Stage 2, where nothing is granted at all: the `deny_read` entries and
/// the host's private directories, each resolved (a symlink is followed:
/// its target is what must stay closed), with the rule it comes from.
fn closed_paths(
    policy: &SandboxPolicy,
    context: &SpawnContext,
    stamps: &mut Vec<(PathBuf, Stamp, Watch)>,
) -> (Vec<PathBuf>, Vec<(PathBuf, ReadRule)>) {
    let mut holes: Vec<PathBuf> = Vec::new();
    let mut rules: Vec<(PathBuf, ReadRule)> = Vec::new();
    let candidates = policy
        .deny_read
        .iter()
        .filter_map(|d| {
            Some((
                expand_entry(d, &context.home)?,
                ReadRule::DenyRead(d.clone()),
            ))
        })
        .chain(
            context
                .private
                .iter()
                .map(|p| (p.clone(), ReadRule::Private)),
        );
    for (candidate, rule) in candidates {
        if let Some(hole) = watch(&candidate, stamps)
            && !holes.contains(&hole)
        {
            rules.push((hole.clone(), rule));
            holes.push(hole);
        }
    }
    (holes, rules)
}

/// Stage 3, the REPL state directory, writable in every confined mode. Not
/// when it is already under a writable root: a confined process could then
/// have swapped it for a symlink since it was created, and the grant would
/// follow the symlink. Not when it lies in a closed directory or holds one
/// (an odd `XDG_STATE_HOME`): a grant must never open those.
fn state_dir_root(
    context: &SpawnContext,
    write_roots: &[PathBuf],
    read_holes: &[PathBuf],
    stamps: &mut Vec<(PathBuf, Stamp, Watch)>,
) -> Option<PathBuf> {
    let dir = context.state_dir.as_ref()?;
    if write_roots.iter().any(|r| is_within(dir, r)) {
        return None;
    }
    let real = watch(dir, stamps)?;
    let opens_a_hole = read_holes
        .iter()
        .any(|h| is_within(&real, h) || is_within(h, &real));
    (!write_roots.iter().any(|r| is_within(&real, r)) && !opens_a_hole).then_some(real)
}

/// Stage 4, the paths of the `.git` at the top of the writable root that
/// stay read-only (in `workspace-write`, unless `git_writable`): those
/// inside a writable root and not already closed.
fn protected_git(
    policy: &SandboxPolicy,
    context: &SpawnContext,
    write_roots: &[PathBuf],
    read_holes: &[PathBuf],
    stamps: &mut Vec<(PathBuf, Stamp, Watch)>,
) -> Vec<PathBuf> {
    let Some(root) = &context.root else {
        return Vec::new();
    };
    if policy.mode != Mode::WorkspaceWrite || policy.git_writable {
        return Vec::new();
    }
    let dotgit = root.join(".git");
    stamps.push((dotgit.clone(), Stamp::of(&dotgit), Watch::Identity));
    git_paths(&dotgit)
        .into_iter()
        .filter(|p| write_roots.iter().any(|r| is_within(p, r)))
        .filter(|p| !read_holes.iter().any(|h| is_within(p, h)))
        .collect()
}

/// The workspace roots where a confined process may make no repository
/// (see [`crate::git_guard`]): the root in `workspace-write` unless
/// `git_writable`, as written and resolved.
fn git_roots(policy: &SandboxPolicy, context: &SpawnContext) -> Vec<PathBuf> {
    let Some(root) = &context.root else {
        return Vec::new();
    };
    if policy.mode != Mode::WorkspaceWrite || policy.git_writable {
        return Vec::new();
    }
    let mut roots = vec![root.clone()];
    if let Some(real) = existing(root).filter(|r| r != root) {
        roots.push(real);
    }
    roots
}

/// `stamps` less those another one implies: a path that does not exist,
/// whose nearest existing ancestor's entries are watched
/// ([`Watch::Contents`]). Its first missing name would be an entry of that
/// ancestor, so while the ancestor's stamp holds it is still missing (the
/// many credential stores and caches under a home that has none of them:
/// each would cost a `statx` on every spawn). The ancestor's stamp was
/// taken before this looks, so a name made there since changes its time.
fn without_implied(stamps: Vec<(PathBuf, Stamp, Watch)>) -> Vec<(PathBuf, Stamp, Watch)> {
    let watched: Vec<PathBuf> = stamps
        .iter()
        .filter(|(_, stamp, watch)| *watch == Watch::Contents && stamp.identity().is_some())
        .map(|(path, _, _)| path.clone())
        .collect();
    // Looked at now, after every stamp was taken: a path made since its
    // own stamp (missing) is kept, and so fails the next check.
    let implied = |path: &Path, stamp: &Stamp| {
        stamp.identity().is_none()
            && Stamp::of(path).identity().is_none()
            && path
                .ancestors()
                .skip(1)
                .find(|a| Stamp::of(a).identity().is_some())
                .is_some_and(|nearest| watched.iter().any(|w| w == nearest))
    };
    stamps
        .into_iter()
        .filter(|(path, stamp, watch)| *watch == Watch::Contents || !implied(path, stamp))
        .collect()
}

/// Checked before every spawn that reuses a preparation: each (path,
/// stamp, watch) once. Many missing credential stores share the nearest
/// existing ancestor (home); a path stamped twice with different values
/// changed during the build and keeps both, so it reads stale.
fn unique_stamps(stamps: Vec<(PathBuf, Stamp, Watch)>) -> Vec<(PathBuf, Stamp, Watch)> {
    let mut unique: Vec<(PathBuf, Stamp, Watch)> = Vec::with_capacity(stamps.len());
    for stamp in stamps {
        if !unique.contains(&stamp) {
            unique.push(stamp);
        }
    }
    unique
}

/// The last stage, the status of an enforced sandbox: what it enforces
/// and, in its reason, every gap; an error instead when `required` and a
/// gap refuses it.
fn enforced_status(
    policy: &SandboxPolicy,
    network: bool,
    gaps: &[Gap],
) -> Result<SandboxStatus, SandboxError> {
    if policy.required
        && let Some(gap) = gaps.iter().find(|g| g.refuses_required)
    {
        return Err(SandboxError::Unavailable {
            reason: gap.what.clone(),
        });
    }
    let reason = (!gaps.is_empty()).then(|| {
        gaps.iter()
            .map(|g| g.what.as_str())
            .collect::<Vec<_>>()
            .join("; ")
    });
    Ok(SandboxStatus {
        mode: policy.mode,
        enforced: true,
        network,
        reason,
    })
}

/// Stage 8, the grants: read everywhere but the closed paths, write in the
/// writable roots but their holes, and in the sandbox's own socket
/// directories (a tmpfs each: a tmux or screen started inside keeps its
/// socket there). The directories the walks only pass through are
/// stamped by their contents.
fn grant_walks(
    read_holes: &[PathBuf],
    write_roots: &[PathBuf],
    write_holes: &[PathBuf],
    namespaces: Option<&Namespaces>,
    stamps: &mut Vec<(PathBuf, Stamp, Watch)>,
) -> (Walk, Walk) {
    let mut read_walk = Walk::default();
    read_walk.grant_except(Path::new("/"), read_holes);
    let mut write_walk = Walk::default();
    for root in write_roots {
        write_walk.grant_except(root, write_holes);
    }
    if let Some(ns) = namespaces {
        // The directory mounted over the mask, not the host's it hides.
        for (path, root) in ns.private_roots() {
            if !write_roots.iter().any(|r| is_within(path, r))
                && let Ok(fd) = root.try_clone()
            {
                write_walk.grants.push(Grant {
                    path: path.clone(),
                    fd,
                    is_dir: true,
                });
            }
        }
    }
    for walk in [&read_walk, &write_walk] {
        stamps.extend(
            walk.partial
                .iter()
                .map(|(p, s)| (p.clone(), *s, Watch::Contents)),
        );
    }
    (read_walk, write_walk)
}

/// Stage 6, the devices a confined process may open for writing (the null
/// devices, `/dev/tty`, `/dev/ptmx`): with a mount namespace, `/dev/pts`
/// is the private instance's root, not the host's.
fn device_grants(
    devices: &[PathBuf],
    namespaces: Option<&Namespaces>,
    gaps: &mut Vec<Gap>,
) -> Vec<Grant> {
    let mut walk = Walk::default();
    for d in devices {
        if namespaces.is_none() || d != Path::new(PTS) {
            walk.grant_except(d, &[]);
        }
    }
    let mut grants = walk.grants;
    if let Some(ns) = namespaces {
        match ns.pts().try_clone() {
            Ok(fd) => grants.push(Grant {
                path: PathBuf::from(PTS),
                fd,
                is_dir: true,
            }),
            Err(e) => gaps.push(Gap {
                what: format!("the private /dev/pts could not be granted: {e}"),
                refuses_required: false,
            }),
        }
    }
    grants
}

/// Stage 7, the seccomp filter: the terminal-injection `ioctl`s in every
/// confined mode, and with the network off and no namespace of its own
/// (`fallback`) the sockets Landlock's TCP rules do not cover.
fn seccomp_stage(
    availability: &Availability,
    fallback: bool,
    tcp_by_landlock: bool,
    gaps: &mut Vec<Gap>,
) -> Option<BpfProgram> {
    if !availability.seccomp {
        gaps.push(Gap {
            what: format!(
                "TIOCSTI (typing into a terminal) is not refused: the kernel has no seccomp{}",
                availability.simulated_note()
            ),
            refuses_required: false,
        });
        return None;
    }
    let network = if fallback {
        crate::seccomp::Network::Block { tcp_by_landlock }
    } else {
        crate::seccomp::Network::Untouched
    };
    match crate::seccomp::filter(network) {
        Ok(f) => Some(f),
        Err(e) => {
            gaps.push(Gap {
                what: format!("seccomp filter: {e}"),
                refuses_required: true,
            });
            None
        }
    }
}

/// What [`kernel_gaps`] needs to know of the stages before it.
struct KernelFacts {
    block_network: bool,
    fallback: bool,
    tcp_by_landlock: bool,
    seccomp: bool,
    guard: bool,
}

/// Stage 9, what this kernel leaves open, in `gaps`; returns whether the
/// network is on in the end (the policy's, unless it cannot be blocked).
fn kernel_gaps(availability: &Availability, facts: KernelFacts, gaps: &mut Vec<Gap>) -> bool {
    let simulated = availability.simulated_note();
    let mut network = !facts.block_network;
    if facts.fallback {
        match (facts.tcp_by_landlock, facts.seccomp) {
            (_, true) => {}
            (true, false) => {
                network = true;
                gaps.push(Gap {
                    what: format!(
                        "only TCP is blocked: UDP and raw sockets need a network namespace or \
                         seccomp{simulated}"
                    ),
                    refuses_required: true,
                });
            }
            (false, false) => {
                network = true;
                gaps.push(Gap {
                    what: format!(
                        "the network stays on: blocking it needs a network namespace, Landlock \
                         ABI 4 or seccomp{simulated}"
                    ),
                    refuses_required: true,
                });
            }
        }
    }
    if availability.landlock_abi < 6 {
        gaps.push(Gap {
            what: format!(
                "signals reach processes outside (Landlock ABI {} < 6){simulated}",
                availability.landlock_abi
            ),
            refuses_required: false,
        });
        if facts.fallback && !facts.guard {
            gaps.push(Gap {
                what: format!(
                    "abstract sockets outside stay reachable (Landlock ABI {} < 6){simulated}",
                    availability.landlock_abi
                ),
                refuses_required: false,
            });
        }
    }
    if availability.landlock_abi < 3 {
        gaps.push(Gap {
            what: format!(
                "files outside the writable paths can still be truncated (Landlock ABI {} < 3){simulated}",
                availability.landlock_abi
            ),
            refuses_required: true,
        });
    }
    network
}

/// What a group of grants may do.
#[derive(Debug, Clone, Copy)]
enum Rights {
    /// List the directory (`/` itself, so every path can be walked).
    ListOnly,
    /// Read and execute.
    Read,
    /// Everything Landlock calls writing.
    Write,
    /// Read, write and truncate (a device).
    Device,
}

/// Stage 10, the Landlock ruleset: each group of grants with its rights
/// (a file's rights cut to what applies to files), TCP when the network
/// is blocked without a namespace, and the scopes (ABI 6) that keep
/// signals and abstract sockets inside. `None`: the kernel refused one.
fn landlock_ruleset(
    availability: &Availability,
    tcp_by_landlock: bool,
    groups: &[(&[Grant], Rights)],
) -> Result<Option<OwnedFd>, landlock::RulesetError> {
    let abi = ABI::from(availability.landlock_abi);
    let handled = AccessFs::from_all(abi) & !AccessFs::IoctlDev;
    let file_rights = AccessFs::from_file(abi) & handled;
    let group_rights = |rights: Rights| -> BitFlags<AccessFs> {
        match rights {
            Rights::ListOnly => BitFlags::from(AccessFs::ReadDir) & handled,
            Rights::Read => (AccessFs::ReadFile | AccessFs::Execute) & handled,
            Rights::Write => AccessFs::from_write(abi) & handled,
            Rights::Device => {
                (AccessFs::ReadFile | AccessFs::WriteFile | AccessFs::Truncate) & handled
            }
        }
    };
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(handled)?;
    if tcp_by_landlock {
        ruleset = ruleset.handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)?;
    }
    if availability.landlock_abi >= 6 {
        // Abstract Unix sockets of processes outside (an X display's, a
        // session bus's) are out of reach whatever the network setting:
        // they are the same doors as the socket files the mount namespace
        // hides.
        ruleset = ruleset.scope(Scope::Signal | Scope::AbstractUnixSocket)?;
    }
    let mut created = ruleset.create()?;
    for (grants, rights) in groups {
        let rights = group_rights(*rights);
        for grant in grants.iter() {
            let access = if grant.is_dir {
                rights
            } else {
                rights & file_rights
            };
            if !access.is_empty() {
                created = created.add_rule(PathBeneath::new(&grant.fd, access))?;
            }
        }
    }
    Ok(created.into())
}

/// What the namespaces must provide.
struct NamespaceWants<'a> {
    /// The `.git` paths to keep read-only.
    git: &'a [PathBuf],
    /// The socket places to hide.
    masks: &'a [Mask],
    /// Whether the network is off (a network namespace of its own).
    block_network: bool,
}

/// Stage 5, the namespaces: a mount namespace with a private `/dev/pts`,
/// the hidden socket places and a read-only `.git`, and a network
/// namespace when the network is off. `previous`'s are reused when they
/// still fit; a failure to create them is remembered (`userns_failure`)
/// so that later preparations do not try again, and said in `gaps`.
fn namespace_stage(
    wants: NamespaceWants<'_>,
    availability: &Availability,
    previous: Option<&Prepared>,
    userns_failure: &mut Option<String>,
    gaps: &mut Vec<Gap>,
) -> Option<Arc<Namespaces>> {
    let simulated = availability.simulated_note();
    let NamespaceWants {
        git,
        masks,
        block_network,
    } = wants;
    let reused = previous
        .and_then(|p| p.0.namespaces.clone())
        .filter(|ns| ns.is_current(git, masks, block_network));
    let made = match (reused, userns_failure.as_ref()) {
        (Some(ns), _) => Ok(ns),
        (None, Some(failure)) => Err(failure.clone()),
        (None, None) if !availability.user_namespaces => {
            Err(format!("user namespaces unavailable{simulated}"))
        }
        (None, None) => Namespaces::create(git, masks, block_network)
            .map(Arc::new)
            .inspect_err(|e| *userns_failure = Some(e.clone())),
    };
    match made {
        Ok(ns) => Some(ns),
        Err(why) => {
            gaps.push(Gap {
                what: format!(
                    "the user's other terminals and the sockets of tmux, X, Docker and the \
                     session bus stay reachable ({why})"
                ),
                refuses_required: false,
            });
            if !git.is_empty() {
                // Fall back to leaving `.git` out of the grant: still
                // read-only, but the root's own entries are granted one by
                // one, so nothing new can be created at its top.
                gaps.push(Gap {
                    what: format!(
                        "new files cannot be created at the top of the workspace, because .git \
                         is kept read-only without a mount namespace ({why}); set \
                         git_writable = true to lift this"
                    ),
                    refuses_required: false,
                });
            }
            None
        }
    }
}

/// What [`guard_stage`] needs to know of the stages before it.
struct GuardFacts<'a> {
    /// Every path the sandbox may write.
    writable: &'a [PathBuf],
    seccomp: bool,
    mount_namespace: bool,
    tcp_by_landlock: bool,
}

/// The guard of `connect` (see [`connect_guard`]), and the filter for a
/// process whose guard cannot listen. Without it (no seccomp, a kernel
/// before 5.8) a pathname socket outside the hidden places can be reached,
/// which the status says.
fn guard_stage(
    policy: &SandboxPolicy,
    context: &SpawnContext,
    availability: &Availability,
    facts: GuardFacts<'_>,
    gaps: &mut Vec<Gap>,
) -> (Option<Guard>, Option<BpfProgram>) {
    if !facts.seccomp {
        return (None, None);
    }
    let simulated = availability.simulated_note();
    if !availability.connect_guard {
        gaps.push(Gap {
            what: format!(
                "Unix sockets outside can be reached by path (guarding connect needs Linux 5.8 \
                 or later){simulated}"
            ),
            refuses_required: false,
        });
        return (None, None);
    }
    // With TCP refused by Landlock, a process whose `connect` an outer
    // listener decides gets no TCP socket at all: an outer dsh guard would
    // connect it outside this sandbox's Landlock domain.
    let nested = || {
        facts
            .tcp_by_landlock
            .then(|| {
                crate::seccomp::filter(crate::seccomp::Network::Block {
                    tcp_by_landlock: false,
                })
                .ok()
            })
            .flatten()
    };
    if connect_guard::host_has_listener() {
        gaps.push(Gap {
            what: "Unix sockets outside can be reached by path (another seccomp listener, a \
                   container runtime's or an outer dsh sandbox's, decides connect here; an outer \
                   dsh guard also makes the calls that create files, under its own rules)"
                .to_owned(),
            refuses_required: false,
        });
        return (None, nested());
    }
    let listed = policy
        .unix_sockets
        .iter()
        .filter_map(|e| expand_entry(e, &context.home))
        .map(|p| existing(&p).unwrap_or(p))
        .collect();
    let git_roots = git_roots(policy, context);
    let git_root_ids = crate::git_guard::identities(&git_roots);
    let guard = Guard::start(GuardPolicy {
        listed,
        mount_namespace: facts.mount_namespace,
        tcp_refused: facts.tcp_by_landlock,
        git_root_places: crate::git_guard::places_in_file_system(&git_roots),
        git_mounts: Arc::default(),
        git_links: crate::git_guard::made_links_for(&git_roots),
        git_root_ids,
        git_roots: Arc::from(git_roots),
        writable: Arc::from(facts.writable),
        emulator: Arc::default(),
    });
    let guard = match guard {
        Ok(guard) => guard,
        Err(e) => {
            gaps.push(Gap {
                what: format!("Unix sockets outside can be reached by path (the guard of connect did not start: {e})"),
                refuses_required: false,
            });
            return (None, None);
        }
    };
    (Some(guard), nested())
}

/// The places where programs outside the sandbox keep Unix sockets that
/// would let a confined process act outside it — type into the person's
/// tmux or screen (`send-keys`), drive their X display, start a container
/// through Docker, sign with their ssh agent, talk to the session or
/// system bus, reach a dsh daemon, forge a journal, syslog or service
/// manager message (a datagram needs no `connect`), or sockets `deny_read`
/// lists — each hidden in the mount namespace
/// unless `unix_sockets` lists it (or something inside it). Only existing
/// places are hidden; each candidate is stamped so that one created later
/// rebuilds the preparation. A place that holds the workspace, the temp
/// dir or the home directory is never hidden.
fn socket_masks(
    policy: &SandboxPolicy,
    context: &SpawnContext,
    home: &Path,
    stamps: &mut Vec<(PathBuf, Stamp, Watch)>,
) -> Vec<Mask> {
    // SAFETY: getuid cannot fail.
    let uid = unsafe { libc::getuid() };
    let env_path = |name: &str| {
        std::env::var_os(name)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .filter(|p| p.is_absolute())
    };
    let tmux_dir = env_path("TMUX_TMPDIR")
        .unwrap_or_else(|| PathBuf::from("/tmp"))
        .join(format!("tmux-{uid}"));
    let mut candidates: Vec<(PathBuf, MaskKind)> = context
        .private
        .iter()
        .filter(|p| p.is_dir())
        .map(|p| (p.clone(), MaskKind::Sealed))
        .collect();
    candidates.extend(env_path("XDG_RUNTIME_DIR").map(|p| (p, MaskKind::Private(0o700))));
    candidates.push((
        PathBuf::from(format!("/run/user/{uid}")),
        MaskKind::Private(0o700),
    ));
    candidates.push((tmux_dir, MaskKind::Private(0o700)));
    for dir in [
        "/run/screen",
        "/var/run/screen",
        "/tmp/screens",
        "/tmp/.X11-unix",
    ] {
        candidates.push((PathBuf::from(dir), MaskKind::Private(0o1777)));
    }
    for file in [
        "/run/docker.sock",
        "/var/run/docker.sock",
        "/run/containerd/containerd.sock",
        "/run/podman/podman.sock",
        "/run/dbus/system_bus_socket",
        "/var/run/dbus/system_bus_socket",
    ] {
        candidates.push((PathBuf::from(file), MaskKind::File));
    }
    candidates.extend(env_path("SSH_AUTH_SOCK").map(|p| (p, MaskKind::File)));
    // The logging and service-manager sockets take a datagram sent to
    // their path without `connect`, which the guard of connect does not
    // see: hidden, nothing forges a journal or syslog entry or a service
    // notification as another program.
    for file in [
        "/dev/log",
        "/run/systemd/journal/socket",
        "/run/systemd/journal/dev-log",
        "/run/systemd/journal/syslog",
        "/run/systemd/notify",
    ] {
        candidates.push((PathBuf::from(file), MaskKind::File));
    }
    candidates.extend(env_path("NOTIFY_SOCKET").map(|p| (p, MaskKind::File)));
    // A socket listed in `deny_read` is hidden the same way.
    candidates.extend(
        policy
            .deny_read
            .iter()
            .filter_map(|d| expand_entry(d, &context.home))
            .filter(|p| {
                std::fs::metadata(p)
                    .is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type()))
            })
            .map(|p| (p, MaskKind::File)),
    );
    let allowed: Vec<PathBuf> = policy
        .unix_sockets
        .iter()
        .filter_map(|e| expand_entry(e, &context.home))
        .map(|p| existing(&p).unwrap_or(p))
        .collect();
    let keep: Vec<&Path> = context
        .root
        .iter()
        .map(PathBuf::as_path)
        .chain([context.temp_dir.as_path(), home])
        .collect();
    let mut masks: Vec<Mask> = Vec::new();
    for (candidate, kind) in candidates {
        stamps.push((candidate.clone(), Stamp::of(&candidate), Watch::Identity));
        let Some(path) = existing(&candidate) else {
            continue;
        };
        let is_dir = path.is_dir();
        let fits = match kind {
            MaskKind::File => !is_dir,
            MaskKind::Sealed | MaskKind::Private(_) => is_dir,
        };
        if !fits
            || allowed.iter().any(|a| is_within(a, &path))
            || keep.iter().any(|k| is_within(k, &path))
            || masks.iter().any(|m| is_within(&path, &m.path))
        {
            continue;
        }
        masks.retain(|m| !is_within(&m.path, &path));
        masks.push(Mask { path, kind });
    }
    masks.sort_by(|a, b| a.path.cmp(&b.path));
    masks
}

/// The paths that make up the git repository at `dotgit`: the directory
/// itself, or for a `.git` file (a worktree or submodule) the file, the
/// git dir it names, and that git dir's common dir.
fn git_paths(dotgit: &Path) -> Vec<PathBuf> {
    let Ok(meta) = std::fs::metadata(dotgit) else {
        return Vec::new();
    };
    let Some(canonical) = existing(dotgit) else {
        return Vec::new();
    };
    if meta.is_dir() {
        return vec![canonical];
    }
    let mut paths = vec![canonical];
    let base = dotgit.parent().unwrap_or(Path::new("/"));
    let Some(gitdir) = std::fs::read_to_string(dotgit)
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("gitdir:").map(|g| g.trim().to_owned()))
        })
        .and_then(|g| existing(&base.join(g)))
    else {
        return paths;
    };
    if let Some(common) = std::fs::read_to_string(gitdir.join("commondir"))
        .ok()
        .and_then(|c| existing(&gitdir.join(c.trim())))
    {
        paths.push(common);
    }
    paths.push(gitdir);
    paths.sort();
    paths.dedup();
    // A path inside another one is covered by it.
    let all = paths.clone();
    paths.retain(|p| !all.iter().any(|q| q != p && is_within(p, q)));
    paths
}

#[cfg(test)]
mod stage_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    struct Dirs {
        _base: tempfile::TempDir,
        home: PathBuf,
        ws: PathBuf,
        tmp: PathBuf,
    }

    fn dirs() -> Dirs {
        let base = tempfile::tempdir().unwrap();
        let root = base.path().canonicalize().unwrap();
        let (home, ws, tmp) = (root.join("home"), root.join("ws"), root.join("tmp"));
        for d in [&home, &ws, &tmp] {
            std::fs::create_dir_all(d).unwrap();
        }
        Dirs {
            _base: base,
            home,
            ws,
            tmp,
        }
    }

    fn context(d: &Dirs) -> SpawnContext {
        SpawnContext::command(&d.ws, &d.home).with_temp_dir(&d.tmp)
    }

    #[test]
    fn writable_roots_are_the_temp_dir_and_in_workspace_write_the_root_and_the_listed() {
        let d = dirs();
        std::fs::create_dir(d.home.join("cache")).unwrap();
        let mut stamps = Vec::new();
        let read_only = SandboxPolicy {
            mode: Mode::ReadOnly,
            writable: vec!["~/cache".into()],
            ..SandboxPolicy::default()
        };
        let roots = writable_roots(&read_only, &context(&d), &mut stamps);
        assert!(
            roots.contains(&d.tmp) && !roots.contains(&d.ws),
            "{roots:?}"
        );
        let write = SandboxPolicy {
            writable: vec!["~/cache".into(), "~/missing".into(), "~/cache".into()],
            ..SandboxPolicy::default()
        };
        let roots = writable_roots(&write, &context(&d), &mut stamps);
        assert!(roots.contains(&d.ws) && roots.contains(&d.home.join("cache")));
        assert_eq!(
            roots.iter().filter(|r| **r == d.home.join("cache")).count(),
            1
        );
        assert!(!roots.contains(&d.home.join("missing")));
        // The missing one is stamped, with the ancestor that would show it.
        assert!(stamps.iter().any(|(p, _, _)| *p == d.home.join("missing")));
        assert!(
            stamps
                .iter()
                .any(|(p, _, w)| *p == d.home && *w == Watch::Contents)
        );
    }

    #[test]
    fn closed_paths_follow_symlinks_and_keep_their_rule() {
        let d = dirs();
        std::fs::create_dir(d.home.join("real-ssh")).unwrap();
        std::os::unix::fs::symlink(d.home.join("real-ssh"), d.home.join(".ssh")).unwrap();
        let private = d.tmp.join("private");
        std::fs::create_dir(&private).unwrap();
        let mut ctx = context(&d);
        ctx.private = vec![private.clone()];
        let policy = SandboxPolicy {
            deny_read: vec!["~/.ssh".into()],
            ..SandboxPolicy::default()
        };
        let (holes, rules) = closed_paths(&policy, &ctx, &mut Vec::new());
        assert_eq!(holes, vec![d.home.join("real-ssh"), private.clone()]);
        assert_eq!(
            rules,
            vec![
                (d.home.join("real-ssh"), ReadRule::DenyRead("~/.ssh".into())),
                (private, ReadRule::Private),
            ]
        );
    }

    #[test]
    fn the_state_dir_is_granted_only_outside_writable_roots_and_closed_paths() {
        let d = dirs();
        let state = d.home.join("state");
        std::fs::create_dir(&state).unwrap();
        let mut ctx = context(&d);
        ctx.state_dir = Some(state.clone());
        let mut stamps = Vec::new();
        assert_eq!(
            state_dir_root(&ctx, std::slice::from_ref(&d.ws), &[], &mut stamps),
            Some(state.clone())
        );
        // Under a writable root already: no grant of its own.
        assert_eq!(
            state_dir_root(&ctx, std::slice::from_ref(&d.home), &[], &mut stamps),
            None
        );
        // Inside a closed path, or holding one: never.
        assert_eq!(
            state_dir_root(&ctx, &[], std::slice::from_ref(&d.home), &mut stamps),
            None
        );
        assert_eq!(
            state_dir_root(&ctx, &[], &[state.join("inner")], &mut stamps),
            None
        );
    }

    #[test]
    fn git_stays_read_only_only_in_workspace_write_and_inside_a_writable_root() {
        let d = dirs();
        std::fs::create_dir(d.ws.join(".git")).unwrap();
        let ctx = context(&d);
        let roots = vec![d.ws.clone()];
        let write = SandboxPolicy::default();
        assert_eq!(
            protected_git(&write, &ctx, &roots, &[], &mut Vec::new()),
            vec![d.ws.join(".git")]
        );
        let lifted = SandboxPolicy {
            git_writable: true,
            ..SandboxPolicy::default()
        };
        assert!(protected_git(&lifted, &ctx, &roots, &[], &mut Vec::new()).is_empty());
        let read_only = SandboxPolicy {
            mode: Mode::ReadOnly,
            ..SandboxPolicy::default()
        };
        assert!(protected_git(&read_only, &ctx, &roots, &[], &mut Vec::new()).is_empty());
        assert!(protected_git(&write, &ctx, &[], &[], &mut Vec::new()).is_empty());
        // Closed already: not granted at all, so nothing to protect.
        assert!(
            protected_git(
                &write,
                &ctx,
                &roots,
                std::slice::from_ref(&d.ws),
                &mut Vec::new()
            )
            .is_empty()
        );
    }

    fn facts(fallback: bool, tcp_by_landlock: bool, seccomp: bool) -> KernelFacts {
        KernelFacts {
            block_network: true,
            fallback,
            tcp_by_landlock,
            seccomp,
            guard: false,
        }
    }

    fn kernel(abi: i32) -> Availability {
        Availability::probe_kernel()
            .pretend(&format!("landlock-abi={abi}"))
            .unwrap()
    }

    #[test]
    fn kernel_gaps_say_what_stays_open_and_whether_the_network_is_really_off() {
        let full = Availability::probe_kernel();
        let mut gaps = Vec::new();
        // A namespace of its own, or Landlock and seccomp: off, no gap.
        assert!(!kernel_gaps(&full, facts(false, false, true), &mut gaps));
        assert!(!kernel_gaps(&full, facts(true, true, true), &mut gaps));
        // Landlock without seccomp: TCP only, so the network counts as on.
        assert!(kernel_gaps(&full, facts(true, true, false), &mut gaps));
        assert!(
            gaps.iter()
                .any(|g| g.what.starts_with("only TCP") && g.refuses_required)
        );
        gaps.clear();
        assert!(kernel_gaps(&full, facts(true, false, false), &mut gaps));
        assert!(
            gaps.iter()
                .any(|g| g.what.starts_with("the network stays on"))
        );
        if full.landlock_abi >= 6 {
            gaps.clear();
            let old = kernel(5);
            kernel_gaps(&old, facts(true, true, true), &mut gaps);
            let said: Vec<&str> = gaps.iter().map(|g| g.what.as_str()).collect();
            assert!(
                said.iter().any(|g| g.starts_with("signals reach")),
                "{said:?}"
            );
            assert!(
                said.iter().any(|g| g.starts_with("abstract sockets")),
                "{said:?}"
            );
            // With the guard of connect, abstract sockets are not open.
            gaps.clear();
            let guarded = KernelFacts {
                guard: true,
                ..facts(true, true, true)
            };
            kernel_gaps(&old, guarded, &mut gaps);
            assert!(!gaps.iter().any(|g| g.what.starts_with("abstract sockets")));
        }
    }

    #[test]
    fn a_required_sandbox_fails_on_a_gap_that_refuses_it_and_reports_the_others() {
        let gaps = vec![
            Gap {
                what: "a".into(),
                refuses_required: false,
            },
            Gap {
                what: "b".into(),
                refuses_required: true,
            },
        ];
        let mut policy = SandboxPolicy::default();
        let status = enforced_status(&policy, false, &gaps).unwrap();
        assert_eq!(status.reason.as_deref(), Some("a; b"));
        assert!(status.enforced && !status.network);
        policy.required = true;
        assert!(matches!(
            enforced_status(&policy, false, &gaps),
            Err(SandboxError::Unavailable { reason }) if reason == "b"
        ));
        assert_eq!(
            enforced_status(&policy, true, &gaps[..1])
                .unwrap()
                .reason
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn stamps_are_kept_once_each() {
        let d = dirs();
        let stamp = (d.ws.clone(), Stamp::of(&d.ws), Watch::Identity);
        let other = (d.tmp.clone(), Stamp::of(&d.tmp), Watch::Contents);
        let unique = unique_stamps(vec![stamp.clone(), other.clone(), stamp.clone()]);
        assert_eq!(unique, vec![stamp, other]);
    }
}
