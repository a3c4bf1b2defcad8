//! The daemon's half of `dsh attach`: a live view of a terminal, drawn
//! from the terminal's emulator, never forwarded. The person's terminal
//! receives what the screen shows — rows of text with their colors, the
//! cursor, whether cursor keys are in application mode — as a few
//! drawing sequences (cursor moves, colors, line erases; frames, see
//! [`daemon_wire::frame`]), nothing the program printed as it printed
//! it: no clipboard or title string, no query the person's terminal would
//! answer by typing. Full-screen programs stay usable (the emulator keeps
//! their screen); only rows that changed are redrawn, at most once a
//! frame. The view moves none of the owning agent's cursors and nothing
//! its settle detection reads. With `write`, the person's keys go to the
//! program through the terminal's send slot: refused while an agent's
//! send is active, and holding the slot (so an agent's send gets
//! `SEND_ACTIVE`) until the person stopped typing and the program waits
//! for input again.

use std::fmt::Write as _;
use std::time::Duration;

use terminal_seam::{
    Color, PersonKeys, PersonViews, Run, ScreenSnapshot, TerminalError, TerminalId, WatchEvent,
    style,
};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt as _};
use tokio_util::sync::CancellationToken;

use daemon_wire::replies::AttachAccepted;
use daemon_wire::{Reply, frame, write_line};
use mcp_host::Host;

async fn send_frame<W: AsyncWrite + Unpin>(w: &mut W, tag: u8, payload: &[u8]) -> bool {
    w.write_all(&frame::encode(tag, payload)).await.is_ok() && w.flush().await.is_ok()
}

