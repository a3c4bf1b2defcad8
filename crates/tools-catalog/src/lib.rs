//! The model-facing tool layer of dsh.
//!
//! A tool is a name, a description written for a model, an argument type
//! whose JSON Schema comes from `schemars`, and a call that returns either a
//! [`ToolReply`] (one text block for the model plus structured content) or a
//! [`ToolError`] (the contract's error envelope: `isError`,
//! `{error: {code, message, retryable}}`, text `[error CODE] message`).
//! A [`Catalog`] is the set of tools of one [`Preset`], built over one
//! [`Runtime`] that outlives it: the host can rebuild the catalog (a config
//! reload) without touching live terminals or jobs.
//!
//! This crate is the serialization boundary: argument and result types are
//! serde/schemars types here and are converted by hand to the seam types of
//! the capability crates. It knows nothing of MCP or of any transport, and
//! it never chooses a provider: the host wires providers into the
//! [`Runtime`]. Nothing here assumes there is only one [`Owner`].
//!
//! The modules:
//!
//! * `catalog` — [`Tool`], [`ToolSpec`], [`Catalog`], [`Preset`]; it renders
//!   `docs/tool-catalog.md`.
//! * `args`, `reply`, `error` — argument parsing that names the field, and
//!   clamping; [`ToolReply`]; [`ToolError`], and each seam's error turned
//!   into its [`Code`] by an exhaustive match.
//! * `context` — what a call runs against: [`CallContext`] (the caller's
//!   [`Owner`]), the [`Runtime`], and what reaches past the tool:
//!   [`Asker`] (a yes/no question to the person), [`ProgressSink`] (a
//!   call's progress reports, which the host turns into its transport's
//!   notifications), [`Resume`] (taking back a detached agent's work with
//!   its key) and [`SecretPrompts`] (a person answers a secret prompt out
//!   of band).
//! * `confine` — [`Confinement`]: the sandbox and `[env]` of every process a
//!   tool starts, and the `sandbox` and `refusals` results.
//! * [`redaction`] — the redaction of every result and error a model reads,
//!   over the `redact` crate.
//! * One module per surface: `bash`, `job_tools`, `terminal_tools`,
//!   `lsp_tool`.
//!
//! Its contract tests (`tests/*_contract.rs`) play a model in process: the
//! full catalog over a runtime wired as the host wires it (real PTYs through
//! `terminal-pty`, a dev-dependency only; real jobs and processes), checking
//! results, error codes (each one declared by its tool) and the error
//! envelope.

mod args;
mod bash;
mod catalog;
mod confine;
mod context;
mod error;
mod job_tools;
mod lsp_tool;
pub mod redaction;
mod reply;
mod terminal_tools;

pub use args::{Clamped, clamp_ms, parse_args};
pub use catalog::{
    Catalog, Effect, Hints, Preset, Tool, ToolFuture, ToolSpec, catalog_json, catalog_markdown,
    catalog_markdown_for, input_schema,
};
pub use confine::{
    ConfinedSpawn, Confinement, RefusalsJson, RefusedPathJson, SANDBOX_UNAVAILABLE, SandboxJson,
    SpawnFor,
};
pub use context::{
    Answer, Approval, Asker, CallContext, ProgressReport, ProgressSink, Resume, Resumed, Runtime,
    SecretAsked, SecretPrompts, Settings,
};
pub use error::{Code, MAX_ERROR_MESSAGE_BYTES, ToolError, lsp_code, sandbox_code, terminal_code};
pub use job_tools::{SubagentSettings, settled_job_message};
pub use jobs::JobsConfig;
pub use reply::ToolReply;
pub use sandbox;
pub use terminal_seam::Owner;

/// The process-output renderer every tool uses: escape stripping, line
/// ending folding, lossy UTF-8 and head+tail truncation.
pub use output_text as render;
