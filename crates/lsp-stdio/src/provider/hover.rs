//! `hover`: the server's documentation of the symbol at a position, or the
//! source line when it has none (proven empty).

use lsp_seam::{HoverContent, HoverResult, LspError, Op, PositionQuery};
use lsp_types::request::HoverRequest;
use lsp_types::{HoverContents, HoverParams, MarkedString, WorkDoneProgressParams};

use super::StdioLspProvider;
use super::query::{position_params, validate_line};
use crate::text;

impl StdioLspProvider {
    pub(super) async fn hover_impl(&self, query: &PositionQuery) -> Result<HoverResult, LspError> {
        validate_line(query)?;
        self.run(
            Op::Hover,
            &query.path,
            &query.progress,
            &query.access,
            &query.workspace,
            |server, file| async move {
                self.unsupported(&server, "hoverProvider", Op::Hover)?;
                let (uri, pos, resolved) = Self::locate(&server, &file, query)?;
                let hover = server
                    .request::<HoverRequest>(
                        HoverParams {
                            text_document_position_params: position_params(&uri, pos),
                            work_done_progress_params: WorkDoneProgressParams::default(),
                        },
                        self.options.request_timeout,
                    )
                    .await;
                let hover = Self::nothing_here(&server, hover)?;
                let markdown = hover.map(|h| match h.contents {
                    HoverContents::Scalar(s) => marked(s),
                    HoverContents::Array(v) => {
                        v.into_iter().map(marked).collect::<Vec<_>>().join("\n\n")
                    }
                    HoverContents::Markup(m) => m.value,
                });
                let markdown = markdown.filter(|m| !m.trim().is_empty());
                if markdown.is_none() {
                    self.trust_empty(&server, &file).await?;
                }
                let content = match markdown {
                    Some(m) => HoverContent::Markdown(m),
                    None => HoverContent::SourceLine(
                        text::line_at(&file.text, query.line as usize - 1)
                            .unwrap_or_default()
                            .to_owned(),
                    ),
                };
                Ok(HoverResult { resolved, content })
            },
        )
        .await
    }
}

fn marked(s: MarkedString) -> String {
    match s {
        MarkedString::String(s) => s,
        MarkedString::LanguageString(l) => format!("```{}\n{}\n```", l.language, l.value),
    }
}
