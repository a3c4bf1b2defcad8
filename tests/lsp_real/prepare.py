"""Prepares the real-project LSP conformance corpus: fetches pinned
open-source projects through their registries' own clients, unpacks them
under `target/lsp-corpus/<language>/`, and records an oracle per project:
use sites across the project with the definition, references and hover
the language's own indexer (or a fully warmed server, asked through a
plain LSP client) gives for each.

    python tests/lsp_real/prepare.py [rust python ...]

Idempotent: a project whose oracle exists for the pinned version is left
alone. The oracle (`oracle.json`) holds paths relative to the project
root, 1-based lines and 1-based columns in Unicode scalars (the `lsp`
tool's own units)."""

import hashlib
import json
import keyword
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import defaultdict

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from lspclient import LspClient, path_of  # noqa: E402

ROOT = HERE.parents[1]
CORPUS = pathlib.Path(os.environ.get("DSH_LSP_CORPUS", ROOT / "target" / "lsp-corpus"))

# Use sites per project; the suite asks all three queries at each.
SITES = 20
# A site's references must fit one answer unshortened.
MAX_REFS = 40


def pinned_typescript7() -> str:
    """The TypeScript 7 version the test tools pin (`tests/node/package.json`,
    `"typescript7": "npm:typescript@<version>"`): one pin for both."""
    deps = json.loads((ROOT / "tests" / "node" / "package.json").read_text())["dependencies"]
    return deps["typescript7"].rpartition("@")[2]


PROJECTS = {
    "rust": {
        "name": "memchr",
        "version": "2.8.3",
        "dir": "memchr-2.8.3",
        "sample_under": "src",
        "extension": ".rs",
        "oracle": "rust-analyzer lsif, kept where a warmed rust-analyzer (plain LSP client) agrees",
    },
    "python": {
        "name": "click",
        "version": "8.1.7",
        "dir": "click-8.1.7",
        "sample_under": "src/click",
        "extension": ".py",
        "oracle": "pyright-langserver, warmed (plain LSP client)",
    },
    "typescript": {
        "name": "@tanstack/query-core",
        "package": "@tanstack/query-core",
        "version": "5.59.0",
        "dir": "query-core-5.59.0",
        "sample_under": "src",
        "extension": ".ts",
        "oracle": "typescript-language-server, warmed (plain LSP client)",
    },
    "typescript7": {
        # the same project with TypeScript 7 as its own `node_modules/typescript`:
        # dsh then serves it with TypeScript 7's native server (`tsc --lsp`)
        "name": "@tanstack/query-core",
        "package": "@tanstack/query-core",
        "version": "5.59.0",
        "typescript": pinned_typescript7(),
        "dir": "query-core-5.59.0",
        "sample_under": "src",
        "extension": ".ts",
        "oracle": "TypeScript 7's native server (`tsc --lsp`), warmed (plain LSP client)",
    },
    "c": {
        # LZ4 1.9.x's C sources, as vendored by the Python binding's sdist
        "name": "lz4",
        "version": "4.3.3",
        "dir": "lz4-4.3.3",
        "sample_under": "lz4libs",
        "extension": ".c",
        "oracle": "clangd --background-index, warmed (plain LSP client), kept where a second clangd "
                  "with only the queried file open agrees",
        # lz4hc.c #includes lz4.c: clangd's index then holds lz4.c in two
        # configurations, and which answers depends on the files open
        "cross_check_alone": True,
    },
    "go": {
        # Go modules come from Debian's golang-*-dev packages (no module proxy)
        "name": "github.com/google/uuid",
        "version": "1.3.0",
        "deb": "golang-github-google-uuid-dev",
        "deb_version": "1.3.0-1",
        "import_path": "github.com/google/uuid",
        "dir": "uuid-1.3.0",
        "sample_under": ".",
        "extension": ".go",
        "oracle": "gopls, warmed (plain LSP client)",
    },
}

# the `wheel` package for the Python project's editable install
WHEEL = "0.45.1"


