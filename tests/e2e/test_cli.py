"""`dsh workspace …` and `dsh session …` end to end: the real binary on a
real store in a temp data dir, with sessions recorded by real `dsh mcp`
servers driven by the MCP Python SDK client."""

import concurrent.futures
import fcntl
import functools
import json
import os
import subprocess
import threading
import uuid

import anyio
import pytest
from mcp.client.session import DEFAULT_CLIENT_INFO

from conftest import connect, dsh_bin
from waiting import eventually, wait_until

UNKNOWN = "00000000-0000-4000-8000-000000000000"

EMPTY_WORKSPACES = (
    "no workspaces yet — `dsh workspace create PATH` adds one; "
    "agents add theirs when they connect\n"
)
EMPTY_SESSIONS = "no sessions yet — every agent connection to `dsh mcp` records one\n"


class Dsh:
    """Runs the dsh binary against one data dir (through the daemon, or
    with `--standalone` on the store itself)."""

    def __init__(self, env, data_dir, standalone=False):
        self.env = env
        self.data_dir = str(data_dir)
        self.standalone = standalone

    def run(self, *args, status=0, cwd=None):
        extra = ["--standalone"] if self.standalone else []
        proc = subprocess.run(
            [dsh_bin(), "--data-dir", self.data_dir, *extra, *args],
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == status, (
            f"dsh {' '.join(args)} exited {proc.returncode}, wanted {status}\n"
            f"stdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
        if status == 0:
            assert proc.stderr == "", proc.stderr
        else:
            assert proc.stdout == "", proc.stdout
        return proc

    def out(self, *args, cwd=None):
        return self.run(*args, cwd=cwd).stdout

    def json(self, *args, cwd=None):
        return json.loads(self.out(*args, "--json", cwd=cwd))

    def error(self, *args, status=1):
        """The stderr line of a failing command, without the `dsh: ` prefix."""
        err = self.run(*args, status=status).stderr
        if status == 1:
            assert err.startswith("dsh: ") and err.endswith("\n") and err.count("\n") == 1, err
            return err[len("dsh: ") : -1]
        return err


@pytest.fixture
def dsh(isolated_env, tmp_path):
    return Dsh(isolated_env, tmp_path / "store")


def parse_table(text):
    """Rows of an aligned table as dicts keyed by header, sliced at the
    header's column offsets (so a misaligned row fails to parse)."""
    lines = text.rstrip("\n").split("\n")
    header = lines[0]
    # A column starts at the line's start or after a gap of two spaces.
    starts = [
        i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 2 : i] == "  ")
    ]
    names = []
    for n, start in enumerate(starts):
        end = starts[n + 1] if n + 1 < len(starts) else None
        names.append(header[start:end].strip())
    rows = []
    for line in lines[1:]:
        row = {}
        for n, start in enumerate(starts):
            end = starts[n + 1] if n + 1 < len(starts) else None
            if n + 1 < len(starts):
                # The gap before the next column is blank in every row.
                assert line[end - 2 : end] == "  ", (line, names[n])
            row[names[n]] = line[start:end].strip()
        rows.append(row)
    return rows


def parse_key_values(block):
    out = {}
    for line in block.rstrip("\n").split("\n"):
        key, _, value = line.partition("  ")
        out[key] = value.strip()
    return out


def utc(stamp):
    """A JSON timestamp as the tables print it."""
    return f"{stamp[:10]} {stamp[11:19]}"


def ws_row(ws):
    return {
        "ID": ws["id"],
        "TITLE": ws["title"],
        "SESSIONS": str(len(ws["session_ids"])),
        "UPDATED (UTC)": utc(ws["updated_at"]),
        "STATUS": ws["status"],
        "PATH": ws["path"],
    }


def make_dirs(tmp_path, *names):
    out = []
    for name in names:
        d = tmp_path / name
        d.mkdir()
        out.append(os.path.realpath(d))
    return out


def without(d, *keys):
    return {k: v for k, v in d.items() if k not in keys}


