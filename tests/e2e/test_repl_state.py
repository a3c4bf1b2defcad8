"""REPLs in the sandbox, with real ipython and node: a confined process
keeps its REPL and shell state (ipython's profile, the history files) in a
private per-workspace directory that the sandbox lets it write and that
only confined processes are pointed at. So ipython starts and keeps its
variables under the default sandbox, node starts without a history error,
and a confined command cannot plant ipython startup code that runs outside
the sandbox.

Each test has its own HOME (no `~/.ipython`), TMPDIR and XDG_STATE_HOME
(conftest's make_env), so nothing here reads or writes the user's."""

import os
import pathlib
import shlex
import shutil
import sqlite3
import sys

import anyio
import mcp.types as types
import pytest

from conftest import connect, ok, text_of, write_config
from waiting import eventually

pytestmark = pytest.mark.anyio

# The variables dsh points into the state directory.
REPL_VARS = (
    "IPYTHONDIR",
    "PYTHON_HISTORY",
    "NODE_REPL_HISTORY",
    "SQLITE_HISTORY",
    "PSQL_HISTORY",
    "MYSQL_HISTFILE",
    "REDISCLI_HISTFILE",
    "LESSHISTFILE",
    "HISTFILE",
)

# The test's own interpreter, which has IPython (tests/requirements.txt).
IPYTHON = [sys.executable, "-m", "IPython", "--simple-prompt", "--no-banner"]


@pytest.fixture
def box(box):
    """conftest's box (its own HOME, TMPDIR and workspace), with none of
    the REPL variables inherited from whoever runs the tests, and `state`:
    where dsh keeps the state directories."""
    for name in REPL_VARS:
        box["env"].pop(name, None)
    box["state"] = pathlib.Path(box["env"]["XDG_STATE_HOME"]) / "dsh" / "repl"
    return box


def state_dir(box) -> pathlib.Path:
    """The workspace's state directory (the only one)."""
    [d] = box["state"].iterdir()
    return d


async def send(s, tid, text):
    return ok(await s.call_tool("terminal_send", {"id": tid, "text": text}))


