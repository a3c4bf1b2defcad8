"""Benchmark: dsh against its floors, in one table, quiet and busy.

Every row is a ratio of two figures measured side by side in the same
run, on one daemon (the way agents use dsh), through `dsh mcp` bridges
driven with raw JSON-RPC lines (no client library's cost in the figures):

* spawn: dsh's own cost of `bash {command: "true"}` — the call less a
  `job_list` call (a tool call that starts nothing) on the same
  connection, medians — against `bash -c true` spawned directly from
  this process (goal: at most 1.5x);
* settle: the p99 of `terminal_send` of `1+1` to a Python REPL against
  the p99 of a `terminal_list` call on the same connection (goal: at most
  3x quiet, 5x busy);
* agents: AGENTS bridges with 2 terminals each, every agent sending to its
  terminals in turn at once: the p99 of every send against one agent's
  p99 alone (four rounds of its sends: the p99 of one round's 80 would be
  nearly its slowest) (goal: at most 8x), every output checked; and the daemon's
  resident memory per terminal open, and what closing them gave back
  (goal: at most 2 MB per terminal, returned);
* flood: FLOOD_MB of `yes` through a shell in a terminal, the command
  line sent and its prompt back, as `terminal_send` against the same
  command line typed into a shell on a raw pty this process reads and
  discards (MB/s, dsh / raw, the median of FLOOD_ROUNDS rounds taken in
  turn; goal: at least 0.9 quiet, 0.8 busy).

"busy" runs the same while two busy loops (one per core of the benchmark
machine) run at the same priority: the daemon's threads must not be the
ones starved. (`cargo xtask bench terminal` floods through the terminal
library in process, with peak memory.)

Run with `cargo xtask bench floor [--quick]` (`--quick`: a smoke run whose
figures are not to be quoted; BENCH_N sets the count of each series,
BENCH_AGENTS the agents)."""

import concurrent.futures
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

QUICK = "--quick" in sys.argv[1:]
N = int(os.environ.get("BENCH_N", "20" if QUICK else "300"))
AGENTS = int(os.environ.get("BENCH_AGENTS", "4" if QUICK else "16"))
SENDS = 5 if QUICK else 40
DSH = os.path.abspath(os.environ.get("DSH_BIN", "target/release/dsh"))
BUSY_LOOPS = 2
FLOOD_MB = 2 if QUICK else 20
FLOOD_ROUNDS = 1 if QUICK else 3
# The marker's quotes keep the echoed command line from matching it.
FLOOD = (f"yes 0123456789abcdefghijklmnopqrstuvwxyz | head -c {FLOOD_MB * 1000000}; "
         "echo __FL''OOD_END__")
ALONE_ROUNDS = 4


def pct(samples, q):
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


