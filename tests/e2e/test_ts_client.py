"""The second real MCP client: the official TypeScript SDK
(`tests/node/mcp_client.mjs`, installed from the committed
`tests/node/package-lock.json` by `cargo xtask test`) lists the tools, runs
`bash` (with progress), opens a Python terminal, sends, closes and calls
`lsp`, and resumes its work after its bridge was SIGKILLed
(`tests/node/resume_client.mjs`). The SDK validates every message; anything
it rejects fails here."""

import shutil
import subprocess

import pytest

from conftest import ROOT, dsh_bin

FIXTURES = ROOT / "tests" / "fixtures" / "lsp" / "langs"
NODE = ROOT / "tests" / "node"


def run_ts_client(script, env, ok_line):
    """Runs the node script `script` (in tests/node) with `env`; it must
    exit 0 and print `ok_line`."""
    if shutil.which("node") is None:
        raise AssertionError("node is not installed: the TypeScript SDK test needs Node.js 20+")
    if not (NODE / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        raise AssertionError("run `cargo xtask test` (or `npm ci` in tests/node) to install the SDK")
    p = subprocess.run(
        ["node", str(NODE / script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    print(p.stdout)
    assert p.returncode == 0, f"stdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    assert ok_line in p.stdout


# The script waits for a cold language server, slow on a loaded machine.
@pytest.mark.timeout(300)
def test_the_typescript_sdk_client_drives_dsh(isolated_env, tmp_path):
    project = tmp_path / "python"
    shutil.copytree(FIXTURES / "python", project)
    env = dict(isolated_env, DSH_BIN=dsh_bin(), PROJECT=str(project))
    env["PATH"] = f"{NODE / 'node_modules' / '.bin'}:{env.get('PATH', '')}"
    run_ts_client("mcp_client.mjs", env, "typescript sdk client: ok")


@pytest.mark.timeout(300)
def test_the_typescript_sdk_client_resumes_after_its_bridge_is_killed(isolated_env, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    env = dict(isolated_env, DSH_BIN=dsh_bin(), PROJECT=str(project))
    run_ts_client("resume_client.mjs", env, "typescript sdk resume: ok")
