"""The real-project conformance run shared by the end-to-end suite
(`tests/e2e/test_lsp_real.py`) and its benchmark
(`tests/bench/bench_lsp_real.py`): a fresh copy of a prepared project, a
new dsh (a new daemon, in an environment of its own) started in it, and
the oracle's use sites asked cold: `definition`, `references` and `hover`
at each, several calls in flight at once. `LSP_NOT_READY` is retried and
counted; every other answer is judged against the oracle. Optionally a
real build of the same project runs, repeated from clean, the whole
time."""

import contextlib
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import anyio

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e"))
import prepare  # noqa: E402
from conftest import connect, daemons_of, err, make_env, stop_daemons  # noqa: E402

OPS = ("definition", "references", "hover")
# Calls in flight at once: enough that several arrive while the server
# is still indexing, few enough that a loaded machine answers each within
# the request timeout.
IN_FLIGHT = 6
# How long one (site, op) may keep answering LSP_NOT_READY.
READY_DEADLINE_S = 240


def processes_under(pids):
    """The command lines (argv lists) of every live descendant of `pids`,
    from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rpartition(")")[2].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [c for p in pids for c in children.get(p, [])]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        if argv:
            out.append(argv)
        todo.extend(children.get(pid, []))
    return out


class BuildLoop:
    """A real build of the project, run again and again (cleaning between
    runs) in its own process group until stopped; stopping ends the
    group."""

    def __init__(self, lang, project, scratch):
        self.lang, self.project, self.scratch = lang, pathlib.Path(project), pathlib.Path(scratch)
        self.stop_event = threading.Event()
        self.proc = None
        self.lock = threading.Lock()
        self.builds = 0
        self.failures = []
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _commands(self):
        if self.lang == "rust":
            return [["cargo", "build", "--offline", "--quiet"], ["cargo", "clean", "--offline", "--quiet"]]
        if self.lang == "python":
            pip = str(self.scratch / "venv" / "bin" / "pip")
            return [
                [pip, "install", "--quiet", "--disable-pip-version-check", "--no-deps",
                 "--no-build-isolation", "--no-index", "--force-reinstall", "-e", "."],
            ]
        if self.lang == "c":
            return [["cc", "-std=c99", "-O2", "-I", "lz4libs", "-c", str(f.relative_to(self.project)),
                     "-o", str(self.scratch / f"{f.stem}.o")] for f in prepare.c_sources(self.project)]
        if self.lang == "go":
            # with a build cache of its own, so cleaning it leaves the user's alone
            return [["go", "build", "./..."], ["go", "clean", "-cache"]]
        if self.lang == "typescript":
            return [["tsc", "-b"], ["tsc", "-b", "--clean"]]
        if self.lang == "typescript7":
            # the project's own TypeScript 7: its native compiler
            tsc = str(prepare.project_tsc(self.project))
            return [[tsc, "-b"], [tsc, "-b", "--clean"]]
        raise ValueError(self.lang)

    def _run(self, cmd):
        with self.lock:
            if self.stop_event.is_set():
                return None
            # The build's temporary files go in the scratch directory too: a
            # compiler stopped mid-build leaves its own behind (cc's .s).
            tmp = self.scratch / "tmp"
            tmp.mkdir(exist_ok=True)
            env = dict(os.environ, GOCACHE=str(self.scratch / "gocache"), GOPROXY="off", GOFLAGS="-mod=mod",
                       TMPDIR=str(tmp))
            self.proc = subprocess.Popen(cmd, cwd=self.project, env=env, stdout=subprocess.DEVNULL,
                                         stderr=subprocess.PIPE, text=True, start_new_session=True)
        _, stderr = self.proc.communicate()
        return self.proc.returncode, stderr

    def start(self):
        if self.lang == "python":
            # a virtual environment of its own, outside the project, with
            # what an offline editable install needs
            venv = self.scratch / "venv"
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            subprocess.run([str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check",
                            "--no-index", "--find-links", str(prepare.wheels_dir()), f"wheel=={prepare.WHEEL}"],
                           check=True)
        self.thread.start()
        return self

    def _loop(self):
        while not self.stop_event.is_set():
            for cmd in self._commands():
                r = self._run(cmd)
                # `cargo clean` removes the whole target directory, where the
                # language server's own `cargo check` is writing meanwhile: a
                # directory rustc removed between cargo's listing and its
                # removal fails the clean (ENOENT). Cleaning again is what a
                # person would do.
                for _ in range(3):
                    if r is None or r[0] == 0 or "clean" not in cmd or "No such file or directory" not in r[1]:
                        break
                    r = self._run(cmd)
                if r is None:
                    return
                code, stderr = r
                if code != 0 and not self.stop_event.is_set():
                    self.failures.append(f"{' '.join(cmd)}: exit {code}: {stderr[-2000:]}")
                    return
            self.builds += 1

    def stop(self):
        with self.lock:
            self.stop_event.set()
            if self.proc is not None and self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
        self.thread.join(timeout=60)
        if self.proc is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)  # anything the build left in its group


def judge(op, site, result):
    """Whether a successful answer is the oracle's; with what differs."""
    s = result.structuredContent
    if op == "definition":
        got = sorted({(i["path"], i["line"]) for i in s["items"] if not i["external"]})
        want = sorted(tuple(x) for x in site["definition"])
        return got == want, got, want
    if op == "references":
        want = sorted(tuple(x) for x in site["references"])
        # the oracle holds the project's files only: uses elsewhere (a
        # standard library calling an interface method) are shown with
        # absolute paths
        files = [f for f in s["files"] if not pathlib.PurePath(f["path"]).is_absolute()
                 and not f["path"].startswith("../")]
        if s["detail"] in ("full", "no_snippets") and not s["truncated"]:
            got = sorted((f["path"], r["line"], r["column"]) for f in files for r in f["refs"])
            return got == want, got, want
        # shortened: only the counts per file are left to compare
        got = sorted((f["path"], f["count"]) for f in files)
        counts = {}
        for path, _, _ in want:
            counts[path] = counts.get(path, 0) + 1
        return got == sorted(counts.items()), got, sorted(counts.items())
    markdown = s.get("markdown") or ""
    return bool(markdown.strip()) and site["symbol"] in markdown, markdown[:300], f"hover naming {site['symbol']}"


