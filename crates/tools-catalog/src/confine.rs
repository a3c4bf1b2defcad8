//! The sandbox and the environment every process a tool starts runs with:
//! a [`Confinement`] (built by the host from `[sandbox]` and `[env]`,
//! rebuilt on a config reload) resolves a session's workspace root into a
//! prepared sandbox and the child's environment; results report the
//! sandbox's status and what it refused.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use lsp_seam::{ReadAccess, ReadDenied};
use sandbox::{
    Availability, EnvPolicy, Mode, Prepared, Refusals, RefusedAccess, ReplState, Sandbox,
    SandboxPolicy, SandboxStatus, SpawnContext,
};
use serde::Serialize;

use crate::ToolError;
use crate::error::Code;

/// The code of a spawn refused because the required sandbox cannot be
/// enforced.
pub const SANDBOX_UNAVAILABLE: Code = Code::SandboxUnavailable;

/// How every process a tool starts is confined.
#[derive(Debug)]
pub struct Confinement {
    /// The configured sandbox; `Err` when it could not be set up at all
    /// (then every spawn is refused with the reason).
    sandbox: Result<Sandbox, String>,
    /// The sandbox of a command a person allowed to run unconfined.
    unconfined: Result<Sandbox, String>,
    env: EnvPolicy,
    /// The host's own directories, closed to every sandboxed process.
    private: Vec<PathBuf>,
    /// Where confined commands' REPLs keep their state; `None`: nowhere
    /// of their own (they write under HOME, and the sandbox refuses).
    repl_state: Option<ReplState>,
    /// Whether the REPL state's trouble was logged (once is enough).
    repl_state_warned: AtomicBool,
    /// Whether the language servers' build directories of roots that are
    /// gone were removed (once per process).
    build_dirs_swept: AtomicBool,
}

/// The file in a language server's build directory that names the root it
/// builds for, so that the build directories of roots that are gone can be
/// removed ([`sweep_build_dirs`]).
const BUILD_ROOT_FILE: &str = "ROOT";

/// Removes, under `base`, the build directories whose root is gone (a
/// project deleted or moved): what its checks built is of no more use, and
/// a Rust project's can be gigabytes. Best effort; a directory whose root
/// cannot be read is kept.
fn sweep_build_dirs(base: &Path) {
    use std::os::unix::ffi::OsStringExt as _;
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for entry in entries.flatten() {
        let dir = entry.path();
        let Ok(named) = std::fs::read(dir.join(BUILD_ROOT_FILE)) else {
            continue;
        };
        let root = PathBuf::from(OsString::from_vec(named));
        let gone = root.is_absolute()
            && matches!(std::fs::symlink_metadata(&root), Err(e) if e.kind() == std::io::ErrorKind::NotFound);
        if gone && let Err(e) = std::fs::remove_dir_all(&dir) {
            tracing::warn!("cannot remove {}: {e}", dir.display());
        }
    }
}

/// What one spawn gets: the prepared sandbox and the whole environment
/// its process starts from (the site adds its own variables on top).
#[derive(Debug, Clone)]
pub struct ConfinedSpawn {
    /// The sandbox, for its `pre_exec` step, status and refusals.
    pub prepared: Prepared,
    /// The environment after the `[env]` policy.
    pub env: Vec<(String, String)>,
    /// A language server's build directory, out of its project and
    /// writable by its sandbox alone (see [`Confinement::prepare_blocking`]);
    /// `None` for a command, or when there is none.
    pub build_dir: Option<PathBuf>,
}

/// The steps of one spawn (see [`ConfinedSpawn::child_steps`]).
pub struct ChildSteps {
    /// `Some`: run the program in a PID namespace, after this entry step.
    pub pid_namespace: Option<Option<process_tree::PreExecStep>>,
    /// The step the program runs last before `exec`.
    pub program: Option<process_tree::PreExecStep>,
}

impl ConfinedSpawn {
    /// The step to run in the child last before `exec`, when the sandbox
    /// confines anything.
    pub fn step(&self) -> Option<process_tree::PreExecStep> {
        self.prepared
            .confines()
            .then(|| Arc::new(self.prepared.pre_exec_step()) as process_tree::PreExecStep)
    }

