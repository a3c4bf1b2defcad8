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
//! what precedes it ([`LOOKBEHIND`] bytes), so a secret that straddles the
//! read's start is caught; and when the end of what a read returns may be
//! the beginning of a secret, those bytes are held back and the next read
//! of the same stream shows them ([`redact_read`]). Cursors stay the raw
//! stream's.

use std::collections::HashMap;
use std::sync::Mutex;

use futures::future::BoxFuture;
use serde_json::Value;

use crate::{CallContext, ToolError, ToolReply};

/// How much of a stream before a read is scanned with it.
pub const LOOKBEHIND: usize = 4096;

/// The known secrets of one call: withheld environment values and the
/// values of the call's own `env` argument.
fn known_secrets(
    env: Option<&[(String, String)]>,
    confinement: &crate::Confinement,
    args: &Value,
) -> Vec<redact::KnownSecret> {
    let base: Vec<(String, String)> = match env {
        Some(env) => env.to_vec(),
        None => std::env::vars().collect(),
    };
    let mut known: Vec<redact::KnownSecret> = confinement
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
    redactor_of(
        &cx.runtime,
        cx.env.as_deref().map(Vec::as_slice),
        &cx.confinement,
        args,
    )
}

/// The redactor of a call whose caller's processes start from `env`
/// (`None`: this process's) under `confinement`, with arguments `args`.
pub fn redactor_of(
    runtime: &crate::Runtime,
    env: Option<&[(String, String)]>,
    confinement: &crate::Confinement,
    args: &Value,
) -> Option<redact::Redactor> {
    let base = runtime.base_redactor()?;
    let mut known = known_secrets(env, confinement, args);
    known.extend(runtime.remembered_secrets());
    Some(if known.is_empty() {
        base
    } else {
        base.with_known(known)
    })
}

/// The redactor of one call that lasts: a secret remembered while the
/// call runs (an answer a person gave, a resume key another reply showed)
/// is redacted from its later progress and its result too, save the
/// values this very call was made to show (the resume key its own reply
/// carries, [`LiveRedactor::may_show`]).
pub struct LiveRedactor {
    runtime: std::sync::Arc<crate::Runtime>,
    env: Option<Vec<(String, String)>>,
    confinement: std::sync::Arc<crate::Confinement>,
    args: Value,
    /// The redactor and the count of remembered changes it was made at.
    made: Mutex<(u64, Option<redact::Redactor>)>,
    /// What this call shows despite its being remembered.
    shown: Mutex<Vec<zeroize::Zeroizing<String>>>,
}

impl std::fmt::Debug for LiveRedactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveRedactor").finish_non_exhaustive()
    }
}

impl LiveRedactor {
    /// The redactor of a call whose caller's processes start from `env`
    /// (`None`: this process's) under `confinement`, with arguments
    /// `args`.
    pub fn new(
        runtime: std::sync::Arc<crate::Runtime>,
        env: Option<Vec<(String, String)>>,
        confinement: std::sync::Arc<crate::Confinement>,
        args: Value,
    ) -> Self {
        let changes = runtime.remembered_changes();
        let redactor = redactor_of(&runtime, env.as_deref(), &confinement, &args);
        Self {
            runtime,
            env,
            confinement,
            args,
            made: Mutex::new((changes, redactor)),
            shown: Mutex::new(Vec::new()),
        }
    }

    /// This call's reply shows `value` (a resume key minted for it), though
    /// it is remembered: it is redacted from every other result.
    pub fn may_show(&self, value: &str) {
        self.shown
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(zeroize::Zeroizing::new(value.to_owned()));
    }

