"""The daemon's side doors, end to end: a confined command may not get an
unconfined session from any dsh daemon (a second daemon of the user, or
the one that took over its socket in an upgrade), may not remove or
replace the daemon's socket in the default configuration, a daemon whose
socket was removed is still found and stopped through its lock, and the
accept loop backs off when it runs out of descriptors."""

import json
import os
import pathlib
import resource
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import waiting
from conftest import alive, connect, daemons_of, dsh, dsh_bin, info, make_env, ok, stop_daemons

pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif("--standalone" in os.environ.get("DSH_E2E_MCP_ARGS", ""),
                       reason="these tests are about the daemon"),
]


def data_dir(env):
    return pathlib.Path(env["XDG_DATA_HOME"]) / "dsh"


def evil_config(box):
    """A config that turns the sandbox off, written where a confined
    command could have written it (its workspace)."""
    path = box["ws"] / "evil.toml"
    path.write_text('[sandbox]\nmode = "off"\n')
    return path


ATTACK = """
mkdir -p .git/hooks && echo pwned > .git/hooks/x && echo wrote-hook
cat "$HOME/.ssh/id_rsa"
"""

# Drives a real `dsh mcp` bridge, from inside the sandbox, at the daemon
# the environment names, with a config of its own that turns the sandbox
# off, and asks it to run ATTACK.
VIA_BRIDGE = r"""
import json, os, subprocess, sys
dsh, config, attack = sys.argv[1:4]
env = dict(os.environ, XDG_DATA_HOME=sys.argv[4], DSH_RUNTIME_DIR=sys.argv[5])
p = subprocess.Popen([dsh, "mcp", "--config", config], env=env,
                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
def send(m):
    try:
        p.stdin.write((json.dumps(m) + "\n").encode()); p.stdin.flush()
    except BrokenPipeError:
        pass  # the bridge exited first (refused): reply() then finds no answer
def reply(i):
    for line in p.stdout:
        m = json.loads(line)
        if m.get("id") == i:
            return m
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "inside", "version": "1"}}})
if reply(1) is None:
    p.wait()
    print("bridge exit", p.returncode, p.stderr.read().decode().strip())
    sys.exit(0)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
      "params": {"name": "bash", "arguments": {"command": attack}}})
r = reply(2)
print("served:", json.dumps(r["result"]["structuredContent"]))
p.stdin.close(); p.wait()
"""

# Speaks the socket protocol itself (a confined command cannot read
# daemon.json, so a real bridge gives up before the hello): learns the
# daemon's version from its VERSION_MISMATCH, then says hello again with
# it and runs ATTACK over MCP.
VIA_SOCKET = r"""
import glob, json, os, socket, sys
config, attack = sys.argv[1:3]
found = glob.glob(os.path.join(os.environ["DSH_RUNTIME_DIR"], "dsh-*.sock"))
print("sockets found:", len(found))
if len(found) != 1:
    sys.exit(0)
[path] = found
def hello(version):
    s = socket.socket(socket.AF_UNIX); s.settimeout(60); s.connect(path)
    f = s.makefile("rwb")
    f.write(json.dumps({"protocol": 1, "version": version, "kind": "mcp", "preset": None,
                        "config": config, "cwd": os.getcwd(),
                        "env": [[k, v] for k, v in os.environ.items()]}).encode() + b"\n")
    f.flush()
    return s, f, json.loads(f.readline())
s, f, first = hello("0")
print("first reply:", json.dumps(first))
if first.get("error", {}).get("code") != "VERSION_MISMATCH":
    sys.exit(0)
s, f, second = hello(first["version"])
print("second reply:", json.dumps(second))
if "error" in second:
    sys.exit(0)
def send(m):
    f.write(json.dumps(m).encode() + b"\n"); f.flush()
def reply(i):
    for line in f:
        m = json.loads(line)
        if m.get("id") == i:
            return m
send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "inside", "version": "1"}}})
reply(1)
send({"jsonrpc": "2.0", "method": "notifications/initialized"})
send({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
      "params": {"name": "bash", "arguments": {"command": attack}}})
print("served:", json.dumps(reply(2)["result"]["structuredContent"]))
"""


# ---- 1. another daemon is not an unconfined shell ---------------------------


