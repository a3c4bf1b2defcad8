//! `definition`: where the symbol at a position is defined, with its body
//! (from the server's whole range, or the innermost symbol of the file's
//! outline around the name).

use lsp_seam::{
    DefinitionItem, DefinitionResult, LspError, NumberedLine, Op, PositionQuery, Withheld,
};
use lsp_types::request::GotoDefinition;
use lsp_types::{
    DocumentSymbolResponse, GotoDefinitionParams, GotoDefinitionResponse, PartialResultParams,
    Position, Range, Url, WorkDoneProgressParams,
};

use super::StdioLspProvider;
use super::files::{Files, url_path};
use super::query::{position_params, validate_line};
use super::symbols::{flatten_ranges, last_line};
use crate::server::Server;
use crate::text;

impl StdioLspProvider {
    pub(super) async fn definition_impl(
        &self,
        query: &PositionQuery,
    ) -> Result<DefinitionResult, LspError> {
        validate_line(query)?;
        self.run(
            Op::Definition,
            &query.path,
            &query.progress,
            &query.access,
            &query.workspace,
            |server, file| async move {
                self.unsupported(&server, "definitionProvider", Op::Definition)?;
                let (uri, pos, resolved) = Self::locate(&server, &file, query)?;
                let answer = server
                    .request::<GotoDefinition>(
                        GotoDefinitionParams {
                            text_document_position_params: position_params(&uri, pos),
                            work_done_progress_params: WorkDoneProgressParams::default(),
                            partial_result_params: PartialResultParams::default(),
                        },
                        self.options.request_timeout,
                    )
                    .await;
                let answer = Self::nothing_here(&server, answer)?;
                // (target, name position, whole range if known)
                let targets: Vec<(Url, Position, Option<Range>)> = match answer {
                    None => vec![],
                    Some(GotoDefinitionResponse::Scalar(l)) => vec![(l.uri, l.range.start, None)],
                    Some(GotoDefinitionResponse::Array(ls)) => ls
                        .into_iter()
                        .map(|l| (l.uri, l.range.start, None))
                        .collect(),
                    Some(GotoDefinitionResponse::Link(links)) => links
                        .into_iter()
                        .map(|l| {
                            (
                                l.target_uri,
                                l.target_selection_range.start,
                                Some(l.target_range),
                            )
                        })
                        .collect(),
                };
                if targets.is_empty() {
                    self.trust_empty(&server, &file).await?;
                }
                let mut files = Files::new(&query.access);
                let mut items = Vec::new();
                let mut withheld = Withheld::default();
                for (uri, name_pos, range) in targets {
                    let path = url_path(&uri);
                    // A site in a file the caller may not read is left
                    // out before anything of it is read or sent.
                    let text = match files.load(&path) {
                        Ok(text) => text,
                        Err(denied) => {
                            withheld.add(&denied);
                            continue;
                        }
                    };
                    let range = match range {
                        Some(r) => Some(r),
                        None => {
                            self.enclosing_symbol_range(
                                &server,
                                &uri,
                                text.as_deref().map(String::as_str),
                                name_pos,
                            )
                            .await
                        }
                    };
                    let (line, column) = files.position(&path, name_pos, server.encoding);
                    let (first, last) = match range {
                        Some(r) => (
                            r.start.line.min(name_pos.line),
                            last_line(&r).max(name_pos.line),
                        ),
                        None => (name_pos.line, name_pos.line),
                    };
                    let cap = self.options.max_body_lines.max(1);
                    let shown_last = last.min(first.saturating_add(cap - 1));
                    let body: Vec<NumberedLine> = match text {
                        Some(text) => text
                            .split('\n')
                            .enumerate()
                            .skip(first as usize)
                            .take((shown_last - first + 1) as usize)
                            .map(|(i, l)| NumberedLine {
                                line: u32::try_from(i + 1).unwrap_or(u32::MAX),
                                text: l.strip_suffix('\r').unwrap_or(l).to_owned(),
                            })
                            .collect(),
                        None => vec![],
                    };
                    items.push(DefinitionItem {
                        external: !path.starts_with(&server.root),
                        path,
                        line,
                        column,
                        body_omitted_lines: last - shown_last,
                        body,
                    });
                }
                Ok(DefinitionResult {
                    resolved,
                    items,
                    withheld,
                })
            },
        )
        .await
    }

    /// The range of the innermost document symbol whose name is at `pos`
    /// (for servers that answer definitions without a whole range);
    /// `text` is the file's, read by the caller under the query's read
    /// policy.
    async fn enclosing_symbol_range(
        &self,
        server: &Server,
        uri: &Url,
        text: Option<&str>,
        pos: Position,
    ) -> Option<Range> {
        let path = url_path(uri);
        if server.config.outline_open_only && !server.is_open(&path) {
            // Not opened only to be outlined (see `outline_open_only`).
            let text = text?;
            let line = text::line_at(text, pos.line as usize)?;
            let column = text::from_server_offset(line, pos.character, server.encoding);
            let last = text::c_construct_end(text, pos.line as usize, column)?;
            return Some(Range {
                start: Position::new(pos.line, 0),
                // The last line's end.
                end: Position::new(u32::try_from(last).ok()?, u32::MAX),
            });
        }
        if !server.supports("documentSymbolProvider") {
            return None;
        }
        // Some servers (clangd) outline only documents they have open.
        if let Some(language_id) = self.config.language_id(&path)
            && let Some(text) = text.filter(|t| t.len() as u64 <= self.options.max_file_bytes)
        {
            server.sync_document(&path, text, language_id).ok()?;
        }
        let answer = self.outline(server, uri).await.ok()??;
        let ranges: Vec<(Range, Range)> = match answer {
            DocumentSymbolResponse::Flat(symbols) => symbols
                .into_iter()
                .filter(|s| s.location.uri == *uri)
                .map(|s| (s.location.range, s.location.range))
                .collect(),
            DocumentSymbolResponse::Nested(symbols) => {
                let mut out = Vec::new();
                flatten_ranges(&symbols, &mut out);
                out
            }
        };
        ranges
            .into_iter()
            .filter(|(range, selection)| {
                contains(selection, pos) || (range.start.line == pos.line && contains(range, pos))
            })
            .min_by_key(|(range, _)| last_line(range) - range.start.line)
            .map(|(range, _)| range)
    }
}

fn contains(range: &Range, pos: Position) -> bool {
    (range.start.line, range.start.character) <= (pos.line, pos.character)
        && (pos.line, pos.character) <= (range.end.line, range.end.character)
}
