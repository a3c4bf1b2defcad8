"""The foundation end to end: the real `dsh mcp` binary driven by the
official MCP Python SDK client."""

import json
import os
import pathlib
import re
import subprocess
import time

import pytest
from mcp.shared.exceptions import McpError

from conftest import (
    live_named,
    catalog,
    connect,
    dsh_bin,
    dsh_children,
    err,
    ok,
    processes,
    text_of,
)
from waiting import wait_until

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("preset", ["minimal", "full"])
async def test_tools_list_matches_the_generated_catalog(isolated_env, preset):
    expected = catalog(preset)
    async with connect(isolated_env, "--preset", preset) as s:
        listed = (await s.list_tools()).tools
    assert [t.name for t in listed] == [t["name"] for t in expected["tools"]]
    for tool, want in zip(listed, expected["tools"]):
        assert tool.description == want["description"]
        assert tool.inputSchema == want["input_schema"]
    if preset == "minimal":
        assert [t.name for t in listed] == ["bash"]


async def test_generated_catalog_file_is_current(isolated_env):
    """docs/tool-catalog.md holds what the binary serves (`cargo xtask codegen` writes it)."""
    from conftest import ROOT
    committed = (ROOT / "docs" / "tool-catalog.md").read_text()
    served = subprocess.run(
        [dsh_bin(), "catalog", "--format", "md", "--preset", "full"],
        check=True, capture_output=True, text=True,
    ).stdout
    sections = served[served.index("\n## `"):].strip()
    assert sections in committed
    for tool in catalog("full")["tools"]:
        assert f"## `{tool['name']}`" in committed


async def test_config_reference_is_the_generated_file_and_check_reads_a_file(isolated_env, tmp_path):
    """`dsh config --reference` prints docs/config.md (`cargo xtask
    codegen` writes it); `dsh config` reads a file as `dsh mcp` would."""
    from conftest import ROOT

    def run(*args):
        return subprocess.run(
            [dsh_bin(), *args], env=isolated_env, capture_output=True, text=True,
        )

    reference = run("config", "--reference")
    assert reference.returncode == 0, reference.stderr
    assert reference.stdout == (ROOT / "docs" / "config.md").read_text()
    good = tmp_path / "good.toml"
    good.write_text("[limits]\nmax_running_jobs = 4\n")
    checked = run("--config", str(good), "config")
    assert (checked.returncode, checked.stdout) == (0, f"config: {good}: ok\n")
    bad = tmp_path / "bad.toml"
    bad.write_text("[limits]\nmax_results = 3\n")
    checked = run("--config", str(bad), "config")
    assert checked.returncode == 2
    assert f"config error: {bad}:2: limits.max_results: unknown field" in checked.stderr


async def test_the_clients_first_root_is_the_sessions_directory(isolated_env, tmp_path):
    from mcp.types import ListRootsResult, Root
    from pydantic import FileUrl
    root = tmp_path / "my project"
    root.mkdir()

    async def roots(_context):
        return ListRootsResult(roots=[Root(uri=FileUrl(root.as_uri()), name="project")])

    async with connect(isolated_env, list_roots_callback=roots) as s:
        r = ok(await s.call_tool("bash", {"command": "pwd"}))
        assert r["output"] == f"{root}\n"
        r = ok(await s.call_tool("bash", {"command": "pwd", "cwd": ".."}))
        assert r["output"] == f"{tmp_path}\n"


async def test_server_identifies_itself(isolated_env):
    async with connect(isolated_env) as s:
        init = s.initialize_result
        await s.send_ping()
    assert init.serverInfo.name == "dsh"
    assert re.fullmatch(r"\d+\.\d+\.\d+", init.serverInfo.version)
    assert init.capabilities.tools is not None


