//! Benchmark: warm latency per op through the provider vs the same request
//! sent as is over async-lsp to the same warm rust-analyzer, and cold start
//! to the first correct answer. Then one row per built-in language
//! (pyright, typescript-language-server, clangd, gopls): warm `references`
//! through the provider vs raw to the same server, and cold start to the
//! first correct answer vs the server's own readiness signal. Prints
//! medians, p99 and ratios.
//!
//! `cargo xtask bench lsp [--quick]`, or
//! `cargo run --release -p bench --bin bench_lsp [-- --quick]`
//! (`--quick`, or `DSH_BENCH_QUICK=1`: fewer rounds, for a smoke run whose
//! figures are not to be quoted).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lsp_seam::{Address, LspError, LspProvider, PositionQuery, SymbolsQuery};
use lsp_stdio::{ClientOptions, Encoding, StdioLspProvider, language_presets};
use lsp_types::request::{DocumentSymbolRequest, GotoDefinition, HoverRequest, References};
use lsp_types::{
    DocumentSymbolParams, GotoDefinitionParams, HoverParams, PartialResultParams, Position,
    ReferenceContext, ReferenceParams, TextDocumentIdentifier, TextDocumentPositionParams, Url,
    WorkDoneProgressParams,
};

/// Whether `--quick` (or `DSH_BENCH_QUICK=1`) asks for a smoke run.
fn quick() -> bool {
    std::env::args().any(|a| a == "--quick")
        || std::env::var("DSH_BENCH_QUICK").is_ok_and(|v| v == "1")
}

fn warm_rounds() -> usize {
    if quick() { 20 } else { 300 }
}

fn cold_runs() -> usize {
    if quick() { 1 } else { 3 }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_name() == "target" {
            continue;
        }
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

fn fixture_copy() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("rust-workspace");
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/lsp/rust-workspace"),
        &root,
    );
    let root = root.canonicalize().unwrap();
    (dir, root)
}

fn at(path: &Path, line: u32, symbol: &str) -> PositionQuery {
    PositionQuery {
        workspace: lsp_seam::Workspace::Unbounded,
        progress: Default::default(),
        access: Default::default(),
        path: path.to_owned(),
        line,
        address: Address::Symbol {
            name: symbol.into(),
            occurrence: 1,
        },
    }
}

/// The server position of `symbol` on 1-based `line` of `path`.
fn server_position(path: &Path, line: u32, symbol: &str, encoding: Encoding) -> Position {
    let text = std::fs::read_to_string(path).unwrap();
    let l = text.lines().nth(line as usize - 1).unwrap();
    let byte = l.find(symbol).unwrap();
    let character = match encoding {
        Encoding::Utf8 => byte,
        Encoding::Utf16 => l[..byte].encode_utf16().count(),
    };
    Position::new(line - 1, character as u32)
}

fn tdpp(path: &Path, pos: Position) -> TextDocumentPositionParams {
    TextDocumentPositionParams {
        text_document: TextDocumentIdentifier {
            uri: Url::from_file_path(path).unwrap(),
        },
        position: pos,
    }
}

struct Stats {
    median: Duration,
    p99: Duration,
}

fn stats(mut v: Vec<Duration>) -> Stats {
    v.sort();
    let p = |q: f64| v[((v.len() as f64 - 1.0) * q).round() as usize];
    Stats {
        median: p(0.5),
        p99: p(0.99),
    }
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1000.0)
}

async fn time<F: std::future::Future>(f: F) -> Duration {
    let t = Instant::now();
    f.await;
    t.elapsed()
}

