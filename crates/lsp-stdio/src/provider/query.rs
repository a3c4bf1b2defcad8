//! One query's path to a project's server: the read policy asked first,
//! the documents synced from disk, the wait for readiness, `ContentModified`
//! retried, a dead or stuck server restarted; and what every op needs of
//! it (the query's position on the server, its capabilities, an error that
//! means "nothing here").

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lsp_seam::{
    Address, LspError, Op, PositionQuery, ProgressSink, ReadAccess, Resolved, UnavailableReason,
    Workspace,
};
use lsp_types::{Position, TextDocumentIdentifier, TextDocumentPositionParams, Url};

use super::root::ServerKey;
use super::{StdioLspProvider, absolute};
use crate::server::{Failure, Server, path_url};
use crate::text;

/// A file read for one query.
pub(super) struct FileText {
    pub(super) path: PathBuf,
    pub(super) text: String,
}

pub(super) fn position_params(uri: &Url, pos: Position) -> TextDocumentPositionParams {
    TextDocumentPositionParams {
        text_document: TextDocumentIdentifier { uri: uri.clone() },
        position: pos,
    }
}

pub(super) fn validate_line(query: &PositionQuery) -> Result<(), LspError> {
    if query.line == 0 {
        return Err(LspError::InvalidArgument {
            field: "line".into(),
            message: "lines are 1-based".into(),
        });
    }
    match &query.address {
        Address::Column(0) => Err(LspError::InvalidArgument {
            field: "column".into(),
            message: "columns are 1-based".into(),
        }),
        Address::Column(_) | Address::Symbol { .. } => Ok(()),
    }
}

impl StdioLspProvider {
    /// Runs `query` against the server of `path`'s project: syncs
    /// documents, waits for readiness, retries `ContentModified`, restarts
    /// a stuck or dead server. What it waits for goes to `progress`.
    pub(super) async fn run<T, F, Fut>(
        &self,
        op: Op,
        path: &Path,
        progress: &ProgressSink,
        access: &ReadAccess,
        workspace: &Workspace,
        query: F,
    ) -> Result<T, LspError>
    where
        F: Fn(Arc<Server>, Arc<FileText>) -> Fut,
        Fut: Future<Output = Result<T, Failure>>,
    {
        let path = absolute(path)?;
        // Before anything is read, started or sent: a file the caller may
        // not read is not queried at all.
        access.check(&path)?;
        if !std::fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            return Err(LspError::FileNotFound { path });
        }
        let report = |message: &str, percentage: Option<u32>| progress.report(message, percentage);
        let Some(language_id) = self.config.language_id(&path).map(str::to_owned) else {
            return Err(LspError::Unavailable {
                reason: UnavailableReason::NoProvider,
                message: format!("{} does not handle {}", self.config.name, path.display()),
            });
        };
        let root = self.root_of(&path, access).await?;
        let key = ServerKey::new(root, workspace);
        let root = &key.root;
        let _in_flight = self.slot(&key).begin_query();
        let mut stuck_restarts = 0;
        let max_attempts = self.options.restart_budget + 3;
        for _ in 0..max_attempts {
            if !self.is_running(&key) {
                let name = self.config_for(&key).await?.name.clone();
                report(&format!("starting {name} for {}", root.display()), None);
            }
            let server = self.server_for(&key).await?;
            let text = text::read_capped(&path, self.options.max_file_bytes, access)?;
            let file = Arc::new(FileText {
                path: path.clone(),
                text,
            });
            let outcome = async {
                server.flush_watcher().await;
                let mut changed = server.refresh_documents(access)?;
                changed.retain(|(p, _)| *p != file.path);
                server.sync_document(&file.path, &file.text, &language_id)?;
                server
                    .wait_ready(self.options.ready_timeout, &report)
                    .await?;
                if server.config.wait_for_diagnostics && !changed.is_empty() {
                    server
                        .wait_diagnostics(&changed, self.options.ready_timeout)
                        .await?;
                }
                let mut retries = 0;
                loop {
                    match query(server.clone(), file.clone()).await {
                        Err(Failure::ContentModified)
                            if retries < self.options.content_modified_retries =>
                        {
                            tokio::time::sleep(Duration::from_millis(50 << retries)).await;
                            retries += 1;
                            server.refresh_documents(access)?;
                            server
                                .wait_ready(self.options.ready_timeout, &report)
                                .await?;
                        }
                        other => return other,
                    }
                }
            }
            .await;
            match outcome {
                Ok(v) => return Ok(v),
                Err(Failure::Lsp(LspError::Timeout { timeout_ms, .. })) => {
                    return Err(LspError::Timeout { op, timeout_ms });
                }
                Err(Failure::Lsp(e)) => return Err(e),
                Err(Failure::Dead) => {
                    // The connection broke: make sure the slot sees it dead.
                    server.kill();
                    continue;
                }
                Err(Failure::ContentModified) if stuck_restarts == 0 => {
                    stuck_restarts += 1;
                    self.restart_stuck(&key, &server).await;
                }
                Err(Failure::ContentModified) => {
                    return Err(LspError::ServerError {
                        code: Some(-32801),
                        message: "content modified: the server kept answering ContentModified, also after a restart".into(),
                    });
                }
            }
        }
        Err(LspError::Unavailable {
            reason: UnavailableReason::Crashed,
            message: format!("{} kept dying for {}", self.config.name, root.display()),
        })
    }

    /// An error by which the server says there is nothing at the position
    /// (see [`ServerConfig::nothing_here_errors`]) is an empty answer.
    pub(super) fn nothing_here<T>(
        server: &Server,
        answer: Result<Option<T>, Failure>,
    ) -> Result<Option<T>, Failure> {
        match answer {
            Err(Failure::Lsp(LspError::ServerError { message, .. }))
                if server
                    .config
                    .nothing_here_errors
                    .iter()
                    .any(|m| message.contains(m.as_str())) =>
            {
                Ok(None)
            }
            other => other,
        }
    }

    pub(super) fn unsupported(
        &self,
        server: &Server,
        capability: &str,
        op: Op,
    ) -> Result<(), Failure> {
        if server.supports(capability) {
            Ok(())
        } else {
            Err(Failure::Lsp(LspError::UnsupportedOperation {
                op,
                server: server.config.name.clone(),
            }))
        }
    }

    /// Resolves a query's address to a server position and the echo.
    pub(super) fn locate(
        server: &Server,
        file: &FileText,
        query: &PositionQuery,
    ) -> Result<(Url, Position, Resolved), Failure> {
        let at = text::resolve(&file.text, query.line, &query.address)?;
        let line = text::line_at(&file.text, query.line as usize - 1).unwrap_or_default();
        let pos = Position {
            line: query.line - 1,
            character: text::to_server_offset(line, at.chars, server.encoding),
        };
        let resolved = Resolved {
            path: file.path.clone(),
            line: query.line,
            column: u32::try_from(at.chars + 1).unwrap_or(u32::MAX),
            symbol: at.symbol,
        };
        Ok((path_url(&file.path)?, pos, resolved))
    }
}
