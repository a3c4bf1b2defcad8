"""The sandbox and the environment policy through the real binary: every
process dsh starts for a model (bash in the foreground and background, a
terminal and what is typed into it, a subagent) is confined by the kernel,
results report the sandbox, and only a person can lift it for one command.

Each test gives dsh its own TMPDIR and HOME, with the workspace and HOME
outside the temp dir, so "writable" means exactly the workspace and the
temp dir."""

import os
import pathlib
import shlex
import shutil
import socket

import anyio

import mcp.types as types
import pytest

from conftest import connect, err, ok, text_of, wait_settled, write_config
from waiting import eventually

pytestmark = pytest.mark.anyio

TOKEN = "s3cr3t-value-of-the-token"


@pytest.fixture
def box(box):
    """conftest's box (its own HOME with a fake ssh key, TMPDIR and a git
    repository as the workspace), with a secret and a harmless variable in
    the environment."""
    box["env"].update(SOME_API_TOKEN=TOKEN, HARMLESS="harmless-value")
    return box


def config(box, text):
    """A config file outside the workspace, the HOME and the temp dir."""
    return write_config(box["dir"], text)


async def bash(s, command, **kw):
    return await s.call_tool("bash", {"command": command, **kw})


async def test_workspace_write_confines_bash_and_names_what_it_refused(box):
    home, ws, tmp = box["home"], box["ws"], box["tmp"]
    async with connect(box["env"], cwd=ws) as s:
        r = await bash(s, 'echo in-ws > inside && echo in-tmp > "$TMPDIR/t" && cat inside "$TMPDIR/t"')
        res = ok(r)
        assert res["exit_code"] == 0 and res["output"] == "in-ws\nin-tmp\n"
        assert res["sandbox"] == {"mode": "workspace-write", "enforced": True, "network": True}
        assert text_of(r).endswith("\n[sandbox: workspace-write · network on]")
        assert "refusals" not in res
        assert (tmp / "t").read_text() == "in-tmp\n"

        r = await bash(s, 'touch "$HOME/x"')
        res = ok(r)
        assert res["exit_code"] != 0
        assert res["refusals"]["paths"] == [{"path": str(home / "x"), "access": "write"}]
        assert f"[the sandbox refused: writing {home / 'x'}]" in text_of(r)
        assert not (home / "x").exists()

        res = ok(await bash(s, "echo '[user]' >> .git/config"))
        assert res["exit_code"] != 0, res
        assert res["refusals"]["paths"] == [{"path": str(ws / ".git" / "config"), "access": "write"}]
        assert (ws / ".git" / "config").read_text() == "[core]\n"
        # reading the repository works
        assert ok(await bash(s, "cat .git/config"))["output"] == "[core]\n"
        # a cwd argument outside the workspace does not make it writable
        res = ok(await bash(s, "touch here", cwd=str(home)))
        assert res["exit_code"] != 0 and not (home / "here").exists()


async def test_a_background_job_and_its_setsid_and_nohup_grandchildren_are_confined(box):
    home, ws = box["home"], box["ws"]
    script = (
        'setsid -w sh -c \'touch "$HOME/by-setsid"; echo setsid=$?; touch by-setsid; echo setsid-ws=$?\'; '
        'nohup sh -c \'touch "$HOME/by-nohup"; echo nohup=$?\' 2>&1; '
        "sh -c 'touch \"$HOME/by-bg\"; echo bg=$?' & wait"
    )
    async with connect(box["env"], cwd=ws) as s:
        started = ok(await bash(s, script, run_in_background=True))
        assert started["sandbox"]["mode"] == "workspace-write" and started["sandbox"]["enforced"]
        done = await wait_settled(s, started["job_id"])
        out = ok(await s.call_tool("job_output", {"job_id": started["job_id"], "since": 0}))["output"]
    assert done["status"] == "completed", done
    assert "setsid=1" in out and "setsid-ws=0" in out and "nohup=1" in out and "bg=1" in out, out
    assert (ws / "by-setsid").exists()
    assert not any((home / n).exists() for n in ("by-setsid", "by-nohup", "by-bg"))


async def test_job_output_names_what_a_background_commands_sandbox_refused(box):
    home, ws = box["home"], box["ws"]
    async with connect(box["env"], cwd=ws) as s:
        started = ok(await bash(s, 'touch "$HOME/from-bg"', run_in_background=True))
        await wait_settled(s, started["job_id"])
        r = await s.call_tool("job_output", {"job_id": started["job_id"], "since": 0})
        res = ok(r)
        assert res["status"] == "completed" and res["exit_code"] != 0, res
        assert res["refusals"]["paths"] == [{"path": str(home / "from-bg"), "access": "write"}], res
        assert f"[the sandbox refused: writing {home / 'from-bg'}]" in text_of(r)
        # output that shows no refusal carries none
        clean = ok(await bash(s, "echo fine", run_in_background=True))
        await wait_settled(s, clean["job_id"])
        assert "refusals" not in ok(await s.call_tool("job_output", {"job_id": clean["job_id"], "since": 0}))
    assert not (home / "from-bg").exists()


