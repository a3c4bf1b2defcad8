"""Benchmark: the per-user daemon against today's standalone servers, side
by side in one run (medians, p99, ratios):

1. an MCP `bash {command: "true"}` call through the bridge vs `dsh mcp
   --standalone`, calls alternated between the two sessions;
2. a registry operation (`dsh workspace list`, `dsh workspace create`)
   through the daemon's held store vs `--standalone` (open, lock, re-read,
   close per operation), alternated;
3. a second agent's first correct `definition` on a root the first agent
   warmed vs a cold start (a fresh daemon each time);
4. memory: N agents on one Rust root — one daemon and one rust-analyzer
   vs N standalone servers with one rust-analyzer each (RSS summed from
   /proc).

Every daemon runs in a private runtime dir and is stopped at the end.
`--quick` (CI's smoke run, figures not to quote) makes each part small:
20 calls, 5 registry operations, one cold start, 2 agents."""

import contextlib
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

from common import pct, session as common_session

QUICK = "--quick" in sys.argv[1:]
N = int(os.environ.get("BENCH_N", "20" if QUICK else "300"))
N_REGISTRY = int(os.environ.get("BENCH_N_REGISTRY", "5" if QUICK else "40"))
N_AGENTS = int(os.environ.get("BENCH_AGENTS", "2" if QUICK else "3"))
COLD_RUNS = int(os.environ.get("BENCH_COLD_RUNS", "1" if QUICK else "3"))
DSH = os.environ.get("DSH_BIN", "target/release/dsh")
ROOT = pathlib.Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "tests" / "fixtures" / "lsp" / "rust-workspace"
QUERY = {"op": "definition", "path": "app/src/main.rs", "line": 9, "symbol": "total_area"}


def table(title, rows):
    print(f"\n{title}\n")
    print(f"| {'what':<52} | {'median ms':>10} | {'p99 ms':>10} | {'ratio':>7} |")
    print(f"|{'-' * 54}|{'-' * 12}|{'-' * 12}|{'-' * 9}|")
    base = statistics.median(rows[0][1])
    for name, samples in rows:
        med = statistics.median(samples)
        print(f"| {name:<52} | {med:10.3f} | {pct(samples, 0.99):10.3f} | {med / base:6.2f}x |")


def fresh_env():
    tmp = tempfile.mkdtemp(prefix="dsh-bench-")
    env = dict(os.environ, DSH_LOG="warn")
    env["XDG_CONFIG_HOME"] = os.path.join(tmp, "config")
    env["XDG_DATA_HOME"] = os.path.join(tmp, "data")
    env["DSH_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="dsh-run-")
    return env, tmp


def stop_daemon(env):
    subprocess.run([DSH, "daemon", "stop"], env=env, capture_output=True, timeout=60)


def finish(env):
    """Stops the daemon of a `fresh_env` and removes its directories."""
    stop_daemon(env)
    shutil.rmtree(os.path.dirname(env["XDG_DATA_HOME"]), ignore_errors=True)
    shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)


def session(env, *args, cwd=None):
    return common_session(DSH, args, env, cwd)


async def bash_true():
    env, _ = fresh_env()
    samples = {"bridge": [], "standalone": []}
    try:
        async with session(env) as bridge, session(env, "--standalone") as standalone:
            for s in (bridge, standalone):
                for _ in range(20):
                    await s.call_tool("bash", {"command": "true"})
            for _ in range(N):
                for name, s in (("bridge", bridge), ("standalone", standalone)):
                    t = time.perf_counter()
                    r = await s.call_tool("bash", {"command": "true"})
                    samples[name].append((time.perf_counter() - t) * 1000)
                    assert not r.isError
    finally:
        finish(env)
    table(f"MCP `bash true`, {N} calls each, alternated", [
        ("dsh mcp --standalone (in-process server)", samples["standalone"]),
        ("dsh mcp through the bridge to the daemon", samples["bridge"]),
    ])


