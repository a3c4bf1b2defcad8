"""Background jobs end to end over MCP: one registry for bash, terminal
sends and subagents."""

import os
import re
import tempfile
import time

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import (
    live_named,
    session_of,
    connect,
    deliver_until_the_server_exits,
    end_work_with_the_client,
    dsh_bin,
    err,
    live_in_session,
    ok,
    text_of,
    wait_settled,
    write_config,
)
from waiting import HANG, eventually, wait_until

pytestmark = pytest.mark.anyio

AGENT = '''
import sys, time
prompt = sys.argv[1]
sys.stdout.write("agent got: " + prompt + chr(10)); sys.stdout.flush()
if "slow" in prompt:
    # sleep-ok: the agent's own long work, not synchronisation
    time.sleep(300)
print("agent done", flush=True)
'''


def subagent_config(tmp_path, extra=""):
    script = tmp_path / "agent.py"
    script.write_text(AGENT)
    return write_config(
        tmp_path,
        f'[subagent]\ncommand = ["python3", "{script}", "{{prompt}}"]\n{extra}',
    )


async def test_scenario_b_three_kinds_in_one_list(isolated_env, tmp_path):
    notes = []
    three_notes = anyio.Event()

    async def on_log(params):
        notes.append(params.data)
        if len(notes) == 3:
            three_notes.set()

    config = subagent_config(tmp_path)
    async with connect(isolated_env, "--config", config, logging_callback=on_log) as s:
        bash = ok(await s.call_tool("bash", {
            "command": "for i in 1 2 3; do echo line $i; sleep 0.2; done; exit 3",
            "run_in_background": True}))["job_id"]
        agent = ok(await s.call_tool("subagent", {
            "prompt": "slow task", "run_in_background": True}))["job_id"]
        ok(await s.call_tool("terminal_open", {}))
        send = ok(await s.call_tool("terminal_send", {
            "id": "pty-1", "text": "for i in 1 2 3; do echo tick $i; sleep 0.2; done",
            "run_in_background": True}))["job_id"]
        assert re.fullmatch(r"bash-\d+", bash) and re.fullmatch(r"subagent-\d+", agent)
        assert re.fullmatch(r"pty-send-\d+", send)

        jobs = ok(await s.call_tool("job_list", {}))["jobs"]
        assert [(j["id"], j["kind"]) for j in jobs] == [(bash, "bash"), (agent, "subagent"), (send, "pty-send")]

        # the terminal is busy with the background send until it settles
        assert err(await s.call_tool("terminal_send", {"id": "pty-1", "text": "echo x"}))["code"] == "SEND_ACTIVE"
        sent = await wait_settled(s, send)
        assert (sent["status"], sent["exit_code"]) == ("completed", 0)
        r = ok(await s.call_tool("job_output", {"job_id": send, "since": 0}))
        assert r["output"].startswith("tick 1\ntick 2\ntick 3\n"), r["output"]
        assert "for i in" not in r["output"]  # the echo of the sent text is left out
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "echo free"}))
        assert r["output"].endswith("free\n")

        # the subagent's first line, read with a server-side wait
        r = ok(await s.call_tool("job_output", {"job_id": agent, "wait_ms": 20000}))
        assert r["output"] == "agent got: slow task\n" and r["status"] == "running"

        done = await wait_settled(s, bash)
        assert (done["status"], done["exit_code"]) == ("completed", 3)
        r = ok(await s.call_tool("job_output", {"job_id": bash, "since": 0}))
        assert r["output"] == "line 1\nline 2\nline 3\n"

        k = ok(await s.call_tool("job_kill", {"job_id": agent}))
        assert k == {"outcome": "killed", "status": "killed"}
        again = ok(await s.call_tool("job_kill", {"job_id": agent}))
        assert again == {"outcome": "already_finished", "status": "killed"}

        statuses = {j["id"]: j["status"] for j in ok(await s.call_tool("job_list", {}))["jobs"]}
        assert statuses == {bash: "completed", agent: "killed", send: "completed"}
        assert [j["id"] for j in ok(await s.call_tool("job_list", {"status": "killed"}))["jobs"]] == [agent]

        # a notification arrived for each settled job
        with anyio.fail_after(HANG):
            await three_notes.wait()
        assert {(n["job_id"], n["status"]) for n in notes} == {
            (bash, "completed"), (agent, "killed"), (send, "completed")}
        assert all("job_output" in n["message"] for n in notes)