/// Serves one `attach` connection (after its hello).
pub async fn serve<R, W>(
    host: &Host,
    id: &str,
    writable: bool,
    mut reader: R,
    mut writer: W,
    stop: CancellationToken,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let fail = |e: TerminalError| Reply::failed(crate::codes::terminal(&e), e.to_string());
    let id: TerminalId = match id.parse() {
        Ok(id) => id,
        Err(e) => {
            let _ = write_line(&mut writer, &fail(e)).await;
            return;
        }
    };
    let terminals = host.terminals();
    let watch = match terminals.watch(id) {
        Ok(w) => w,
        Err(e) => {
            let _ = write_line(&mut writer, &fail(e)).await;
            return;
        }
    };
    let typing = if writable {
        match terminals.person_typing(id) {
            Ok(t) => Some(t),
            Err(e) => {
                let _ = write_line(&mut writer, &fail(e)).await;
                return;
            }
        }
    } else {
        None
    };
    let reply = Reply::of(&AttachAccepted {
        rows: watch.size.0,
        cols: watch.size.1,
        write: writable,
    });
    if write_line(&mut writer, &reply).await.is_err() {
        return;
    }
    tracing::info!(terminal = %id, write = writable, "a person attached");
    let mut view = View {
        terminals: terminals.as_ref(),
        id,
        shown: None,
    };
    let mut output = watch.output;
    let mut answer = AnswerKeys::default();
    let mut dirty = true;
    let mut next_draw = tokio::time::Instant::now();
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    let end = loop {
        tokio::select! {
            event = output.next() => match event {
                // Drawn from the screen: a chunk missed changes nothing.
                WatchEvent::Output(_) | WatchEvent::Lagged => dirty = true,
                WatchEvent::Ended => break format!("{id} ended"),
            },
            () = tokio::time::sleep_until(next_draw), if dirty => {
                dirty = false;
                next_draw = tokio::time::Instant::now() + FRAME;
                if !view.draw(&mut writer).await {
                    return;
                }
            }
            incoming = frame::read(&mut reader) => match incoming {
                Ok(Some((frame::INPUT, keys))) => {
                    let notice = match answer.keys(host, id, typing.is_some(), &keys) {
                        Some(refused) => Some(refused),
                        None => type_keys(typing.as_deref(), id, &keys).await,
                    };
                    if let Some(notice) = notice
                        && !send_frame(&mut writer, frame::NOTICE, notice.as_bytes()).await
                    {
                        return;
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => {
                    tracing::info!(terminal = %id, "a person detached");
                    return;
                }
            },
            _ = tick.tick() => {
                if terminals.is_over(id) {
                    break format!("{id} ended");
                }
            }
            () = stop.cancelled() => break "the dsh daemon is stopping".to_owned(),
        }
    };
    // The last screen first.
    if !view.draw(&mut writer).await {
        return;
    }
    let _ = send_frame(&mut writer, frame::END, end.as_bytes()).await;
}

/// The shortest time between two drawings of a view (about 60 a second).
const FRAME: Duration = Duration::from_millis(16);

/// Types a person's keys; the notice to show them when nothing was typed.
async fn type_keys(typing: Option<&dyn PersonKeys>, id: TerminalId, keys: &[u8]) -> Option<String> {
    let Some(typing) = typing else {
        return Some("this view is read-only (attach with --write to type)".to_owned());
    };
    match typing.write(keys).await {
        Ok(()) => None,
        Err(TerminalError::SendActive { .. }) => Some(format!(
            "an agent's send is active on {id}; your keys were not sent — try again when it settles"
        )),
        Err(e) => Some(e.to_string()),
    }
}

/// The keys a person types with `--write` while a program waits to read
/// a secret: the line they make is an answer, remembered so that no
/// agent's later result shows it (see `Host::remember_answer`).
#[derive(Default)]
struct AnswerKeys {
    line: zeroize::Zeroizing<Vec<u8>>,
}

impl AnswerKeys {
    /// Notes `keys` about to be typed into `id`; the notice to show, when
    /// they must not be typed at all (see `Host::answer_refused`).
    fn keys(&mut self, host: &Host, id: TerminalId, writable: bool, keys: &[u8]) -> Option<String> {
        if !writable || !host.terminals().waits_for_secret(id) {
            self.line.clear();
            return None;
        }
        if let Some(refused) = host.answer_refused(id) {
            self.line.clear();
            return Some(format!("{id}: {refused}"));
        }
        for &key in keys {
            match key {
                b'\r' | b'\n' => {
                    if let Ok(answer) = std::str::from_utf8(&self.line) {
                        host.remember_answer(answer);
                    }
                    self.line.clear();
                }
                0x7f | 0x08 => {
                    self.line.pop();
                }
                // Ctrl-U erases the line, Ctrl-C ends the read.
                0x15 | 0x03 => self.line.clear(),
                key if key >= 0x20 => self.line.push(key),
                _ => {}
            }
        }
        None
    }
}

/// One person's view: what it last drew.
struct View<'a> {
    terminals: &'a dyn PersonViews,
    id: TerminalId,
    /// The screen as the person's terminal shows it; `None` before the
    /// first drawing.
    shown: Option<ScreenSnapshot>,
}

impl View<'_> {
    /// Draws what changed since the last drawing; false when the person's
    /// side is gone. A terminal already gone draws nothing.
    async fn draw<W: AsyncWrite + Unpin>(&mut self, writer: &mut W) -> bool {
        let Ok(now) = self.terminals.screen_copy(self.id) else {
            return true;
        };
        let bytes = drawing(self.shown.as_ref(), &now);
        self.shown = Some(now);
        bytes.is_empty() || send_frame(writer, frame::OUTPUT, &bytes).await
    }
}

/// The sequences that turn a terminal showing `shown` (nothing known when
/// `None`) into one showing `now`: only cursor moves, line erases, colors,
/// the cursor's visibility and the cursor keys' mode. Empty when nothing
/// changed.
pub(crate) fn drawing(shown: Option<&ScreenSnapshot>, now: &ScreenSnapshot) -> Vec<u8> {
    let shown = shown.filter(|s| s.rows == now.rows && s.cols == now.cols);
    if shown == Some(now) {
        return Vec::new();
    }
    // Hide the cursor while drawing; start from plain colors.
    let mut out = String::from("\x1b[?25l\x1b[0m");
    if shown.is_none() {
        out.push_str("\x1b[H\x1b[2J");
    }
    for (row, runs) in now.lines.iter().enumerate() {
        let before = shown.and_then(|s| s.lines.get(row));
        if shown.is_some() && before == Some(runs) {
            continue;
        }
        let _ = write!(out, "\x1b[{};1H\x1b[2K", row + 1);
        for run in runs {
            out.push_str(&sgr(run));
            out.extend(
                run.text
                    .chars()
                    .map(|c| if c.is_control() { ' ' } else { c }),
            );
        }
        out.push_str("\x1b[0m");
    }
    if shown.is_none_or(|s| s.app_cursor != now.app_cursor) {
        out.push_str(if now.app_cursor {
            "\x1b[?1h"
        } else {
            "\x1b[?1l"
        });
    }
    let _ = write!(out, "\x1b[{};{}H", now.cursor.0 + 1, now.cursor.1 + 1);
    if !now.cursor_hidden {
        out.push_str("\x1b[?25h");
    }
    out.into_bytes()
}

