"""Terminals end to end over MCP with real bash and python3."""

import os
import signal

import anyio
import pytest
from mcp.types import ServerNotification, ToolListChangedNotification

from conftest import (
    connect,
    dsh_children,
    end_work_with_the_client,
    err,
    live_in_session,
    ok,
    write_config,
)
from waiting import HANG, eventually, in_foreground, wait_until

pytestmark = pytest.mark.anyio

BUGGY = "def mean(xs):\n    return sum(xs) / (len(xs) + 1)\n"
FIXED = "def mean(xs):\n    return sum(xs) / len(xs)\n"


async def test_three_step_repl_debugging_survives_a_reload(isolated_env, tmp_path):
    config = tmp_path / "dsh-config.toml"
    config.write_text('preset = "full"\n')
    changes = []
    changed = [anyio.Event(), anyio.Event()]

    async def on_message(message):
        if isinstance(message, ServerNotification) and isinstance(message.root, ToolListChangedNotification):
            changes.append(message.root)
            changed[len(changes) - 1].set()

    async with connect(isolated_env, "--config", str(config), message_handler=on_message) as s:
        opened = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"], "name": "repl"}))
        assert opened["id"] == "pty-1" and opened["reason"] == "input_wait"

        # step 1: define the function and the data; call it
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": BUGGY}))
        assert r["reason"] == "input_wait" and "def mean" not in r["output"]
        ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "data = [2, 4, 6]"}))
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "mean(data)"}))
        assert r["output"].startswith("3.0\n") and r["reason"] == "input_wait"

        # a reload in the middle: the tool layer is rebuilt, the REPL lives on
        [server] = dsh_children()
        config.write_text('preset = "minimal"\n')
        os.kill(server, signal.SIGHUP)
        with anyio.fail_after(HANG):
            await changed[0].wait()
        assert [t.name for t in (await s.list_tools()).tools] == ["bash"]
        config.write_text('preset = "full"\n')
        os.kill(server, signal.SIGHUP)
        with anyio.fail_after(HANG):
            await changed[1].wait()

        # step 2: inspect, only the new expression is sent
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "sum(data), len(data)"}))
        assert r["output"].startswith("(12, 3)\n")
        # step 3: fix and re-run; `data` survived every call and the reload
        ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": FIXED}))
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "mean(data)"}))
        assert r["output"].startswith("4.0\n")
        assert ok(await s.call_tool("terminal_close", {"id": "pty-1"}))["outcome"] == "closed"


async def test_shell_state_prompts_and_exit_codes(isolated_env, tmp_path):
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        sid = ok(await s.call_tool("terminal_open", {}))["pid"]
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "cd /etc && export GREETING=hi; false"}))
        assert (r["reason"], r["exit_code"]) == ("prompt", 1)
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "echo $PWD $GREETING"}))
        assert (r["output"], r["reason"], r["exit_code"]) == ("/etc hi\n", "prompt", 0)

        # a password prompt is an input wait, not a hang
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "read -s -p 'password: ' pw; echo got ${#pw}"}))
        assert (r["reason"], r["output"]) == ("input_wait", "password: ")
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "hunter2"}))
        assert r["reason"] == "prompt" and r["output"].endswith("got 7\n")

        # until settles early; a timeout leaves the command running
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "echo start; sleep 0.3; echo marker-42; sleep 30", "until": "marker-\\d+"}))
        assert r["reason"] == "pattern" and "marker-42" in r["output"]
        # the pattern send settled, so the slot is free; the sleep still runs until interrupted
        # (once it runs: the shell may still be between `echo` and `sleep 30`,
        # and an interrupt then reaches the shell, not the sleep)
        wait_until(lambda: in_foreground(sid, "sleep"), "`sleep 30` runs in the foreground")
        ok(await s.call_tool("terminal_signal", {"id": "pty-1", "signal": "SIGINT"}))
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "echo after"}))
        assert (r["output"].splitlines()[-1], r["reason"]) == ("after", "prompt")

        # a timeout returns while the command runs (it waits on a FIFO the
        # test releases); a read shows what it printed afterwards
        fifo = tmp_path / "release"
        os.mkfifo(fifo)
        r = ok(await s.call_tool("terminal_send", {
            "id": "pty-1", "text": f"echo early; read -r _ < {fifo}; echo late", "timeout_ms": 2000}))
        assert (r["reason"], r["output"]) == ("timeout", "early\n")
        await anyio.to_thread.run_sync(fifo.write_text, "go\n")

        async def read_late():
            tail = ok(await s.call_tool("terminal_read", {"id": "pty-1"}))
            return "late\n" in tail["output"]

        await eventually(read_late, "terminal_read shows the late output")