    /// The redactor as of now: remade when a secret was remembered or
    /// forgotten since it was made.
    pub fn current(&self) -> Option<redact::Redactor> {
        let changes = self.runtime.remembered_changes();
        let mut made = self.made.lock().unwrap_or_else(|e| e.into_inner());
        if made.0 != changes {
            let base = self.runtime.base_redactor();
            let shown = self.shown.lock().unwrap_or_else(|e| e.into_inner());
            let mut known = known_secrets(self.env.as_deref(), &self.confinement, &self.args);
            known.extend(
                self.runtime
                    .remembered_secrets_but(|value| shown.iter().any(|s| s.as_str() == value)),
            );
            *made = (
                changes,
                base.map(|base| {
                    if known.is_empty() {
                        base
                    } else {
                        base.with_known(known)
                    }
                }),
            );
        }
        made.1.clone()
    }
}

/// Redacts a call's outcome in place (`args`: the call's arguments).
pub fn redact_outcome(cx: &CallContext, args: &Value, outcome: &mut Result<ToolReply, ToolError>) {
    if let Some(redactor) = redactor_for(cx, args) {
        redact_outcome_with(&redactor, outcome);
    }
}

/// Redacts a call's outcome in place with `redactor`: the reply's text
/// and data, or the error's message and details.
pub fn redact_outcome_with(
    redactor: &redact::Redactor,
    outcome: &mut Result<ToolReply, ToolError>,
) {
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
            let mut details = Value::Object(std::mem::take(&mut error.details));
            redactor.redact_json(&mut details);
            if let Value::Object(details) = details {
                error.details = details;
            }
        }
    }
}

/// Where the last read of each stream left off: per reader and stream,
/// the read's end and where the bytes it held back begin.
#[derive(Debug, Default)]
pub struct Holds(Mutex<HashMap<(u64, String), (u64, u64)>>);

impl Holds {
    fn take(&self, key: &(u64, String), at: u64) -> Option<u64> {
        let mut holds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match holds.remove(key) {
            Some((next, held_from)) if next == at => Some(held_from),
            _ => None,
        }
    }

    fn keep(&self, key: (u64, String), next: u64, held_from: u64) {
        let mut holds = self.0.lock().unwrap_or_else(|e| e.into_inner());
        // Bounded: a reader of many streams forgets the oldest holds (it
        // then sees those bytes only if it reads from before them).
        if holds.len() >= 1024 {
            holds.clear();
        }
        holds.insert(key, (next, held_from));
    }
}

/// What a stream read shows, redacted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shown {
    /// The raw cursor of its first byte: the read's `from`, or earlier
    /// when it shows what the previous read held back.
    pub from: u64,
    /// The text, redacted.
    pub text: String,
    /// Bytes at its end held back (they may begin a secret): the next
    /// read shows them.
    pub held: u64,
}

/// Reads `len` bytes of the stream from raw cursor `since` (`None` when
/// it cannot: then no context is used).
pub type ReadRange<'a> =
    Box<dyn Fn(u64, usize) -> BoxFuture<'a, Option<String>> + Send + Sync + 'a>;

/// Redacts a read of a stream (raw cursors `from..next`, its text
/// `output`) for reader `reader` of stream `stream`: together with the
/// [`LOOKBEHIND`] bytes before it, starting with what the previous read
/// held back, and holding back the end when it may begin a secret and
/// more output may follow (`live`).
pub async fn redact_read(
    cx: &CallContext,
    stream: &str,
    from: u64,
    next: u64,
    output: &str,
    live: bool,
    read_range: ReadRange<'_>,
) -> Shown {
    let Some(redactor) = redactor_for(cx, &Value::Null) else {
        return Shown {
            from,
            text: output.to_owned(),
            held: 0,
        };
    };
    let key = (cx.owner.serial(), stream.to_owned());
    let mut start = from;
    let mut shown = String::new();
    if let Some(held_from) = cx.runtime.holds.take(&key, from)
        && let Some(carried) = read_range(held_from, (from - held_from) as usize).await
        && carried.len() as u64 == from - held_from
    {
        start = held_from;
        shown.push_str(&carried);
    }
    shown.push_str(output);
    let back = (LOOKBEHIND as u64).min(start);
    let context = match back {
        0 => String::new(),
        _ => read_range(start - back, back as usize)
            .await
            .filter(|c| c.len() as u64 == back)
            .unwrap_or_default(),
    };
    // Offsets are raw bytes: hold only when the text is the raw bytes (not
    // widened by the replacement of bytes that are not UTF-8).
    let exact = output.len() as u64 == next.saturating_sub(from);
    let (text, held) = redact_window(
        &redactor,
        &context,
        &shown,
        live && exact && !output.is_empty(),
    );
    if held > 0 {
        cx.runtime.holds.keep(key, next, next - held);
    }
    Shown {
        from: start,
        text,
        held,
    }
}

