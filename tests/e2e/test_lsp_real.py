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
import shutil
import sys

import pytest

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests" / "lsp_real"))
import conformance  # noqa: E402
import prepare  # noqa: E402

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(900)]

SERVERS = {"rust": "rust-analyzer", "python": "pyright-langserver"}


@pytest.fixture(scope="module", params=list(prepare.PROJECTS))
def language(request):
    lang = request.param
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
