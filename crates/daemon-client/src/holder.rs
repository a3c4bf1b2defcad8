//! Finding the daemon of a data directory through its lock rather than
//! its socket: who holds `DATA/daemon.lock`, checked against what
//! `DATA/daemon.json` records (a client whose socket is lost, `dsh daemon
//! stop` without a socket, a candidate that found the lock held).

use std::path::{Path, PathBuf};

use crate::paths::DaemonPaths;
use daemon_wire::info::{DaemonInfo, read_info};

/// A daemon found through the data directory's lock and `daemon.json`
/// rather than its socket, and checked to be that daemon: the process
/// `daemon.json` names runs, has the start time recorded there, runs the
/// `dsh` program, and holds the lock (`/proc/locks`).
#[derive(Debug, Clone)]
pub struct Holder {
    /// What it recorded.
    pub info: DaemonInfo,
    /// The process, as read while checking it.
    pub process: process_tree::ProcessInfo,
}

/// The daemon that holds `paths`' lock, when one does and it is the
/// process `daemon.json` names (see [`Holder`]). Never a stranger: a pid
/// whose process does not hold the lock is not taken for the daemon.
pub fn find_holder(paths: &DaemonPaths) -> Option<Holder> {
    let info = read_info(&paths.info)?;
    let pid = i32::try_from(info.pid).ok()?;
    let process = process_tree::process_info(pid).filter(|p| !p.is_zombie())?;
    if info.start_time.is_some_and(|t| t != process.start_time) {
        return None;
    }
    if !runs_this_program(pid) || !holds_lock(pid, &paths.lock) {
        return None;
    }
    // What was read was of that process, not of one that reused its pid.
    process_tree::process_info(pid).filter(|p| p.start_time == process.start_time)?;
    Some(Holder { info, process })
}

impl Holder {
    /// Sends SIGTERM (the daemon stops as `dsh daemon stop` asks it to),
    /// through a pidfd after its start time is checked again. False when
    /// it was gone.
    pub fn terminate(&self) -> bool {
        process_tree::signal_process(&self.process, nix::sys::signal::Signal::SIGTERM)
    }

    /// Whether the process still runs (a zombie or a reused pid is gone).
    pub fn runs(&self) -> bool {
        process_tree::process_info(self.process.pid)
            .is_some_and(|p| p.start_time == self.process.start_time && !p.is_zombie())
    }
}

/// Whether process `pid` runs the same program as this one (the file
/// name of `/proc/PID/exe`: an upgrade may have replaced the file).
fn runs_this_program(pid: i32) -> bool {
    let name = |path: PathBuf| {
        let text = path.to_string_lossy().into_owned();
        let text = text.strip_suffix(" (deleted)").unwrap_or(&text).to_owned();
        Path::new(&text).file_name().map(|n| n.to_os_string())
    };
    let theirs = std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .and_then(name);
    let ours = std::env::current_exe().ok().and_then(name);
    theirs.is_some() && theirs == ours
}

/// Whether process `pid` holds the `flock` of `lock`, per `/proc/locks`.
fn holds_lock(pid: i32, lock: &Path) -> bool {
    lock_holders(lock).is_some_and(|holders| holders.contains(&pid))
}

/// Whether anyone holds `paths`' daemon lock, per `/proc/locks`, whoever
/// `daemon.json` names (false when that cannot be read). A daemon
/// candidate that found the lock held leaves, whatever it read of the
/// holder: while this is true, starting another one is pointless.
pub fn lock_is_held(paths: &DaemonPaths) -> bool {
    lock_holders(&paths.lock).is_some_and(|holders| !holders.is_empty())
}

/// The pids holding the `flock` of `lock`, per `/proc/locks`; `None` when
/// that cannot be read.
fn lock_holders(lock: &Path) -> Option<Vec<i32>> {
    let id = locks_id(lock)?;
    // A held lock is on the list all along, but a text read in several
    // calls may miss its line (see `read_locks`): such a text is read
    // again before the lock is taken for free.
    for _ in 0..3 {
        let (locks, calls) = read_locks()?;
        let holders = flock_holders(&locks, id);
        if !holders.is_empty() || calls <= 1 {
            return Some(holders);
        }
    }
    Some(Vec::new())
}

/// The text of `/proc/locks`, and how many reads returned it. The kernel
/// fills each read from the list as it is then, at most a page of it,
/// and the next read resumes by count: when a lock already passed was
/// released in between, the line after the last one read is skipped.
/// So each read asks for more than a page — a list that fits one is then
/// read whole, at one moment (`read_to_string` would start with a read
/// of 32 bytes).
fn read_locks() -> Option<(String, usize)> {
    use std::io::Read as _;
    let mut file = std::fs::File::open("/proc/locks").ok()?;
    let mut text = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    let mut calls = 0;
    loop {
        match file.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                text.extend_from_slice(chunk.get(..n)?);
                calls += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
    Some((String::from_utf8(text).ok()?, calls))
}

/// A file as `/proc/locks` names it: its filesystem's device (major,
/// minor) and its inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct LocksId {
    /// The device, as the kernel prints it: the superblock's, which is not
    /// always the `st_dev` that `stat` gives (btrfs gives every subvolume
    /// a device of its own), so it is read from the line of the file's
    /// mount in `/proc/self/mountinfo` when the kernel names that mount
    /// (`statx`, Linux 5.8); `None` before that, and only the inode is
    /// compared.
    dev: Option<(u32, u32)>,
    /// The inode.
    ino: u64,
}

