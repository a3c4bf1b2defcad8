"""Agents outlive their client: a real `dsh mcp` bridge is SIGKILLed
mid-send while its agent has a Python REPL with state, a job printing a
line a second and a dev server; a new client takes everything back with
the resume key, and nothing is lost. Another agent with the ids but not
the key gets nothing; after the grace period nothing is left. A key is
shown once, to its agent, redacted from every later result, used once,
and takes nothing from an agent still connected elsewhere."""

import json
import re
import signal

import anyio
import pytest
from mcp.shared.exceptions import McpError

import waiting
from conftest import connect, dsh, err, ok, text_of, write_config
from test_daemon import RawBridge
from test_teardown import started_by

pytestmark = pytest.mark.anyio


def ps(env):
    return json.loads(dsh(env, "ps", "--json").stdout)


def detached_rows(env):
    return [c for c in ps(env)["connections"] if c.get("detached")]


def raw_tool(bridge, name, arguments):
    """A call through the raw bridge; the whole result."""
    reply = bridge.call("tools/call", {"name": name, "arguments": arguments})
    return reply["result"]


def numbered_lines(text):
    return [int(n) for n in re.findall(r"^tick (\d+)$", text, re.M)]


async def test_a_killed_client_resumes_with_nothing_lost(isolated_env, tmp_path):
    env = dict(isolated_env, DSH_TEST_MARK=str(tmp_path))
    ws = tmp_path / "ws"
    ws.mkdir()
    bridge = RawBridge(env, cwd=str(ws))
    killed = False
    try:
        opened = raw_tool(bridge, "terminal_open", {"command": ["python3", "-q"], "name": "repl"})
        assert not opened.get("isError"), opened
        repl = opened["structuredContent"]
        key = repl["resume_key"]
        assert key.startswith("dsh-rk-") and len(key) == len("dsh-rk-") + 32
        # The model reads it in the reply's text, with what to do with it.
        assert f"resume key {key}" in opened["content"][0]["text"]
        ok_send = raw_tool(bridge, "terminal_send", {"id": repl["id"], "text": "x = 41 + 1"})
        assert not ok_send.get("isError"), ok_send
        job = bridge.tool(
            "bash",
            {"command": "for i in $(seq 1 100000); do echo tick $i; sleep 1; done",
             "run_in_background": True},
        )
        # Each reply that shows a key mints it; the agent's recent keys
        # are all live.
        assert job["resume_key"] != key and job["resume_key"].startswith("dsh-rk-")
        server = bridge.tool("terminal_open", {"name": "server"})
        started = bridge.tool(
            "terminal_send",
            {"id": server["id"], "text": "python3 -m http.server 0 --bind 127.0.0.1",
             "until": "Serving HTTP", "timeout_ms": 30000},
        )
        assert "Serving HTTP" in started["output"], started
        server_pid = server["pid"]
        # Mid-send: the REPL is busy for a while when the bridge dies.
        bridge.send({"jsonrpc": "2.0", "id": 999, "method": "tools/call",
                     "params": {"name": "terminal_send", "arguments": {
                         "id": repl["id"],
                         "text": "import time; time.sleep(3); print('slept', x)"}}})  # sleep-ok: the program in the terminal sleeps, to be busy when the bridge dies
        waiting.wait_until(
            lambda: any(t["active_send"] for c in ps(env)["connections"]
                        for t in c["terminals"] if t["id"] == repl["id"]),
            "the send to be under way",
        )
        bridge.proc.send_signal(signal.SIGKILL)
        bridge.proc.wait()
        killed = True
        # Detached, not ended: the daemon shows it with its time left.
        waiting.wait_until(lambda: detached_rows(env), "the connection to be detached")
        row = detached_rows(env)[0]
        assert row["detached"]["left_s"] > 60
        assert {t["id"] for t in row["terminals"]} == {repl["id"], server["id"]}
        # The client comes back after 5 s.
        waiting.wait_until(
            lambda: detached_rows(env) and detached_rows(env)[0]["detached"]["for_s"] >= 5,
            "5 s to pass",
        )
        async with connect(env, cwd=str(ws)) as other:
            # Another agent with the ids but not the key gets nothing.
            r = await other.call_tool("terminal_read", {"id": repl["id"]})
            assert err(r)["code"] == "FOREIGN_SESSION"
            r = await other.call_tool("job_output", {"job_id": job["job_id"]})
            assert err(r)["code"] in ("FOREIGN_JOB", "NO_JOB"), r
            r = await other.call_tool("terminal_list", {"resume": "dsh-rk-" + "0" * 32})
            assert err(r)["code"] == "RESUME_KEY_UNKNOWN"
            async with connect(env, cwd=str(ws)) as s:
                back = ok(await s.call_tool("terminal_list", {"resume": key}))
                assert {t["id"] for t in back["terminals"]} == {repl["id"], server["id"]}
                # Single use: the resume gave a new key.
                key = back["resume_key"]
                assert key not in (repl["resume_key"], job["resume_key"])
                # The send the dead client made finished meanwhile: its
                # output is there to read, and the REPL kept its state.
                read = ok(await s.call_tool("terminal_read", {"id": repl["id"], "since": 0}))
                assert "slept 42" in read["output"], read
                again = ok(await s.call_tool("terminal_send", {"id": repl["id"], "text": "print(x * 2)"}))
                assert "84" in again["output"]
                # The job printed on while nobody was connected: no line lost.
                out = ok(await s.call_tool("job_output", {"job_id": job["job_id"], "since": 0,
                                                           "max_bytes": 1_000_000}))
                ticks = numbered_lines(out["output"])
                assert ticks[0] == 1 and ticks == list(range(1, len(ticks) + 1)), ticks
                assert len(ticks) >= 5
                # The dev server is the same process, still serving.
                listed = {t["id"]: t for t in back["terminals"]}
                assert listed[server["id"]]["pid"] == server_pid
                assert listed[server["id"]]["status"] == "running"
                assert detached_rows(env) == []
                # The key is the capability: presented from another
                # connection in the same directory while this one is still
                # open (as a client does whose stream died without a
                # word), it moves the work there, and this connection is
                # ended.
                moved = ok(await other.call_tool("terminal_list", {"resume": key}))
                assert {t["id"] for t in moved["terminals"]} == {repl["id"], server["id"]}
                key = moved["resume_key"]
                # and the connection it was taken from is ended
                with pytest.raises(McpError):
                    await s.call_tool("terminal_read", {"id": repl["id"]})
            # A connection that has work of its own takes nothing.
            async with connect(env, cwd=str(ws)) as third:
                ok(await third.call_tool("terminal_open", {}))
                r = await third.call_tool("terminal_list", {"resume": key})
                assert err(r)["code"] == "RESUME_NOT_EMPTY"
            ok(await other.call_tool("job_kill", {"job_id": job["job_id"]}))
            for t in (repl["id"], server["id"]):
                ok(await other.call_tool("terminal_close", {"id": t}))
    finally:
        if not killed:
            bridge.close()


