//! Reading processes from `/proc`.

use std::fs;
use std::sync::OnceLock;

/// One process as read from `/proc/<pid>/stat`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: i32,
    /// Parent process id.
    pub ppid: i32,
    /// Process group id.
    pub pgid: i32,
    /// Session id.
    pub sid: i32,
    /// The controlling terminal's device number in the kernel's encoding
    /// (minor bits 0–7 and 20–31, major bits 8–19), 0 without one.
    pub tty_nr: u32,
    /// Controlling terminal's foreground process group (`tpgid`), or -1.
    pub tpgid: i32,
    /// The one-letter state (`R`, `S`, `D`, `Z`, `T`, …).
    pub state: char,
    /// When the process started, in clock ticks after boot. A pid and its
    /// start time name one process: a reused pid has a later start time.
    pub start_time: u64,
}

impl ProcessInfo {
    /// True when the process has exited and only waits to be reaped.
    pub fn is_zombie(&self) -> bool {
        self.state == 'Z' || self.state == 'X'
    }
}

/// Reads `/proc/<pid>/stat`; `None` when the process is gone.
pub fn process_info(pid: i32) -> Option<ProcessInfo> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_stat(&text)
}

/// Parses the text of a `/proc/<pid>/stat` file.
///
/// The command name is in parentheses and may itself contain spaces and
/// parentheses, so the fields are read after the *last* `)`.
pub fn parse_stat(text: &str) -> Option<ProcessInfo> {
    let pid = text.split_whitespace().next()?.parse().ok()?;
    let rest = &text[text.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    let sid = fields.next()?.parse().ok()?;
    let tty_nr = fields.next()?.parse::<i32>().ok()? as u32;
    let tpgid = fields.next()?.parse().ok()?;
    // flags, minflt, cminflt, majflt, cmajflt, utime, stime, cutime,
    // cstime, priority, nice, num_threads, itrealvalue, then starttime.
    let start_time = fields.nth(13)?.parse().ok()?;
    Some(ProcessInfo {
        pid,
        ppid,
        pgid,
        sid,
        tty_nr,
        tpgid,
        state,
        start_time,
    })
}

/// The pids listed in `/proc` now.
fn listed_pids() -> Vec<i32> {
    let Ok(dir) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .collect()
}

/// Every process currently visible in `/proc`.
pub fn all_processes() -> Vec<ProcessInfo> {
    listed_pids().into_iter().filter_map(process_info).collect()
}

/// Whether `/proc` shows this process's own pid namespace, so a pid it
/// lists is the pid system calls take (checked once).
pub fn proc_is_ours() -> bool {
    static OURS: OnceLock<bool> = OnceLock::new();
    *OURS.get_or_init(|| {
        fs::read_link("/proc/self")
            .ok()
            .and_then(|target| target.to_str()?.parse::<u32>().ok())
            == Some(std::process::id())
    })
}

/// Whether `pid` may be in session `sid`, asked with one `getsid` instead
/// of reading its `stat`: false only when the kernel says it is in another
/// session or gone. A process can join a session only by being forked
/// by a member, so one that is in another session now is not a member.
fn may_be_in_session(pid: i32, sid: i32) -> bool {
    // SAFETY: plain syscall.
    let found = unsafe { libc::getsid(pid) };
    if found >= 0 {
        return found == sid;
    }
    // Gone; any other refusal (a security module's) leaves it to `stat`.
    std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The processes of session `sid` (zombies included).
///
/// One pass over `/proc`: each listed pid is asked for its session with
/// `getsid` (one system call, no file opened), and only the members'
/// `stat` is read, which stays the authority on what is found. Where
/// `/proc` shows another pid namespace, every `stat` is read.
pub fn session_members(sid: i32) -> Vec<ProcessInfo> {
    if !proc_is_ours() {
        return all_processes()
            .into_iter()
            .filter(|p| p.sid == sid)
            .collect();
    }
    listed_pids()
        .into_iter()
        .filter(|&pid| may_be_in_session(pid, sid))
        .filter_map(process_info)
        .filter(|p| p.sid == sid)
        .collect()
}

/// The processes of session `sid` that have not exited yet.
pub fn live_session_members(sid: i32) -> Vec<ProcessInfo> {
    session_members(sid)
        .into_iter()
        .filter(|p| !p.is_zombie())
        .collect()
}

/// The live processes descended from `root` (not `root` itself), when
/// `root` is still the process it names (its pid and start time): what
/// runs in a PID namespace whose init `root` is, a session left with
/// `setsid` included. Follows each process's `children` lists; where the
/// kernel has none (built without them), reads every `stat` once instead.
pub fn live_descendants(root: &ProcessInfo) -> Vec<ProcessInfo> {
    let same = |p: &ProcessInfo| p.start_time == root.start_time && !p.is_zombie();
    if !process_info(root.pid).is_some_and(|p| same(&p)) {
        return Vec::new();
    }
    // Every process, read once, when the kernel keeps no children lists.
    let mut table: Option<Vec<ProcessInfo>> = None;
    let mut found = Vec::new();
    let mut todo = vec![root.pid];
    // Bounded by the process table: a pid is listed under one parent.
    let mut seen = std::collections::BTreeSet::new();
    while let Some(parent) = todo.pop() {
        let listed = if table.is_none() {
            children_of(parent)
        } else {
            None
        };
        let children: Vec<ProcessInfo> = match listed {
            Some(pids) => pids.into_iter().filter_map(process_info).collect(),
            None => table
                .get_or_insert_with(all_processes)
                .iter()
                .filter(|p| p.ppid == parent)
                .copied()
                .collect(),
        };
        for child in children.into_iter().filter(|p| p.ppid == parent) {
            if seen.insert(child.pid) {
                if !child.is_zombie() {
                    found.push(child);
                }
                todo.push(child.pid);
            }
        }
    }
    found
}

/// The children of `pid` from its threads' `children` lists; `None` when
/// the kernel keeps no such list (a process that is gone has none).
fn children_of(pid: i32) -> Option<Vec<i32>> {
    let tasks = match fs::read_dir(format!("/proc/{pid}/task")) {
        Ok(tasks) => tasks,
        Err(_) => return Some(Vec::new()),
    };
    let mut children = Vec::new();
    for task in tasks.flatten() {
        match fs::read_to_string(task.path().join("children")) {
            Ok(text) => children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            ),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && task.path().exists() => {
                return None;
            }
            Err(_) => {}
        }
    }
    Some(children)
}

/// The longest command line [`command_line`] returns, in characters.
const COMMAND_CHARS: usize = 80;

/// The command line of `pid` for messages: its arguments joined by spaces,
/// cut to 80 characters, or its short name in brackets when it has none (a
/// kernel thread, a zombie), or `?` when it is gone.
pub fn command_line(pid: i32) -> String {
    let args = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
    let joined: String = String::from_utf8_lossy(&args)
        .split('\0')
        .filter(|a| !a.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    if !joined.is_empty() {
        let mut out: String = joined.chars().take(COMMAND_CHARS).collect();
        if joined.chars().count() > COMMAND_CHARS {
            out.push('…');
        }
        return out;
    }
    match fs::read_to_string(format!("/proc/{pid}/comm")) {
        Ok(name) => format!("[{}]", name.trim_end()),
        Err(_) => "?".to_owned(),
    }
}

/// The kernel's clock ticks after boot now, in the unit of
/// [`ProcessInfo::start_time`], as an upper bound: no process that has
/// started reads a later start time. `/proc/uptime` is floored to 10 ms
/// and a start time can read one tick past it, so one tick is added.
/// `None` when it cannot be read.
pub fn ticks_since_boot() -> Option<u64> {
    let uptime = fs::read_to_string("/proc/uptime").ok()?;
    let (whole, fraction) = uptime.split_whitespace().next()?.split_once('.')?;
    let centiseconds: u64 = whole.parse::<u64>().ok()? * 100 + fraction.parse::<u64>().ok()?;
    // SAFETY: plain sysconf query.
    let per_second = u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).ok()?;
    (per_second > 0).then(|| (centiseconds * per_second).div_ceil(100) + 1)
}

/// This process's resident memory in KiB (`VmRSS` in `/proc/self/status`);
/// 0 when it cannot be read.
pub fn resident_kib() -> u64 {
    fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn parses_stat_with_parentheses_in_name() {
        let text = "4242 (we ird) (name)) S 1 4242 4242 0 -1 4194560 0 0 0 0 3 4 0 0 20 0 1 0 987654 1234 56";
        assert_eq!(
            parse_stat(text),
            Some(ProcessInfo {
                pid: 4242,
                ppid: 1,
                pgid: 4242,
                sid: 4242,
                tty_nr: 0,
                tpgid: -1,
                state: 'S',
                start_time: 987654,
            })
        );
    }

    #[test]
    fn reads_our_own_start_time_and_command_line() {
        let me = process_info(std::process::id() as i32).unwrap();
        let now = ticks_since_boot().unwrap();
        assert!(me.start_time <= now, "{} > {now}", me.start_time);
        assert!(command_line(std::process::id() as i32).len() > 1);
        assert_eq!(command_line(-5), "?");
    }
}
