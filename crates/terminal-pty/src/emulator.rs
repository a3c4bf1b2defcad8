//! The screen emulator behind a terminal, with plain scrolled-off text
//! left out of the work.
//!
//! A flood (a build log, `cat` of a big file) is mostly lines of plain
//! text that scroll off the screen long before anyone looks; emulating
//! every one of them was most of the cost of reading a terminal's output.
//! [`Emulator`] feeds `vt100` everything that can change what the screen
//! shows, and holds runs of plain text back until the screen is read or
//! something else arrives; while it holds them, it drops the beginning of
//! a run that the run's own last `rows` lines would scroll off the screen
//! anyway. The screen read afterwards is the one `vt100` gives for the
//! whole stream, cell for cell (the tests compare the two on generated
//! streams, and a terminal's screen after a flood with a reference run).
//!
//! Why dropping is exact. A run is held only while
//!
//! * `vt100`'s parser is in its ground state with no character half read
//!   (proved, not assumed: a shadow [`GroundParser`] on the same `vte`
//!   state machine gets the same bytes, and hands over the plain runs it
//!   reads in ground; see its docs), so the run's bytes are text, not the
//!   inside of an escape sequence; and
//! * the active screen's scroll region is the whole screen (the shadow
//!   follows every sequence that changes it: `DECSTBM`, the alternate
//!   screen switches `?47` and `?1049`, and a reset `ESC c`).
//!
//! The run holds only printable ASCII, `\r`, `\n` and `\t`: operations on
//! the cursor's row and the cursor itself. In a run where at least `rows`
//! newlines come before a point `y` that starts a line (`\r\n` just
//! before it) and at least `rows` newlines and a printable character
//! come after it, the cursor is at column 0 of the bottom row at `y`,
//! and every row on screen at the end was scrolled in, blank, after `y`.
//! So the text before `y` can be replaced by `\r` and `rows` newlines,
//! which put the cursor at the same place; what follows `y` is the same
//! bytes on the same cursor, and the last printed character (the one a
//! `REP` sequence repeats) comes after `y` in both. The one thing that
//! differs is `vt100`'s count of lines ever scrolled off the main
//! screen, which only a resize reads; this emulator is never resized.

use output_text::{GroundParser, PlainPerform};

use crate::replies::{Query, Replies};

/// A run of held text is compacted once it reaches this size.
const COMPACT_AT: usize = 64 * 1024;
/// Held text that could not be compacted (very long lines, or a screen
/// taller than the text held) is emulated once it reaches this size, so
/// what a terminal holds stays bounded.
const FLUSH_AT: usize = 256 * 1024;
/// Newlines written at a time to bring the cursor to the bottom row.
const NEWLINES: [u8; 256] = [b'\n'; 256];

/// A terminal screen fed raw output; see the module docs.
pub(crate) struct Emulator {
    /// The shadow: finds the plain runs and follows the scroll regions.
    shadow: GroundParser,
    screen: Screen,
}

/// `vt100` and what the shadow parser learnt.
struct Screen {
    parser: vt100::Parser,
    alternate: bool,
    /// A scroll region smaller than the screen may be set, on the main
    /// screen and on the alternate one.
    partial_region: [bool; 2],
    /// Plain text not yet given to `vt100`.
    held: Vec<u8>,
    /// Before `held`, the cursor goes to column 0 of the bottom row.
    to_bottom_first: bool,
    rows: u16,
    /// Held text is compacted from this size on.
    compact_at: usize,
    /// How often held text was compacted (for the tests).
    #[cfg(test)]
    compactions: usize,
    /// Answers to the program's queries, not written yet.
    replies: Replies,
}

impl Emulator {
    /// A blank screen of `rows` × `cols`.
    pub fn new(rows: std::num::NonZeroU16, cols: std::num::NonZeroU16) -> Self {
        Self {
            shadow: GroundParser::new(),
            screen: Screen {
                parser: vt100::Parser::new(rows, cols, 0),
                alternate: false,
                partial_region: [false; 2],
                held: Vec::new(),
                to_bottom_first: false,
                rows: rows.get(),
                compact_at: COMPACT_AT,
                #[cfg(test)]
                compactions: 0,
                replies: Replies::default(),
            },
        }
    }

    /// The screen after everything fed so far.
    pub fn screen(&mut self) -> &vt100::Screen {
        self.screen.flush();
        self.screen.parser.screen()
    }

