//! Finding a query's project root, and where the server started there may
//! write. The search reads files an agent controls (each ancestor's root
//! markers, a Cargo manifest): it reads them by the queried file's rules
//! ([`text::read_capped`]: non-blocking open, regular files only, a size
//! cap, the query's read policy), and it runs off the async workers with
//! a deadline, so a FIFO, a device or a file system that does not answer
//! holds one query, never the host.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_seam::{LspError, ReadAccess, SandboxTag, UnavailableReason, Workspace};

use super::StdioLspProvider;
use crate::config::{RootStrategy, ServerConfig};
use crate::text;

/// How long the search for a project root (and the choice of the server
/// to start there) may take before the query fails.
const SEARCH_DEADLINE: Duration = Duration::from_secs(10);

/// The largest manifest read to tell a Cargo workspace's root.
const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// A server's identity in a provider: the project root it serves, the
/// directory it may write (see [`writable_within`]) and the sandbox it
/// runs in. Sessions whose workspaces bound the same root differently, or
/// whose sandboxes differ, get servers of their own.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct ServerKey {
    /// The project root (the server's working directory and workspace).
    pub root: PathBuf,
    /// The directory the server's sandbox lets it write.
    pub writable: PathBuf,
    /// The asking session's sandbox (empty: the host's own).
    pub sandbox: SandboxTag,
}

impl ServerKey {
    /// The key of the server for `root` asked for by a session of
    /// `workspace`.
    pub fn new(root: PathBuf, workspace: &Workspace) -> ServerKey {
        let writable = writable_within(&root, workspace);
        let sandbox = match workspace {
            Workspace::Unbounded => SandboxTag::default(),
            Workspace::Session { sandbox, .. } => sandbox.clone(),
        };
        ServerKey {
            root,
            writable,
            sandbox,
        }
    }
}

/// Where a server for `root` may write when `workspace` asks for it: the
/// root when it lies inside the workspace (or nothing bounds it), else the
/// workspace. The root search may read above the session's workspace; it
/// never widens what is written.
pub(crate) fn writable_within(root: &Path, workspace: &Workspace) -> PathBuf {
    match workspace {
        Workspace::Unbounded => root.to_owned(),
        Workspace::Session { dir, .. } => {
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.clone());
            if root.starts_with(&dir) {
                root.to_owned()
            } else {
                dir
            }
        }
    }
}

/// Whether `path` is a root marker: a regular file or a directory
/// (`.git`), symlinks followed. `stat` does not open the file, so a FIFO
/// cannot block it; a FIFO, socket or device is no marker.
pub(crate) fn is_marker(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() || m.is_dir())
}

/// Whether the manifest `path` declares a Cargo workspace, read by the
/// queried file's rules; one that cannot be read so (refused, not a
/// regular file, too big, not UTF-8) declares none.
fn declares_workspace(path: &Path, access: &ReadAccess) -> bool {
    text::read_capped(path, MAX_MANIFEST_BYTES, access)
        .is_ok_and(|t| t.lines().any(|l| l.trim_start().starts_with("[workspace]")))
}

/// The project root that serves `path` (a file or a directory) under
/// `config`'s markers; blocking.
pub(crate) fn find_root(
    config: &ServerConfig,
    path: &Path,
    access: &ReadAccess,
) -> Result<PathBuf, LspError> {
    let start = if path.is_dir() {
        path.to_owned()
    } else {
        path.parent().map(Path::to_owned).unwrap_or_default()
    };
    let has_marker = |dir: &Path| config.root_markers.iter().any(|m| is_marker(&dir.join(m)));
    let found = match config.root_strategy {
        RootStrategy::NearestMarker => start.ancestors().find(|d| has_marker(d)),
        RootStrategy::CargoWorkspace => {
            let manifests: Vec<&Path> = start.ancestors().filter(|d| has_marker(d)).collect();
            let is_workspace = |d: &&&Path| {
                config
                    .root_markers
                    .iter()
                    .any(|m| declares_workspace(&d.join(m), access))
            };
            manifests
                .iter()
                .rev()
                .find(is_workspace)
                .or(manifests.first())
                .copied()
        }
    };
    match found {
        Some(root) => Ok(root.to_owned()),
        None if config.require_root => Err(LspError::Unavailable {
            reason: UnavailableReason::NoProject,
            message: format!(
                "{}: no {} (a regular file) in {} or any parent directory{}",
                config.name,
                config.root_markers.join(" or "),
                start.display(),
                config
                    .no_project_hint
                    .as_ref()
                    .map(|h| format!("; {h}"))
                    .unwrap_or_default()
            ),
        }),
        None => Ok(start),
    }
}