# Unlisted, the guard of connect refuses the second daemon's socket; listed
# in `unix_sockets`, the connection is made by a process marked as
# confined, and the daemon refuses it for that.
@pytest.mark.parametrize("listed", [False, True])
async def test_a_confined_command_gets_no_session_from_a_second_daemon(box, tmp_path, listed):
    # daemon 2: the same user, another data dir and runtime dir, started
    # outside any sandbox
    env2 = make_env(tmp_path / "second")
    try:
        dsh(env2, "workspace", "list")
        [daemon2] = daemons_of(env2)
        evil = evil_config(box)
        (box["ws"] / "via_bridge.py").write_text(VIA_BRIDGE)
        args = []
        if listed:
            config = box["dir"] / "listed.toml"
            runtime = env2["DSH_RUNTIME_DIR"]
            config.write_text(f'[sandbox]\nunix_sockets = ["{runtime}"]\n')
            args = ["--config", str(config)]
        async with connect(box["env"], *args, cwd=box["ws"]) as s:
            command = shlex.join(["python3", "via_bridge.py", dsh_bin(), str(evil), ATTACK,
                                  env2["XDG_DATA_HOME"], env2["DSH_RUNTIME_DIR"]])
            r = ok(await s.call_tool("bash", {"command": command, "timeout_ms": 120000}))
        out = r["output"]
        print(out)
        assert r["sandbox"]["enforced"], r
        assert not (box["ws"] / ".git" / "hooks" / "x").exists(), out
        assert "PRIVATE KEY" not in out and "served:" not in out, out
        assert "bridge exit 1" in out, out
        if listed:
            # (the connecting child has exited by the time the daemon
            # looks, or it is seen under no_new_privs: refused either way)
            assert "dsh: this client is refused: " in out, out
        else:
            assert "cannot connect to the dsh daemon" in out and "Permission denied" in out, out
        # daemon 2 serves the person as before
        assert daemons_of(env2) == [daemon2]
        assert dsh(env2, "ps", "--json").stdout
    finally:
        stop_daemons(env2)
        shutil.rmtree(env2["DSH_RUNTIME_DIR"], ignore_errors=True)


# With a mount namespace the runtime dir inside the sandbox is empty (the
# socket is not there to reach); without one ("no-userns") the socket is
# reachable and the daemon itself must refuse the client.
# "no-connect-guard": the guard of connect would refuse the socket first
# (tested on its own); without it the daemon's own check is what is left.
@pytest.mark.parametrize("pretend", ["", "no-userns,no-connect-guard"])
async def test_a_confined_command_gets_no_session_from_the_daemon_that_took_over(box, pretend):
    box = dict(box, env=dict(box["env"], DSH_SANDBOX_TEST_PRETEND=pretend))
    old_env = dict(box["env"], DSH_TEST_VERSION="0.0.1-old")
    evil = evil_config(box)
    (box["ws"] / "via_socket.py").write_text(VIA_SOCKET)
    async with connect(old_env, cwd=box["ws"]) as old:
        old_pid = info(box["env"])["pid"]
        # a newer bridge: a new daemon takes the store and the socket path
        async with connect(box["env"], cwd=box["ws"]) as new:
            ok(await new.call_tool("bash", {"command": "true"}))
            new_pid = info(box["env"])["pid"]
            assert new_pid != old_pid
            # a command of the old daemon reaches the new one at the same path
            r = ok(await old.call_tool("bash", {
                "command": f"python3 via_socket.py {evil} '{ATTACK}'", "timeout_ms": 120000}))
    out = r["output"]
    print(out)
    assert r["sandbox"]["enforced"], r
    assert not (box["ws"] / ".git" / "hooks" / "x").exists(), out
    assert "PRIVATE KEY" not in out and "served:" not in out, out
    if not pretend:
        # the sandbox's own mount namespace shows it no socket to reach
        assert "sockets found: 0" in out and "first reply: " not in out, out
        return
    assert "sockets found: 1" in out, out
    # the first hello reached the new daemon, and was refused for what it is
    first = json.loads(out.split("first reply: ", 1)[1].splitlines()[0])
    assert first["pid"] == new_pid, first
    assert first["error"]["code"] == "SANDBOXED_CLIENT", first
    assert "no_new_privs" in first["error"]["message"], first