/// The select-graphic-rendition sequence of a run's colors and style,
/// from plain.
fn sgr(run: &Run) -> String {
    let mut codes = String::from("0");
    let bits = [
        (style::BOLD, "1"),
        (style::DIM, "2"),
        (style::ITALIC, "3"),
        (style::UNDERLINE, "4"),
        (style::INVERSE, "7"),
    ];
    for (bit, code) in bits {
        if run.flags & bit != 0 {
            codes.push(';');
            codes.push_str(code);
        }
    }
    for (color, base) in [(run.fg, 38), (run.bg, 48)] {
        match color {
            Color::Default => {}
            Color::Idx(i) => {
                let _ = write!(codes, ";{base};5;{i}");
            }
            Color::Rgb(r, g, b) => {
                let _ = write!(codes, ";{base};2;{r};{g};{b}");
            }
        }
    }
    format!("\x1b[{codes}m")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn screen(lines: &[&str]) -> ScreenSnapshot {
        ScreenSnapshot {
            rows: 3,
            cols: 10,
            cursor: (1, 2),
            cursor_hidden: false,
            app_cursor: false,
            alt: false,
            lines: lines
                .iter()
                .map(|l| {
                    vec![Run {
                        text: (*l).to_owned(),
                        fg: Color::Default,
                        bg: Color::Default,
                        flags: 0,
                    }]
                })
                .collect(),
        }
    }

    #[test]
    fn the_first_drawing_clears_and_draws_every_row() {
        let now = screen(&["one", "two", ""]);
        let out = String::from_utf8(drawing(None, &now)).unwrap_or_default();
        assert!(out.contains("\x1b[2J"), "{out:?}");
        assert!(out.contains("\x1b[1;1H\x1b[2K\x1b[0mone"), "{out:?}");
        assert!(out.contains("\x1b[2;1H\x1b[2K\x1b[0mtwo"), "{out:?}");
        assert!(out.ends_with("\x1b[2;3H\x1b[?25h"), "{out:?}");
    }

    #[test]
    fn a_later_drawing_redraws_only_the_rows_that_changed() {
        let before = screen(&["one", "two", ""]);
        let now = screen(&["one", "TWO", ""]);
        let out = String::from_utf8(drawing(Some(&before), &now)).unwrap_or_default();
        assert!(!out.contains("one") && !out.contains("\x1b[2J"), "{out:?}");
        assert!(out.contains("\x1b[2;1H\x1b[2K\x1b[0mTWO"), "{out:?}");
        assert!(drawing(Some(&now), &now).is_empty());
    }

    #[test]
    fn colors_and_styles_are_drawn_and_control_characters_are_not() {
        let mut now = screen(&["a\u{9b}b\x07", "", ""]);
        now.lines[0][0].fg = Color::Idx(1);
        now.lines[0][0].bg = Color::Rgb(1, 2, 3);
        now.lines[0][0].flags = style::BOLD | style::INVERSE;
        now.app_cursor = true;
        let out = String::from_utf8(drawing(None, &now)).unwrap_or_default();
        assert!(out.contains("\x1b[0;1;7;38;5;1;48;2;1;2;3ma b "), "{out:?}");
        assert!(out.contains("\x1b[?1h"), "{out:?}");
        assert!(!out.contains('\u{9b}') && !out.contains('\x07'), "{out:?}");
    }
}