@pytest.mark.parametrize("mode", ["workspace-write", "read-only"])
async def test_ipython_starts_and_keeps_its_variables_and_history_in_a_confined_mode(box, mode):
    cfg = write_config(box["dir"], f'[sandbox]\nmode = "{mode}"\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
        r = await s.call_tool("terminal_open", {"command": IPYTHON})
        opened = ok(r)
        assert opened["sandbox"] == {"mode": mode, "enforced": True, "network": True}
        assert opened["reason"] == "input_wait", text_of(r)
        assert "Error" not in opened["output"] and "In [1]:" in opened["output"], opened["output"]
        tid = opened["id"]
        await send(s, tid, "answer = 6 * 7")
        assert "Out[2]: 42" in (await send(s, tid, "answer + 0"))["output"]
        assert (await send(s, tid, "exit"))["reason"] == "exit"

        # The next ipython of the workspace finds the history of the last.
        tid = ok(await s.call_tool("terminal_open", {"command": IPYTHON}))["id"]
        out = (await send(s, tid, "%history -g answer"))["output"]
        assert "answer = 6 * 7" in out, out
        await s.call_tool("terminal_close", {"id": tid})

    state = state_dir(box)
    assert state.name.startswith("ws-")
    assert oct(state.stat().st_mode & 0o777) == oct(0o700)
    db = sqlite3.connect(state / "ipython" / "profile_default" / "history.sqlite")
    try:
        sources = [row[0] for row in db.execute("SELECT source_raw FROM history")]
    finally:
        db.close()
    assert "answer = 6 * 7" in sources
    assert not (box["home"] / ".ipython").exists()


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_node_starts_without_a_history_error_and_keeps_its_history(box):
    async with connect(box["env"], cwd=box["ws"]) as s:
        opened = ok(await s.call_tool("terminal_open", {"command": ["node"]}))
        assert opened["reason"] == "input_wait"
        assert "Could not open history file" not in opened["output"], opened["output"]
        await send(s, opened["id"], "let y = 6 * 7")
        assert "42" in (await send(s, opened["id"], "y"))["output"]
        history = state_dir(box) / "node_repl_history"

        async def written():
            return history.exists() and "let y = 6 * 7" in history.read_text()

        await eventually(written, f"node writes its history to {history}")
        await s.call_tool("terminal_close", {"id": opened["id"]})
    assert not (box["home"] / ".node_repl_history").exists()


def elicitation(answer, asked):
    async def callback(context, params):
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    return callback


async def test_a_confined_command_cannot_plant_ipython_startup_code_that_runs_outside(box):
    home = box["home"]
    marker = box["dir"] / "ran-outside-the-sandbox"
    # A startup script that marks where it ran and leaves a variable.
    planted = (
        "PLANTED = 'yes'\n"
        "try:\n"
        f"    open({str(marker)!r}, 'w').write('planted code ran')\n"
        "except OSError:\n"
        "    pass\n"
    )
    plant = "mkdir -p {d}/profile_default/startup && printf %s {code} > {d}/profile_default/startup/00-x.py"
    asked = []
    async with connect(box["env"], cwd=box["ws"], elicitation_callback=elicitation("accept", asked)) as s:
        # ipython's own directory, which an unconfined ipython reads: refused
        # and reported as before.
        r = await s.call_tool("bash", {"command": plant.format(d="~/.ipython", code=shlex.quote(planted))})
        res = ok(r)
        assert res["exit_code"] != 0, res
        assert res["refusals"]["paths"] == [{"path": str(home / ".ipython"), "access": "write"}], res
        assert f"[the sandbox refused: writing {home / '.ipython'}]" in text_of(r)
        assert not (home / ".ipython").exists()

        # The state directory: writable, and a confined ipython runs what
        # was put there (inside the sandbox, where the marker is refused).
        res = ok(await s.call_tool("bash", {"command": plant.format(d='"$IPYTHONDIR"', code=shlex.quote(planted))}))
        assert res["exit_code"] == 0 and "refusals" not in res, res
        tid = ok(await s.call_tool("terminal_open", {"command": IPYTHON}))["id"]
        assert "'yes'" in (await send(s, tid, "PLANTED"))["output"]
        await s.call_tool("terminal_close", {"id": tid})
        assert not marker.exists()

        # A command the person lets run outside the sandbox is not pointed
        # at the state directory: its ipython does not run the planted code.
        probe = (
            'echo "IPYTHONDIR=${IPYTHONDIR-unset}"; '
            f"{shlex.quote(sys.executable)} -m IPython --no-banner "
            "-c \"print('PLANTED', globals().get('PLANTED', 'absent'))\""
        )
        # (the person approves it with `dsh approve`; the client's accept
        # of the link approves nothing)
        from test_approvals import decide_on_a_terminal, one_waiting

        async with anyio.create_task_group() as tg:
            result = {}

            async def call():
                result["r"] = await s.call_tool("bash", {"command": probe, "sandbox": "off"})

            tg.start_soon(call)
            a = await one_waiting(box["env"])
            code, said = await anyio.to_thread.run_sync(
                lambda: decide_on_a_terminal(box["env"], a["id"], "yes"))
            assert code == 0, said
        res = ok(result["r"])
        assert res["sandbox"]["mode"] == "off", res
        assert "IPYTHONDIR=unset" in res["output"] and "PLANTED absent" in res["output"], res
    assert len(asked) == 1
    assert not marker.exists()
    assert (state_dir(box) / "ipython" / "profile_default" / "startup" / "00-x.py").exists()


async def test_with_the_sandbox_off_nothing_is_pointed_at_a_state_dir(box):
    cfg = write_config(box["dir"], '[sandbox]\nmode = "off"\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
        opened = ok(await s.call_tool("terminal_open", {}))
        assert opened["sandbox"]["mode"] == "off"
        out = (await send(s, opened["id"], "env"))["output"]
        await s.call_tool("terminal_close", {"id": opened["id"]})
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert "PATH" in names, out
    assert not names & set(REPL_VARS), out
    assert not box["state"].exists()
