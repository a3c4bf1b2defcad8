//! The `initialize` handshake: what the client declares it can do, the
//! position encoding agreed on, and what the server declared it can do.

use std::time::Duration;

use lsp_seam::{LspError, UnavailableReason};
use lsp_types::notification::Initialized;
use lsp_types::request::Initialize;
use lsp_types::{
    ClientCapabilities, DidChangeWatchedFilesClientCapabilities, DocumentSymbolClientCapabilities,
    GeneralClientCapabilities, GotoCapability, HoverClientCapabilities, InitializeParams,
    InitializedParams, MarkupKind, PositionEncodingKind, PublishDiagnosticsClientCapabilities,
    ServerCapabilities, TextDocumentClientCapabilities, WindowClientCapabilities,
    WorkspaceClientCapabilities, WorkspaceFolder,
};
use serde_json::Value;

use super::{Failure, Server, path_url};
use crate::text::Encoding;

impl Server {
    /// Initializes the server, telling it `client_pid` as its client's
    /// pid: `initialize`, the encoding and capabilities it answered, then
    /// `initialized`.
    pub(super) async fn initialize(&mut self, client_pid: Option<u32>) -> Result<(), LspError> {
        let root_url = path_url(&self.root)?;
        #[allow(deprecated)]
        let params = InitializeParams {
            process_id: client_pid,
            root_uri: Some(root_url.clone()),
            initialization_options: self.config.initialization_options.clone(),
            capabilities: client_capabilities(),
            workspace_folders: Some(vec![WorkspaceFolder {
                uri: root_url,
                name: self
                    .root
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_else(|| "root".into()),
            }]),
            client_info: Some(lsp_types::ClientInfo {
                name: "dsh".into(),
                version: Some(env!("CARGO_PKG_VERSION").into()),
            }),
            ..InitializeParams::default()
        };
        let init = match self
            .request::<Initialize>(
                params,
                self.options.request_timeout.max(Duration::from_secs(30)),
            )
            .await
        {
            Ok(init) => init,
            Err(failure) => {
                let why = match failure {
                    Failure::Lsp(e) => e.to_string(),
                    Failure::Dead => "the server exited during initialize".into(),
                    Failure::ContentModified => "content modified".into(),
                };
                return Err(LspError::Unavailable {
                    reason: UnavailableReason::SpawnFailed,
                    message: format!("{}: {why}{}", self.config.name, self.stderr_tail_text()),
                });
            }
        };
        self.encoding = match &init.capabilities.position_encoding {
            Some(e) if *e == PositionEncodingKind::UTF8 => Encoding::Utf8,
            Some(_) | None => Encoding::Utf16,
        };
        self.capabilities = capabilities_json(&init.capabilities);
        self.socket
            .notify::<Initialized>(InitializedParams {})
            .map_err(|_| LspError::Unavailable {
                reason: UnavailableReason::SpawnFailed,
                message: format!("{}: exited after initialize", self.config.name),
            })?;
        self.shared.mark_initialized();
        Ok(())
    }

    /// Whether the server declared `capability` (a field of its
    /// `ServerCapabilities`) with a value other than `false`.
    pub fn supports(&self, capability: &str) -> bool {
        self.capabilities
            .get(capability)
            .is_some_and(|v| !v.is_null() && *v != Value::Bool(false))
    }
}

/// The server's capabilities as JSON, for [`Server::supports`].
fn capabilities_json(caps: &ServerCapabilities) -> Value {
    serde_json::to_value(caps).unwrap_or(Value::Null)
}

/// What the client declares it can do: both position encodings, links
/// for definitions, Markdown hovers, a nested outline, configuration,
/// watched files, progress, versioned published diagnostics (no pulled
/// ones: pyright answers a pull that races the change before it with the
/// previous content's) and rust-analyzer's server status.
fn client_capabilities() -> ClientCapabilities {
    ClientCapabilities {
        general: Some(GeneralClientCapabilities {
            position_encodings: Some(vec![
                PositionEncodingKind::UTF8,
                PositionEncodingKind::UTF16,
            ]),
            ..GeneralClientCapabilities::default()
        }),
        text_document: Some(TextDocumentClientCapabilities {
            definition: Some(GotoCapability {
                dynamic_registration: None,
                link_support: Some(true),
            }),
            hover: Some(HoverClientCapabilities {
                dynamic_registration: None,
                content_format: Some(vec![MarkupKind::Markdown, MarkupKind::PlainText]),
            }),
            document_symbol: Some(DocumentSymbolClientCapabilities {
                hierarchical_document_symbol_support: Some(true),
                ..DocumentSymbolClientCapabilities::default()
            }),
            publish_diagnostics: Some(PublishDiagnosticsClientCapabilities {
                version_support: Some(true),
                ..PublishDiagnosticsClientCapabilities::default()
            }),
            ..TextDocumentClientCapabilities::default()
        }),
        workspace: Some(WorkspaceClientCapabilities {
            configuration: Some(true),
            workspace_folders: Some(true),
            did_change_watched_files: Some(DidChangeWatchedFilesClientCapabilities {
                dynamic_registration: Some(true),
                relative_pattern_support: Some(true),
            }),
            ..WorkspaceClientCapabilities::default()
        }),
        window: Some(WindowClientCapabilities {
            work_done_progress: Some(true),
            ..WindowClientCapabilities::default()
        }),
        experimental: Some(serde_json::json!({ "serverStatusNotification": true })),
    }
}
