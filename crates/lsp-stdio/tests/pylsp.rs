//! A second real server, python-lsp-server, configured only through
//! `ServerConfig` (as the host does from `[lsp.servers.pylsp]`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use lsp_seam::*;
use lsp_stdio::{LspConfig, ServerConfig, build_router};
use pretty_assertions::assert_eq;

fn pylsp_config() -> LspConfig {
    let mut config = LspConfig {
        options: options(),
        ..LspConfig::default()
    };
    config.servers.insert(
        "pylsp".into(),
        ServerConfig {
            command: "pylsp".into(),
            extensions: [(".py".to_owned(), "python".to_owned())].into(),
            root_markers: vec!["pyproject.toml".into()],
            ..ServerConfig::default()
        },
    );
    config
}

#[test]
fn pylsp_answers_definition_and_symbols() {
    if !test_support::needs(&["pylsp"]) {
        return;
    }
    let config = pylsp_config();
    require_binary(
        &config.servers["pylsp"],
        "python3 -m venv .venv && .venv/bin/pip install 'python-lsp-server==1.15.0', then put .venv/bin on PATH",
    );
    let (_dir, root) = fixture_copy("python-project");
    let (router, providers) = build_router(&config).unwrap();
    let main = root.join("main.py");
    let geometry = root.join("geometry.py");

    let definition = RT
        .block_on(router.dispatch(&Request::Definition(at(&main, 4, "total_area"))))
        .unwrap();
    assert_eq!(
        definition,
        Answer::Definition(DefinitionResult {
            resolved: Resolved {
                path: main.clone(),
                line: 4,
                column: 7,
                symbol: Some("total_area".into()),
            },
            items: vec![DefinitionItem {
                path: geometry.clone(),
                line: 14,
                column: 5,
                external: false,
                body: vec![
                    NumberedLine {
                        line: 14,
                        text: "def total_area(shapes):".into()
                    },
                    NumberedLine {
                        line: 15,
                        text: "    \"\"\"The sum of the areas of `shapes`.\"\"\"".into()
                    },
                    NumberedLine {
                        line: 16,
                        text: "    return sum(s.area() for s in shapes)".into()
                    },
                ],
                body_omitted_lines: 0,
            }],
            withheld: Withheld::default(),
        })
    );

    let symbols = RT
        .block_on(router.dispatch(&Request::Symbols(SymbolsQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: geometry.clone(),
            query: None,
        })))
        .unwrap();
    let Answer::Symbols(symbols) = symbols else {
        panic!("{symbols:?}")
    };
    let got: Vec<(String, &str, u32, u32, Option<String>)> = symbols
        .symbols
        .iter()
        .map(|s| {
            (
                s.name.clone(),
                s.kind,
                s.line,
                s.end_line,
                s.container.clone(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("Circle".into(), "class", 4, 11, None),
            ("__init__".into(), "method", 7, 8, Some("Circle".into())),
            ("radius".into(), "field", 8, 8, Some("__init__".into())),
            ("area".into(), "method", 10, 11, Some("Circle".into())),
            ("total_area".into(), "function", 14, 16, None),
            ("s".into(), "variable", 16, 16, Some("total_area".into())),
        ]
    );

    let pids: Vec<i32> = providers
        .iter()
        .flat_map(|p| p.servers())
        .map(|s| s.pid)
        .collect();
    assert_eq!(pids.len(), 1);
    for p in &providers {
        RT.block_on(p.shutdown());
    }
    drop(providers);
    drop(router);
    test_support::wait_until("the pylsp server's session ends", || {
        !session_alive(pids[0])
    });
}