async fn warm(root: &Path) {
    let p = StdioLspProvider::rust_analyzer(ClientOptions::default())
        .expect("rust-analyzer not found: run `rustup component add rust-analyzer`");
    let main = root.join("app/src/main.rs");
    let canvas = root.join("shapes/src/canvas.rs");
    let lib = root.join("shapes/src/lib.rs");
    p.wait_ready(&main, Duration::from_secs(120)).await.unwrap();
    let encoding = p.servers()[0].encoding;

    let def_q = at(&main, 9, "total_area");
    let ref_q = at(&canvas, 17, "total_area");
    let hover_q = at(&main, 7, "Circle");
    let sym_q = SymbolsQuery {
        workspace: lsp_seam::Workspace::Unbounded,
        progress: Default::default(),
        access: Default::default(),
        path: lib.clone(),
        query: None,
    };
    let def_pos = server_position(&main, 9, "total_area", encoding);
    let ref_pos = server_position(&canvas, 17, "total_area", encoding);
    let hover_pos = server_position(&main, 7, "Circle", encoding);

    // Open every file once and check each op answers.
    p.definition(&def_q).await.unwrap();
    p.references(&ref_q).await.unwrap();
    p.hover(&hover_q).await.unwrap();
    p.symbols(&sym_q).await.unwrap();

    let bare_main = p.raw_server(&main).await.unwrap();
    let bare_canvas = p.raw_server(&canvas).await.unwrap();
    let bare_lib = p.raw_server(&lib).await.unwrap();

    println!(
        "warm latency, {} rounds, provider and bare request interleaved (ms)",
        warm_rounds()
    );
    println!(
        "{:<12} {:>15} {:>12} {:>15} {:>12} {:>14}",
        "op", "provider med", "p99", "bare med", "p99", "ratio (med)"
    );
    for op in ["definition", "references", "hover", "symbols"] {
        let mut ours = Vec::with_capacity(warm_rounds());
        let mut bare = Vec::with_capacity(warm_rounds());
        for _ in 0..warm_rounds() {
            let (a, b) = match op {
                "definition" => (
                    time(async { p.definition(&def_q).await.unwrap() }).await,
                    time(async {
                        bare_main
                            .request::<GotoDefinition>(GotoDefinitionParams {
                                text_document_position_params: tdpp(&main, def_pos),
                                work_done_progress_params: WorkDoneProgressParams::default(),
                                partial_result_params: PartialResultParams::default(),
                            })
                            .await
                            .unwrap()
                    })
                    .await,
                ),
                "references" => (
                    time(async { p.references(&ref_q).await.unwrap() }).await,
                    time(async {
                        bare_canvas
                            .request::<References>(ReferenceParams {
                                text_document_position: tdpp(&canvas, ref_pos),
                                work_done_progress_params: WorkDoneProgressParams::default(),
                                partial_result_params: PartialResultParams::default(),
                                context: ReferenceContext {
                                    include_declaration: true,
                                },
                            })
                            .await
                            .unwrap()
                    })
                    .await,
                ),
                "hover" => (
                    time(async { p.hover(&hover_q).await.unwrap() }).await,
                    time(async {
                        bare_main
                            .request::<HoverRequest>(HoverParams {
                                text_document_position_params: tdpp(&main, hover_pos),
                                work_done_progress_params: WorkDoneProgressParams::default(),
                            })
                            .await
                            .unwrap()
                    })
                    .await,
                ),
                _ => (
                    time(async { p.symbols(&sym_q).await.unwrap() }).await,
                    time(async {
                        bare_lib
                            .request::<DocumentSymbolRequest>(DocumentSymbolParams {
                                text_document: TextDocumentIdentifier {
                                    uri: Url::from_file_path(&lib).unwrap(),
                                },
                                work_done_progress_params: WorkDoneProgressParams::default(),
                                partial_result_params: PartialResultParams::default(),
                            })
                            .await
                            .unwrap()
                    })
                    .await,
                ),
            };
            ours.push(a);
            bare.push(b);
        }
        let (o, b) = (stats(ours), stats(bare));
        println!(
            "{:<12} {:>15} {:>12} {:>15} {:>12} {:>13.2}x",
            op,
            ms(o.median),
            ms(o.p99),
            ms(b.median),
            ms(b.p99),
            o.median.as_secs_f64() / b.median.as_secs_f64()
        );
    }
    p.shutdown().await;
}

