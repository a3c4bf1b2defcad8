"""dsh beyond one machine: `dsh mcp --remote` through a real OpenSSH
server on loopback (its own port, a throwaway host key and user key, the
remote side's directories its own) and through `exec:` with a local
command standing in for `docker exec`. The build installed on the target
is the real static one (`cargo xtask static`, named by DSH_REMOTE_BINARY).
No test reaches an address outside loopback."""

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import re
import shlex

import anyio
import pytest
from mcp import types

from loopback_ssh import HOST, LoopbackSshd, free_port
from conftest import (ROOT, ask_lsp, connect, descendants, dsh, dsh_bin, err, is_pidns_helper, ok, processes,
                      stop_daemons, text_of, wait_settled)
from test_daemon import Tmux
from test_secrets import GETPASS, SECRET, answer_on_a_terminal
from test_ts_client import FIXTURES, run_ts_client
from test_ui import SHOTS, Browser, ui_url
from waiting import eventually, wait_until

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

RUST_WORKSPACE = ROOT / "tests" / "fixtures" / "lsp" / "rust-workspace"


def static_build() -> str:
    path = os.environ.get("DSH_REMOTE_BINARY", "")
    if not path or not os.path.isfile(path):
        pytest.fail(
            "DSH_REMOTE_BINARY names no static dsh: build it with `cargo xtask static` "
            "(`cargo xtask test` does) and name target/x86_64-unknown-linux-musl/static/dsh"
        )
    return path


