//! The per-spawn facts a policy is resolved against: whose root is
//! writable, where HOME and the temp dir are, and which of the host's own
//! directories no child may touch.

use std::path::{Path, PathBuf};

/// What a spawn is for; decides which root is the writable one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// A `bash` command, a terminal or a subagent: the session's workspace
    /// root is writable.
    Command,
    /// A language server: only its project root is writable, so build
    /// scripts and proc-macros it runs cannot touch the rest of the home
    /// directory.
    LanguageServer,
}

/// The context of one spawn.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SpawnContext {
    /// What the spawn is for.
    pub purpose: Purpose,
    /// The workspace root (commands) or project root (language servers);
    /// writable in workspace-write, `None` for none.
    pub root: Option<PathBuf>,
    /// The home directory `~` expands to.
    pub home: PathBuf,
    /// The temp dir, writable in every confined mode.
    pub temp_dir: PathBuf,
    /// The host's own directories (its config, data and runtime dirs):
    /// neither readable nor writable by any sandboxed process, so a command
    /// can neither change its own sandbox nor read the host's tokens.
    pub private: Vec<PathBuf>,
    /// The private directory where REPLs keep their state
    /// ([`crate::ReplState`]): writable in every confined mode, unless it
    /// lies in or holds a closed directory, or is already writable
    /// through another writable path.
    pub state_dir: Option<PathBuf>,
}

impl SpawnContext {
    /// A command run in the session's workspace `root`.
    pub fn command(root: impl Into<PathBuf>, home: impl Into<PathBuf>) -> Self {
        Self {
            purpose: Purpose::Command,
            root: Some(root.into()),
            home: home.into(),
            temp_dir: std::env::temp_dir(),
            private: Vec::new(),
            state_dir: None,
        }
    }

    /// A language server whose project root is `project_root`.
    pub fn language_server(project_root: impl Into<PathBuf>, home: impl Into<PathBuf>) -> Self {
        Self {
            purpose: Purpose::LanguageServer,
            ..Self::command(project_root, home)
        }
    }

    /// The directories every confined mode lets a command write, whatever
    /// the policy says: the temp dir `temp_dir` and shared memory
    /// (`/dev/shm`, where POSIX semaphores and shared memory live).
    pub fn always_writable(temp_dir: &Path) -> [PathBuf; 2] {
        [temp_dir.to_path_buf(), PathBuf::from("/dev/shm")]
    }

    /// Replaces the temp dir (default: `$TMPDIR` or `/tmp`).
    pub fn with_temp_dir(mut self, temp_dir: impl Into<PathBuf>) -> Self {
        self.temp_dir = temp_dir.into();
        self
    }

    /// Sets the REPL state directory (see [`SpawnContext::state_dir`]).
    pub fn with_state_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.state_dir = dir;
        self
    }

    /// Adds host directories no sandboxed process may read or write.
    pub fn with_private<P: AsRef<Path>>(mut self, dirs: impl IntoIterator<Item = P>) -> Self {
        self.private
            .extend(dirs.into_iter().map(|d| d.as_ref().to_path_buf()));
        self
    }
}