/// `shown` redacted as the text that follows `context` (what precedes it
/// in the stream): a secret that straddles the two is caught and the part
/// in `shown` becomes its marker. With `hold`, the end of `shown` that may
/// begin a secret is left out and its length returned.
pub fn redact_window(
    redactor: &redact::Redactor,
    context: &str,
    shown: &str,
    hold: bool,
) -> (String, u64) {
    let mut whole = String::with_capacity(context.len() + shown.len());
    whole.push_str(context);
    whole.push_str(shown);
    let boundary = context.len() as u64;
    let mut stream = redactor.stream();
    let first = stream.push(whole.as_bytes());
    let hold = hold && stream.held() > 0;
    let (text, released_to) = if hold {
        let begin = if boundary <= first.raw.end {
            first.out_offset(boundary).unwrap_or(first.text.len())
        } else {
            first.text.len()
        };
        (
            first.text[begin.min(first.text.len())..].to_vec(),
            first.raw.end,
        )
    } else {
        let rest = stream.finish();
        let begin = if boundary < first.raw.end || rest.raw.is_empty() {
            first.out_offset(boundary).unwrap_or(first.text.len())
        } else {
            first.text.len() + rest.out_offset(boundary).unwrap_or(0)
        };
        let mut text = first.text;
        text.extend_from_slice(&rest.text);
        (text[begin.min(text.len())..].to_vec(), whole.len() as u64)
    };
    let held = (whole.len() as u64).saturating_sub(released_to.max(boundary));
    (String::from_utf8_lossy(&text).into_owned(), held)
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
            let (shown, _) = redact_window(&redactor, before, after, false);
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

    /// Read in pieces, with what one read holds back shown by the next,
    /// the reads together show every byte but no secret's.
    #[test]
    fn held_bytes_are_shown_by_the_next_read_and_no_secret_is() {
        let redactor = redact::Redactor::builtin().unwrap();
        let token = format!("glpat-{}", "aB3dE5fG7hJ9kL1mN3pQ");
        let stream = format!("ok\nexport GITLAB_TOKEN={token}\nmore output here\n");
        for size in [3, 7, 11, 16, 29] {
            let mut shown_all = String::new();
            let mut at = 0;
            let mut held_from: Option<usize> = None;
            while at < stream.len() {
                let end = (at + size).min(stream.len());
                let start = held_from.take().unwrap_or(at);
                let context = &stream[start.saturating_sub(LOOKBEHIND)..start];
                let (text, held) = redact_window(&redactor, context, &stream[start..end], true);
                assert!(!text.contains(&token[6..]), "size {size}: {text:?}");
                shown_all.push_str(&text);
                if held > 0 {
                    held_from = Some(end - held as usize);
                }
                at = end;
            }
            if let Some(from) = held_from {
                let context = &stream[from.saturating_sub(LOOKBEHIND)..from];
                shown_all.push_str(&redact_window(&redactor, context, &stream[from..], false).0);
            }
            assert!(
                !shown_all.contains("aB3dE5fG7h"),
                "size {size}: {shown_all:?}"
            );
            assert_eq!(
                shown_all,
                stream.replace(&token, "[redacted: gitlab token]"),
                "size {size}"
            );
        }
    }
}
