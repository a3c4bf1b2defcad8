//! The credential formats imported from Betterleaks' rule file, kept as
//! data in `rules/imported.toml` (where they came from, the selection,
//! what was left out and why, and Betterleaks' MIT licence are said at
//! its top). The build turns that file into the constants below
//! (`build.rs`); `cargo run -p redact --example import_rules` writes it
//! anew from a newer upstream revision (see the crate doc).

use crate::rules::{Discard, RuleSpec};

include!(concat!(env!("OUT_DIR"), "/imported.rs"));
