//! Project automation, run as `cargo xtask <task>`:
//!
//! * `codegen [--check]` writes `docs/tool-catalog.md` and
//!   `docs/config.md` (the config file's keys, from their declarations in
//!   the MCP host) from the code, or fails when a committed file is stale;
//! * `test` checks the house style first (`cargo fmt --check`, clippy with
//!   warnings as errors), installs what the tests need (the rust-analyzer
//!   component, a Python virtual environment with the MCP SDK, pytest and
//!   python-lsp-server, and the language servers of the built-in
//!   languages: pyright, typescript-language-server, TypeScript 5 and 7
//!   and the TypeScript MCP SDK from npm into `tests/node`, clangd and
//!   Go's gopls from Debian; the real agent clients Claude Code, Codex
//!   and Gemini CLI from npm into `tests/clients`;
//!   the browser of the `dsh ui` test: Debian's chromium, driven by
//!   playwright-core from `tests/node`, which never downloads a browser;
//!   and the programs of the conformance corpus, from Debian and IPython
//!   from pip; the OpenSSH server of the remote suite, from Debian),
//!   prepares the real-project LSP corpus
//!   (`tests/lsp_real/prepare.py`: pinned projects from the registries and
//!   their oracles, once, in `target/lsp-corpus`), builds the static `dsh`
//!   the remote suite installs on its targets (`--profile static-test`:
//!   unoptimised, in a third of the release build's time) and runs every
//!   test: the Rust workspace, the end-to-end MCP suite, then every
//!   benchmark in its `--quick` mode so none can rot;
//! * `clients [PACKAGE@VERSION ...]` moves the pins of the real agent
//!   clients the conformance suite drives (`tests/clients`: Claude Code,
//!   Codex, Gemini CLI) to their newest releases or the versions named;
//! * `static` builds the self-contained `dsh` that `dsh mcp --remote`
//!   installs on a target (musl, `--profile static`: release, stripped);
//! * `bench <name> [--quick]` runs a benchmark (release build) and prints
//!   its table — a binary of the `crates/bench` crate, or a Python script
//!   of `tests/bench` against the `dsh` binary; `--quick` runs a short
//!   smoke version on the debug build, whose figures are not to be quoted.
//!
//! Its tidy tests run with plain `cargo test -p xtask`: the generated
//! catalog and config reference are current; every crate root opens with
//! a `//!` doc; the crate graph keeps the layers (`deps`: the one table of
//! which crate may name which, checked against `cargo metadata` — providers
//! named only by the daemon, the MCP host and the bench crate, seams on
//! `thiserror` alone, the daemon's wire naming none of its other crates
//! and the client and the MCP host never each other, MCP only in the MCP
//! host, sled only in its provider, `process-tree`'s runtime optional, no
//! dependency on `bench`, `test-support` only for tests); the binary
//! reaches the daemon only through its typed client (`layers`) and stays
//! thin; no function is over 150 lines without a `Long on purpose:`
//! reason (`lengths`); no test sleeps to synchronise (`tidy`); and
//! ARCHITECTURE.md names only paths that exist (`docpaths`).
//!
//! Of the product it names the tool catalog and the MCP host, whose config
//! keys' declarations `docs/config.md` is made from. It is not part of the
//! product and nothing depends on it.

#![forbid(unsafe_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context as _, bail};

#[cfg(test)]
mod deps;
#[cfg(test)]
mod docpaths;
#[cfg(test)]
mod layers;
#[cfg(test)]
mod lengths;
#[cfg(test)]
mod tidy;

const USAGE: &str = "\
usage: cargo xtask <task>