async def test_one_send_at_a_time_and_errors(isolated_env):
    async with connect(isolated_env) as s:
        sid = ok(await s.call_tool("terminal_open", {}))["pid"]
        results = {}

        async def send(text):
            results[text] = await s.call_tool("terminal_send", {"id": "pty-1", "text": text})

        async def first_is_active():
            [terminal] = ok(await s.call_tool("terminal_list", {}))["terminals"]
            return terminal["active_send"]

        async with anyio.create_task_group() as tg:
            tg.start_soon(send, "sleep 300")
            await eventually(first_is_active, "the first send is active")
            await send("echo second")
            assert err(results["echo second"])["code"] == "SEND_ACTIVE"
            # end the first send: interrupting its command settles it
            wait_until(lambda: in_foreground(sid, "sleep"), "`sleep 300` runs in the foreground")
            ok(await s.call_tool("terminal_signal", {"id": "pty-1", "signal": "SIGINT"}))
        assert ok(results["sleep 300"])["reason"] == "prompt"

        assert err(await s.call_tool("terminal_send", {"id": "pty-9", "text": "x"}))["code"] == "NO_SESSION"
        assert err(await s.call_tool("terminal_send", {"id": "nine", "text": "x"}))["code"] == "INVALID_ARGUMENT"
        e = err(await s.call_tool("terminal_signal", {"id": "pty-1", "signal": "SIGKILL"}))
        assert e["code"] == "USE_CLOSE"
        e = err(await s.call_tool("terminal_signal", {"id": "pty-1", "signal": "SIGUSR1"}))
        assert e["code"] == "INVALID_ARGUMENT" and e["message"].startswith("signal: ")

        # an exited program
        ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        r = ok(await s.call_tool("terminal_send", {"id": "pty-2", "text": "exit()"}))
        assert r["reason"] == "exit"
        assert err(await s.call_tool("terminal_send", {"id": "pty-2", "text": "1"}))["code"] == "SESSION_EXITED"

        # close twice; send after close
        assert ok(await s.call_tool("terminal_close", {"id": "pty-1"}))["outcome"] == "closed"
        assert ok(await s.call_tool("terminal_close", {"id": "pty-1"}))["outcome"] == "already_closing"
        assert err(await s.call_tool("terminal_send", {"id": "pty-1", "text": "x"}))["code"] in ("SESSION_CLOSING", "NO_SESSION")
        assert err(await s.call_tool("terminal_open", {"name": "a", "cwd": "/nonexistent"}))["code"] == "INVALID_ARGUMENT"


async def test_close_and_disconnect_leave_no_process(isolated_env):
    end_work_with_the_client(isolated_env)
    async with connect(isolated_env) as s:
        sid1 = ok(await s.call_tool("terminal_open", {}))["pid"]
        ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "sleep 1000 &"}))
        assert len(live_in_session(sid1)) >= 2
        ok(await s.call_tool("terminal_close", {"id": "pty-1"}))
        assert live_in_session(sid1) == []

        sid2 = ok(await s.call_tool("terminal_open", {}))["pid"]
        ok(await s.call_tool("terminal_send", {"id": "pty-2", "text": "set -m; sleep 1001 &"}))
    wait_until(lambda: live_in_session(sid2) == [], f"session {sid2} is empty after the disconnect")


async def test_screen_mode_shows_a_full_screen_program(isolated_env, tmp_path):
    (tmp_path / "page.txt").write_text("".join(f"row {i}\n" for i in range(1, 200)))
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        ok(await s.call_tool("terminal_open", {"rows": 10, "cols": 40}))
        ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "less page.txt", "until": "row 9"}))
        view = ok(await s.call_tool("terminal_read", {"id": "pty-1", "mode": "screen"}))
        lines = view["screen"].splitlines()
        assert lines[0].startswith("row 1") and (view["rows"], view["cols"]) == (10, 40)
        assert view["alternate_screen"] is True
        ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "q", "submit": False}))
        view = ok(await s.call_tool("terminal_read", {"id": "pty-1", "mode": "screen"}))
        assert view["alternate_screen"] is False
