//! The answers a terminal gives to a program's queries.
//!
//! Real programs ask their terminal questions and wait for the answer:
//! prompt_toolkit (ipython) and Ruby's reline (irb) ask where the cursor
//! is (`CSI 6 n`) before they draw a prompt; vim asks for the terminal's
//! identity (`CSI > c`) at start and waits for the answer when it exits,
//! so the answer does not reach the shell. A terminal emulator answers at
//! once; a pty with nobody answering left them waiting — irb forever, vim
//! and ipython until their own time limits, blocked in a read of the
//! terminal that looked like a wait for the model's input.
//!
//! dsh answers the queries every terminal answers, as a plain VT100-class
//! terminal would, from the screen it emulates:
//!
//! | query | answer |
//! |---|---|
//! | `CSI 6 n` (cursor position) | `CSI row ; col R`, 1-based, from the screen |
//! | `CSI ? 6 n` (DECXCPR) | `CSI ? row ; col ; 1 R` |
//! | `CSI 5 n` (status) | `CSI 0 n` (ready) |
//! | `CSI c`, `CSI 0 c` (primary attributes) | `CSI ? 1 ; 2 c` (a VT100 with the advanced video option) |
//! | `CSI > c`, `CSI > 0 c` (secondary attributes) | `CSI > 0 ; 0 ; 0 c` (a VT100, version 0) |
//! | `OSC 10 ; ?` / `OSC 11 ; ?` (colours) | white on black, in the query's terminator |
//!
//! Other queries go unanswered, as on a terminal that does not know them.

use std::fmt::Write as _;

/// Answers held at most before they are written: a program that asks in
/// a loop without reading the answers cannot grow them without bound.
const MAX_PENDING: usize = 4 * 1024;

/// Answers waiting to be written to the terminal.
#[derive(Default)]
pub(crate) struct Replies {
    pending: Vec<u8>,
}

/// A query the terminal answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Query {
    /// `CSI 6 n`, or `CSI ? 6 n` when `private`.
    CursorPosition { private: bool },
    /// `CSI 5 n`.
    Status,
    /// `CSI c`.
    PrimaryAttributes,
    /// `CSI > c`.
    SecondaryAttributes,
    /// `OSC 10 ; ?` (foreground) or `OSC 11 ; ?` (background), ended by
    /// `BEL` when `bel`, else by `ST`.
    Colour { background: bool, bel: bool },
}

impl Query {
    /// The query a CSI sequence is, if one we answer.
    pub(crate) fn of_csi(params: &vte::Params, intermediates: &[u8], action: char) -> Option<Self> {
        let mut values = params.iter().map(|p| p.first().copied().unwrap_or(0));
        let first = values.next().unwrap_or(0);
        let single = values.next().is_none();
        match (intermediates, action) {
            ([], 'n') if single && first == 6 => Some(Self::CursorPosition { private: false }),
            ([b'?'], 'n') if single && first == 6 => Some(Self::CursorPosition { private: true }),
            ([], 'n') if single && first == 5 => Some(Self::Status),
            ([], 'c') if single && first == 0 => Some(Self::PrimaryAttributes),
            ([b'>'], 'c') if single && first == 0 => Some(Self::SecondaryAttributes),
            _ => None,
        }
    }

    /// The query an OSC sequence is, if one we answer.
    pub(crate) fn of_osc(params: &[&[u8]], bell_terminated: bool) -> Option<Self> {
        match params {
            [b"10", b"?"] => Some(Self::Colour {
                background: false,
                bel: bell_terminated,
            }),
            [b"11", b"?"] => Some(Self::Colour {
                background: true,
                bel: bell_terminated,
            }),
            _ => None,
        }
    }
}

