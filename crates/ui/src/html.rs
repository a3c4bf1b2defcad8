//! The few HTML helpers every page uses: escaping, the layout, times.
//!
//! Everything a page shows comes from agents and their programs (paths,
//! commands, client names): all of it goes through [`esc`].

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// `s` with `& < > " '` escaped, safe in text and in quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The workspaces and their sessions.
    Workspaces,
    /// The connected agents.
    Live,
}

/// A whole page: `title`, the page kind (`data-page`, read by the
/// script), the navigation entry, extra `data-*` attributes of `<body>`
/// (already escaped by this function), and the body's HTML.
pub fn layout(title: &str, page: &str, nav: Nav, data: &[(&str, &str)], body: &str) -> String {
    let mut attrs = String::new();
    for (k, v) in data {
        let _ = write!(attrs, " data-{}=\"{}\"", esc(k), esc(v));
    }
    let active = |n: Nav| if n == nav { " class=\"active\"" } else { "" };
    format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{} · dsh</title><link rel=\"stylesheet\" href=\"/assets/ui.css\">\
<link rel=\"icon\" href=\"/assets/icon.svg\" type=\"image/svg+xml\"></head>\
<body data-page=\"{}\"{attrs}><header><a class=\"brand\" href=\"/\">dsh</a><nav>\
<a href=\"/\"{}>Workspaces</a><a href=\"/live\"{}>Live</a></nav>\
<span class=\"meta\">dsh {}</span></header><main>{body}</main>\
<script src=\"/assets/ui.js\"></script></body></html>\n",
        esc(title),
        esc(page),
        active(Nav::Workspaces),
        active(Nav::Live),
        esc(env!("CARGO_PKG_VERSION")),
    )
}

/// A moment as `<time>`: UTC date and time, the exact instant in its
/// `datetime` attribute.
pub fn time(at: DateTime<Utc>) -> String {
    format!(
        "<time datetime=\"{}\">{}</time>",
        at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        at.format("%Y-%m-%d %H:%M:%S UTC")
    )
}

/// `5 s`, `3 min`, `2 h 05 min`, `4 d`.
pub fn span(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
        s => format!("{} d", s / 86_400),
    }
}

/// `3 min ago` for a moment before `now`.
pub fn ago(now: DateTime<Utc>, at: DateTime<Utc>) -> String {
    let d = (now - at).to_std().unwrap_or_default();
    format!("{} ago", span(d))
}

/// A short session id (its first 8 characters) for tables.
pub fn short_id(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn escaping_covers_markup_quotes_and_controls() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>\x1b[31m"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;\\u{1b}[31m"
        );
    }

    #[test]
    fn spans_read_like_a_person_would_say_them() {
        assert_eq!(span(Duration::from_secs(5)), "5 s");
        assert_eq!(span(Duration::from_secs(185)), "3 min");
        assert_eq!(span(Duration::from_secs(7500)), "2 h 05 min");
        assert_eq!(span(Duration::from_secs(200_000)), "2 d");
    }
}
