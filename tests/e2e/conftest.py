"""Shared helpers: start the real `dsh mcp` binary and drive it with the
official MCP Python SDK client."""

import contextlib
import fcntl
import json
import os
import pathlib
import pty
import select
import shutil
import signal
import subprocess
import tempfile
import termios
import time

import anyio
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

ROOT = pathlib.Path(__file__).resolve().parents[2]


def dsh_bin() -> str:
    path = os.environ.get("DSH_BIN") or str(ROOT / "target" / "debug" / "dsh")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} does not exist: run `cargo build -p dsh` first")
    return path


@pytest.fixture
def anyio_backend():
    return "asyncio"


def make_env(tmp_path):
    """An environment whose XDG dirs and daemon runtime dir are the test's
    own, so no user config, store or daemon is read, written or reached.
    The XDG dirs sit next to tmp_path, not in it: tests use tmp_path as
    the session's workspace, and dsh's own directories inside a workspace
    would be carved out of its sandbox (no new file at its top level).
    The runtime dir is short: a socket path must fit in 108 bytes."""
    env = dict(os.environ)
    xdg = tmp_path.parent / f"{tmp_path.name}-xdg"
    env["XDG_CONFIG_HOME"] = str(xdg / "config")
    env["XDG_DATA_HOME"] = str(xdg / "data")
    env["XDG_STATE_HOME"] = str(xdg / "state")
    env["DSH_RUNTIME_DIR"] = runtime_dir()
    env.pop("XDG_RUNTIME_DIR", None)
    env.setdefault("DSH_LOG", "warn")
    return env


_RUNTIME_DIRS = []


def runtime_dir():
    """A short, fresh daemon runtime dir (a socket path must fit in 108
    bytes, so not under tmp_path), removed when the test session ends."""
    path = tempfile.mkdtemp(prefix="dsh-run-")
    _RUNTIME_DIRS.append(path)
    return path


def pytest_sessionfinish(session, exitstatus):
    """Removes the runtime dirs this session made; every daemon in them
    was stopped by its test's teardown."""
    for path in _RUNTIME_DIRS:
        shutil.rmtree(path, ignore_errors=True)


def dsh(env, *args, timeout=60, check=True, cwd=None, command=None):
    """Runs `dsh ARGS` with `env`; with `check`, it must exit 0. `command`
    is what runs ARGS (a list; by default the dsh binary)."""
    proc = subprocess.run(
        [*(command or [dsh_bin()]), *args], env=env, capture_output=True, text=True,
        timeout=timeout, cwd=cwd,
    )
    if check:
        assert proc.returncode == 0, f"dsh {args}: {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc


def info(env):
    """The daemon.json of this environment's data dir."""
    path = pathlib.Path(env["XDG_DATA_HOME"]) / "dsh" / "daemon.json"
    return json.loads(path.read_text())


def alive(pid):
    """Whether `pid` runs (exists and is no zombie), from /proc."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


# The names of the PID namespace helpers a dsh process runs in its own
# memory (`process_tree::pidns`): their command line, environment and
# executable are the host's, their name is their own.
HELPER_NAMES = ("dsh-init", "dsh-wait")


def is_pidns_helper(pid):
    """Whether `pid` is a PID namespace's init or waiter of some dsh."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip() in HELPER_NAMES
    except OSError:
        return False


def daemons_of(env, marker=None, binary=None):
    """Pids of the `dsh daemon` processes (of `binary`, by default the dsh
    under test) whose environment holds `marker` (bytes, `NAME=value`),
    from /proc; by default this environment's runtime dir. Their PID
    namespace helpers (which show the daemon's command line) are not
    daemons."""
    if marker is None:
        marker = f"DSH_RUNTIME_DIR={env['DSH_RUNTIME_DIR']}".encode()
    real = os.path.realpath(binary or dsh_bin())
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.path.realpath(f"/proc/{entry}/exe") != real:
                continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if (b"daemon" in argv and marker in environ and state not in ("Z", "X")
                and not is_pidns_helper(entry)):
            out.append(int(entry))
    return out


def stop_daemons(env, timeout=30, marker=None, binary=None):
    """Stops every daemon of this environment (or whose environment holds
    `marker`, of `binary`, as for daemons_of): SIGTERM (which ends its
    terminals and jobs), then SIGKILL what is left."""
    pids = daemons_of(env, marker, binary)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while daemons_of(env, marker, binary) and time.monotonic() < deadline:
        time.sleep(0.05)  # sleep-ok: polls /proc for the daemons to exit; SIGKILL follows
    for pid in daemons_of(env, marker, binary):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture
def isolated_env(tmp_path):
    """See make_env; the daemons it caused are stopped at teardown, even
    when the test failed."""
    env = make_env(tmp_path)
    try:
        yield env
    finally:
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)


