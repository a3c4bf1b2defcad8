//! Who holds the terminal, and what else they wait on. Read from `/proc`
//! only: nothing here signals, reads or writes a process.
//!
//! The settle ladder's input-wait proof is not limited to the foreground
//! process group: a multiplexer's server (which took the terminal from its
//! client over a socket), a password dialog a daemon started for us (with
//! the terminal's name on its command line) or the last program of a pipe
//! read the terminal too. Any process that has the terminal open — by a
//! descriptor, or as its controlling terminal — may be the one that waits.
//!
//! * [`Mark`] tells a process or thread born after a moment from one that
//!   existed before it: a wait of one born since the write is new since
//!   the write, whatever its counts;
//! * [`holders`] scans `/proc` for the processes that hold the terminal;
//! * [`remote_peer`] says whether a process keeps an established TCP
//!   connection (ssh's link, a debugger's inspector socket, jshell's
//!   evaluator): a wait of such a process may still be followed by an
//!   answer on its way;
//! * [`locks_memory`] says whether a process keeps locked memory, as
//!   programs that read a secret do, so the secret never reaches swap.

use std::fs;
use std::os::unix::fs::MetadataExt as _;
use std::sync::OnceLock;

use crate::probe::Tty;

/// A moment, as the kernel numbers processes and counts their start:
/// the last pid it gave out and the clock ticks since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Mark {
    last_pid: Option<i32>,
    ticks: Option<u64>,
}

impl Mark {
    /// Now. `/proc/sys/kernel/ns_last_pid` is the last pid given out in
    /// our pid namespace; a process started later in it, or in a
    /// namespace below it, gets a later one (until the numbers wrap).
    /// (Only where `/proc` shows our own pid namespace: elsewhere its
    /// pids are not the counter's.)
    pub(crate) fn now() -> Self {
        let last_pid = process_tree::proc_is_ours().then(last_pid).flatten();
        Self {
            last_pid,
            ticks: boot_ticks(),
        }
    }

    /// Whether thread or process `tid` started after this moment. Both
    /// must agree: a pid given out later (wrap-around aside), and a start
    /// no earlier than the mark's clock tick (which rules the wrap out).
    /// Without the pid counter, only a start in a later tick proves it.
    pub(crate) fn born_after(&self, tid: i32) -> bool {
        let Some(start) = fs::read_to_string(format!("/proc/{tid}/stat"))
            .ok()
            .and_then(|t| process_tree::parse_stat(&t))
            .map(|p| p.start_time)
        else {
            return false;
        };
        let Some(ticks) = self.ticks else {
            return false;
        };
        match self.last_pid {
            Some(last) => start >= ticks && pid_after(tid, last),
            None => start > ticks,
        }
    }
}

/// The clock ticks since boot, rounded down as the kernel rounds a
/// process's start time (`starttime` in `/proc/<pid>/stat`): a process
/// started at or after this moment has a start time of at least this.
fn boot_ticks() -> Option<u64> {
    // SAFETY: `clock_gettime` fills a `timespec` we own.
    let now = unsafe {
        let mut now: libc::timespec = std::mem::zeroed();
        if libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut now) != 0 {
            return None;
        }
        now
    };
    // SAFETY: plain sysconf query.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    let nanos =
        u64::try_from(now.tv_sec).ok()? * 1_000_000_000 + u64::try_from(now.tv_nsec).ok()?;
    (per_second > 0).then(|| nanos / (1_000_000_000 / per_second))
}

/// The last pid the kernel gave out in our pid namespace, read with one
/// `pread` of `/proc/sys/kernel/ns_last_pid` kept open (a send reads it
/// before each write).
fn last_pid() -> Option<i32> {
    use std::os::unix::fs::FileExt as _;
    static FILE: OnceLock<Option<fs::File>> = OnceLock::new();
    let file = FILE
        .get_or_init(|| fs::File::open("/proc/sys/kernel/ns_last_pid").ok())
        .as_ref()?;
    let mut buf = [0u8; 16];
    let n = file.read_at(&mut buf, 0).ok()?;
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// The largest pid plus one (`/proc/sys/kernel/pid_max`), read once.
fn pid_max() -> i32 {
    static MAX: OnceLock<i32> = OnceLock::new();
    *MAX.get_or_init(|| {
        fs::read_to_string("/proc/sys/kernel/pid_max")
            .ok()
            .and_then(|t| t.trim().parse().ok())
            .unwrap_or(4_194_304)
    })
}

/// Whether `pid` was given out after `last`, the pid counter going round
/// from `pid_max` to the low numbers.
fn pid_after(pid: i32, last: i32) -> bool {
    let half = pid_max() / 2;
    (pid > last && pid - last < half) || (pid < last && last - pid > half)
}

/// A process seen holding the terminal: its pid and start time name it
/// (a reused pid has another start time).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct Holder {
    pub pid: i32,
    pub start_time: u64,
}

