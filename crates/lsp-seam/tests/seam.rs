//! The seam through a tiny in-test provider: routing, conflicts, dispatch,
//! error codes and graceful shrinking of references.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use futures::executor::block_on;
use lsp_seam::*;
use pretty_assertions::assert_eq;

/// Answers every op with a fixed value naming itself.
struct Echo {
    name: &'static str,
    extensions: Vec<&'static str>,
}

fn resolved(path: &Path) -> Resolved {
    Resolved {
        path: path.to_owned(),
        line: 1,
        column: 1,
        symbol: Some("x".into()),
    }
}

impl LspProvider for Echo {
    fn name(&self) -> &str {
        self.name
    }
    fn extensions(&self) -> Vec<String> {
        self.extensions.iter().map(|s| s.to_string()).collect()
    }
    fn definition<'a>(&'a self, q: &'a PositionQuery) -> LspFuture<'a, DefinitionResult> {
        Box::pin(async move {
            Ok(DefinitionResult {
                resolved: resolved(&q.path),
                items: vec![],
                withheld: Withheld::default(),
            })
        })
    }
    fn references<'a>(&'a self, q: &'a PositionQuery) -> LspFuture<'a, ReferencesResult> {
        Box::pin(async move {
            Ok(ReferencesResult {
                resolved: resolved(&q.path),
                files: vec![],
                total: 0,
                detail: ReferencesDetail::Full,
                withheld: Withheld::default(),
            })
        })
    }
    fn hover<'a>(&'a self, q: &'a PositionQuery) -> LspFuture<'a, HoverResult> {
        Box::pin(async move {
            Ok(HoverResult {
                resolved: resolved(&q.path),
                content: HoverContent::Markdown(self.name.to_owned()),
            })
        })
    }
    fn symbols<'a>(&'a self, _q: &'a SymbolsQuery) -> LspFuture<'a, SymbolsResult> {
        Box::pin(async move {
            Err(LspError::UnsupportedOperation {
                op: Op::Symbols,
                server: self.name.to_owned(),
            })
        })
    }
    fn diagnostics<'a>(&'a self, q: &'a DiagnosticsQuery) -> LspFuture<'a, DiagnosticsResult> {
        Box::pin(async move {
            Ok(DiagnosticsResult {
                path: q.path.clone(),
                items: vec![],
                unlisted: 0,
                proof: DiagnosticsProof::Pulled,
            })
        })
    }
}

fn echo(name: &'static str, extensions: &[&'static str]) -> Arc<dyn LspProvider> {
    Arc::new(Echo {
        name,
        extensions: extensions.to_vec(),
    })
}

fn hover(path: &str) -> Request {
    Request::Hover(PositionQuery {
        workspace: lsp_seam::Workspace::Unbounded,
        progress: Default::default(),
        access: Default::default(),
        path: PathBuf::from(path),
        line: 1,
        address: Address::Column(1),
    })
}

