"""What the benchmark scripts share: percentiles, a table row against a
base, a timed call, and a stdio MCP session with `dsh mcp`."""

import contextlib
import os
import statistics
import time

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def pct(samples, q):
    """The `q` quantile of `samples` (nearest rank)."""
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def row(name, samples, base, q=0.99, width=46):
    """A Markdown table row: the median, the `q` quantile, and the median
    over `base`."""
    med = statistics.median(samples)
    return f"| {name:<{width}} | {med:9.3f} | {pct(samples, q):9.3f} | {med / base:6.2f}x |"


async def timed(out, key, call, check=False):
    """Awaits `call()`, appends its milliseconds to `out[key]`, returns its
    result; with `check`, a tool error fails the benchmark."""
    t = time.perf_counter()
    res = await call()
    out[key].append((time.perf_counter() - t) * 1000)
    if check:
        assert not res.isError, res.content[0].text
    return res


@contextlib.asynccontextmanager
async def session(command, args, env, cwd=None):
    """An initialized MCP client session with `command mcp ARGS`, its
    stderr dropped."""
    params = StdioServerParameters(command=command, args=["mcp", *args], env=env, cwd=cwd)
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                yield s
