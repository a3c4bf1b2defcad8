//! The guard of git repositories: a confined process may not create,
//! inside the workspace, a directory entry named `.git` (any case) or
//! `HEAD`, nor, in a `.git` directory below the workspace's top (a
//! repository that was already there), a config file, `commondir`,
//! `gitdir` or a hook; nor move anything into the workspace from outside
//! it.
//!
//! A repository's config and hooks name programs that git runs
//! (`core.fsmonitor`, `core.hooksPath`, `diff.external`, `core.pager`, …),
//! and git finds a repository by walking up from where it runs: a
//! directory with a `.git` (directory, or file naming a git directory
//! anywhere) or one that is itself a git directory (a bare layout, which
//! git recognises by its `HEAD`). A repository a confined command planted
//! in the workspace would run its programs, unconfined, under the
//! person's next `git status` there. Landlock cannot refuse a name, so the
//! same seccomp listener that guards `connect` also receives every call
//! that makes a directory entry (`mkdir`, `open` with `O_CREAT`, `creat`,
//! `mknod`, `link`, `symlink`, `rename`, and their `*at` forms) and
//! refuses (`EPERM`) those naming `.git` or `HEAD` whose directory is in
//! the workspace or cannot be found. A `rename` into the workspace from
//! outside it answers `EXDEV`, so `mv` copies instead, entry by entry,
//! through the same check. `openat2` answers `ENOSYS` (its flags are in
//! memory the filter cannot read); callers fall back to `openat`.
//!
//! The check reads the name from the process's memory and lets the
//! kernel carry on (`SECCOMP_USER_NOTIF_FLAG_CONTINUE`); the kernel reads
//! the name again, so a second thread that rewrites it in between can get
//! one past the check. See docs/subsystems/sandbox.md.

use std::ffi::OsStr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the guard answers to one creating call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// Let the kernel carry on.
    Continue,
    /// Fail the call with this errno.
    Fail(i32),
}

/// The calls the filter hands to the guard: the system call number and,
/// for `open`-like calls, which argument holds the flags (only a call with
/// `O_CREAT` is handed over).
pub(crate) fn calls() -> Vec<(i64, Option<u32>)> {
    let mut calls = vec![
        (libc::SYS_openat, Some(2)),
        (libc::SYS_mkdirat, None),
        (libc::SYS_mknodat, None),
        (libc::SYS_linkat, None),
        (libc::SYS_symlinkat, None),
        (libc::SYS_renameat2, None),
    ];
    #[cfg(target_arch = "x86_64")]
    calls.extend([
        (libc::SYS_open, Some(1)),
        (libc::SYS_creat, None),
        (libc::SYS_mkdir, None),
        (libc::SYS_mknod, None),
        (libc::SYS_link, None),
        (libc::SYS_symlink, None),
        (libc::SYS_rename, None),
        (libc::SYS_renameat, None),
    ]);
    calls
}

/// A path argument of a call: the directory descriptor it is relative to
/// (`AT_FDCWD` for the working directory) and the address of its bytes.
struct PathArg {
    dirfd: i32,
    address: u64,
}

/// The paths a call creates (`new`) and, for a rename, the one it moves
/// (`old`).
fn path_args(nr: i64, args: &[u64; 6]) -> Option<(Option<PathArg>, PathArg)> {
    let at = |fd: u64, address: u64| PathArg {
        dirfd: fd as i32,
        address,
    };
    let cwd = |address: u64| at(libc::AT_FDCWD as u64, address);
    let found = match nr {
        n if n == libc::SYS_openat || n == libc::SYS_mkdirat || n == libc::SYS_mknodat => {
            (None, at(args[0], args[1]))
        }
        n if n == libc::SYS_linkat => (None, at(args[2], args[3])),
        n if n == libc::SYS_symlinkat => (None, at(args[1], args[2])),
        n if n == libc::SYS_renameat2 => (Some(at(args[0], args[1])), at(args[2], args[3])),
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_renameat => (Some(at(args[0], args[1])), at(args[2], args[3])),
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_open
            || n == libc::SYS_creat
            || n == libc::SYS_mkdir
            || n == libc::SYS_mknod =>
        {
            (None, cwd(args[0]))
        }
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_link || n == libc::SYS_symlink => (None, cwd(args[1])),
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_rename => (Some(cwd(args[0])), cwd(args[1])),
        _ => return None,
    };
    let _ = cwd;
    Some(found)
}

