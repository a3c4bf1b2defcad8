"""`dsh ui` in a real browser: Debian's headless Chromium driven by
Playwright (tests/node/ui_browser.mjs), a real daemon, and a real agent
(the Python MCP client) working while a person watches and types.

Screenshots of every page go to target/ui-screenshots/ (a CI artifact)."""

import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
import time

import anyio
import pytest

from conftest import ROOT, connect, dsh_bin, err, ok

pytestmark = pytest.mark.anyio

CHROMIUM = os.environ.get("DSH_TEST_CHROMIUM", "/usr/bin/chromium")
DRIVER = ROOT / "tests" / "node" / "ui_browser.mjs"
SHOTS = ROOT / "target" / "ui-screenshots"
# Generous: the page is pushed within a frame (50 ms) of a change; the
# figures measured are printed, never asserted on.
SEEN = 15_000


class Browser:
    """The driver process: one JSON command per line, one answer per line."""

    def __init__(self, workdir: pathlib.Path):
        if not os.access(CHROMIUM, os.X_OK):
            pytest.fail(f"{CHROMIUM} is missing: `cargo xtask test` installs Debian's chromium")
        if not (ROOT / "tests" / "node" / "node_modules" / "playwright-core").is_dir():
            pytest.fail("playwright-core is missing: `cargo xtask test` runs npm ci in tests/node")
        self.profile = tempfile.mkdtemp(prefix="chromium-", dir=workdir)
        env = dict(os.environ, PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD="1")
        self.log = open(workdir / "browser.log", "w+")
        self.proc = subprocess.Popen(
            ["node", str(DRIVER), self.profile],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            env=env,
            start_new_session=True,
        )
        self.lock = threading.Lock()
        ready = self._answer()
        assert ready.get("ready"), ready

    def _answer(self):
        line = self.proc.stdout.readline()
        if not line:
            self.log.seek(0)
            raise AssertionError(f"the browser driver ended: {self.log.read()[-4000:]}")
        return json.loads(line)

    def do(self, op, **args):
        with self.lock:
            self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
            self.proc.stdin.flush()
            answer = self._answer()
        assert answer["ok"], (
            f"{op} {args}: {answer['error']}\non {answer.get('url')}:\n{answer.get('page')}")
        return answer

    async def ado(self, op, **args):
        return await anyio.to_thread.run_sync(lambda: self.do(op, **args))

    def close(self):
        try:
            if self.proc.poll() is None:
                self.proc.stdin.write(json.dumps({"op": "close"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
        self.log.close()
        shutil.rmtree(self.profile, ignore_errors=True)


def chromium_processes(profile: str):
    """Browser processes of this test's profile, from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if profile.encode() in f.read():
                    out.append(int(entry))
        except OSError:
            continue
    return out


def dsh_out(env, *args) -> str:
    proc = subprocess.run(
        [dsh_bin(), *args], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def ui_url(env) -> str:
    proc = subprocess.run(
        [dsh_bin(), "ui"], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    url = proc.stdout.strip()
    assert url.startswith("http://127.0.0.1:") and "/?token=" in url, url
    return url


async def test_a_person_watches_an_agent_and_takes_the_keyboard(isolated_env, tmp_path):
    SHOTS.mkdir(parents=True, exist_ok=True)
    project = tmp_path / "project"
    project.mkdir()
    browser = Browser(tmp_path)
    profile = browser.profile
    try:
        async with connect(isolated_env, cwd=str(project)) as agent:
            ok(await agent.call_tool("bash", {"command": "echo first-call"}))
            # The session log writes in batches: wait until the store has
            # the session before the (server-rendered) page is asked.
            deadline = time.monotonic() + 30
            while "project" not in dsh_out(isolated_env, "session", "list"):
                assert time.monotonic() < deadline, "the session was never recorded"
                await anyio.sleep(0.1)
            url = ui_url(isolated_env)
            base = url.split("/?token=")[0]
            # The same page on a second ask: one server, one token.
            assert ui_url(isolated_env) == url

            # Workspaces: the project with its live session.
            r = await browser.ado("goto", url=url)
            assert r["status"] == 200 and r["url"] == base + "/", r
            await browser.ado("wait_text", text="project")
            await browser.ado("wait_selector", selector="section.workspace .badge.live")

            # Live: the agent, then its terminal as soon as it opens one.
            await browser.ado("goto", url=base + "/live")
            await browser.ado("wait_text", selector="#live", text="No terminals.")
            ok(await agent.call_tool(
                "terminal_open", {"command": ["python3", "-q"], "name": "repl"}))
            await browser.ado("wait_selector", selector='tr[data-terminal="pty-1"]')

            # A terminal: the live screen, read-only until the keyboard is taken.
            await browser.ado("click", selector='a[href="/terminals/pty-1"]')
            await browser.ado("wait_text", selector="#screen", text=">>>")
            await browser.ado("wait_selector", selector='body[data-socket="open"]')

            seen = {}

            def watch_for_two():
                seen["answer"] = browser.do(
                    "wait_text", selector="#screen", text="1+1\n2", timeout_ms=SEEN)
                seen["at"] = time.monotonic()

            async with anyio.create_task_group() as tg:
                tg.start_soon(anyio.to_thread.run_sync, watch_for_two)
                r = ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "1+1"}))
                replied = time.monotonic()
            assert r["output"].startswith("2\n") and r["reason"] == "input_wait", r
            print(f"\n`2` on the page {max(0.0, seen['at'] - replied) * 1000:.0f} ms "
                  f"after the agent's send returned")

            # Keys in a read-only view never reach the program.
            await browser.ado("click", selector="#screen")
            await browser.ado("type", text="y")
            await browser.ado("wait_text", selector="#notice", text="read-only")
            assert (await browser.ado("attr", selector="body", name="data-keyboard"))["value"] == "free"

            await browser.ado("click", selector="#take")
            await browser.ado("wait_selector", selector='body[data-keyboard="held"]')
            await browser.ado("type", text="6*7")
            await browser.ado("press", key="Enter")
            await browser.ado("wait_text", selector="#screen", text="6*7\n42")

            # While the person's command runs, the agent's send is refused.
            await browser.ado("type", text="import time; time.sleep(4); print('person-done')")
            await browser.ado("press", key="Enter")
            await browser.ado("wait_text", selector="#screen", text="time.sleep(4)")
            e = err(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print(1)"}))
            assert e["code"] == "SEND_ACTIVE" and e["retryable"] is True, e
            await browser.ado("wait_text", selector="#screen", text="person-done")
            await browser.ado("screenshot", path=str(SHOTS / "terminal.png"))

            # Once the person paused and the REPL waits, the agent goes on.
            deadline = time.monotonic() + 30
            while True:
                r = await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print('y' in dir())"})
                if not r.isError:
                    break
                assert err(r)["code"] == "SEND_ACTIVE" and time.monotonic() < deadline
                await anyio.sleep(0.1)
            assert ok(r)["output"].startswith("False\n"), "the read-only `y` never arrived"

            # The person's keys during an agent's active send are refused, on the page.
            job = ok(await agent.call_tool("terminal_send", {
                "id": "pty-1", "text": "time.sleep(3); print('agent-done')",
                "run_in_background": True}))
            await browser.ado("wait_text", selector="#screen", text="time.sleep(3)")
            await browser.ado("type", text="z = 1")
            await browser.ado("press", key="Enter")
            await browser.ado("wait_text", selector="#notice", text="an agent's send is active on pty-1")
            assert (await browser.ado("attr", selector="#notice", name="data-code"))["value"] == "SEND_ACTIVE"
            out = ok(await agent.call_tool("job_output", {"job_id": job["job_id"], "wait_ms": 20000}))
            assert "agent-done" in out["output"]
            r = ok(await agent.call_tool("terminal_send", {"id": "pty-1", "text": "print('z' in dir())"}))
            assert r["output"].startswith("False\n") and r["reason"] == "input_wait", r
            await browser.ado("click", selector="#release")
            await browser.ado("wait_selector", selector='body[data-keyboard="free"]')

            # A job: status and output, live.
            bash = ok(await agent.call_tool("bash", {
                "command": "for i in $(seq 1 40); do echo line-$i; sleep 0.05; done",
                "run_in_background": True}))
            await browser.ado("goto", url=f"{base}/live")
            await browser.ado("wait_selector", selector=f'tr[data-job="{bash["job_id"]}"]')
            await browser.ado("screenshot", path=str(SHOTS / "live.png"))
            await browser.ado("click", selector=f'a[href="/jobs/{bash["job_id"]}"]')
            await browser.ado("wait_text", selector="#job-output", text="line-40")
            await browser.ado("wait_text", selector="#job-facts", text="completed")
            await browser.ado("screenshot", path=str(SHOTS / "job.png"))

            # The session: its calls, newest first, and new ones as they happen.
            await browser.ado("goto", url=f"{base}/live")
            await browser.ado("click", selector='#live a[href^="/sessions/"]')
            await browser.ado("wait_selector", selector='body[data-page="session"][data-live="true"]')
            await browser.ado("wait_text", selector="#calls", text="SEND_ACTIVE")
            await browser.ado("wait_text", selector="#calls", text="input_wait")
            await browser.ado("wait_selector", selector="svg.chart.timeline")
            ok(await agent.call_tool("bash", {"command": "echo appended-while-watching"}))
            await browser.ado("wait_text", selector="#calls tr:first-child", text="appended-while-watching")
            await browser.ado("screenshot", path=str(SHOTS / "session.png"))

            await browser.ado("goto", url=base + "/")
            await browser.ado("wait_text", text="project")
            await browser.ado("screenshot", path=str(SHOTS / "workspaces.png"))
            errors = (await browser.ado("url"))["console_errors"]
            assert errors == [], errors

        # The agent left: the page says so by itself.
        await browser.ado("goto", url=f"{base}/live")
        await browser.ado("wait_text", selector="#live", text="No agent is connected")
    finally:
        browser.close()
    assert chromium_processes(profile) == [], "no browser process outlives the test"
    for name in ["workspaces", "session", "live", "terminal", "job"]:
        assert (SHOTS / f"{name}.png").stat().st_size > 10_000, name