@pytest.fixture
def box(isolated_env, tmp_path):
    """An environment with its own HOME, TMPDIR and workspace, none inside
    another, a fake ssh key in HOME, and a git repository as the
    workspace."""
    home = tmp_path / "home"
    tmp = tmp_path / "tmp"
    ws = tmp_path / "ws"
    for d in (home, tmp, ws):
        d.mkdir()
    (home / ".ssh").mkdir(mode=0o700)
    (home / ".ssh" / "id_rsa").write_text("PRIVATE KEY\n")
    os.makedirs(ws / ".git")
    (ws / ".git" / "config").write_text("[core]\n")
    env = dict(isolated_env, HOME=str(home), TMPDIR=str(tmp))
    return {"env": env, "home": home, "tmp": tmp, "ws": ws, "dir": tmp_path}


@contextlib.asynccontextmanager
async def connect(env, *args, cwd=None, errlog=None, command=None, **session_kwargs):
    """A client session with a `dsh mcp` server started for it; the
    server's stderr goes to `errlog` (a file) when given. `command` is
    what runs `mcp ARGS` (a list; by default the dsh binary)."""
    # DSH_E2E_MCP_ARGS (read by this harness only) adds arguments such as
    # --standalone to every `dsh mcp` a test starts.
    extra = env.get("DSH_E2E_MCP_ARGS", "").split()
    program, *before = command or [dsh_bin()]
    params = StdioServerParameters(
        command=program, args=[*before, "mcp", *extra, *args], env=env, cwd=cwd
    )
    with contextlib.ExitStack() as files:
        if errlog is None:
            errlog = files.enter_context(tempfile.TemporaryFile("w+"))
        async with anyio.create_task_group() as tg:
            async with stdio_client(params, errlog=errlog) as (read, write):
                to_session, session_read = anyio.create_memory_object_stream(0)
                gone = anyio.Event()
                tg.start_soon(deliver_until_the_server_exits, read, to_session, None, gone)
                async with ClientSession(session_read, write, **session_kwargs) as session:
                    # the server's answer, for tests of the handshake itself
                    session.initialize_result = await session.initialize()
                    # set once the server has closed its output (it ended
                    # the connection, or exited)
                    session.server_gone = gone
                    yield session


async def deliver_until_the_server_exits(read, to_session, dropped=None, gone=None):
    """Hands the server's messages to the client session, and once the
    session has closed keeps reading them until the server exits, dropping
    them (into `dropped`, when given); then sets `gone` (an event), when
    given. A server may send a notification at any time (a job settling as
    the test ends); the SDK's stdio transport fails with
    BrokenResourceError when a message arrives after the session stopped
    reading, so something must read until the end."""
    async with to_session:
        try:
            async for message in read:
                try:
                    await to_session.send(message)
                except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                    # the session has closed: nobody wants it
                    if dropped is not None:
                        dropped.append(message)
        except anyio.ClosedResourceError:
            pass  # the transport closed its end as the server exited
        finally:
            if gone is not None:
                gone.set()


def text_of(result) -> str:
    assert len(result.content) == 1, result.content
    return result.content[0].text


def ok(result) -> dict:
    """The structured content of a successful call."""
    assert not result.isError, text_of(result)
    return result.structuredContent


def err(result) -> dict:
    """The error object of a failed call, after checking the envelope."""
    assert result.isError, text_of(result)
    error = result.structuredContent["error"]
    assert {"code", "message", "retryable"} <= set(error)
    assert text_of(result) == f"[error {error['code']}] {error['message']}"
    return error


async def ask_lsp(session, args, timeout_s=180):
    """Calls `lsp`, retrying while the server reports LSP_NOT_READY (which
    must say it is retryable); returns the raw result, a success or
    another error."""
    deadline = time.monotonic() + timeout_s
    while True:
        r = await session.call_tool("lsp", args)
        if not r.isError or err(r)["code"] != "LSP_NOT_READY":
            return r
        assert err(r)["retryable"] is True
        assert time.monotonic() < deadline, "the server never became ready"


def catalog(preset: str) -> dict:
    out = subprocess.run(
        [dsh_bin(), "catalog", "--preset", preset, "--format", "json"],
        check=True,
        capture_output=True,
        text=True,
    )
    return json.loads(out.stdout)


def processes():
    """Every process as (pid, ppid, sid, state), read from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        out.append((int(entry), int(fields[1]), int(fields[3]), fields[0]))
    return out


def descendants(root, living=False):
    """The pids of every process under `root` (children, theirs, …);
    with `living`, none that has exited and waits to be reaped."""
    table = {}
    for pid, ppid, _sid, state in processes():
        if not (living and state in ("Z", "X")):
            table.setdefault(ppid, []).append(pid)
    out, todo = [], [root]
    while todo:
        for child in table.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def session_of(needle: str, timeout_s: float = 30.0) -> int:
    """The session id (as the host numbers it) of the live process whose
    command line is `needle` (e.g. `sleep 1000.3`, unique in the suite).
    Terminals and jobs run in PID namespaces of their own, so `$$` inside
    is not the host's number."""
    from waiting import wait_until

    found = []

    def look():
        for pid, _ppid, sid, state in processes():
            if state in ("Z", "X"):
                continue
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmdline == needle:
                found.append(sid)
                return True
        return False

    wait_until(look, f"a process `{needle}` runs", timeout_s=timeout_s)
    return found[0]