    /// Feeds raw output, in order.
    pub fn feed(&mut self, bytes: &[u8]) {
        self.shadow.advance(&mut self.screen, bytes);
    }

    /// The answers to the queries fed so far that were not taken yet (see
    /// `replies`), to be written to the terminal.
    pub fn take_replies(&mut self) -> Vec<u8> {
        self.screen.replies.take()
    }
}

impl PlainPerform for Screen {
    fn plain(&mut self, run: &[u8]) {
        if self.partial_region[usize::from(self.alternate)] {
            self.parsed(run);
        } else {
            self.hold(run);
        }
    }

    fn parsed(&mut self, bytes: &[u8]) {
        self.flush();
        self.parser.process(bytes);
    }
}

// What vt100 0.18 does with the same sequences, as far as the scroll
// regions and the active screen go.
impl vte::Perform for Screen {
    fn csi_dispatch(
        &mut self,
        params: &vte::Params,
        intermediates: &[u8],
        _ignore: bool,
        action: char,
    ) {
        if let Some(query) = Query::of_csi(params, intermediates, action) {
            // `vt100` has taken the bytes through the query (`parsed`
            // comes first): its cursor is where the query was asked.
            self.flush();
            let cursor = self.parser.screen().cursor_position();
            self.replies.answer(query, cursor);
            return;
        }
        match (intermediates.first(), action) {
            (None, 'r') => {
                // DECSTBM: 1-based top and bottom, 0 or missing for the
                // screen's edges; a region that is not at least two rows
                // is the whole screen.
                let mut iter = params.iter();
                let mut next = || iter.next().map_or(0, |p| p.first().copied().unwrap_or(0));
                let top = next().max(1) - 1;
                let bottom = match next() {
                    0 => self.rows,
                    n => n,
                } - 1;
                let last = self.rows.saturating_sub(1);
                let bottom = bottom.min(last);
                let whole = top >= bottom || (top == 0 && bottom == last);
                self.partial_region[usize::from(self.alternate)] = !whole;
            }
            (Some(b'?'), 'h') => {
                for param in params.iter() {
                    match param {
                        [47] => self.alternate = true,
                        [1049] => {
                            // The alternate screen is cleared, region included.
                            self.partial_region[1] = false;
                            self.alternate = true;
                        }
                        _ => {}
                    }
                }
            }
            (Some(b'?'), 'l') => {
                for param in params.iter() {
                    if matches!(param, [47] | [1049]) {
                        self.alternate = false;
                    }
                }
            }
            _ => {}
        }
    }

    fn osc_dispatch(&mut self, params: &[&[u8]], bell_terminated: bool) {
        if let Some(query) = Query::of_osc(params, bell_terminated) {
            self.replies.answer(query, (0, 0));
        }
    }

    fn esc_dispatch(&mut self, intermediates: &[u8], _ignore: bool, byte: u8) {
        if intermediates.is_empty() && byte == b'c' {
            // RIS: a new screen.
            self.partial_region = [false; 2];
            self.alternate = false;
        }
    }
}

impl Screen {
    fn hold(&mut self, plain: &[u8]) {
        self.held.extend_from_slice(plain);
        if self.held.len() >= self.compact_at {
            self.compact();
            if self.held.len() >= FLUSH_AT.max(self.compact_at) {
                self.flush();
            }
        }
    }

    /// Drops the start of the held text that its last lines scroll off
    /// (see the module docs for when that is exact).
    fn compact(&mut self) {
        let rows = usize::from(self.rows);
        let held = &self.held;
        let mut newlines = memchr::memrchr_iter(b'\n', held);
        // `rows` newlines stay after the cut.
        if newlines.by_ref().nth(rows.saturating_sub(1)).is_none() {
            return;
        }
        let Some(cut) = newlines
            .find(|at| *at > 0 && held[at - 1] == b'\r')
            .map(|at| at + 1)
        else {
            return;
        };
        if !held[cut..].iter().any(|b| (0x20..=0x7e).contains(b)) {
            return;
        }
        if !self.to_bottom_first
            && memchr::memchr_iter(b'\n', &held[..cut]).take(rows).count() < rows
        {
            return;
        }
        self.held.drain(..cut);
        self.to_bottom_first = true;
        #[cfg(test)]
        {
            self.compactions += 1;
        }
    }

