//! Tidy check over the crate graph, run by `cargo test -p xtask`: the
//! layering ARCHITECTURE.md states, read from `cargo metadata`.
//!
//! * Every crate of the workspace names only the workspace crates
//!   [`LAYERS`] allows it in its `[dependencies]` (dev-dependencies are
//!   free: tests may reach anything). A new arrow is a change of the
//!   architecture: add it here and to ARCHITECTURE.md together.
//! * Only the daemon and the MCP host (which wire them) and the bench
//!   crate (which measures them) name a provider; a provider never names
//!   another.
//! * The seams depend on `thiserror` alone: no runtime, no pty, no
//!   JSON-RPC.
//! * The daemon's wire (`daemon-wire`) names none of the daemon's other
//!   crates, and its two sides, the client (`daemon-client`) and the MCP
//!   host (`mcp-host`), never name each other: they meet in the wire.
//! * Only the MCP host speaks MCP (`rmcp`); only the store's provider knows
//!   `sled`; `process-tree` is runtime-free unless its `tokio` feature is
//!   asked for.
//! * No crate depends on `bench`, and `test-support` only as a
//!   dev-dependency.

use std::collections::{BTreeMap, BTreeSet};

/// A crate's dependency as the check sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dep {
    /// The crate's name.
    pub name: String,
    /// A dev-dependency (tests, benches and examples only).
    pub dev: bool,
    /// Optional (behind a feature).
    pub optional: bool,
}

/// The providers: implementations of a seam, chosen by the host.
pub const PROVIDERS: [&str; 4] = ["terminal-pty", "lsp-stdio", "workspace-sled", "picker-fs"];

/// The crates that may name a provider in `[dependencies]`.
pub const WIRING: [&str; 3] = ["daemon", "mcp-host", "bench"];

/// The daemon's crates, from the wire up: the wire, its two sides, the
/// demo (a host in process) and the server that wires them.
pub const DAEMON_CRATES: [&str; 5] = ["daemon-wire", "daemon-client", "mcp-host", "demo", "daemon"];

/// The daemon's wire, which names none of [`DAEMON_CRATES`].
pub const WIRE: &str = "daemon-wire";

/// The two sides of the daemon's socket, which meet only in the [`WIRE`].
pub const SIDES: [&str; 2] = ["daemon-client", "mcp-host"];

/// The crate that speaks MCP.
pub const MCP: &str = "mcp-host";

/// The seams, whose only dependency is `thiserror`.
pub const SEAMS: [&str; 3] = ["terminal-seam", "lsp-seam", "picker-seam"];

/// The workspace crates each crate may name in `[dependencies]`.
pub const LAYERS: &[(&str, &[&str])] = &[
    ("error-code", &[]),
    ("output-text", &[]),
    ("process-tree", &[]),
    ("test-support", &[]),
    ("terminal-seam", &[]),
    ("lsp-seam", &[]),
    ("picker-seam", &[]),
    ("workspace", &[]),
    ("sandbox", &[]),
    ("redact", &[]),
    (
        "jobs",
        &["error-code", "output-text", "process-tree", "terminal-seam"],
    ),
    (
        "terminal-pty",
        &["output-text", "process-tree", "terminal-seam"],
    ),
    ("lsp-stdio", &["lsp-seam", "process-tree"]),
    ("workspace-sled", &["workspace"]),
    ("picker-fs", &["picker-seam"]),
    (
        "tools-catalog",
        &[
            "error-code",
            "jobs",
            "lsp-seam",
            "output-text",
            "process-tree",
            "redact",
            "sandbox",
            "terminal-seam",
        ],
    ),
    ("daemon-wire", &["error-code", "workspace"]),
    (
        "ui",
        &[
            "daemon-wire",
            "error-code",
            "picker-seam",
            "terminal-seam",
            "workspace",
        ],
    ),
    (
        "daemon-client",
        &[
            "daemon-wire",
            "process-tree",
            "sandbox",
            "tools-catalog",
            "ui",
        ],
    ),
    (
        "mcp-host",
        &[
            "daemon-wire",
            "lsp-seam",
            "lsp-stdio",
            "process-tree",
            "redact",
            "sandbox",
            "terminal-pty",
            "terminal-seam",
            "tools-catalog",
            "ui",
            "workspace",
            "workspace-sled",
        ],
    ),
    (
        "demo",
        &["daemon-client", "mcp-host", "process-tree", "tools-catalog"],
    ),
    (
        "daemon",
        &[
            "daemon-client",
            "daemon-wire",
            "jobs",
            "mcp-host",
            "picker-fs",
            "picker-seam",
            "process-tree",
            "redact",
            "terminal-seam",
            "tools-catalog",
            "ui",
            "workspace",
            "workspace-sled",
        ],
    ),
    (
        "dsh",
        &[
            "daemon",
            "daemon-client",
            "daemon-wire",
            "demo",
            "mcp-host",
            "tools-catalog",
            "workspace",
        ],
    ),
    (
        "bench",
        &[
            "jobs",
            "lsp-seam",
            "lsp-stdio",
            "process-tree",
            "redact",
            "sandbox",
            "terminal-pty",
            "terminal-seam",
            "tools-catalog",
            "workspace",
            "workspace-sled",
        ],
    ),
    ("xtask", &["mcp-host", "tools-catalog"]),
];

