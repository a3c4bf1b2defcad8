"""`lsp` reads nothing the session's sandbox denies, end to end: the real
daemon with real language servers (pyright or pylsp for Python;
typescript-language-server for TypeScript 5, TypeScript 7's own server)
and a HOME of the test's own
whose `~/.ssh` holds secret-looking files. The daemon reads files itself
(to send them to a server, to render an answer's lines and a definition's
body), outside the sandbox, so it must apply the same read rules as a
`cat` in that session: a denied queried file fails the call with
SANDBOX_READ_DENIED before anything is read or sent, and a location in
an answer that points into a denied file is withheld.

Each test gives the daemon its own HOME (`~` in `deny_read` expands
against the daemon's HOME) and TMPDIR, both outside the workspace."""

import json
import os
import pathlib
import resource
import shutil
import subprocess

import anyio
import pytest

from conftest import ROOT, ask_lsp as ask, connect, daemons_of, err, ok, text_of, write_config
from waiting import eventually

# Language servers start slowly on a loaded machine.
pytestmark = [pytest.mark.anyio, pytest.mark.timeout(300)]

SECRET = "hunter2-ssh-secret-7f3a"
KEY_LINE = "export const key = '-----BEGIN OPENSSH PRIVATE KEY----- b3BlbnNzaC1rZXk';"
KEY_SECRET = "b3BlbnNzaC1rZXk"


def _tool_path(env):
    """PATH with the test setup's language servers first (pyright,
    typescript-language-server, pylsp)."""
    extra = [ROOT / "tests" / "node" / "node_modules" / ".bin", ROOT / ".venv" / "bin"]
    return os.pathsep.join([*(str(d) for d in extra if d.is_dir()), env.get("PATH", "")])


@pytest.fixture
def box(isolated_env, tmp_path):
    """HOME, TMPDIR and a workspace of the test's own. `~/.ssh` holds a
    Python file and a TypeScript module with secrets in them; the
    workspace is a Python and TypeScript project."""
    home, tmp, ws = tmp_path / "home", tmp_path / "tmp", tmp_path / "ws"
    for d in (home, tmp, ws):
        d.mkdir()
    ssh = home / ".ssh"
    ssh.mkdir(mode=0o700)
    (ssh / "x.py").write_text(
        f"# {SECRET}\n"
        f"TOKEN = '{SECRET}'\n"
        "print(TOKEN)\n"
    )
    (ssh / "deploy.ts").write_text(KEY_LINE + "\n")
    (ws / "pyproject.toml").write_text("[project]\nname = 'ws'\n")
    (ws / "shapes.py").write_text(
        "def area(side: int) -> int:\n"
        "    return side * side\n"
    )
    (ws / "main.py").write_text(
        "from shapes import area\n"
        "\n"
        "print(area(3))\n"
    )
    (ws / "tsconfig.json").write_text(json.dumps({
        "compilerOptions": {"strict": True, "target": "es2020", "module": "commonjs", "noEmit": True},
        "include": ["*.ts"],
    }))
    (ws / "geometry.ts").write_text(
        "export function perimeter(side: number): number {\n"
        "  return 4 * side;\n"
        "}\n"
    )
    (ws / "app.ts").write_text(
        "import { key } from '../home/.ssh/deploy';\n"
        "import { perimeter } from './geometry';\n"
        "console.log(key, perimeter(2));\n"
    )
    env = dict(isolated_env)
    env.update(HOME=str(home), TMPDIR=str(tmp), PATH=_tool_path(isolated_env))
    return {"env": env, "home": home, "ws": ws, "ssh": ssh, "dir": tmp_path}


def assert_secret_absent(result, *secrets):
    """Neither the text nor the structured content of `result` carries
    any of `secrets`."""
    whole = text_of(result) + json.dumps(result.structuredContent)
    for secret in secrets:
        assert secret not in whole, whole


def assert_denied(result, path, rule):
    e = err(result)
    assert e["code"] == "SANDBOX_READ_DENIED", e
    assert e["retryable"] is False
    assert e["path"] == str(path), e
    assert str(path) in e["message"] and rule in e["message"], e
    assert_secret_absent(result, SECRET, KEY_SECRET)


async def test_hover_and_references_on_a_file_in_ssh_are_refused(box):
    x = box["ssh"] / "x.py"
    async with connect(box["env"], cwd=str(box["ws"])) as s:
        # a position with nothing on it: the reply would echo the line
        r = await ask(s, {"op": "hover", "path": str(x), "line": 1, "column": 1})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        r = await ask(s, {"op": "references", "path": str(x), "line": 2, "symbol": "TOKEN"})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        r = await ask(s, {"op": "symbols", "path": str(x)})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        # the same path through `..` from the workspace
        r = await ask(s, {"op": "definition", "path": "../home/.ssh/x.py", "line": 3, "symbol": "TOKEN"})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")