#[test]
fn final_extension_follows_the_rules() {
    let cases = [
        ("src/main.rs", Some(".rs")),
        ("Main.RS", Some(".rs")),
        ("types/foo.d.ts", Some(".ts")),
        (".bashrc", None),
        ("dir.with.dots/Makefile", None),
        ("trailing.", None),
        (".config.json", Some(".json")),
        ("notes.xyz", Some(".xyz")),
    ];
    let got: Vec<_> = cases
        .iter()
        .map(|(p, _)| (*p, final_extension(Path::new(p))))
        .collect();
    let want: Vec<_> = cases
        .iter()
        .map(|(p, e)| (*p, e.map(str::to_owned)))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn routes_by_final_extension_case_insensitively() {
    let mut router = Router::new();
    router.register(echo("rust", &[".rs"])).unwrap();
    router.register(echo("ts", &[".ts", ".tsx"])).unwrap();
    let answer = |p: &str| match block_on(router.dispatch(&hover(p))) {
        Ok(Answer::Hover(h)) => h.content,
        other => panic!("unexpected {other:?}"),
    };
    assert_eq!(answer("a/b.RS"), HoverContent::Markdown("rust".into()));
    assert_eq!(answer("x.d.ts"), HoverContent::Markdown("ts".into()));
    assert_eq!(
        router.routes(),
        vec![
            (".rs".to_owned(), "rust".to_owned()),
            (".ts".to_owned(), "ts".to_owned()),
            (".tsx".to_owned(), "ts".to_owned())
        ]
    );
}

#[test]
fn no_route_is_unavailable_no_provider() {
    let mut router = Router::new();
    router.register(echo("rust", &[".rs"])).unwrap();
    for path in ["notes.xyz", ".bashrc", "Makefile"] {
        let err = block_on(router.dispatch(&hover(path))).unwrap_err();
        assert_eq!(
            (err.code(), err.reason(), err.retryable()),
            (
                "LSP_UNAVAILABLE",
                Some(UnavailableReason::NoProvider),
                false
            ),
            "{path}"
        );
    }
}

#[test]
fn conflicting_registration_is_rejected_and_registers_nothing() {
    let mut router = Router::new();
    router.register(echo("rust", &[".rs"])).unwrap();
    let err = router
        .register(echo("other", &[".toml", ".rs"]))
        .unwrap_err();
    assert_eq!(
        err,
        RegisterError::Conflict {
            extension: ".rs".into(),
            existing: "rust".into(),
            new: "other".into()
        }
    );
    assert_eq!(err.code(), "LSP_ROUTE_CONFLICT");
    assert!(router.route(Path::new("Cargo.toml")).is_err());
}

#[test]
fn malformed_extensions_are_rejected() {
    for ext in ["rs", ".RS", ".d.ts", ".", ""] {
        let mut router = Router::new();
        let err = router.register(echo("bad", &[ext])).unwrap_err();
        assert_eq!(err.code(), "LSP_ROUTE_MALFORMED", "{ext:?}");
    }
}

#[test]
fn dispatch_reaches_the_method_of_each_op() {
    let p = echo("rust", &[".rs"]);
    let requests = [
        Request::Definition(PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: "a.rs".into(),
            line: 1,
            address: Address::Column(1),
        }),
        Request::References(PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: "a.rs".into(),
            line: 1,
            address: Address::Column(1),
        }),
        hover("a.rs"),
        Request::Symbols(SymbolsQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: "a.rs".into(),
            query: None,
        }),
        Request::Diagnostics(DiagnosticsQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: Default::default(),
            path: "a.rs".into(),
            all_severities: false,
        }),
    ];
    let got: Vec<Result<Op, &'static str>> = requests
        .iter()
        .map(|r| {
            block_on(dispatch(p.as_ref(), r))
                .map(|a| a.op())
                .map_err(|e| e.code())
        })
        .collect();
    assert_eq!(
        got,
        vec![
            Ok(Op::Definition),
            Ok(Op::References),
            Ok(Op::Hover),
            Err("LSP_UNSUPPORTED_OPERATION"),
            Ok(Op::Diagnostics),
        ]
    );
    assert_eq!(
        requests.iter().map(Request::op).collect::<Vec<_>>(),
        Op::ALL.to_vec()
    );
}

#[test]
fn error_codes_and_retryability_are_stable() {
    let errors = [
        LspError::Unavailable {
            reason: UnavailableReason::Crashed,
            message: String::new(),
        },
        LspError::NotReady {
            progress: None,
            waited_ms: 0,
        },
        LspError::InvalidPosition {
            message: String::new(),
            line_text: None,
        },
        LspError::FileNotFound { path: "x".into() },
        LspError::Timeout {
            op: Op::Hover,
            timeout_ms: 1,
        },
        LspError::ServerError {
            code: None,
            message: String::new(),
        },
        LspError::UnsupportedOperation {
            op: Op::Hover,
            server: String::new(),
        },
        LspError::ReadDenied(ReadDenied {
            path: "/h/.ssh/x.py".into(),
            rule: "`deny_read` entry `~/.ssh`".into(),
        }),
        LspError::InvalidArgument {
            field: "line".into(),
            message: String::new(),
        },
    ];
    let got: Vec<_> = errors.iter().map(|e| (e.code(), e.retryable())).collect();
    assert_eq!(
        got,
        vec![
            ("LSP_UNAVAILABLE", false),
            ("LSP_NOT_READY", true),
            ("LSP_INVALID_POSITION", false),
            ("LSP_FILE_NOT_FOUND", false),
            ("LSP_TIMEOUT", true),
            ("LSP_SERVER_ERROR", false),
            ("LSP_UNSUPPORTED_OPERATION", false),
            ("SANDBOX_READ_DENIED", false),
            ("INVALID_ARGUMENT", false),
        ]
    );
    let reasons: Vec<_> = [
        UnavailableReason::NoProvider,
        UnavailableReason::BinaryNotFound,
        UnavailableReason::SpawnFailed,
        UnavailableReason::Crashed,
        UnavailableReason::NoProject,
        UnavailableReason::LoadFailed,
    ]
    .iter()
    .map(|r| r.as_str())
    .collect();
    assert_eq!(
        reasons,
        [
            "no_provider",
            "binary_not_found",
            "spawn_failed",
            "crashed",
            "no_project",
            "load_failed"
        ]
    );
}