def wheels_dir() -> pathlib.Path:
    return CORPUS / "python" / "wheels"


RUST_KEYWORDS = {
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use",
    "where", "while", "async", "await", "dyn",
}
IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def project_dir(lang) -> pathlib.Path:
    return CORPUS / lang / PROJECTS[lang]["dir"]


def oracle_path(lang) -> pathlib.Path:
    return CORPUS / lang / "oracle.json"


def load_oracle(lang) -> dict:
    return json.loads(oracle_path(lang).read_text())


def ready(lang) -> bool:
    p = oracle_path(lang)
    if not p.exists() or not project_dir(lang).is_dir():
        return False
    if lang == "python" and not any(wheels_dir().glob(f"wheel-{WHEEL}-*.whl")):
        return False
    o = json.loads(p.read_text())
    spec = PROJECTS[lang]
    return (o.get("version") == spec["version"] and o.get("typescript") == spec.get("typescript")
            and len(o.get("sites", [])) == SITES)


def run(cmd, **kw):
    print("+", " ".join(map(str, cmd)), file=sys.stderr)
    subprocess.run(cmd, check=True, **kw)


def order_key(*parts) -> str:
    """A deterministic, well-mixed order over positions."""
    return hashlib.sha1(":".join(map(str, parts)).encode()).hexdigest()


def scalar_col(text_line: str, utf16: int) -> int:
    """0-based UTF-16 offset on a line → 0-based Unicode-scalar offset."""
    units = 0
    for i, ch in enumerate(text_line):
        if units >= utf16:
            return i
        units += 2 if ord(ch) > 0xFFFF else 1
    return len(text_line)


def occurrence(text_line: str, symbol: str, col0: int) -> int:
    """Which whole-identifier occurrence of `symbol` on the line starts at
    `col0` (1-based), as the `lsp` tool counts them; 0 if none does."""
    n = 0
    for m in re.finditer(re.escape(symbol), text_line):
        s, e = m.start(), m.end()
        before = s > 0 and (text_line[s - 1].isalnum() or text_line[s - 1] == "_")
        after = e < len(text_line) and (text_line[e].isalnum() or text_line[e] == "_")
        if before or after:
            continue
        n += 1
        if s == col0:
            return n
    return 0


class Files:
    """Lines of the project's files, read once."""

    def __init__(self, root):
        self.root = pathlib.Path(root).resolve()
        self.cache = {}

    def rel(self, path):
        p = pathlib.Path(path).resolve()
        try:
            return str(p.relative_to(self.root))
        except ValueError:
            return None

    def lines(self, path):
        p = str(pathlib.Path(path).resolve())
        if p not in self.cache:
            self.cache[p] = pathlib.Path(p).read_text(errors="replace").split("\n")
        return self.cache[p]

    def loc(self, path, line0, utf16):
        """(relative path, 1-based line, 1-based scalar column)."""
        return (self.rel(path), line0 + 1, scalar_col(self.lines(path)[line0], utf16) + 1)


def site_record(files, path, line0, char0, symbol, definition, references, hover):
    text_line = files.lines(path)[line0]
    col0 = scalar_col(text_line, char0)
    return {
        "path": files.rel(path),
        "line": line0 + 1,
        "column": col0 + 1,
        "symbol": symbol,
        "occurrence": occurrence(text_line, symbol, col0),
        "definition": sorted({(r, line) for r, line, _ in definition}),
        "references": sorted(set(references)),
        "hover": hover,
    }


# -- Rust: crates.io through cargo, oracle from rust-analyzer's LSIF -------


def fetch_rust(spec, dest):
    with tempfile.TemporaryDirectory(prefix="lsp-corpus-") as scratch:
        scratch = pathlib.Path(scratch)
        (scratch / "src").mkdir()
        (scratch / "src" / "lib.rs").write_text("")
        (scratch / "Cargo.toml").write_text(
            f'[package]\nname = "corpus-fetch"\nversion = "0.0.0"\nedition = "2021"\n\n'
            f'[dependencies]\n{spec["name"]} = "={spec["version"]}"\n'
        )
        run(["cargo", "fetch", "--quiet"], cwd=scratch)
        meta = json.loads(
            subprocess.run(
                ["cargo", "metadata", "--offline", "--format-version", "1"],
                cwd=scratch, check=True, capture_output=True, text=True,
            ).stdout
        )
    [pkg] = [p for p in meta["packages"] if p["name"] == spec["name"] and p["version"] == spec["version"]]
    shutil.copytree(pathlib.Path(pkg["manifest_path"]).parent, dest)


