//! dsh's stable error codes, one closed set. The stable codes of the
//! daemon's refusals and failures
//! (`daemon_wire::Failure::code`: its own, and those of the registry, a
//! terminal and the page that it passes on), and of the tool errors the
//! MCP host and the `dsh mcp --remote` relay make themselves, and of the
//! page's answers (`dsh ui`: its refusals, and the errors it shows): one
//! closed [`Code`].
//!
//! A code is written on the wire as its SCREAMING_SNAKE name
//! (`VERSION_MISMATCH`); a new code is a new variant, and every `match`
//! on a code names it. The daemon turns each error it passes on into its
//! code by an exhaustive match over that error's enum, and so does the
//! tool layer for a terminal's, a job's and a language server's.

#![forbid(unsafe_code)]

use serde::{Deserialize, Serialize};

/// A stable error code, closed: a new code is a new variant, named in
/// [`Code::as_str`] (the compiler asks for it) and in [`Code::ALL`] (the
/// list the round-trip test reads).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Code {
    // The daemon's own refusals and failures.
    /// The client's protocol or version is not the daemon's (for a kind
    /// that needs the same version); a client that may start a daemon
    /// starts one of its own version, which takes the store over.
    VersionMismatch,
    /// The client may run in a dsh sandbox (see the daemon's peer check).
    SandboxedClient,
    /// The hello was not a line of the expected JSON.
    MalformedHello,
    /// A value of the request is not valid (an unknown preset).
    InvalidArgument,
    /// The connection's config file could not be read.
    ConfigError,
    /// The daemon failed in a way that is not the request's fault.
    Internal,
    /// The daemon could not hand its store over (it is stopping).
    HandoverFailed,
    /// The connection a person named is not detached work (`dsh ps
    /// --end`), or a resume key names no detached work.
    NoDetached,

    // The registry's, one per `workspace::WorkspaceError` kind.
    /// No workspace has the id.
    UnknownWorkspace,
    /// No session has the id.
    UnknownSession,
    /// The path does not exist.
    PathNotFound,
    /// The path is not a directory.
    NotADirectory,
    /// The path cannot be resolved.
    PathUnresolvable,
    /// The title is not valid.
    InvalidTitle,
    /// Another process holds the store.
    StoreBusy,
    /// The store could not be read or written.
    StorageIo,
    /// The store's handle is poisoned.
    StoragePoisoned,
    /// The store's data is corrupt.
    StorageCorrupt,
    /// A failed change could not be rolled back.
    RollbackFailed,
    /// The registry is poisoned by an earlier failure.
    RegistryPoisoned,
    /// The store contradicts itself; nothing was changed.
    StoreInconsistent,
    /// The store was written by a newer dsh.
    UnsupportedVersion,
    /// A session move names an invalid place.
    WorkspaceMoveInvalid,
    /// A new order of workspaces is not a permutation of them.
    WorkspaceOrderInvalid,
    /// A session's directory is missing.
    SessionCwdMissing,
    /// A session's directory cannot be resolved.
    SessionCwdUnresolvable,
    /// A session's directory is not a directory.
    SessionCwdNotDirectory,
    /// A session's directory is not in its workspace.
    SessionCwdMismatch,
    /// The session exists already.
    SessionExists,

    // A terminal's, passed on by `dsh attach` and the answer to a prompt.
    /// No terminal has the id.
    NoSession,
    /// The terminal is another agent's.
    ForeignSession,
    /// The terminal is busy with an earlier send.
    SendActive,
    /// The terminal is closing or closed.
    SessionClosing,
    /// The terminal's program has exited.
    SessionExited,
    /// A terminal of that name exists.
    DuplicateName,
    /// The signal would end the terminal's shell: close it instead.
    UseClose,
    /// The terminal's program could not be started.
    SpawnFailed,
    /// The agent has as many terminals open as it may.
    TerminalLimit,
    /// The terminal does not wait for a secret now.
    NoSecretPrompt,
    /// The answer is not typed where it is asked for.
    AnswerRefused,

    // The page's, when it cannot be served.
    /// The page's fixed port is taken.
    UiPortInUse,
    /// The page's address could not be bound.
    UiBindFailed,
    /// The page's token could not be made.
    UiTokenFailed,

    // The page's refusals of a request, and its own failures.
    /// A request to the page had no `Host`, or one that cannot be parsed.
    InvalidRequest,
    /// A request's `Host` does not name the page's server.
    UiHostRefused,
    /// A request came from a foreign `Origin` or a cross-site fetch.
    UiOriginRefused,
    /// A request had no token, or a wrong one.
    UiTokenRequired,
    /// A sign-in code was used already, has expired, or is unknown.
    UiLoginUsed,
    /// A change did not carry the token of a page the server rendered.
    UiPageTokenRefused,
    /// The page has as many signed-in connections or live views as it may.
    UiBusy,
    /// The page has no such address.
    NotFound,
    /// No workspace has the id the page's address names.
    NoWorkspace,
    /// Keys were sent to a terminal's view that has not taken the keyboard.
    ReadOnly,

    // The directory picker's, as the page passes them on.
    /// The directory does not exist.
    PickerNotFound,
    /// The path is not a directory.
    PickerNotADirectory,
    /// The person cannot list the directory.
    PickerUnreadable,
    /// The path leads into a symlink loop.
    PickerSymlinkLoop,
    /// The directory is in a device tree (`/proc`, `/sys`, `/dev`).
    PickerDeviceTree,
    /// The picker does not do what was asked (a dialog does not list).
    PickerUnsupported,
    /// The picker failed to read the file system.
    PickerIo,

    // The tool errors the MCP host and the relay make themselves.
    /// The call was ended (cancelled, or its client went away).
    Cancelled,
    /// A decision named an approval no command waits for.
    NoApproval,
    /// The connection a resume names is gone.
    NoConnection,
    /// The detached work is being taken back by another connection; the
    /// relay retries a resume that meets it.
    ResumeBusy,
    /// The connection resuming has work of its own.
    ResumeNotEmpty,
    /// The resume key is another agent's.
    ResumeKeyForeign,
    /// The resume key is in use by a live connection.
    ResumeKeyInUse,
    /// The detached work the key named has ended.
    ResumeExpired,
    /// No detached work has the key.
    ResumeKeyUnknown,
    /// The relay cannot reach the remote host.
    RemoteUnreachable,
    /// The relay's stream to the remote host dropped during the call.
    RemoteDisconnected,

    // The tool layer's: jobs, subagents, the sandbox, language servers.
    /// No job has the id.
    NoJob,
    /// The job is another agent's.
    ForeignJob,
    /// The agent runs as many jobs as it may.
    JobLimit,
    /// No subagent command is configured, or it could not start.
    SubagentUnavailable,
    /// The sandbox the call needs cannot be made on this machine.
    SandboxUnavailable,
    /// The sandbox keeps the file from being read.
    SandboxReadDenied,
    /// No person can be asked to run the command outside the sandbox.
    SandboxEscalationUnavailable,
    /// The person declined to run the command outside the sandbox.
    SandboxEscalationDeclined,
    /// No language server serves the file.
    LspUnavailable,
    /// The language server cannot answer yet (it indexes, or cannot prove its answer fresh).
    LspNotReady,
    /// The position is not in the file.
    LspInvalidPosition,
    /// The file does not exist.
    LspFileNotFound,
    /// The language server did not answer in time.
    LspTimeout,
    /// The language server failed the request.
    LspServerError,
    /// The language server does not offer the operation.
    LspUnsupportedOperation,
    /// Two configured servers claim the same files.
    LspRouteConflict,
    /// A configured server's routing is not valid.
    LspRouteMalformed,
}