/// Whether `name` is one git takes for a repository: `.git` (in any case,
/// for case-folding file systems) or `HEAD`.
pub(crate) fn names_a_repository(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b".git") || name.eq_ignore_ascii_case(b"HEAD")
}

/// Whether `dir` is in a `.git` directory (any case) deeper below `root`
/// than its top.
fn in_a_nested_git_dir(dir: &Path, root: &Path) -> bool {
    dir.strip_prefix(root).is_ok_and(|below| {
        below
            .components()
            .skip(1)
            .any(|c| c.as_os_str().as_bytes().eq_ignore_ascii_case(b".git"))
    })
}

/// Whether entry `name` of directory `dir` is, in a `.git` directory
/// (any case) deeper below `root` than its top (the top one is mounted
/// read-only), one that can name a program git runs or a git directory
/// to take config from: a `config*` file (a worktree's too), `commondir`
/// or `gitdir`, or anything in `hooks/`. The objects, refs and index stay
/// writable, so agents still commit in a nested repository.
fn names_what_git_runs(dir: &Path, name: &[u8], root: &Path) -> bool {
    let Ok(below) = dir.strip_prefix(root) else {
        return false;
    };
    let parts: Vec<&[u8]> = below
        .components()
        .map(|c| c.as_os_str().as_bytes())
        .chain(std::iter::once(name))
        .collect();
    let Some(git) = parts
        .iter()
        .skip(1)
        .position(|p| p.eq_ignore_ascii_case(b".git"))
        .map(|i| i + 1)
    else {
        return false;
    };
    let inside = &parts[git + 1..];
    let lower = name.to_ascii_lowercase();
    inside
        .first()
        .is_some_and(|first| first.eq_ignore_ascii_case(b"hooks"))
        || (!inside.is_empty()
            && (lower.starts_with(b"config") || lower == b"commondir" || lower == b"gitdir"))
}

/// The last component of `path` and the directory before it.
fn split(path: &[u8]) -> (&[u8], &[u8]) {
    let mut end = path.len();
    while end > 1 && path[end - 1] == b'/' {
        end -= 1;
    }
    let path = &path[..end];
    match path.iter().rposition(|&b| b == b'/') {
        Some(0) => (b"/", &path[1..]),
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (b".", path),
    }
}

/// The guard's verdict on call `nr` with `args`, for the thread whose
/// `/proc/TID` is `proc_dir`; `roots` are the workspace roots it protects.
pub(crate) fn judge(
    pid: i32,
    proc_dir: &OwnedFd,
    nr: i64,
    args: &[u64; 6],
    roots: &[PathBuf],
    read: impl Fn(u64) -> Option<Vec<u8>>,
) -> Answer {
    if nr == libc::SYS_openat2 {
        return Answer::Fail(libc::ENOSYS);
    }
    let Some((old, new)) = path_args(nr, args) else {
        return Answer::Continue;
    };
    let _ = pid;
    let Some(new_path) = read(new.address) else {
        return Answer::Fail(libc::EFAULT);
    };
    let (new_dir, new_name) = split(&new_path);
    let new_resolved = match directory(proc_dir, new.dirfd, new_dir) {
        // The kernel would answer the same: nothing is created.
        Err(errno @ (libc::ENOENT | libc::ENOTDIR)) => return Answer::Fail(errno),
        found => found.ok(),
    };
    let new_inside = new_resolved
        .as_ref()
        .map(|d| roots.iter().any(|r| d.starts_with(r)));
    // A `HEAD` in a nested repository's `.git` (a checkout, the reflog's
    // `logs/HEAD`) names a ref, not a program: no config can be made
    // beside it (below).
    let in_nested_git = new_resolved
        .as_ref()
        .is_some_and(|d| roots.iter().any(|r| in_a_nested_git_dir(d, r)));
    if names_a_repository(new_name)
        && new_inside != Some(false)
        && !(in_nested_git && new_name.eq_ignore_ascii_case(b"HEAD"))
    {
        return Answer::Fail(libc::EPERM);
    }
    // In a repository that was already there (a nested one, a vendored
    // one), what names programs git runs is made by creating files
    // (`config.lock` renamed over `config`, a hook, `>>`, `sed -i`), so
    // none of those is created in a `.git` below the workspace.
    if new_resolved
        .as_ref()
        .is_some_and(|d| roots.iter().any(|r| names_what_git_runs(d, new_name, r)))
    {
        return Answer::Fail(libc::EPERM);
    }
    if let Some(old) = old {
        let Some(old_path) = read(old.address) else {
            return Answer::Fail(libc::EFAULT);
        };
        let (old_dir, old_name) = split(&old_path);
        let old_inside = match directory(proc_dir, old.dirfd, old_dir) {
            Err(errno @ (libc::ENOENT | libc::ENOTDIR)) => return Answer::Fail(errno),
            found => found.ok().map(|d| roots.iter().any(|r| d.starts_with(r))),
        };
        let exchange = nr == libc::SYS_renameat2 && args[4] & u64::from(libc::RENAME_EXCHANGE) != 0;
        if exchange && names_a_repository(old_name) && old_inside != Some(false) {
            return Answer::Fail(libc::EPERM);
        }
        // Into the workspace from outside (either way for an exchange):
        // `mv` then copies, entry by entry, through this check.
        if (new_inside != Some(false) && old_inside != Some(true))
            || (exchange && old_inside != Some(false) && new_inside != Some(true))
        {
            return Answer::Fail(libc::EXDEV);
        }
    }
    Answer::Continue
}

