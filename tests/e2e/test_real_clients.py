"""dsh as the agent CLIs people use see it: Claude Code, Codex and Gemini
CLI (pinned in tests/clients/package.json, installed with `npm ci` there)
run headless against a scripted model API on loopback, with dsh registered
as their MCP server behind a logging proxy (tests/clients/harness.py).

What a tool "returns" is what the model reads in its next request: each
test asserts on the logged model requests, and on the JSON-RPC traffic
between the client and dsh for what dsh sent. A client that is not
installed fails the test (run `npm ci` in tests/clients)."""

import json
import pathlib
import re
import sys

import pytest

from conftest import dsh

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "clients"))
import harness  # noqa: E402

CLIENTS = harness.CLIENTS

# Each client's headless mode that lets every dsh tool run: Claude Code with
# the server's tools allowed (`--allowedTools mcp__dsh`), Codex with its
# bypass flag, Gemini CLI with --yolo. The Codex default mode has a test of
# its own (read-only tools must run there).
RUNS_EVERY_TOOL = {"claude": {}, "codex": {"bypass": True}, "gemini": {}}

EXIT_MARKER = re.compile(r"\[exit 3 · \d+ ms\]")
OMITTED_MARKER = re.compile(r"\[… \d+ bytes omitted …\]")

# What the client itself wraps around any result, at most (Codex's
# `Wall time: … Output:` line, Gemini's `<untrusted_context>` tags).
CLIENT_WRAPPING_BYTES = 64

READ_ONLY = ("lsp", "terminal_read", "terminal_list", "job_list", "job_output")


@pytest.fixture
def run(isolated_env, tmp_path):
    """Runs a client with a script; returns the harness's Run. The client's
    process tree is ended by the harness, dsh's daemon by isolated_env."""

    def go(client, calls, **options):
        result = harness.run_client(client, calls, tmp_path, isolated_env, timeout_s=90, **options)
        assert result.returncode == 0, result.describe()
        assert not [r for r in result.requests if "error" in (r.get("answer") or {})], (
            "a scripted tool is not among the tools the client offered:\n" + result.describe())
        return result

    return go


def seen_and_sent(r, call):
    """What the model saw of `call`, and dsh's text content for it."""
    assert call.seen is not None, f"no result of step {call.step} reached the model\n{r.describe()}"
    assert call.mcp_result is not None, f"step {call.step} never reached dsh; the model saw: {call.seen!r}"
    text = call.text_content()
    assert text is not None, f"dsh's reply has no text content: {call.mcp_result}"
    return call.seen, text


@pytest.mark.parametrize("client", CLIENTS)
def test_the_model_reads_dshs_text_not_a_json_dump(run, client):
    r = run(client, [{"tool": "bash", "arguments": {"command": "echo hi; exit 3"}}], **RUNS_EVERY_TOOL[client])
    seen, text = seen_and_sent(r, r.calls[0])
    assert EXIT_MARKER.search(text), f"dsh's text content lacks its exit marker: {text!r}"
    assert "hi" in seen, seen
    assert EXIT_MARKER.search(seen), f"the model did not see dsh's exit marker; it saw: {seen!r}"
    assert '"exit_code"' not in seen, f"the model saw structuredContent as JSON: {seen!r}"


@pytest.mark.parametrize("client", CLIENTS)
def test_the_model_reads_no_more_than_dshs_text(run, client):
    r = run(client, [
        {"tool": "bash", "arguments": {"command": "echo hi; exit 3"}},
        {"tool": "bash", "arguments": {"command": "seq 1 20000"}},
    ], **RUNS_EVERY_TOOL[client])
    for call in r.calls:
        seen, text = seen_and_sent(r, call)
        bound = 1.1 * len(text.encode()) + CLIENT_WRAPPING_BYTES
        assert len(seen.encode()) <= bound, (
            f"{call.arguments}: the model read {len(seen.encode())} bytes for dsh's "
            f"{len(text.encode())} bytes of text; it saw: {seen[:300]!r} … {seen[-300:]!r}")
    big_seen, big_text = seen_and_sent(r, r.calls[1])
    assert OMITTED_MARKER.search(big_text), f"dsh did not shorten seq 1 20000: {big_text[-300:]!r}"
    assert OMITTED_MARKER.search(big_seen), (
        f"dsh's omission marker did not reach the model; it saw {len(big_seen.encode())} bytes: "
        f"{big_seen[:200]!r} … {big_seen[-200:]!r}")


@pytest.mark.parametrize("client", CLIENTS)
def test_no_call_waits_on_the_handshake(run, client):
    r = run(client, [
        {"tool": "bash", "arguments": {"command": "echo hi"}},
        {"tool": "bash", "arguments": {"command": "echo hi"}},
        {"tool": "job_list", "arguments": {}},
    ], **RUNS_EVERY_TOOL[client])
    for call in r.calls:
        assert call.mcp_latency_s is not None, f"step {call.step} got no reply from dsh\n{r.describe()}"
    # A wait for a handshake that never comes cost 2.0 s on every call: the
    # quickest call must be well under that (one call slowed by a loaded
    # machine proves nothing either way).
    quickest = min(r.calls, key=lambda call: call.mcp_latency_s)
    assert quickest.mcp_latency_s < 1.5, (
        "every call took 1.5 s or more from the client's tools/call to dsh's reply: "
        + ", ".join(f"{c.tool} {c.mcp_latency_s:.2f} s" for c in r.calls))


