//! Benchmark: warm latency per op through the provider vs the same request
//! sent as is over async-lsp to the same warm rust-analyzer, and cold start
//! to the first correct answer. Prints medians, p99 and ratios.
//!
//! `cargo xtask bench lsp [--quick]`, or
//! `cargo run --release -p lsp-rust-analyzer --example bench_lsp [-- --quick]`
//! (`--quick`: 20 warm rounds and one cold run without the server-ready
//! series, a smoke run whose figures are not to be quoted).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lsp_rust_analyzer::{ClientOptions, Encoding, StdioLspProvider};
use lsp_seam::{Address, LspError, LspProvider, PositionQuery, SymbolsQuery};
use lsp_types::request::{DocumentSymbolRequest, GotoDefinition, HoverRequest, References};
use lsp_types::{
    DocumentSymbolParams, GotoDefinitionParams, HoverParams, PartialResultParams, Position,
    ReferenceContext, ReferenceParams, TextDocumentIdentifier, TextDocumentPositionParams, Url,
    WorkDoneProgressParams,
};

/// How many rounds and runs: the full benchmark, or `--quick`.
#[derive(Clone, Copy)]
struct Plan {
    warm_rounds: usize,
    cold_runs: usize,
    quick: bool,
}

impl Plan {
    fn from_args() -> Self {
        if std::env::args().any(|a| a == "--quick") {
            Self {
                warm_rounds: 20,
                cold_runs: 1,
                quick: true,
            }
        } else {
            Self {
                warm_rounds: 300,
                cold_runs: 3,
                quick: false,
            }
        }
    }
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

async fn warm(root: &Path, plan: Plan) {
    let rounds = plan.warm_rounds;
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

    println!("warm latency, {rounds} rounds, provider and bare request interleaved (ms)");
    println!(
        "{:<12} {:>15} {:>12} {:>15} {:>12} {:>14}",
        "op", "provider med", "p99", "bare med", "p99", "ratio (med)"
    );
    for op in ["definition", "references", "hover", "symbols"] {
        let mut ours = Vec::with_capacity(rounds);
        let mut bare = Vec::with_capacity(rounds);
        for _ in 0..rounds {
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
async fn cold(plan: Plan) {
    let runs = plan.cold_runs;
    let mut firsts = Vec::new();
    let mut not_ready_counts = Vec::new();
    let mut ready = Vec::new();
    for _ in 0..runs {
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
        if plan.quick {
            continue;
        }

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
    let s = stats(firsts.clone());
    println!();
    println!("cold start to first correct references answer, {runs} run(s) (ms)");
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
    if ready.is_empty() {
        return;
    }
    let r = stats(ready);
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
    let plan = Plan::from_args();
    if plan.quick {
        println!("--quick: a smoke run, not figures to quote\n");
    }
    let (_dir, root) = fixture_copy();
    rt.block_on(async {
        warm(&root, plan).await;
        cold(plan).await;
    });
}