class Bridge:
    """A `dsh mcp` bridge to the daemon, driven with raw JSON-RPC lines."""

    def __init__(self, env, cwd):
        self.proc = subprocess.Popen(
            [DSH, "mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, cwd=cwd)
        self.next_id = 1
        self.call("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "bench-floor", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method, params):
        msg_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the bridge closed its output")
            msg = json.loads(line)
            if msg.get("id") == msg_id:
                return msg

    def tool(self, name, arguments):
        result = self.call("tools/call", {"name": name, "arguments": arguments})["result"]
        if result.get("isError"):
            raise RuntimeError(f"{name} failed: {result}")
        return result["structuredContent"]

    def timed(self, name, arguments):
        t = time.perf_counter()
        out = self.tool(name, arguments)
        return (time.perf_counter() - t) * 1000, out

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def spawn_row(bridge):
    """Medians of the bare spawn, the bash call and job_list, taking turns."""
    spawn, bash, noop = [], [], []
    for i in range(N + 10):
        t = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], check=True)
        took_spawn = (time.perf_counter() - t) * 1000
        took_bash, out = bridge.timed("bash", {"command": "true"})
        if out["exit_code"] != 0:
            raise RuntimeError(f"bash true: {out}")
        took_noop, _ = bridge.timed("job_list", {})
        if i >= 10:
            spawn.append(took_spawn)
            bash.append(took_bash)
            noop.append(took_noop)
    floor = statistics.median(spawn)
    own = statistics.median(bash) - statistics.median(noop)
    return own / floor, (f"bash true {statistics.median(bash):.2f} ms - job_list "
                         f"{statistics.median(noop):.2f} ms vs bash -c true {floor:.2f} ms")


def open_python(bridge):
    return bridge.tool("terminal_open", {"command": ["python3", "-q", "-i"]})["id"]


def settle(bridge, term, text="1+1", expect="2\n"):
    took, out = bridge.timed("terminal_send", {"id": term, "text": text})
    if out.get("reason") != "input_wait" or not out.get("output", "").startswith(expect):
        raise RuntimeError(f"unexpected settle: {out}")
    return took


def settle_row(bridge):
    term = open_python(bridge)
    sends, lists = [], []
    for i in range(N + 5):
        took = settle(bridge, term)
        took_list, _ = bridge.timed("terminal_list", {})
        if i >= 5:
            sends.append(took)
            lists.append(took_list)
    bridge.tool("terminal_close", {"id": term})
    s99, l99 = pct(sends, 0.99), pct(lists, 0.99)
    return s99 / l99, f"p99 {s99:.2f} ms vs terminal_list p99 {l99:.2f} ms"


def daemon_rss_kib(env):
    """The resident memory of the daemon of `env` (the one `dsh` process
    whose command line is `dsh daemon …` and whose environment holds the
    runtime dir)."""
    marker = ("DSH_RUNTIME_DIR=" + env["DSH_RUNTIME_DIR"]).encode()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{pid}/comm") as f:
                # A PID namespace's helper shows the daemon's command line.
                helper = f.read().strip() in ("dsh-init", "dsh-wait")
            if b"daemon" not in argv or helper:
                continue
            with open(f"/proc/{pid}/environ", "rb") as f:
                if marker not in f.read():
                    continue
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmRSS:"):
                        return int(line.split()[1])
        except OSError:
            continue
    raise RuntimeError("no daemon found")


def settled_rss_kib(env):
    """The daemon's resident memory once it stopped falling: it hands the
    memory of closed terminals back a moment after a burst of closes (up
    to 3 s)."""
    last, waited = daemon_rss_kib(env), 0.0
    while waited < 3.0:
        time.sleep(0.1)
        waited += 0.1
        now = daemon_rss_kib(env)
        if now == last and waited >= 0.4:
            break
        last = now
    return last


def agent(bridge, terms, tag):
    """Sends to each terminal in turn; every reply is checked."""
    took = []
    for k in range(SENDS):
        for j, term in enumerate(terms):
            took.append(settle(bridge, term, f"'{tag}-{j}-{k}'", f"'{tag}-{j}-{k}'\n"))
    return took


def agents_row(env, cwd):
    bridges = [Bridge(env, cwd) for _ in range(AGENTS)]
    try:
        before = daemon_rss_kib(env)
        terms = [[open_python(b), open_python(b)] for b in bridges]
        opened = daemon_rss_kib(env)
        # One agent's p99 out of as many sends as the agents' series has
        # per agent would be its last value but one: four rounds of them.
        alone = [t for r in range(ALONE_ROUNDS) for t in agent(bridges[0], terms[0], f"alone{r}")]
        with concurrent.futures.ThreadPoolExecutor(AGENTS) as pool:
            runs = list(pool.map(lambda i: agent(bridges[i], terms[i], f"a{i}"), range(AGENTS)))
        every = [t for run in runs for t in run]
        for b, pair in zip(bridges, terms):
            for term in pair:
                b.tool("terminal_close", {"id": term})
        closed = settled_rss_kib(env)
    finally:
        for b in bridges:
            b.close()
    per_terminal = (opened - before) / (2 * AGENTS) / 1024
    ratio = pct(every, 0.99) / pct(alone, 0.99)
    return ratio, (f"{len(every)}/{len(every)} right; p99 {pct(every, 0.99):.2f} ms vs one "
                   f"agent's {pct(alone, 0.99):.2f} ms; {per_terminal:.2f} MiB per terminal, "
                   f"{(opened - closed) / 1024:.1f} of {(opened - before) / 1024:.1f} MiB "
                   f"returned after close")


def raw_flood():
    """Seconds from typing FLOOD into an interactive bash on a raw pty to
    its prompt after the marker, everything read and discarded."""
    master, slave = os.openpty()
    shell = subprocess.Popen(
        ["bash", "--norc", "--noprofile", "-i"], stdin=slave, stdout=slave, stderr=slave,
        start_new_session=True, env=dict(os.environ, PS1="floor$ "))
    os.close(slave)

    def read_until(marker, seen=b""):
        while marker not in seen:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                raise RuntimeError("the raw shell closed its terminal")
            if not chunk:
                raise RuntimeError("the raw shell closed its terminal")
            seen = (seen + chunk)[-4096:]
        return seen[seen.index(marker) + len(marker):]

    try:
        read_until(b"floor$ ")
        started = time.perf_counter()
        os.write(master, (FLOOD + "\n").encode())
        rest = read_until(b"__FLOOD_END__")
        read_until(b"floor$ ", rest)
        return time.perf_counter() - started
    finally:
        shell.kill()
        shell.wait()
        os.close(master)


def dsh_flood(bridge, term):
    """Seconds of the `terminal_send` of FLOOD, settled at the prompt."""
    took, out = bridge.timed("terminal_send", {"id": term, "text": FLOOD, "timeout_ms": 120000})
    if out.get("reason") != "prompt" or "__FLOOD_END__" not in out.get("output", ""):
        raise RuntimeError(f"unexpected flood settle: {str(out)[:400]}")
    return took / 1000


def flood_row(bridge):
    term = bridge.tool("terminal_open", {})["id"]
    try:
        ratios, dsh_s, raw_s = [], [], []
        for _ in range(FLOOD_ROUNDS):
            d, r = dsh_flood(bridge, term), raw_flood()
            dsh_s.append(d)
            raw_s.append(r)
            ratios.append(r / d)
    finally:
        bridge.tool("terminal_close", {"id": term})
    ratio = statistics.median(ratios)
    mbs = lambda s: FLOOD_MB / statistics.median(s)  # noqa: E731
    return ratio, (f"{FLOOD_MB} MB: dsh {mbs(dsh_s):.0f} MB/s vs raw {mbs(raw_s):.0f} MB/s "
                   f"(median of {FLOOD_ROUNDS} rounds' ratios)")


def busy_loops():
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(BUSY_LOOPS)]