def oracle_rust(spec, root):
    # the crate's own lock file pins its (dev-)dependencies: fetch them now
    # (outside any other Cargo workspace), so the language server and the
    # concurrent build of the suite need no network
    run(["cargo", "fetch", "--quiet"], cwd=root)
    files = Files(root)
    # a temp dir of its own: its proc-macro server leaves a directory in
    # TMPDIR behind
    with tempfile.TemporaryDirectory(prefix="lsp-oracle-") as temp:
        lsif = subprocess.run(
            ["rust-analyzer", "lsif", "."], cwd=root, check=True, capture_output=True, text=True,
            env=dict(os.environ, TMPDIR=temp),
        ).stdout
    docs, ranges, hovers = {}, {}, {}
    nxt, def_e, ref_e, hov_e, range_doc = {}, {}, {}, {}, {}
    items = defaultdict(list)
    for line in lsif.splitlines():
        o = json.loads(line)
        lab = o["label"]
        if o["type"] == "vertex":
            if lab == "document":
                docs[o["id"]] = path_of(o["uri"])
            elif lab == "range":
                ranges[o["id"]] = (o["start"]["line"], o["start"]["character"], o["end"]["character"])
            elif lab == "hoverResult":
                c = o["result"]["contents"]
                hovers[o["id"]] = c.get("value", "") if isinstance(c, dict) else str(c)
            continue
        if lab == "next":
            nxt[o["outV"]] = o["inV"]
        elif lab == "textDocument/definition":
            def_e[o["outV"]] = o["inV"]
        elif lab == "textDocument/references":
            ref_e[o["outV"]] = o["inV"]
        elif lab == "textDocument/hover":
            hov_e[o["outV"]] = o["inV"]
        elif lab == "contains":
            for v in o["inVs"]:
                range_doc[v] = o["outV"]
        elif lab == "item":
            for v in o["inVs"]:
                items[o["outV"]].append((v, o["document"]))

    def follow(edge, v):
        while v is not None:
            if v in edge:
                return edge[v]
            v = nxt.get(v)
        return None

    def located(range_ids):
        out = []
        for rid, doc in range_ids:
            line0, c0, _ = ranges[rid]
            if files.rel(docs[doc]) is not None:
                out.append(files.loc(docs[doc], line0, c0))
        return out

    candidates = []
    for rid, (line0, c0, c1) in ranges.items():
        doc = range_doc.get(rid)
        path = docs.get(doc)
        rel = files.rel(path) if path else None
        if rel is None or not rel.startswith(spec["sample_under"] + "/"):
            continue
        text_line = files.lines(path)[line0]
        if not text_line.isascii():
            continue
        symbol = text_line[c0:c1]
        if not IDENT.match(symbol) or symbol in RUST_KEYWORDS:
            continue
        dres = follow(def_e, rid)
        if dres is None:
            continue
        targets = items.get(dres, [])
        if len(targets) != 1 or targets[0][0] == rid or targets[0][1] == doc:
            continue  # a definition itself, several, or one in the same file
        definition = located(targets)
        if len(definition) != 1:
            continue  # outside the project
        rres = follow(ref_e, rid)
        references = located(items.get(rres, [])) if rres is not None else []
        if not 2 <= len(set(references)) <= MAX_REFS:
            continue
        hover = hovers.get(follow(hov_e, rid), "")
        if symbol not in hover:
            continue
        candidates.append((order_key(rel, line0, c0), symbol, path, line0, c0, definition, references, hover))
    candidates.sort()
    # Keep the sites where the same server, fully warmed and asked through a
    # plain LSP client, agrees with the LSIF: there the truth is not in
    # doubt. (They differ by design elsewhere: LSIF gives one target for
    # an identifier a macro expands several times, lists a module's own
    # file among its references, and leaves trait impls out of a trait
    # method's references; the server does the opposite.)
    client = LspClient(["rust-analyzer"], root)
    try:
        client.initialize({"checkOnSave": False, "cachePriming": {"enable": True}})
        seen_busy = lambda: any(not s.get("quiescent") for s in client.server_status)  # noqa: E731
        client.wait_for(
            lambda: seen_busy() and client.server_status[-1].get("quiescent")
            and client.server_status[-1].get("health") == "ok",
            600, "rust-analyzer's loaded, quiescent workspace")
        picked, seen = [], set()
        for _, symbol, path, line0, c0, definition, references, hover in candidates:
            if symbol in seen:
                continue
            [(d, r, _)] = warmed_answers(client, files, [(path, line0, c0, symbol)])
            d_lines = sorted({(p, line) for p, line, _ in d})
            if d_lines != sorted({(p, line) for p, line, _ in definition}) or r != sorted(set(references)):
                print(f"  skipped {symbol} at {files.rel(path)}:{line0 + 1}: LSIF and the warm server differ",
                      file=sys.stderr)
                continue
            seen.add(symbol)
            picked.append(((path, line0, c0, symbol), definition, references, hover))
            if len(picked) == SITES:
                break
        queries = [q for q, *_ in picked]
        previous = warmed_answers(client, files, queries)
        for _ in range(5):
            current = warmed_answers(client, files, queries)
            if current == previous:
                break
            previous = current
        else:
            raise SystemExit("rust-analyzer's answers kept changing")
    finally:
        client.close()
    sites = []
    for ((path, line0, c0, symbol), definition, references, hover), (d, r, _) in zip(picked, current):
        if r != sorted(set(references)):
            continue
        sites.append(site_record(files, path, line0, c0, symbol, definition, references, hover))
    return sites


