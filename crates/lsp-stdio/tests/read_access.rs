//! A query's read policy (`ReadAccess`) against a real stub server (a
//! python3 process written by the test) that answers with locations the
//! test chooses and logs every document it is sent: a denied queried file
//! (or a symlink to one) fails before anything is read, started or sent;
//! a location in a denied file is withheld, its text neither read into the
//! answer nor sent to the server; a denied file the watcher saw change is
//! not sent either.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::{Path, PathBuf};

use common::*;
use lsp_seam::*;
use lsp_stdio::{ServerConfig, StdioLspProvider};
use pretty_assertions::assert_eq;

/// Answers definition, references and workspace symbols with the
/// locations in `$ECHO_TARGETS` (a JSON list of file URIs, each at line 0,
/// column 0), documentSymbol with nothing and hover with null; logs
/// `open URI`, `change URI` and `close URI` to `$ECHO_LOG`.
const ECHO_SERVER: &str = r#"
import json, os, sys

def read_message():
    length = None
    while True:
        line = sys.stdin.buffer.readline()
        if not line:
            return None
        line = line.strip()
        if not line:
            break
        name, _, value = line.partition(b":")
        if name.lower() == b"content-length":
            length = int(value)
    return json.loads(sys.stdin.buffer.read(length))

def send(message):
    body = json.dumps(message).encode()
    sys.stdout.buffer.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
    sys.stdout.buffer.flush()

def log(text):
    with open(os.environ["ECHO_LOG"], "a") as f:
        f.write(text + "\n")

def reply(msg, result):
    send({"jsonrpc": "2.0", "id": msg["id"], "result": result})

targets = json.loads(os.environ["ECHO_TARGETS"])
where = {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}
locations = [{"uri": u, "range": where} for u in targets]
while True:
    msg = read_message()
    if msg is None:
        break
    method = msg.get("method")
    if method == "initialize":
        reply(msg, {"capabilities": {
            "textDocumentSync": 1, "hoverProvider": True, "definitionProvider": True,
            "referencesProvider": True, "documentSymbolProvider": True,
            "workspaceSymbolProvider": True}})
    elif method == "textDocument/didOpen":
        log("open " + msg["params"]["textDocument"]["uri"])
    elif method == "textDocument/didChange":
        log("change " + msg["params"]["textDocument"]["uri"])
    elif method == "textDocument/didClose":
        log("close " + msg["params"]["textDocument"]["uri"])
    elif method in ("textDocument/definition", "textDocument/references"):
        reply(msg, locations)
    elif method == "workspace/symbol":
        reply(msg, [{"name": "thing", "kind": 13, "location": l} for l in locations])
    elif method == "textDocument/documentSymbol":
        reply(msg, [])
    elif method == "textDocument/hover":
        reply(msg, None)
    elif method == "shutdown":
        reply(msg, None)
    elif method == "exit":
        break
    elif "id" in msg and "method" in msg:
        reply(msg, None)
"#;

const SECRET: &str = "PRIVATE-KEY-do-not-show";

struct Setup {
    _dir: tempfile::TempDir,
    root: PathBuf,
    log: PathBuf,
    provider: StdioLspProvider,
}

