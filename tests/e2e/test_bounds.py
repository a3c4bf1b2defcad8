"""Bounds on what a client controls, through the real `dsh mcp` binary: a
misbehaving client gets a structured error or a truncation marker that
says what was cut, never a crash, an unbounded result or an unbounded
wait."""

import os

import anyio
import pytest

from conftest import connect, err, ok, text_of, write_config
from waiting import eventually

pytestmark = pytest.mark.anyio

LIMIT = 32768  # the default max_result_bytes


async def wait_for_files(paths):
    """Waits until every path exists (the commands that create them run)."""
    async def created():
        return all(os.path.exists(p) for p in paths)

    await eventually(created, f"these files exist: {[str(p) for p in paths]}")


def blocked_command(tmp_path, name):
    """A command that says it started, then waits for `go`."""
    return (
        f"touch {tmp_path}/{name}; "
        f"while [ ! -e {tmp_path}/go ]; do sleep 0.02; done; echo {name} done"
    )


async def test_foreground_bash_calls_are_capped_per_agent(isolated_env, tmp_path):
    results = {}
    async with connect(isolated_env, cwd=str(tmp_path)) as s:

        async def run(i):
            results[i] = await s.call_tool(
                "bash", {"command": blocked_command(tmp_path, f"s{i}"), "timeout_ms": 60000}
            )

        async with anyio.create_task_group() as tg:
            for i in range(16):
                tg.start_soon(run, i)
            await wait_for_files([tmp_path / f"s{i}" for i in range(16)])
            # Sixteen commands wait in the foreground: the seventeenth is refused.
            seventeenth = await s.call_tool("bash", {"command": "echo never"})
            # Background jobs have a limit of their own.
            job = await s.call_tool("bash", {"command": "echo bg", "run_in_background": True})
            (tmp_path / "go").touch()
        assert [ok(results[i])["output"] for i in range(16)] == [f"s{i} done\n" for i in range(16)]
        # Every place is free again.
        assert ok(await s.call_tool("bash", {"command": "echo again"}))["output"] == "again\n"
    assert err(seventeenth) == {
        "code": "JOB_LIMIT",
        "message": "16 of your bash/subagent calls are already running in the foreground, "
        "the limit is 16: wait for one to return, or start this one with "
        "run_in_background (a job you read with job_output), then retry",
        "retryable": True,
    }
    assert ok(job)["job_id"].startswith("bash-")


async def test_subagent_calls_share_the_foreground_limit(isolated_env, tmp_path):
    config = write_config(
        tmp_path,
        "[limits]\nmax_foreground_commands = 2\n"
        '[subagent]\ncommand = ["bash", "-c", "{prompt}"]\n',
    )
    async with connect(isolated_env, "--config", config, cwd=str(tmp_path)) as s:
        async with anyio.create_task_group() as tg:
            tg.start_soon(s.call_tool, "bash", {"command": blocked_command(tmp_path, "a")})
            tg.start_soon(s.call_tool, "subagent", {"prompt": blocked_command(tmp_path, "b")})
            await wait_for_files([tmp_path / "a", tmp_path / "b"])
            refused = err(await s.call_tool("bash", {"command": "echo never"}))
            assert refused["code"] == "JOB_LIMIT"
            assert refused["message"].startswith("2 of your bash/subagent calls are already running")
            refused = err(await s.call_tool("subagent", {"prompt": "echo never"}))
            assert refused["code"] == "JOB_LIMIT"
            (tmp_path / "go").touch()
        assert ok(await s.call_tool("subagent", {"prompt": "echo fine"}))["output"] == "fine\n"
        # A prompt bigger than one argument of the agent's argv is refused up front.
        big = err(await s.call_tool("subagent", {"prompt": "x" * 200_000}))
        assert big["code"] == "INVALID_ARGUMENT"
        assert big["message"].startswith("prompt: is 200000 bytes, more than the 131071")


async def test_terminal_size_is_capped(isolated_env, tmp_path):
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        for args, field in [
            ({"rows": 1000, "cols": 1000}, "rows"),
            ({"rows": 501}, "rows"),
            ({"cols": 501}, "cols"),
            ({"rows": 400, "cols": 400}, "rows"),
        ]:
            e = err(await s.call_tool("terminal_open", args))
            assert e["code"] == "INVALID_ARGUMENT", args
            assert e["message"].startswith(f"invalid `{field}`: "), e
        assert ok(await s.call_tool("terminal_list", {}))["terminals"] == []