# ---- workspaces ------------------------------------------------------------


def test_empty_store_lists_nothing_helpfully(dsh):
    assert dsh.out("workspace", "list") == EMPTY_WORKSPACES
    assert dsh.json("workspace", "list") == []
    assert dsh.out("session", "list") == EMPTY_SESSIONS
    assert dsh.json("session", "list") == []


def test_create_then_list_in_table_and_json(dsh, tmp_path):
    alpha, beta = make_dirs(tmp_path, "alpha", "beta")
    a = dsh.json("workspace", "create", alpha)
    assert set(a) == {
        "id", "path", "title", "created_at", "updated_at", "session_ids", "status", "created",
    }
    uuid.UUID(a["id"])
    assert without(a, "id", "created_at", "updated_at") == {
        "path": alpha,
        "title": "alpha",
        "session_ids": [],
        "status": "ok",
        "created": True,
    }
    assert a["created_at"] == a["updated_at"]

    line = dsh.out("workspace", "create", beta, "--title", "Beta project")
    b_id = line.split()[2]
    assert line == f'created workspace {b_id} "Beta project" for {beta}\n'

    listed = dsh.json("workspace", "list")
    # New workspaces go to the top.
    assert [w["id"] for w in listed] == [b_id, a["id"]]
    assert listed[1] == without(a, "created")
    assert without(listed[0], "created_at", "updated_at") == {
        "id": b_id,
        "path": beta,
        "title": "Beta project",
        "session_ids": [],
        "status": "ok",
    }

    text = dsh.out("workspace", "list")
    assert text.split("\n")[0].split() == [
        "ID", "TITLE", "SESSIONS", "UPDATED", "(UTC)", "STATUS", "PATH",
    ]
    assert parse_table(text) == [ws_row(w) for w in listed]


def test_create_twice_through_other_spellings_is_one_workspace(dsh, tmp_path):
    (proj,) = make_dirs(tmp_path, "proj")
    os.mkdir(os.path.join(proj, "sub"))
    os.symlink(proj, tmp_path / "link")
    first = dsh.json("workspace", "create", proj, "--title", "Proj")
    spellings = [
        proj + "/",
        str(tmp_path / "link"),
        str(tmp_path / "link") + "/",
        os.path.join(proj, "sub", ".."),
        os.path.join(proj, ".", "sub", "..", "."),
    ]
    for spelling in spellings:
        again = dsh.json("workspace", "create", spelling)
        assert again == {**first, "created": False}, spelling
    # A relative spelling, resolved against the working directory.
    assert dsh.json("workspace", "create", "proj", cwd=tmp_path) == {**first, "created": False}
    assert dsh.out("workspace", "create", str(tmp_path / "link"), "--title", "Other") == (
        f'{proj} is already workspace {first["id"]} "Proj"; nothing changed '
        "(to change its title: `dsh workspace rename ID TITLE`)\n"
    )
    assert dsh.out("workspace", "create", proj + "/") == (
        f'{proj} is already workspace {first["id"]} "Proj"; nothing changed\n'
    )
    assert dsh.json("workspace", "list") == [without(first, "created")]


def test_create_rejects_what_is_not_a_directory(dsh, tmp_path):
    missing = str(tmp_path / "nope")
    assert dsh.error("workspace", "create", missing) == (
        f"{missing} does not exist; give the path of an existing directory"
    )
    afile = tmp_path / "file.txt"
    afile.write_text("x")
    assert dsh.error("workspace", "create", str(afile)) == (
        f"{os.path.realpath(afile)} is not a directory; a workspace is a directory"
    )
    (d,) = make_dirs(tmp_path, "d")
    assert dsh.error("workspace", "create", d, "--title", "  ") == (
        "invalid title: a title cannot be empty"
    )
    assert dsh.json("workspace", "list") == []


