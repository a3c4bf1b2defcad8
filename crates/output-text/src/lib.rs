//! Turn raw process output into text a model can read.
//!
//! Two pieces, both streaming and both bounded:
//!
//! * [`Sanitizer`] strips ANSI/OSC/DCS escape sequences, folds `\r\n` and lone
//!   `\r` into `\n`, and replaces invalid UTF-8 with U+FFFD. It is built on
//!   the `vte` parser (the state machine behind Alacritty), so a sequence or
//!   a multi-byte character split across two reads is carried over to the
//!   next chunk instead of leaking half an escape into the text.
//! * [`HeadTail`] keeps the first and last bytes of an unbounded stream in
//!   fixed memory and renders them with one marker line
//!   `[… N bytes omitted …]`, reporting `truncated` and `total_bytes`.
//!
//! This crate knows nothing of processes, terminals or tools; every tool and
//! every provider that shows process output to a model uses it, so they all
//! sanitize and truncate the same way.
//!
//! Beneath the two pieces, [`GroundParser`] (`ground`): a `vte` parser
//! that hands the plain text it reads in its ground state over in runs
//! rather than a character at a time; the sanitizer and the terminal's
//! screen both read through it.

#![forbid(unsafe_code)]

use std::collections::VecDeque;

mod ground;

pub use ground::{GroundParser, PlainPerform, is_plain, plain_prefix};

/// A streaming sanitizer: feed it raw bytes chunk by chunk.
pub struct Sanitizer {
    parser: GroundParser,
    sink: Sink,
}

#[derive(Default)]
struct Sink {
    out: String,
    pending_cr: bool,
}

impl Sink {
    fn flush_cr(&mut self) {
        if self.pending_cr {
            self.pending_cr = false;
            self.out.push('\n');
        }
    }
}

impl vte::Perform for Sink {
    fn print(&mut self, c: char) {
        self.flush_cr();
        self.out.push(c);
    }

    fn execute(&mut self, byte: u8) {
        match byte {
            b'\n' => {
                // `\r\n`, `\r\r\n` (a program's `\r\n` through ONLCR) and `\n`
                // all become one newline.
                self.pending_cr = false;
                self.out.push('\n');
            }
            b'\r' => self.pending_cr = true,
            b'\t' => {
                self.flush_cr();
                self.out.push('\t');
            }
            // Bell, backspace, shift-in/out and other C0 controls carry no text.
            _ => {}
        }
    }
}

impl PlainPerform for Sink {
    fn plain(&mut self, run: &[u8]) {
        // A plain run is ASCII: valid text, cut anywhere.
        let Ok(mut rest) = std::str::from_utf8(run) else {
            return;
        };
        while !rest.is_empty() {
            let text = memchr::memchr2(b'\r', b'\n', rest.as_bytes()).unwrap_or(rest.len());
            if text > 0 {
                self.flush_cr();
                // Printable ASCII and tabs: text as it is.
                self.out.push_str(&rest[..text]);
                rest = &rest[text..];
                continue;
            }
            vte::Perform::execute(self, rest.as_bytes()[0]);
            rest = &rest[1..];
        }
    }
}

impl Default for Sanitizer {
    fn default() -> Self {
        Self::new()
    }
}

impl Sanitizer {
    /// A sanitizer at the start of a stream.
    pub fn new() -> Self {
        Self {
            parser: GroundParser::new(),
            sink: Sink::default(),
        }
    }

    /// Feeds `bytes` and appends the text they complete to `out`.
    ///
    /// A trailing `\r` is held back until the next chunk shows whether a
    /// `\n` follows; call [`Sanitizer::finish`] at the end of the stream.
    pub fn push(&mut self, bytes: &[u8], out: &mut String) {
        // The text goes straight onto `out`: the sink's own (empty) buffer
        // is swapped in for `out` while the bytes are parsed.
        std::mem::swap(&mut self.sink.out, out);
        self.parser.advance(&mut self.sink, bytes);
        std::mem::swap(&mut self.sink.out, out);
    }

