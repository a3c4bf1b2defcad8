//! A terminal's output: raw bytes in, a sanitized scrollback ring, a
//! rendered screen, prompt markers and the capture of the active send out.

use std::collections::VecDeque;

use output_text::Sanitizer;

use crate::emulator::Emulator;

/// Prefix of the private prompt marker: `ESC ] 6973 ; <nonce> ; <seq> ; <status> BEL`.
const MARKER_OSC: &[u8] = b"\x1b]6973;";
/// Longest tail after the prefix we accept (`<seq>;<status>` + BEL).
const MARKER_MAX_TAIL: usize = 32;

/// One marker: the prompt's sequence number and the last command's status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Marker {
    pub seq: u64,
    pub status: i32,
}

/// Finds the private prompt markers in raw output, carrying a marker split
/// across reads over to the next one.
pub(crate) struct MarkerScanner {
    prefix: Vec<u8>,
    carry: Vec<u8>,
}

/// A piece of raw output: plain bytes or a marker.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Bytes(&'a [u8]),
    /// A marker and its bytes.
    Marker(Marker, &'a [u8]),
}

impl MarkerScanner {
    /// A scanner for the markers carrying `nonce`.
    pub fn new(nonce: &str) -> Self {
        let mut prefix = MARKER_OSC.to_vec();
        prefix.extend_from_slice(nonce.as_bytes());
        prefix.push(b';');
        Self {
            prefix,
            carry: Vec::new(),
        }
    }

    /// Splits `chunk` (after any carried bytes) into pieces, in order.
    pub fn scan(&mut self, chunk: &[u8], mut each: impl FnMut(Piece<'_>)) {
        let joined;
        let data: &[u8] = if self.carry.is_empty() {
            chunk
        } else {
            let mut v = std::mem::take(&mut self.carry);
            v.extend_from_slice(chunk);
            joined = v;
            &joined
        };
        let mut emitted = 0;
        let mut search = 0;
        let mut carry_from = None;
        while let Some(offset) = memchr::memchr(0x1b, &data[search..]) {
            let at = search + offset;
            let rest = &data[at..];
            if rest.len() < self.prefix.len() {
                if self.prefix.starts_with(rest) {
                    carry_from = Some(at);
                    break;
                }
                search = at + 1;
                continue;
            }
            if !rest.starts_with(&self.prefix) {
                search = at + 1;
                continue;
            }
            let tail = &rest[self.prefix.len()..];
            match tail.iter().take(MARKER_MAX_TAIL).position(|b| *b == 0x07) {
                Some(end) => {
                    if let Some(marker) = parse_marker_tail(&tail[..end]) {
                        if emitted < at {
                            each(Piece::Bytes(&data[emitted..at]));
                        }
                        let after = at + self.prefix.len() + end + 1;
                        each(Piece::Marker(marker, &data[at..after]));
                        emitted = after;
                        search = emitted;
                    } else {
                        search = at + 1;
                    }
                }
                None if tail.len() < MARKER_MAX_TAIL => {
                    carry_from = Some(at);
                    break;
                }
                None => search = at + 1,
            }
        }
        let end = carry_from.unwrap_or(data.len());
        if emitted < end {
            each(Piece::Bytes(&data[emitted..end]));
        }
        if let Some(from) = carry_from {
            self.carry = data[from..].to_vec();
        }
    }

    /// Ends the stream: carried bytes are plain output after all.
    pub fn finish(&mut self, mut each: impl FnMut(Piece<'_>)) {
        let carry = std::mem::take(&mut self.carry);
        if !carry.is_empty() {
            each(Piece::Bytes(&carry));
        }
    }
}

fn parse_marker_tail(tail: &[u8]) -> Option<Marker> {
    let text = std::str::from_utf8(tail).ok()?;
    let (seq, status) = text.split_once(';')?;
    Some(Marker {
        seq: seq.parse().ok()?,
        status: status.parse().ok()?,
    })
}

/// The bounded scrollback of sanitized text, addressed by byte cursors
/// into the whole stream.
pub(crate) struct Ring {
    bytes: VecDeque<u8>,
    capacity: usize,
    start: u64,
}

/// A slice read from the ring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RingSlice {
    pub text: String,
    pub from: u64,
    pub next: u64,
    pub dropped: u64,
    pub truncated: bool,
}

impl Ring {
    /// An empty ring keeping at most `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            bytes: VecDeque::new(),
            capacity: capacity.max(1024),
            start: 0,
        }
    }

    /// Cursor after the last byte ever written.
    pub fn end(&self) -> u64 {
        self.start + self.bytes.len() as u64
    }

    /// Cursor of the oldest retained byte.
    #[cfg(test)]
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Appends text, evicting the oldest bytes beyond capacity.
    pub fn push(&mut self, text: &str) {
        let bytes = text.as_bytes();
        if bytes.len() >= self.capacity {
            let skip = bytes.len() - self.capacity;
            self.start = self.end() + skip as u64;
            self.bytes.clear();
            self.bytes.extend(&bytes[skip..]);
            return;
        }
        let overflow = (self.bytes.len() + bytes.len()).saturating_sub(self.capacity);
        if overflow > 0 {
            self.bytes.drain(..overflow);
            self.start += overflow as u64;
        }
        self.bytes.extend(bytes);
    }

    /// Reads up to `max_bytes` from `since` (never splitting a character).
    /// `since` must not be past [`Ring::end`].
    pub fn read(&self, since: u64, max_bytes: usize) -> RingSlice {
        let end = self.end();
        let mut from = since.max(self.start).min(end);
        let mut index = (from - self.start) as usize;
        // An evicted (or mid-character) start: skip to a character boundary.
        while index < self.bytes.len() && is_continuation(self.bytes[index]) {
            index += 1;
            from += 1;
        }
        let available = self.bytes.len() - index;
        let mut take = available.min(max_bytes.max(4));
        while take < available && take > 0 && is_continuation(self.bytes[index + take]) {
            take -= 1;
        }
        let raw: Vec<u8> = self.bytes.range(index..index + take).copied().collect();
        RingSlice {
            text: String::from_utf8_lossy(&raw).into_owned(),
            from,
            next: from + take as u64,
            dropped: from.saturating_sub(since),
            truncated: take < available,
        }
    }
}

