//! Where a daemon lives: the data directory (`--data-dir`, else
//! `$XDG_DATA_HOME/dsh`), the private runtime directory with its socket,
//! and the files it keeps in the data directory (lock, info, log).
//!
//! The runtime directory is `$DSH_RUNTIME_DIR` when set, else
//! `$XDG_RUNTIME_DIR/dsh`, else `run` in the data directory. It is created
//! `0700` and refused when another user owns it or its mode lets anyone
//! else in: the socket in it is the boundary between users. The fallback
//! is never the temp directory: the sandbox leaves the temp directory
//! writable to the commands it confines, and a command that can remove or
//! replace the daemon's socket can cut every client off it. The data
//! directory is closed to them.
//!
//! A client whose runtime directory differs from the daemon's (another
//! login, or an MCP client that passes on only part of the environment)
//! finds the socket through `daemon.json`, which the daemon writes in the
//! data directory: [`check_recorded_socket`] is what such a socket must
//! pass before it is used.

use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};

/// The files of one daemon: one per user and data directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DaemonPaths {
    /// The store's directory (`--data-dir`).
    pub data_dir: PathBuf,
    /// The private runtime directory holding the socket.
    pub runtime_dir: PathBuf,
    /// The Unix socket the daemon listens on.
    pub socket: PathBuf,
    /// The file a running daemon holds locked for its life.
    pub lock: PathBuf,
    /// Who holds the lock: pid, socket and version, as JSON.
    pub info: PathBuf,
    /// Where a daemon started by a bridge writes its log.
    pub log: PathBuf,
}

/// Why the runtime directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum PathsError {
    /// It could not be created or inspected.
    #[error("cannot use the runtime directory {dir}: {reason}")]
    Unusable {
        /// The directory.
        dir: PathBuf,
        /// What failed.
        reason: String,
    },
    /// Another user owns it.
    #[error(
        "the runtime directory {dir} belongs to uid {owner}, not to you (uid {me}); set DSH_RUNTIME_DIR or XDG_RUNTIME_DIR to a directory of your own"
    )]
    ForeignOwner {
        /// The directory.
        dir: PathBuf,
        /// Its owner.
        owner: u32,
        /// The caller.
        me: u32,
    },
    /// The socket's path does not fit in a Unix socket address.
    #[error(
        "the daemon's socket path {socket} is {len} bytes, longer than the {max} a Unix socket address holds: set XDG_RUNTIME_DIR (or DSH_RUNTIME_DIR) to a shorter private directory, or use a shorter --data-dir"
    )]
    SocketTooLong {
        /// The socket.
        socket: PathBuf,
        /// Its length in bytes.
        len: usize,
        /// The longest path that fits.
        max: usize,
    },
    /// The socket a daemon recorded is no longer there, or is not the
    /// file it bound.
    #[error("the socket {socket} is gone or is not the one the daemon bound")]
    SocketGone {
        /// The socket.
        socket: PathBuf,
    },
    /// The socket a daemon recorded cannot be used as it is.
    #[error("the socket {socket} cannot be used: {reason}")]
    UnusableSocket {
        /// The socket.
        socket: PathBuf,
        /// What is wrong with it.
        reason: String,
    },
    /// Its mode lets other users in.
    #[error(
        "the runtime directory {dir} has mode {mode:04o}; it must be private (0700): run `chmod 700 {dir}`"
    )]
    TooOpen {
        /// The directory.
        dir: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
}

/// The longest socket path a `sockaddr_un` holds (108 bytes with the
/// terminating NUL).
pub const MAX_SOCKET_PATH: usize = 107;

/// The data directory: `explicit` (`--data-dir`), else
/// `$XDG_DATA_HOME/dsh`.
pub fn data_dir(explicit: Option<PathBuf>) -> PathBuf {
    explicit.unwrap_or_else(|| {
        dirs::data_dir()
            .unwrap_or_else(|| PathBuf::from(".local/share"))
            .join("dsh")
    })
}

