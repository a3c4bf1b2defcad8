//! An escape sequence that never ends (a program printing `ESC ]` and then
//! megabytes without a terminator) must not be buffered without bound.
//!
//! Alone in its test binary, so the process's resident memory is this
//! test's own.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use output_text::Sanitizer;
use pretty_assertions::assert_eq;

/// The process's resident memory, in bytes.
fn resident_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/self/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap();
    kib * 1024
}

#[test]
fn an_unterminated_osc_sequence_is_held_in_bounded_memory() {
    let mut sanitizer = Sanitizer::new();
    let mut out = String::new();
    sanitizer.push(b"before\x1b]0;", &mut out);
    let chunk = vec![b'a'; 64 * 1024];
    let before = resident_bytes();
    // 64 MiB of a window title that never ends.
    for _ in 0..1024 {
        sanitizer.push(&chunk, &mut out);
    }
    let grown = resident_bytes().saturating_sub(before);
    sanitizer.push(b"\x07after\n", &mut out);
    sanitizer.finish(&mut out);
    assert_eq!(out, "beforeafter\n");
    assert!(
        grown < 8 * 1024 * 1024,
        "resident memory grew by {grown} bytes while an escape sequence was open"
    );
}
