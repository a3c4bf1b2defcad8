//! Allocating a pty and starting a terminal's first process on it.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::os::fd::{AsFd as _, AsRawFd, BorrowedFd, FromRawFd as _, OwnedFd};

use nix::fcntl::OFlag;

/// Our default shell's argv (after the program).
pub(crate) const SHELL_ARGS: &[&str] = &["--noprofile", "--norc", "-i"];

/// A private, unguessable marker nonce for one terminal.
pub(crate) fn nonce() -> String {
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(std::process::id().into());
    let a = hasher.finish();
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u64(a);
    format!("{:016x}{:016x}", a, hasher.finish())
}

/// The environment that turns an interactive `bash --norc` into our shell.
///
/// `PROMPT_COMMAND` evaluates `__DSH_INIT` once, which defines the prompt
/// function, un-exports everything (children never inherit the marker) and
/// keeps history out of the user's history file. From then on every prompt
/// rebuilds `PS1` as the private marker — an OSC sequence carrying a prompt
/// sequence number and `$?`, invisible to readline's width arithmetic —
/// followed by the visible prompt. A command that overwrites `PS1` changes
/// the visible part; the marker is put back in front of it at the next
/// prompt.
pub(crate) fn shell_env(nonce: &str) -> Vec<(String, String)> {
    let init = format!(
        r#"unset __DSH_INIT HISTFILE
export -n PROMPT_COMMAND
__dsh_seq=0
__dsh_ps1_built=
PS1='$ '
PS2='> '
bind 'set enable-bracketed-paste off' 2>/dev/null
__dsh_prompt() {{
  local s=$?
  if [[ "$PS1" != "$__dsh_ps1_built" ]]; then __dsh_ps1_user=$PS1; fi
  __dsh_seq=$((__dsh_seq + 1))
  __dsh_ps1_built='\[\e]6973;{nonce};'"$__dsh_seq;$s"'\a\]'"$__dsh_ps1_user"
  PS1=$__dsh_ps1_built
  return $s
}}
PROMPT_COMMAND=__dsh_prompt
__dsh_prompt
"#
    );
    vec![
        ("__DSH_INIT".to_owned(), init),
        (
            "PROMPT_COMMAND".to_owned(),
            r#"eval "$__DSH_INIT""#.to_owned(),
        ),
    ]
}

/// The environment every terminal gets before the caller's own variables.
pub(crate) fn base_env() -> Vec<(String, String)> {
    vec![
        ("TERM".to_owned(), "xterm-256color".to_owned()),
        ("PAGER".to_owned(), "cat".to_owned()),
        ("GIT_PAGER".to_owned(), "cat".to_owned()),
    ]
}

/// A pty pair. The master is opened close-on-exec from the start, so no
/// process spawned concurrently by the host can inherit it.
pub(crate) struct PtyPair {
    /// The master, non-blocking.
    pub master: OwnedFd,
    /// The child's end.
    pub slave: OwnedFd,
    /// The child's end as the settle probe recognises it.
    pub tty: crate::probe::Tty,
}

/// Opens a pty of `rows` x `cols`: in the `devpts` instance `dir` when
/// given (a sandbox's own), else through the host's `/dev/ptmx`.
///
/// The child's end is opened from the master (`TIOCGPTPEER`), never by
/// name: the name of a pty in another instance does not resolve here, and
/// opening by name could race with a pty of the same number.
pub(crate) fn open_pty(
    rows: u16,
    cols: u16,
    dir: Option<BorrowedFd<'_>>,
) -> std::io::Result<PtyPair> {
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: plain system calls on C strings we own and a descriptor the
    // caller lends; the result is checked before it is owned.
    let raw = unsafe {
        match dir {
            Some(dir) => libc::openat(dir.as_raw_fd(), c"ptmx".as_ptr(), flags),
            None => libc::open(c"/dev/ptmx".as_ptr(), flags),
        }
    };
    if raw < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor that nothing else owns.
    let master = unsafe { OwnedFd::from_raw_fd(raw) };
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads an int we own; TIOCGPTPEER takes flags and
    // returns a new descriptor, owned at once.
    let slave = unsafe {
        if libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) < 0 {
            return Err(std::io::Error::last_os_error());
        }
        let raw = libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags);
        if raw < 0 {
            return Err(std::io::Error::last_os_error());
        }
        OwnedFd::from_raw_fd(raw)
    };
    // The inode and device number the settle probe compares a program's
    // descriptors against.
    let tty = crate::probe::Tty::of(slave.as_fd())?;
    let flags = nix::fcntl::fcntl(&master, nix::fcntl::FcntlArg::F_GETFL)?;
    nix::fcntl::fcntl(
        &master,
        nix::fcntl::FcntlArg::F_SETFL(OFlag::from_bits_retain(flags) | OFlag::O_NONBLOCK),
    )?;
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a `winsize` we own, on a descriptor we own.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &size) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(PtyPair { master, slave, tty })
}

/// The step that makes the pty (the child's stdin) its controlling
/// terminal, run in the child right after `setsid`.
pub(crate) fn take_controlling_terminal() -> process_tree::PreExecStep {
    std::sync::Arc::new(|| {
        // SAFETY: a raw ioctl on the child's stdin, async-signal-safe.
        if unsafe { libc::ioctl(0, libc::TIOCSCTTY, 0) } < 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    })
}
