//! The few HTML helpers every page uses: the layout, times, and what
//! every page passes through last.
//!
//! Everything a page shows comes from agents and their programs (paths,
//! commands, client names). Pages are [`maud`] templates, which escape
//! every value they insert (`& < > "`); [`page`] then shows each control
//! character but newline and tab as its escape (`\u{1b}`), so no
//! terminal sequence an agent's program printed reaches the browser.

use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};
use maud::{Markup, PreEscaped, html};

/// The HTML of `markup` as a page or fragment is sent: every control
/// character but newline and tab shown as its escape (`\u{1b}`). The
/// templates themselves hold none, so only what they inserted changes.
pub fn page(markup: Markup) -> String {
    let html = markup.into_string();
    let Some((mut at, mut len)) = hidden_control(html.as_bytes()) else {
        return html;
    };
    let mut out = String::with_capacity(html.len() + 16);
    let mut rest = html.as_str();
    loop {
        out.push_str(&rest[..at]);
        let code = rest[at..].chars().next().map_or(0, u32::from);
        let _ = write!(out, "\\u{{{code:x}}}");
        rest = &rest[at + len..];
        match hidden_control(rest.as_bytes()) {
            Some(next) => (at, len) = next,
            None => break,
        }
    }
    out.push_str(rest);
    out
}

/// Where the first control character but newline and tab is in `bytes`
/// (UTF-8), and its length: a byte below 0x20, 0x7f, or U+0080 to U+009F
/// (0xc2 0x80 to 0xc2 0x9f).
fn hidden_control(bytes: &[u8]) -> Option<(usize, usize)> {
    // Pages are large and rarely hold one: a branch-free look at 64 bytes
    // at a time finds the blocks worth a closer one.
    let mut start = 0;
    for block in bytes.chunks(64) {
        let worth = block.iter().fold(false, |any, &b| {
            any | ((b < 0x20) & (b != b'\n') & (b != b'\t')) | (b == 0x7f) | (b == 0xc2)
        });
        if worth {
            let found = block.iter().enumerate().find_map(|(i, &b)| match b {
                b'\n' | b'\t' => None,
                0..0x20 | 0x7f => Some((start + i, 1)),
                0xc2 if matches!(bytes.get(start + i + 1), Some(0x80..=0x9f)) => {
                    Some((start + i, 2))
                }
                _ => None,
            });
            if found.is_some() {
                return found;
            }
        }
        start += block.len();
    }
    None
}

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nav {
    /// The workspaces and their sessions.
    Workspaces,
    /// The connected agents.
    Live,
}

/// The `data-*` attributes of a page's `<body>` that its script reads;
/// each is left out when `None`.
#[derive(Debug, Clone, Copy, Default)]
pub struct PageData<'a> {
    /// `data-page-token`: what the page's changes carry.
    pub page_token: Option<&'a str>,
    /// `data-picker`: `browse` or `dialog`.
    pub picker: Option<&'a str>,
    /// `data-session`: the session shown.
    pub session: Option<&'a str>,
    /// `data-live`: `true` while the session's agent is connected.
    pub live: Option<&'a str>,
    /// `data-tool`: the tool the calls are filtered by.
    pub tool: Option<&'a str>,
    /// `data-terminal`: the terminal shown.
    pub terminal: Option<&'a str>,
    /// `data-job`: the job shown.
    pub job: Option<&'a str>,
    /// `data-next`: where the job's output goes on.
    pub next: Option<&'a str>,
}

/// A whole page: `title`, the page kind (`data-page`, read by the
/// script), the navigation entry, the `<body>`'s other `data-*`
/// attributes, and the body.
pub fn layout(title: &str, page: &str, nav: Nav, data: PageData<'_>, body: Markup) -> Markup {
    let active = |n: Nav| (n == nav).then_some("active");
    html! {
        (PreEscaped("<!doctype html>\n"))
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · dsh" }
                link rel="stylesheet" href="/assets/ui.css";
                link rel="icon" href="/assets/icon.svg" type="image/svg+xml";
            }
            body data-page=(page) data-page-token=[data.page_token] data-picker=[data.picker]
                data-session=[data.session] data-live=[data.live] data-tool=[data.tool]
                data-terminal=[data.terminal] data-job=[data.job] data-next=[data.next] {
                header {
                    a class="brand" href="/" { "dsh" }
                    nav {
                        a href="/" class=[active(Nav::Workspaces)] { "Workspaces" }
                        a href="/live" class=[active(Nav::Live)] { "Live" }
                    }
                    span class="meta" { "dsh " (env!("CARGO_PKG_VERSION")) }
                }
                main { (body) }
                script src="/assets/ui.js" {}
            }
        }
        "\n"
    }
}

/// A moment as `<time>`: UTC date and time, the exact instant in its
/// `datetime` attribute.
pub fn time(at: DateTime<Utc>) -> Markup {
    html! {
        time datetime=(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)) {
            (at.format("%Y-%m-%d %H:%M:%S UTC"))
        }
    }
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
    fn a_page_escapes_markup_and_quotes_and_shows_controls() {
        let nasty = "<a href=\"x\">'&'</a>\x1b[31m\r\tok\n\u{7f}\u{9b}·";
        assert_eq!(
            page(html! { p title=(nasty) { (nasty) } }),
            "<p title=\"&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;\\u{1b}[31m\\u{d}\tok\n\\u{7f}\\u{9b}·\">\
&lt;a href=&quot;x&quot;&gt;'&amp;'&lt;/a&gt;\\u{1b}[31m\\u{d}\tok\n\\u{7f}\\u{9b}·</p>"
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
