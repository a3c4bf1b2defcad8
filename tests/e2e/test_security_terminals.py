"""A confined process reaches its own terminal and the ptys it makes, and
nothing else: not the person's other terminals (a pty opened outside),
not a tmux server outside through its socket, not a socket in the
session's runtime dir, and never through TIOCSTI. Programs that make ptys
(script, tmux, expect) and tty/ttyname keep working inside.

Each attack here is the one a review reproduced; each test fails on a
sandbox that grants /dev/pts whole and leaves Unix sockets by path
reachable."""

import os
import pathlib
import shutil
import socket
import subprocess
import uuid

import pytest

from conftest import connect, ok, write_config

pytestmark = pytest.mark.anyio


@pytest.fixture
def box(isolated_env, tmp_path):
    """Own HOME, TMPDIR, runtime dir and a git workspace."""
    home, tmp, ws, run = (tmp_path / n for n in ("home", "tmp", "ws", "xdg-run"))
    for d in (home, tmp, ws, run):
        d.mkdir()
    run.chmod(0o700)
    (ws / ".git").mkdir()
    env = dict(isolated_env)
    env.update(HOME=str(home), TMPDIR=str(tmp), XDG_RUNTIME_DIR=str(run))
    return {"env": env, "home": home, "tmp": tmp, "ws": ws, "run": run, "dir": tmp_path}


async def bash(s, command, **kw):
    return ok(await s.call_tool("bash", {"command": command, **kw}))


@pytest.fixture
def outside_pty():
    """A pty opened outside any sandbox: the person's other terminal pane."""
    master, slave = os.openpty()
    name = os.ttyname(slave)
    try:
        yield {"master": master, "slave": slave, "name": name}
    finally:
        os.close(master)
        os.close(slave)


async def test_a_confined_command_cannot_open_the_persons_other_terminal(box, outside_pty):
    name = outside_pty["name"]
    async with connect(box["env"], cwd=box["ws"]) as s:
        res = await bash(
            s,
            f"echo pwned > {name} 2>/dev/null; echo write=$?; "
            f"timeout 2 dd if={name} of=/dev/null bs=1 count=1 2>/dev/null; echo read=$?; "
            f"test -e {name} && stat -c '%t:%T %d' {name}; "
            "ls /dev/pts",
        )
    out = res["output"]
    assert "write=0" not in out and "read=0" not in out, out
    # Nothing typed reached the outside terminal.
    os.set_blocking(outside_pty["master"], False)
    with pytest.raises(BlockingIOError):
        os.read(outside_pty["master"], 100)


async def test_tiocsti_is_refused_on_the_commands_own_terminal_and_on_a_pty_it_made(box):
    inject = (
        "import fcntl, os, pty, termios\n"
        "fd = int(os.environ.get('FD', '0'))\n"
        "if fd < 0:\n"
        "    fd, _ = pty.openpty()\n"
        "try:\n"
        "    fcntl.ioctl(fd, termios.TIOCSTI, b'x')\n"
        "    print('injected')\n"
        "except OSError as e:\n"
        "    print('refused', e.errno)\n"
    )
    (box["ws"] / "inject.py").write_text(inject)
    async with connect(box["env"], cwd=box["ws"]) as s:
        res = await bash(s, "FD=-1 python3 inject.py")
        assert res["output"].strip() == "refused 1", res
        t = ok(await s.call_tool("terminal_open", {}))
        sent = ok(
            await s.call_tool("terminal_send", {"id": t["id"], "text": "python3 inject.py"})
        )
        assert "refused 1" in sent["output"] and "injected" not in sent["output"], sent


