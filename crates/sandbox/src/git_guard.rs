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
//! elsewhere to be written there (nor is a `.git` file). A symbolic link
//! made in the workspace may not lead out of it into a place the sandbox
//! may write (the temp dir, a cache) or through `/proc`: a person who
//! `cd`s through it would run git in a repository made there. The worker
//! judges that as it makes the link, again for the links of a
//! directory moved to another parent ([`PlaceJudge::may_move`]), and
//! again for every link the sandbox made once a way out of the workspace
//! is made that may complete one's way ([`MadeLinks`]).
//!
//! A place is in the workspace by where it is in the workspace's file
//! system, not only by the path the kernel names: a bind mount of the
//! workspace elsewhere is the workspace ([`Places::dir_path`]). And once
//! an entry is made, the worker looks the guarded names up in its
//! directory: a file system that stores a name as another (vfat's
//! `.git.` as `.git`) has the entry undone
//! ([`PlaceJudge::is_a_guarded_name`]).
//!
//! No call is let through to the kernel after the check
//! (`SECCOMP_USER_NOTIF_FLAG_CONTINUE` would have it read the path again,
//! from memory a second thread may rewrite): [`plan`] copies the bytes
//! once, resolves the path itself and checks what it found, and
//! [`crate::emulate`] makes that very entry. See
//! docs/subsystems/sandbox.md.

use std::ffi::{CStr, CString, OsStr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use crate::connect_guard::GuardPolicy;
use crate::emulate::{Found, Last, LinkSource, Op, Walker};

/// What the guard does with one creating call.
#[derive(Debug)]
pub(crate) enum Plan {
    /// Fail the call with this errno.
    Fail(i32),
    /// Make the call for the process ([`crate::emulate`]), with its umask;
    /// the worker judges again what depends on the moment it is made
    /// ([`PlaceJudge`]).
    Make {
        umask: u32,
        op: Op,
        judge: Box<PlaceJudge>,
    },
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
    let name = plain(name);
    name.eq_ignore_ascii_case(b".git") || name.eq_ignore_ascii_case(b"HEAD")
}

/// `name` as a file system that drops trailing dots and spaces (vfat)
/// stores it: every name rule compares this, in any ASCII case.
fn plain(name: &[u8]) -> &[u8] {
    let kept = name
        .iter()
        .rposition(|&b| b != b'.' && b != b' ')
        .map_or(0, |i| i + 1);
    name.get(..kept).unwrap_or_default()
}

/// Whether `dir` is in a `.git` directory (any case) deeper below `root`
/// than its top.
fn in_a_nested_git_dir(dir: &Path, root: &Path) -> bool {
    dir.strip_prefix(root).is_ok_and(|below| {
        below
            .components()
            .skip(1)
            .any(|c| plain(c.as_os_str().as_bytes()).eq_ignore_ascii_case(b".git"))
    })
}

/// How many directories `dir` is below the first `.git` (any case) deeper
/// below `root` than its top; `None` when it is in none.
fn levels_below_nested_git(dir: &Path, root: &Path) -> Option<usize> {
    let below = dir.strip_prefix(root).ok()?;
    let parts: Vec<&[u8]> = below
        .components()
        .map(|c| plain(c.as_os_str().as_bytes()))
        .collect();
    let git = parts
        .iter()
        .skip(1)
        .position(|p| p.eq_ignore_ascii_case(b".git"))?
        + 1;
    Some(parts.len() - git - 1)
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
        .map(|c| plain(c.as_os_str().as_bytes()))
        .chain(std::iter::once(plain(name)))
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
    let lower = plain(name).to_ascii_lowercase();
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
pub(crate) fn plan(asker: &Asker<'_>, nr: i64, args: &[u64; 6], policy: &Arc<GuardPolicy>) -> Plan {
    if nr == libc::SYS_openat2 {
        return Plan::Fail(libc::ENOSYS);
    }
    let Some(call) = decode(nr, args) else {
        return Plan::Fail(libc::ENOSYS);
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
        last_parent: std::cell::Cell::new(None),
    };
    let judge = Judge {
        asker,
        places: Places {
            walker: &walker,
            policy,
        },
    };
    let verdict = judge.op(call);
    match verdict {
        Ok(Op::TakeTerminal) => Plan::Continue,
        // Read only for a call that is made (most refusals and the
        // terminal's answers need none).
        Ok(op) => match crate::emulate::thread_umask(asker.proc_dir) {
            Some(umask) => Plan::Make {
                umask,
                op,
                judge: Box::new(PlaceJudge {
                    walker,
                    policy: Arc::clone(policy),
                }),
            },
            None => Plan::Fail(libc::EPERM),
        },
        Err(errno) => Plan::Fail(errno),
    }
}

/// The checks of one call.
struct Judge<'a> {
    asker: &'a Asker<'a>,
    places: Places<'a>,
}

/// Where places are: the process's walker and the policy's roots.
struct Places<'a> {
    walker: &'a Walker,
    policy: &'a GuardPolicy,
}

