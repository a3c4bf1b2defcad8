//! The benchmarks of dsh, kept out of the product's crates.
//!
//! Each measurement is a binary of this crate (`src/bin/bench_*.rs`), run
//! by `cargo xtask bench <name> [--quick]` (release build; `--quick`: a
//! short smoke run on the debug build) or directly with
//! `cargo run --release -p bench --bin bench_<what>`. The library holds
//! what several of them share: [`terminal`], the settle-latency and flood
//! measurements of a terminal service and of the designs it replaces (the
//! raw pty floor, tmux, a polling model).
//!
//! The binaries: `bench_spawn`, `bench_bash_layers`, `bench_terminal`,
//! `bench_pty`, `bench_dsh_memory`, `bench_jobs`, `bench_lsp`,
//! `bench_workspace`, `bench_sandbox` and `bench_redact`; the other
//! benchmarks `cargo xtask bench` names (`ui` among them) are Python
//! scripts of `tests/bench`.
//!
//! No crate depends on this one, and it is never published.

pub mod terminal;
