//! `DATA/daemon.json`: the record of the daemon that holds a data
//! directory's lock, written by the daemon and read by its clients (and by
//! a daemon of another version that wants the store).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Who holds a data directory's daemon lock (`DATA/daemon.json`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DaemonInfo {
    /// Its pid.
    pub pid: u32,
    /// Its dsh version.
    pub version: String,
    /// Its socket.
    pub socket: PathBuf,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// Its start time in clock ticks after boot, as `/proc/PID/stat`
    /// shows it: with the pid, it names this one process (absent from
    /// the files of older versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<u64>,
    /// Whether it serves on its socket: a daemon that holds the lock but
    /// does not listen is starting (it may wait for the store) or
    /// stopping.
    #[serde(default)]
    pub listening: bool,
    /// The socket file it bound (device, inode), while it listens: a
    /// file at the socket's path that is not this one was put there by
    /// someone else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub socket_id: Option<(u64, u64)>,
}

/// Reads a daemon info file.
pub fn read_info(path: &Path) -> Option<DaemonInfo> {
    try_read_info(path).ok().flatten()
}

/// Reads a daemon info file: `Ok(None)` when it is missing or not one,
/// the error when it cannot be read.
pub fn try_read_info(path: &Path) -> std::io::Result<Option<DaemonInfo>> {
    match std::fs::read_to_string(path) {
        Ok(text) => Ok(serde_json::from_str(&text).ok()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}
