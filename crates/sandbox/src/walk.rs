//! Turning "this tree, except these holes" into Landlock rules.
//!
//! Landlock is an allow-list whose rules cover whole hierarchies: it cannot
//! say "all of `/` except `~/.ssh`". So a tree with holes is granted by
//! walking down towards each hole and granting every sibling on the way:
//! `/` is *partial* (each entry but `/root` granted), `/root` is partial
//! (each entry but `.ssh` granted), and so on. The partial directories
//! themselves get no rule, so an entry created in one of them after the
//! walk is not covered; their modification times are recorded as
//! [`Stamp`]s so a cached walk is redone when they change.

use std::fs::OpenOptions;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The identity and modification time of a path (not following a final
/// symlink), or `None` when it does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Stamp(Option<(u64, u64, i64, i64)>);

impl Stamp {
    /// Reads the stamp of `path` now.
    pub(crate) fn of(path: &Path) -> Self {
        Self(
            std::fs::symlink_metadata(path)
                .ok()
                .map(|m| (m.dev(), m.ino(), m.mtime(), m.mtime_nsec())),
        )
    }

    /// The file's device and inode, when it exists.
    pub(crate) fn identity(self) -> Option<(u64, u64)> {
        self.0.map(|(dev, ino, _, _)| (dev, ino))
    }

    /// Whether a change could hide behind this stamp: the file system's
    /// clock is coarse (one scheduler tick), so a change within the same
    /// tick as the last one leaves the time unchanged. A stamp whose time is
    /// less than [`RACY_WINDOW_NANOS`] before `taken_at` (nanoseconds since
    /// the epoch) cannot prove that nothing changed since.
    pub(crate) fn is_racy(self, taken_at: i128) -> bool {
        self.0.is_some_and(|(_, _, secs, nanos)| {
            i128::from(secs) * 1_000_000_000 + i128::from(nanos) >= taken_at - RACY_WINDOW_NANOS
        })
    }
}

/// How recent a modification must be to be distrusted (see
/// [`Stamp::is_racy`]): several ticks of the slowest kernel clock.
pub(crate) const RACY_WINDOW_NANOS: i128 = 50_000_000;

/// Now, in nanoseconds since the epoch (0 if the clock is before it).
pub(crate) fn now_nanos() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i128::try_from(d.as_nanos()).unwrap_or(i128::MAX))
}

/// One hierarchy (or file) to grant.
#[derive(Debug)]
pub(crate) struct Grant {
    /// Where it is.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) path: PathBuf,
    /// An `O_PATH` descriptor of it, for `landlock_add_rule`.
    pub(crate) fd: OwnedFd,
    /// Whether it is a directory (files take only file rights).
    pub(crate) is_dir: bool,
}

/// The result of granting trees with holes.
#[derive(Debug, Default)]
pub(crate) struct Walk {
    /// What to grant.
    pub(crate) grants: Vec<Grant>,
    /// The partial directories, stamped before they were listed.
    pub(crate) partial: Vec<(PathBuf, Stamp)>,
}

impl Walk {
    /// Grants `root` and everything beneath it except the `holes` (which
    /// must be canonical, like `root`).
    pub(crate) fn grant_except(&mut self, root: &Path, holes: &[PathBuf]) {
        if holes.iter().any(|h| root.starts_with(h)) {
            return;
        }
        let inner: Vec<PathBuf> = holes
            .iter()
            .filter(|h| h.starts_with(root))
            .cloned()
            .collect();
        if inner.is_empty() {
            if let Some(grant) = open_grant(root) {
                self.grants.push(grant);
            }
            return;
        }
        self.partial.push((root.to_path_buf(), Stamp::of(root)));
        let Ok(entries) = std::fs::read_dir(root) else {
            // Nothing beneath an unlistable directory is granted: stricter,
            // never looser.
            return;
        };
        for entry in entries.flatten() {
            // A symlink needs no rule: access through it is checked at its
            // target, which is granted (or not) on its own.
            if entry.file_type().is_ok_and(|t| t.is_symlink()) {
                continue;
            }
            self.grant_except(&entry.path(), &inner);
        }
    }
}

/// Opens `path` for a rule, without following a final symlink.
fn open_grant(path: &Path) -> Option<Grant> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    let meta = file.metadata().ok()?;
    if meta.file_type().is_symlink() {
        return None;
    }
    Some(Grant {
        path: path.to_path_buf(),
        is_dir: meta.is_dir(),
        fd: file.into(),
    })
}

/// Whether `path` is `root` or lies beneath it (by components).
pub(crate) fn is_within(path: &Path, root: &Path) -> bool {
    path.starts_with(root)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn grants_siblings_on_the_way_to_each_hole() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        for d in ["a/secret", "a/open", "b"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        std::fs::write(root.join("a/file"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("a/secret"), root.join("a/link")).unwrap();
        let mut walk = Walk::default();
        walk.grant_except(&root, &[root.join("a/secret")]);
        let mut granted: Vec<String> = walk
            .grants
            .iter()
            .map(|g| g.path.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        granted.sort();
        assert_eq!(granted, ["a/file", "a/open", "b"]);
        let partial: Vec<_> = walk.partial.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(partial, [root.clone(), root.join("a")]);
    }

    #[test]
    fn a_root_inside_a_hole_grants_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let mut walk = Walk::default();
        walk.grant_except(&root.join("x"), std::slice::from_ref(&root));
        assert!(walk.grants.is_empty() && walk.partial.is_empty());
    }

    /// Sets the modification time of `path` to `secs` after the epoch.
    fn set_mtime(path: &Path, secs: i64) {
        let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
        let t = libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        };
        // SAFETY: a valid C string and two valid timespecs.
        let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c.as_ptr(), [t, t].as_ptr(), 0) };
        assert_eq!(rc, 0);
    }

    #[test]
    fn stamps_change_when_an_entry_is_added_and_recent_ones_are_racy() {
        let dir = tempfile::tempdir().unwrap();
        set_mtime(dir.path(), 1_000_000_000);
        let before = Stamp::of(dir.path());
        assert!(before.identity().is_some());
        assert!(!before.is_racy(now_nanos()));
        std::fs::write(dir.path().join("new"), "").unwrap();
        let after = Stamp::of(dir.path());
        assert_ne!(before, after);
        assert!(after.is_racy(now_nanos()));
        assert!(Stamp::of(&dir.path().join("none")).identity().is_none());
        assert!(!Stamp::of(&dir.path().join("none")).is_racy(now_nanos()));
    }
}
