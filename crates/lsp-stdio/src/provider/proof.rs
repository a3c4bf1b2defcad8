//! The proof an empty answer needs from a server whose readiness is its
//! own status (rust-analyzer): the file's project loaded with no warning
//! standing, and the file in a loaded crate.

use lsp_seam::{LspError, UnavailableReason};
use lsp_types::request::WorkspaceSymbolRequest;
use lsp_types::{
    DocumentSymbolResponse, OneOf, PartialResultParams, WorkDoneProgressParams,
    WorkspaceSymbolParams, WorkspaceSymbolResponse,
};

use super::StdioLspProvider;
use super::query::FileText;
use super::symbols::flatten_symbols;
use crate::config::ReadinessSignal;
use crate::server::{Failure, Server, path_url};

/// How many of a file's symbol names a readiness self-check looks up.
const PROOF_NAMES: usize = 3;

impl StdioLspProvider {
    /// Proof, before an empty answer is given, that it is not an artefact
    /// of a project that is not loaded. For servers whose readiness is
    /// their own status (rust-analyzer), idle is not proof: the file's
    /// project must be loaded with no load warning standing, and a symbol
    /// of the file's own outline must be found by a workspace search in
    /// this file (a file outside the loaded crates, or a project that
    /// failed to load, has an outline — it is parsed alone — but none of
    /// its symbols is in the index). Without the proof the query fails:
    /// `load_failed` naming the server's warning, or `no_project`.
    pub(super) async fn trust_empty(
        &self,
        server: &Server,
        file: &FileText,
    ) -> Result<(), Failure> {
        if server.config.readiness != ReadinessSignal::ServerStatus {
            return Ok(());
        }
        let not_proven = |why: String| {
            Failure::Lsp(LspError::Unavailable {
                reason: UnavailableReason::LoadFailed,
                message: format!(
                    "{} answered nothing for {}, but {why}: an empty answer would not be proof \
                     of nothing, so none is given. Fix the problem (for a Cargo project, `cargo \
                     metadata` and `cargo check` in {} show it); the server loads the project \
                     again when a manifest changes.",
                    server.config.name,
                    file.path.display(),
                    server.root.display()
                ),
            })
        };
        if let Some(warning) = server.status().warning {
            return Err(not_proven(format!(
                "it reports a problem with the project: {warning}"
            )));
        }
        if self.file_is_indexed(server, file).await? {
            return Ok(());
        }
        Err(Failure::Lsp(LspError::Unavailable {
            reason: UnavailableReason::NoProject,
            message: format!(
                "{} answered nothing for {}, but the file is in none of the crates it loaded \
                 for {} (none of the file's own symbols is found by a workspace search), so an \
                 empty answer would not be proof of nothing. A file is in a crate when a \
                 target's root reaches it through `mod` declarations.",
                server.config.name,
                file.path.display(),
                server.root.display()
            ),
        }))
    }

    /// Whether a workspace search finds, in `file`, one of the names of
    /// its own outline (the longest few, which a search limit is least
    /// likely to crowd out). A file with no symbols is not proven.
    async fn file_is_indexed(&self, server: &Server, file: &FileText) -> Result<bool, Failure> {
        let uri = path_url(&file.path)?;
        let outline = self.outline(server, &uri).await?;
        let mut names: Vec<String> = match outline {
            None => vec![],
            Some(DocumentSymbolResponse::Flat(flat)) => flat.into_iter().map(|s| s.name).collect(),
            Some(DocumentSymbolResponse::Nested(nested)) => {
                let mut items = Vec::new();
                flatten_symbols(&nested, None, &file.path, &mut items);
                items.into_iter().map(|s| s.name).collect()
            }
        };
        // Identifiers only: `impl Shape for Circle` is an outline entry,
        // not a name a search finds.
        names.retain(|n| !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_'));
        names.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        names.dedup();
        for name in names.into_iter().take(PROOF_NAMES) {
            let found = server
                .request::<WorkspaceSymbolRequest>(
                    WorkspaceSymbolParams {
                        query: name,
                        work_done_progress_params: WorkDoneProgressParams::default(),
                        partial_result_params: PartialResultParams::default(),
                    },
                    self.options.request_timeout,
                )
                .await?;
            let here = match found {
                None => false,
                Some(WorkspaceSymbolResponse::Flat(flat)) => {
                    flat.iter().any(|s| s.location.uri == uri)
                }
                Some(WorkspaceSymbolResponse::Nested(nested)) => {
                    nested.iter().any(|s| match &s.location {
                        OneOf::Left(l) => l.uri == uri,
                        OneOf::Right(w) => w.uri == uri,
                    })
                }
            };
            if here {
                return Ok(true);
            }
        }
        Ok(false)
    }
}
