"""Benchmark: the `lsp` tool asked cold on real open-source projects,
judged against each language's oracle (see `tests/lsp_real/prepare.py`).

Per language and condition (a quiet machine; a real build of the same
project running the whole time, repeated from clean): a new dsh (a new
daemon) in a fresh copy of the project, `definition`, `references` and
`hover` at every sampled use site, several in flight. Prints right, wrong,
`LSP_NOT_READY` answers, other errors, the time from starting dsh to the
first right answer, and the run's wall time.

    python tests/bench/bench_lsp_real.py [--quick] [LANGUAGE ...]

`--quick` asks 5 sites per language, on a quiet machine only (a smoke
run; its figures are not to be quoted; the end-to-end suite runs both
conditions).

`--diagnostics` measures `diagnostics` instead (`tests/lsp_real/diagnostics.py`):
per language and condition, errors planted in 3 files, and per file the
time from writing the planted file to a correct answer (every planted
error listed) beside the time the language's command-line checker takes
on the same content; medians over the files, and the run's tally.

    python tests/bench/bench_lsp_real.py --diagnostics [LANGUAGE ...]
    cargo xtask bench lsp-diagnostics Wrong answers are listed, not fatal (the end-to-end suite is
the gate); it exits non-zero when a build failed or a run got no right
answer at all."""

import os
import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lsp_real"))
import conformance  # noqa: E402
import diagnostics  # noqa: E402
import prepare  # noqa: E402

CHECKERS = {"rust": "cargo check", "python": "pyright", "typescript": "tsc --noEmit",
            "typescript7": "tsc --noEmit (7)", "c": "clang -fsyntax-only", "go": "go test -run ^$ + go vet"}


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2] if xs else None


def main_diagnostics(langs):
    rows, failed = [], False
    for lang in langs:
        for build in (False, True):
            t = diagnostics.run_sync(lang, build=build)
            print(diagnostics.summary(t), file=sys.stderr)
            rows.append(t)
            if t["missed"] or t["extra"] or t["stale"] or t["errors"] or t["build_failures"]:
                failed = True
                for k in ("missed", "extra", "stale", "errors", "build_failures"):
                    for x in t[k]:
                        print(f"  {k}: {str(x)[:2000]}", file=sys.stderr)
    print("\n| language | condition | planted | found | stale | extra | not ready "
          "| write → correct answer (median, max) | checker | checker time (median, max) | builds done |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|")
    for t in rows:
        dsh = [a for _, a, _ in t["timings"]]
        chk = [c for _, _, c in t["timings"]]
        fmt = (lambda xs: f"{median(xs):.2f} s, {max(xs):.2f} s" if xs else "-")
        print(f"| {t['language']} | {'under build' if t['build'] else 'quiet'} | {t['planted']} | {t['found']} "
              f"| {len(t['stale'])} | {len(t['extra'])} | {t['not_ready']} | {fmt(dsh)} | {CHECKERS[t['language']]} "
              f"| {fmt(chk)} | {t['builds'] if t['build'] else '-'} |")
    return 1 if failed else 0


def main(argv):
    quick = "--quick" in argv
    langs = prepare.languages([a for a in argv if a not in ("--quick", "--diagnostics")])
    for lang in langs:
        prepare.prepare(lang)
    if "--diagnostics" in argv or os.environ.get("DSH_BENCH_LSP_DIAGNOSTICS"):
        return main_diagnostics(langs)
    sites = 5 if quick else None
    rows, bad, failed = [], [], False
    for lang in langs:
        for build in (False,) if quick else (False, True):
            t = conformance.run_sync(lang, build=build, sites=sites)
            print(conformance.summary(t), file=sys.stderr)
            rows.append(t)
            if t["wrong"] or t["errors"] or t["build_failures"]:
                bad.append(t)
            if t["build_failures"] or not t["right"]:
                failed = True
    print("\n| language | project | condition | right | wrong | not ready | other errors "
          "| first right answer | run | builds done |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for t in rows:
        spec = prepare.PROJECTS[t["language"]]
        first = "-" if t["first_right_s"] is None else f"{t['first_right_s']:.1f} s"
        project = f"{spec['name']} {spec['version']}" + (
            f" (TypeScript {spec['typescript']})" if "typescript" in spec else "")
        print(f"| {t['language']} | {project} | "
              f"{'under build' if t['build'] else 'quiet'} | {t['right']} | {len(t['wrong'])} | "
              f"{t['not_ready']} | {len(t['errors'])} | {first} | {t['seconds']:.1f} s | "
              f"{t['builds'] if t['build'] else '-'} |")
    for t in bad:
        print(f"\n{t['language']} ({'under build' if t['build'] else 'quiet'}):", file=sys.stderr)
        for w in t["wrong"]:
            print(f"  wrong: {w}", file=sys.stderr)
        for e in t["errors"]:
            print(f"  error: {e}", file=sys.stderr)
        for f in t["build_failures"]:
            print(f"  build failed: {f}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
