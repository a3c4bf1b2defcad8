//! The four ops and the error paths against a real, shared, warm
//! rust-analyzer on a copy of the fixture workspace.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use common::*;
use lsp_seam::*;
use lsp_stdio::{LspConfig, ServerConfig, StdioLspProvider, build_router};
use pretty_assertions::assert_eq;

struct Warm {
    root: PathBuf,
    provider: Arc<StdioLspProvider>,
}

/// One warm rust-analyzer shared by the tests of this binary.
static WARM: LazyLock<Warm> = LazyLock::new(|| {
    require_rust_analyzer();
    let (dir, root) = fixture_copy("rust-workspace");
    let provider = Arc::new(StdioLspProvider::rust_analyzer(options()).unwrap());
    // A `static` is never dropped: shut the server down and remove the
    // copy when the test process exits.
    let at_end = provider.clone();
    at_exit(move || {
        RT.block_on(at_end.shutdown());
        drop(dir);
    });
    RT.block_on(provider.wait_ready(&root.join("app/src/main.rs"), Duration::from_secs(120)))
        .unwrap();
    Warm { root, provider }
});

fn warm() -> (&'static Path, &'static StdioLspProvider) {
    (&WARM.root, &WARM.provider)
}

fn numbered(first: u32, lines: &[&str]) -> Vec<NumberedLine> {
    lines
        .iter()
        .enumerate()
        .map(|(i, l)| NumberedLine {
            line: first + i as u32,
            text: (*l).to_owned(),
        })
        .collect()
}

#[test]
fn definition_across_crates_after_non_ascii_text() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let main = root.join("app/src/main.rs");
    let got = RT
        .block_on(p.definition(&at(&main, 9, "total_area")))
        .unwrap();
    assert_eq!(
        got,
        DefinitionResult {
            resolved: Resolved {
                path: main.clone(),
                line: 9,
                column: 56,
                symbol: Some("total_area".into()),
            },
            items: vec![DefinitionItem {
                path: root.join("shapes/src/canvas.rs"),
                line: 17,
                column: 12,
                external: false,
                body: numbered(
                    16,
                    &[
                        "    /// The sum of all areas.",
                        "    pub fn total_area(&self) -> f64 {",
                        "        self.shapes.iter().map(|s| s.area()).sum()",
                        "    }",
                    ]
                ),
                body_omitted_lines: 0,
            }],
            withheld: Default::default(),
        }
    );
}

#[test]
fn definition_by_column_equals_definition_by_symbol() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let main = root.join("app/src/main.rs");
    let by_symbol = RT
        .block_on(p.definition(&at(&main, 9, "total_area")))
        .unwrap();
    let by_column = RT
        .block_on(p.definition(&PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: main.clone(),
            line: 9,
            address: Address::Column(60),
        }))
        .unwrap();
    assert_eq!(by_column.items, by_symbol.items);
    assert_eq!(
        by_column.resolved,
        Resolved {
            path: main,
            line: 9,
            column: 60,
            symbol: Some("total_area".into())
        }
    );
}

#[test]
fn definition_outside_the_project_is_external() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let lib = root.join("shapes/src/lib.rs");
    let got = RT.block_on(p.definition(&at(&lib, 20, "PI"))).unwrap();
    assert_eq!(got.items.len(), 1);
    let item = &got.items[0];
    assert!(item.external, "{item:?}");
    assert!(!item.path.starts_with(root), "{item:?}");
    assert!(
        item.body
            .iter()
            .any(|l| l.text.contains("pub const PI: f64")),
        "{item:?}"
    );
}

#[test]
fn references_grouped_by_file_with_snippets() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let canvas = root.join("shapes/src/canvas.rs");
    let got = RT
        .block_on(p.references(&at(&canvas, 17, "total_area")))
        .unwrap();
    let r = |line, column, snippet: &str| Reference {
        line,
        column,
        snippet: Some(snippet.into()),
    };
    assert_eq!(
        got,
        ReferencesResult {
            resolved: Resolved {
                path: canvas.clone(),
                line: 17,
                column: 12,
                symbol: Some("total_area".into()),
            },
            files: vec![
                FileReferences {
                    path: root.join("app/src/main.rs"),
                    count: 1,
                    refs: vec![r(
                        9,
                        56,
                        "let étiquette = \"Fläche ≈ 𝜋r²\"; let total = canvas.total_area();"
                    )],
                },
                FileReferences {
                    path: root.join("app/src/report.rs"),
                    count: 1,
                    refs: vec![r(
                        5,
                        39,
                        "println!(\"total area: {}\", canvas.total_area());"
                    )],
                },
                FileReferences {
                    path: canvas,
                    count: 1,
                    refs: vec![r(17, 12, "pub fn total_area(&self) -> f64 {")],
                },
            ],
            total: 3,
            detail: ReferencesDetail::Full,
            withheld: Default::default(),
        }
    );
}