async def test_wait_ms_wakes_on_output_and_returns_at_the_deadline(isolated_env):
    async with connect(isolated_env) as s:
        job = ok(await s.call_tool("bash", {
            "command": "sleep 0.5; echo ready; sleep 300", "run_in_background": True}))["job_id"]
        t = time.monotonic()
        r = ok(await s.call_tool("job_output", {"job_id": job, "wait_ms": 60000}))
        woke = time.monotonic() - t
        assert r["output"] == "ready\n"
        assert woke < 30, "the wait did not wake on output"
        # nothing new: the call returns at its deadline with no output
        t = time.monotonic()
        r2 = ok(await s.call_tool("job_output", {"job_id": job, "since": r["next"], "wait_ms": 300}))
        assert (r2["output"], r2["status"], r2["from"], r2["next"]) == ("", "running", r["next"], r["next"])
        assert time.monotonic() - t >= 0.25
        # re-reading an old cursor returns the same text
        again = ok(await s.call_tool("job_output", {"job_id": job, "since": 0}))
        assert again["output"] == "ready\n"
        ok(await s.call_tool("job_kill", {"job_id": job}))


async def test_statuses_never_lie(isolated_env):
    async with connect(isolated_env) as s:
        # past its deadline: timed_out, the whole tree gone (the deadline
        # leaves bash time to print its pid and start both sleeps under load)
        job = ok(await s.call_tool("bash", {
            "command": "echo started; sleep 300.41 & sleep 301.41", "timeout_ms": 3000,
            "run_in_background": True}))["job_id"]
        done = await wait_settled(s, job)
        assert done["status"] == "timed_out" and done.get("exit_code") is None
        out = ok(await s.call_tool("job_output", {"job_id": job, "since": 0}))["output"]
        assert out.startswith("started")
        assert live_named("sleep 300.41") == [] and live_named("sleep 301.41") == []

        # killed mid-run: killed, never completed, even if it traps SIGINT and exits 0
        job = ok(await s.call_tool("bash", {
            "command": "trap 'exit 0' INT; echo up; sleep 300 & wait",
            "run_in_background": True}))["job_id"]
        ok(await s.call_tool("job_output", {"job_id": job, "wait_ms": 20000}))
        assert ok(await s.call_tool("job_kill", {"job_id": job}))["status"] == "killed"
        assert (await wait_settled(s, job))["status"] == "killed"


async def test_dropped_after_the_ring_wraps(isolated_env, tmp_path):
    config = write_config(tmp_path, "[limits]\njob_output_bytes = 4096\n")
    async with connect(isolated_env, "--config", config) as s:
        job = ok(await s.call_tool("bash", {
            "command": "for i in $(seq 1 2000); do echo line-$i; done", "run_in_background": True}))["job_id"]
        await wait_settled(s, job)
        r = ok(await s.call_tool("job_output", {"job_id": job, "since": 0}))
        total = sum(len(f"line-{i}\n") for i in range(1, 2001))
        assert r["next"] == total
        assert r["dropped"] > 0 and r["from"] == r["dropped"]
        assert r["output"].endswith("line-2000\n")
        assert len(r["output"]) <= 4096


