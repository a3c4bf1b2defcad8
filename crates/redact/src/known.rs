//! Known secret values: what the caller knows to be secret (the values of
//! environment variables the policy withheld, the values a tool call
//! passed in `env`), each with the kind its marker names.
//!
//! A value is taken only when it can be redacted safely wherever it
//! appears ([`KnownSecret::is_redactable`]): at least
//! [`MIN_KNOWN_LEN`] bytes, at most [`MAX_KNOWN_LEN`], with characters of
//! at least two classes (lower case, upper case, digit, other), and not a
//! path. `production`, `localhost`, `1234567890` or `/usr/local/bin` would
//! blank out ordinary text; a password, a token or a connection string
//! mixes classes.

use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};

/// The shortest value redacted, in bytes.
pub const MIN_KNOWN_LEN: usize = 8;
/// The longest value redacted, in bytes: longer ones are left out (a
/// value that long is a file, not a secret to search for; the credential
/// formats still apply to it).
pub const MAX_KNOWN_LEN: usize = 4096;

/// A value known to be secret, and the kind its marker names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KnownSecret {
    /// What the marker says: `[redacted: {kind}]`, e.g. `env GITHUB_TOKEN`.
    pub kind: String,
    /// The secret itself.
    pub value: String,
}

impl KnownSecret {
    /// A value known to be secret, of the kind named.
    pub fn new(kind: impl Into<String>, value: impl Into<String>) -> KnownSecret {
        KnownSecret {
            kind: kind.into(),
            value: value.into(),
        }
    }

    /// Whether `value` is specific enough to redact wherever it appears
    /// (see the module doc for the rule).
    pub fn is_redactable(value: &str) -> bool {
        let len = value.len();
        if !(MIN_KNOWN_LEN..=MAX_KNOWN_LEN).contains(&len) {
            return false;
        }
        if ["/", "./", "../", "~/"]
            .iter()
            .any(|p| value.starts_with(p))
        {
            return false;
        }
        let classes = [
            value.bytes().any(|b| b.is_ascii_lowercase()),
            value.bytes().any(|b| b.is_ascii_uppercase()),
            value.bytes().any(|b| b.is_ascii_digit()),
            value.bytes().any(|b| !b.is_ascii_alphanumeric()),
        ];
        classes.iter().filter(|&&c| c).count() >= 2
    }
}

/// The known values a redactor searches for.
#[derive(Default)]
pub struct KnownSet {
    /// Leftmost-first would hide an overlapping value; overlapping search
    /// finds each one.
    pub automaton: Option<AhoCorasick>,
    /// The values taken, in the automaton's pattern order.
    pub values: Vec<KnownSecret>,
    /// The longest value, in bytes.
    pub max_len: usize,
}

impl KnownSet {
    /// The redactable values of `known`, each once (the first kind named
    /// wins), and the ones left out.
    pub fn new(known: impl IntoIterator<Item = KnownSecret>) -> (KnownSet, Vec<KnownSecret>) {
        let mut values: Vec<KnownSecret> = Vec::new();
        let mut skipped = Vec::new();
        for k in known {
            if !KnownSecret::is_redactable(&k.value) {
                skipped.push(k);
            } else if !values.iter().any(|v| v.value == k.value) {
                values.push(k);
            }
        }
        let max_len = values.iter().map(|v| v.value.len()).max().unwrap_or(0);
        // Building can only fail past the automaton's size limits, far
        // above MAX_KNOWN_LEN times any count of variables; then the
        // values are searched for without one (see `find`).
        let automaton = if values.is_empty() {
            None
        } else {
            AhoCorasickBuilder::new()
                .match_kind(MatchKind::Standard)
                .build(values.iter().map(|v| v.value.as_bytes()))
                .ok()
        };
        (
            KnownSet {
                automaton,
                values,
                max_len,
            },
            skipped,
        )
    }

    /// Every occurrence of every value in `hay`, as (start, end, index).
    pub fn find(&self, hay: &[u8], mut each: impl FnMut(usize, usize, usize)) {
        match &self.automaton {
            Some(ac) => {
                for m in ac.find_overlapping_iter(hay) {
                    each(m.start(), m.end(), m.pattern().as_usize());
                }
            }
            None => {
                for (i, v) in self.values.iter().enumerate() {
                    let needle = v.value.as_bytes();
                    for start in 0..hay.len().saturating_sub(needle.len() - 1) {
                        if hay[start..].starts_with(needle) {
                            each(start, start + needle.len(), i);
                        }
                    }
                }
            }
        }
    }

    /// The length of the longest tail of `hay` that is a proper prefix of
    /// a value: those bytes may be the start of a value still arriving.
    pub fn partial_tail(&self, hay: &[u8]) -> usize {
        let mut longest = 0;
        for v in &self.values {
            let v = v.value.as_bytes();
            let most = (v.len() - 1).min(hay.len());
            for s in (longest + 1..=most).rev() {
                if v.starts_with(&hay[hay.len() - s..]) {
                    longest = s;
                    break;
                }
            }
        }
        longest
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    #[test]
    fn common_values_are_not_redactable() {
        for v in [
            "short1A",
            "production",
            "localhost",
            "1234567890",
            "/usr/local/bin",
            "~/secrets/x1",
            "ALLCAPSWORD",
        ] {
            assert!(!KnownSecret::is_redactable(v), "{v}");
        }
        for v in [
            "hunter2hunter",
            "correct horse battery",
            "postgres://u:p@h/db",
            "AKIA1234ABCD",
        ] {
            assert!(KnownSecret::is_redactable(v), "{v}");
        }
    }

    #[test]
    fn partial_tail_finds_the_longest_started_value() {
        let (set, _) = KnownSet::new([KnownSecret::new("k", "s3cretVALUE!")]);
        assert_eq!(set.partial_tail(b"output s3cr"), 4);
        assert_eq!(set.partial_tail(b"output s"), 1);
        assert_eq!(set.partial_tail(b"output x"), 0);
        // A whole value is not a partial one.
        assert_eq!(set.partial_tail(b"s3cretVALUE!"), 0);
    }
}