#[test]
fn references_of_a_struct_used_across_files() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let canvas = root.join("shapes/src/canvas.rs");
    let got = RT
        .block_on(p.references(&at(&canvas, 6, "Canvas")))
        .unwrap();
    let per_file: Vec<(PathBuf, Vec<u32>)> = got
        .files
        .iter()
        .map(|f| (f.path.clone(), f.refs.iter().map(|r| r.line).collect()))
        .collect();
    assert_eq!(
        per_file,
        vec![
            (root.join("app/src/main.rs"), vec![1, 6]),
            (root.join("app/src/report.rs"), vec![1, 4]),
            (canvas.clone(), vec![6, 10, 12, 13]),
            (root.join("shapes/src/lib.rs"), vec![5]),
        ]
    );
    assert_eq!(got.total, 9);
}

#[test]
fn hover_gives_markdown() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let main = root.join("app/src/main.rs");
    let got = RT.block_on(p.hover(&at(&main, 7, "Circle"))).unwrap();
    assert_eq!(
        got.content,
        HoverContent::Markdown(
            "\n```rust\nshapes\n```\n\n```rust\npub struct Circle {\n    pub radius: f64,\n}\n```\n\n---\n\nA circle.".into()
        )
    );
}

#[test]
fn hover_without_content_gives_the_source_line() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let main = root.join("app/src/main.rs");
    let got = RT
        .block_on(p.hover(&PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: main,
            line: 5,
            address: Address::Column(12),
        }))
        .unwrap();
    assert_eq!(got.content, HoverContent::SourceLine("fn main() {".into()));
}

#[test]
fn symbols_outline_with_kinds_lines_and_containers() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let lib = root.join("shapes/src/lib.rs");
    let got = RT
        .block_on(p.symbols(&SymbolsQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: lib.clone(),
            query: None,
        }))
        .unwrap();
    let s = |name: &str, kind, line, end_line, container: Option<&str>| SymbolItem {
        name: name.into(),
        kind,
        path: lib.clone(),
        line,
        end_line,
        container: container.map(str::to_owned),
    };
    assert_eq!(
        got,
        SymbolsResult {
            scope: SymbolScope::Outline { path: lib.clone() },
            symbols: vec![
                s("canvas", "module", 3, 3, None),
                s("Shape", "interface", 8, 11, None),
                s("area", "method", 10, 10, Some("Shape")),
                s("Circle", "struct", 14, 16, None),
                s("radius", "field", 15, 15, Some("Circle")),
                s("impl Shape for Circle", "object", 18, 22, None),
                s("area", "method", 19, 21, Some("impl Shape for Circle")),
                s("Square", "struct", 25, 27, None),
                s("side", "field", 26, 26, Some("Square")),
                s("impl Shape for Square", "object", 29, 33, None),
                s("area", "method", 30, 32, Some("impl Shape for Square")),
            ],
            withheld: Default::default(),
        }
    );
}

#[test]
fn symbols_workspace_search() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let main = root.join("app/src/main.rs");
    let got = RT
        .block_on(p.symbols(&SymbolsQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: main,
            query: Some("total_area".into()),
        }))
        .unwrap();
    assert_eq!(
        got,
        SymbolsResult {
            scope: SymbolScope::Workspace {
                query: "total_area".into()
            },
            symbols: vec![SymbolItem {
                name: "total_area".into(),
                // rust-analyzer's word for a method in a workspace search.
                kind: "function",
                path: root.join("shapes/src/canvas.rs"),
                line: 17,
                end_line: 17,
                container: Some("Canvas".into()),
            }],
            withheld: Default::default(),
        }
    );
}