def test_show_in_table_and_json(dsh, tmp_path):
    (proj,) = make_dirs(tmp_path, "proj")
    ws = without(dsh.json("workspace", "create", proj), "created")
    shown = dsh.json("workspace", "show", ws["id"])
    assert shown == {**ws, "sessions": []}
    text = dsh.out("workspace", "show", ws["id"])
    block, rest = text.split("\n\n")
    assert parse_key_values(block) == {
        "id": ws["id"],
        "title": "proj",
        "path": proj,
        "status": "ok",
        "created": utc(ws["created_at"]) + " UTC",
        "updated": utc(ws["updated_at"]) + " UTC",
        "sessions": "0",
    }
    assert rest == "no sessions yet — agents that connect from this directory are added here\n"
    assert dsh.json("session", "list", "--workspace", ws["id"]) == []
    assert dsh.out("session", "list", "--workspace", ws["id"]) == (
        f"workspace {ws['id']} has no sessions yet — agents that connect from its "
        "directory are added to it\n"
    )


def test_a_missing_directory_keeps_its_record_and_shows_as_missing(dsh, tmp_path):
    (gone,) = make_dirs(tmp_path, "gone")
    ws = dsh.json("workspace", "create", gone)
    os.rmdir(gone)
    listed = dsh.json("workspace", "list")
    assert listed == [{**without(ws, "created"), "status": "missing"}]
    assert parse_table(dsh.out("workspace", "list"))[0]["STATUS"] == "missing"


def test_rename(dsh, tmp_path):
    a, b = make_dirs(tmp_path, "a", "b")
    wa = dsh.json("workspace", "create", a)
    wb = dsh.json("workspace", "create", b)
    assert dsh.out("workspace", "rename", wa["id"], "Shared name") == (
        f'renamed workspace {wa["id"]} to "Shared name"\n'
    )
    # Duplicate titles are allowed.
    renamed = dsh.json("workspace", "rename", wb["id"], "Shared name")
    assert without(renamed, "updated_at") == without(wb, "created", "updated_at") | {
        "title": "Shared name"
    }
    assert renamed["updated_at"] >= wb["updated_at"]
    assert [w["title"] for w in dsh.json("workspace", "list")] == ["Shared name"] * 2
    assert dsh.json("workspace", "show", wa["id"])["title"] == "Shared name"
    assert dsh.error("workspace", "rename", wa["id"], "") == "invalid title: a title cannot be empty"
    assert dsh.error("workspace", "rename", UNKNOWN, "x") == (
        f"no workspace has id {UNKNOWN}; `dsh workspace list` shows the ids"
    )


def test_move_with_and_without_before(dsh, tmp_path):
    dirs = make_dirs(tmp_path, "a", "b", "c")
    ids = {}
    for d in dirs:
        ids[os.path.basename(d)] = dsh.json("workspace", "create", d)["id"]
    a, b, c = ids["a"], ids["b"], ids["c"]

    def order():
        return [w["id"] for w in dsh.json("workspace", "list")]

    assert order() == [c, b, a]
    assert dsh.out("workspace", "move", a, "--before", c) == (
        f'moved workspace {a} "a" to position 1 of 3, before {c} "c"\n'
    )
    assert order() == [a, c, b]
    moved = dsh.json("workspace", "move", c)
    assert [w["id"] for w in moved] == [a, b, c]
    assert moved == dsh.json("workspace", "list")
    assert dsh.out("workspace", "move", b) == (
        f'moved workspace {b} "b" to position 3 of 3, at the end\n'
    )
    assert order() == [a, c, b]
    # Before itself: nothing moves.
    assert dsh.out("workspace", "move", c, "--before", c) == (
        f'moved workspace {c} "c" to position 2 of 3, before {b} "b"\n'
    )
    assert order() == [a, c, b]