async def test_detached_work_ends_when_its_grace_period_ends(isolated_env, tmp_path):
    env = dict(isolated_env, DSH_TEST_MARK=str(tmp_path))
    config = write_config(tmp_path, '[daemon]\ndetach_grace = "2s"\n')
    async with connect(env, "--config", config) as s:
        t = ok(await s.call_tool("terminal_open", {}))
        key = t["resume_key"]
        ok(await s.call_tool("bash", {"command": "sleep 1234", "run_in_background": True}))
        ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "sleep 4321 &"}))
        waiting.wait_until(
            lambda: {"sleep 1234", "sleep 4321"} <= {c for _, c in started_by(str(tmp_path))},
            "the job's and the terminal's sleeps to run",
        )
    # The client closed cleanly: the work is detached, then ended.
    waiting.wait_until(lambda: not ps(env)["connections"], "the grace period to end")
    waiting.wait_until(
        lambda: not [c for _, c in started_by(str(tmp_path)) if c.startswith("sleep")],
        "every process of the expired work to end",
    )
    async with connect(env, "--config", config) as s:
        r = await s.call_tool("terminal_list", {"resume": key})
        assert err(r)["code"] == "RESUME_EXPIRED"


async def test_a_grace_period_of_zero_ends_work_with_its_client(isolated_env, tmp_path):
    env = dict(isolated_env, DSH_TEST_MARK=str(tmp_path))
    config = write_config(tmp_path, '[daemon]\ndetach_grace = "0s"\n')
    async with connect(env, "--config", config) as s:
        t = ok(await s.call_tool("terminal_open", {}))
        assert "resume_key" not in t
        ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "sleep 4322 &"}))
    waiting.wait_until(lambda: not ps(env)["connections"], "the connection to end")
    waiting.wait_until(
        lambda: not [c for _, c in started_by(str(tmp_path)) if c.startswith("sleep")],
        "the terminal's processes to end with the client",
    )


