//! Live terminal screens, rendered on the server from the emulator dsh
//! already keeps for every terminal.
//!
//! Why not stream the raw output to a terminal widget in the browser:
//! the page shows exactly the screen the agent's `terminal_read` sees,
//! with no second emulator to disagree with it, and the cost of a viewer
//! does not grow with what the program prints. One [`ScreenFeed`] per
//! watched terminal (shared by all its viewers) wakes on the terminal's
//! output, copies the screen (the session's lock is held only for the
//! copy), renders it once into one shared, already serialized frame, and
//! publishes it in a `watch` channel: at most every [`FRAME_INTERVAL`],
//! and every [`FLOOD_INTERVAL`] once the terminal has printed without a
//! pause for [`FLOOD_AFTER`] (nobody reads 20 screens a second of a
//! flood; the first screen after a pause goes out at once). A viewer
//! sends the newest frame when it can: one that falls behind skips
//! straight to the current screen, and nothing is ever queued per viewer.
//! A 100 MB flood costs the viewers a few frames a second, not 100 MB
//! each. The feed ends with its last viewer.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use axum::extract::ws::Utf8Bytes;
use terminal_seam::{
    Color, OutputFeed, PersonViews, ScreenSnapshot, TerminalError, TerminalId, WatchEvent,
};
use tokio::sync::watch;
use tokio::time::Instant;

/// The shortest time between two frames of one terminal.
pub const FRAME_INTERVAL: Duration = Duration::from_millis(50);

/// The time between two frames of a terminal that is flooding.
pub const FLOOD_INTERVAL: Duration = Duration::from_millis(200);

/// How long a terminal prints without a pause before it counts as flooding.
pub const FLOOD_AFTER: Duration = Duration::from_secs(1);

/// How often a feed checks whether its terminal is over.
const OVER_CHECK: Duration = Duration::from_millis(250);

/// One rendered screen: a JSON text message for the page, serialized
/// once and shared by every viewer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// `{"t":"screen",…}`.
    pub json: Utf8Bytes,
    /// Set when the terminal is over: why.
    pub ended: Option<String>,
}

/// A color as the page reads it: `""` (the default), `"iN"` (palette
/// index) or `"#rrggbb"`.
fn color(c: Color, out: &mut String) {
    match c {
        Color::Default => {}
        Color::Idx(i) => {
            let _ = write!(out, "i{i}");
        }
        Color::Rgb(r, g, b) => {
            let _ = write!(out, "#{r:02x}{g:02x}{b:02x}");
        }
    }
}

/// Appends `s` as a JSON string.
fn json_str(s: &str, out: &mut String) {
    out.push_str(&serde_json::Value::String(s.to_owned()).to_string());
}

/// Renders a screen as the page's frame: its size, cursor, modes, and per
/// row a list of runs `[text, fg, bg, flags]` (flags: 1 bold, 2 italic,
/// 4 underline, 8 inverse, 16 dim, as the seam's `style` bits); trailing
/// blank cells are left out.
pub fn render(screen: &ScreenSnapshot) -> String {
    let (rows, cols) = (screen.rows, screen.cols);
    let (cursor_row, cursor_col) = screen.cursor;
    let mut out = String::with_capacity(usize::from(rows) * usize::from(cols) + 256);
    let _ = write!(
        out,
        "{{\"t\":\"screen\",\"rows\":{rows},\"cols\":{cols},\"cursor\":[{cursor_row},{cursor_col}],\"cursor_hidden\":{},\"app_cursor\":{},\"alt\":{},\"lines\":[",
        screen.cursor_hidden, screen.app_cursor, screen.alt,
    );
    let mut fg = String::new();
    let mut bg = String::new();
    for (i, runs) in screen.lines.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('[');
        for (j, run) in runs.iter().enumerate() {
            if j > 0 {
                out.push(',');
            }
            fg.clear();
            bg.clear();
            color(run.fg, &mut fg);
            color(run.bg, &mut bg);
            out.push('[');
            json_str(&run.text, &mut out);
            let _ = write!(out, ",\"{fg}\",\"{bg}\",{}]", run.flags);
        }
        out.push(']');
    }
    out.push_str("]}");
    out
}

/// A frame for the terminal's screen now.
fn frame_now(terminals: &dyn PersonViews, id: TerminalId) -> Result<Frame, TerminalError> {
    let screen = terminals.screen_copy(id)?;
    Ok(Frame {
        json: render(&screen).into(),
        ended: None,
    })
}

/// The frames of one watched terminal, shared by its viewers; its task
/// ends when the last viewer drops it.
pub struct ScreenFeed {
    frames: watch::Receiver<Arc<Frame>>,
    task: tokio::task::AbortHandle,
}

impl Drop for ScreenFeed {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ScreenFeed {
    /// A receiver of the newest frame.
    pub fn frames(&self) -> watch::Receiver<Arc<Frame>> {
        self.frames.clone()
    }
}

/// The feeds of every watched terminal.
#[derive(Default)]
pub struct ScreenFeeds {
    feeds: Mutex<HashMap<TerminalId, Weak<ScreenFeed>>>,
}

impl ScreenFeeds {
    /// The feed of terminal `id`, started for its first viewer.
    pub fn subscribe(
        &self,
        terminals: &Arc<dyn PersonViews>,
        id: TerminalId,
    ) -> Result<Arc<ScreenFeed>, TerminalError> {
        let mut feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        feeds.retain(|_, f| f.strong_count() > 0);
        if let Some(feed) = feeds.get(&id).and_then(Weak::upgrade) {
            return Ok(feed);
        }
        let watch = terminals.watch(id)?;
        let first = frame_now(terminals.as_ref(), id)?;
        let (tx, rx) = watch::channel(Arc::new(first));
        let task = tokio::spawn(run_feed(Arc::clone(terminals), id, watch.output, tx));
        let feed = Arc::new(ScreenFeed {
            frames: rx,
            task: task.abort_handle(),
        });
        feeds.insert(id, Arc::downgrade(&feed));
        Ok(feed)
    }

