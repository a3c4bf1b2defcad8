//! One registry for all background work of dsh: background `bash`
//! commands, background terminal sends and background subagent runs.
//!
//! The split of duties is the crate's key design choice. The
//! [`JobRegistry`] owns what every kind of job shares: **identity** (ids
//! `kind-N` from a per-kind counter, registered before anyone can see
//! them), **access** (every call names an [`Owner`]; another owner's job
//! is `FOREIGN_JOB`), **lifecycle** (`running`, `stopping`, then exactly
//! one of `completed`, `failed`, `killed`, `timed_out` — the first outcome
//! wins, and a job that was killed never reads as completed), a bounded
//! **output ring** per job read through byte cursors (re-reading is
//! non-destructive; evicted bytes are reported as `dropped`), **waiting**
//! (a read can block until new output, settlement or its deadline, woken
//! by a channel rather than a polling loop), limits, retention, and
//! **settlement events** for the host's notifications.
//!
//! A [`Producer`] owns the execution resource behind a small seam: it
//! starts, hands over an output stream, a settle future and a [`Cancel`]
//! handle. This crate ships the [`CommandProducer`] (what `bash` and
//! `subagent` run: an argv in a session of its own, output merged into
//! one pipe, ended by session id with SIGINT → SIGTERM → SIGKILL and
//! verified gone); the host implements the terminal-send producer over
//! its terminal service.
//!
//! This crate is deliberately not a tool layer: it has no serde or schema
//! types and renders nothing for a model; it reads no configuration file
//! and sends no MCP notification (it publishes [`JobSettled`] events and
//! the host does). It knows nothing of terminals beyond the seam.

mod command;
mod error;
mod producer;
mod registry;
mod ring;

pub use command::{
    ChildStep, CommandProducer, CommandRun, CommandSpec, KILL_STEPS, PROMPT_PLACEHOLDER, QUIET_ENV,
    run_command, run_command_observed,
};
pub use error::{JobError, StartError};
pub use producer::{Cancel, JobKind, OutputChunk, Producer, Settlement, Started};
pub use registry::{
    ForegroundSlot, JobInfo, JobRegistry, JobSettled, JobStarted, JobStatus, JobsConfig,
    KillOutcome, KillReport, OutputRead, OwnerEnded, StartOptions,
};
pub use ring::{OutputRing, RingRead};
pub use terminal_seam::Owner;