async def test_a_symlink_in_the_workspace_to_a_denied_file_is_refused(box):
    ws, x = box["ws"], box["ssh"] / "x.py"
    (ws / "linked.py").symlink_to(x)
    # a symlinked directory on the way is followed too
    (ws / "keys").symlink_to(box["ssh"], target_is_directory=True)
    async with connect(box["env"], cwd=str(ws)) as s:
        r = await ask(s, {"op": "references", "path": "linked.py", "line": 2, "symbol": "TOKEN"})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")
        assert "(where `linked.py` leads)" in err(r)["message"]
        r = await ask(s, {"op": "hover", "path": "keys/x.py", "line": 1, "column": 1})
        assert_denied(r, x, "`deny_read` entry `~/.ssh`")


async def test_a_file_in_dsh_private_directory_is_refused(box):
    private = pathlib.Path(box["env"]["XDG_CONFIG_HOME"]) / "dsh"
    private.mkdir(parents=True, exist_ok=True)
    notes = private / "notes.py"
    notes.write_text(f"# {SECRET}\nTOKEN = 1\n")
    async with connect(box["env"], cwd=str(box["ws"])) as s:
        r = await ask(s, {"op": "hover", "path": str(notes), "line": 1, "column": 1})
        assert_denied(r, notes, "dsh's private directory")


@pytest.mark.parametrize("typescript", ["typescript", "typescript7"])
async def test_a_definition_in_a_denied_file_is_withheld(box, typescript):
    """With the workspace's own TypeScript 5 (served by
    typescript-language-server) and 7 (served by its own server)."""
    ws = box["ws"]
    package = ROOT / "tests" / "node" / "node_modules" / typescript
    if not (package / "package.json").is_file():
        pytest.fail(f"{package} is missing: `cargo xtask test` installs it (npm ci in tests/node)")
    (ws / "node_modules").mkdir()
    (ws / "node_modules" / "typescript").symlink_to(package, target_is_directory=True)
    line = (ws / "app.ts").read_text().splitlines()[0]
    specifier = line.index("../home/.ssh/deploy") + 2
    async with connect(box["env"], cwd=str(ws)) as s:
        # the definition of the module specifier is the key file itself:
        # its first line would be the body
        r = await ask(s, {"op": "definition", "path": "app.ts", "line": 1, "column": specifier})
        assert_secret_absent(r, KEY_SECRET, "BEGIN OPENSSH")
        d = ok(r)
        assert d["items"] == [], d
        assert d["withheld"]["count"] == 1, d
        assert "`deny_read` entry `~/.ssh`" in d["withheld"]["reason"], d
        assert "[withheld: 1 definition site(s), in files this session's sandbox" in text_of(r)
        # the server never got the key's text, so nothing it computes
        # from the import shows it either
        for args in (
            {"op": "definition", "path": "app.ts", "line": 3, "symbol": "key"},
            {"op": "hover", "path": "app.ts", "line": 3, "symbol": "key"},
            {"op": "references", "path": "app.ts", "line": 3, "symbol": "key"},
            {"op": "symbols", "path": "app.ts", "query": "key"},
        ):
            r = await ask(s, args)
            assert not r.isError, text_of(r)
            assert_secret_absent(r, KEY_SECRET, "BEGIN OPENSSH")
        # a definition in the workspace is not withheld
        d = ok(await ask(s, {"op": "definition", "path": "app.ts", "line": 3, "symbol": "perimeter"}))
        [item] = d["items"]
        assert item["path"] == "geometry.ts" and "return 4 * side;" in item["body"], d
        assert "withheld" not in d, d


async def test_queries_in_the_workspace_still_work(box):
    async with connect(box["env"], cwd=str(box["ws"])) as s:
        r = ok(await ask(s, {"op": "references", "path": "shapes.py", "line": 1, "symbol": "area"}))
        files = {f["path"]: f["count"] for f in r["files"]}
        assert files.get("shapes.py") == 1 and files.get("main.py", 0) >= 1, r
        assert "withheld" not in r, r
        d = ok(await ask(s, {"op": "definition", "path": "main.py", "line": 3, "symbol": "area"}))
        assert [(i["path"], i["line"]) for i in d["items"]] == [("shapes.py", 1)], d
        assert "return side * side" in d["items"][0]["body"]
        h = ok(await ask(s, {"op": "hover", "path": "main.py", "line": 3, "symbol": "area"}))
        assert "int" in (h["markdown"] or ""), h


