"""Viewers of a `dsh ui` terminal without a browser, for the load test and
the `cargo xtask bench ui` benchmark: raw WebSocket connections that
either drain every frame as fast as they come or never read at all (a
viewer that fell behind), a sampler of a process's memory, and what a
process holds (descriptors, the page's connections, CPU time)."""

import asyncio
import base64
import os
import socket
import statistics
import threading
import time


def page_of(url: str):
    """(port, secret) of the page a sign-in link printed by `dsh ui`
    opens: the link is used (it works once) and the secret taken from the
    cookie it sets, as a browser keeps it."""
    import http.client
    import urllib.parse

    parts = urllib.parse.urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.query.startswith("login="), url
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        conn.request("GET", f"{parts.path}?{parts.query}")
        r = conn.getresponse()
        r.read()
        cookie = r.getheader("Set-Cookie") or ""
    finally:
        conn.close()
    name, _, rest = cookie.partition("=")
    assert r.status == 200 and name == f"dsh_ui_{parts.port}", (r.status, cookie)
    return parts.port, rest.split(";", 1)[0]


class Viewer:
    """One WebSocket viewer of a terminal's screens."""

    def __init__(self, port: int, token: str, terminal: str, reads: bool):
        self.port, self.token, self.terminal, self.reads = port, token, terminal, reads
        self.received = 0
        self.frames = 0
        self.reader = self.writer = self.task = None

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(handshake(self.port, self.token, self.terminal))
        head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 101"), head
        if self.reads:
            self.task = asyncio.ensure_future(self._drain())

    async def _drain(self):
        while True:
            chunk = await self.reader.read(65536)
            if not chunk:
                return
            self.received += len(chunk)
            # Every screen is a text frame that starts {"t":"screen".
            self.frames += chunk.count(b'{"t":"screen"')

    async def close(self):
        if self.task:
            self.task.cancel()
        self.writer.close()
        try:
            await asyncio.wait_for(self.writer.wait_closed(), 10)
        except (OSError, asyncio.TimeoutError):
            pass


def handshake(port: int, token: str, terminal: str) -> bytes:
    """The WebSocket upgrade request for a terminal's view."""
    key = base64.b64encode(os.urandom(16)).decode()
    return (
        f"GET /ws/terminals/{terminal} HTTP/1.1\r\n"
        f"Host: 127.0.0.1:{port}\r\n"
        f"Origin: http://127.0.0.1:{port}\r\n"
        f"Cookie: dsh_ui_{port}={token}\r\n"
        "Upgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
    ).encode()


class StalledViewer:
    """A viewer that stopped reading: a blocking socket with a small
    receive buffer that reads nothing after the upgrade's answer."""

    def __init__(self, port: int, token: str, terminal: str):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.sock.settimeout(30)
        self.sock.connect(("127.0.0.1", port))
        self.sock.sendall(handshake(port, token, terminal))
        head = b""
        while b"\r\n\r\n" not in head:
            byte = self.sock.recv(1)
            assert byte, head
            head += byte
        assert head.startswith(b"HTTP/1.1 101"), head
        self.port = self.sock.getsockname()[1]

    def leave(self):
        """Closes its side as a WebSocket client does — a close frame,
        then the end of its stream — still reading nothing."""
        mask = os.urandom(4)
        payload = (1000).to_bytes(2, "big")
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(bytes([0x88, 0x80 | len(payload)]) + mask + masked)
        self.sock.shutdown(socket.SHUT_WR)

    def close(self):
        self.sock.close()


def tcp_rows():
    """The IPv4 TCP sockets: (local port, remote port, state, send queue,
    receive queue, inode). A listener's (state 0A) receive queue is its
    backlog of connections not accepted yet."""
    rows = []
    with open("/proc/net/tcp") as f:
        for line in f.read().splitlines()[1:]:
            fields = line.split()
            local, remote, state = fields[1], fields[2], fields[3]
            tx, rx = (int(q, 16) for q in fields[4].split(":"))
            rows.append((int(local.split(":")[1], 16), int(remote.split(":")[1], 16),
                         state, tx, rx, fields[9]))
    return rows


def send_queue(port: int, peer: int):
    """Bytes the page's side of the connection to local port `peer` has
    written that the peer did not take, or None without that connection."""
    for local, remote, state, tx, _, _ in tcp_rows():
        if local == port and remote == peer and state != "0A":
            return tx
    return None


def page_connections(pid: int, port: int, peer=None) -> int:
    """How many connections of the page on `port` (to local port `peer`,
    when given) process `pid` holds open: its listener is not counted, nor
    a socket the kernel still flushes after the process closed it."""
    held = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            held.add(target[len("socket:["):-1])
    return sum(1 for local, remote, state, _, _, inode in tcp_rows()
               if local == port and state != "0A" and inode in held
               and (peer is None or remote == peer))


async def open_viewers(port, token, terminal, n, stalled):
    """`n` viewers, of which `stalled` never read."""
    viewers = [Viewer(port, token, terminal, reads=i >= stalled) for i in range(n)]
    for v in viewers:
        await v.open()
    return viewers


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rfind(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_s() -> float:
    """CPU seconds (user + system) this process has used so far."""
    t = os.times()
    return t.user + t.system


def fd_count(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class RssPeak:
    """Samples a process's resident memory every 20 ms while it runs."""

    def __init__(self, pid: int):
        self.pid = pid
        self.peak = rss_kib(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            try:
                self.peak = max(self.peak, rss_kib(self.pid))
            except (OSError, AssertionError):
                return
            self._stop.wait(0.02)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def flood_command(nbytes: int) -> str:
    """A shell command printing `nbytes` in numbered 100-byte lines (each
    screen differs from the last, so every frame is rendered and sent)."""
    return f"seq -f %099.0f 1 {nbytes // 100}"


async def timed_flood(agent, terminal: str, nbytes: int) -> float:
    """Sends the flood as the agent; seconds until its send settled."""
    began = time.monotonic()
    r = await agent.call_tool(
        "terminal_send",
        {"id": terminal, "text": flood_command(nbytes), "timeout_ms": 600_000},
    )
    took = time.monotonic() - began
    assert not r.isError, r.content[0].text
    assert r.structuredContent["reason"] == "prompt", r.structuredContent
    return took


def median(xs):
    return statistics.median(xs)
