//! The private per-workspace directory where confined REPLs and shells keep
//! their state (ipython's profile, the history files of python, node,
//! sqlite3, psql, less, bash…), and the environment variables that point
//! them there.
//!
//! Those programs write under `$HOME` by default, which the sandbox
//! refuses: ipython dies at start without `~/.ipython`, node complains on
//! every start. Making those places writable is not an option, because
//! some of them hold code that runs later outside the sandbox
//! (`~/.ipython/profile_*/startup/*.py`, `ipython_config.py`): a confined
//! command could plant code that an unconfined ipython runs. So a confined
//! process gets a directory of its own instead, writable in every confined
//! mode, and variables naming it; an unconfined one gets neither, so
//! nothing outside the sandbox ever loads what was written there.

use std::fs::DirBuilder;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Each variable set for a confined process, and the name of the file or
/// directory it names inside the state directory.
pub const REPL_STATE_VARS: &[(&str, &str)] = &[
    // ipython's whole state: profiles, history, startup scripts.
    ("IPYTHONDIR", "ipython"),
    // python's REPL history (Python 3.13 and later).
    ("PYTHON_HISTORY", "python_history"),
    ("NODE_REPL_HISTORY", "node_repl_history"),
    ("SQLITE_HISTORY", "sqlite_history"),
    ("PSQL_HISTORY", "psql_history"),
    ("MYSQL_HISTFILE", "mysql_history"),
    ("REDISCLI_HISTFILE", "rediscli_history"),
    ("LESSHISTFILE", "lesshst"),
    // bash's and zsh's history.
    ("HISTFILE", "shell_history"),
];

/// Where the state directories of confined REPLs live: one directory per
/// workspace under `base` (the host's `$XDG_STATE_HOME/dsh/repl`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplState {
    base: PathBuf,
}

impl ReplState {
    /// The state directories under `base` (absolute).
    pub fn new(base: impl Into<PathBuf>) -> Self {
        Self { base: base.into() }
    }

    /// The directory all workspaces' state directories are in.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The state directory of the workspace whose canonical root is
    /// `root`: `BASE/<root's name>-<hash of the root's path>`, so that two
    /// workspaces of the same name stay apart and a person can still tell
    /// which is which.
    pub fn dir_for(&self, root: &Path) -> PathBuf {
        let name: String = root
            .file_name()
            .map(|n| n.to_string_lossy())
            .unwrap_or_default()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                    c
                } else {
                    '_'
                }
            })
            .take(32)
            .collect();
        let name = match name.trim_start_matches('.') {
            "" => "root",
            name => name,
        };
        self.base.join(format!(
            "{name}-{:016x}",
            fnv1a(root.as_os_str().as_bytes())
        ))
    }

    /// Creates the state directory of the workspace `root` (canonical) if
    /// it is missing — mode 0700, and so is every parent this creates —
    /// and returns its path with symlinks resolved. Refuses a directory
    /// that is a symlink or belongs to another user; makes one that others
    /// may enter private again.
    pub fn ensure(&self, root: &Path) -> io::Result<PathBuf> {
        let dir = self.dir_for(root);
        if !dir.is_absolute() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is not an absolute path", dir.display()),
            ));
        }
        DirBuilder::new().recursive(true).mode(0o700).create(&dir)?;
        let meta = std::fs::symlink_metadata(&dir)?;
        if !meta.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory (a symlink?)",
                dir.display()
            )));
        }
        // SAFETY: getuid cannot fail.
        let me = unsafe { libc::getuid() };
        if meta.uid() != me {
            return Err(io::Error::other(format!(
                "{} belongs to uid {}, not to uid {me}",
                dir.display(),
                meta.uid()
            )));
        }
        if meta.mode() & 0o077 != 0 {
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
        }
        dir.canonicalize()
    }

    /// The variables that point REPLs and shells into the state directory
    /// `dir`, in the order of [`REPL_STATE_VARS`].
    pub fn variables(dir: &Path) -> Vec<(&'static str, PathBuf)> {
        REPL_STATE_VARS
            .iter()
            .map(|(name, file)| (*name, dir.join(file)))
            .collect()
    }
}

/// FNV-1a, 64 bits: a stable hash (the standard library's may change
/// between releases), for a directory name, not for security.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, byte| {
        (hash ^ u64::from(*byte)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_directory_is_named_after_the_workspace_and_its_path() {
        let state = ReplState::new("/s/dsh/repl");
        let a = state.dir_for(Path::new("/home/u/proj"));
        let b = state.dir_for(Path::new("/home/v/proj"));
        assert_eq!(a.parent(), Some(Path::new("/s/dsh/repl")));
        assert!(
            a.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with("proj-")
        );
        assert_ne!(a, b);
        // Stable: the same root always gives the same directory.
        assert_eq!(a, state.dir_for(Path::new("/home/u/proj")));
        assert_eq!(
            state.dir_for(Path::new("/")),
            PathBuf::from(format!("/s/dsh/repl/root-{:016x}", fnv1a(b"/")))
        );
        // Odd names are tamed; a hidden one does not stay hidden.
        let odd = state.dir_for(Path::new("/w/my proj/../.x ü"));
        let odd = odd.file_name().unwrap().to_str().unwrap();
        assert!(odd.starts_with("x__-"), "{odd}");
    }

    #[test]
    fn fnv1a_matches_its_reference_values() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn ensure_creates_private_directories_and_refuses_a_symlink() {
        let scratch = tempfile::tempdir().unwrap();
        let base = scratch.path().join("state/dsh/repl");
        let state = ReplState::new(&base);
        let root = Path::new("/w/proj");
        let dir = state.ensure(root).unwrap();
        assert_eq!(dir, state.dir_for(root).canonicalize().unwrap());
        for created in [&dir, &base, &base.parent().unwrap().to_path_buf()] {
            let mode = std::fs::metadata(created).unwrap().mode() & 0o777;
            assert_eq!(mode & 0o077, 0, "{} is {mode:o}", created.display());
        }
        // Existing and made public: private again.
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(state.ensure(root).unwrap(), dir);
        assert_eq!(std::fs::metadata(&dir).unwrap().mode() & 0o777, 0o700);
        // A symlink in its place is refused, not followed.
        let other = Path::new("/w/other");
        std::os::unix::fs::symlink(scratch.path(), state.dir_for(other)).unwrap();
        let e = state.ensure(other).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
    }

    #[test]
    fn every_variable_points_into_the_directory() {
        let vars = ReplState::variables(Path::new("/s/x"));
        assert_eq!(vars.len(), REPL_STATE_VARS.len());
        assert_eq!(vars[0], ("IPYTHONDIR", PathBuf::from("/s/x/ipython")));
        assert!(
            vars.iter()
                .all(|(_, p)| p.parent() == Some(Path::new("/s/x")))
        );
    }
}