/// The runtime directory this process would use for the daemon of
/// `data_dir` (not created).
pub fn runtime_dir(data_dir: &Path) -> PathBuf {
    if let Some(dir) = std::env::var_os("DSH_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    if let Some(dir) = std::env::var_os("XDG_RUNTIME_DIR").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir).join("dsh");
    }
    absolute(data_dir).join("run")
}

/// Whether `dir` lies in a directory the sandbox lets confined commands
/// write in every mode ([`sandbox::SpawnContext::always_writable`]), for
/// the temp directories a command may be given (`$TMPDIR`, `/tmp`). A
/// socket there can be removed or replaced by them.
pub fn in_shared_temp(dir: &Path) -> bool {
    let real = |p: &Path| p.canonicalize().unwrap_or_else(|_| absolute(p));
    let dir = real(dir);
    [std::env::temp_dir(), PathBuf::from("/tmp")]
        .iter()
        .flat_map(|temp| sandbox::SpawnContext::always_writable(temp))
        .any(|shared| dir.starts_with(real(&shared)))
}

impl DaemonPaths {
    /// The paths for `data_dir` under the runtime directory of this
    /// process. Nothing is created.
    pub fn new(data_dir: &Path) -> Self {
        Self::with_runtime_dir(data_dir, &runtime_dir(data_dir))
    }

    /// The paths of the same daemon with `socket`, the one it recorded in
    /// `daemon.json`, in place of the one this process computed (its
    /// runtime directory is the socket's). Check it first with
    /// [`check_recorded_socket`].
    pub fn at_socket(&self, socket: &Path) -> Self {
        Self {
            runtime_dir: socket
                .parent()
                .map_or_else(|| self.runtime_dir.clone(), Path::to_path_buf),
            socket: socket.to_path_buf(),
            ..self.clone()
        }
    }

    /// The paths for `data_dir` under `runtime_dir`.
    pub fn with_runtime_dir(data_dir: &Path, runtime_dir: &Path) -> Self {
        let data_dir = absolute(data_dir);
        // One daemon per data directory: the socket's name is derived from
        // the directory's path, which may be too long for a socket address.
        let key = fnv1a(data_dir.as_os_str().as_encoded_bytes());
        Self {
            socket: runtime_dir.join(format!("dsh-{key:016x}.sock")),
            lock: data_dir.join("daemon.lock"),
            info: data_dir.join("daemon.json"),
            log: data_dir.join("daemon.log"),
            runtime_dir: runtime_dir.to_path_buf(),
            data_dir,
        }
    }

    /// Creates the runtime directory (0700) if needed and checks that it is
    /// ours and private, and that the socket's path fits.
    pub fn ensure_runtime_dir(&self) -> Result<(), PathsError> {
        let len = self.socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(PathsError::SocketTooLong {
                socket: self.socket.clone(),
                len,
                max: MAX_SOCKET_PATH,
            });
        }
        ensure_private_dir(&self.runtime_dir)
    }

    /// Creates the data directory (0700) if needed.
    pub fn ensure_data_dir(&self) -> Result<(), PathsError> {
        match std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&self.data_dir)
        {
            Ok(()) => Ok(()),
            Err(e) => Err(PathsError::Unusable {
                dir: self.data_dir.clone(),
                reason: e.to_string(),
            }),
        }
    }
}

/// Creates `dir` with mode 0700 when missing; refuses one owned by another
/// user or open to others.
pub fn ensure_private_dir(dir: &Path) -> Result<(), PathsError> {
    let unusable = |e: std::io::Error| PathsError::Unusable {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    };
    if let Err(e) = std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
    {
        return Err(unusable(e));
    }
    check_private_dir(dir)
}

