"""Secret prompts are answered by a person, never through the model: a
real ssh-keygen passphrase prompt and a password prompt read from
/dev/tty (as sudo reads it) are answered through URL-mode elicitation in a
real browser (the MCP Python SDK as the client), and through `dsh answer`
run on a real terminal; the secret reaches no reply, notification, log,
store file or page."""

import contextlib
import hashlib
import json
import os
import pathlib
import shutil
import stat
import subprocess
import tempfile
from urllib.parse import urlsplit

import mcp.types as types
import pytest

from conftest import connect, dsh, dsh_bin, ok, on_a_terminal, stop_daemons, text_of
from waiting import eventually
from test_ui import Browser

pytestmark = pytest.mark.anyio

SECRET = "Sesame-0pen 42%x&y"
# The program checks the answer against its hash, so the secret is not in
# the command the model sends.
GETPASS = (
    "python3 -c \"import getpass, hashlib; p = getpass.getpass('Password: '); "
    "print('verified' if hashlib.sha256(p.encode()).hexdigest() == '"
    + hashlib.sha256(SECRET.encode()).hexdigest()
    + "' else 'wrong')\""
)


def data_dir(env) -> pathlib.Path:
    return pathlib.Path(env["XDG_DATA_HOME"]) / "dsh"


def assert_nowhere(env, texts, command=None):
    """The secret is in none of `texts` (what the client received), the
    daemon's log, the store's files, or the session log as the CLI
    (`command`, as for conftest.dsh) shows it."""
    for text in texts:
        assert SECRET not in text, text
    for path in data_dir(env).rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
    sessions = json.loads(dsh(env, "session", "list", "--json", command=command).stdout)
    for s in sessions:
        shown = dsh(env, "session", "show", s["id"], "--json", command=command).stdout
        assert SECRET not in shown


def answer_on_a_terminal(env, terminal_id, command=None):
    """Runs `dsh answer ID` on a real terminal (a pty as its controlling
    terminal), types the secret at its prompt, returns what it printed.
    `command` is what runs `answer ID` (as for conftest.dsh)."""
    code, seen = on_a_terminal([*(command or [dsh_bin()]), "answer", terminal_id], env,
                               b"(not shown): ", SECRET)
    assert code == 0, seen
    return seen


async def test_dsh_answer_types_a_persons_answer_the_model_never_sees(isolated_env, tmp_path):
    env = isolated_env
    received = []
    async with connect(env, cwd=str(tmp_path)) as s:
        opened = ok(await s.call_tool("terminal_open", {}))
        r = await s.call_tool("terminal_send", {"id": opened["id"], "text": GETPASS})
        received.append(text_of(r))
        sent = ok(r)
        # The client cannot ask: the reply says how a person answers.
        assert sent["reason"] == "input_wait" and sent["echo"] is False, sent
        assert f"`dsh answer {opened['id']}`" in text_of(r)
        said = answer_on_a_terminal(env, opened["id"])
        assert "typed into the terminal" in said, said
        assert SECRET not in said  # echo was off on the person's terminal
        # The program got the right answer, and nothing of it came back.
        async def verified():
            read = ok(await s.call_tool("terminal_read", {"id": opened["id"], "since": 0}))
            received.append(json.dumps(read))
            return "verified" in read["output"]

        await eventually(verified, "the program to take the answer")
        # ssh-keygen asks twice: the passphrase, then again to confirm.
        key = tmp_path / "id_cli"
        r = await s.call_tool("terminal_send", {
            "id": opened["id"], "text": f"ssh-keygen -q -t ed25519 -C dsh-test -f {key}"})
        received.append(text_of(r))
        assert ok(r)["echo"] is False
        assert "typed into the terminal" in answer_on_a_terminal(env, opened["id"])

        async def asks_again():
            read = ok(await s.call_tool("terminal_read", {"id": opened["id"], "mode": "screen"}))
            received.append(json.dumps(read))
            return "same passphrase again" in read["screen"]

        # As a person would, answer the second prompt once it shows.
        await eventually(asks_again, "ssh-keygen to ask for the passphrase again")
        assert "typed into the terminal" in answer_on_a_terminal(env, opened["id"])

        async def saved():
            read = ok(await s.call_tool("terminal_read", {"id": opened["id"]}))
            received.append(json.dumps(read))
            return key.exists() and (tmp_path / "id_cli.pub").exists()

        await eventually(saved, "ssh-keygen to save the key")
        check = subprocess.run(["ssh-keygen", "-y", "-P", SECRET, "-f", str(key)],
                               capture_output=True, text=True)
        assert check.returncode == 0, check.stderr
        ok(await s.call_tool("terminal_close", {"id": opened["id"]}))
    assert_nowhere(env, received)


