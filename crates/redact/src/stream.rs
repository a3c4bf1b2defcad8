//! Redaction of a byte stream that arrives in chunks, such as a
//! terminal's output.
//!
//! # The invariant
//!
//! Feed the chunks of a stream to [`StreamRedactor::push`] and end it with
//! [`StreamRedactor::finish`]: the concatenation of the released text is
//! byte for byte what [`Redactor::redact_bytes`](crate::Redactor::redact_bytes)
//! makes of the concatenation of the chunks, wherever the chunks were cut.
//! So released text never holds a secret that one-shot redaction of the
//! whole would find, even one split across two chunks or two reads.
//!
//! To keep it, a push releases only what is decided (the scanner's module
//! doc says how): it holds back a tail that may still be the start
//! of a secret — a trigger begun but not complete, a match whose end has
//! not arrived, the start of a known value. On ordinary output the hold is
//! empty or a few bytes; it is at most [`MAX_MATCH`] bytes plus one chunk,
//! so memory stays bounded whatever the stream.
//!
//! # Raw cursors
//!
//! Every release says which raw bytes it covers ([`Released::raw`], a
//! range of absolute offsets in the input stream) and how its text maps to
//! them ([`Released::pieces`]): a caller that hands out cursors into the
//! raw stream keeps them exact by handing out `raw.end`, and can map any
//! raw offset inside a release to an offset in its text
//! ([`Released::out_offset`]).

use std::ops::Range;
use std::sync::Arc;

use crate::known::KnownSet;
use crate::rules::{MAX_MATCH, RuleSet};
use crate::scan::{KindRef, Scanner, Span, Window};

/// Bytes kept before the released point, for the look-behind of a match
/// that starts right after it (`\b`, a context character).
const HISTORY: usize = 8;

/// One piece of a release: raw bytes copied as they are, or a secret
/// replaced by its marker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    /// The raw bytes, as absolute offsets in the input stream.
    pub raw: Range<u64>,
    /// Where they went in [`Released::text`].
    pub out: Range<usize>,
    /// For a redaction, the kind its marker names.
    pub redacted: Option<String>,
}

/// What one push (or the finish) releases.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Released {
    /// The redacted text.
    pub text: Vec<u8>,
    /// The raw bytes it covers: `raw.end` is the raw cursor up to which
    /// the input has been released.
    pub raw: Range<u64>,
    /// How `text` maps to `raw`, in order, covering both.
    pub pieces: Vec<Piece>,
    /// How many secrets it redacted.
    pub count: usize,
}

impl Released {
    /// The offset in [`text`](Released::text) that raw offset `raw`
    /// corresponds to; an offset inside a secret maps to the start of its
    /// marker. `None` outside [`raw`](Released::raw) (its end maps to the
    /// text's end).
    pub fn out_offset(&self, raw: u64) -> Option<usize> {
        if raw == self.raw.end {
            return Some(self.text.len());
        }
        let piece = self.pieces.iter().find(|p| p.raw.contains(&raw))?;
        Some(match piece.redacted {
            Some(_) => piece.out.start,
            None => piece.out.start + (raw - piece.raw.start) as usize,
        })
    }
}

/// Redacts a stream pushed in chunks; see the module doc for what it
/// guarantees.
pub struct StreamRedactor {
    scanner: Scanner,
    buf: Vec<u8>,
    base: u64,
    released: u64,
    total: usize,
}

impl StreamRedactor {
    pub(crate) fn new(rules: Arc<RuleSet>, known: Arc<KnownSet>) -> StreamRedactor {
        StreamRedactor {
            scanner: Scanner::new(rules, known),
            buf: Vec::new(),
            base: 0,
            released: 0,
            total: 0,
        }
    }

    /// Take the next chunk of the stream; release what is decided.
    pub fn push(&mut self, chunk: &[u8]) -> Released {
        self.buf.extend_from_slice(chunk);
        self.step(false)
    }

    /// End the stream: release everything held.
    pub fn finish(mut self) -> Released {
        self.step(true)
    }

    /// Raw bytes taken so far: the offset the next chunk starts at.
    pub fn consumed(&self) -> u64 {
        self.base + self.buf.len() as u64
    }

    /// Raw bytes released so far: the raw cursor of all released text.
    pub fn released(&self) -> u64 {
        self.released
    }

    /// Raw bytes taken but not yet released. At most [`MAX_MATCH`] plus
    /// the last chunk.
    pub fn held(&self) -> u64 {
        self.consumed() - self.released
    }

    /// Secrets redacted so far, over all releases.
    pub fn count(&self) -> usize {
        self.total
    }

    fn step(&mut self, finished: bool) -> Released {
        let window = Window {
            hay: &self.buf,
            base: self.base,
            released: self.released,
            finished,
        };
        let hold = self.scanner.advance(window);
        let (spans, hold) = self.scanner.take(hold);
        let out = render(
            &self.scanner,
            &self.buf,
            self.base,
            self.released,
            hold,
            &spans,
        );
        self.total += out.count;
        self.released = hold;
        // Keep a little history before the released point.
        let keep_from = hold.saturating_sub(HISTORY as u64).max(self.base);
        let drop = (keep_from - self.base) as usize;
        if drop > 0 {
            self.buf.drain(..drop);
            self.base = keep_from;
        }
        debug_assert!(self.held() <= (MAX_MATCH + self.buf.len()) as u64);
        out
    }
}

/// The marker that replaces a secret of `kind`.
pub fn marker(kind: &str) -> String {
    format!("[redacted: {kind}]")
}

/// The kind a redaction names.
pub(crate) fn kind_of(scanner: &Scanner, kind: KindRef) -> &str {
    match kind {
        KindRef::Rule(i) => scanner.rules().rules[i].spec.kind,
        KindRef::Known(i) => &scanner.known().values[i].kind,
    }
}

/// The text of `[from, to)` of the stream with `spans` (sorted, merged,
/// inside the range) replaced by markers. `buf` starts at `base`.
pub(crate) fn render(
    scanner: &Scanner,
    buf: &[u8],
    base: u64,
    from: u64,
    to: u64,
    spans: &[Span],
) -> Released {
    let at = |abs: u64| (abs - base) as usize;
    let mut out = Released {
        text: Vec::with_capacity(at(to) - at(from)),
        raw: from..to,
        pieces: Vec::with_capacity(2 * spans.len() + 1),
        count: spans.len(),
    };
    let plain = |out: &mut Released, raw: Range<u64>| {
        if raw.end > raw.start {
            let start = out.text.len();
            out.text.extend_from_slice(&buf[at(raw.start)..at(raw.end)]);
            out.pieces.push(Piece {
                raw,
                out: start..out.text.len(),
                redacted: None,
            });
        }
    };
    let mut cursor = from;
    for span in spans {
        plain(&mut out, cursor..span.start);
        let kind = kind_of(scanner, span.kind);
        let start = out.text.len();
        out.text.extend_from_slice(marker(kind).as_bytes());
        out.pieces.push(Piece {
            raw: span.start..span.end,
            out: start..out.text.len(),
            redacted: Some(kind.to_owned()),
        });
        cursor = span.end;
    }
    plain(&mut out, cursor..to);
    out
}
