"""A smaller set of the end-to-end tests with `dsh mcp --standalone`: the
in-process server for embedders and sandboxes, which starts no daemon."""

import pytest

import test_foundation
import test_jobs
import test_terminal
from conftest import daemons_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def standalone_env(isolated_env):
    return dict(isolated_env, DSH_E2E_MCP_ARGS="--standalone")


async def test_bash_standalone(standalone_env, tmp_path):
    await test_foundation.test_bash_end_to_end_and_the_server_keeps_serving(standalone_env, tmp_path)
    assert daemons_of(standalone_env) == []


async def test_roots_standalone(standalone_env, tmp_path):
    await test_foundation.test_the_clients_first_root_is_the_sessions_directory(standalone_env, tmp_path)
    assert daemons_of(standalone_env) == []


async def test_repl_and_reload_standalone(standalone_env, tmp_path):
    await test_terminal.test_three_step_repl_debugging_survives_a_reload(standalone_env, tmp_path)
    assert daemons_of(standalone_env) == []


async def test_close_and_disconnect_standalone(standalone_env):
    await test_terminal.test_close_and_disconnect_leave_no_process(standalone_env)
    assert daemons_of(standalone_env) == []


async def test_jobs_standalone(standalone_env, tmp_path):
    await test_jobs.test_scenario_b_three_kinds_in_one_list(standalone_env, tmp_path)
    await test_jobs.test_closing_the_connection_ends_its_jobs(standalone_env)
    assert daemons_of(standalone_env) == []