    /// Like [`Sanitizer::push`], returning the text.
    pub fn push_to_string(&mut self, bytes: &[u8]) -> String {
        let mut out = String::new();
        self.push(bytes, &mut out);
        out
    }

    /// Ends the stream: a held-back `\r` becomes a newline.
    pub fn finish(&mut self, out: &mut String) {
        self.sink.flush_cr();
        out.push_str(&self.sink.out);
        self.sink.out.clear();
    }
}

/// Sanitizes a complete byte string in one go.
pub fn sanitize(bytes: &[u8]) -> String {
    let mut s = Sanitizer::new();
    let mut out = String::with_capacity(bytes.len());
    s.push(bytes, &mut out);
    s.finish(&mut out);
    out
}

/// Text with its truncation facts, ready for a tool result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// The text: whole, or head + marker line + tail.
    pub text: String,
    /// True when bytes were omitted.
    pub truncated: bool,
    /// The size in bytes of the whole text before truncation.
    pub total_bytes: u64,
    /// How many bytes the marker stands for.
    pub omitted_bytes: u64,
}

/// The marker line that replaces omitted bytes.
pub fn omission_marker(omitted: u64) -> String {
    format!("[… {omitted} bytes omitted …]")
}

/// Keeps the head and the tail of a text stream in bounded memory.
///
/// At most `limit` bytes are kept (half head, half tail); everything in
/// between is only counted.
#[derive(Debug, Clone)]
pub struct HeadTail {
    head_cap: usize,
    tail_cap: usize,
    head: String,
    tail: VecDeque<u8>,
    total: u64,
}

impl HeadTail {
    /// An empty buffer that renders at most about `limit` bytes.
    pub fn new(limit: usize) -> Self {
        let limit = limit.max(64);
        let head_cap = limit / 2;
        Self {
            head_cap,
            tail_cap: limit - head_cap,
            head: String::new(),
            tail: VecDeque::new(),
            total: 0,
        }
    }

