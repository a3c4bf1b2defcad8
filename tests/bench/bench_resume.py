"""Benchmark: agents outlive their client, and nothing outlives dsh.

Part 1, ROUNDS times: an agent (a real `dsh mcp` bridge driven with raw
JSON-RPC) has a Python REPL holding `x = 42`, a background job printing a
numbered line a second and a dev server in a terminal; its bridge is
SIGKILLed in the middle of a send; after WAIT_S seconds a new client (the
official Python MCP SDK) first tries the ids without the key (another
agent: each must be refused), then resumes with the key. Counted: lines
of the job lost, whether the REPL kept `x`, whether the killed send's
output is there to read, how long the resume call took; then the client
closes, the grace period (GRACE_S) passes, and the processes left of the
work are counted.

Part 2, KILLS times: the daemon and its guardian are SIGKILLed together
(one right after the other) while a terminal runs a dev server in the
foreground and `sleep` in the background, and a job runs a loop; counted:
the processes of that work still running SETTLE_S seconds later (each is
then killed, so rounds do not add up).

Run with `cargo xtask bench resume [--quick]`."""

import json
import os
import pathlib
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))
from conftest import connect, make_env, stop_daemons  # noqa: E402
from test_daemon import RawBridge  # noqa: E402
from test_teardown import kill_left, started_by  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
ROUNDS = 1 if QUICK else 5
KILLS = 3 if QUICK else 20
WAIT_S = 5
GRACE_S = 8
SETTLE_S = 3.0


def wait_until(condition, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)  # sleep-ok: a benchmark's poll of /proc and `dsh ps`
    raise AssertionError("timed out")


