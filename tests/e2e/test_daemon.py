"""The per-user daemon end to end: real `dsh mcp` bridges, real daemons,
real stores, driven by the MCP Python SDK client or raw JSON-RPC."""

import concurrent.futures
import contextlib
import json
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import threading
import time

import anyio
import pytest

import waiting
from mcp.client.session import DEFAULT_CLIENT_INFO

from conftest import (
    alive,
    descendants,
    live_named,
    session_of,
    connect,
    daemons_of,
    dsh,
    dsh_bin,
    end_work_with_the_client,
    err,
    info,
    live_in_session,
    ok,
    processes,
    stop_daemons,
    write_config,
)

pytestmark = pytest.mark.anyio


def wait_until(predicate, timeout=30, what="condition"):
    waiting.wait_until(predicate, what, timeout_s=timeout)


class RawBridge:
    """`dsh mcp` driven with raw JSON-RPC lines, so its exit status and
    stderr can be checked."""

    def __init__(self, env, *args, cwd=None):
        self.proc = subprocess.Popen(
            [dsh_bin(), "mcp", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            cwd=cwd,
        )
        self.next_id = 1
        self.call("initialize", {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "raw-bridge", "version": "1"}})
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def call(self, method, params, timeout=60):
        msg_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                raise AssertionError(f"bridge closed stdout: {self.proc.stderr.read().decode()}")
            msg = json.loads(line)
            if msg.get("id") == msg_id:
                return msg
        raise AssertionError("no response")

    def tool(self, name, arguments):
        reply = self.call("tools/call", {"name": name, "arguments": arguments})
        result = reply["result"]
        assert not result.get("isError"), result
        return result["structuredContent"]

    def close(self):
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=15)
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def kill_sessions(sids, env):
    """Kills what is left of sessions this test's daemons started: only
    processes whose environment carries the test's runtime dir, since a
    session id of an ended session may have been reused by anyone's."""
    marker = ("DSH_RUNTIME_DIR=" + env["DSH_RUNTIME_DIR"]).encode() + b"\0"
    for sid in sids:
        for pid, _ppid, _sid, _state in [p for p in processes() if p[2] == sid]:
            try:
                with open(f"/proc/{pid}/environ", "rb") as f:
                    if marker not in f.read() + b"\0":
                        continue
            except OSError:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def raw_hello(env, hello, extra=b""):
    """Connects to the daemon's socket, sends one hello line (and `extra`),
    returns the reply line and whatever else arrives before the close."""
    sock_path = info(env)["socket"]
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(sock_path)
        s.sendall(json.dumps(hello).encode() + b"\n" + extra)
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    reply, _, rest = data.partition(b"\n")
    return json.loads(reply), rest


# ---- one daemon, many agents -----------------------------------------------


async def test_two_bridges_share_one_daemon_and_each_keeps_its_environment(isolated_env, tmp_path):
    end_work_with_the_client(isolated_env)
    env_a = dict(isolated_env, DSH_E2E_MARK="agent-a", DSH_E2E_ONLY_A="yes")
    env_b = dict(isolated_env, DSH_E2E_MARK="agent-b")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    async with connect(env_a, cwd=str(tmp_path / "a")) as a, connect(env_b, cwd=str(tmp_path / "b")) as b:
        assert len(daemons_of(isolated_env)) == 1
        r = ok(await a.call_tool("bash", {"command": 'echo "$DSH_E2E_MARK ${DSH_E2E_ONLY_A-unset} $(pwd)"'}))
        assert r["output"] == f"agent-a yes {tmp_path / 'a'}\n"
        r = ok(await b.call_tool("bash", {"command": 'echo "$DSH_E2E_MARK ${DSH_E2E_ONLY_A-unset} $(pwd)"'}))
        assert r["output"] == f"agent-b unset {tmp_path / 'b'}\n"
        # no signal is blocked in what the daemon starts (a bridge blocks some for itself)
        r = ok(await b.call_tool("bash", {"command": "grep SigBlk /proc/$$/status"}))
        assert r["output"] == "SigBlk:\t0000000000000000\n"
        # terminals and background jobs see the connection's environment too
        ok(await b.call_tool("terminal_open", {}))
        r = ok(await b.call_tool("terminal_send", {"id": "pty-1", "text": "echo $DSH_E2E_MARK"}))
        assert r["output"] == "agent-b\n"
        job = ok(await a.call_tool("bash", {"command": "echo $DSH_E2E_MARK", "run_in_background": True}))
        out = ok(await a.call_tool("job_output", {"job_id": job["job_id"], "wait_ms": 10000}))
        assert out["output"] == "agent-a\n"
        # ownership is per connection, as it was per process
        e = err(await a.call_tool("terminal_send", {"id": "pty-1", "text": "echo hi"}))
        assert e["code"] == "FOREIGN_SESSION"

        ps = json.loads(dsh(isolated_env, "ps", "--json").stdout)
        rows = ps["connections"]
        assert len(rows) == 2
        by_cwd = {r["cwd"]: r for r in rows}
        assert [t["id"] for t in by_cwd[str(tmp_path / "b")]["terminals"]] == ["pty-1"]
        assert by_cwd[str(tmp_path / "b")]["terminals"][0]["status"] == "running"
        assert [j["id"] for j in by_cwd[str(tmp_path / "a")]["jobs"]] == [job["job_id"]]
        assert all(r["client"] == DEFAULT_CLIENT_INFO.name for r in rows), rows
        text = dsh(isolated_env, "ps").stdout
        assert "2 connections" in text and "pty-1" in text and job["job_id"] in text
    # both gone: the daemon stays (idle exit is 10 minutes) with nothing of theirs
    wait_until(lambda: json.loads(dsh(isolated_env, "ps", "--json").stdout)["connections"] == [],
               what="connections to end")
    assert len(daemons_of(isolated_env)) == 1