    /// How the spawn's processes are started: `pid_namespace` (`Some`:
    /// in a PID namespace of their own, after its entry step) and the step
    /// the program runs last before `exec`.
    ///
    /// A namespace is asked for where one can be made: inside the
    /// sandbox's user namespace, or as root; the kernel may still refuse
    /// it (a container without `CAP_SYS_ADMIN`), and the program then runs
    /// without one, as it does elsewhere (see `process_tree::pidns`).
    pub fn child_steps(&self) -> ChildSteps {
        let namespaced = process_tree::pidns::enabled()
            && (self.prepared.has_user_namespace() || nix::unistd::geteuid().is_root());
        if !namespaced {
            return ChildSteps {
                pid_namespace: None,
                program: self.step(),
            };
        }
        ChildSteps {
            pid_namespace: Some(
                self.prepared
                    .enter_step()
                    .map(|step| Arc::new(step) as process_tree::PreExecStep),
            ),
            program: self
                .prepared
                .confines()
                .then(|| Arc::new(self.prepared.restrict_step(true)) as process_tree::PreExecStep),
        }
    }

    /// The status results report.
    pub fn status(&self) -> SandboxJson {
        SandboxJson::from(self.prepared.status())
    }
}

/// What a spawn is for, and so how it is confined.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnFor {
    /// A command, terminal or subagent of a session: the sandbox policy,
    /// with the session's workspace root writable.
    Command,
    /// A command a person allowed to run outside the sandbox.
    AllowedUnconfined,
    /// A language server: only its project root is writable, and no REPL
    /// state directory.
    LanguageServer,
}