def test_invalid_moves_change_nothing(dsh, tmp_path):
    a, b = make_dirs(tmp_path, "a", "b")
    ia = dsh.json("workspace", "create", a)["id"]
    ib = dsh.json("workspace", "create", b)["id"]
    before = dsh.json("workspace", "list")
    assert dsh.error("workspace", "move", ia, "--before", UNKNOWN) == (
        f"cannot move before {UNKNOWN}: no workspace has that id; "
        "`dsh workspace list` shows the ids"
    )
    assert dsh.error("workspace", "move", UNKNOWN, "--before", ib) == (
        f"no workspace has id {UNKNOWN}; `dsh workspace list` shows the ids"
    )
    usage = dsh.error("workspace", "move", ia, "--before", "not-an-id", status=2)
    assert "not a workspace id (ids are UUIDs; `dsh workspace list` shows them)" in usage
    assert dsh.json("workspace", "list") == before


def test_rm_forgets_the_registration_only(dsh, tmp_path):
    keep, drop = make_dirs(tmp_path, "keep", "drop")
    (tmp_path / "drop" / "file.txt").write_text("still here")
    wk = dsh.json("workspace", "create", keep)
    wd = dsh.json("workspace", "create", drop)
    assert dsh.out("workspace", "rm", wd["id"]) == (
        f'removed workspace {wd["id"]} "drop" from the registry; the directory {drop} '
        "and its sessions' logs are kept\n"
    )
    assert (tmp_path / "drop" / "file.txt").read_text() == "still here"
    assert dsh.json("workspace", "list") == [without(wk, "created")]
    assert dsh.error("workspace", "rm", wd["id"]) == (
        f"no workspace has id {wd['id']}; `dsh workspace list` shows the ids"
    )
    assert dsh.json("workspace", "rm", wk["id"]) == {
        **without(wk, "created"),
        "removed": True,
    }
    assert dsh.out("workspace", "list") == EMPTY_WORKSPACES
    # Registering the directory again makes a new workspace.
    again = dsh.json("workspace", "create", drop)
    assert again["created"] is True and again["id"] != wd["id"]


def test_unknown_and_malformed_ids(dsh):
    for args, message in [
        (["workspace", "show", UNKNOWN], f"no workspace has id {UNKNOWN}; `dsh workspace list` shows the ids"),
        (["workspace", "rm", UNKNOWN], f"no workspace has id {UNKNOWN}; `dsh workspace list` shows the ids"),
        (["session", "list", "--workspace", UNKNOWN], f"no workspace has id {UNKNOWN}; `dsh workspace list` shows the ids"),
        (["session", "show", UNKNOWN], f"no session has id {UNKNOWN}; `dsh session list` shows the ids"),
        (["session", "archive", UNKNOWN], f"no session has id {UNKNOWN}; `dsh session list` shows the ids"),
        (["session", "unarchive", UNKNOWN], f"no session has id {UNKNOWN}; `dsh session list` shows the ids"),
    ]:
        assert dsh.error(*args) == message, args
        assert dsh.error(*args, "--json") == message, args
    for args in (["workspace", "show", "abc"], ["workspace", "rm", "12"]):
        err = dsh.error(*args, status=2)
        assert "not a workspace id (ids are UUIDs; `dsh workspace list` shows them)" in err
    err = dsh.error("session", "show", "xyz", status=2)
    assert "not a session id (ids are UUIDs; `dsh session list` shows them)" in err


def test_default_data_dir_is_under_xdg_data_home(isolated_env, tmp_path):
    (proj,) = make_dirs(tmp_path, "proj")
    out = subprocess.run(
        [dsh_bin(), "workspace", "create", proj, "--json"],
        env=isolated_env, capture_output=True, text=True, check=True,
    ).stdout
    ws = json.loads(out)
    store = os.path.join(isolated_env["XDG_DATA_HOME"], "dsh")
    assert os.path.isdir(store)
    # The same store through --data-dir, given after the subcommand this time.
    listed = subprocess.run(
        [dsh_bin(), "workspace", "list", "--json", "--data-dir", store],
        env=isolated_env, capture_output=True, text=True, check=True,
    ).stdout
    assert json.loads(listed) == [without(ws, "created")]


