//! A `vte` parser that hands plain text over in runs instead of one
//! character at a time.
//!
//! Most output is lines of plain text: printable ASCII, `\r`, `\n` and
//! `\t`. Read in the parser's ground state, such a byte is always one
//! `print` or one `execute` and leaves the state as it was, so a caller
//! that knows the parser is in ground can take a whole run at once and
//! skip the state machine. [`GroundParser`] knows: the state only leaves
//! ground on `ESC`, and after an escape it is taken as ground again only
//! when the parser, given one printable ASCII byte alone, printed it
//! (`print` is called from nowhere else; a character cut short is
//! completed or replaced first). Everything else goes through `vte` as
//! before, so the actions a performer sees are exactly the ones `vte`
//! alone gives, with plain runs gathered into [`PlainPerform::plain`].

/// After an escape, bytes fed one at a time to find the ground state
/// again before the rest of a chunk goes through the state machine whole.
const PROBE_LIMIT: usize = 64;

/// True for the bytes of a plain run: printable ASCII, `\r`, `\n`, `\t`.
pub fn is_plain(byte: u8) -> bool {
    matches!(byte, 0x20..=0x7e | b'\r' | b'\n' | b'\t')
}

/// How many bytes at the start of `bytes` are plain ([`is_plain`]).
///
/// Eight bytes at a time where they are all printable (the bulk of any
/// text), one at a time around controls.
pub fn plain_prefix(bytes: &[u8]) -> usize {
    const ONES: u64 = u64::from_ne_bytes([0x01; 8]);
    const HIGHS: u64 = u64::from_ne_bytes([0x80; 8]);
    let mut at = 0;
    loop {
        while let Some(word) = bytes.get(at..at + 8) {
            let mut eight = [0u8; 8];
            eight.copy_from_slice(word);
            let x = u64::from_ne_bytes(eight);
            // A byte below 0x20, or above 0x7e (0x7f..=0xff), sets its
            // high bit in one of the two terms.
            let below = x.wrapping_sub(ONES * 0x20) & !x;
            let above = x.wrapping_add(ONES) | x;
            if (below | above) & HIGHS != 0 {
                break;
            }
            at += 8;
        }
        match bytes.get(at) {
            Some(byte) if is_plain(*byte) => at += 1,
            _ => return at,
        }
    }
}

/// What a [`GroundParser`] drives.
pub trait PlainPerform: vte::Perform {
    /// A run of plain bytes read in the ground state: the same as `print`
    /// for each printable byte and `execute` for each `\r`, `\n` and `\t`,
    /// in order.
    fn plain(&mut self, run: &[u8]);

    /// Bytes about to go through the state machine; the actions they
    /// cause follow.
    fn parsed(&mut self, _bytes: &[u8]) {}
}

/// A `vte` parser that passes plain text read in ground through
/// [`PlainPerform::plain`] in runs.
#[derive(Default)]
pub struct GroundParser {
    parser: vte::Parser,
    /// The parser is in ground with no character half read.
    ground: bool,
}

impl GroundParser {
    /// A parser at the start of a stream.
    pub fn new() -> Self {
        Self {
            parser: vte::Parser::new(),
            ground: true,
        }
    }