def test_read_only_tools_run_in_codex_default_mode(run):
    r = run("codex", [
        {"tool": "job_list", "arguments": {}},
        {"tool": "terminal_list", "arguments": {}},
    ])
    for call in r.calls:
        seen, text = seen_and_sent(r, call)
        assert "approval" not in seen, f"Codex refused {call.tool}: {seen!r}"
        assert not call.mcp_result["result"].get("isError"), f"{call.tool} failed: {text!r}"


def test_a_gemini_call_with_wait_for_previous_succeeds(run):
    r = run("gemini", [{"tool": "bash", "arguments": {"command": "echo hi", "wait_for_previous": True}}])
    call = r.calls[0]
    seen, text = seen_and_sent(r, call)
    assert call.mcp_request["params"]["arguments"].get("wait_for_previous") is True, (
        f"Gemini CLI no longer forwards wait_for_previous: {call.mcp_request}")
    assert not call.mcp_result["result"].get("isError"), f"dsh refused the call: {text!r}"
    assert "hi" in seen, seen


@pytest.mark.parametrize("client", CLIENTS)
def test_the_model_sees_an_error_code(run, client):
    r = run(client, [{"tool": "job_output", "arguments": {"job_id": "bash-999"}}], **RUNS_EVERY_TOOL[client])
    seen, text = seen_and_sent(r, r.calls[0])
    assert "NO_JOB" in text, text
    assert "NO_JOB" in seen, f"the model did not see the error code; it saw: {seen!r}"


@pytest.mark.parametrize("client", CLIENTS)
def test_each_client_gets_read_only_annotations(run, client):
    r = run(client, [], **RUNS_EVERY_TOOL[client])
    tools = {t["name"]: t for t in r.mcp_tools_list()}
    assert tools, f"{client} listed no tools from dsh\n{r.describe()}"
    missing = [name for name in READ_ONLY
               if (tools.get(name, {}).get("annotations") or {}).get("readOnlyHint") is not True]
    assert not missing, (
        f"tools without readOnlyHint true as {client} received them: {missing}; "
        f"annotations: { {n: tools.get(n, {}).get('annotations') for n in READ_ONLY} }")


# The name each client gives itself, in `initialize` or (Claude Code,
# MCP 2026-07-28) in every request's `_meta`.
CLIENT_NAMES = {"claude": "claude-code", "codex": "codex-mcp-client", "gemini": "gemini-cli-mcp-client"}


@pytest.mark.parametrize("client", CLIENTS)
def test_a_session_is_recorded_for_each_client(run, client, isolated_env):
    r = run(client, [{"tool": "bash", "arguments": {"command": "true"}}], **RUNS_EVERY_TOOL[client])
    seen_and_sent(r, r.calls[0])
    sessions = json.loads(dsh(isolated_env, "session", "list", "--json").stdout)
    names = [(s.get("client") or {}).get("name") for s in sessions]
    assert CLIENT_NAMES[client] in names, f"sessions recorded: {sessions}"
    [session] = [s for s in sessions if (s.get("client") or {}).get("name") == CLIENT_NAMES[client]]
    assert session["cwd"], session


@pytest.mark.parametrize("client", CLIENTS)
def test_a_secret_prompt_goes_to_a_person_never_to_the_model(run, client, isolated_env):
    """A program asks for a password. Headless, no person is at the client:
    Claude Code (MCP 2026-07-28) is sent the answer page's link in the
    call's InputRequiredResult and cancels it, Codex declines the link, and
    Gemini CLI cannot be sent one. In each the model reads how a person
    answers (`dsh answer pty-1`, the page) and that no one did, never that
    a person declined, and the prompt is not handed to it to answer."""
    isolated_env["DSH_ASK_TIMEOUT_SECS"] = "3"
    prompt = "python3 -c \"import getpass; getpass.getpass('Password: ')\""
    r = run(client, [
        {"tool": "terminal_open", "arguments": {}},
        {"tool": "terminal_send", "arguments": {"id": "pty-1", "text": prompt, "timeout_ms": 60000}},
    ], **RUNS_EVERY_TOOL[client])
    seen, text = seen_and_sent(r, r.calls[1])
    assert "dsh answer pty-1" in seen, seen
    assert "the person declined" not in seen, seen
    if client == "claude":
        messages = [e.get("msg") or {} for e in r.mcp]
        asked = [m for m in messages if (m.get("result") or {}).get("resultType") == "input_required"]
        assert asked and "/answer/pty-1" in json.dumps(asked[0]), r.describe()
