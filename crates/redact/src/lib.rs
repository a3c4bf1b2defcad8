//! Find the secrets in text a model is about to read and replace each with
//! a marker naming its kind, never its value: `[redacted: github token]`.
//!
//! A [`Redactor`] looks for two things:
//!
//! * **known values** ([`KnownSecret`]): what the caller knows to be secret
//!   — the values of environment variables the policy withheld, the values
//!   a tool call passed in `env` — each with the kind its marker names.
//!   Values that would blank out ordinary text are left out (shorter than
//!   8 bytes, a single class of characters, a path: see
//!   [`KnownSecret::is_redactable`]).
//! * **credential formats**: private-key PEM blocks, cloud keys (AWS, GCP,
//!   Azure, …), forge, chat, payment and package-registry tokens, AI
//!   provider keys, JWTs and some 250 more, each a regex with an entropy
//!   threshold.
//!
//! It redacts a string ([`Redactor::redact`]), bytes
//! ([`Redactor::redact_bytes`]), every string of a JSON value
//! ([`Redactor::redact_json`]), or a stream read in chunks
//! ([`Redactor::stream`], a [`StreamRedactor`]) whose released text is
//! byte for byte what one-shot redaction of the whole makes, wherever the
//! chunks were cut, and whose raw cursors stay exact (see [`stream`]).
//! Each result counts its redactions, for a footer such as
//! `[redacted: 2 secrets]` ([`footer`]).
//!
//! # The rule source
//!
//! The formats are [Betterleaks](https://github.com/betterleaks/betterleaks)'
//! `config/betterleaks.toml` (MIT; the maintained successor of gitleaks'
//! `config/gitleaks.toml`, by its author, in the same format plus a
//! `confidence` per rule), imported at the revision [`RULE_SOURCE`] names
//! into `rules/imported.toml`, data the build reads (`build.rs` turns it
//! into the constants of `src/imported.rs`). The importer takes the rules upstream marks
//! `confidence = "high"`, and leaves out those that name an identifier
//! rather than a secret (`skipReport`), that apply to one kind of file
//! (`path`), or whose filter calls a function this crate does not have (the
//! token-efficiency test of the keyword-context rules); the generated
//! file's doc lists the exceptions. Upstream's entropy thresholds and
//! allow-patterns are kept as discard tests; its `keywords` are
//! not used: the prefilter's literals are derived from each regex, so that
//! text without one cannot hold a match. `src/supplement.rs` adds the two
//! formats output needs and the file does not have (a bare crates.io token,
//! a password in a URL). A rule that the `regex` engine cannot compile, or
//! whose matches no literal anchors, fails the crate's tests; the importer's
//! deny list then takes it out, with the reason.
//!
//! To update: take `config/betterleaks.toml` at a newer upstream revision
//! (the repository's, or the verbatim copy in the `upstream-sources.json.gz`
//! of a newer `kingfisher-rules` crate, which records the revision), then
//!
//! ```text
//! cargo run -p redact --example import_rules -- betterleaks.toml REVISION \
//!     > crates/redact/rules/imported.toml
//! cargo test -p redact
//! ```
//!
//! and read the diff: the tests compile every rule, catch every planted
//! secret whole and split at every byte, and count false positives over
//! 10 MB of ordinary output.
//!
//! # Limits
//!
//! A secret is found as it is printed: one broken by escape sequences,
//! re-encoded (base64, URL-encoded) or split over lines is not, unless a
//! rule spans it (PEM blocks do). A match is at most [`MAX_MATCH`] bytes.
//! This crate knows nothing of tools, terminals or the policy: callers
//! choose what to redact and where.

#![forbid(unsafe_code)]

mod json;
mod known;
mod rules;
mod scan;
pub mod stream;

#[allow(clippy::all)]
#[rustfmt::skip]
mod imported;
mod supplement;

use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock};

pub use known::{KnownSecret, MAX_KNOWN_LEN, MIN_KNOWN_LEN};
pub use rules::MAX_MATCH;
pub use stream::{Piece, Released, StreamRedactor, marker};

use known::KnownSet;
use rules::RuleSet;
use scan::{Scanner, Window};

