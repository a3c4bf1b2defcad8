"""Benchmark: how long each program of the conformance corpus
(tests/e2e/corpus.py) takes to settle through `dsh mcp`, next to the
floor for the same step: the same program on a bare pty (Python's
`os.openpty` and `subprocess`, no sandbox, no MCP), the same keys
written, the output read until the step's expected text appears.

For each program, one step is timed (the one `corpus.py` marks `bench`):
every round runs the program's steps from the start, in a fresh terminal
(dsh) or a fresh pty (the floor), and times that step: for dsh, the
`terminal_send` call as the client sees it; for the floor, from writing
the keys to the expected output. A program whose steps do not settle as
the corpus expects is listed with what went wrong instead of figures.

Prints, per program, the dsh median and p90, the floor's median and p90
and the ratio of the medians. Run with `cargo xtask bench corpus
[--quick]` (`--quick`: one round on the debug build, figures not to be
quoted; BENCH_N sets the number of rounds; BENCH_PROGRAMS, a
comma-separated list of names, runs only those programs)."""

import fcntl
import os
import pathlib
import re
import select
import shutil
import signal
import statistics
import struct
import subprocess
import sys
import tempfile
import termios
import time

import anyio

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "e2e"))

from conftest import connect, stop_daemons  # noqa: E402
from corpus import PROGRAMS, cleanup, missing, raw_env, server_env, strip_ansi  # noqa: E402
from waiting import eventually  # noqa: E402

from common import pct  # noqa: E402

QUICK = "--quick" in sys.argv[1:]
ROUNDS = int(os.environ.get("BENCH_N", "1" if QUICK else "7"))
TIMEOUT_S = 5.0
os.environ.setdefault("DSH_BIN", os.path.abspath("target/release/dsh"))


def bench_index(program):
    for i, step in enumerate(program.steps):
        if step.bench:
            return i
    return None


def fresh_dir(base, program, label):
    slug = re.sub(r"[^\w.-]", "_", program.name)
    root = base / f"{slug}-{label}"
    root.mkdir()
    if program.setup:
        program.setup(root)
    return root


# --- dsh through MCP ---------------------------------------------------------


async def dsh_round(s, program, root):
    """Runs the program's steps in a new terminal; returns the bench
    step's settle time in ms, as the client saw the call."""
    args = {"cwd": str(root), "rows": program.rows, "cols": program.cols}
    if program.command:
        args["command"] = program.command
    if program.env:
        args["env"] = program.terminal_env(root)
    opened = await s.call_tool("terminal_open", args)
    if opened.isError:
        raise RuntimeError(f"terminal_open: {opened.content[0].text}")
    tid = opened.structuredContent["id"]
    timed = None
    try:
        for i, step in enumerate(program.steps[: bench_index(program) + 1]):
            if step.poll:
                await poll(s, tid, step)
                continue
            started = time.perf_counter()
            r = await s.call_tool("terminal_send", {
                "id": tid, "text": step.text, "submit": step.submit, "timeout_ms": int(TIMEOUT_S * 1000)})
            elapsed = (time.perf_counter() - started) * 1000
            reply = r.structuredContent or {}
            if r.isError or reply.get("reason") not in step.reasons() or (
                step.out is not None and not re.search(step.out, reply.get("output", ""))
            ):
                raise RuntimeError(
                    f"step {i + 1} ({step.name}) settled as {reply.get('reason')!r} "
                    f"after {elapsed:.0f} ms with {reply.get('output', '')[-80:]!r}")
            timed = elapsed
        return timed
    finally:
        await s.call_tool("terminal_close", {"id": tid})


async def poll(s, tid, step):
    """Reads the stream until the step's output appears (output the
    program prints by itself)."""
    seen = []

    async def appeared():
        r = await s.call_tool("terminal_read", {"id": tid})
        seen.append(r.structuredContent["output"])
        return re.search(step.out, "".join(seen))

    try:
        await eventually(appeared, step.out, timeout_s=TIMEOUT_S)
    except AssertionError as e:
        raise RuntimeError(f"step {step.name}: {e}") from None


