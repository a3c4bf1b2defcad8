//! The contract's error envelope.

use std::borrow::Cow;

use serde_json::json;

/// The longest error message a model is shown, in bytes: a message that
/// quotes what the client sent (a mistyped 10 MB argument) keeps its head
/// and tail.
pub const MAX_ERROR_MESSAGE_BYTES: usize = 2048;

/// A stable error code, SCREAMING_SNAKE (`SEND_ACTIVE`, `INVALID_ARGUMENT`, …).
pub use error_code::Code;

/// A failed call: a stable code, a message that tells the model what to do,
/// and whether retrying the same call later can succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[error {code}] {message}")]
pub struct ToolError {
    /// The stable code.
    pub code: Code,
    /// What went wrong and what to do about it.
    pub message: String,
    /// True when the same call may succeed later.
    pub retryable: bool,
    /// Extra fields of the error object (`reason`, `line_text`, …).
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl ToolError {
    /// A non-retryable error.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: false,
            details: Default::default(),
        }
    }

    /// A retryable error.
    pub fn retryable(code: Code, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: true,
            details: Default::default(),
        }
    }

    /// Adds a field to the error object.
    pub fn with_detail(mut self, key: &str, value: impl Into<serde_json::Value>) -> Self {
        self.details.insert(key.to_owned(), value.into());
        self
    }

    /// `INVALID_ARGUMENT` naming the field.
    pub fn invalid_argument(field: &str, message: impl std::fmt::Display) -> Self {
        Self::new(
            Code::InvalidArgument,
            if field.is_empty() {
                message.to_string()
            } else {
                format!("{field}: {message}")
            },
        )
    }

    /// The text block the model reads: `[error CODE] message`, the message
    /// bounded as in [`ToolError::bounded_message`].
    pub fn text(&self) -> String {
        format!("[error {}] {}", self.code, self.bounded_message())
    }

    /// The message, at most about [`MAX_ERROR_MESSAGE_BYTES`]: a message
    /// that quotes a huge argument keeps its head and tail around a marker
    /// saying how many bytes were left out.
    pub fn bounded_message(&self) -> Cow<'_, str> {
        let message = self.message.as_str();
        if message.len() <= MAX_ERROR_MESSAGE_BYTES {
            return Cow::Borrowed(message);
        }
        let half = MAX_ERROR_MESSAGE_BYTES / 2;
        let mut head = half;
        while !message.is_char_boundary(head) {
            head -= 1;
        }
        let mut tail = message.len() - half;
        while !message.is_char_boundary(tail) {
            tail += 1;
        }
        Cow::Owned(format!(
            "{} [… {} bytes omitted …] {}",
            &message[..head],
            tail - head,
            &message[tail..]
        ))
    }

    /// The structured content: `{ "error": { code, message, retryable } }`.
    pub fn structured(&self) -> serde_json::Value {
        let mut error = json!({
            "code": self.code,
            "message": self.bounded_message(),
            "retryable": self.retryable,
        });
        if let Some(object) = error.as_object_mut() {
            object.extend(self.details.clone());
        }
        json!({ "error": error })
    }
}

/// The code of a terminal's error.
pub fn terminal_code(error: &terminal_seam::TerminalError) -> Code {
    use terminal_seam::TerminalError as E;
    match error {
        E::NoSession { .. } => Code::NoSession,
        E::ForeignSession { .. } => Code::ForeignSession,
        E::SendActive { .. } => Code::SendActive,
        E::SessionClosing { .. } => Code::SessionClosing,
        E::SessionExited { .. } => Code::SessionExited,
        E::DuplicateName { .. } => Code::DuplicateName,
        E::UseClose { .. } => Code::UseClose,
        E::SpawnFailed { .. } => Code::SpawnFailed,
        E::TerminalLimit { .. } => Code::TerminalLimit,
        E::InvalidArgument { .. } => Code::InvalidArgument,
    }
}

/// The code of a language server's error.
pub fn lsp_code(error: &lsp_seam::LspError) -> Code {
    use lsp_seam::LspError as E;
    match error {
        E::Unavailable { .. } => Code::LspUnavailable,
        E::NotReady { .. } => Code::LspNotReady,
        E::InvalidPosition { .. } => Code::LspInvalidPosition,
        E::FileNotFound { .. } => Code::LspFileNotFound,
        E::Timeout { .. } => Code::LspTimeout,
        E::ServerError { .. } => Code::LspServerError,
        E::UnsupportedOperation { .. } => Code::LspUnsupportedOperation,
        E::ReadDenied(_) => Code::SandboxReadDenied,
        E::InvalidArgument { .. } => Code::InvalidArgument,
    }
}

/// The code of the sandbox's error.
pub fn sandbox_code(error: &sandbox::SandboxError) -> Code {
    match error {
        sandbox::SandboxError::Unavailable { .. } => Code::SandboxUnavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_huge_message_keeps_its_head_and_tail_within_the_bound() {
        let huge =
            ToolError::invalid_argument("id", format!("`{}` is not an id", "é".repeat(1_000_000)));
        let text = huge.text();
        assert!(text.len() < MAX_ERROR_MESSAGE_BYTES + 100, "{}", text.len());
        assert!(
            text.starts_with("[error INVALID_ARGUMENT] id: `éé"),
            "{}",
            &text[..40]
        );
        assert!(text.ends_with("éé` is not an id"));
        assert!(text.contains(" bytes omitted …] "));
        let structured = huge.structured();
        let message = structured["error"]["message"].as_str().unwrap_or_default();
        assert_eq!(format!("[error INVALID_ARGUMENT] {message}"), text);

        let small = ToolError::new(Code::NoJob, "no job bash-9");
        assert_eq!(small.text(), "[error NO_JOB] no job bash-9");
    }
}
