"""The `lsp` tool end to end over MCP, against real language servers:
rust-analyzer (built in) and python-lsp-server (configured only through
the config file)."""

import os
import shutil

import pytest

from conftest import (
    ROOT,
    ask_lsp,
    connect,
    daemons_of,
    dsh_bin,
    err,
    live_in_session,
    ok,
    processes,
    stop_daemons,
    write_config,
)
from waiting import wait_until

# Language servers start slowly on a loaded machine.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

FIXTURES = ROOT / "tests" / "fixtures" / "lsp"


async def ask(session, args, timeout_s=180):
    """Calls `lsp`, retrying while the server reports LSP_NOT_READY; an
    empty answer during start-up would be a bug, so none is accepted: any
    other error fails the test."""
    r = await ask_lsp(session, args, timeout_s)
    assert not r.isError, err(r)
    return r.structuredContent


def server_sessions(env):
    """Sessions of the processes the `dsh` servers of this test started:
    its daemons' children (and a standalone server's)."""
    me = os.getpid()
    dsh = {p for p, ppid, _, _ in processes() if ppid == me and _is_dsh(p)}
    dsh |= set(daemons_of(env))
    return {sid for p, ppid, sid, _ in processes() if ppid in dsh}


def _is_dsh(pid):
    try:
        return os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(dsh_bin())
    except OSError:
        return False


async def test_rust_analyzer_answers_all_four_ops(isolated_env, tmp_path):
    if shutil.which("rust-analyzer", path=isolated_env.get("PATH")) is None:
        pytest.fail("rust-analyzer is not installed: run `rustup component add rust-analyzer`")
    project = tmp_path / "rust-workspace"
    shutil.copytree(FIXTURES / "rust-workspace", project)
    async with connect(isolated_env, cwd=str(project)) as s:
        d = await ask(s, {"op": "definition", "path": "app/src/main.rs", "line": 9, "symbol": "total_area"})
        line = (project / "app" / "src" / "main.rs").read_text().splitlines()[8]
        column = line.index("total_area") + 1  # Unicode scalars, not UTF-16 units or bytes
        assert column != line.encode().index(b"total_area") + 1
        assert d["resolved"] == {"path": "app/src/main.rs", "line": 9, "column": column, "symbol": "total_area"}
        [item] = d["items"]
        assert item["path"] == "shapes/src/canvas.rs" and item["external"] is False
        assert "fn total_area" in item["body"]

        r = await ask(s, {"op": "references", "path": "shapes/src/lib.rs", "line": 14, "symbol": "Circle"})
        files = {f["path"]: f["count"] for f in r["files"]}
        assert "app/src/main.rs" in files and "shapes/src/lib.rs" in files
        assert r["total"] == sum(files.values())

        h = await ask(s, {"op": "hover", "path": "app/src/main.rs", "line": 9, "symbol": "total", "occurrence": 1})
        assert "f64" in h["markdown"]

        o = await ask(s, {"op": "symbols", "path": "shapes/src/lib.rs"})
        kinds = {x["name"]: x["kind"] for x in o["symbols"]}
        assert kinds["Circle"] == "struct" and kinds["Square"] == "struct" and "Shape" in kinds
        w = await ask(s, {"op": "symbols", "path": "shapes/src/lib.rs", "query": "Canvas"})
        assert any(x["name"] == "Canvas" and x["path"] == "shapes/src/canvas.rs" for x in w["symbols"])

        # an edit on disk shows in the next answer
        main = project / "app" / "src" / "main.rs"
        main.write_text(main.read_text().replace(
            "    report::print(&canvas);", "    report::print(&canvas);\n    let _again = Circle { radius: 3.0 };"))
        r2 = await ask(s, {"op": "references", "path": "shapes/src/lib.rs", "line": 14, "symbol": "Circle"})
        assert r2["total"] == r["total"] + 1

        # errors with their structured extras
        e = err(await s.call_tool("lsp", {"op": "definition", "path": "app/src/main.rs", "line": 9, "symbol": "nope"}))
        assert e["code"] == "LSP_INVALID_POSITION" and "étiquette" in e["line_text"]
        e = err(await s.call_tool("lsp", {"op": "hover", "path": "app/src/main.rs", "line": 999, "column": 1}))
        assert e["code"] == "LSP_INVALID_POSITION"
        e = err(await s.call_tool("lsp", {"op": "symbols", "path": "notes.xyz"}))
        assert (e["code"], e["reason"]) == ("LSP_UNAVAILABLE", "no_provider")
        loose = tmp_path / "loose.rs"
        loose.write_text("fn main() {}\n")
        e = err(await s.call_tool("lsp", {"op": "symbols", "path": str(loose)}))
        assert (e["code"], e["reason"]) == ("LSP_UNAVAILABLE", "no_project")
        e = err(await s.call_tool("lsp", {"op": "definition", "path": "app/src/main.rs", "line": 9}))
        assert e["code"] == "INVALID_ARGUMENT" and e["message"].startswith("symbol: ")
        sessions = server_sessions(isolated_env)
        assert sessions, "no language server was started"
    # no language-server process outlives the host (the daemon, which keeps
    # them for other agents until it stops)
    stop_daemons(isolated_env)
    wait_until(lambda: not [sid for sid in sessions if live_in_session(sid)],
               "every language-server session ends with the host")


async def test_a_server_configured_only_in_the_config_file(isolated_env, tmp_path):
    if shutil.which("pylsp", path=isolated_env.get("PATH")) is None:
        pytest.fail("pylsp is not installed: `cargo xtask test` installs python-lsp-server into .venv")
    project = tmp_path / "python-project"
    shutil.copytree(FIXTURES / "python-project", project)
    config = write_config(tmp_path, """
[lsp.servers.pylsp]
command = "pylsp"
extensions = { ".py" = "python" }
root_markers = ["pyproject.toml"]

[lsp.servers.missing]
command = "no-such-language-server"
extensions = { ".zig" = "zig" }
""")
    (project / "x.zig").write_text("const x = 1;\n")
    async with connect(isolated_env, "--config", config, cwd=str(project)) as s:
        d = await ask(s, {"op": "definition", "path": "main.py", "line": 4, "symbol": "total_area"})
        assert [(i["path"], i["line"]) for i in d["items"]] == [("geometry.py", 14)]
        o = await ask(s, {"op": "symbols", "path": "geometry.py"})
        names = [x["name"] for x in o["symbols"]]
        assert "Circle" in names and "total_area" in names
        e = err(await s.call_tool("lsp", {"op": "symbols", "path": "x.zig"}))
        assert (e["code"], e["reason"]) == ("LSP_UNAVAILABLE", "binary_not_found")
        assert "no-such-language-server" in e["message"]


async def test_a_conflicting_config_is_refused(isolated_env, tmp_path):
    import subprocess
    config = write_config(tmp_path, """
[lsp.servers.a]
command = "a"
extensions = { ".py" = "python" }
[lsp.servers.b]
command = "b"
extensions = { ".py" = "python" }
""")
    p = subprocess.run([dsh_bin(), "mcp", "--config", config], input="", capture_output=True,
                       text=True, env=isolated_env, timeout=30)
    assert p.returncode == 2
    assert "lsp.servers" in p.stderr and ".py" in p.stderr
