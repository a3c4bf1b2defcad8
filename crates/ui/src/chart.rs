//! The pictures of a session, as inline SVG rendered on the server: a
//! timeline strip (one lane per tool, one bar per call from its start
//! for its duration, colored by how it ended) and, when the session sent
//! to terminals, each send's latency colored by its settle reason.

use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use maud::{Markup, html};
use workspace::LogEntry;

const WIDTH: f64 = 960.0;
const LEFT: f64 = 120.0;
const RIGHT: f64 = 12.0;
const LANE: f64 = 18.0;
const BAR: f64 = 12.0;
const TOP: f64 = 6.0;
const AXIS: f64 = 22.0;

/// The color of a settle reason (and its legend order).
pub const REASON_COLORS: [(&str, &str); 7] = [
    ("prompt", "#16a34a"),
    ("input_wait", "#0d9488"),
    ("pattern", "#2563eb"),
    ("exit", "#6b7280"),
    ("idle", "#ca8a04"),
    ("timeout", "#ea580c"),
    ("other", "#7c3aed"),
];

const OK_COLOR: &str = "#3b82f6";
const ERROR_COLOR: &str = "#dc2626";

fn reason_color(reason: &str) -> &'static str {
    REASON_COLORS
        .iter()
        .find(|(r, _)| *r == reason)
        .map_or(REASON_COLORS[6].1, |(_, c)| c)
}

/// The color of one call's bar.
pub fn call_color(entry: &LogEntry) -> &'static str {
    if entry.outcome != "OK" {
        return ERROR_COLOR;
    }
    match entry.reason.as_deref() {
        Some("timeout") => reason_color("timeout"),
        Some(reason) if entry.tool == "terminal_send" => reason_color(reason),
        Some(_) | None => OK_COLOR,
    }
}

/// `12 ms`, `3.4 s`, `2 min 5 s`.
pub fn duration_text(ms: u64) -> String {
    match ms {
        ms if ms < 1_000 => format!("{ms} ms"),
        ms if ms < 60_000 => format!("{:.1} s", ms as f64 / 1000.0),
        ms => format!("{} min {} s", ms / 60_000, (ms % 60_000) / 1000),
    }
}

fn end_of(entry: &LogEntry) -> DateTime<Utc> {
    entry.at + chrono::Duration::milliseconds(i64::try_from(entry.duration_ms).unwrap_or(i64::MAX))
}

/// The timeline strip of `log` (oldest first); `None` when there is no
/// call.
pub fn timeline(log: &[LogEntry]) -> Option<Markup> {
    let first = log.first()?;
    let t0 = first.at;
    let t1 = log.iter().map(end_of).max().unwrap_or(t0);
    let span_ms = ((t1 - t0).num_milliseconds().max(1000)) as f64;
    let mut lanes: Vec<&str> = Vec::new();
    for e in log {
        if !lanes.contains(&e.tool.as_str()) {
            lanes.push(&e.tool);
        }
    }
    let plot = WIDTH - LEFT - RIGHT;
    let height = TOP + LANE * lanes.len() as f64 + AXIS;
    let axis_y = TOP + LANE * lanes.len() as f64;
    Some(html! {
        svg class="chart timeline" xmlns="http://www.w3.org/2000/svg"
            viewBox=(format!("0 0 {WIDTH} {height}")) width=(WIDTH) height=(height) role="img"
            aria-label="When each tool call happened and how long it took" {
            @for (i, tool) in lanes.iter().enumerate() {
                @let y = TOP + LANE * i as f64;
                rect x=(LEFT) y=(y) width=(plot) height=(LANE)
                    fill=(if i % 2 == 0 { "#f9fafb" } else { "#f3f4f6" }) {}
                text x=(LEFT - 6.0) y=(y + 13.0) text-anchor="end" font-size="11" fill="#374151" {
                    (tool)
                }
            }
            @for e in log {
                @let lane = lanes.iter().position(|t| *t == e.tool).unwrap_or(0);
                @let x = LEFT + (e.at - t0).num_milliseconds() as f64 / span_ms * plot;
                @let w = (e.duration_ms as f64 / span_ms * plot).max(2.0);
                @let y = TOP + LANE * lane as f64 + (LANE - BAR) / 2.0;
                rect class="call" x=(format!("{x:.1}")) y=(format!("{y:.1}"))
                    width=(format!("{w:.1}")) height=(BAR) fill=(call_color(e)) {
                    title { (call_title(e)) }
                }
            }
            line x1=(LEFT) y1=(axis_y) x2=(WIDTH - RIGHT) y2=(axis_y) stroke="#9ca3af" {}
            @for i in 0..=4 {
                @let frac = f64::from(i) / 4.0;
                @let x = format!("{:.1}", LEFT + frac * plot);
                @let at = t0 + chrono::Duration::milliseconds((frac * span_ms) as i64);
                @let anchor = match i {
                    0 => "start",
                    4 => "end",
                    _ => "middle",
                };
                line x1=(x) y1=(axis_y) x2=(x) y2=(axis_y + 4.0) stroke="#9ca3af" {}
                text x=(x) y=(axis_y + 15.0) text-anchor=(anchor) font-size="10" fill="#4b5563" {
                    (at.format("%H:%M:%S"))
                }
            }
        }
    })
}

