//! Which clients the daemon refuses (`SANDBOXED_CLIENT`): every process
//! that may be confined by a dsh sandbox — this daemon's or any other's.
//!
//! Landlock (before ABI 9) does not govern connecting to a Unix socket by
//! path, so a confined command can reach a daemon's socket and ask, in its
//! hello, for a connection whose config turns the sandbox off. Two checks,
//! both of facts the confined process cannot undo:
//!
//! * **Confinement marks**, read from `/proc` of the peer and compared
//!   with this daemon's own: every process a dsh sandbox confines runs
//!   with `no_new_privs` (set before Landlock), with at least one more
//!   seccomp filter than its parent, and — when the sandbox uses user
//!   namespaces — in a user namespace of its own. A peer more confined
//!   than this daemon by any of them (`NoNewPrivs` 1 where ours is 0, more
//!   `Seccomp_filters`, another user namespace) is refused, whichever dsh
//!   confined it. This is what keeps a command of one daemon from using a
//!   second daemon of the same user (another data directory) or the
//!   daemon that took over its socket in an upgrade.
//! * **Descent**: a peer that descends from this daemon (or whose line of
//!   parents cannot be followed to init) is refused as one it started.
//!
//! The peer is pinned by its pidfd (`SO_PEERPIDFD`) while it is read: what
//! was read of `/proc/PID` counts only if the pidfd's process is still
//! alive afterwards, so a pid reused meanwhile cannot stand in for it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::MetadataExt as _;

/// What makes a process confined, as the kernel shows it in `/proc`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marks {
    /// `NoNewPrivs:` of `/proc/PID/status`.
    pub no_new_privs: bool,
    /// `Seccomp_filters:` (the number of seccomp filters the process runs
    /// under; on a kernel without the field, 1 for `Seccomp: 2`).
    pub seccomp_filters: u32,
    /// The user namespace: device and inode of `/proc/PID/ns/user`.
    pub user_ns: (u64, u64),
}

impl Marks {
    /// The marks of process `pid` (`"self"` for this one).
    pub fn of(pid: &str) -> Result<Self, String> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
        let (no_new_privs, seccomp_filters) = parse_status(&status)
            .ok_or_else(|| format!("/proc/{pid}/status has no NoNewPrivs or Seccomp field"))?;
        let ns = std::fs::metadata(format!("/proc/{pid}/ns/user"))
            .map_err(|e| format!("cannot read /proc/{pid}/ns/user: {e}"))?;
        Ok(Self {
            no_new_privs,
            seccomp_filters,
            user_ns: (ns.dev(), ns.ino()),
        })
    }

    /// Why a process with these marks is more confined than one with
    /// `ours` (this daemon's), if it is.
    pub fn more_confined_than(&self, ours: &Marks) -> Option<Confined> {
        if self.no_new_privs && !ours.no_new_privs {
            return Some(Confined::NoNewPrivs);
        }
        if self.seccomp_filters > ours.seccomp_filters {
            return Some(Confined::Seccomp {
                peer: self.seccomp_filters,
                ours: ours.seccomp_filters,
            });
        }
        if self.user_ns != ours.user_ns {
            return Some(Confined::UserNamespace);
        }
        None
    }
}

/// `(NoNewPrivs, seccomp filters)` from the text of `/proc/PID/status`.
pub fn parse_status(status: &str) -> Option<(bool, u32)> {
    let field = |name: &str| {
        status.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            (key == name).then(|| value.trim().to_owned())
        })
    };
    let no_new_privs = field("NoNewPrivs")? == "1";
    let filters = match field("Seccomp_filters") {
        Some(n) => n.parse().ok()?,
        // Before Linux 5.9 only the mode is shown: a filter, or none.
        None => u32::from(field("Seccomp")? == "2"),
    };
    Some((no_new_privs, filters))
}

/// How a peer is more confined than the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Confined {
    /// It runs with `no_new_privs`; the daemon does not.
    NoNewPrivs,
    /// It runs under more seccomp filters.
    Seccomp {
        /// The peer's filters.
        peer: u32,
        /// The daemon's.
        ours: u32,
    },
    /// It runs in another user namespace.
    UserNamespace,
}

