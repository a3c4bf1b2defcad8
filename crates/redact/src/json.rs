//! Redaction of structured data: every string in a JSON value.

use serde_json::Value;

use crate::Redactor;

/// Redact every string in `value` (object keys left as they are); return
/// how many secrets were redacted.
pub fn redact_json(redactor: &Redactor, value: &mut Value) -> usize {
    match value {
        Value::String(s) => {
            let redacted = redactor.redact(s);
            let count = redacted.count;
            if count > 0 {
                *s = redacted.text.into_owned();
            }
            count
        }
        Value::Array(items) => items.iter_mut().map(|v| redact_json(redactor, v)).sum(),
        Value::Object(map) => map.iter_mut().map(|(_, v)| redact_json(redactor, v)).sum(),
        Value::Null | Value::Bool(_) | Value::Number(_) => 0,
    }
}