# -- Python: a PyPI sdist through pip, oracle from a warmed pyright ---------


def pip_sdist(spec, dest):
    """A source distribution from PyPI, unpacked as `dest`."""
    with tempfile.TemporaryDirectory(prefix="lsp-corpus-") as dl:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-binary", ":all:", "--no-deps", f"{spec['name']}=={spec['version']}", "-d", dl])
        [sdist] = pathlib.Path(dl).glob("*.tar.gz")
        with tarfile.open(sdist) as t:
            t.extractall(dl, filter="data")
        shutil.copytree(pathlib.Path(dl) / spec["dir"], dest)


def fetch_python(spec, dest):
    pip_sdist(spec, dest)
    # the suite's concurrent `pip install -e .` runs offline, without build
    # isolation: setuptools' editable build then needs `wheel` installed
    run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
         "--only-binary", ":all:", "--no-deps", f"wheel=={WHEEL}", "-d", str(wheels_dir())])


def python_candidates(root, under):
    import io
    import tokenize

    out = []
    for f in sorted((root / under).rglob("*.py")):
        src = f.read_text()
        lines = src.split("\n")
        prev = None
        for tok in tokenize.generate_tokens(io.StringIO(src).readline):
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) and tok.string not in ("self", "cls"):
                line0, c0 = tok.start[0] - 1, tok.start[1]
                if prev not in ("def", "class") and lines[line0].isascii():
                    out.append((order_key(f.relative_to(root), line0, c0), str(f), line0, c0, tok.string))
            if tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.COMMENT):
                prev = tok.string
    out.sort()
    return out


def warmed_answers(client, files, sites):
    answers = []
    for path, line0, c0, _symbol in sites:
        d = [files.loc(p, l, c) for p, l, c in client.definition(path, line0, c0) if files.rel(p) is not None]
        r = [files.loc(p, l, c) for p, l, c in client.references(path, line0, c0) if files.rel(p) is not None]
        h = client.hover(path, line0, c0)
        answers.append((sorted(set(d)), sorted(set(r)), h))
    return answers