def test_ten_bridges_started_at_once_make_exactly_one_daemon(isolated_env):
    bridges = []
    try:
        with concurrent.futures.ThreadPoolExecutor(10) as pool:
            bridges = list(pool.map(lambda _: RawBridge(isolated_env), range(10)))
        for i, bridge in enumerate(bridges):
            assert bridge.tool("bash", {"command": f"echo {i}"})["output"] == f"{i}\n"
        assert len(daemons_of(isolated_env)) == 1
        ps = json.loads(dsh(isolated_env, "ps", "--json").stdout)
        assert len(ps["connections"]) == 10
    finally:
        for bridge in bridges:
            bridge.close()
    assert [b.proc.returncode for b in bridges] == [0] * 10


@pytest.fixture
def runtime_dirs(isolated_env):
    """The environments of two clients of one data dir: `xdg` with an
    XDG_RUNTIME_DIR of its own (a desktop session's), `none` without one (an
    ssh session, or an MCP client that passes on only part of the
    environment, as Codex does); neither sets DSH_RUNTIME_DIR. The data dir
    sits in a short directory (`DATA/run/` holds the socket of the second:
    a socket path must fit in 108 bytes). Their daemons, told apart by
    XDG_DATA_HOME, are stopped at teardown."""
    import shutil
    import tempfile
    root = pathlib.Path(tempfile.mkdtemp(prefix="dsh-rd-"))
    (root / "ws").mkdir()
    base = dict(isolated_env, XDG_DATA_HOME=str(root / "data"))
    base.pop("DSH_RUNTIME_DIR")
    run = root / "xdg-run"
    run.mkdir(mode=0o700)
    marker = f"XDG_DATA_HOME={base['XDG_DATA_HOME']}".encode()
    try:
        yield {"xdg": dict(base, XDG_RUNTIME_DIR=str(run)), "none": base,
               "run": run, "ws": root / "ws", "marker": marker}
    finally:
        stop_daemons(base, marker=marker)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize("first", ["xdg", "none"])
