//! The terminals inside a multiplexer: when the process found waiting on
//! the terminal is a multiplexer's server (`tmux`, `screen`), what was
//! sent is answered by the programs on its own terminals (its windows'
//! ptys, whose master sides it holds), not by the server. The server is
//! back waiting the moment it relayed the keys; whether the answer is
//! complete is told by the programs inside: the send counts as answered
//! once every inner terminal that moved since the write has a foreground
//! program waiting to read it again, and as busy while one that moved
//! has a foreground program doing anything else (`sleep 3; echo done`
//! typed into a tmux window).
//!
//! "Moved" is judged against a [`Baseline`] taken before the write: an
//! inner terminal whose foreground group changed (a command started or
//! ended in it, or the terminal is new), or one of whose blocking readers
//! read since (woken for anything else — a signal, a redraw — it did not). A window elsewhere that runs on by itself (`tail -f`, a
//! build) or wakes on a timer (`top`) did not move in this sense, and is
//! neither waited for nor taken for the answer.

use std::collections::HashMap;

use crate::holders::holds_a_master;
use crate::probe::{Tty, WaitState, thread_ids, thread_state, wait_state};

/// One terminal inside a multiplexer.
struct Inner {
    tty: Tty,
    /// Its foreground process group (`tpgid`); `<= 0` when none.
    fg: i32,
    /// The processes on it of that group.
    members: Vec<i32>,
}

/// What the inner terminals say of a send (see the module doc).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// No inner terminal moved since the write: they say nothing (the
    /// keys may not be relayed yet, or were for the server itself).
    Untouched,
    /// Every inner terminal that moved waits to read again.
    Answered,
    /// Every inner terminal that moved waits to read again, but the
    /// server has not yet read as much as their readers wrote since the
    /// write, or is not yet asleep again: their last output is still on
    /// its way.
    Relaying,
    /// An inner terminal that moved runs something that is not reading.
    Busy,
}

/// What the inner terminals of the multiplexers were before the write:
/// each terminal's foreground group, how much the threads then blocked
/// reading it had read and written, and how much each server had read.
#[derive(Debug, Default)]
pub(crate) struct Baseline {
    foreground: HashMap<Tty, i32>,
    readers: HashMap<i32, Option<Io>>,
    servers: HashMap<i32, Option<Io>>,
}

/// A thread's or a process's byte counts (`rchar`, `wchar` in `io`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Io {
    read: u64,
    written: u64,
}

impl Baseline {
    /// Adds the inner terminals of process `pid`, when it is a
    /// multiplexer (holds a pty's master side).
    pub(crate) fn add(&mut self, pid: i32, outer: &Tty) {
        if !holds_a_master(pid) {
            return;
        }
        self.servers.insert(pid, io(&format!("/proc/{pid}/io")));
        for inner in inner_terminals(pid, outer) {
            self.foreground.insert(inner.tty, inner.fg);
            for member in &inner.members {
                if let WaitState::OnTerminal {
                    tid, limit: None, ..
                } = wait_state(*member, &inner.tty)
                {
                    self.readers.insert(tid, thread_io(*member, tid));
                }
            }
        }
    }

    /// The verdict of the inner terminals of process `pid`; `None` when
    /// it is not a multiplexer.
    pub(crate) fn verdict(&self, pid: i32, outer: &Tty) -> Option<Verdict> {
        if !holds_a_master(pid) {
            return None;
        }
        let mut verdict = Verdict::Untouched;
        // What the readers known before the write wrote since: the least
        // the server must have read since for their output to be out.
        let mut owed = 0u64;
        for inner in inner_terminals(pid, outer) {
            let mut moved = self.foreground.get(&inner.tty) != Some(&inner.fg);
            for member in &inner.members {
                for tid in thread_ids(*member) {
                    let Some(before) = self.readers.get(&tid) else {
                        continue;
                    };
                    let now = thread_io(*member, tid);
                    if let (Some(before), Some(now)) = (before, now) {
                        moved |= now.read != before.read;
                        owed += now.written.saturating_sub(before.written);
                    } else {
                        moved |= *before != now;
                    }
                }
            }
            if !moved {
                continue;
            }
            let reading = inner
                .members
                .iter()
                .any(|m| matches!(wait_state(*m, &inner.tty), WaitState::OnTerminal { .. }));
            if !reading {
                return Some(Verdict::Busy);
            }
            verdict = Verdict::Answered;
        }
        if verdict == Verdict::Answered
            && let Some(Some(before)) = self.servers.get(&pid)
            && io(&format!("/proc/{pid}/io")).is_none_or(|now| now.read - before.read < owed)
        {
            return Some(Verdict::Relaying);
        }
        // Having read it, the server passes it on in a later turn of its
        // loop (tmux writes to the outer terminal once it is writable): a
        // server with a thread running (or in an uninterruptible wait)
        // may still be doing so. One whose threads all sleep (looked at
        // after its read count) waits with nothing ready.
        if verdict == Verdict::Answered
            && thread_ids(pid)
                .iter()
                .any(|tid| matches!(thread_state(pid, *tid), Some('R' | 'D')))
        {
            return Some(Verdict::Relaying);
        }
        Some(verdict)
    }
}

/// The byte counts of thread `tid` of process `pid`. Its read count is
/// what moves when it reads the keys relayed to it, and not when it wakes
/// for anything else (a signal, a timer, a redraw), as its context
/// switches would.
fn thread_io(pid: i32, tid: i32) -> Option<Io> {
    io(&format!("/proc/{pid}/task/{tid}/io"))
}

/// The byte counts in an `io` file of `/proc`.
fn io(path: &str) -> Option<Io> {
    let text = std::fs::read_to_string(path).ok()?;
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
    };
    Some(Io {
        read: field("rchar:")?,
        written: field("wchar:")?,
    })
}

/// The terminals of process `pid`'s descendants other than `outer`, each
/// with its foreground group and that group's processes.
fn inner_terminals(pid: i32, outer: &Tty) -> Vec<Inner> {
    let Some(info) = process_tree::process_info(pid) else {
        return Vec::new();
    };
    let descendants = process_tree::live_descendants(&info);
    let mut found: Vec<Inner> = Vec::new();
    let mut by_number: HashMap<u32, Option<usize>> = HashMap::new();
    for process in &descendants {
        if process.tty_nr == 0
            || outer.is_controlling(process.tty_nr)
            || by_number.get(&process.tty_nr).is_some_and(Option::is_some)
        {
            continue;
        }
        // The terminal itself, as one of the process's standard
        // descriptors opens it (its controlling terminal names only a
        // device number, which every devpts instance reuses).
        let tty = (0..3).find_map(|fd| {
            Tty::of_path(&format!("/proc/{}/fd/{fd}", process.pid))
                .filter(|t| t.is_controlling(process.tty_nr))
        });
        let Some(tty) = tty else {
            by_number.insert(process.tty_nr, None);
            continue;
        };
        by_number.insert(process.tty_nr, Some(found.len()));
        found.push(Inner {
            tty,
            fg: process.tpgid,
            members: Vec::new(),
        });
    }
    for process in &descendants {
        if let Some(Some(i)) = by_number.get(&process.tty_nr)
            && let Some(inner) = found.get_mut(*i)
            && inner.fg > 0
            && process.pgid == inner.fg
        {
            inner.members.push(process.pid);
        }
    }
    found
}
