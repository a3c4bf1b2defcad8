//! Logging: `tracing` to stderr (stdout is the MCP protocol), and
//! optionally appended to a file that only its owner can read.
//!
//! Tool payloads never reach the log: the MCP library logs whole requests
//! and responses at `debug`, so its target stays at `info` or quieter unless
//! the filter names it.

use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::Path;

use anyhow::Context as _;
use tracing::level_filters::LevelFilter;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

/// The filter when neither `DSH_LOG` nor `[log] level` is set.
const DEFAULT_FILTER: &str = "info,rmcp=warn";

/// The MCP library's tracing target.
const MCP_TARGET: &str = "rmcp";

/// Installs the global subscriber. `DSH_LOG` wins over `level`.
pub fn init(level: Option<&str>, file: Option<&Path>) -> anyhow::Result<()> {
    let filter = std::env::var("DSH_LOG")
        .ok()
        .or_else(|| level.map(str::to_owned))
        .unwrap_or_else(|| DEFAULT_FILTER.to_owned());
    let filter = with_quiet_mcp(&filter);
    let filter =
        EnvFilter::try_new(&filter).with_context(|| format!("invalid log filter {filter:?}"))?;
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(false);
    let file_layer = match file {
        Some(path) => Some(
            tracing_subscriber::fmt::layer()
                .with_writer(std::sync::Mutex::new(open_private(path)?))
                .with_ansi(false),
        ),
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

/// Opens the log file for appending, readable and writable by its owner
/// only: created 0600, and an existing file's mode tightened to 0600.
fn open_private(path: &Path) -> anyhow::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot open log file {}", path.display()))?;
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read log file {}", path.display()))?;
    if meta.is_file() && meta.permissions().mode() & 0o777 != 0o600 {
        file.set_permissions(std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("cannot make log file {} private", path.display()))?;
    }
    Ok(file)
}

/// `filter` with the MCP library's target capped at `info` when the filter
/// would let its `debug` or `trace` events through without naming it: those
/// events carry whole tool calls and results (commands, typed text, output).
fn with_quiet_mcp(filter: &str) -> String {
    let directives: Vec<&str> = filter
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .collect();
    if directives.iter().any(|d| d.starts_with(MCP_TARGET)) {
        return filter.to_owned();
    }
    // The default for every target is the directive that names no target.
    let default = directives
        .iter()
        .rev()
        .find_map(|d| d.parse::<LevelFilter>().ok());
    match default {
        Some(level) if level > LevelFilter::INFO => format!("{filter},{MCP_TARGET}=info"),
        Some(_) | None => filter.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pretty_assertions::assert_eq;

    #[test]
    fn the_mcp_library_stays_at_info_unless_named() {
        assert_eq!(with_quiet_mcp("debug"), "debug,rmcp=info");
        assert_eq!(
            with_quiet_mcp("trace,dsh=debug"),
            "trace,dsh=debug,rmcp=info"
        );
        assert_eq!(with_quiet_mcp("info,rmcp=warn"), "info,rmcp=warn");
        assert_eq!(with_quiet_mcp("debug,rmcp=trace"), "debug,rmcp=trace");
        assert_eq!(with_quiet_mcp("warn"), "warn");
        assert_eq!(with_quiet_mcp("dsh=debug"), "dsh=debug");
    }
}
