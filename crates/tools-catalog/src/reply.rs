//! A successful result.

use serde::Serialize;

/// A successful call: one text block rendered for the model and the
/// structured content holding the contract's fields.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// The text block the model reads.
    pub text: String,
    /// The structured content (a JSON object).
    pub structured: serde_json::Value,
}

impl ToolReply {
    /// A reply from text and any serializable result object.
    pub fn new(text: impl Into<String>, structured: &impl Serialize) -> Self {
        Self {
            text: text.into(),
            structured: serde_json::to_value(structured)
                .unwrap_or_else(|e| serde_json::json!({ "serialization_error": e.to_string() })),
        }
    }
}