impl Confinement {
    /// The variables of `base` the `[env]` policy keeps from the
    /// processes a caller starts (their values are secrets to redact).
    pub fn withheld(&self, base: &[(String, String)]) -> Vec<(String, String)> {
        let kept = self
            .env
            .apply(base.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        base.iter()
            .filter(|(name, _)| !kept.contains_key(std::ffi::OsStr::new(name)))
            .cloned()
            .collect()
    }

    /// The confinement of `policy` and `env` on a kernel offering
    /// `availability` (`Err`: why the kernel could not be probed; every
    /// spawn is then refused unless `mode = "off"`). `private` names the
    /// host's own directories.
    pub fn new(
        policy: SandboxPolicy,
        env: EnvPolicy,
        availability: Result<Availability, String>,
        private: Vec<PathBuf>,
    ) -> Self {
        let kernel = availability
            .clone()
            .unwrap_or_else(|_| Availability::probe_kernel());
        let sandbox = if policy.mode == Mode::Off {
            Sandbox::new(policy, kernel.clone()).map_err(|e| e.to_string())
        } else {
            availability.and_then(|a| Sandbox::new(policy, a).map_err(|e| e.to_string()))
        };
        Self {
            sandbox,
            unconfined: Self::off_sandbox(kernel),
            env,
            private,
            repl_state: None,
            repl_state_warned: AtomicBool::new(false),
            build_dirs_swept: AtomicBool::new(false),
        }
    }

    /// Gives every confined command (not a language server, not one run
    /// unconfined) a private state directory of its workspace under
    /// `state`, writable in its sandbox, and points REPLs and shells at
    /// it ([`sandbox::REPL_STATE_VARS`]) unless `[env] set` names the
    /// variable.
    pub fn with_repl_state(mut self, state: ReplState) -> Self {
        self.repl_state = Some(state);
        self
    }

    /// No sandbox, and the whole environment passed on: for embedders and
    /// benchmarks that confine nothing.
    pub fn none() -> Self {
        let kernel = Availability::probe_kernel();
        let env = EnvPolicy {
            ignore_default_excludes: true,
            ..EnvPolicy::default()
        };
        Self {
            sandbox: Self::off_sandbox(kernel.clone()),
            unconfined: Self::off_sandbox(kernel),
            env,
            private: Vec::new(),
            repl_state: None,
            repl_state_warned: AtomicBool::new(false),
            build_dirs_swept: AtomicBool::new(false),
        }
    }

    /// The sandbox of mode `off` (its lists are empty: nothing to check).
    fn off_sandbox(availability: Availability) -> Result<Sandbox, String> {
        let policy = SandboxPolicy {
            mode: Mode::Off,
            writable: Vec::new(),
            deny_read: Vec::new(),
            ..SandboxPolicy::default()
        };
        Sandbox::new(policy, availability).map_err(|e| e.to_string())
    }

    /// The name of this confinement's sandbox for language servers
    /// ([`lsp_seam::SandboxTag`]): alike for confinements whose policies,
    /// environment policies, closed directories and REPL states are alike,
    /// different otherwise (a digest of them, so nothing of the policy is
    /// kept in it).
    pub fn tag(&self) -> lsp_seam::SandboxTag {
        use std::hash::{Hash, Hasher};
        let mut digest = std::collections::hash_map::DefaultHasher::new();
        let policy = self.sandbox.as_ref().map(Sandbox::policy);
        format!(
            "{policy:?}\n{:?}\n{:?}\n{:?}",
            self.env, self.private, self.repl_state
        )
        .hash(&mut digest);
        lsp_seam::SandboxTag(format!("{:016x}", digest.finish()))
    }

    /// The configured mode (`off` when the sandbox could not be set up
    /// and the policy says off).
    pub fn mode(&self) -> Mode {
        match &self.sandbox {
            Ok(sandbox) => sandbox.policy().mode,
            Err(_) => Mode::WorkspaceWrite,
        }
    }

    /// The sandbox and environment of one spawn `what` whose writable
    /// root is `root` (the session's workspace root; a language server's
    /// project root), starting from `base` (the connection's environment;
    /// `None`: the host's). Blocking (the first preparation of a root
    /// lists directories).
    pub fn prepare_blocking(
        &self,
        root: &Path,
        base: Option<&[(String, String)]>,
        what: SpawnFor,
    ) -> Result<ConfinedSpawn, ToolError> {
        let unconfined = what == SpawnFor::AllowedUnconfined;
        let language_server = what == SpawnFor::LanguageServer;
        let mut env = self.environment(base);
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| PathBuf::from(v))
                .filter(|p| p.is_absolute())
        };
        let home = host_home();
        let temp_dir = lookup("TMPDIR").unwrap_or_else(|| PathBuf::from("/tmp"));
        // A private directory inside the temp dir (an explicit
        // DSH_RUNTIME_DIR there) is left out: Landlock would have to
        // grant the temp dir's entries one by one around it, and then no
        // new file could be created at the top of the temp dir, which
        // every compiler and `mktemp` needs. What it holds is guarded
        // otherwise (the daemon refuses clients it started).
        let real_temp = temp_dir.canonicalize().unwrap_or_else(|_| temp_dir.clone());
        let private = self.private.iter().filter(|p| {
            let real = p.canonicalize().unwrap_or_else(|_| p.to_path_buf());
            !real.starts_with(&real_temp)
        });
        let sandbox = if unconfined {
            &self.unconfined
        } else {
            &self.sandbox
        };
        let sandbox = sandbox.as_ref().map_err(|reason| {
            ToolError::new(
                SANDBOX_UNAVAILABLE,
                format!(
                    "the sandbox cannot be set up: {reason}. Nothing was run; fix the \
                         problem or set [sandbox] mode = \"off\""
                ),
            )
        })?;
        // Only a confined command gets a state directory: what a confined
        // process wrote there must never be loaded by one outside. A
        // language server gets a build directory in its place: beside the
        // REPL states (`…/dsh/lsp-build/<root>`), out of its project, so a
        // `cargo clean` or a build there never touches its check's output
        // (rust-analyzer's `cargo.targetDir`), and writable by no command
        // (what its check builds, its proc macros, it loads itself).
        let state_dir = if language_server {
            self.server_build_dir(root)
        } else if sandbox.policy().mode == Mode::Off {
            None
        } else {
            self.repl_state_dir(root)
        };
        let context = if language_server {
            SpawnContext::language_server(root, home)
        } else {
            SpawnContext::command(root, home)
        }
        .with_temp_dir(temp_dir)
        .with_private(private)
        .with_state_dir(state_dir.clone());
        let prepared = sandbox
            .prepare(&context)
            .map_err(|e| ToolError::new(crate::error::sandbox_code(&e), e.to_string()))?;
        if language_server {
            let build_dir = state_dir.filter(|dir| prepared.can_write(dir));
            return Ok(ConfinedSpawn {
                prepared,
                env,
                build_dir,
            });
        }
        if let Some(dir) = state_dir {
            if prepared.can_write(&dir) {
                self.point_repls_at(&dir, &mut env);
            } else {
                self.warn_repl_state(format_args!(
                    "{} is left out of the sandbox (it lies in or holds a directory no \
                     sandboxed process may touch: is XDG_STATE_HOME inside dsh's data or \
                     config directory?)",
                    dir.display()
                ));
            }
        }
        Ok(ConfinedSpawn {
            prepared,
            env,
            build_dir: None,
        })
    }

    /// The build directory of a language server whose writable root is
    /// `root`, created if missing; `None` (logged) when there are no REPL
    /// states to put it beside or it cannot be made.
    fn server_build_dir(&self, root: &Path) -> Option<PathBuf> {
        let base = self.repl_state.as_ref()?.base().with_file_name("lsp-build");
        if !self.build_dirs_swept.swap(true, Ordering::Relaxed) {
            sweep_build_dirs(&base);
        }
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        let dir = ReplState::new(base)
            .ensure(&root)
            .inspect_err(|e| {
                tracing::warn!(
                    "a language server of {} builds in its project: its build directory cannot be made: {e}",
                    root.display()
                );
            })
            .ok()?;
        let named = dir.join(BUILD_ROOT_FILE);
        if std::fs::symlink_metadata(&named).is_err() {
            use std::os::unix::ffi::OsStrExt as _;
            let _ = std::fs::write(&named, root.as_os_str().as_bytes());
        }
        Some(dir)
    }

    /// The REPL state directory of the workspace `root`, created if
    /// missing; `None` (logged once) when there is none or it cannot be
    /// made.
    fn repl_state_dir(&self, root: &Path) -> Option<PathBuf> {
        let state = self.repl_state.as_ref()?;
        let root = root.canonicalize().unwrap_or_else(|_| root.to_path_buf());
        state
            .ensure(&root)
            .inspect_err(|e| {
                self.warn_repl_state(format_args!(
                    "the directory {} cannot be used: {e}",
                    state.dir_for(&root).display()
                ));
            })
            .ok()
    }

    /// Sets in `env` each variable that points a REPL or shell into `dir`,
    /// unless `[env] set` names it (a value inherited from the host most
    /// likely names a file under HOME, which the sandbox refuses).
    fn point_repls_at(&self, dir: &Path, env: &mut Vec<(String, String)>) {
        for (name, path) in ReplState::variables(dir) {
            let Some(value) = path.to_str() else {
                continue;
            };
            if self.env.set.contains_key(name) {
                continue;
            }
            env.retain(|(k, _)| k != name);
            env.push((name.to_owned(), value.to_owned()));
        }
    }

    /// Logs, once per confinement, why confined REPLs keep no state.
    fn warn_repl_state(&self, why: std::fmt::Arguments<'_>) {
        if !self.repl_state_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!(
                "confined REPLs and shells keep no history or profile of their own: {why}; \
                 they write under HOME, where the sandbox refuses"
            );
        }
    }

    /// [`Confinement::prepare_blocking`] off the async workers.
    pub async fn prepare(
        self: &Arc<Self>,
        root: &Path,
        base: Option<Arc<Vec<(String, String)>>>,
        what: SpawnFor,
    ) -> Result<ConfinedSpawn, ToolError> {
        let this = self.clone();
        let root = root.to_path_buf();
        tokio::task::spawn_blocking(move || {
            this.prepare_blocking(&root, base.as_deref().map(Vec::as_slice), what)
        })
        .await
        .map_err(|e| {
            ToolError::new(
                Code::Internal,
                format!("preparing the sandbox failed unexpectedly: {e}; try again"),
            )
        })?
    }

    /// What the sandbox of a command in the session whose workspace root
    /// is `root` (environment `base`) lets be read: the rules a tool
    /// follows when it reads files itself on the model's behalf (`lsp`),
    /// so that it reads nothing a `cat` in that session could not.
    pub async fn read_rules(
        self: &Arc<Self>,
        root: &Path,
        base: Option<Arc<Vec<(String, String)>>>,
    ) -> Result<ReadRules, ToolError> {
        let spawn = self.prepare(root, base, SpawnFor::Command).await?;
        Ok(ReadRules {
            prepared: spawn.prepared.rules(),
        })
    }

    /// The environment a child starts from: the `[env]` policy applied to
    /// `base` (`None`: the host's environment). Variables whose name or
    /// value is not UTF-8 are left out.
    pub fn environment(&self, base: Option<&[(String, String)]>) -> Vec<(String, String)> {
        let applied = match base {
            Some(base) => self.env.apply(base.iter().map(|(k, v)| (k, v))),
            None => self.env.apply(std::env::vars_os()),
        };
        applied
            .into_iter()
            .filter_map(|(k, v): (OsString, OsString)| {
                Some((k.into_string().ok()?, v.into_string().ok()?))
            })
            .collect()
    }
}