async def test_errors_where_due(isolated_env, tmp_path):
    config = write_config(tmp_path, "[limits]\nmax_running_jobs = 2\n")
    async with connect(isolated_env, "--config", config) as s:
        a = ok(await s.call_tool("bash", {"command": "sleep 300", "run_in_background": True}))["job_id"]
        b = ok(await s.call_tool("bash", {"command": "sleep 300", "run_in_background": True}))["job_id"]
        e = err(await s.call_tool("bash", {"command": "sleep 300", "run_in_background": True}))
        assert e["code"] == "JOB_LIMIT" and e["retryable"] is True and "job_kill" in e["message"]
        ok(await s.call_tool("job_kill", {"job_id": a}))
        c = ok(await s.call_tool("bash", {"command": "true", "run_in_background": True}))["job_id"]
        assert c != a and c != b

        assert err(await s.call_tool("job_output", {"job_id": "bash-999"}))["code"] == "NO_JOB"
        assert err(await s.call_tool("job_kill", {"job_id": "nonsense"}))["code"] == "NO_JOB"
        e = err(await s.call_tool("job_output", {"job_id": b, "wait_ms": "long"}))
        assert e["code"] == "INVALID_ARGUMENT" and e["message"].startswith("wait_ms: ")

        # no subagent configured: a structured error, and the schema is the same
        e = err(await s.call_tool("subagent", {"prompt": "hi"}))
        assert e["code"] == "SUBAGENT_UNAVAILABLE"
        plain = {t.name: t.inputSchema for t in (await s.list_tools()).tools}
    async with connect(isolated_env, "--config", subagent_config(tmp_path)) as s:
        configured = {t.name: t.inputSchema for t in (await s.list_tools()).tools}
        r = ok(await s.call_tool("subagent", {"prompt": "quick"}))
        assert (r["output"], r["exit_code"]) == ("agent got: quick\nagent done\n", 0)
    assert plain["subagent"] == configured["subagent"]


async def test_closing_the_connection_ends_its_jobs(isolated_env):
    end_work_with_the_client(isolated_env)
    async with connect(isolated_env) as s:
        job = ok(await s.call_tool("bash", {
            "command": "sleep 300.42 & sleep 301.42", "run_in_background": True}))["job_id"]
        sid = session_of("sleep 301.42")
        wait_until(lambda: len(live_in_session(sid)) >= 2, "the job's sleeps run")
    # the server ends the connection's jobs before it exits
    wait_until(lambda: live_in_session(sid) == [], f"session {sid} is empty")


async def test_killing_a_background_send_interrupts_it_and_frees_the_terminal(isolated_env):
    async with connect(isolated_env) as s:
        ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "kept = 'state'"}))
        job = ok(await s.call_tool("terminal_send", {
            "id": "pty-1",
            # sleep-ok: the program the send runs, not synchronisation
            "text": "import time; print('sleeping', flush=True); time.sleep(300)",
            "run_in_background": True}))["job_id"]
        assert err(await s.call_tool("terminal_send", {"id": "pty-1", "text": "1"}))["code"] == "SEND_ACTIVE"
        # kill the sleep itself, not the REPL still reading the line
        await output_contains(s, job, "sleeping\n")
        assert ok(await s.call_tool("job_kill", {"job_id": job}))["status"] == "killed"
        out = ok(await s.call_tool("job_output", {"job_id": job, "since": 0}))["output"]
        assert "KeyboardInterrupt" in out
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "kept"}))
        assert r["output"].startswith("'state'\n")


async def test_a_background_send_whose_program_ignores_sigint_is_still_stopped(isolated_env):
    async with connect(isolated_env) as s:
        ok(await s.call_tool("terminal_open", {}))
        job = ok(await s.call_tool("terminal_send", {
            "id": "pty-1", "text": "bash -c \"trap '' INT; echo trapped; exec sleep 300\"",
            "run_in_background": True}))["job_id"]
        # The program itself prints once it ignores SIGINT (so it already is
        # the terminal's foreground job, which the shell's own builtins
        # never are); only the kill's escalation can stop it.
        await output_contains(s, job, "trapped\n")
        killed = ok(await s.call_tool("job_kill", {"job_id": job}))
        assert killed["status"] == "killed", killed
        r = ok(await s.call_tool("terminal_send", {"id": "pty-1", "text": "echo alive"}))
        assert r["output"].endswith("alive\n") and r["reason"] == "prompt"