async def test_a_terminal_and_everything_typed_into_it_are_confined(box):
    home, ws = box["home"], box["ws"]
    async with connect(box["env"], cwd=ws) as s:
        r = await s.call_tool("terminal_open", {})
        opened = ok(r)
        assert opened["sandbox"] == {"mode": "workspace-write", "enforced": True, "network": True}
        assert text_of(r).endswith("\n[sandbox: workspace-write · network on]")
        tid = opened["id"]

        async def run(line):
            return ok(await s.call_tool("terminal_send", {"id": tid, "text": line}))["output"]

        assert "rc=1" in await run('touch "$HOME/t1" 2>/dev/null; echo rc=$?')
        assert "rc=1" in await run('setsid -w sh -c \'touch "$HOME/t2"\' 2>/dev/null; echo rc=$?')
        assert "rc=1" in await run('(nohup touch "$HOME/t3" >/dev/null 2>&1); echo rc=$?')
        assert "rc=1" in await run("cat ~/.ssh/id_rsa >/dev/null 2>&1; echo rc=$?")
        assert "rc=0" in await run("touch in-terminal; echo rc=$?")
    assert (ws / "in-terminal").exists()
    assert not any((home / n).exists() for n in ("t1", "t2", "t3"))


async def test_terminal_send_names_what_the_terminals_sandbox_refused(box):
    home, ws = box["home"], box["ws"]
    async with connect(box["env"], cwd=ws) as s:
        tid = ok(await s.call_tool("terminal_open", {}))["id"]
        r = await s.call_tool("terminal_send", {"id": tid, "text": 'touch "$HOME/t4"'})
        res = ok(r)
        assert res["refusals"]["paths"] == [{"path": str(home / "t4"), "access": "write"}], res
        assert text_of(r).endswith(f"\n[the sandbox refused: writing {home / 't4'}]")
        # a relative path is resolved where the shell is now
        res = ok(await s.call_tool("terminal_send", {"id": tid, "text": "cd .git && touch rel"}))
        assert res["refusals"]["paths"] == [{"path": str(ws / ".git" / "rel"), "access": "write"}], res
        ok(await s.call_tool("terminal_send", {"id": tid, "text": "cd .."}))
        # output that shows no refusal carries none
        assert "refusals" not in ok(await s.call_tool("terminal_send", {"id": tid, "text": "echo fine"}))
        # a background send: job_output names it
        started = ok(
            await s.call_tool("terminal_send", {"id": tid, "text": 'touch "$HOME/t5"', "run_in_background": True})
        )
        await wait_settled(s, started["job_id"])
        res = ok(await s.call_tool("job_output", {"job_id": started["job_id"], "since": 0}))
        assert res["refusals"]["paths"] == [{"path": str(home / "t5"), "access": "write"}], res
    assert not any((home / n).exists() for n in ("t4", "t5")) and not (ws / ".git" / "rel").exists()