/// The host's home, which `~` in the policy means: not the child's
/// `HOME`, since an `[env]` that sets `HOME` elsewhere must not move
/// `deny_read` away from the credential stores it protects.
fn host_home() -> PathBuf {
    std::env::var_os("HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| {
            nix::unistd::User::from_uid(nix::unistd::getuid())
                .ok()
                .flatten()
                .map(|u| u.dir)
        })
        .unwrap_or_else(|| PathBuf::from("/"))
}

/// What a session's sandbox lets be read (see
/// [`Confinement::read_rules`]). Cheap to clone.
#[derive(Debug, Clone)]
pub struct ReadRules {
    prepared: Prepared,
}

impl ReadRules {
    /// Whether a process in the sandbox could read `path` (absolute). The
    /// path is resolved as the kernel would resolve it — every symlink
    /// followed; a missing file where it would be, below its nearest
    /// existing ancestor — before the rules are applied, so a symlink in
    /// the workspace to a denied file is refused like the file. A refusal
    /// names the rule ("`deny_read` entry `~/.ssh`", or "dsh's private
    /// directory").
    pub fn check(&self, path: &Path) -> Result<(), ReadDenied> {
        let real = sandbox::resolve_path(path);
        match self.prepared.read_refusal(&real) {
            None => Ok(()),
            Some(rule) => Err(ReadDenied {
                path: real,
                rule: rule.to_string(),
            }),
        }
    }