/// Why a client is refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It descends from this daemon, or its parents cannot be followed to
    /// init.
    StartedByUs,
    /// It is more confined than this daemon.
    Confined(Confined),
    /// The process that connected is gone (or the kernel named none), so
    /// nothing about it can be checked.
    Gone,
    /// Its confinement could not be read (the reason).
    Unreadable(String),
}

/// What a client that may run inside dsh's sandbox, or under
/// `no_new_privs` of its own, should do.
const ADVICE: &str = "a command confined by dsh's sandbox may not open a session of its own with \
     any dsh daemon, since that session could turn the sandbox off. If this is an MCP client \
     that itself runs confined (a sandboxed agent, a systemd service with NoNewPrivileges=yes, a \
     container or bubblewrap sandbox), stop this daemon (`dsh daemon stop`, run outside) so \
     that the client's next `dsh mcp` starts one in the client's own confinement, or run \
     `dsh mcp --standalone`";

impl Refusal {
    /// The message of the `SANDBOXED_CLIENT` reply.
    pub fn message(&self) -> String {
        match self {
            Refusal::StartedByUs | Refusal::Gone => format!(
                "this client is refused: {}",
                daemon_wire::SANDBOXED_CLIENT_WHY
            ),
            Refusal::Confined(Confined::NoNewPrivs) => format!(
                "this client is refused: it runs with no_new_privs set and this dsh daemon \
                 (pid {}) does not, as every command in dsh's sandbox runs; {ADVICE}",
                std::process::id()
            ),
            Refusal::Confined(Confined::Seccomp { peer, ours }) => format!(
                "this client is refused: it runs under {peer} seccomp filter(s) and this dsh \
                 daemon (pid {}) under {ours}, as commands in dsh's sandbox do; {ADVICE}",
                std::process::id()
            ),
            Refusal::Confined(Confined::UserNamespace) => format!(
                "this client is refused: it runs in another user namespace than this dsh daemon \
                 (pid {}), as commands in dsh's sandbox do; {ADVICE}",
                std::process::id()
            ),
            Refusal::Unreadable(why) => format!(
                "this client is refused: the dsh daemon could not check whether it runs in a \
                 sandbox ({why}); try again, and if it lasts, see the daemon's log"
            ),
        }
    }

    /// What the log says.
    pub fn log_reason(&self) -> &'static str {
        match self {
            Refusal::StartedByUs => "started by this daemon",
            Refusal::Confined(Confined::NoNewPrivs) => "runs with no_new_privs, this daemon not",
            Refusal::Confined(Confined::Seccomp { .. }) => "runs under more seccomp filters",
            Refusal::Confined(Confined::UserNamespace) => "runs in another user namespace",
            Refusal::Gone => "the connecting process is gone",
            Refusal::Unreadable(_) => "its confinement could not be read",
        }
    }
}

/// Checks the process that connected `socket`, whose pid the kernel gave
/// as `pid`: `Ok` when it may use this daemon.
pub fn check(pid: Option<i32>, socket: &impl AsRawFd) -> Result<(), Refusal> {
    let pid = pid.filter(|p| *p > 0).ok_or(Refusal::Gone)?;
    let pinned = match process_tree::peer_pidfd(socket) {
        Ok(fd) => fd,
        Err(e) if ui::is_resource_error(e) => {
            return Err(Refusal::Unreadable(format!(
                "pidfd of the client: {}",
                std::io::Error::from_raw_os_error(e)
            )));
        }
        Err(_) => return Err(Refusal::Gone),
    };
    let ours = own_marks().map_err(Refusal::Unreadable)?;
    let theirs = Marks::of(&pid.to_string());
    // What was read names the peer only if it still runs now.
    if pinned
        .as_ref()
        .is_some_and(|fd| !process_tree::pidfd_alive(fd))
    {
        return Err(Refusal::Gone);
    }
    let theirs = theirs.map_err(|e| {
        if process_tree::process_info(pid).is_none() {
            Refusal::Gone
        } else {
            Refusal::Unreadable(e)
        }
    })?;
    if let Some(how) = theirs.more_confined_than(&ours) {
        return Err(Refusal::Confined(how));
    }
    if started_by_us(pid, pinned.as_ref()) {
        return Err(Refusal::StartedByUs);
    }
    Ok(())
}