async def dsh_samples(base, programs):
    """{program name: [ms]} or {program name: "what went wrong"}."""
    out = {}
    env, ws = server_env(base)
    try:
        async with connect(env, cwd=str(ws)) as s:
            for n in range(ROUNDS):
                for program in programs:
                    if isinstance(out.get(program.name), str):
                        continue
                    try:
                        ms = await dsh_round(s, program, fresh_dir(ws, program, f"dsh{n}"))
                    except RuntimeError as e:
                        out[program.name] = str(e)
                        continue
                    out.setdefault(program.name, []).append(ms)
    finally:
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
    return out


# --- the floor: a bare pty ---------------------------------------------------

CPR_QUERY = b"\x1b[6n"


class RawPty:
    """A program on a pty of its own, read by this process. Answers a
    cursor-position query as a terminal would, since some line editors
    (irb's) wait for the answer."""

    def __init__(self, argv, cwd, env, rows, cols):
        self.master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        self.proc = subprocess.Popen(
            argv, cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave,
            start_new_session=True, preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0))
        os.close(slave)
        self.eof = False

    def wait_for(self, pattern, after="", deadline_s=TIMEOUT_S):
        """Reads until `pattern` matches the escape-free output that
        follows the echo of `after` (or all of it when the echo is not
        there), or the program's end when `pattern` is None."""
        buf = b""
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            ready, _, _ = select.select([self.master], [], [], deadline - time.monotonic())
            if not ready:
                continue
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                chunk = b""
            if not chunk:
                self.eof = True
                if pattern is None:
                    return
                break
            if CPR_QUERY in chunk:
                os.write(self.master, b"\x1b[1;1R")
            buf += chunk
            if pattern is None:
                continue
            text = strip_ansi(buf.decode(errors="replace"))
            at = text.find(after) if after else -1
            if re.search(pattern, text[at + len(after):] if at >= 0 else text):
                return
        raise RuntimeError(f"waited {deadline_s} s for {pattern!r}; read {strip_ansi(buf.decode(errors='replace'))[-120:]!r}")

    def wait_until_started(self, deadline_s=TIMEOUT_S):
        """Waits until the terminal's foreground group is no longer the
        shell's (the shell started the command line's program)."""
        deadline = time.monotonic() + deadline_s
        while os.tcgetpgrp(self.master) == self.proc.pid:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the shell kept the terminal for {deadline_s} s")
            time.sleep(0.001)  # sleep-ok: polling the terminal's foreground group, which has no event

    def close(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        os.close(self.master)


def floor_pattern(step):
    """What the floor waits for after a step's keys: its own `floor`
    regex, else its `out` without the anchors (the raw stream holds the
    echo and redraws the reply does not), else the shell's prompt."""
    if step.floor:
        return step.floor
    if step.reasons() == ("exit",):
        return None
    if step.out and step.out not in (r"^$", r"^\n?$"):
        return step.out.removeprefix("^").removesuffix("$")
    if "prompt" in step.reasons():
        return r"raw\$ $"
    return ""


def raw_round(program, root):
    argv = program.command or ["bash", "--norc", "--noprofile", "-i"]
    pty = RawPty(argv, root, raw_env(root, program), program.rows, program.cols)
    try:
        if not program.command:
            pty.wait_for(r"raw\$ $")
        elif program.open_out:
            pty.wait_for(program.open_out.removesuffix("$"))
        timed = None
        for step in program.steps[: bench_index(program) + 1]:
            if step.poll:
                pty.wait_for(step.out)
                continue
            keys = step.text + ("\r" if step.submit else "")
            started = time.perf_counter()
            os.write(pty.master, keys.encode())
            pattern = floor_pattern(step)
            pty.wait_for(pattern, after=step.text if step.submit else "")
            timed = (time.perf_counter() - started) * 1000
            if pattern == "" and not program.command and step.submit:
                # A program the shell starts with nothing to show: the
                # next keys wait until the shell handed it the terminal,
                # or they race the shell's line editor (typed ahead in
                # its raw mode, `\r` is never made a newline).
                pty.wait_until_started()
        return timed
    finally:
        pty.close()
        end_marked(root)
        if "gpgconf" in program.requires:
            # gpg started its agent, which outlives the pty
            subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=raw_env(root, program), check=False)