def live_named(needle: str):
    """The live processes whose command line is `needle`."""
    out = []
    for p in processes():
        if p[3] in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{p[0]}/cmdline", "rb") as f:
                cmdline = f.read().rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if cmdline == needle:
            out.append(p)
    return out


def live_in_session(sid: int):
    return [p for p in processes() if p[2] == sid and p[3] not in ("Z", "X")]


def end_work_with_the_client(env):
    """Sets this environment's default config so that a connection's
    terminals and jobs end with it (`[daemon] detach_grace = "0s"`), for
    tests of what a connection's end leaves behind. By default they are
    kept detached for the agent to take back (see test_resume.py)."""
    path = pathlib.Path(env["XDG_CONFIG_HOME"]) / "dsh" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text('[daemon]\ndetach_grace = "0s"\n')


def write_config(tmp_path, text: str) -> str:
    """Writes a config file and returns its path."""
    path = tmp_path / "dsh-config.toml"
    path.write_text(text)
    return str(path)


async def wait_settled(session, job_id, timeout_s=30):
    """Waits (server-side, with job_output wait_ms) until a job settles."""
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        r = await session.call_tool("job_output", {"job_id": job_id, "wait_ms": 2000, "max_bytes": 1_000_000})
        assert not r.isError, r.content[0].text
        if r.structuredContent["status"] not in ("running", "stopping"):
            return r.structuredContent
    raise AssertionError(f"{job_id} did not settle")


def dsh_children():
    """Pids of the `dsh` servers this test process started."""
    me = os.getpid()
    out = []
    for pid, ppid, _sid, _state in processes():
        if ppid != me:
            continue
        try:
            if os.path.realpath(f"/proc/{pid}/exe") == os.path.realpath(dsh_bin()):
                out.append(pid)
        except OSError:
            pass
    return out


def _end_server(pid, grace_s=10.0):
    """Ends a `dsh` server: SIGTERM (it ends what it started and exits),
    then SIGKILL if it lingers; reaps it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            try:
                if os.waitpid(pid, os.WNOHANG)[0] == pid:
                    return
            except ChildProcessError:
                # reaped elsewhere (its Popen or the event loop)
                if not os.path.exists(f"/proc/{pid}"):
                    return
            time.sleep(0.01)  # sleep-ok: polls a process that has no exit event for us


@pytest.fixture(autouse=True)
def no_server_outlives_its_test():
    """Every `dsh` server a test started is gone when the test ends, even
    when it failed or timed out: one still running is ended here and the
    test errors, naming it."""
    before = set(dsh_children())
    yield
    left = [pid for pid in dsh_children() if pid not in before]
    for pid in left:
        _end_server(pid)
    assert not left, f"dsh server(s) {left} outlived the test; they were ended"


@pytest.fixture(autouse=True, scope="session")
def an_empty_directory_to_run_in():
    """The tests run in an empty directory of their own, which is the
    session directory of every `dsh mcp` started without `cwd`: run from
    this repository, every such session would start rust-analyzer on it
    (its language servers start with a session in a project) and build
    the whole workspace in the background of every test."""
    here = os.getcwd()
    empty = tempfile.mkdtemp(prefix="dsh-e2e-cwd-")
    os.chdir(empty)
    try:
        yield
    finally:
        os.chdir(here)
        shutil.rmtree(empty, ignore_errors=True)


def on_a_terminal(argv, env, answer_after: bytes, typed: str):
    """Runs `argv` on a real terminal (a pty as its controlling terminal,
    as a person's `dsh answer` or `dsh approve` runs), types `typed` once
    it printed `answer_after`; returns (exit code, what it printed)."""
    master, slave = pty.openpty()

    def controlling_tty():
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    proc = subprocess.Popen(
        argv, stdin=slave, stdout=slave, stderr=slave, env=env,
        start_new_session=True, preexec_fn=controlling_tty,
    )
    os.close(slave)
    seen = b""
    sent = False
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1)
        if ready:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break  # the other side closed: the program exited
            if not chunk:
                break
            seen += chunk
        if not sent and answer_after in seen:
            os.write(master, typed.encode() + b"\n")
            sent = True
        if proc.poll() is not None and not ready:
            break
    os.close(master)
    return proc.wait(timeout=30), seen.decode(errors="replace")