/// Whether a root marker other than `.git` is in `dir` or above it;
/// blocking.
pub(crate) fn has_project_marker(config: &ServerConfig, dir: &Path) -> bool {
    dir.ancestors().any(|d| {
        config
            .root_markers
            .iter()
            .any(|m| m != ".git" && is_marker(&d.join(m)))
    })
}

impl StdioLspProvider {
    /// Runs `work` (file system work on an agent's files) off the async
    /// workers; `LSP_UNAVAILABLE` when it takes longer than the search
    /// deadline (the blocking thread is left to finish on its own).
    pub(super) async fn off_workers<T: Send + 'static>(
        &self,
        what: &str,
        at: &Path,
        work: impl FnOnce(Arc<ServerConfig>) -> Result<T, LspError> + Send + 'static,
    ) -> Result<T, LspError> {
        let config = self.config.clone();
        let task = tokio::task::spawn_blocking(move || work(config));
        let failed = |why: String| LspError::Unavailable {
            reason: UnavailableReason::NoProject,
            message: format!(
                "{}: {what} for {} {why}; check that the directory and its parents are on a \
                 file system that answers, then query again",
                self.config.name,
                at.display()
            ),
        };
        match tokio::time::timeout(SEARCH_DEADLINE, task).await {
            Ok(Ok(result)) => result,
            Ok(Err(e)) => Err(failed(format!("failed ({e})"))),
            Err(_) => Err(failed(format!(
                "did not finish within {} s",
                SEARCH_DEADLINE.as_secs()
            ))),
        }
    }

    /// The project root of `path`, searched off the async workers with a
    /// deadline.
    pub(super) async fn root_of(
        &self,
        path: &Path,
        access: &ReadAccess,
    ) -> Result<PathBuf, LspError> {
        let (at, access) = (path.to_owned(), access.clone());
        self.off_workers("the search for the project root", path, move |config| {
            find_root(&config, &at, &access)
        })
        .await
    }

    /// The configuration to start for `key` (the preset's choice for its
    /// root, its writes kept inside the writable directory), made off the
    /// async workers with a deadline.
    pub(super) async fn config_for(&self, key: &ServerKey) -> Result<Arc<ServerConfig>, LspError> {
        let owned = key.clone();
        self.off_workers("the choice of the server", &key.root, move |config| {
            Ok(Arc::new(
                config
                    .for_root(&owned.root)
                    .writing_within(&owned.root, &owned.writable),
            ))
        })
        .await
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn writes_stay_inside_the_session_workspace() {
        let tmp = tempfile::tempdir().unwrap();
        let mono = tmp.path().canonicalize().unwrap();
        let svc = mono.join("svc");
        std::fs::create_dir_all(&svc).unwrap();
        let session = |d: &Path| Workspace::Session {
            dir: d.to_owned(),
            sandbox: SandboxTag::default(),
        };
        assert_eq!(writable_within(&mono, &session(&svc)), svc);
        assert_eq!(writable_within(&svc, &session(&mono)), svc);
        assert_eq!(writable_within(&mono, &Workspace::Unbounded), mono);
        let elsewhere = mono.join("elsewhere");
        assert_eq!(writable_within(&elsewhere, &session(&svc)), svc);
    }

    #[test]
    fn special_files_are_no_markers_and_no_manifests() {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        let ws = top.join("ws");
        std::fs::create_dir_all(ws.join("src")).unwrap();
        let fifo =
            std::ffi::CString::new(ws.join("Cargo.toml").into_os_string().into_encoded_bytes())
                .unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        std::os::unix::fs::symlink("/dev/zero", top.join("Cargo.toml")).unwrap();
        let config = ServerConfig::preset("rust-analyzer").unwrap();
        let file = ws.join("src").join("lib.rs");
        let found = find_root(&config, &file, &ReadAccess::all());
        assert!(
            matches!(
                found,
                Err(LspError::Unavailable {
                    reason: UnavailableReason::NoProject,
                    ..
                })
            ),
            "{found:?}"
        );
        assert!(!has_project_marker(&config, &ws));
        // Neither a device nor a manifest over the cap is read whole.
        assert!(!declares_workspace(
            Path::new("/dev/zero"),
            &ReadAccess::all()
        ));
        let big = top.join("big.toml");
        let mut text = "[workspace]\n".to_owned();
        text.push_str(&"#".repeat(MAX_MANIFEST_BYTES as usize));
        std::fs::write(&big, text).unwrap();
        assert!(!declares_workspace(&big, &ReadAccess::all()));
        std::fs::write(&big, "[workspace]\n").unwrap();
        assert!(declares_workspace(&big, &ReadAccess::all()));
    }
}