impl Code {
    /// Every code, in declaration order.
    pub const ALL: [Code; 88] = [
        Code::VersionMismatch,
        Code::SandboxedClient,
        Code::MalformedHello,
        Code::InvalidArgument,
        Code::ConfigError,
        Code::Internal,
        Code::HandoverFailed,
        Code::NoDetached,
        Code::UnknownWorkspace,
        Code::UnknownSession,
        Code::PathNotFound,
        Code::NotADirectory,
        Code::PathUnresolvable,
        Code::InvalidTitle,
        Code::StoreBusy,
        Code::StorageIo,
        Code::StoragePoisoned,
        Code::StorageCorrupt,
        Code::RollbackFailed,
        Code::RegistryPoisoned,
        Code::StoreInconsistent,
        Code::UnsupportedVersion,
        Code::WorkspaceMoveInvalid,
        Code::WorkspaceOrderInvalid,
        Code::SessionCwdMissing,
        Code::SessionCwdUnresolvable,
        Code::SessionCwdNotDirectory,
        Code::SessionCwdMismatch,
        Code::SessionExists,
        Code::NoSession,
        Code::ForeignSession,
        Code::SendActive,
        Code::SessionClosing,
        Code::SessionExited,
        Code::DuplicateName,
        Code::UseClose,
        Code::SpawnFailed,
        Code::TerminalLimit,
        Code::NoSecretPrompt,
        Code::AnswerRefused,
        Code::UiPortInUse,
        Code::UiBindFailed,
        Code::UiTokenFailed,
        Code::InvalidRequest,
        Code::UiHostRefused,
        Code::UiOriginRefused,
        Code::UiTokenRequired,
        Code::UiLoginUsed,
        Code::UiPageTokenRefused,
        Code::UiBusy,
        Code::NotFound,
        Code::NoWorkspace,
        Code::ReadOnly,
        Code::PickerNotFound,
        Code::PickerNotADirectory,
        Code::PickerUnreadable,
        Code::PickerSymlinkLoop,
        Code::PickerDeviceTree,
        Code::PickerUnsupported,
        Code::PickerIo,
        Code::Cancelled,
        Code::NoApproval,
        Code::NoConnection,
        Code::ResumeBusy,
        Code::ResumeNotEmpty,
        Code::ResumeKeyForeign,
        Code::ResumeKeyInUse,
        Code::ResumeExpired,
        Code::ResumeKeyUnknown,
        Code::RemoteUnreachable,
        Code::RemoteDisconnected,
        Code::NoJob,
        Code::ForeignJob,
        Code::JobLimit,
        Code::SubagentUnavailable,
        Code::SandboxUnavailable,
        Code::SandboxReadDenied,
        Code::SandboxEscalationUnavailable,
        Code::SandboxEscalationDeclined,
        Code::LspUnavailable,
        Code::LspNotReady,
        Code::LspInvalidPosition,
        Code::LspFileNotFound,
        Code::LspTimeout,
        Code::LspServerError,
        Code::LspUnsupportedOperation,
        Code::LspRouteConflict,
        Code::LspRouteMalformed,
    ];