class Remote:
    """The remote side's own directories (what its user's XDG dirs would be)."""

    def __init__(self, root: pathlib.Path):
        self.root = root
        self.data = root / "data"
        self.env = {
            "XDG_DATA_HOME": str(root / "data"),
            "XDG_CONFIG_HOME": str(root / "config"),
            "XDG_STATE_HOME": str(root / "state"),
            # short: a socket path must fit in 108 bytes
            "DSH_RUNTIME_DIR": tempfile.mkdtemp(prefix="dsh-remote-run-"),
            "DSH_LOG": "warn",
        }

    def installed(self):
        return sorted((self.data / "dsh" / "bin").glob("dsh-*"))

    def daemons(self):
        """The remote daemons: processes run from the installed build
        whose environment names the remote runtime dir."""
        marker = f"DSH_RUNTIME_DIR={self.env['DSH_RUNTIME_DIR']}".encode()
        out = []
        for pid, _ppid, _sid, state in processes():
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    argv = f.read().split(b"\0")
                with open(f"/proc/{pid}/environ", "rb") as f:
                    environ = f.read().split(b"\0")
            except OSError:
                continue
            if (b"daemon" in argv and marker in environ and state not in ("Z", "X")
                    and not is_pidns_helper(pid)):
                out.append(pid)
        return out

    def stop(self):
        for pid in self.daemons():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        with contextlib.suppress(AssertionError):
            wait_until(lambda: not self.daemons(), "the remote daemons to exit")
        for pid in self.daemons():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(self.env["DSH_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def remote(tmp_path):
    r = Remote(tmp_path / "remote")
    r.root.mkdir()
    try:
        yield r
    finally:
        r.stop()


@pytest.fixture
def sshd(tmp_path, remote):
    """A real OpenSSH server on loopback whose logins get the remote
    side's directories, and the local environment that reaches it."""
    with LoopbackSshd(tmp_path / "ssh", {**remote.env, "PATH": os.environ["PATH"]}) as server:
        env = local_env(tmp_path)
        env["DSH_SSH_COMMAND"] = server.ssh_command
        yield {"env": env, "port": server.port, "log": server.log, "pid": server.server.pid}


# The local environments local_env makes: after each test, a local daemon
# one of them started (`dsh ui` does) is stopped and its short runtime dir
# removed.
_LOCAL_ENVS = []


@pytest.fixture(autouse=True)
def _end_local_sides():
    yield
    while _LOCAL_ENVS:
        env = _LOCAL_ENVS.pop()
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)


def local_env(tmp_path):
    """The local side: the test's own XDG dirs (no local daemon is needed
    or started) and the static build to install."""
    env = dict(os.environ)
    xdg = tmp_path / "local-xdg"
    env.update(
        XDG_CONFIG_HOME=str(xdg / "config"),
        XDG_DATA_HOME=str(xdg / "data"),
        XDG_STATE_HOME=str(xdg / "state"),
        # short: ssh's control socket lives there, and a socket path must fit in 108 bytes
        DSH_RUNTIME_DIR=tempfile.mkdtemp(prefix="dsh-run-"),
    )
    env["DSH_REMOTE_BINARY"] = static_build()
    env.pop("XDG_RUNTIME_DIR", None)
    _LOCAL_ENVS.append(env)
    return env


def sha256(path) -> str:
    return hashlib.sha256(pathlib.Path(path).read_bytes()).hexdigest()


def ssh_of_bridge():
    """The `ssh` processes started by this test's `dsh mcp` bridges."""
    me = os.getpid()
    table = {pid: ppid for pid, ppid, _sid, _state in processes()}

    def descends_from_me(pid):
        seen = 0
        while pid in table and seen < 64:
            pid = table[pid]
            if pid == me:
                return True
            seen += 1
        return False

    out = []
    for pid in table:
        try:
            comm = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        if comm == "ssh" and descends_from_me(pid):
            out.append(pid)
    return out


async def test_ssh_bootstraps_an_empty_host_and_serves_every_tool_there(sshd, remote, tmp_path):
    ws = remote.root / "work space"  # a path that needs quoting on the far side
    shutil.copytree(RUST_WORKSPACE, ws)
    assert remote.installed() == []
    target = f"ssh://{HOST}{str(ws).replace(' ', '%20')}"
    errlog = tmp_path / "bridge.err"
    with open(errlog, "w+") as errors:
        async with connect(sshd["env"], "--remote", target, errlog=errors) as s:
            # the bridge installed the static build in the remote user's data dir, checked
            [installed] = remote.installed()
            assert sha256(installed) == sha256(static_build())
            assert installed.name.startswith("dsh-") and sha256(installed)[:16] in installed.name
            assert stat.S_IMODE(installed.parent.stat().st_mode) == 0o700
            assert f"installing dsh on {HOST}" in errlog.read_text()

            # bash runs on the far side, in the remote workspace, with the remote user's dirs
            r = await s.call_tool("bash", {"command": "pwd; echo $XDG_DATA_HOME"})
            out = text_of(r)
            assert f"{ws}\n{remote.data}\n" in out, out
            assert "\n[sandbox: " in out  # the sandbox line of the far side's sandbox

            # a terminal keeps its state there
            t = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
            assert t["resume_key"].startswith("dsh-rk-")
            ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "x = 6 * 7"}))
            r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "print(x)"}))
            assert "42" in r["output"]

            # a job
            j = ok(await s.call_tool("bash", {"command": "echo from-a-job", "run_in_background": True}))
            assert (await wait_settled(s, j["job_id"]))["status"] == "completed"
            r = ok(await s.call_tool("job_output", {"job_id": j["job_id"], "since": 0}))
            assert "from-a-job" in r["output"], r

            # a language server query, answered by rust-analyzer on the far side
            r = await ask_lsp(s, {"op": "symbols", "path": "shapes/src/lib.rs"})
            assert not r.isError, err(r)
            kinds = {x["name"]: x["kind"] for x in r.structuredContent["symbols"]}
            assert kinds["Circle"] == "struct"
            ok(await s.call_tool("terminal_close", {"id": t["id"]}))
        assert remote.daemons(), "the daemon on the target serves the next connection"

    # a second connection finds the build in place: nothing is sent again
    errlog2 = tmp_path / "bridge2.err"
    with open(errlog2, "w+") as errors:
        async with connect(sshd["env"], "--remote", f"ssh://{HOST}", errlog=errors) as s:
            r = ok(await s.call_tool("bash", {"command": "echo again"}))
            assert "again" in r["output"]
    assert "installing" not in errlog2.read_text()
    assert len(remote.installed()) == 1


def test_the_typescript_sdk_drives_a_dsh_across_ssh(sshd, remote, tmp_path):
    """The second real client, the official TypeScript SDK
    (`tests/node/mcp_client.mjs`, as in test_ts_client.py), through `dsh
    mcp --remote ssh://…` and a real sshd: every message of the far side
    (tool list, progress, results, errors) passes its schemas."""
    project = remote.root / "python project"  # a path that needs quoting on the far side
    shutil.copytree(FIXTURES / "python", project)
    target = f"ssh://{HOST}{str(project).replace(' ', '%20')}"
    env = dict(sshd["env"], DSH_BIN=dsh_bin(), PROJECT=str(tmp_path),
               DSH_MCP_ARGS=json.dumps(["--remote", target]))
    run_ts_client("mcp_client.mjs", env, "typescript sdk client: ok")
    # the tools ran on the far side: its build was installed there
    assert len(remote.installed()) == 1