def end_marked(root):
    """Kills every process of this user whose environment carries the
    floor's marker for `root`: what left the pty's session (tmux's and
    screen's servers, a daemonised agent) outlives the process group."""
    marker = f"DSH_CORPUS_FLOOR={root}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                marked = marker in f.read().split(b"\0")
        except OSError:
            continue
        if marked:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except ProcessLookupError:
                pass


def raw_samples(base, programs):
    out = {}
    home = base / "raw-home"
    home.mkdir()
    os.environ["HOME"] = str(home)
    for n in range(ROUNDS):
        for program in programs:
            if isinstance(out.get(program.name), str):
                continue
            try:
                ms = raw_round(program, fresh_dir(base, program, f"raw{n}"))
            except RuntimeError as e:
                out[program.name] = str(e)
                continue
            out.setdefault(program.name, []).append(ms)
    return out


def main():
    programs = [p for p in PROGRAMS if bench_index(p) is not None]
    only = [n for n in os.environ.get("BENCH_PROGRAMS", "").split(",") if n]
    if only:
        unknown = set(only) - {p.name for p in programs}
        if unknown:
            sys.exit(f"BENCH_PROGRAMS names no benchmarked program: {', '.join(sorted(unknown))}")
        programs = [p for p in programs if p.name in only]
    absent = {p.name: missing(p) for p in programs if missing(p) or (p.skip_if and p.skip_if())}
    programs = [p for p in programs if p.name not in absent]
    with tempfile.TemporaryDirectory(prefix="bench-corpus-") as tmp:
        base = pathlib.Path(tmp)
        real_home = os.environ.get("HOME")
        try:
            raw = raw_samples(base, programs)
        finally:
            if real_home is not None:
                os.environ["HOME"] = real_home
            # the servers the setups started (a loopback sshd)
            cleanup()
        try:
            dsh = anyio.run(dsh_samples, base, programs)
        finally:
            cleanup()
    print(f"\nsettle time of one step per program, {ROUNDS} round(s); ms; floor: the same keys on a bare pty\n")
    print(f"| {'program':<22} | {'step':<20} | {'dsh med':>8} | {'dsh p90':>8} | {'raw med':>8} | {'raw p90':>8} | {'ratio':>7} |")
    print(f"|{'-' * 24}|{'-' * 22}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 10}|{'-' * 9}|")
    problems = []
    for p in programs:
        step = p.steps[bench_index(p)].name
        d, r = dsh.get(p.name), raw.get(p.name)
        if isinstance(d, str) or isinstance(r, str) or not d or not r:
            cells = ["n/a"] * 4
            ratio = "-"
            if isinstance(d, str):
                problems.append(f"{p.name} (dsh): {d}")
            if isinstance(r, str):
                problems.append(f"{p.name} (floor): {r}")
        else:
            dm, rm = statistics.median(d), statistics.median(r)
            cells = [f"{dm:.1f}", f"{pct(d, 0.9):.1f}", f"{rm:.1f}", f"{pct(r, 0.9):.1f}"]
            ratio = f"{dm / rm:.1f}x" if rm > 0 else "-"
        print(f"| {p.name:<22} | {step[:20]:<20} | {cells[0]:>8} | {cells[1]:>8} | {cells[2]:>8} | {cells[3]:>8} | {ratio:>7} |")
    for name, what in absent.items():
        print(f"| {name:<22} | not run: {what or 'skipped on this machine'}")
    if problems:
        print("\nno figures for:")
        for line in problems:
            print(f"  {line}")


if __name__ == "__main__":
    main()