def server(name):
    path = shutil.which(name)
    if path is None:
        raise SystemExit(f"{name} is not on PATH (`cargo xtask test` installs it into tests/node)")
    return path


def oracle_by_server(spec, root, command, language_id, candidates, is_ready, what, exclude=()):
    """The oracle of a server warmed through a plain LSP client: every
    source file under `sample_under` opened, the server's own readiness
    signal awaited, then the candidates asked in order until enough have
    one definition in another file of the project, and those asked again
    and again until a whole round answers as the one before."""
    files = Files(root)
    client = LspClient(command, root)
    try:
        client.initialize()
        for pattern in spec.get("open", ["*" + spec["extension"]]):
            for f in sorted((root / spec["sample_under"]).rglob(pattern)):
                client.open(f, language_id)
        client.wait_for(lambda: is_ready(client), 300, what)
        picked = []
        for _, path, line0, c0, symbol in candidates:
            if len(picked) == 2 * SITES or symbol in {s[3] for s in picked}:
                continue
            try:
                found = client.definition(path, line0, c0)
            except RuntimeError:
                continue  # gopls: "no identifier found" (a string, a comment)
            defs = [x for x in found if files.rel(x[0]) is not None]
            if len(defs) != 1 or defs[0][0] == str(pathlib.Path(path).resolve()):
                continue
            picked.append((path, line0, c0, symbol))
        # generously warm: ask until a whole round answers as the one before
        previous = warmed_answers(client, files, picked)
        for _ in range(5):
            current = warmed_answers(client, files, picked)
            if current == previous:
                break
            previous = current
        else:
            raise SystemExit(f"{command[0]}: its answers kept changing")
    finally:
        client.close()
    if spec.get("cross_check_alone"):
        current = cross_check_alone(spec, root, command, language_id, is_ready, what, files, picked, current)
    sites = []
    for (path, line0, c0, symbol), answer in zip(picked, current):
        if answer is None:
            continue
        d, r, h = answer
        if any(loc[0] in exclude for loc in d + r + [(files.rel(path),)]):
            continue
        if len(d) != 1 or not 2 <= len(r) <= MAX_REFS or symbol not in h:
            continue
        sites.append(site_record(files, path, line0, c0, symbol, d, r, h))  # ASCII lines: c0 is UTF-16 too
        if len(sites) == SITES:
            break
    return sites


def cross_check_alone(spec, root, command, language_id, is_ready, what, files, picked, answers):
    """Asks each site again from a second server that has only the queried
    file open (as a client asking one question has); a site whose answer
    differs from the first server's (every file open) is dropped (None):
    there the server's own answer depends on which files are open."""
    client = LspClient(command, root)
    kept = []
    try:
        client.initialize()
        first = picked[0][0]
        client.open(first, language_id)
        client.wait_for(lambda: is_ready(client), 300, what)
        client.close_document(first)
        for site, answer in zip(picked, answers):
            client.open(site[0], language_id)
            [alone] = warmed_answers(client, files, [site])
            client.close_document(site[0])
            if alone[:2] != answer[:2]:
                print(f"  skipped {site[3]} at {files.rel(site[0])}:{site[1] + 1}: "
                      "the answer depends on the files open", file=sys.stderr)
                answer = None
            kept.append(answer)
    finally:
        client.close()
    return kept


def oracle_python(spec, root):
    # pyright's own signal that its file list is complete, then no work
    return oracle_by_server(
        spec, root, [server("pyright-langserver"), "--stdio"], "python",
        python_candidates(root, spec["sample_under"]),
        lambda c: any(re.search(r"Found \d+ source file", m) for m in c.logs) and not c.active_progress,
        "pyright's source file list")


# -- TypeScript: an npm package that ships its sources, oracle from a warmed
# typescript-language-server ------------------------------------------------

