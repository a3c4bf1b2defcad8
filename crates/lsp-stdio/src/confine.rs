//! How the host confines the language servers it starts: a hook asked,
//! before each spawn, for the step the server runs before `exec` (a
//! sandbox's) and the environment it starts with.

use std::ffi::OsString;
use std::path::Path;
use std::sync::Arc;

/// What a server process is started with, besides its own configuration.
#[derive(Clone, Default)]
pub struct Confined {
    /// A step the server runs last before `exec`; `None`: none.
    pub pre_exec: Option<process_tree::PreExecStep>,
    /// `Some`: the server runs in a PID namespace of its own, after this
    /// entry step (see [`process_tree::SessionCommand::pid_namespace`]),
    /// so what it starts (`cargo check`, a proc-macro server) ends with
    /// it, and with the host, by the kernel's hand.
    pub pid_namespace: Option<Option<process_tree::PreExecStep>>,
    /// The whole environment the server starts from in place of the
    /// host's (the server's configured `env` is added on top); `None`:
    /// the host's.
    pub env: Option<Vec<(OsString, OsString)>>,
    /// A directory out of the project that the server's sandbox lets it
    /// write, for its builds: rust-analyzer's check goes there
    /// (`cargo.targetDir`) instead of `target/rust-analyzer`, out of reach
    /// of a `cargo clean` or a build in the project; `None`: in the
    /// project.
    pub build_dir: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Confined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Confined")
            .field("pre_exec", &self.pre_exec.is_some())
            .field("pid_namespace", &self.pid_namespace.is_some())
            .field("env", &self.env.as_ref().map(Vec::len))
            .field("build_dir", &self.build_dir)
            .finish()
    }
}

/// Called before a server is spawned with the directory it may write:
/// its project root, bounded by the asking session's workspace (see
/// [`lsp_seam::Workspace`]; the server still runs in and serves its
/// project root), and the name of the asking session's sandbox, which
/// the server runs in ([`lsp_seam::SandboxTag`]; empty: the host's own).
/// Blocking (it may list directories). An error refuses the spawn with
/// that message (the sandbox is required and cannot be enforced, or the
/// named one is gone).
///
/// The step it returns must be async-signal-safe (no allocation, no
/// locks), as [`process_tree::SessionCommand::pre_exec`] requires.
pub type Confine =
    Arc<dyn Fn(&Path, &lsp_seam::SandboxTag) -> Result<Confined, String> + Send + Sync>;
