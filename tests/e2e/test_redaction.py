"""Secrets in output never reach the model: planted secrets of every kind
the redactor knows (generated in the real formats' shapes by
`cargo run -p redact --example planted`, none a real credential) are
printed through `bash`, a background job read in small chunks, a terminal
send, a terminal's stream read in small chunks, and a subagent; no reply
carries one, and none reaches the daemon's log, the store or the session
log. A withheld environment variable's value is caught by value."""

import json
import subprocess

import pytest

from conftest import ROOT, ask_lsp, connect, dsh, ok, text_of, wait_settled, write_config
from test_secrets import data_dir

pytestmark = pytest.mark.anyio


def planted():
    out = subprocess.run(
        ["cargo", "run", "-q", "-p", "redact", "--example", "planted"],
        cwd=ROOT, capture_output=True, text=True, check=True, timeout=600,
    )
    return [json.loads(line) for line in out.stdout.splitlines()]


def assert_no_secret(plants, texts, where):
    for text in texts:
        for p in plants:
            assert p["secret"] not in text, f"{p['kind']} reached {where}: {text[:2000]}"


async def read_in_chunks(call, first_args, key, size, plants):
    """Reads a stream from 0 in pieces of `size` bytes until it ends; the
    pieces together must hold no 12 bytes of any secret (a secret a read
    cuts is neither shown in part by that read nor by the next)."""
    texts = []
    pieces = []
    since = 0
    for _ in range(10_000):
        r = await call({**first_args, key: since, "max_bytes": size})
        data = ok(r)
        texts.append(text_of(r))
        texts.append(json.dumps(data))
        pieces.append(data["output"])
        if data["next"] == since and not data.get("held"):
            joined = "".join(pieces)
            for p in plants:
                for i in range(0, len(p["secret"]) - 12):
                    part = p["secret"][i:i + 12]
                    assert part not in joined, f"{p['kind']}: {part!r} in the chunked reads"
            assert "[redacted: " in joined
            return texts
        since = data["next"]
    raise AssertionError("the stream did not end")


async def test_planted_secrets_reach_no_reply_log_or_store(isolated_env, tmp_path):
    plants = planted()
    kinds = {p["kind"] for p in plants}
    assert len(kinds) >= 20, kinds
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "planted.txt").write_text("\n".join(p["line"] for p in plants) + "\n")
    db_password = next(p for p in plants if p["kind"] == "env DB_PASSWORD")["secret"]
    script = tmp_path / "agent.sh"
    script.write_text("#!/bin/sh\ncat planted.txt\n")
    script.chmod(0o755)
    config = write_config(tmp_path, f'[subagent]\ncommand = ["{script}", "{{prompt}}"]\n')
    # The password is in the client's environment, which the [env] policy
    # keeps from every process the agent starts: dsh knows it by value.
    env = dict(isolated_env, DB_PASSWORD=db_password)
    seen = []
    async with connect(env, "--config", config, cwd=str(ws)) as s:
        r = await s.call_tool("bash", {"command": "cat planted.txt; echo \"[$DB_PASSWORD]\""})
        seen += [text_of(r), json.dumps(ok(r))]
        assert "[redacted: github token]" in text_of(r)
        assert "[]" in ok(r)["output"]  # the variable never reached the command
        footer = text_of(r).rsplit("\n", 1)[-1]
        assert footer.startswith("[redacted: ") and ok(r)["redacted"] >= len(plants) - 1, footer

        job = ok(await s.call_tool("bash", {"command": "cat planted.txt", "run_in_background": True}))
        await wait_settled(s, job["job_id"])
        seen += await read_in_chunks(
            lambda a: s.call_tool("job_output", a), {"job_id": job["job_id"]}, "since", 97, plants)

        t = ok(await s.call_tool("terminal_open", {}))
        r = await s.call_tool("terminal_send", {"id": t["id"], "text": "cat planted.txt"})
        seen += [text_of(r), json.dumps(ok(r))]
        seen += await read_in_chunks(
            lambda a: s.call_tool("terminal_read", a), {"id": t["id"]}, "since", 131, plants)

        r = await s.call_tool("subagent", {"prompt": "print the file"})
        seen += [text_of(r), json.dumps(ok(r))]
        assert "[redacted: " in text_of(r)
        ok(await s.call_tool("terminal_close", {"id": t["id"]}))
    assert_no_secret(plants, seen, "the model")
    for path in data_dir(isolated_env).rglob("*"):
        if path.is_file():
            assert_no_secret(plants, [path.read_bytes().decode(errors="replace")], str(path))
    for session in json.loads(dsh(isolated_env, "session", "list", "--json").stdout):
        shown = dsh(isolated_env, "session", "show", session["id"], "--json").stdout
        assert_no_secret(plants, [shown], "the session log")


async def test_a_secret_in_a_language_servers_answer_is_redacted(isolated_env, tmp_path):
    """A hover body quotes a docstring: a token pasted in one does not reach
    the model through `lsp` either (pyright, the default Python server)."""
    token = next(p for p in planted() if p["kind"] == "github token")["secret"]
    ws = tmp_path / "proj"
    ws.mkdir()
    (ws / "pyproject.toml").write_text("[project]\nname = \"x\"\nversion = \"0\"\n")
    (ws / "settings.py").write_text(
        f'def connect():\n    """Calls the API with {token} as its token."""\n    return 1\n\n\nconnect()\n'
    )
    async with connect(isolated_env, cwd=str(ws)) as s:
        r = await ask_lsp(s, {"op": "hover", "path": "settings.py", "line": 6, "symbol": "connect"})
        body = text_of(r)
        assert "Calls the API with" in body, body
        assert token not in body and token not in json.dumps(ok(r))
        assert "[redacted: github token]" in body
