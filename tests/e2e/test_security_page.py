"""The `dsh ui` page against other users of the machine: its secret never
appears in a process's argv or environment (which every user can read
through `ps` and /proc), a sign-in link works once, and a flood of idle
connections to its port leaves the daemon with bounded descriptors and a
bounded log, still serving everyone else."""

import contextlib
import glob
import http.client
import json
import os
import re
import resource
import select
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

import anyio
from mcp import types
import pytest

import waiting
from conftest import connect, daemons_of, dsh_bin, ok
from ui_load import fd_count, page_connections, page_of, tcp_rows

pytestmark = pytest.mark.anyio


# ---- helpers ----------------------------------------------------------------


def get(url: str, headers=None, timeout=30):
    """GET `url` without following redirects: (status, headers, body)."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        path = parts.path or "/"
        if parts.query:
            path += "?" + parts.query
        conn.request("GET", path, headers=headers or {})
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(errors="replace")
    finally:
        conn.close()


def cookie_of(set_cookie: str):
    """(name, value, attributes) of a Set-Cookie header."""
    first, *attrs = [p.strip() for p in set_cookie.split(";")]
    name, value = first.split("=", 1)
    return name, value, attrs


def secrets_of(url: str):
    """Every query value of a URL (a code, a token): what must not leak."""
    query = urllib.parse.urlsplit(url).query
    return {v for vs in urllib.parse.parse_qs(query).values() for v in vs if v}


def processes_holding(secrets):
    """(pid, where, argv) of every process whose argv or environment holds
    one of `secrets`, from /proc (as every user reads them with `ps e`)."""
    found = []
    wanted = [s.encode() for s in secrets if len(s) >= 16]
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for where in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{where}", "rb") as f:
                    data = f.read()
            except OSError:
                continue
            if any(s in data for s in wanted):
                try:
                    with open(f"/proc/{entry}/cmdline", "rb") as f:
                        argv = f.read().split(b"\0")
                except OSError:
                    argv = []
                found.append((int(entry), where, argv))
    return found


def printed_url(env) -> str:
    proc = subprocess.run([dsh_bin(), "ui"], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    url = proc.stdout.strip()
    assert url.startswith("http://127.0.0.1:"), url
    return url


# A browser for `dsh ui --open`: records its argv, its environment and
# /proc/self/cmdline, fetches what it was handed (a URL, or a file that
# navigates to one) the way a browser would, and stays alive until the test
# has looked at every process on the machine. The URL it fetches never
# reaches a command line (no curl).
BROWSER = r'''import html, http.client, json, os, re, signal, sys, urllib.parse
signal.alarm(120)  # never outlives a test that died
record = {{"pid": os.getpid(), "argv": sys.argv, "env": dict(os.environ)}}
with open("/proc/self/cmdline", "rb") as f:
    record["cmdline"] = f.read().decode(errors="replace")
given = sys.argv[1]
path = None
if given.startswith("file://"):
    path = urllib.parse.unquote(urllib.parse.urlsplit(given).path)
elif given.startswith("/"):
    path = given
if path is not None:
    st = os.stat(path)
    record["file_mode"] = st.st_mode & 0o777
    record["dir_mode"] = os.stat(os.path.dirname(path)).st_mode & 0o777
    record["file_uid"] = st.st_uid
    text = open(path).read()
    m = re.search(r"url=([^\"'>\s]+)", text, re.I)
    url = html.unescape(m.group(1))
else:
    url = given
record["url"] = url
parts = urllib.parse.urlsplit(url)
conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
conn.request("GET", parts.path + ("?" + parts.query if parts.query else ""))
r = conn.getresponse()
record.update(status=r.status, set_cookie=r.getheader("Set-Cookie"),
              body=r.read().decode(errors="replace")[:2000])
with open({record!r} + ".tmp", "w") as f:
    json.dump(record, f)
os.rename({record!r} + ".tmp", {record!r})
open({release!r}).read()  # the test looked: exit
'''


async def test_open_never_puts_the_secret_on_a_command_line(isolated_env, tmp_path):
    """`dsh ui --open` with $BROWSER a recording script: no process's argv
    or environment holds the page's secret or a usable sign-in code; the
    browser gets the page from a file only the user can read; the code in
    it works once; the printed URL works once; `dsh ui` mints a fresh one
    each time; the cookie keeps the person signed in."""
    record = tmp_path / "browser-record.json"
    release = tmp_path / "browser-release"
    os.mkfifo(release)
    script = tmp_path / "browser.py"
    script.write_text(BROWSER.format(record=str(record), release=str(release)))
    # $BROWSER runs this Python through a shell wrapper: a `#!` line cannot
    # name an interpreter whose path has a space (a checkout's .venv).
    browser = tmp_path / "browser"
    browser.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {shlex.quote(str(script))} "$@"\n')
    browser.chmod(0o700)
    env = dict(isolated_env, BROWSER=str(browser))
    proc = subprocess.run([dsh_bin(), "ui", "--open"], env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    waiting.wait_until(record.exists, "the browser to fetch what it was given")
    seen = json.loads(record.read_text())
    try:
        assert seen["status"] == 200, seen
        assert seen["set_cookie"], seen
        name, secret, attrs = cookie_of(seen["set_cookie"])
        assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= set(attrs), seen["set_cookie"]
        handed = secrets_of(seen["url"]) | {secret}
        # While the browser runs: nothing on the machine shows the secret
        # or the code, in argv or environment.
        leaks = processes_holding(handed)
        assert leaks == [], f"the page's secret or code is visible in: {leaks}"
        for what in ("argv", "env", "cmdline"):
            text = json.dumps(seen[what])
            assert not any(s in text for s in handed), (what, seen[what])
        # The browser got a file only this user can read, in a private dir.
        assert "file_mode" in seen, f"the browser was handed {seen['argv'][1:]!r}, not a file"
        assert seen["file_mode"] == 0o600 and seen["dir_mode"] == 0o700, seen
        assert seen["file_uid"] == os.getuid(), seen
    finally:
        with open(release, "w") as f:
            f.write("go")
    waiting.wait_until(lambda: not os.path.exists(f"/proc/{seen['pid']}"),
                       "the browser script to exit")

    # The code, once used, is refused — with a page that says what to do.
    status, _, body = get(seen["url"])
    assert status == 401 and "UI_LOGIN_USED" in body, (status, body)
    assert "dsh ui" in body, body
    # The cookie opens the page.
    base = seen["url"].split("/?", 1)[0]
    status, _, body = get(base + "/", {"Cookie": f"{name}={secret}"})
    assert status == 200 and "<html" in body.lower(), (status, body[:300])

    # The printed URL: works once, and each `dsh ui` mints a fresh one.
    url = printed_url(isolated_env)
    again = printed_url(isolated_env)
    assert url != again, "each `dsh ui` prints a fresh sign-in link"
    assert processes_holding(secrets_of(url) | secrets_of(again) | {secret}) == []
    status, headers, _ = get(url)
    assert status == 200, status
    assert cookie_of(headers["set-cookie"])[1] == secret
    status, headers, body = get(url)
    assert status == 401 and "set-cookie" not in headers, (status, headers, body)
    assert "UI_LOGIN_USED" in body and "dsh ui" in body, body
    status, headers, _ = get(again)
    assert status == 200 and "set-cookie" in headers, status
    # A used link in a browser that is signed in already just opens the
    # page: it moves on to the address without the code.
    status, headers, _ = get(url, {"Cookie": f"{name}={secret}"})
    assert (status, headers.get("location")) == (303, "/"), (status, headers)

    # Scripts: a bearer header read from a file only this user can read.
    (token_file,) = glob.glob(os.path.join(isolated_env["DSH_RUNTIME_DIR"], "*.ui-token"))
    assert os.stat(token_file).st_mode & 0o777 == 0o600
    with open(token_file) as f:
        bearer = f.read().strip()
    status, _, body = get(base + "/api/live", {"Authorization": f"Bearer {bearer}"})
    assert status == 200 and json.loads(body) == {"connections": []}, (status, body)
    # The secret itself is never accepted in a URL.
    status, _, _ = get(f"{base}/?token={secret}")
    assert status == 401, status
    status, _, _ = get(f"{base}/?login={secret}")
    assert status == 401, status


# ---- the port under a flood ---------------------------------------------------

FLOOD = 5_000
# Of which this many send a request for another host, each of which the
# page refuses and logs (the log must stay small all the same).
NOISY = 1_000
# What the daemon may hold beyond what it held before the flood: the
# page's caps on connections (documented in docs/subsystems/ui.md), plus
# slack for the daemon's own work meanwhile.
FD_BOUND = 300
LOG_BOUND = 64 * 1024


class FdSampler:
    """The most descriptors a process held, sampled from /proc until stopped."""

    def __init__(self, pid):
        self.pid, self.peak = pid, fd_count(pid)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self._stop.is_set():
            with contextlib.suppress(OSError):
                self.peak = max(self.peak, fd_count(self.pid))
            self._stop.wait(0.005)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()


def flood(port: int, n: int, noisy: int):
    """`n` non-blocking connections to the page (so a full backlog never
    blocks the test); `noisy` of them send a request for another host once
    connected (within a bounded wait). Returns the sockets."""
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.setblocking(False)
        s.connect_ex(("127.0.0.1", port))
        socks.append(s)
    pending = {s.fileno(): s for s in socks[:noisy]}
    poller = select.poll()
    for fd in pending:
        poller.register(fd, select.POLLOUT)
    request = (f"GET / HTTP/1.1\r\nHost: flood.example:{port}\r\n\r\n").encode()
    deadline = time.monotonic() + 20
    while pending and time.monotonic() < deadline:
        for fd, _ in poller.poll(100):
            s = pending.pop(fd)
            poller.unregister(fd)
            with contextlib.suppress(OSError):
                s.send(request)
    return socks


async def test_a_flood_of_idle_connections_leaves_the_daemon_working(isolated_env, tmp_path):
    """5,000 connections to the page that send nothing (and 1,000 that send
    a request for another host), held open, with the daemon at an ordinary
    descriptor limit (1,024): its descriptors and its log stay bounded, and
    `dsh ps`, a new agent's `bash` call and a signed-in page request work
    during the flood."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = FLOOD + 512
    if hard < need:
        pytest.skip(f"this test needs {need} descriptors; the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    socks = []
    try:
        port, secret = page_of(printed_url(isolated_env))
        name = f"dsh_ui_{port}"
        (pid,) = daemons_of(isolated_env)
        # An ordinary desktop limit for the daemon.
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (1024, 1024))
        log = os.path.join(isolated_env["XDG_DATA_HOME"], "dsh", "daemon.log")
        assert os.path.exists(log), log
        log_before = os.path.getsize(log)
        fds_before = fd_count(pid)
        with FdSampler(pid) as fds:
            socks = await anyio.to_thread.run_sync(flood, port, FLOOD, NOISY)
            # During the flood: a signed-in page request, `dsh ps`, and a
            # new agent's call all work.
            status, _, body = await anyio.to_thread.run_sync(
                lambda: get(f"http://127.0.0.1:{port}/api/live", {"Cookie": f"{name}={secret}"}, 60))
            assert status == 200, (status, body)
            ps = await anyio.to_thread.run_sync(lambda: subprocess.run(
                [dsh_bin(), "ps"], env=isolated_env, capture_output=True, text=True, timeout=60))
            assert ps.returncode == 0, ps.stderr
            project = tmp_path / "agent"
            project.mkdir()
            with anyio.fail_after(120):
                async with connect(isolated_env, cwd=str(project)) as agent:
                    r = ok(await agent.call_tool("bash", {"command": "echo still-serving"}))
                    assert "still-serving" in r["output"], r
            peak = fds.peak
        assert peak - fds_before <= FD_BOUND, (
            f"the daemon held {peak} descriptors under the flood ({fds_before} before)")

        def logged_since():
            with open(log, "rb") as f:
                f.seek(log_before)
                return f.read().decode(errors="replace")

        # The refusals beyond the first few are counted, in one line once
        # the log's window is over (10 s).
        waiting.wait_until(lambda: re.search(r"suppressed \d+ repeats", logged_since()),
                           "the log to count the suppressed repeats")
        grown = os.path.getsize(log) - log_before
        print(f"\n{FLOOD} connections ({NOISY} refused): daemon descriptors {fds_before} before, "
              f"at most {peak} during; its log grew {grown} bytes:\n{logged_since()[-600:]}")
        assert grown <= LOG_BOUND, f"the daemon's log grew {grown} bytes under the flood"
    finally:
        for s in socks:
            s.close()
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    # Once the flood is gone, so are its connections.
    (pid,) = daemons_of(isolated_env)
    waiting.wait_until(lambda: page_connections(pid, port) == 0,
                       "the flood's connections to be gone from the daemon")


