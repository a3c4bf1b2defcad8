"""Runs a real agent CLI headless against the scripted model API
(model_api.py), with dsh registered as its MCP server behind a logging
proxy (mcp_proxy.py), and reads back what the model was shown.

    run = run_client("codex", [{"tool": "bash", "arguments": {"command": "echo hi"}}],
                     workdir, dsh_env)
    run.calls[0].seen        # the tool result as the model read it
    run.calls[0].mcp_result  # dsh's JSON-RPC reply for the same call

The clients are the ones tests/clients/package.json pins, installed with
`npm ci` in tests/clients. Each run has its own HOME and client config
dirs under `workdir`; dsh gets the isolated directories of `dsh_env` (see
tests/e2e/conftest.py make_env) through the server's `env` in the client's
config, as a user would set them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import pathlib
import signal
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
BIN = HERE / "node_modules" / ".bin"
CLIENTS = ("claude", "codex", "gemini")

sys.path.insert(0, str(HERE))
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from conftest import descendants  # noqa: E402
from model_api import ModelApi, Script, step_of  # noqa: E402

# The variables by which a test isolates dsh (conftest.make_env), passed to
# the server through the client's config.
DSH_VARS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "DSH_RUNTIME_DIR", "DSH_LOG",
            "DSH_ASK_TIMEOUT_SECS")

PROMPT = "Run the tools you are given, one per turn, then answer."


def dsh_bin() -> str:
    path = os.environ.get("DSH_BIN") or str(ROOT / "target" / "debug" / "dsh")
    if not os.path.exists(path):
        raise RuntimeError(f"{path} does not exist: run `cargo build -p dsh` first")
    return os.path.abspath(path)


def client_bin(client: str) -> str:
    path = BIN / client
    if not path.exists():
        raise RuntimeError(f"{path} does not exist: run `npm ci` in {HERE}")
    return str(path)


@dataclasses.dataclass
class Call:
    step: int
    tool: str                 # the MCP tool's name
    arguments: dict           # as scripted
    name: str | None          # the name the client offered it under
    seen: str | None          # the result as the model read it (text)
    seen_raw: object          # the result's part of the next request, as sent
    wall_s: float | None      # from the model's call to the request carrying its result
    mcp_request: dict | None  # the client's tools/call (proxy log)
    mcp_result: dict | None   # dsh's reply to it
    mcp_latency_s: float | None

    def text_content(self) -> str | None:
        """The text content of dsh's reply (all text items, joined)."""
        result = (self.mcp_result or {}).get("result")
        if not isinstance(result, dict):
            return None
        return "\n".join(c.get("text", "") for c in result.get("content") or [] if c.get("type") == "text")


@dataclasses.dataclass
class Run:
    client: str
    command: list
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    requests: list            # every request the model API got (model_api log)
    mcp: list                 # every JSON-RPC line between the client and dsh (proxy log)
    calls: list               # one Call per scripted step
    files: dict               # where the logs and configs are

    def turns(self) -> list:
        return [r for r in self.requests if r.get("kind") == "turn"]

    def offered_tools(self) -> list:
        """The tool list of the first turn, as the client sent it."""
        turns = self.turns()
        if not turns:
            return []
        body = turns[0]["body"]
        if "contents" in body:
            return [d for t in body.get("tools") or [] for d in t.get("functionDeclarations") or []]
        return list(body.get("tools") or [])

    def mcp_sent(self) -> list:
        """The client's messages to dsh, in order."""
        return [e["msg"] for e in self.mcp if e.get("dir") == "in" and "msg" in e]

    def mcp_reply(self, request_id) -> dict | None:
        for e in self.mcp:
            m = e.get("msg")
            if e.get("dir") == "out" and isinstance(m, dict) and m.get("id") == request_id and "method" not in m:
                return m
        return None

    def mcp_tools_list(self) -> list:
        """The tools of dsh's replies to tools/list."""
        out = []
        for m in self.mcp_sent():
            if m.get("method") == "tools/list":
                reply = self.mcp_reply(m.get("id")) or {}
                out.extend((reply.get("result") or {}).get("tools") or [])
        return out

    def describe(self) -> str:
        return (f"{self.client} exited {self.returncode} in {self.wall_s:.1f} s\n"
                f"stderr: {self.stderr[-3000:]}\nstdout: {self.stdout[-2000:]}\nlogs: {self.files}")


