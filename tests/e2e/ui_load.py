"""Viewers of a `dsh ui` terminal without a browser, for the load test and
the `cargo xtask bench ui` benchmark: raw WebSocket connections that
either drain every frame as fast as they come or never read at all (a
viewer that fell behind), and a sampler of a process's memory."""

import asyncio
import base64
import os
import statistics
import threading
import time


def page_of(url: str):
    """(port, token) of a URL printed by `dsh ui`."""
    rest = url.split("http://127.0.0.1:", 1)[1]
    port, query = rest.split("/?token=", 1)
    return int(port), query


class Viewer:
    """One WebSocket viewer of a terminal's screens."""

    def __init__(self, port: int, token: str, terminal: str, reads: bool):
        self.port, self.token, self.terminal, self.reads = port, token, terminal, reads
        self.received = 0
        self.frames = 0
        self.reader = self.writer = self.task = None

    async def open(self):
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        key = base64.b64encode(os.urandom(16)).decode()
        self.writer.write(
            (
                f"GET /ws/terminals/{self.terminal} HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{self.port}\r\n"
                f"Origin: http://127.0.0.1:{self.port}\r\n"
                f"Cookie: dsh_ui_{self.port}={self.token}\r\n"
                "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
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