impl Judge<'_> {
    /// The bytes of a path argument and the directory it starts from.
    fn take(&self, at: PathArg) -> Result<(Vec<u8>, OwnedFd), i32> {
        let path = (self.asker.read)(at.address).ok_or(libc::EFAULT)?;
        let start = if path.first() == Some(&b'/') {
            self.places
                .walker
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
        match self.places.walker.resolve(&start, &path, Last::Keep)? {
            Found::Entry { parent, name } => Ok((parent, c_name(name)?)),
            Found::Missing { .. } | Found::Existing(_) => Err(libc::EINVAL),
        }
    }

    fn op(&self, call: Call) -> Result<Op, i32> {
        match call {
            Call::Open { at, flags, mode } => self.open(at, flags, mode),
            Call::Mkdir { at, mode } => {
                let (parent, name) = self.entry(at)?;
                self.places.may_make(&parent, name.as_bytes())?;
                Ok(Op::Mkdir { parent, name, mode })
            }
            Call::Mknod { at, mode, dev } => {
                let (parent, name) = self.entry(at)?;
                self.places.may_make(&parent, name.as_bytes())?;
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
                self.places.may_make(&parent, name.as_bytes())?;
                // Where the link leads is judged by the worker as it makes
                // it: a directory above may be moved meanwhile.
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
        match self.places.walker.resolve(&start, &path, last)? {
            Found::Missing { parent, name } => {
                if !creates {
                    return Err(libc::ENOENT);
                }
                if path.ends_with(b"/") {
                    return Err(libc::EISDIR);
                }
                self.places.may_make(&parent, &name)?;
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
                // Another process's memory, or its own kept across a fork
                // (the continued open below depends on nobody else
                // writing it).
                if writes && crate::emulate::is_process_memory(&file) {
                    return Err(libc::EACCES);
                }
                // The kernel reads the path again: only from memory
                // nothing but the waiting thread can write. Otherwise the
                // terminal is opened here, without becoming the
                // controlling one.
                if !creates
                    && flags & libc::O_NOCTTY == 0
                    && crate::emulate::is_terminal_device(&file)
                    && crate::emulate::may_take_a_terminal(self.asker.proc_dir)
                    && crate::emulate::memory_is_its_own(
                        self.asker.proc_dir,
                        self.asker.tid,
                        at.address,
                        path.len() + 1,
                    )
                {
                    return Ok(Op::TakeTerminal);
                }
                let file = if crate::emulate::is_dev_tty(&file) {
                    crate::emulate::controlling_terminal(
                        self.asker.proc_dir,
                        &self.places.walker.root,
                    )?
                } else {
                    file
                };
                if writes {
                    let dir = self.places.walker.last_parent.take();
                    self.places.may_write(&file, dir)?;
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
            match self
                .places
                .walker
                .resolve(&old_start, &old_path, Last::Follow)?
            {
                Found::Existing(file) => LinkSource::File(file),
                Found::Missing { .. } | Found::Entry { .. } => return Err(libc::ENOENT),
            }
        } else {
            match self
                .places
                .walker
                .resolve(&old_start, &old_path, Last::Keep)?
            {
                Found::Entry { parent, name } => LinkSource::Entry(parent, c_name(name)?),
                Found::Missing { .. } | Found::Existing(_) => return Err(libc::EINVAL),
            }
        };
        // What names a program git runs in a nested repository, or names a
        // repository (a `.git` file, which says where its git directory
        // is), is not linked elsewhere, where it could be written.
        let old_place = match &source {
            LinkSource::File(file) => self.places.file_path(file),
            LinkSource::Entry(dir, name) => self
                .places
                .dir_path(dir)
                .map(|d| d.join(OsStr::from_bytes(name.as_bytes()))),
        };
        if let Some(old_place) = &old_place {
            if self.places.runs_in_nested(old_place) {
                return Err(libc::EPERM);
            }
            if let (Some(dir), Some(name)) = (old_place.parent(), old_place.file_name()) {
                self.places
                    .may_make_in(Some(dir.to_path_buf()), name.as_bytes())?;
            }
        }
        let (parent, name) = self.entry(at)?;
        self.places.may_make(&parent, name.as_bytes())?;
        // A hard link to a symbolic link is a symbolic link made here: the
        // worker judges where it leads as it makes it.
        Ok(Op::Link {
            old: source,
            parent,
            name,
        })
    }

    fn rename(&self, old: PathArg, at: PathArg, flags: u32) -> Result<Op, i32> {
        let (old_parent, old_name) = self.entry(old)?;
        let (parent, name) = self.entry(at)?;
        self.places.may_make(&parent, name.as_bytes())?;
        let new_inside = self.places.inside(&parent);
        let old_inside = self.places.inside(&old_parent);
        let exchange = flags & libc::RENAME_EXCHANGE != 0;
        if exchange {
            self.places.may_make(&old_parent, old_name.as_bytes())?;
        }
        // A symbolic link moved is judged where it lands (a relative
        // target means another place at another depth), and so are the
        // links in a directory moved: by the worker, just before it moves
        // them ([`PlaceJudge::may_move`]).
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
}

impl Places<'_> {
    fn roots(&self) -> &[PathBuf] {
        &self.policy.git_roots
    }

    fn in_roots(&self, path: &Path) -> bool {
        self.roots().iter().any(|r| path.starts_with(r))
    }

    /// Whether directory `dir` is in the workspace (`None`: unknown).
    fn inside(&self, dir: &OwnedFd) -> Option<bool> {
        self.dir_path(dir).map(|d| self.in_roots(&d))
    }

    /// The path of directory `dir` as the guard judges it (`None`: not
    /// known): the path the kernel names, or, when that is outside the
    /// workspace but `dir` is on a workspace root's device and in its
    /// file system below the root (a second view of the workspace, a bind
    /// mount of it, of a directory in it or above it), the root's path
    /// and the names below it.
    fn dir_path(&self, dir: &OwnedFd) -> Option<PathBuf> {
        let kernel = crate::emulate::path_of(dir)?;
        self.canonical_dir(dir, kernel)
    }

    fn canonical_dir(&self, dir: &OwnedFd, kernel: PathBuf) -> Option<PathBuf> {
        if self.in_roots(&kernel) {
            return Some(kernel);
        }
        let Some((dev, _)) = identity(dir) else {
            return Some(kernel);
        };
        if !self.on_a_roots_device(dev) {
            return Some(kernel);
        }
        if let Some(mapped) = self.through_the_mount(dir, dev, &kernel) {
            return Some(mapped);
        }
        let found = self.root_above(dir, &kernel)?;
        // Moved meanwhile: the names below the root may not be these.
        if crate::emulate::path_of(dir).as_ref() != Some(&kernel) {
            return None;
        }
        Some(found.unwrap_or(kernel))
    }

    /// The path of file `file` (any kind) as the guard judges it, as
    /// [`Places::dir_path`]; for a file that is not a directory, its
    /// directory is found again by the kernel's path (from the process's
    /// root) and must hold it.
    fn file_path(&self, file: &OwnedFd) -> Option<PathBuf> {
        let kernel = crate::emulate::path_of(file)?;
        self.canonical_file(file, kernel)
    }

    fn canonical_file(&self, file: &OwnedFd, kernel: PathBuf) -> Option<PathBuf> {
        if self.in_roots(&kernel) {
            return Some(kernel);
        }
        let Some((dev, _)) = identity(file) else {
            return Some(kernel);
        };
        if !self.on_a_roots_device(dev) {
            return Some(kernel);
        }
        if let Some(mapped) = self.through_the_mount(file, dev, &kernel) {
            return Some(mapped);
        }
        if crate::emulate::file_kind(file).ok()? == libc::S_IFDIR {
            return self.canonical_dir(file, kernel);
        }
        let (dir, name) = (kernel.parent()?, kernel.file_name()?);
        let walked =
            self.walker
                .resolve(&self.walker.root, dir.as_os_str().as_bytes(), Last::Follow);
        let Ok(Found::Existing(dir_fd)) = walked else {
            return None;
        };
        let entry = crate::emulate::open_path(&dir_fd, name.as_bytes(), libc::O_NOFOLLOW).ok()?;
        if identity(&entry)? != identity(file)? {
            return None;
        }
        self.canonical_dir(&dir_fd, dir.to_path_buf())
            .map(|d| d.join(name))
    }

    fn on_a_roots_device(&self, dev: u64) -> bool {
        self.policy
            .git_root_ids
            .iter()
            .any(|id| id.is_some_and(|(d, _)| d == dev))
    }

    /// `kernel`, the path of `fd` (on device `dev`), taken through the
    /// root of the mount it is on: the root's path in the file system
    /// and the names below it; if that is a workspace root's place in the
    /// same file system or below it, the root's path and the names below
    /// that, else `kernel`. `None` when the mount is not known (no unique
    /// mount id, or not listed): then the caller walks up.
    fn through_the_mount(&self, fd: &OwnedFd, dev: u64, kernel: &Path) -> Option<PathBuf> {
        let view = self.mount_view(fd)?;
        let in_file_system = view.root.join(kernel.strip_prefix(&view.at).ok()?);
        let roots = self.roots().iter().zip(&self.policy.git_root_ids);
        for ((root, id), place) in roots.zip(&self.policy.git_root_places) {
            if let (Some((root_dev, _)), Some(place)) = (id, place)
                && *root_dev == dev
                && let Ok(below) = in_file_system.strip_prefix(place)
            {
                return Some(root.join(below));
            }
        }
        Some(kernel.to_path_buf())
    }

    /// Where the mount `fd` is on shows its file system, remembered by
    /// the mount's unique id (Linux 6.8); read from the process's
    /// `/proc/TID/mountinfo` the first time.
    fn mount_view(&self, fd: &OwnedFd) -> Option<MountView> {
        let (mount, true) = mount_of(fd)? else {
            return None;
        };
        let memo = &self.policy.git_mounts;
        if let Some(view) = memo.views.lock().ok()?.get(&mount) {
            return Some(view.clone());
        }
        let listed = listed_mount_of(fd)?;
        let table = std::fs::read(format!(
            "/proc/self/fd/{}/mountinfo",
            self.walker.proc_self.as_raw_fd()
        ))
        .ok()?;
        let view = mount_line(&table, listed)?;
        if let Ok(mut views) = memo.views.lock() {
            if views.len() >= MOUNTS_REMEMBERED {
                views.clear();
            }
            views.insert(mount, view.clone());
        }
        Some(view)
    }

    /// Walks up from directory `dir` (its `..`, across mounts) looking for
    /// a workspace root by identity: `Some(Some(root + the last k names of
    /// kernel))` when the root is `dir`'s ancestor k levels up,
    /// `Some(None)` when none is; `None` when the walk does not fit
    /// `kernel` (moved meanwhile) or failed.
    fn root_above(&self, dir: &OwnedFd, kernel: &Path) -> Option<Option<PathBuf>> {
        let names: Vec<&OsStr> = kernel
            .components()
            .filter_map(|c| match c {
                Component::Normal(n) => Some(n),
                Component::Prefix(_)
                | Component::RootDir
                | Component::CurDir
                | Component::ParentDir => None,
            })
            .collect();
        let mut current = dir.try_clone().ok()?;
        let mut here = identity(&current)?;
        for depth in 0..=names.len() {
            if let Some(i) = self
                .policy
                .git_root_ids
                .iter()
                .position(|id| *id == Some(here))
            {
                let mut path = self.roots().get(i)?.clone();
                path.extend(names.get(names.len() - depth..)?);
                return Some(Some(path));
            }
            let up = crate::emulate::open_path(&current, b"..", libc::O_DIRECTORY).ok()?;
            let there = identity(&up)?;
            if there == here {
                return Some(None);
            }
            (current, here) = (up, there);
        }
        None
    }

    /// Whether the entry `made` (its device and inode) in `parent` is, by
    /// another spelling, a name the guard refuses there:
    /// a file system that changes names as it stores them (vfat drops
    /// trailing dots, a case-folding one folds more than ASCII) stored it
    /// under that name.
    fn is_a_guarded_name(&self, parent: &OwnedFd, made: (u64, u64)) -> bool {
        // Looked up first (most are missing): where the directory is is
        // asked only when one of them is the entry made.
        let aliases: Vec<&[u8]> = ALL_GUARDED_NAMES
            .into_iter()
            .filter(|name| identity_at(parent, name) == Some(made))
            .map(CStr::to_bytes)
            .collect();
        if aliases.is_empty() {
            return false;
        }
        let dir = self.dir_path(parent);
        if dir.as_ref().is_some_and(|d| !self.in_roots(d)) {
            return false;
        }
        let nested = dir
            .as_ref()
            .is_some_and(|d| self.roots().iter().any(|r| in_a_nested_git_dir(d, r)));
        let guarded: &[&[u8]] = if nested {
            &GUARDED_IN_NESTED_GIT
        } else {
            &GUARDED_NAMES
        };
        aliases.iter().any(|alias| guarded.contains(alias))
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
        let dir = self.dir_path(parent);
        if dir.as_deref().is_some_and(|d| self.in_hooks(parent, d)) {
            return Err(libc::EPERM);
        }
        self.may_make_in(dir, name)
    }

    /// Whether directory `dir`, at `path` in a nested `.git`, is its
    /// `hooks` directory or below it by identity: each directory from
    /// `dir` up to the `.git` is compared with the `hooks` entry of its
    /// parent (a case-folding file system finds `hooks` by another
    /// spelling, which the path then shows).
    fn in_hooks(&self, dir: &OwnedFd, path: &Path) -> bool {
        let Some(levels) = self
            .roots()
            .iter()
            .find_map(|r| levels_below_nested_git(path, r))
        else {
            return false;
        };
        let Ok(mut current) = dir.try_clone() else {
            return false;
        };
        for _ in 0..levels {
            let Ok(up) = crate::emulate::open_path(&current, b"..", libc::O_DIRECTORY) else {
                return false;
            };
            if identity(&current).is_some() && identity_at(&up, c"hooks") == identity(&current) {
                return true;
            }
            current = up;
        }
        false
    }

    /// [`Places::may_make`] for directory `dir` (`None`: not known).
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
            && !(in_nested_git && plain(name).eq_ignore_ascii_case(b"HEAD"))
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
    ///
    /// `dir`, the directory the file was found in by name, is looked at
    /// by identity too: a guarded name there that holds this very file
    /// (vfat opens `.git` for `.git.`), or a nested repository's `hooks`
    /// reached by another spelling.
    fn may_write(&self, file: &OwnedFd, dir: Option<OwnedFd>) -> Result<(), i32> {
        let Some(kernel) = crate::emulate::path_of(file) else {
            return Ok(());
        };
        // On a workspace's device, at a path that could not be told.
        let Some(path) = self.canonical_file(file, kernel) else {
            return Err(libc::EPERM);
        };
        if self.runs_in_nested(&path) {
            return Err(libc::EPERM);
        }
        if let Some(dir) = dir
            && (identity(file).is_some_and(|id| self.is_a_guarded_name(&dir, id))
                || path.parent().is_some_and(|p| self.in_hooks(&dir, p)))
        {
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
        self.may_point_also(parent, target, &[], &[])
    }

    /// [`Places::may_point`] for a remembered link another sandbox of the
    /// workspace made: its workspace roots `roots` count as the workspace
    /// too, and the places `also` it may write as writable.
    fn may_point_also(
        &self,
        parent: &OwnedFd,
        target: &[u8],
        roots: &[PathBuf],
        also: &[PathBuf],
    ) -> Result<(), i32> {
        let in_workspace =
            |path: &Path| self.in_roots(path) || roots.iter().any(|r| path.starts_with(r));
        let Some(base) = self.dir_path(parent) else {
            return Ok(());
        };
        if !in_workspace(&base) {
            return Ok(());
        }
        let lexical = lexical_join(&base, target);
        self.walker.through_proc.set(false);
        let found = self.walker.resolve(parent, target, Last::Follow);
        if self.walker.through_proc.get() || lexical.starts_with("/proc") {
            return Err(libc::EPERM);
        }
        let resolved = match found {
            Ok(Found::Existing(file)) => self.file_path(&file),
            Ok(Found::Missing { parent, name }) => self
                .dir_path(&parent)
                .map(|p| p.join(OsStr::from_bytes(&name))),
            Ok(Found::Entry { .. }) | Err(_) => None,
        };
        let escapes = |place: &Path| {
            !in_workspace(place)
                && self
                    .policy
                    .writable
                    .iter()
                    .chain(also)
                    .any(|w| place.starts_with(w))
        };
        if escapes(&lexical) || resolved.as_deref().is_some_and(escapes) {
            return Err(libc::EPERM);
        }
        Ok(())
    }
}

/// What the worker judges as it makes a call, when the answer depends on
/// the moment: where a symbolic link leads (a directory above it may have
/// been moved since the supervisor looked), the links in a directory
/// moved, and whether the entry made is a guarded name by another
/// spelling. The worker makes every guarded call of a sandbox, one at a
/// time, so none of them changes the tree while it judges.
pub(crate) struct PlaceJudge {
    walker: Walker,
    policy: Arc<GuardPolicy>,
}

/// Entries (of any kind) a directory moved within the workspace may hold
/// for its symbolic links to be judged before the move; a larger one is
/// refused with `EXDEV`, which `mv` answers by copying it entry by entry
/// (each link then judged as it is made).
pub(crate) const MAX_MOVED_ENTRIES: usize = 100_000;

/// The names looked up after an entry is made in a directory of the
/// workspace, and in a `.git` directory below its top.
const GUARDED_NAMES: [&[u8]; 2] = [b".git", b"HEAD"];
const GUARDED_IN_NESTED_GIT: [&[u8]; 6] = [
    b".git",
    b"config",
    b"config.worktree",
    b"commondir",
    b"gitdir",
    b"hooks",
];
const ALL_GUARDED_NAMES: [&CStr; 7] = [
    c".git",
    c"HEAD",
    c"config",
    c"config.worktree",
    c"commondir",
    c"gitdir",
    c"hooks",
];

impl std::fmt::Debug for PlaceJudge {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlaceJudge").finish_non_exhaustive()
    }
}

impl PlaceJudge {
    fn places(&self) -> Places<'_> {
        Places {
            walker: &self.walker,
            policy: &self.policy,
        }
    }

    /// Refuses a symbolic link with `target` in `parent` that leads out of
    /// the workspace into a place the sandbox may write (see
    /// [`Places::may_point`]).
    pub(crate) fn may_point(&self, parent: &OwnedFd, target: &[u8]) -> Result<(), i32> {
        self.places().may_point(parent, target)
    }

    /// Refuses moving entry `from_name` of `from_dir` to `to_name` in
    /// `to_dir` when it is a symbolic link that would lead out there, or a
    /// directory holding one: every link whose relative target leads out
    /// of the moved tree (taken lexically from its place in it) is judged
    /// as if made at its new place. A tree too large to walk
    /// ([`MAX_MOVED_ENTRIES`]), or one that cannot be read, is refused
    /// with `EXDEV` too: `mv` copies it instead.
    pub(crate) fn may_move(
        &self,
        from_dir: &OwnedFd,
        from_name: &CStr,
        to_dir: &OwnedFd,
        to_name: &CStr,
    ) -> Result<(), i32> {
        let places = self.places();
        if let Ok(target) = crate::emulate::link_target_of(from_dir, from_name.to_bytes()) {
            return places.may_point(to_dir, &target);
        }
        let top = match open_dir(from_dir, from_name.to_bytes()) {
            Ok(top) => top,
            // Not a directory, or gone: the kernel answers.
            Err(libc::ENOTDIR | libc::ELOOP | libc::ENOENT) => return Ok(()),
            Err(_) => return Err(libc::EXDEV),
        };
        // Within one directory, every link leads where it led.
        if identity(from_dir).is_some() && identity(from_dir) == identity(to_dir) {
            return Ok(());
        }
        if places.inside(to_dir) == Some(false) {
            return Ok(());
        }
        let mut count = 0usize;
        let mut pending: Vec<(OwnedFd, Vec<Vec<u8>>)> = vec![(top, Vec::new())];
        while let Some((dir, below)) = pending.pop() {
            for (name, kind) in read_dir(&dir).map_err(|_| libc::EXDEV)? {
                count += 1;
                if count > MAX_MOVED_ENTRIES {
                    return Err(libc::EXDEV);
                }
                let kind = match kind {
                    libc::DT_UNKNOWN => kind_at(&dir, &name).map_err(|_| libc::EXDEV)?,
                    kind => kind,
                };
                if kind == libc::DT_DIR {
                    let sub = open_dir(&dir, &name).map_err(|_| libc::EXDEV)?;
                    let mut deeper = below.clone();
                    deeper.push(name);
                    pending.push((sub, deeper));
                } else if kind == libc::DT_LNK {
                    let target =
                        crate::emulate::link_target_of(&dir, &name).map_err(|_| libc::EXDEV)?;
                    if target.first() == Some(&b'/') || !leads_out(below.len() + 1, &target) {
                        continue;
                    }
                    let from_new_parent = relative_from_parent(to_name.to_bytes(), &below, &target);
                    places
                        .may_point(to_dir, &from_new_parent)
                        .map_err(|_| libc::EXDEV)?;
                }
            }
        }
        Ok(())
    }

    /// Remembers the symbolic link `name` with `target` just made in
    /// `parent`, when `parent` is in the workspace.
    pub(crate) fn note_link(&self, parent: &OwnedFd, name: &CStr, target: &[u8]) {
        let places = self.places();
        let Some(dir) = places.dir_path(parent) else {
            return;
        };
        if !places.in_roots(&dir) {
            return;
        }
        let path = dir.join(OsStr::from_bytes(name.to_bytes()));
        let mut state = self.policy.git_links.state();
        if state.links.len() >= LINKS_REMEMBERED && !state.links.contains_key(&path) {
            state.overflow = true;
            return;
        }
        state.links.insert(
            path,
            MadeLink {
                target: target.to_vec(),
                writable: Arc::clone(&self.policy.writable),
                roots: Arc::clone(&self.policy.git_roots),
            },
        );
    }

    /// The links remembered under entry `from` of `from_dir` (or that
    /// are it) are now under `to` of `to_dir`: it was moved there (and,
    /// for an exchange, the other way too).
    pub(crate) fn links_moved(
        &self,
        (from_dir, from): (&OwnedFd, &CStr),
        (to_dir, to): (&OwnedFd, &CStr),
        exchange: bool,
    ) {
        let (Some(from), Some(to)) = (self.entry_path(from_dir, from), self.entry_path(to_dir, to))
        else {
            return;
        };
        let mut moves = vec![(from.clone(), to.clone())];
        if exchange {
            moves.push((to, from));
        }
        let mut state = self.policy.git_links.state();
        let moved: Vec<(PathBuf, PathBuf)> = moves
            .iter()
            .flat_map(|(from, to)| {
                state.under(from).map(move |(path, _, rest)| {
                    let new = if rest.is_empty() {
                        to.clone()
                    } else {
                        to.join(OsStr::from_bytes(rest))
                    };
                    (path.clone(), new)
                })
            })
            .collect();
        let mut targets: Vec<(PathBuf, MadeLink)> = moved
            .into_iter()
            .filter_map(|(old, new)| Some((new, state.links.remove(&old)?)))
            .collect();
        state.links.extend(targets.drain(..));
    }

    /// Whether a symbolic link with `target` in `parent` leads out of the
    /// workspace (by its text, or where it leads now): a way out that
    /// may complete another link's way.
    pub(crate) fn leads_out(&self, parent: &OwnedFd, target: &[u8]) -> bool {
        let places = self.places();
        let Some(base) = places.dir_path(parent) else {
            return true;
        };
        if !places.in_roots(&lexical_join(&base, target)) {
            return true;
        }
        let resolved = match self.walker.resolve(parent, target, Last::Follow) {
            Ok(Found::Existing(file)) => places.file_path(&file),
            Ok(Found::Missing { parent, name }) => places
                .dir_path(&parent)
                .map(|p| p.join(OsStr::from_bytes(&name))),
            Ok(Found::Entry { .. }) | Err(_) => None,
        };
        resolved.is_some_and(|r| !places.in_roots(&r))
    }

    /// Whether a remembered link under `dir`'s entry `name` (or that
    /// entry) leads out of the workspace: a directory moved with a way
    /// out in it.
    pub(crate) fn holds_a_way_out(&self, dir: &OwnedFd, name: &CStr) -> bool {
        let Some(under) = self.entry_path(dir, name) else {
            return true;
        };
        let links: Vec<(PathBuf, Vec<u8>)> = self
            .policy
            .git_links
            .state()
            .under(&under)
            .map(|(p, link, _)| (p.clone(), link.target.clone()))
            .collect();
        links.iter().any(|(path, target)| {
            self.parent_of(path)
                .is_none_or(|parent| self.leads_out(&parent, target))
        })
    }

    /// Whether a remembered link passes, by its text, through `dir`'s
    /// entry `name`: replacing that entry may change where it leads.
    pub(crate) fn a_link_passes_through(&self, dir: &OwnedFd, name: &CStr) -> bool {
        let Some(at) = self.entry_path(dir, name) else {
            return true;
        };
        self.policy
            .git_links
            .state()
            .links
            .iter()
            .any(|(path, link)| {
                path.parent()
                    .is_some_and(|p| lexical_join(p, &link.target).starts_with(&at))
            })
    }

    /// Judges every remembered link again (see [`Places::may_point`]),
    /// after a way out was made: `EPERM` when one now leads out into a
    /// place the sandbox may write, or when more links were made than
    /// are remembered. A link gone, or replaced, is forgotten.
    pub(crate) fn ways_out_hold(&self) -> Result<(), i32> {
        let links = {
            let state = self.policy.git_links.state();
            if state.overflow {
                return Err(libc::EPERM);
            }
            state
                .links
                .iter()
                .map(|(p, link)| (p.clone(), link.clone()))
                .collect::<Vec<_>>()
        };
        let mut gone = Vec::new();
        let mut verdict = Ok(());
        // The links of one directory are next to each other in path
        // order: its descriptor is opened once for them.
        let mut opened: Option<(&Path, Option<OwnedFd>)> = None;
        for (path, link) in &links {
            let target = &link.target;
            let dir = path.parent().unwrap_or(Path::new("/"));
            if opened.as_ref().is_none_or(|(d, _)| *d != dir) {
                opened = Some((dir, self.parent_of(path)));
            }
            let parent = opened.as_ref().and_then(|(_, fd)| fd.as_ref());
            let (Some(parent), Some(name)) = (parent, path.file_name()) else {
                gone.push(path.clone());
                continue;
            };
            match crate::emulate::link_target_of(parent, name.as_bytes()) {
                Ok(now) if now == *target => {}
                _ => {
                    gone.push(path.clone());
                    continue;
                }
            }
            // Out of the workspace of this sandbox or of the one that made
            // the link, into a place either may write.
            let also: &[PathBuf] = if Arc::ptr_eq(&link.writable, &self.policy.writable) {
                &[]
            } else {
                &link.writable
            };
            let roots: &[PathBuf] = if Arc::ptr_eq(&link.roots, &self.policy.git_roots) {
                &[]
            } else {
                &link.roots
            };
            if self
                .places()
                .may_point_also(parent, target, roots, also)
                .is_err()
            {
                verdict = Err(libc::EPERM);
                break;
            }
        }
        if !gone.is_empty() {
            let mut state = self.policy.git_links.state();
            for path in &gone {
                state.links.remove(path);
            }
        }
        verdict
    }

    /// The path of entry `name` of directory `dir`, as the guard judges
    /// it ([`Places::dir_path`]).
    fn entry_path(&self, dir: &OwnedFd, name: &CStr) -> Option<PathBuf> {
        self.places()
            .dir_path(dir)
            .map(|d| d.join(OsStr::from_bytes(name.to_bytes())))
    }

    /// The directory holding the link at `path`, opened (`O_PATH`) from
    /// the process's root.
    fn parent_of(&self, path: &Path) -> Option<OwnedFd> {
        let parent = path.parent()?;
        match self.walker.resolve(
            &self.walker.root,
            parent.as_os_str().as_bytes(),
            Last::Follow,
        ) {
            Ok(Found::Existing(dir)) => Some(dir),
            _ => None,
        }
    }

    /// The links remembered for the workspace, whose turn its worker
    /// takes for each call ([`MadeLinks::one_maker`]).
    pub(crate) fn made_links(&self) -> Arc<MadeLinks> {
        Arc::clone(&self.policy.git_links)
    }

    /// Whether the entry `made` (its device and inode) just made in
    /// `parent` is, by another spelling, a name the guard refuses there
    /// ([`Places::is_a_guarded_name`]).
    pub(crate) fn is_a_guarded_name(&self, parent: &OwnedFd, made: (u64, u64)) -> bool {
        self.places().is_a_guarded_name(parent, made)
    }
}

/// Symbolic links remembered ([`MadeLinks`]); past that, no way out of
/// the workspace may be made (none can be proven harmless).
const LINKS_REMEMBERED: usize = 65_536;

/// The symbolic links a sandbox made in the workspace (their paths and
/// targets), judged again whenever a way out of the workspace is made:
/// a link made while its way did not exist yet (`x -> up/tmp/repo` with
/// no `up`) is judged by where it leads once a second link (`up -> /`,
/// to a place the sandbox may not write, so allowed itself) opens the
/// way. The sandbox's worker makes every link of it, so it sees each.
///
/// Every sandbox of one workspace in this process shares one
/// ([`made_links_for`]): a second agent there, the same agent's command
/// after its preparation was made anew while an older one still runs, or
/// a language server whose root is a project in the workspace each has a
/// worker of its own, and a way out made by one may complete a
/// link another made. Their workers also make their calls one at a time
/// ([`MadeLinks::one_maker`]), so none makes a link in a tree another one
/// walks before moving it.
#[derive(Debug, Default)]
pub(crate) struct MadeLinks {
    state: std::sync::Mutex<MadeLinksState>,
    making: std::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct MadeLinksState {
    /// Each link's path (as the guard judges it), in path order: the
    /// links under a directory are one range.
    links: std::collections::BTreeMap<PathBuf, MadeLink>,
    /// More were made than are remembered.
    overflow: bool,
}

/// A remembered link: its target, and the workspace roots of the sandbox
/// that made it and what that sandbox may write (a way out judged later,
/// by another sandbox, must not lead out of either's workspace into a
/// place either may write).
#[derive(Debug, Clone)]
struct MadeLink {
    target: Vec<u8>,
    writable: Arc<[PathBuf]>,
    roots: Arc<[PathBuf]>,
}

impl MadeLinks {
    fn state(&self) -> std::sync::MutexGuard<'_, MadeLinksState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Held by a worker while it makes one call: the workers of the
    /// workspace's sandboxes take turns.
    pub(crate) fn one_maker(&self) -> std::sync::MutexGuard<'_, ()> {
        self.making.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// The links remembered for the workspace with `roots`, shared by every
/// sandbox of this process whose guarded roots overlap them (one holds
/// the other): an agent's, another agent's in the same workspace, and a
/// language server's, whose root is a project inside it. Sandboxes of
/// workspaces apart keep their own.
pub(crate) fn made_links_for(roots: &[PathBuf]) -> Arc<MadeLinks> {
    type Registry = Vec<(Vec<PathBuf>, std::sync::Weak<MadeLinks>)>;
    static REGISTRY: std::sync::Mutex<Registry> = std::sync::Mutex::new(Vec::new());
    let overlap = |theirs: &[PathBuf]| {
        roots
            .iter()
            .any(|a| theirs.iter().any(|b| a.starts_with(b) || b.starts_with(a)))
    };
    let mut registry = REGISTRY.lock().unwrap_or_else(|e| e.into_inner());
    registry.retain(|(_, links)| links.strong_count() > 0);
    let found = registry
        .iter()
        .filter(|(theirs, _)| overlap(theirs))
        .find_map(|(_, links)| links.upgrade());
    let links = found.unwrap_or_default();
    registry.push((roots.to_vec(), Arc::downgrade(&links)));
    links
}

impl MadeLinksState {
    /// The links at `dir` or below it: path, target, and the names
    /// below `dir`.
    fn under<'a>(
        &'a self,
        dir: &'a Path,
    ) -> impl Iterator<Item = (&'a PathBuf, &'a MadeLink, &'a [u8])> + 'a {
        self.links
            .range::<Path, _>((std::ops::Bound::Included(dir), std::ops::Bound::Unbounded))
            .take_while(move |(p, _)| p.starts_with(dir))
            .filter_map(move |(p, t)| Some((p, t, below(p, dir)?)))
    }
}

/// The names of `path` below `dir` (empty when it is `dir`), when it is
/// `dir` or below it: [`Path::starts_with`] on the bytes, which a guard
/// that looks at every remembered link on each move can afford.
fn below<'a>(path: &'a Path, dir: &Path) -> Option<&'a [u8]> {
    let (path, dir) = (path.as_os_str().as_bytes(), dir.as_os_str().as_bytes());
    let dir = dir.strip_suffix(b"/").unwrap_or(dir);
    match path.strip_prefix(dir)? {
        [] => Some(&[]),
        [b'/', rest @ ..] => Some(rest),
        _ => None,
    }
}

/// Mounts remembered ([`Mounts`]) before the memory starts afresh.
const MOUNTS_REMEMBERED: usize = 4096;

/// What the guard learnt of the mounts it met on a workspace root's
/// device, by unique id.
#[derive(Debug, Default)]
pub(crate) struct Mounts {
    views: std::sync::Mutex<std::collections::HashMap<u64, MountView>>,
}

/// Where a mount shows its file system: the path of its root in the file
/// system, and where it is mounted.
#[derive(Debug, Clone, PartialEq, Eq)]
struct MountView {
    root: PathBuf,
    at: PathBuf,
}

/// The line of mount `id` in a `mountinfo` table: its root (fourth
/// field) and mount point (fifth), unescaped.
fn mount_line(table: &[u8], id: u64) -> Option<MountView> {
    let id = id.to_string();
    table.split(|&b| b == b'\n').find_map(|line| {
        let mut fields = line.split(|&b| b == b' ');
        if fields.next()? != id.as_bytes() {
            return None;
        }
        let root = fields.nth(2)?;
        let at = fields.next()?;
        Some(MountView {
            root: PathBuf::from(OsStr::from_bytes(&unescape(root))),
            at: PathBuf::from(OsStr::from_bytes(&unescape(at))),
        })
    })
}

/// A `mountinfo` path with its octal escapes (`\040` for a space) undone.
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)))
            .map(|d| d.iter().fold(0u32, |n, c| n * 8 + u32::from(c - b'0')));
        match octal.and_then(|n| u8::try_from(n).ok()) {
            Some(byte) => {
                out.push(byte);
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    out
}

/// Each workspace root's place in its file system (as this process sees
/// it): the root of its mount and the names below the mount point.
pub(crate) fn places_in_file_system(roots: &[PathBuf]) -> Vec<Option<PathBuf>> {
    let table = std::fs::read("/proc/self/mountinfo").unwrap_or_default();
    roots
        .iter()
        .map(|root| {
            let real = std::fs::canonicalize(root).ok()?;
            let dir = OwnedFd::from(std::fs::File::open(&real).ok()?);
            let view = mount_line(&table, listed_mount_of(&dir)?)?;
            Some(view.root.join(real.strip_prefix(&view.at).ok()?))
        })
        .collect()
}

/// The mount id of `fd`, and whether it is the unique one (Linux 6.8),
/// never reused.
fn mount_of(fd: &OwnedFd) -> Option<(u64, bool)> {
    let (id, mask) = statx_mount(fd, libc::STATX_MNT_ID_UNIQUE | libc::STATX_MNT_ID)?;
    if mask & libc::STATX_MNT_ID_UNIQUE != 0 {
        Some((id, true))
    } else {
        (mask & libc::STATX_MNT_ID != 0).then_some((id, false))
    }
}

/// The mount id of `fd` that `/proc/PID/mountinfo` names (Linux 5.8).
fn listed_mount_of(fd: &OwnedFd) -> Option<u64> {
    let (id, mask) = statx_mount(fd, libc::STATX_MNT_ID)?;
    (mask & libc::STATX_MNT_ID != 0).then_some(id)
}

fn statx_mount(fd: &OwnedFd, mask: u32) -> Option<(u64, u32)> {
    // SAFETY: plain data.
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: statx of the descriptor itself into a struct on the stack.
    let rc = unsafe {
        libc::statx(
            fd.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH,
            mask,
            &raw mut stx,
        )
    };
    (rc == 0).then_some((stx.stx_mnt_id, stx.stx_mask))
}

/// The (device, inode) of each workspace root, in order (`None` for one
/// that cannot be read).
pub(crate) fn identities(roots: &[PathBuf]) -> Vec<Option<(u64, u64)>> {
    use std::os::unix::fs::MetadataExt as _;
    roots
        .iter()
        .map(|r| std::fs::metadata(r).ok().map(|m| (m.dev(), m.ino())))
        .collect()
}

/// The (device, inode) of `fd`.
pub(crate) fn identity(fd: &OwnedFd) -> Option<(u64, u64)> {
    // SAFETY: plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstat into a stat on the stack (works on `O_PATH`).
    let rc = unsafe { libc::fstat(fd.as_raw_fd(), &raw mut st) };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// The (device, inode) of entry `name` of `dir`, not followed.
pub(crate) fn identity_at(dir: &OwnedFd, name: &CStr) -> Option<(u64, u64)> {
    // SAFETY: plain data.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: fstatat of a NUL-terminated name in a descriptor we own
    // into a stat on the stack.
    let rc = unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &raw mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    (rc == 0).then_some((st.st_dev, st.st_ino))
}

/// Opens directory `name` of `dir` for reading its entries, without
/// following a link.
fn open_dir(dir: &OwnedFd, name: &[u8]) -> Result<OwnedFd, i32> {
    let name = CString::new(name).map_err(|_| libc::EINVAL)?;
    // SAFETY: a descriptor we own and a NUL-terminated name.
    let fd = unsafe {
        libc::openat(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    // SAFETY: a new descriptor.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The entries of directory `dir` (opened for reading), less `.` and
/// `..`: each name and its `d_type`.
fn read_dir(dir: &OwnedFd) -> Result<Vec<(Vec<u8>, u8)>, i32> {
    let mut entries = Vec::new();
    let mut buffer = vec![0u8; 32 * 1024];
    loop {
        // SAFETY: getdents64 into a buffer of its length.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                dir.as_raw_fd(),
                buffer.as_mut_ptr(),
                buffer.len(),
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO));
        }
        if n == 0 {
            return Ok(entries);
        }
        let filled = buffer.get(..n as usize).ok_or(libc::EIO)?;
        let mut at = 0usize;
        // struct linux_dirent64: d_ino (8), d_off (8), d_reclen (2),
        // d_type (1), d_name (NUL-terminated).
        while at + 19 <= filled.len() {
            let reclen = usize::from(u16::from_ne_bytes([filled[at + 16], filled[at + 17]]));
            let kind = filled[at + 18];
            let record = filled.get(at + 19..at + reclen).ok_or(libc::EIO)?;
            let name = record.split(|&b| b == 0).next().unwrap_or_default();
            if name != b"." && name != b".." {
                entries.push((name.to_vec(), kind));
            }
            if reclen == 0 {
                return Err(libc::EIO);
            }
            at += reclen;
        }
    }
}

/// The `d_type` of entry `name` of `dir`, from its mode.
fn kind_at(dir: &OwnedFd, name: &[u8]) -> Result<u8, i32> {
    let entry = crate::emulate::open_path(dir, name, libc::O_NOFOLLOW)?;
    Ok(match crate::emulate::file_kind(&entry)? {
        libc::S_IFDIR => libc::DT_DIR,
        libc::S_IFLNK => libc::DT_LNK,
        _ => libc::DT_REG,
    })
}

/// Whether relative `target`, read in a directory `depth` levels below
/// the parent of a moved tree (1: its top), climbs out of the tree.
fn leads_out(depth: usize, target: &[u8]) -> bool {
    let mut depth = depth;
    for part in target.split(|&b| b == b'/') {
        match part {
            b"" | b"." => {}
            b".." => {
                depth -= 1;
                if depth == 0 {
                    return true;
                }
            }
            _ => depth += 1,
        }
    }
    false
}

/// `target`, read in directory `below` of a tree that lands as `top` in
/// its new parent, as a path from that parent (`.` and `..` taken
/// lexically; leading `..` kept).
fn relative_from_parent(top: &[u8], below: &[Vec<u8>], target: &[u8]) -> Vec<u8> {
    let mut parts: Vec<&[u8]> = Vec::new();
    let path = std::iter::once(top)
        .chain(below.iter().map(Vec::as_slice))
        .chain(target.split(|&b| b == b'/'));
    for part in path {
        match part {
            b"" | b"." => {}
            b".." => {
                if parts.last().is_some_and(|p| *p != b"..") {
                    parts.pop();
                } else {
                    parts.push(b"..");
                }
            }
            name => parts.push(name),
        }
    }
    if parts.is_empty() {
        return b".".to_vec();
    }
    parts.join(&b'/')
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
    #![allow(clippy::unwrap_used)]
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
        // As vfat stores them.
        assert!(names_a_repository(b".git.") && names_a_repository(b"HEAD. ."));
        assert!(!names_a_repository(b".") && !names_a_repository(b".git.x"));
        let root = Path::new("/ws");
        let runs =
            |dir: &str, name: &str| names_what_git_runs(Path::new(dir), name.as_bytes(), root);
        assert!(runs("/ws/vendor/lib/.git", "config.lock"));
        assert!(runs("/ws/vendor/lib/.git/hooks", "post-checkout"));
        assert!(runs("/ws/vendor/lib/.git", "hooks"));
        assert!(runs("/ws/a/.GIT/worktrees/x", "config.worktree"));
        assert!(runs("/ws/a/.git", "commondir"));
        assert!(runs("/ws/a/.git.", "config."));
        assert!(runs("/ws/a/.git/hooks.", "pre-commit"));
        assert!(!runs("/ws/vendor/lib/.git", "index.lock"));
        assert!(!runs("/ws/vendor/lib/.git/objects/ab", "tmp_obj_x"));
        assert!(!runs("/ws/vendor/lib", "config"));
        assert!(
            !runs("/ws/.git", "config.lock"),
            "the top one is mounted read-only"
        );
        assert!(!runs("/elsewhere/x/.git", "config"));
        assert!(in_a_nested_git_dir(Path::new("/ws/lib/.git/logs"), root));
        assert!(in_a_nested_git_dir(Path::new("/ws/lib/.git"), root));
        assert!(!in_a_nested_git_dir(Path::new("/ws/.git/logs"), root));
        assert!(!in_a_nested_git_dir(Path::new("/ws/lib"), root));
        let levels = |dir: &str| levels_below_nested_git(Path::new(dir), root);
        assert_eq!(levels("/ws/lib/.git"), Some(0));
        assert_eq!(levels("/ws/lib/.git/modules/x/hooks"), Some(3));
        assert_eq!(levels("/ws/.git/hooks"), None);
        assert_eq!(levels("/ws/lib"), None);
    }

    /// A judge for a workspace `ws`, with `writable` the places outside
    /// it the sandbox may write, looking from this process.
    fn judge_for(ws: &Path, writable: &Path) -> PlaceJudge {
        let open = |p: &str| {
            crate::emulate::open_path(
                &std::fs::File::open("/").unwrap().into(),
                p.as_bytes(),
                libc::O_DIRECTORY,
            )
            .unwrap()
        };
        let roots = vec![ws.to_path_buf()];
        PlaceJudge {
            walker: Walker {
                root: open("."),
                proc_self: open("proc/thread-self"),
                // SAFETY: gettid cannot fail.
                tid: unsafe { libc::gettid() },
                through_proc: std::cell::Cell::new(false),
                last_parent: std::cell::Cell::new(None),
            },
            policy: Arc::new(GuardPolicy {
                listed: Vec::new(),
                mount_namespace: false,
                tcp_refused: false,
                git_root_ids: identities(&roots),
                git_root_places: places_in_file_system(&roots),
                git_mounts: Arc::default(),
                git_links: Arc::default(),
                git_roots: Arc::from(roots),
                writable: Arc::from([writable.to_path_buf()]),
                emulator: Arc::default(),
            }),
        }
    }

    fn dir(path: &Path) -> OwnedFd {
        std::fs::File::open(path).unwrap().into()
    }

    fn id_of(path: &Path) -> (u64, u64) {
        use std::os::unix::fs::MetadataExt as _;
        let m = std::fs::symlink_metadata(path).unwrap();
        (m.dev(), m.ino())
    }

    #[test]
    fn an_entry_that_is_a_guarded_name_by_another_spelling_is_found() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let (ws, tmp) = (base.join("ws"), base.join("tmp"));
        let lib_git = ws.join("lib/.git");
        std::fs::create_dir_all(&lib_git).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        let judge = judge_for(&ws, &tmp);
        // A hard link stands in for a file system that stores a name as
        // another: the entry made is the inode a guarded name holds.
        std::fs::write(ws.join("made"), "").unwrap();
        std::fs::hard_link(ws.join("made"), ws.join("HEAD")).unwrap();
        assert!(judge.is_a_guarded_name(&dir(&ws), id_of(&ws.join("made"))));
        std::fs::write(lib_git.join("made"), "").unwrap();
        std::fs::hard_link(lib_git.join("made"), lib_git.join("config")).unwrap();
        assert!(judge.is_a_guarded_name(&dir(&lib_git), id_of(&lib_git.join("made"))));
        // A HEAD in a nested `.git` is a ref; outside the workspace
        // nothing is guarded; another entry is not the one made.
        std::fs::write(lib_git.join("ref"), "").unwrap();
        std::fs::hard_link(lib_git.join("ref"), lib_git.join("HEAD")).unwrap();
        assert!(!judge.is_a_guarded_name(&dir(&lib_git), id_of(&lib_git.join("ref"))));
        std::fs::write(tmp.join("made"), "").unwrap();
        std::fs::hard_link(tmp.join("made"), tmp.join("HEAD")).unwrap();
        assert!(!judge.is_a_guarded_name(&dir(&tmp), id_of(&tmp.join("made"))));
        std::fs::write(ws.join("other"), "").unwrap();
        assert!(!judge.is_a_guarded_name(&dir(&ws), id_of(&ws.join("other"))));
    }

    #[test]
    fn a_moved_tree_is_walked_for_links_that_lead_out() {
        let base = tempfile::tempdir().unwrap();
        let base = base.path().canonicalize().unwrap();
        let (ws, tmp) = (base.join("ws"), base.join("tmp"));
        std::fs::create_dir_all(ws.join("a/b/c")).unwrap();
        std::fs::create_dir_all(ws.join("n/node_modules/.bin")).unwrap();
        std::fs::create_dir_all(&tmp).unwrap();
        std::os::unix::fs::symlink("../../../tmp/r", ws.join("a/b/c/l")).unwrap();
        std::os::unix::fs::symlink("../x/cli", ws.join("n/node_modules/.bin/cli")).unwrap();
        let judge = judge_for(&ws, &tmp);
        let name = |s: &str| CString::new(s).unwrap();
        // ws/a/b moved to ws/b2: its link now leads to the temp dir.
        assert_eq!(
            judge.may_move(&dir(&ws.join("a")), &name("b"), &dir(&ws), &name("b2")),
            Err(libc::EXDEV)
        );
        // Within its own directory, or deeper: the link stays inside.
        assert_eq!(
            judge.may_move(
                &dir(&ws.join("a")),
                &name("b"),
                &dir(&ws.join("a")),
                &name("b3")
            ),
            Ok(())
        );
        std::fs::create_dir_all(ws.join("d/e")).unwrap();
        assert_eq!(
            judge.may_move(
                &dir(&ws.join("a")),
                &name("b"),
                &dir(&ws.join("d/e")),
                &name("b")
            ),
            Ok(())
        );
        assert_eq!(
            judge.may_move(&dir(&ws), &name("n"), &dir(&ws.join("d")), &name("n")),
            Ok(())
        );
        // The link itself, moved up a level: refused as made there.
        assert_eq!(
            judge.may_move(
                &dir(&ws.join("a/b/c")),
                &name("l"),
                &dir(&ws.join("a/b")),
                &name("l")
            ),
            Err(libc::EPERM)
        );
    }

    #[test]
    fn a_mount_is_read_from_its_mountinfo_line() {
        let table = b"22 27 0:21 / /proc rw - proc proc rw\n\
            40 27 8:1 /srv/a\\040b /mnt/v\\134w rw shared:1 - ext4 /dev/sda1 rw\n";
        assert_eq!(
            mount_line(table, 40),
            Some(MountView {
                root: PathBuf::from("/srv/a b"),
                at: PathBuf::from("/mnt/v\\w"),
            })
        );
        assert_eq!(mount_line(table, 4), None);
        assert_eq!(unescape(b"a\\011b\\9"), b"a\tb\\9".to_vec());
    }

    #[test]
    fn a_link_in_a_moved_tree_is_read_from_its_new_parent() {
        // ws/a/b/c/l -> ../../../x, with b moved to ws/b2.
        assert!(leads_out(2, b"../../../x"));
        assert_eq!(
            relative_from_parent(b"b2", &[b"c".to_vec()], b"../../../x"),
            b"../x".to_vec()
        );
        // node_modules/.bin/cli -> ../foo/bin/cli stays in node_modules.
        assert!(!leads_out(2, b"../foo/bin/cli"));
        assert!(!leads_out(1, b"./x/../y"));
        assert!(leads_out(1, b".."));
        assert!(leads_out(1, b"x/../../y"));
        assert_eq!(relative_from_parent(b"d", &[], b".."), b".".to_vec());
        assert_eq!(
            relative_from_parent(b"d", &[], b"../d2/./x"),
            b"d2/x".to_vec()
        );
    }
}
