//! The one error enum of the terminal seam.

use crate::{ExitStatus, TerminalId};

/// Why a terminal call failed. Codes are stable; messages tell a model
/// what to do next.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TerminalError {
    /// No terminal with this id exists (or it was closed long ago).
    #[error("no terminal {id}; terminal_list shows your terminals, terminal_open starts one")]
    NoSession {
        /// The id asked for.
        id: TerminalId,
    },
    /// The terminal belongs to another agent.
    #[error("terminal {id} belongs to another agent; open your own with terminal_open")]
    ForeignSession {
        /// The id asked for.
        id: TerminalId,
    },
    /// An earlier send to this terminal has not settled yet.
    #[error(
        "terminal {id} is still busy with an earlier send; wait and retry, read its progress with \
         terminal_read, or interrupt it with terminal_signal SIGINT"
    )]
    SendActive {
        /// The busy terminal.
        id: TerminalId,
    },
    /// The terminal is being (or has been) closed.
    #[error("terminal {id} is closing or closed; open a new one with terminal_open")]
    SessionClosing {
        /// The id asked for.
        id: TerminalId,
    },
    /// The terminal's process has exited.
    #[error(
        "terminal {id} has exited ({}); terminal_read still shows its output, terminal_close \
         frees it, terminal_open starts a new one", describe_exit(.exit)
    )]
    SessionExited {
        /// The id asked for.
        id: TerminalId,
        /// How its process ended, when known.
        exit: Option<ExitStatus>,
    },
    /// Another of the caller's terminals already has this name.
    #[error("you already have a terminal named `{name}`; pick another name or use that terminal")]
    DuplicateName {
        /// The name asked for.
        name: String,
    },
    /// SIGKILL aimed at the terminal's own first process.
    #[error(
        "SIGKILL would kill the shell of terminal {id} itself; use terminal_close to end the \
         terminal, or SIGINT/SIGTERM to stop the running command"
    )]
    UseClose {
        /// The terminal.
        id: TerminalId,
    },
    /// The terminal's program could not be started.
    #[error("could not start `{command}`: {reason}")]
    SpawnFailed {
        /// The program.
        command: String,
        /// What the system said.
        reason: String,
    },
    /// The caller already has the maximum number of open terminals.
    #[error(
        "you already have {limit} open terminals (the limit); close one with terminal_close \
         (terminal_list shows them) and retry"
    )]
    TerminalLimit {
        /// The per-agent limit.
        limit: usize,
    },
    /// An argument is malformed; the message names the field.
    #[error("invalid `{field}`: {reason}")]
    InvalidArgument {
        /// The argument's name as the model wrote it.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

fn describe_exit(exit: &Option<ExitStatus>) -> String {
    match exit {
        Some(ExitStatus {
            code: Some(code), ..
        }) => format!("exit code {code}"),
        Some(ExitStatus {
            signal: Some(sig), ..
        }) => format!("killed by signal {sig}"),
        Some(ExitStatus {
            code: None,
            signal: None,
        })
        | None => "status unknown".to_owned(),
    }
}

impl TerminalError {
    /// An `INVALID_ARGUMENT` naming `field`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidArgument {
            field,
            reason: reason.into(),
        }
    }

    /// The stable SCREAMING_SNAKE code of the contract.
    pub fn code(&self) -> &'static str {
        match self {
            Self::NoSession { .. } => "NO_SESSION",
            Self::ForeignSession { .. } => "FOREIGN_SESSION",
            Self::SendActive { .. } => "SEND_ACTIVE",
            Self::SessionClosing { .. } => "SESSION_CLOSING",
            Self::SessionExited { .. } => "SESSION_EXITED",
            Self::DuplicateName { .. } => "DUPLICATE_NAME",
            Self::UseClose { .. } => "USE_CLOSE",
            Self::SpawnFailed { .. } => "SPAWN_FAILED",
            Self::TerminalLimit { .. } => "TERMINAL_LIMIT",
            Self::InvalidArgument { .. } => "INVALID_ARGUMENT",
        }
    }

    /// True when the same call may succeed later without any other change.
    pub fn retryable(&self) -> bool {
        match self {
            Self::SendActive { .. } => true,
            Self::NoSession { .. }
            | Self::ForeignSession { .. }
            | Self::SessionClosing { .. }
            | Self::SessionExited { .. }
            | Self::DuplicateName { .. }
            | Self::UseClose { .. }
            | Self::SpawnFailed { .. }
            | Self::TerminalLimit { .. }
            | Self::InvalidArgument { .. } => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn every_code_is_the_contracts_and_only_send_active_is_retryable() {
        let id = TerminalId(3);
        let all = [
            TerminalError::NoSession { id },
            TerminalError::ForeignSession { id },
            TerminalError::SendActive { id },
            TerminalError::SessionClosing { id },
            TerminalError::SessionExited {
                id,
                exit: Some(ExitStatus {
                    code: Some(0),
                    signal: None,
                }),
            },
            TerminalError::DuplicateName { name: "x".into() },
            TerminalError::UseClose { id },
            TerminalError::SpawnFailed {
                command: "nope".into(),
                reason: "not found".into(),
            },
            TerminalError::TerminalLimit { limit: 32 },
            TerminalError::invalid("until", "bad regex"),
        ];
        let codes: Vec<(&str, bool)> = all.iter().map(|e| (e.code(), e.retryable())).collect();
        assert_eq!(
            codes,
            vec![
                ("NO_SESSION", false),
                ("FOREIGN_SESSION", false),
                ("SEND_ACTIVE", true),
                ("SESSION_CLOSING", false),
                ("SESSION_EXITED", false),
                ("DUPLICATE_NAME", false),
                ("USE_CLOSE", false),
                ("SPAWN_FAILED", false),
                ("TERMINAL_LIMIT", false),
                ("INVALID_ARGUMENT", false),
            ]
        );
        assert_eq!(
            all[4].to_string(),
            "terminal pty-3 has exited (exit code 0); terminal_read still shows its output, \
             terminal_close frees it, terminal_open starts a new one"
        );
        assert_eq!(all[9].to_string(), "invalid `until`: bad regex");
    }
}
