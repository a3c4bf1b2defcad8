//! `dsh mcp --standalone`: one MCP client on stdin/stdout, served in this
//! process with no daemon (for embedders and sandboxes where no daemon may
//! run). The store is taken for one operation at a time.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tools_catalog::Preset;

use crate::host::{ConfigLoader, ConnectionSetup, Host, HostConfig, serve_connection};
use crate::store::StoreAccess;

/// How `dsh mcp --standalone` was started.
pub struct StandaloneOptions {
    /// `--preset`.
    pub preset: Option<Preset>,
    /// `--config`, re-read on reload.
    pub config_path: Option<PathBuf>,
    /// The store's directory.
    pub data_dir: PathBuf,
    /// Reads the config file.
    pub loader: ConfigLoader,
}

/// Serves one client on stdin/stdout until it disconnects or the process
/// is asked to stop; SIGHUP reloads the config.
pub async fn serve_stdio(config: HostConfig, options: StandaloneOptions) -> anyhow::Result<()> {
    crate::processes::start();
    let host = Arc::new(Host::new(
        config.clone(),
        options.loader,
        StoreAccess::per_operation(&options.data_dir),
        vec![options.data_dir.clone(), crate::paths::runtime_dir()],
    ));
    let stop = CancellationToken::new();
    let reload_host = host.clone();
    let mut sighup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while sighup.recv().await.is_some() {
            reload_host.reload().await;
        }
    });
    let mut sigterm = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let stopper = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            _ = sigterm.recv() => tracing::info!("SIGTERM: stopping"),
            _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: stopping"),
        }
        stopper.cancel();
    });
    tracing::info!(
        version = env!("CARGO_PKG_VERSION"),
        "dsh mcp serving on stdio (standalone)"
    );
    let setup = ConnectionSetup {
        label: "mcp-stdio".to_owned(),
        preset: options.preset,
        config_path: options.config_path,
        config: Some(config),
        fallback_cwd: None,
        env: None,
        peer_pid: None,
    };
    let served = serve_connection(
        host.clone(),
        setup,
        tokio::io::stdin(),
        tokio::io::stdout(),
        stop,
    )
    .await;
    tokio::time::timeout(Duration::from_secs(10), host.stop_language_servers())
        .await
        .ok();
    served
}
