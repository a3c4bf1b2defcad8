//! Our own credential formats, for what the imported rule file does not
//! cover on output (its rules are written for source files). Kept few,
//! each with the reason it is here.

use crate::rules::{Discard, RuleSpec};

/// The supplements, in the order they are tried.
pub(crate) const RULES: &[RuleSpec] = &[
    // Upstream's crates.io rule wants the word `crates` before the token;
    // `~/.cargo/credentials.toml` says only `token = "cio…"`. The format is
    // `cio` and 32 alphanumerics.
    RuleSpec {
        id: "crates-io-token",
        kind: "crates.io token",
        regex: r"\b(cio[a-zA-Z0-9]{32})\b",
        discard: &[Discard::EntropyAtMost(3.0)],
    },
    // A password in a URL's user info (`postgres://app:s3cret@db/x`), as a
    // stack trace or a connection error prints it. Upstream's rule for it is
    // of medium confidence and filters with functions this crate does not
    // implement; this one takes the password only and leaves out the
    // placeholders documentation uses.
    RuleSpec {
        id: "url-password",
        kind: "password in url",
        // From `://` on: a scheme before it would make every word at the
        // end of the output a possible start, held back until more comes.
        regex: r#"://[^\s:/@'"`<>]{1,128}:([^\s/@'"`<>]{6,256})@[a-zA-Z0-9\[]"#,
        discard: &[Discard::Matches(&[
            r"(?i)^(?:password|passwd|pass|pwd|secret|changeme|token|x+|\*+|\.+)$",
            r"^\$\{?[A-Za-z_]",
            r"^%[A-Za-z_]",
            r"^\{\{",
        ])],
    },
    // Upstream's OpenAI rule ends the key with `\b`, so a key whose last
    // character is `-` or `_` (base64url: one in 32) is missed. This one
    // ends it at what follows a key on output instead.
    RuleSpec {
        id: "openai-api-key-any-end",
        kind: "openai key",
        regex: r#"\b(sk-(?:proj|svcacct|admin)-[A-Za-z0-9_-]{20,74}T3BlbkFJ[A-Za-z0-9_-]{20,74})(?:['"`\s;]|$)"#,
        discard: &[Discard::EntropyAtMost(3.0)],
    },
];