    /// Feeds `bytes`.
    pub fn advance<P: PlainPerform>(&mut self, performer: &mut P, bytes: &[u8]) {
        let mut i = 0;
        while i < bytes.len() {
            let rest = &bytes[i..];
            if self.ground {
                let plain = rest
                    .iter()
                    .position(|b| !is_plain(*b))
                    .unwrap_or(rest.len());
                if plain > 0 {
                    performer.plain(&rest[..plain]);
                    i += plain;
                    continue;
                }
                match rest[0] {
                    0x1b => self.ground = false,
                    // Another control: executed in ground, which it stays in.
                    byte if byte < 0x80 => {
                        self.parse(performer, &rest[..1]);
                        i += 1;
                    }
                    // UTF-8, through the next ASCII byte (not an escape),
                    // which completes or replaces a character cut short.
                    _ => {
                        let end = rest.iter().position(|b| *b < 0x80).unwrap_or(rest.len());
                        let through = if end < rest.len() && rest[end] != 0x1b {
                            end + 1
                        } else {
                            end
                        };
                        self.parse(performer, &rest[..through]);
                        i += through;
                        if rest[through - 1] >= 0x80 {
                            // Maybe half a character: not known to be ground.
                            self.ground = false;
                        }
                    }
                }
                continue;
            }
            // Not known to be in ground: everything to the last escape
            // goes through whole, then bytes one at a time until one is
            // printed.
            if let Some(esc) = rest.iter().rposition(|b| *b == 0x1b) {
                self.parse(performer, &rest[..=esc]);
                i += esc + 1;
                continue;
            }
            let mut probe = Probe {
                inner: performer,
                last: Last::Nothing,
            };
            // ASCII only: a character is never cut in two here (`vte`
            // reads a C1 control written in UTF-8 differently when it
            // arrives in pieces).
            for &byte in rest.iter().take(PROBE_LIMIT).take_while(|b| **b < 0x80) {
                probe.last = Last::Nothing;
                probe.inner.parsed(std::slice::from_ref(&byte));
                self.parser.advance(&mut probe, std::slice::from_ref(&byte));
                i += 1;
                if (0x20..=0x7e).contains(&byte) && probe.last == Last::Print(char::from(byte)) {
                    self.ground = true;
                    break;
                }
            }
            if !self.ground {
                self.parse(performer, &bytes[i..]);
                return;
            }
        }
    }

    fn parse<P: PlainPerform>(&mut self, performer: &mut P, bytes: &[u8]) {
        performer.parsed(bytes);
        self.parser.advance(performer, bytes);
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Last {
    Nothing,
    Print(char),
    Other,
}

/// Passes every action on and remembers the last one.
struct Probe<'a, P> {
    inner: &'a mut P,
    last: Last,
}

impl<P: vte::Perform> vte::Perform for Probe<'_, P> {
    fn print(&mut self, c: char) {
        self.last = Last::Print(c);
        self.inner.print(c);
    }

    fn execute(&mut self, byte: u8) {
        self.last = Last::Other;
        self.inner.execute(byte);
    }

    fn hook(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
        self.last = Last::Other;
        self.inner.hook(params, intermediates, ignore, action);
    }

    fn put(&mut self, byte: u8) {
        self.last = Last::Other;
        self.inner.put(byte);
    }

