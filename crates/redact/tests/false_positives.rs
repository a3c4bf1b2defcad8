//! False positives over ordinary output: at most one per 10 MB.
//!
//! The corpus is built from the machine at test time (see `ordinary`);
//! every redaction in it is printed with its kind and a masked excerpt, so
//! a change in the rate can be judged by reading them
//! (`cargo test -p redact --test false_positives -- --nocapture`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod ordinary;

use redact::Redactor;

const TEN_MB: f64 = 10.0 * 1024.0 * 1024.0;

/// `bytes` with all but its first four characters masked.
fn masked(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let shown: String = text.chars().take(4).collect();
    format!("{shown}… ({} bytes)", bytes.len())
}

#[test]
fn ordinary_output_has_at_most_one_false_positive_per_ten_mb() {
    let redactor = Redactor::builtin().unwrap();
    let sources = ordinary::build();
    let (mut total, mut found) = (0usize, 0usize);
    for source in &sources {
        let mut stream = redactor.stream();
        let mut pieces = stream.push(&source.text).pieces;
        pieces.extend(stream.finish().pieces);
        let hits: Vec<_> = pieces.iter().filter(|p| p.redacted.is_some()).collect();
        println!(
            "{:>9} bytes {:>3} redacted  {}",
            source.text.len(),
            hits.len(),
            source.name
        );
        for hit in &hits {
            let (s, e) = (hit.raw.start as usize, hit.raw.end as usize);
            let before = &source.text[s.saturating_sub(40)..s];
            println!(
                "      {}: …{}[{}]",
                hit.redacted.as_deref().unwrap_or(""),
                String::from_utf8_lossy(before).replace('\n', "⏎"),
                masked(&source.text[s..e])
            );
        }
        total += source.text.len();
        found += hits.len();
    }
    let rate = found as f64 * TEN_MB / total.max(1) as f64;
    println!(
        "{found} redactions in {:.1} MB of ordinary output: {rate:.2} per 10 MB",
        total as f64 / 1024.0 / 1024.0
    );
    assert!(
        found as f64 <= total as f64 / TEN_MB,
        "{found} false positives in {total} bytes: over 1 per 10 MB"
    );
}
