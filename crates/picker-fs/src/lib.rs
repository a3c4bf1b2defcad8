//! An implementation of the directory-picker seam
//! ([`picker_seam::DirectoryPicker`]), based on the local filesystem:
//! [`FsPicker`] lists directories, from the person's home directory on,
//! for a consumer that shows them and lets the person walk (the `dsh ui`
//! page). Its capability is [`Capability::Browse`], always.
//!
//! What it lists:
//!
//! * **Only what the person could list.** A directory is listed only when
//!   `access(2)` grants the process's real user read and search
//!   permission on it; a subdirectory the person could not list is shown
//!   by name (its parent lists it) and marked [`Refusal::Unreadable`].
//! * **Real paths.** Every path it returns is resolved (symlinks, `..`),
//!   so opening an entry never walks a symlink again. A symlink that
//!   loops, or that leads back to the directory listed or one above it
//!   (`up -> ..`), is marked [`Refusal::SymlinkLoop`]; a dangling one is
//!   left out, as is everything that is not a directory.
//! * **No device trees.** `/dev`, `/proc` and `/sys`, and a kernel
//!   pseudo-filesystem (procfs, sysfs, devpts, cgroup, debugfs, …) mounted
//!   anywhere, told by its `statfs` type, are refused
//!   ([`Refusal::DeviceTree`]): a project is not kept there, and some of
//!   their files block or never end.
//! * **Bounded.** At most [`MAX_READ`] names of one directory are read and
//!   at most [`MAX_ENTRIES`] subdirectories returned (the listing says
//!   when it was cut).
//!
//! It reads directories only: it opens no file, and creates or changes
//! nothing.

#![forbid(unsafe_code)]

use std::io;
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use nix::sys::statfs::{self, FsType};
use nix::unistd::AccessFlags;
use picker_seam::{Capability, DirectoryPicker, Entry, Listing, PickerError, Refusal};

/// The most names of one directory read for a listing.
pub const MAX_READ: usize = 20_000;
/// The most subdirectories a listing returns.
pub const MAX_ENTRIES: usize = 2_000;

/// The trees of devices and kernel files, wherever the filesystem types
/// below are not reported (a `devtmpfs` reports itself as `tmpfs`).
const DEVICE_ROOTS: [&str; 3] = ["/dev", "/proc", "/sys"];

/// Kernel pseudo-filesystems: what is mounted with these is a device tree.
const PSEUDO: [FsType; 17] = [
    statfs::PROC_SUPER_MAGIC,
    statfs::SYSFS_MAGIC,
    statfs::DEVPTS_SUPER_MAGIC,
    statfs::CGROUP_SUPER_MAGIC,
    statfs::CGROUP2_SUPER_MAGIC,
    statfs::DEBUGFS_MAGIC,
    statfs::TRACEFS_MAGIC,
    statfs::SECURITYFS_MAGIC,
    statfs::BPF_FS_MAGIC,
    statfs::SELINUX_MAGIC,
    statfs::SMACK_MAGIC,
    statfs::NSFS_MAGIC,
    statfs::USBDEVICE_SUPER_MAGIC,
    statfs::HUGETLBFS_MAGIC,
    statfs::RDTGROUP_SUPER_MAGIC,
    statfs::OPENPROM_SUPER_MAGIC,
    statfs::XENFS_SUPER_MAGIC,
];

/// Browses the local filesystem from a start directory.
#[derive(Debug, Clone)]
pub struct FsPicker {
    start: PathBuf,
}

impl FsPicker {
    /// A picker that starts at `start` (its real path; `/` when it cannot
    /// be resolved).
    pub fn new(start: &Path) -> Self {
        let start = std::fs::canonicalize(start)
            .ok()
            .filter(|p| p.is_dir())
            .unwrap_or_else(|| PathBuf::from("/"));
        Self { start }
    }

    /// A picker that starts at the person's home directory (`$HOME`).
    pub fn from_home() -> Self {
        let home = std::env::var_os("HOME").map_or_else(|| PathBuf::from("/"), PathBuf::from);
        Self::new(&home)
    }
}

/// An error of the system about `path`, as the seam names it.
fn io_error(path: &Path, e: &io::Error) -> PickerError {
    let path = path.to_path_buf();
    match e.raw_os_error() {
        Some(libc_errno::ENOENT) => PickerError::NotFound { path },
        Some(libc_errno::ENOTDIR) => PickerError::NotADirectory { path },
        Some(libc_errno::EACCES | libc_errno::EPERM) => PickerError::Unreadable { path },
        Some(libc_errno::ELOOP) => PickerError::SymlinkLoop { path },
        _ => PickerError::Io {
            path,
            reason: e.to_string(),
        },
    }
}

/// The error numbers the picker tells apart.
mod libc_errno {
    use nix::errno::Errno;
    pub const ENOENT: i32 = Errno::ENOENT as i32;
    pub const ENOTDIR: i32 = Errno::ENOTDIR as i32;
    pub const EACCES: i32 = Errno::EACCES as i32;
    pub const EPERM: i32 = Errno::EPERM as i32;
    pub const ELOOP: i32 = Errno::ELOOP as i32;
}