#[test]
fn invalid_positions_echo_the_line() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let main = root.join("app/src/main.rs");
    let out_of_range = RT
        .block_on(p.definition(&PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: main.clone(),
            line: 400,
            address: Address::Column(1),
        }))
        .unwrap_err();
    assert_eq!(
        out_of_range,
        LspError::InvalidPosition {
            message: "line 400 is out of range: the file has 12 lines".into(),
            line_text: None,
        }
    );
    let not_on_line = RT
        .block_on(p.references(&at(&main, 6, "Square")))
        .unwrap_err();
    assert_eq!(
        not_on_line,
        LspError::InvalidPosition {
            message: "symbol `Square` is not on line 6".into(),
            line_text: Some("    let mut canvas = Canvas::new();".into()),
        }
    );
    assert_eq!(not_on_line.code(), "LSP_INVALID_POSITION");
    let column = RT
        .block_on(p.hover(&PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: main,
            line: 5,
            address: Address::Column(13),
        }))
        .unwrap_err();
    assert_eq!(
        column,
        LspError::InvalidPosition {
            message: "column 13 is out of range: line 5 has 11 characters (columns are 1-based)"
                .into(),
            line_text: Some("fn main() {".into()),
        }
    );
}

#[test]
fn missing_file_is_file_not_found() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let (root, p) = warm();
    let missing = root.join("app/src/missing.rs");
    let err = RT.block_on(p.hover(&at(&missing, 1, "x"))).unwrap_err();
    assert_eq!(err, LspError::FileNotFound { path: missing });
}

#[test]
fn unknown_extension_is_no_provider_through_the_router() {
    let (router, _providers) = build_router(&LspConfig::default()).unwrap();
    // every built-in language is routed, installed or not
    let mut extensions: Vec<String> = router.routes().into_iter().map(|(e, _)| e).collect();
    extensions.sort();
    assert_eq!(
        extensions,
        [
            ".c", ".cc", ".cjs", ".cpp", ".cxx", ".go", ".h", ".hh", ".hpp", ".js", ".jsx", ".mjs",
            ".py", ".pyi", ".rs", ".ts", ".tsx"
        ]
    );
    assert!(
        router
            .routes()
            .contains(&(".rs".into(), "rust-analyzer".into()))
    );
    let err = RT
        .block_on(router.dispatch(&Request::Hover(at(Path::new("notes.xyz"), 1, "x"))))
        .unwrap_err();
    assert_eq!(
        (err.code(), err.reason()),
        ("LSP_UNAVAILABLE", Some(UnavailableReason::NoProvider))
    );
}

#[test]
fn rs_file_outside_any_cargo_project_is_no_project() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let loose = dir.path().join("loose.rs");
    std::fs::write(&loose, "fn main() {}\n").unwrap();
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let err = RT
        .block_on(p.definition(&at(&loose, 1, "main")))
        .unwrap_err();
    assert_eq!(err.reason(), Some(UnavailableReason::NoProject), "{err}");
    assert_eq!(p.servers(), vec![]);
}

#[test]
fn configured_server_whose_binary_is_missing_is_binary_not_found() {
    let mut config = LspConfig::default();
    config.servers.insert(
        "ghost".into(),
        ServerConfig {
            command: "no-such-language-server-xyz".into(),
            extensions: [(".ghost".to_owned(), "ghost".to_owned())].into(),
            ..ServerConfig::default()
        },
    );
    let (router, _providers) = build_router(&config).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a.ghost");
    std::fs::write(&file, "x\n").unwrap();
    let err = RT
        .block_on(router.dispatch(&Request::Hover(at(&file, 1, "x"))))
        .unwrap_err();
    assert_eq!(
        err.reason(),
        Some(UnavailableReason::BinaryNotFound),
        "{err}"
    );
    let message = err.to_string();
    assert!(
        message.contains("no-such-language-server-xyz") && message.contains("searched PATH: "),
        "{message}"
    );
}

#[test]
fn conflicting_servers_are_rejected() {
    let mut config = LspConfig::default();
    for name in ["one", "two"] {
        config.servers.insert(
            name.into(),
            ServerConfig {
                command: "true".into(),
                extensions: [(".py".to_owned(), "python".to_owned())].into(),
                ..ServerConfig::default()
            },
        );
    }
    let err = build_router(&config).unwrap_err();
    assert_eq!(
        err,
        RegisterError::Conflict {
            extension: ".py".into(),
            existing: "one".into(),
            new: "two".into()
        }
    );
}