/// How `/proc/locks` names the file at `path`.
fn locks_id(path: &Path) -> Option<LocksId> {
    use std::os::unix::ffi::OsStrExt as _;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: all-zero bytes are a valid `statx` (integers only).
    let mut stx: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a buffer of the size the call
    // writes.
    let done = unsafe {
        libc::statx(
            libc::AT_FDCWD,
            c_path.as_ptr(),
            0,
            libc::STATX_INO | libc::STATX_MNT_ID,
            &raw mut stx,
        )
    };
    if done != 0 || stx.stx_mask & libc::STATX_INO == 0 {
        return None;
    }
    let dev = if stx.stx_mask & libc::STATX_MNT_ID != 0 {
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
        Some(mount_device(&mountinfo, stx.stx_mnt_id)?)
    } else {
        None
    };
    Some(LocksId {
        dev,
        ino: stx.stx_ino,
    })
}

/// The device (major, minor) of mount `mnt_id` in the text of
/// `/proc/PID/mountinfo` (`36 25 0:32 / /home rw … - btrfs …`).
fn mount_device(mountinfo: &str, mnt_id: u64) -> Option<(u32, u32)> {
    mountinfo.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let id: u64 = fields.next()?.parse().ok()?;
        if id != mnt_id {
            return None;
        }
        let (major, minor) = fields.nth(1)?.split_once(':')?;
        Some((major.parse().ok()?, minor.parse().ok()?))
    })
}

/// The pids holding a `flock` on the file `id` names in the text of
/// `/proc/locks` (`1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF`: the
/// device's major and minor in hex, then the inode; a waiter's line,
/// `1: -> FLOCK …`, holds nothing).
fn flock_holders(locks: &str, id: LocksId) -> Vec<i32> {
    let names = |field: &str| {
        let mut parts = field.split(':');
        let (major, minor, ino) = (parts.next()?, parts.next()?, parts.next()?);
        let dev = (
            u32::from_str_radix(major, 16).ok()?,
            u32::from_str_radix(minor, 16).ok()?,
        );
        let ino: u64 = ino.parse().ok()?;
        Some(ino == id.ino && id.dev.is_none_or(|ours| ours == dev))
    };
    let mut holders: Vec<i32> = Vec::new();
    for line in locks.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let holder = match fields.as_slice() {
            [_, "FLOCK", _, _, pid, file, ..] if names(file) == Some(true) => pid.parse().ok(),
            _ => None,
        };
        // A list read while other locks come and go can show a line
        // twice (the kernel resumes its walk of the per-CPU lists by
        // count): a holder is named once.
        if let Some(pid) = holder
            && !holders.contains(&pid)
        {
            holders.push(pid);
        }
    }
    holders
}

