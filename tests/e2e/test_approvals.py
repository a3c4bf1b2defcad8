"""A command runs outside the sandbox (`bash` with `sandbox: "off"`) only
when a person approves it where no MCP client reaches: the `dsh ui` page's
/approve/ap-N (signed in, with the page's token) or `dsh approve` on their
own terminal. A client that accepts every elicitation approves nothing; a
client that declines the page's link at once has not refused, and the
reply says no one answered."""

import http.client
import json
import re
import subprocess
import time
import urllib.parse

import anyio
import mcp.types as types
import pytest

from conftest import connect, dsh, dsh_bin, err, ok, on_a_terminal, text_of
from waiting import eventually

pytestmark = pytest.mark.anyio


@pytest.fixture
def form_only(monkeypatch):
    """The MCP client declares form elicitation only (as a client without
    URL mode does)."""
    real = types.ElicitationCapability
    monkeypatch.setattr(types, "ElicitationCapability", lambda form=None, url=None: real(form=form))


def short_wait(box, seconds=3):
    """The daemon waits `seconds` for a person (set before it starts)."""
    box["env"]["DSH_ASK_TIMEOUT_SECS"] = str(seconds)


async def bash(s, command, **kw):
    return await s.call_tool("bash", {"command": command, **kw})


def accept_all(asked):
    async def callback(context, params):
        asked.append(params)
        return types.ElicitResult(action="accept", content={})

    return callback


def waiting(env):
    """The approvals `dsh approve --json` lists."""
    return json.loads(dsh(env, "approve", "--json").stdout)["approvals"]


async def one_waiting(env):
    async def listed():
        found = await anyio.to_thread.run_sync(lambda: waiting(env))
        return found[0] if found else None

    return await eventually(listed, "a command waiting for approval")


def decide_on_a_terminal(env, approval_id, typed):
    """Runs `dsh approve ID` on a real terminal (a pty as its controlling
    terminal), types `typed` at its question; (exit code, what it printed)."""
    return on_a_terminal([dsh_bin(), "approve", approval_id], env, b"to refuse it: ", typed)


def assert_no_one_answered(e):
    assert e["code"] == "SANDBOX_ESCALATION_UNAVAILABLE", e
    assert "no one answered" in e["message"] and "dsh approve" in e["message"], e
    assert "not run" in e["message"].lower(), e
    assert "refused" not in e["message"] and "declined to run" not in e["message"], e
    assert "does not support MCP elicitation" not in e["message"], e


async def test_a_client_that_accepts_every_form_gets_nothing_run_unconfined(box, form_only):
    short_wait(box)
    asked = []
    async with connect(box["env"], cwd=box["ws"], elicitation_callback=accept_all(asked)) as s:
        e = err(await bash(s, 'touch "$HOME/escaped" && echo ran', sandbox="off"))
        assert_no_one_answered(e)
        assert "only form elicitation" in e["message"], e
    assert asked == [], "no form was put to the client"
    assert not (box["home"] / "escaped").exists()


async def test_a_client_that_accepts_the_link_approves_nothing(box):
    short_wait(box)
    asked = []
    async with connect(box["env"], cwd=box["ws"], elicitation_callback=accept_all(asked)) as s:
        e = err(await bash(s, 'touch "$HOME/escaped"', sandbox="off"))
        assert_no_one_answered(e)
        assert "was sent the link" in e["message"], e
    assert [a.mode for a in asked] == ["url"]
    assert "/approve/ap-" in asked[0].url and "OUTSIDE the sandbox" in asked[0].message
    assert not (box["home"] / "escaped").exists()


async def test_a_link_the_client_declines_is_not_a_refusal(box):
    """The client declines the link at once, as a client in a default mode
    does with nobody having seen it: the call still waits for a person,
    and when none decides, the reply says no one answered."""
    short_wait(box)
    asked = []

    async def decline(context, params):
        asked.append(params)
        return types.ElicitResult(action="decline")

    async with connect(box["env"], cwd=box["ws"], elicitation_callback=decline) as s:
        started = time.monotonic()
        e = err(await bash(s, 'touch "$HOME/escaped"', sandbox="off"))
        assert time.monotonic() - started >= 2.5, "the decline did not end the wait"
        assert_no_one_answered(e)
        assert "declined or dismissed the link" in e["message"], e
    assert len(asked) == 1
    assert not (box["home"] / "escaped").exists()