    /// The code as written on the wire and shown to a model.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::VersionMismatch => "VERSION_MISMATCH",
            Code::SandboxedClient => "SANDBOXED_CLIENT",
            Code::MalformedHello => "MALFORMED_HELLO",
            Code::InvalidArgument => "INVALID_ARGUMENT",
            Code::ConfigError => "CONFIG_ERROR",
            Code::Internal => "INTERNAL",
            Code::HandoverFailed => "HANDOVER_FAILED",
            Code::NoDetached => "NO_DETACHED",
            Code::UnknownWorkspace => "UNKNOWN_WORKSPACE",
            Code::UnknownSession => "UNKNOWN_SESSION",
            Code::PathNotFound => "PATH_NOT_FOUND",
            Code::NotADirectory => "NOT_A_DIRECTORY",
            Code::PathUnresolvable => "PATH_UNRESOLVABLE",
            Code::InvalidTitle => "INVALID_TITLE",
            Code::StoreBusy => "STORE_BUSY",
            Code::StorageIo => "STORAGE_IO",
            Code::StoragePoisoned => "STORAGE_POISONED",
            Code::StorageCorrupt => "STORAGE_CORRUPT",
            Code::RollbackFailed => "ROLLBACK_FAILED",
            Code::RegistryPoisoned => "REGISTRY_POISONED",
            Code::StoreInconsistent => "STORE_INCONSISTENT",
            Code::UnsupportedVersion => "UNSUPPORTED_VERSION",
            Code::WorkspaceMoveInvalid => "WORKSPACE_MOVE_INVALID",
            Code::WorkspaceOrderInvalid => "WORKSPACE_ORDER_INVALID",
            Code::SessionCwdMissing => "SESSION_CWD_MISSING",
            Code::SessionCwdUnresolvable => "SESSION_CWD_UNRESOLVABLE",
            Code::SessionCwdNotDirectory => "SESSION_CWD_NOT_DIRECTORY",
            Code::SessionCwdMismatch => "SESSION_CWD_MISMATCH",
            Code::SessionExists => "SESSION_EXISTS",
            Code::NoSession => "NO_SESSION",
            Code::ForeignSession => "FOREIGN_SESSION",
            Code::SendActive => "SEND_ACTIVE",
            Code::SessionClosing => "SESSION_CLOSING",
            Code::SessionExited => "SESSION_EXITED",
            Code::DuplicateName => "DUPLICATE_NAME",
            Code::UseClose => "USE_CLOSE",
            Code::SpawnFailed => "SPAWN_FAILED",
            Code::TerminalLimit => "TERMINAL_LIMIT",
            Code::NoSecretPrompt => "NO_SECRET_PROMPT",
            Code::AnswerRefused => "ANSWER_REFUSED",
            Code::UiPortInUse => "UI_PORT_IN_USE",
            Code::UiBindFailed => "UI_BIND_FAILED",
            Code::UiTokenFailed => "UI_TOKEN_FAILED",
            Code::InvalidRequest => "INVALID_REQUEST",
            Code::UiHostRefused => "UI_HOST_REFUSED",
            Code::UiOriginRefused => "UI_ORIGIN_REFUSED",
            Code::UiTokenRequired => "UI_TOKEN_REQUIRED",
            Code::UiLoginUsed => "UI_LOGIN_USED",
            Code::UiPageTokenRefused => "UI_PAGE_TOKEN_REFUSED",
            Code::UiBusy => "UI_BUSY",
            Code::NotFound => "NOT_FOUND",
            Code::NoWorkspace => "NO_WORKSPACE",
            Code::ReadOnly => "READ_ONLY",
            Code::PickerNotFound => "PICKER_NOT_FOUND",
            Code::PickerNotADirectory => "PICKER_NOT_A_DIRECTORY",
            Code::PickerUnreadable => "PICKER_UNREADABLE",
            Code::PickerSymlinkLoop => "PICKER_SYMLINK_LOOP",
            Code::PickerDeviceTree => "PICKER_DEVICE_TREE",
            Code::PickerUnsupported => "PICKER_UNSUPPORTED",
            Code::PickerIo => "PICKER_IO",
            Code::Cancelled => "CANCELLED",
            Code::NoApproval => "NO_APPROVAL",
            Code::NoConnection => "NO_CONNECTION",
            Code::ResumeBusy => "RESUME_BUSY",
            Code::ResumeNotEmpty => "RESUME_NOT_EMPTY",
            Code::ResumeKeyForeign => "RESUME_KEY_FOREIGN",
            Code::ResumeKeyInUse => "RESUME_KEY_IN_USE",
            Code::ResumeExpired => "RESUME_EXPIRED",
            Code::ResumeKeyUnknown => "RESUME_KEY_UNKNOWN",
            Code::RemoteUnreachable => "REMOTE_UNREACHABLE",
            Code::RemoteDisconnected => "REMOTE_DISCONNECTED",
            Code::NoJob => "NO_JOB",
            Code::ForeignJob => "FOREIGN_JOB",
            Code::JobLimit => "JOB_LIMIT",
            Code::SubagentUnavailable => "SUBAGENT_UNAVAILABLE",
            Code::SandboxUnavailable => "SANDBOX_UNAVAILABLE",
            Code::SandboxReadDenied => "SANDBOX_READ_DENIED",
            Code::SandboxEscalationUnavailable => "SANDBOX_ESCALATION_UNAVAILABLE",
            Code::SandboxEscalationDeclined => "SANDBOX_ESCALATION_DECLINED",
            Code::LspUnavailable => "LSP_UNAVAILABLE",
            Code::LspNotReady => "LSP_NOT_READY",
            Code::LspInvalidPosition => "LSP_INVALID_POSITION",
            Code::LspFileNotFound => "LSP_FILE_NOT_FOUND",
            Code::LspTimeout => "LSP_TIMEOUT",
            Code::LspServerError => "LSP_SERVER_ERROR",
            Code::LspUnsupportedOperation => "LSP_UNSUPPORTED_OPERATION",
            Code::LspRouteConflict => "LSP_ROUTE_CONFLICT",
            Code::LspRouteMalformed => "LSP_ROUTE_MALFORMED",
        }
    }

    /// The code named `name` on the wire, if there is one.
    pub fn from_name(name: &str) -> Option<Code> {
        serde_json::from_value(serde_json::Value::from(name)).ok()
    }
}

impl std::fmt::Display for Code {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// Every code is written on the wire as its name, read back as itself,
    /// and listed once in `ALL`.
    #[test]
    fn every_code_round_trips_as_its_name() {
        for code in Code::ALL {
            let wire = serde_json::to_value(code).unwrap();
            assert_eq!(wire, serde_json::Value::from(code.as_str()));
            assert_eq!(serde_json::from_value::<Code>(wire).unwrap(), code);
            assert_eq!(Code::from_name(code.as_str()), Some(code));
        }
        let names: std::collections::BTreeSet<&str> =
            Code::ALL.iter().map(|c| c.as_str()).collect();
        assert_eq!(names.len(), Code::ALL.len());
        assert_eq!(Code::from_name("NOT_A_CODE"), None);
        // serde names every variant it expects: `ALL` leaves none out.
        let unknown = serde_json::from_str::<Code>("\"NOT_A_CODE\"")
            .unwrap_err()
            .to_string();
        let expected = unknown.matches('`').count() / 2 - 1;
        assert_eq!(expected, Code::ALL.len(), "{unknown}");
    }
}