# ---- 2. the runtime dir and a daemon without its socket ----------------------


@pytest.fixture
def default_dirs():
    """An environment with no DSH_RUNTIME_DIR and no XDG_RUNTIME_DIR (the
    runtime dir is dsh's default), its own TMPDIR, HOME and data dir side
    by side in a short directory (a socket path must fit in 108 bytes).
    Daemons are told apart by their XDG_DATA_HOME; they are stopped at
    teardown."""
    root = pathlib.Path(tempfile.mkdtemp(prefix="dsh-sec-"))
    env = dict(os.environ)
    env.pop("DSH_RUNTIME_DIR", None)
    env.pop("XDG_RUNTIME_DIR", None)
    for name in ("tmp", "home", "ws", "data", "config"):
        (root / name).mkdir()
    env.update(TMPDIR=str(root / "tmp"), HOME=str(root / "home"),
               XDG_DATA_HOME=str(root / "data"), XDG_CONFIG_HOME=str(root / "config"))
    env.setdefault("DSH_LOG", "warn")
    marker = f"XDG_DATA_HOME={env['XDG_DATA_HOME']}".encode()
    try:
        yield env, root
    finally:
        stop_daemons(env, marker=marker)
        shutil.rmtree(root, ignore_errors=True)


# "no-connect-guard": the guard of connect would refuse the socket first
# (tested on its own); without it the daemon's own check is what is left.
@pytest.mark.parametrize("pretend", ["", "no-userns,no-connect-guard"])
async def test_a_confined_command_cannot_remove_or_replace_the_socket_by_default(
    default_dirs, pretend
):
    env, root = default_dirs
    env = dict(env, DSH_SANDBOX_TEST_PRETEND=pretend)
    async with connect(env, cwd=root / "ws") as s:
        sock = info(env)["socket"]
        before = os.stat(sock).st_ino
        r = ok(await s.call_tool("bash", {"command": (
            f"rm -f {sock}; echo rm=$?; "
            f"python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' {sock}"
            "; echo bind=$?")}))
        out = r["output"]
        print(sock, out)
        assert r["sandbox"]["enforced"], r
        assert os.path.exists(sock) and os.stat(sock).st_ino == before, out
        # hidden (rm -f of a name that is not there succeeds), or refused
        assert ("rm=1" in out or not pretend) and "bind=1" in out, out
        # the daemon is still reachable by everyone
        assert ok(await s.call_tool("bash", {"command": "echo still"}))["output"] == "still\n"
        # and a dsh run inside the sandbox says why it may not use it
        r = ok(await s.call_tool("bash", {"command": f"{shlex.quote(dsh_bin())} daemon status; echo rc=$?"}))
        assert "rc=1" in r["output"], r["output"]
        why = ["started by the dsh daemon it is calling"] if pretend else [
            "no dsh daemon is running", "cannot use the runtime directory"]
        assert any(w in r["output"] for w in why), r["output"]
    assert json.loads(dsh(env, "daemon", "status", "--json").stdout)["socket"] == sock


def test_a_daemon_whose_socket_was_removed_is_found_and_stopped(isolated_env):
    env = isolated_env
    dsh(env, "workspace", "list")
    pid, sock = info(env)["pid"], info(env)["socket"]
    os.unlink(sock)

    status = dsh(env, "daemon", "status", check=False)
    assert status.returncode == 1, status
    assert f"(pid {pid}) of {data_dir(env)} no longer has its socket {sock}" in status.stderr, status
    assert "`dsh daemon stop`" in status.stderr, status
    status = dsh(env, "daemon", "status", "--json", check=False)
    assert status.returncode == 1
    shown = json.loads(status.stdout)
    assert shown["pid"] == pid and shown["reachable"] is False and shown["socket"] == sock

    # a command that would start a daemon says so at once, instead of
    # waiting 15 s for a new daemon that cannot take the lock
    began = time.monotonic()
    listed = dsh(env, "workspace", "list", check=False)
    took = time.monotonic() - began
    print(f"reported after {took:.2f} s")
    assert listed.returncode == 1, listed
    assert f"(pid {pid}) of {data_dir(env)} no longer has its socket" in listed.stderr, listed
    assert took < 14, took

    stopped = dsh(env, "daemon", "stop")
    assert stopped.stdout == (
        f"stopped the dsh daemon (pid {pid}), found through its lock as its socket {sock} did not "
        "lead to it; its terminals and jobs were ended\n"), stopped
    assert not alive(pid) and daemons_of(env) == []
    assert not (data_dir(env) / "daemon.json").exists()
    # and the next command starts a new one
    assert dsh(env, "workspace", "list", "--json").stdout == "[]\n"
    assert info(env)["pid"] != pid