/// Where the credential formats came from: upstream's file and revision.
pub const RULE_SOURCE: &str = imported::SOURCE;

/// Why a redactor could not be built.
#[derive(Clone, Debug, thiserror::Error, PartialEq, Eq)]
pub enum RedactError {
    /// A rule does not compile, or no literal anchors its matches.
    #[error("secret rule {id}: {reason}")]
    Rule {
        /// The rule's id.
        id: &'static str,
        /// What is wrong with it.
        reason: String,
    },
}

impl RedactError {
    /// A stable code for the error's kind.
    pub fn code(&self) -> &'static str {
        match self {
            RedactError::Rule { .. } => "redact_rule",
        }
    }
}

/// A redacted string and how many secrets it held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Redacted<'a> {
    /// The text with each secret replaced by its marker; borrowed when
    /// there was none.
    pub text: Cow<'a, str>,
    /// How many secrets were replaced.
    pub count: usize,
}

/// Redacted bytes and how many secrets they held.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedactedBytes<'a> {
    /// The bytes with each secret replaced by its marker.
    pub bytes: Cow<'a, [u8]>,
    /// How many secrets were replaced.
    pub count: usize,
}

/// The footer a reply carries when it redacted something:
/// `[redacted: 1 secret]`, `[redacted: 3 secrets]`; `None` for 0.
pub fn footer(count: usize) -> Option<String> {
    match count {
        0 => None,
        1 => Some("[redacted: 1 secret]".to_owned()),
        n => Some(format!("[redacted: {n} secrets]")),
    }
}

/// The built-in rules, compiled once per process.
static BUILTIN: OnceLock<Result<Arc<RuleSet>, RedactError>> = OnceLock::new();

/// How many lists of known values [`Redactor::with_known`] keeps with
/// their sets.
pub const KNOWN_SETS_KEPT: usize = 16;

/// The lists of known values asked for lately, with their sets, the
/// latest first.
type KeptSets = std::collections::VecDeque<(Vec<KnownSecret>, Arc<KnownSet>)>;
static KEPT_SETS: Mutex<KeptSets> = Mutex::new(KeptSets::new());

/// The set of `asked`: the one kept for the same list, or a new one.
fn known_set(asked: Vec<KnownSecret>) -> Arc<KnownSet> {
    let kept = || {
        KEPT_SETS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    };
    {
        let mut kept = kept();
        if let Some(at) = kept.iter().position(|(list, _)| *list == asked)
            && let Some(entry) = kept.remove(at)
        {
            let set = Arc::clone(&entry.1);
            kept.push_front(entry);
            return set;
        }
    }
    // Made without the lock: other lists are looked up meanwhile.
    let (set, _skipped) = KnownSet::new(asked.iter().cloned());
    let set = Arc::new(set);
    let mut kept = kept();
    kept.push_front((asked, Arc::clone(&set)));
    kept.truncate(KNOWN_SETS_KEPT);
    set
}

/// Finds secrets and replaces them with markers. Cheap to clone: the
/// compiled rules are shared.
#[derive(Clone)]
pub struct Redactor {
    rules: Arc<RuleSet>,
    known: Arc<KnownSet>,
}

impl Redactor {
    /// A redactor with the built-in credential formats and no known
    /// values. The rules are compiled on the first call in a process and
    /// shared after.
    pub fn builtin() -> Result<Redactor, RedactError> {
        let rules = BUILTIN.get_or_init(RuleSet::builtin).clone()?;
        Ok(Redactor {
            rules,
            known: Arc::new(KnownSet::default()),
        })
    }

    /// The same rules, searching also for `known` values (replacing any
    /// this one had). Values [`KnownSecret::is_redactable`] rejects are
    /// left out; [`known_values`](Redactor::known_values) lists the ones
    /// taken.
    ///
    /// The values' automaton is made once per distinct list: the last
    /// [`KNOWN_SETS_KEPT`] lists asked for are kept with theirs (a server
    /// asks for the same few lists on every call).
    pub fn with_known(&self, known: impl IntoIterator<Item = KnownSecret>) -> Redactor {
        let asked: Vec<KnownSecret> = known.into_iter().collect();
        Redactor {
            rules: Arc::clone(&self.rules),
            known: known_set(asked),
        }
    }

