//! `dsh workspace …` and `dsh session …` (being written).

use std::path::Path;

/// `dsh workspace` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum WorkspaceCommand {
    /// List workspaces in display order.
    List,
}

/// `dsh session` subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum SessionCommand {
    /// List sessions.
    List,
}

/// Runs a `dsh workspace` command against the store in `data_dir`.
pub fn run_workspace(_command: WorkspaceCommand, _data_dir: &Path) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}

/// Runs a `dsh session` command against the store in `data_dir`.
pub fn run_session(_command: SessionCommand, _data_dir: &Path) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