fn many_references() -> ReferencesResult {
    let files: Vec<FileReferences> = (0..3)
        .map(|f| FileReferences {
            path: PathBuf::from(format!("/p/src/file{f}.rs")),
            count: 4,
            refs: (1..=4)
                .map(|l| Reference {
                    line: l,
                    column: 5,
                    snippet: Some("let value = compute_something_long(argument);".into()),
                })
                .collect(),
        })
        .collect();
    ReferencesResult {
        resolved: resolved(Path::new("/p/src/file0.rs")),
        files,
        total: 12,
        detail: ReferencesDetail::Full,
        withheld: Withheld::default(),
    }
}

#[test]
fn references_shrink_in_order_and_keep_total() {
    let full = many_references();
    let mut r = full.clone();
    assert_eq!(r.shrink_to(usize::MAX), ReferencesDetail::Full);
    assert_eq!(r, full);

    let mut r = full.clone();
    let no_snippets = r.approx_bytes() - 1;
    let mut probe = full.clone();
    for f in &mut probe.files {
        for x in &mut f.refs {
            x.snippet = None;
        }
    }
    assert_eq!(
        r.shrink_to(probe.approx_bytes()),
        ReferencesDetail::NoSnippets
    );
    assert!(
        r.files
            .iter()
            .flat_map(|f| &f.refs)
            .all(|x| x.snippet.is_none())
    );
    assert!(no_snippets > probe.approx_bytes());

    let mut r = full.clone();
    assert_eq!(r.shrink_to(150), ReferencesDetail::CountsPerFile);
    assert_eq!(
        r.files
            .iter()
            .map(|f| (f.count, f.refs.len()))
            .collect::<Vec<_>>(),
        vec![(4, 0), (4, 0), (4, 0)]
    );
    assert_eq!(r.total, 12);

    let mut r = full;
    assert_eq!(r.shrink_to(10), ReferencesDetail::TotalOnly);
    assert_eq!((r.files.len(), r.total), (0, 12));
}

#[test]
fn op_names_round_trip() {
    let names: Vec<_> = Op::ALL.iter().map(|o| o.name()).collect();
    assert_eq!(
        names,
        [
            "definition",
            "references",
            "hover",
            "symbols",
            "diagnostics"
        ]
    );
    for op in Op::ALL {
        assert_eq!(Op::from_name(op.name()), Some(op));
    }
    assert_eq!(Op::from_name("implementation"), None);
}

#[test]
fn read_access_checks_what_it_is_given_and_withheld_counts_rules_once() {
    let all = ReadAccess::all();
    assert_eq!(all.check(Path::new("/h/.ssh/id_rsa")), Ok(()));
    let denying = ReadAccess::new(|path: &Path| {
        if path.starts_with("/h/.ssh") {
            Err(ReadDenied {
                path: path.to_owned(),
                rule: "`deny_read` entry `~/.ssh`".into(),
            })
        } else {
            Ok(())
        }
    });
    assert_eq!(denying.check(Path::new("/w/main.py")), Ok(()));
    let denied = denying.check(Path::new("/h/.ssh/id_rsa")).unwrap_err();
    assert_eq!(
        denied.to_string(),
        "/h/.ssh/id_rsa (`deny_read` entry `~/.ssh`)"
    );
    let mut withheld = Withheld::default();
    assert!(withheld.is_empty());
    withheld.add(&denied);
    withheld.add(&denied);
    withheld.add(&ReadDenied {
        path: "/data/dsh/store".into(),
        rule: "dsh's private directory".into(),
    });
    assert_eq!(withheld.count, 3);
    assert_eq!(
        withheld.rules,
        vec![
            "`deny_read` entry `~/.ssh`".to_owned(),
            "dsh's private directory".to_owned()
        ]
    );
    let via = denied.message(Some("linked.py"));
    assert!(
        via.starts_with(
            "the sandbox does not let this session read /h/.ssh/id_rsa (where `linked.py` leads) \
             (`deny_read` entry `~/.ssh`); nothing of it was read"
        ),
        "{via}"
    );
    let e = LspError::from(denied);
    assert_eq!(e.code(), "SANDBOX_READ_DENIED");
    assert!(e.to_string().contains("/h/.ssh/id_rsa"), "{e}");
    assert_eq!(e.to_string(), via.replace(" (where `linked.py` leads)", ""));
}