/// This process's marks, read once: none of them can be undone, and the
/// daemon adds none to itself (its sandbox applies to the processes it
/// starts), so the first successful read holds for its life. A failed
/// read is not kept: the next call reads again.
pub fn own_marks() -> Result<Marks, String> {
    static OURS: std::sync::OnceLock<Marks> = std::sync::OnceLock::new();
    if let Some(ours) = OURS.get() {
        return Ok(*ours);
    }
    let read = Marks::of("self")?;
    Ok(*OURS.get_or_init(|| read))
}

/// Whether the client `pid` may have been started by this daemon: it
/// descends from this process (an orphan of it is reparented to the
/// daemon, its subreaper, so it stays a descendant), or its line of
/// parents cannot be followed to init — the client already exited (a
/// confined process can connect, fork and exit, leaving the connection to
/// its child, which is then no longer the peer the kernel names) or a
/// parent exited during the walk. Such a client is refused: only a chain
/// that reaches init without passing this daemon is let in.
///
/// `peer` pins the client (`SO_PEERPIDFD`): a chain that reached init is
/// trusted only if the client is still alive afterwards, so `pid` named
/// it throughout and not a process that reused its pid. Every process of
/// the chain is read again after the walk; one that changed (it exited,
/// or was reparented because its parent did) means the walk may have
/// followed a reused pid, and the walk is retried. Without a pidfd (a
/// kernel before 6.5) the peer's own pid cannot be pinned.
pub(crate) fn started_by_us(pid: i32, peer: Option<&OwnedFd>) -> bool {
    for _ in 0..3 {
        match walk_to_init(pid) {
            Walk::Ours => return true,
            Walk::Init(chain) => {
                if peer.is_some_and(|fd| !process_tree::pidfd_alive(fd)) {
                    return true;
                }
                let unchanged = chain.iter().all(|(p, seen)| {
                    process_tree::process_info(*p)
                        .is_some_and(|now| (now.ppid, now.start_time) == *seen)
                });
                if unchanged {
                    return false;
                }
            }
        }
    }
    true
}

/// Where a walk up the parents of a process ended.
enum Walk {
    /// At this daemon, or nowhere (a process of the chain was gone).
    Ours,
    /// At init (or the top of the pid namespace), through these processes
    /// and what was read of each (parent, start time).
    Init(Vec<(i32, (i32, u64))>),
}

