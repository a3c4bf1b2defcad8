//! `dsh demo`: the seed's scenarios, run live (being written).

/// Which scenario to run.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Scenario {
    /// Debug a Python function in three steps: one-shot bash vs a terminal.
    Terminal,
    /// Three kinds of background work in one job list.
    Jobs,
}

/// Runs a scenario and prints its transcripts and counts.
pub fn run(_scenario: Scenario) -> anyhow::Result<()> {
    anyhow::bail!("not implemented yet")
}