/// Checks, creating nothing, that `dir` is a directory of this user that
/// no one else may enter (the checks of [`ensure_private_dir`]).
pub fn check_private_dir(dir: &Path) -> Result<(), PathsError> {
    let unusable = |e: std::io::Error| PathsError::Unusable {
        dir: dir.to_path_buf(),
        reason: e.to_string(),
    };
    let meta = std::fs::symlink_metadata(dir).map_err(unusable)?;
    if !meta.is_dir() {
        return Err(PathsError::Unusable {
            dir: dir.to_path_buf(),
            reason: "it is not a directory".to_owned(),
        });
    }
    let me = nix::unistd::getuid().as_raw();
    if meta.uid() != me {
        return Err(PathsError::ForeignOwner {
            dir: dir.to_path_buf(),
            owner: meta.uid(),
            me,
        });
    }
    let mode = meta.permissions().mode() & 0o7777;
    if mode & 0o077 != 0 {
        return Err(PathsError::TooOpen {
            dir: dir.to_path_buf(),
            mode,
        });
    }
    Ok(())
}

/// Checks the socket a daemon recorded in `daemon.json` (`bound`: the
/// identity, device and inode, it recorded for it) before a client whose
/// own runtime directory is another uses it: an absolute path that fits
/// in a socket address, in a directory that passes [`check_private_dir`]
/// (this user's, closed to others), naming a socket of this user that is
/// still the file the daemon bound. Creates nothing. The client still
/// checks, once connected, that the process listening is the daemon
/// `daemon.json` names, before it sends anything.
pub fn check_recorded_socket(socket: &Path, bound: Option<(u64, u64)>) -> Result<(), PathsError> {
    let unusable = |reason: String| PathsError::UnusableSocket {
        socket: socket.to_path_buf(),
        reason,
    };
    if !socket.is_absolute() {
        return Err(unusable(
            "it is a relative path, which names another file from here".to_owned(),
        ));
    }
    let len = socket.as_os_str().len();
    if len > MAX_SOCKET_PATH {
        return Err(PathsError::SocketTooLong {
            socket: socket.to_path_buf(),
            len,
            max: MAX_SOCKET_PATH,
        });
    }
    let Some(dir) = socket.parent() else {
        return Err(unusable("it has no directory".to_owned()));
    };
    check_private_dir(dir)?;
    let gone = || PathsError::SocketGone {
        socket: socket.to_path_buf(),
    };
    let meta = match std::fs::symlink_metadata(socket) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(gone()),
        Err(e) => return Err(unusable(e.to_string())),
    };
    use std::os::unix::fs::FileTypeExt as _;
    if !meta.file_type().is_socket() || bound.is_some_and(|id| id != (meta.dev(), meta.ino())) {
        return Err(gone());
    }
    let me = nix::unistd::getuid().as_raw();
    if meta.uid() != me {
        return Err(unusable(format!(
            "it belongs to uid {}, not to you (uid {me})",
            meta.uid()
        )));
    }
    Ok(())
}

/// `path` made absolute against the current directory (not resolved).
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())
}

