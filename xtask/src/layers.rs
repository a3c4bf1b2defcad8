//! Tidy check over the daemon's module graph, run by `cargo test -p xtask`.
//!
//! The `daemon` crate is layered: the wire [`protocol`](PROTOCOL) depends
//! on no other module of the crate; the client and the server both depend
//! on it and never on each other; and no module reaches, through any
//! chain of `crate::` references, back to itself. The check reads every
//! `crate::…` path in the crate's sources (comments left out, test code
//! included: a test that reaches across a layer ties the layers as much
//! as the code does) and names the top-level module each one lands in.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The daemon's wire protocol: the leaf every side depends on.
const PROTOCOL: &str = "protocol";
/// The two sides of the socket, which never reach into each other.
const SIDES: [&str; 2] = ["client", "server"];

/// Which top-level modules each top-level module of the crate whose
/// sources are in `src` references (`crate::x`, `crate::{x, y}`).
/// A module is a file `src/x.rs` or a directory `src/x/`; the crate root
/// is left out.
pub fn module_graph(src: &Path) -> std::io::Result<BTreeMap<String, BTreeSet<String>>> {
    let mut texts: BTreeMap<String, String> = BTreeMap::new();
    for entry in std::fs::read_dir(src)? {
        let path = entry?.path();
        let Some(stem) = path.file_stem().and_then(|s| s.to_str()) else {
            continue;
        };
        if path.is_dir() {
            let mut files = Vec::new();
            collect_rs(&path, &mut files)?;
            let text = texts.entry(stem.to_owned()).or_default();
            for file in files {
                text.push_str(&std::fs::read_to_string(file)?);
                text.push('\n');
            }
        } else if path.extension().is_some_and(|e| e == "rs") && stem != "lib" && stem != "main" {
            texts
                .entry(stem.to_owned())
                .or_default()
                .push_str(&std::fs::read_to_string(&path)?);
        }
    }
    let known: BTreeSet<String> = texts.keys().cloned().collect();
    Ok(texts
        .iter()
        .map(|(module, text)| {
            let used = crate_references(text)
                .into_iter()
                .filter(|m| m != module && known.contains(m))
                .collect();
            (module.clone(), used)
        })
        .collect())
}

fn collect_rs(dir: &Path, found: &mut Vec<std::path::PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            collect_rs(&path, found)?;
        } else if path.extension().is_some_and(|e| e == "rs") {
            found.push(path);
        }
    }
    Ok(())
}

/// The first segments of the `crate::` paths in `text`, comments (`//`
/// to the end of the line) left out.
pub fn crate_references(text: &str) -> BTreeSet<String> {
    let code: String = text
        .lines()
        .map(|line| match line.find("//") {
            Some(at) => &line[..at],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        // `my_crate::x` is another crate's path.
        if code[..at]
            .chars()
            .next_back()
            .is_some_and(|c| c.is_alphanumeric() || c == '_')
        {
            continue;
        }
        let rest = code[at + "crate::".len()..].trim_start();
        if let Some(group) = rest.strip_prefix('{') {
            // The first segment of each item of the group, at depth 0.
            let mut depth = 0usize;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' if depth == 0 => break,
                    '}' => depth -= 1,
                    ',' if depth == 0 => item_start = true,
                    c if c.is_whitespace() => {}
                    _ if item_start && depth == 0 => {
                        let name = ident(&group[i..]);
                        if !name.is_empty() {
                            found.insert(name);
                        }
                        item_start = false;
                    }
                    _ => {}
                }
            }
        } else {
            let name = ident(rest);
            if !name.is_empty() {
                found.insert(name);
            }
        }
    }
    found
}

