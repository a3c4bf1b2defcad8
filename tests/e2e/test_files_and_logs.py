"""Files and logs, through the real binary: the store and the log file are
private, the session log keeps no secrets (environment values, typed
text; commands only when allowed), a debug log carries no tool payloads,
and the CLI never prints a raw control character."""

import contextlib
import json
import os
import pathlib
import stat
import subprocess

import anyio
import pytest

from conftest import connect, dsh_bin, ok, write_config
from waiting import eventually

SECRET_VALUE = "s3cr3t-value-4821"
TYPED_TEXT = "typed-text-9707"
COMMAND_MARKER = "audit-marker-5310"


def dsh(env, data_dir, *args, status=0):
    proc = subprocess.run(
        [dsh_bin(), "--data-dir", str(data_dir), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == status, (args, proc.stdout, proc.stderr)
    return proc


def dsh_json(env, data_dir, *args):
    return json.loads(dsh(env, data_dir, *args, "--json").stdout)


async def wait_for_log(env, data_dir, count):
    """The one session's record and log, once it has `count` entries."""
    async def logged():
        sessions = await anyio.to_thread.run_sync(dsh_json, env, data_dir, "session", "list")
        if sessions:
            shown = await anyio.to_thread.run_sync(
                dsh_json, env, data_dir, "session", "show", sessions[0]["id"]
            )
            if shown["log_total"] >= count:
                return shown
        return None

    return await eventually(logged, f"the session log has {count} entries")


def store_bytes(data_dir) -> bytes:
    out = b""
    for root, _dirs, files in os.walk(data_dir):
        for name in files:
            with open(os.path.join(root, name), "rb") as f:
                out += f.read()
    return out


def modes(top):
    """Every path under `top` (itself included) with its permission bits."""
    out = {str(top): stat.S_IMODE(os.lstat(top).st_mode)}
    for root, dirs, files in os.walk(top):
        for name in dirs + files:
            path = os.path.join(root, name)
            out[path] = stat.S_IMODE(os.lstat(path).st_mode)
    return out


async def use_every_secret_bearing_tool(s, tmp_path):
    t = ok(
        await s.call_tool(
            "terminal_open", {"env": {"DSH_TEST_SECRET": SECRET_VALUE}, "name": "work"}
        )
    )
    sent = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": f"echo {TYPED_TEXT}"}))
    assert sent["output"] == f"{TYPED_TEXT}\n"
    ran = ok(await s.call_tool("bash", {"command": f"echo {COMMAND_MARKER}"}))
    assert ran["output"] == f"{COMMAND_MARKER}\n"
    ok(await s.call_tool("terminal_close", {"id": t["id"]}))


@pytest.mark.anyio
async def test_the_store_and_the_log_file_are_private(isolated_env, tmp_path):
    data = pathlib.Path(isolated_env["XDG_DATA_HOME"]) / "dsh"
    logs = tmp_path / "logs"
    logs.mkdir()
    new_log = logs / "new.log"
    old_log = logs / "old.log"
    old_log.write_text("from before\n")
    os.chmod(old_log, 0o644)
    # The usual umask: without care, sled's files would be world-readable.
    umask = os.umask(0o022)
    try:
        # Through the daemon: the store, its lock, info and log files.
        async with connect(isolated_env, "--data-dir", str(data), cwd=str(tmp_path)) as s:
            await use_every_secret_bearing_tool(s, tmp_path)
            await wait_for_log(isolated_env, data, 4)
        # A server's own --log-file (a standalone server: the daemon logs
        # to its own file in the data dir).
        async with connect(isolated_env, "--standalone", "--log-file", str(new_log), cwd=str(tmp_path)) as s:
            ok(await s.call_tool("bash", {"command": "true"}))
    finally:
        os.umask(umask)
    found = modes(data)
    assert any(p.endswith("/db/conf") for p in found), found
    assert any(p.endswith("/daemon.log") for p in found), found
    wrong = {
        p: oct(m)
        for p, m in found.items()
        if m != (0o700 if os.path.isdir(p) else 0o600)
    }
    assert wrong == {}
    assert stat.S_IMODE(os.stat(new_log).st_mode) == 0o600
    # A log file that already existed is made private too.
    async with connect(isolated_env, "--standalone", "--log-file", str(old_log), cwd=str(tmp_path)) as s:
        ok(await s.call_tool("bash", {"command": "true"}))
    assert stat.S_IMODE(os.stat(old_log).st_mode) == 0o600
    assert old_log.read_text().startswith("from before\n")


@pytest.mark.anyio
async def test_the_session_log_keeps_environment_names_and_commands_but_no_secrets(
    isolated_env, tmp_path
):
    data = tmp_path / "store"
    async with connect(isolated_env, "--data-dir", str(data), cwd=str(tmp_path)) as s:
        await use_every_secret_bearing_tool(s, tmp_path)
        shown = await wait_for_log(isolated_env, data, 4)
    summaries = {e["tool"]: json.loads(e["argument_summary"]) for e in shown["log"]}
    assert summaries["terminal_open"] == {"env": ["DSH_TEST_SECRET"], "name": "work"}
    assert summaries["terminal_send"]["text"] == f"<{len('echo ' + TYPED_TEXT)} bytes>"
    assert summaries["bash"] == {"command": f"echo {COMMAND_MARKER}"}
    raw = store_bytes(data)
    assert COMMAND_MARKER.encode() in raw, "the store is searched where the log is"
    assert SECRET_VALUE.encode() not in raw
    assert TYPED_TEXT.encode() not in raw


@pytest.mark.anyio
async def test_commands_stay_out_of_the_session_log_when_configured(isolated_env, tmp_path):
    data = tmp_path / "store"
    config = write_config(tmp_path, "[log]\ncommands = false\n")
    async with connect(
        isolated_env, "--config", config, "--data-dir", str(data), cwd=str(tmp_path)
    ) as s:
        await use_every_secret_bearing_tool(s, tmp_path)
        shown = await wait_for_log(isolated_env, data, 4)
    summaries = {e["tool"]: json.loads(e["argument_summary"]) for e in shown["log"]}
    assert summaries["bash"] == {"command": f"<{len('echo ' + COMMAND_MARKER)} bytes>"}
    raw = store_bytes(data)
    for secret in (COMMAND_MARKER, SECRET_VALUE, TYPED_TEXT):
        assert secret.encode() not in raw, secret


@contextlib.asynccontextmanager
async def connect_with_stderr(env, errlog, *args, cwd=None):
    async with connect(env, *args, cwd=cwd, errlog=errlog) as session:
        yield session


@pytest.mark.anyio
async def test_a_debug_log_carries_no_tool_payloads(isolated_env, tmp_path):
    env = {**isolated_env, "DSH_LOG": "debug"}
    log_file = tmp_path / "dsh.log"
    marker = "payload-marker-7741"
    with open(tmp_path / "stderr.txt", "w+") as errlog:
        # The serving process's own log and stderr: a standalone server
        # (a daemon's go to its log file, which the same code writes).
        async with connect_with_stderr(
            env, errlog, "--standalone", "--log-file", str(log_file), cwd=str(tmp_path)
        ) as s:
            out = ok(await s.call_tool("bash", {"command": f"echo {marker}"}))
            assert out["output"] == f"{marker}\n"
            # A background job logs its start and settlement at debug.
            job = ok(
                await s.call_tool("bash", {"command": "true", "run_in_background": True})
            )["job_id"]
            settled = ok(await s.call_tool("job_output", {"job_id": job, "wait_ms": 20000}))
            assert settled["status"] == "completed"
        errlog.seek(0)
        stderr = errlog.read()
    logged = log_file.read_text()
    # Debug logging is on (our own debug events are there) ...
    assert "tool call" in logged and "job started" in logged, logged[:2000]
    # ... but neither the request nor the result is.
    assert marker not in logged
    assert marker not in stderr
    # Naming the library's target lets its payloads through on purpose.
    env = {**isolated_env, "DSH_LOG": "debug,rmcp=debug"}
    with open(tmp_path / "stderr2.txt", "w+") as errlog:
        async with connect_with_stderr(env, errlog, "--standalone", cwd=str(tmp_path)) as s:
            ok(await s.call_tool("bash", {"command": f"echo {marker}"}))
        errlog.seek(0)
        assert marker in errlog.read()


ESC = "\x1b"


def test_cli_output_escapes_control_characters(isolated_env, tmp_path):
    data = tmp_path / "store"
    evil = tmp_path / f"red{ESC}[31mdir{ESC}]0;title\x07\u009b2J"
    evil.mkdir()
    shown_path = str(evil).replace(ESC, "\\u{1b}").replace("\x07", "\\u{7}").replace(
        "\u009b", "\\u{9b}"
    )
    outputs = []
    created = dsh(isolated_env, data, "workspace", "create", str(evil), "--title", f"t{ESC}[2J")
    assert created.stdout.startswith("created workspace ")
    assert created.stdout.endswith(f'"t\\u{{1b}}[2J" for {shown_path}\n'), created.stdout
    outputs.append(created.stdout)
    ws = dsh_json(isolated_env, data, "workspace", "list")[0]
    assert ws["path"] == str(evil), "JSON keeps the value exactly"
    again = dsh(isolated_env, data, "workspace", "create", str(evil))
    assert again.stdout.startswith(f"{shown_path} is already workspace "), again.stdout
    outputs.append(again.stdout)
    for args in (
        ["workspace", "list"],
        ["workspace", "show", ws["id"]],
        ["workspace", "list", "--json"],
        ["workspace", "show", ws["id"], "--json"],
    ):
        outputs.append(dsh(isolated_env, data, *args).stdout)
    # Errors quote the path too.
    missing = tmp_path / f"gone{ESC}[2J"
    failed = dsh(isolated_env, data, "workspace", "create", str(missing), status=1)
    assert failed.stderr == (
        f"dsh: {str(missing).replace(ESC, chr(92) + 'u{1b}')} does not exist; "
        "give the path of an existing directory\n"
    )
    outputs.append(failed.stderr)
    removed = dsh(isolated_env, data, "workspace", "rm", ws["id"])
    assert shown_path in removed.stdout
    outputs.append(removed.stdout)
    for text in outputs:
        assert not any(
            (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in text
        ), repr(text)


@pytest.mark.anyio
async def test_session_commands_escape_what_clients_sent(isolated_env, tmp_path):
    from mcp.types import Implementation

    data = tmp_path / "store"
    client = Implementation(name=f"agent{ESC}]0;owned\x07", version=f"1{ESC}[2J")
    async with connect(
        isolated_env, "--data-dir", str(data), cwd=str(tmp_path), client_info=client
    ) as s:
        ok(await s.call_tool("bash", {"command": f"printf 'x{ESC}[31m'"}))
        shown = await wait_for_log(isolated_env, data, 1)
    assert shown["client"] == {"name": client.name, "version": client.version}
    outputs = [
        dsh(isolated_env, data, "session", "list").stdout,
        dsh(isolated_env, data, "session", "show", shown["id"]).stdout,
        dsh(isolated_env, data, "session", "list", "--json").stdout,
        dsh(isolated_env, data, "session", "show", shown["id"], "--json").stdout,
    ]
    assert "agent\\u{1b}]0;owned\\u{7} 1\\u{1b}[2J" in outputs[0], outputs[0]
    for text in outputs:
        assert not any(
            (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F for c in text
        ), repr(text)
