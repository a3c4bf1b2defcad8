//! Kernel-enforced confinement for every process dsh starts on a model's
//! behalf, and the environment policy those processes start with.
//!
//! A [`SandboxPolicy`] (the `[sandbox]` config section) says what may be
//! written (`mode`, `writable`, `git_writable`), what may not be read
//! (`deny_read`), whether connections may leave (`network`) and whether a
//! kernel that cannot enforce all that must refuse to run anything
//! (`required`). A [`Sandbox`] resolves it against a [`SpawnContext`] (the
//! workspace or project root, HOME, the temp dir) into a [`Prepared`]
//! sandbox, whose [`Prepared::pre_exec_step`] a spawn site adds to its
//! `Command`: the child enters it before `exec`, irrevocably, and
//! everything it starts inherits it. [`Prepared::status`] is what results
//! report (`[sandbox: workspace-write · network on]`), and
//! [`Prepared::refusals`] names, from a command's output, what the sandbox
//! refused.
//!
//! The mechanisms: Landlock for files (an allow-list: read everywhere but
//! the denied paths, write only in the writable ones), Landlock for TCP
//! and a seccomp filter for every other socket when the network is off,
//! Landlock scopes so a confined process cannot signal processes outside
//! its sandbox, a shared user and mount namespace that keeps `.git`
//! read-only inside a writable root, and a seccomp listener whose
//! supervisor decides `connect` and makes, for the process, the calls
//! that create files (so no repository is planted in the workspace). Everything that allocates or opens a
//! file is done in the parent, once per context and cached; the child step
//! is a handful of system calls.
//!
//! [`EnvPolicy`] (the `[env]` section) is separate and pure: the host's
//! environment in, the child's environment out. [`ReplState`] names the
//! private per-workspace directory where confined REPLs keep their
//! history and profiles ([`SpawnContext::state_dir`]), and the variables
//! that point them there.
//!
//! What the parent prepares ([`Sandbox::prepare`], `prepare`): the
//! Landlock ruleset, the seccomp filter, and the user, mount and network
//! namespaces every sandbox of a context shares, which keep `.git`
//! read-only, give every sandbox its own `/dev/pts`, hide the host's
//! socket places and give the network-off sandbox its own loopback. A
//! [`Prepared`] sandbox also gives a spawn site its `pty_dir` (where a
//! confined terminal's pty is allocated) and `can_read` (what `lsp` checks
//! before it reads a file), and runs the guard of `connect`
//! (`connect_guard`: a thread per live confined process tree, kept to
//! serve the next once its tree is gone, serves the seccomp
//! user-notification listener each child sends before `exec`; a Unix
//! socket is reached by path only if `unix_sockets` lists it or the same
//! sandbox holds it). The
//! same listener receives every call that makes a directory entry and
//! refuses a new `.git` or `HEAD` in the workspace (`git_guard`), so no
//! repository a confined command planted runs anything for the person's
//! git. The variables of [`ReplState`] are set by the tool layer, for
//! confined spawns only; its directory is writable in every confined mode.
//!
//! The child step makes system calls only: it allocates nothing and opens
//! no file by path (it creates the guard's listener and a netlink socket,
//! and sends them). This crate spawns nothing of its own except a
//! short-lived helper that creates the namespaces and the guard's
//! connector (a fork that connects a listed socket and exits); it knows
//! nothing of jobs, terminals or tools. See `docs/subsystems/sandbox.md`
//! for the model and its limits.

mod connect_guard;
mod context;
mod emulate;
mod env;
mod git_guard;
mod namespaces;
mod policy;
mod prepare;
mod probe;
mod refused;
mod repl_state;
mod seccomp;
mod status;
mod walk;

pub use context::{Purpose, SpawnContext};
pub use env::{CORE_VARS, DEFAULT_EXCLUDES, EnvPolicy, EnvPolicyError, Inherit, UnknownInherit};
pub use policy::{
    DEFAULT_DENY_READ, DEFAULT_WRITABLE, Mode, PolicyError, SandboxPolicy, UnknownMode,
};
pub use prepare::{Prepared, ReadRule, Sandbox, resolve_path};
pub use probe::{Availability, PretendError, TARGET_LANDLOCK_ABI, TEST_PRETEND_VAR};
pub use refused::{MAX_REFUSED_PATHS, Refusals, RefusedAccess, RefusedPath};
pub use repl_state::{REPL_STATE_VARS, ReplState};
pub use status::{SandboxError, SandboxStatus};