    /// Appends text.
    pub fn push_str(&mut self, text: &str) {
        self.total += text.len() as u64;
        let mut rest = text;
        if self.head.len() < self.head_cap && self.tail.is_empty() {
            let room = self.head_cap - self.head.len();
            let cut = floor_char_boundary(rest, room.min(rest.len()));
            self.head.push_str(&rest[..cut]);
            rest = &rest[cut..];
        }
        if rest.is_empty() {
            return;
        }
        let bytes = rest.as_bytes();
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// Bytes pushed so far.
    pub fn total_bytes(&self) -> u64 {
        self.total
    }

    /// Renders the kept text; the marker stands for what was dropped.
    pub fn render(&self) -> Rendered {
        let kept = (self.head.len() + self.tail.len()) as u64;
        let omitted = self.total - kept;
        let (a, b) = self.tail.as_slices();
        let mut tail_bytes = Vec::with_capacity(self.tail.len());
        tail_bytes.extend_from_slice(a);
        tail_bytes.extend_from_slice(b);
        if omitted == 0 {
            let mut text = self.head.clone();
            text.push_str(&String::from_utf8_lossy(&tail_bytes));
            return Rendered {
                text,
                truncated: false,
                total_bytes: self.total,
                omitted_bytes: 0,
            };
        }
        // The tail may start inside a multi-byte character: skip to the
        // next boundary and count the skipped bytes as omitted.
        let start = tail_bytes
            .iter()
            .position(|b| (*b as i8) >= -0x40)
            .unwrap_or(tail_bytes.len());
        let omitted = omitted + start as u64;
        let tail = String::from_utf8_lossy(&tail_bytes[start..]);
        let mut text = String::with_capacity(self.head.len() + tail.len() + 40);
        text.push_str(&self.head);
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(&omission_marker(omitted));
        text.push('\n');
        text.push_str(&tail);
        Rendered {
            text,
            truncated: true,
            total_bytes: self.total,
            omitted_bytes: omitted,
        }
    }
}

/// Fits a text already rendered (possibly cut before, with its own
/// marker) to about `limit` bytes: head + one marker + tail. A marker the
/// new cut removes is counted in the new one, so its number stays the
/// bytes of output the reader does not see. `None` when it fits already.
pub fn fit_rendered(text: &str, limit: usize) -> Option<String> {
    if text.len() <= limit {
        return None;
    }
    let cut = truncate_middle(text, limit);
    let marker = omission_marker(cut.omitted_bytes);
    let at = cut.text.find(&marker)?;
    // The head and tail kept, as they stand in `text` (the cut may have
    // put a line break between each and the marker).
    let head = &cut.text[..at];
    let head = if text.starts_with(head) {
        head
    } else {
        head.strip_suffix('\n').unwrap_or(head)
    };
    let tail = &cut.text[at + marker.len()..];
    let tail = if text.ends_with(tail) {
        tail
    } else {
        tail.strip_prefix('\n').unwrap_or(tail)
    };
    let removed = text.get(head.len()..text.len().saturating_sub(tail.len()))?;
    // Each earlier marker the cut removed stands for its own bytes: count
    // those instead of the marker's.
    const OPEN: &str = "[… ";
    const CLOSE: &str = " bytes omitted …]";
    let earlier: u64 = removed
        .match_indices(OPEN)
        .filter_map(|(i, _)| {
            let rest = &removed[i + OPEN.len()..];
            let end = rest.find(CLOSE)?;
            let n: u64 = rest[..end].parse().ok()?;
            Some(n.saturating_sub((OPEN.len() + end + CLOSE.len()) as u64))
        })
        .sum();
    if earlier == 0 {
        return Some(cut.text);
    }
    Some(
        cut.text
            .replacen(&marker, &omission_marker(cut.omitted_bytes + earlier), 1),
    )
}

/// Truncates a complete text to about `limit` bytes, head + marker + tail.
pub fn truncate_middle(text: &str, limit: usize) -> Rendered {
    let mut ht = HeadTail::new(limit);
    ht.push_str(text);
    ht.render()
}

fn floor_char_boundary(s: &str, mut index: usize) -> usize {
    while index > 0 && !s.is_char_boundary(index) {
        index -= 1;
    }
    index
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn a_second_cut_counts_what_the_first_omitted() {
        let whole: String = (0..5000).map(|i| format!("line {i}\n")).collect();
        let first = truncate_middle(&whole, 8000);
        assert!(first.truncated);
        let second = fit_rendered(&first.text, 2000).unwrap();
        assert!(second.len() < 2100, "{}", second.len());
        let n: u64 = second
            .split("[… ")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        // What the reader sees plus what the marker says is the whole, but
        // for the line breaks each cut put around its marker.
        let kept = second.len() - omission_marker(n).len();
        let kept_lines = second.lines().filter(|l| l.starts_with("line ")).count();
        assert_eq!(second.matches("bytes omitted").count(), 1, "{second}");
        assert!(
            (n as i64 + kept as i64 - whole.len() as i64).abs() <= 4,
            "{n} + {kept} vs {}; {kept_lines} lines kept",
            whole.len()
        );
        assert!(second.starts_with("line 0\n") && second.ends_with("line 4999\n"));
        assert_eq!(fit_rendered(&first.text, 100_000), None);
    }

    #[test]
    fn plain_runs_sanitize_exactly_as_one_character_at_a_time() {
        let pieces: [&[u8]; 12] = [
            b"line one\r\n",
            b"two\n",
            b"\r",
            b"\r\r\n",
            b"progress 50%\rprogress 100%",
            b"\ttab",
            b"\x1b[1m",
            b"\x1b]0;t\x07",
            "é".as_bytes(),
            b"\xe2\x82",
            b"\x1b[",
            b"\x07\x08",
        ];
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut below = |n: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % n as u64) as usize
        };
        for _ in 0..500 {
            let mut stream = Vec::new();
            for _ in 0..40 {
                stream.extend_from_slice(pieces[below(pieces.len())]);
            }
            // One character at a time: vte and the sink, as before runs,
            // on the same chunks.
            let mut sink = Sink::default();
            let mut vte = vte::Parser::new();
            let mut sanitizer = Sanitizer::new();
            let mut out = String::from("kept: ");
            let mut at = 0;
            while at < stream.len() {
                let end = (at + 1 + below(30)).min(stream.len());
                vte.advance(&mut sink, &stream[at..end]);
                sanitizer.push(&stream[at..end], &mut out);
                at = end;
            }
            sink.flush_cr();
            sanitizer.finish(&mut out);
            assert_eq!(out, format!("kept: {}", sink.out));
        }
    }

    #[test]
    fn strips_csi_and_osc_and_folds_line_endings() {
        let raw = b"\x1b[1;31mred\x1b[0m\r\nline2\r\r\nprogress 10%\rprogress 20%\n\x1b]0;title\x07done\x1b]133;A\x1b\\!";
        assert_eq!(
            sanitize(raw),
            "red\nline2\nprogress 10%\nprogress 20%\ndone!"
        );
    }

    #[test]
    fn carries_partial_sequences_and_characters_across_chunks() {
        let raw = "a\x1b[38;5;196mé\x1b]0;t\x07b\r\nc".as_bytes();
        for split in 0..=raw.len() {
            let mut s = Sanitizer::new();
            let mut out = String::new();
            s.push(&raw[..split], &mut out);
            s.push(&raw[split..], &mut out);
            s.finish(&mut out);
            assert_eq!(out, "aéb\nc", "split at {split}");
        }
    }

    #[test]
    fn replaces_invalid_utf8() {
        assert_eq!(sanitize(b"ok\xff\xfeok"), "ok\u{fffd}\u{fffd}ok");
    }

    #[test]
    fn trailing_cr_is_held_until_finish() {
        let mut s = Sanitizer::new();
        assert_eq!(s.push_to_string(b"x\r"), "x");
        assert_eq!(s.push_to_string(b"\ny"), "\ny");
    }

    #[test]
    fn short_text_is_untouched() {
        let r = truncate_middle("hello\n", 100);
        assert_eq!(
            r,
            Rendered {
                text: "hello\n".into(),
                truncated: false,
                total_bytes: 6,
                omitted_bytes: 0
            }
        );
    }

    #[test]
    fn long_text_keeps_head_and_tail_with_exact_counts() {
        let text: String = (0..1000).map(|i| format!("line {i:04}\n")).collect();
        let mut ht = HeadTail::new(200);
        for chunk in text.as_bytes().chunks(7) {
            ht.push_str(std::str::from_utf8(chunk).unwrap());
        }
        let r = ht.render();
        assert!(r.truncated);
        assert_eq!(r.total_bytes, text.len() as u64);
        assert!(r.text.starts_with("line 0000\n"));
        assert!(r.text.ends_with("line 0999\n"));
        let marker = omission_marker(r.omitted_bytes);
        assert!(r.text.contains(&marker));
        // kept + omitted == total
        let kept = r.text.len() - marker.len() - 1 - usize::from(!text[..100].ends_with('\n'));
        assert_eq!(kept as u64 + r.omitted_bytes, r.total_bytes);
    }

    #[test]
    fn truncation_never_splits_a_character() {
        let text = "é".repeat(500);
        let r = truncate_middle(&text, 101);
        assert!(r.truncated);
        assert!(!r.text.contains('\u{fffd}'));
        assert_eq!(r.total_bytes, 1000);
    }
}
