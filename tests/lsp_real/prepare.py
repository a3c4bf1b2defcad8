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

PROJECTS = {
    "rust": {
        "name": "memchr",
        "version": "2.8.3",
        "dir": "memchr-2.8.3",
        "sample_under": "src",
        "extension": ".rs",
        "oracle": "rust-analyzer lsif",
    },
    "python": {
        "name": "click",
        "version": "8.1.7",
        "dir": "click-8.1.7",
        "sample_under": "src/click",
        "extension": ".py",
        "oracle": "pyright-langserver, warmed (plain LSP client)",
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
    return o.get("version") == PROJECTS[lang]["version"] and len(o.get("sites", [])) == SITES


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
    lsif = subprocess.run(
        ["rust-analyzer", "lsif", "."], cwd=root, check=True, capture_output=True, text=True
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


def fetch_python(spec, dest):
    with tempfile.TemporaryDirectory(prefix="lsp-corpus-") as dl:
        run([sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
             "--no-binary", ":all:", "--no-deps", f"{spec['name']}=={spec['version']}", "-d", dl])
        [sdist] = pathlib.Path(dl).glob("*.tar.gz")
        with tarfile.open(sdist) as t:
            t.extractall(dl, filter="data")
        shutil.copytree(pathlib.Path(dl) / spec["dir"], dest)
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


def oracle_python(spec, root):
    files = Files(root)
    server = shutil.which("pyright-langserver")
    if server is None:
        raise SystemExit("pyright-langserver is not on PATH (`cargo xtask test` installs it into tests/node)")
    client = LspClient([server, "--stdio"], root)
    try:
        client.initialize()
        for f in sorted((root / spec["sample_under"]).rglob("*.py")):
            client.open(f, "python")
        # pyright's own signal that its file list is complete, then no work
        client.wait_for(
            lambda: any(re.search(r"Found \d+ source file", m) for m in client.logs) and not client.active_progress,
            300, "pyright's source file list")
        picked = []
        for _, path, line0, c0, symbol in python_candidates(root, spec["sample_under"]):
            if len(picked) == 2 * SITES or symbol in {s[3] for s in picked}:
                continue
            defs = [x for x in client.definition(path, line0, c0) if files.rel(x[0]) is not None]
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
            raise SystemExit("pyright's answers kept changing")
    finally:
        client.close()
    sites = []
    for (path, line0, c0, symbol), (d, r, h) in zip(picked, current):
        if len(d) != 1 or not 2 <= len(r) <= MAX_REFS or symbol not in h:
            continue
        line_utf16 = c0  # the line is ASCII
        sites.append(site_record(files, path, line0, line_utf16, symbol, d, r, h))
        if len(sites) == SITES:
            break
    return sites


FETCH = {"rust": fetch_rust, "python": fetch_python}
ORACLE = {"rust": oracle_rust, "python": oracle_python}


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
        sites = ORACLE[lang](spec, work)
    if len(sites) != SITES:
        raise SystemExit(f"{lang}: only {len(sites)} use sites qualify, {SITES} wanted")
    oracle = {
        "language": lang,
        "project": spec["name"],
        "version": spec["version"],
        "oracle": spec["oracle"],
        "seconds": round(time.monotonic() - started, 1),
        "sites": sites,
    }
    oracle_path(lang).write_text(json.dumps(oracle, indent=1))
    print(f"{lang}: {spec['name']} {spec['version']}: {len(sites)} sites ({oracle['seconds']} s)", file=sys.stderr)


def main(argv):
    langs = argv or list(PROJECTS)
    for lang in langs:
        if lang not in PROJECTS:
            raise SystemExit(f"unknown language {lang!r}; known: {', '.join(PROJECTS)}")
        prepare(lang)


if __name__ == "__main__":
    main(sys.argv[1:])