def args_of(op, site):
    args = {"op": op, "path": site["path"], "line": site["line"], "symbol": site["symbol"],
            "occurrence": site["occurrence"]}
    if op == "references":
        args["max_results"] = 10000
    return args


async def run(lang, scratch, build=False, sites=None, errlog=None):
    """One cold run over a fresh copy of `lang`'s project in `scratch` (a
    directory this run may fill). Returns the tally: right, wrong (each
    with the query, the answer and the oracle's), not_ready, errors,
    time to the first right answer, wall time, builds completed."""
    scratch = pathlib.Path(scratch)
    oracle = prepare.load_oracle(lang)
    sites = oracle["sites"][: sites or len(oracle["sites"])]
    project = scratch / "ws" / prepare.PROJECTS[lang]["dir"]
    shutil.copytree(prepare.project_dir(lang), project, symlinks=True)
    prepare.localize(lang, project)
    env = make_env(scratch / "ws")
    tally = {"language": lang, "build": build, "right": 0, "wrong": [], "not_ready": 0, "errors": [],
             "first_right_s": None, "seconds": None, "builds": 0, "build_failures": [], "processes": []}
    loop = BuildLoop(lang, project, scratch).start() if build else None
    started = time.monotonic()
    try:
        async with connect(env, cwd=str(project), errlog=errlog) as session:
            limiter = anyio.Semaphore(IN_FLIGHT)

            async def ask(site, op):
                args = args_of(op, site)
                deadline = time.monotonic() + READY_DEADLINE_S
                while True:
                    async with limiter:
                        r = await session.call_tool("lsp", args)
                    if r.isError:
                        e = err(r)
                        if e["code"] == "LSP_NOT_READY":
                            tally["not_ready"] += 1
                            if time.monotonic() < deadline:
                                continue
                        tally["errors"].append({"query": args, "error": e})
                        return
                    right, got, want = judge(op, site, r)
                    if right:
                        tally["right"] += 1
                        if tally["first_right_s"] is None:
                            tally["first_right_s"] = time.monotonic() - started
                    else:
                        tally["wrong"].append({"query": args, "dsh": got, "oracle": want})
                    return

            async with anyio.create_task_group() as tg:
                # interleaved: the first calls of every op arrive cold
                for site in sites:
                    for op in OPS:
                        tg.start_soon(ask, site, op)
            # which language server answered: the daemon's processes now
            tally["processes"] = processes_under(daemons_of(env))
    finally:
        tally["seconds"] = time.monotonic() - started
        if loop is not None:
            loop.stop()
            tally["builds"], tally["build_failures"] = loop.builds, loop.failures
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
    return tally