    /// Gives the held text to `vt100`.
    fn flush(&mut self) {
        if self.to_bottom_first {
            self.to_bottom_first = false;
            self.parser.process(b"\r");
            let mut left = usize::from(self.rows);
            while left > 0 {
                let n = left.min(NEWLINES.len());
                self.parser.process(&NEWLINES[..n]);
                left -= n;
            }
        }
        if !self.held.is_empty() {
            self.parser.process(&self.held);
            self.held.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use pretty_assertions::assert_eq;
    use std::num::NonZeroU16;

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Pieces of terminal output: plain floods and everything that can
    /// change how text lands (regions, screens, resets, cursor moves,
    /// unterminated strings, wide and combining characters).
    fn piece(rng: &mut Rng, out: &mut Vec<u8>) {
        const SEQUENCES: &[&[u8]] = &[
            b"\x1b[31m",
            b"\x1b[0m",
            b"\x1b[2;4r",
            b"\x1b[3r",
            b"\x1b[r",
            b"\x1b[1;200r",
            b"\x1b[?6h",
            b"\x1b[?6l",
            b"\x1b[?1049h",
            b"\x1b[?1049l",
            b"\x1b[?47h",
            b"\x1b[?47l",
            b"\x1bc",
            b"\x1b]0;a title",
            b"\x07",
            b"\x1b\\",
            b"\x1bP1;2qdata",
            b"\x1b[3;5H",
            b"\x1b[H",
            b"\x1b[1;1H\x1b[7A",
            b"\x1b[2J",
            b"\x1b[K",
            b"\x1b[4b",
            b"\x1b[2S",
            b"\x1bM",
            b"\x1b7",
            b"\x1b8",
            b"\x1b[",
            b"\x1b",
            b"\x08",
            b"\x07",
            b"\x7f",
            "é".as_bytes(),
            "中文".as_bytes(),
            "e\u{301}".as_bytes(),
            b"\xe4\xb8",
            b"\xff",
            b"\x18",
        ];
        match rng.below(10) {
            0..=4 => {
                // A flood of plain lines, sometimes without `\r`.
                let lines = 1 + rng.below(120);
                let crlf = rng.below(4) != 0;
                for _ in 0..lines {
                    let len = rng.below(30);
                    for _ in 0..len {
                        let c = match rng.below(12) {
                            0 => b'\t',
                            1 => b' ',
                            _ => b'a' + rng.below(26) as u8,
                        };
                        out.push(c);
                    }
                    if crlf {
                        out.extend_from_slice(b"\r\n");
                    } else {
                        out.push(b'\n');
                    }
                }
            }
            5 => out.extend_from_slice(b"\r\n".repeat(rng.below(20)).as_slice()),
            _ => out.extend_from_slice(SEQUENCES[rng.below(SEQUENCES.len())]),
        }
    }

    fn assert_same(ours: &mut Emulator, reference: &vt100::Parser, at: &str) {
        let ours = ours.screen();
        let theirs = reference.screen();
        assert_eq!(
            ours.contents_formatted(),
            theirs.contents_formatted(),
            "{at}"
        );
        assert_eq!(ours.state_formatted(), theirs.state_formatted(), "{at}");
        assert_eq!(ours.cursor_position(), theirs.cursor_position(), "{at}");
        assert_eq!(ours.alternate_screen(), theirs.alternate_screen(), "{at}");
    }

    #[test]
    fn the_screen_is_the_one_vt100_gives_for_the_whole_stream() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut compactions = 0;
        for case in 0..400 {
            let rows = 1 + rng.below(8) as u16;
            let cols = 1 + rng.below(40) as u16;
            let (mut ours, mut reference) = pair(rows, cols);
            // Small sizes compact at nearly every chance.
            ours.screen.compact_at = 1 + rng.below(300);
            let mut stream = Vec::new();
            for _ in 0..40 {
                piece(&mut rng, &mut stream);
            }
            let mut at = 0;
            while at < stream.len() {
                let end = (at + 1 + rng.below(700)).min(stream.len());
                ours.feed(&stream[at..end]);
                reference.process(&stream[at..end]);
                at = end;
                if rng.below(6) == 0 {
                    // A tail that ends the stream the same way for both
                    // shows any difference in cursor, region or last
                    // character a dropped run could leave.
                    assert_same(&mut ours, &reference, &format!("case {case} at {at}"));
                }
            }
            let tail = b"\x1b[5bX\r\n\x1b[2;3Hq\x1bMz\nw";
            ours.feed(tail);
            reference.process(tail);
            assert_same(&mut ours, &reference, &format!("case {case}, end"));
            compactions += ours.screen.compactions;
        }
        // The generator really floods: text was dropped, many times.
        assert!(compactions > 200, "only {compactions} compactions");
    }

    /// A blank emulator and a blank `vt100` of the same size.
    fn pair(rows: u16, cols: u16) -> (Emulator, vt100::Parser) {
        let rows = NonZeroU16::new(rows).unwrap();
        let cols = NonZeroU16::new(cols).unwrap();
        (Emulator::new(rows, cols), vt100::Parser::new(rows, cols, 0))
    }

    /// Feeds `stream` to a fresh emulator that compacts at every chance
    /// and to `vt100`, and compares the screens.
    fn same_as_reference(rows: u16, cols: u16, stream: &[u8]) -> usize {
        let (mut ours, mut reference) = pair(rows, cols);
        ours.screen.compact_at = 1;
        for byte in stream {
            ours.feed(std::slice::from_ref(byte));
        }
        reference.process(stream);
        assert_same(&mut ours, &reference, "stream");
        ours.screen.compactions
    }

    #[test]
    fn text_is_dropped_only_once_the_cursor_has_surely_reached_the_bottom() {
        // Full rows below a cursor sent home: a run of short lines that
        // does not reach the bottom leaves their ends in place.
        for lines in 1..12 {
            let mut stream = b"0123456789\r\n".repeat(4);
            stream.extend_from_slice(b"\x1b[H");
            stream.extend_from_slice(&b"ab\r\n".repeat(lines));
            same_as_reference(5, 10, &stream);
        }
    }

    #[test]
    fn text_is_dropped_again_once_the_region_is_the_whole_screen() {
        let flood = b"some text\r\n".repeat(50);
        let mut stream = b"\x1b[2;3r".to_vec();
        stream.extend_from_slice(&flood);
        assert_eq!(
            same_as_reference(6, 20, &stream),
            0,
            "a region: nothing dropped"
        );
        for reset in [
            &b"\x1b[r"[..],
            b"\x1b[1;6r",
            b"\x1bc",
            b"\x1b[?1049h\x1b[?1049l",
        ] {
            let mut again = stream.clone();
            again.extend_from_slice(reset);
            if reset.starts_with(b"\x1b[?1049h") {
                // The region was set on the main screen: it stays.
                again.extend_from_slice(b"\x1b[r");
            }
            again.extend_from_slice(&flood);
            assert!(same_as_reference(6, 20, &again) > 0, "after {reset:?}");
        }
        // A region set on the alternate screen is gone with it.
        let mut alternate = b"\x1b[?1049h\x1b[2;3r".to_vec();
        alternate.extend_from_slice(&flood);
        alternate.extend_from_slice(b"\x1b[?1049l\x1b[?1049h");
        alternate.extend_from_slice(&flood);
        assert!(same_as_reference(6, 20, &alternate) > 0);
    }

    #[test]
    fn a_flood_keeps_held_text_bounded_and_ends_on_the_right_screen() {
        let (mut ours, mut reference) = pair(24, 80);
        let line: Vec<u8> = (0..10_000u32)
            .flat_map(|i| format!("line {i} {}\r\n", "x".repeat((i % 97) as usize)).into_bytes())
            .collect();
        let mut most = 0;
        for chunk in line.chunks(4095) {
            ours.feed(chunk);
            reference.process(chunk);
            most = most.max(ours.screen.held.len());
        }
        assert!(most <= COMPACT_AT + 4095, "held {most} bytes");
        assert!(ours.screen.compactions > 0);
        assert_eq!(ours.screen().contents(), reference.screen().contents());
        assert_eq!(
            ours.screen().cursor_position(),
            reference.screen().cursor_position()
        );
    }

    #[test]
    fn one_endless_line_is_emulated_once_the_held_text_is_large() {
        let (mut ours, mut reference) = pair(4, 10);
        for _ in 0..200 {
            let chunk = [b'z'; 4096];
            ours.feed(&chunk);
            reference.process(&chunk);
            assert!(ours.screen.held.len() < FLUSH_AT + 4096);
        }
        assert_eq!(ours.screen().contents(), reference.screen().contents());
    }
}