async def test_bash_end_to_end_and_the_server_keeps_serving(isolated_env, tmp_path):
    async with connect(isolated_env) as s:
        # success
        r = ok(await s.call_tool("bash", {"command": "echo hello"}))
        assert (r["exit_code"], r["output"], r["timed_out"], r["truncated"], r["total_bytes"]) == (
            0, "hello\n", False, False, 6)
        assert text_of(await s.call_tool("bash", {"command": "echo hello"})).startswith("hello\n[exit 0 · ")

        # non-zero exit
        r = ok(await s.call_tool("bash", {"command": "echo before; exit 3"}))
        assert (r["exit_code"], r["output"]) == (3, "before\n")

        # stderr is captured, in order with stdout
        r = ok(await s.call_tool("bash", {"command": "echo out; echo err >&2; echo out2"}))
        assert r["output"] == "out\nerr\nout2\n"

        # the stated environment, stdin closed, cwd honoured
        (tmp_path / "sub").mkdir()
        r = ok(await s.call_tool("bash", {
            "command": 'echo "$TERM $NO_COLOR $PAGER $GIT_PAGER $GIT_TERMINAL_PROMPT"; pwd; cat; echo rc=$?',
            "cwd": str(tmp_path / "sub"),
        }))
        assert r["output"] == f"dumb 1 cat cat 0\n{tmp_path / 'sub'}\nrc=0\n"

        # a timeout kills the whole tree, background children included (the
        # deadline leaves bash time to print its pid and start them under load)
        r = ok(await s.call_tool("bash", {
            "command": "echo started; sleep 300.31 & sleep 301.31 & sleep 30",
            "timeout_ms": 3000,
        }))
        assert r["timed_out"] is True
        assert r["exit_code"] is None
        assert r["output"].startswith("started")
        assert live_named("sleep 300.31") == [] and live_named("sleep 301.31") == []

        # a command that exits leaves nothing running in the background
        r = ok(await s.call_tool("bash", {"command": "echo started; sleep 300.32 &"}))
        assert r["exit_code"] == 0 and r["timed_out"] is False
        assert r["output"].startswith("started")
        assert live_named("sleep 300.32") == []

        # no zombie is left under the server (adopted orphans are reaped
        # once their burst of SIGCHLD is over)
        [server] = dsh_children()
        wait_until(lambda: not [p for p in processes() if p[1] == server and p[3] == "Z"],
                   "the server reaped every zombie")

        # 10 MB of output: head and tail kept, counts exact
        r = ok(await s.call_tool("bash", {"command": "head -c 10000000 /dev/zero | tr '\\0' a; echo; echo END"}))
        assert r["total_bytes"] == 10_000_000 + 1 + 4
        assert r["truncated"] is True
        out = r["output"]
        assert len(out.encode()) < 33_000
        m = re.search(r"\n\[… (\d+) bytes omitted …\]\n", out)
        assert m, out[:200]
        kept = len(out.encode()) - len(m.group(0).encode())
        assert kept + int(m.group(1)) == r["total_bytes"]
        assert out.startswith("a" * 1000) and out.endswith("a\nEND\n")

        # a missing cwd is a clear error
        e = err(await s.call_tool("bash", {"command": "true", "cwd": str(tmp_path / "nope")}))
        assert e["code"] == "INVALID_ARGUMENT"
        assert e["message"].startswith("cwd: ") and "nope" in e["message"]

        # wrong argument types name the field
        e = err(await s.call_tool("bash", {"command": "true", "timeout_ms": "soon"}))
        assert e["code"] == "INVALID_ARGUMENT" and e["message"].startswith("timeout_ms: ")
        e = err(await s.call_tool("bash", {"command": 5}))
        assert e["code"] == "INVALID_ARGUMENT" and e["message"].startswith("command: ")
        e = err(await s.call_tool("bash", {}))
        assert e == {"code": "INVALID_ARGUMENT", "message": "missing field `command`", "retryable": False}

        # an out-of-range limit is clamped, and the result says so
        r = ok(await s.call_tool("bash", {"command": "echo hi", "timeout_ms": 9_000_000}))
        assert r["clamped"] == {"field": "timeout_ms", "from": 9_000_000, "to": 600_000}

        # an unknown tool is an error
        with pytest.raises(McpError) as info:
            await s.call_tool("no_such_tool", {})
        assert "unknown tool `no_such_tool`" in str(info.value)

        # and after all of that the server still answers
        r = ok(await s.call_tool("bash", {"command": "echo still here"}))
        assert r["output"] == "still here\n"


def _rpc(proc, message):
    proc.stdin.write((json.dumps(message) + "\n").encode())
    proc.stdin.flush()


def _read_response(proc, want_id, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("server closed stdout")
        msg = json.loads(line)
        if msg.get("id") == want_id:
            return msg
    raise AssertionError("no response")


def test_garbage_on_stdin_does_not_kill_the_server(isolated_env):
    proc = subprocess.Popen(
        [dsh_bin(), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL, env=isolated_env,
    )
    try:
        _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw", "version": "0"}}})
        assert _read_response(proc, 1)["result"]["serverInfo"]["name"] == "dsh"
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        proc.stdin.write(b"this is not json\n{\"jsonrpc\": \"2.0\", \"id\": \n\xff\xfe\n")
        proc.stdin.flush()
        _rpc(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "bash", "arguments": {"command": "echo alive"}}})
        reply = _read_response(proc, 2)
        assert reply["result"]["structuredContent"]["output"] == "alive\n"
        assert proc.poll() is None
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)
    assert proc.returncode == 0


@pytest.mark.parametrize(
    "config, expected",
    [
        ("[limits]\nmax_result_bytes = 4096\nbogus = 1\n",
         r"^dsh: config error: .*config\.toml:3: limits\.bogus: unknown field `bogus`"),
        ("[limits]\nmax_result_bytes = \"lots\"\n",
         r"^dsh: config error: .*config\.toml:2: limits\.max_result_bytes: invalid type: string \"lots\""),
        ("preset = \"huge\"\n",
         r"^dsh: config error: .*config\.toml:1: preset: unknown variant `huge`, expected `minimal` or `full`"),
    ],
    ids=["unknown-key", "wrong-type", "unknown-preset"],
)
def test_config_errors_are_one_line_with_exit_2(isolated_env, tmp_path, config, expected):
    path = tmp_path / "config.toml"
    path.write_text(config)
    for args in (["mcp", "--config", str(path)], ["mcp"]):
        env = dict(isolated_env)
        if args == ["mcp"]:
            # the same file at the default location is read too
            default = pathlib.Path(env["XDG_CONFIG_HOME"]) / "dsh"
            default.mkdir(parents=True, exist_ok=True)
            (default / "config.toml").write_text(config)
        p = subprocess.run([dsh_bin(), *args], input="", capture_output=True, text=True, env=env, timeout=30)
        assert p.returncode == 2, p.stderr
        assert p.stdout == ""
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1, p.stderr
        assert re.search(expected, lines[0]), lines[0]


def test_unknown_preset_on_the_command_line_is_a_usage_error(isolated_env):
    p = subprocess.run([dsh_bin(), "mcp", "--preset", "huge"], input="", capture_output=True,
                       text=True, env=isolated_env, timeout=30)
    assert p.returncode == 2
    assert "invalid value 'huge' for '--preset" in p.stderr


def test_missing_explicit_config_is_an_error(isolated_env, tmp_path):
    p = subprocess.run([dsh_bin(), "mcp", "--config", str(tmp_path / "absent.toml")], input="",
                       capture_output=True, text=True, env=isolated_env, timeout=30)
    assert p.returncode == 2
    assert "absent.toml: cannot read" in p.stderr
