"""`dsh demo`: the seed's scenarios run live — scenario A (one-shot bash vs
a terminal, with counts) and scenario B (three kinds of background work in
one job list) — and nothing left behind."""

import json
import os
import re
import subprocess
import uuid

from conftest import dsh_bin, processes


def demo_env(isolated_env, tmp_path):
    """The isolated environment plus a unique marker every process the demo
    starts inherits, and a private TMPDIR for its scratch directory."""
    env = dict(isolated_env)
    env["DSH_DEMO_TEST_MARK"] = uuid.uuid4().hex
    env["TMPDIR"] = str(tmp_path / "tmp")
    os.makedirs(env["TMPDIR"])
    return env


def marked_live_processes(env):
    """Live processes (not zombies) whose environment carries the marker."""
    needle = f"DSH_DEMO_TEST_MARK={env['DSH_DEMO_TEST_MARK']}".encode()
    found = []
    for pid, _ppid, _sid, state in processes():
        if state in ("Z", "X") or pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(pid)
        except OSError:
            pass
    return found


def run_demo(env, scenario):
    return subprocess.run(
        [dsh_bin(), "demo", scenario],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def sections(stdout):
    """The `→ tool {json}` calls of each `══ … ══` section, in order."""
    out = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("══"):
            current = line
            out[current] = []
        elif line.startswith("→ ") and current is not None:
            tool, args = line[2:].split(" ", 1)
            out[current].append((tool, args))
    return out


def sandbox_lines(stdout):
    """The `[sandbox: …]` line of every result, in order."""
    return [l.strip() for l in stdout.splitlines() if l.startswith("  [sandbox: ")]


def counts_table(stdout):
    rows = {}
    for line in stdout.splitlines():
        m = re.fullmatch(r"\| (.+?) +\| +(.+?) \| +(.+?) \| +(.+?) \|", line)
        if m and not m.group(1).startswith("what"):
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
    return rows


def test_terminal_demo_shows_both_transcripts_and_counts(isolated_env, tmp_path):
    env = demo_env(isolated_env, tmp_path)
    out = run_demo(env, "terminal")
    assert out.returncode == 0, out.stderr + out.stdout

    calls = sections(out.stdout)
    bash_calls, term_calls = list(calls.values())
    assert [t for t, _ in bash_calls] == ["bash", "bash", "bash"]
    assert [t for t, _ in term_calls] == [
        "terminal_open", "terminal_send", "terminal_send", "terminal_send", "terminal_close",
    ]
    bash_args = [json.loads(a) for _, a in bash_calls]
    term_args = [json.loads(a) for _, a in term_calls]
    # one-shot bash resends the data and the parser every time; the
    # terminal sends them once
    assert all("def parse(text):" in a["command"] for a in bash_args)
    assert ["def parse(text):" in a.get("text", "") for a in term_args] == [False, True, False, False, False]
    assert term_args[0] == {"command": ["python3", "-q"], "name": "repl"}
    assert term_args[-1] == {"id": "pty-1"}

    # the program's answers, in order: buggy, inspected, fixed (each twice)
    answers = [l.strip() for l in out.stdout.splitlines() if re.match(r"  (mean /api|n 3 )", l)]
    assert answers == [
        "mean /api/users latency: 11.25",
        "n 3 sum 45 min 12 max 18",
        "mean /api/users latency: 15.0",
    ] * 2

    table = counts_table(out.stdout)
    assert table["tool calls"] == ("3", "5", "1.67")
    sent_bash, sent_term, _ = table["bytes sent (arguments JSON)"]
    # the table counts exactly the arguments printed in the transcripts
    assert int(sent_bash) == sum(len(a.encode()) for _, a in bash_calls)
    assert int(sent_term) == sum(len(a.encode()) for _, a in term_calls)
    assert int(sent_term) < int(sent_bash)
    assert set(table) == {
        "tool calls", "bytes sent (arguments JSON)", "bytes received (result text)", "wall time of the calls",
    }

    # the demo runs through the host `dsh mcp` serves from, in its default
    # sandbox: three bash calls and the terminal say so
    assert sandbox_lines(out.stdout) == ["[sandbox: workspace-write · network on]"] * 4

    assert "processes left behind: 0" in out.stdout
    assert marked_live_processes(env) == []
    assert os.listdir(env["TMPDIR"]) == []


def test_jobs_demo_lists_three_kinds_and_exact_statuses(isolated_env, tmp_path):
    env = demo_env(isolated_env, tmp_path)
    out = run_demo(env, "jobs")
    assert out.returncode == 0, out.stderr + out.stdout
    text = out.stdout

    assert "No coding agent is installed here" in text
    tools = [l[2:].split(" ", 1)[0] for l in text.splitlines() if l.startswith("→ ")]
    assert tools[:6] == ["bash", "terminal_open", "terminal_send", "subagent", "job_list", "job_output"]
    assert tools[-6:] == ["job_kill", "terminal_send", "job_output", "job_output", "job_list", "terminal_close"]
    # between the list and the kill: reads of the watch loop only
    assert set(tools[5:-6]) == {"job_output"}

    # the first list: three kinds in one list
    first_list = text.split("→ job_list {}", 1)[1].split("\n\n", 1)[0]
    ids = [l.split()[0] for l in first_list.splitlines()[2:]]
    assert ids == ["bash-1", "pty-send-1", "subagent-1"]

    assert "⇐ notification: job bash-1 (bash) completed with exit code 0" in text
    assert "⇐ notification: job subagent-1 (subagent) completed with exit code 0" in text
    assert "⇐ notification: job pty-send-1 (pty-send) killed" in text
    assert "  watch: rebuild 1 ok\n" in text
    assert "  test_parse ... ok\n  test_mean ... ok\n  test_report ... ok\n  3 passed\n  [bash-1 completed, exit 0" in text
    assert "  agent: done, 1 finding\n  [subagent-1 completed, exit 0" in text

    # the final list: exact statuses
    final_list = text.rsplit("→ job_list {}", 1)[1].split("\n\n", 1)[0]
    statuses = [re.split(r"  +", l.strip())[:2] for l in final_list.splitlines()[2:]]
    assert statuses == [
        ["bash-1", "completed, exit 0"],
        [
            "pty-send-1",
            "killed: killed by job_kill; the send was interrupted with SIGINT and settled (prompt); "
            "pty-1 stays open and what runs in its background was not touched (terminal_close ends everything in it)",
        ],
        ["subagent-1", "completed, exit 0"],
    ]

    # bash, the terminal and the subagent ran in the default sandbox
    assert sandbox_lines(text) == ["[sandbox: workspace-write · network on]"] * 3

    assert "processes left behind: 0" in text
    assert marked_live_processes(env) == []
    assert os.listdir(env["TMPDIR"]) == []


def test_a_step_that_answers_wrong_fails_the_demo(isolated_env, tmp_path):
    """A `python3` that prints the wrong answer must stop the demo with
    exit 1 and say which step and what was expected."""
    env = demo_env(isolated_env, tmp_path)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\ncat >/dev/null\necho 'mean /api/users latency: 42'\n")
    (fake / "python3").chmod(0o755)
    env["PATH"] = f"{fake}:{env['PATH']}"
    out = run_demo(env, "terminal")
    assert out.returncode == 1, out.stdout
    assert out.stderr.startswith(
        "dsh: step 1: define the data and the function, call it (bash): the program printed "
        "\"mean /api/users latency: 42\\n\", but the scripted scenario expects "
        "\"mean /api/users latency: 11.25\""
    ), out.stderr
    assert marked_live_processes(env) == []
    assert os.listdir(env["TMPDIR"]) == []