/// A `diagnostics` query of `path`, errors and warnings.
fn diagnostics_of(path: &Path) -> DiagnosticsQuery {
    DiagnosticsQuery {
        path: path.to_owned(),
        all_severities: false,
        progress: ProgressSink::none(),
        access: ReadAccess::all(),
        workspace: Workspace::Unbounded,
    }
}

/// The answer to `query`, asked again while it is `LSP_NOT_READY` (for
/// 300 s at most), and how many times it was.
fn asked_until_ready(
    p: &StdioLspProvider,
    query: &DiagnosticsQuery,
) -> (Result<DiagnosticsResult, LspError>, usize) {
    RT.block_on(async {
        let start = std::time::Instant::now();
        let mut not_ready = 0;
        loop {
            match p.diagnostics(query).await {
                Err(LspError::NotReady { .. }) if start.elapsed() < Duration::from_secs(300) => {
                    not_ready += 1;
                }
                other => return (other, not_ready),
            }
        }
    })
}

/// On a copy of its own: an error planted on disk is listed at its line
/// by the very next `diagnostics` (from the `cargo check` rust-analyzer
/// runs for it), with rustc's code; the file put back, the next answer
/// lists no error. Three times; only `LSP_NOT_READY` is retried.
#[test]
fn diagnostics_are_cargo_checks_of_the_content_on_disk() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let report = root.join("app/src/report.rs");
    let original = std::fs::read_to_string(&report).unwrap();
    let planted = "pub fn planted() -> u32 {\n    \"text\"\n}\n";
    let planted_line = u32::try_from(original.lines().count()).unwrap() + 2;
    let query = diagnostics_of(&report);
    let ask = || asked_until_ready(&p, &query).0.unwrap();
    let errors = |d: &DiagnosticsResult| -> Vec<DiagnosticItem> {
        d.items
            .iter()
            .filter(|i| i.severity == Severity::Error)
            .cloned()
            .collect()
    };
    let clean = ask();
    assert_eq!(errors(&clean), vec![]);
    assert!(
        matches!(clean.proof, DiagnosticsProof::CheckFinished { .. }),
        "{clean:?}"
    );
    for trial in 1..=3 {
        std::fs::write(&report, format!("{original}{planted}")).unwrap();
        let got = errors(&ask());
        assert_eq!(got.len(), 1, "trial {trial}: {got:?}");
        assert_eq!(
            (
                got[0].line,
                got[0].code.as_deref(),
                got[0].line_text.as_str()
            ),
            (planted_line, Some("E0308"), "    \"text\""),
            "trial {trial}: {got:?}"
        );
        std::fs::write(&report, &original).unwrap();
        assert_eq!(errors(&ask()), vec![], "trial {trial}: after the revert");
    }
    RT.block_on(p.shutdown());
}

