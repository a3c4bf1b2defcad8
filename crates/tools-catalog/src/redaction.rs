//! Redaction at the tool boundary: every result a model reads — and
//! every error message — is scanned before it leaves dsh, and each secret
//! found is replaced by a marker that names its kind, never its value
//! (`[redacted: github token]`), with a footer like the sandbox's
//! (`[redacted: 2 secrets]`) and `redacted` in the structured data.
//!
//! What counts as a secret (see `redact` and docs/subsystems/secrets.md):
//! the values of the variables the `[env]` policy withholds from the
//! caller's processes (dsh knows them: they are in the environment the
//! caller's processes start from), the values the call itself passed in
//! `env`, and the built-in credential formats.
//!
//! A stream read (`terminal_read`, `job_output`) is redacted together with
//! what precedes it ([`LOOKBEHIND`] bytes), so a secret whose beginning an
//! earlier read returned is still caught where it ends; what that earlier
//! read showed of it stays shown (see the limits in secrets.md).

use serde_json::Value;

use crate::{CallContext, ToolError, ToolReply};

/// How much of a stream before a read is scanned with it.
pub const LOOKBEHIND: usize = 4096;

/// The known secrets of one call: withheld environment values and the
/// values of the call's own `env` argument.
fn known_secrets(cx: &CallContext, args: &Value) -> Vec<redact::KnownSecret> {
    let base: Vec<(String, String)> = match &cx.env {
        Some(env) => env.as_ref().clone(),
        None => std::env::vars().collect(),
    };
    let mut known: Vec<redact::KnownSecret> = cx
        .confinement
        .withheld(&base)
        .into_iter()
        .map(|(name, value)| redact::KnownSecret::new(format!("env {name}"), value))
        .collect();
    if let Some(env) = args.get("env").and_then(Value::as_object) {
        for (name, value) in env {
            if let Some(value) = value.as_str() {
                known.push(redact::KnownSecret::new(format!("env {name}"), value));
            }
        }
    }
    known
}

/// The redactor of one call.
pub fn redactor_for(cx: &CallContext, args: &Value) -> Option<redact::Redactor> {
    let base = cx.runtime.redactor()?;
    let known = known_secrets(cx, args);
    Some(if known.is_empty() {
        base
    } else {
        base.with_known(known)
    })
}

/// Redacts a call's outcome in place (`args`: the call's arguments).
pub fn redact_outcome(cx: &CallContext, args: &Value, outcome: &mut Result<ToolReply, ToolError>) {
    let Some(redactor) = redactor_for(cx, args) else {
        return;
    };
    match outcome {
        Ok(reply) => {
            let text = redactor.redact(&reply.text);
            let in_text = text.count;
            if in_text > 0 {
                reply.text = text.text.into_owned();
            }
            let in_data = redactor.redact_json(&mut reply.structured);
            let count = in_text.max(in_data);
            if let Some(footer) = redact::footer(count) {
                reply.text.push('\n');
                reply.text.push_str(&footer);
                if let Some(data) = reply.structured.as_object_mut() {
                    data.insert("redacted".to_owned(), Value::from(count));
                }
            }
        }
        Err(error) => {
            let message = redactor.redact(&error.message);
            if message.count > 0 {
                error.message = message.text.into_owned();
            }
        }
    }
}

/// `output`, the stream's text that follows `context` (the bytes before
/// it), redacted as part of `context + output`: a secret that begins in
/// `context` and ends in `output` is caught, and the part of it in
/// `output` becomes its marker.
pub fn redact_after(redactor: &redact::Redactor, context: &str, output: &str) -> String {
    if context.is_empty() {
        return redactor.redact(output).text.into_owned();
    }
    let mut whole = String::with_capacity(context.len() + output.len());
    whole.push_str(context);
    whole.push_str(output);
    let mut stream = redactor.stream();
    let first = stream.push(whole.as_bytes());
    let rest = stream.finish();
    let boundary = context.len() as u64;
    let start = if boundary < first.raw.end || rest.raw.is_empty() {
        first.out_offset(boundary).unwrap_or(first.text.len())
    } else {
        first.text.len() + rest.out_offset(boundary).unwrap_or(0)
    };
    let mut text = first.text;
    text.extend_from_slice(&rest.text);
    String::from_utf8_lossy(&text[start.min(text.len())..]).into_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// A token whose beginning an earlier read returned is caught where it
    /// ends, and nothing of the context comes back.
    #[test]
    fn a_secret_cut_by_a_read_is_caught_in_the_next() {
        let redactor = redact::Redactor::builtin().unwrap();
        let token = format!("ghp_{}", "aB3dE5fG7hJ9kL1mN3pQ5rS7tU9vW1xY3zA5");
        let line = format!("export GITHUB_TOKEN={token}\nnext line\n");
        for cut in 1..line.len() {
            let (before, after) = line.split_at(cut);
            let shown = redact_after(&redactor, before, after);
            let start = line.find("ghp_").unwrap();
            let end = start + token.len();
            if cut >= end {
                // Past the secret: the read comes back as it is.
                assert_eq!(shown, &line[cut..]);
            } else {
                // Inside or before it: none of the rest of it comes back.
                assert!(
                    !shown.contains(&line[cut.max(start)..end]),
                    "cut {cut}: {shown:?}"
                );
                assert!(shown.contains("[redacted: github"), "cut {cut}: {shown:?}");
                assert!(shown.ends_with("\nnext line\n"), "cut {cut}: {shown:?}");
            }
        }
    }
}