# Answers posted from the answer page's own script, one without the
# page's token and one with a made-up token.
FORGED_ANSWERS = (
    "Promise.all([null, '0'.repeat(64)].map((t) => fetch(location.pathname, {method: 'POST', "
    "headers: {'content-type': 'application/x-www-form-urlencoded'}, "
    "body: 'secret=not-it' + (t ? '&page_token=' + t : '')})"
    ".then(async (r) => [r.status, await r.text()])))"
)


async def test_a_person_answers_in_the_page_the_client_opens(isolated_env, tmp_path):
    """URL-mode elicitation: the client is sent to the page's answer form,
    a real browser types the passphrase; ssh-keygen asks twice (the
    passphrase and its confirmation), a /dev/tty prompt once."""
    env = isolated_env
    browser = Browser(tmp_path)
    asked = []
    pages = []
    base = []

    async def elicitation(context, params):
        assert params.mode == "url", params
        asked.append(params.message)
        parts = urlsplit(params.url)
        assert parts.path.startswith("/answer/pty-") and "login=" in parts.query, params.url
        base[:] = [f"{parts.scheme}://{parts.netloc}"]
        await browser.ado("goto", url=params.url)
        await browser.ado("wait_text", text="Answer")
        pages.append((await browser.ado("text", selector="body"))["text"])
        if len(asked) == 1:
            # From this very page and with its cookie, but without the page's
            # token (or with a made-up one): refused, and typed nowhere (a
            # wrong passphrase typed would fail the checks below).
            for status, text in (await browser.ado("eval", script=FORGED_ANSWERS))["value"]:
                assert status == 403 and "UI_PAGE_TOKEN_REFUSED" in text, (status, text)
        await browser.ado("click", selector="input[name=secret]")
        await browser.ado("type", text=SECRET)
        await browser.ado("click", selector="button[type=submit]")
        await browser.ado("wait_text", text="Answered")
        pages.append((await browser.ado("text", selector="body"))["text"])
        return types.ElicitResult(action="accept")

    received = []
    key = tmp_path / "id_test"
    try:
        async with connect(env, cwd=str(tmp_path), elicitation_callback=elicitation) as s:
            opened = ok(await s.call_tool("terminal_open", {}))
            r = await s.call_tool("terminal_send", {
                "id": opened["id"], "text": f"ssh-keygen -q -t ed25519 -C dsh-test -f {key}",
                "timeout_ms": 120000,
            })
            received.append(text_of(r))
            sent = ok(r)
            assert sent.get("answered_by_person") == 2, (sent, asked)
            assert sent["reason"] == "prompt", sent
            assert text_of(r).count("[a person answered this prompt; the answer is not shown]") == 2
            assert len(asked) == 2 and "passphrase" in asked[0].lower(), asked
            assert "ssh-keygen" in asked[0]
            # The key really is protected by what the person typed.
            check = subprocess.run(
                ["ssh-keygen", "-y", "-P", SECRET, "-f", str(key)],
                capture_output=True, text=True,
            )
            assert check.returncode == 0, check.stderr
            wrong = subprocess.run(
                ["ssh-keygen", "-y", "-P", "not-it", "-f", str(key)],
                capture_output=True, text=True,
            )
            assert wrong.returncode != 0
            # A prompt read from /dev/tty, as sudo reads it.
            r = await s.call_tool("terminal_send", {"id": opened["id"], "text": GETPASS})
            received.append(text_of(r))
            sent = ok(r)
            assert sent["answered_by_person"] == 1, sent
            assert "verified" in sent["output"], sent
            # The page never shows the answer back.
            await browser.ado("goto", url=base[0] + f"/terminals/{opened['id']}")
            pages.append((await browser.ado("text", selector="body"))["text"])
            await browser.ado("goto", url=base[0] + "/live")
            pages.append((await browser.ado("text", selector="body"))["text"])
            ok(await s.call_tool("terminal_close", {"id": opened["id"]}))
    finally:
        browser.close()
    assert_nowhere(env, received + pages + asked)



