//! The built-in language presets against their real servers — pyright
//! (Python), TypeScript 5 through typescript-language-server and
//! TypeScript 7 through its own server (`tsc --lsp`), clangd (C++) and
//! gopls (Go) — on fresh copies of one two-module fixture per language:
//! an interface with a method, two implementations, a call site in another
//! module, and a line with non-ASCII text before an identifier. The
//! TypeScript copies have a `node_modules/typescript` of the version under
//! test (a link to the one `cargo xtask test` installs into `tests/node`),
//! so the preset's choice per project root is what picks the server.
//!
//! Each language is checked for the four queries (whole answers), for
//! cold starts (five fresh copies: only `LSP_NOT_READY` or the correct
//! answer, never an empty or partial one), and for freshness (an edit on
//! disk is seen by the very next query, 20 times in a row).
//!
//! A test whose server (or `tests/node/node_modules`) is missing is
//! skipped with a line on stderr, and fails with what to install under
//! `DSH_TEST_ALL` (`cargo xtask test`, see `test_support::needs`). Go alone
//! may be reported as not installable on this machine: `cargo xtask test`
//! sets `DSH_GO_UNAVAILABLE` to the reason when Debian has no working
//! go/gopls pair, and the Go tests then print that reason instead of
//! running.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::*;
use lsp_seam::*;
use lsp_stdio::{ClientOptions, ServerConfig, StdioLspProvider, language_presets};
use pretty_assertions::assert_eq;

/// One language's fixture and the answers it must give.
struct Lang {
    name: &'static str,
    /// Directory under `tests/fixtures/lsp/langs`.
    fixture: &'static str,
    /// What to install when the server is missing.
    install: &'static str,
    /// The module with the interface, the implementations and the function.
    shapes: &'static str,
    /// The module with the call sites.
    main: &'static str,
    /// The text of the call-site line whose method call is asked about.
    method_call_line: &'static str,
    /// The method's name.
    method: &'static str,
    /// The first line of the implementation the call resolves to, and how
    /// many lines its body has.
    method_def_line: &'static str,
    method_body_lines: u32,
    /// The function whose references are counted, and the line defining it
    /// in `shapes` (for C++, the declaration in `decl_file`).
    function: &'static str,
    function_def_line: &'static str,
    /// Expected references: (file, text of each referencing line).
    references: &'static [(&'static str, &'static [&'static str])],
    /// Hover on the function at its call site shows this signature.
    hover_signature: &'static str,
    /// The outline of `outline_file` lists these (name, kind) pairs.
    outline_file: &'static str,
    outline: &'static [(&'static str, &'static str)],
    /// A workspace search for the implementation type finds it here.
    type_name: &'static str,
    type_kind: &'static str,
    type_file: &'static str,
    /// How a comment line starts (for edits).
    comment: &'static str,
    /// The package in `tests/node/node_modules` linked as the copy's own
    /// `node_modules/typescript`, and the server the preset must choose
    /// for it (TypeScript only).
    project_typescript: Option<(&'static str, &'static str)>,
}

const PYTHON: Lang = Lang {
    name: "python",
    fixture: "python",
    install: "npm install -g pyright (tests: cargo xtask test installs it into tests/node)",
    shapes: "shapes.py",
    main: "main.py",
    method_call_line: "print(Circle(3.0).area())",
    method: "area",
    method_def_line: "    def area(self) -> float:\n        return math.pi",
    method_body_lines: 2,
    function: "total_area",
    function_def_line: "def total_area(",
    references: &[
        ("main.py", &["from shapes import", "étiquette = "]),
        ("shapes.py", &["def total_area("]),
    ],
    hover_signature: "def total_area(shapes: list[Shape]) -> float",
    outline_file: "shapes.py",
    outline: &[
        ("Shape", "class"),
        ("Circle", "class"),
        ("Square", "class"),
        ("area", "method"),
        ("total_area", "function"),
    ],
    type_name: "Circle",
    type_kind: "class",
    type_file: "shapes.py",
    comment: "#",
    project_typescript: None,
};

const TYPESCRIPT: Lang = Lang {
    name: "typescript",
    fixture: "typescript",
    install: "npm install -g typescript-language-server typescript@5 (tests: cargo xtask test installs them into tests/node)",
    shapes: "shapes.ts",
    main: "main.ts",
    method_call_line: "console.log(new Circle(3).area());",
    method: "area",
    method_def_line: "  area(): number {\n    return Math.PI",
    method_body_lines: 3,
    function: "totalArea",
    function_def_line: "export function totalArea(",
    references: &[
        ("main.ts", &["import {", "const étiquette = "]),
        ("shapes.ts", &["export function totalArea("]),
    ],
    hover_signature: "totalArea(shapes: Shape[]): number",
    outline_file: "shapes.ts",
    outline: &[
        ("Shape", "interface"),
        ("Circle", "class"),
        ("Square", "class"),
        ("area", "method"),
        ("totalArea", "function"),
    ],
    type_name: "Circle",
    type_kind: "class",
    type_file: "shapes.ts",
    comment: "//",
    project_typescript: Some(("typescript", "typescript-language-server")),
};