def start_time_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[19])


def test_stop_never_signals_a_process_that_only_daemon_json_names(isolated_env):
    """(A guard of the lock route, not a reproduction: before it existed,
    `dsh daemon stop` signalled nothing without a socket.)"""
    env = isolated_env
    dsh(env, "workspace", "list")
    record = info(env)
    os.kill(record["pid"], signal.SIGKILL)
    waiting.wait_until(lambda: not alive(record["pid"]), "the daemon to die")
    os.unlink(record["socket"])
    # daemon.json names a live process of dsh's own program, with its real
    # start time, that holds no lock: a stranger that reused the pid
    stranger = subprocess.Popen([dsh_bin(), "mcp", "--standalone"], env=env,
                                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
    try:
        forged = dict(record, pid=stranger.pid, start_time=start_time_of(stranger.pid),
                      listening=True)
        (data_dir(env) / "daemon.json").write_text(json.dumps(forged))
        out = dsh(env, "daemon", "stop").stdout
        assert out.startswith("no dsh daemon is running for "), out
        assert stranger.poll() is None
        status = dsh(env, "daemon", "status", check=False)
        assert status.stderr.startswith("dsh: no dsh daemon is running for "), status
    finally:
        stranger.kill()
        stranger.wait()


# ---- 3. the accept loop backs off on EMFILE ----------------------------------


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def test_the_accept_loop_backs_off_when_descriptors_run_out(isolated_env, tmp_path):
    env = isolated_env
    log = tmp_path / "daemon.err"
    limit = 48  # an idle daemon holds about 16 descriptors

    def low_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))

    with open(log, "wb") as err:
        daemon = subprocess.Popen([dsh_bin(), "daemon"], env=env, stdin=subprocess.DEVNULL,
                                  stdout=err, stderr=err, preexec_fn=low_limit)
    try:
        waiting.wait_until(lambda: dsh(env, "daemon", "status", check=False).returncode == 0,
                           "the daemon to serve")
        sock = info(env)["socket"]
        held = []
        try:
            # connections that say nothing: each holds descriptors in the
            # daemon for the hello's 10 s; the rest wait in the backlog
            for _ in range(3 * limit):
                c = socket.socket(socket.AF_UNIX)
                held.append(c)
                c.connect(sock)
            waiting.wait_until(lambda: b"accept failed" in log.read_bytes(), "an accept to fail")
            start_size, start_cpu = log.stat().st_size, cpu_seconds(daemon.pid)
            # sleep-ok: what is checked is that nothing happens during this span (no spin, no flood)
            time.sleep(3)
            grown = log.stat().st_size - start_size
            cpu = cpu_seconds(daemon.pid) - start_cpu
            print(f"over 3 s out of descriptors: the log grew {grown} bytes, "
                  f"the daemon used {cpu:.2f} s of CPU")
            with open(log, "rb") as f:
                head = f.read(65_536).decode(errors="replace")
            assert grown < 16_384 and log.stat().st_size < 65_536, head[-2000:]
            # an accept loop that retried at once would spin a core (about
            # 3 s of CPU here, less on a loaded machine); backing off, it
            # wakes a few times a second
            assert cpu < 0.5, f"the daemon used {cpu:.2f} s of CPU in 3 s out of descriptors"
            assert "Too many open files" in head, head[-2000:]
            assert "new clients wait until some are free" in head, head[-2000:]
        finally:
            for c in held:
                c.close()
        # once the connections are gone, it serves again
        waiting.wait_until(lambda: dsh(env, "ps", "--json", check=False).returncode == 0,
                           "dsh ps to be served again", timeout_s=60)
        assert json.loads(dsh(env, "ps", "--json").stdout)["connections"] == []
        dsh(env, "daemon", "stop")
        daemon.wait(timeout=60)
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