    /// The known values this redactor searches for.
    pub fn known_values(&self) -> &[KnownSecret] {
        &self.known.values
    }

    /// How many credential formats it knows.
    pub fn rule_count(&self) -> usize {
        self.rules.rules.len()
    }

    /// The ids of its credential formats, in order.
    pub fn rule_ids(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.rules.rules.iter().map(|r| r.spec.id)
    }

    /// `text` with every secret replaced by its marker.
    pub fn redact<'a>(&self, text: &'a str) -> Redacted<'a> {
        let RedactedBytes { bytes, count } = self.redact_bytes(text.as_bytes());
        let text = match bytes {
            Cow::Borrowed(_) => Cow::Borrowed(text),
            // Secrets and markers are whole characters: the bytes stay
            // UTF-8. Should they not, lossy decoding keeps the redaction.
            Cow::Owned(bytes) => Cow::Owned(match String::from_utf8(bytes) {
                Ok(s) => s,
                Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
            }),
        };
        Redacted { text, count }
    }

    /// `bytes` with every secret replaced by its marker.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> RedactedBytes<'a> {
        let mut scanner = Scanner::new(Arc::clone(&self.rules), Arc::clone(&self.known));
        let end = bytes.len() as u64;
        let hold = scanner.advance(Window {
            hay: bytes,
            base: 0,
            released: 0,
            finished: true,
        });
        let (spans, _) = scanner.take(hold);
        if spans.is_empty() {
            return RedactedBytes {
                bytes: Cow::Borrowed(bytes),
                count: 0,
            };
        }
        let out = stream::render(&scanner, bytes, 0, 0, end, &spans);
        RedactedBytes {
            bytes: Cow::Owned(out.text),
            count: out.count,
        }
    }

    /// Redact every string in `value`, in place; return how many secrets
    /// were redacted. Object keys are left as they are.
    pub fn redact_json(&self, value: &mut serde_json::Value) -> usize {
        json::redact_json(self, value)
    }

    /// A redactor for a stream read in chunks.
    pub fn stream(&self) -> StreamRedactor {
        StreamRedactor::new(Arc::clone(&self.rules), Arc::clone(&self.known))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    /// Every built-in rule compiles and has triggers.
    #[test]
    fn builtin_rules_compile() {
        let failed: Vec<String> = imported::RULES
            .iter()
            .chain(supplement::RULES)
            .filter_map(|spec| {
                rules::Rule::compile(*spec, Arc::new(Vec::new()))
                    .and_then(|rule| rule.build())
                    .err()
            })
            .map(|e| e.to_string())
            .collect();
        assert!(failed.is_empty(), "{}", failed.join("\n"));
        let started = std::time::Instant::now();
        let r = Redactor::builtin().unwrap_or_else(|e| panic!("{e}"));
        println!(
            "compiled {} rules in {:?}",
            r.rule_count(),
            started.elapsed()
        );
        assert!(r.rule_count() > 250, "{}", r.rule_count());
    }

    #[test]
    fn the_same_known_values_share_one_automaton() {
        let base = Redactor::builtin().unwrap();
        let list = |v: &str| {
            vec![
                KnownSecret::new("env A", v),
                KnownSecret::new("env B", "pa55-Word-two"),
            ]
        };
        let a = base.with_known(list("s3cret-Value-one"));
        let again = base.with_known(list("s3cret-Value-one"));
        let other = base.with_known(list("an0ther-Value"));
        assert!(Arc::ptr_eq(&a.known, &again.known));
        assert!(!Arc::ptr_eq(&a.known, &other.known));
        let text = "x s3cret-Value-one an0ther-Value pa55-Word-two";
        assert_eq!(again.redact(text).count, 2);
        assert_eq!(other.redact(text).count, 2);
        assert!(!other.redact(text).text.contains("an0ther"));
    }

    #[test]
    fn a_token_is_replaced_by_its_kind() {
        let r = Redactor::builtin().unwrap();
        let token = format!("ghp_{}", "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3fG5");
        let text = format!("token={token} done");
        let out = r.redact(&text);
        assert_eq!(out.text, "token=[redacted: github token] done");
        assert_eq!(out.count, 1);
    }
}