/// Whether the filesystem holding `path` is a kernel pseudo-filesystem.
fn pseudo_filesystem(path: &Path) -> bool {
    statfs::statfs(path).is_ok_and(|s| PSEUDO.contains(&s.filesystem_type()))
}

/// Whether the real path `path` is in a device tree.
fn device_tree(path: &Path) -> bool {
    DEVICE_ROOTS.iter().any(|root| path.starts_with(root)) || pseudo_filesystem(path)
}

/// Whether the person (the real user) may list `path`.
fn listable(path: &Path) -> bool {
    nix::unistd::access(path, AccessFlags::R_OK | AccessFlags::X_OK).is_ok()
}

/// Why the real directory `path` cannot be opened, if it cannot. A
/// directory on the device of its parent (`parent_dev`) is on the
/// parent's filesystem, so only a mount point needs a look at its type.
fn refusal(path: &Path, dev: Option<u64>, parent_dev: u64) -> Option<Refusal> {
    let mounted_here = dev.is_none_or(|d| d != parent_dev);
    if DEVICE_ROOTS.iter().any(|root| path.starts_with(root))
        || (mounted_here && pseudo_filesystem(path))
    {
        Some(Refusal::DeviceTree)
    } else if !listable(path) {
        Some(Refusal::Unreadable)
    } else {
        None
    }
}

/// The entry of a symlink named `name` at `path` in the real directory
/// `dir`: its target when that is a directory; `None` when it is not one
/// (or dangles).
fn symlinked(dir: &Path, name: std::ffi::OsString, path: PathBuf) -> Option<Entry> {
    let target = match std::fs::canonicalize(&path) {
        Ok(target) => target,
        Err(e) if e.raw_os_error() == Some(libc_errno::ELOOP) => {
            return Some(Entry {
                name,
                path,
                symlink: true,
                refused: Some(Refusal::SymlinkLoop),
            });
        }
        Err(_) => return None,
    };
    std::fs::metadata(&target).ok().filter(|m| m.is_dir())?;
    let refused = if dir.starts_with(&target) {
        // Back to the directory listed, or above it: a walk in circles.
        Some(Refusal::SymlinkLoop)
    } else if device_tree(&target) {
        Some(Refusal::DeviceTree)
    } else if !listable(&target) {
        Some(Refusal::Unreadable)
    } else {
        None
    };
    Some(Entry {
        name,
        path: target,
        symlink: true,
        refused,
    })
}

/// Names sort as a person reads them: case aside first, then exactly.
fn by_name(a: &Entry, b: &Entry) -> std::cmp::Ordering {
    let (x, y) = (a.name.to_string_lossy(), b.name.to_string_lossy());
    x.to_lowercase()
        .cmp(&y.to_lowercase())
        .then_with(|| a.name.cmp(&b.name))
}

impl DirectoryPicker for FsPicker {
    fn capability(&self) -> Capability {
        Capability::Browse {
            start: self.start.clone(),
        }
    }

    fn list(&self, dir: &Path) -> Result<Listing, PickerError> {
        if !dir.is_absolute() {
            return Err(PickerError::NotAbsolute {
                path: dir.to_path_buf(),
            });
        }
        let real = std::fs::canonicalize(dir).map_err(|e| io_error(dir, &e))?;
        let meta = std::fs::metadata(&real).map_err(|e| io_error(dir, &e))?;
        if !meta.is_dir() {
            return Err(PickerError::NotADirectory {
                path: dir.to_path_buf(),
            });
        }
        if device_tree(&real) {
            return Err(PickerError::DeviceTree { path: real });
        }
        if !listable(&real) {
            return Err(PickerError::Unreadable { path: real });
        }
        let names = std::fs::read_dir(&real).map_err(|e| io_error(&real, &e))?;
        let mut entries = Vec::new();
        let mut truncated = false;
        for (n, item) in names.enumerate() {
            if n >= MAX_READ {
                truncated = true;
                break;
            }
            let Ok(item) = item else { continue };
            let Ok(kind) = item.file_type() else { continue };
            let name = item.file_name();
            let path = real.join(&name);
            let entry = if kind.is_dir() {
                let dev = item.metadata().ok().map(|m| m.dev());
                Some(Entry {
                    refused: refusal(&path, dev, meta.dev()),
                    name,
                    path,
                    symlink: false,
                })
            } else if kind.is_symlink() {
                symlinked(&real, name, path)
            } else {
                None
            };
            entries.extend(entry);
        }
        entries.sort_by(by_name);
        if entries.len() > MAX_ENTRIES {
            entries.truncate(MAX_ENTRIES);
            truncated = true;
        }
        Ok(Listing {
            parent: real.parent().map(Path::to_path_buf),
            dir: real,
            entries,
            truncated,
        })
    }
}