async def test_a_dropped_stream_answers_at_once_and_the_agent_gets_its_work_back(sshd, remote, tmp_path):
    ws = remote.root / "ws"
    ws.mkdir()
    started = tmp_path / "started"
    async with connect(sshd["env"], "--remote", f"ssh://{HOST}{ws}") as s:
        t = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "x = 41 + 1"}))
        program = (
            "import time, pathlib\n"
            f"pathlib.Path({str(started)!r}).write_text('y')\n"
            "for i in range(40):\n"
            "    print('tick', i, flush=True)\n"
            "    time.sleep(0.1)  # sleep-ok: the program under test prints for four seconds\n"
            "\n"
        )
        result = {}

        async def long_send():
            result["r"] = await s.call_tool("terminal_send", {"id": t["id"], "text": program, "timeout_ms": 60000})

        async with anyio.create_task_group() as tg:
            tg.start_soon(long_send)
            await anyio.to_thread.run_sync(lambda: wait_until(started.exists, "the send to start on the far side"))
            [ssh] = ssh_of_bridge()
            os.kill(ssh, signal.SIGKILL)
        # the call in flight is answered at once, with what to do
        e = err(result["r"])
        assert e["code"] == "REMOTE_DISCONNECTED" and e["retryable"] is True
        assert "terminal_read" in e["message"]

        # the bridge reconnected and took the terminal back: same id
        listed = ok(await s.call_tool("terminal_list", {}))
        assert [x["id"] for x in listed["terminals"]] == [t["id"]]
        assert len(ssh_of_bridge()) == 1

        # nothing the program printed while the stream was down is lost
        async def every_tick():
            r = ok(await s.call_tool("terminal_read", {"id": t["id"], "since": 0}))
            return "tick 39" in r["output"] and r["output"]

        output = await eventually(every_tick, "the program's last line")
        assert re.findall(r"^tick (\d+)$", output, re.M) == [str(i) for i in range(40)]
        # and the REPL kept its state
        r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "print(x)"}))
        assert "42" in r["output"]


async def test_work_that_cannot_be_taken_back_is_said_to_the_model(sshd, remote, tmp_path):
    """The target's daemon went away (a reboot, an upgrade) and with it the
    agent's work: the bridge reconnects to a new daemon, whose answer to the
    resume key is a refusal. The model hears it in its next tool result,
    once, with what to do, rather than meeting ids that are gone."""
    ws = remote.root / "ws"
    ws.mkdir()
    async with connect(sshd["env"], "--remote", f"ssh://{HOST}{ws}") as s:
        t = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        [daemon] = remote.daemons()
        os.kill(daemon, signal.SIGTERM)
        await anyio.to_thread.run_sync(lambda: wait_until(lambda: not remote.daemons(), "the far daemon to exit"))

        # Calls that meet the dropping stream are answered REMOTE_DISCONNECTED;
        # the first one answered after the reconnection carries the notice.
        async def answered():
            r = await s.call_tool("terminal_list", {})
            return None if r.isError and err(r)["code"] == "REMOTE_DISCONNECTED" else r

        r = await eventually(answered, "a call answered after the reconnection")
        assert not r.isError, r
        notice = r.content[0].text
        assert notice.startswith("[dsh]") and "could not be taken back" in notice, notice
        assert "terminal_list" in notice
        assert ok(r)["terminals"] == []
        # once only
        again = await s.call_tool("terminal_list", {})
        assert "could not be taken back" not in text_of(again)
        # and the id it had is refused as unknown, not hung
        e = err(await s.call_tool("terminal_read", {"id": t["id"]}))
        assert e["code"] != "REMOTE_DISCONNECTED", e


async def test_a_stream_gone_quiet_is_noticed_and_the_work_taken_over(sshd, remote, tmp_path):
    """A network that goes quiet (a laptop asleep, a new Wi-Fi) sends no
    end to either side: the far side's connection stays open as far as
    its daemon knows. The bridge notices through ssh's keep-alives,
    answers the call in flight, reconnects, and the resume key takes the
    work over from the connection that still seems open."""
    ws = remote.root / "ws"
    ws.mkdir()
    async with connect(sshd["env"], "--remote", f"ssh://{HOST}{ws}") as s:
        t = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "x = 41 + 1"}))
        # The server side of this connection stops answering; the far
        # side's `dsh mcp` is untouched, so its daemon sees it open.
        quiet = [p for p in descendants(sshd["pid"])
                 if pathlib.Path(f"/proc/{p}/comm").read_text().strip() in ("sshd", "sshd-session")]
        assert quiet
        for pid in quiet:
            os.kill(pid, signal.SIGSTOP)
        try:
            r = await s.call_tool("terminal_send", {"id": t["id"], "text": "print(x)", "timeout_ms": 120000})
            e = err(r)
            assert e["code"] == "REMOTE_DISCONNECTED", e
            listed = ok(await s.call_tool("terminal_list", {}))
            assert [x["id"] for x in listed["terminals"]] == [t["id"]]
            r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "print(x * 2)"}))
            assert "84" in r["output"]
        finally:
            for pid in quiet:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