async def test_with_the_sandbox_off_nothing_is_checked(box):
    config = write_config(box["dir"], '[sandbox]\nmode = "off"\n')
    x = box["ssh"] / "x.py"
    async with connect(box["env"], "--config", config, cwd=str(box["ws"])) as s:
        r = await ask(s, {"op": "references", "path": str(x), "line": 2, "symbol": "TOKEN"})
        refs = ok(r)
        assert refs["total"] == 2, refs
        assert SECRET in text_of(r)


# Every file the project-root search reads, as a root marker or a
# manifest, for Rust, TypeScript/JavaScript, Go, C/C++ and Python.
MARKERS = ["Cargo.toml", "package.json", "tsconfig.json", "jsconfig.json", "go.mod", "go.work",
           "compile_commands.json", "pyproject.toml"]

# Queries whose server needs a project root (`no_project` without one).
ROOTED_QUERIES = [
    {"op": "symbols", "path": "src/lib.rs"},
    {"op": "symbols", "path": "main.go"},
    {"op": "symbols", "path": "main.c"},
]


def _plant(directory, kind):
    """Every marker in `directory` as a FIFO (an open for reading waits for
    a writer) or as a symlink to /dev/zero (a read never ends)."""
    for name in MARKERS:
        path = directory / name
        if kind == "fifo":
            os.mkfifo(path)
        else:
            path.symlink_to("/dev/zero")


def _status_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} in /proc/{pid}/status")


@pytest.mark.parametrize("below,above", [("fifo", "zero"), ("zero", "fifo")])
async def test_markers_that_block_or_never_end_stall_no_other_agent(isolated_env, tmp_path, below, above):
    """A workspace and its parent whose root markers are FIFOs and
    symlinks to /dev/zero: the root search of several concurrent queries
    holds neither the daemon's workers nor its memory; another agent
    connects and runs a command at once, and each query fails with
    `no_project` (none of them is a project marker)."""
    top = tmp_path / "top"
    ws = top / "ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "lib.rs").write_text("pub fn f() {}\n")
    (ws / "main.go").write_text("package main\n\nfunc main() {}\n")
    (ws / "main.c").write_text("int main(void) { return 0; }\n")
    _plant(ws, below)
    _plant(top, above)
    env = dict(isolated_env, PATH=_tool_path(isolated_env))
    results = []
    async with connect(env, cwd=str(ws)) as s:
        [daemon] = daemons_of(env)
        # A read without bound ends at this limit (the allocation fails)
        # instead of taking the machine's memory.
        headroom = 2 << 30
        vm = _status_kib(daemon, "VmSize") * 1024
        resource.prlimit(daemon, resource.RLIMIT_AS, (vm + headroom, vm + headroom))
        before = _status_kib(daemon, "VmHWM")

        async def query(args):
            results.append(await s.call_tool("lsp", args))

        async with anyio.create_task_group() as tg:
            for args in ROOTED_QUERIES * 3:
                tg.start_soon(query, args)
            # The other agent: connected, answered, while the queries run.
            with anyio.fail_after(15):
                async with connect(env, cwd=str(tmp_path)) as other:
                    r = ok(await other.call_tool("bash", {"command": "echo alive"}))
            assert r["output"] == "alive\n", r
        assert daemons_of(env) == [daemon], "the daemon died"
        grown = _status_kib(daemon, "VmHWM") - before
        assert grown < 256 << 10, f"the daemon's peak memory grew by {grown} KiB"
    assert len(results) == len(ROOTED_QUERIES) * 3
    for r in results:
        e = err(r)
        assert e["code"] == "LSP_UNAVAILABLE" and e.get("reason") == "no_project", e
        assert "(a regular file)" in e["message"], e


MONO_BUILD_RS = r'''
use std::path::Path;
fn main() {
    let svc = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sibling = match std::fs::write(svc.join("..").join("other").join("pwned"), "pwned") {
        Ok(()) => "written".to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    std::fs::write(svc.join("ok"), sibling).unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}
'''


async def _wait_for_build_script(s, function, marker):
    """Waits until rust-analyzer answers `symbols` for `src/lib.rs` with
    `function` among them, then until the crate's build script, which it
    runs while it loads the workspace, has written `marker`."""

    async def symbols():
        r = await s.call_tool("lsp", {"op": "symbols", "path": "src/lib.rs"})
        if r.isError:
            assert err(r)["code"] == "LSP_NOT_READY", text_of(r)
            return None
        return {x["name"] for x in r.structuredContent["symbols"]}

    names = await eventually(symbols, "rust-analyzer answers symbols", timeout_s=180)
    assert function in names, names

    async def build_script_ran():
        return marker.exists()

    await eventually(build_script_ran, "the build script ran", timeout_s=180)