def measure(env, cwd, load):
    bridge = Bridge(env, cwd)
    try:
        rows = [("spawn: dsh's own cost of bash true / bare spawn", 1.5, *spawn_row(bridge))]
        rows.append(("settle p99 / no-op call p99", 3.0 if load == "quiet" else 5.0,
                     *settle_row(bridge)))
        rows.append(("flood: dsh MB/s / raw pty MB/s",
                     -0.9 if load == "quiet" else -0.8, *flood_row(bridge)))
    finally:
        bridge.close()
    rows.append((f"{AGENTS} agents x 2 terminals: p99 / one agent's", 8.0, *agents_row(env, cwd)))
    return rows


def main():
    tmp = tempfile.mkdtemp(prefix="dsh-bench-floor-")
    env = dict(os.environ, DSH_LOG="warn")
    for var, sub in (("XDG_CONFIG_HOME", "config"), ("XDG_DATA_HOME", "data"),
                     ("XDG_STATE_HOME", "state")):
        env[var] = os.path.join(tmp, sub)
    env["DSH_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="dsh-run-")
    env.pop("XDG_RUNTIME_DIR", None)
    cwd = os.path.join(tmp, "ws")
    os.makedirs(os.path.join(cwd, ".git"))
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    print(f"\ndsh against its floors, {N} calls a series, {AGENTS} agents, "
          f"{os.cpu_count()} cores{note}\n")
    print(f"| {'row':<52} | {'load':<5} | {'ratio':>7} | {'goal':>7} | measured side by side |")
    print(f"|{'-' * 54}|{'-' * 7}|{'-' * 9}|{'-' * 9}|---|")
    try:
        for load in ("quiet", "busy"):
            loops = busy_loops() if load == "busy" else []
            try:
                for name, goal, ratio, detail in measure(env, cwd, load):
                    # A negative goal is a floor: the ratio at least its size.
                    if goal < 0:
                        mark, shown = ("ok" if ratio >= -goal else "under"), f">={-goal:4.1f}x"
                    else:
                        mark, shown = ("ok" if ratio <= goal else "over"), f"<={goal:4.1f}x"
                    print(f"| {name:<52} | {load:<5} | {ratio:6.2f}x | "
                          f"{shown} | {mark}: {detail} |", flush=True)
            finally:
                for loop in loops:
                    loop.kill()
                    loop.wait()
    finally:
        subprocess.run([DSH, "daemon", "stop"], env=env, capture_output=True, timeout=60)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.exit(main())