async def test_a_person_ends_or_gives_detached_work(isolated_env, tmp_path):
    env = dict(isolated_env, DSH_TEST_MARK=str(tmp_path))
    async with connect(env) as s:
        t = ok(await s.call_tool("terminal_open", {"name": "kept"}))
    waiting.wait_until(lambda: detached_rows(env), "the connection to be detached")
    gone = detached_rows(env)[0]["id"]
    async with connect(env) as s:
        t2 = ok(await s.call_tool("terminal_open", {}))
    waiting.wait_until(lambda: len(detached_rows(env)) == 2, "the second to be detached")
    async with connect(env) as taker:
        me = [c["id"] for c in ps(env)["connections"] if not c.get("detached")][0]
        given = dsh(env, "ps", "--give", str(gone), "--to", str(me))
        assert t["id"] in given.stdout, given.stdout
        mine = ok(await taker.call_tool("terminal_list", {}))
        assert [x["id"] for x in mine["terminals"]] == [t["id"]]
        left = [c["id"] for c in detached_rows(env)]
        assert len(left) == 1
        ended = dsh(env, "ps", "--end", str(left[0]))
        assert "ended" in ended.stdout
        assert detached_rows(env) == []
        r = await taker.call_tool("terminal_read", {"id": t2["id"]})
        assert err(r)["code"] in ("NO_SESSION", "FOREIGN_SESSION")


async def test_racing_resumes_never_split_the_work(isolated_env, tmp_path):
    """Three connections in the agent's directory present the same key at
    once — clients whose streams died without a word, all reconnecting —
    first while the key's connection still seems open (a take-over), then
    while the work is detached (its client just left, so its connection
    may still be ending). A key is single-use: exactly one is given the
    whole work (and a new key), the others the retryable `RESUME_BUSY` or
    `RESUME_KEY_UNKNOWN` (used); the work is never split or lost."""
    env = isolated_env
    ws = tmp_path / "ws"
    ws.mkdir()

    def holders():
        """The work each connection the daemon counts as connected holds."""
        return [
            {t["id"] for t in c["terminals"]}
            for c in ps(env)["connections"]
            if c["terminals"] and not c.get("detached")
        ]

    async with connect(env, cwd=str(ws)) as owner:
        first = ok(await owner.call_tool("terminal_open", {}))
        second = ok(await owner.call_tool("terminal_open", {}))
        key = first["resume_key"]
        work = {first["id"], second["id"]}
        for _round in range(3):
            async with (connect(env, cwd=str(ws)) as c1, connect(env, cwd=str(ws)) as c2,
                        connect(env, cwd=str(ws)) as c3):
                answers = []

                async def resume(s):
                    r = await s.call_tool("terminal_list", {"resume": key})
                    answers.append((s, r))

                async with anyio.create_task_group() as tg:
                    for s in (c1, c2, c3):
                        tg.start_soon(resume, s)
                # A key is single-use: exactly one presenter gets the work;
                # the others are told to retry, or that the key was used.
                given = [(s, r) for s, r in answers if not r.isError]
                assert len(given) == 1, answers
                for s, r in answers:
                    if r.isError:
                        assert err(r)["code"] in ("RESUME_BUSY", "RESUME_KEY_UNKNOWN"), r
                keeper, reply = given[0]
                assert {t["id"] for t in ok(reply)["terminals"]} == work, reply
                # Never split: one connection holds all of it, at once.
                assert holders() == [work]
                mine = ok(await keeper.call_tool("terminal_list", {}))
                assert {t["id"] for t in mine["terminals"]} == work
                for s, r in answers:
                    if r.isError:
                        left = ok(await s.call_tool("terminal_list", {}))
                        assert left["terminals"] == [], "a refused presenter got nothing"
                        r = await s.call_tool("terminal_list", {"resume": key})
                        assert err(r)["code"] in ("RESUME_BUSY", "RESUME_KEY_UNKNOWN"), r
                new = ok(reply)["resume_key"]
                assert new != key
                key = new
            # The keeper's client left: the work is detached for the next round.
        with anyio.fail_after(waiting.HANG):
            await owner.server_gone.wait()  # the connection taken over is ended
    async with connect(env, cwd=str(ws)) as last:
        back = ok(await last.call_tool("terminal_list", {"resume": key}))
        assert {t["id"] for t in back["terminals"]} == work
        for t in work:
            ok(await last.call_tool("terminal_close", {"id": t}))