COMMANDS = [
    ["workspace"],
    ["workspace", "list"],
    ["workspace", "create"],
    ["workspace", "show"],
    ["workspace", "rename"],
    ["workspace", "move"],
    ["workspace", "rm"],
    ["session"],
    ["session", "list"],
    ["session", "show"],
    ["session", "move"],
    ["session", "archive"],
    ["session", "unarchive"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_every_command_has_help_with_an_example(isolated_env, command):
    proc = subprocess.run(
        [dsh_bin(), *command, "--help"], env=isolated_env, capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert text.split("\n")[0].strip(), text  # a one-line summary first
    assert f"Usage: dsh {' '.join(command)}" in text
    assert "\nExample:\n  dsh " + command[0] in text
    if len(command) == 2 and command[1] != "list":
        assert "Arguments:" in text
    if len(command) == 2:
        assert "--json" in text


def test_rm_help_says_the_directory_is_kept(isolated_env):
    text = subprocess.run(
        [dsh_bin(), "workspace", "rm", "--help"],
        env=isolated_env, capture_output=True, text=True, check=True,
    ).stdout
    assert "directory" in text and "kept" in text


# ---- sharing the store -----------------------------------------------------


def test_list_succeeds_while_creates_run_in_a_loop(dsh, tmp_path):
    dirs = make_dirs(tmp_path, *[f"d{i:02}" for i in range(15)])
    stop = threading.Event()
    lists = []

    def keep_listing():
        while not stop.is_set():
            lists.append(len(dsh.json("workspace", "list")))

    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        readers = [pool.submit(keep_listing)]
        try:
            for d in dirs:
                dsh.out("workspace", "create", d)
        finally:
            stop.set()
        for r in readers:
            r.result()
    assert lists, "the reader never ran"
    assert lists == sorted(lists), "a list went back in time"
    assert [w["path"] for w in dsh.json("workspace", "list")] == list(reversed(dirs))


def test_a_busy_store_is_an_error_that_says_retrying_works(isolated_env, tmp_path):
    dsh = Dsh(isolated_env, tmp_path / "store", standalone=True)
    (proj,) = make_dirs(tmp_path, "proj")
    dsh.out("workspace", "create", proj)
    lock = os.path.join(dsh.data_dir, "lock")
    fd = os.open(lock, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        message = dsh.error("workspace", "list")
    finally:
        os.close(fd)
    assert message.startswith(
        f"the store at {dsh.data_dir} is held by another dsh process (waited "
    ), message
    assert message.endswith(
        " ms): a dsh daemon holds it for its whole life (run the command without "
        "--standalone, or `dsh daemon stop`); any other holder only for one operation, "
        "so retrying works"
    ), message
    assert len(dsh.json("workspace", "list")) == 1


def _waits_for_the_lock(proc, lock):
    """Whether `proc` was refused `lock` and waits to retry: it holds the
    lock file open and sleeps between its tries."""
    assert proc.poll() is None, proc.communicate()
    try:
        fds = [os.path.realpath(f"/proc/{proc.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{proc.pid}/fd")]
        with open(f"/proc/{proc.pid}/wchan") as f:
            sleeping = "nanosleep" in f.read()
    except OSError:
        return False
    return lock in fds and sleeping


def test_a_briefly_held_store_is_waited_for(isolated_env, tmp_path):
    dsh = Dsh(isolated_env, tmp_path / "store", standalone=True)
    (proj,) = make_dirs(tmp_path, "proj")
    dsh.out("workspace", "create", proj)
    lock = os.path.realpath(os.path.join(dsh.data_dir, "lock"))
    fd = os.open(lock, os.O_RDWR)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        proc = subprocess.Popen([dsh_bin(), "--data-dir", dsh.data_dir, "--standalone", "workspace", "list", "--json"],
                                env=dsh.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        # release the store only once the CLI found it held and waits for it
        wait_until(lambda: _waits_for_the_lock(proc, lock), "the CLI waits for the held store")
    finally:
        os.close(fd)
    out, errors = proc.communicate(timeout=60)
    assert (proc.returncode, errors) == (0, "")
    assert len(json.loads(out)) == 1


# ---- sessions, recorded by real `dsh mcp` servers --------------------------


async def off_loop(fn, *args):
    """Runs a blocking CLI call on a thread, so the MCP clients' event loop
    keeps delivering messages to the servers meanwhile."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args))


async def wait_for_sessions(dsh, count):
    """Waits until `count` sessions are recorded; returns them."""
    async def recorded():
        sessions = await off_loop(dsh.json, "session", "list")
        return sessions if len(sessions) >= count else None

    return await eventually(recorded, f"{count} session(s) are recorded")


async def wait_for_log(dsh, session_id, count):
    """Waits until session `session_id` has `count` log entries; returns it."""
    async def logged():
        shown = await off_loop(dsh.json, "session", "show", session_id)
        return shown if shown["log_total"] >= count else None

    return await eventually(logged, f"session {session_id} has {count} log entries")


CLIENT = {"name": DEFAULT_CLIENT_INFO.name, "version": DEFAULT_CLIENT_INFO.version}
CLIENT_CELL = f"{DEFAULT_CLIENT_INFO.name} {DEFAULT_CLIENT_INFO.version}"


@pytest.mark.anyio
async def test_sessions_of_two_connected_agents(dsh, isolated_env, tmp_path):
    alpha, beta = make_dirs(tmp_path, "alpha", "beta")
    async with connect(isolated_env, "--data-dir", dsh.data_dir, cwd=alpha) as one:
        async with connect(isolated_env, "--data-dir", dsh.data_dir, cwd=beta) as two:
            sessions = await wait_for_sessions(dsh, 2)
            assert len(sessions) == 2, sessions
            # Both servers are connected: the CLI shares the store with them.
            for _ in range(3):
                assert len(await off_loop(dsh.json, "workspace", "list")) == 2
                assert len(await off_loop(dsh.json, "session", "list")) == 2
            await one.call_tool("bash", {"command": "echo one"})
            await two.call_tool("bash", {"command": "echo two"})
            await two.call_tool("bash", {"command": "exit 3"})
            listed_while_connected = await off_loop(dsh.out, "session", "list")

    by_cwd = {s["cwd"]: s for s in sessions}
    assert set(by_cwd) == {alpha, beta}
    workspaces = {w["path"]: w for w in dsh.json("workspace", "list")}
    assert set(workspaces) == {alpha, beta}
    for path in (alpha, beta):
        s = by_cwd[path]
        assert without(s, "id", "created_at") == {
            "cwd": path,
            "client": CLIENT,
            "archived": False,
            "workspace_id": workspaces[path]["id"],
        }
        assert workspaces[path]["session_ids"] == [s["id"]]
    # Newest first.
    assert [s["created_at"] for s in sessions] == sorted(
        (s["created_at"] for s in sessions), reverse=True
    )

    expected_rows = [
        {
            "ID": s["id"],
            "CREATED (UTC)": utc(s["created_at"]),
            "CLIENT": CLIENT_CELL,
            "ARCHIVED": "no",
            "WORKSPACE": os.path.basename(s["cwd"]),
            "CWD": s["cwd"],
        }
        for s in sessions
    ]
    assert parse_table(listed_while_connected) == expected_rows
    assert parse_table(dsh.out("session", "list")) == expected_rows

    # One workspace's sessions.
    wa = workspaces[alpha]
    assert dsh.json("session", "list", "--workspace", wa["id"]) == [by_cwd[alpha]]
    assert parse_table(dsh.out("session", "list", "--workspace", wa["id"])) == [
        r for r in expected_rows if r["CWD"] == alpha
    ]

    # workspace show lists its sessions.
    shown = dsh.json("workspace", "show", wa["id"])
    assert shown == {**wa, "sessions": [by_cwd[alpha]]}
    block, table = dsh.out("workspace", "show", wa["id"]).split("\n\n")
    assert parse_key_values(block)["sessions"] == "1"
    assert parse_table(table) == [
        {
            "SESSION ID": by_cwd[alpha]["id"],
            "CREATED (UTC)": utc(by_cwd[alpha]["created_at"]),
            "CLIENT": CLIENT_CELL,
            "ARCHIVED": "no",
        }
    ]

    # session show: fields, workspace and the log.
    sb = by_cwd[beta]
    detail = await wait_for_log(dsh, sb["id"], 2)
    assert [(e["tool"], e["outcome"]) for e in detail["log"]] == [
        ("bash", "OK"),
        ("bash", "OK"),
    ]
    assert [json.loads(e["argument_summary"]) for e in detail["log"]] == [
        {"command": "echo two"},
        {"command": "exit 3"},
    ]
    assert without(detail, "log") == {**sb, "log_total": 2}
    tail = dsh.json("session", "show", sb["id"], "--tail", "1")
    assert tail["log"] == detail["log"][1:] and tail["log_total"] == 2

    text = dsh.out("session", "show", sb["id"])
    block, log = text.split("\n\n")
    assert parse_key_values(block) == {
        "id": sb["id"],
        "created": utc(sb["created_at"]) + " UTC",
        "client": CLIENT_CELL,
        "cwd": beta,
        "archived": "no",
        "workspace": f'{workspaces[beta]["id"]} "beta"',
    }
    heading, table = log.split("\n", 1)
    assert heading == "log: 2 tool calls, oldest first"
    assert parse_table(table) == [
        {
            "AT (UTC)": utc(e["at"]),
            "TOOL": "bash",
            "OUTCOME": "OK",
            "DURATION": f'{e["duration_ms"]} ms',
            "ARGUMENTS": e["argument_summary"],
        }
        for e in detail["log"]
    ]
    heading = dsh.out("session", "show", sb["id"], "--tail", "1").split("\n\n")[1].split("\n")[0]
    assert heading == "log: the last 1 of 2 tool calls, oldest first (--tail N for more)"
    assert dsh.out("session", "show", sb["id"], "--tail", "0").endswith(
        "\n\nlog: the last 0 of 2 tool calls, oldest first (--tail N for more)\n"
    )


@pytest.mark.anyio
async def test_archive_and_unarchive(dsh, isolated_env, tmp_path):
    (proj,) = make_dirs(tmp_path, "proj")
    async with connect(isolated_env, "--data-dir", dsh.data_dir, cwd=proj):
        (session,) = await wait_for_sessions(dsh, 1)
    sid = session["id"]

    assert dsh.out("session", "archive", sid) == f"archived session {sid}\n"
    assert dsh.out("session", "archive", sid) == (
        f"session {sid} was already archived; nothing changed\n"
    )
    archived = {**session, "archived": True}
    assert dsh.json("session", "archive", sid) == archived
    assert dsh.json("session", "list") == [archived]
    assert parse_table(dsh.out("session", "list"))[0]["ARCHIVED"] == "yes"
    assert parse_key_values(dsh.out("session", "show", sid).split("\n\n")[0])["archived"] == "yes"
    # Archiving keeps the membership.
    (ws,) = dsh.json("workspace", "list")
    assert ws["session_ids"] == [sid]

    assert dsh.out("session", "unarchive", sid) == f"unarchived session {sid}\n"
    assert dsh.out("session", "unarchive", sid) == (
        f"session {sid} was already unarchived; nothing changed\n"
    )
    assert dsh.json("session", "unarchive", sid) == session
    assert dsh.json("session", "list") == [session]


@pytest.mark.anyio
async def test_session_move_reorders_its_workspace_only(dsh, isolated_env, tmp_path):
    proj, other = make_dirs(tmp_path, "proj", "other")
    for cwd in (proj, proj, proj, other):
        async with connect(isolated_env, "--data-dir", dsh.data_dir, cwd=cwd):
            pass
    sessions = await wait_for_sessions(dsh, 4)
    ws = {w["path"]: w for w in dsh.json("workspace", "list")}
    c, b, a = ws[proj]["session_ids"]  # newest first
    (lone,) = ws[other]["session_ids"]

    def order():
        return [s["id"] for s in dsh.json("session", "list", "--workspace", ws[proj]["id"])]

    assert dsh.out("session", "move", a, "--before", c) == (
        f'moved session {a} to position 1 of 3 in workspace {ws[proj]["id"]} "proj"\n'
    )
    assert order() == [a, c, b]
    moved = dsh.json("session", "move", c)
    assert moved["session_ids"] == [a, b, c] and moved["id"] == ws[proj]["id"], moved
    assert order() == [a, b, c]
    # Refusals change nothing: an anchor of another workspace, an unknown session.
    assert dsh.error("session", "move", b, "--before", lone) == (
        f"invalid session move: anchor session {lone} is not in workspace {ws[proj]['id']}; "
        "`dsh session list --workspace ID` lists a workspace's sessions in their order"
    )
    assert dsh.error("session", "move", UNKNOWN) == (
        f"no session has id {UNKNOWN}; `dsh session list` shows the ids"
    )
    assert order() == [a, b, c]
    assert {s["id"] for s in dsh.json("session", "list")} == {s["id"] for s in sessions}
    # A session of no workspace has no order to move in.
    dsh.out("workspace", "rm", ws[other]["id"])
    assert dsh.error("session", "move", lone) == (
        f"invalid session move: session {lone} is in no workspace, and only a workspace's "
        "sessions are in an order; `dsh session list --workspace ID` lists a workspace's "
        "sessions in their order"
    )


@pytest.mark.anyio
async def test_rm_keeps_the_sessions_and_their_logs(dsh, isolated_env, tmp_path):
    (proj,) = make_dirs(tmp_path, "proj")
    async with connect(isolated_env, "--data-dir", dsh.data_dir, cwd=proj) as s:
        await s.call_tool("bash", {"command": "true"})
        (session,) = await wait_for_sessions(dsh, 1)
        await wait_for_log(dsh, session["id"], 1)
    (ws,) = dsh.json("workspace", "list")
    dsh.out("workspace", "rm", ws["id"])
    assert dsh.out("workspace", "list") == EMPTY_WORKSPACES
    (kept,) = dsh.json("session", "list")
    assert kept == {**session, "workspace_id": None}
    detail = dsh.json("session", "show", session["id"])
    assert detail["log_total"] == 1
    assert parse_key_values(dsh.out("session", "show", session["id"]).split("\n\n")[0])[
        "workspace"
    ] == "none"


@pytest.mark.anyio
async def test_session_show_prints_the_log_tail_by_default(dsh, isolated_env, tmp_path):
    (proj,) = make_dirs(tmp_path, "proj")
    async with connect(isolated_env, "--data-dir", dsh.data_dir, cwd=proj) as s:
        for i in range(25):
            await s.call_tool("bash", {"command": f"echo {i}"})
        (session,) = await wait_for_sessions(dsh, 1)
        detail = await wait_for_log(dsh, session["id"], 25)
    assert [json.loads(e["argument_summary"])["command"] for e in detail["log"]] == [
        f"echo {i}" for i in range(25)
    ]
    log = dsh.out("session", "show", session["id"]).split("\n\n")[1]
    heading, table = log.split("\n", 1)
    assert heading == "log: the last 20 of 25 tool calls, oldest first (--tail N for more)"
    assert [r["ARGUMENTS"] for r in parse_table(table)] == [
        e["argument_summary"] for e in detail["log"][5:]
    ]
    everything = dsh.out("session", "show", session["id"], "--tail", "100").split("\n\n")[1]
    assert everything.split("\n")[0] == "log: 25 tool calls, oldest first"
    assert len(parse_table(everything.split("\n", 1)[1])) == 25
