"""Nothing outlives a killed `dsh mcp`: SIGKILL the real server while a
terminal has a background process that ignores hangups and a background
bash job runs, and every process dsh started is gone soon after."""

import os
import signal
import time

import anyio
import pytest

from conftest import connect, ok

pytestmark = pytest.mark.anyio


def started_by(marker: str):
    """Live processes whose environment carries `marker` (the test's temp
    dir): dsh and everything it started, never anyone else's."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read()
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        state = stat[stat.rfind(")") + 2 :].split()[0]
        if marker.encode() in environ and state not in ("Z", "X"):
            found.append((int(entry), cmdline))
    return found


def dsh_pid(marker: str) -> int:
    for pid, cmdline in started_by(marker):
        if cmdline.split(" ")[:2][-1:] == ["mcp"]:
            return pid
    raise AssertionError(f"no dsh mcp among {started_by(marker)}")


async def test_a_sigkilled_server_leaves_nothing_behind(isolated_env, tmp_path):
    marker = str(tmp_path)
    killed = False
    before = None
    try:
        async with connect(isolated_env) as s:
            t = ok(await s.call_tool("terminal_open", {}))
            # A background process that survives its shell's hangup, like a
            # dev server started with nohup.
            sent = ok(
                await s.call_tool(
                    "terminal_send",
                    {"id": t["id"], "text": "nohup sleep 1000 >/dev/null 2>&1 & echo bg=$!"},
                )
            )
            assert "bg=" in sent["output"], sent
            job = ok(
                await s.call_tool(
                    "bash",
                    {"command": "sleep 1001 & sleep 1002", "run_in_background": True},
                )
            )
            assert job["job_id"] == "bash-1"
            commands = lambda: sorted(c for _, c in started_by(marker))
            deadline = time.monotonic() + 20
            while not {"sleep 1000", "sleep 1001", "sleep 1002"} <= set(commands()):
                assert time.monotonic() < deadline, commands()
                await anyio.sleep(0.02)
            before = started_by(marker)
            os.kill(dsh_pid(marker), signal.SIGKILL)
            killed = True
            # The client's session ends with the server: leave it.
            raise _ServerKilled()
    except BaseException:  # noqa: BLE001 - whatever the broken session raises
        if not killed:
            raise
    assert killed
    deadline = time.monotonic() + 20
    left = started_by(marker)
    while left:
        if time.monotonic() > deadline:
            for pid, _ in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            raise AssertionError(f"still running after dsh was killed: {left} (before: {before})")
        await anyio.sleep(0.05)
        left = started_by(marker)


class _ServerKilled(Exception):
    """Leaves the client's context once the server is killed on purpose."""