impl Holder {
    /// The process `pid`, when it is alive.
    pub(crate) fn of(pid: i32) -> Option<Self> {
        let info = process_tree::process_info(pid)?;
        (!info.is_zombie()).then_some(Self {
            pid,
            start_time: info.start_time,
        })
    }

    /// Whether the process is still the one seen (alive, same start).
    pub(crate) fn alive(&self) -> bool {
        Self::of(self.pid).is_some_and(|h| h == *self)
    }
}

/// The live processes, other than those of `skip_session`, that hold the
/// terminal `tty`: as their controlling terminal (when it is session
/// `tty_session`'s), or by a descriptor.
///
/// One pass over `/proc`: each process's `stat` (its controlling
/// terminal), then, for the others, the names of its descriptors, and a
/// `stat` only of those that name a terminal device. Processes whose
/// descriptors are closed to us are passed over.
///
/// A controlling terminal is named in `stat` by its device number only,
/// which every `devpts` instance gives out again (each sandbox's own
/// `/dev/pts` has a `pts/0`): a process counts by it only when it is in
/// the session the terminal belongs to — every process that has the
/// terminal as its controlling one is — not every process on a `pts/0`.
pub(crate) fn holders(tty: &Tty, skip_session: i32, tty_session: Option<i32>) -> Vec<Holder> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    let ours = std::process::id() as i32;
    let mut found = Vec::new();
    for pid in dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok()) {
        if pid == ours {
            continue;
        }
        let Some(info) = process_tree::process_info(pid) else {
            continue;
        };
        // Kernel threads (children of kthreadd) hold no descriptors.
        if info.is_zombie() || info.sid == skip_session || info.ppid == 2 || pid == 2 {
            continue;
        }
        let controlling = tty_session == Some(info.sid) && tty.is_controlling(info.tty_nr);
        if controlling || holds_by_descriptor(pid, tty) {
            found.push(Holder {
                pid,
                start_time: info.start_time,
            });
        }
    }
    found
}

/// Whether one of `pid`'s descriptors opens the terminal `tty`.
fn holds_by_descriptor(pid: i32, tty: &Tty) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(Result::ok).any(|fd| {
        let Ok(target) = fs::read_link(fd.path()) else {
            return false;
        };
        let target = target.to_string_lossy();
        // Sockets, pipes, event descriptors and files name themselves;
        // only a terminal device is worth a `stat`.
        (target.contains("pts") || target.contains("tty"))
            && fs::metadata(fd.path()).is_ok_and(|m| tty.is(m.dev(), m.ino()))
    })
}

/// What one of a process's descriptors opens, as far as a wait on it
/// may bring an answer from elsewhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Link {
    Pipe(u64),
    Socket(u64),
    /// The master of another terminal: what comes from it is the output
    /// of the programs on that terminal (a multiplexer's windows, a
    /// program `script` or `expect` runs).
    Master,
    Other,
}