/// The same project on TypeScript 7, served by its own server.
const TYPESCRIPT7: Lang = Lang {
    name: "typescript7",
    install: "npm install typescript@7 in the project, or npm install -g typescript (tests: cargo xtask test installs it into tests/node as typescript7)",
    project_typescript: Some(("typescript7", "tsc --lsp")),
    ..TYPESCRIPT
};

const CPP: Lang = Lang {
    name: "cpp",
    fixture: "cpp",
    install: "apt-get install clangd",
    shapes: "shapes.cpp",
    main: "main.cpp",
    method_call_line: "  return label[0] + static_cast<int>(t + Circle(3.0).area());",
    method: "area",
    method_def_line: "double Circle::area() const {",
    method_body_lines: 3,
    function: "total_area",
    function_def_line: "double total_area(",
    references: &[
        ("main.cpp", &["  const char *label = "]),
        ("shapes.cpp", &["double total_area("]),
        ("shapes.hpp", &["double total_area("]),
    ],
    hover_signature: "double total_area(const Shape *const *shapes, int count)",
    outline_file: "shapes.hpp",
    outline: &[
        ("Shape", "class"),
        ("Circle", "class"),
        ("Square", "class"),
        ("area", "method"),
        ("total_area", "function"),
    ],
    type_name: "Circle",
    type_kind: "class",
    type_file: "shapes.hpp",
    comment: "//",
    project_typescript: None,
};

const GO: Lang = Lang {
    name: "go",
    fixture: "go",
    install: "apt-get install golang-go gopls",
    shapes: "shapes/shapes.go",
    main: "main.go",
    method_call_line: "\tfmt.Println(shapes.Circle{Radius: 3}.Area())",
    method: "Area",
    method_def_line: "func (c Circle) Area() float64 {",
    method_body_lines: 3,
    function: "TotalArea",
    function_def_line: "func TotalArea(",
    references: &[
        ("main.go", &["\tétiquette := "]),
        ("shapes/shapes.go", &["func TotalArea("]),
    ],
    hover_signature: "func shapes.TotalArea(all []shapes.Shape) float64",
    outline_file: "shapes/shapes.go",
    outline: &[
        ("Shape", "interface"),
        ("Circle", "struct"),
        ("Square", "struct"),
        ("TotalArea", "function"),
    ],
    type_name: "Circle",
    type_kind: "struct",
    type_file: "shapes/shapes.go",
    comment: "//",
    project_typescript: None,
};

impl Lang {
    /// The preset server of this language (the first candidate found).
    fn config(&self) -> ServerConfig {
        let ext = match self.name {
            "python" => ".py",
            "typescript" | "typescript7" => ".ts",
            "cpp" => ".cpp",
            _ => ".go",
        };
        language_presets()
            .into_iter()
            .find(|p| p.extensions().iter().any(|e| e == ext))
            .and_then(|p| p.choose())
            .unwrap()
    }

    /// Whether the server is here; fails with the install line when it is
    /// not, except Go when the installer said why it cannot be had.
    fn available(&self) -> bool {
        if let Some((package, _)) = self.project_typescript {
            let dir = test_node_modules().join(package);
            assert!(
                dir.join("package.json").is_file(),
                "{}: {} is missing; this test needs it: {}",
                self.name,
                dir.display(),
                self.install
            );
            let (_dir, root) = self.copy();
            require_binary(&self.config().for_root(&root), self.install);
            return true;
        }
        let config = self.config();
        if config.resolve_command().is_ok() {
            return true;
        }
        if self.name == "go"
            && let Ok(reason) = std::env::var("DSH_GO_UNAVAILABLE")
        {
            eprintln!("Go is not installable on this machine: {reason}");
            println!("Go is not installable on this machine: {reason}");
            return false;
        }
        require_binary(&config, self.install);
        true
    }

