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
//! Opens for writing are handed over too (`O_WRONLY`, `O_RDWR`,
//! `O_TRUNC`): a config or hook of a nested repository is not opened for
//! writing, with or without `O_CREAT` (Python's `r+`), nor hard-linked
//! elsewhere to be written there. A symbolic link made in the workspace
//! may not lead out of it into a place the sandbox may write (the temp
//! dir, a cache) or through `/proc`: a person who `cd`s through it would
//! run git in a repository made there.
//!
//! No call is let through to the kernel after the check
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` would have it read the path again,
//! from memory a second thread may rewrite): [`plan`] copies the bytes
//! once, resolves the path itself and checks what it found, and
//! [`crate::emulate`] makes that very entry. See
//! docs/subsystems/sandbox.md.

use std::ffi::{CString, OsStr};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use crate::connect_guard::GuardPolicy;
use crate::emulate::{Found, Last, LinkSource, Op, Walker};

/// What the guard does with one creating call.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Fail the call with this errno.
    Fail(i32),
    /// Make the call for the process ([`crate::emulate`]), with its umask.
    Make { umask: u32, op: Op },
    /// Let the kernel make the call: only a single-threaded session
    /// leader with no controlling terminal opening an existing terminal
    /// without `O_NOCTTY`, which takes that terminal as its controlling
    /// one only if the kernel opens it in its own context (screen's
    /// windows do). See docs/subsystems/sandbox.md, *Limits*.
    Continue,
}

/// The open flags that hand an `open`/`openat` to the guard: one that
/// may create an entry, or write (a nested repository's config is
/// refused to writers too).
pub(crate) const OPEN_FLAGS_GUARDED: u32 =
    (libc::O_CREAT | libc::O_WRONLY | libc::O_RDWR | libc::O_TRUNC) as u32;

/// The calls the filter hands to the guard: the system call number and,
/// for `open`-like calls, which argument holds the flags (only a call with
/// one of [`OPEN_FLAGS_GUARDED`] is handed over).
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
#[derive(Debug, Clone, Copy)]
struct PathArg {
    dirfd: i32,
    address: u64,
}

/// One guarded call, its arguments sorted out.
#[derive(Debug, Clone, Copy)]
enum Call {
    Open {
        at: PathArg,
        flags: i32,
        mode: u32,
    },
    Mkdir {
        at: PathArg,
        mode: u32,
    },
    Mknod {
        at: PathArg,
        mode: u32,
        dev: u64,
    },
    Symlink {
        target: u64,
        at: PathArg,
    },
    Link {
        old: PathArg,
        at: PathArg,
        flags: i32,
    },
    Rename {
        old: PathArg,
        at: PathArg,
        flags: u32,
    },
}

fn decode(nr: i64, args: &[u64; 6]) -> Option<Call> {
    let at = |fd: u64, address: u64| PathArg {
        dirfd: fd as i32,
        address,
    };
    #[cfg(target_arch = "x86_64")]
    let cwd = |address: u64| at(libc::AT_FDCWD as u64, address);
    let call = match nr {
        n if n == libc::SYS_openat => Call::Open {
            at: at(args[0], args[1]),
            flags: args[2] as i32,
            mode: args[3] as u32,
        },
        n if n == libc::SYS_mkdirat => Call::Mkdir {
            at: at(args[0], args[1]),
            mode: args[2] as u32,
        },
        n if n == libc::SYS_mknodat => Call::Mknod {
            at: at(args[0], args[1]),
            mode: args[2] as u32,
            dev: args[3],
        },
        n if n == libc::SYS_linkat => Call::Link {
            old: at(args[0], args[1]),
            at: at(args[2], args[3]),
            flags: args[4] as i32,
        },
        n if n == libc::SYS_symlinkat => Call::Symlink {
            target: args[0],
            at: at(args[1], args[2]),
        },
        n if n == libc::SYS_renameat2 => Call::Rename {
            old: at(args[0], args[1]),
            at: at(args[2], args[3]),
            flags: args[4] as u32,
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_renameat => Call::Rename {
            old: at(args[0], args[1]),
            at: at(args[2], args[3]),
            flags: 0,
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_open => Call::Open {
            at: cwd(args[0]),
            flags: args[1] as i32,
            mode: args[2] as u32,
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_creat => Call::Open {
            at: cwd(args[0]),
            flags: libc::O_CREAT | libc::O_WRONLY | libc::O_TRUNC,
            mode: args[1] as u32,
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_mkdir => Call::Mkdir {
            at: cwd(args[0]),
            mode: args[1] as u32,
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_mknod => Call::Mknod {
            at: cwd(args[0]),
            mode: args[1] as u32,
            dev: args[2],
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_link => Call::Link {
            old: cwd(args[0]),
            at: cwd(args[1]),
            flags: 0,
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_symlink => Call::Symlink {
            target: args[0],
            at: cwd(args[1]),
        },
        #[cfg(target_arch = "x86_64")]
        n if n == libc::SYS_rename => Call::Rename {
            old: cwd(args[0]),
            at: cwd(args[1]),
            flags: 0,
        },
        _ => return None,
    };
    Some(call)
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
/// to take config from: a `config*` file (a worktree's, a submodule's
/// too), `commondir` or `gitdir`, or anything in a `hooks/` at any depth. The objects, refs and index stay
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
    // A hooks directory at any depth: a submodule's git directory is
    // `.git/modules/NAME/`, with hooks of its own.
    inside
        .iter()
        .any(|part| part.eq_ignore_ascii_case(b"hooks"))
        || (!inside.is_empty()
            && (lower.starts_with(b"config") || lower == b"commondir" || lower == b"gitdir"))
}

/// What the guard takes from the thread that asked: its `/proc/TID`, a
/// reader of its memory and a borrower of its descriptors.
pub(crate) struct Asker<'a> {
    /// The thread's id, as this process sees it.
    pub(crate) tid: i32,
    pub(crate) proc_dir: &'a OwnedFd,
    pub(crate) read: &'a dyn Fn(u64) -> Option<Vec<u8>>,
    pub(crate) borrow: &'a dyn Fn(i32) -> Result<OwnedFd, i32>,
}

/// The guard's plan for call `nr` with `args`: everything it reads from
/// the process (the path's bytes, the directories it is relative to) is
/// read here, once, and what it makes is made from those copies.
pub(crate) fn plan(asker: &Asker<'_>, nr: i64, args: &[u64; 6], policy: &GuardPolicy) -> Plan {
    if nr == libc::SYS_openat2 {
        return Plan::Fail(libc::ENOSYS);
    }
    let Some(call) = decode(nr, args) else {
        return Plan::Fail(libc::ENOSYS);
    };
    let Some(umask) = crate::emulate::thread_umask(asker.proc_dir) else {
        return Plan::Fail(libc::EPERM);
    };
    let root = crate::emulate::open_path(asker.proc_dir, b"root", libc::O_DIRECTORY);
    let (Ok(root), Ok(proc_self)) = (root, asker.proc_dir.try_clone()) else {
        return Plan::Fail(libc::EPERM);
    };
    let walker = Walker {
        root,
        proc_self,
        tid: asker.tid,
        through_proc: std::cell::Cell::new(false),
    };
    let judge = Judge {
        asker,
        walker: &walker,
        policy,
    };
    match judge.op(call) {
        Ok(Op::TakeTerminal) => Plan::Continue,
        Ok(op) => Plan::Make { umask, op },
        Err(errno) => Plan::Fail(errno),
    }
}

/// The checks of one call.
struct Judge<'a> {
    asker: &'a Asker<'a>,
    walker: &'a Walker,
    policy: &'a GuardPolicy,
}

impl Judge<'_> {
    /// The bytes of a path argument and the directory it starts from.
    fn take(&self, at: PathArg) -> Result<(Vec<u8>, OwnedFd), i32> {
        let path = (self.asker.read)(at.address).ok_or(libc::EFAULT)?;
        let start = if path.first() == Some(&b'/') {
            self.walker
                .root
                .try_clone()
                .map_err(|e| e.raw_os_error().unwrap_or(libc::EMFILE))?
        } else if at.dirfd == libc::AT_FDCWD {
            crate::emulate::open_path(self.asker.proc_dir, b"cwd", libc::O_DIRECTORY)
                .map_err(|_| libc::ENOENT)?
        } else {
            (self.asker.borrow)(at.dirfd)?
        };
        Ok((path, start))
    }

    /// The directory and the last name of a path whose last entry the
    /// call makes (not followed).
    fn entry(&self, at: PathArg) -> Result<(OwnedFd, CString), i32> {
        let (path, start) = self.take(at)?;
        match self.walker.resolve(&start, &path, Last::Keep)? {
            Found::Entry { parent, name } => Ok((parent, c_name(name)?)),
            Found::Missing { .. } | Found::Existing(_) => Err(libc::EINVAL),
        }
    }

    fn roots(&self) -> &[PathBuf] {
        &self.policy.git_roots
    }

    fn op(&self, call: Call) -> Result<Op, i32> {
        match call {
            Call::Open { at, flags, mode } => self.open(at, flags, mode),
            Call::Mkdir { at, mode } => {
                let (parent, name) = self.entry(at)?;
                self.may_make(&parent, name.as_bytes())?;
                Ok(Op::Mkdir { parent, name, mode })
            }
            Call::Mknod { at, mode, dev } => {
                let (parent, name) = self.entry(at)?;
                self.may_make(&parent, name.as_bytes())?;
                Ok(Op::Mknod {
                    parent,
                    name,
                    mode,
                    dev,
                })
            }
            Call::Symlink { target, at } => {
                let target = (self.asker.read)(target).ok_or(libc::EFAULT)?;
                let (parent, name) = self.entry(at)?;
                self.may_make(&parent, name.as_bytes())?;
                self.may_point(&parent, &target)?;
                Ok(Op::Symlink {
                    target: c_name(target)?,
                    parent,
                    name,
                })
            }
            Call::Link { old, at, flags } => self.link(old, at, flags),
            Call::Rename { old, at, flags } => self.rename(old, at, flags),
        }
    }

    fn open(&self, at: PathArg, flags: i32, mode: u32) -> Result<Op, i32> {
        // `O_PATH` keeps only these flags: it creates and writes nothing.
        let flags = if flags & libc::O_PATH != 0 {
            flags & (libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        } else {
            flags
        };
        let (path, start) = self.take(at)?;
        let creates = flags & libc::O_CREAT != 0;
        let writes = flags & libc::O_ACCMODE != libc::O_RDONLY || flags & libc::O_TRUNC != 0;
        let last = if flags & libc::O_NOFOLLOW != 0 || (creates && flags & libc::O_EXCL != 0) {
            Last::NoFollow
        } else {
            Last::Follow
        };
        match self.walker.resolve(&start, &path, last)? {
            Found::Missing { parent, name } => {
                if !creates {
                    return Err(libc::ENOENT);
                }
                if path.ends_with(b"/") {
                    return Err(libc::EISDIR);
                }
                self.may_make(&parent, &name)?;
                Ok(Op::Create {
                    parent,
                    name: c_name(name)?,
                    flags,
                    mode,
                })
            }
            Found::Existing(file) => {
                if creates && flags & libc::O_EXCL != 0 {
                    return Err(libc::EEXIST);
                }
                let kind = crate::emulate::file_kind(&file)?;
                if kind == libc::S_IFLNK && flags & libc::O_PATH == 0 {
                    return Err(libc::ELOOP);
                }
                if creates && kind == libc::S_IFDIR {
                    return Err(libc::EISDIR);
                }
                if path.ends_with(b"/") && kind != libc::S_IFDIR {
                    return Err(libc::ENOTDIR);
                }
                if !creates
                    && flags & libc::O_NOCTTY == 0
                    && crate::emulate::is_terminal_device(&file)
                    && crate::emulate::may_take_a_terminal(self.asker.proc_dir)
                {
                    return Ok(Op::TakeTerminal);
                }
                let file = if crate::emulate::is_dev_tty(&file) {
                    crate::emulate::controlling_terminal(self.asker.proc_dir, &self.walker.root)?
                } else {
                    file
                };
                if writes {
                    self.may_write(&file)?;
                }
                Ok(Op::Reopen { file, flags, mode })
            }
            Found::Entry { .. } => Err(libc::EINVAL),
        }
    }

    fn link(&self, old: PathArg, at: PathArg, flags: i32) -> Result<Op, i32> {
        let (old_path, old_start) = self.take(old)?;
        let source = if old_path.is_empty() && flags & libc::AT_EMPTY_PATH != 0 {
            LinkSource::File(old_start)
        } else if flags & libc::AT_SYMLINK_FOLLOW != 0 {
            match self.walker.resolve(&old_start, &old_path, Last::Follow)? {
                Found::Existing(file) => LinkSource::File(file),
                Found::Missing { .. } | Found::Entry { .. } => return Err(libc::ENOENT),
            }
        } else {
            match self.walker.resolve(&old_start, &old_path, Last::Keep)? {
                Found::Entry { parent, name } => LinkSource::Entry(parent, c_name(name)?),
                Found::Missing { .. } | Found::Existing(_) => return Err(libc::EINVAL),
            }
        };
        // What names a program git runs in a nested repository is not
        // linked elsewhere, where it could be written.
        let old_place = match &source {
            LinkSource::File(file) => crate::emulate::path_of(file),
            LinkSource::Entry(dir, name) => {
                crate::emulate::path_of(dir).map(|d| d.join(OsStr::from_bytes(name.as_bytes())))
            }
        };
        if old_place.as_deref().is_some_and(|p| self.runs_in_nested(p)) {
            return Err(libc::EPERM);
        }
        let (parent, name) = self.entry(at)?;
        self.may_make(&parent, name.as_bytes())?;
        // A hard link to a symbolic link is a symbolic link made here.
        let target = match &source {
            LinkSource::Entry(dir, old_name) => crate::emulate::link_target(dir, old_name),
            LinkSource::File(file) => crate::emulate::symlink_target(file),
        };
        if let Ok(target) = target {
            self.may_point(&parent, &target)?;
        }
        Ok(Op::Link {
            old: source,
            parent,
            name,
        })
    }

    fn rename(&self, old: PathArg, at: PathArg, flags: u32) -> Result<Op, i32> {
        let (old_parent, old_name) = self.entry(old)?;
        let (parent, name) = self.entry(at)?;
        self.may_make(&parent, name.as_bytes())?;
        let new_inside = self.inside(&parent);
        let old_inside = self.inside(&old_parent);
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        if exchange {
            self.may_make(&old_parent, old_name.as_bytes())?;
        }
        // A symbolic link moved is judged where it lands: a relative
        // target means another place at another depth.
        if let Ok(target) = crate::emulate::link_target(&old_parent, &old_name) {
            self.may_point(&parent, &target)?;
        }
        if exchange && let Ok(target) = crate::emulate::link_target(&parent, &name) {
            self.may_point(&old_parent, &target)?;
        }
        // Into the workspace from outside (either way for an exchange):
        // `mv` then copies, entry by entry, through this check.
        if (new_inside != Some(false) && old_inside != Some(true))
            || (exchange && old_inside != Some(false) && new_inside != Some(true))
        {
            return Err(libc::EXDEV);
        }
        Ok(Op::Rename {
            old_parent,
            old_name,
            parent,
            name,
            flags,
        })
    }

    /// Whether directory `dir` is in the workspace (`None`: unknown).
    fn inside(&self, dir: &OwnedFd) -> Option<bool> {
        crate::emulate::path_of(dir).map(|d| self.roots().iter().any(|r| d.starts_with(r)))
    }

    /// Whether `path` (a file's) names a program git runs in a nested
    /// repository.
    fn runs_in_nested(&self, path: &Path) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        self.roots()
            .iter()
            .any(|r| names_what_git_runs(dir, name.as_bytes(), r))
    }

    /// Refuses making entry `name` in directory `parent` when it names a
    /// repository in the workspace (or where that cannot be told), or what
    /// git runs in a nested repository.
    fn may_make(&self, parent: &OwnedFd, name: &[u8]) -> Result<(), i32> {
        self.may_make_in(crate::emulate::path_of(parent), name)
    }

    /// [`Judge::may_make`] for directory `dir` (`None`: not known).
    fn may_make_in(&self, dir: Option<PathBuf>, name: &[u8]) -> Result<(), i32> {
        let inside = dir
            .as_ref()
            .map(|d| self.roots().iter().any(|r| d.starts_with(r)));
        // A `HEAD` in a nested repository's `.git` (a checkout, the
        // reflog's `logs/HEAD`) names a ref, not a program: no config can
        // be made beside it (below).
        let in_nested_git = dir
            .as_ref()
            .is_some_and(|d| self.roots().iter().any(|r| in_a_nested_git_dir(d, r)));
        if names_a_repository(name)
            && inside != Some(false)
            && !(in_nested_git && name.eq_ignore_ascii_case(b"HEAD"))
        {
            return Err(libc::EPERM);
        }
        // In a repository that was already there (a nested one, a vendored
        // one), what names programs git runs is made by creating files
        // (`config.lock` renamed over `config`, a hook, `>>`, `sed -i`), so
        // none of those is created in a `.git` below the workspace.
        if dir
            .as_ref()
            .is_some_and(|d| self.roots().iter().any(|r| names_what_git_runs(d, name, r)))
        {
            return Err(libc::EPERM);
        }
        Ok(())
    }

    /// Refuses opening for writing a file that names a program git runs in
    /// a nested repository (a config opened without `O_CREAT`: Python's
    /// `r+`), or one that names a repository (an existing `.git` file).
    fn may_write(&self, file: &OwnedFd) -> Result<(), i32> {
        let Some(path) = crate::emulate::path_of(file) else {
            return Ok(());
        };
        if self.runs_in_nested(&path) {
            return Err(libc::EPERM);
        }
        // Writing an entry that names a repository is making it anew (a
        // `.git` file pointed at another git directory).
        match (path.parent(), path.file_name()) {
            (Some(dir), Some(name)) => self.may_make_in(Some(dir.to_path_buf()), name.as_bytes()),
            _ => Ok(()),
        }
    }

    /// Refuses a symbolic link made in the workspace that leads out of it
    /// into a place the sandbox may write (the temp dir, a cache), or
    /// through `/proc`: a person who `cd`s through it would run git in a
    /// repository the sandbox made there.
    fn may_point(&self, parent: &OwnedFd, target: &[u8]) -> Result<(), i32> {
        let Some(base) = crate::emulate::path_of(parent) else {
            return Ok(());
        };
        if !self.roots().iter().any(|r| base.starts_with(r)) {
            return Ok(());
        }
        let lexical = lexical_join(&base, target);
        self.walker.through_proc.set(false);
        let resolved = match self.walker.resolve(parent, target, Last::Follow) {
            Ok(Found::Existing(file)) => crate::emulate::path_of(&file),
            Ok(Found::Missing { parent, name }) => {
                crate::emulate::path_of(&parent).map(|p| p.join(OsStr::from_bytes(&name)))
            }
            Ok(Found::Entry { .. }) | Err(_) => None,
        };
        if self.walker.through_proc.get() || lexical.starts_with("/proc") {
            return Err(libc::EPERM);
        }
        let escapes = |place: &Path| {
            !self.roots().iter().any(|r| place.starts_with(r))
                && self.policy.writable.iter().any(|w| place.starts_with(w))
        };
        if escapes(&lexical) || resolved.as_deref().is_some_and(escapes) {
            return Err(libc::EPERM);
        }
        Ok(())
    }
}

/// `target` read from directory `base`, `.` and `..` taken lexically.
fn lexical_join(base: &Path, target: &[u8]) -> PathBuf {
    let target = Path::new(OsStr::from_bytes(target));
    let joined = if target.is_absolute() {
        target.to_path_buf()
    } else {
        base.join(target)
    };
    let mut out = PathBuf::from("/");
    for component in joined.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(c) => out.push(c),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
    out
}

fn c_name(name: Vec<u8>) -> Result<CString, i32> {
    CString::new(name).map_err(|_| libc::EINVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_component_is_what_is_created() {
        assert_eq!(
            lexical_join(Path::new("/ws/a"), b"../../tmp/./r"),
            PathBuf::from("/tmp/r")
        );
        assert_eq!(
            lexical_join(Path::new("/ws"), b"/usr/bin"),
            PathBuf::from("/usr/bin")
        );
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