def processes_in(directory):
    """Pids of this user's processes working in `directory` (their
    current directory inside it), from /proc."""
    directory = os.path.realpath(directory)
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != os.getuid():
                continue
            cwd = os.readlink(f"/proc/{entry}/cwd")
        except OSError:
            continue
        if cwd == directory or cwd.startswith(directory + os.sep):
            out.append(int(entry))
    return out


@contextlib.contextmanager
def scratch_dir(prefix):
    """A temp dir for one run, removed afterwards with nothing left
    running in it: the daemons whose data is in it are stopped and any
    process still working in it (a language server's build, a build the
    loop started) is killed before the removal, which is retried while
    such a process still writes. SIGTERM and SIGHUP (a timeout, a closed
    terminal) end the run as an exception does, so the run's own cleanup
    and this one happen then too; Python's default for them leaves
    everything behind."""

    def ended(signum, _frame):
        raise SystemExit(128 + signum)

    handlers = {}
    if threading.current_thread() is threading.main_thread():
        handlers = {sig: signal.signal(sig, ended) for sig in (signal.SIGTERM, signal.SIGHUP)}
    scratch = tempfile.mkdtemp(prefix=prefix)
    try:
        yield scratch
    finally:
        try:
            # the daemons of `make_env(scratch / "ws")`, as both runs make it
            marker = f"XDG_DATA_HOME={scratch}/ws-xdg/data".encode()
            stop_daemons({}, marker=marker)
            for attempt in range(20):
                for pid in processes_in(scratch):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                try:
                    shutil.rmtree(scratch)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if attempt == 19:
                        raise
                    time.sleep(0.1)  # sleep-ok: a killed process's last writes land before the next removal
        finally:
            for sig, handler in handlers.items():
                signal.signal(sig, handler)


def run_sync(lang, build=False, sites=None):
    """`run` in a temp dir of its own, removed afterwards with nothing
    left running in it (for scripts; see `scratch_dir`)."""
    with scratch_dir("dsh-lsp-real-") as scratch:
        with tempfile.TemporaryFile("w+") as errlog:
            return anyio.run(lambda: run(lang, scratch, build=build, sites=sites, errlog=errlog))


def summary(t) -> str:
    first = "-" if t["first_right_s"] is None else f"{t['first_right_s']:.1f}"
    return (f"{t['language']:<8} {'under build' if t['build'] else 'quiet':<12} right {t['right']:>3}  "
            f"wrong {len(t['wrong']):>3}  not-ready {t['not_ready']:>3}  errors {len(t['errors']):>3}  "
            f"first right {first} s  total {t['seconds']:.1f} s  builds {t['builds']}"
            + (f"  BUILD FAILED: {t['build_failures']}" if t["build_failures"] else ""))
