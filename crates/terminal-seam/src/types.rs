//! Plain data: ids, requests, outcomes.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, SystemTime};

/// The default number of rows of a new terminal.
pub const DEFAULT_ROWS: u16 = 40;
/// The default number of columns of a new terminal.
pub const DEFAULT_COLS: u16 = 160;
/// The default time a send waits before settling with [`SettleReason::Timeout`].
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);
/// The shortest accepted send timeout (shorter values are clamped up).
pub const MIN_SEND_TIMEOUT: Duration = Duration::from_millis(1);
/// The longest accepted send timeout (longer values are clamped down).
pub const MAX_SEND_TIMEOUT: Duration = Duration::from_secs(600);

/// The fewest rows a terminal may have.
pub const MIN_ROWS: u16 = 2;
/// The most rows a terminal may have.
pub const MAX_ROWS: u16 = 500;
/// The fewest columns a terminal may have.
pub const MIN_COLS: u16 = 10;
/// The most columns a terminal may have.
pub const MAX_COLS: u16 = 500;
/// The most cells (rows × cols) a terminal may have: its screen grid is
/// allocated up front, about 32 bytes a cell for each of its two screens.
pub const MAX_CELLS: u32 = 100_000;
/// The longest `until` pattern, in bytes (checked before it is compiled).
pub const MAX_UNTIL_BYTES: usize = 4096;

/// A terminal's id, rendered `pty-N`. Ids are per service and never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TerminalId(pub u64);

impl fmt::Display for TerminalId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pty-{}", self.0)
    }
}

impl FromStr for TerminalId {
    type Err = crate::TerminalError;

    /// Parses `pty-N`; anything else is `INVALID_ARGUMENT` naming `id`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix("pty-")
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|n| n.parse().ok())
            .map(TerminalId)
            .ok_or_else(|| {
                crate::TerminalError::invalid(
                    "id",
                    format!("`{s}` is not a terminal id like `pty-1`"),
                )
            })
    }
}

/// What `terminal_open` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenRequest {
    /// The program and its arguments; `None` runs the prepared default shell.
    pub command: Option<Vec<String>>,
    /// Working directory; `None` inherits the host's.
    pub cwd: Option<PathBuf>,
    /// Extra environment variables, applied over the defaults.
    pub env: Vec<(String, String)>,
    /// A name unique among the owner's terminals.
    pub name: Option<String>,
    /// Terminal height in rows.
    pub rows: u16,
    /// Terminal width in columns.
    pub cols: u16,
    /// The environment the terminal starts from in place of the host's (a
    /// daemon passes the one its connection's client gave); `None`: the
    /// host's.
    pub base_env: Option<Vec<(String, String)>>,
    /// A step the terminal's program runs last before `exec` (a
    /// sandbox's), inherited by everything started in the terminal;
    /// `None`: none.
    pub pre_exec: Option<ChildStep>,
    /// Run the terminal's processes in a PID namespace of their own whose
    /// first process dies with the host, so that the kernel ends them all
    /// when the host dies; `None`: none.
    pub pid_namespace: Option<PidNamespace>,
    /// The directory of the `devpts` instance to allocate the terminal's
    /// pty in (`ptmx` inside it): a sandbox's private one, so that the pty
    /// is visible by name to the confined processes and the host's are
    /// not; `None`: the host's `/dev/ptmx`.
    pub pty_dir: Option<PtyDir>,
}

/// A `devpts` directory (an `O_PATH` descriptor); compared by identity.
#[derive(Debug, Clone)]
pub struct PtyDir(pub std::sync::Arc<std::os::fd::OwnedFd>);

impl PartialEq for PtyDir {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for PtyDir {}

/// A PID namespace for a terminal's processes (see
/// [`OpenRequest::pid_namespace`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PidNamespace {
    /// A step run before the namespace is made, that gives the right to
    /// make one (a sandbox's entry into its user namespace); `None`: none
    /// (the host may make one itself).
    pub enter: Option<ChildStep>,
}

/// A step run in a child between `fork` and `exec`; it must be
/// async-signal-safe (no allocation, no locks). Compared by identity.
#[derive(Clone)]
pub struct ChildStep(pub std::sync::Arc<dyn Fn() -> std::io::Result<()> + Send + Sync>);

