"""Benchmark: one `bash {command: "true"}` call through `dsh mcp` (the
official MCP Python client over stdio) next to spawning `bash -c true`
directly from the same Python process. Prints medians, p99 and ratios.

Run with `cargo xtask bench mcp [--quick]` (`--quick`: 20 calls each, a
smoke run whose figures are not to be quoted; BENCH_N sets the count)."""

import os
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

QUICK = "--quick" in sys.argv[1:]
N = int(os.environ.get("BENCH_N", "20" if QUICK else "300"))
WARM_UP = 5 if QUICK else 20
DSH = os.environ.get("DSH_BIN", "target/release/dsh")


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def row(name, samples, floor):
    med = statistics.median(samples)
    return f"| {name:<44} | {med:9.3f} | {pct(samples, 0.99):9.3f} | {med / floor:6.2f}x |"


async def mcp_samples():
    env = dict(os.environ, DSH_LOG="warn")
    out = {"bash true": [], "ping (protocol floor)": []}
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as errlog:
        env["XDG_CONFIG_HOME"] = env["XDG_DATA_HOME"] = tmp
        params = StdioServerParameters(command=DSH, args=["mcp", "--standalone"], env=env)
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                for _ in range(WARM_UP):
                    await s.call_tool("bash", {"command": "true"})
                for _ in range(N):
                    t = time.perf_counter()
                    res = await s.call_tool("bash", {"command": "true"})
                    out["bash true"].append((time.perf_counter() - t) * 1000)
                    assert not res.isError
                    t = time.perf_counter()
                    await s.send_ping()
                    out["ping (protocol floor)"].append((time.perf_counter() - t) * 1000)
    return out


def spawn_samples():
    for _ in range(WARM_UP):
        subprocess.run(["bash", "-c", "true"], check=True)
    out = []
    for _ in range(N):
        t = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True)
        out.append((time.perf_counter() - t) * 1000)
    return out


def main():
    spawn = spawn_samples()
    mcp = anyio.run(mcp_samples)
    floor = statistics.median(spawn)
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    print(f"\nbash {{command: \"true\"}}: {N} calls each, milliseconds{note}\n")
    print("| what                                         |    median |       p99 |  ratio |")
    print("|----------------------------------------------|-----------|-----------|--------|")
    print(row("spawn `bash -c true` from Python (floor)", spawn, floor))
    print(row("dsh mcp: tools/call bash (Python MCP client)", mcp["bash true"], floor))
    print(row("dsh mcp: ping (client + transport only)", mcp["ping (protocol floor)"], floor))
    overhead = statistics.median(mcp["bash true"]) - floor
    print(f"\nadded by MCP + dsh over a bare spawn: {overhead:.3f} ms median "
          f"({overhead / floor * 100:.0f}% of one spawn)")


if __name__ == "__main__":
    sys.exit(main())
