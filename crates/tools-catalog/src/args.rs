//! Argument parsing and clamping shared by every tool.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ToolError;

/// Parses a tool's JSON arguments; a failure is `INVALID_ARGUMENT` naming
/// the offending field (`timeout_ms: invalid type: string "x", expected u64`).
pub fn parse_args<T: DeserializeOwned>(args: serde_json::Value) -> Result<T, ToolError> {
    let args = if args.is_null() {
        serde_json::Value::Object(Default::default())
    } else {
        args
    };
    serde_path_to_error::deserialize(args).map_err(|err| {
        let path = err.path().to_string();
        let field = if path == "." { String::new() } else { path };
        ToolError::invalid_argument(&field, err.into_inner())
    })
}

/// A clamp that was applied to a time limit; reported in the result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Clamped {
    /// The argument's name.
    pub field: &'static str,
    /// The value given.
    pub from: u64,
    /// The value used.
    pub to: u64,
}

/// Applies a default and a range to a millisecond argument.
pub fn clamp_ms(
    field: &'static str,
    given: Option<u64>,
    default: u64,
    min: u64,
    max: u64,
) -> (u64, Option<Clamped>) {
    match given {
        None => (default, None),
        Some(v) => {
            let to = v.clamp(min, max);
            (to, (to != v).then_some(Clamped { field, from: v, to }))
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use serde::Deserialize;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Args {
        command: String,
        #[serde(default)]
        timeout_ms: Option<u64>,
    }

    #[test]
    fn wrong_type_names_the_field() {
        let err = parse_args::<Args>(serde_json::json!({"command": "x", "timeout_ms": "soon"}))
            .unwrap_err();
        assert_eq!(err.code, "INVALID_ARGUMENT");
        assert!(
            err.message.starts_with("timeout_ms: invalid type: string"),
            "{}",
            err.message
        );
    }

    #[test]
    fn missing_and_unknown_fields_are_named() {
        let err = parse_args::<Args>(serde_json::json!({})).unwrap_err();
        assert_eq!(err.message, "missing field `command`");
        let err = parse_args::<Args>(serde_json::json!({"command": "x", "cmd": 1})).unwrap_err();
        assert!(
            err.message.contains("unknown field `cmd`"),
            "{}",
            err.message
        );
    }

    #[test]
    fn clamps_report_what_changed() {
        assert_eq!(clamp_ms("t", None, 5, 1, 10), (5, None));
        assert_eq!(clamp_ms("t", Some(7), 5, 1, 10), (7, None));
        assert_eq!(
            clamp_ms("t", Some(0), 5, 1, 10),
            (
                1,
                Some(Clamped {
                    field: "t",
                    from: 0,
                    to: 1
                })
            )
        );
    }
}