# ------------------------------------------------------------------ configs


def proxy_command(mcp_log: pathlib.Path) -> list:
    return [sys.executable, str(HERE / "mcp_proxy.py"), str(mcp_log), "--", dsh_bin(), "mcp"]


def toml_str(s: str) -> str:
    return json.dumps(s)  # a JSON string is a TOML basic string


def setup_claude(base: pathlib.Path, url: str, server: list, server_env: dict, options: dict,
                 workdir: pathlib.Path):
    home = base / "home"
    env = {
        "HOME": str(home),
        "CLAUDE_CONFIG_DIR": str(home / ".claude"),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-dummy",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    # Registered as the README says (`claude mcp add dsh -- …/dsh mcp`),
    # behind the logging proxy, with the test's own dsh directories.
    add = [client_bin("claude"), "mcp", "add", "dsh"]
    for key, value in server_env.items():
        add += ["-e", f"{key}={value}"]
    add += ["--", *server]
    subprocess.run(add, env={**os.environ, **env}, cwd=workdir, check=True,
                   capture_output=True, timeout=60)
    command = [client_bin("claude"), "-p", PROMPT]
    if options.get("allow", True):
        # what a user grants to run one server's tools headless
        command += ["--allowedTools", "mcp__dsh"]
    command += options.get("extra_args", [])
    return command, env, {"claude_config": str(home / ".claude.json")}


def setup_codex(base: pathlib.Path, url: str, server: list, server_env: dict, options: dict, _workdir):
    home = base / "home"
    codex_home = home / ".codex"
    codex_home.mkdir(parents=True, exist_ok=True)
    env_table = ", ".join(f"{k} = {toml_str(v)}" for k, v in server_env.items())
    config = codex_home / "config.toml"
    config.write_text(
        f'model = "gpt-5-codex"\n'
        f'model_provider = "scripted"\n'
        f'check_for_update_on_startup = false\n'
        f'\n[model_providers.scripted]\n'
        f'name = "scripted"\n'
        f'base_url = {toml_str(url + "/v1")}\n'
        f'wire_api = "responses"\n'
        f'request_max_retries = 0\n'
        f'stream_max_retries = 0\n'
        f'\n[mcp_servers.dsh]\n'
        f'command = {toml_str(server[0])}\n'
        f'args = [{", ".join(toml_str(a) for a in server[1:])}]\n'
        f'env = {{ {env_table} }}\n'
    )
    env = {"HOME": str(home), "CODEX_HOME": str(codex_home)}
    command = [client_bin("codex"), "exec", "--skip-git-repo-check"]
    if options.get("bypass"):
        command.append("--dangerously-bypass-approvals-and-sandbox")
    command += [*options.get("extra_args", []), PROMPT]
    return command, env, {"codex_config": str(config)}


def setup_gemini(base: pathlib.Path, url: str, server: list, server_env: dict, options: dict, _workdir):
    home = base / "home"
    settings_dir = home / ".gemini"
    settings_dir.mkdir(parents=True, exist_ok=True)
    dsh_entry = {"command": server[0], "args": server[1:], "env": server_env}
    if options.get("trust"):
        dsh_entry["trust"] = True
    settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "mcpServers": {"dsh": dsh_entry},
    }
    (settings_dir / "settings.json").write_text(json.dumps(settings, indent=2))
    env = {
        "HOME": str(home),
        "GEMINI_API_KEY": "dummy-key",
        "GOOGLE_GEMINI_BASE_URL": url,
        "GEMINI_CLI_NO_RELAUNCH": "true",
    }
    # headless in a folder nobody trusted yet (it refuses to run otherwise)
    command = [client_bin("gemini"), "-p", PROMPT, "--skip-trust"]
    if options.get("yolo", True):
        command.append("--yolo")
    command += options.get("extra_args", [])
    return command, env, {"gemini_settings": str(settings_dir / "settings.json")}


