//! Path identity: realpath is the only uniqueness criterion.

use std::io::ErrorKind;
use std::path::{Component, Path, PathBuf};

use crate::WorkspaceError;

/// Resolves `path` with realpath (symlinks, `..`, trailing slashes) and requires a directory.
pub fn canonical_dir(path: &Path) -> Result<PathBuf, WorkspaceError> {
    let canonical = canonical_path(path)?;
    if !canonical.is_dir() {
        return Err(WorkspaceError::NotADirectory { path: canonical });
    }
    Ok(canonical)
}

/// Resolves `path` with realpath, mapping a missing path to `PATH_NOT_FOUND`.
pub(crate) fn canonical_path(path: &Path) -> Result<PathBuf, WorkspaceError> {
    std::fs::canonicalize(path).map_err(|source| {
        if source.kind() == ErrorKind::NotFound {
            WorkspaceError::PathNotFound {
                path: path.to_owned(),
                source,
            }
        } else {
            WorkspaceError::PathUnresolvable {
                path: path.to_owned(),
                source,
            }
        }
    })
}

/// Normalizes an absolute path without touching the file system (`.` dropped, `..` applied).
pub fn lexical_normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Prefix(p) => out.push(p.as_os_str()),
            Component::RootDir => out.push("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(part) => out.push(part),
        }
    }
    out
}

/// The canonical cwd a header counts under for membership: its realpath, or,
/// while the directory is missing, its lexical normal form. `None` for a
/// missing or relative cwd (an invalid value).
pub(crate) fn header_canonical_cwd(cwd: Option<&Path>) -> Option<PathBuf> {
    let cwd = cwd?;
    if !cwd.is_absolute() {
        return None;
    }
    match std::fs::canonicalize(cwd) {
        Ok(p) => Some(p),
        Err(_) => Some(lexical_normalize(cwd)),
    }
}

/// The default title: the last component of the canonical path (or the path itself for `/`).
pub(crate) fn default_title(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.to_string_lossy().into_owned())
}
