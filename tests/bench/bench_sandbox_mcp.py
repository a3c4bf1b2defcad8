"""Benchmark: what the sandbox costs a model's `bash {command: "true"}`.

Four `dsh mcp --standalone` servers run side by side, each with its own
config: `[sandbox] mode = "off"`, the default (`workspace-write`), the
default with `network = false`, and `read-only`. Calls go round-robin, in
a rotated order each round, so every server sees the same machine. Prints
medians, p99 and the ratio of each median to the unconfined one, and what
each server reported of its sandbox (a row whose sandbox was not enforced
says so instead of being quoted as a cost).

Run with `cargo xtask bench sandbox [--quick]` (`--quick`: 20 calls each,
a smoke run whose figures are not to be quoted; BENCH_N sets the count)."""

import contextlib
import os
import statistics
import sys
import tempfile
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from common import pct

QUICK = "--quick" in sys.argv[1:]
N = int(os.environ.get("BENCH_N", "20" if QUICK else "300"))
WARM_UP = 5 if QUICK else 20
DSH = os.environ.get("DSH_BIN", "target/release/dsh")

SETUPS = [
    ("off", 'mode = "off"'),
    ("workspace-write (default)", ""),
    ("workspace-write, network off", "network = false"),
    ("read-only", 'mode = "read-only"'),
]


@contextlib.asynccontextmanager
async def server(tmp, name, sandbox):
    """A standalone server whose config holds `sandbox` under [sandbox]."""
    base = os.path.join(tmp, name.split()[0].strip(",") + str(len(sandbox)))
    config = os.path.join(base, "config", "dsh")
    workspace = os.path.join(base, "workspace")
    os.makedirs(config)
    os.makedirs(workspace)
    with open(os.path.join(config, "config.toml"), "w") as f:
        f.write(f"[lsp]\neager = false\n\n[sandbox]\n{sandbox}\n")
    env = dict(os.environ, DSH_LOG="warn")
    env["XDG_CONFIG_HOME"] = os.path.join(base, "config")
    env["XDG_DATA_HOME"] = os.path.join(base, "data")
    params = StdioServerParameters(command=DSH, args=["mcp", "--standalone"], env=env, cwd=workspace)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                yield s


async def call(s):
    t = time.perf_counter()
    res = await s.call_tool("bash", {"command": "true"})
    elapsed = (time.perf_counter() - t) * 1000
    if res.isError:
        raise SystemExit(f"bash true failed: {res.content}")
    return elapsed, (res.structuredContent or {}).get("sandbox")


async def measure():
    samples = {name: [] for name, _ in SETUPS}
    reported = {}
    with tempfile.TemporaryDirectory(prefix="dsh-bench-sandbox-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            sessions = []
            for name, sandbox in SETUPS:
                sessions.append((name, await stack.enter_async_context(server(tmp, name, sandbox))))
            for name, s in sessions:
                for _ in range(WARM_UP):
                    _, reported[name] = await call(s)
            for i in range(N):
                k = i % len(sessions)
                for name, s in sessions[k:] + sessions[:k]:
                    elapsed, _ = await call(s)
                    samples[name].append(elapsed)
    return samples, reported


def describe(sandbox):
    if not sandbox:
        return "no sandbox field"
    words = [sandbox.get("mode", "?"), "enforced" if sandbox.get("enforced") else "NOT enforced"]
    words.append("network on" if sandbox.get("network") else "network off")
    if sandbox.get("reason"):
        words.append(sandbox["reason"])
    return ", ".join(words)


def main():
    samples, reported = anyio.run(measure)
    floor = statistics.median(samples["off"])
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    print(f"\nMCP `bash {{command: \"true\"}}` per sandbox setting: {N} calls each, "
          f"round-robin, milliseconds{note}\n")
    print(f"| {'[sandbox]':<30} | {'median':>9} | {'p99':>9} | {'ratio':>6} | what the result reported")
    print(f"|{'-' * 32}|{'-' * 11}|{'-' * 11}|{'-' * 8}|{'-' * 26}")
    failed = False
    for name, _ in SETUPS:
        med = statistics.median(samples[name])
        print(f"| {name:<30} | {med:9.3f} | {pct(samples[name], 0.99):9.3f} | "
              f"{med / floor:5.2f}x | {describe(reported.get(name))}")
        if name != "off" and not (reported.get(name) or {}).get("enforced"):
            failed = True
    print("\nThe ratio is each median over the unconfined (`off`) median, measured in this run.")
    if failed:
        print("A confined row was NOT enforced on this kernel: its figure is not a sandbox's cost.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