impl std::fmt::Debug for ChildStep {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChildStep")
    }
}

impl PartialEq for ChildStep {
    fn eq(&self, other: &Self) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for ChildStep {}

impl Default for OpenRequest {
    fn default() -> Self {
        Self {
            command: None,
            cwd: None,
            env: Vec::new(),
            name: None,
            rows: DEFAULT_ROWS,
            cols: DEFAULT_COLS,
            base_env: None,
            pre_exec: None,
            pid_namespace: None,
            pty_dir: None,
        }
    }
}

/// A freshly opened terminal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// Its id.
    pub id: TerminalId,
    /// Its name, if one was given.
    pub name: Option<String>,
    /// Process id of the terminal's first process (the session leader).
    pub pid: u32,
    /// Process id of the process that runs the terminal's program (the
    /// shell): `pid`, unless the terminal runs in a PID namespace of its
    /// own.
    pub program_pid: u32,
    /// Its status after the startup settled.
    pub status: TerminalStatus,
    /// The startup text up to the first settle (sanitized, possibly truncated).
    pub output: String,
    /// How the startup settled.
    pub reason: SettleReason,
    /// On an `input_wait` settle, whether the terminal echoes what is
    /// typed (see [`SendOutcome::echo`]).
    pub echo: Option<bool>,
}

/// What `terminal_send` asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendRequest {
    /// The text to write.
    pub text: String,
    /// Append a carriage return (the Enter key) after `text`.
    pub submit: bool,
    /// A regex; the send settles when it matches the new output.
    pub until: Option<String>,
    /// How long to wait before settling with `timeout` (clamped to
    /// [`MIN_SEND_TIMEOUT`]..=[`MAX_SEND_TIMEOUT`]).
    pub timeout: Duration,
}

impl SendRequest {
    /// A submitted send of `text` with the default timeout and no pattern.
    pub fn line(text: impl Into<String>) -> Self {
        Self {
            text: text.into(),
            submit: true,
            until: None,
            timeout: DEFAULT_SEND_TIMEOUT,
        }
    }

    /// The same request with another timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// The same request with an `until` pattern.
    pub fn with_until(mut self, pattern: impl Into<String>) -> Self {
        self.until = Some(pattern.into());
        self
    }
}

/// Why a send stopped waiting. The ladder, first match wins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SettleReason {
    /// Our shell's private prompt marker came back; the exit code is known.
    Prompt,
    /// The foreground process began a fresh wait reading the terminal.
    InputWait,
    /// The `until` pattern matched the new output.
    Pattern,
    /// The terminal's process exited.
    Exit,
    /// No output for a while, and input waits cannot be observed here.
    Idle,
    /// The time limit passed; the command may still be running.
    Timeout,
}

impl SettleReason {
    /// The contract's name: `prompt`, `input_wait`, `pattern`, `exit`, `idle`, `timeout`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Prompt => "prompt",
            Self::InputWait => "input_wait",
            Self::Pattern => "pattern",
            Self::Exit => "exit",
            Self::Idle => "idle",
            Self::Timeout => "timeout",
        }
    }
}

impl fmt::Display for SettleReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ExitStatus {
    /// The exit code, when it exited normally.
    pub code: Option<i32>,
    /// The signal number, when a signal ended it.
    pub signal: Option<i32>,
}

/// A terminal's lifecycle state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminalStatus {
    /// Its process is alive.
    Running,
    /// A close is in progress.
    Closing,
    /// Its process exited on its own; the scrollback is still readable.
    Exited(ExitStatus),
    /// Closed: every process of its session is gone.
    Closed(ExitStatus),
}

impl TerminalStatus {
    /// The contract's word: `running`, `closing`, `exited`, `closed`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Running => "running",
            Self::Closing => "closing",
            Self::Exited(_) => "exited",
            Self::Closed(_) => "closed",
        }
    }
}