/// Whether process `pid` holds the master side of a pty ([`Link::Master`]
/// among its descriptors): a multiplexer's server, `script`, `expect`.
pub(crate) fn holds_a_master(pid: i32) -> bool {
    let Ok(fds) = fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    fds.filter_map(|fd| fd.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .any(|fd| link_of(pid, fd) == Link::Master)
}

fn link_of(pid: i32, fd: i32) -> Link {
    let Ok(target) = fs::read_link(format!("/proc/{pid}/fd/{fd}")) else {
        return Link::Other;
    };
    let target = target.to_string_lossy();
    let inode = |prefix: &str| {
        target
            .strip_prefix(prefix)?
            .strip_suffix(']')?
            .parse::<u64>()
            .ok()
    };
    if let Some(ino) = inode("pipe:[") {
        Link::Pipe(ino)
    } else if let Some(ino) = inode("socket:[") {
        Link::Socket(ino)
    } else if target.ends_with("/ptmx") {
        Link::Master
    } else {
        Link::Other
    }
}

/// Whether, among the descriptors `set` that process `pid` waits on, one
/// is a pipe or a socket to another process: a pipe whose other end is
/// not among the process's own descriptors (a program's own wake-up pipe
/// is), a Unix socket whose peer is not among them either (asyncio's and
/// prompt_toolkit's wake-up socket pair is), a network socket, or the
/// master of another terminal (a multiplexer relaying its windows).
pub(crate) fn waits_on_another_process(pid: i32, set: &[i32]) -> bool {
    let links: Vec<Link> = set.iter().map(|fd| link_of(pid, *fd)).collect();
    if links.iter().all(|l| *l == Link::Other) {
        return false;
    }
    let own: Vec<Link> = fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|fds| {
            fds.filter_map(Result::ok)
                .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
                .map(|fd| link_of(pid, fd))
                .collect()
        })
        .unwrap_or_default();
    links.into_iter().any(|link| match link {
        Link::Pipe(ino) => own.iter().filter(|l| **l == Link::Pipe(ino)).count() < 2,
        Link::Socket(ino) => match unix_peer(ino) {
            Some(Some(peer)) => !own.contains(&Link::Socket(peer)),
            // A Unix socket with no peer (a listening one, an unconnected
            // datagram socket): nothing answers on it.
            Some(None) => false,
            // Not a Unix socket of our network namespace: a TCP or UDP
            // connection, or one we cannot see into.
            None => tcp_established(pid, ino),
        },
        Link::Master => true,
        Link::Other => false,
    })
}

/// The peer of the Unix socket of inode `ino`, asked of the kernel's
/// socket diagnostics (`NETLINK_SOCK_DIAG`, `UDIAG_SHOW_PEER`): `None`
/// when it is not a Unix socket the kernel shows us, `Some(None)` when it
/// has no peer.
fn unix_peer(ino: u64) -> Option<Option<u64>> {
    const SOCK_DIAG_BY_FAMILY: u16 = 20;
    const UDIAG_SHOW_PEER: u32 = 0x4;
    const UNIX_DIAG_PEER: u16 = 2;
    let ino32 = u32::try_from(ino).ok()?;
    // nlmsghdr (16 bytes), then unix_diag_req (24 bytes).
    let mut request = [0u8; 40];
    request[0..4].copy_from_slice(&40u32.to_ne_bytes());
    request[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    request[6..8].copy_from_slice(&(libc::NLM_F_REQUEST as u16).to_ne_bytes());
    request[8..12].copy_from_slice(&1u32.to_ne_bytes());
    request[16] = libc::AF_UNIX as u8;
    request[20..24].copy_from_slice(&u32::MAX.to_ne_bytes());
    request[24..28].copy_from_slice(&ino32.to_ne_bytes());
    request[28..32].copy_from_slice(&UDIAG_SHOW_PEER.to_ne_bytes());
    request[32..40].copy_from_slice(&[0xff; 8]);
    // SAFETY: a socket we own, closed below; the buffers are ours and
    // sized as passed.
    let reply = unsafe {
        let fd = libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_DGRAM | libc::SOCK_CLOEXEC,
            libc::NETLINK_SOCK_DIAG,
        );
        if fd < 0 {
            return None;
        }
        let mut reply = vec![0u8; 1024];
        let sent = libc::send(fd, request.as_ptr().cast(), request.len(), 0);
        let got = if sent == request.len() as isize {
            libc::recv(fd, reply.as_mut_ptr().cast(), reply.len(), 0)
        } else {
            -1
        };
        libc::close(fd);
        reply.truncate(usize::try_from(got).ok()?);
        reply
    };
    // nlmsghdr, then unix_diag_msg (16 bytes), then attributes.
    let kind = u16::from_ne_bytes(reply.get(4..6)?.try_into().ok()?);
    if kind != SOCK_DIAG_BY_FAMILY {
        return None;
    }
    let len = (u32::from_ne_bytes(reply.get(0..4)?.try_into().ok()?) as usize).min(reply.len());
    let mut at = 32;
    while at + 4 <= len {
        let attr_len = u16::from_ne_bytes(reply.get(at..at + 2)?.try_into().ok()?) as usize;
        let attr_kind = u16::from_ne_bytes(reply.get(at + 2..at + 4)?.try_into().ok()?);
        if attr_len < 4 {
            break;
        }
        if attr_kind == UNIX_DIAG_PEER {
            let peer = u32::from_ne_bytes(reply.get(at + 4..at + 8)?.try_into().ok()?);
            return Some((peer != 0).then_some(u64::from(peer)));
        }
        at += attr_len.div_ceil(4) * 4;
    }
    Some(None)
}