/// The directory `dir` (relative to descriptor `dirfd` of the thread, or
/// its working directory) as the thread sees it, symbolic links resolved;
/// the errno when it cannot be found (`ENOENT`, `ENOTDIR`: it does not
/// exist).
fn directory(proc_dir: &OwnedFd, dirfd: i32, dir: &[u8]) -> Result<PathBuf, i32> {
    let dir = Path::new(OsStr::from_bytes(dir));
    let full = if dir.is_absolute() || dirfd == libc::AT_FDCWD {
        dir.to_path_buf()
    } else {
        let base = std::fs::read_link(format!("/proc/self/fd/{}/fd/{dirfd}", proc_dir.as_raw_fd()))
            .map_err(|_| libc::EBADF)?;
        if !base.is_absolute() {
            return Err(libc::EBADF);
        }
        base.join(dir)
    };
    let pinned = crate::connect_guard::open_as(proc_dir, &full)?;
    std::fs::read_link(format!("/proc/self/fd/{}", pinned.as_raw_fd())).map_err(|_| libc::EACCES)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_component_is_what_is_created() {
        assert_eq!(split(b"a/b/.git"), (&b"a/b"[..], &b".git"[..]));
        assert_eq!(split(b".git/"), (&b"."[..], &b".git"[..]));
        assert_eq!(split(b"/x"), (&b"/"[..], &b"x"[..]));
        assert!(names_a_repository(b".GIT") && names_a_repository(b"HEAD"));
        assert!(!names_a_repository(b"config") && !names_a_repository(b".gitignore"));
        let root = Path::new("/ws");
        let runs =
            |dir: &str, name: &str| names_what_git_runs(Path::new(dir), name.as_bytes(), root);
        assert!(runs("/ws/vendor/lib/.git", "config.lock"));
        assert!(runs("/ws/vendor/lib/.git/hooks", "post-checkout"));
        assert!(runs("/ws/vendor/lib/.git", "hooks"));
        assert!(runs("/ws/a/.GIT/worktrees/x", "config.worktree"));
        assert!(runs("/ws/a/.git", "commondir"));
        assert!(!runs("/ws/vendor/lib/.git", "index.lock"));
        assert!(!runs("/ws/vendor/lib/.git/objects/ab", "tmp_obj_x"));
        assert!(!runs("/ws/vendor/lib", "config"));
        assert!(
            !runs("/ws/.git", "config.lock"),
            "the top one is mounted read-only"
        );
        assert!(!runs("/elsewhere/x/.git", "config"));
        assert!(in_a_nested_git_dir(Path::new("/ws/lib/.git/logs"), root));
        assert!(!in_a_nested_git_dir(Path::new("/ws/.git/logs"), root));
        assert!(!in_a_nested_git_dir(Path::new("/ws/lib"), root));
    }
}
