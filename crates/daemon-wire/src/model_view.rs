//! What each MCP client shows its model of a tool result, and so what a
//! result carries for it: the rule the host applies to its replies, and
//! the one a remote bridge applies to the replies it relays (the target
//! sends it both parts; the bridge knows the client).

/// What a client shows its model of a tool result, as measured in each
/// (docs/tool-catalog.md, *What the model reads*).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelView {
    /// The text, with `structuredContent` beside it for programs: the
    /// protocol's own shape, kept for every client not known to differ
    /// (the SDK clients read both).
    TextAndStructured,
    /// The text alone. Claude Code and Codex show the model a result's
    /// `structuredContent` serialised as JSON *instead of* its text when
    /// it has one, losing every sentence of the text at 1.3–1.7× its
    /// bytes; Gemini CLI shows the text, but on an error the whole raw
    /// result escaped into one sentence. Without `structuredContent` all
    /// three show dsh's text. `cut`: the client cuts a longer result in
    /// its middle with a marker of its own, so dsh cuts first, to this many
    /// bytes, and its own marker (with the count) is what the model reads.
    TextOnly {
        /// The most bytes of text the client shows whole.
        cut: Option<usize>,
    },
}

/// The bytes of a result's text that Codex shows whole: it cuts a longer
/// one in the middle to about 12,000 characters, prefix included.
pub const CODEX_WHOLE_BYTES: usize = 10_000;

impl ModelView {
    /// The view of the client named `client` (its `clientInfo.name`).
    pub fn of(client: Option<&str>) -> Self {
        match client {
            Some("claude-code" | "gemini-cli-mcp-client") => Self::TextOnly { cut: None },
            Some("codex-mcp-client") => Self::TextOnly {
                cut: Some(CODEX_WHOLE_BYTES),
            },
            Some(_) | None => Self::TextAndStructured,
        }
    }
}
