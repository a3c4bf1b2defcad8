"""Benchmark: one `bash {command: "true"}` call through `dsh mcp` (the
official MCP Python client over stdio) next to spawning `bash -c true`
directly from the same Python process, and what the call is made of.
Prints medians, p99 and ratios.

Everything is measured in one run, in two rounds of these series:

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

import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from common import row, timed

QUICK = "--quick" in sys.argv[1:]
N = int(os.environ.get("BENCH_N", "20" if QUICK else "300"))
WARM_UP = 5 if QUICK else 20
# How many times the series take turns.
ROUNDS = 2
DSH = os.path.abspath(os.environ.get("DSH_BIN", "target/release/dsh"))


@contextlib.asynccontextmanager
async def server(tmp, name, config=None):
    """A `dsh mcp --standalone` session in its own directory under `tmp`;
    `config`: the text of its config file."""
    env = dict(os.environ, DSH_LOG="warn")
    env["XDG_CONFIG_HOME"] = env["XDG_DATA_HOME"] = os.path.join(tmp, name, "xdg")
    os.makedirs(os.path.join(tmp, name, "xdg", "dsh"))
    if config is not None:
        with open(os.path.join(tmp, name, "xdg", "dsh", "config.toml"), "w") as f:
            f.write(config)
    ws = os.path.join(tmp, name, "ws")
    os.makedirs(os.path.join(ws, ".git"))
    params = StdioServerParameters(command=DSH, args=["mcp", "--standalone"], env=env, cwd=ws)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                yield s


def spawn():
    subprocess.run(["bash", "-c", "true"], check=True)


async def server_samples(out, name, config=None):
    """One server's series: `bash true` back to back with a ping after
    each, then `job_list` back to back, when `name` is "default"; a series
    of `bash true` into `out["off"]` otherwise."""
    bash = {"command": "true"}
    with tempfile.TemporaryDirectory() as tmp:
        async with server(tmp, name, config) as s:
            for _ in range(WARM_UP):
                await s.call_tool("bash", bash)
                await s.call_tool("job_list", {})
            for _ in range(N // ROUNDS):
                if name != "default":
                    res = await timed(out, "off", lambda: s.call_tool("bash", bash))
                    assert not res.isError, res
                    continue
                res = await timed(out, "bash", lambda: s.call_tool("bash", bash))
                assert not res.isError, res
                await timed(out, "ping", s.send_ping)
            # Its own series: between bash calls it would change what they
            # measure.
            for _ in range(N // ROUNDS if name == "default" else 0):
                res = await timed(out, "job_list", lambda: s.call_tool("job_list", {}))
                assert not res.isError, res


def samples():
    """Every series, in ROUNDS rounds of the spawn floor, the default
    server and the sandbox-off server (each server started afresh and
    warmed up), so that a change in the machine's load between series
    reaches each of them."""
    out = {k: [] for k in ("spawn", "bash", "ping", "job_list", "off")}
    for _ in range(ROUNDS):
        for _ in range(WARM_UP):
            spawn()
        for _ in range(N // ROUNDS):
            t = time.perf_counter()
            spawn()
            out["spawn"].append((time.perf_counter() - t) * 1000)
        anyio.run(server_samples, out, "default")
        anyio.run(server_samples, out, "off", '[sandbox]\nmode = "off"\n')
    return out


def main():
    mcp = samples()
    spawn = mcp["spawn"]
    floor = statistics.median(spawn)
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    print(f"\nbash {{command: \"true\"}}: {N} calls each, milliseconds{note}\n")
    print("| what                                           |    median |       p99 |  ratio |")
    print("|------------------------------------------------|-----------|-----------|--------|")
    print(row("spawn `bash -c true` from Python (floor)", spawn, floor))
    print(row("dsh mcp: tools/call bash (Python MCP client)", mcp["bash"], floor))
    print(row("dsh mcp: ping (client + transport only)", mcp["ping"], floor))
    print(row("dsh mcp: tools/call job_list (no process)", mcp["job_list"], floor))
    print(row("dsh mcp, sandbox off: tools/call bash", mcp["off"], floor))
    m = {k: statistics.median(v) for k, v in mcp.items()}
    overhead = m["bash"] - floor
    print(f"\nadded by MCP + dsh over a bare spawn: {overhead:.3f} ms median "
          f"({overhead / floor * 100:.0f}% of one spawn)")
    own = m["bash"] - m["job_list"]
    print(f"dsh's own cost of the call: bash - job_list = {own:.3f} ms median, "
          f"{own / floor:.2f}x the bare spawn (goal: at most 1.5x)")
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