/// The result of a settled send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SendOutcome {
    /// What the terminal printed since the send, without the echo of the
    /// sent text or continuation prompts; head + tail when truncated.
    pub output: String,
    /// Why the send settled.
    pub reason: SettleReason,
    /// The last command's exit status (`prompt`) or the process's (`exit`).
    pub exit_code: Option<i32>,
    /// The terminal's status when the send settled.
    pub status: TerminalStatus,
    /// True when `output` omits bytes (one marker line says how many).
    pub truncated: bool,
    /// The size in bytes of the whole output before truncation.
    pub total_bytes: u64,
    /// Time from the write to the settle.
    pub duration: Duration,
    /// Set when the program did not take all of the text in time: how much
    /// was written. `None` when every byte was written.
    pub input_cut: Option<InputCut>,
    /// On an `input_wait` settle, whether the terminal echoes what is
    /// typed, read from the terminal's modes when the wait was seen:
    /// `Some(false)` when it is in canonical mode with echo off — a program
    /// asking for a secret, as a password prompt does. A line editor
    /// (bash's or Python's prompt) turns the kernel's echo off too, but in
    /// raw mode, echoing for itself: `Some(true)`. `None` for other
    /// reasons, or when the modes could not be read.
    pub echo: Option<bool>,
    /// Set when a line of the text was longer than the terminal keeps of
    /// one line in canonical mode and could not be passed on whole.
    pub line_cut: Option<LineCut>,
}

/// Bytes of a line the terminal dropped: in canonical mode the kernel
/// keeps [`MAX_CANON_LINE`] bytes of one line and discards the rest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LineCut {
    /// The line's number in the sent text, from 1.
    pub line: u32,
    /// Its length in bytes.
    pub line_bytes: u64,
    /// The bytes of it the program could receive.
    pub kept_bytes: u64,
}

/// What a terminal in canonical mode keeps of one line: Linux's
/// `N_TTY_BUF_SIZE - 1`.
pub const MAX_CANON_LINE: usize = 4095;

/// A send's text was not all written: the program was not reading its
/// input (the terminal's input buffer was full) before the send's time
/// limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InputCut {
    /// Bytes of the send (text plus the Enter of `submit`) written to the
    /// terminal.
    pub written_bytes: u64,
    /// Bytes the send had to write.
    pub total_bytes: u64,
    /// True when the input the program had not read yet was discarded, so
    /// no partial line is left to run later glued to the next send.
    pub unread_discarded: bool,
}

/// What `terminal_read` asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadRequest {
    /// Sanitized scrollback from a byte cursor.
    Stream {
        /// Start here; `None` means "what this owner has not read yet".
        since: Option<u64>,
        /// At most this many bytes; `None` uses the service's result limit.
        max_bytes: Option<usize>,
    },
    /// The current screen as a terminal emulator renders it.
    Screen,
}

/// The result of a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadOutcome {
    /// A slice of the stream.
    Stream(StreamChunk),
    /// The rendered screen.
    Screen(ScreenView),
}

/// A slice of a terminal's sanitized output stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamChunk {
    /// The text between `from` and `next`.
    pub output: String,
    /// Cursor of the first byte returned.
    pub from: u64,
    /// Cursor after the last byte returned: pass it as `since` next time.
    pub next: u64,
    /// Bytes between the requested cursor and `from` already evicted.
    pub dropped: u64,
    /// True when more text follows `next` already.
    pub truncated: bool,
}

/// A 1-based cursor position.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CursorPosition {
    /// Row, from 1.
    pub row: u16,
    /// Column, from 1.
    pub col: u16,
}

/// A terminal's screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScreenView {
    /// The visible rows, trailing blanks trimmed, joined by `\n`.
    pub screen: String,
    /// Where the cursor is.
    pub cursor: CursorPosition,
    /// Height in rows.
    pub rows: u16,
    /// Width in columns.
    pub cols: u16,
    /// True while a full-screen program uses the alternate screen.
    pub alternate_screen: bool,
}

/// The signals a model may send to a terminal's foreground process group.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TerminalSignal {
    /// Interrupt (Ctrl-C).
    Int,
    /// Terminate.
    Term,
    /// Kill; refused when aimed at the terminal's own first process.
    Kill,
    /// Quit (Ctrl-\).
    Quit,
    /// Stop from the terminal (Ctrl-Z).
    Tstp,
    /// Continue a stopped process.
    Cont,
    /// Hang up.
    Hup,
}

impl TerminalSignal {
    /// Every signal, in the contract's order.
    pub const ALL: [Self; 7] = [
        Self::Int,
        Self::Term,
        Self::Kill,
        Self::Quit,
        Self::Tstp,
        Self::Cont,
        Self::Hup,
    ];