def hold_as(uid: int, port: int, n: int, ready_w: int, release_r: int):
    """In a child: become `uid`, open `n` connections to the page that send
    nothing, report how many connected, hold them until released."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
    socks = []
    for _ in range(n):
        s = socket.socket()
        s.settimeout(10)
        try:
            s.connect(("127.0.0.1", port))
            socks.append(s)
        except OSError:
            s.close()
    os.write(ready_w, json.dumps([s.getsockname()[1] for s in socks]).encode() + b"\n")
    os.read(release_r, 1)


async def test_another_users_connections_get_a_small_share(isolated_env):
    """Connections from another user (here: nobody) to the page are held
    only up to a small cap, however many it opens, and take nothing from
    the daemon's own user: a signed-in request goes through meanwhile."""
    if os.getuid() != 0:
        pytest.skip("needs root, to open connections as another user")
    port, secret = page_of(printed_url(isolated_env))
    name = f"dsh_ui_{port}"
    (pid,) = daemons_of(isolated_env)
    ready_r, ready_w = os.pipe()
    release_r, release_w = os.pipe()
    child = os.fork()
    if child == 0:
        try:
            os.close(ready_r)
            os.close(release_w)
            hold_as(65534, port, 200, ready_w, release_r)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(release_r)
    try:
        with os.fdopen(ready_r) as ready:
            ports = set(json.loads(await anyio.to_thread.run_sync(ready.readline)))
        assert len(ports) > 100, f"only {len(ports)} connections opened"

        def held_of_theirs():
            return sum(page_connections(pid, port, p) for p in ports)

        # The daemon accepts them all, at once or in turn, and keeps at
        # most its cap: wait until its accept queue is empty.
        def accepted_all():
            return any(local == port and state == "0A" and backlog == 0
                       for local, _, state, _, backlog, _ in tcp_rows())

        waiting.wait_until(accepted_all, "the daemon to accept the other user's connections")
        held = held_of_theirs()
        print(f"\nanother user opened {len(ports)} connections; the daemon holds {held}")
        assert held <= 16, f"the daemon holds {held} connections of another user"
        status, _, body = get(f"http://127.0.0.1:{port}/api/live", {"Cookie": f"{name}={secret}"})
        assert status == 200, (status, body)
    finally:
        os.write(release_w, b"x")
        os.close(release_w)
        os.waitpid(child, 0)


