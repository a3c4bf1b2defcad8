//! `symbols`: a file's outline, or a workspace search by name; the
//! server's symbols as the seam's, in the files the query may read.

use std::path::Path;

use lsp_seam::{LspError, Op, SymbolItem, SymbolScope, SymbolsQuery, SymbolsResult, Withheld};
use lsp_types::request::{DocumentSymbolRequest, WorkspaceSymbolRequest};
use lsp_types::{
    DocumentSymbol, DocumentSymbolParams, DocumentSymbolResponse, OneOf, PartialResultParams,
    Range, SymbolInformation, SymbolKind, TextDocumentIdentifier, Url, WorkDoneProgressParams,
    WorkspaceSymbolParams, WorkspaceSymbolResponse,
};

use super::StdioLspProvider;
use super::files::{Permits, url_path};
use crate::server::{Failure, Server, path_url};

impl StdioLspProvider {
    pub(super) async fn symbols_impl(
        &self,
        query: &SymbolsQuery,
    ) -> Result<SymbolsResult, LspError> {
        if query.query.as_deref().is_some_and(|q| q.trim().is_empty()) {
            return Err(LspError::InvalidArgument {
                field: "query".into(),
                message: "must not be empty (omit it for the file's outline)".into(),
            });
        }
        self.run(
            Op::Symbols,
            &query.path,
            &query.progress,
            &query.access,
            &query.workspace,
            |server, file| async move {
                let mut permits = Permits::new(&query.access);
                match &query.query {
                    None => {
                        self.unsupported(&server, "documentSymbolProvider", Op::Symbols)?;
                        let uri = path_url(&file.path)?;
                        let answer = self.outline(&server, &uri).await?;
                        let mut symbols = Vec::new();
                        match answer {
                            None => {}
                            Some(DocumentSymbolResponse::Flat(flat)) => {
                                symbols.extend(flat.into_iter().map(information));
                            }
                            Some(DocumentSymbolResponse::Nested(nested)) => {
                                flatten_symbols(&nested, None, &file.path, &mut symbols);
                            }
                        }
                        let withheld = permitted(&mut symbols, &mut permits);
                        symbols.sort_by_key(|s| (s.line, s.end_line));
                        Ok(SymbolsResult {
                            scope: SymbolScope::Outline {
                                path: file.path.clone(),
                            },
                            symbols,
                            withheld,
                        })
                    }
                    Some(q) => {
                        self.unsupported(&server, "workspaceSymbolProvider", Op::Symbols)?;
                        let answer = server
                            .request::<WorkspaceSymbolRequest>(
                                WorkspaceSymbolParams {
                                    query: q.clone(),
                                    work_done_progress_params: WorkDoneProgressParams::default(),
                                    partial_result_params: PartialResultParams::default(),
                                },
                                self.options.request_timeout,
                            )
                            .await?;
                        if answer.as_ref().is_none_or(|a| match a {
                            WorkspaceSymbolResponse::Flat(v) => v.is_empty(),
                            WorkspaceSymbolResponse::Nested(v) => v.is_empty(),
                        }) {
                            self.trust_empty(&server, &file).await?;
                        }
                        let mut symbols = match answer {
                            None => vec![],
                            Some(WorkspaceSymbolResponse::Flat(flat)) => {
                                flat.into_iter().map(information).collect()
                            }
                            Some(WorkspaceSymbolResponse::Nested(nested)) => nested
                                .into_iter()
                                .map(|s| {
                                    let (path, line, end_line) = match s.location {
                                        OneOf::Left(l) => (
                                            url_path(&l.uri),
                                            l.range.start.line + 1,
                                            last_line(&l.range) + 1,
                                        ),
                                        OneOf::Right(w) => (url_path(&w.uri), 1, 1),
                                    };
                                    SymbolItem {
                                        name: s.name,
                                        kind: kind_word(s.kind),
                                        path,
                                        line,
                                        end_line,
                                        container: s.container_name,
                                    }
                                })
                                .collect(),
                        };
                        let withheld = permitted(&mut symbols, &mut permits);
                        Ok(SymbolsResult {
                            scope: SymbolScope::Workspace { query: q.clone() },
                            symbols,
                            withheld,
                        })
                    }
                }
            },
        )
        .await
    }