async def test_people_here_see_the_remote_host_and_attach_across_it(sshd, remote, tmp_path):
    ws = remote.root / "ws"
    ws.mkdir()
    env = sshd["env"]
    logins = lambda: sum("Accepted publickey" in line for line in sshd["log"])  # noqa: E731
    async with connect(env, "--remote", f"ssh://{HOST}{ws}") as s:
        t = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "x = 41"}))
        before = logins()
        # `dsh ps` here shows the host's agents, the host in every row
        shown = json.loads(dsh(env, "ps", "--json").stdout)
        [r] = shown["remotes"]
        assert r["host"] == HOST and r["target"] == f"ssh://{HOST}{ws}"
        connections = r["snapshot"]["connections"]
        assert connections and all(c["host"] == HOST for c in connections)
        assert f"{HOST}:{t['id']}" in [x["id"] for c in connections for x in c["terminals"]]
        table = dsh(env, "ps").stdout
        assert f"{HOST}:{t['id']}" in table and f"on {HOST}" in table, table
        # over the bridge's own ssh connection: no new login
        assert logins() == before

        # `dsh attach HOST:pty-N` watches the far side's terminal live
        tmux = Tmux(tmp_path)
        try:
            exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items()
                               if k in ("DSH_RUNTIME_DIR", "DSH_SSH_COMMAND", "XDG_DATA_HOME", "XDG_CONFIG_HOME"))
            tmux.run("new-session", "-d", "-s", "view", "-x", "160", "-y", "50",
                     f"env {exports} {shlex.quote(dsh_bin())} attach {HOST}:{t['id']}; sleep 600")  # sleep-ok: keeps the pane for capture
            tmux.wait_for("view", "x = 41")
            r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "print('seen-' + str(x + 1))"}))
            assert "seen-42" in r["output"]
            tmux.wait_for("view", "seen-42")
            tmux.keys("view", "q")
            tmux.wait_for("view", f"left {HOST}:{t['id']}")
        finally:
            tmux.close()
        assert logins() == before

        # the page here (`dsh ui`, in a real browser) shows the host too:
        # its section, the host in every agent's heading and row id
        browser = Browser(tmp_path)
        try:
            url = ui_url(env)
            base = url.split("/?login=")[0]
            await browser.ado("goto", url=url)
            # signed in: the one-time link lands on the workspaces page
            await browser.ado("wait_selector", selector='body[data-page="workspaces"]')
            await browser.ado("goto", url=base + "/live")
            row = f'#live section.remote[data-host="{HOST}"] tr[data-terminal="{HOST}:{t["id"]}"]'
            await browser.ado("wait_selector", selector=row)
            agent = (await browser.ado("text", selector=f'#live section.remote[data-host="{HOST}"] section.agent h2'))["text"]
            assert f"on {HOST}" in agent, agent
            await browser.ado("wait_text", selector="#live", text=f"dsh attach {HOST}:pty-N")
            await browser.ado("screenshot", path=str(SHOTS / "live-remote.png"))
            assert logins() == before
            assert (await browser.ado("url"))["console_errors"] == []
        except BaseException:
            browser.close()
            raise
    # once its bridge is gone, the host is gone from `dsh ps` and the page
    shown = json.loads(dsh(env, "ps", "--json").stdout)
    assert "remotes" not in shown

    async def host_gone():
        script = "document.querySelector('#live section.remote') === null"
        return (await browser.ado("eval", script=script))["value"]

    try:
        await eventually(host_gone, "the page to drop the host whose bridge ended")
        await browser.ado("wait_text", selector="#live", text="No agent is connected to this dsh daemon")
    finally:
        browser.close()


async def test_exec_streams_work_like_docker_exec(remote, tmp_path):
    env = local_env(tmp_path)
    # `env VAR=… ` stands in for `docker exec -i NAME`: a command whose
    # stdio is a stream into "the target" (here, the remote side's dirs).
    assign = " ".join(f"{k}={v}" for k, v in remote.env.items())
    async with connect(env, "--remote", f"exec:env {assign}") as s:
        r = ok(await s.call_tool("bash", {"command": "echo $XDG_DATA_HOME"}))
        assert str(remote.data) in r["output"]
        t = ok(await s.call_tool("terminal_open", {"command": ["bash", "--norc"]}))
        r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "echo $((6 * 7))"}))
        assert "42" in r["output"]
    assert len(remote.installed()) == 1