    /// The contract's name, e.g. `SIGINT`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Int => "SIGINT",
            Self::Term => "SIGTERM",
            Self::Kill => "SIGKILL",
            Self::Quit => "SIGQUIT",
            Self::Tstp => "SIGTSTP",
            Self::Cont => "SIGCONT",
            Self::Hup => "SIGHUP",
        }
    }

    /// The Linux signal number.
    pub fn number(self) -> i32 {
        match self {
            Self::Int => 2,
            Self::Term => 15,
            Self::Kill => 9,
            Self::Quit => 3,
            Self::Tstp => 20,
            Self::Cont => 18,
            Self::Hup => 1,
        }
    }
}

impl FromStr for TerminalSignal {
    type Err = crate::TerminalError;

    /// Parses `SIGINT` (or `INT`, any case); others are `INVALID_ARGUMENT`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let upper = s.trim().to_ascii_uppercase();
        let full = if upper.starts_with("SIG") {
            upper
        } else {
            format!("SIG{upper}")
        };
        Self::ALL
            .into_iter()
            .find(|sig| sig.as_str() == full)
            .ok_or_else(|| {
                crate::TerminalError::invalid(
                    "signal",
                    format!(
                        "`{s}` is not one of SIGINT SIGTERM SIGKILL SIGQUIT SIGTSTP SIGCONT SIGHUP"
                    ),
                )
            })
    }
}

impl fmt::Display for TerminalSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a signal went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalOutcome {
    /// The process group that received it.
    pub delivered_to_pgid: i32,
}

/// Whether this close did the work.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CloseKind {
    /// This call ended the terminal.
    Closed,
    /// Another close is (or was) doing it.
    AlreadyClosing,
}

impl CloseKind {
    /// The contract's word: `closed` or `already_closing`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Closed => "closed",
            Self::AlreadyClosing => "already_closing",
        }
    }
}

/// The result of a close.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloseOutcome {
    /// Whether this call did the work.
    pub outcome: CloseKind,
    /// How the terminal's first process ended, when known.
    pub exit: Option<ExitStatus>,
    /// Processes of the terminal's session still alive after the last
    /// signal (empty when the close verified that none is left).
    pub survivors: Vec<SurvivingProcess>,
}

/// A process that a close could not end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SurvivingProcess {
    /// Its pid.
    pub pid: i32,
    /// Its command line, shortened.
    pub command: String,
}

/// One row of `terminal_list`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TerminalInfo {
    /// Its id.
    pub id: TerminalId,
    /// Its name, if any.
    pub name: Option<String>,
    /// Process id of its first process.
    pub pid: u32,
    /// The argv it runs (the default shell's argv when none was given).
    pub command: Vec<String>,
    /// The working directory it started in.
    pub cwd: PathBuf,
    /// Its status.
    pub status: TerminalStatus,
    /// True while a send is waiting to settle.
    pub active_send: bool,
    /// When it was opened.
    pub created_at: SystemTime,
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn terminal_ids_round_trip_and_reject_other_shapes() {
        assert_eq!("pty-17".parse::<TerminalId>().unwrap(), TerminalId(17));
        assert_eq!(TerminalId(17).to_string(), "pty-17");
        for bad in ["pty-", "pty-x", "17", "job-1", "pty--1", "pty-1 "] {
            let err = bad.parse::<TerminalId>().unwrap_err();
            assert_eq!(err.code(), "INVALID_ARGUMENT", "{bad}");
        }
    }

    #[test]
    fn signals_parse_with_or_without_prefix() {
        assert_eq!(
            "SIGINT".parse::<TerminalSignal>().unwrap(),
            TerminalSignal::Int
        );
        assert_eq!(
            "tstp".parse::<TerminalSignal>().unwrap(),
            TerminalSignal::Tstp
        );
        assert_eq!(
            "SIGUSR1".parse::<TerminalSignal>().unwrap_err().code(),
            "INVALID_ARGUMENT"
        );
        for sig in TerminalSignal::ALL {
            assert_eq!(sig.as_str().parse::<TerminalSignal>().unwrap(), sig);
        }
    }
}