tasks:
  codegen [--check]   write docs/tool-catalog.md and docs/config.md from the code
                      (--check: fail if stale)
  static              build the self-contained dsh that `dsh mcp --remote` installs on targets
                      (musl, statically linked, stripped) and print where it is and its size
  test                check fmt and clippy, install what the tests need, run every test,
                      then `bench all --quick`
  clients [PACKAGE@VERSION ...]
                      move the pinned agent clients of the real-client suite (Claude Code,
                      Codex, Gemini CLI) to their newest releases, or to the versions named
  bench <name> [--quick]
                      run a benchmark: mcp, floor, spawn, terminal, memory, jobs, lsp, lsp-real,
                      lsp-diagnostics, workspace,
                      sandbox, daemon, ui, corpus, redact, remote, resume, all (--quick: a short smoke run on the debug build)";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let result = match args.as_slice() {
        ["codegen"] => codegen(false),
        ["codegen", "--check"] => codegen(true),
        ["static"] => build_static(StaticProfile::Release).map(drop),
        ["clients", pins @ ..] => update_agent_clients(pins),
        ["test"] => {
            let result = test();
            print_step_times();
            result
        }
        ["bench", name] => bench(name, Speed::Full),
        ["bench", name, "--quick"] => bench(name, Speed::Quick),
        _ => {
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xtask: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The workspace root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

const CATALOG: &str = "docs/tool-catalog.md";

/// The config file's reference, from the keys' declarations.
const CONFIG_REFERENCE: &str = "docs/config.md";

/// Writes (or checks) a generated file; returns whether it was current.
fn ensure_file_contents(path: &Path, contents: &str, check: bool) -> anyhow::Result<bool> {
    let current = std::fs::read_to_string(path).unwrap_or_default();
    if current == contents {
        return Ok(true);
    }
    if check {
        return Ok(false);
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(path, contents).with_context(|| format!("writing {}", path.display()))?;
    eprintln!("updated {}", path.display());
    Ok(false)
}

fn codegen(check: bool) -> anyhow::Result<()> {
    let generated = [
        (CATALOG, tools_catalog::catalog_markdown()),
        (CONFIG_REFERENCE, mcp_host::config::reference_markdown()),
    ];
    let mut stale = Vec::new();
    for (file, contents) in generated {
        if !ensure_file_contents(&root().join(file), &contents, check)? {
            stale.push(file);
        }
    }
    if check && !stale.is_empty() {
        bail!(
            "{} stale: run `cargo xtask codegen` and commit the result",
            match stale.as_slice() {
                [one] => format!("{one} is"),
                many => format!("{} are", many.join(" and ")),
            }
        );
    }
    Ok(())
}

fn step(name: &str, command: &mut Command) -> anyhow::Result<()> {
    eprintln!("\n==> {name}");
    // a step runs from the repository's root unless it names its own
    // directory (npm's install runs in tests/node, where its lock file is)
    if command.get_current_dir().is_none() {
        command.current_dir(root());
    }
    let started = std::time::Instant::now();
    let status = command.status();
    let took = started.elapsed();
    let outcome = match &status {
        Ok(s) if s.success() => "ok",
        _ => "FAILED",
    };
    if let Ok(mut times) = STEP_TIMES.lock() {
        times.push((name.to_owned(), took, outcome));
    }
    eprintln!("<== {name}: {outcome} in {:.0} s", took.as_secs_f64());
    let status = status.with_context(|| format!("could not run: {name}"))?;
    if !status.success() {
        bail!("failed: {name} ({status})");
    }
    Ok(())
}

/// Each step run so far: its name, how long it took, and how it ended.
static STEP_TIMES: std::sync::Mutex<Vec<(String, std::time::Duration, &'static str)>> =
    std::sync::Mutex::new(Vec::new());

/// Prints the time of every step run so far, and their total: the
/// figures that show where the suite's minutes go.
fn print_step_times() {
    let Ok(times) = STEP_TIMES.lock() else {
        return;
    };
    if times.is_empty() {
        return;
    }
    let total: f64 = times.iter().map(|(_, took, _)| took.as_secs_f64()).sum();
    eprintln!("\nstep times ({total:.0} s in all):");
    for (name, took, outcome) in times.iter() {
        eprintln!("{:>7.0} s  {outcome:<6}  {name}", took.as_secs_f64());
    }
}

fn venv_bin() -> PathBuf {
    root().join(".venv").join("bin")
}

/// Where npm installs the test's language servers and the TypeScript MCP
/// SDK (pinned by `tests/node/package-lock.json`).
fn node_dir() -> PathBuf {
    root().join("tests").join("node")
}

fn path_with_venv() -> String {
    let mut paths = vec![venv_bin(), node_dir().join("node_modules").join(".bin")];
    if let Some(old) = std::env::var_os("PATH") {
        paths.extend(std::env::split_paths(&old));
    }
    std::env::join_paths(paths)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Installs the test prerequisites that a fresh machine lacks.
fn install_prerequisites() -> anyhow::Result<()> {
    step(
        "install the rust-analyzer component",
        Command::new("rustup").args(["component", "add", "rust-analyzer"]),
    )?;
    if !venv_bin().join("python").exists() {
        step(
            "create the Python virtual environment .venv",
            Command::new("python3").args(["-m", "venv", ".venv"]),
        )?;
    }
    step(
        "install the Python test requirements (MCP SDK, pytest, pytest-timeout, python-lsp-server, IPython)",
        Command::new(venv_bin().join("pip")).args([
            "install",
            "--quiet",
            "--disable-pip-version-check",
            "-r",
            "tests/requirements.txt",
        ]),
    )
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|d| d.join(program).is_file()))
}

/// The programs the conformance corpus (`tests/e2e/test_corpus.py`)
/// drives, each with the Debian package that provides it; the ones a
/// machine lacks are installed. (IPython comes from tests/requirements.txt.)
const CORPUS_PROGRAMS: &[(&str, &str)] = &[
    ("cc", "gcc"),
    ("gdb", "gdb"),
    ("bc", "bc"),
    ("dc", "dc"),
    ("sqlite3", "sqlite3"),
    ("ed", "ed"),
    ("lua5.4", "lua5.4"),
    ("tclsh", "tcl"),
    ("irb", "ruby"),
    ("expect", "expect"),
    ("zsh", "zsh"),
    ("node", "nodejs"),
    ("units", "units"),
    ("vim", "vim"),
    ("nano", "nano"),
    ("less", "less"),
    ("man", "man-db"),
    ("top", "procps"),
    ("htop", "htop"),
    ("whiptail", "whiptail"),
    ("git", "git"),
    ("ssh-keygen", "openssh-client"),
    ("openssl", "openssl"),
    ("gpg", "gpg"),
    ("gpgconf", "gpgconf"),
    ("screen", "screen"),
    ("tmux", "tmux"),
    ("erl", "erlang-nox"),
    ("jshell", "openjdk-17-jdk-headless"),
    ("pinentry-curses", "pinentry-curses"),
    ("fzf", "fzf"),
    ("psql", "postgresql-client"),
    ("pg_ctlcluster", "postgresql"),
    ("setpriv", "util-linux"),
    ("make", "make"),
];

/// The OpenSSH server the remote suite starts on loopback (Debian's
/// package).
const SSHD: &str = "/usr/sbin/sshd";

/// The browser the `dsh ui` end-to-end test drives (Debian's package).
const CHROMIUM: &str = "/usr/bin/chromium";

/// The Go module the real-project LSP suite reads (Debian ships Go sources;
/// the Go module proxy is not used), pinned as `tests/lsp_real/prepare.py`
/// expects it.
const GO_CORPUS_PACKAGE: &str = "golang-github-google-uuid-dev=1.3.0-1";
const GO_CORPUS_SOURCE: &str = "/usr/share/gocode/src/github.com/google/uuid";

/// Installs the language servers of the built-in languages for the tests:
/// npm packages into `tests/node` and the agent clients into
/// `tests/clients` (each from its committed lock file), clangd
/// and Go's pair from Debian when missing (CI runs as root), the programs
/// of the conformance corpus from Debian when missing, and Debian's
/// chromium for the `dsh ui` browser test. Returns why Go
/// cannot be had here, if it cannot; Python, TypeScript and C/C++ must be.
fn install_language_servers() -> anyhow::Result<Option<String>> {
    npm_ci_when_stale(
        &node_dir(),
        "install pyright, typescript-language-server, TypeScript 5 and 7, the TypeScript MCP SDK and playwright-core (npm ci in tests/node)",
        &[("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")],
    )?;
    install_agent_clients()?;
    let apt_install = |packages: &[&str]| -> anyhow::Result<()> {
        step(
            &format!("install {} (Debian packages)", packages.join(" ")),
            Command::new("apt-get")
                .args(["install", "-y", "-qq", "--no-install-recommends"])
                .args(packages)
                .env("DEBIAN_FRONTEND", "noninteractive"),
        )
    };
    let mut apt_updated = false;
    let mut apt_update = || -> anyhow::Result<()> {
        if !apt_updated {
            step(
                "update the Debian package lists",
                Command::new("apt-get").args(["update", "-qq"]),
            )?;
            apt_updated = true;
        }
        Ok(())
    };
    if !on_path("clangd") {
        apt_update()?;
        apt_install(&["clangd"])?;
    }
    // The C oracle of the real-project diagnostics suite (`clang -fsyntax-only`).
    if !on_path("clang") && !on_path("clang-14") {
        apt_update()?;
        apt_install(&["clang"])?;
    }
    // Programs that make ptys, for the sandbox's terminal tests.
    let missing: Vec<&str> = ["tmux", "expect", "script"]
        .into_iter()
        .filter(|p| !on_path(p))
        .map(|p| if p == "script" { "bsdutils" } else { p })
        .collect();
    if !missing.is_empty() {
        apt_update()?;
        apt_install(&missing)?;
    }
    // The programs of the conformance corpus (tests/e2e/corpus.py).
    let missing: Vec<&str> = CORPUS_PROGRAMS
        .iter()
        .filter(|(program, _)| !on_path(program))
        .map(|(_, package)| *package)
        .collect();
    if !missing.is_empty() {
        apt_update()?;
        apt_install(&missing)?;
    }
    // The remote suite (tests/e2e/test_remote.py) reaches a real OpenSSH
    // server it starts on loopback.
    if !Path::new(SSHD).is_file() {
        apt_update()?;
        apt_install(&["openssh-server"])?;
    }
    // The `dsh ui` browser test drives Debian's Chromium, never one a
    // tool downloads.
    if !Path::new(CHROMIUM).is_file() {
        apt_update()?;
        apt_install(&["chromium", "fonts-dejavu-core"])?;
    }
    if !(on_path("go") && on_path("gopls")) {
        let attempt = apt_update().and_then(|()| apt_install(&["golang-go", "gopls"]));
        if let Err(e) = attempt {
            return Ok(Some(format!(
                "apt-get could not install golang-go and gopls: {e:#}"
            )));
        }
    }
    // The Go module of the real-project LSP suite (tests/lsp_real), pinned.
    if !Path::new(GO_CORPUS_SOURCE).is_dir() {
        let attempt = apt_update().and_then(|()| apt_install(&[GO_CORPUS_PACKAGE]));
        if let Err(e) = attempt {
            return Ok(Some(format!(
                "apt-get could not install {GO_CORPUS_PACKAGE}: {e:#}"
            )));
        }
    }
    // A working pair: gopls starts and go reports its version.
    let works = |program: &str, arg: &str| {
        Command::new(program)
            .arg(arg)
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if !works("go", "version") {
        return Ok(Some("`go version` fails after installing golang-go".into()));
    }
    if !works("gopls", "version") {
        return Ok(Some("`gopls version` fails after installing gopls".into()));
    }
    Ok(None)
}

/// Where npm installs the real agent clients of the conformance suite
/// (`tests/e2e/test_real_clients.py`), pinned by its lock file.
fn clients_dir() -> PathBuf {
    root().join("tests").join("clients")
}

/// Installs Claude Code, Codex and Gemini CLI from npm into
/// `tests/clients` (from the committed lock file), when missing or older
/// than the lock file. `cargo xtask clients` moves the pins.
fn install_agent_clients() -> anyhow::Result<()> {
    npm_ci_when_stale(
        &clients_dir(),
        "install the real agent clients: Claude Code, Codex, Gemini CLI (npm ci in tests/clients)",
        &[],
    )
}

/// `npm ci` in `dir` (from its committed lock file) when its packages are
/// missing or older than the lock file.
fn npm_ci_when_stale(dir: &Path, what: &str, env: &[(&str, &str)]) -> anyhow::Result<()> {
    let installed = dir.join("node_modules").join(".package-lock.json");
    let lock = dir.join("package-lock.json");
    let stale = match (std::fs::metadata(&installed), std::fs::metadata(&lock)) {
        (Ok(i), Ok(l)) => match (i.modified(), l.modified()) {
            (Ok(i), Ok(l)) => i < l,
            _ => true,
        },
        _ => true,
    };
    if !stale {
        return Ok(());
    }
    step(
        what,
        Command::new("npm")
            .args(["ci", "--no-audit", "--no-fund", "--loglevel=error"])
            .envs(env.iter().copied())
            .current_dir(dir),
    )
}

/// Moves the pinned agent clients to their newest releases (or to the
/// versions named, `PACKAGE@VERSION`), rewriting `tests/clients`'
/// package.json and lock file; the suite then runs against them.
fn update_agent_clients(pins: &[&str]) -> anyhow::Result<()> {
    let packages = [
        "@anthropic-ai/claude-code",
        "@openai/codex",
        "@google/gemini-cli",
    ];
    let mut wanted: Vec<String> = packages.iter().map(|p| format!("{p}@latest")).collect();
    for pin in pins {
        let Some(at) = pin.rfind('@').filter(|&i| i > 0) else {
            bail!("{pin:?} is not PACKAGE@VERSION");
        };
        let Some(slot) = packages.iter().position(|p| *p == &pin[..at]) else {
            bail!(
                "{pin:?} is not one of the pinned clients: {}",
                packages.join(", ")
            );
        };
        wanted[slot] = (*pin).to_owned();
    }
    step(
        "pin the agent clients (npm install --save-exact in tests/clients)",
        Command::new("npm")
            .args([
                "install",
                "--save-exact",
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
            ])
            .args(&wanted)
            .current_dir(clients_dir()),
    )
}

/// Fetches the pinned real projects of the LSP conformance suite and builds
/// their oracles, once per machine (cached under `target/lsp-corpus`).
/// Returns why Go cannot be had here, if it cannot (its project is then
/// left out).
fn prepare_lsp_corpus() -> anyhow::Result<Option<String>> {
    if !venv_bin().join("python").exists() {
        install_prerequisites()?;
    }
    let go_unavailable = install_language_servers()?;
    let mut command = Command::new(venv_bin().join("python"));
    command
        .arg("tests/lsp_real/prepare.py")
        .env("PATH", path_with_venv());
    if let Some(reason) = &go_unavailable {
        command.env("DSH_GO_UNAVAILABLE", reason);
    }
    step(
        "prepare the real-project LSP corpus (pinned sources and their oracles, in target/lsp-corpus)",
        &mut command,
    )?;
    Ok(go_unavailable)
}

/// The house style as a gate: formatting and every clippy warning fail
/// the run, before anything slow is installed, built or tested.
fn style_gate(cargo: &str) -> anyhow::Result<()> {
    step(
        "check formatting (cargo fmt --all --check)",
        Command::new(cargo).args(["fmt", "--all", "--check"]),
    )?;
    step(
        "lint (cargo clippy --workspace --all-targets -- -D warnings)",
        Command::new(cargo).args([
            "clippy",
            "--workspace",
            "--all-targets",
            "--locked",
            "--",
            "-D",
            "warnings",
        ]),
    )
}

/// The Rust target of the static build: this machine's architecture, musl.
fn static_triple() -> String {
    format!("{}-unknown-linux-musl", std::env::consts::ARCH)
}

/// Which static build.
#[derive(Clone, Copy)]
enum StaticProfile {
    /// `static`: release, stripped; what `cargo xtask static` ships and
    /// the full benchmark measures.
    Release,
    /// `static-test`: unoptimised, stripped; what the tests install on
    /// their remote targets, built in a third of the time.
    Test,
}

impl StaticProfile {
    fn name(self) -> &'static str {
        match self {
            Self::Release => "static",
            Self::Test => "static-test",
        }
    }
}

/// Builds the static `dsh` (musl, stripped) for remote targets and
/// returns its path.
fn build_static(profile: StaticProfile) -> anyhow::Result<PathBuf> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let triple = static_triple();
    let profile = profile.name();
    step(
        &format!("install the Rust standard library for {triple}"),
        Command::new("rustup").args(["target", "add", &triple]),
    )?;
    step(
        &format!("build the static dsh ({triple}, profile {profile})"),
        Command::new(&cargo).args([
            "build",
            "--locked",
            "--profile",
            profile,
            "--target",
            &triple,
            "-p",
            "dsh",
        ]),
    )?;
    let path = root()
        .join("target")
        .join(&triple)
        .join(profile)
        .join("dsh");
    let size = std::fs::metadata(&path)
        .map_err(|e| anyhow::anyhow!("the static build is not at {}: {e}", path.display()))?
        .len();
    eprintln!(
        "\nthe static dsh: {} ({:.1} MB); `dsh mcp --remote` installs it when DSH_REMOTE_BINARY names it",
        path.display(),
        size as f64 / 1e6
    );
    Ok(path)
}

fn test() -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    style_gate(&cargo)?;
    install_prerequisites()?;
    let go_unavailable = install_language_servers()?;
    if let Some(reason) = &go_unavailable {
        eprintln!(
            "\nGo is not installable on this machine ({reason}): the Go language tests report this instead of running"
        );
    }
    let path = path_with_venv();
    step(
        "build the workspace",
        Command::new(&cargo).args(["build", "--workspace", "--all-targets", "--locked"]),
    )?;
    let mut rust_tests = Command::new(&cargo);
    rust_tests
        .args(["test", "--workspace", "--locked", "--no-fail-fast"])
        .env("PATH", &path)
        // Every test runs: one whose program is missing fails, not skips.
        .env("DSH_TEST_ALL", "1");
    if let Some(reason) = &go_unavailable {
        rust_tests.env("DSH_GO_UNAVAILABLE", reason);
    }
    step("run the Rust tests", &mut rust_tests)?;
    prepare_lsp_corpus()?;
    // The remote suite installs a real static build on its targets.
    let static_dsh = build_static(StaticProfile::Test)?;
    let mut e2e = Command::new(venv_bin().join("python"));
    e2e.args([
        "-m",
        "pytest",
        "tests/e2e",
        "-q",
        "-p",
        "no:cacheprovider",
        // Two workers: most tests wait on programs, servers and browsers
        // rather than compute, and each test has its own directories,
        // daemons and ports.
        "-n",
        "2",
        "--durations=15",
    ])
    .env("PATH", &path)
    .env("DSH_BIN", root().join("target/debug/dsh"))
    .env("DSH_REMOTE_BINARY", &static_dsh);
    if let Some(reason) = &go_unavailable {
        e2e.env("DSH_GO_UNAVAILABLE", reason);
    }
    step(
        "run the end-to-end MCP tests (the real dsh binary, the Python MCP client)",
        &mut e2e,
    )?;
    quick_benchmarks()?;
    eprintln!("\nall tests passed");
    Ok(())
}