/// Every package of the workspace and its dependencies, from
/// `cargo metadata --no-deps`.
pub fn read_graph(metadata: &serde_json::Value) -> BTreeMap<String, Vec<Dep>> {
    let mut graph = BTreeMap::new();
    for package in metadata["packages"].as_array().into_iter().flatten() {
        let Some(name) = package["name"].as_str() else {
            continue;
        };
        let deps = package["dependencies"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|d| {
                Some(Dep {
                    name: d["name"].as_str()?.to_owned(),
                    dev: d["kind"].as_str() == Some("dev"),
                    optional: d["optional"].as_bool().unwrap_or(false),
                })
            })
            .collect();
        graph.insert(name.to_owned(), deps);
    }
    graph
}

/// What breaks the layering, one line per finding.
pub fn violations(graph: &BTreeMap<String, Vec<Dep>>) -> Vec<String> {
    let ours: BTreeSet<&str> = graph.keys().map(String::as_str).collect();
    let layers: BTreeMap<&str, &[&str]> = LAYERS.iter().copied().collect();
    let mut found = Vec::new();
    for (name, deps) in graph {
        let name = name.as_str();
        let Some(allowed) = layers.get(name) else {
            found.push(format!(
                "{name}: not in the layer table (xtask/src/deps.rs LAYERS); place it there and in ARCHITECTURE.md"
            ));
            continue;
        };
        for dep in deps.iter().filter(|d| !d.dev) {
            let dep_name = dep.name.as_str();
            if PROVIDERS.contains(&dep_name) && !WIRING.contains(&name) {
                found.push(format!(
                    "{name} names the provider {dep_name}: only the daemon and the MCP host choose and wire providers (depend on the seam)"
                ));
            } else if dep_name == "bench" {
                found.push(format!("{name} depends on bench, which no crate may"));
            } else if dep_name == "test-support" {
                found.push(format!(
                    "{name} names test-support outside its dev-dependencies"
                ));
            } else if ours.contains(dep_name) && !allowed.contains(&dep_name) {
                found.push(format!(
                    "{name} depends on {dep_name}, an arrow the layers do not have"
                ));
            }
            if SEAMS.contains(&name) && dep_name != "thiserror" {
                found.push(format!(
                    "the seam {name} depends on {dep_name}: a seam depends on thiserror alone"
                ));
            }
            if dep_name == "rmcp" && name != MCP {
                found.push(format!(
                    "{name} depends on rmcp: only the MCP host knows MCP"
                ));
            }
            if name == WIRE && DAEMON_CRATES.contains(&dep_name) {
                found.push(format!(
                    "the wire {WIRE} depends on {dep_name}: it depends on nothing of the daemon's other crates"
                ));
            }
            if SIDES.contains(&name) && SIDES.contains(&dep_name) && name != dep_name {
                found.push(format!(
                    "{name} depends on {dep_name}: the client and the MCP host meet only in the wire"
                ));
            }
            if dep_name == "sled" && !["workspace-sled", "bench"].contains(&name) {
                found.push(format!(
                    "{name} depends on sled: only the store's provider knows its backend"
                ));
            }
            if name == "process-tree" && dep_name == "tokio" && !dep.optional {
                found.push("process-tree depends on tokio outside its `tokio` feature".to_owned());
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn dep(name: &str) -> Dep {
        Dep {
            name: name.to_owned(),
            dev: false,
            optional: false,
        }
    }

    /// The workspace as `cargo metadata` reads it keeps every rule.
    #[test]
    fn the_crate_graph_keeps_the_layers() {
        let output = std::process::Command::new(env!("CARGO"))
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(crate::root())
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let metadata: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
        let graph = read_graph(&metadata);
        assert!(graph.len() >= 15, "found only {:?}", graph.keys());
        let found = violations(&graph);
        assert!(found.is_empty(), "{}", found.join("\n"));
    }

    /// The check is not blind: each kind of break is named.
    #[test]
    fn each_break_is_found() {
        let mut graph: BTreeMap<String, Vec<Dep>> = LAYERS
            .iter()
            .map(|(name, deps)| ((*name).to_owned(), deps.iter().map(|d| dep(d)).collect()))
            .collect();
        assert_eq!(violations(&graph), Vec::<String>::new());
        graph.get_mut("ui").unwrap().push(dep("terminal-pty"));
        graph.get_mut("terminal-seam").unwrap().push(dep("tokio"));
        graph.get_mut("tools-catalog").unwrap().push(dep("rmcp"));
        graph.get_mut("jobs").unwrap().push(dep("sandbox"));
        graph.get_mut("sandbox").unwrap().push(dep("test-support"));
        graph.get_mut("process-tree").unwrap().push(dep("tokio"));
        graph.get_mut("workspace").unwrap().push(dep("sled"));
        graph
            .get_mut("daemon-wire")
            .unwrap()
            .push(dep("daemon-client"));
        graph
            .get_mut("daemon-client")
            .unwrap()
            .push(dep("mcp-host"));
        graph.insert("newcomer".to_owned(), Vec::new());
        // A dev-dependency reaches anything.
        graph.get_mut("ui").unwrap().push(Dep {
            dev: true,
            ..dep("lsp-stdio")
        });
        let found = violations(&graph);
        // The two arrows out of the daemon's layers break the table too.
        assert_eq!(found.len(), 12, "{found:#?}");
        for needle in [
            "ui names the provider terminal-pty",
            "the seam terminal-seam depends on tokio",
            "tools-catalog depends on rmcp",
            "jobs depends on sandbox",
            "sandbox names test-support",
            "process-tree depends on tokio outside",
            "workspace depends on sled",
            "newcomer: not in the layer table",
            "the wire daemon-wire depends on daemon-client",
            "daemon-client depends on mcp-host: the client and the MCP host meet only in the wire",
        ] {
            assert!(
                found.iter().any(|f| f.contains(needle)),
                "{needle}: {found:#?}"
            );
        }
    }
}
