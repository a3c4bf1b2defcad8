"""A smaller set of the end-to-end tests with `dsh mcp --standalone`: the
in-process server for embedders and sandboxes, which starts no daemon."""

import json
import os
import pty
import socket
import subprocess
import termios

import pytest

import test_foundation
import test_jobs
import test_terminal
from conftest import daemons_of, dsh_bin

pytestmark = pytest.mark.anyio


@pytest.fixture
def standalone_env(isolated_env):
    return dict(isolated_env, DSH_E2E_MCP_ARGS="--standalone")


async def test_bash_standalone(standalone_env, tmp_path):
    await test_foundation.test_bash_end_to_end_and_the_server_keeps_serving(standalone_env, tmp_path)
    assert daemons_of(standalone_env) == []


async def test_roots_standalone(standalone_env, tmp_path):
    await test_foundation.test_the_clients_first_root_is_the_sessions_directory(standalone_env, tmp_path)
    assert daemons_of(standalone_env) == []


async def test_repl_and_reload_standalone(standalone_env, tmp_path):
    await test_terminal.test_three_step_repl_debugging_survives_a_reload(standalone_env, tmp_path)
    assert daemons_of(standalone_env) == []


async def test_close_and_disconnect_standalone(standalone_env):
    await test_terminal.test_close_and_disconnect_leave_no_process(standalone_env)
    assert daemons_of(standalone_env) == []


async def test_jobs_standalone(standalone_env, tmp_path):
    await test_jobs.test_scenario_b_three_kinds_in_one_list(standalone_env, tmp_path)
    await test_jobs.test_closing_the_connection_ends_its_jobs(standalone_env)
    assert daemons_of(standalone_env) == []


def _exchange(send, receive, tmp_path):
    """The MCP handshake and one `bash` call as raw JSON-RPC lines, through
    `send(bytes)` and `receive() -> one line`; the call's output text."""
    from mcp.types import LATEST_PROTOCOL_VERSION

    def request(id_, method, params):
        send((json.dumps({"jsonrpc": "2.0", "id": id_, "method": method, "params": params}) + "\n").encode())
        while True:
            message = json.loads(receive())
            if message.get("id") == id_:
                return message

    hello = request(
        1,
        "initialize",
        {
            "protocolVersion": LATEST_PROTOCOL_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw-stdio-test", "version": "0"},
        },
    )
    assert hello["result"]["serverInfo"]["name"], hello
    send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n')
    called = request(2, "tools/call", {"name": "bash", "arguments": {"command": "echo over-the-wire"}})
    return "".join(c.get("text", "") for c in called["result"]["content"])


def _server(env, tmp_path, stdin, stdout):
    return subprocess.Popen(
        [dsh_bin(), "mcp", "--standalone"], stdin=stdin, stdout=stdout, stderr=subprocess.DEVNULL, env=env, cwd=tmp_path
    )


def test_stdio_as_one_socket(standalone_env, tmp_path):
    """A client may hand the server one socket as stdin and stdout: it is
    served through the runtime's own socket, both ways."""
    ours, theirs = socket.socketpair()
    server = _server(standalone_env, tmp_path, theirs, theirs)
    theirs.close()
    reader = ours.makefile("rb")
    try:
        text = _exchange(ours.sendall, reader.readline, tmp_path)
        assert "over-the-wire" in text, text
    finally:
        ours.shutdown(socket.SHUT_WR)
        assert server.wait(timeout=30) == 0
        reader.close()
        ours.close()


def test_stdin_a_terminal_stdout_a_pipe(standalone_env, tmp_path):
    """Stdin that is neither a pipe nor a socket (here a terminal) is read
    the blocking way; stdout, a pipe, the runtime's way."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO  # no echo of what we type into the terminal
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    server = _server(standalone_env, tmp_path, slave, subprocess.PIPE)
    os.close(slave)
    try:
        text = _exchange(lambda b: os.write(master, b), server.stdout.readline, tmp_path)
        assert "over-the-wire" in text, text
    finally:
        os.write(master, b"\x04")  # end of file on the terminal
        assert server.wait(timeout=30) == 0
        server.stdout.close()
        os.close(master)
