"""Progress on long waits: a call whose request carries a `progressToken`
gets MCP `notifications/progress` while it waits (a cold language server,
a `bash` command running for seconds); a call without one gets none. And
first contact: `dsh mcp` started on a terminal says what it waits for."""

import os
import pty
import select
import shutil
import subprocess
import time

import anyio
import mcp.types as types
import pytest

from conftest import ROOT, connect, dsh_bin, err, ok, write_config
from waiting import HANG

pytestmark = pytest.mark.anyio

FIXTURES = ROOT / "tests" / "fixtures" / "lsp" / "langs"


class Notifications:
    """Every progress notification the client receives, token or not."""

    def __init__(self):
        self.progress = []

    async def __call__(self, message):
        if isinstance(message, types.ServerNotification) and isinstance(
            message.root, types.ProgressNotification
        ):
            self.progress.append(message.root.params)


def require_pyright(env):
    if shutil.which("pyright-langserver", path=env.get("PATH")) is None:
        pytest.fail("pyright is not installed: `cargo xtask test` installs it into tests/node")


def released_by(fifo, line):
    """A progress callback that records each message and, once one ends
    with `line`, releases the command waiting on `fifo` (`read x < fifo`):
    the command runs until progress showing its output has arrived."""
    reports = []

    async def on_progress(progress, total, message):
        reports.append((progress, message))
        if message.endswith(line) and not any(m.endswith(line) for _, m in reports[:-1]):
            await anyio.to_thread.run_sync(fifo.write_text, "go\n")

    return reports, on_progress


async def test_a_long_bash_reports_progress_only_with_a_token(isolated_env, tmp_path):
    seen = Notifications()
    release = tmp_path / "release"
    os.mkfifo(release)
    async with connect(isolated_env, message_handler=seen) as s:
        reports, on_progress = released_by(release, "last output: first")
        with anyio.fail_after(HANG):
            r = ok(await s.call_tool(
                "bash", {"command": f"echo first; read x < {release}; echo last"},
                progress_callback=on_progress))
        assert r["exit_code"] == 0 and r["output"] == "first\nlast\n"
        assert all(m.startswith("running for ") for _, m in reports), reports
        assert [p for p, _ in reports] == sorted(p for p, _ in reports)

        before = len(seen.progress)
        r = ok(await s.call_tool("bash", {"command": "sleep 3; echo quiet"}))
        assert r["output"] == "quiet\n"
        assert seen.progress[before:] == [], "progress was sent to a call without a token"


async def test_a_long_terminal_send_reports_progress_only_with_a_token(isolated_env, tmp_path):
    seen = Notifications()
    release = tmp_path / "release"
    os.mkfifo(release)
    async with connect(isolated_env, message_handler=seen) as s:
        t = ok(await s.call_tool("terminal_open", {}))
        reports, on_progress = released_by(release, "last output: begun")
        with anyio.fail_after(HANG):
            r = ok(await s.call_tool(
                "terminal_send", {"id": t["id"], "text": f"echo begun; read x < {release}; echo ended"},
                progress_callback=on_progress))
        assert r["reason"] == "prompt" and "ended" in r["output"]
        assert all(m.startswith("running for ") for _, m in reports), reports
        assert [p for p, _ in reports] == sorted(p for p, _ in reports)

        before = len(seen.progress)
        ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "sleep 2; echo quiet"}))
        assert seen.progress[before:] == []
        ok(await s.call_tool("terminal_close", {"id": t["id"]}))


# Two cold starts of a language server: slow on a loaded machine.
@pytest.mark.timeout(400)
async def test_a_cold_language_server_reports_progress_only_with_a_token(isolated_env, tmp_path):
    require_pyright(isolated_env)
    # no eager start: the first query meets a cold server
    config = write_config(tmp_path, "[lsp]\neager = false\n")
    for with_token in (True, False):
        project = tmp_path / f"python-{with_token}"
        shutil.copytree(FIXTURES / "python", project)
        seen = Notifications()
        async with connect(isolated_env, "--config", config, cwd=str(project), message_handler=seen) as s:
            messages = []

            async def on_progress(progress, total, message):
                messages.append(message)

            deadline = time.monotonic() + 180
            while True:
                r = await s.call_tool(
                    "lsp", {"op": "references", "path": "shapes.py", "line": 33, "symbol": "total_area"},
                    progress_callback=on_progress if with_token else None)
                if not r.isError:
                    break
                assert err(r)["code"] == "LSP_NOT_READY"
                assert time.monotonic() < deadline
            assert ok(r)["total"] == 3
            if with_token:
                assert len(messages) >= 1, "no progress during a cold start"
                assert any(m.startswith("starting pyright") or m.startswith("pyright: ") for m in messages), messages
            else:
                assert seen.progress == [], seen.progress


def test_dsh_mcp_on_a_terminal_says_what_it_waits_for(isolated_env):
    leader, follower = pty.openpty()
    p = subprocess.Popen([dsh_bin(), "mcp"], stdin=follower, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, env=isolated_env)
    os.close(follower)
    try:
        text = b""
        deadline = time.monotonic() + 30
        while b"dsh demo" not in text and time.monotonic() < deadline:
            ready, _, _ = select.select([p.stderr], [], [], 1)
            if ready:
                chunk = os.read(p.stderr.fileno(), 4096)
                if not chunk:
                    break
                text += chunk
        message = text.decode()
        assert "waiting for an MCP client on stdin" in message, message
        assert "claude mcp add dsh -- dsh mcp" in message and "dsh demo" in message, message
        assert message.count("waiting for an MCP client") == 1
    finally:
        os.write(leader, b"\x04")
        os.close(leader)
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    # started by a client (stdin a pipe): not a word
    q = subprocess.run([dsh_bin(), "mcp"], input=b"", capture_output=True, env=isolated_env, timeout=30)
    assert b"waiting for an MCP client" not in q.stderr
