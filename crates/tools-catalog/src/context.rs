//! What a call runs against: the caller, the long-lived runtime, settings.

use std::path::PathBuf;
use std::sync::Arc;

use crate::Owner;

/// Limits and switches the tools read; rebuilt on a config reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Largest text a result carries before head+tail truncation (bytes).
    pub max_result_bytes: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            max_result_bytes: 32 * 1024,
        }
    }
}

/// The long-lived services the tools borrow (terminals, jobs, language
/// servers). One runtime serves every owner and survives catalog rebuilds.
#[derive(Debug, Default)]
pub struct Runtime {}

impl Runtime {
    /// A runtime with no optional services wired.
    pub fn new() -> Self {
        Self {}
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
}
