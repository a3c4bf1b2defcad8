"""The real-project run of the `lsp` tool's `diagnostics`, shared by the
end-to-end suite (`tests/e2e/test_lsp_real.py`) and its benchmark
(`tests/bench/bench_lsp_real.py --diagnostics`).

Per language, in a fresh copy of the prepared project with a new dsh
started in it (optionally while a real build of the project runs, as in
`conformance.py`): in each of the first `FILES` files of the oracle's use
sites, known errors are planted — the identifier of the file's first use
site renamed to a name defined nowhere (an undefined name at that site),
and a function appended whose body is a type error and a call with one
argument too many — and `diagnostics` is asked at once. Each planted error
must be listed as an error on its line, and every error or warning listed
must be on a line where the language's own command-line checker (`cargo
check`, `pyright`, `tsc --noEmit`, `clang -fsyntax-only`, `go vet`),
run on the same content, reports one too. Then the file is put back and
the very next answer must list no error the untouched file did not have.
`LSP_NOT_READY` is retried and counted; it is the only answer that is not
judged."""

import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

import anyio

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "e2e"))
import conformance  # noqa: E402
import prepare  # noqa: E402
from conftest import connect, err, make_env, stop_daemons  # noqa: E402

# Files per language planted with errors.
FILES = 3
# How long one call may keep answering LSP_NOT_READY.
READY_DEADLINE_S = 300
PLANTED_NAME = "planted_undefined_xq"

# What is appended to a file: a function whose body is a type error, a
# function of one parameter, and a call of it with two arguments. The
# markers (`TYPE_ERROR`, `ARG_COUNT`) name the lines of the two errors.
APPENDED = {
    "rust": ("\n#[allow(dead_code)]\nfn planted_type_error() -> u32 {\n    \"text\" // TYPE_ERROR\n}\n"
             "#[allow(dead_code)]\nfn planted_args(a: u32) -> u32 {\n    a\n}\n"
             "#[allow(dead_code)]\nfn planted_call() -> u32 {\n    planted_args(1, 2) // ARG_COUNT\n}\n"),
    "python": ("\n\ndef _planted_type_error() -> int:\n    return \"text\"  # TYPE_ERROR\n\n\n"
               "def _planted_args(a: int) -> int:\n    return a\n\n\n"
               "_planted_args(1, 2)  # ARG_COUNT\n"),
    "typescript": ("\nexport function plantedTypeError(): number {\n  return 'text' // TYPE_ERROR\n}\n"
                   "export function plantedArgs(a: number): number {\n  return a\n}\n"
                   "export const plantedCall = plantedArgs(1, 2) // ARG_COUNT\n"),
    "c": ("\nstruct planted_s { int a; };\n"
          "int planted_type_error(void) { struct planted_s s = { 1 }; return s; } /* TYPE_ERROR */\n"
          "int planted_args(int a) { return a; }\n"
          "int planted_call(void) { return planted_args(1, 2); } /* ARG_COUNT */\n"),
    "go": ("\nfunc plantedTypeError() int {\n\treturn \"text\" // TYPE_ERROR\n}\n\n"
           "func plantedArgs(a int) int {\n\treturn a\n}\n\n"
           "var _ = plantedArgs(1, 2) // ARG_COUNT\n"),
}
APPENDED["typescript7"] = APPENDED["typescript"]


# A use site on such a line is not renamed: a name an import or a
# re-export lists is not a use the checkers all call undefined.
IMPORT_LINE = re.compile(r"^\s*(import |from |use |pub use |pub\(crate\) use |#|export \{|export \*|package )")


class BuildLoop(conformance.BuildLoop):
    """The concurrent build of `conformance.py`, which here goes on after
    a failed build: while errors are planted the project does not build,
    and that is the edit under test, not a broken build. A failure is
    still reported when no build at all succeeded."""

    def __init__(self, *args):
        super().__init__(*args)
        self.failed_builds = 0
        self.last_failure = None

    def _loop(self):
        while not self.stop_event.is_set():
            ok = True
            for cmd in self._commands():
                r = self._run(cmd)
                if r is None:
                    return
                if r[0] != 0 and not self.stop_event.is_set():
                    ok = False
                    self.last_failure = f"{' '.join(cmd)}: exit {r[0]}: {r[1][-2000:]}"
            if ok:
                self.builds += 1
            else:
                self.failed_builds += 1

    def stop(self):
        super().stop()
        if not self.builds and self.failed_builds:
            self.failures.append(self.last_failure)