async def test_a_servers_writes_stay_inside_the_asking_sessions_workspace(isolated_env, tmp_path):
    """An agent whose workspace is `mono/svc`, a member of the Cargo
    workspace `mono/`: rust-analyzer serves `mono/` (it reads the whole
    workspace), and the build script it runs for `svc` writes inside
    `mono/svc` but not into the sibling crate `mono/other`, which the
    agent's own commands may not write either."""
    if shutil.which("rust-analyzer", path=isolated_env.get("PATH")) is None:
        pytest.fail("rust-analyzer is not installed: run `rustup component add rust-analyzer`")
    mono = tmp_path / "mono"
    for crate in ("svc", "other"):
        (mono / crate / "src").mkdir(parents=True)
        (mono / crate / "Cargo.toml").write_text(
            f'[package]\nname = "{crate}"\nversion = "0.1.0"\nedition = "2021"\n')
        (mono / crate / "src" / "lib.rs").write_text(f"pub fn {crate}_fn() {{}}\n")
    (mono / "Cargo.toml").write_text('[workspace]\nmembers = ["svc", "other"]\nresolver = "2"\n')
    (mono / "svc" / "build.rs").write_text(MONO_BUILD_RS)
    # The lock file is the workspace's, in `mono/`: made here, as a
    # checked-out project has it.
    subprocess.run(["cargo", "generate-lockfile", "--offline"], cwd=mono, check=True,
                   env=isolated_env, capture_output=True)
    svc, pwned, marker = mono / "svc", mono / "other" / "pwned", mono / "svc" / "ok"
    # A temp dir of its own: the one every sandbox may write must not
    # hold `mono/`.
    (tmp_path / "tmp").mkdir()
    env = dict(isolated_env, TMPDIR=str(tmp_path / "tmp"))
    async with connect(env, cwd=str(svc)) as s:
        # The agent's own commands may not write the sibling crate.
        r = ok(await s.call_tool("bash", {"command": "echo x > ../other/by-the-agent"}))
        assert r["exit_code"] != 0 and "Permission denied" in r["output"], r
        await _wait_for_build_script(s, "svc_fn", marker)
    assert marker.read_text().startswith("refused: "), marker.read_text()
    assert not pwned.exists()


NET_BUILD_RS = r'''
use std::path::Path;
fn main() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let port: u16 = std::fs::read_to_string(dir.join("port")).unwrap().trim().parse().unwrap();
    let result = match std::net::TcpStream::connect(("127.0.0.1", port)) {
        Ok(_) => "connected".to_owned(),
        Err(e) => format!("refused: {e}"),
    };
    std::fs::write(dir.join("net"), result).unwrap();
    println!("cargo:rerun-if-changed=build.rs");
}
'''


@pytest.mark.parametrize("network", [False, True])
async def test_a_server_runs_in_the_asking_sessions_sandbox(isolated_env, tmp_path, network):
    """A connection whose config turns the network off, on a daemon whose
    own config leaves it on: the build script rust-analyzer runs for that
    session's crate cannot reach a listener on the host's loopback, as
    the session's own commands cannot. With the network on, it can (the
    test's control)."""
    import socket

    if shutil.which("rust-analyzer", path=isolated_env.get("PATH")) is None:
        pytest.fail("rust-analyzer is not installed: run `rustup component add rust-analyzer`")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.setblocking(False)
    crate = tmp_path / "netcrate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(
        '[package]\nname = "netcrate"\nversion = "0.1.0"\nedition = "2021"\n')
    (crate / "src" / "lib.rs").write_text("pub fn net_fn() {}\n")
    (crate / "build.rs").write_text(NET_BUILD_RS)
    (crate / "port").write_text(str(listener.getsockname()[1]))
    subprocess.run(["cargo", "generate-lockfile", "--offline"], cwd=crate, check=True,
                   env=isolated_env, capture_output=True)
    (tmp_path / "tmp").mkdir()
    env = dict(isolated_env, TMPDIR=str(tmp_path / "tmp"))
    cfg = write_config(tmp_path, f"[sandbox]\nnetwork = {'true' if network else 'false'}\n")
    marker = crate / "net"
    try:
        # The daemon starts with its own config (network on), for a first
        # connection; the session under test comes second, with its own.
        async with connect(env, cwd=str(tmp_path)) as first, \
                connect(env, "--config", cfg, cwd=str(crate)) as s:
            assert ok(await first.call_tool("bash", {"command": "echo ok"}))["sandbox"]["network"]
            r = ok(await s.call_tool("bash", {"command": "echo ok"}))
            assert r["sandbox"]["network"] is network, r
            await _wait_for_build_script(s, "net_fn", marker)
        result = marker.read_text()
        if network:
            assert result == "connected", result
        else:
            assert result.startswith("refused: "), result
            with pytest.raises(BlockingIOError):
                listener.accept()
    finally:
        listener.close()
