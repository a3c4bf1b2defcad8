"""Benchmark: what watching costs an agent. One real daemon, one agent (the
Python MCP client) whose bash terminal prints a flood (numbered 100-byte
lines, so every screen differs); rounds alternate between no viewer and
20 viewers of that terminal on the `dsh ui` page (5 of them never read,
like a browser tab that stopped), side by side in one run.

Prints the agent's settle latency (median, p90, max, ratio), the daemon's
peak resident memory in each state, and what each viewer received.

`--quick`: a 20 MB flood, 2 rounds each; else 100 MB, 5 rounds each
(BENCH_UI_FLOOD and BENCH_UI_ROUNDS override)."""

import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from common import pct  # noqa: E402
from ui_load import (  # noqa: E402
    RssPeak,
    cpu_s,
    fd_count,
    open_viewers,
    own_cpu_s,
    page_of,
    timed_flood,
)

QUICK = "--quick" in sys.argv[1:]
FLOOD = int(os.environ.get("BENCH_UI_FLOOD", str(20_000_000 if QUICK else 100_000_000)))
ROUNDS = int(os.environ.get("BENCH_UI_ROUNDS", "2" if QUICK else "5"))
VIEWERS = 20
STALLED = 5
DSH = os.environ.get("DSH_BIN", str(ROOT / "target" / "release" / "dsh"))


def daemon_pid(env):
    out = subprocess.run([DSH, "daemon", "status", "--json"], env=env,
                         capture_output=True, text=True, check=True)
    import json

    return json.loads(out.stdout)["pid"]


async def main():
    tmp = tempfile.mkdtemp(prefix="dsh-bench-ui-")
    run = tempfile.mkdtemp(prefix="dsh-run-")
    env = dict(os.environ, DSH_LOG="warn", XDG_CONFIG_HOME=f"{tmp}/config",
               XDG_DATA_HOME=f"{tmp}/data", DSH_RUNTIME_DIR=run)
    env.pop("XDG_RUNTIME_DIR", None)
    params = StdioServerParameters(command=DSH, args=["mcp"], env=env, cwd=tmp)
    try:
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as agent:
                await agent.initialize()
                r = await agent.call_tool("terminal_open", {})
                assert not r.isError, r.content[0].text
                url = subprocess.run([DSH, "ui"], env=env, capture_output=True,
                                     text=True, check=True).stdout.strip()
                port, token = page_of(url)
                pid = daemon_pid(env)
                await timed_flood(agent, "pty-1", FLOOD // 4)  # warm-up
                fds = fd_count(pid)
                alone, watched, frames, got = [], [], [], []
                # CPU seconds per flood: the daemon's, and this process's
                # (the agent's client, plus the viewers while they watch)
                cpu = {"alone": ([], []), "watched": ([], [])}

                async def flood(state):
                    daemon0, own0 = cpu_s(pid), own_cpu_s()
                    took = await timed_flood(agent, "pty-1", FLOOD)
                    cpu[state][0].append(cpu_s(pid) - daemon0)
                    cpu[state][1].append(own_cpu_s() - own0)
                    return took

                alone_peak = watched_peak = 0
                for _ in range(ROUNDS):
                    with RssPeak(pid) as mem:
                        alone.append(await flood("alone"))
                    alone_peak = max(alone_peak, mem.peak)
                    viewers = await open_viewers(port, token, "pty-1", VIEWERS, STALLED)
                    try:
                        with RssPeak(pid) as mem:
                            watched.append(await flood("watched"))
                        watched_peak = max(watched_peak, mem.peak)
                        await anyio.sleep(0.2)
                        frames += [v.frames for v in viewers if v.reads]
                        got += [v.received for v in viewers if v.reads]
                    finally:
                        for v in viewers:
                            await v.close()
                await anyio.sleep(0.5)
                fds_after = fd_count(pid)
    finally:
        subprocess.run([DSH, "daemon", "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(run, ignore_errors=True)

    base = statistics.median(alone)
    print(f"\n`dsh ui`: the agent's settle latency for a {FLOOD / 1e6:.0f} MB flood in its "
          f"terminal, {ROUNDS} rounds each, alternated\n")
    print(f"| {'viewers of the terminal':<40} | {'median s':>9} | {'p90 s':>8} | {'max s':>8} | {'ratio':>6} | {'daemon peak RSS':>15} |")
    print(f"|{'-' * 42}|{'-' * 11}|{'-' * 10}|{'-' * 10}|{'-' * 8}|{'-' * 17}|")
    for name, samples, peak in [
        ("none", alone, alone_peak),
        (f"{VIEWERS} ({STALLED} never read)", watched, watched_peak),
    ]:
        med = statistics.median(samples)
        print(f"| {name:<40} | {med:9.3f} | {pct(samples, 0.9):8.3f} | {max(samples):8.3f} | "
              f"{med / base:5.2f}x | {peak / 1024:11.0f} MiB |")
    print(f"\neach reading viewer: {statistics.median(frames):.0f} screens (median; "
          f"{min(frames)}..{max(frames)}), {statistics.median(got) / 1e6:.2f} MB received "
          f"(at most {max(got) / 1e6:.2f} MB) of a {FLOOD / 1e6:.0f} MB flood")
    print("CPU seconds per flood (median): "
          + "; ".join(f"{state}: daemon {statistics.median(d):.2f}, agent client"
                      f"{' + viewers' if state == 'watched' else ''} {statistics.median(o):.2f}"
                      for state, (d, o) in cpu.items()))
    print(f"daemon descriptors: {fds} before the viewers, {fds_after} after they left")


if __name__ == "__main__":
    anyio.run(main)
