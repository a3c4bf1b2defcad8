//! The wire's [`Code`] of each error the daemon passes on to a client: a
//! terminal's and the registry's, each turned from its own enum by an
//! exhaustive match, so a new kind of error in any of them is a compile
//! error here until the wire has its code. (The page's errors carry
//! theirs: `ui::UiError::code`.)

use daemon_wire::Code;
use terminal_seam::{AnswerError, TerminalError};
use workspace::{StorageError, WorkspaceError};

/// The code of a terminal's error (the tool layer's mapping: one for
/// every side).
pub fn terminal(error: &TerminalError) -> Code {
    tools_catalog::terminal_code(error)
}

/// The code of the reason a person's answer to a secret prompt was not
/// typed.
pub fn answer(error: &AnswerError) -> Code {
    match error {
        AnswerError::Terminal(e) => terminal(e),
        AnswerError::NoSecretPrompt { .. } => Code::NoSecretPrompt,
        AnswerError::Refused { .. } => Code::AnswerRefused,
    }
}

/// The code of a registry error.
pub fn registry(error: &WorkspaceError) -> Code {
    match error {
        WorkspaceError::PathNotFound { .. } => Code::PathNotFound,
        WorkspaceError::PathUnresolvable { .. } => Code::PathUnresolvable,
        WorkspaceError::NotADirectory { .. } => Code::NotADirectory,
        WorkspaceError::UnknownWorkspace(_) => Code::UnknownWorkspace,
        WorkspaceError::UnknownSession(_) => Code::UnknownSession,
        WorkspaceError::WorkspaceOrderInvalid { .. } => Code::WorkspaceOrderInvalid,
        WorkspaceError::WorkspaceMoveInvalid { .. } => Code::WorkspaceMoveInvalid,
        WorkspaceError::SessionCwdMissing { .. } => Code::SessionCwdMissing,
        WorkspaceError::SessionCwdUnresolvable { .. } => Code::SessionCwdUnresolvable,
        WorkspaceError::SessionCwdNotDirectory { .. } => Code::SessionCwdNotDirectory,
        WorkspaceError::SessionCwdMismatch { .. } => Code::SessionCwdMismatch,
        WorkspaceError::InvalidTitle { .. } => Code::InvalidTitle,
        WorkspaceError::SessionExists(_) => Code::SessionExists,
        WorkspaceError::Storage(e) => storage(e),
        WorkspaceError::RollbackFailed { .. } => Code::RollbackFailed,
        WorkspaceError::Inconsistent { .. } => Code::StoreInconsistent,
        WorkspaceError::UnsupportedVersion { .. } => Code::UnsupportedVersion,
        WorkspaceError::Poisoned => Code::RegistryPoisoned,
    }
}

fn storage(error: &StorageError) -> Code {
    match error {
        StorageError::Io { .. } => Code::StorageIo,
        StorageError::Poisoned { .. } => Code::StoragePoisoned,
        StorageError::Busy { .. } => Code::StoreBusy,
        StorageError::Corrupt { .. } => Code::StorageCorrupt,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;
    use std::path::PathBuf;
    use terminal_seam::TerminalId;
    use workspace::{SessionId, WorkspaceId};

    /// Each error's wire code is the code its own enum names.
    #[test]
    fn each_error_keeps_its_own_code_on_the_wire() {
        let id = TerminalId(7);
        let terminals = [
            TerminalError::NoSession { id },
            TerminalError::ForeignSession { id },
            TerminalError::SendActive { id },
            TerminalError::SessionClosing { id },
            TerminalError::SessionExited { id, exit: None },
            TerminalError::DuplicateName { name: "a".into() },
            TerminalError::UseClose { id },
            TerminalError::SpawnFailed {
                command: "sh".into(),
                reason: "gone".into(),
            },
            TerminalError::TerminalLimit { limit: 1 },
            TerminalError::invalid("id", "no"),
        ];
        for e in &terminals {
            assert_eq!(terminal(e).as_str(), e.code(), "{e:?}");
        }
        let answers = [
            AnswerError::Terminal(TerminalError::NoSession { id }),
            AnswerError::NoSecretPrompt { id },
            AnswerError::Refused {
                id,
                why: "w".into(),
            },
        ];
        for e in &answers {
            assert_eq!(answer(e).as_str(), e.code(), "{e:?}");
        }

        let session = SessionId::new_random();
        let path = PathBuf::from("/nowhere");
        let io = || std::io::Error::from(std::io::ErrorKind::NotFound);
        let store = || StorageError::Io {
            message: "disk".into(),
        };
        let registries = [
            WorkspaceError::PathNotFound {
                path: path.clone(),
                source: io(),
            },
            WorkspaceError::PathUnresolvable {
                path: path.clone(),
                source: io(),
            },
            WorkspaceError::NotADirectory { path: path.clone() },
            WorkspaceError::UnknownWorkspace(WorkspaceId(session.0)),
            WorkspaceError::UnknownSession(session),
            WorkspaceError::WorkspaceOrderInvalid { reason: "r".into() },
            WorkspaceError::WorkspaceMoveInvalid { reason: "r".into() },
            WorkspaceError::SessionCwdMissing { session },
            WorkspaceError::SessionCwdUnresolvable {
                session,
                cwd: path.clone(),
                reason: "r".into(),
            },
            WorkspaceError::SessionCwdNotDirectory {
                session,
                cwd: path.clone(),
            },
            WorkspaceError::SessionCwdMismatch {
                session,
                cwd: path.clone(),
                path: path.clone(),
            },
            WorkspaceError::InvalidTitle { reason: "r".into() },
            WorkspaceError::SessionExists(session),
            WorkspaceError::Storage(store()),
            WorkspaceError::Storage(StorageError::Poisoned { first: "f".into() }),
            WorkspaceError::Storage(StorageError::Busy {
                dir: path.clone(),
                waited_ms: 1,
            }),
            WorkspaceError::Storage(StorageError::Corrupt { what: "w".into() }),
            WorkspaceError::RollbackFailed {
                error: store(),
                rollback: store(),
            },
            WorkspaceError::Inconsistent { problems: vec![] },
            WorkspaceError::UnsupportedVersion {
                found: 9,
                supported: 1,
            },
            WorkspaceError::Poisoned,
        ];
        for e in &registries {
            assert_eq!(registry(e).as_str(), e.code(), "{e:?}");
        }

        // The page's own errors carry their code (`UiError::code`).
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let pages = [
            (ui::UiError::PortInUse { addr }, "UI_PORT_IN_USE"),
            (
                ui::UiError::Bind {
                    addr,
                    reason: "r".into(),
                },
                "UI_BIND_FAILED",
            ),
            (ui::UiError::Token("t".into()), "UI_TOKEN_FAILED"),
        ];
        for (e, code) in &pages {
            assert_eq!(e.code().as_str(), *code, "{e:?}");
        }
    }
}
