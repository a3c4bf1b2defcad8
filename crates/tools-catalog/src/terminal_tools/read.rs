//! `terminal_read`: the stream from a byte cursor, or the screen.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use terminal_seam::{ReadOutcome, ReadRequest};

use super::{TERMINAL_ERRORS, parse_id, terminal_error};
use crate::{
    CallContext, Effect, Preset, Settings, Tool, ToolFuture, ToolReply, ToolSpec, clamp_ms,
    parse_args,
};

/// Which view `terminal_read` returns.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReadMode {
    /// The sanitized output stream from a byte cursor.
    Stream,
    /// The screen as a terminal renders it (for full-screen programs).
    Screen,
}

/// Arguments of `terminal_read`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The terminal's id (`pty-N`).
    pub id: String,
    /// Default `stream`.
    pub mode: Option<ReadMode>,
    /// Stream: byte cursor to read from (a previous `next`). Default: what you have not read yet.
    pub since: Option<u64>,
    /// Stream: most bytes to return. Default and most: the result limit (32768 unless configured).
    pub max_bytes: Option<u64>,
}

pub(crate) struct TerminalReadTool {
    spec: ToolSpec,
    max_result_bytes: usize,
}

/// The smallest `max_bytes` of a stream read.
const MIN_READ_BYTES: u64 = 64;

impl TerminalReadTool {
    pub(crate) fn new(settings: &Settings) -> Self {
        Self {
            spec: ToolSpec::new::<ReadArgs>(
                "terminal_read",
                "Read a terminal without typing into it: `stream` returns its output from a byte cursor (non-destructive: the same `since` returns the same text), \
`screen` returns what the screen shows now, for full-screen programs such as editors, pagers and `top`.",
                &[Preset::Full],
                TERMINAL_ERRORS,
                Effect::ReadOnly,
            ),
            max_result_bytes: settings.max_result_bytes,
        }
    }
}

impl Tool for TerminalReadTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call<'a>(&'a self, cx: &'a CallContext, args: Value) -> ToolFuture<'a> {
        Box::pin(async move {
            let args: ReadArgs = parse_args(args)?;
            let id = parse_id(&args.id)?;
            let limit = self.max_result_bytes as u64;
            let (max_bytes, clamped) = clamp_ms(
                "max_bytes",
                args.max_bytes,
                limit,
                MIN_READ_BYTES.min(limit),
                limit,
            );
            let request = match args.mode.unwrap_or(ReadMode::Stream) {
                ReadMode::Stream => ReadRequest::Stream {
                    since: args.since,
                    max_bytes: Some(max_bytes as usize),
                },
                ReadMode::Screen => ReadRequest::Screen,
            };
            let outcome = cx
                .runtime
                .terminals
                .read(&cx.owner, id, request)
                .await
                .map_err(terminal_error)?;
            let mut held = 0;
            let outcome = match outcome {
                ReadOutcome::Stream(mut chunk) => {
                    held = redact_chunk(cx, id, &mut chunk).await;
                    ReadOutcome::Stream(chunk)
                }
                screen @ ReadOutcome::Screen(_) => screen,
            };
            Ok(match outcome {
                ReadOutcome::Stream(chunk) => {
                    let mut text = String::new();
                    if chunk.dropped > 0 {
                        text.push_str(&format!(
                            "[{} earlier bytes were dropped from the scrollback]\n",
                            chunk.dropped
                        ));
                    }
                    text.push_str(&chunk.output);
                    if !text.is_empty() && !text.ends_with('\n') {
                        text.push('\n');
                    }
                    text.push_str(&format!(
                        "[{id} · bytes {}–{}{}]",
                        chunk.from,
                        chunk.next,
                        if chunk.truncated {
                            " · more after next"
                        } else {
                            ""
                        }
                    ));
                    if let Some(c) = &clamped {
                        text.push_str(&format!(
                            " [{} clamped from {} to {}]",
                            c.field, c.from, c.to
                        ));
                    }
                    if held > 0 {
                        text.push_str(&format!(
                            "\n[{held} bytes before next may begin a secret: held back; the next read shows them]"
                        ));
                    }
                    let mut structured = json!({
                        "output": chunk.output,
                        "from": chunk.from,
                        "next": chunk.next,
                        "dropped": chunk.dropped,
                        "truncated": chunk.truncated,
                    });
                    if held > 0 {
                        structured["held"] = json!(held);
                    }
                    if let Some(c) = clamped {
                        structured["clamped"] = json!(c);
                    }
                    ToolReply { text, structured }
                }
                ReadOutcome::Screen(view) => {
                    // A large screen of wide or combining characters can
                    // exceed the result limit: keep its head and tail.
                    let screen =
                        crate::render::truncate_middle(&view.screen, self.max_result_bytes);
                    let mut text = screen.text.trim_end().to_owned();
                    text.push_str(&format!(
                        "\n[{id} screen {}x{} · cursor row {} col {}{}{}]",
                        view.rows,
                        view.cols,
                        view.cursor.row,
                        view.cursor.col,
                        if view.alternate_screen {
                            " · alternate screen"
                        } else {
                            ""
                        },
                        if screen.truncated {
                            format!(
                                " · {} of {} bytes shown",
                                screen.text.len(),
                                screen.total_bytes
                            )
                        } else {
                            String::new()
                        }
                    ));
                    ToolReply {
                        text,
                        structured: json!({
                            "screen": screen.text,
                            "cursor": { "row": view.cursor.row, "col": view.cursor.col },
                            "rows": view.rows,
                            "cols": view.cols,
                            "alternate_screen": view.alternate_screen,
                            "truncated": screen.truncated,
                            "total_bytes": screen.total_bytes,
                        }),
                    }
                }
            })
        })
    }
}

/// The chunk, redacted with the stream around it (see
/// [`crate::redaction::redact_read`]); `from` moves back when it shows
/// what the previous read held back. Returns the bytes held back now.
async fn redact_chunk(
    cx: &CallContext,
    id: terminal_seam::TerminalId,
    chunk: &mut terminal_seam::StreamChunk,
) -> u64 {
    let read_range: crate::redaction::ReadRange<'_> = Box::new(move |since, len| {
        Box::pin(async move {
            let request = ReadRequest::Stream {
                since: Some(since),
                max_bytes: Some(len),
            };
            match cx.runtime.terminals.read(&cx.owner, id, request).await {
                // A read returns at least a few bytes: keep what was asked.
                Ok(ReadOutcome::Stream(c)) if c.from == since => {
                    c.output.get(..len).map(str::to_owned)
                }
                _ => None,
            }
        })
    });
    let shown = crate::redaction::redact_read(
        cx,
        &id.to_string(),
        chunk.from,
        chunk.next,
        &chunk.output,
        true,
        read_range,
    )
    .await;
    chunk.from = shown.from;
    chunk.output = shown.text;
    shown.held
}