def test_disconnecting_during_a_waiting_call_still_ends_the_jobs(isolated_env):
    """The client closes stdin while a `job_output` wait is in flight: the
    server stops the call, ends the job's whole tree and exits promptly
    (clients kill a server that lingers)."""
    end_work_with_the_client(isolated_env)
    import json
    import subprocess
    from test_foundation import _read_response, _rpc
    from conftest import dsh_bin

    proc = subprocess.Popen([dsh_bin(), "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=isolated_env)
    try:
        _rpc(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}})
        _read_response(proc, 1)
        _rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = lambda i, name, args: _rpc(proc, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                                                 "params": {"name": name, "arguments": args}})
        call(2, "bash", {"command": "echo started; sleep 300.43 & sleep 301.43", "run_in_background": True})
        job = _read_response(proc, 2)["result"]["structuredContent"]["job_id"]
        call(3, "job_output", {"job_id": job, "wait_ms": 20000})
        first = _read_response(proc, 3)["result"]["structuredContent"]
        sid = session_of("sleep 301.43")
        call(4, "job_output", {"job_id": job, "since": first["next"], "wait_ms": 600000})
        # the reply to a ping sent after it proves the server took up call 4
        _rpc(proc, {"jsonrpc": "2.0", "id": 5, "method": "ping"})
        _read_response(proc, 5)
        started = time.monotonic()
        proc.stdin.close()
        # far less than the 600 s the call would wait
        proc.wait(timeout=HANG)
        assert time.monotonic() - started < HANG, "the server lingered after its client left"
    finally:
        if proc.poll() is None:
            proc.kill()
    assert live_in_session(sid) == []


async def output_contains(session, job_id, text):
    """Waits (server-side, with wait_ms) until the job's output contains `text`."""
    seen = ""
    cursor = 0
    with anyio.fail_after(HANG):
        while text not in seen:
            r = ok(await session.call_tool("job_output", {"job_id": job_id, "since": cursor, "wait_ms": 5000}))
            seen += r["output"]
            cursor = r["next"]
            assert r["status"] in ("running", "stopping") or text in seen, (r, seen)


async def test_a_notification_after_the_session_closed_leaves_the_transport_working(isolated_env, tmp_path):
    """A job that settles after the client session closed sends its
    notification into a session nobody reads any more. The test helper's
    transport reads it and drops it and shuts down cleanly (the SDK's own
    stdio transport raised BrokenResourceError here, failing the test that
    was unlucky enough to end as a job settled)."""
    fifo = tmp_path / "release"
    os.mkfifo(fifo)
    dropped = []
    params = StdioServerParameters(command=dsh_bin(), args=["mcp"], env=isolated_env)
    with tempfile.TemporaryFile("w+") as errlog:
        async with anyio.create_task_group() as tg:
            async with stdio_client(params, errlog=errlog) as (read, write):
                to_session, session_read = anyio.create_memory_object_stream(0)
                tg.start_soon(deliver_until_the_server_exits, read, to_session, dropped)
                async with ClientSession(session_read, write) as s:
                    await s.initialize()
                    job = ok(await s.call_tool("bash", {
                        "command": f"read -r _ < {fifo}", "run_in_background": True}))["job_id"]
                # the session is closed; now the job settles
                await anyio.to_thread.run_sync(fifo.write_text, "go\n")

                async def notified():
                    return [m for m in dropped if getattr(m.message.root, "method", None) == "notifications/message"]

                [note] = await eventually(notified, "the job's notification arrives after the session closed")
                assert note.message.root.params["data"]["job_id"] == job