# The package ships no tsconfig.json: this one makes its sources a project
# (`tsc -b` builds it), with `process` declared as its own build does.
TSCONFIG = {
    "compilerOptions": {
        "target": "ES2020", "module": "ESNext", "moduleResolution": "Bundler", "lib": ["ES2020", "DOM"],
        "strict": True, "composite": True, "declaration": True, "skipLibCheck": True, "types": [],
        "outDir": "out",
    },
    "include": ["src", "types"],
}
PROCESS_DTS = "declare const process: { env: Record<string, string | undefined> }\n"
TS_KEYWORDS = {
    "abstract", "any", "as", "async", "await", "boolean", "break", "case", "catch", "class", "const",
    "constructor", "continue", "declare", "default", "delete", "do", "else", "enum", "export", "extends",
    "false", "finally", "for", "from", "function", "get", "if", "implements", "import", "in", "infer",
    "instanceof", "interface", "is", "keyof", "let", "never", "new", "null", "number", "object", "of",
    "private", "protected", "public", "readonly", "return", "set", "static", "string", "super", "switch",
    "this", "throw", "true", "try", "type", "typeof", "undefined", "unknown", "var", "void", "while",
    "yield", "symbol", "bigint",
}


def fetch_typescript(spec, dest):
    with tempfile.TemporaryDirectory(prefix="lsp-corpus-") as dl:
        run(["npm", "pack", "--quiet", f"{spec['package']}@{spec['version']}"], cwd=dl,
            stdout=subprocess.DEVNULL)
        [tgz] = pathlib.Path(dl).glob("*.tgz")
        with tarfile.open(tgz) as t:
            t.extractall(dl, filter="data")
        shutil.copytree(pathlib.Path(dl) / "package", dest)
    # the sources are the project: drop the prebuilt output and the tests
    # (which need the upstream repository's test tooling)
    shutil.rmtree(dest / "build", ignore_errors=True)
    shutil.rmtree(dest / "src" / "__tests__", ignore_errors=True)
    (dest / "tsconfig.json").write_text(json.dumps(TSCONFIG, indent=2) + "\n")
    (dest / "types").mkdir()
    (dest / "types" / "process.d.ts").write_text(PROCESS_DTS)


def ts_candidates(root, under):
    out = []
    word = re.compile(r"(?<![A-Za-z0-9_$])[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_$])")
    for f in sorted((root / under).rglob("*.ts")):
        for line0, text in enumerate(f.read_text().split("\n")):
            code = text.strip()
            if not text.isascii() or code.startswith(("//", "*", "/*")):
                continue
            for m in word.finditer(text):
                if m.group() not in TS_KEYWORDS:
                    out.append((order_key(f.relative_to(root), line0, m.start()), str(f), line0, m.start(), m.group()))
    out.sort()
    return out


def oracle_typescript(spec, root):
    # its "Initializing JS/TS language features" progress has begun and
    # ended, and nothing else is in progress
    return oracle_by_server(
        spec, root, [server("typescript-language-server"), "--stdio"], "typescript",
        ts_candidates(root, spec["sample_under"]),
        lambda c: c.ended_progress and not c.active_progress,
        "typescript-language-server's project load")


# -- TypeScript 7: the same package with TypeScript 7 installed in it, oracle
# from a warmed TypeScript 7 native server ---------------------------------


def fetch_typescript7(spec, dest):
    fetch_typescript(spec, dest)
    # `npm install typescript@<version>` in a scratch directory (in the
    # project, its own package.json would pull in more), then its
    # node_modules moved in
    with tempfile.TemporaryDirectory(prefix="lsp-corpus-") as inst:
        (pathlib.Path(inst) / "package.json").write_text('{"private": true}\n')
        run(["npm", "install", "--no-audit", "--no-fund", "--no-package-lock", "--loglevel=error",
             f"typescript@{spec['typescript']}"], cwd=inst, stdout=subprocess.DEVNULL)
        shutil.move(pathlib.Path(inst) / "node_modules", dest / "node_modules")


def project_tsc(project) -> pathlib.Path:
    """The project's own TypeScript's `tsc`."""
    return pathlib.Path(project) / "node_modules" / ".bin" / "tsc"


