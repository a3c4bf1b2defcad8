//! The contract's error envelope.

use serde_json::json;

/// A stable error code, SCREAMING_SNAKE (`SEND_ACTIVE`, `INVALID_ARGUMENT`, …).
pub type ErrorCode = &'static str;

/// A failed call: a stable code, a message that tells the model what to do,
/// and whether retrying the same call later can succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[error {code}] {message}")]
pub struct ToolError {
    /// The stable code.
    pub code: ErrorCode,
    /// What went wrong and what to do about it.
    pub message: String,
    /// True when the same call may succeed later.
    pub retryable: bool,
    /// Extra fields of the error object (`reason`, `line_text`, …).
    pub details: serde_json::Map<String, serde_json::Value>,
}

impl ToolError {
    /// A non-retryable error.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            retryable: false,
            details: Default::default(),
        }
    }

    /// A retryable error.
    pub fn retryable(code: ErrorCode, message: impl Into<String>) -> Self {
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
            "INVALID_ARGUMENT",
            if field.is_empty() {
                message.to_string()
            } else {
                format!("{field}: {message}")
            },
        )
    }

    /// The text block the model reads: `[error CODE] message`.
    pub fn text(&self) -> String {
        self.to_string()
    }

    /// The structured content: `{ "error": { code, message, retryable } }`.
    pub fn structured(&self) -> serde_json::Value {
        let mut error =
            json!({ "code": self.code, "message": self.message, "retryable": self.retryable });
        if let Some(object) = error.as_object_mut() {
            object.extend(self.details.clone());
        }
        json!({ "error": error })
    }
}
