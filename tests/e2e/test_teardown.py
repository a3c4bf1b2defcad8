"""Nothing outlives a killed dsh: SIGKILL the real server — a standalone
`dsh mcp`, or the daemon behind a `dsh mcp` bridge, alone or with its
guardian in the same instant — while a terminal has a background process
that ignores hangups and a background bash job runs, and every process dsh
started (its guardian included) is gone soon after."""

import json
import os
import pathlib
import signal

import pytest

from conftest import connect, ok
from waiting import eventually

pytestmark = pytest.mark.anyio


def kill_left(processes):
    """SIGKILLs `processes` ((pid, command) pairs: what a test found
    still running), so a failed run leaves nothing behind; returns them."""
    for pid, _ in processes:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return processes


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


async def nothing_left(marker: str, before):
    """Waits until no process dsh started (by `marker`) lives; fails naming
    those left (and ends them), with what ran `before` the kill."""

    async def all_gone():
        return not started_by(marker)

    try:
        await eventually(all_gone, "everything dsh started to end after it was killed")
    except AssertionError:
        left = kill_left(started_by(marker))
        raise AssertionError(f"still running after dsh was killed: {left} (before: {before})")


def server_pid(env, marker: str, standalone: bool) -> int:
    """The process that serves the tools: the standalone `dsh mcp`, or the
    daemon its bridge reached."""
    if not standalone:
        info = pathlib.Path(env["XDG_DATA_HOME"]) / "dsh" / "daemon.json"
        return json.loads(info.read_text())["pid"]
    for pid, _ in started_by(marker):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        # argv, not the joined command line: the binary's path may hold spaces
        if argv[1:3] == ["mcp", "--standalone"]:
            return pid
    raise AssertionError(f"no dsh mcp --standalone among {started_by(marker)}")


@pytest.mark.parametrize(
    "standalone,with_guardian",
    [(True, False), (False, False), (True, True), (False, True)],
    ids=["standalone", "daemon", "standalone-and-guardian", "daemon-and-guardian"],
)
async def test_a_sigkilled_server_leaves_nothing_behind(isolated_env, tmp_path, standalone, with_guardian):
    """With its guardian killed in the same instant, only the kernel can end
    the background processes: each terminal and job runs in a PID namespace
    whose init dies with dsh."""
    marker = str(tmp_path)
    env = {k: v for k, v in isolated_env.items() if k != "DSH_E2E_MCP_ARGS"}
    killed = False
    before = None
    try:
        async with connect(env, *(["--standalone"] if standalone else [])) as s:
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

            async def all_started():
                return {"sleep 1000", "sleep 1001", "sleep 1002"} <= set(commands())

            await eventually(all_started, "the terminal's and the job's sleeps to run")
            before = started_by(marker)
            victims = [server_pid(env, marker, standalone)]
            if with_guardian:
                guardians = [p for p, c in before if c.endswith("__guardian")]
                assert len(guardians) == 1, before
                victims = guardians + victims
            for pid in victims:
                os.kill(pid, signal.SIGKILL)
            killed = True
            # The client's session ends with the server: leave it.
            raise _ServerKilled()
    except BaseException:  # noqa: BLE001 - whatever the broken session raises
        if not killed:
            raise
    assert killed
    await nothing_left(marker, before)


@pytest.mark.parametrize("standalone", [True, False], ids=["standalone", "daemon"])
async def test_a_language_servers_work_ends_with_a_killed_dsh_and_guardian(isolated_env, tmp_path, standalone):
    """rust-analyzer starts `cargo check`, which runs the project's build
    script; none of them is a terminal or a job, and none has a death
    signal of its own. With dsh and its guardian SIGKILLed while the build
    script runs, the kernel ends them all: the language server runs in a
    PID namespace whose init dies with dsh."""
    marker = str(tmp_path)
    env = {k: v for k, v in isolated_env.items() if k != "DSH_E2E_MCP_ARGS"}
    proj = tmp_path / "proj"
    (proj / "src").mkdir(parents=True)
    (proj / "Cargo.toml").write_text(
        '[package]\nname = "slow_build"\nversion = "0.1.0"\nedition = "2021"\n'
    )
    (proj / "src" / "lib.rs").write_text("pub fn one() -> u32 { 1 }\n")
    (proj / "build.rs").write_text(
        'fn main() { let _ = std::process::Command::new("sleep").arg("1003").status(); }\n'
    )
    killed = False
    before = None
    try:
        # The session's directory is a Cargo project: its language server
        # starts at once, and with it the build.
        async with connect(env, *(["--standalone"] if standalone else []), cwd=str(proj)):

            async def building():
                return any(c == "sleep 1003" for _, c in started_by(marker))

            await eventually(building, "rust-analyzer's cargo to run the build script", timeout_s=120)
            before = started_by(marker)
            guardians = [p for p, c in before if c.endswith("__guardian")]
            assert len(guardians) == 1, before
            for pid in guardians + [server_pid(env, marker, standalone)]:
                os.kill(pid, signal.SIGKILL)
            killed = True
            raise _ServerKilled()
    except BaseException:  # noqa: BLE001 - whatever the broken session raises
        if not killed:
            raise
    assert killed
    await nothing_left(marker, before)


class _ServerKilled(Exception):
    """Leaves the client's context once the server is killed on purpose."""