    fn unhook(&mut self) {
        self.last = Last::Other;
        self.inner.unhook();
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], bell_terminated: bool) {
        self.last = Last::Other;
        self.inner.osc_dispatch(params, bell_terminated);
    }

    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        ignore: bool,
        action: char,
    ) {
        self.last = Last::Other;
        self.inner
            .csi_dispatch(params, intermediates, ignore, action);
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
        self.last = Last::Other;
        self.inner.esc_dispatch(intermediates, ignore, byte);
    }

    fn terminated(&self) -> bool {
        self.inner.terminated()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use vte::Perform as _;

    /// Every action, as text, plain runs spelled out as `vte` would
    /// report them; as a [`PlainPerform`], also the bytes handed over
    /// and how many came in runs.
    #[derive(Default)]
    struct Log {
        actions: Vec<String>,
        parsed: Vec<u8>,
        plain: usize,
    }

    impl vte::Perform for Log {
        fn print(&mut self, c: char) {
            self.actions.push(format!("print {c:?}"));
        }
        fn execute(&mut self, byte: u8) {
            self.actions.push(format!("execute {byte}"));
        }
        fn hook(&mut self, params: &vte::Params, intermediates: &[u8], ignore: bool, action: char) {
            self.actions.push(format!(
                "hook {params:?} {intermediates:?} {ignore} {action}"
            ));
        }
        fn put(&mut self, byte: u8) {
            self.actions.push(format!("put {byte}"));
        }
        fn unhook(&mut self) {
            self.actions.push("unhook".into());
        }
        fn osc_dispatch(&mut self, params: &[&[u8]], bell_terminated: bool) {
            self.actions
                .push(format!("osc {params:?} {bell_terminated}"));
        }
        fn csi_dispatch(
            &mut self,
            params: &vte::Params,
            intermediates: &[u8],
            ignore: bool,
            action: char,
        ) {
            self.actions.push(format!(
                "csi {params:?} {intermediates:?} {ignore} {action}"
            ));
        }
        fn esc_dispatch(&mut self, intermediates: &[u8], ignore: bool, byte: u8) {
            self.actions
                .push(format!("esc {intermediates:?} {ignore} {byte}"));
        }
    }

    impl PlainPerform for Log {
        fn plain(&mut self, run: &[u8]) {
            self.plain += run.len();
            self.parsed.extend_from_slice(run);
            for &byte in run {
                match byte {
                    b'\r' | b'\n' | b'\t' => self.execute(byte),
                    _ => self.print(char::from(byte)),
                }
            }
        }
        fn parsed(&mut self, bytes: &[u8]) {
            self.parsed.extend_from_slice(bytes);
        }
    }

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) % n as u64) as usize
        }
    }

    #[test]
    fn plain_prefixes_are_exact_at_every_length_and_offset() {
        let mut text: Vec<u8> = b"plain text, tabs\t and lines\r\n".repeat(3);
        text.extend_from_slice(b"~ \x7f\x1b\x00\x1f\x80\xff end");
        for start in 0..text.len() {
            for end in start..=text.len() {
                let bytes = &text[start..end];
                let want = bytes
                    .iter()
                    .position(|b| !is_plain(*b))
                    .unwrap_or(bytes.len());
                assert_eq!(
                    plain_prefix(bytes),
                    want,
                    "{:?}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
        for byte in 0..=255u8 {
            let mut bytes = [b'a'; 19];
            bytes[11] = byte;
            let want = if is_plain(byte) { 19 } else { 11 };
            assert_eq!(plain_prefix(&bytes), want, "byte {byte:#x}");
        }
    }

    #[test]
    fn the_actions_are_the_ones_vte_alone_gives_in_any_chunking() {
        const PIECES: &[&[u8]] = &[
            b"plain text\r\n",
            b"tab\there\n",
            b"\r",
            b"\x1b[31m",
            b"\x1b[",
            b"\x1b",
            b"\x1b]0;title",
            b"\x07",
            b"\x1b\\",
            b"\x1bP1$qm",
            b"\x1b[?1049h",
            b"\x18",
            b"\x08",
            b"\x7f",
            b"\x00",
            "é中".as_bytes(),
            b"\xe4\xb8",
            b"\xff\xfe",
            b"\xc2\x9b",
            b"0123456789",
        ];
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut plain = 0;
        for _ in 0..500 {
            let mut stream = Vec::new();
            for _ in 0..30 {
                stream.extend_from_slice(PIECES[rng.below(PIECES.len())]);
            }
            // The same chunks for both: `vte` itself reads a C1 control
            // written in UTF-8 differently when it is cut between chunks.
            let mut reference = Log::default();
            let mut vte = vte::Parser::new();
            let mut ours = Log::default();
            let mut parser = GroundParser::new();
            let mut at = 0;
            while at < stream.len() {
                let end = (at + 1 + rng.below(40)).min(stream.len());
                vte.advance(&mut reference, &stream[at..end]);
                parser.advance(&mut ours, &stream[at..end]);
                at = end;
            }
            assert_eq!(
                ours.actions,
                reference.actions,
                "{:?}",
                String::from_utf8_lossy(&stream)
            );
            assert_eq!(ours.parsed, stream);
            plain += ours.plain;
        }
        assert!(plain > 5_000, "only {plain} bytes went by in runs");
    }
}