async def test_the_readmes_build_alone_gives_a_remote_that_works(remote, tmp_path):
    """No DSH_REMOTE_BINARY and no static build: the README's build (a
    dynamically linked dsh) installs itself on a target whose C library is
    this machine's, and serves there. With the project's static build of
    this version beside it, that one is installed instead."""
    target = tmp_path / "target"
    (target / "release").mkdir(parents=True)
    dynamic = target / "release" / "dsh"
    shutil.copy2(dsh_bin(), dynamic)
    env = local_env(tmp_path)
    del env["DSH_REMOTE_BINARY"]
    assign = " ".join(f"{k}={v}" for k, v in remote.env.items())
    errors = tmp_path / "bridge-stderr"
    with errors.open("w+") as errlog:
        async with connect(env, "--remote", f"exec:env {assign}", command=[str(dynamic)], errlog=errlog) as s:
            r = ok(await s.call_tool("bash", {"command": "echo remote-$((6 * 7))"}))
            assert "remote-42" in r["output"], r
    assert "dynamically linked" in errors.read_text(), errors.read_text()
    assert [sha256(p) for p in remote.installed()] == [sha256(dynamic)]
    sibling = target / "x86_64-unknown-linux-musl" / "static-test" / "dsh"
    sibling.parent.mkdir(parents=True)
    shutil.copy2(static_build(), sibling)
    async with connect(env, "--remote", f"exec:env {assign}", command=[str(dynamic)]) as s:
        ok(await s.call_tool("bash", {"command": "true"}))
    assert sha256(sibling) in [sha256(p) for p in remote.installed()]


def far_bridges(remote):
    """The far side's `dsh mcp` processes: the installed build, run as `mcp`."""
    out = []
    for pid, _ppid, _sid, state in processes():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if argv[0].startswith(str(remote.data).encode()) and b"mcp" in argv and state not in ("Z", "X"):
            out.append(pid)
    return out


async def test_a_stalled_exec_peer_is_ended_and_the_work_taken_back(remote, tmp_path):
    """An exec stream has no keep-alive of its own: a peer that stops
    reading and answering (a paused container) would hold calls forever.
    With calls in flight and the target quiet, the bridge asks an MCP
    `ping`; unanswered, the stream is ended, the call answered, and the
    work taken back on a new stream. A long call of a target that still
    answers is left alone."""
    env = local_env(tmp_path)
    assign = " ".join(f"{k}={v}" for k, v in remote.env.items())
    async with connect(env, "--remote", f"exec:env {assign}") as s:
        t = ok(await s.call_tool("terminal_open", {"command": ["python3", "-q"]}))
        # longer than the quiet spell after which the bridge pings: answered, kept
        slow = "import time; time.sleep(8); print('slept')"  # sleep-ok: the program under test is busy for 8 s
        r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": slow, "timeout_ms": 60000}))
        assert "slept" in r["output"], r
        [bridge] = far_bridges(remote)
        os.kill(bridge, signal.SIGSTOP)
        e = err(await s.call_tool("terminal_list", {}))
        assert e["code"] == "REMOTE_DISCONNECTED", e
        assert "not even a ping" in e["message"], e
        listed = ok(await s.call_tool("terminal_list", {}))
        assert [x["id"] for x in listed["terminals"]] == [t["id"]]
        assert bridge not in far_bridges(remote)
        r = ok(await s.call_tool("terminal_send", {"id": t["id"], "text": "print(6 * 7)"}))
        assert "42" in r["output"]