impl Setup {
    /// `root/main.echo` (queried), `root/ok.echo`, and the denied
    /// `root/secret/key.echo`; the server answers every location query
    /// with `ok.echo` and `secret/key.echo`.
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let root = base.join("project");
        std::fs::create_dir_all(root.join("secret")).unwrap();
        std::fs::write(root.join("echo.toml"), "").unwrap();
        std::fs::write(root.join("main.echo"), "call thing\n").unwrap();
        std::fs::write(root.join("ok.echo"), "thing in ok\n").unwrap();
        std::fs::write(root.join("secret/key.echo"), format!("{SECRET}\n")).unwrap();
        let script = base.join("echo_server.py");
        std::fs::write(&script, ECHO_SERVER).unwrap();
        let log = base.join("log");
        let uri = |p: &Path| format!("file://{}", p.display());
        let targets = format!(
            "[\"{}\", \"{}\"]",
            uri(&root.join("ok.echo")),
            uri(&root.join("secret/key.echo"))
        );
        let config = ServerConfig {
            name: "echo".into(),
            command: "python3".into(),
            args: vec![script.display().to_string()],
            env: [
                ("ECHO_LOG".to_owned(), log.display().to_string()),
                ("ECHO_TARGETS".to_owned(), targets),
            ]
            .into(),
            extensions: [(".echo".to_owned(), "echo".to_owned())].into(),
            root_markers: vec!["echo.toml".into()],
            ..ServerConfig::default()
        };
        require_binary(&config, "install python3");
        let provider = StdioLspProvider::new(config, options());
        Setup {
            _dir: dir,
            root,
            log,
            provider,
        }
    }

    /// A policy refusing `root/secret` (symlinks followed first).
    fn access(&self) -> ReadAccess {
        let denied = self.root.join("secret");
        ReadAccess::new(move |path: &Path| {
            let real = path.canonicalize().unwrap_or_else(|_| path.to_owned());
            if real.starts_with(&denied) {
                Err(ReadDenied {
                    path: real,
                    rule: "`deny_read` entry `secret`".into(),
                })
            } else {
                Ok(())
            }
        })
    }

    fn at(&self, name: &str) -> PositionQuery {
        PositionQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            access: self.access(),
            ..at(&self.root.join(name), 1, "thing")
        }
    }

    /// What the server was sent (opened, changed, closed) so far.
    fn sent(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

fn withheld_one() -> Withheld {
    Withheld {
        count: 1,
        rules: vec!["`deny_read` entry `secret`".into()],
    }
}

#[test]
fn locations_in_denied_files_are_withheld_and_never_read_or_sent() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let s = Setup::new();
    let ok_path = s.root.join("ok.echo");

    let d = RT
        .block_on(s.provider.definition(&s.at("main.echo")))
        .unwrap();
    assert_eq!(
        d.items
            .iter()
            .map(|i| (i.path.clone(), i.body.clone()))
            .collect::<Vec<_>>(),
        vec![(
            ok_path.clone(),
            vec![NumberedLine {
                line: 1,
                text: "thing in ok".into()
            }]
        )]
    );
    assert_eq!(d.withheld, withheld_one());

    let r = RT
        .block_on(s.provider.references(&s.at("main.echo")))
        .unwrap();
    assert_eq!(
        r.files
            .iter()
            .map(|f| (f.path.clone(), f.count))
            .collect::<Vec<_>>(),
        vec![(ok_path.clone(), 1)]
    );
    assert_eq!((r.total, &r.withheld), (1, &withheld_one()));
    assert!(!format!("{r:?}").contains(SECRET));

    let w = RT
        .block_on(s.provider.symbols(&SymbolsQuery {
            workspace: lsp_seam::Workspace::Unbounded,
            progress: Default::default(),
            access: s.access(),
            path: s.root.join("main.echo"),
            query: Some("thing".into()),
        }))
        .unwrap();
    assert_eq!(
        w.symbols.iter().map(|x| x.path.clone()).collect::<Vec<_>>(),
        vec![ok_path.clone()]
    );
    assert_eq!(w.withheld, withheld_one());

    // The definition's plain locations made the provider open the target
    // files to outline them: the permitted one only.
    let sent = s.sent();
    assert!(sent.contains("/project/main.echo"), "{sent}");
    assert!(sent.contains("/project/ok.echo"), "{sent}");
    assert!(!sent.contains("secret"), "{sent}");

    // Without a policy, the same answers carry both files.
    let all = RT
        .block_on(
            s.provider
                .definition(&at(&s.root.join("main.echo"), 1, "thing")),
        )
        .unwrap();
    assert_eq!(all.items.len(), 2);
    assert!(all.withheld.is_empty());
}

#[test]
fn a_denied_queried_file_fails_before_anything_is_started_read_or_sent() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let s = Setup::new();
    let key = s.root.join("secret/key.echo");
    let link = s.root.join("link.echo");
    std::os::unix::fs::symlink(&key, &link).unwrap();
    let denied = LspError::ReadDenied(ReadDenied {
        path: key.clone(),
        rule: "`deny_read` entry `secret`".into(),
    });
    for name in ["secret/key.echo", "link.echo", "secret/../secret/key.echo"] {
        let got = RT.block_on(s.provider.hover(&s.at(name))).unwrap_err();
        assert_eq!(got, denied, "{name}");
        assert_eq!(got.code(), "SANDBOX_READ_DENIED");
        let got = RT
            .block_on(s.provider.symbols(&SymbolsQuery {
                workspace: lsp_seam::Workspace::Unbounded,
                progress: Default::default(),
                access: s.access(),
                path: s.root.join(name),
                query: None,
            }))
            .unwrap_err();
        assert_eq!(got, denied, "{name}");
    }
    assert_eq!(s.provider.servers(), vec![], "a server was started");
    assert_eq!(s.sent(), "");
}

#[test]
fn a_denied_file_the_watcher_saw_change_is_not_sent() {
    if !test_support::needs(&["python3"]) {
        return;
    }
    let s = Setup::new();
    let h = RT.block_on(s.provider.hover(&s.at("main.echo"))).unwrap();
    assert_eq!(h.content, HoverContent::SourceLine("call thing".into()));
    // Both under the server's root, which its watcher watches; the next
    // query waits until the watcher has seen them.
    std::fs::write(s.root.join("secret/new.echo"), format!("{SECRET}\n")).unwrap();
    std::fs::write(s.root.join("ok.echo"), "thing changed in ok\n").unwrap();
    RT.block_on(s.provider.hover(&s.at("main.echo"))).unwrap();
    let sent = s.sent();
    // The permitted change was sent (the watcher works in this test)…
    assert!(sent.contains("/project/ok.echo"), "{sent}");
    // …the denied one was not.
    assert!(!sent.contains("secret"), "{sent}");
}