async def test_bridges_whose_runtime_dirs_differ_reach_one_daemon(runtime_dirs, first):
    """The second bridge computes another socket path than the daemon's; it
    finds the daemon through the daemon.json the daemon wrote (instead of
    failing with `its DSH_RUNTIME_DIR or XDG_RUNTIME_DIR differs`), and so
    do `dsh ps`, `dsh daemon status` and `dsh attach` run with either
    environment."""
    import tempfile
    second = "none" if first == "xdg" else "xdg"
    envs = runtime_dirs
    data_dir = pathlib.Path(envs["none"]["XDG_DATA_HOME"]) / "dsh"
    where = {"xdg": envs["run"] / "dsh", "none": data_dir / "run"}
    with tempfile.TemporaryFile("w+") as errlog:
        async with connect(envs[first], cwd=envs["ws"]) as a:
            assert ok(await a.call_tool("bash", {"command": "echo first"}))["output"] == "first\n"
            record = info(envs[first])
            assert pathlib.Path(record["socket"]).parent == where[first], record
            try:
                async with connect(envs[second], cwd=envs["ws"], errlog=errlog) as b:
                    r = ok(await b.call_tool("bash", {"command": "echo second"}))
                    assert r["output"] == "second\n"
                    assert daemons_of(envs[first], envs["marker"]) == [record["pid"]]
                    assert info(envs[first]) == record
                    for env in (envs["xdg"], envs["none"]):
                        ps = json.loads(dsh(env, "ps", "--json").stdout)
                        assert len(ps["connections"]) == 2, ps
                        status = json.loads(dsh(env, "daemon", "status", "--json").stdout)
                        assert (status["pid"], status["socket"]) == (record["pid"], record["socket"])
                        # the daemon's answer, not "no dsh daemon is running"
                        p = dsh(env, "attach", "pty-9", check=False)
                        assert p.stderr.startswith("dsh: no terminal pty-9;"), p.stderr
            except Exception as e:
                errlog.seek(0)
                raise AssertionError(f"the second bridge's stderr: {errlog.read()!r}") from e
    # no daemon was started for the second, not even one that left at once:
    # every `dsh daemon` warns once, at start, that its runtime dir is in
    # the temp dir (both are here)
    log = (data_dir / "daemon.log").read_text()
    assert log.count("the runtime directory is inside the temp directory") == 1, log
    assert not os.path.exists(where[second] / pathlib.Path(record["socket"]).name)
    assert dsh(envs[second], "daemon", "stop").stdout.startswith(
        f"stopped the dsh daemon (pid {record['pid']}); ")
    assert daemons_of(envs[first], envs["marker"]) == []


def test_a_second_daemon_refuses_at_once_naming_the_first(isolated_env):
    dsh(isolated_env, "workspace", "list")
    first = info(isolated_env)
    began = time.monotonic()
    p = dsh(isolated_env, "daemon", check=False, timeout=30)
    took = time.monotonic() - began
    # "at once": no wait for the first daemon; only a generous bound is
    # asserted (starting a process is slow on a loaded machine), the time
    # is printed
    print(f"the second daemon refused after {took:.2f} s")
    assert took < 10, took
    assert p.returncode == 1
    data_dir = pathlib.Path(isolated_env["XDG_DATA_HOME"]) / "dsh"
    assert p.stderr.strip().splitlines()[-1] == (
        f"dsh: a dsh daemon already serves {data_dir}: pid {first['pid']}, socket "
        f"{first['socket']} (`dsh daemon stop` stops it)"
    )
    assert daemons_of(isolated_env) == [first["pid"]]


def test_status_and_stop(isolated_env):
    p = dsh(isolated_env, "daemon", "status", check=False)
    assert p.returncode == 1
    assert p.stderr.startswith("dsh: no dsh daemon is running for ")
    dsh(isolated_env, "workspace", "list")
    pid = info(isolated_env)["pid"]
    status = json.loads(dsh(isolated_env, "daemon", "status", "--json").stdout)
    assert status["pid"] == pid and status["connections"] == 0
    assert status["socket"] == info(isolated_env)["socket"]
    out = dsh(isolated_env, "daemon", "stop").stdout
    assert out == f"stopped the dsh daemon (pid {pid}); its terminals and jobs were ended\n"
    assert daemons_of(isolated_env) == []
    assert not os.path.exists(status["socket"])
    assert dsh(isolated_env, "daemon", "stop").stdout.startswith("no dsh daemon is running for ")


# ---- bad input and faults ---------------------------------------------------


def test_a_stale_socket_is_replaced(isolated_env):
    dsh(isolated_env, "workspace", "list")
    sock = info(isolated_env)["socket"]
    os.kill(info(isolated_env)["pid"], signal.SIGKILL)
    wait_until(lambda: daemons_of(isolated_env) == [], what="the daemon to die")
    assert os.path.exists(sock)  # left behind by the killed daemon
    assert dsh(isolated_env, "workspace", "list", "--json").stdout == "[]\n"
    assert len(daemons_of(isolated_env)) == 1
    assert info(isolated_env)["socket"] == sock