class RawBridge:
    """A `dsh mcp --remote` bridge spoken to in raw JSON-RPC lines, as an
    MCP client would; every message it sends is kept in `seen`."""

    def __init__(self, sshd, ws):
        self.proc = subprocess.Popen([dsh_bin(), "mcp", "--remote", f"ssh://{HOST}{ws}"], env=sshd["env"],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.seen = []

    def send(self, message):
        self.proc.stdin.write((json.dumps({"jsonrpc": "2.0", **message}) + "\n").encode())
        self.proc.stdin.flush()

    def read_until(self, what, found):
        while not found(self.seen):
            line = self.proc.stdout.readline()
            assert line, f"the bridge closed stdout waiting for {what}"
            self.seen.append(json.loads(line))
        return found(self.seen)

    def reply_to(self, msg_id):
        return self.read_until(f"the reply to {msg_id}", lambda msgs: next(
            (m for m in msgs if m.get("id") == msg_id and "method" not in m), None))

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def test_an_agent_clients_results_are_shaped_here_and_its_work_survives_a_drop(sshd, remote, tmp_path):
    """A client whose model reads a result's text alone (Codex, by its
    name) gets the text alone across the bridge, while the bridge still
    reads the resume key the target puts in structuredContent: after the
    stream drops, and after it drops again (each key is used once), the
    agent's terminal is its own again."""
    ws = remote.root / "ws"
    ws.mkdir()
    bridge = RawBridge(sshd, ws)
    send, reply_to, proc = bridge.send, bridge.reply_to, bridge.proc
    try:
        send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "codex-mcp-client", "version": "0.171.0"}}})
        reply_to(1)
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "terminal_open", "arguments": {}}})
        opened = reply_to(2)["result"]
        assert "structuredContent" not in opened, opened
        assert "pty-1" in opened["content"][0]["text"], opened
        said = []
        threading.Thread(target=lambda: said.extend(iter(proc.stderr.readline, b"")), daemon=True).start()
        [ssh] = ssh_of_bridge()
        os.kill(ssh, signal.SIGKILL)
        # the next call goes out once the bridge knows the stream is gone
        wait_until(lambda: any(b"dropped" in line for line in said), "the bridge saw the drop")
        send({"id": 3, "method": "tools/call", "params": {"name": "terminal_list", "arguments": {}}})
        listed = reply_to(3)["result"]
        text = listed["content"][0]["text"]
        assert not listed.get("isError") and "pty-1" in text, listed
        assert "could not be taken back" not in text, text
        assert "structuredContent" not in listed, listed
        # a second drop: a key is used once, so the bridge resumes with
        # the one the first resume gave it
        [ssh] = ssh_of_bridge()
        os.kill(ssh, signal.SIGKILL)
        wait_until(lambda: sum(b"dropped" in line for line in said) >= 2, "the bridge saw the second drop")
        send({"id": 4, "method": "tools/call", "params": {"name": "terminal_list", "arguments": {}}})
        text = reply_to(4)["result"]["content"][0]["text"]
        assert "pty-1" in text and "could not be taken back" not in text, text
    finally:
        bridge.close()


def test_a_call_waiting_for_a_person_at_a_drop_is_answered(sshd, remote, tmp_path):
    """A command on the host waits for a person to approve it outside the
    sandbox (the host's approval page is on its loopback, so the bridge
    offers the client no URL elicitation and no question crosses: a form's
    accept would approve nothing) and the stream drops before a decision:
    the call is answered, and the work comes back on the new stream."""
    ws = remote.root / "ws"
    ws.mkdir()
    bridge = RawBridge(sshd, ws)
    send, read_until, reply_to, seen = bridge.send, bridge.read_until, bridge.reply_to, bridge.seen
    try:
        send({"id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"form": {}, "url": {}}},
            "clientInfo": {"name": "asked", "version": "1"}}})
        reply_to(1)
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "terminal_open", "arguments": {}}})
        term = reply_to(2)["result"]["structuredContent"]["id"]
        send({"id": 3, "method": "tools/call", "params": {"_meta": {"progressToken": "approve"},
            "name": "bash", "arguments": {"command": "true", "sandbox": "off"}}})
        # the call reaches the host and waits there: it reports so
        read_until("the call waiting for a person", lambda msgs: any(
            m.get("method") == "notifications/progress"
            and m["params"]["progressToken"] == "approve"
            and "to approve ap-" in m["params"].get("message", "") for m in msgs))
        [ssh] = ssh_of_bridge()
        os.kill(ssh, signal.SIGKILL)
        answer = reply_to(3)
        assert answer["result"]["structuredContent"]["error"]["code"] == "REMOTE_DISCONNECTED", answer
        assert not any(m.get("method") == "elicitation/create" for m in seen), seen
        # the next call is answered on the new stream, with the terminal back
        send({"id": 4, "method": "tools/call", "params": {"name": "terminal_list", "arguments": {}}})
        listed = reply_to(4)["result"]
        assert not listed.get("isError"), listed
        assert [x["id"] for x in listed["structuredContent"]["terminals"]] == [term]
    finally:
        bridge.close()


