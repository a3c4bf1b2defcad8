//! The benchmarks of dsh, kept out of the product's crates.
//!
//! Each measurement is a binary of this crate (`src/bin/bench_*.rs`), run
//! by `cargo xtask bench <name> [--quick]` (release build; `--quick`: a
//! short smoke run on the debug build) or directly with
//! `cargo run --release -p bench --bin bench_<what>`. The library holds
//! what several of them share: [`terminal`], the settle-latency and flood
//! measurements of a terminal service and of the designs it replaces.
//!
//! No crate depends on this one, and it is never published.

pub mod terminal;
