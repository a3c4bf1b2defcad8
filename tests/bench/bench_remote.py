"""Benchmark: what the transport adds. The same calls through `dsh mcp`
on this machine and through `dsh mcp --remote ssh://` to a real OpenSSH
server on loopback (tests/e2e/loopback_ssh.py), beside a bare `ssh host
true`, in one run. Prints medians, p90 and the ratio to the local call.

Series, taking turns in ROUNDS rounds:

* `ssh host true`: a whole ssh connection (handshake, auth, a command);
  what any ssh-based tool pays per command when it keeps no connection;
* `bash {command: "true"}` locally and over ssh;
* a terminal settle: `terminal_send` of `1+1` to a Python REPL, locally and
  over ssh;
* the first call of a new remote connection: connect, the bootstrap
  handshake with the build already installed, `initialize`, one `bash`.

Both sides are this machine and run the same build (the static one,
which the target gets), so the ssh series show what the transport adds
(the relay, ssh and sshd, encryption), not network latency; add the
round trip of a real link to each remote call.

Run with `cargo xtask bench remote [--quick]` (needs the static build,
which the xtask makes, and Debian's openssh-server)."""

import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import anyio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))
from loopback_ssh import HOST, LoopbackSshd  # noqa: E402

from common import row as common_row, session as common_session, timed as common_timed  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
N = int(os.environ.get("BENCH_N", "10" if QUICK else "200"))
CONNECTS = 3 if QUICK else 20
WARM_UP = 3 if QUICK else 10
ROUNDS = 2
DSH = os.path.abspath(os.environ.get("DSH_BIN", "target/release/dsh"))


def row(name, samples, base):
    return common_row(name, samples, base, q=0.9, width=52)


def session(env, args, cwd, command=DSH):
    return common_session(command, args, env, cwd)


async def timed(out, key, call):
    return await common_timed(out, key, call, check=True)


async def series(out, env, args, cwd, tag, command=DSH):
    async with session(env, args, cwd, command) as s:
        repl = (await s.call_tool("terminal_open", {"command": ["python3", "-q"]})).structuredContent
        for _ in range(WARM_UP):
            await s.call_tool("bash", {"command": "true"})
            await s.call_tool("terminal_send", {"id": repl["id"], "text": "1+1"})
        for _ in range(N // ROUNDS):
            await timed(out, f"bash {tag}", lambda: s.call_tool("bash", {"command": "true"}))
            await timed(out, f"settle {tag}",
                        lambda: s.call_tool("terminal_send", {"id": repl["id"], "text": "1+1"}))
        await s.call_tool("terminal_close", {"id": repl["id"]})


async def first_call(out, env, args, cwd):
    t = time.perf_counter()
    async with session(env, args, cwd) as s:
        res = await s.call_tool("bash", {"command": "true"})
        assert not res.isError
        out["connect"].append((time.perf_counter() - t) * 1000)


def main():
    static = os.environ.get("DSH_REMOTE_BINARY")
    if not static:
        sys.exit("DSH_REMOTE_BINARY must name the static build (cargo xtask bench remote sets it)")
    out = {k: [] for k in ("ssh", "bash local", "bash ssh", "settle local", "settle ssh", "connect")}
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        remote = {
            "XDG_DATA_HOME": str(tmp / "remote" / "data"),
            "XDG_CONFIG_HOME": str(tmp / "remote" / "config"),
            "XDG_STATE_HOME": str(tmp / "remote" / "state"),
            "DSH_RUNTIME_DIR": tempfile.mkdtemp(prefix="dsh-bench-remote-"),
            "DSH_LOG": "warn",
            "PATH": os.environ["PATH"],
        }
        ws = tmp / "ws"
        (ws / ".git").mkdir(parents=True)
        local = dict(os.environ, DSH_LOG="warn", DSH_REMOTE_BINARY=static,
                     XDG_DATA_HOME=str(tmp / "local" / "data"),
                     XDG_CONFIG_HOME=str(tmp / "local" / "config"),
                     XDG_STATE_HOME=str(tmp / "local" / "state"),
                     DSH_RUNTIME_DIR=tempfile.mkdtemp(prefix="dsh-bench-local-"))
        local.pop("XDG_RUNTIME_DIR", None)
        with LoopbackSshd(tmp / "ssh", remote) as sshd:
            local["DSH_SSH_COMMAND"] = sshd.ssh_command
            ssh = sshd.ssh_command.split() + [HOST, "true"]
            target = ["--remote", f"ssh://{HOST}{ws}"]
            try:
                for _ in range(ROUNDS):
                    for _ in range(CONNECTS // ROUNDS):
                        t = time.perf_counter()
                        subprocess.run(ssh, check=True, env=local)
                        out["ssh"].append((time.perf_counter() - t) * 1000)
                    anyio.run(series, out, local, [], str(ws), "local", static)
                    anyio.run(series, out, local, target, str(ws), "ssh")
                    for _ in range(CONNECTS // ROUNDS):
                        anyio.run(first_call, out, local, target, str(ws))
            finally:
                for env in (local, remote):
                    subprocess.run([static, "daemon", "stop"],
                                   env={**os.environ, **env}, capture_output=True)
                    shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
    note = "; --quick: a smoke run, not figures to quote" if QUICK else ""
    print(f"\nover ssh to loopback vs local: {N} calls each, {CONNECTS} connections, milliseconds{note}\n")
    print("| what                                                 |    median |       p90 | vs local |")
    print("|------------------------------------------------------|-----------|-----------|----------|")
    base_bash = statistics.median(out["bash local"])
    base_settle = statistics.median(out["settle local"])
    print(row("bash true, local dsh mcp", out["bash local"], base_bash))
    print(row("bash true, dsh mcp --remote ssh://", out["bash ssh"], base_bash))
    print(row("settle of 1+1 in a Python REPL, local", out["settle local"], base_settle))
    print(row("settle of 1+1 in a Python REPL, --remote ssh://", out["settle ssh"], base_settle))
    print(row("bare `ssh host true` (a new connection)", out["ssh"], base_bash))
    print(row("--remote: connect + bootstrap + initialize + bash", out["connect"], base_bash))
    added = statistics.median(out["bash ssh"]) - base_bash
    print(f"\nadded per call by the ssh stream and the relay: {added:.3f} ms median (bash); "
          f"{statistics.median(out['settle ssh']) - base_settle:.3f} ms (settle)")


if __name__ == "__main__":
    sys.exit(main())