def sampled(lang):
    """The first use site of each of the first FILES files of the oracle's
    sites (in the oracle's order) that is not on an import line."""
    out = {}
    for site in prepare.load_oracle(lang)["sites"]:
        if site["path"] in out or len(out) >= FILES:
            continue
        text = (prepare.project_dir(lang) / site["path"]).read_text()
        if not IMPORT_LINE.match(text.split("\n")[site["line"] - 1]):
            out[site["path"]] = site
    return list(out.values())


def plant(lang, text, site):
    """`text` with the errors planted, and the 1-based lines they must be
    reported on: {what: line}."""
    lines = text.split("\n")
    i = site["line"] - 1
    line = lines[i]
    # the site's column counts characters from 1
    col = site["column"] - 1
    assert line[col:col + len(site["symbol"])] == site["symbol"], (site, line)
    lines[i] = line[:col] + PLANTED_NAME + line[col + len(site["symbol"]):]
    planted = "\n".join(lines)
    if not planted.endswith("\n"):
        planted += "\n"
    planted += APPENDED[lang]
    where = {"undefined name": site["line"]}
    for n, l in enumerate(planted.split("\n"), start=1):
        if "TYPE_ERROR" in l:
            where["type error"] = n
        if "ARG_COUNT" in l:
            where["argument count"] = n
    return planted, where


def _clang():
    return shutil.which("clang") or shutil.which("clang-14")


def oracle(lang, project, scratch, path):
    """The command-line checker's (error lines, warning lines) in `path`
    (relative to the project), and how long it took."""
    project = pathlib.Path(project)
    env = dict(os.environ, GOCACHE=str(pathlib.Path(scratch) / "oracle-gocache"), GOPROXY="off",
               GOFLAGS="-mod=mod", CARGO_TARGET_DIR=str(pathlib.Path(scratch) / "oracle-target"))
    found = []  # (path, line, severity)
    if lang == "rust":
        # every target, each to its end, as rust-analyzer's check runs it
        cmd = ["cargo", "check", "--offline", "--all-targets", "--keep-going", "--message-format=json"]
    elif lang == "python":
        cmd = [shutil.which("pyright") or "pyright", "--outputjson", path]
    elif lang in ("typescript", "typescript7"):
        tsc = str(prepare.project_tsc(project)) if lang == "typescript7" else (shutil.which("tsc") or "tsc")
        cmd = [tsc, "--noEmit", "-p", ".", "--pretty", "false"]
    elif lang == "c":
        cmd = [_clang(), "-fsyntax-only", "-std=c99", "-I", prepare.PROJECTS["c"]["sample_under"], path]
    else:
        # the compiler's errors in the package and its tests (`go vet`
        # stops at the first), then vet's findings
        cmd = ["sh", "-c", "go test -count=1 -run '^$' ./... ; go vet ./..."]
    started = time.monotonic()
    r = subprocess.run(cmd, cwd=project, env=env, capture_output=True, text=True, timeout=900)
    seconds = time.monotonic() - started
    out = r.stdout + "\n" + r.stderr
    if lang == "rust":
        for line in r.stdout.splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue
            msg = m.get("message") or {}
            if m.get("reason") != "compiler-message" or msg.get("level") not in ("error", "warning"):
                continue
            for span in msg.get("spans", []):
                if span.get("is_primary"):
                    found.append((span["file_name"], span["line_start"], msg["level"]))
    elif lang == "python":
        for d in json.loads(r.stdout or "{}").get("generalDiagnostics", []):
            rel = os.path.relpath(d["file"], project)
            found.append((rel, d["range"]["start"]["line"] + 1, d["severity"]))
    elif lang in ("typescript", "typescript7"):
        for m in re.finditer(r"^(.+?)\((\d+),\d+\): (error|warning) ", out, re.M):
            found.append((m[1], int(m[2]), m[3]))
    else:
        for m in re.finditer(r"^(?:vet: )?(?:\./)?([^\s:]+\.(?:c|h|go)):(\d+):\d+: (?:(error|warning): )?", out, re.M):
            found.append((m[1], int(m[2]), m[3] or "error"))
    errors = {ln for p, ln, s in found if os.path.normpath(p) == os.path.normpath(path) and s == "error"}
    warnings = {ln for p, ln, s in found if os.path.normpath(p) == os.path.normpath(path) and s == "warning"}
    return errors, warnings, seconds