    /// How many terminals have a feed running.
    pub fn running(&self) -> usize {
        let feeds = self.feeds.lock().unwrap_or_else(|e| e.into_inner());
        feeds.values().filter(|f| f.strong_count() > 0).count()
    }
}

/// Publishes a frame when it differs from the last one.
fn publish(tx: &watch::Sender<Arc<Frame>>, frame: Frame) {
    tx.send_if_modified(|current| {
        if **current == frame {
            false
        } else {
            *current = Arc::new(frame);
            true
        }
    });
}

/// What the terminal's output says since the feed last looked.
enum Output {
    /// Nothing new.
    Quiet,
    /// It printed.
    Printed,
    /// Its output ended.
    Ended,
}

/// Takes every chunk already waiting: only that something changed
/// matters, the frame is the screen, whatever the chunks were.
fn drain(output: &mut dyn OutputFeed) -> Output {
    let mut seen = Output::Quiet;
    loop {
        match output.try_next() {
            Some(WatchEvent::Output(_) | WatchEvent::Lagged) => seen = Output::Printed,
            None => return seen,
            Some(WatchEvent::Ended) => return Output::Ended,
        }
    }
}

/// The time between frames: [`FLOOD_INTERVAL`] once the terminal has
/// printed in every frame since `busy_since` for [`FLOOD_AFTER`].
fn interval(busy_since: Option<Instant>, now: Instant) -> Duration {
    match busy_since {
        Some(since) if now.duration_since(since) >= FLOOD_AFTER => FLOOD_INTERVAL,
        _ => FRAME_INTERVAL,
    }
}

async fn run_feed(
    terminals: Arc<dyn PersonViews>,
    id: TerminalId,
    mut output: Box<dyn OutputFeed>,
    tx: watch::Sender<Arc<Frame>>,
) {
    let mut over_check = tokio::time::interval(OVER_CHECK);
    over_check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // When the last frame was made, and since when the terminal printed
    // for every frame without a pause.
    let mut last_frame: Option<Instant> = None;
    let mut busy_since: Option<Instant> = None;
    let ended = 'feed: loop {
        // Quiet: wait for output (the first chunk wakes the feed; the
        // rest wait in the channel until the frame is made, so a flood
        // does not wake it once per chunk).
        tokio::select! {
            event = output.next() => match event {
                WatchEvent::Output(_) | WatchEvent::Lagged => {}
                WatchEvent::Ended => break format!("{id} ended"),
            },
            _ = over_check.tick() => {
                if terminals.is_over(id) {
                    break format!("{id} ended");
                }
                continue;
            }
        }
        let now = Instant::now();
        let due = match last_frame {
            Some(last) => last + interval(busy_since, now),
            None => now,
        };
        if due > now {
            tokio::time::sleep_until(due).await;
        } else {
            // A pause longer than a frame: this is a fresh start.
            busy_since = None;
        }
        loop {
            // Everything printed so far is in the screen the copy takes.
            let ended = matches!(drain(output.as_mut()), Output::Ended);
            let now = Instant::now();
            busy_since.get_or_insert(now);
            last_frame = Some(now);
            match frame_now(terminals.as_ref(), id) {
                Ok(frame) => publish(&tx, frame),
                Err(e) => break 'feed e.to_string(),
            }
            if ended {
                break 'feed format!("{id} ended");
            }
            // Still printing: the next frame when it is due; else back
            // to waiting.
            tokio::time::sleep_until(now + interval(busy_since, now)).await;
            match drain(output.as_mut()) {
                Output::Printed => {}
                Output::Quiet => break,
                Output::Ended => break 'feed format!("{id} ended"),
            }
        }
    };
    let mut last = match frame_now(terminals.as_ref(), id) {
        Ok(frame) => frame,
        Err(_) => (**tx.borrow()).clone(),
    };
    last.ended = Some(ended);
    publish(&tx, last);
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    fn screen_of(bytes: &[u8], rows: u16, cols: u16) -> ScreenSnapshot {
        let size = |n: u16| std::num::NonZeroU16::new(n).unwrap_or(std::num::NonZeroU16::MIN);
        let mut parser = vt100::Parser::new(size(rows), size(cols), 0);
        parser.process(bytes);
        terminal_pty::snapshot(parser.screen())
    }

    #[test]
    fn a_frame_has_runs_of_one_style_and_no_trailing_blanks() {
        let screen = screen_of(b">>> 1+1\r\n\x1b[1;31m2\x1b[0m ok\r\n>>> ", 4, 20);
        let frame: serde_json::Value = serde_json::from_str(&render(&screen)).unwrap_or_default();
        assert_eq!(
            frame,
            serde_json::json!({
                "t": "screen", "rows": 4, "cols": 20, "cursor": [2, 4],
                "cursor_hidden": false, "app_cursor": false, "alt": false,
                "lines": [
                    [[">>> 1+1", "", "", 0]],
                    [["2", "i1", "", 1], [" ok", "", "", 0]],
                    [[">>>", "", "", 0]],
                    [],
                ],
            })
        );
    }

    #[test]
    fn colors_and_text_are_escaped_as_json() {
        let screen = screen_of(b"\x1b[38;2;1;2;3m\"<b>\\\x1b[0m", 1, 10);
        let frame: serde_json::Value = serde_json::from_str(&render(&screen)).unwrap_or_default();
        assert_eq!(
            frame["lines"],
            serde_json::json!([[["\"<b>\\", "#010203", "", 0]]])
        );
    }
}