# ---- a set-uid program's prompt, for a dsh run by a regular user -------------

NOBODY = 65534


def set_uid_su():
    """The path of `su` when it is set-uid root (it asks a regular user
    for a password), else None."""
    path = shutil.which("su", path="/usr/bin:/bin")
    if path is None:
        return None
    st = os.stat(path)
    return path if st.st_uid == 0 and st.st_mode & stat.S_ISUID else None


def set_uid_su_of(uid):
    """The pids of the `su` processes of user `uid` that run with root's
    effective uid (set-uid took effect), from /proc."""
    out = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/status") as f:
                status = dict(line.split(":", 1) for line in f if ":" in line)
        except (OSError, ValueError):
            continue
        real, effective = status.get("Uid", "").split()[:2] or ("", "")
        if status.get("Name", "").strip() == "su" and real == str(uid) and effective == "0":
            out.append(int(entry))
    return out


@contextlib.contextmanager
def a_regular_users_dsh():
    """A dsh of the user nobody: its own copy of the binary (this checkout
    may be closed to other users), HOME, XDG dirs and runtime dir, and the
    sandbox off (in a sandbox, no_new_privs keeps a set-uid program from
    its privileges). Yields (env, command, workspace), where `command`
    runs that dsh as nobody; ends every process of that binary, and
    removes it all, at exit."""
    base = tempfile.mkdtemp(prefix="dsh-user-")
    os.chmod(base, 0o755)
    binary = os.path.join(base, "dsh")
    run = os.path.join(base, "run")
    try:
        shutil.copy2(dsh_bin(), binary)
        os.chmod(binary, 0o755)
        dirs = {}
        for name in ("home", "config", "data", "state", "ws"):
            dirs[name] = os.path.join(base, name)
            os.mkdir(dirs[name], 0o700)
        os.mkdir(run, 0o700)
        os.mkdir(os.path.join(dirs["config"], "dsh"), 0o700)
        with open(os.path.join(dirs["config"], "dsh", "config.toml"), "w") as f:
            f.write('[sandbox]\nmode = "off"\n')
        for root, subdirs, files in os.walk(base):
            for name in subdirs + files:
                if os.path.join(root, name) != binary:
                    os.chown(os.path.join(root, name), NOBODY, NOBODY)
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": dirs["home"],
            "LANG": "C.UTF-8",
            "XDG_CONFIG_HOME": dirs["config"],
            "XDG_DATA_HOME": dirs["data"],
            "XDG_STATE_HOME": dirs["state"],
            "DSH_RUNTIME_DIR": run,
            "DSH_LOG": "warn",
        }
        as_nobody = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
        yield env, [*as_nobody, binary], dirs["ws"]
    finally:
        stop_daemons({"DSH_RUNTIME_DIR": run}, binary=binary)
        shutil.rmtree(base, ignore_errors=True)