async def test_tty_and_programs_that_make_ptys_work_inside(box):
    if not (shutil.which("script") and shutil.which("tmux") and shutil.which("expect")):
        pytest.fail("script, tmux and expect must be installed (cargo xtask test installs them)")
    async with connect(box["env"], cwd=box["ws"]) as s:
        t = ok(await s.call_tool("terminal_open", {}))

        async def send(line):
            return ok(await s.call_tool("terminal_send", {"id": t["id"], "text": line}))["output"]

        out = await send('tty; test -c "$(tty)" && echo tty-resolves')
        assert "tty-resolves" in out and "not a tty" not in out, out
        out = await send("python3 -c 'import os; print(\"ttyname\", os.ttyname(0))'")
        assert "ttyname /dev/pts/" in out, out

        res = await bash(s, "script -qec 'tty; echo made-by-script' /dev/null")
        assert "made-by-script" in res["output"] and "/dev/pts/" in res["output"], res
        res = await bash(s, "expect -c 'spawn tty; expect eof' ")
        assert "/dev/pts/" in res["output"] and "not a tty" not in res["output"], res
        name = f"inner-{uuid.uuid4().hex[:8]}"
        # This box's temp dir is not /tmp, where tmux puts its socket dir
        # unless TMUX_TMPDIR says otherwise.
        res = await bash(
            s,
            f'export TMUX_TMPDIR="$TMPDIR"; T="tmux -L {name}"; '
            "$T new-session -d -x 80 -y 10 cat && $T send-keys hello-from-inner Enter && "
            # until cat has echoed it (bounded by the call's timeout)
            "until $T capture-pane -p | grep -q hello-from-inner; do :; done; "
            "$T capture-pane -p; $T kill-server",
            timeout_ms=60_000,
        )
        assert "hello-from-inner" in res["output"], res


async def test_a_tmux_server_outside_cannot_be_driven_through_its_socket(box):
    if not shutil.which("tmux"):
        pytest.fail("tmux must be installed (cargo xtask test installs it)")
    name = f"outside-{uuid.uuid4().hex[:8]}"
    marker = box["dir"] / "typed-outside"
    env = {k: v for k, v in os.environ.items() if k not in ("TMUX", "TMUX_TMPDIR")}
    # tmux's default socket dir, as a person's tmux has it; removed after
    # the test when the test made it
    socket_dir = pathlib.Path(f"/tmp/tmux-{os.getuid()}")
    made_socket_dir = not socket_dir.exists()
    subprocess.run(["tmux", "-L", name, "new-session", "-d", "sh"], env=env, check=True)
    try:
        async with connect(box["env"], cwd=box["ws"]) as s:
            res = await bash(
                s,
                f"unset TMUX TMUX_TMPDIR; tmux -L {name} send-keys 'touch {marker}' Enter; "
                f"echo rc=$?; ls /tmp/tmux-$(id -u)/ 2>&1",
            )
        # the outside shell would have run it by now if the keys got through
        subprocess.run(["tmux", "-L", name, "send-keys", "sync", ""], env=env, check=True)
        out = subprocess.run(
            ["tmux", "-L", name, "capture-pane", "-p"], env=env, capture_output=True, text=True
        ).stdout
        assert "rc=0" not in res["output"], res
        assert f"touch {marker}" not in out
        assert not marker.exists()
    finally:
        subprocess.run(["tmux", "-L", name, "kill-server"], env=env)
        (socket_dir / name).unlink(missing_ok=True)
        if made_socket_dir:
            shutil.rmtree(socket_dir, ignore_errors=True)


def listen(path):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)
    return srv


CONNECT = (
    "import socket, sys\n"
    "c = socket.socket(socket.AF_UNIX)\n"
    "try:\n"
    "    c.connect(sys.argv[1]); print('connected')\n"
    "except OSError as e:\n"
    "    print('refused', e.errno)\n"
)


async def test_sockets_in_the_runtime_dir_are_hidden_unless_the_policy_lists_them(box):
    bus = box["run"] / "bus"
    other = box["run"] / "other"
    servers = [listen(bus), listen(other)]
    (box["ws"] / "connect.py").write_text(CONNECT)
    try:
        async with connect(box["env"], cwd=box["ws"]) as s:
            res = await bash(s, f"python3 connect.py {bus}; python3 connect.py {other}")
            assert "connected" not in res["output"], res
        cfg = write_config(box["dir"], f'[sandbox]\nunix_sockets = ["{bus}"]\n')
        async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
            res = await bash(s, f"python3 connect.py {bus}")
            assert res["output"].strip() == "connected", res
    finally:
        for srv in servers:
            srv.close()