    /// A fresh copy of the fixture (with its compile_commands.json for
    /// C++, which needs absolute paths, and its own TypeScript for
    /// TypeScript, checked to choose the expected server).
    fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let (dir, root) = fixture_copy(&format!("langs/{}", self.fixture));
        if let Some((package, server)) = self.project_typescript {
            std::fs::create_dir_all(root.join("node_modules")).unwrap();
            std::os::unix::fs::symlink(
                test_node_modules().join(package),
                root.join("node_modules").join("typescript"),
            )
            .unwrap();
            assert_eq!(self.config().for_root(&root).name, server, "{}", self.name);
        }
        if self.name == "cpp" {
            let entries: Vec<serde_json::Value> = ["shapes.cpp", "main.cpp"]
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "directory": root,
                        "file": root.join(f),
                        "arguments": ["c++", "-std=c++17", "-c", f],
                    })
                })
                .collect();
            std::fs::write(
                root.join("compile_commands.json"),
                serde_json::to_string_pretty(&entries).unwrap(),
            )
            .unwrap();
        }
        (dir, root)
    }

    fn provider(&self, options: ClientOptions) -> StdioLspProvider {
        StdioLspProvider::new(self.config(), options)
    }

    /// The query at the method call, and the answer it must get.
    fn definition(&self, root: &Path) -> (PositionQuery, DefinitionItem) {
        let main = root.join(self.main);
        let call = line_of(&main, self.method_call_line);
        let shapes = root.join(self.shapes);
        let def = line_of(&shapes, self.method_def_line);
        let text = std::fs::read_to_string(&shapes).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let def_text = lines[def as usize - 1];
        let body = (def..def + self.method_body_lines)
            .map(|n| NumberedLine {
                line: n,
                text: lines[n as usize - 1].to_owned(),
            })
            .collect();
        (
            at(&main, call, self.method),
            DefinitionItem {
                path: shapes,
                line: def,
                column: column_of(def_text, self.method),
                external: false,
                body,
                body_omitted_lines: 0,
            },
        )
    }

    /// The references query at the function's definition, and the
    /// (file, line, column) of every reference it must list.
    fn references(&self, root: &Path) -> (PositionQuery, Vec<(PathBuf, u32, u32)>) {
        let decl_file = root.join(self.references.last().unwrap().0);
        let def = line_of(&decl_file, self.function_def_line);
        let mut expected = Vec::new();
        for (file, lines) in self.references {
            let path = root.join(file);
            for l in *lines {
                let n = line_of(&path, l);
                let text = line_text(&path, n);
                expected.push((path.clone(), n, column_of(&text, self.function)));
            }
        }
        expected.sort();
        (at(&decl_file, def, self.function), expected)
    }
}

/// Whether `tests/node/node_modules` (TypeScript 5 and 7,
/// typescript-language-server) is installed, for the TypeScript tests: as
/// `test_support::needs`, skipped without it (a line on stderr), failed
/// under `DSH_TEST_ALL`.
fn node_modules_installed() -> bool {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/node/node_modules");
    if dir.is_dir() {
        return true;
    }
    assert!(
        std::env::var_os(test_support::ALL_TESTS).is_none_or(|v| v.is_empty()),
        "this test needs tests/node/node_modules: run `cargo xtask test` (or `npm ci` in tests/node)"
    );
    eprintln!(
        "skipped: needs tests/node/node_modules (`cargo xtask test`, or `npm ci` in tests/node)"
    );
    false
}

/// Whether `cargo xtask test` found Go not installable on this machine
/// (`DSH_GO_UNAVAILABLE`, the reason, printed).
fn go_unavailable() -> bool {
    let Ok(reason) = std::env::var("DSH_GO_UNAVAILABLE") else {
        return false;
    };
    eprintln!("Go is not installable on this machine: {reason}");
    println!("Go is not installable on this machine: {reason}");
    true
}

/// Where `cargo xtask test` installs the npm test tools.
fn test_node_modules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/node/node_modules")
        .canonicalize()
        .unwrap_or_else(|_| {
            panic!("tests/node/node_modules is missing: run `cargo xtask test` (or `npm ci` in tests/node)")
        })
}

/// 1-based number of the first line of `path` that starts with `prefix`
/// (a prefix may span lines with `\n`).
fn line_of(path: &Path, prefix: &str) -> u32 {
    let text = std::fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let wanted: Vec<&str> = prefix.split('\n').collect();
    for i in 0..lines.len() {
        if wanted
            .iter()
            .enumerate()
            .all(|(k, w)| lines.get(i + k).is_some_and(|l| l.starts_with(w)))
        {
            return i as u32 + 1;
        }
    }
    panic!("no line starting with {prefix:?} in {}", path.display());
}

fn line_text(path: &Path, line: u32) -> String {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .nth(line as usize - 1)
        .unwrap()
        .to_owned()
}

/// 1-based Unicode-scalar column of the first whole `word` on `line`.
fn column_of(line: &str, word: &str) -> u32 {
    let chars: Vec<char> = line.chars().collect();
    let w: Vec<char> = word.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    for i in 0..chars.len() {
        if chars[i..].starts_with(&w)
            && (i == 0 || !ident(chars[i - 1]))
            && chars.get(i + w.len()).is_none_or(|c| !ident(*c))
        {
            return i as u32 + 1;
        }
    }
    panic!("{word} not on {line:?}");
}

fn reference_positions(r: &ReferencesResult) -> Vec<(PathBuf, u32, u32)> {
    let mut out: Vec<(PathBuf, u32, u32)> = r
        .files
        .iter()
        .flat_map(|f| f.refs.iter().map(|x| (f.path.clone(), x.line, x.column)))
        .collect();
    out.sort();
    out
}

