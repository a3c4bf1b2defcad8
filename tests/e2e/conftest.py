"""Shared helpers: start the real `dsh mcp` binary and drive it with the
official MCP Python SDK client."""

import contextlib
import json
import os
import pathlib
import subprocess
import tempfile

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]


def dsh_bin() -> str:
    path = os.environ.get("DSH_BIN") or str(ROOT / "target" / "debug" / "dsh")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} does not exist: run `cargo build -p dsh` first")
    return path


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def isolated_env(tmp_path):
    """An environment whose XDG dirs point into a temp dir, so no user
    config or store is read or written."""
    env = dict(os.environ)
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
    env["XDG_DATA_HOME"] = str(tmp_path / "data")
    env.setdefault("DSH_LOG", "warn")
    return env


@contextlib.asynccontextmanager
async def connect(env, *args, cwd=None, **session_kwargs):
    params = StdioServerParameters(
        command=dsh_bin(), args=["mcp", *args], env=env, cwd=cwd
    )
    with tempfile.TemporaryFile("w+") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write, **session_kwargs) as session:
                await session.initialize()
                yield session


def text_of(result) -> str:
    assert len(result.content) == 1, result.content
    return result.content[0].text


def ok(result) -> dict:
    """The structured content of a successful call."""
    assert not result.isError, text_of(result)
    return result.structuredContent


def err(result) -> dict:
    """The error object of a failed call, after checking the envelope."""
    assert result.isError, text_of(result)
    error = result.structuredContent["error"]
    assert {"code", "message", "retryable"} <= set(error)
    assert text_of(result) == f"[error {error['code']}] {error['message']}"
    return error


def catalog(preset: str) -> dict:
    out = subprocess.run(
        [dsh_bin(), "catalog", "--preset", preset, "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def processes():
    """Every process as (pid, ppid, sid, state), read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        out.append((int(entry), int(fields[1]), int(fields[3]), fields[0]))
    return out


def live_in_session(sid: int):
    return [p for p in processes() if p[2] == sid and p[3] not in ("Z", "X")]


def write_config(tmp_path, text: str) -> str:
    """Writes a config file and returns its path."""
    path = tmp_path / "dsh-config.toml"
    path.write_text(text)
    return str(path)


async def wait_settled(session, job_id, timeout_s=30):
    """Waits (server-side, with job_output wait_ms) until a job settles."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = await session.call_tool("job_output", {"job_id": job_id, "wait_ms": 2000, "max_bytes": 1_000_000})
        assert not r.isError, r.content[0].text
        if r.structuredContent["status"] not in ("running", "stopping"):
            return r.structuredContent
    raise AssertionError(f"{job_id} did not settle")


def dsh_children():
    """Pids of the `dsh` servers this test process started."""
    me = os.getpid()
    out = []
    for pid, ppid, _sid, _state in processes():
        if ppid != me:
            continue
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(dsh_bin()):
                out.append(pid)
        except OSError:
            pass
    return out