def test_a_bridge_sends_nothing_to_a_process_that_took_the_daemons_socket(isolated_env):
    """A process that replaced the daemon's socket with a listener of its
    own (a confined command can, when the runtime dir falls back into the
    temp dir) gets no hello from a bridge: the hello carries the session's
    environment."""
    dsh(isolated_env, "workspace", "list")
    sock = info(isolated_env)["socket"]
    os.unlink(sock)
    impostor = socket.socket(socket.AF_UNIX)
    impostor.bind(sock)
    impostor.listen(8)
    received = []
    done = threading.Event()

    def listen():
        impostor.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = impostor.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            conn.settimeout(5)
            try:
                received.append(conn.recv(65536))
            except OSError:
                received.append(b"")
            conn.close()

    thread = threading.Thread(target=listen, daemon=True)
    thread.start()
    env = dict(isolated_env, SOME_API_TOKEN="must-not-leak")
    try:
        p = subprocess.run([dsh_bin(), "mcp"], env=env, input="", capture_output=True, text=True, timeout=60)
    finally:
        done.set()
        thread.join(timeout=30)
        impostor.close()
    assert p.returncode == 1, p
    assert f"the socket {sock} is held by pid {os.getpid()}" in p.stderr, p.stderr
    assert f"the daemon recorded in" in p.stderr and "nothing was sent to it" in p.stderr, p.stderr
    assert received and all(r == b"" for r in received), received


def test_a_runtime_dir_open_to_others_is_refused(isolated_env):
    run = isolated_env["DSH_RUNTIME_DIR"]
    os.chmod(run, 0o755)
    p = dsh(isolated_env, "workspace", "list", check=False)
    assert p.returncode == 1
    assert p.stderr == (
        f"dsh: the runtime directory {run} has mode 0755; it must be private (0700): "
        f"run `chmod 700 {run}`\n"
    )
    assert daemons_of(isolated_env) == []


def test_a_runtime_dir_of_another_user_is_refused(isolated_env):
    if os.getuid() != 0:
        pytest.skip("only root can give a directory to another user")
    run = isolated_env["DSH_RUNTIME_DIR"]
    os.chown(run, 65534, 65534)
    p = dsh(isolated_env, "mcp", check=False)
    assert p.returncode == 1
    assert p.stderr.startswith(f"dsh: the runtime directory {run} belongs to uid 65534, not to you (uid 0)")
    assert daemons_of(isolated_env) == []
    os.chown(run, 0, 0)


def test_an_unreachable_daemon_fails_fast_and_says_why(isolated_env):
    dsh(isolated_env, "workspace", "list")
    pid = info(isolated_env)["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        began = time.monotonic()
        p = subprocess.run([dsh_bin(), "mcp"], env=isolated_env, input="", capture_output=True,
                           text=True, timeout=30)
        took = time.monotonic() - began
    finally:
        os.kill(pid, signal.SIGCONT)
    assert p.returncode == 1
    # the bridge waits 1.5 s for the hello's answer; the rest is starting a
    # process, which a loaded machine can slow down: only a generous bound
    # is asserted, the time is printed
    print(f"an unreachable daemon was reported after {took:.2f} s")
    assert took < 10, took
    assert f"the dsh daemon (pid {pid}) at {info(isolated_env)['socket']} did not answer within 1500 ms" in p.stderr
    assert p.stdout == ""


def test_a_malformed_hello_closes_that_connection_only(isolated_env):
    bridge = RawBridge(isolated_env)
    try:
        reply, rest = raw_hello(isolated_env, {"protocol": 1, "kind": "nonsense"})
        assert reply["error"]["code"] == "MALFORMED_HELLO" and rest == b""
        sock_path = info(isolated_env)["socket"]
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
            s.settimeout(10)
            s.connect(sock_path)
            s.sendall(b"\xff\xfe not json at all\n")
            assert b"MALFORMED_HELLO" in s.recv(65536)
        assert bridge.tool("bash", {"command": "echo alive"})["output"] == "alive\n"
    finally:
        bridge.close()


def test_a_client_of_another_version_never_exchanges_mcp(isolated_env):
    bridge = RawBridge(isolated_env)
    try:
        initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "old", "version": "0"}}}).encode() + b"\n"
        reply, rest = raw_hello(
            isolated_env,
            {"protocol": 1, "version": "0.0.0-other", "kind": "mcp", "cwd": "/", "env": []},
            extra=initialize,
        )
        assert reply["error"]["code"] == "VERSION_MISMATCH"
        assert "a client only talks to a daemon of its own version" in reply["error"]["message"]
        assert rest == b""  # no MCP byte came back
        assert bridge.tool("bash", {"command": "echo alive"})["output"] == "alive\n"
    finally:
        bridge.close()


