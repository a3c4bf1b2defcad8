//! What a call runs against: the caller, the long-lived runtime, settings.

use std::path::PathBuf;
use std::sync::Arc;

use jobs::{JobRegistry, JobsConfig};

use crate::Owner;
use crate::job_tools::SubagentSettings;

/// Limits and switches the tools read; rebuilt on a config reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Largest text a result carries before head+tail truncation (bytes).
    pub max_result_bytes: usize,
    /// The agent command behind `subagent`; `None` makes it unavailable.
    pub subagent: Option<SubagentSettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_result_bytes: 32 * 1024,
            subagent: None,
        }
    }
}

/// The long-lived services the tools borrow (terminals, jobs, language
/// servers). One runtime serves every owner and survives catalog rebuilds.
pub struct Runtime {
    /// Every background job of every owner.
    pub jobs: JobRegistry,
    /// Every terminal of every owner.
    pub terminals: Arc<dyn terminal_seam::TerminalService>,
    /// Language servers, routed by file extension.
    pub lsp: lsp_seam::Router,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime").finish_non_exhaustive()
    }
}

impl Runtime {
    /// A runtime over the given terminal service and language-server
    /// routes, with the given job limits.
    pub fn new(
        jobs: JobsConfig,
        terminals: Arc<dyn terminal_seam::TerminalService>,
        lsp: lsp_seam::Router,
    ) -> Self {
        Self {
            jobs: JobRegistry::new(jobs),
            terminals,
            lsp,
        }
    }

    /// Ends everything `owner` started (running jobs, terminals) and
    /// forgets it: called when a connection ends.
    pub async fn end_owner(&self, owner: &Owner) {
        // Jobs first: a background send holds its terminal's send slot.
        let ended = self.jobs.end_owner(owner).await;
        for (id, detail) in ended.failures {
            tracing::warn!("job {id} of a closed connection could not be ended: {detail}");
        }
        self.terminals.end_owner(owner).await;
    }
}

/// Who is calling and from where.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The calling agent.
    pub owner: Owner,
    /// The session's working directory: relative `cwd` arguments resolve
    /// against it, and commands run in it by default.
    pub cwd: PathBuf,
    /// The runtime the call uses.
    pub runtime: Arc<Runtime>,
    /// The environment every process the caller starts gets in place of
    /// the server's own (the one its MCP client gave the bridge); `None`:
    /// the server's.
    pub env: Option<Arc<Vec<(String, String)>>>,
}
