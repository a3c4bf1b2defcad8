"""Benchmark: one `bash {command: "true"}` call through `dsh mcp` (the
official MCP Python client over stdio) next to spawning `bash -c true`
directly from the same Python process, and what the call is made of.
Prints medians, p99 and ratios.

Everything is measured in one run:

* the spawn floor: `bash -c true` spawned from Python and waited for;
* the protocol floor: an MCP `ping` (client, stdio transport, server loop);
* the tool-call floor: `job_list`, a tool call that starts no process
  (arguments, tool layer, session log, reply);
* `bash` in the default sandbox (an empty XDG_CONFIG_HOME), and `bash`
  in a second server whose `[sandbox] mode = "off"`.

The breakdown under the table subtracts these medians from each other;
each line says which two it subtracts (differences of medians are not
separate measurements).

Each server runs in a fresh directory that holds an empty `.git`, so the
default sandbox's read-only `.git` (its namespaces) is part of every
sandboxed call, and no language server starts for the directory (from
the repository, `[lsp] eager` would index the workspace during the run).

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
DSH = os.path.abspath(os.environ.get("DSH_BIN", "target/release/dsh"))


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def row(name, samples, floor):
    med = statistics.median(samples)
    return f"| {name:<46} | {med:9.3f} | {pct(samples, 0.99):9.3f} | {med / floor:6.2f}x |"


async def timed(out, key, call):
    t = time.perf_counter()
    res = await call()
    out[key].append((time.perf_counter() - t) * 1000)
    return res


async def mcp_samples(config=None, floors=True):
    """Samples of one server: `bash true`, and with `floors` a ping and a
    `job_list` after each call. `config`: the text of its config file."""
    env = dict(os.environ, DSH_LOG="warn")
    out = {"bash": [], "ping": [], "job_list": []}
    with tempfile.TemporaryDirectory() as tmp, open(os.devnull, "w") as errlog:
        env["XDG_CONFIG_HOME"] = env["XDG_DATA_HOME"] = os.path.join(tmp, "xdg")
        os.makedirs(os.path.join(tmp, "xdg", "dsh"))
        if config is not None:
            with open(os.path.join(tmp, "xdg", "dsh", "config.toml"), "w") as f:
                f.write(config)
        ws = os.path.join(tmp, "ws")
        os.makedirs(os.path.join(ws, ".git"))
        params = StdioServerParameters(
            command=DSH, args=["mcp", "--standalone"], env=env, cwd=ws
        )
        bash = {"command": "true"}
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                for _ in range(WARM_UP):
                    await s.call_tool("bash", bash)
                    if floors:
                        await s.call_tool("job_list", {})
                for _ in range(N):
                    res = await timed(out, "bash", lambda: s.call_tool("bash", bash))
                    assert not res.isError, res
                    if floors:
                        await timed(out, "ping", s.send_ping)
                        res = await timed(out, "job_list", lambda: s.call_tool("job_list", {}))
                        assert not res.isError, res
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
    off = anyio.run(lambda: mcp_samples('[sandbox]\nmode = "off"\n', floors=False))
    floor = statistics.median(spawn)
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    print(f"\nbash {{command: \"true\"}}: {N} calls each, milliseconds{note}\n")
    print("| what                                           |    median |       p99 |  ratio |")
    print("|------------------------------------------------|-----------|-----------|--------|")
    print(row("spawn `bash -c true` from Python (floor)", spawn, floor))
    print(row("dsh mcp: tools/call bash (Python MCP client)", mcp["bash"], floor))
    print(row("dsh mcp: ping (client + transport only)", mcp["ping"], floor))
    print(row("dsh mcp: tools/call job_list (no process)", mcp["job_list"], floor))
    print(row("dsh mcp, sandbox off: tools/call bash", off["bash"], floor))
    m = {k: statistics.median(v) for k, v in mcp.items()}
    m["off"] = statistics.median(off["bash"])
    overhead = m["bash"] - floor
    print(f"\nadded by MCP + dsh over a bare spawn: {overhead:.3f} ms median "
          f"({overhead / floor * 100:.0f}% of one spawn)")
    print("\nwhat the bash call is made of (differences of the medians above):")
    parts = [
        ("protocol: client, stdio, server loop", m["ping"], "ping"),
        ("tool call beyond a ping (no process)", m["job_list"] - m["ping"], "job_list - ping"),
        ("the command itself, spawned bare", floor, "spawn floor"),
        ("dsh's spawn, wait and empty-session proof beyond a bare spawn",
         m["off"] - m["job_list"] - floor, "bash, sandbox off - job_list - spawn floor"),
        ("the sandbox (prepare, enter)", m["bash"] - m["off"], "bash - bash, sandbox off"),
    ]
    for name, value, how in parts:
        print(f"  {value:7.3f} ms  {name:<62} [{how}]")


if __name__ == "__main__":
    sys.exit(main())