/// Whether the socket of inode `ino` is an established TCP connection in
/// process `pid`'s network namespace.
fn tcp_established(pid: i32, ino: u64) -> bool {
    ["tcp", "tcp6"].iter().any(|table| {
        fs::read_to_string(format!("/proc/{pid}/net/{table}"))
            .is_ok_and(|text| established_inodes(&text).any(|i| i == ino))
    })
}

/// Whether process `pid` keeps an established TCP connection: one of its
/// descriptors is a socket that its network namespace's
/// `/proc/<pid>/net/tcp` or `tcp6` lists as established. `None` when its
/// descriptors are closed to us.
pub(crate) fn remote_peer(pid: i32) -> Option<bool> {
    let fds = fs::read_dir(format!("/proc/{pid}/fd")).ok()?;
    let sockets: Vec<u64> = fds
        .filter_map(Result::ok)
        .filter_map(|fd| {
            let target = fs::read_link(fd.path()).ok()?;
            let target = target.to_str()?;
            target
                .strip_prefix("socket:[")?
                .strip_suffix(']')?
                .parse()
                .ok()
        })
        .collect();
    if sockets.is_empty() {
        return Some(false);
    }
    Some(["tcp", "tcp6"].iter().any(|table| {
        fs::read_to_string(format!("/proc/{pid}/net/{table}"))
            .is_ok_and(|text| established_inodes(&text).any(|inode| sockets.contains(&inode)))
    }))
}

/// The inodes of the established connections a `/proc/net/tcp` table
/// lists (state `01`).
fn established_inodes(table: &str) -> impl Iterator<Item = u64> + '_ {
    table.lines().skip(1).filter_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        // sl local rem st tx:rx tr:when retrnsmt uid timeout inode
        (fields.get(3) == Some(&"01"))
            .then(|| fields.get(9)?.parse().ok())
            .flatten()
    })
}