/// Whether `pid` runs (exists and is not a zombie), read from `/proc`:
/// whether the daemon a record or a reply names is still there.
pub fn pid_alive(pid: u32) -> bool {
    i32::try_from(pid)
        .ok()
        .and_then(process_tree::process_info)
        .is_some_and(|p| !p.is_zombie())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use daemon_wire::version;
    use nix::fcntl::{Flock, FlockArg};
    use std::fs::File;

    #[test]
    fn flock_holders_are_read_from_proc_locks_and_waiters_hold_nothing() {
        let locks = "1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF\n\
                     1: -> FLOCK  ADVISORY  WRITE 777 fd:01:1234 0 EOF\n\
                     2: POSIX  ADVISORY  WRITE 555 fd:01:1234 0 EOF\n\
                     3: FLOCK  ADVISORY  WRITE 99 fd:01:4321 0 EOF\n\
                     4: OFDLCK ADVISORY  READ  -1 00:05:1234 0 EOF\n\
                     5: FLOCK  ADVISORY  WRITE 31 00:2a:1234 0 EOF\n\
                     6: FLOCK  ADVISORY  WRITE 32 103:02:1234 0 EOF\n\
                     1: FLOCK  ADVISORY  WRITE 4242 fd:01:1234 0 EOF\n";
        let id = |dev, ino| LocksId { dev, ino };
        assert_eq!(flock_holders(locks, id(Some((0xfd, 1)), 1234)), vec![4242]);
        assert_eq!(flock_holders(locks, id(Some((0xfd, 1)), 4321)), vec![99]);
        assert_eq!(
            flock_holders(locks, id(Some((0xfd, 1)), 1)),
            Vec::<i32>::new()
        );
        // the same inode number on another filesystem is another file
        assert_eq!(flock_holders(locks, id(Some((0, 42)), 1234)), vec![31]);
        assert_eq!(flock_holders(locks, id(Some((0x103, 2)), 1234)), vec![32]);
        assert_eq!(
            flock_holders(locks, id(Some((8, 1)), 1234)),
            Vec::<i32>::new()
        );
        // a kernel that does not name the mount: the inode alone
        assert_eq!(flock_holders(locks, id(None, 1234)), vec![4242, 31, 32]);
    }

    #[test]
    fn a_mount_is_found_in_mountinfo_by_its_id() {
        let mountinfo = "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n\
                         36 22 0:32 /home /home rw,relatime shared:9 - btrfs /dev/vdb rw\n";
        assert_eq!(mount_device(mountinfo, 36), Some((0, 32)));
        assert_eq!(mount_device(mountinfo, 22), Some((254, 0)));
        assert_eq!(mount_device(mountinfo, 3), None);
    }

    /// The file's name computed here matches the kernel's line for a lock
    /// this process takes, device included.
    #[test]
    fn a_real_lock_is_found_by_device_and_inode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::write(&path, "").unwrap();
        let id = locks_id(&path).unwrap();
        assert_eq!(lock_holders(&path), Some(vec![]));
        let lock = Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        assert_eq!(lock_holders(&path), Some(vec![std::process::id() as i32]));
        // the same inode on a device it is not on holds nothing
        let locks = std::fs::read_to_string("/proc/locks").unwrap();
        match id.dev {
            Some((major, minor)) => {
                let elsewhere = LocksId {
                    dev: Some((major + 1, minor)),
                    ..id
                };
                assert_eq!(flock_holders(&locks, elsewhere), Vec::<i32>::new());
            }
            None => eprintln!("this kernel does not name a file's mount: the inode alone"),
        }
        drop(lock);
        assert_eq!(lock_holders(&path), Some(vec![]));
    }

    /// A held lock is found on every look while other locks are taken
    /// and released meanwhile (the list `/proc/locks` shows shifts under
    /// the reader).
    #[test]
    fn a_held_lock_is_found_while_others_come_and_go() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("lock");
        std::fs::write(&path, "").unwrap();
        let held = Flock::lock(File::open(&path).unwrap(), FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| e)
            .unwrap();
        let others: Vec<std::path::PathBuf> = (0..4)
            .map(|i| {
                let other = dir.path().join(format!("other{i}"));
                std::fs::write(&other, "").unwrap();
                other
            })
            .collect();
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let churn = {
            let done = std::sync::Arc::clone(&done);
            std::thread::spawn(move || {
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let locks: Vec<_> = others
                        .iter()
                        .map(|other| {
                            Flock::lock(File::open(other).unwrap(), FlockArg::LockExclusive)
                                .map_err(|(_, e)| e)
                                .unwrap()
                        })
                        .collect();
                    drop(locks);
                }
            })
        };
        let me = std::process::id() as i32;
        let missed = (0..5000)
            .filter(|_| !lock_holders(&path).is_some_and(|h| h.contains(&me)))
            .count();
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        churn.join().unwrap();
        drop(held);
        assert_eq!(missed, 0, "looks that did not see the held lock");
    }

    fn info_of(pid: u32, start_time: Option<u64>, paths: &DaemonPaths) -> DaemonInfo {
        DaemonInfo {
            pid,
            version: version(),
            socket: paths.socket.clone(),
            started_at: "2000-01-01T00:00:00Z".into(),
            start_time,
            listening: true,
            socket_id: None,
        }
    }

    #[test]
    fn the_holder_is_found_only_when_the_recorded_process_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let paths = DaemonPaths::with_runtime_dir(&dir.path().join("data"), dir.path());
        paths.ensure_data_dir().unwrap();
        let me = std::process::id();
        let my_start = process_tree::process_info(me as i32).unwrap().start_time;
        let write = |info: &DaemonInfo| {
            std::fs::write(&paths.info, serde_json::to_string(info).unwrap()).unwrap();
        };
        // this process runs this program; it does not hold the lock yet
        write(&info_of(me, Some(my_start), &paths));
        std::fs::write(&paths.lock, "").unwrap();
        assert!(find_holder(&paths).is_none());
        let lock = Flock::lock(
            File::open(&paths.lock).unwrap(),
            FlockArg::LockExclusiveNonblock,
        )
        .map_err(|(_, e)| e)
        .unwrap();
        let holder = find_holder(&paths).expect("the holder");
        assert_eq!(holder.info.pid, me);
        assert!(holder.runs());
        // another start time: a process that reused the pid
        write(&info_of(me, Some(my_start + 1), &paths));
        assert!(find_holder(&paths).is_none());
        // a live child of another program, named with its real start time
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let theirs = process_tree::process_info(child.id() as i32).unwrap();
        write(&info_of(child.id(), Some(theirs.start_time), &paths));
        assert!(find_holder(&paths).is_none());
        child.kill().unwrap();
        child.wait().unwrap();
        // the lock released: nobody holds it
        write(&info_of(me, Some(my_start), &paths));
        drop(lock);
        assert!(find_holder(&paths).is_none());
    }
}
