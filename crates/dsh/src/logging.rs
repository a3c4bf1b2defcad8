//! Logging: `tracing` to stderr (stdout is the MCP protocol), and
//! optionally appended to a file.

use std::path::Path;

use anyhow::Context as _;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// Installs the global subscriber. `DSH_LOG` wins over `level`.
pub fn init(level: Option<&str>, file: Option<&Path>) -> anyhow::Result<()> {
    let filter = std::env::var("DSH_LOG")
        .ok()
        .or_else(|| level.map(str::to_owned))
        .unwrap_or_else(|| "info,rmcp=warn".to_owned());
    let filter =
        EnvFilter::try_new(&filter).with_context(|| format!("invalid log filter {filter:?}"))?;
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let file_layer = match file {
        Some(path) => {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .with_context(|| format!("cannot open log file {}", path.display()))?;
            Some(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::sync::Mutex::new(f))
                    .with_ansi(false),
            )
        }
        None => None,
    };
    tracing_subscriber::registry()
        .with(filter)
        .with(stderr)
        .with(file_layer)
        .try_init()
        .context("logging was already set up")?;
    Ok(())
}