# ---- WebSocket viewers hold their connection's place --------------------------

# The page's caps (crates/ui/src/server.rs MAX_STREAMS, crates/ui/src/conns.rs
# Limits::signed_in), as docs/subsystems/ui.md documents them.
MAX_STREAMS = 64
SIGNED_IN = 128


async def signed_in_request(port: int, token: str):
    """A keep-alive `GET /api/live` with the cookie: (status, body, writer);
    the connection stays open until the writer is closed (or the daemon
    closes it)."""
    import asyncio

    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write((f"GET /api/live HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                  f"Cookie: dsh_ui_{port}={token}\r\n\r\n").encode())
    head = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 60)).decode()
    length = int(re.search(r"(?im)^content-length:\s*(\d+)", head).group(1))
    body = (await asyncio.wait_for(reader.readexactly(length), 60)).decode()
    return int(head.split()[1]), body, writer


async def test_a_terminal_viewer_counts_as_a_connection_while_its_socket_is_open(
        isolated_env, tmp_path):
    """A terminal view's WebSocket keeps its connection counted (signed in,
    and in all) for as long as the socket is open, not just until the
    upgrade: with MAX_STREAMS viewers open, exactly SIGNED_IN - MAX_STREAMS
    more signed-in connections are let in and the next gets 503 UI_BUSY."""
    from ui_load import Viewer

    async with connect(isolated_env, cwd=tmp_path) as agent:
        ok(await agent.call_tool("terminal_open", {}))
        port, token = page_of(printed_url(isolated_env))
        (pid,) = daemons_of(isolated_env)
        viewers = [Viewer(port, token, "pty-1", reads=True) for _ in range(MAX_STREAMS)]
        writers = []
        try:
            for v in viewers:
                await v.open()
            # Only the viewers' connections are left (the sign-in's is gone).
            waiting.wait_until(lambda: page_connections(pid, port) == MAX_STREAMS,
                               "the page to hold just the viewers' connections")
            # One after the other: each is signed in (out of the fresh
            # share) before the next arrives. All at once, more than the
            # fresh share of one peer could be waiting to be read on a
            # loaded machine, and the oldest would be pushed out, as the
            # fresh share is meant to.
            answers = []
            for _ in range(SIGNED_IN - MAX_STREAMS + 1):
                answers.append(await signed_in_request(port, token))
                writers.append(answers[-1][2])
            statuses = sorted(s for s, _, _ in answers)
            busy = [b for s, b, _ in answers if s == 503]
            assert statuses == [200] * (SIGNED_IN - MAX_STREAMS) + [503], statuses
            assert busy[0].startswith("UI_BUSY: the page has as many signed-in connections"), busy
        finally:
            for w in writers:
                w.close()
            for v in viewers:
                await v.close()
    waiting.wait_until(lambda: page_connections(pid, port) == 0,
                       "the viewers' and the requests' connections to be gone")