def oracle_typescript7(spec, root):
    # the native server logs each notification it has handled: every
    # didOpen handled (the project loaded for them) and no progress active
    opened = sum(1 for _ in (root / spec["sample_under"]).rglob("*" + spec["extension"]))
    handled = "handled method 'textDocument/didOpen'"
    return oracle_by_server(
        spec, root, [str(project_tsc(root)), "--lsp", "--stdio"], "typescript",
        ts_candidates(root, spec["sample_under"]),
        lambda c: sum(handled in m for m in c.logs) >= opened and not c.active_progress,
        "TypeScript 7's native server handling every didOpen")


# -- C: a C library vendored in a PyPI sdist, oracle from a warmed clangd ---

C_KEYWORDS = {
    "auto", "break", "case", "char", "const", "continue", "default", "do", "double", "else", "enum",
    "extern", "float", "for", "goto", "if", "inline", "int", "long", "register", "restrict", "return",
    "short", "signed", "sizeof", "static", "struct", "switch", "typedef", "union", "unsigned", "void",
    "volatile", "while", "define", "ifdef", "ifndef", "endif", "include", "defined", "elif", "undef",
    "pragma", "error",
}


def c_sources(project):
    spec = PROJECTS["c"]
    return sorted((pathlib.Path(project) / spec["sample_under"]).glob("*.c"))


def compile_commands(project):
    """The compilation database clangd needs, for the library's own C
    files (its absolute paths are the copy's: written after each copy)."""
    project = pathlib.Path(project).resolve()
    spec = PROJECTS["c"]
    db = [
        {
            "directory": str(project),
            "file": str(f.relative_to(project)),
            "arguments": ["cc", "-std=c99", "-O2", "-I", spec["sample_under"], "-c", str(f.relative_to(project)),
                          "-o", f.stem + ".o"],
        }
        for f in c_sources(project)
    ]
    (project / "compile_commands.json").write_text(json.dumps(db, indent=1) + "\n")


def localize(lang, project):
    """What a fresh copy of `lang`'s project needs before a server starts."""
    if lang == "c":
        compile_commands(project)


def fetch_c(spec, dest):
    pip_sdist(spec, dest)


def c_candidates(root, under):
    out = []
    word = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_])")
    # use sites in the .c files: a header opened on its own is parsed
    # without the translation unit that includes it (its conditional parts
    # inactive), and clangd's index of an open file replaces the background
    # index's, which would make the oracle's answers the header's alone
    for f in sorted((root / under).glob("*.c")):
        for line0, text in enumerate(f.read_text(errors="replace").split("\n")):
            code = text.strip()
            if not text.isascii() or code.startswith(("//", "*", "/*", "#include")):
                continue
            for m in word.finditer(text):
                if m.group() not in C_KEYWORDS:
                    out.append((order_key(f.relative_to(root), line0, m.start()), str(f), line0, m.start(), m.group()))
    out.sort()
    return out


def oracle_c(spec, root):
    # A .c file another one #includes (lz4hc.c includes lz4.c) is indexed
    # in two configurations, and which one clangd answers from depends on
    # the files open: no site touching one is kept.
    included = set()
    for f in c_sources(root):
        for name in re.findall(r'^\s*#\s*include\s+"([^"]+\.c)"', f.read_text(errors="replace"), re.M):
            included.add(str((f.parent / name).relative_to(root)))
    # its background index has been built ("indexing" begun and ended)
    return oracle_by_server(
        spec, root, [server("clangd"), "--background-index", "--header-insertion=never"], "c",
        c_candidates(root, spec["sample_under"]),
        lambda c: "indexing" in c.ended_progress and not c.active_progress,
        "clangd's background index", exclude=included)


# -- Go: a module's source from a Debian package, oracle from a warmed gopls

GO_KEYWORDS = {
    "break", "case", "chan", "const", "continue", "default", "defer", "else", "fallthrough", "for", "func",
    "go", "goto", "if", "import", "interface", "map", "package", "range", "return", "select", "struct",
    "switch", "type", "var", "nil", "true", "false",
}