fn walk_to_init(pid: i32) -> Walk {
    let me = std::process::id() as i32;
    let mut chain = Vec::new();
    let mut current = pid;
    // A chain of parents is finite; the bound only guards a /proc that
    // changes under the walk.
    for _ in 0..4096 {
        if current == me {
            return Walk::Ours;
        }
        if current == 1 {
            return Walk::Init(chain);
        }
        match process_tree::process_info(current) {
            Some(info) if info.ppid > 0 && info.ppid != current => {
                chain.push((current, (info.ppid, info.start_time)));
                current = info.ppid;
            }
            // The parent of a process in another pid namespace reads 0:
            // the walk reached the top of the namespace this daemon sees.
            Some(info) if info.ppid == 0 => {
                chain.push((current, (info.ppid, info.start_time)));
                return Walk::Init(chain);
            }
            _ => return Walk::Ours,
        }
    }
    Walk::Ours
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::{BufRead as _, BufReader};
    use std::os::unix::process::CommandExt as _;
    use std::process::{Command, Stdio};

    fn pidfd_open(pid: i32) -> OwnedFd {
        process_tree::pidfd_open(pid).unwrap()
    }

    /// A `sleep` whose parent exited: not a descendant of this process
    /// (which is no subreaper here).
    fn orphan() -> i32 {
        let mut sh = Command::new("sh")
            .args(["-c", "sleep 30 >/dev/null 2>&1 & echo $!"])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(sh.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        sh.wait().unwrap();
        line.trim().parse().unwrap()
    }

    fn end(pid: i32) {
        // SAFETY: plain syscall, to a process this test started.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }

    const STATUS: &str = "Name:\tcat\nUmask:\t0022\nState:\tR (running)\n\
        NoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\nSpeculation_Store_Bypass:\tthread vulnerable\n";

    #[test]
    fn the_status_fields_are_read() {
        assert_eq!(parse_status(STATUS), Some((false, 0)));
        let confined = STATUS
            .replace("NoNewPrivs:\t0", "NoNewPrivs:\t1")
            .replace("Seccomp:\t0", "Seccomp:\t2")
            .replace("Seccomp_filters:\t0", "Seccomp_filters:\t3");
        assert_eq!(parse_status(&confined), Some((true, 3)));
        // an older kernel shows only the mode
        let old = "NoNewPrivs:\t1\nSeccomp:\t2\n";
        assert_eq!(parse_status(old), Some((true, 1)));
        assert_eq!(
            parse_status("NoNewPrivs:\t0\nSeccomp:\t0\n"),
            Some((false, 0))
        );
        // no field, no marks: the caller refuses
        assert_eq!(parse_status("Name:\tx\n"), None);
        assert_eq!(
            parse_status("NoNewPrivs:\t0\nSeccomp_filters:\tmany\n"),
            None
        );
    }

    fn marks(no_new_privs: bool, seccomp_filters: u32, user_ns: u64) -> Marks {
        Marks {
            no_new_privs,
            seccomp_filters,
            user_ns: (4, user_ns),
        }
    }

    #[test]
    fn a_peer_more_confined_by_any_mark_is_refused_and_an_equal_or_freer_one_is_not() {
        let free = marks(false, 0, 1);
        assert_eq!(free.more_confined_than(&free), None);
        assert_eq!(
            marks(true, 0, 1).more_confined_than(&free),
            Some(Confined::NoNewPrivs)
        );
        assert_eq!(
            marks(false, 1, 1).more_confined_than(&free),
            Some(Confined::Seccomp { peer: 1, ours: 0 })
        );
        assert_eq!(
            marks(false, 0, 2).more_confined_than(&free),
            Some(Confined::UserNamespace)
        );
        // a daemon that itself runs under no_new_privs and one filter (it
        // was started by a confined client): a peer like it passes, one
        // with a filter more does not
        let boxed = marks(true, 1, 1);
        assert_eq!(boxed.more_confined_than(&boxed), None);
        assert_eq!(
            marks(true, 2, 1).more_confined_than(&boxed),
            Some(Confined::Seccomp { peer: 2, ours: 1 })
        );
        // a freer peer (a person's `dsh ps` to that daemon) passes
        assert_eq!(free.more_confined_than(&boxed), None);
    }

    #[test]
    fn the_marks_of_real_processes_are_read_from_proc() {
        let me = Marks::of("self").unwrap();
        // a child with no_new_privs set before exec
        let mut child = Command::new("sleep");
        child.arg("30");
        // SAFETY: prctl is async-signal-safe and touches no memory of ours.
        unsafe {
            child.pre_exec(|| {
                if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = child.spawn().unwrap();
        let theirs = Marks::of(&child.id().to_string()).unwrap();
        child.kill().unwrap();
        child.wait().unwrap();
        assert!(theirs.no_new_privs);
        assert_eq!(theirs.user_ns, me.user_ns);
        assert_eq!(theirs.seccomp_filters, me.seccomp_filters);
        if me.no_new_privs {
            eprintln!("this test runs under no_new_privs: the mark cannot tell here");
        } else {
            assert_eq!(theirs.more_confined_than(&me), Some(Confined::NoNewPrivs));
        }
        assert!(Marks::of("0").is_err());
        // read once, the same marks
        assert_eq!(own_marks().unwrap(), me);
        assert_eq!(own_marks().unwrap(), me);
    }

    /// A client under no_new_privs, connected from outside this process's
    /// descent (an orphan), is refused for its mark; the same client
    /// without it is let in.
    #[test]
    fn a_stranger_under_no_new_privs_is_refused_and_one_without_it_is_not() {
        if !test_support::needs(&["python3"]) {
            return;
        }
        if Marks::of("self").unwrap().no_new_privs {
            eprintln!("this test runs under no_new_privs: the mark cannot tell here");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        listener.set_nonblocking(true).unwrap();
        // A client that never connects fails the test instead of blocking
        // it.
        let accept = || {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            loop {
                match listener.accept() {
                    Ok((accepted, _)) => return accepted,
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        assert!(
                            std::time::Instant::now() < deadline,
                            "the client did not connect within 60 s"
                        );
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(e) => panic!("accept: {e}"),
                }
            }
        };
        // The client connects and waits until the test closes the
        // connection (its `recv` returns); `setsid -f` leaves it an
        // orphan of init.
        let script = "import socket, sys, ctypes\n\
            if sys.argv[2] == '1':\n    ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)\n\
            s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])\n\
            s.recv(1)\n";
        for (nnp, refused) in [("1", true), ("0", false)] {
            let mut launcher = Command::new("setsid")
                .args(["-f", "python3", "-c", script])
                .arg(&path)
                .arg(nnp)
                .spawn()
                .unwrap();
            assert!(launcher.wait().unwrap().success());
            let accepted = accept();
            let pid = process_tree::peer_pid(&accepted).unwrap();
            let got = check(Some(pid), &accepted);
            drop(accepted);
            if refused {
                assert_eq!(got, Err(Refusal::Confined(Confined::NoNewPrivs)));
            } else {
                assert_eq!(got, Ok(()));
            }
        }
    }

    #[test]
    fn a_child_of_this_process_is_ours_and_an_orphan_elsewhere_is_not() {
        let mut child = Command::new("sleep").arg("30").spawn().unwrap();
        let pid = child.id() as i32;
        assert!(started_by_us(pid, Some(&pidfd_open(pid))));
        child.kill().unwrap();
        child.wait().unwrap();

        let stranger = orphan();
        assert!(!started_by_us(stranger, Some(&pidfd_open(stranger))));
        assert!(!started_by_us(stranger, None));
        end(stranger);
    }

    #[test]
    fn a_peer_reaped_before_the_check_is_refused_though_its_pid_names_a_stranger() {
        if !test_support::needs(&["python3"]) {
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let stranger = orphan();
        // This process, alive, is its own.
        let peer = std::os::unix::net::UnixStream::connect(&path).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        let me = std::process::id() as i32;
        assert_eq!(check(Some(me), &accepted), Err(Refusal::StartedByUs));
        drop(peer);
        // A peer that connected, exited and was reaped: whatever its pid
        // names now, it is refused (no pidfd, or the pidfd of a dead
        // process, depending on the kernel).
        let mut client = Command::new("python3")
            .args([
                "-c",
                "import socket, sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
            ])
            .arg(&path)
            .spawn()
            .unwrap();
        assert!(client.wait().unwrap().success());
        let (accepted, _) = listener.accept().unwrap();
        let pinned = matches!(process_tree::peer_pidfd(&accepted), Ok(Some(_)) | Err(_));
        if pinned {
            assert!(check(Some(stranger), &accepted).is_err());
        } else {
            eprintln!("this kernel has no SO_PEERPIDFD: the peer cannot be pinned");
        }
        end(stranger);
    }

    #[test]
    fn a_peer_that_exited_is_refused_though_its_pid_now_names_a_stranger() {
        // The peer connected and exited; its pid now names a process
        // whose parents reach init. The walk alone would let it in.
        let mut peer = Command::new("true").spawn().unwrap();
        let pinned = pidfd_open(peer.id() as i32);
        peer.wait().unwrap();
        let stranger = orphan();
        assert!(!started_by_us(stranger, None));
        assert!(started_by_us(stranger, Some(&pinned)));
        end(stranger);
    }
}