# ---- the link a client is sent for one answer --------------------------------


async def test_an_answer_link_opens_its_one_answer_once(isolated_env, tmp_path):
    """The link to a secret prompt's answer page reaches the MCP client (and
    whatever logs it keeps): it signs in to that one page and its form,
    nothing else, and only until the prompt is answered; links minted for
    prompts push out none of the person's own `dsh ui` sign-in codes."""
    from test_approvals import open_page, request
    from test_secrets import GETPASS, SECRET

    env = isolated_env
    links = []

    async def first_opened_then_declined(context, params):
        links.append(params.url)
        return types.ElicitResult(action="accept" if len(links) == 1 else "decline")

    problems = []

    def refused(status, what):
        if status not in (401, 403):
            problems.append(f"{what}: {status}")

    def status_of(method, url, cookie=None, body=None):
        """The status alone (an event stream's body never ends)."""
        parts = urllib.parse.urlsplit(url)
        conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
        headers = {"Cookie": cookie} if cookie else {}
        if body is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        try:
            conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=body, headers=headers)
            return conn.getresponse().status
        finally:
            conn.close()

    async with connect(env, cwd=tmp_path, elicitation_callback=first_opened_then_declined) as s:
        t1 = ok(await s.call_tool("terminal_open", {}))["id"]
        t2 = ok(await s.call_tool("terminal_open", {}))["id"]
        # The person's own sign-in link, not opened yet.
        mine = printed_url(env)
        async with anyio.create_task_group() as tg:
            sent = {}

            async def send():
                sent["r"] = await s.call_tool("terminal_send", {"id": t1, "text": GETPASS, "timeout_ms": 60000})

            tg.start_soon(send)

            async def linked():
                return bool(links)

            await waiting.eventually(linked, "the answer page's link")
            link = links[0]
            assert urllib.parse.urlsplit(link).path == f"/answer/{t1}", link
            base, cookie, path = await anyio.to_thread.run_sync(lambda: open_page(link))
            status, _, page = request("GET", base + path, cookie)
            assert status == 200 and 'name="secret"' in page, (status, page)
            for other in ("/api/live", "/", "/live", f"/answer/{t2}", f"/terminals/{t1}",
                          "/approve/ap-1", "/api/live/events"):
                refused(status_of("GET", base + other, cookie), f"the link's cookie read {other}")
            refused(status_of("POST", base + f"/answer/{t2}", cookie, "secret=x&page_token=0"),
                    "the link's cookie posted another terminal's answer")

            # Forty more prompts, each sent its own link (declined).
            ok(await s.call_tool("terminal_send", {
                "id": t2, "text": "for i in $(seq 41); do read -rs -p 'Password: ' x; echo; done"}))
            for _ in range(40):
                await s.call_tool("terminal_send", {"id": t2, "text": "x"})
            assert len(links) >= 41, len(links)
            status, _, _ = request("GET", links[-1])
            refused(status, "a declined link still signed in")

            token = re.search(r'name="page_token" value="([^"]+)"', page).group(1)
            body = urllib.parse.urlencode({"page_token": token, "secret": SECRET})
            status, _, text = request("POST", base + path, cookie, body)
            assert status == 200 and "Answered" in text, (status, text)
        assert "verified" in ok(await s.call_tool("terminal_read", {"id": t1, "since": 0}))["output"]
        refused(request("GET", base + path, cookie)[0], "the cookie after the answer")
        refused(request("POST", base + path, cookie, body)[0], "the cookie posting again after the answer")
        refused(request("GET", link, cookie)[0], "the link again, with its cookie, after the answer")
        refused(request("GET", link)[0], "the link again after the answer")
        # The person's own code, minted before the forty links, still signs in.
        status, headers, _ = request("GET", mine)
        if status != 200 or "set-cookie" not in headers:
            problems.append(f"the person's own sign-in code was pushed out: {status}")
    assert not problems, "\n".join(problems)
