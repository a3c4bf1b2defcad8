//! The errors of the job registry and its producers.

use error_code::Code;

/// Why a producer could not start its work (spawn failed, the terminal's
/// send slot is taken, …). Its code passes through the registry unchanged,
/// so a tool reports the producer's own code (`SPAWN_FAILED`,
/// `SEND_ACTIVE`, `SUBAGENT_UNAVAILABLE`, …).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    /// Its stable code.
    pub code: Code,
    /// A message for the model.
    pub message: String,
    /// True when the same call may succeed later.
    pub retryable: bool,
}

impl StartError {
    /// A start error with `code` and `message`, not retryable.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: false,
        }
    }

    /// `SPAWN_FAILED` for a process that could not be started.
    pub fn spawn_failed(program: &str, error: &std::io::Error) -> Self {
        Self::new(
            Code::SpawnFailed,
            format!("could not start {program}: {error}"),
        )
    }
}

/// An error of a registry call.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JobError {
    /// No job has this id (never existed, evicted, or its owner ended).
    #[error("no job {id}{hint}")]
    NoJob {
        /// The id asked for.
        id: String,
        /// Extra explanation, starting with a separator, or empty.
        hint: String,
    },
    /// The job exists but belongs to another owner.
    #[error("job {id} belongs to another agent")]
    ForeignJob {
        /// The id asked for.
        id: String,
    },
    /// The owner already has the maximum number of running jobs.
    #[error(
        "{running} of your jobs are running, the limit is {limit}: wait for one to finish \
         (job_output with wait_ms) or stop one with job_kill, then retry"
    )]
    JobLimit {
        /// Jobs of the owner that have not settled.
        running: usize,
        /// The configured limit.
        limit: usize,
    },
    /// The owner already has the maximum number of foreground commands
    /// (`bash` and `subagent` calls waiting for their result) running.
    #[error(
        "{running} of your bash/subagent calls are already running in the foreground, the limit is \
         {limit}: wait for one to return, or start this one with run_in_background (a job you \
         read with job_output), then retry"
    )]
    ForegroundLimit {
        /// Foreground commands of the owner running now.
        running: usize,
        /// The configured limit.
        limit: usize,
    },
    /// An argument is out of range or malformed.
    #[error("{field}: {message}")]
    InvalidArgument {
        /// The argument's name as the model sees it.
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// The producer could not start the work.
    #[error(transparent)]
    Start(#[from] StartError),
}

impl JobError {
    /// The stable code: `NO_JOB`, `FOREIGN_JOB`, `JOB_LIMIT`,
    /// `INVALID_ARGUMENT`, or the producer's own code for [`JobError::Start`].
    pub fn code(&self) -> Code {
        match self {
            JobError::NoJob { .. } => Code::NoJob,
            JobError::ForeignJob { .. } => Code::ForeignJob,
            JobError::JobLimit { .. } | JobError::ForegroundLimit { .. } => Code::JobLimit,
            JobError::InvalidArgument { .. } => Code::InvalidArgument,
            JobError::Start(e) => e.code,
        }
    }

    /// True when the same call may succeed later without changing it.
    pub fn retryable(&self) -> bool {
        match self {
            JobError::JobLimit { .. } | JobError::ForegroundLimit { .. } => true,
            JobError::Start(e) => e.retryable,
            JobError::NoJob { .. }
            | JobError::ForeignJob { .. }
            | JobError::InvalidArgument { .. } => false,
        }
    }
}