def registry():
    env, tmp = fresh_env()
    dirs = []
    for i in range(50):
        d = os.path.join(tmp, f"ws{i}")
        os.mkdir(d)
        dirs.append(d)
    subprocess.run([DSH, "workspace", "list"], env=env, check=True, capture_output=True)
    rows = {k: [] for k in ("list-daemon", "list-standalone", "create-daemon", "create-standalone")}
    try:
        for i in range(N_REGISTRY):
            for mode in ("daemon", "standalone"):
                extra = ["--standalone"] if mode == "standalone" else []
                if mode == "standalone":
                    # the daemon holds the store for its life: stop it for the other side
                    stop_daemon(env)
                t = time.perf_counter()
                subprocess.run([DSH, *extra, "workspace", "list"], env=env, check=True, capture_output=True)
                rows[f"list-{mode}"].append((time.perf_counter() - t) * 1000)
                d = os.path.join(tmp, f"new-{mode}-{i}")
                os.mkdir(d)
                t = time.perf_counter()
                subprocess.run([DSH, *extra, "workspace", "create", d], env=env, check=True, capture_output=True)
                rows[f"create-{mode}"].append((time.perf_counter() - t) * 1000)
                if mode == "daemon":
                    continue
                # start the daemon again, outside the measurement
                subprocess.run([DSH, "workspace", "list"], env=env, check=True, capture_output=True)
    finally:
        finish(env)
    table(f"registry commands as a person runs them (whole `dsh` process), {N_REGISTRY} each", [
        ("dsh workspace list --standalone (reopen per operation)", rows["list-standalone"]),
        ("dsh workspace list through the daemon (held store)", rows["list-daemon"]),
        ("dsh workspace create --standalone", rows["create-standalone"]),
        ("dsh workspace create through the daemon", rows["create-daemon"]),
    ])


async def first_definition(s):
    began = time.perf_counter()
    while True:
        r = await s.call_tool("lsp", QUERY)
        if not r.isError:
            items = r.structuredContent["items"]
            assert [i["path"] for i in items] == ["shapes/src/canvas.rs"], items
            return (time.perf_counter() - began) * 1000
        code = r.structuredContent["error"]["code"]
        assert code == "LSP_NOT_READY", r.content[0].text
        await anyio.sleep(0.05)


async def warm_vs_cold():
    cold, warm = [], []
    for _ in range(COLD_RUNS):
        env, tmp = fresh_env()
        project = os.path.join(tmp, "rust-workspace")
        shutil.copytree(FIXTURE, project)
        try:
            async with session(env, cwd=project) as first:
                cold.append(await first_definition(first))
                async with session(env, cwd=project) as second:
                    warm.append(await first_definition(second))
        finally:
            finish(env)
    table(f"first correct `definition` on a Rust root, {COLD_RUNS} runs", [
        ("cold start (first agent, fresh daemon)", cold),
        ("second agent on the warmed root (same daemon)", warm),
    ])


def rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree(root_pids):
    """Every live pid under `root_pids` (inclusive), from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry))
            except (OSError, ValueError, IndexError):
                pass
    out, todo = set(), list(root_pids)
    while todo:
        p = todo.pop()
        if p not in out:
            out.add(p)
            todo.extend(children.get(p, []))
    return out


def daemon_pid(env):
    info = pathlib.Path(env["XDG_DATA_HOME"]) / "dsh" / "daemon.json"
    return json.loads(info.read_text())["pid"]


async def memory():
    results = {}
    for mode in ("standalone", "daemon"):
        env, tmp = fresh_env()
        project = os.path.join(tmp, "rust-workspace")
        shutil.copytree(FIXTURE, project)
        extra = ["--standalone"] if mode == "standalone" else []
        try:
            async with contextlib.AsyncExitStack() as stack:
                sessions = [await stack.enter_async_context(session(env, *extra, cwd=project))
                            for _ in range(N_AGENTS)]
                for s in sessions:
                    await first_definition(s)
                me = os.getpid()
                roots = [int(e) for e in os.listdir("/proc") if e.isdigit() and _ppid(int(e)) == me]
                if mode == "daemon":
                    roots.append(daemon_pid(env))
                pids = tree(roots) - {me}
                ras = [p for p in pids if _comm(p) == "rust-analyzer"]
                results[mode] = (sum(rss_kib(p) for p in pids), len(ras))
        finally:
            finish(env)
    print(f"\nmemory: {N_AGENTS} agents on one Rust root (RSS summed from /proc)\n")
    print(f"| {'setup':<40} | {'rust-analyzers':>14} | {'RSS MiB':>9} | {'ratio':>7} |")
    print(f"|{'-' * 42}|{'-' * 16}|{'-' * 11}|{'-' * 9}|")
    base = results["standalone"][0]
    for mode, label in (("standalone", f"{N_AGENTS} standalone servers"),
                        ("daemon", f"{N_AGENTS} bridges, one daemon")):
        rss, ras = results[mode]
        print(f"| {label:<40} | {ras:>14} | {rss / 1024:9.1f} | {rss / base:6.2f}x |")


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


async def main():
    print(f"dsh {DSH}; load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    await bash_true()
    registry()
    if shutil.which("rust-analyzer"):
        await warm_vs_cold()
        await memory()
    else:
        print("\nrust-analyzer is not on PATH: the language-server rows are skipped")


if __name__ == "__main__":
    anyio.run(main)