async def test_a_client_that_disconnects_mid_call_leaves_the_others_served(isolated_env):
    async with connect(isolated_env) as keeper:
        bridge = RawBridge(isolated_env)
        bridge.tool("bash", {"command": "sleep 1000.21 &", "run_in_background": False})
        bridge.send({"jsonrpc": "2.0", "id": 99, "method": "tools/call",
                     "params": {"name": "bash", "arguments": {"command": "echo $$ > /dev/stderr; sleep 1000"}}})
        # call 99's command runs (in a session of its own) before the bridge dies
        wait_until(lambda: [p for p in processes() if p[3] != "Z"
                            and _cmdline(p[0]) == b"sleep\x001000\x00"
                            and _env_has(p[0], isolated_env["DSH_RUNTIME_DIR"])],
                   what="the call's command to run")
        bridge.proc.kill()
        bridge.proc.wait()
        r = ok(await keeper.call_tool("bash", {"command": "echo still"}))
        assert r["output"] == "still\n"
        assert live_named("sleep 1000.21") == []
        # the killed bridge's connection ended and took its command with it
        wait_until(lambda: len(json.loads(dsh(isolated_env, "ps", "--json").stdout)["connections"]) == 1,
                   what="the dropped connection to end")
        wait_until(lambda: not [p for p in processes() if p[3] != "Z"
                                and _cmdline(p[0]) == b"sleep\x001000\x00"
                                and _env_has(p[0], isolated_env["DSH_RUNTIME_DIR"])],
                   what="the dropped call's command to end")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _env_has(pid, text):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return text.encode() in f.read()
    except OSError:
        return False


# ---- lifetime -----------------------------------------------------------------


def test_idle_exit_after_the_last_connection(isolated_env, tmp_path):
    config = write_config(tmp_path, '[daemon]\nidle_exit = "1s"\n')
    bridge = RawBridge(isolated_env, "--config", config)
    pid = info(isolated_env)["pid"]
    sock = info(isolated_env)["socket"]
    # sleep-ok: connected, the daemon must not exit; only time past the 1 s idle_exit shows it
    time.sleep(2)
    assert daemons_of(isolated_env) == [pid]
    bridge.close()
    assert bridge.proc.returncode == 0
    wait_until(lambda: daemons_of(isolated_env) == [], timeout=20, what="the idle exit")
    assert not os.path.exists(sock)
    assert not (pathlib.Path(isolated_env["XDG_DATA_HOME"]) / "dsh" / "daemon.json").exists()


async def test_sigterm_ends_every_terminal_and_job_and_removes_the_socket(isolated_env, tmp_path):
    a = RawBridge(isolated_env)
    b = RawBridge(isolated_env)
    sids = []
    try:
        a.tool("terminal_open", {})
        a.tool("terminal_send", {"id": "pty-1", "text": "sleep 1000.22 &"})
        sids.append(session_of("sleep 1000.22"))
        b.tool("bash", {"command": "sleep 1000.23", "run_in_background": True})
        sids.append(session_of("sleep 1000.23"))
        dsh(isolated_env, "workspace", "create", str(tmp_path))
        assert all(live_in_session(s) for s in sids)
        pid = info(isolated_env)["pid"]
        sock = info(isolated_env)["socket"]
        os.kill(pid, signal.SIGTERM)
        wait_until(lambda: daemons_of(isolated_env) == [], what="the daemon to stop")
        assert [live_in_session(s) for s in sids] == [[], []]
        assert not os.path.exists(sock)
        for bridge in (a, b):
            bridge.proc.wait(timeout=15)
            assert bridge.proc.returncode == 1
            lines = bridge.proc.stderr.read().decode().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"dsh: the dsh daemon (pid {pid}) "), lines
            assert "this MCP connection is over" in lines[0]
        # the store was closed cleanly and holds the write
        listed = json.loads(dsh(isolated_env, "workspace", "list", "--json").stdout)
        assert str(tmp_path) in [w["path"] for w in listed]
    finally:
        kill_sessions(sids, isolated_env)
        a.close()
        b.close()


