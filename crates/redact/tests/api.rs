//! The redactor's API as a caller uses it: markers and counts, JSON,
//! known values, the raw-cursor mapping of a stream, and what a stream
//! holds back at a quiet point.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use pretty_assertions::assert_eq;
use redact::{KnownSecret, Redactor, footer};
use serde_json::json;

fn token() -> String {
    // Built at run time: no token-shaped literal in the source.
    format!("ghp_{}{}", "aB3dE5gH7jK9mN1pQ3sT", "5vW7yZ9bC1dE3fG5")
}

#[test]
fn the_footer_counts_secrets() {
    assert_eq!(footer(0), None);
    assert_eq!(footer(1).as_deref(), Some("[redacted: 1 secret]"));
    assert_eq!(footer(2).as_deref(), Some("[redacted: 2 secrets]"));
}

#[test]
fn text_without_secrets_is_borrowed_unchanged() {
    let r = Redactor::builtin().unwrap();
    let out = r.redact("nothing to see: key = value, token = 42\n");
    assert!(matches!(out.text, std::borrow::Cow::Borrowed(_)));
    assert_eq!(out.count, 0);
}

#[test]
fn every_string_of_a_json_value_is_redacted() {
    let r = Redactor::builtin()
        .unwrap()
        .with_known([KnownSecret::new("env DB_PASSWORD", "pa55-W0rd-long")]);
    let mut value = json!({
        "stdout": format!("token {}\n", token()),
        "nested": [{"env": "DB_PASSWORD=pa55-W0rd-long"}, 7, null, true],
        "pa55-W0rd-long": "keys are left as they are",
    });
    assert_eq!(r.redact_json(&mut value), 2);
    assert_eq!(
        value,
        json!({
            "stdout": "token [redacted: github token]\n",
            "nested": [{"env": "DB_PASSWORD=[redacted: env DB_PASSWORD]"}, 7, null, true],
            "pa55-W0rd-long": "keys are left as they are",
        })
    );
}

#[test]
fn common_known_values_are_left_out() {
    let r = Redactor::builtin().unwrap().with_known([
        KnownSecret::new("env NODE_ENV", "production"),
        KnownSecret::new("env SHORT", "aB3$"),
        KnownSecret::new("env TOKEN", "s3cr3t-Value"),
    ]);
    let kinds: Vec<&str> = r.known_values().iter().map(|k| k.kind.as_str()).collect();
    assert_eq!(kinds, vec!["env TOKEN"]);
    assert_eq!(r.redact("mode production").count, 0);
}

#[test]
fn overlapping_known_values_merge_into_one_redaction() {
    let r = Redactor::builtin().unwrap().with_known([
        KnownSecret::new("env A", "abc-DEF-123"),
        KnownSecret::new("env B", "DEF-123-xyz9"),
    ]);
    let out = r.redact("x abc-DEF-123-xyz9 y");
    assert_eq!(out.text, "x [redacted: env A] y");
    assert_eq!(out.count, 1);
}

/// A caller that hands out raw cursors maps them to text offsets.
#[test]
fn a_release_maps_raw_offsets_to_its_text() {
    let r = Redactor::builtin().unwrap();
    let mut stream = r.stream();
    let raw = format!("ab {} cd\n", token());
    let released = stream.push(raw.as_bytes());
    assert_eq!(released.raw, 0..raw.len() as u64);
    let text = String::from_utf8(released.text.clone()).unwrap();
    assert_eq!(text, "ab [redacted: github token] cd\n");
    assert_eq!(released.out_offset(1), Some(1));
    // Inside the secret: the start of its marker.
    assert_eq!(released.out_offset(10), Some(3));
    // After it: shifted by the difference in length.
    let after = 3 + 40 + 1;
    assert_eq!(
        released.out_offset(after as u64),
        Some(text.find("cd").unwrap())
    );
    assert_eq!(released.out_offset(raw.len() as u64), Some(text.len()));
    assert_eq!(released.out_offset(raw.len() as u64 + 1), None);
    assert_eq!(released.count, 1);
}

/// At a quiet point — output that ends with a prompt or a line — nothing
/// is held back; a token cut off at the end is, until the rest arrives.
#[test]
fn a_stream_holds_back_only_what_may_begin_a_secret() {
    let r = Redactor::builtin().unwrap();
    for quiet in [
        "total 4\n-rw-r--r-- 1 user user 0 Jan  1 00:00 file\n$ ",
        "Compiling redact v0.1.0\n    Finished `dev` profile\n",
        ">>> print(1+1)\n2\n>>> ",
        "commit 3f9a2c4d5e6f708192a3b4c5d6e7f8091a2b3c4d\n",
    ] {
        let mut stream = r.stream();
        let released = stream.push(quiet.as_bytes());
        assert_eq!(String::from_utf8(released.text).unwrap(), quiet);
        assert_eq!(stream.held(), 0, "{quiet:?}");
    }
    let token = token();
    let mut stream = r.stream();
    let first = stream.push(format!("export GITHUB_TOKEN={}", &token[..10]).as_bytes());
    assert_eq!(
        String::from_utf8(first.text).unwrap(),
        "export GITHUB_TOKEN="
    );
    assert_eq!(stream.held(), 10);
    let second = stream.push(format!("{}\n$ ", &token[10..]).as_bytes());
    assert_eq!(
        String::from_utf8(second.text).unwrap(),
        "[redacted: github token]\n$ "
    );
    assert_eq!(stream.held(), 0);
    assert_eq!(stream.count(), 1);
}

/// A candidate still open after `MAX_MATCH` bytes is decided on those
/// bytes, in a stream as in one shot, and the stream never holds more
/// than that plus a chunk.
#[test]
fn an_endless_candidate_is_decided_at_max_match() {
    let r = Redactor::builtin().unwrap();
    let mut text = String::from("$ cat key\n-----BEGIN RSA PRIVATE KEY-----\n");
    let line = "MIIEowIBAAKCAQEAx3kq9Lr2Vt8pWbN5sQ0yF1mZcH7gJdT4uE6aK2nB9oP3rS5vY\n";
    while text.len() < redact::MAX_MATCH + 10_000 {
        text.push_str(line);
    }
    text.push_str("$ ");
    let whole = r.redact_bytes(text.as_bytes()).bytes.into_owned();
    let mut stream = r.stream();
    let mut out = Vec::new();
    for chunk in text.as_bytes().chunks(1000) {
        out.extend(stream.push(chunk).text);
        assert!(
            stream.held() <= (redact::MAX_MATCH + 1000) as u64,
            "{}",
            stream.held()
        );
    }
    out.extend(stream.finish().text);
    assert_eq!(
        String::from_utf8_lossy(&out),
        String::from_utf8_lossy(&whole)
    );
}