def fetch_go(spec, dest):
    installed = subprocess.run(["dpkg-query", "-W", "-f", "${Version}", spec["deb"]],
                               capture_output=True, text=True).stdout.strip()
    if installed != spec["deb_version"]:
        raise SystemExit(f"{spec['deb']} {spec['deb_version']} is not installed (found {installed or 'none'}): "
                         f"apt-get install {spec['deb']}={spec['deb_version']}")
    shutil.copytree(pathlib.Path("/usr/share/gocode/src") / spec["import_path"], dest)


def go_candidates(root, under):
    out = []
    word = re.compile(r"(?<![A-Za-z0-9_])[A-Za-z_][A-Za-z0-9_]*(?![A-Za-z0-9_])")
    for f in sorted((root / under).glob("*.go")):
        for line0, text in enumerate(f.read_text().split("\n")):
            if not text.isascii() or text.strip().startswith(("//", "/*", "*")):
                continue
            for m in word.finditer(text):
                if m.group() not in GO_KEYWORDS:
                    out.append((order_key(f.relative_to(root), line0, m.start()), str(f), line0, m.start(), m.group()))
    out.sort()
    return out


def oracle_go(spec, root):
    # its "Setting up workspace" progress has begun and ended
    return oracle_by_server(
        spec, root, [server("gopls")], "go", go_candidates(root, spec["sample_under"]),
        lambda c: "Setting up workspace" in c.ended_progress and not c.active_progress,
        "gopls's workspace")


FETCH = {"rust": fetch_rust, "python": fetch_python, "typescript": fetch_typescript,
         "typescript7": fetch_typescript7, "c": fetch_c, "go": fetch_go}
ORACLE = {"rust": oracle_rust, "python": oracle_python, "typescript": oracle_typescript,
          "typescript7": oracle_typescript7, "c": oracle_c, "go": oracle_go}


def prepare(lang):
    if ready(lang):
        return
    spec = PROJECTS[lang]
    base = CORPUS / lang
    shutil.rmtree(base, ignore_errors=True)
    base.mkdir(parents=True)
    dest = project_dir(lang)
    FETCH[lang](spec, dest)
    started = time.monotonic()
    # the oracle is built on a scratch copy: servers and indexers leave
    # caches and build output behind
    with tempfile.TemporaryDirectory(prefix="lsp-oracle-") as tmp:
        work = pathlib.Path(tmp) / spec["dir"]
        shutil.copytree(dest, work, symlinks=True)
        localize(lang, work)
        sites = ORACLE[lang](spec, work)
    if len(sites) != SITES:
        raise SystemExit(f"{lang}: only {len(sites)} use sites qualify, {SITES} wanted")
    oracle = {
        "language": lang,
        "project": spec["name"],
        "version": spec["version"],
        "oracle": spec["oracle"],
        **({"typescript": spec["typescript"]} if "typescript" in spec else {}),
        "seconds": round(time.monotonic() - started, 1),
        "sites": sites,
    }
    oracle_path(lang).write_text(json.dumps(oracle, indent=1))
    print(f"{lang}: {spec['name']} {spec['version']}: {len(sites)} sites ({oracle['seconds']} s)", file=sys.stderr)


def languages(argv=()):
    """The languages asked for (all by default), less Go when it cannot be
    installed here (`DSH_GO_UNAVAILABLE` says why)."""
    langs = list(argv) or list(PROJECTS)
    for lang in langs:
        if lang not in PROJECTS:
            raise SystemExit(f"unknown language {lang!r}; known: {', '.join(PROJECTS)}")
    if os.environ.get("DSH_GO_UNAVAILABLE") and "go" in langs:
        print(f"go: left out: {os.environ['DSH_GO_UNAVAILABLE']}", file=sys.stderr)
        langs.remove("go")
    return langs


def main(argv):
    for lang in languages(argv):
        prepare(lang)


if __name__ == "__main__":
    main(sys.argv[1:])