async def test_after_a_declined_link_the_person_still_approves_with_dsh_approve(box):
    env = box["env"]

    async def decline(context, params):
        return types.ElicitResult(action="decline")

    async with connect(env, cwd=box["ws"], elicitation_callback=decline) as s:
        async with anyio.create_task_group() as tg:
            result = {}

            async def call():
                result["r"] = await bash(s, 'touch "$HOME/approved" && echo ran', sandbox="off")

            tg.start_soon(call)
            a = await one_waiting(env)
            code, said = await anyio.to_thread.run_sync(lambda: decide_on_a_terminal(env, a["id"], "yes"))
            assert code == 0 and "approved" in said, said
        res = ok(result["r"])
        assert res["output"] == "ran\n" and res["sandbox"]["mode"] == "off", res
    assert (box["home"] / "approved").exists()


async def test_dsh_approve_shows_the_command_and_runs_or_refuses_it(box):
    """No elicitation at all: the call waits, `dsh approve` lists it with
    the agent and the directory, shows the question exactly as asked, and
    the person's yes runs it, --refuse refuses the next one. No decision is
    read without a terminal, and an agent's own command cannot decide."""
    env = box["env"]
    command = 'touch "$HOME/approved" && echo ran'
    async with connect(env, cwd=box["ws"]) as s, connect(env, cwd=box["ws"]) as other:
        async with anyio.create_task_group() as tg:
            result = {}

            async def call():
                result["r"] = await bash(s, command, sandbox="off")

            tg.start_soon(call)
            a = await one_waiting(env)
            assert re.fullmatch(r"ap-\d+", a["id"]), a
            assert a["command"] == command and a["cwd"] == str(box["ws"]), a
            assert f"│ {command}\n" in a["question"] and "OUTSIDE the sandbox" in a["question"], a
            listed = dsh(env, "approve").stdout
            assert a["id"] in listed and 'touch "$HOME/approved"' in listed, listed
            # without a terminal, nothing is read and nothing decided
            no_tty = subprocess.run([dsh_bin(), "approve", a["id"]], env=env, capture_output=True,
                                    text=True, stdin=subprocess.DEVNULL, start_new_session=True, timeout=60)
            assert no_tty.returncode != 0 and "terminal" in no_tty.stderr, no_tty
            # another agent's command cannot decide (its sandbox does not
            # reach the daemon, which refuses the commands it started)
            by_agent = ok(await bash(other, f"{dsh_bin()} approve {a['id']} --refuse"))
            assert by_agent["exit_code"] != 0, by_agent
            assert [w["id"] for w in waiting(env)] == [a["id"]]
            code, said = await anyio.to_thread.run_sync(lambda: decide_on_a_terminal(env, a["id"], "yes"))
            assert code == 0 and "approved" in said and command in said, said
        res = ok(result["r"])
        assert res["output"] == "ran\n" and res["sandbox"]["mode"] == "off", res
        assert "approved" in res["sandbox"]["reason"]
        assert waiting(env) == []

        async with anyio.create_task_group() as tg:
            async def refused():
                result["r"] = await bash(s, 'touch "$HOME/refused"', sandbox="off")

            tg.start_soon(refused)
            a = await one_waiting(env)
            said = dsh(env, "approve", a["id"], "--refuse").stderr
            assert "refused" in said, said
        e = err(result["r"])
        assert e["code"] == "SANDBOX_ESCALATION_DECLINED" and "refused" in e["message"], e
        assert "not run" in e["message"]
        gone = dsh(env, "approve", a["id"], "--refuse", check=False)
        assert gone.returncode != 0 and "no command waits for approval" in gone.stderr, gone
    assert (box["home"] / "approved").exists() and not (box["home"] / "refused").exists()


def request(method, url, cookie=None, body=None):
    """(status, headers, text) of one request, without following
    redirects."""
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    headers = {}
    if cookie:
        headers["Cookie"] = cookie
    if body is not None:
        headers["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode(errors="replace")
    finally:
        conn.close()


def open_page(url):
    """Follows the sign-in link the client was sent: (base, cookie, path)."""
    status, headers, _ = request("GET", url)
    assert status == 200 and "set-cookie" in headers, (status, headers)
    cookie = headers["set-cookie"].split(";")[0]
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}", cookie, parts.path