async def test_until_patterns_are_capped(isolated_env, tmp_path):
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        t = ok(await s.call_tool("terminal_open", {}))
        e = err(
            await s.call_tool(
                "terminal_send",
                {"id": t["id"], "text": f"touch {tmp_path}/typed", "until": "x" * 5000},
            )
        )
        assert e["code"] == "INVALID_ARGUMENT"
        assert e["message"].startswith(
            "invalid `until`: the pattern is 5000 bytes, more than the 4096 allowed"
        )
        # Nothing was typed: the terminal is free and the command never ran.
        sent = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "echo free"}))
        assert (sent["reason"], sent["output"]) == ("prompt", "free\n")
        assert not (tmp_path / "typed").exists()
        ok(await s.call_tool("terminal_close", {"id": t["id"]}))


SCREENFUL = (
    "import sys; sys.stdout.write('x' * 500 * 200); sys.stdout.flush(); input()"
)


async def test_screen_and_stream_reads_obey_the_result_limit(isolated_env, tmp_path):
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        t = ok(
            await s.call_tool(
                "terminal_open",
                {"command": ["python3", "-c", SCREENFUL], "rows": 200, "cols": 500},
            )
        )
        assert t["reason"] == "input_wait"
        # A full 200 x 500 screen is 100,000 characters (wrapped rows are
        # joined without a line break).
        r = await s.call_tool("terminal_read", {"id": t["id"], "mode": "screen"})
        view = ok(r)
        assert (view["rows"], view["cols"]) == (200, 500)
        assert view["truncated"] is True
        total = view["total_bytes"]
        assert 100_000 <= total <= 100_199, total
        assert len(view["screen"]) <= LIMIT + 64
        assert "[… " in view["screen"] and " bytes omitted …]" in view["screen"]
        assert f"of {total} bytes shown" in text_of(r)

        # A stream read may not ask for more than the result limit.
        r = await s.call_tool(
            "terminal_read", {"id": t["id"], "since": 0, "max_bytes": 4_000_000}
        )
        chunk = ok(r)
        # All of the limit, but for bytes that may begin a secret, held
        # back for the next read.
        assert len(chunk["output"]) + chunk.get("held", 0) == LIMIT
        assert chunk["truncated"] is True
        assert chunk["clamped"] == {"field": "max_bytes", "from": 4_000_000, "to": LIMIT}
        assert "[max_bytes clamped from 4000000 to 32768]" in text_of(r)
        ok(await s.call_tool("terminal_close", {"id": t["id"]}))


async def test_background_send_output_without_newlines_is_not_held_back(isolated_env, tmp_path):
    # Echo off, then 200,000 bytes without a newline, then a long sleep:
    # the echo filter must pass the output on while the send still runs.
    program = "stty -echo; read x; head -c 200000 /dev/zero | tr '\\0' x; sleep 600"
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        t = ok(await s.call_tool("terminal_open", {"command": ["bash", "-c", program]}))
        assert t["reason"] == "input_wait"
        job = ok(
            await s.call_tool(
                "terminal_send", {"id": t["id"], "text": "go", "run_in_background": True}
            )
        )["job_id"]
        read = ok(
            await s.call_tool("job_output", {"job_id": job, "wait_ms": 20000})
        )
        assert read["status"] == "running"
        assert read["output"] and set(read["output"]) == {"x"}, read["output"][:80]
        killed = ok(await s.call_tool("job_kill", {"job_id": job}))
        assert killed["outcome"] == "killed"
        ok(await s.call_tool("terminal_close", {"id": t["id"]}))


async def test_bash_command_and_cwd_sizes_are_capped(isolated_env, tmp_path):
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        e = err(await s.call_tool("bash", {"command": "echo " + "y" * 200_000}))
        assert e["code"] == "INVALID_ARGUMENT"
        assert e["message"].startswith(
            "command: is 200005 bytes, more than the 131071 one command line may have"
        )
        for tool, args in [
            ("bash", {"command": "pwd"}),
            ("terminal_open", {}),
        ]:
            e = err(await s.call_tool(tool, {**args, "cwd": "d" * 5000}))
            assert e == {
                "code": "INVALID_ARGUMENT",
                "message": "cwd: is 5000 bytes, longer than any path (4096 bytes at most)",
                "retryable": False,
            }, tool


async def test_error_messages_quoting_huge_arguments_are_bounded(isolated_env, tmp_path):
    async with connect(isolated_env, cwd=str(tmp_path)) as s:
        huge = "z" * 1_000_000
        for tool, args, code in [
            ("terminal_read", {"id": huge}, "INVALID_ARGUMENT"),
            ("job_output", {"job_id": huge}, "NO_JOB"),
            ("bash", {"command": "true", "timeout_ms": huge}, "INVALID_ARGUMENT"),
        ]:
            r = await s.call_tool(tool, args)
            e = err(r)
            assert e["code"] == code, (tool, e["message"][:100])
            assert len(e["message"]) <= 2100, (tool, len(e["message"]))
            assert " bytes omitted …] " in e["message"], tool
        # The server is fine.
        assert ok(await s.call_tool("bash", {"command": "echo alive"}))["output"] == "alive\n"
