//! Long lines for a terminal in canonical mode.
//!
//! In canonical mode the kernel keeps at most [`MAX_CANON_LINE`] bytes of
//! one unfinished line and silently drops the rest, while the writer is
//! neither blocked nor told (the echo is not cut either). `cat > f` given a
//! 6,000-byte line receives 4,096 bytes.
//!
//! A line can still reach the program whole: the end-of-file character
//! (`VEOF`, Ctrl-D) typed inside a line hands what was typed so far to the
//! reader without ending the line — a `read` returns those bytes, no
//! newline and no `VEOF` among them, and the program reads on. So a long
//! line is written in pieces of at most [`PIECE`] bytes, each but the last
//! ended by `VEOF`, and each written once the program took the one before
//! (the send's writer waits for that), so the send's watch never sees the
//! program waiting between two pieces of its own input. A program sees the
//! line in several reads, as it would from a pipe; one that takes each
//! `read` for a whole line would see it cut, but such a program could not
//! have received the line at all.
//!
//! When `VEOF` is disabled the line cannot be passed on, and the send
//! reports what the kernel kept ([`LineCut`]).

use terminal_seam::{LineCut, MAX_CANON_LINE};

/// The most bytes of one line written before a `VEOF`: below the kernel's
/// limit with room for a few bytes already typed on the line.
pub(crate) const PIECE: usize = 4000;

/// What to write for `bytes` on a terminal in the modes `modes`.
pub(crate) enum Plan {
    /// Write the bytes as they are.
    AsIs,
    /// Write these pieces instead, one at a time, each once the program
    /// took the one before: the same text, with `VEOF` ending every piece
    /// but the last inside a long line.
    Pieces(Vec<Vec<u8>>),
    /// A line is too long and cannot be split: write as is, and report.
    Cut(LineCut),
}

/// Plans the write of `bytes` (the sent text with its Enter) to a terminal
/// whose modes are `modes`.
pub(crate) fn plan(bytes: &[u8], modes: &libc::termios) -> Plan {
    if modes.c_lflag & libc::ICANON == 0 || bytes.len() <= PIECE {
        return Plan::AsIs;
    }
    let ends = LineEnds::of(modes);
    let veof = modes.c_cc[libc::VEOF];
    let mut pieces: Vec<Vec<u8>> = Vec::new();
    let mut start = 0usize;
    let mut line_len = 0usize;
    let mut line_no = 1u32;
    for (i, &b) in bytes.iter().enumerate() {
        if line_len >= PIECE && !ends.ends(b) {
            if veof == VDISABLE {
                return Plan::Cut(cut(bytes, i - line_len, line_no, &ends));
            }
            let mut piece = bytes[start..i].to_vec();
            piece.push(veof);
            pieces.push(piece);
            start = i;
            line_len = 0;
        }
        if ends.ends(b) {
            line_len = 0;
            if b == b'\n' {
                line_no += 1;
            }
        } else {
            line_len += 1;
        }
    }
    if pieces.is_empty() {
        return Plan::AsIs;
    }
    pieces.push(bytes[start..].to_vec());
    Plan::Pieces(pieces)
}

/// Whether `bytes` written as input wake a program blocked reading a
/// terminal in the modes `modes`: always outside canonical mode; inside,
/// only when they end a line (the kernel hands a reader nothing of an
/// unfinished line, the echo aside).
pub(crate) fn wakes_a_reader(bytes: &[u8], modes: &libc::termios) -> bool {
    if modes.c_lflag & libc::ICANON == 0 {
        return true;
    }
    let ends = LineEnds::of(modes);
    bytes.iter().any(|&b| ends.ends(b))
}

/// `_POSIX_VDISABLE` on Linux: a control character that is switched off.
const VDISABLE: u8 = 0;

/// The bytes that end a line in canonical mode.
struct LineEnds {
    eol: u8,
    eol2: u8,
    eof: u8,
    /// `\r` ends a line when the terminal maps it to `\n` (and does not
    /// ignore it).
    cr: bool,
}

impl LineEnds {
    fn of(modes: &libc::termios) -> Self {
        Self {
            eol: modes.c_cc[libc::VEOL],
            eol2: modes.c_cc[libc::VEOL2],
            eof: modes.c_cc[libc::VEOF],
            cr: modes.c_iflag & libc::ICRNL != 0 && modes.c_iflag & libc::IGNCR == 0,
        }
    }