/// Options for these tests: short readiness waits (so `LSP_NOT_READY` is
/// seen and checked), long request timeouts (a loaded machine).
fn lang_options() -> ClientOptions {
    ClientOptions {
        ready_timeout: Duration::from_millis(500),
        request_timeout: Duration::from_secs(120),
        ..ClientOptions::default()
    }
}

/// Asks `f` until it answers something other than `LSP_NOT_READY`.
async fn answer<T>(
    limit: Duration,
    mut f: impl AsyncFnMut() -> Result<T, LspError>,
) -> Result<T, LspError> {
    let start = Instant::now();
    loop {
        match f().await {
            Err(LspError::NotReady { .. }) if start.elapsed() < limit => {
                // sleep-ok: paces the retries of a not-ready answer
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            other => return other,
        }
    }
}

const LIMIT: Duration = Duration::from_secs(240);

fn four_queries(lang: &Lang) {
    if !lang.available() {
        return;
    }
    let (_dir, root) = lang.copy();
    let p = lang.provider(lang_options());
    RT.block_on(async {
        // definition at the call site: the implementation, with its body
        let (query, item) = lang.definition(&root);
        let got = answer(LIMIT, async || p.definition(&query).await)
            .await
            .unwrap();
        assert_eq!(got.items, vec![item], "{}: definition", lang.name);
        assert_eq!(got.resolved.symbol.as_deref(), Some(lang.method));

        // references across modules, with a correct total
        let (query, expected) = lang.references(&root);
        let got = answer(LIMIT, async || p.references(&query).await)
            .await
            .unwrap();
        assert_eq!(
            reference_positions(&got),
            expected,
            "{}: references",
            lang.name
        );
        assert_eq!(got.total, expected.len());
        assert_eq!(got.total, got.files.iter().map(|f| f.count).sum::<usize>());

        // hover at the call site (after non-ASCII text) shows the signature
        let main = root.join(lang.main);
        let call_line = lang.references[0].1.last().unwrap();
        let hover_query = at(&main, line_of(&main, call_line), lang.function);
        let got = answer(LIMIT, async || p.hover(&hover_query).await)
            .await
            .unwrap();
        let HoverContent::Markdown(markdown) = &got.content else {
            panic!("{}: no hover: {got:?}", lang.name)
        };
        assert!(
            markdown.contains(lang.hover_signature),
            "{}: hover {markdown:?} lacks {:?}",
            lang.name,
            lang.hover_signature
        );
        let line = line_text(&main, hover_query.line);
        assert_eq!(got.resolved.column, column_of(&line, lang.function));

        // outline with kinds as words
        let outline_path = root.join(lang.outline_file);
        let got = answer(LIMIT, async || {
            p.symbols(&SymbolsQuery {
                workspace: lsp_seam::Workspace::Unbounded,
                path: outline_path.clone(),
                query: None,
                progress: ProgressSink::none(),
                access: Default::default(),
            })
            .await
        })
        .await
        .unwrap();
        let listed: Vec<(&str, &str)> = got
            .symbols
            .iter()
            .map(|s| (s.name.as_str(), s.kind))
            .collect();
        for wanted in lang.outline {
            assert!(
                listed.contains(wanted),
                "{}: outline {listed:?} lacks {wanted:?}",
                lang.name
            );
        }

        // workspace search finds the type
        let got = answer(LIMIT, async || {
            p.symbols(&SymbolsQuery {
                workspace: lsp_seam::Workspace::Unbounded,
                path: main.clone(),
                query: Some(lang.type_name.into()),
                progress: ProgressSink::none(),
                access: Default::default(),
            })
            .await
        })
        .await
        .unwrap();
        assert!(
            got.symbols.iter().any(|s| s.name == lang.type_name
                && s.kind == lang.type_kind
                && s.path == root.join(lang.type_file)),
            "{}: search for {}: {:?}",
            lang.name,
            lang.type_name,
            got.symbols
        );

        // an honest empty answer once ready: nothing is defined at a comment
        std::fs::write(
            &main,
            format!(
                "{} no symbol here\n{}",
                lang.comment,
                std::fs::read_to_string(&main).unwrap()
            ),
        )
        .unwrap();
        let got = p
            .definition(&PositionQuery {
                workspace: lsp_seam::Workspace::Unbounded,
                path: main.clone(),
                line: 1,
                address: Address::Column(u32::try_from(lang.comment.len()).unwrap() + 2),
                progress: ProgressSink::none(),
                access: Default::default(),
            })
            .await
            .unwrap();
        assert_eq!(got.items, vec![], "{}: definition in a comment", lang.name);
    });
    RT.block_on(p.shutdown());
}

/// From spawn, asks definition and references in turn until both were
/// correct: every answer before is `LSP_NOT_READY`, none empty or partial.
fn cold_start(lang: &Lang) {
    if !lang.available() {
        return;
    }
    let mut not_ready = 0;
    for copy in 0..5 {
        let (_dir, root) = lang.copy();
        let p = lang.provider(lang_options());
        let (def_query, item) = lang.definition(&root);
        let (ref_query, expected) = lang.references(&root);
        let (mut def_ok, mut refs_ok) = (false, false);
        let start = Instant::now();
        RT.block_on(async {
            while !(def_ok && refs_ok) {
                assert!(start.elapsed() < LIMIT, "{}: never ready", lang.name);
                if !refs_ok {
                    match p.references(&ref_query).await {
                        Ok(got) => {
                            assert_eq!(
                                reference_positions(&got),
                                expected,
                                "{}: copy {copy}: a wrong references answer after {} not-ready",
                                lang.name,
                                not_ready
                            );
                            refs_ok = true;
                        }
                        Err(LspError::NotReady { .. }) => not_ready += 1,
                        Err(e) => panic!("{}: copy {copy}: {e}", lang.name),
                    }
                }
                if !def_ok {
                    match p.definition(&def_query).await {
                        Ok(got) => {
                            assert_eq!(
                                got.items,
                                vec![item.clone()],
                                "{}: copy {copy}: a wrong definition answer after {} not-ready",
                                lang.name,
                                not_ready
                            );
                            def_ok = true;
                        }
                        Err(LspError::NotReady { .. }) => not_ready += 1,
                        Err(e) => panic!("{}: copy {copy}: {e}", lang.name),
                    }
                }
            }
            p.shutdown().await;
        });
    }
    println!(
        "{}: 5 cold starts, {not_ready} LSP_NOT_READY, 0 empty or wrong answers",
        lang.name
    );
}

/// Edits the module with the definitions on disk and asks at once from
/// the other module: the answer shows the edit, 20 times in a row.
fn freshness(lang: &Lang) {
    if !lang.available() {
        return;
    }
    let (_dir, root) = lang.copy();
    let p = lang.provider(lang_options());
    let shapes = root.join(lang.shapes);
    let original = std::fs::read_to_string(&shapes).unwrap();
    let (query, item) = lang.definition(&root);
    RT.block_on(async {
        let first = answer(LIMIT, async || p.definition(&query).await)
            .await
            .unwrap();
        assert_eq!(first.items, vec![item.clone()]);
        let mut stale = 0;
        for trial in 1..=20u32 {
            let header: String = (0..trial)
                .map(|i| format!("{} edit {trial}.{i}\n", lang.comment))
                .collect();
            std::fs::write(&shapes, format!("{header}{original}")).unwrap();
            let got = answer(LIMIT, async || p.definition(&query).await)
                .await
                .unwrap();
            let mut want = item.clone();
            want.line += trial;
            for l in &mut want.body {
                l.line += trial;
            }
            if got.items != vec![want.clone()] {
                stale += 1;
                eprintln!(
                    "{}: trial {trial}: {:?} != {:?}",
                    lang.name, got.items, want
                );
            }
        }
        assert_eq!(
            stale, 0,
            "{}: stale answers after an edit on disk",
            lang.name
        );
        p.shutdown().await;
    });
}

/// A line that is an error in `lang`'s main module when appended to it,
/// and a word of the message the server must give for it.
fn planted_error(lang: &Lang) -> (&'static str, &'static str) {
    match lang.name {
        "python" => (
            "planted_undefined_name_xyz()\n",
            "planted_undefined_name_xyz",
        ),
        "typescript" | "typescript7" => (
            "export const planted: number = \"text\";\n",
            "not assignable",
        ),
        "cpp" => (
            "int planted = planted_undefined_name_xyz;\n",
            "planted_undefined_name_xyz",
        ),
        _ => ("var planted int = \"text\"\n", "cannot use"),
    }
}

/// Plants an error in the main module on disk and asks for its
/// diagnostics at once: the error is listed at its line; the file put
/// back, the next answer lists no error. Five times, 0 stale answers;
/// every answer is proven (only `LSP_NOT_READY` is retried).
fn diagnostics_fresh(lang: &Lang) {
    if !lang.available() {
        return;
    }
    let (_dir, root) = lang.copy();
    let p = lang.provider(lang_options());
    let main = root.join(lang.main);
    let original = std::fs::read_to_string(&main).unwrap();
    let (planted, word) = planted_error(lang);
    let planted_line = u32::try_from(original.lines().count()).unwrap() + 1;
    let query = DiagnosticsQuery {
        path: main.clone(),
        all_severities: false,
        progress: ProgressSink::none(),
        access: ReadAccess::all(),
        workspace: Workspace::Unbounded,
    };
    let errors = |d: &DiagnosticsResult| -> Vec<DiagnosticItem> {
        d.items
            .iter()
            .filter(|i| i.severity == Severity::Error)
            .cloned()
            .collect()
    };
    RT.block_on(async {
        let clean = answer(LIMIT, async || p.diagnostics(&query).await)
            .await
            .unwrap();
        assert_eq!(
            errors(&clean),
            vec![],
            "{}: the fixture has errors",
            lang.name
        );
        let mut stale = 0;
        for trial in 1..=5 {
            std::fs::write(&main, format!("{original}{planted}")).unwrap();
            let got = answer(LIMIT, async || p.diagnostics(&query).await)
                .await
                .unwrap();
            let found = errors(&got);
            if !(found.len() == 1
                && found[0].line == planted_line
                && found[0].message.contains(word)
                && found[0].line_text == planted.trim_end())
            {
                stale += 1;
                eprintln!(
                    "{}: trial {trial}: planted error not listed: {got:?}",
                    lang.name
                );
            }
            std::fs::write(&main, &original).unwrap();
            let got = answer(LIMIT, async || p.diagnostics(&query).await)
                .await
                .unwrap();
            if !errors(&got).is_empty() {
                stale += 1;
                eprintln!(
                    "{}: trial {trial}: error listed after the revert: {got:?}",
                    lang.name
                );
            }
        }
        assert_eq!(stale, 0, "{}: stale diagnostics", lang.name);
        p.shutdown().await;
    });
}

#[test]
fn python_diagnostics_are_for_the_content_on_disk() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    diagnostics_fresh(&PYTHON);
}