async def test_the_page_runs_or_refuses_with_its_token(box):
    """The client opens the link (accept); the person presses Run in the
    page (a POST with the page's token); a POST without the token or
    with a made-up one decides nothing; the next command is refused there."""
    env = box["env"]
    links = []

    async def opens(context, params):
        links.append(params.url)
        return types.ElicitResult(action="accept")

    async with connect(env, cwd=box["ws"], elicitation_callback=opens) as s:
        pages = []
        for decision, command in (("run", 'touch "$HOME/approved" && echo ran'),
                                  ("refuse", 'touch "$HOME/refused"')):
            async with anyio.create_task_group() as tg:
                result = {}

                async def call():
                    result["r"] = await bash(s, command, sandbox="off")

                tg.start_soon(call)
                async def sent():
                    return len(links) == len(pages) + 1

                await eventually(sent, "the link")

                def decide():
                    base, cookie, path = open_page(links[-1])
                    status, _, page = request("GET", base + path, cookie)
                    assert status == 200 and "Run a command outside the sandbox?" in page, page
                    assert "│ touch &quot;$HOME/" in page and str(box["ws"]) in page, page
                    token = re.search(r'name="page_token" value="([^"]+)"', page).group(1)
                    for forged in ("decision=run", "decision=run&page_token=" + "0" * 64):
                        status, _, text = request("POST", base + path, cookie, forged)
                        assert status == 403 and "UI_PAGE_TOKEN_REFUSED" in text, (status, text)
                    # without the cookie, not even the page is served
                    assert request("POST", base + path, None, f"decision={decision}&page_token={token}")[0] in (401, 403)
                    status, _, text = request("POST", base + path, cookie, f"decision={decision}&page_token={token}")
                    assert status == 200, (status, text)
                    return page, text

                pages.append(await anyio.to_thread.run_sync(decide))
            if decision == "run":
                res = ok(result["r"])
                assert res["output"] == "ran\n" and res["sandbox"]["mode"] == "off", res
                assert "Approved" in pages[-1][1]
            else:
                e = err(result["r"])
                assert e["code"] == "SANDBOX_ESCALATION_DECLINED", e
                assert "Refused" in pages[-1][1]
    assert (box["home"] / "approved").exists() and not (box["home"] / "refused").exists()


async def test_standalone_nobody_can_be_asked(box):
    async with connect(box["env"], "--standalone", cwd=box["ws"],
                       elicitation_callback=accept_all([])) as s:
        e = err(await bash(s, 'touch "$HOME/escaped"', sandbox="off"))
        assert e["code"] == "SANDBOX_ESCALATION_UNAVAILABLE", e
        assert "standalone" in e["message"] and "not run" in e["message"], e
    assert not (box["home"] / "escaped").exists()


# ---- the same honesty for secret prompts ------------------------------------


async def test_a_declined_answer_link_is_not_the_persons_refusal(box):
    """A client declines the answer page's link at once (Codex in its
    default modes does): no one saw it, so the send says at once that no
    one answered and how a person answers (never that the person
    declined), and the prompt waits on: `dsh answer` types into it, and
    the model reads what followed with terminal_read."""
    from test_secrets import GETPASS, answer_on_a_terminal

    env = box["env"]
    declined = []

    async def decline(context, params):
        declined.append(params.url)
        return types.ElicitResult(action="decline")

    async with connect(env, cwd=box["ws"], elicitation_callback=decline) as s:
        t = ok(await s.call_tool("terminal_open", {}))
        r = await s.call_tool("terminal_send", {"id": t["id"], "text": GETPASS, "timeout_ms": 60000})
        text = text_of(r)
        assert "no one answered: the client declined to open it" in text, text
        assert f"dsh answer {t['id']}" in text and "the person declined" not in text, text
        said = await anyio.to_thread.run_sync(lambda: answer_on_a_terminal(env, t["id"]))
        assert "typed" in said, said

        async def verified():
            read = ok(await s.call_tool("terminal_read", {"id": t["id"]}))
            return "verified" in read["output"]

        await eventually(verified, "the program read the person's answer")
    assert len(declined) == 1