/// While `cargo build` and `cargo clean` run in a loop in the project
/// (`cargo clean` removes the check's own directory, `target/rust-analyzer`,
/// under a running check), each `diagnostics` answer is whole or
/// `LSP_NOT_READY`: three errors planted, an answer lists all three; the
/// file put back, an answer lists none. Never a part of them, and never no
/// problems for the planted file. Twenty trials of one call each; at
/// least one answer of each kind must be given.
#[test]
#[ignore = "slow: one to ten minutes of `cargo build` and `cargo clean` on every core; run it with `--include-ignored` (see \"Diagnostics on real projects\" in docs/subsystems/lsp.md)"]
fn diagnostics_under_cargo_clean_are_whole_or_not_ready() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let report = root.join("app/src/report.rs");
    let original = std::fs::read_to_string(&report).unwrap();
    let planted = "pub fn planted_type() -> u32 {\n    \"text\"\n}\n\
                   pub fn planted_args(a: u32) -> u32 {\n    a\n}\n\
                   pub fn planted_call() -> u32 {\n    planted_args(1, 2) + planted_undefined_xq\n}\n";
    let base = u32::try_from(original.lines().count()).unwrap();
    let want_lines = vec![base + 2, base + 8, base + 8];
    let query = diagnostics_of(&report);
    let error_lines = |d: &DiagnosticsResult| -> Vec<u32> {
        let mut lines: Vec<u32> = d
            .items
            .iter()
            .filter(|i| i.severity == Severity::Error)
            .map(|i| i.line)
            .collect();
        lines.sort_unstable();
        lines
    };
    // The project loaded and checked once, before the builds start.
    asked_until_ready(&p, &query).0.unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let builds = {
        let (stop, root) = (stop.clone(), root.clone());
        std::thread::spawn(move || {
            let mut cycles = 0;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                for args in [
                    &["build", "--offline", "--quiet"][..],
                    &["clean", "--offline", "--quiet"],
                ] {
                    let _ = std::process::Command::new("cargo")
                        .args(args)
                        .current_dir(&root)
                        .stderr(std::process::Stdio::null())
                        .status();
                }
                cycles += 1;
            }
            cycles
        })
    };
    let (mut wrong, mut planted_answers, mut clean_answers, mut not_ready) = (Vec::new(), 0, 0, 0);
    for trial in 1..=20 {
        for (text, want) in [
            (format!("{original}{planted}"), want_lines.clone()),
            (original.clone(), vec![]),
        ] {
            std::fs::write(&report, &text).unwrap();
            match RT.block_on(p.diagnostics(&query)) {
                Ok(d) if error_lines(&d) == want => {
                    if want.is_empty() {
                        clean_answers += 1;
                    } else {
                        planted_answers += 1;
                    }
                }
                Ok(d) => wrong.push(format!("trial {trial}: want {want:?}, got {d:?}")),
                Err(LspError::NotReady { .. }) => not_ready += 1,
                Err(e) => wrong.push(format!("trial {trial}: {e}")),
            }
        }
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let cycles = builds.join().unwrap();
    RT.block_on(p.shutdown());
    eprintln!(
        "planted answered {planted_answers}, put back answered {clean_answers}, \
         LSP_NOT_READY {not_ready}, build/clean cycles {cycles}"
    );
    assert_eq!(wrong, Vec::<String>::new());
    assert!(
        planted_answers > 0 && clean_answers > 0 && cycles > 0,
        "planted {planted_answers}, put back {clean_answers}, cycles {cycles}"
    );
}

/// rust-analyzer publishes each file's diagnostics from a worker thread,
/// so the last publication of a check can arrive after the answer to a
/// later request, or before an earlier publication. With the machine busy
/// (a thread spinning on every core) and many errors in one file, which
/// the check reports over several turns of rust-analyzer's loop, every
/// answer lists all of them, or is `LSP_NOT_READY`: never a part.
#[test]
fn diagnostics_list_every_error_of_a_check_while_the_machine_is_busy() {
    if !test_support::needs(&["rust-analyzer", "cargo"]) {
        return;
    }
    require_rust_analyzer();
    let (_dir, root) = fixture_copy("rust-workspace");
    let p = StdioLspProvider::rust_analyzer(options()).unwrap();
    let report = root.join("app/src/report.rs");
    let original = std::fs::read_to_string(&report).unwrap();
    let query = diagnostics_of(&report);
    let ask = || asked_until_ready(&p, &query);
    // Loaded and checked once before the machine gets busy.
    assert!(ask().0.is_ok());
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spinners: Vec<_> = (0..std::thread::available_parallelism().map_or(2, |n| n.get()))
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
                }
            })
        })
        .collect();
    let (mut wrong, mut whole, mut not_ready) = (Vec::new(), 0, 0);
    for trial in 0..8usize {
        let count = 40 + trial;
        let planted: String = (0..count)
            .map(|k| format!("pub fn planted_{k}() -> u32 {{ \"text\" }}\n"))
            .collect();
        std::fs::write(&report, format!("{original}{planted}")).unwrap();
        let (got, waits) = ask();
        not_ready += waits;
        match got {
            Ok(d) => {
                let errors = d
                    .items
                    .iter()
                    .filter(|i| i.severity == Severity::Error)
                    .count();
                if errors == count {
                    whole += 1;
                } else {
                    wrong.push(format!(
                        "trial {trial}: {errors} of {count} errors listed ({:?})",
                        d.proof
                    ));
                }
            }
            Err(e) => wrong.push(format!("trial {trial}: {e}")),
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for s in spinners {
        s.join().unwrap();
    }
    std::fs::write(&report, &original).unwrap();
    RT.block_on(p.shutdown());
    eprintln!("whole answers {whole}, LSP_NOT_READY {not_ready}");
    assert_eq!(wrong, Vec::<String>::new());
}