async def test_a_password_prompt_on_the_host_is_answered_here(sshd, remote, tmp_path):
    """A program on the host reads a password with echo off. The host's
    answer page is on the host's loopback, which no browser here reaches,
    so the bridge does not offer the client's URL-mode elicitation; the
    reply tells the model how a person answers, in the words that work
    here (`dsh answer HOST:pty-N`), and the person does, on their own
    terminal: the answer crosses only inside ssh, and the model never sees
    it."""
    ws = remote.root / "ws"
    ws.mkdir()
    env = sshd["env"]
    asked = []

    async def elicitation(context, params):
        asked.append(params)
        return types.ElicitResult(action="decline")

    received = []
    async with connect(env, "--remote", f"ssh://{HOST}{ws}", elicitation_callback=elicitation) as s:
        t = ok(await s.call_tool("terminal_open", {}))
        r = await s.call_tool("terminal_send", {"id": t["id"], "text": GETPASS, "timeout_ms": 60000})
        received.append(text_of(r))
        assert ok(r)["echo"] is False, ok(r)
        assert f"`dsh answer {HOST}:{t['id']}`" in text_of(r), text_of(r)
        assert asked == [], "no URL to the host's loopback reached the client"
        said = await anyio.to_thread.run_sync(lambda: answer_on_a_terminal(env, f"{HOST}:{t['id']}"))
        assert "typed into the terminal" in said, said
        assert SECRET not in said

        async def verified():
            read = ok(await s.call_tool("terminal_read", {"id": t["id"], "since": 0}))
            received.append(json.dumps(read))
            return "verified" in read["output"]

        await eventually(verified, "the program on the host to take the answer")
    assert not any(SECRET in x for x in received)


