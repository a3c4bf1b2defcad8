"""The `lsp` tool on real open-source projects, against an oracle built by
the language's own indexer (rust-analyzer's LSIF) or by the same server
warmed through a plain LSP client (see `tests/lsp_real/prepare.py`,
which fetches the pinned projects and builds the oracles once into
`target/lsp-corpus/`).

Per language, twice (on a quiet machine, then while a real build of the
same project runs): a new dsh in a fresh environment, started in a fresh
copy of the project, is asked `definition`, `references` and `hover` at
every sampled use site, cold. Every answer must be the oracle's or
`LSP_NOT_READY`: no wrong answer, no other error."""

import json
import os
import shutil
import sys
import time

import pytest

from conftest import ROOT, connect, err, make_env, stop_daemons

sys.path.insert(0, str(ROOT / "tests" / "lsp_real"))
import conformance  # noqa: E402
import prepare  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(900)]

SERVERS = {"rust": "rust-analyzer", "python": "pyright-langserver", "typescript": "typescript-language-server",
           "c": "clangd", "go": "gopls"}


# Wrong answers dsh gives today, found by this suite (see "Real projects"
# in docs/subsystems/lsp.md), by language: the run of such a language
# asserts zero wrong answers and is expected to fail until it is fixed.
KNOWN_WRONG: dict[str, str] = {}


@pytest.fixture(
    scope="module",
    params=[
        pytest.param(lang, marks=[pytest.mark.xfail(reason=KNOWN_WRONG[lang])] if lang in KNOWN_WRONG else [])
        for lang in prepare.PROJECTS
    ],
)
def language(request):
    lang = request.param
    if lang == "go" and os.environ.get("DSH_GO_UNAVAILABLE"):
        pytest.skip(f"Go is not installable here: {os.environ['DSH_GO_UNAVAILABLE']}")
    if shutil.which(SERVERS[lang]) is None:
        pytest.fail(f"{SERVERS[lang]} is not on PATH: `cargo xtask test` installs it")
    prepare.prepare(lang)  # once per machine: cached under target/lsp-corpus
    return lang


@pytest.mark.parametrize("build", [False, True], ids=["quiet", "under-build"])
async def test_every_answer_is_the_oracles_or_not_ready(language, build, tmp_path):
    tally = await conformance.run(language, tmp_path, build=build)
    print(conformance.summary(tally))
    detail = json.dumps({k: tally[k] for k in ("wrong", "errors", "build_failures")}, indent=1)
    assert not tally["build_failures"], detail
    assert not tally["wrong"], f"{language}: answers that are not the oracle's:\n{detail}"
    assert not tally["errors"], f"{language}: errors other than LSP_NOT_READY:\n{detail}"
    assert tally["right"] == 3 * len(prepare.load_oracle(language)["sites"])


# Found by the C run: a `definition` into a header must not open that header
# on clangd (parsed alone, without the macros its includer defines, its index
# of the open file would replace the background index's), or later
# `references` miss the uses in a section the includer enables.
async def test_c_references_stay_whole_after_a_definition_into_a_header(tmp_path):
    if shutil.which("clangd") is None:
        pytest.fail("clangd is not on PATH: `cargo xtask test` installs it")
    prepare.prepare("c")
    project = tmp_path / "ws" / prepare.PROJECTS["c"]["dir"]
    shutil.copytree(prepare.project_dir("c"), project)
    prepare.localize("c", project)
    env = make_env(tmp_path / "ws")
    # LZ4F_dctx, used in lz4frame.c and declared in lz4frame.h, where two
    # uses sit in the section lz4frame.c enables with LZ4F_STATIC_LINKING_ONLY
    refs = {"op": "references", "path": "lz4libs/lz4frame.c", "line": 1428, "symbol": "LZ4F_dctx",
            "max_results": 1000}

    async def ask(session, args):
        deadline = time.monotonic() + 240
        while True:
            r = await session.call_tool("lsp", args)
            if r.isError and err(r)["code"] == "LSP_NOT_READY" and time.monotonic() < deadline:
                continue
            assert not r.isError, err(r)
            return r.structuredContent

    def lines_in_header(answer):
        return sorted(x["line"] for f in answer["files"] if f["path"] == "lz4libs/lz4frame.h" for x in f["refs"])

    try:
        async with connect(env, cwd=str(project)) as s:
            before = lines_in_header(await ask(s, refs))
            assert {656, 684} <= set(before), before
            d = await ask(s, {"op": "definition", "path": "lz4libs/lz4frame.c", "line": 1428, "symbol": "LZ4F_dctx"})
            assert [(i["path"], i["line"]) for i in d["items"]] == [("lz4libs/lz4frame.h", 354)]
            after = lines_in_header(await ask(s, refs))
            assert after == before, f"references in lz4frame.h before the definition {before}, after {after}"
    finally:
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
