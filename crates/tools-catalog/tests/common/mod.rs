//! The harness of the contract tests: a scripted model calling the real
//! tool layer in-process.
//!
//! It builds what the MCP host builds — a [`Runtime`] over the real
//! terminal service (`terminal-pty`: real PTYs) and the real job registry,
//! and the full [`Catalog`] over it — and calls tools with the JSON
//! arguments a model sends. What it checks on every call is the envelope
//! every tool promises: a result is one text block and a JSON object; an
//! error is `[error CODE] message` with `{error: {code, message,
//! retryable}}`, and its code is one the tool declares in the catalog.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;
use terminal_pty::{PtyTerminals, TerminalConfig};
use tools_catalog::{
    CallContext, Catalog, Confinement, JobsConfig, Owner, Preset, Runtime, Settings, ToolError,
    ToolReply,
};

/// A runtime as the host builds it: real terminals, real jobs, no
/// language server.
pub fn runtime() -> Arc<Runtime> {
    // Orphans of the tests' commands come back to the test process, as
    // they come back to the host.
    let _ = process_tree::become_subreaper();
    Arc::new(Runtime::new(
        JobsConfig::default(),
        Arc::new(PtyTerminals::new(TerminalConfig::default())),
        lsp_seam::Router::new(),
    ))
}

/// A session directory of the test's own (canonical, so the tools
/// report it as given).
pub fn session_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().canonicalize().unwrap();
    (dir, path)
}

/// One connected model: an owner, a catalog and a call context.
pub struct Model {
    pub catalog: Catalog,
    pub cx: CallContext,
}

impl Model {
    /// A model on `runtime` named `owner`, in `cwd`, with the full preset.
    pub fn new(runtime: Arc<Runtime>, owner: &str, cwd: &Path, settings: &Settings) -> Self {
        Self {
            catalog: Catalog::new(Preset::Full, settings),
            cx: CallContext {
                owner: Owner::new(owner),
                cwd: cwd.to_path_buf(),
                runtime,
                env: None,
                progress: None,
                confinement: Arc::new(Confinement::none()),
                ask: None,
                resume: None,
                secrets: None,
            },
        }
    }

    /// Calls `tool` with `args` as the host does, and checks the
    /// envelope of whatever comes back.
    pub async fn call(&self, tool: &str, args: Value) -> Result<ToolReply, ToolError> {
        let handle = self
            .catalog
            .get(tool)
            .unwrap_or_else(|| panic!("the full catalog has no `{tool}`"))
            .clone();
        let outcome = handle.call(&self.cx, args).await;
        match &outcome {
            Ok(reply) => {
                assert!(
                    reply.structured.is_object(),
                    "`{tool}`: structured content must be an object: {}",
                    reply.structured
                );
                assert!(!reply.text.is_empty(), "`{tool}`: an empty text block");
            }
            Err(e) => {
                let declared = handle.spec().error_codes;
                assert!(
                    declared.contains(&e.code),
                    "`{tool}` answered {} but declares only {declared:?}",
                    e.code
                );
                assert_eq!(e.text(), format!("[error {}] {}", e.code, e.message));
                let structured = e.structured();
                assert_eq!(structured["error"]["code"], e.code.as_str());
                assert_eq!(structured["error"]["message"], e.message.as_str());
                assert_eq!(structured["error"]["retryable"], e.retryable);
            }
        }
        outcome
    }

    /// The whole reply of a call that must succeed.
    pub async fn reply(&self, tool: &str, args: Value) -> ToolReply {
        match self.call(tool, args.clone()).await {
            Ok(reply) => reply,
            Err(e) => panic!("`{tool}` {args} failed: {}", e.text()),
        }
    }

    /// The structured result of a call that must succeed.
    pub async fn ok(&self, tool: &str, args: Value) -> Value {
        self.reply(tool, args).await.structured
    }

    /// The error object (`{code, message, retryable, …}`) of a call that
    /// must fail.
    pub async fn err(&self, tool: &str, args: Value) -> Value {
        match self.call(tool, args.clone()).await {
            Ok(reply) => panic!("`{tool}` {args} succeeded: {}", reply.text),
            Err(e) => e.structured()["error"].clone(),
        }
    }

    /// Ends everything this model started, as the host does when its
    /// connection ends.
    pub async fn end(&self) {
        self.cx.runtime.end_owner(&self.cx.owner).await;
    }
}

/// No process of session `sid` is left running (waits for the end to
/// show in `/proc`).
pub async fn session_is_gone(sid: i64) {
    let sid = i32::try_from(sid).unwrap();
    test_support::wait_until_async(&format!("session {sid} is empty"), || {
        process_tree::live_session_members(sid).is_empty()
    })
    .await;
}