    fn ends(&self, b: u8) -> bool {
        b == b'\n'
            || (b == b'\r' && self.cr)
            || (b != VDISABLE && (b == self.eol || b == self.eol2 || b == self.eof))
    }
}

/// The report for the line of `line_no` that starts at `start`.
fn cut(bytes: &[u8], start: usize, line_no: u32, ends: &LineEnds) -> LineCut {
    let len = bytes[start..]
        .iter()
        .position(|&b| ends.ends(b))
        .unwrap_or(bytes.len() - start);
    LineCut {
        line: line_no,
        line_bytes: len as u64,
        kept_bytes: len.min(MAX_CANON_LINE) as u64,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn modes(canonical: bool, veof: u8) -> libc::termios {
        // SAFETY: a plain C struct; all zeroes is a valid value.
        let mut m: libc::termios = unsafe { std::mem::zeroed() };
        if canonical {
            m.c_lflag |= libc::ICANON;
        }
        m.c_iflag |= libc::ICRNL;
        m.c_cc[libc::VEOF] = veof;
        m
    }

    /// The reads a canonical-mode program would make of `written`:
    /// split at each line end and at each `VEOF`, which is dropped.
    fn reads(written: &[u8]) -> Vec<Vec<u8>> {
        let mut reads = vec![Vec::new()];
        for &b in written {
            if b == 4 {
                reads.push(Vec::new());
            } else {
                reads.last_mut().unwrap().push(b);
                if b == b'\n' || b == b'\r' {
                    reads.push(Vec::new());
                }
            }
        }
        reads
    }

    #[test]
    fn short_text_and_raw_mode_are_written_as_is() {
        assert!(matches!(plan(b"print(1)\r", &modes(true, 4)), Plan::AsIs));
        let long = vec![b'x'; 10_000];
        assert!(matches!(plan(&long, &modes(false, 4)), Plan::AsIs));
        let lines = b"a\n".repeat(5_000);
        assert!(matches!(plan(&lines, &modes(true, 4)), Plan::AsIs));
    }

    #[test]
    fn a_long_line_gets_veof_every_piece_and_nothing_else_changes() {
        let mut text = b"short\n".to_vec();
        text.extend(std::iter::repeat_n(b'y', 9_000));
        text.push(b'\r');
        let Plan::Pieces(pieces) = plan(&text, &modes(true, 4)) else {
            panic!("a 9,000-byte line must be split");
        };
        assert!(
            pieces[..pieces.len() - 1]
                .iter()
                .all(|p| p.last() == Some(&4))
        );
        let out = pieces.concat();
        let without: Vec<u8> = out.iter().copied().filter(|&b| b != 4).collect();
        assert_eq!(without, text, "only VEOFs are added");
        let reads = reads(&out);
        assert!(
            reads.iter().all(|r| r.len() <= PIECE + 1),
            "{:?}",
            reads.iter().map(Vec::len).collect::<Vec<_>>()
        );
        assert!(reads.iter().filter(|r| !r.is_empty()).count() >= 4);
        // Never a VEOF at a line's start (that would be an end of file).
        for (i, &b) in out.iter().enumerate() {
            if b == 4 {
                assert!(i > 0 && out[i - 1] != b'\n' && out[i - 1] != b'\r' && out[i - 1] != 4);
            }
        }
    }

    #[test]
    fn a_line_of_exactly_one_piece_is_not_split() {
        let mut text = vec![b'z'; PIECE];
        text.push(b'\r');
        assert!(matches!(plan(&text, &modes(true, 4)), Plan::AsIs));
    }

    #[test]
    fn without_veof_the_cut_names_the_line_and_what_the_kernel_keeps() {
        let mut text = b"one\ntwo\n".to_vec();
        text.extend(std::iter::repeat_n(b'q', 6_000));
        text.push(b'\r');
        let Plan::Cut(cut) = plan(&text, &modes(true, VDISABLE)) else {
            panic!("no VEOF: a cut");
        };
        assert_eq!(
            cut,
            LineCut {
                line: 3,
                line_bytes: 6_000,
                kept_bytes: MAX_CANON_LINE as u64
            }
        );
    }
}