def _sigkill_round(env, tmp_path, round_no, acknowledged, sids):
    a = RawBridge(env)
    b = RawBridge(env)
    try:
        for bridge in (a, b):
            bridge.tool("terminal_open", {})
            k = 1 if bridge is a else 2
            bridge.tool("terminal_send", {"id": "pty-1" if bridge is a else "pty-2",
                                          "text": f"sleep 1000.{round_no}{k}1 &"})
            sids.append(session_of(f"sleep 1000.{round_no}{k}1"))
            bridge.tool("bash", {"command": f"sleep 1000.{round_no}{k}2", "run_in_background": True})
            sids.append(session_of(f"sleep 1000.{round_no}{k}2"))
        pid = info(env)["pid"]
        stop = threading.Event()
        attempts = [0, 0]

        def write(worker):
            n = 0
            while not stop.is_set():
                d = tmp_path / f"r{round_no}-w{worker}-{n}"
                d.mkdir()
                p = subprocess.run([dsh_bin(), "workspace", "create", str(d)], env=env,
                                   capture_output=True, text=True, timeout=60)
                if p.returncode == 0:
                    acknowledged.append(str(d))
                n += 1
                attempts[worker] += 1

        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            writers = [pool.submit(write, w) for w in range(2)]
            # kill once a varying number of this round's writes were
            # acknowledged, with both writers mid-flight; then let each try
            # again against the dead daemon before stopping them
            start = len(acknowledged)
            wait_until(lambda: len(acknowledged) >= start + 1 + round_no % 3,
                       what="writes acknowledged before the kill")
            os.kill(pid, signal.SIGKILL)
            tried = list(attempts)
            wait_until(lambda: all(attempts[w] > tried[w] for w in range(2)),
                       what="both writers to try again after the kill")
            stop.set()
            for w in writers:
                w.result()
        for bridge in (a, b):
            bridge.proc.wait(timeout=15)
            assert bridge.proc.returncode == 1
            lines = bridge.proc.stderr.read().decode().strip().splitlines()
            assert len(lines) == 1 and lines[0].startswith(f"dsh: the dsh daemon (pid {pid}) exited"), lines
    finally:
        a.close()
        b.close()


def test_sigkill_of_the_daemon_loses_no_acknowledged_write(isolated_env, tmp_path):
    acknowledged = []
    sids = []
    try:
        for round_no in range(20):
            _sigkill_round(isolated_env, tmp_path, round_no, acknowledged, sids)
            # the next command starts a fresh daemon whose store opens and
            # holds every write that was acknowledged
            listed = json.loads(dsh(isolated_env, "workspace", "list", "--json").stdout)
            missing = set(acknowledged) - {w["path"] for w in listed}
            assert missing == set(), f"round {round_no}: lost {sorted(missing)}"
        assert len(acknowledged) >= 20
        bridge = RawBridge(isolated_env)
        assert bridge.tool("bash", {"command": "echo fresh"})["output"] == "fresh\n"
        bridge.close()
    finally:
        kill_sessions(sids, isolated_env)


def test_no_child_outlives_a_sigkilled_daemon(isolated_env, tmp_path):
    sids = []
    try:
        _sigkill_round(isolated_env, tmp_path, 0, [], sids)
        wait_until(lambda: not any(live_in_session(s) for s in sids), timeout=15,
                   what="the children of the killed daemon to end")
    finally:
        kill_sessions(sids, isolated_env)


# ---- upgrades -------------------------------------------------------------------