    /// These rules as a query's read policy: every path checked, or none
    /// when the sandbox confines nothing (`mode = "off"`, no Landlock),
    /// where a command reads everything.
    pub fn into_access(self) -> ReadAccess {
        if self.prepared.confines() {
            ReadAccess::new(move |path: &Path| self.check(path))
        } else {
            ReadAccess::all()
        }
    }
}

/// `sandbox: {mode, enforced, network, reason?}` in structured results.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct SandboxJson {
    /// `workspace-write`, `read-only` or `off`.
    pub mode: String,
    /// Whether the kernel enforces the mode's file rules.
    pub enforced: bool,
    /// Whether connections can leave (`false` only when blocked).
    pub network: bool,
    /// Why enforcement is missing or weaker than the policy.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The one-line text form, `[sandbox: …]`.
    #[serde(skip)]
    pub line: String,
}

impl From<&SandboxStatus> for SandboxJson {
    fn from(status: &SandboxStatus) -> Self {
        Self {
            mode: status.mode.as_str().to_owned(),
            enforced: status.enforced,
            network: status.network,
            reason: status.reason.clone(),
            line: status.to_string(),
        }
    }
}

/// What the sandbox refused, as results carry it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RefusalsJson {
    /// Paths refused, in order of appearance.
    pub paths: Vec<RefusedPathJson>,
    /// Whether a network operation was refused (the network is off).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub network: bool,
    /// `the sandbox refused: writing /h/x, …`.
    #[serde(skip)]
    pub line: String,
}

/// One refused path.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RefusedPathJson {
    /// The path, absolute.
    pub path: String,
    /// `read` or `write`.
    pub access: &'static str,
}

