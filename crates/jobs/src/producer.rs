//! The producer seam: what a kind of background work gives the registry.

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;

use crate::StartError;

/// The kinds of background work. A closed union: adding a kind means a new
/// variant here, its id prefix in [`JobKind::as_str`], and a producer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum JobKind {
    /// A background `bash` command (ids `bash-N`).
    Bash,
    /// A background `terminal_send` (ids `pty-send-N`).
    PtySend,
    /// A background `subagent` run (ids `subagent-N`).
    Subagent,
}

impl JobKind {
    /// Every kind, in id-prefix order.
    pub const ALL: [JobKind; 3] = [JobKind::Bash, JobKind::PtySend, JobKind::Subagent];

    /// The kind's name, which is also its id prefix.
    pub fn as_str(self) -> &'static str {
        match self {
            JobKind::Bash => "bash",
            JobKind::PtySend => "pty-send",
            JobKind::Subagent => "subagent",
        }
    }
}

impl std::fmt::Display for JobKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A piece of a job's output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OutputChunk {
    /// Raw bytes from a pipe or pty; the registry sanitizes them (escapes
    /// stripped, line endings folded, invalid UTF-8 replaced, partial
    /// sequences carried to the next chunk).
    Raw(Vec<u8>),
    /// Text that is already sanitized (for example a terminal service's
    /// output); stored as is.
    Text(String),
}

/// How a producer's work ended on its own (not by [`Cancel::cancel`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settlement {
    /// The work finished: status `completed`. `exit_code` is the process's
    /// exit status when there is one (a terminal send that settled on
    /// `input_wait` has none); `detail` says anything worth knowing (the
    /// settle reason of a terminal send, leftover processes ended).
    Finished {
        /// The exit status, when there is one.
        exit_code: Option<i32>,
        /// Extra facts for the model, if any.
        detail: Option<String>,
    },
    /// The work could not be carried out, or ended abnormally (a signal
    /// from outside, an I/O error): status `failed`.
    Failed {
        /// What happened.
        detail: String,
    },
    /// The producer's own deadline passed: status `timed_out`. (The
    /// registry also enforces [`crate::StartOptions::timeout`] itself.)
    TimedOut {
        /// What happened.
        detail: String,
    },
}

/// Ends a producer's work. Called at most once per job, by the registry,
/// on `job_kill`, at the deadline, or when the owner ends.
pub trait Cancel: Send + Sync + 'static {
    /// Stops the work and resolves once it is verifiably stopped. `Ok`
    /// says exactly what was verified, in words for the job's detail
    /// ("every process of the job was ended", "the program in pty-1 was
    /// interrupted …"): the registry claims nothing beyond it. `Err` says
    /// what could not be stopped (it becomes the job's `failed` detail:
    /// status never lies).
    fn cancel(&self) -> BoxFuture<'static, Result<String, String>>;
}

/// A producer's running work, handed to the registry by [`Producer::start`].
pub struct Started {
    /// The output, in order. It should end soon after `settle` resolves;
    /// the registry stops reading it a short grace after settlement.
    pub output: BoxStream<'static, OutputChunk>,
    /// Resolves when the work ends on its own, or after [`Cancel::cancel`]
    /// (the registry then ignores the value and records its own outcome).
    pub settle: BoxFuture<'static, Settlement>,
    /// How to stop the work.
    pub cancel: Arc<dyn Cancel>,
    /// The process session id, when the work runs in a session of its own
    /// (for logs and tests; the registry never signals it directly).
    pub session_id: Option<i32>,
}

impl std::fmt::Debug for Started {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Started")
            .field("session_id", &self.session_id)
            .finish_non_exhaustive()
    }
}

/// One kind of background work, ready to start. Implemented here by
/// [`crate::CommandProducer`] (background `bash`, `subagent`) and by the
/// host over its terminal service (background `terminal_send`).
///
/// Dropping a [`Started`] (the registry does when it is dropped) must end
/// the work too: producers release their resources in `Drop`.
pub trait Producer: Send + 'static {
    /// The job kind, which decides the id prefix.
    fn kind(&self) -> JobKind;
    /// A one-line description for `job_list` (the command, the text sent,
    /// the prompt); the registry shortens it.
    fn label(&self) -> String;
    /// Starts the work. Called after the owner's job limit is checked and
    /// before the id is made visible; a failure consumes no id.
    fn start(self: Box<Self>) -> BoxFuture<'static, Result<Started, StartError>>;
}