#[test]
fn typescript_diagnostics_are_for_the_content_on_disk() {
    if !test_support::needs(&["typescript-language-server", "node"]) || !node_modules_installed() {
        return;
    }
    diagnostics_fresh(&TYPESCRIPT);
}

#[test]
fn typescript7_diagnostics_are_for_the_content_on_disk() {
    if !test_support::needs(&["node"]) || !node_modules_installed() {
        return;
    }
    diagnostics_fresh(&TYPESCRIPT7);
}

#[test]
fn cpp_diagnostics_are_for_the_content_on_disk() {
    if !test_support::needs(&["clangd"]) {
        return;
    }
    diagnostics_fresh(&CPP);
}

#[test]
fn go_diagnostics_are_for_the_content_on_disk() {
    if go_unavailable() || !test_support::needs(&["gopls", "go"]) {
        return;
    }
    diagnostics_fresh(&GO);
}

#[test]
fn python_answers_the_four_queries() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    four_queries(&PYTHON);
}

#[test]
fn python_cold_start_is_never_empty_or_partial() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    cold_start(&PYTHON);
}

#[test]
fn python_sees_edits_on_disk() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    freshness(&PYTHON);
}

#[test]
fn typescript_answers_the_four_queries() {
    if !test_support::needs(&["typescript-language-server", "node"]) || !node_modules_installed() {
        return;
    }
    four_queries(&TYPESCRIPT);
}