async def test_a_leaked_resume_key_takes_nothing_from_a_connected_agent(box):
    """Agent A's key lands in a client transcript under HOME, which every
    confined command may read. Agent B, in another workspace, reads the
    transcript and sees a redaction marker; presenting the key anyway
    (found elsewhere) while A is connected takes nothing, and A works on.
    A's own client, restarted, takes its work back once with the key."""
    env, tmp = box["env"], box["dir"]
    ws_a, ws_b = tmp / "a", tmp / "b"
    ws_a.mkdir()
    ws_b.mkdir()
    transcript = box["home"] / ".claude" / "projects" / "a" / "session.jsonl"
    transcript.parent.mkdir(parents=True)
    async with connect(env, cwd=str(ws_a)) as a:
        opened = await a.call_tool("terminal_open", {"name": "a-shell"})
        t = ok(opened)
        key = t["resume_key"]
        # Shown once, to its own agent, in the reply that minted it.
        assert f"resume key {key}" in text_of(opened)
        transcript.write_text(json.dumps({"type": "tool_result", "content": text_of(opened)}) + "\n")
        async with connect(env, cwd=str(ws_b)) as b:
            read = await b.call_tool("bash", {"command": f"cat {transcript}"})
            assert key not in text_of(read) and key not in json.dumps(read.structuredContent)
            assert "[redacted: resume key]" in text_of(read), text_of(read)
            # A's own later results do not show it either.
            mine = await a.call_tool("bash", {"command": f"cat {transcript}"})
            assert key not in text_of(mine) and "[redacted: resume key]" in text_of(mine)
            # Presented anyway while A is connected: refused, nothing taken.
            r = await b.call_tool("terminal_list", {"resume": key})
            assert err(r)["code"] == "RESUME_KEY_IN_USE", r
            assert ok(await b.call_tool("terminal_list", {}))["terminals"] == []
            r = await b.call_tool("terminal_send", {"id": t["id"], "text": "echo pwned"})
            assert err(r)["code"] in ("FOREIGN_SESSION", "NO_SESSION"), r
            sent = ok(await a.call_tool("terminal_send", {"id": t["id"], "text": "echo still-mine"}))
            assert "still-mine" in sent["output"], sent
            assert [x["id"] for x in ok(await a.call_tool("terminal_list", {}))["terminals"]] == [t["id"]]
    # A's client really went away: its work is detached. The key, unused,
    # takes nothing into another workspace; A's restart takes it back.
    waiting.wait_until(lambda: detached_rows(env), "A's work to be detached")
    async with connect(env, cwd=str(ws_b)) as b2:
        r = await b2.call_tool("terminal_list", {"resume": key})
        assert err(r)["code"] == "RESUME_KEY_FOREIGN", r
        assert ok(await b2.call_tool("terminal_list", {}))["terminals"] == []
    assert detached_rows(env), "the refused key left the work detached"
    async with connect(env, cwd=str(ws_a)) as a2:
        back = await a2.call_tool("terminal_list", {"resume": key})
        got = ok(back)
        assert [x["id"] for x in got["terminals"]] == [t["id"]]
        new = got["resume_key"]
        assert new != key and f"resume key {new}" in text_of(back)
        sent = ok(await a2.call_tool("terminal_send", {"id": t["id"], "text": "echo back-again"}))
        assert "back-again" in sent["output"], sent
    waiting.wait_until(lambda: detached_rows(env), "A's work to be detached again")
    async with connect(env, cwd=str(ws_a)) as a3:
        # Single use: the key taken from the transcript is dead.
        r = await a3.call_tool("terminal_list", {"resume": key})
        assert err(r)["code"] == "RESUME_KEY_UNKNOWN" and "already used" in err(r)["message"], r
        ok(await a3.call_tool("terminal_list", {"resume": new}))
        ok(await a3.call_tool("terminal_close", {"id": t["id"]}))


async def test_a_key_minted_while_another_call_runs_is_not_in_its_result(box):
    """Agent B's `bash` is already running, waiting for a transcript to
    appear, when agent A's reply mints a key; the transcript then holds
    the key. B's result, made by a call that began before the key
    existed, still shows the marker, not the key."""
    env, tmp = box["env"], box["dir"]
    ws_a, ws_b = tmp / "a", tmp / "b"
    ws_a.mkdir()
    ws_b.mkdir()
    transcript = box["home"] / ".codex" / "sessions" / "a.jsonl"
    transcript.parent.mkdir(parents=True)
    ready = ws_b / "b-is-waiting"
    async with connect(env, cwd=str(ws_a)) as a, connect(env, cwd=str(ws_b)) as b:
        script = (f"touch {ready}; while [ ! -s {transcript} ]; do sleep 0.05; done; "  # sleep-ok: a poll inside the command under test
                  f"cat {transcript}")
        read = None

        async def b_reads():
            nonlocal read
            read = await b.call_tool("bash", {"command": script, "timeout_ms": 60000})

        async with anyio.create_task_group() as tg:
            tg.start_soon(b_reads)
            async def b_is_waiting():
                assert read is None, text_of(read)
                return ready.exists()

            await waiting.eventually(b_is_waiting, "B's command to be running")
            opened = await a.call_tool("terminal_open", {"name": "a-shell"})
            key = ok(opened)["resume_key"]
            transcript.write_text(json.dumps({"content": text_of(opened)}) + "\n")
        assert key not in text_of(read) and key not in json.dumps(read.structuredContent), text_of(read)
        assert "[redacted: resume key]" in text_of(read), text_of(read)
        ok(await a.call_tool("terminal_close", {"id": ok(opened)["id"]}))
