"""Waiting for events in the end-to-end tests.

A test synchronises on an event: a reply, a notification, output it has
read, a process appearing in or leaving /proc. When the event has no
notification of its own, the test polls for it with these helpers instead
of sleeping for a guessed while: the wait ends as soon as the condition
holds, and only a hang (nothing for HANG seconds) fails the test, so it
passes on a loaded machine too.

This module is the one place the tests may sleep; a tidy check in xtask
fails when a test file calls a sleep for synchronisation."""

import time

import anyio

HANG = 30.0
"""The bound every wait here uses, in seconds: long enough that only a hang reaches it."""


def _pauses():
    """Short pauses at first (most events come quickly), then backing off."""
    yield from (0.001, 0.002, 0.005, 0.01, 0.02)
    while True:
        yield 0.05


def wait_until(condition, what, timeout_s=HANG):
    """Polls `condition()` until it is truthy and returns its value; fails
    naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    for pause in _pauses():
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout_s} s and still not: {what}")
        time.sleep(pause)


async def eventually(probe, what, timeout_s=HANG):
    """Awaits `probe()` until it returns a truthy value and returns it;
    fails naming `what` after `timeout_s`. The pauses yield to the event
    loop, so the MCP client keeps receiving meanwhile."""
    deadline = time.monotonic() + timeout_s
    for pause in _pauses():
        value = await probe()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"waited {timeout_s} s and still not: {what}")
        await anyio.sleep(pause)


def comm(pid):
    """The command name of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def in_foreground(sid, name):
    """Whether a process named `name` is in the terminal foreground process
    group of session `sid` (the command a send started is running, not
    still being started by the shell)."""
    from conftest import processes

    for pid, _ppid, psid, state in processes():
        if psid != sid or state in ("Z", "X"):
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        pgid, tpgid = int(fields[2]), int(fields[5])
        if pgid == tpgid and comm(pid) == name:
            return True
    return False