fn is_continuation(byte: u8) -> bool {
    (0x80..0xC0).contains(&byte)
}

/// What the active send has printed so far: a head kept whole (for echo
/// removal and the head of a truncated result), a bounded tail, exact
/// totals, and where the last prompt marker fell.
pub(crate) struct Capture {
    pub head: String,
    head_cap: usize,
    tail: VecDeque<u8>,
    tail_cap: usize,
    /// Bytes captured so far.
    pub total: u64,
    /// Stream cursor where the capture began.
    pub start_cursor: u64,
    /// The newest marker after the start and the capture offset it fell at.
    pub last_marker: Option<(u64, Marker)>,
}

impl Capture {
    fn new(start_cursor: u64, head_cap: usize, tail_cap: usize) -> Self {
        Self {
            head: String::new(),
            head_cap,
            tail: VecDeque::new(),
            tail_cap,
            total: 0,
            start_cursor,
            last_marker: None,
        }
    }

    fn push(&mut self, text: &str) {
        self.total += text.len() as u64;
        let mut rest = text;
        if self.head.len() < self.head_cap && self.tail.is_empty() {
            let mut cut = (self.head_cap - self.head.len()).min(rest.len());
            while !rest.is_char_boundary(cut) {
                cut -= 1;
            }
            self.head.push_str(&rest[..cut]);
            rest = &rest[cut..];
        }
        let bytes = rest.as_bytes();
        if bytes.is_empty() {
            return;
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail.extend(&bytes[bytes.len() - self.tail_cap..]);
        } else {
            let overflow = (self.tail.len() + bytes.len()).saturating_sub(self.tail_cap);
            self.tail.drain(..overflow);
            self.tail.extend(bytes);
        }
    }

    /// True when the head holds every captured byte.
    pub fn is_whole(&self) -> bool {
        self.total == self.head.len() as u64
    }

    /// The last `max` captured bytes (lossy at a cut character).
    pub fn tail_text(&self, max: usize) -> String {
        if self.is_whole() {
            let mut cut = self.head.len().saturating_sub(max);
            while !self.head.is_char_boundary(cut) {
                cut += 1;
            }
            return self.head[cut..].to_owned();
        }
        let skip = self.tail.len().saturating_sub(max);
        let raw: Vec<u8> = self.tail.range(skip..).copied().collect();
        String::from_utf8_lossy(&raw).into_owned()
    }

    /// The captured stream, cut at `end` (a capture offset), as head text,
    /// omitted byte count and tail text.
    pub fn parts(&self, end: u64) -> (String, u64, String) {
        let end = end.min(self.total);
        if self.is_whole() {
            let mut cut = end as usize;
            while !self.head.is_char_boundary(cut) {
                cut -= 1;
            }
            return (self.head[..cut].to_owned(), 0, String::new());
        }
        // The tail holds bytes [total - tail.len(), total).
        let tail_start = self.total - self.tail.len() as u64;
        let head_len = self.head.len() as u64;
        if end <= head_len {
            let mut cut = end as usize;
            while !self.head.is_char_boundary(cut) {
                cut -= 1;
            }
            return (self.head[..cut].to_owned(), 0, String::new());
        }
        if end <= tail_start {
            return (self.head.clone(), end - head_len, String::new());
        }
        let keep = (end - tail_start) as usize;
        let raw: Vec<u8> = self.tail.range(..keep).copied().collect();
        let gap = tail_start - head_len;
        // The tail may begin inside a character: count those bytes as omitted.
        let skip = raw.iter().take_while(|b| is_continuation(**b)).count();
        (
            self.head.clone(),
            gap + skip as u64,
            String::from_utf8_lossy(&raw[skip..]).into_owned(),
        )
    }
}