def ps(env):
    out = subprocess.run([os.environ["DSH_BIN"], "ps", "--json"], env=env,
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def environment(tmp, grace):
    tmp.mkdir(parents=True)
    env = make_env(tmp)
    env["DSH_TEST_MARK"] = str(tmp)
    config = pathlib.Path(env["XDG_CONFIG_HOME"]) / "dsh" / "config.toml"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(f'[daemon]\ndetach_grace = "{grace}s"\n')
    return env


def work_processes(marker):
    """The processes of the agent's work: started with the marker in their
    environment, other than dsh itself."""
    dsh = os.path.realpath(os.environ["DSH_BIN"])
    out = []
    for pid, cmd in started_by(marker):
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == dsh:
                continue
        except OSError:
            continue
        out.append((pid, cmd))
    return out


def session_of(pid):
    """The session id of `pid` (None once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    return int(stat[stat.rfind(")") + 2 :].split()[3])


def in_sessions(sessions):
    """Live (not zombie) processes of `sessions`, as (pid, command line)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        if int(fields[3]) in sessions and fields[0] not in ("Z", "X"):
            out.append((int(entry), cmd))
    return out


def tool(bridge, name, arguments):
    result = bridge.call("tools/call", {"name": name, "arguments": arguments})["result"]
    assert not result.get("isError"), result
    return result["structuredContent"]


async def resume_round(tmp):
    env = environment(tmp, GRACE_S)
    ws = tmp / "ws"
    ws.mkdir()
    bridge = RawBridge(env, cwd=str(ws))
    repl = tool(bridge, "terminal_open", {"command": ["python3", "-q"]})
    key = repl["resume_key"]
    tool(bridge, "terminal_send", {"id": repl["id"], "text": "x = 41 + 1"})
    job = tool(bridge, "bash", {"command": "for i in $(seq 1 100000); do echo tick $i; sleep 1; done",  # sleep-ok: the job prints a line a second
                                "run_in_background": True})
    server = tool(bridge, "terminal_open", {})
    tool(bridge, "terminal_send", {"id": server["id"], "text": "python3 -m http.server 0 --bind 127.0.0.1",
                                   "until": "Serving HTTP", "timeout_ms": 30000})
    bridge.send({"jsonrpc": "2.0", "id": 999, "method": "tools/call", "params": {
        "name": "terminal_send", "arguments": {
            "id": repl["id"], "text": "import time; time.sleep(2); print('slept', x)"}}})  # sleep-ok: busy when the client dies
    wait_until(lambda: any(t["active_send"] for c in ps(env)["connections"]
                           for t in c["terminals"] if t["id"] == repl["id"]))
    bridge.proc.send_signal(signal.SIGKILL)
    bridge.proc.wait()
    wait_until(lambda: [c for c in ps(env)["connections"] if c.get("detached")])
    time.sleep(WAIT_S)  # sleep-ok: the client stays away for WAIT_S, as the scenario says
    row = {}
    async with connect(env, cwd=str(ws)) as other:
        refused = 0
        for call, args in (("terminal_read", {"id": repl["id"]}), ("terminal_read", {"id": server["id"]}),
                           ("job_output", {"job_id": job["job_id"]}), ("terminal_close", {"id": repl["id"]}),
                           ("job_kill", {"job_id": job["job_id"]})):
            r = await other.call_tool(call, args)
            refused += bool(r.isError)
        row["refused"] = f"{refused}/5"
        async with connect(env, cwd=str(ws)) as s:
            t = time.perf_counter()
            back = await s.call_tool("terminal_list", {"resume": key})
            row["resume_ms"] = (time.perf_counter() - t) * 1000
            assert not back.isError, back.content[0].text
            read = (await s.call_tool("terminal_read", {"id": repl["id"], "since": 0})).structuredContent
            row["send_result"] = "slept 42" in read["output"]
            again = (await s.call_tool("terminal_send", {"id": repl["id"], "text": "print(x * 2)"})).structuredContent
            row["repl_intact"] = "84" in again["output"]
            out = (await s.call_tool("job_output", {"job_id": job["job_id"], "since": 0,
                                                    "max_bytes": 1_000_000})).structuredContent
            ticks = [int(n) for n in re.findall(r"^tick (\d+)$", out["output"], re.M)]
            row["lines"] = len(ticks)
            row["lost"] = (ticks[-1] - len(ticks)) if ticks else -1
            listed = {x["id"]: x for x in back.structuredContent["terminals"]}
            row["server_kept"] = listed[server["id"]]["pid"] == server["pid"]
    # Both clients closed: the work is detached again, then the grace period ends it.
    wait_until(lambda: not ps(env)["connections"], GRACE_S + 60)
    # Counted, not asserted: the ending is verified, so a few seconds suffice.
    try:
        wait_until(lambda: not work_processes(str(tmp)), 10)
    except AssertionError:
        pass
    row["left"] = len(work_processes(str(tmp)))
    stop_daemons(env)
    shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
    return row


def kill_round(tmp):
    env = environment(tmp, 600)
    ws = tmp / "ws"
    ws.mkdir()
    bridge = RawBridge(env, cwd=str(ws))
    term = tool(bridge, "terminal_open", {})
    tool(bridge, "terminal_send", {"id": term["id"], "text": "sleep 4711 &"})
    tool(bridge, "terminal_send", {"id": term["id"], "text": "python3 -m http.server 0 --bind 127.0.0.1",
                                   "until": "Serving HTTP", "timeout_ms": 30000})
    tool(bridge, "bash", {"command": "sleep 4712 & while true; do sleep 1; done",  # sleep-ok: a job that runs on
                          "run_in_background": True})
    marker = str(tmp)
    wait_until(lambda: {"sleep 4711", "sleep 4712"} <= {c for _, c in work_processes(marker)})
    # The sessions of the work: their members without the marker (a PID
    # namespace's init and its leader's waiter start with an empty
    # environment) are counted too.
    sessions = {session_of(p) for p, _ in work_processes(marker)} - {None}
    daemon = [p for p, c in started_by(marker) if c.endswith("daemon --spawned") or " daemon" in c]
    guardian = [p for p, c in started_by(marker) if "__guardian" in c]
    for pid in guardian + daemon:
        os.kill(pid, signal.SIGKILL)
    bridge.proc.wait()
    deadline = time.monotonic() + SETTLE_S
    left = lambda: sorted(set(work_processes(marker)) | set(in_sessions(sessions)))
    while time.monotonic() < deadline and left():
        time.sleep(0.05)  # sleep-ok: the kernel's and the survivors' time to end, bounded
    shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
    return kill_left(left())


def main():
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for n in range(ROUNDS):
            rows.append(anyio.run(resume_round, pathlib.Path(tmp) / f"resume-{n}"))
        print(f"\nresume after a SIGKILLed client: {ROUNDS} rounds, client away {WAIT_S} s, "
              f"grace {GRACE_S} s{note}\n")
        print("| round | resume ms | job lines | lost | REPL kept x | killed send's output | server same pid | "
              "refused w/o key | left after grace |")
        print("|-------|-----------|-----------|------|-------------|----------------------|-----------------|"
              "-----------------|------------------|")
        for i, r in enumerate(rows):
            print(f"| {i + 1:5} | {r['resume_ms']:9.1f} | {r['lines']:9} | {r['lost']:4} | {str(r['repl_intact']):11} | "
                  f"{str(r['send_result']):20} | {str(r['server_kept']):15} | {r['refused']:>15} | {r['left']:16} |")
        print(f"\nresume call: median {statistics.median(r['resume_ms'] for r in rows):.1f} ms; "
              f"lines lost in all: {sum(max(r['lost'], 0) for r in rows)}; left after grace in all: "
              f"{sum(r['left'] for r in rows)}")
        survivors = []
        for n in range(KILLS):
            survivors.append(kill_round(pathlib.Path(tmp) / f"kill-{n}"))
        total = sum(len(s) for s in survivors)
        print(f"\nSIGKILL of the daemon and its guardian together, {KILLS} times: processes of the work "
              f"still running {SETTLE_S:.0f} s later: {total} in all")
        names = sorted({c for s in survivors for _, c in s})
        if names:
            print("  which: " + "; ".join(names))


if __name__ == "__main__":
    sys.exit(main())
