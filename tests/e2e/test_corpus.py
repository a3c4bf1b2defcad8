"""The conformance corpus: real interactive programs (REPLs, debuggers,
password prompts, full-screen programs, canonical-mode readers,
interactive git) driven through `terminal_send` over MCP in the default
sandbox. Every step must settle with the reason it expects (a prompt, an
input wait, an exit), show the output it expects, and never wait out its
timeout. The programs are listed in `corpus.py`; `cargo xtask test`
installs them.

One `dsh mcp` server serves the whole module; each program gets its own
terminal and directory in the server's workspace. HOME is a directory of
the test's own outside the workspace (the sandbox keeps it read-only, as
it keeps a user's home), so nothing is written to the real home."""

import re
import shutil
import time

import pytest

from conftest import connect, ok, stop_daemons
from corpus import PROGRAMS, cleanup, distinct_programs, missing, server_env
from waiting import eventually

pytestmark = pytest.mark.anyio

# Generous: a step that settles normally takes milliseconds; one that
# reaches this has waited out its timeout, which fails it.
STEP_TIMEOUT_MS = 15000

# How long each step took, for the report printed at the end of the module.
DURATIONS = []


@pytest.fixture(scope="module")
def anyio_backend():
    return "asyncio"


@pytest.fixture(scope="module")
async def corpus(tmp_path_factory):
    """One `dsh mcp` server for every program of the module, in a
    workspace of its own, with a HOME of its own outside the workspace."""
    base = tmp_path_factory.mktemp("corpus")
    env, ws = server_env(base)
    try:
        async with connect(env, cwd=str(ws)) as session:
            yield {"session": session, "ws": ws}
    finally:
        cleanup()
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)


def describe(program, i, step, reply):
    return (
        f"{program.name}: step {i + 1} ({step.name}) sent {step.text[:80]!r}: "
        f"reason {reply.get('reason')!r}, exit_code {reply.get('exit_code')!r}, "
        f"echo {reply.get('echo', '(absent)')!r}, {reply.get('duration_ms')} ms, "
        f"output {reply.get('output', '')[-600:]!r}"
    )


def test_the_corpus_has_sixty_programs():
    names = [p.name for p in PROGRAMS]
    assert len(names) == len(distinct_programs()), "a program is listed twice"
    assert len(names) >= 60, names


@pytest.mark.parametrize("program", PROGRAMS, ids=[p.name for p in PROGRAMS])
async def test_program(corpus, program):
    reason = program.skip_if() if program.skip_if else None
    if reason:
        pytest.skip(reason)
    absent = missing(program)
    assert not absent, f"{program.name} needs {absent} on PATH: `cargo xtask test` installs them"
    s, root = corpus["session"], corpus["ws"] / re.sub(r"[^\w.-]", "_", program.name)
    root.mkdir()
    if program.setup:
        program.setup(root)

    args = {"cwd": str(root), "rows": program.rows, "cols": program.cols, "name": program.name}
    if program.command:
        args["command"] = program.command
    if program.env:
        args["env"] = program.terminal_env(root)
    opened = ok(await s.call_tool("terminal_open", args))
    tid = opened["id"]
    try:
        expected_open = ("input_wait",) if program.command else ("prompt", "input_wait")
        what = f"{program.name}: terminal_open: reason {opened.get('reason')!r}, output {opened.get('output', '')!r}"
        assert opened.get("reason") in expected_open, what
        if program.open_out:
            assert re.search(program.open_out, opened.get("output", "")), what
        assert "Could not open history file" not in opened.get("output", ""), what

        for i, step in enumerate(program.steps):
            if step.poll:
                await poll_output(s, tid, program, i, step)
                continue
            started = time.monotonic()
            result = await s.call_tool("terminal_send", {
                "id": tid, "text": step.text, "submit": step.submit, "timeout_ms": STEP_TIMEOUT_MS})
            elapsed_ms = (time.monotonic() - started) * 1000
            reply = ok(result)
            what = describe(program, i, step, reply)
            DURATIONS.append((program.name, step.name, reply.get("reason"), reply.get("duration_ms"), elapsed_ms))
            assert reply["reason"] != "timeout", f"waited out its timeout: {what}"
            assert reply["reason"] in step.reasons(), what
            if step.exit_code is not None:
                assert reply["exit_code"] == step.exit_code, what
            if step.out is not None:
                assert re.search(step.out, reply["output"]), f"output lacks {step.out!r}: {what}"
            if step.echo is False:
                assert reply.get("echo") is False, f"a secret prompt must report echo off: {what}"
                assert "echo off" in result.content[0].text, f"the text footer must say `echo off`: {what}"
            elif step.echo is True:
                assert reply.get("echo") is not False, f"an ordinary input wait reported echo off: {what}"
            if step.screen is not None:
                view = ok(await s.call_tool("terminal_read", {"id": tid, "mode": "screen"}))
                assert re.search(step.screen, view["screen"], re.M), (
                    f"the screen lacks {step.screen!r}: {what}\nscreen:\n{view['screen']}")
        if program.check:
            program.check(root)
    finally:
        await s.call_tool("terminal_close", {"id": tid})


async def poll_output(s, tid, program, i, step):
    """Reads the terminal's stream until `step.out` appears: output the
    program prints by itself (a read timing out), not in answer to a send."""
    seen = []

    async def appeared():
        read = ok(await s.call_tool("terminal_read", {"id": tid}))
        seen.append(read["output"])
        return re.search(step.out, "".join(seen))

    await eventually(appeared, f"{program.name}: step {i + 1} ({step.name}): {step.out!r} in {''.join(seen)!r}")


def test_print_the_settle_times():
    """Not a check: the settle time of every step that ran, for a report
    (shown with `pytest -s`)."""
    for name, step, reason, server_ms, client_ms in DURATIONS:
        print(f"{name:<24} {step:<24} {reason or '-':<11} {server_ms!s:>6} ms (call {client_ms:.0f} ms)")
