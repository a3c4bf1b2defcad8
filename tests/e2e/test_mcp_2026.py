"""MCP 2026-07-28 as Claude Code speaks it: no `initialize`, no
`initialized`; `server/discover` first, then every request carries the
protocol version, the client's capabilities and its info in `_meta`, and
`subscriptions/listen` carries the tool-list changes. No SDK of the suite
speaks this revision yet, so these tests write the JSON-RPC lines
themselves, exactly as that client does (its traffic, logged through
tests/clients/mcp_proxy.py, is what they copy)."""

import json
import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from conftest import dsh, dsh_bin, dsh_children, write_config
from waiting import wait_until

HANG = 60

CLIENT = {"name": "claude-code", "title": "Claude Code", "version": "2.1.332"}
CAPABILITIES = {"roots": {"listChanged": True}, "elicitation": {"form": {}, "url": {}}}


def meta():
    return {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientInfo": CLIENT,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
    }


class Client:
    """A `dsh mcp` process spoken to line by line; every message it sends
    lands in a queue read with a deadline."""

    def __init__(self, env, cwd, *args):
        self.proc = subprocess.Popen(
            [dsh_bin(), "mcp", *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, env=env, cwd=cwd, text=True,
        )
        self.inbox = queue.Queue()
        self.next_id = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.inbox.put(json.loads(line))
        self.inbox.put(None)

    def send(self, method, params=None, *, request=True):
        message = {"jsonrpc": "2.0", "method": method, "params": {"_meta": meta(), **(params or {})}}
        if request:
            self.next_id += 1
            message["id"] = self.next_id
        self.proc.stdin.write(json.dumps(message) + "\n")
        self.proc.stdin.flush()
        return message.get("id")

    def wait_for(self, match, timeout=HANG):
        """The first message `match` accepts; the others are kept aside."""
        deadline = time.monotonic() + timeout
        seen = []
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"no matching message within {timeout} s; saw {seen}")
            try:
                message = self.inbox.get(timeout=left)
            except queue.Empty:
                continue
            if message is None:
                raise AssertionError(f"dsh mcp closed its output; saw {seen}")
            if match(message):
                return message
            seen.append(message)

    def call(self, method, params=None, timeout=HANG):
        id_ = self.send(method, params)
        return self.wait_for(lambda m: m.get("id") == id_ and ("result" in m or "error" in m), timeout)

    def close(self):
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def client(isolated_env, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    c = Client(isolated_env, ws)
    c.env, c.ws = isolated_env, ws
    yield c
    c.close()


def test_discover_begins_the_session_and_no_call_waits_for_a_handshake(client):
    discovered = client.call("server/discover")["result"]
    assert "2026-07-28" in discovered["supportedVersions"], discovered
    assert discovered["capabilities"]["tools"] == {"listChanged": True}

    # The connection is known, with its client and directory, before any
    # call: nothing is left for a call to wait for.
    def connection():
        rows = json.loads(dsh(client.env, "ps", "--json").stdout)["connections"]
        return [c for c in rows if c.get("client") == "claude-code" and c.get("cwd")]
    [row] = wait_until(connection, "dsh ps lists the connection with its client and directory")
    assert row["cwd"] == str(client.ws), row
    # and its session is in the registry
    def recorded():
        sessions = json.loads(dsh(client.env, "session", "list", "--json").stdout)
        return [s for s in sessions if (s.get("client") or {}).get("name") == "claude-code"]
    [session] = wait_until(recorded, "the session is recorded")
    assert session["cwd"] == str(client.ws), session

    tools = client.call("tools/list")["result"]["tools"]
    assert {t["name"] for t in tools} >= {"bash", "terminal_send", "lsp"}
    # Every call answers at the speed of the older protocol; a wait for a
    # handshake that never comes cost 2.0 s per call.
    for _ in range(3):
        started = time.monotonic()
        reply = client.call("tools/call", {"name": "bash", "arguments": {"command": "echo hi; exit 3"}})
        took = time.monotonic() - started
        result = reply["result"]
        # Claude Code shows its model structuredContent instead of the
        # text: it gets the text alone.
        assert "structuredContent" not in result, result
        [text] = result["content"]
        assert text["text"].startswith("hi\n[exit 3 · "), text
        assert took < 1.5, f"a call took {took:.2f} s"


def test_listen_carries_tool_list_changes(client):
    config = write_config(client.ws.parent, 'preset = "full"\n')
    client.close()
    # a connection whose tools come from a config file that changes
    c = Client(client.env, client.ws, "--config", config)
    try:
        c.call("server/discover")
        listen = c.send("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
        ack = c.wait_for(lambda m: m.get("method") == "notifications/subscriptions/acknowledged")
        assert ack["params"]["notifications"] == {"toolsListChanged": True}, ack
        assert len(c.call("tools/list")["result"]["tools"]) > 1

        with open(config, "w") as f:
            f.write('preset = "minimal"\n')
        [server] = dsh_children()
        os.kill(server, signal.SIGHUP)
        changed = c.wait_for(lambda m: m.get("method") == "notifications/tools/list_changed")
        assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == listen, changed
        assert [t["name"] for t in c.call("tools/list")["result"]["tools"]] == ["bash"]
    finally:
        c.close()