/// Every benchmark in its `--quick` mode, on the debug build the tests
/// just made: CI runs them so none can rot.
fn quick_benchmarks() -> anyhow::Result<()> {
    let started = std::time::Instant::now();
    bench("all", Speed::Quick)?;
    eprintln!(
        "\nquick benchmarks ran in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// How a benchmark runs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Speed {
    /// The release build, every round: the figures the docs quote.
    Full,
    /// The debug build, a few rounds: a smoke run.
    Quick,
}

// Long on purpose: one table of every benchmark, each arm a few lines.
fn bench(name: &str, speed: Speed) -> anyhow::Result<()> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let path = path_with_venv();
    let quick = speed == Speed::Quick;
    let profile_dir = if quick { "debug" } else { "release" };
    // The quick runs use the debug build of the whole workspace, built
    // as `cargo xtask test` builds it (so there, nothing is built again:
    // building one package alone would unify features anew and rebuild);
    // the full runs build what they run in release.
    let build_dsh = || {
        if quick {
            step(
                "build the workspace (debug)",
                Command::new(&cargo).args(["build", "--workspace", "--all-targets", "--locked"]),
            )
        } else {
            step(
                "build dsh (release)",
                Command::new(&cargo).args(["build", "--release", "--locked", "-p", "dsh"]),
            )
        }
    };
    // A benchmark binary of the `bench` crate.
    let bench_bin = |name: &str| -> anyhow::Result<Command> {
        if quick {
            build_dsh()?;
            let mut command = Command::new(root().join("target/debug").join(name));
            command.arg("--quick");
            Ok(command)
        } else {
            let mut command = Command::new(&cargo);
            command.args(["run", "--release", "--quiet", "-p", "bench", "--bin", name]);
            Ok(command)
        }
    };
    let bin = |name: &str| -> anyhow::Result<()> {
        step(
            &format!("benchmark: {name}"),
            bench_bin(name)?.env("PATH", &path),
        )
    };
    let dsh_bin = root().join("target").join(profile_dir).join("dsh");
    // A benchmark written in Python (tests/bench) against the dsh binary.
    let python = |script: &str, what: &str, extra: &[(&str, &str)]| -> anyhow::Result<()> {
        if !venv_bin().join("python").exists() {
            install_prerequisites()?;
        }
        build_dsh()?;
        let mut command = Command::new(venv_bin().join("python"));
        command
            .arg(Path::new("tests/bench").join(script))
            .env("PATH", &path)
            .env("DSH_BIN", &dsh_bin)
            .envs(extra.iter().copied());
        if quick {
            command.arg("--quick");
        }
        step(&format!("benchmark: {what}"), &mut command)
    };
    match name {
        "mcp" => python(
            "bench_mcp.py",
            "a bash call through MCP vs a direct spawn",
            &[],
        ),
        "floor" => python(
            "bench_floor.py",
            "dsh against its floors in one table, quiet and with the cores busy",
            &[],
        ),
        "terminal" => {
            build_dsh()?;
            bin("bench_terminal")
        }
        "memory" => {
            build_dsh()?;
            let mut command = bench_bin("bench_dsh_memory")?;
            step(
                "benchmark: what a long-running dsh server keeps after terminals close",
                command.env("PATH", &path).env("DSH_BIN", &dsh_bin),
            )
        }
        "daemon" => python(
            "bench_daemon.py",
            "the daemon vs standalone servers (MCP call, registry, shared rust-analyzer, memory)",
            &[],
        ),
        // the debug build's emulator is slow: a smaller flood keeps the
        // smoke run short
        "ui" => python(
            "bench_ui.py",
            "an agent's settle latency with 20 viewers of its flooding terminal vs none",
            if quick {
                &[("BENCH_UI_FLOOD", "2000000")]
            } else {
                &[]
            },
        ),
        "corpus" => python(
            "bench_corpus.py",
            "each corpus program's settle time through MCP vs the same keys on a bare pty",
            &[],
        ),
        "jobs" => bin("bench_jobs"),
        "spawn" => {
            bin("bench_spawn")?;
            bin("bench_bash_layers")
        }
        "lsp" => bin("bench_lsp"),
        "lsp-real" => {
            let go_unavailable = prepare_lsp_corpus()?;
            let extra: Vec<(&str, &str)> = go_unavailable
                .as_deref()
                .map(|reason| vec![("DSH_GO_UNAVAILABLE", reason)])
                .unwrap_or_default();
            python(
                "bench_lsp_real.py",
                "the lsp tool asked cold on real projects, against each language's oracle (quiet and under a build)",
                &extra,
            )
        }
        "lsp-diagnostics" => {
            let go_unavailable = prepare_lsp_corpus()?;
            let mut extra = vec![("DSH_BENCH_LSP_DIAGNOSTICS", "1")];
            if let Some(reason) = go_unavailable.as_deref() {
                extra.push(("DSH_GO_UNAVAILABLE", reason));
            }
            python(
                "bench_lsp_real.py",
                "lsp diagnostics on real projects: writing a file to a correct answer, beside the command-line checker",
                &extra,
            )
        }
        "workspace" => bin("bench_workspace"),
        "redact" => bin("bench_redact"),
        "sandbox" => {
            bin("bench_sandbox")?;
            python(
                "bench_sandbox_mcp.py",
                "a bash call through MCP in each sandbox setting vs unconfined",
                &[],
            )
        }
        "remote" => {
            let profile = if quick {
                StaticProfile::Test
            } else {
                StaticProfile::Release
            };
            let static_dsh = build_static(profile)?.display().to_string();
            python(
                "bench_remote.py",
                "calls over ssh to loopback vs the same calls local vs a bare `ssh host true`",
                &[("DSH_REMOTE_BINARY", &static_dsh)],
            )
        }
        "resume" => python(
            "bench_resume.py",
            "a SIGKILLed client's work resumed, and the daemon and guardian SIGKILLed together",
            &[],
        ),
        "all" => {
            for n in [
                "mcp",
                "floor",
                "spawn",
                "terminal",
                "memory",
                "jobs",
                "lsp",
                "lsp-real",
                "workspace",
                "sandbox",
                "daemon",
                "ui",
                "corpus",
                "redact",
                "remote",
                "resume",
            ] {
                bench(n, speed)?;
            }
            Ok(())
        }
        other => bail!("unknown benchmark {other:?}\n{USAGE}"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// Plain `cargo test` catches a stale tool catalog or config reference.
    #[test]
    fn generated_docs_are_current() {
        if let Err(e) = codegen(true) {
            panic!("{e}");
        }
    }

    /// Every crate's root file opens with a `//!` doc saying what it is.
    #[test]
    fn every_crate_root_has_a_crate_doc() {
        let mut roots = Vec::new();
        for dir in std::fs::read_dir(root().join("crates")).unwrap() {
            let dir = dir.unwrap().path();
            for file in ["src/lib.rs", "src/main.rs"] {
                let path = dir.join(file);
                if path.exists() {
                    roots.push(path);
                }
            }
        }
        roots.push(root().join("xtask/src/main.rs"));
        assert!(roots.len() >= 8, "found only {roots:?}");
        let missing: Vec<_> = roots
            .iter()
            .filter(|p| {
                !std::fs::read_to_string(p)
                    .unwrap()
                    .trim_start()
                    .starts_with("//!")
            })
            .collect();
        assert!(missing.is_empty(), "no `//!` crate doc: {missing:?}");
    }
}