/// What a call's bar says when pointed at.
fn call_title(e: &LogEntry) -> String {
    let mut title = format!(
        "{} {} · {} · {}",
        e.at.format("%H:%M:%S%.3f"),
        e.tool,
        duration_text(e.duration_ms),
        e.outcome
    );
    if let Some(reason) = &e.reason {
        let _ = write!(title, " · {reason}");
    }
    if let Some(code) = e.exit_code {
        let _ = write!(title, " · exit {code}");
    }
    title
}

/// Each terminal send's latency (log scale) colored by its settle reason,
/// in the order they were made; `None` when there is none.
pub fn terminal_sends(log: &[LogEntry]) -> Option<Markup> {
    let sends: Vec<&LogEntry> = log.iter().filter(|e| e.tool == "terminal_send").collect();
    if sends.is_empty() {
        return None;
    }
    const H: f64 = 90.0;
    let plot_h = H - TOP - 16.0;
    let plot = WIDTH - LEFT - RIGHT;
    // log10(ms + 1), up to 10 minutes.
    let max = sends
        .iter()
        .map(|e| (e.duration_ms as f64 + 1.0).log10())
        .fold(3.0_f64, f64::max)
        .ceil();
    let scale = |ms: u64| (ms as f64 + 1.0).log10() / max * plot_h;
    let base = TOP + plot_h;
    let decades = (0..).take_while(|d| f64::from(*d) <= max);
    let slot = plot / sends.len() as f64;
    let bar = (slot * 0.8).clamp(1.0, 14.0);
    Some(html! {
        svg class="chart sends" xmlns="http://www.w3.org/2000/svg"
            viewBox=(format!("0 0 {WIDTH} {H}")) width=(WIDTH) height=(H) role="img"
            aria-label="Latency of each terminal send, colored by how it settled" {
            @for decade in decades {
                @let ms = 10u64.pow(decade);
                @let y = format!("{:.1}", base - scale(ms));
                line x1=(LEFT) y1=(y) x2=(WIDTH - RIGHT) y2=(y) stroke="#e5e7eb" {}
                text x=(LEFT - 6.0) y=(format!("{:.1}", base - scale(ms) + 3.0)) text-anchor="end"
                    font-size="10" fill="#4b5563" {
                    (duration_text(ms))
                }
            }
            @for (i, e) in sends.iter().enumerate() {
                @let h = scale(e.duration_ms).max(1.0);
                @let x = LEFT + slot * i as f64 + (slot - bar) / 2.0;
                @let reason = e.reason.as_deref().unwrap_or(if e.outcome == "OK" {
                    "other"
                } else {
                    e.outcome.as_str()
                });
                @let color = if e.outcome == "OK" { reason_color(reason) } else { ERROR_COLOR };
                rect class="send" x=(format!("{x:.1}")) y=(format!("{:.1}", base - h))
                    width=(format!("{bar:.1}")) height=(format!("{h:.1}")) fill=(color) {
                    title {
                        (e.at.format("%H:%M:%S%.3f")) " terminal_send · "
                        (duration_text(e.duration_ms)) " · " (reason)
                    }
                }
            }
            @for (i, (reason, color)) in REASON_COLORS.iter().take(6).enumerate() {
                @let x = LEFT + 90.0 * i as f64;
                rect x=(format!("{x:.1}")) y=(H - 12.0) width="10" height="10" fill=(color) {}
                text x=(format!("{:.1}", x + 13.0)) y=(H - 3.0) font-size="10" fill="#374151" {
                    (reason)
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(offset_ms: i64, tool: &str, ms: u64, reason: Option<&str>) -> LogEntry {
        let at = DateTime::<Utc>::from_timestamp(1_700_000_000, 0).unwrap_or_default()
            + chrono::Duration::milliseconds(offset_ms);
        LogEntry::new(at, tool, "{}", "OK", ms).with_result(reason, None)
    }

    #[test]
    fn one_bar_per_call_and_one_lane_per_tool() {
        let log = vec![
            entry(0, "terminal_open", 120, None),
            entry(200, "terminal_send", 3, Some("input_wait")),
            entry(400, "bash", 1500, None),
            entry(2000, "terminal_send", 40, Some("prompt")),
        ];
        let svg = timeline(&log).map(Markup::into_string).unwrap_or_default();
        assert_eq!(svg.matches("class=\"call\"").count(), 4);
        assert_eq!(svg.matches("<text").count(), 3 + 5);
        assert!(svg.contains("#0d9488"), "input_wait color");
        let sends = terminal_sends(&log)
            .map(Markup::into_string)
            .unwrap_or_default();
        assert_eq!(sends.matches("class=\"send\"").count(), 2);
        assert!(sends.contains("3 ms · input_wait"));
        assert!(timeline(&[]).is_none());
        assert!(terminal_sends(&log[..1]).is_none());
    }

    #[test]
    fn text_in_titles_is_escaped() {
        let log = vec![entry(0, "<script>", 1, None)];
        let svg = timeline(&log).map(Markup::into_string).unwrap_or_default();
        assert!(!svg.contains("<script>"));
        assert!(svg.contains("&lt;script&gt;"));
    }
}