SETUP = {"claude": setup_claude, "codex": setup_codex, "gemini": setup_gemini}


# ------------------------------------------------------------------ reading


def read_jsonl(path: pathlib.Path) -> list:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        with contextlib.suppress(ValueError):
            out.append(json.loads(line))
    return out


def text_of_blocks(content) -> str:
    """The text a model reads from a tool result's content: a string as
    is; a list of blocks as their text, anything not text as its JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, dict) and isinstance(block.get("text"), str):
                parts.append(block["text"])
            else:
                parts.append(json.dumps(block))
        return "\n".join(parts)
    return json.dumps(content)


def results_in(body: dict) -> dict:
    """{step: (raw, text)} of the scripted calls' results in one request."""
    out = {}
    for m in body.get("messages") or []:  # Anthropic
        if isinstance(m.get("content"), list):
            for block in m["content"]:
                if block.get("type") == "tool_result" and step_of(block.get("tool_use_id")) is not None:
                    out[step_of(block["tool_use_id"])] = (block, text_of_blocks(block.get("content")))
    items = body.get("input")
    if isinstance(items, list):  # Responses
        for item in items:
            if item.get("type") in ("function_call_output", "custom_tool_call_output") and step_of(item.get("call_id")) is not None:
                out[step_of(item["call_id"])] = (item, text_of_blocks(item.get("output")))
    calls_seen = 0  # Gemini: by id when kept, else by order
    for c in body.get("contents") or []:
        for part in c.get("parts") or []:
            fr = part.get("functionResponse")
            if not fr:
                continue
            step = step_of(fr.get("id"))
            if step is None:
                step = calls_seen
            calls_seen = max(calls_seen, step + 1)
            out[step] = (fr, gemini_text(fr))
    return out


def gemini_text(fr: dict) -> str:
    """What the model reads of a functionResponse: its response's string
    values when it holds only strings (`{"output": "..."}`), else the
    response as JSON; and the text of any parts."""
    response = fr.get("response")
    pieces = []
    if isinstance(response, dict) and response and all(isinstance(v, str) for v in response.values()):
        pieces.extend(response.values())
    elif response is not None:
        pieces.append(json.dumps(response))
    for part in fr.get("parts") or []:
        if isinstance(part, dict) and isinstance(part.get("text"), str):
            pieces.append(part["text"])
    return "\n".join(pieces)


def assemble_calls(script: list, requests: list, mcp: list) -> list:
    turns = [r for r in requests if r.get("kind") == "turn"]
    calls = []
    used = set()
    tool_calls = [(i, e) for i, e in enumerate(mcp)
                  if e.get("dir") == "in" and isinstance(e.get("msg"), dict) and e["msg"].get("method") == "tools/call"]
    for step, spec in enumerate(script):
        asked = next((r for r in turns if (r.get("answer") or {}).get("step") == step
                      and "error" not in r["answer"]), None)
        seen_raw = seen = wall = None
        for r in turns:
            found = results_in(r["body"] or {})
            if step in found:
                seen_raw, seen = found[step]
                if asked is not None:
                    wall = r["t"] - asked["t_end"]
                break
        req = res = lat = None
        want = spec.get("arguments", {})
        # the calls reach dsh in the script's order (one per turn); a call
        # the client refused never does
        for i, e in tool_calls:
            params = e["msg"].get("params") or {}
            if i in used or params.get("name") != spec["tool"]:
                continue
            if seen is None and wall is None and asked is None:
                break
            used.add(i)
            req = e["msg"]
            for later in mcp[i + 1:]:
                m = later.get("msg")
                if later.get("dir") == "out" and isinstance(m, dict) and m.get("id") == req.get("id") and "method" not in m:
                    res, lat = m, later["t"] - e["t"]
                    break
            break
        calls.append(Call(step=step, tool=spec["tool"], arguments=want,
                          name=(asked or {}).get("answer", {}).get("name"),
                          seen=seen, seen_raw=seen_raw, wall_s=wall,
                          mcp_request=req, mcp_result=res, mcp_latency_s=lat))
    return calls