#[test]
fn typescript_cold_start_is_never_empty_or_partial() {
    if !test_support::needs(&["typescript-language-server", "node"]) || !node_modules_installed() {
        return;
    }
    cold_start(&TYPESCRIPT);
}

#[test]
fn typescript_sees_edits_on_disk() {
    if !test_support::needs(&["typescript-language-server", "node"]) || !node_modules_installed() {
        return;
    }
    freshness(&TYPESCRIPT);
}

#[test]
fn typescript7_answers_the_four_queries() {
    if !test_support::needs(&["node"]) || !node_modules_installed() {
        return;
    }
    four_queries(&TYPESCRIPT7);
}

#[test]
fn typescript7_cold_start_is_never_empty_or_partial() {
    if !test_support::needs(&["node"]) || !node_modules_installed() {
        return;
    }
    cold_start(&TYPESCRIPT7);
}

#[test]
fn typescript7_sees_edits_on_disk() {
    if !test_support::needs(&["node"]) || !node_modules_installed() {
        return;
    }
    freshness(&TYPESCRIPT7);
}

/// Without a TypeScript of its own, a project is served by what the
/// global `tsc` on `PATH` is: TypeScript 7 by its own server, TypeScript 5
/// by typescript-language-server (with that TypeScript).
#[test]
fn without_a_project_typescript_the_global_one_decides() {
    if !test_support::needs(&["node"]) || !node_modules_installed() {
        return;
    }
    let modules = test_node_modules();
    let node = std::env::split_paths(&std::env::var_os("PATH").unwrap())
        .find(|d| d.join("node").is_file())
        .expect("node is not on PATH: the TypeScript tests need Node.js");
    for (package, server) in [
        ("typescript7", "tsc --lsp"),
        ("typescript", "typescript-language-server"),
    ] {
        for tool in [package, "typescript-language-server"] {
            assert!(
                modules.join(tool).join("package.json").is_file(),
                "{tool} is missing in tests/node/node_modules: run `cargo xtask test` (or `npm ci` in tests/node)"
            );
        }
        let bin = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(
            modules.join(package).join("bin").join("tsc"),
            bin.path().join("tsc"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            modules.join(".bin").join("typescript-language-server"),
            bin.path().join("typescript-language-server"),
        )
        .unwrap();
        let mut config = TYPESCRIPT.config();
        let path = std::env::join_paths([bin.path().to_owned(), node.clone()]).unwrap();
        config
            .env
            .insert("PATH".into(), path.to_string_lossy().into_owned());
        let (_dir, root) = fixture_copy("langs/typescript");
        assert_eq!(config.for_root(&root).name, server, "global {package}");
        let p = StdioLspProvider::new(config, lang_options());
        let (query, expected) = TYPESCRIPT.references(&root);
        let got = RT
            .block_on(answer(LIMIT, async || p.references(&query).await))
            .unwrap();
        assert_eq!(reference_positions(&got), expected, "global {package}");
        let running: Vec<String> = p.servers().into_iter().map(|s| s.name).collect();
        assert_eq!(running, [server], "global {package}");
        RT.block_on(p.shutdown());
    }
}

#[test]
fn cpp_answers_the_four_queries() {
    if !test_support::needs(&["clangd"]) {
        return;
    }
    four_queries(&CPP);
}

#[test]
fn cpp_cold_start_is_never_the_header_declaration() {
    if !test_support::needs(&["clangd"]) {
        return;
    }
    cold_start(&CPP);
}

#[test]
fn cpp_sees_edits_on_disk() {
    if !test_support::needs(&["clangd"]) {
        return;
    }
    freshness(&CPP);
}

#[test]
fn go_answers_the_four_queries() {
    if go_unavailable() || !test_support::needs(&["gopls", "go"]) {
        return;
    }
    four_queries(&GO);
}

#[test]
fn go_cold_start_is_never_empty_or_partial() {
    if go_unavailable() || !test_support::needs(&["gopls", "go"]) {
        return;
    }
    cold_start(&GO);
}

#[test]
fn go_sees_edits_on_disk() {
    if go_unavailable() || !test_support::needs(&["gopls", "go"]) {
        return;
    }
    freshness(&GO);
}

#[test]
fn a_config_entry_overrides_the_preset_extension_by_extension() {
    use lsp_stdio::{LspConfig, build_router};
    let mut config = LspConfig::default();
    config.servers.insert(
        "my-python".into(),
        ServerConfig {
            command: "pylsp".into(),
            extensions: [(".py".to_owned(), "python".to_owned())].into(),
            ..ServerConfig::default()
        },
    );
    let (router, _providers) = build_router(&config).unwrap();
    let routes: std::collections::BTreeMap<String, String> = router.routes().into_iter().collect();
    assert_eq!(routes[".py"], "my-python");
    // the preset keeps the extensions the config does not claim
    let python = PYTHON.config().name;
    assert_eq!(routes[".pyi"], python);
    assert_eq!(routes[".ts"], "typescript");
    assert_eq!(routes[".cpp"], "clangd");
    assert_eq!(routes[".go"], "gopls");
    assert_eq!(routes[".rs"], "rust-analyzer");
}

#[test]
fn a_missing_server_says_what_to_install_and_which_key_overrides_it() {
    let empty = tempfile::tempdir().unwrap();
    let (_dir, root) = PYTHON.copy();
    // a project for every language, so only the binary is missing
    for (marker, text) in [
        ("Cargo.toml", "[package]\nname = \"p\"\n"),
        ("go.mod", "module p\n"),
        ("compile_commands.json", "[]"),
    ] {
        std::fs::write(root.join(marker), text).unwrap();
    }
    for preset in language_presets() {
        for mut server in preset.servers.clone() {
            server
                .env
                .insert("PATH".into(), empty.path().display().to_string());
            let ext = preset.extensions()[0].clone();
            let file = root.join(format!("probe{ext}"));
            std::fs::write(&file, "x\n").unwrap();
            let command = server.command.clone();
            let hint = server.install_hint.clone().unwrap();
            let p = StdioLspProvider::new(server, lang_options());
            let err = RT
                .block_on(p.symbols(&SymbolsQuery {
                    workspace: lsp_seam::Workspace::Unbounded,
                    path: file.clone(),
                    query: None,
                    progress: ProgressSink::none(),
                    access: Default::default(),
                }))
                .unwrap_err();
            let LspError::Unavailable { reason, message } = &err else {
                panic!("{}: {err:?}", preset.language)
            };
            assert_eq!(*reason, UnavailableReason::BinaryNotFound, "{message}");
            assert!(
                message.contains(&format!("`{command}` not found")),
                "{message}"
            );
            assert!(message.contains(&hint), "{message}");
            assert!(message.contains("Install: `"), "{message}");
            assert!(
                message.contains("or set another server for .")
                    && message.contains(
                        "in the config: [lsp.servers.NAME] command = \"...\", extensions = {"
                    ),
                "{message}"
            );
        }
    }
}

/// A Python provider on a fresh copy with these options.
fn python_provider(
    options: ClientOptions,
) -> Option<(tempfile::TempDir, PathBuf, StdioLspProvider)> {
    if !PYTHON.available() {
        return None;
    }
    let (dir, root) = PYTHON.copy();
    Some((dir, root, PYTHON.provider(options)))
}

/// Waits (bounded) until `f` holds.
fn eventually(what: &str, f: impl FnMut() -> bool) {
    test_support::wait_until_within(Duration::from_secs(60), what, f);
}

#[test]
fn an_idle_server_stops_and_the_next_query_starts_it_again() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    let Some((_dir, root, p)) = python_provider(ClientOptions {
        idle_stop: Some(Duration::from_secs(1)),
        ..lang_options()
    }) else {
        return;
    };
    let (query, item) = PYTHON.definition(&root);
    let got = RT
        .block_on(answer(LIMIT, async || p.definition(&query).await))
        .unwrap();
    assert_eq!(got.items, vec![item.clone()]);
    let first = p.servers();
    assert_eq!(first.len(), 1);
    eventually("the idle server stops", || p.servers().is_empty());
    eventually("its session ends", || !session_alive(first[0].pid));
    let again = RT
        .block_on(answer(LIMIT, async || p.definition(&query).await))
        .unwrap();
    assert_eq!(again.items, vec![item]);
    let second = p.servers();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].pid, first[0].pid);
    RT.block_on(p.shutdown());
}