    /// The server's outline of the document `uri` (`documentSymbol`).
    pub(super) async fn outline(
        &self,
        server: &Server,
        uri: &Url,
    ) -> Result<Option<DocumentSymbolResponse>, Failure> {
        server
            .request::<DocumentSymbolRequest>(
                DocumentSymbolParams {
                    text_document: TextDocumentIdentifier { uri: uri.clone() },
                    work_done_progress_params: WorkDoneProgressParams::default(),
                    partial_result_params: PartialResultParams::default(),
                },
                self.options.request_timeout,
            )
            .await
    }
}

fn kind_word(kind: SymbolKind) -> &'static str {
    const WORDS: [(SymbolKind, &str); 26] = [
        (SymbolKind::FILE, "file"),
        (SymbolKind::MODULE, "module"),
        (SymbolKind::NAMESPACE, "namespace"),
        (SymbolKind::PACKAGE, "package"),
        (SymbolKind::CLASS, "class"),
        (SymbolKind::METHOD, "method"),
        (SymbolKind::PROPERTY, "property"),
        (SymbolKind::FIELD, "field"),
        (SymbolKind::CONSTRUCTOR, "constructor"),
        (SymbolKind::ENUM, "enum"),
        (SymbolKind::INTERFACE, "interface"),
        (SymbolKind::FUNCTION, "function"),
        (SymbolKind::VARIABLE, "variable"),
        (SymbolKind::CONSTANT, "constant"),
        (SymbolKind::STRING, "string"),
        (SymbolKind::NUMBER, "number"),
        (SymbolKind::BOOLEAN, "boolean"),
        (SymbolKind::ARRAY, "array"),
        (SymbolKind::OBJECT, "object"),
        (SymbolKind::KEY, "key"),
        (SymbolKind::NULL, "null"),
        (SymbolKind::ENUM_MEMBER, "enum_member"),
        (SymbolKind::STRUCT, "struct"),
        (SymbolKind::EVENT, "event"),
        (SymbolKind::OPERATOR, "operator"),
        (SymbolKind::TYPE_PARAMETER, "type_parameter"),
    ];
    WORDS
        .iter()
        .find(|(k, _)| *k == kind)
        .map_or("unknown", |(_, w)| w)
}

/// The 0-based last line a range covers (an end at column 0 of a later
/// line does not cover that line).
pub(super) fn last_line(range: &Range) -> u32 {
    if range.end.character == 0 && range.end.line > range.start.line {
        range.end.line - 1
    } else {
        range.end.line
    }
}

/// Drops the symbols in files the query may not read; says how many.
fn permitted(symbols: &mut Vec<SymbolItem>, permits: &mut Permits) -> Withheld {
    let mut withheld = Withheld::default();
    symbols.retain(|s| match permits.permit(&s.path) {
        Ok(()) => true,
        Err(denied) => {
            withheld.add(&denied);
            false
        }
    });
    withheld
}

#[allow(deprecated)]
fn information(s: SymbolInformation) -> SymbolItem {
    SymbolItem {
        name: s.name,
        kind: kind_word(s.kind),
        path: url_path(&s.location.uri),
        line: s.location.range.start.line + 1,
        end_line: last_line(&s.location.range) + 1,
        container: s.container_name,
    }
}

pub(super) fn flatten_symbols(
    symbols: &[DocumentSymbol],
    container: Option<&str>,
    path: &Path,
    out: &mut Vec<SymbolItem>,
) {
    for s in symbols {
        out.push(SymbolItem {
            name: s.name.clone(),
            kind: kind_word(s.kind),
            path: path.to_owned(),
            line: s.selection_range.start.line + 1,
            end_line: last_line(&s.range) + 1,
            container: container.map(str::to_owned),
        });
        if let Some(children) = &s.children {
            flatten_symbols(children, Some(&s.name), path, out);
        }
    }
}

pub(super) fn flatten_ranges(symbols: &[DocumentSymbol], out: &mut Vec<(Range, Range)>) {
    for s in symbols {
        out.push((s.range, s.selection_range));
        if let Some(children) = &s.children {
            flatten_ranges(children, out);
        }
    }
}
