"""`lsp` reads nothing the session's sandbox denies, end to end: the real
daemon with real language servers (pyright or pylsp for Python;
typescript-language-server for TypeScript 5, TypeScript 7's own server)
and a HOME of the test's own
whose `~/.ssh` holds secret-looking files. The daemon reads files itself
(to send them to a server, to render an answer's lines and a definition's
body), outside the sandbox, so it must apply the same read rules as a
`cat` in that session: a denied queried file fails the call with
SANDBOX_READ_DENIED before anything is read or sent, and a location in
an answer that points into a denied file is withheld.

Each test gives the daemon its own HOME (`~` in `deny_read` expands
against the daemon's HOME) and TMPDIR, both outside the workspace."""

import json
import os
import pathlib

import pytest

from conftest import ROOT, ask_lsp as ask, connect, err, ok, text_of, write_config

# Language servers start slowly on a loaded machine.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

SECRET = "hunter2-ssh-secret-7f3a"
KEY_LINE = "export const key = '-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXk';"
KEY_SECRET = "b3BlbnNzaC1rZXk"


def _tool_path(env):
    """PATH with the test setup's language servers first (pyright,
    typescript-language-server, pylsp)."""
    extra = [ROOT / "tests" / "node" / "node_modules" / ".bin", ROOT / ".venv" / "bin"]
    return os.pathsep.join([*(str(d) for d in extra if d.is_dir()), env.get("PATH", "")])


@pytest.fixture
def box(isolated_env, tmp_path):
    """HOME, TMPDIR and a workspace of the test's own. `~/.ssh` holds a
    Python file and a TypeScript module with secrets in them; the
    workspace is a Python and TypeScript project."""
    home, tmp, ws = tmp_path / "home", tmp_path / "tmp", tmp_path / "ws"
    for d in (home, tmp, ws):
        d.mkdir()
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "x.py").write_text(
        f"# {SECRET}\n"
        f"TOKEN = '{SECRET}'\n"
        "print(TOKEN)\n"
    )
    (ssh / "deploy.ts").write_text(KEY_LINE + "\n")
    (ws / "pyproject.toml").write_text("[project]\nname = 'ws'\n")
    (ws / "shapes.py").write_text(
        "def area(side: int) -> int:\n"
        "    return side * side\n"
    )
    (ws / "main.py").write_text(
        "from shapes import area\n"
        "\n"
        "print(area(3))\n"
    )
    (ws / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {"strict": True, "target": "es2020", "module": "commonjs", "noEmit": True},
        "include": ["*.ts"],
    }))
    (ws / "geometry.ts").write_text(
        "export function perimeter(side: number): number {\n"
        "  return 4 * side;\n"
        "}\n"
    )
    (ws / "app.ts").write_text(
        "import { key } from '../home/.ssh/deploy';\n"
        "import { perimeter } from './geometry';\n"
        "console.log(key, perimeter(2));\n"
    )
    env = dict(isolated_env)
    env.update(HOME=str(home), TMPDIR=str(tmp), PATH=_tool_path(isolated_env))
    return {"env": env, "home": home, "ws": ws, "ssh": ssh, "dir": tmp_path}


def assert_secret_absent(result, *secrets):
    """Neither the text nor the structured content of `result` carries
    any of `secrets`."""
    whole = text_of(result) + json.dumps(result.structuredContent)
    for secret in secrets:
        assert secret not in whole, whole


def assert_denied(result, path, rule):
    e = err(result)
    assert e["code"] == "SANDBOX_READ_DENIED", e
    assert e["retryable"] is False
    assert e["path"] == str(path), e
    assert str(path) in e["message"] and rule in e["message"], e
    assert_secret_absent(result, SECRET, KEY_SECRET)


async def test_hover_and_references_on_a_file_in_ssh_are_refused(box):
    x = box["ssh"] / "x.py"
    async with connect(box["env"], cwd=str(box["ws"])) as s:
        # a position with nothing on it: the reply would echo the line
        r = await ask(s, {"op": "hover", "path": str(x), "line": 1, "column": 1})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        r = await ask(s, {"op": "references", "path": str(x), "line": 2, "symbol": "TOKEN"})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        r = await ask(s, {"op": "symbols", "path": str(x)})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        # the same path through `..` from the workspace
        r = await ask(s, {"op": "definition", "path": "../home/.ssh/x.py", "line": 3, "symbol": "TOKEN"})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")