#[test]
fn beyond_the_cap_the_least_recently_used_server_stops() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    let Some((_dir, root_a, p)) = python_provider(ClientOptions {
        max_servers: 1,
        ..lang_options()
    }) else {
        return;
    };
    let (_dir_b, root_b) = PYTHON.copy();
    let (query_a, item_a) = PYTHON.definition(&root_a);
    let (query_b, item_b) = PYTHON.definition(&root_b);
    let ask = |q: &PositionQuery| {
        RT.block_on(answer(LIMIT, async || p.definition(q).await))
            .unwrap()
            .items
    };
    assert_eq!(ask(&query_a), vec![item_a.clone()]);
    let a = p.servers();
    assert_eq!(a.len(), 1);
    assert_eq!(ask(&query_b), vec![item_b]);
    eventually("the first server's session ends", || {
        !session_alive(a[0].pid)
    });
    let roots: Vec<PathBuf> = p.servers().into_iter().map(|s| s.root).collect();
    assert_eq!(roots, vec![root_b.clone()]);
    assert_eq!(ask(&query_a), vec![item_a]);
    let roots: Vec<PathBuf> = p.servers().into_iter().map(|s| s.root).collect();
    assert_eq!(roots, vec![root_a]);
    RT.block_on(p.shutdown());
}