impl RefusalsJson {
    /// What `prepared` refused according to `output` (relative paths
    /// against `cwd`); `None` when nothing.
    pub fn find(prepared: &Prepared, output: &str, cwd: &Path) -> Option<Self> {
        let refusals: Refusals = prepared.refusals(output, cwd);
        if refusals.is_empty() {
            return None;
        }
        Some(Self {
            paths: refusals
                .paths
                .iter()
                .map(|p| RefusedPathJson {
                    path: p.path.display().to_string(),
                    access: match p.access {
                        RefusedAccess::Read => "read",
                        RefusedAccess::Write => "write",
                    },
                })
                .collect(),
            network: refusals.network,
            line: format!("[{refusals}]"),
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// A directory of its own (removed on drop), and its path with
    /// symlinks resolved (the form refusals name).
    fn scratch() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().canonicalize().unwrap();
        (dir, path)
    }

    /// `ws/` (the workspace), `secrets/` (denied), `private/` (the host's),
    /// `tmp/` (the temp dir), and in the workspace a symlink to a secret
    /// and one to the secrets' directory.
    fn layout(s: &Path) -> (PathBuf, PathBuf, PathBuf) {
        let (ws, secrets, private) = (s.join("ws"), s.join("secrets"), s.join("private"));
        for d in [&ws, &secrets, &private, &s.join("tmp")] {
            std::fs::create_dir_all(d).unwrap();
        }
        std::fs::write(ws.join("main.py"), "x = 1\n").unwrap();
        std::fs::write(secrets.join("key.py"), "KEY = 'secret'\n").unwrap();
        std::fs::write(private.join("token.py"), "TOKEN = 'secret'\n").unwrap();
        std::os::unix::fs::symlink(secrets.join("key.py"), ws.join("key.py")).unwrap();
        std::os::unix::fs::symlink(&secrets, ws.join("keys")).unwrap();
        (ws, secrets, private)
    }

    fn confinement(mode: Mode, secrets: &Path, private: &Path) -> Arc<Confinement> {
        let policy = SandboxPolicy {
            mode,
            deny_read: vec![secrets.display().to_string()],
            ..SandboxPolicy::default()
        };
        Arc::new(Confinement::new(
            policy,
            EnvPolicy::default(),
            Ok(Availability::probe_kernel()),
            vec![private.to_path_buf()],
        ))
    }

    #[tokio::test]
    async fn read_rules_follow_symlinks_and_name_the_rule() {
        let (_dir, s) = scratch();
        let (ws, secrets, private) = layout(&s);
        let env = Arc::new(vec![(
            "TMPDIR".to_owned(),
            s.join("tmp").display().to_string(),
        )]);
        let rules = confinement(Mode::WorkspaceWrite, &secrets, &private)
            .read_rules(&ws, Some(env))
            .await
            .unwrap();
        let refused = |path: &Path, rule: &str| {
            Err(ReadDenied {
                path: path.to_path_buf(),
                rule: rule.to_owned(),
            })
        };
        let deny_entry = format!("`deny_read` entry `{}`", secrets.display());
        let key = secrets.join("key.py");
        if Availability::probe_kernel().landlock_abi == 0 {
            // No Landlock: a command reads everything, and so may the tool.
            assert_eq!(rules.check(&key), Ok(()));
            return;
        }
        assert_eq!(rules.check(&ws.join("main.py")), Ok(()));
        assert_eq!(rules.check(&key), refused(&key, &deny_entry));
        // Through a symlink to the file, a symlinked directory, `..`.
        assert_eq!(rules.check(&ws.join("key.py")), refused(&key, &deny_entry));
        assert_eq!(
            rules.check(&ws.join("keys/key.py")),
            refused(&key, &deny_entry)
        );
        assert_eq!(
            rules.check(&ws.join("../secrets/key.py")),
            refused(&key, &deny_entry)
        );
        // `..` after a symlink goes up from its target, as in the kernel
        // (not lexically: that would be `ws/secrets/key.py`).
        assert_eq!(
            rules.check(&ws.join("keys/../secrets/key.py")),
            refused(&key, &deny_entry)
        );
        // A file that does not exist yet is judged by where it would be.
        let missing = secrets.join("missing.py");
        assert_eq!(rules.check(&missing), refused(&missing, &deny_entry));
        // Also through a symlinked directory, and `..` after it.
        assert_eq!(
            rules.check(&ws.join("keys/missing.py")),
            refused(&missing, &deny_entry)
        );
        assert_eq!(
            rules.check(&ws.join("keys/../secrets/missing.py")),
            refused(&missing, &deny_entry)
        );
        let token = private.join("token.py");
        assert_eq!(
            rules.check(&token),
            refused(&token, "dsh's private directory")
        );
        // As a query's policy, the same checks.
        let access = rules.into_access();
        assert_eq!(access.check(&ws.join("key.py")), refused(&key, &deny_entry));
        assert_eq!(access.check(&ws.join("main.py")), Ok(()));
    }

    #[tokio::test]
    async fn the_innermost_rule_is_named() {
        let (_dir, s) = scratch();
        let (ws, secrets, _) = layout(&s);
        let inner = secrets.join("inner");
        std::fs::create_dir(&inner).unwrap();
        std::fs::write(inner.join("token.py"), "TOKEN = 'secret'\n").unwrap();
        let env = Arc::new(vec![(
            "TMPDIR".to_owned(),
            s.join("tmp").display().to_string(),
        )]);
        let rules = confinement(Mode::WorkspaceWrite, &secrets, &inner)
            .read_rules(&ws, Some(env))
            .await
            .unwrap();
        if Availability::probe_kernel().landlock_abi == 0 {
            return;
        }
        let token = inner.join("token.py");
        assert_eq!(
            rules.check(&token),
            Err(ReadDenied {
                path: token.clone(),
                rule: "dsh's private directory".to_owned(),
            })
        );
        let key = secrets.join("key.py");
        assert_eq!(
            rules.check(&key),
            Err(ReadDenied {
                path: key.clone(),
                rule: format!("`deny_read` entry `{}`", secrets.display()),
            })
        );
    }

    /// The value of `name` in `env`.
    fn var<'a>(env: &'a [(String, String)], name: &str) -> Option<&'a str> {
        env.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// A confinement of `mode` whose REPL state lives under `s/state`,
    /// with `set` as `[env] set`, and `s/private` closed.
    fn with_state(mode: Mode, s: &Path, set: &[(&str, &str)]) -> Confinement {
        let policy = SandboxPolicy {
            mode,
            ..SandboxPolicy::default()
        };
        let env = EnvPolicy {
            set: set
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..EnvPolicy::default()
        };
        Confinement::new(
            policy,
            env,
            Ok(Availability::probe_kernel()),
            vec![s.join("private")],
        )
        .with_repl_state(ReplState::new(s.join("state/dsh/repl")))
    }

    #[test]
    fn a_confined_command_gets_the_repl_state_dir_in_every_confined_mode() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, s) = scratch();
        let (ws, _, _) = layout(&s);
        let base = vec![
            ("TMPDIR".to_owned(), s.join("tmp").display().to_string()),
            ("HISTFILE".to_owned(), "/h/.bash_history".to_owned()),
            ("HARMLESS".to_owned(), "1".to_owned()),
        ];
        let state = ReplState::new(s.join("state/dsh/repl"));
        let dir = state.dir_for(&ws);
        for mode in [Mode::WorkspaceWrite, Mode::ReadOnly] {
            let spawn = with_state(mode, &s, &[])
                .prepare_blocking(&ws, Some(&base), SpawnFor::Command)
                .unwrap();
            let expected: Vec<(String, String)> = ReplState::variables(&dir)
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.display().to_string()))
                .collect();
            let got: Vec<(String, String)> = expected
                .iter()
                .map(|(k, _)| (k.clone(), var(&spawn.env, k).unwrap_or("").to_owned()))
                .collect();
            // The inherited HISTFILE (under HOME) is replaced too.
            assert_eq!(got, expected, "{mode}");
            assert_eq!(var(&spawn.env, "HARMLESS"), Some("1"));
            assert!(spawn.prepared.can_write(&dir.join("ipython")), "{mode}");
            for private in [&dir, state.base(), &s.join("state/dsh"), &s.join("state")] {
                let mode = std::fs::metadata(private).unwrap().permissions().mode();
                assert_eq!(mode & 0o777, 0o700, "{}", private.display());
            }
        }
    }

    #[test]
    fn an_unconfined_command_or_a_language_server_gets_no_repl_state() {
        let (_dir, s) = scratch();
        let (ws, _, _) = layout(&s);
        let base = vec![
            ("TMPDIR".to_owned(), s.join("tmp").display().to_string()),
            ("IPYTHONDIR".to_owned(), "/h/.ipython".to_owned()),
        ];
        let names = |env: &[(String, String)]| -> Vec<String> {
            sandbox::REPL_STATE_VARS
                .iter()
                .filter_map(|(name, _)| var(env, name).map(|v| format!("{name}={v}")))
                .collect()
        };
        let confined = with_state(Mode::WorkspaceWrite, &s, &[]);
        // A command a person let run unconfined, and a language server.
        for what in [SpawnFor::AllowedUnconfined, SpawnFor::LanguageServer] {
            let spawn = confined.prepare_blocking(&ws, Some(&base), what).unwrap();
            assert_eq!(names(&spawn.env), ["IPYTHONDIR=/h/.ipython"]);
        }
        // Everything with the sandbox off; not even the directory is made.
        let spawn = with_state(Mode::Off, &s, &[])
            .prepare_blocking(&ws, Some(&base), SpawnFor::Command)
            .unwrap();
        assert_eq!(names(&spawn.env), ["IPYTHONDIR=/h/.ipython"]);
        assert!(!s.join("state/dsh/repl").exists());
    }

    #[test]
    fn a_language_server_builds_in_a_directory_of_its_own_that_goes_with_its_root() {
        let (_dir, s) = scratch();
        let (ws, _, _) = layout(&s);
        let base = vec![("TMPDIR".to_owned(), s.join("tmp").display().to_string())];
        let confined = with_state(Mode::WorkspaceWrite, &s, &[]);
        let spawn = confined
            .prepare_blocking(&ws, Some(&base), SpawnFor::LanguageServer)
            .unwrap();
        let build = ReplState::new(s.join("state/dsh/lsp-build")).dir_for(&ws);
        assert_eq!(spawn.build_dir.as_deref(), Some(build.as_path()));
        assert!(spawn.prepared.can_write(&build.join("debug")));
        assert_eq!(
            std::fs::read_to_string(build.join(BUILD_ROOT_FILE)).unwrap(),
            ws.display().to_string()
        );
        // A command of the same workspace may not write it (a server
        // loads what its check built), and gets none.
        let command = confined
            .prepare_blocking(&ws, Some(&base), SpawnFor::Command)
            .unwrap();
        assert!(!command.prepared.can_write(&build.join("debug")));
        assert_eq!(command.build_dir, None);
        // Once its root is gone, the next process's first server removes
        // it; a directory whose root is there, or that names none, stays.
        let kept = ReplState::new(s.join("state/dsh/lsp-build")).dir_for(&s.join("other"));
        std::fs::create_dir_all(&kept).unwrap();
        std::fs::remove_dir_all(&ws).unwrap();
        std::fs::create_dir_all(s.join("ws2")).unwrap();
        let again = with_state(Mode::WorkspaceWrite, &s, &[]);
        again
            .prepare_blocking(&s.join("ws2"), Some(&base), SpawnFor::LanguageServer)
            .unwrap();
        assert!(!build.exists());
        assert!(kept.exists());
    }

    #[test]
    fn env_set_wins_over_the_repl_state_dir() {
        let (_dir, s) = scratch();
        let (ws, _, _) = layout(&s);
        let base = vec![("TMPDIR".to_owned(), s.join("tmp").display().to_string())];
        let spawn = with_state(Mode::WorkspaceWrite, &s, &[("HISTFILE", "/elsewhere")])
            .prepare_blocking(&ws, Some(&base), SpawnFor::Command)
            .unwrap();
        assert_eq!(var(&spawn.env, "HISTFILE"), Some("/elsewhere"));
        let dir = ReplState::new(s.join("state/dsh/repl")).dir_for(&ws);
        assert_eq!(
            var(&spawn.env, "IPYTHONDIR"),
            Some(dir.join("ipython").to_str().unwrap())
        );
    }

    #[test]
    fn a_repl_state_dir_inside_a_private_directory_is_not_used() {
        let (_dir, s) = scratch();
        let (ws, _, private) = layout(&s);
        let base = vec![("TMPDIR".to_owned(), s.join("tmp").display().to_string())];
        let confinement = Confinement::new(
            SandboxPolicy::default(),
            EnvPolicy::default(),
            Ok(Availability::probe_kernel()),
            vec![private.clone()],
        )
        .with_repl_state(ReplState::new(private.join("repl")));
        let spawn = confinement
            .prepare_blocking(&ws, Some(&base), SpawnFor::Command)
            .unwrap();
        if !spawn.prepared.confines() {
            return; // no Landlock: nothing is closed, nothing to check
        }
        assert_eq!(var(&spawn.env, "IPYTHONDIR"), None);
        assert!(!spawn.prepared.can_write(&private.join("repl")));
    }

    #[tokio::test]
    async fn with_the_sandbox_off_nothing_is_refused() {
        let (_dir, s) = scratch();
        let (ws, secrets, private) = layout(&s);
        let rules = confinement(Mode::Off, &secrets, &private)
            .read_rules(&ws, None)
            .await
            .unwrap();
        for path in [
            secrets.join("key.py"),
            ws.join("key.py"),
            private.join("token.py"),
        ] {
            assert_eq!(rules.check(&path), Ok(()), "{}", path.display());
        }
        // Nothing to ask: the policy of a sandbox that confines nothing
        // lets everything be read without a check.
        assert_eq!(format!("{:?}", rules.into_access()), "ReadAccess(None)");
    }
}