/// Each run on a fresh copy of the fixture (no `target/`); the two series
/// alternate so that machine load affects both alike.
async fn cold() {
    let mut firsts = Vec::new();
    let mut not_ready_counts = Vec::new();
    let mut ready = Vec::new();
    for _ in 0..cold_runs() {
        let (_dir, root) = fixture_copy();
        let canvas = root.join("shapes/src/canvas.rs");
        let query = at(&canvas, 17, "total_area");
        let p = StdioLspProvider::rust_analyzer(ClientOptions {
            ready_timeout: Duration::from_millis(250),
            ..ClientOptions::default()
        })
        .unwrap();
        let t = Instant::now();
        let mut not_ready = 0;
        loop {
            match p.references(&query).await {
                Ok(r) => {
                    assert_eq!(r.total, 3, "a wrong answer during cold start: {r:?}");
                    break;
                }
                Err(LspError::NotReady { .. }) => not_ready += 1,
                Err(e) => panic!("{e}"),
            }
        }
        firsts.push(t.elapsed());
        not_ready_counts.push(not_ready);
        p.shutdown().await;

        let (_dir, root) = fixture_copy();
        let canvas = root.join("shapes/src/canvas.rs");
        let p = StdioLspProvider::rust_analyzer(ClientOptions::default()).unwrap();
        let t = Instant::now();
        p.wait_ready(&canvas, Duration::from_secs(120))
            .await
            .unwrap();
        ready.push(t.elapsed());
        p.shutdown().await;
    }
    let r = stats(ready);
    let s = stats(firsts.clone());
    println!();
    println!(
        "cold start to first correct references answer, {} runs (ms)",
        cold_runs()
    );
    println!(
        "{:<12} {:>15} {:>12} {:>25}",
        "", "median", "max", "LSP_NOT_READY answers"
    );
    println!(
        "{:<12} {:>15} {:>12} {:>25}",
        "provider",
        ms(s.median),
        ms(s.p99),
        format!("{not_ready_counts:?}")
    );
    println!(
        "{:<12} {:>15} {:>12} {:>25}",
        "server ready",
        ms(r.median),
        ms(r.p99),
        "(wait for quiescent only)"
    );
    println!(
        "{:<12} {:>14.2}x",
        "ratio",
        s.median.as_secs_f64() / r.median.as_secs_f64()
    );
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    if quick() {
        println!("--quick: a smoke run, not figures to quote\n");
    }
    let (_dir, root) = fixture_copy();
    rt.block_on(async {
        warm(&root).await;
        cold().await;
        languages().await;
    });
}

/// One built-in language: its fixture, the references query and its total.
struct Lang {
    name: &'static str,
    fixture: &'static str,
    ext: &'static str,
    file: &'static str,
    line_prefix: &'static str,
    symbol: &'static str,
    total: usize,
}

const LANGS: [Lang; 4] = [
    Lang {
        name: "python",
        fixture: "python",
        ext: ".py",
        file: "shapes.py",
        line_prefix: "def total_area(",
        symbol: "total_area",
        total: 3,
    },
    Lang {
        name: "typescript",
        fixture: "typescript",
        ext: ".ts",
        file: "shapes.ts",
        line_prefix: "export function totalArea(",
        symbol: "totalArea",
        total: 3,
    },
    Lang {
        name: "c++",
        fixture: "cpp",
        ext: ".cpp",
        file: "shapes.hpp",
        line_prefix: "double total_area(",
        symbol: "total_area",
        total: 3,
    },
    Lang {
        name: "go",
        fixture: "go",
        ext: ".go",
        file: "shapes/shapes.go",
        line_prefix: "func TotalArea(",
        symbol: "TotalArea",
        total: 2,
    },
];

fn lang_copy(lang: &Lang) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join(lang.fixture);
    copy_dir(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/lsp/langs")
            .join(lang.fixture),
        &root,
    );
    let root = root.canonicalize().unwrap();
    if lang.fixture == "cpp" {
        let entries: Vec<serde_json::Value> = ["shapes.cpp", "main.cpp"]
            .iter()
            .map(|f| {
                serde_json::json!({
                    "directory": root, "file": root.join(f),
                    "arguments": ["c++", "-std=c++17", "-c", f],
                })
            })
            .collect();
        std::fs::write(
            root.join("compile_commands.json"),
            serde_json::to_string(&entries).unwrap(),
        )
        .unwrap();
    }
    (dir, root)
}

fn line_number(path: &Path, prefix: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    text.lines().position(|l| l.starts_with(prefix)).unwrap() as u32 + 1
}