#[test]
fn a_file_over_the_size_cap_is_refused_without_reading_it() {
    // The server's command is resolved before the file is read.
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    let (_dir, root) = PYTHON.copy();
    let p = PYTHON.provider(ClientOptions {
        max_file_bytes: 64,
        ..lang_options()
    });
    let err = RT
        .block_on(p.definition(&at(&root.join("shapes.py"), 3, "math")))
        .unwrap_err();
    let LspError::InvalidArgument { field, message } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(field, "path");
    assert!(message.contains("more than the 64 bytes"), "{message}");
    assert!(message.contains("[lsp] max_file_bytes"), "{message}");
}

#[test]
fn concurrent_queries_on_one_root_share_one_server_and_stay_correct() {
    if !test_support::needs(&["pyright-langserver", "node"]) {
        return;
    }
    let Some((_dir, root, p)) = python_provider(lang_options()) else {
        return;
    };
    let p = std::sync::Arc::new(p);
    let (def_query, item) = PYTHON.definition(&root);
    let (ref_query, expected) = PYTHON.references(&root);
    RT.block_on(async {
        let defs = {
            let p = p.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let got = loop {
                        match p.definition(&def_query).await {
                            Err(LspError::NotReady { .. }) => {
                                // sleep-ok: paces the retries of a not-ready answer
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            other => break other.unwrap(),
                        }
                    };
                    assert_eq!(got.items, vec![item.clone()]);
                }
            })
        };
        let refs = {
            let p = p.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    let got = loop {
                        match p.references(&ref_query).await {
                            Err(LspError::NotReady { .. }) => {
                                // sleep-ok: paces the retries of a not-ready answer
                                tokio::time::sleep(Duration::from_millis(50)).await;
                            }
                            other => break other.unwrap(),
                        }
                    };
                    assert_eq!(reference_positions(&got), expected);
                }
            })
        };
        defs.await.unwrap();
        refs.await.unwrap();
    });
    assert_eq!(p.servers().len(), 1);
    RT.block_on(p.shutdown());
}