async def test_a_set_uid_password_prompt_is_answered_by_a_person(tmp_path):
    """`su` run by a regular user is set-uid root: /proc closes its system
    call and descriptors to that user's dsh. Its password prompt still
    settles as a secret prompt (`input_wait`, echo off, not `idle` after
    the quiet fallback), and `dsh answer` types a person's answer into it,
    which su checks (root's password is not the secret: it refuses)."""
    if os.getuid() != 0:
        pytest.skip("needs root, to run dsh as another user")
    if set_uid_su() is None:
        pytest.skip("no set-uid su here")
    received = []
    with a_regular_users_dsh() as (env, command, ws):
        async with connect(env, cwd=ws, command=command) as s:
            opened = ok(await s.call_tool("terminal_open", {}))
            assert opened["sandbox"]["mode"] == "off", opened
            r = await s.call_tool("terminal_send", {
                "id": opened["id"], "text": "su root -c 'echo su-$((40 + 2))'", "timeout_ms": 60000})
            received.append(text_of(r))
            sent = ok(r)
            assert sent["reason"] == "input_wait" and sent["echo"] is False, sent
            assert "Password" in sent["output"], sent
            # What this test is about: su runs set-uid, so its /proc is
            # closed to nobody's dsh (not so under nosuid or no_new_privs).
            if not set_uid_su_of(NOBODY):
                pytest.skip("su runs without its set-uid privileges here (nosuid or no_new_privs)")
            assert f"`dsh answer {opened['id']}`" in text_of(r)
            said = answer_on_a_terminal(env, opened["id"], command=command)
            assert "typed into the terminal" in said, said

            async def refused():
                read = ok(await s.call_tool("terminal_read", {"id": opened["id"], "since": 0}))
                received.append(json.dumps(read))
                return "Authentication failure" in read["output"]

            await eventually(refused, "su to check the answer and refuse it")
            assert "su-42" not in received[-1]
            ok(await s.call_tool("terminal_close", {"id": opened["id"]}))
        assert_nowhere(env, received, command=command)


def fake_prompt_script(tmp_path, prompt):
    """What a model may write: a script that asks like a real program and
    keeps the answer in a file it can read later."""
    script = tmp_path / "ask.sh"
    stolen = tmp_path / "f"
    script.write_text(f'read -r -s -p "{prompt}" p; echo; echo "$p" > {stolen}\n')
    return script, stolen


async def test_a_scripts_prompt_is_named_and_its_answer_redacted_for_every_agent(isolated_env, tmp_path):
    env = isolated_env
    script, stolen = fake_prompt_script(tmp_path, "Vault token: ")
    async with connect(env, cwd=str(tmp_path)) as s, connect(env, cwd=str(tmp_path)) as other:
        opened = ok(await s.call_tool("terminal_open", {}))
        r = await s.call_tool("terminal_send", {"id": opened["id"], "text": f"bash {script}"})
        assert ok(r)["echo"] is False, text_of(r)
        # The person is told which executable reads, and warned.
        said = answer_on_a_terminal(env, opened["id"])
        assert "/bash" in said and "WARNING" in said and "shell or interpreter" in said, said
        assert "typed into the terminal" in said, said

        async def kept():
            return stolen.exists() and SECRET in stolen.read_text()

        await eventually(kept, "the script to keep the answer")
        seen = []
        catted = text_of(await s.call_tool("bash", {"command": f"cat {stolen}"}))
        seen.append(catted)
        read = text_of(await s.call_tool("terminal_read", {"id": opened["id"], "since": 0}))
        await s.call_tool("terminal_send", {"id": opened["id"], "text": f"cat {stolen}"})
        seen.append(text_of(await s.call_tool("terminal_read", {"id": opened["id"], "since": 0})))
        job = ok(await s.call_tool("bash", {"command": f"cat {stolen}", "run_in_background": True}))
        out = await s.call_tool("job_output", {"job_id": job["job_id"], "wait_ms": 5000})
        seen.append(text_of(out))
        seen.append(text_of(await other.call_tool("bash", {"command": f"cat {stolen.resolve()}"})))
        for text in [catted, read, *seen]:
            assert SECRET not in text, text
        for text in [catted, *seen]:
            assert "[redacted" in text, text


async def test_a_sudo_prompt_in_the_sandbox_is_called_fake_and_refused(isolated_env, tmp_path):
    env = isolated_env
    script, stolen = fake_prompt_script(tmp_path, "[sudo] password for someone: ")
    async with connect(env, cwd=str(tmp_path)) as s:
        opened = ok(await s.call_tool("terminal_open", {}))
        r = await s.call_tool("terminal_send", {"id": opened["id"], "text": f"bash {script}"})
        assert ok(r)["echo"] is False, text_of(r)
        assert "cannot be real" in text_of(r), text_of(r)
        code, said = on_a_terminal([dsh_bin(), "answer", opened["id"]], env, b"(not shown): ", SECRET)
        assert code != 0, said
        assert "/bash" in said and "cannot be real" in said and "WARNING" in said, said
        assert "refused" in said, said
        assert not stolen.exists() or SECRET not in stolen.read_text()
