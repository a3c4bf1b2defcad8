//! `references`: every use of the symbol at a position, grouped by file,
//! each with its line.

use std::collections::BTreeMap;
use std::path::PathBuf;

use lsp_seam::{
    FileReferences, LspError, Op, PositionQuery, Reference, ReferencesDetail, ReferencesResult,
    Withheld,
};
use lsp_types::request::References;
use lsp_types::{PartialResultParams, ReferenceContext, ReferenceParams, WorkDoneProgressParams};

use super::StdioLspProvider;
use super::files::{Files, url_path};
use super::query::{position_params, validate_line};

/// Longest snippet kept for a reference, in characters.
const SNIPPET_CHARS: usize = 200;

impl StdioLspProvider {
    pub(super) async fn references_impl(
        &self,
        query: &PositionQuery,
    ) -> Result<ReferencesResult, LspError> {
        validate_line(query)?;
        self.run(
            Op::References,
            &query.path,
            &query.progress,
            &query.access,
            &query.workspace,
            |server, file| async move {
                self.unsupported(&server, "referencesProvider", Op::References)?;
                let (uri, pos, resolved) = Self::locate(&server, &file, query)?;
                let locations = server
                    .request::<References>(
                        ReferenceParams {
                            text_document_position: position_params(&uri, pos),
                            work_done_progress_params: WorkDoneProgressParams::default(),
                            partial_result_params: PartialResultParams::default(),
                            context: ReferenceContext {
                                include_declaration: true,
                            },
                        },
                        self.options.request_timeout,
                    )
                    .await;
                let locations = Self::nothing_here(&server, locations)?.unwrap_or_default();
                if locations.is_empty() {
                    self.trust_empty(&server, &file).await?;
                }
                let mut files = Files::new(&query.access);
                let mut grouped: BTreeMap<PathBuf, Vec<Reference>> = BTreeMap::new();
                let mut withheld = Withheld::default();
                for loc in locations {
                    let path = url_path(&loc.uri);
                    if let Err(denied) = files.load(&path) {
                        withheld.add(&denied);
                        continue;
                    }
                    let (line, column) = files.position(&path, loc.range.start, server.encoding);
                    let snippet = files
                        .line(&path, loc.range.start.line)
                        .map(|l| l.trim().chars().take(SNIPPET_CHARS).collect());
                    grouped.entry(path).or_default().push(Reference {
                        line,
                        column,
                        snippet,
                    });
                }
                let mut total = 0;
                let files: Vec<FileReferences> = grouped
                    .into_iter()
                    .map(|(path, mut refs)| {
                        refs.sort_by_key(|r| (r.line, r.column));
                        refs.dedup_by_key(|r| (r.line, r.column));
                        total += refs.len();
                        FileReferences {
                            path,
                            count: refs.len(),
                            refs,
                        }
                    })
                    .collect();
                Ok(ReferencesResult {
                    resolved,
                    files,
                    total,
                    detail: ReferencesDetail::Full,
                    withheld,
                })
            },
        )
        .await
    }
}
