//! Argument parsing and clamping shared by every tool.

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ToolError;

/// Arguments that MCP clients add to every tool's schema and send on the
/// model's behalf, none of them an argument of a dsh tool: Gemini CLI's
/// `wait_for_previous` (a boolean asking it to order parallel calls). They
/// are dropped before parsing, so a call is never refused for what its
/// client added, while the model's own unknown fields still are.
const CLIENT_ADDED_ARGUMENTS: &[&str] = &["wait_for_previous"];

/// Parses a tool's JSON arguments; a failure is `INVALID_ARGUMENT` naming
/// the offending field (`timeout_ms: invalid type: string "x", expected u64`).
pub fn parse_args<T: DeserializeOwned>(args: serde_json::Value) -> Result<T, ToolError> {
    let args = match args {
        serde_json::Value::Null => serde_json::Value::Object(Default::default()),
        serde_json::Value::Object(mut fields) => {
            fields.retain(|name, value| {
                !(value.is_boolean() && CLIENT_ADDED_ARGUMENTS.contains(&name.as_str()))
            });
            serde_json::Value::Object(fields)
        }
        other @ (serde_json::Value::Bool(_)
        | serde_json::Value::Number(_)
        | serde_json::Value::String(_)
        | serde_json::Value::Array(_)) => other,
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
        assert_eq!(err.code, crate::Code::InvalidArgument);
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
    fn what_a_client_adds_is_dropped_and_the_model_s_own_mistakes_are_not() {
        let args: Args =
            parse_args(serde_json::json!({"command": "x", "wait_for_previous": true})).unwrap();
        assert_eq!(
            args,
            Args {
                command: "x".to_owned(),
                timeout_ms: None
            }
        );
        // Not the shape a client adds: the model's own mistake, named.
        let err =
            parse_args::<Args>(serde_json::json!({"command": "x", "wait_for_previous": "yes"}))
                .unwrap_err();
        assert!(
            err.message.contains("unknown field `wait_for_previous`"),
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
