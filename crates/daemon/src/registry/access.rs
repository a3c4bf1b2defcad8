//! Where a registry command (`dsh workspace …`, `dsh session …`) runs: in
//! the daemon, through the typed [`Client`], or with `--standalone` on the
//! store itself for one locked span. Either way its error is one line that
//! says what to do next.

use std::path::PathBuf;

use serde::de::DeserializeOwned;

use daemon_client::paths::DaemonPaths;
use daemon_client::{Client, ClientError, StartSpec};
use daemon_wire::registry::RegistryOp;

/// Where a registry command runs.
pub enum RegistryAccess {
    /// In the daemon (started when none runs).
    Daemon(Client),
    /// On the store directly, one locked span.
    Standalone {
        /// The store's directory.
        data_dir: PathBuf,
    },
}

impl RegistryAccess {
    /// With `standalone`, the store in `data_dir` itself; else the daemon
    /// of `data_dir`, started (with `config`) when none answers.
    pub fn new(
        data_dir: PathBuf,
        standalone: bool,
        config: Option<PathBuf>,
    ) -> Result<Self, ClientError> {
        Ok(if standalone {
            RegistryAccess::Standalone { data_dir }
        } else {
            RegistryAccess::Daemon(Client::starting(
                DaemonPaths::new(&data_dir),
                StartSpec::this_program(config)?,
            ))
        })
    }

    /// Runs `op` and decodes its result; `T` is the operation's result
    /// type (see [`RegistryOp`]). A directory to register is made
    /// absolute first: the daemon's working directory is not ours.
    pub fn call<T: DeserializeOwned>(&self, mut op: RegistryOp) -> anyhow::Result<T> {
        if let RegistryOp::WorkspaceCreate { path, .. } = &mut op {
            *path = std::path::absolute(&*path).unwrap_or_else(|_| path.clone());
        }
        let value = match self {
            RegistryAccess::Daemon(client) => {
                return match client.registry(op) {
                    Ok(result) => Ok(result),
                    Err(ClientError::Refused(f)) => anyhow::bail!(f.message),
                    Err(e) => anyhow::bail!(e.to_string()),
                };
            }
            RegistryAccess::Standalone { data_dir } => {
                super::execute_standalone(data_dir, &op).map_err(|f| anyhow::anyhow!(f.message))?
            }
        };
        serde_json::from_value(value)
            .map_err(|e| anyhow::anyhow!("the registry's answer was not understood: {e}"))
    }
}