async def test_an_upgrade_hands_the_store_over_and_the_old_daemon_drains(isolated_env, tmp_path):
    end_work_with_the_client(isolated_env)
    old_env = dict(isolated_env, DSH_TEST_VERSION="0.0.1-old")
    project = tmp_path / "proj"
    project.mkdir()
    async with connect(old_env, cwd=str(project)) as old:
        ok(await old.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        ok(await old.call_tool("terminal_send", {"id": "pty-1", "text": "x = 41"}))
        old_pid = info(isolated_env)["pid"]
        assert info(isolated_env)["version"] == "0.0.1-old"
        # a newer bridge: the old daemon refuses it, a new daemon takes over
        async with connect(isolated_env, cwd=str(project)) as new:
            r = ok(await new.call_tool("bash", {"command": "echo new"}))
            assert r["output"] == "new\n"
            new_pid = info(isolated_env)["pid"]
            assert new_pid != old_pid and info(isolated_env)["version"] != "0.0.1-old"
            assert sorted(daemons_of(isolated_env)) == sorted([old_pid, new_pid])
            # the old agent goes on: its REPL kept its state
            r = ok(await old.call_tool("terminal_send", {"id": "pty-1", "text": "x + 1"}))
            assert r["output"].startswith("42\n")
            ok(await old.call_tool("bash", {"command": "true"}))
            # the registry answers from the new daemon, with both sessions,
            # and the old agent's calls after the hand-over are logged
            wait_until(lambda: len(json.loads(dsh(isolated_env, "session", "list", "--json").stdout)) == 2,
                       what="both sessions to be recorded")

            def old_calls():
                for s in json.loads(dsh(isolated_env, "session", "list", "--json").stdout):
                    shown = json.loads(dsh(isolated_env, "session", "show", s["id"], "--json").stdout)
                    tools = [e["tool"] for e in shown["log"]]
                    if "terminal_open" in tools:
                        return tools
                return []

            wait_until(lambda: old_calls() == ["terminal_open", "terminal_send", "terminal_send", "bash"],
                       what="the old agent's calls to be logged")
    # the old daemon exits once its last connection ended
    wait_until(lambda: daemons_of(isolated_env) == [new_pid], what="the old daemon to drain")


def test_a_daemon_that_hands_over_records_that_it_no_longer_listens(isolated_env, tmp_path):
    """Between removing its socket and releasing the lock, a daemon that
    hands over must not look like a daemon that lost its socket (clients
    would be told to run `dsh daemon stop`, and that would reach it): it
    clears `listening` in daemon.json first. Asked here by the test
    itself, with no new daemon to overwrite the file."""
    dsh(isolated_env, "workspace", "list")
    before = info(isolated_env)
    assert before["listening"] is True and before["socket_id"], before
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(60)
        s.connect(before["socket"])
        f = s.makefile("rwb")
        hello = {"protocol": 1, "version": "0.0.9-newer", "kind": "handover",
                 "socket": str(tmp_path / "newer.sock")}
        f.write(json.dumps(hello).encode() + b"\n")
        f.flush()
        assert json.loads(f.readline())["data"] == {"accepted": True}
        done = json.loads(f.readline())
        assert "error" not in done, done
    # answered once the socket was removed and the lock released
    after = info(isolated_env)
    assert not os.path.exists(before["socket"])
    assert after["pid"] == before["pid"], after
    assert after["listening"] is False and "socket_id" not in after, after
    # with no connection left, it exits
    wait_until(lambda: daemons_of(isolated_env) == [], what="the old daemon to exit")


# ---- people see and join what agents run -------------------------------------


class Tmux:
    """A private tmux server (its own socket) for one test."""

    def __init__(self, tmp_path):
        self.sock = str(tmp_path / "tmux.sock")

    def run(self, *args):
        return subprocess.run(["tmux", "-S", self.sock, *args], capture_output=True, text=True,
                              timeout=30, check=True).stdout

    def start(self, name, env, command):
        exports = " ".join(f"{k}={v}" for k, v in env.items()
                           if k in ("DSH_RUNTIME_DIR", "XDG_DATA_HOME", "XDG_CONFIG_HOME"))
        self.run("new-session", "-d", "-s", name, "-x", "160", "-y", "50",
                 f"env {exports} {command}; sleep 600")

    def screen(self, name):
        return self.run("capture-pane", "-p", "-t", name)

    def wait_for(self, name, text, timeout=30):
        wait_until(lambda: text in self.screen(name), timeout=timeout,
                   what=f"{text!r} on the tmux screen {name}")

    def keys(self, name, *keys):
        self.run("send-keys", "-t", name, *keys)

    def close(self):
        subprocess.run(["tmux", "-S", self.sock, "kill-server"], capture_output=True, timeout=30)


async def test_attach_watches_live_and_write_follows_the_send_rule(isolated_env, tmp_path):
    tmux = Tmux(tmp_path)
    try:
        async with connect(isolated_env) as agent:
            ok(await agent.call_tool("terminal_open", {"command": ["python3", "-q"], "name": "repl"}))
            ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "x = 41"}))
            before = ok(await agent.call_tool("terminal_read", {"id": "pty-1"}))

            # a read-only view: the screen, then the stream as it arrives
            tmux.start("view", isolated_env, f"{shlex.quote(dsh_bin())} attach pty-1")
            tmux.wait_for("view", "x = 41")
            r = ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print('live-' + str(x + 1))"}))
            assert r["output"].startswith("live-42\n") and r["reason"] == "input_wait"
            tmux.wait_for("view", "live-42")
            # watching moved none of the agent's cursors
            again = ok(await agent.call_tool("terminal_read", {"id": "pty-1"}))
            assert again["from"] == before["next"] + 0 or again["from"] >= before["next"]
            assert again["output"] == ""
            # keys in a read-only view never reach the program
            tmux.keys("view", "y = 1", "Enter")
            tmux.wait_for("view", "this view is read-only")
            r = ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print('y' in dir())"}))
            assert r["output"].startswith("False\n")

            # --write: the person's keys arrive
            tmux.start("typing", isolated_env, f"{shlex.quote(dsh_bin())} attach pty-1 --write")
            tmux.wait_for("typing", "False")
            tmux.keys("typing", "y = 6", "Enter")
            tmux.wait_for("view", "y = 6")
            # while the person's command runs (until the test releases it),
            # an agent's send is refused
            person = tmp_path / "person-release"
            os.mkfifo(person)
            tmux.keys("typing", f"open('{person}').read(); print('person-done')", "Enter")
            tmux.wait_for("view", "print('person-done')")
            e = err(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print(1)"}))
            assert e["code"] == "SEND_ACTIVE" and e["retryable"] is True
            await anyio.to_thread.run_sync(person.write_text, "go")
            tmux.wait_for("view", "person-done")

            async def sent_once_free():
                r = await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print(y * 7)"})
                if r.isError:
                    assert err(r)["code"] == "SEND_ACTIVE"
                    return None
                return r

            r = await waiting.eventually(sent_once_free, "the person's command to release the terminal")
            assert ok(r)["output"].startswith("42\n")

            # the person's keys during an agent's active send (until the test
            # releases it) are refused
            agent_release = tmp_path / "agent-release"
            os.mkfifo(agent_release)
            job = ok(await agent.call_tool("terminal_send", {
                "id": "pty-1", "text": f"open('{agent_release}').read(); print('agent-done')",
                "run_in_background": True}))
            # the agent's line is drawn before the person types: a row the
            # view redraws afterwards would draw over the notice
            tmux.wait_for("typing", "print('agent-done')")
            tmux.keys("typing", "z = 1", "Enter")
            tmux.wait_for("typing", "an agent's send is active on pty-1; your keys were not sent")
            await anyio.to_thread.run_sync(agent_release.write_text, "go")
            # the send settles (its output arriving is not yet its end)
            seen = []

            async def settled():
                r = ok(await agent.call_tool("job_output", {"job_id": job["job_id"], "wait_ms": 2000}))
                seen.append(r["output"])
                return r["status"] not in ("running", "stopping")

            await waiting.eventually(settled, "the agent's send to settle")
            assert "agent-done" in "".join(seen)
            # the agent's next send still settles correctly, and `z` never arrived
            r = ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print('z' in dir())"}))
            assert r["output"].startswith("False\n") and r["reason"] == "input_wait"

            # leaving: q in the read-only view, Ctrl-] in the writable one; the REPL lives on
            tmux.keys("view", "q")
            tmux.wait_for("view", "detached from pty-1")
            tmux.keys("typing", "C-]")
            tmux.wait_for("typing", "detached from pty-1")
            r = ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print(x)"}))
            assert r["output"].startswith("41\n")
    finally:
        tmux.close()


def test_attach_to_an_unknown_terminal_says_so(isolated_env):
    dsh(isolated_env, "workspace", "list")
    p = dsh(isolated_env, "attach", "pty-9", check=False)
    assert p.returncode == 1
    assert p.stderr == "dsh: no terminal pty-9; terminal_list shows your terminals, terminal_open starts one\n"
    p = dsh(isolated_env, "attach", "nine", check=False)
    assert p.returncode == 1 and "`nine` is not a terminal id like `pty-1`" in p.stderr


# ---- shared language servers -------------------------------------------------


def rust_analyzers_of(daemon_pid):
    """The live rust-analyzer processes under the daemon (a language
    server runs in a PID namespace of its own, under its session leader)."""
    out = []
    for pid in descendants(daemon_pid):
        if not alive(pid):
            continue
        try:
            with open(f"/proc/{pid}/comm") as f:
                if f.read().strip() == "rust-analyzer":
                    out.append(pid)
        except OSError:
            pass
    return out


async def test_two_agents_share_one_rust_analyzer(isolated_env, tmp_path):
    import shutil
    from test_lsp import FIXTURES, ask

    if shutil.which("rust-analyzer", path=isolated_env.get("PATH")) is None:
        pytest.fail("rust-analyzer is not installed: run `rustup component add rust-analyzer`")
    project = tmp_path / "rust-workspace"
    shutil.copytree(FIXTURES / "rust-workspace", project)
    query = {"op": "definition", "path": "app/src/main.rs", "line": 9, "symbol": "total_area"}
    async with connect(isolated_env, cwd=str(project)) as first:
        d = await ask(first, query)
        assert [i["path"] for i in d["items"]] == ["shapes/src/canvas.rs"]
        daemon = info(isolated_env)["pid"]
        [server] = rust_analyzers_of(daemon)
        async with connect(isolated_env, cwd=str(project)) as second:
            began = time.monotonic()
            r = await second.call_tool("lsp", query)
            took = time.monotonic() - began
            # the first answer is the right one: no LSP_NOT_READY, no cold start
            assert not r.isError, r.content[0].text
            assert [i["path"] for i in r.structuredContent["items"]] == ["shapes/src/canvas.rs"]
            assert rust_analyzers_of(daemon) == [server]
            assert daemons_of(isolated_env) == [daemon]
            print(f"second agent's first definition: {took * 1000:.1f} ms")
