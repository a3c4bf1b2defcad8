//! `diagnostics`: the errors and warnings the server computed for a file's
//! content on disk at the time of the query (see the server's
//! `fresh_diagnostics` for the proof), errors first.

use lsp_seam::{DiagnosticItem, DiagnosticsQuery, DiagnosticsResult, LspError, Op, Severity};
use lsp_types::{DiagnosticSeverity, NumberOrString};

use super::StdioLspProvider;
use crate::text;

impl StdioLspProvider {
    pub(super) async fn diagnostics_impl(
        &self,
        query: &DiagnosticsQuery,
    ) -> Result<DiagnosticsResult, LspError> {
        self.run(
            Op::Diagnostics,
            &query.path,
            &query.progress,
            &query.access,
            &query.workspace,
            |server, file| async move {
                let language_id = server
                    .config
                    .language_id(&file.path)
                    .unwrap_or_default()
                    .to_owned();
                let (raw, proof) = server
                    .fresh_diagnostics(
                        &file.path,
                        &file.text,
                        &language_id,
                        self.options.request_timeout.max(self.options.ready_timeout),
                    )
                    .await?;
                let mut items: Vec<DiagnosticItem> = raw
                    .into_iter()
                    .map(|d| {
                        let index = d.range.start.line as usize;
                        let line_text = text::line_at(&file.text, index).unwrap_or_default();
                        let chars = text::from_server_offset(
                            line_text,
                            d.range.start.character,
                            server.encoding,
                        );
                        DiagnosticItem {
                            line: d.range.start.line.saturating_add(1),
                            column: u32::try_from(chars + 1).unwrap_or(u32::MAX),
                            severity: severity(d.severity),
                            code: d.code.map(|c| match c {
                                NumberOrString::Number(n) => n.to_string(),
                                NumberOrString::String(s) => s,
                            }),
                            source: d.source,
                            message: d.message,
                            line_text: line_text.trim_end_matches('\r').to_owned(),
                        }
                    })
                    .collect();
                items.sort_by(|a, b| {
                    (a.severity, a.line, a.column, &a.message)
                        .cmp(&(b.severity, b.line, b.column, &b.message))
                });
                items.dedup();
                let listed = |i: &DiagnosticItem| {
                    query.all_severities
                        || matches!(i.severity, Severity::Error | Severity::Warning)
                };
                let unlisted = items.iter().filter(|i| !listed(i)).count();
                items.retain(listed);
                Ok(DiagnosticsResult {
                    path: file.path.clone(),
                    items,
                    unlisted,
                    proof,
                })
            },
        )
        .await
    }
}

/// The seam's severity; a diagnostic without one is an error (the
/// protocol leaves it to the client, and hiding an error is worse).
fn severity(s: Option<DiagnosticSeverity>) -> Severity {
    match s {
        Some(DiagnosticSeverity::WARNING) => Severity::Warning,
        Some(DiagnosticSeverity::INFORMATION) => Severity::Information,
        Some(DiagnosticSeverity::HINT) => Severity::Hint,
        _ => Severity::Error,
    }
}