# ------------------------------------------------------------------ running


def end_tree(proc: subprocess.Popen) -> None:
    """Ends the client and every process under it: SIGTERM
    to its process group and every descendant, then SIGKILL."""
    def tree():
        return descendants(proc.pid, living=True)

    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = tree()
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        if proc.poll() is None or pids:
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and (proc.poll() is None or tree()):
                time.sleep(0.02)  # sleep-ok: polls /proc for the tree to exit; SIGKILL follows
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=5)


def run_client(client: str, script: list, workdir: pathlib.Path, dsh_env: dict,
               timeout_s: float = 180, **options) -> Run:
    """Runs `client` ("claude", "codex" or "gemini") headless until the
    scripted conversation ends (or `timeout_s`), and returns what happened.
    Options: for claude `allow` (default True: `--allowedTools mcp__dsh`);
    for gemini `yolo` (default True) and `trust` (the server's `trust`
    setting); for all `extra_args`, `env` (more client environment)."""
    base = pathlib.Path(workdir) / client
    base.mkdir(parents=True, exist_ok=True)
    (base / "home").mkdir(exist_ok=True)
    cwd = base / "ws"
    cwd.mkdir(exist_ok=True)
    model_log = base / "model_requests.jsonl"
    mcp_log = base / "mcp.jsonl"
    mcp_log.write_text("")
    server_env = {k: dsh_env[k] for k in DSH_VARS if k in dsh_env}
    api = ModelApi(Script(script), str(model_log)).start()
    try:
        command, client_env, files = SETUP[client](base, api.url, proxy_command(mcp_log), server_env, options, cwd)
        env = dict(dsh_env)
        for k in list(env):
            # the clients' own settings from the calling environment do not apply
            if k.startswith(("ANTHROPIC_", "CLAUDE_", "OPENAI_", "CODEX_", "GEMINI_", "GOOGLE_")):
                del env[k]
        env.update(client_env)
        env.update(options.get("env", {}))
        env.setdefault("TERM", "dumb")
        # The client's own temp files (Claude Code's per-project dirs and
        # sockets) go under the run's directory, which the test removes.
        (base / "tmp").mkdir(exist_ok=True)
        env["TMPDIR"] = str(base / "tmp")
        start = time.monotonic()
        proc = subprocess.Popen(command, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            end_tree(proc)
            stdout, stderr = proc.communicate()
            stderr += f"\n[harness: no exit within {timeout_s} s; ended]"
        finally:
            end_tree(proc)
        wall = time.monotonic() - start
    finally:
        api.stop()
    files.update(model_log=str(model_log), mcp_log=str(mcp_log), cwd=str(cwd))
    run = Run(client=client, command=command, returncode=proc.returncode, stdout=stdout, stderr=stderr,
              wall_s=wall, requests=read_jsonl(model_log), mcp=read_jsonl(mcp_log), calls=[], files=files)
    run.calls = assemble_calls(script, run.requests, run.mcp)
    return run


def main(argv: list) -> None:
    """`harness.py CLIENT SCRIPT.json WORKDIR`: one run, summarised."""
    client, script_path, workdir = argv[1], argv[2], pathlib.Path(argv[3])
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from conftest import make_env, stop_daemons

    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "t").mkdir(exist_ok=True)
    env = make_env(workdir / "t")
    try:
        spec = json.loads(pathlib.Path(script_path).read_text())
        if isinstance(spec, list):
            spec = {"calls": spec}
        run = run_client(client, spec["calls"], workdir, env, **spec.get("options", {}))
    finally:
        stop_daemons(env)
    print(run.describe())
    for c in run.calls:
        print(f"--- step {c.step} {c.tool} as {c.name}: wall {c.wall_s} mcp {c.mcp_latency_s}")
        print("seen:", (c.seen or "")[:1500])
        print("dsh text:", (c.text_content() or "")[:500])


if __name__ == "__main__":
    main(sys.argv)
