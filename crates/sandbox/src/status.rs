//! What a result reports about the sandbox it ran in, and the one error a
//! spawn can get from it.

use std::fmt;

use crate::policy::Mode;

/// The sandbox a process runs in, as results report it:
/// `{mode, enforced, network, reason?}` plus a one-line text form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxStatus {
    /// The configured mode.
    pub mode: Mode,
    /// Whether the kernel enforces the mode's file rules for this process.
    pub enforced: bool,
    /// Whether TCP/UDP connections can leave: `false` only when blocking
    /// them is enforced.
    pub network: bool,
    /// Why enforcement is missing or weaker than the policy asks, when it is.
    pub reason: Option<String>,
}

impl SandboxStatus {
    /// The status of an unconfined process (`mode = "off"`).
    pub fn off() -> Self {
        Self {
            mode: Mode::Off,
            enforced: false,
            network: true,
            reason: None,
        }
    }

    /// The status of a process that runs unconfined because `reason`.
    pub fn unavailable(mode: Mode, reason: impl Into<String>) -> Self {
        Self {
            mode,
            enforced: false,
            network: true,
            reason: Some(reason.into()),
        }
    }
}

/// `[sandbox: workspace-write · network on]`, `[sandbox: off]`,
/// `[sandbox: unavailable — <why>; running unconfined]`, and for a
/// weakened sandbox `[sandbox: workspace-write · network on — <why>]`.
impl fmt::Display for SandboxStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mode == Mode::Off {
            return f.write_str("[sandbox: off]");
        }
        if !self.enforced {
            return write!(
                f,
                "[sandbox: unavailable — {}; running unconfined]",
                self.reason.as_deref().unwrap_or("unknown reason")
            );
        }
        let network = if self.network { "on" } else { "off" };
        write!(f, "[sandbox: {} · network {network}", self.mode)?;
        if let Some(reason) = &self.reason {
            write!(f, " — {reason}")?;
        }
        f.write_str("]")
    }
}

/// Why a spawn is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SandboxError {
    /// `required = true` and the kernel cannot enforce the policy.
    #[error(
        "the sandbox is required ([sandbox] required = true) but cannot be enforced: {reason}. \
         Nothing was run; use a kernel with Landlock and seccomp, or set required = false \
         to run unconfined with the status reported"
    )]
    Unavailable {
        /// What the kernel lacks.
        reason: String,
    },
}

impl SandboxError {
    /// The stable error code: `SANDBOX_UNAVAILABLE`.
    pub fn code(&self) -> &'static str {
        match self {
            SandboxError::Unavailable { .. } => "SANDBOX_UNAVAILABLE",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn text_forms() {
        let on = SandboxStatus {
            mode: Mode::WorkspaceWrite,
            enforced: true,
            network: true,
            reason: None,
        };
        assert_eq!(on.to_string(), "[sandbox: workspace-write · network on]");
        let ro = SandboxStatus {
            mode: Mode::ReadOnly,
            network: false,
            ..on.clone()
        };
        assert_eq!(ro.to_string(), "[sandbox: read-only · network off]");
        assert_eq!(SandboxStatus::off().to_string(), "[sandbox: off]");
        assert_eq!(
            SandboxStatus::unavailable(Mode::WorkspaceWrite, "the kernel has no Landlock")
                .to_string(),
            "[sandbox: unavailable — the kernel has no Landlock; running unconfined]"
        );
        let weak = SandboxStatus {
            reason: Some("only TCP is blocked".into()),
            ..on
        };
        assert_eq!(
            weak.to_string(),
            "[sandbox: workspace-write · network on — only TCP is blocked]"
        );
    }

    #[test]
    fn unavailable_error_has_its_code_and_says_what_to_do() {
        let e = SandboxError::Unavailable {
            reason: "the kernel has no Landlock".into(),
        };
        assert_eq!(e.code(), "SANDBOX_UNAVAILABLE");
        assert!(e.to_string().contains("set required = false"));
    }
}