/// Everything a session's reader maintains.
pub(crate) struct Output {
    sanitizer: Sanitizer,
    scanner: MarkerScanner,
    ring: Ring,
    screen: Emulator,
    capture: Option<Capture>,
    scratch: String,
    /// Raw bytes read from the pty.
    pub raw_total: u64,
    /// The newest prompt marker seen.
    pub last_marker: Option<Marker>,
    /// True once the pty reported end of output.
    pub eof: bool,
    /// Bumped on every ingest (for "did anything arrive" checks).
    pub generation: u64,
    capture_head: usize,
    capture_tail: usize,
    /// Copies of the raw output (markers removed) for people watching;
    /// created by the first watcher.
    tap: Option<tokio::sync::broadcast::Sender<std::sync::Arc<[u8]>>>,
    /// When the program last printed (or the terminal opened).
    pub last_output: std::time::SystemTime,
}

/// How many chunks a watcher may fall behind before it is resynchronised
/// from the screen.
const TAP_CHUNKS: usize = 1024;

impl Output {
    /// A fresh output state.
    pub fn new(nonce: &str, scrollback: usize, rows: u16, cols: u16, result_limit: usize) -> Self {
        let rows = std::num::NonZeroU16::new(rows).unwrap_or(std::num::NonZeroU16::MIN);
        let cols = std::num::NonZeroU16::new(cols).unwrap_or(std::num::NonZeroU16::MIN);
        Self {
            sanitizer: Sanitizer::new(),
            scanner: MarkerScanner::new(nonce),
            ring: Ring::new(scrollback),
            screen: Emulator::new(rows, cols),
            capture: None,
            scratch: String::new(),
            raw_total: 0,
            last_marker: None,
            eof: false,
            generation: 0,
            capture_head: (result_limit * 2).max(64 * 1024),
            capture_tail: result_limit.max(16 * 1024),
            tap: None,
            last_output: std::time::SystemTime::now(),
        }
    }

    /// A watcher's start: the screen as escape sequences that redraw it,
    /// and a receiver of every later chunk of raw output (without the
    /// private markers). Moves no cursor and changes no state a send
    /// reads.
    pub fn watch(
        &mut self,
    ) -> (
        Vec<u8>,
        tokio::sync::broadcast::Receiver<std::sync::Arc<[u8]>>,
    ) {
        let tap = self
            .tap
            .get_or_insert_with(|| tokio::sync::broadcast::channel(TAP_CHUNKS).0);
        let receiver = tap.subscribe();
        (self.screen_formatted(), receiver)
    }

    /// The screen as escape sequences that clear a terminal and redraw it.
    pub fn screen_formatted(&mut self) -> Vec<u8> {
        let mut bytes = b"\x1b[H\x1b[2J".to_vec();
        bytes.extend(self.screen.screen().state_formatted().into_bytes());
        bytes
    }

    /// Feeds raw pty output.
    pub fn ingest(&mut self, raw: &[u8]) {
        self.last_output = std::time::SystemTime::now();
        self.raw_total += raw.len() as u64;
        self.generation += 1;
        let mut scanner = std::mem::replace(&mut self.scanner, MarkerScanner::new(""));
        scanner.scan(raw, |piece| self.piece(piece));
        self.scanner = scanner;
    }

    /// The answers to the program's terminal queries seen so far and not
    /// taken yet, to be written to the terminal.
    pub fn take_replies(&mut self) -> Vec<u8> {
        self.screen.take_replies()
    }

    /// Ends the stream (EOF or EIO from the pty).
    pub fn finish(&mut self) {
        if self.eof {
            return;
        }
        let mut scanner = std::mem::replace(&mut self.scanner, MarkerScanner::new(""));
        scanner.finish(|piece| self.piece(piece));
        self.scanner = scanner;
        let mut text = std::mem::take(&mut self.scratch);
        text.clear();
        self.sanitizer.finish(&mut text);
        self.append(&text);
        self.scratch = text;
        self.eof = true;
        self.generation += 1;
    }