async def test_deny_read_follows_the_real_home_when_env_sets_another(box):
    elsewhere = box["ws"] / "elsewhere"
    elsewhere.mkdir()
    cfg = config(box, f'[env]\nset = {{ HOME = "{elsewhere}" }}\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
        res = ok(await bash(s, f'echo "$HOME"; cat {box["home"]}/.ssh/id_rsa'))
    assert res["output"].startswith(f"{elsewhere}\n"), res
    assert res["exit_code"] != 0 and "PRIVATE KEY" not in res["output"], res


@pytest.mark.parametrize("mode", ["workspace-write", "read-only", "off"])
async def test_deny_read_holds_in_every_mode_but_off(box, mode):
    cfg = config(box, f'[sandbox]\nmode = "{mode}"\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
        r = ok(await bash(s, "cat ~/.ssh/id_rsa"))
        assert r["sandbox"]["mode"] == mode
        if mode == "off":
            assert r["exit_code"] == 0 and r["output"] == "PRIVATE KEY\n"
            assert r["sandbox"] == {"mode": "off", "enforced": False, "network": True}
        else:
            assert r["exit_code"] != 0 and "PRIVATE KEY" not in r["output"]
            assert r["refusals"]["paths"] == [
                {"path": str(box["home"] / ".ssh" / "id_rsa"), "access": "read"}
            ]


async def test_read_only_allows_writing_only_the_temp_dir(box):
    ws, tmp, home = box["ws"], box["tmp"], box["home"]
    cfg = config(box, '[sandbox]\nmode = "read-only"\n')
    async with connect(box["env"], "--config", cfg, cwd=ws) as s:
        r = await bash(s, 'touch "$TMPDIR/ok" /dev/shm/dsh-e2e-$$ && rm /dev/shm/dsh-e2e-$$ && echo tmp-ok; '
                       'touch in-ws; echo ws=$?; touch "$HOME/h"; echo home=$?')
        res = ok(r)
        assert res["sandbox"] == {"mode": "read-only", "enforced": True, "network": True}
        assert "[sandbox: read-only · network on]" in text_of(r)
        assert "tmp-ok" in res["output"] and "ws=1" in res["output"] and "home=1" in res["output"]
    assert (tmp / "ok").exists() and not (ws / "in-ws").exists() and not (home / "h").exists()


@pytest.mark.parametrize("network", [True, False])
async def test_network_off_refuses_a_connection_to_the_hosts_loopback(box, network):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    try:
        cfg = config(box, f"[sandbox]\nnetwork = {'true' if network else 'false'}\n")
        async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
            r = await bash(s, f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected")
            res = ok(r)
            assert res["sandbox"]["network"] is network
            if network:
                assert res["exit_code"] == 0 and res["output"] == "connected\n"
                assert "· network on]" in text_of(r)
            else:
                assert res["exit_code"] != 0 and "connected" not in res["output"]
                assert "· network off]" in text_of(r)
                udp = ok(await bash(s, f"echo x > /dev/udp/1.1.1.1/53 && echo sent"))
                assert "sent" not in udp["output"]
    finally:
        listener.close()


async def test_the_environment_policy_applies_to_bash_terminals_and_subagents(box):
    cfg = config(box, '[subagent]\ncommand = ["bash", "-c", "{prompt}"]\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
        seen = {
            "bash": ok(await bash(s, "env"))["output"],
            "background": None,
            "subagent": ok(await s.call_tool("subagent", {"prompt": "env"}))["output"],
        }
        job = ok(await bash(s, "env", run_in_background=True))["job_id"]
        await wait_settled(s, job)
        seen["background"] = ok(await s.call_tool("job_output", {"job_id": job, "since": 0}))["output"]
        tid = ok(await s.call_tool("terminal_open", {"env": {"FROM_ARG_TOKEN": "kept"}}))["id"]
        seen["terminal"] = ok(await s.call_tool("terminal_send", {"id": tid, "text": "env"}))["output"]
    for where, out in seen.items():
        assert "HARMLESS=harmless-value" in out, (where, out)
        assert "SOME_API_TOKEN" not in out and TOKEN not in out, (where, out)
    # terminal_open's own env comes after the policy
    assert "FROM_ARG_TOKEN=kept" in seen["terminal"]


async def test_include_only_and_set(box):
    cfg = config(box, '[env]\ninclude_only = ["PATH", "HARM*"]\nset = { ADDED = "yes" }\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"]) as s:
        out = ok(await bash(s, "env"))["output"]
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert {"PATH", "HARMLESS", "ADDED"} <= names
    assert "ADDED=yes" in out
    assert not {"HOME", "SOME_API_TOKEN", "XDG_CONFIG_HOME"} & names, names


async def test_unavailable_is_reported_and_required_refuses(box):
    env = dict(box["env"], DSH_SANDBOX_TEST_PRETEND="landlock-abi=0")
    home = box["home"]
    async with connect(env, cwd=box["ws"]) as s:
        r = await bash(s, 'touch "$HOME/unconfined" && echo ran')
        res = ok(r)
        assert res["output"] == "ran\n"
        sb = res["sandbox"]
        assert (sb["mode"], sb["enforced"]) == ("workspace-write", False)
        assert "Landlock" in sb["reason"] and "DSH_SANDBOX_TEST_PRETEND" in sb["reason"]
        assert text_of(r).endswith("; running unconfined]")
        assert "\n[sandbox: unavailable — the kernel has no Landlock" in text_of(r)
        opened = ok(await s.call_tool("terminal_open", {}))
        assert opened["sandbox"]["enforced"] is False
    assert (home / "unconfined").exists()

    cfg = config(box, "[sandbox]\nrequired = true\n")
    async with connect(env, "--config", cfg, cwd=box["ws"]) as s:
        e = err(await bash(s, 'touch "$HOME/never" && echo ran'))
        assert e["code"] == "SANDBOX_UNAVAILABLE"
        assert "required = true" in e["message"] and "Nothing was run" in e["message"]
        e = err(await bash(s, 'touch "$HOME/never"', run_in_background=True))
        assert e["code"] == "SANDBOX_UNAVAILABLE"
        assert err(await s.call_tool("terminal_open", {}))["code"] == "SANDBOX_UNAVAILABLE"
        # everything else keeps working
        assert ok(await s.call_tool("job_list", {}))["jobs"] == []
    assert not (home / "never").exists()


def elicitation(answer, asked):
    async def callback(context, params):
        asked.append(params.message)
        return types.ElicitResult(action=answer, content={} if answer == "accept" else None)

    return callback


async def test_sandbox_off_runs_unconfined_only_after_the_person_approves(box):
    """The client is sent the approval page's link and accepts it; that
    runs nothing: the person's yes in `dsh approve` on their terminal
    does."""
    from test_approvals import decide_on_a_terminal, one_waiting

    home = box["home"]
    asked = []
    command = 'touch "$HOME/approved" && echo ran'
    async with connect(box["env"], cwd=box["ws"], elicitation_callback=elicitation("accept", asked)) as s:
        async with anyio.create_task_group() as tg:
            result = {}

            async def call():
                result["r"] = await bash(s, command, sandbox="off")

            tg.start_soon(call)
            a = await one_waiting(box["env"])
            assert command in a["question"] and "OUTSIDE the sandbox" in a["question"]
            code, said = await anyio.to_thread.run_sync(
                lambda: decide_on_a_terminal(box["env"], a["id"], "yes"))
            assert code == 0, said
        r = result["r"]
        res = ok(r)
        assert res["output"] == "ran\n" and res["exit_code"] == 0
        assert res["sandbox"]["mode"] == "off" and res["sandbox"]["enforced"] is False
        assert "approved" in res["sandbox"]["reason"]
        assert text_of(r).endswith("\n[sandbox: off]")
        # the next command is confined again
        again = ok(await bash(s, 'touch "$HOME/later"'))
        assert again["exit_code"] != 0 and again["sandbox"]["mode"] == "workspace-write"
    assert len(asked) == 1 and "(ap-" in asked[0] and "OUTSIDE the sandbox" in asked[0]
    assert (home / "approved").exists() and not (home / "later").exists()


@pytest.mark.parametrize("answer", ["decline", "cancel"])
async def test_a_declined_link_runs_nothing_and_is_not_called_a_refusal(box, answer):
    """The client declines (or dismisses) the approval page's link, as a
    client may do on its own: nothing runs, and the reply says no one
    answered, not that the person declined."""
    box["env"]["DSH_ASK_TIMEOUT_SECS"] = "2"
    asked = []
    async with connect(box["env"], cwd=box["ws"], elicitation_callback=elicitation(answer, asked)) as s:
        e = err(await bash(s, 'touch "$HOME/declined"', sandbox="off"))
        assert e["code"] == "SANDBOX_ESCALATION_UNAVAILABLE" and "was not run" in e["message"]
        assert "no one answered" in e["message"] and "declined to run" not in e["message"], e
        e = err(await bash(s, 'touch "$HOME/declined"', sandbox="off", run_in_background=True))
        assert e["code"] == "SANDBOX_ESCALATION_UNAVAILABLE"
        assert ok(await s.call_tool("job_list", {}))["jobs"] == []
    assert len(asked) == 2
    assert not (box["home"] / "declined").exists()


async def test_a_client_without_elicitation_cannot_lift_the_sandbox(box):
    box["env"]["DSH_ASK_TIMEOUT_SECS"] = "1"
    async with connect(box["env"], cwd=box["ws"]) as s:
        e = err(await bash(s, 'touch "$HOME/escaped"', sandbox="off"))
        assert e["code"] == "SANDBOX_ESCALATION_UNAVAILABLE"
        assert "no URL elicitation" in e["message"] and "not run" in e["message"], e
        assert "dsh approve" in e["message"], e
        # a value other than "off" is not accepted
        assert err(await bash(s, "true", sandbox="danger-full-access"))["code"] == "INVALID_ARGUMENT"
    assert not (box["home"] / "escaped").exists()


async def test_with_the_sandbox_off_no_one_is_asked(box):
    asked = []
    cfg = config(box, '[sandbox]\nmode = "off"\n')
    async with connect(box["env"], "--config", cfg, cwd=box["ws"],
                       elicitation_callback=elicitation("decline", asked)) as s:
        r = await bash(s, 'touch "$HOME/free" && echo ran', sandbox="off")
        assert ok(r)["output"] == "ran\n"
        assert text_of(r).endswith("\n[sandbox: off]")
    assert asked == []


def test_catalog_mentions_the_sandbox():
    from conftest import catalog

    tools = {t["name"]: t for t in catalog("full")["tools"]}
    for name in ("bash", "terminal_open", "subagent"):
        assert "sandbox" in tools[name]["description"], name
    schema = tools["bash"]["input_schema"]
    assert schema["properties"]["sandbox"]["enum"] == ["off"]


BUILD_RS = r'''
use std::io::Write;
use std::path::Path;
fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tag = dir.parent().and_then(|p| p.file_name()).and_then(|n| n.to_str()).unwrap_or("x");
    let target = Path::new(&std::env::var("HOME").unwrap()).join(format!(".dsh-e2e-buildrs-{tag}"));
    let result = match std::fs::File::create(&target) {
        Ok(mut f) => { let _ = f.write_all(b"escaped"); "created".to_owned() }
        Err(e) => format!("refused: {e}"),
    };
    std::fs::write(dir.join("home-write-result.txt"), result).unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}
'''


async def test_rust_analyzer_runs_confined_and_a_build_script_cannot_write_home(isolated_env, tmp_path):
    if shutil.which("rust-analyzer", path=isolated_env.get("PATH")) is None:
        pytest.fail("rust-analyzer is not installed: run `rustup component add rust-analyzer`")
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "Cargo.toml").write_text(
        '[package]\nname = "buildrs_probe"\nversion = "0.1.0"\nedition = "2021"\n\n[workspace]\n')
    (project / "build.rs").write_text(BUILD_RS)
    (project / "src" / "lib.rs").write_text("pub struct Probe;\n\npub fn probe() -> Probe {\n    Probe\n}\n")
    escaped = pathlib.Path(os.path.expanduser("~")) / f".dsh-e2e-buildrs-{tmp_path.name}"
    result = project / "home-write-result.txt"
    try:
        async with connect(isolated_env, cwd=str(project)) as s:
            async def symbols():
                r = await s.call_tool("lsp", {"op": "symbols", "path": "src/lib.rs"})
                if r.isError:
                    assert err(r)["code"] == "LSP_NOT_READY"
                    return None
                return {x["name"] for x in r.structuredContent["symbols"]}

            names = await eventually(symbols, "rust-analyzer answers symbols", timeout_s=180)
            assert {"Probe", "probe"} <= names

            async def build_script_ran():
                return result.exists()

            # rust-analyzer runs the build script while it loads the project
            await eventually(build_script_ran, "the build script ran", timeout_s=180)
        text = result.read_text()
        assert text.startswith("refused: "), text
        assert not escaped.exists()
    finally:
        if escaped.exists():
            escaped.unlink()


async def test_the_temp_dir_stays_creatable_with_the_runtime_dir_inside_it(isolated_env, tmp_path):
    # isolated_env's runtime dir is in /tmp and no TMPDIR is set: /tmp is
    # the commands' temp dir and holds a directory of the host.
    assert isolated_env["DSH_RUNTIME_DIR"].startswith("/tmp/") and "TMPDIR" not in isolated_env
    async with connect(isolated_env, cwd=tmp_path) as s:
        r = ok(await bash(s, 'f=$(mktemp) && echo made && rm "$f"'))
        assert r["output"] == "made\n" and r["sandbox"]["enforced"], r


@pytest.mark.skipif("--standalone" in os.environ.get("DSH_E2E_MCP_ARGS", ""),
                    reason="a standalone server has no daemon to call")
# With a mount namespace (user namespaces on) the daemon's runtime dir is an
# empty directory inside the sandbox: its socket is not there to connect
# to. Without one the socket is reachable, and the daemon refuses the
# client itself.
# "no-connect-guard": the guard of connect would refuse the socket first
# (tested on its own); without it the daemon's own check is what is left.
@pytest.mark.parametrize("pretend", ["", "no-userns,no-connect-guard"])
async def test_a_confined_command_cannot_use_the_daemon_that_started_it(box, pretend):
    from conftest import dsh_bin

    env = dict(box["env"], DSH_SANDBOX_TEST_PRETEND=pretend)
    evil = box["ws"] / "evil.toml"
    evil.write_text('[sandbox]\nmode = "off"\n')
    async with connect(env, cwd=box["ws"]) as s:
        dsh = shlex.quote(dsh_bin())
        r = ok(await bash(s, f"ls -A $DSH_RUNTIME_DIR; echo listed; {dsh} daemon status; "
                             f"echo rc=$?; {dsh} mcp --config {shlex.quote(str(evil))} </dev/null; "
                             "echo mcp=$?"))
    out = r["output"]
    assert "rc=1" in out and "mcp=1" in out, out
    if pretend:
        assert "started by the dsh daemon it is calling" in out, out
    else:
        assert out.startswith("listed\n") and "no dsh daemon is running" in out, out


FORK_AND_LEAVE = """
import glob, json, os, socket, sys, time
[path] = glob.glob(os.path.join(os.environ["DSH_RUNTIME_DIR"], "dsh-*.sock"))
s = socket.socket(socket.AF_UNIX)
s.connect(path)
parent = os.getpid()
if os.fork() > 0:
    os._exit(0)  # the peer the kernel names for the connection is gone
deadline = time.monotonic() + 20
while os.path.exists(f"/proc/{parent}") and time.monotonic() < deadline:
    pass
hello = {"protocol": 1, "version": "0", "kind": "status"}
s.sendall(json.dumps(hello).encode() + b"\\n")
print("reply:", s.makefile().readline().strip(), flush=True)
"""


async def test_a_confined_client_whose_connecting_process_left_is_refused(box):
    (box["ws"] / "leave.py").write_text(FORK_AND_LEAVE)
    # Without a mount namespace, where the daemon's socket is reachable
    # (and without the guard of connect, which would refuse it first).
    env = dict(box["env"], DSH_SANDBOX_TEST_PRETEND="no-userns,no-connect-guard")
    async with connect(env, cwd=box["ws"]) as s:
        # The command waits for the reply of the child the script left.
        r = ok(await bash(s, "python3 leave.py > $TMPDIR/reply.txt; "
                             "until grep -q reply: $TMPDIR/reply.txt; do :; done; "
                             "cat $TMPDIR/reply.txt",
                          timeout_ms=60000))
    assert "SANDBOXED_CLIENT" in r["output"], r


async def test_a_reload_applies_a_new_sandbox_to_the_next_command(box):
    import signal

    from conftest import dsh_children

    cfg = pathlib.Path(config(box, '[sandbox]\nmode = "off"\n'))
    async with connect(box["env"], "--config", str(cfg), cwd=box["ws"]) as s:
        assert ok(await bash(s, "true"))["sandbox"]["mode"] == "off"
        tid = ok(await s.call_tool("terminal_open", {}))["id"]
        cfg.write_text('[sandbox]\nmode = "read-only"\n[env]\nexclude = ["HARMLESS"]\n')
        [server] = dsh_children()
        os.kill(server, signal.SIGHUP)
        async def reloaded():
            r = ok(await bash(s, "env"))
            return r if r["sandbox"]["mode"] == "read-only" else None

        r = await eventually(reloaded, "the reload applied")
        assert "HARMLESS" not in r["output"]
        # the terminal opened before keeps the sandbox it started in
        out = ok(await s.call_tool("terminal_send", {"id": tid, "text": "touch kept-off; echo rc=$?"}))["output"]
        assert "rc=0" in out
    assert (box["ws"] / "kept-off").exists()


async def test_a_confined_pyright_outlives_its_check_of_the_client(isolated_env, tmp_path):
    """pyright checks every few seconds that its client (the `processId`
    of `initialize`) lives, with `kill(pid, 0)`, which the sandbox refuses;
    a confined server is given no pid, and keeps answering. (Seen with a
    standalone server, where it exited within seconds.)"""
    project = tmp_path / "proj"
    project.mkdir()
    (project / "pyproject.toml").write_text("")
    (project / "main.py").write_text('def greet(name: str) -> str:\n    return "hi " + name\n')

    async with connect(isolated_env, "--standalone", cwd=str(project)) as s:
        async def symbols():
            r = await s.call_tool("lsp", {"op": "symbols", "path": "main.py"})
            if r.isError:
                assert err(r)["code"] == "LSP_NOT_READY", r.content[0].text
                return None
            return {x["name"] for x in r.structuredContent["symbols"]}

        assert "greet" in await eventually(symbols, "pyright answers", timeout_s=120)
        # sleep-ok: pyright's check of its client runs on its own clock (every few seconds); the test must outlast it
        await anyio.sleep(8)
        r = await s.call_tool("lsp", {"op": "symbols", "path": "main.py"})
        assert not r.isError, r.content[0].text


SEND_DATAGRAMS = r'''
import os, socket, sys
for path in sys.argv[1:]:
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.sendto(b"<13>forged: root login accepted", path)
        print(f"{path}: sent")
    except OSError as e:
        print(f"{path}: refused {e.errno}")
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
a.sendall(b"in the sandbox")
print("stream pair:", b.recv(100).decode())
'''


async def test_a_confined_command_cannot_send_a_datagram_to_the_hosts_log_or_notify_sockets(box, tmp_path_factory):
    """A datagram needs no `connect`, so the guard of connect would not see
    it: no Unix datagram socket can be made in the sandbox, and the logging
    and service-manager sockets (`/dev/log`, journald's, `$NOTIFY_SOCKET`)
    and sockets `deny_read` lists are hidden besides, so a confined command
    cannot forge a journal or syslog entry. The test's own stand-ins,
    outside the workspace, the HOME and the temp dir, do not depend on the
    machine having journald."""
    outside = tmp_path_factory.mktemp("dgram")  # not under the box's dir
    log_path, notify_path = str(outside / "log.sock"), str(outside / "notify.sock")
    listeners = []
    for path in (log_path, notify_path):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.setblocking(False)
        listeners.append(sock)
    env = dict(box["env"], NOTIFY_SOCKET=notify_path)
    cfg = config(box, f'[sandbox]\ndeny_read = ["~/.ssh", "{log_path}"]\n')
    script = box["dir"] / "send.py"
    script.write_text(SEND_DATAGRAMS)
    targets = ["/dev/log", "/run/systemd/journal/socket", "/run/systemd/notify", log_path, notify_path]
    try:
        async with connect(env, "--config", cfg, cwd=box["ws"]) as s:
            r = ok(await bash(s, f"python3 {script} {' '.join(targets)}"))
        for target in targets:
            assert f"{target}: refused" in r["output"], r
        # stream sockets, which reach another only through the guarded
        # connect, still work
        assert "stream pair: in the sandbox" in r["output"], r
        for sock in listeners:
            with pytest.raises(BlockingIOError):
                sock.recv(100)
    finally:
        for sock in listeners:
            sock.close()


PLANT = r"""
set -u
OUT="$PWD/tools"; mkdir -p "$OUT"
printf '#!/bin/sh\necho "$0 $PWD" >> "$HOME/ran-outside"\n' > "$OUT/evil.sh"
chmod +x "$OUT/evil.sh"
mkdir -p "$OUT/hooks" && cp "$OUT/evil.sh" "$OUT/hooks/post-index-change"
git init -q fsm; git -C fsm config core.fsmonitor "$OUT/evil.sh"
git init -q hooks; git -C hooks config core.hooksPath "$OUT/hooks"
git init -q diff; git -C diff config diff.external "$OUT/evil.sh"
# a .git file naming a git directory planted in the temp dir
git init -q --bare "$TMPDIR/planted"; git --git-dir="$TMPDIR/planted" config core.fsmonitor "$OUT/evil.sh"
git --git-dir="$TMPDIR/planted" config core.bare false
mkdir -p gitfile; printf 'gitdir: %s\n' "$TMPDIR/planted" > gitfile/.git
# the same repository moved in whole
cp -r "$TMPDIR/planted" "$TMPDIR/moved"; mkdir -p "$TMPDIR/wt"; mv "$TMPDIR/moved" "$TMPDIR/wt/.git"
mv "$TMPDIR/wt" moved
# a bare layout (HEAD, config, objects/ in the directory itself)
git init -q --bare bare; git -C bare config core.fsmonitor "$OUT/evil.sh"
git -C bare config core.bare false; git -C bare config core.worktree "$PWD/bare"
# the repository the workspace is in
git config core.fsmonitor "$OUT/evil.sh"
true
"""
PLANTED = ["fsm", "hooks", "diff", "gitfile", "moved", "bare"]


def person_git(where, home):
    """`git status`, `git diff` and `git log` as the person, unconfined,
    with the test's HOME; what evil.sh wrote there, if anything."""
    env = {"HOME": str(home), "PATH": os.environ["PATH"], "GIT_CONFIG_NOSYSTEM": "1"}
    import subprocess
    (where / "changed").write_text("x\n") if where.is_dir() else None
    for args in (["status"], ["diff"], ["log", "-1"]):
        subprocess.run(["git", *args], cwd=where, env=env, capture_output=True, timeout=30)
    marker = home / "ran-outside"
    return marker.read_text() if marker.exists() else ""


PLANT_IN_EXISTING = r"""
set -u
OUT="$PWD/tools"; mkdir -p "$OUT"
printf '#!/bin/sh\necho "$0 $PWD" >> "$HOME/ran-outside"\n' > "$OUT/evil.sh"
chmod +x "$OUT/evil.sh"
git -C vendor/lib config core.fsmonitor "$OUT/evil.sh"
printf '[core]\n\tfsmonitor = %s\n' "$OUT/evil.sh" >> vendor/lib/.git/config
cp "$OUT/evil.sh" vendor/lib/.git/hooks/post-index-change
mv vendor/lib/.git/hooks/pre-commit.sample vendor/lib/.git/hooks/post-checkout
sed -i "s|\[core\]|[core]\n\thooksPath = $OUT|" vendor/lib/.git/config
# opened for writing without O_CREAT, and through a hard link
python3 -c 'import sys; f = open(sys.argv[1], "r+"); f.seek(0, 2); f.write("[core]\n\tfsmonitor = " + sys.argv[2] + "\n")' vendor/lib/.git/config "$OUT/evil.sh"
ln vendor/lib/.git/config config-link && printf '[core]\n\tpager = %s\n' "$OUT/evil.sh" >> config-link
# a symbolic link to a repository planted in the temp dir
git init -q "$TMPDIR/elsewhere" && git -C "$TMPDIR/elsewhere" config core.fsmonitor "$OUT/evil.sh"
ln -s "$TMPDIR/elsewhere" vendor/elsewhere
true
"""


async def test_a_repository_already_in_the_workspace_takes_no_config_from_the_sandbox(box):
    """A repository the person made below the workspace (vendored, a
    submodule's checkout): a confined command cannot set its config or
    hooks by any of git config, >>, a new hook, a rename, sed -i, Python's
    r+ or a hard link, nor link the workspace to a repository it made in
    the temp dir, and still reads and commits there."""
    import subprocess
    home, ws = box["home"], box["ws"]
    lib = ws / "vendor" / "lib"
    env = {**box["env"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run(["git", "init", "-q", str(lib)], check=True, env=env)
    before = (lib / ".git" / "config").read_text()
    async with connect(box["env"], cwd=ws) as s:
        res = ok(await bash(s, PLANT_IN_EXISTING))
        # reading it still works, and so does committing there
        read = ok(await bash(s, "git -C vendor/lib status --short && echo read-ok"))
        assert "read-ok" in read["output"], read
        commit = ok(await bash(s, "git -C vendor/lib -c user.name=a -c user.email=a@x "
                                  "commit --allow-empty -qm agent && git -C vendor/lib log --oneline"))
        assert commit["exit_code"] == 0 and "agent" in commit["output"], commit
    assert (lib / ".git" / "config").read_text() == before, res["output"]
    assert not (lib / ".git" / "hooks" / "post-index-change").exists(), res["output"]
    assert person_git(lib, home) == "", res["output"]
    assert not (ws / "vendor" / "elsewhere").is_symlink(), res["output"]


@pytest.mark.parametrize("layout", ["no-repo", "nested", "in-a-monorepo"])
async def test_a_repository_planted_in_the_workspace_runs_nothing_for_the_person(box, layout):
    import subprocess
    home, ws = box["home"], box["ws"]
    if layout == "no-repo":
        shutil.rmtree(ws / ".git")
        work = ws
    elif layout == "nested":
        subprocess.run(["git", "init", "-q", str(ws)], check=True, env={**box["env"], "HOME": str(home)})
        work = ws / "deep" / "er"
        work.mkdir(parents=True)
    else:
        mono = box["dir"] / "mono"
        subprocess.run(["git", "init", "-q", str(mono)], check=True, env={**box["env"], "HOME": str(home)})
        shutil.rmtree(ws / ".git")
        ws.rename(mono / "svc")
        ws = work = mono / "svc"
    async with connect(box["env"], cwd=ws) as s:
        res = ok(await bash(s, PLANT, cwd=str(work)))
    places = [work / p for p in PLANTED] + [work]
    ran = "".join(person_git(p, home) for p in places if p.exists())
    assert ran == "", f"the person's git ran what the sandbox wrote:\n{ran}\n{res['output']}"


async def test_agents_read_the_repository_and_are_told_how_to_make_one(box):
    import subprocess
    home, ws = box["home"], box["ws"]
    env = {**box["env"], "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"}
    shutil.rmtree(ws / ".git")
    subprocess.run(["git", "init", "-q", str(ws)], check=True, env=env)
    (ws / "a").write_text("1\n")
    subprocess.run(["git", "-C", str(ws), "add", "a"], check=True, env=env)
    subprocess.run(["git", "-C", str(ws), "-c", "user.name=p", "-c", "user.email=p@x", "commit", "-qm", "one"],
                   check=True, env=env)
    async with connect(box["env"], cwd=ws) as s:
        (ws / "a").write_text("2\n")
        res = ok(await bash(s, "git status --short && git diff --stat && git log --oneline"))
        assert res["exit_code"] == 0 and " M a" in res["output"] and "one" in res["output"], res
        # committing to the top-level repository was refused before, and is
        res = ok(await bash(s, "git add a"))
        assert res["exit_code"] != 0 and "Read-only file system" in res["output"], res
        # a new repository is refused, and the result says what to do
        r = await bash(s, "git init sub")
        res = ok(r)
        assert res["exit_code"] != 0 and not (ws / "sub" / ".git").exists(), res
        assert "git_writable" in text_of(r), text_of(r)
        # files that merely look alike are created as before
        res = ok(await bash(s, "mkdir -p d && touch d/.gitignore d/head.txt && mv d e && echo ok"))
        assert res["exit_code"] == 0 and res["output"] == "ok\n", res
    # with git_writable the person lets agents make repositories
    cfg = config(box, "[sandbox]\ngit_writable = true\n")
    async with connect(box["env"], "--config", str(cfg), cwd=ws) as s:
        res = ok(await bash(s, "git init -q sub && git -C sub -c user.name=a -c user.email=a@x commit -q --allow-empty -m x && echo ok"))
        assert res["exit_code"] == 0 and res["output"].endswith("ok\n"), res