/// FNV-1a, 64 bits: a stable name for a data directory (the same in every
/// dsh version, unlike the standard library's hasher).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in bytes {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_missing_runtime_dir_is_created_private() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/b");
        ensure_private_dir(&dir).unwrap();
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
    }

    #[test]
    fn an_open_runtime_dir_is_refused_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("open");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        let err = ensure_private_dir(&dir).unwrap_err().to_string();
        assert_eq!(
            err,
            format!(
                "the runtime directory {} has mode 0755; it must be private (0700): run `chmod 700 {}`",
                dir.display(),
                dir.display()
            )
        );
    }

    #[test]
    fn a_runtime_dir_of_another_user_is_refused() {
        // Only root can hand a directory to another user.
        if !nix::unistd::getuid().is_root() {
            return;
        }
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("theirs");
        std::fs::create_dir(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
        nix::unistd::chown(&dir, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
        let err = ensure_private_dir(&dir).unwrap_err();
        assert!(
            matches!(err, PathsError::ForeignOwner { owner: 65534, .. }),
            "{err}"
        );
    }

    #[test]
    fn a_socket_path_too_long_for_an_address_is_refused_with_the_fix() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("d".repeat(120));
        let paths = DaemonPaths::with_runtime_dir(&tmp.path().join("data"), &deep);
        let err = paths.ensure_runtime_dir().unwrap_err().to_string();
        let len = paths.socket.as_os_str().len();
        assert_eq!(
            err,
            format!(
                "the daemon's socket path {} is {len} bytes, longer than the 107 a Unix socket address holds: set XDG_RUNTIME_DIR (or DSH_RUNTIME_DIR) to a shorter private directory, or use a shorter --data-dir",
                paths.socket.display()
            )
        );
        assert!(
            !deep.exists(),
            "nothing is created for a path that cannot work"
        );
        // one that fits binds
        let fits = DaemonPaths::with_runtime_dir(&tmp.path().join("data"), &tmp.path().join("r"));
        fits.ensure_runtime_dir().unwrap();
        std::os::unix::net::UnixListener::bind(&fits.socket).unwrap();
    }

    #[test]
    fn the_fallback_runtime_dir_is_in_the_data_dir_and_the_temp_dir_is_recognised() {
        let data = Path::new("/home/u/.local/share/dsh");
        // the fallback shows only where neither variable is set (the
        // test reads them and leaves them as they are)
        if std::env::var_os("DSH_RUNTIME_DIR").is_none()
            && std::env::var_os("XDG_RUNTIME_DIR").is_none()
        {
            assert_eq!(runtime_dir(data), data.join("run"));
        }
        assert!(!in_shared_temp(&data.join("run")));
        assert!(in_shared_temp(&std::env::temp_dir().join("dsh-run-x")));
        assert!(in_shared_temp(Path::new("/tmp/dsh-0")));
        assert!(in_shared_temp(Path::new("/dev/shm/x")));
    }

    #[test]
    fn a_recorded_socket_is_used_only_when_it_is_the_daemons_in_a_private_dir() {
        let tmp = tempfile::tempdir().unwrap();
        let paths = DaemonPaths::with_runtime_dir(&tmp.path().join("data"), &tmp.path().join("r"));
        paths.ensure_runtime_dir().unwrap();
        let socket = paths.socket.clone();
        // nothing there yet
        assert!(matches!(
            check_recorded_socket(&socket, None),
            Err(PathsError::SocketGone { .. })
        ));
        let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
        let meta = std::fs::metadata(&socket).unwrap();
        let bound = (meta.dev(), meta.ino());
        check_recorded_socket(&socket, Some(bound)).unwrap();
        // another file than the one the daemon bound
        assert!(matches!(
            check_recorded_socket(&socket, Some((bound.0, bound.1 + 1))),
            Err(PathsError::SocketGone { .. })
        ));
        // a relative path names another file from another directory
        let err = check_recorded_socket(Path::new("r/dsh-1.sock"), None).unwrap_err();
        assert_eq!(
            err.to_string(),
            "the socket r/dsh-1.sock cannot be used: it is a relative path, which names another file from here"
        );
        // a directory open to others: the same refusal, with the same fix,
        // as for the runtime directory of this process; nothing is changed
        std::fs::set_permissions(&paths.runtime_dir, std::fs::Permissions::from_mode(0o755))
            .unwrap();
        let err = check_recorded_socket(&socket, Some(bound)).unwrap_err();
        assert!(
            matches!(err, PathsError::TooOpen { mode: 0o755, .. }),
            "{err}"
        );
        let mode = std::fs::metadata(&paths.runtime_dir)
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o755);
        // the daemon's paths there: its socket, its directory, the same files
        let there = DaemonPaths::with_runtime_dir(&tmp.path().join("data"), &tmp.path().join("o"))
            .at_socket(&socket);
        assert_eq!(there.socket, socket);
        assert_eq!(there.runtime_dir, paths.runtime_dir);
        assert_eq!((&there.lock, &there.info), (&paths.lock, &paths.info));
    }

    #[test]
    fn each_data_dir_has_its_own_socket() {
        let run = Path::new("/run/u");
        let a = DaemonPaths::with_runtime_dir(Path::new("/data/a"), run);
        let b = DaemonPaths::with_runtime_dir(Path::new("/data/b"), run);
        assert_ne!(a.socket, b.socket);
        assert_eq!(
            a.socket,
            DaemonPaths::with_runtime_dir(Path::new("/data/a"), run).socket
        );
        assert_eq!(a.lock, Path::new("/data/a/daemon.lock"));
    }
}