async def ask(session, path, tally):
    """`diagnostics` of `path`, retried while LSP_NOT_READY; the answer's
    structured content, or the error."""
    deadline = time.monotonic() + READY_DEADLINE_S
    while True:
        r = await session.call_tool("lsp", {"op": "diagnostics", "path": path, "max_results": 1000})
        if r.isError:
            e = err(r)
            if e["code"] == "LSP_NOT_READY" and time.monotonic() < deadline:
                tally["not_ready"] += 1
                continue
            return None, e
        answer = dict(r.structuredContent)
        answer["text"] = r.content[0].text.split("\n")[0] if r.content else ""
        return answer, None


def lines_of(answer, severity):
    return {d["line"] for d in answer["diagnostics"] if d["severity"] == severity}


async def run(lang, scratch, build=False, errlog=None):
    """One run over a fresh copy of `lang`'s project in `scratch`. Returns
    the tally: planted, found, missed (each with the answer), extra (listed
    where the checker reports nothing), stale (an error left after the
    revert), errors, not_ready, and per file the seconds from writing the
    planted file to the answer beside the checker's seconds."""
    scratch = pathlib.Path(scratch)
    project = scratch / "ws" / prepare.PROJECTS[lang]["dir"]
    shutil.copytree(prepare.project_dir(lang), project, symlinks=True)
    prepare.localize(lang, project)
    env = make_env(scratch / "ws")
    tally = {"language": lang, "build": build, "planted": 0, "found": 0, "missed": [], "extra": [],
             "stale": [], "errors": [], "not_ready": 0, "timings": [], "builds": 0, "build_failures": []}
    loop = BuildLoop(lang, project, scratch).start() if build else None
    try:
        async with connect(env, cwd=str(project), errlog=errlog) as session:
            for site in sampled(lang):
                path = site["path"]
                file = project / path
                original = file.read_text()
                before, e = await ask(session, path, tally)
                if e is not None:
                    tally["errors"].append({"path": path, "when": "untouched", "error": e})
                    continue
                planted, where = plant(lang, original, site)
                file.write_text(planted)
                started = time.monotonic()
                got, e = await ask(session, path, tally)
                answered = time.monotonic() - started
                o_errors, o_warnings, o_seconds = oracle(lang, project, scratch, path)
                tally["planted"] += len(where)
                if e is not None:
                    tally["errors"].append({"path": path, "when": "planted", "error": e})
                else:
                    tally["timings"].append((path, answered, o_seconds))
                    for what, line in where.items():
                        if line in lines_of(got, "error") and line in o_errors:
                            tally["found"] += 1
                        else:
                            tally["missed"].append({"path": path, "what": what, "line": line,
                                                    "checker_errors": sorted(o_errors), "answer": got})
                    extra = (lines_of(got, "error") - o_errors) | (lines_of(got, "warning") - o_errors - o_warnings)
                    if extra:
                        tally["extra"].append({"path": path, "lines": sorted(extra), "answer": got,
                                               "checker": [sorted(o_errors), sorted(o_warnings)]})
                file.write_text(original)
                after, e = await ask(session, path, tally)
                if e is not None:
                    tally["errors"].append({"path": path, "when": "reverted", "error": e})
                elif lines_of(after, "error") - lines_of(before, "error"):
                    tally["stale"].append({"path": path, "answer": after})
    finally:
        if loop is not None:
            loop.stop()
            tally["builds"], tally["build_failures"] = loop.builds, loop.failures
        stop_daemons(env)
        shutil.rmtree(env["DSH_RUNTIME_DIR"], ignore_errors=True)
    return tally


def run_sync(lang, build=False):
    """`run` in a temp dir of its own, removed afterwards with nothing
    left running in it (for scripts; see `conformance.scratch_dir`)."""
    with conformance.scratch_dir("dsh-lsp-diag-") as scratch:
        with tempfile.TemporaryFile("w+") as errlog:
            return anyio.run(lambda: run(lang, scratch, build=build, errlog=errlog))


def summary(t) -> str:
    return (f"{t['language']:<11} {'under build' if t['build'] else 'quiet':<12} planted {t['planted']:>2}  "
            f"found {t['found']:>2}  missed {len(t['missed'])}  extra {len(t['extra'])}  stale {len(t['stale'])}  "
            f"errors {len(t['errors'])}  not-ready {t['not_ready']}  builds {t['builds']}")
