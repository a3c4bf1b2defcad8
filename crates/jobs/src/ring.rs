//! A bounded text buffer addressed by byte cursors into the whole stream.

use std::collections::VecDeque;

/// The last `capacity` bytes of a text stream, addressed by absolute byte
/// offsets (cursors) into everything ever pushed.
///
/// Reading never consumes: the same cursor returns the same text while it
/// is retained. Eviction happens only on whole UTF-8 characters, so every
/// read is valid text.
#[derive(Debug, Clone)]
pub struct OutputRing {
    buf: VecDeque<u8>,
    /// The cursor of `buf[0]`.
    start: u64,
    capacity: usize,
}

/// One read from an [`OutputRing`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RingRead {
    /// The text from `from` to `next`.
    pub text: String,
    /// The cursor where `text` starts.
    pub from: u64,
    /// The cursor just after `text`; pass it as `since` to continue.
    pub next: u64,
    /// Bytes between the requested cursor and `from` that were already
    /// evicted (0 when nothing asked for was lost).
    pub dropped: u64,
}

fn is_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

impl OutputRing {
    /// An empty ring keeping at most `capacity` bytes (at least 4, so one
    /// character always fits).
    pub fn new(capacity: usize) -> Self {
        Self {
            buf: VecDeque::new(),
            start: 0,
            capacity: capacity.max(4),
        }
    }

    /// The cursor after the last byte pushed: the stream's total length.
    pub fn end(&self) -> u64 {
        self.start + self.buf.len() as u64
    }

    /// The oldest cursor still retained.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Appends `text`, evicting the oldest whole characters beyond capacity.
    pub fn push(&mut self, text: &str) {
        if text.len() >= self.capacity {
            let mut cut = text.len() - self.capacity;
            while !text.is_char_boundary(cut) {
                cut += 1;
            }
            self.start += (self.buf.len() + cut) as u64;
            self.buf.clear();
            self.buf.extend(&text.as_bytes()[cut..]);
            return;
        }
        self.buf.extend(text.as_bytes());
        let over = self.buf.len().saturating_sub(self.capacity);
        if over > 0 {
            self.buf.drain(..over);
            self.start += over as u64;
        }
        while self.buf.front().is_some_and(|b| is_continuation(*b)) {
            self.buf.pop_front();
            self.start += 1;
        }
    }

    /// Reads at most `max_bytes` (at least one whole character when any is
    /// available) starting at cursor `since`. A cursor before the retained
    /// text starts at the oldest retained byte and reports `dropped`; a
    /// cursor inside a character moves to the next character. `since` must
    /// not be past [`OutputRing::end`] (the caller checks).
    pub fn read(&self, since: u64, max_bytes: usize) -> RingRead {
        let since = since.min(self.end());
        let dropped = self.start.saturating_sub(since);
        let len = self.buf.len();
        let mut from = usize::try_from(since.max(self.start) - self.start).unwrap_or(len);
        while from < len && is_continuation(self.buf[from]) {
            from += 1;
        }
        let mut to = from.saturating_add(max_bytes).min(len);
        while to < len && to > from && is_continuation(self.buf[to]) {
            to -= 1;
        }
        if to == from && from < len {
            // max_bytes is smaller than one character: return that one.
            to = from + 1;
            while to < len && is_continuation(self.buf[to]) {
                to += 1;
            }
        }
        let bytes: Vec<u8> = self.buf.range(from..to).copied().collect();
        RingRead {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            from: self.start + from as u64,
            next: self.start + to as u64,
            dropped,
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn rereads_are_identical_and_cursors_are_absolute() {
        let mut ring = OutputRing::new(64);
        ring.push("hello\n");
        ring.push("world\n");
        let first = ring.read(0, 1000);
        assert_eq!(
            first,
            RingRead {
                text: "hello\nworld\n".into(),
                from: 0,
                next: 12,
                dropped: 0
            }
        );
        assert_eq!(ring.read(0, 1000), first);
        assert_eq!(ring.read(6, 3).text, "wor");
        assert_eq!(ring.read(12, 10).text, "");
    }

    #[test]
    fn wrapping_reports_dropped_and_keeps_the_tail() {
        let mut ring = OutputRing::new(8);
        ring.push("abcdef");
        ring.push("ghij");
        assert_eq!(
            ring.read(0, 100),
            RingRead {
                text: "cdefghij".into(),
                from: 2,
                next: 10,
                dropped: 2
            }
        );
        ring.push("0123456789ABCDEF");
        assert_eq!(
            ring.read(3, 100),
            RingRead {
                text: "89ABCDEF".into(),
                from: 18,
                next: 26,
                dropped: 15
            }
        );
    }

    #[test]
    fn never_splits_a_character() {
        let mut ring = OutputRing::new(4);
        ring.push("aé€"); // 1 + 2 + 3 bytes: only `€` fits whole
        let read = ring.read(0, 100);
        assert_eq!(read.text, "€");
        assert_eq!((read.from, read.next, read.dropped), (3, 6, 3));
        let mut ring = OutputRing::new(5);
        ring.push("aé");
        ring.push("€x"); // evicting 2 bytes would split `é`: it goes whole
        let read = ring.read(0, 100);
        assert_eq!(read.text, "€x");
        assert_eq!((read.from, read.next, read.dropped), (3, 7, 3));
        let mut ring = OutputRing::new(64);
        ring.push("é€x");
        assert_eq!(ring.read(1, 2).text, "€"); // mid-character cursor moves on; one char minimum
        assert_eq!(ring.read(0, 4).text, "é"); // `€` would not fit whole
    }
}