async def test_a_symlink_in_the_workspace_to_a_denied_file_is_refused(box):
    ws, x = box["ws"], box["ssh"] / "x.py"
    (ws / "linked.py").symlink_to(x)
    # a symlinked directory on the way is followed too
    (ws / "keys").symlink_to(box["ssh"], target_is_directory=True)
    async with connect(box["env"], cwd=str(ws)) as s:
        r = await ask(s, {"op": "references", "path": "linked.py", "line": 2, "symbol": "TOKEN"})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        assert "(where `linked.py` leads)" in err(r)["message"]
        r = await ask(s, {"op": "hover", "path": "keys/x.py", "line": 1, "column": 1})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")


async def test_a_file_in_dsh_private_directory_is_refused(box):
    private = pathlib.Path(box["env"]["XDG_CONFIG_HOME"]) / "dsh"
    private.mkdir(parents=True, exist_ok=True)
    notes = private / "notes.py"
    notes.write_text(f"# {SECRET}\nTOKEN = 1\n")
    async with connect(box["env"], cwd=str(box["ws"])) as s:
        r = await ask(s, {"op": "hover", "path": str(notes), "line": 1, "column": 1})
        assert_denied(r, notes, "dsh's private directory")


@pytest.mark.parametrize("typescript", ["typescript", "typescript7"])
async def test_a_definition_in_a_denied_file_is_withheld(box, typescript):
    """With the workspace's own TypeScript 5 (served by
    typescript-language-server) and 7 (served by its own server)."""
    ws = box["ws"]
    package = ROOT / "tests" / "node" / "node_modules" / typescript
    if not (package / "package.json").is_file():
        pytest.fail(f"{package} is missing: `cargo xtask test` installs it (npm ci in tests/node)")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "typescript").symlink_to(package, target_is_directory=True)
    line = (ws / "app.ts").read_text().splitlines()[0]
    specifier = line.index("../home/.ssh/deploy") + 2
    async with connect(box["env"], cwd=str(ws)) as s:
        # the definition of the module specifier is the key file itself:
        # its first line would be the body
        r = await ask(s, {"op": "definition", "path": "app.ts", "line": 1, "column": specifier})
        assert_secret_absent(r, KEY_SECRET, "BEGIN OPENSSH")
        d = ok(r)
        assert d["items"] == [], d
        assert d["withheld"]["count"] == 1, d
        assert "`deny_read` entry `~/.ssh`" in d["withheld"]["reason"], d
        assert "[withheld: 1 definition site(s), in files this session's sandbox" in text_of(r)
        # the server never got the key's text, so nothing it computes
        # from the import shows it either
        for args in (
            {"op": "definition", "path": "app.ts", "line": 3, "symbol": "key"},
            {"op": "hover", "path": "app.ts", "line": 3, "symbol": "key"},
            {"op": "references", "path": "app.ts", "line": 3, "symbol": "key"},
            {"op": "symbols", "path": "app.ts", "query": "key"},
        ):
            r = await ask(s, args)
            assert not r.isError, text_of(r)
            assert_secret_absent(r, KEY_SECRET, "BEGIN OPENSSH")
        # a definition in the workspace is not withheld
        d = ok(await ask(s, {"op": "definition", "path": "app.ts", "line": 3, "symbol": "perimeter"}))
        [item] = d["items"]
        assert item["path"] == "geometry.ts" and "return 4 * side;" in item["body"], d
        assert "withheld" not in d, d


async def test_queries_in_the_workspace_still_work(box):
    async with connect(box["env"], cwd=str(box["ws"])) as s:
        r = ok(await ask(s, {"op": "references", "path": "shapes.py", "line": 1, "symbol": "area"}))
        files = {f["path"]: f["count"] for f in r["files"]}
        assert files.get("shapes.py") == 1 and files.get("main.py", 0) >= 1, r
        assert "withheld" not in r, r
        d = ok(await ask(s, {"op": "definition", "path": "main.py", "line": 3, "symbol": "area"}))
        assert [(i["path"], i["line"]) for i in d["items"]] == [("shapes.py", 1)], d
        assert "return side * side" in d["items"][0]["body"]
        h = ok(await ask(s, {"op": "hover", "path": "main.py", "line": 3, "symbol": "area"}))
        assert "int" in (h["markdown"] or ""), h


async def test_with_the_sandbox_off_nothing_is_checked(box):
    config = write_config(box["dir"], '[sandbox]\nmode = "off"\n')
    x = box["ssh"] / "x.py"
    async with connect(box["env"], "--config", config, cwd=str(box["ws"])) as s:
        r = await ask(s, {"op": "references", "path": str(x), "line": 2, "symbol": "TOKEN"})
        refs = ok(r)
        assert refs["total"] == 2, refs
        assert SECRET in text_of(r)