/// A row per built-in language whose server is installed.
async fn languages() {
    println!();
    println!(
        "built-in languages: warm references (provider vs raw request to the same server, {} rounds) and cold start (first correct answer vs the server's readiness signal, {} runs), ms",
        warm_rounds(),
        cold_runs()
    );
    println!(
        "{:<11} {:>10} {:>9} {:>10} {:>9} {:>7} | {:>11} {:>11} {:>7} {:>10}",
        "language",
        "warm med",
        "p99",
        "raw med",
        "p99",
        "ratio",
        "cold first",
        "ready sig.",
        "ratio",
        "not ready"
    );
    for lang in &LANGS {
        let Some(config) = language_presets()
            .into_iter()
            .find(|p| p.extensions().iter().any(|e| e == lang.ext))
            .and_then(|p| p.choose())
        else {
            continue;
        };
        if let Err(e) = config.resolve_command() {
            println!("{:<11} not installed: {e}", lang.name);
            continue;
        }
        // warm
        let (_dir, root) = lang_copy(lang);
        let file = root.join(lang.file);
        let line = line_number(&file, lang.line_prefix);
        let query = at(&file, line, lang.symbol);
        let p = StdioLspProvider::new(config.clone(), ClientOptions::default());
        loop {
            match p.references(&query).await {
                Ok(r) => {
                    assert_eq!(r.total, lang.total, "{}: {r:?}", lang.name);
                    break;
                }
                Err(LspError::NotReady { .. }) => {}
                Err(e) => panic!("{}: {e}", lang.name),
            }
        }
        let encoding = p.servers()[0].encoding;
        let pos = server_position(&file, line, lang.symbol, encoding);
        let raw = p.raw_server(&file).await.unwrap();
        let (mut ours, mut bare) = (Vec::new(), Vec::new());
        for _ in 0..warm_rounds() {
            ours.push(time(async { p.references(&query).await.unwrap() }).await);
            bare.push(
                time(async {
                    raw.request::<References>(ReferenceParams {
                        text_document_position: tdpp(&file, pos),
                        work_done_progress_params: WorkDoneProgressParams::default(),
                        partial_result_params: PartialResultParams::default(),
                        context: ReferenceContext {
                            include_declaration: true,
                        },
                    })
                    .await
                    .unwrap()
                })
                .await,
            );
        }
        p.shutdown().await;
        // cold: first correct answer by polling, vs waiting for the signal
        let (mut firsts, mut signals, mut not_ready) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..cold_runs() {
            let (_dir, root) = lang_copy(lang);
            let file = root.join(lang.file);
            let query = at(&file, line, lang.symbol);
            let p = StdioLspProvider::new(
                config.clone(),
                ClientOptions {
                    ready_timeout: Duration::from_millis(250),
                    ..ClientOptions::default()
                },
            );
            let t = Instant::now();
            let mut n = 0;
            loop {
                match p.references(&query).await {
                    Ok(r) => {
                        assert_eq!(r.total, lang.total, "{}: a wrong cold answer", lang.name);
                        break;
                    }
                    Err(LspError::NotReady { .. }) => n += 1,
                    Err(e) => panic!("{}: {e}", lang.name),
                }
            }
            firsts.push(t.elapsed());
            not_ready.push(n);
            p.shutdown().await;

            let (_dir, root) = lang_copy(lang);
            let file = root.join(lang.file);
            let p = StdioLspProvider::new(config.clone(), ClientOptions::default());
            let t = Instant::now();
            // the server's readiness needs an open document (clangd and
            // typescript-language-server load the project on first open)
            let _ = p
                .symbols(&SymbolsQuery {
                    workspace: lsp_seam::Workspace::Unbounded,
                    progress: Default::default(),
                    access: Default::default(),
                    path: file.clone(),
                    query: None,
                })
                .await;
            p.wait_ready(&file, Duration::from_secs(120)).await.unwrap();
            signals.push(t.elapsed());
            p.shutdown().await;
        }
        let (o, b, f, r) = (stats(ours), stats(bare), stats(firsts), stats(signals));
        println!(
            "{:<11} {:>10} {:>9} {:>10} {:>9} {:>6.2}x | {:>11} {:>11} {:>6.2}x {:>10}",
            lang.name,
            ms(o.median),
            ms(o.p99),
            ms(b.median),
            ms(b.p99),
            o.median.as_secs_f64() / b.median.as_secs_f64(),
            ms(f.median),
            ms(r.median),
            f.median.as_secs_f64() / r.median.as_secs_f64(),
            format!("{not_ready:?}")
        );
    }
}