def raw_initialize(env, *args):
    """`dsh mcp ARGS` given an initialize request: its reply (or None), its
    exit status and stderr."""
    proc = subprocess.Popen(
        [dsh_bin(), "mcp", *args], env=env,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    out, errors = proc.communicate((json.dumps(request) + "\n").encode(), timeout=120)
    lines = [json.loads(x) for x in out.decode().splitlines() if x.strip()]
    return (lines[0] if lines else None), proc.returncode, errors.decode()


def test_an_unreachable_host_is_an_answer_that_says_why(sshd, tmp_path):
    closed = free_port()
    reply, code, errors = raw_initialize(sshd["env"], "--remote", f"ssh://{HOST}:{closed}")
    assert code == 0
    assert reply["id"] == 1 and "REMOTE_UNREACHABLE" in reply["error"]["message"]
    assert "Connection refused" in reply["error"]["message"], reply


def test_a_target_reachable_only_later_is_reached_by_the_next_request(remote, tmp_path):
    """The first connection fails; the client's next request connects, and
    the client's own `initialize` is the one the target gets (once)."""
    env = local_env(tmp_path)
    flag = tmp_path / "reachable"
    assign = " ".join(f"{k}={v}" for k, v in remote.env.items())
    gate = tmp_path / "gate.sh"
    gate.write_text(f'#!/bin/sh\n[ -e {flag} ] || {{ echo "not reachable yet" >&2; exit 255; }}\nexec env {assign} "$@"\n')
    gate.chmod(0o755)
    proc = subprocess.Popen([dsh_bin(), "mcp", "--remote", f"exec:{gate}"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        def call(msg_id, method, params):
            proc.stdin.write((json.dumps({"jsonrpc": "2.0", "id": msg_id, "method": method, "params": params}) + "\n").encode())
            proc.stdin.flush()
            return json.loads(proc.stdout.readline())

        init = {"protocolVersion": "2025-06-18", "capabilities": {"roots": {"listChanged": True}},
                "clientInfo": {"name": "late", "version": "1"}}
        first = call(1, "initialize", init)
        assert "REMOTE_UNREACHABLE" in first["error"]["message"]
        assert "not reachable yet" in first["error"]["message"]
        flag.write_text("")
        second = call(2, "initialize", init)
        assert second["result"]["serverInfo"], second
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
        proc.stdin.flush()
        r = call(3, "tools/call", {"name": "bash", "arguments": {"command": "echo late-but-here"}})
        assert "late-but-here" in r["result"]["structuredContent"]["output"], r
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def test_a_target_of_another_architecture_is_refused_before_anything_is_sent(remote, tmp_path):
    fake = tmp_path / "fakebin"
    fake.mkdir()
    (fake / "uname").write_text('#!/bin/sh\ncase "$1" in -m) echo aarch64;; *) echo Linux;; esac\n')
    (fake / "uname").chmod(0o755)
    env = local_env(tmp_path)
    assign = " ".join(f"{k}={v}" for k, v in remote.env.items())
    reply, _code, errors = raw_initialize(env, "--remote", f"exec:env PATH={fake}:{os.environ['PATH']} {assign}")
    message = reply["error"]["message"]
    assert "is aarch64" in message and "x86_64" in message, message
    assert remote.installed() == [] and not (remote.data / "dsh").exists()


def install_path(remote):
    """Where the bootstrap installs the static build on the target."""
    version = subprocess.run([dsh_bin(), "--version"], capture_output=True, text=True, check=True).stdout.split()[-1]
    return remote.data / "dsh" / "bin" / f"dsh-{version}-{sha256(static_build())[:16]}"


def plant(path, marker):
    """An executable at `path` that is not dsh: run, it leaves `marker`."""
    path.write_text(f"#!/bin/sh\necho \"ran as $(id -u): $*\" >> {marker}\nexit 0\n")
    path.chmod(0o755)


NOBODY = 65534


@pytest.mark.parametrize("planted", ["file of another user", "symlink", "directory of another user",
                                     "directory symlink"])
def test_a_planted_install_path_is_never_run(sshd, remote, tmp_path, planted):
    """Someone who could create the install path before the user's first
    bootstrap leaves an executable there (owned by them, or a symlink to
    theirs, or the whole directory theirs or a symlink). The bootstrap
    runs nothing it has not verified: it stops with what is wrong and how
    to fix it, and the planted file never runs."""
    marker = tmp_path / "planted-ran"
    bin_path = install_path(remote)
    elsewhere = tmp_path / "theirs"
    elsewhere.mkdir()
    elsewhere.chmod(0o777)
    if planted == "file of another user":
        bin_path.parent.mkdir(parents=True, mode=0o700)
        plant(bin_path, marker)
        os.chown(bin_path, NOBODY, NOBODY)
        why = "owned by another user"
    elif planted == "symlink":
        bin_path.parent.mkdir(parents=True, mode=0o700)
        plant(elsewhere / "dsh", marker)
        bin_path.symlink_to(elsewhere / "dsh")
        why = "symbolic link"
    elif planted == "directory of another user":
        bin_path.parent.mkdir(parents=True)
        bin_path.parent.chmod(0o777)
        plant(bin_path, marker)
        os.chown(bin_path.parent, NOBODY, NOBODY)
        os.chown(bin_path, NOBODY, NOBODY)
        why = "owned by another user"
    else:
        bin_path.parent.parent.mkdir(parents=True)
        plant(elsewhere / bin_path.name, marker)
        bin_path.parent.symlink_to(elsewhere)
        why = "symbolic link"
    ws = remote.root / "ws"
    ws.mkdir()
    reply, code, errors = raw_initialize(sshd["env"], "--remote", f"ssh://{HOST}{ws}")
    assert not marker.exists(), f"the planted file ran: {marker.read_text()}"
    assert reply is not None and "error" in reply, (reply, errors)
    message = reply["error"]["message"]
    assert why in message and "remove it" in message, message
    assert str(bin_path.parent if "directory" in planted else bin_path) in message, message
    assert not far_bridges(remote)


def test_an_installed_file_of_other_content_is_replaced_not_run(sshd, remote, tmp_path):
    """The user's own file at the install path, in the user's own
    directory, but not the build (changed since, or put there by the user
    by mistake): the bootstrap removes it and installs the build; the
    file never runs."""
    marker = tmp_path / "planted-ran"
    bin_path = install_path(remote)
    bin_path.parent.mkdir(parents=True, mode=0o700)
    plant(bin_path, marker)
    ws = remote.root / "ws"
    ws.mkdir()
    proc = subprocess.Popen([dsh_bin(), "mcp", "--remote", f"ssh://{HOST}{ws}"], env=sshd["env"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    request = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    proc.stdin.write((json.dumps(request) + "\n").encode())
    proc.stdin.flush()
    reply = json.loads(proc.stdout.readline() or "null")
    proc.stdin.close()
    errors = proc.stderr.read().decode()
    proc.wait(timeout=60)
    assert not marker.exists(), f"the planted file ran: {marker.read_text()}"
    assert reply is not None and reply.get("result", {}).get("serverInfo"), (reply, errors)
    assert "is not the build" in errors and "installing" in errors, errors
    assert sha256(bin_path) == sha256(static_build())
    assert stat.S_IMODE(bin_path.stat().st_mode) == 0o700
    assert stat.S_IMODE(bin_path.parent.stat().st_mode) == 0o700


def test_bad_targets_and_builds_are_usage_errors(tmp_path):
    env = local_env(tmp_path)
    p = subprocess.run([dsh_bin(), "mcp", "--remote", "devbox"], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "ssh://[user@]host" in p.stderr, p.stderr
    env["DSH_REMOTE_BINARY"] = dsh_bin()  # the debug build: dynamically linked
    p = subprocess.run([dsh_bin(), "mcp", "--remote", "exec:true"], env=env, capture_output=True, text=True,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 1 and "not a statically linked" in p.stderr, p.stderr