/// Whether process `pid` keeps locked memory (`VmLck` in its status):
/// what a program that reads a secret does, so the secret never reaches
/// swap (pinentry's and gpg's secure memory).
pub(crate) fn locks_memory(pid: i32) -> bool {
    fs::read_to_string(format!("/proc/{pid}/status")).is_ok_and(|text| {
        text.lines()
            .find_map(|l| l.strip_prefix("VmLck:"))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .is_some_and(|kib| kib > 0)
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn pids_given_out_later_are_after_even_across_the_wrap() {
        let max = pid_max();
        assert!(pid_after(101, 100));
        assert!(!pid_after(100, 100));
        assert!(!pid_after(99, 100));
        assert!(pid_after(5, max - 5));
        assert!(!pid_after(max - 5, 5));
    }

    /// A process of its own session on a terminal, started by `argv`;
    /// returns once it said it holds it.
    fn holding(argv: &[&str]) -> std::process::Child {
        test_support::spawn_ready(
            std::process::Command::new(argv[0])
                .args(&argv[1..])
                .stdin(std::process::Stdio::null()),
        )
    }

    #[test]
    fn a_process_on_another_devpts_with_the_same_number_is_no_holder() {
        use std::os::fd::AsRawFd as _;
        if !test_support::needs(&["python3", "unshare"]) {
            return;
        }
        // Our terminal, on this devpts.
        let master = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/ptmx")
            .unwrap();
        let mut number: libc::c_int = 0;
        let unlock: libc::c_int = 0;
        // SAFETY: ioctls on our master that read or write one int we own.
        unsafe {
            assert_eq!(
                libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock),
                0
            );
            assert_eq!(
                libc::ioctl(master.as_raw_fd(), libc::TIOCGPTN, &mut number),
                0
            );
        }
        let path = format!("/dev/pts/{number}");
        let tty = Tty::of_path(&path).unwrap();
        // A process whose controlling terminal it is.
        let take = "import os, sys, time\n\
                    os.setsid()\n\
                    fd = os.open(sys.argv[1], os.O_RDWR)\n\
                    print('ready', flush=True)\n\
                    time.sleep(60)\n";
        let mut own = holding(&["python3", "-c", take, &path]);
        // Another process whose controlling terminal has the same number on
        // a devpts of its own (as in another sandbox).
        let other = "import fcntl, os, struct, sys, time\n\
                     want = int(sys.argv[1])\n\
                     kept = []\n\
                     while True:\n\
                     \x20   m = os.open('/dev/pts/ptmx', os.O_RDWR | os.O_NOCTTY)\n\
                     \x20   fcntl.ioctl(m, 0x40045431, struct.pack('i', 0))\n\
                     \x20   n = struct.unpack('i', fcntl.ioctl(m, 0x80045430, struct.pack('i', 0)))[0]\n\
                     \x20   kept.append(m)\n\
                     \x20   if n >= want: break\n\
                     os.setsid()\n\
                     fd = os.open(f'/dev/pts/{want}', os.O_RDWR)\n\
                     print('ready', flush=True)\n\
                     time.sleep(60)\n";
        let script = "mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts && exec python3 -c \"$0\" \"$1\"";
        let number = number.to_string();
        let mut foreign = holding(&[
            "unshare",
            "-Urm",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            other,
            &number,
        ]);
        let of = |child: &std::process::Child| {
            let pid = child.id() as i32;
            process_tree::process_info(pid).unwrap()
        };
        let (own_info, foreign_info) = (of(&own), of(&foreign));
        let mut sid: libc::pid_t = 0;
        // SAFETY: an ioctl that writes one pid_t we own, on our master.
        let got_sid = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGSID, &mut sid) };
        // SAFETY: plain syscall.
        let ours = unsafe { libc::getsid(0) };
        let found: Vec<i32> = holders(&tty, ours, Some(sid))
            .iter()
            .map(|h| h.pid)
            .collect();
        for child in [&mut own, &mut foreign] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
        // The kernel names both controlling terminals by the same number;
        // ours is the session of the process that took it.
        assert_eq!(own_info.tty_nr, foreign_info.tty_nr);
        assert_eq!((got_sid, sid), (0, own_info.sid));
        assert!(found.contains(&own_info.pid), "{found:?}");
        assert!(!found.contains(&foreign_info.pid), "{found:?}");
    }

    #[test]
    fn a_child_started_after_a_mark_is_born_after_it_and_we_are_not() {
        let mark = Mark::now();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        let pid = child.id() as i32;
        assert!(mark.born_after(pid));
        assert!(!mark.born_after(std::process::id() as i32));
        assert!(Holder::of(pid).is_some_and(|h| h.alive()));
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(!mark.born_after(pid));
    }

    #[test]
    fn established_connections_are_read_from_the_table() {
        let table = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   \
            0: 0100007F:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0 100 0 0 10 0\n   \
            1: 0100007F:9C40 0100007F:0016 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0 20 4 30 10 -1\n";
        assert_eq!(established_inodes(table).collect::<Vec<_>>(), vec![222]);
    }

    #[test]
    fn a_socket_pair_of_our_own_is_no_other_process_and_a_childs_pipe_is() {
        use std::os::fd::AsRawFd as _;
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let me = std::process::id() as i32;
        assert!(!waits_on_another_process(me, &[a.as_raw_fd()]));
        let Link::Socket(ino) = link_of(me, b.as_raw_fd()) else {
            panic!("not a socket");
        };
        assert!(unix_peer(ino).is_some_and(|p| p.is_some()));
        let mut child = std::process::Command::new("cat")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let out = child.stdout.as_ref().unwrap().as_raw_fd();
        assert!(waits_on_another_process(me, &[out]));
        drop(child.stdin.take());
        child.wait().unwrap();
    }

    #[test]
    fn a_process_without_sockets_has_no_remote_peer() {
        assert_eq!(remote_peer(std::process::id() as i32), Some(false));
        assert!(!locks_memory(std::process::id() as i32));
    }
}