    fn piece(&mut self, piece: Piece<'_>) {
        match piece {
            Piece::Bytes(bytes) => {
                self.screen.feed(bytes);
                if let Some(tap) = &self.tap
                    && tap.receiver_count() > 0
                {
                    let _ = tap.send(std::sync::Arc::from(bytes));
                }
                let mut text = std::mem::take(&mut self.scratch);
                text.clear();
                self.sanitizer.push(bytes, &mut text);
                self.append(&text);
                self.scratch = text;
            }
            Piece::Marker(marker, raw) => {
                self.screen.feed(raw);
                let newer = self.last_marker.is_none_or(|last| marker.seq > last.seq);
                if newer {
                    self.last_marker = Some(marker);
                    if let Some(capture) = self.capture.as_mut() {
                        capture.last_marker = Some((capture.total, marker));
                    }
                }
            }
        }
    }

    fn append(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        self.ring.push(text);
        if let Some(capture) = self.capture.as_mut() {
            capture.push(text);
        }
    }

    /// Starts capturing for a send; returns the stream cursor.
    pub fn begin_capture(&mut self) -> u64 {
        let cursor = self.ring.end();
        self.capture = Some(Capture::new(cursor, self.capture_head, self.capture_tail));
        cursor
    }

    /// The active capture.
    pub fn capture(&self) -> Option<&Capture> {
        self.capture.as_ref()
    }

    /// Stops capturing and returns what was captured.
    pub fn end_capture(&mut self) -> Option<Capture> {
        self.capture.take()
    }

    /// The scrollback ring.
    pub fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The emulated screen.
    pub fn screen(&mut self) -> &vt100::Screen {
        self.screen.screen()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;

    fn scan_all(chunks: &[&[u8]]) -> Vec<String> {
        let mut scanner = MarkerScanner::new("abc");
        let mut out = Vec::new();
        let mut bytes = Vec::new();
        let flush = |bytes: &mut Vec<u8>, out: &mut Vec<String>| {
            if !bytes.is_empty() {
                out.push(String::from_utf8_lossy(bytes).into_owned());
                bytes.clear();
            }
        };
        for chunk in chunks {
            scanner.scan(chunk, |piece| match piece {
                Piece::Bytes(b) => bytes.extend_from_slice(b),
                Piece::Marker(m, _) => {
                    flush(&mut bytes, &mut out);
                    out.push(format!("<{} {}>", m.seq, m.status));
                }
            });
        }
        scanner.finish(|piece| {
            if let Piece::Bytes(b) = piece {
                bytes.extend_from_slice(b);
            }
        });
        flush(&mut bytes, &mut out);
        out
    }

    #[test]
    fn finds_markers_split_anywhere_and_ignores_foreign_ones() {
        let raw: &[u8] = b"hi\r\n\x1b]6973;abc;7;130\x07$ \x1b]6973;zzz;1;0\x07\x1b[0m";
        for split in 0..=raw.len() {
            let got = scan_all(&[&raw[..split], &raw[split..]]);
            assert_eq!(
                got,
                vec![
                    "hi\r\n".to_owned(),
                    "<7 130>".to_owned(),
                    "$ \x1b]6973;zzz;1;0\x07\x1b[0m".to_owned()
                ],
                "split at {split}"
            );
        }
    }

    #[test]
    fn ring_reads_are_non_destructive_and_report_drops() {
        let mut ring = Ring::new(1024);
        let text: String = (0..300).map(|i| format!("{i:03}\n")).collect();
        ring.push(&text);
        assert_eq!(ring.end(), 1200);
        assert_eq!(ring.start(), 176);
        let a = ring.read(0, 8);
        assert_eq!(a, ring.read(0, 8));
        assert_eq!(
            a,
            RingSlice {
                text: "044\n045\n".into(),
                from: 176,
                next: 184,
                dropped: 176,
                truncated: true
            }
        );
        let b = ring.read(1196, 100);
        assert_eq!(b.text, "299\n");
        assert!(!b.truncated);
    }

    #[test]
    fn ring_never_splits_characters() {
        let mut ring = Ring::new(1024);
        ring.push(&"é".repeat(600));
        ring.push("x");
        // The oldest retained byte (177) is the middle of a character.
        let slice = ring.read(0, 5);
        assert_eq!(slice.from, 178);
        assert_eq!(slice.dropped, 178);
        assert_eq!(slice.text, "éé");
    }

    #[test]
    fn capture_keeps_head_tail_and_exact_total() {
        let mut capture = Capture::new(0, 10, 10);
        capture.push("0123456789abcdefghij0123456789");
        assert_eq!(capture.total, 30);
        assert_eq!(
            capture.parts(30),
            ("0123456789".to_owned(), 10, "0123456789".to_owned())
        );
        assert_eq!(
            capture.parts(25),
            ("0123456789".to_owned(), 10, "01234".to_owned())
        );
        assert_eq!(capture.parts(4), ("0123".to_owned(), 0, String::new()));
    }
}