impl Replies {
    /// Answers `query`; `cursor` is the screen's cursor (0-based row,
    /// column) after the output up to the query.
    pub(crate) fn answer(&mut self, query: Query, cursor: (u16, u16)) {
        let mut reply = String::new();
        let (row, col) = (u32::from(cursor.0) + 1, u32::from(cursor.1) + 1);
        let _ = match query {
            Query::CursorPosition { private: false } => write!(reply, "\x1b[{row};{col}R"),
            Query::CursorPosition { private: true } => write!(reply, "\x1b[?{row};{col};1R"),
            Query::Status => write!(reply, "\x1b[0n"),
            Query::PrimaryAttributes => write!(reply, "\x1b[?1;2c"),
            Query::SecondaryAttributes => write!(reply, "\x1b[>0;0;0c"),
            Query::Colour { background, bel } => write!(
                reply,
                "\x1b]{};rgb:{c}/{c}/{c}{}",
                if background { 11 } else { 10 },
                if bel { "\x07" } else { "\x1b\\" },
                c = if background { "0000" } else { "ffff" },
            ),
        };
        if self.pending.len() + reply.len() <= MAX_PENDING {
            self.pending.extend_from_slice(reply.as_bytes());
        }
    }

    /// The answers not written yet, in order; empties them.
    pub(crate) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The queries `bytes` hold, as `vte` dispatches them.
    fn queries(bytes: &[u8]) -> Vec<Query> {
        struct Collect(Vec<Query>);
        impl vte::Perform for Collect {
            fn csi_dispatch(&mut self, params: &vte::Params, inter: &[u8], _: bool, action: char) {
                self.0.extend(Query::of_csi(params, inter, action));
            }
            fn osc_dispatch(&mut self, params: &[&[u8]], bell: bool) {
                self.0.extend(Query::of_osc(params, bell));
            }
        }
        let mut parser = vte::Parser::new();
        let mut collect = Collect(Vec::new());
        parser.advance(&mut collect, bytes);
        collect.0
    }

    #[test]
    fn the_queries_programs_send_are_recognised_and_nothing_else() {
        assert_eq!(
            queries(b"\x1b[6n\x1b[?6n\x1b[5n\x1b[c\x1b[0c\x1b[>c\x1b[>0c"),
            vec![
                Query::CursorPosition { private: false },
                Query::CursorPosition { private: true },
                Query::Status,
                Query::PrimaryAttributes,
                Query::PrimaryAttributes,
                Query::SecondaryAttributes,
                Query::SecondaryAttributes,
            ]
        );
        assert_eq!(
            queries(b"\x1b]11;?\x07\x1b]10;?\x1b\\"),
            vec![
                Query::Colour {
                    background: true,
                    bel: true
                },
                Query::Colour {
                    background: false,
                    bel: false
                },
            ]
        );
        // Look-alikes that are not queries: erase, cursor moves, a DA
        // with other parameters, setting a colour.
        assert!(queries(b"\x1b[2J\x1b[6;1H\x1b[1c\x1b[6;5n\x1b]11;#000000\x07").is_empty());
    }

    #[test]
    fn answers_are_what_a_vt100_class_terminal_says_and_are_bounded() {
        let mut replies = Replies::default();
        replies.answer(Query::CursorPosition { private: false }, (4, 9));
        replies.answer(Query::CursorPosition { private: true }, (0, 0));
        replies.answer(Query::Status, (0, 0));
        replies.answer(Query::PrimaryAttributes, (0, 0));
        replies.answer(Query::SecondaryAttributes, (0, 0));
        replies.answer(
            Query::Colour {
                background: true,
                bel: true,
            },
            (0, 0),
        );
        assert_eq!(
            String::from_utf8(replies.take()).unwrap(),
            "\x1b[5;10R\x1b[?1;1;1R\x1b[0n\x1b[?1;2c\x1b[>0;0;0c\x1b]11;rgb:0000/0000/0000\x07"
        );
        assert!(replies.take().is_empty());
        for _ in 0..10_000 {
            replies.answer(Query::Status, (0, 0));
        }
        assert!(replies.take().len() <= MAX_PENDING);
    }
}