/// A cycle of `graph` (its modules in order, the first repeated at the
/// end), if there is one.
pub fn find_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    #[derive(Clone, Copy, PartialEq)]
    enum Mark {
        Open,
        Done,
    }
    fn visit(
        node: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        marks: &mut BTreeMap<String, Mark>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        match marks.get(node) {
            Some(Mark::Done) => return None,
            Some(Mark::Open) => {
                let from = path.iter().position(|n| n == node).unwrap_or(0);
                let mut cycle = path[from..].to_vec();
                cycle.push(node.to_owned());
                return Some(cycle);
            }
            None => {}
        }
        marks.insert(node.to_owned(), Mark::Open);
        path.push(node.to_owned());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, marks, path) {
                return Some(cycle);
            }
        }
        path.pop();
        marks.insert(node.to_owned(), Mark::Done);
        None
    }
    let mut marks = BTreeMap::new();
    for node in graph.keys() {
        if let Some(cycle) = visit(node, graph, &mut marks, &mut Vec::new()) {
            return Some(cycle);
        }
    }
    None
}

/// What breaks the daemon's layering in `graph`: a cycle, a reference
/// out of the protocol, or one between the client and the server.
pub fn layering_faults(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut faults = Vec::new();
    if let Some(cycle) = find_cycle(graph) {
        faults.push(format!("an import cycle: {}", cycle.join(" → ")));
    }
    if let Some(used) = graph.get(PROTOCOL)
        && !used.is_empty()
    {
        faults.push(format!(
            "`{PROTOCOL}` depends on nothing of the daemon, but uses {used:?}"
        ));
    }
    for (side, other) in [(SIDES[0], SIDES[1]), (SIDES[1], SIDES[0])] {
        if graph.get(side).is_some_and(|used| used.contains(other)) {
            faults.push(format!(
                "`{side}` uses `{other}`: the two sides meet only in `{PROTOCOL}`"
            ));
        }
    }
    faults
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// The daemon's modules form layers (see the module doc).
    #[test]
    fn the_daemon_s_modules_form_layers_without_a_cycle() {
        let src = crate::root().join("crates/daemon/src");
        let graph = module_graph(&src).unwrap();
        let faults = layering_faults(&graph);
        assert!(
            faults.is_empty(),
            "the daemon's layering is broken:\n{}\n(the graph: {graph:#?})",
            faults.join("\n")
        );
        for module in [PROTOCOL, SIDES[0], SIDES[1]] {
            assert!(
                graph.contains_key(module),
                "no module `{module}`: {graph:?}"
            );
        }
    }

    /// The binary reaches the daemon only through its typed client: it
    /// names no request, reply or framing of the protocol.
    #[test]
    fn the_binary_never_speaks_the_protocol_itself() {
        let src = crate::root().join("crates/dsh/src");
        let mut offenders = Vec::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let text = std::fs::read_to_string(&path).unwrap();
            for (i, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or("");
                let speaks = ["Request", "Reply", "Hello", "exchange", "framing"]
                    .iter()
                    .any(|name| code.contains(&format!("protocol::{name}")))
                    || code.contains("protocol::{");
                if speaks {
                    offenders.push(format!("{}:{}: {line}", path.display(), i + 1));
                }
            }
        }
        assert!(
            offenders.is_empty(),
            "use daemon::client::Client instead:\n{}",
            offenders.join("\n")
        );
    }

    #[test]
    fn references_are_read_from_paths_and_groups_but_not_comments() {
        let text = "\
use crate::protocol::{Hello, Reply};
use crate::{paths::DaemonPaths, store::{A, B}, host};
// use crate::server::x;
/// see [`crate::daemon`]
let x = crate::client::connect(); // crate::ps
let y = other_crate::server::f();
";
        let found: Vec<String> = crate_references(text).into_iter().collect();
        assert_eq!(found, ["client", "host", "paths", "protocol", "store"]);
    }

    #[test]
    fn a_cycle_is_found_and_named() {
        let graph = |edges: &[(&str, &str)]| {
            let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            for (a, b) in edges {
                g.entry((*a).into()).or_default().insert((*b).into());
                g.entry((*b).into()).or_default();
            }
            g
        };
        assert_eq!(
            find_cycle(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])),
            None
        );
        assert_eq!(
            find_cycle(&graph(&[("a", "b"), ("b", "c"), ("c", "b")])),
            Some(vec!["b".into(), "c".into(), "b".into()])
        );
        let faults = layering_faults(&graph(&[
            ("protocol", "store"),
            ("client", "server"),
            ("server", "protocol"),
        ]));
        assert_eq!(faults.len(), 2, "{faults:?}");
    }
}
