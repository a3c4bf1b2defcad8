"""The conformance corpus: real interactive programs, each a list of
steps typed into a terminal, with what every step must settle as.

`test_corpus.py` drives these through `terminal_send` over MCP;
`tests/bench/bench_corpus.py` drives the same keys through a bare pty to
find the floor a settle time is compared with. Each step says what the
output must hold (a regex searched in the reply's `output`), the settle
`reason` it expects, and, for a prompt that reads a secret, that the
reply reports the terminal's echo off."""

import dataclasses
import os
import pathlib
import re
import shutil
import subprocess
from typing import Callable, Optional

EOT = "\u0004"  # Ctrl-D: end of input for a canonical-mode reader
ESC = "\u001b"

# A long line for the canonical-mode line limit: longer than the 4095
# bytes a tty's line discipline keeps in one line.
LONG_LINE = "0123456789" * 600


def server_env(base: pathlib.Path):
    """The environment of the one `dsh mcp` server that runs the corpus
    (the test's or the benchmark's), and its workspace: a private dsh
    environment (`conftest.make_env`) in `base/ws`, with a HOME of its own
    outside the workspace, so no program touches the real one."""
    from conftest import make_env

    ws, home = base / "ws", base / "home"
    ws.mkdir()
    home.mkdir()
    env = make_env(ws)
    env["HOME"] = str(home)
    return env, ws


@dataclasses.dataclass
class Step:
    """One `terminal_send`: `text` typed (Enter after it unless `submit` is
    false), then the reply must settle as `reason` (one name, or a tuple of
    accepted ones) with `out` found in its output."""

    name: str
    text: str
    reason: object
    out: Optional[str] = None
    submit: bool = True
    exit_code: Optional[int] = None
    # False: a secret prompt, the reply must say `echo: false`; True: an
    # ordinary input wait, the reply must not say `echo: false`
    echo: Optional[bool] = None
    # a regex the rendered screen must show after the step
    screen: Optional[str] = None
    # not a send: read the stream (terminal_read) until `out` appears,
    # for output a program prints by itself after the previous step
    poll: bool = False
    # the step the benchmark times for this program
    bench: bool = False
    # the raw-pty benchmark waits for this regex instead of `out`
    floor: Optional[str] = None

    def reasons(self):
        return self.reason if isinstance(self.reason, tuple) else (self.reason,)


@dataclasses.dataclass
class Program:
    """A program of the corpus. `command` is what `terminal_open` starts;
    None opens the default shell and the first step types the command
    line. `requires` are the executables it needs on PATH."""

    name: str
    requires: tuple
    steps: list
    command: Optional[list] = None
    open_out: Optional[str] = None
    env: dict = dataclasses.field(default_factory=dict)
    rows: int = 40
    cols: int = 160
    # prepares the program's directory (in the test process, unsandboxed)
    setup: Optional[Callable[[pathlib.Path], None]] = None
    # checks the directory after the last step
    check: Optional[Callable[[pathlib.Path], None]] = None
    # a reason to skip on this machine, or None
    skip_if: Optional[Callable[[], Optional[str]]] = None

    def terminal_env(self, root: pathlib.Path) -> dict:
        """`env` with `{dir}` replaced by the program's directory."""
        return {k: v.replace("{dir}", str(root)) for k, v in self.env.items()}


def missing(program: Program):
    """The executables of `program` not on PATH."""
    return [p for p in program.requires if shutil.which(p) is None]


def _write(name, text, mode=None):
    def setup(root):
        path = root / name
        path.write_text(text)
        if mode is not None:
            path.chmod(mode)

    return setup


def _all(*setups):
    def setup(root):
        for s in setups:
            s(root)

    return setup


def _file_is(name, want):
    def check(root):
        got = (root / name).read_text()
        assert got == want, f"{name} holds {got!r}, not {want!r}"

    return check


def _files_exist(*names):
    def check(root):
        absent = [n for n in names if not (root / n).exists()]
        assert not absent, f"not written: {absent}"

    return check


PDB_SCRIPT = """\
def f(n):
    total = 0
    for i in range(n):
        total += i
    return total


print(f(4))
"""

C_PROGRAM = """\
#include <stdio.h>

int add(int a, int b) { return a + b; }

int main(void) {
    int x = add(2, 3);
    printf("%d\\n", x);
    return 0;
}
"""

POLL_SCRIPT = """\
import select
import sys

print("ready", flush=True)
while True:
    ready, _, _ = select.select([sys.stdin], [], [], 0.2)
    if not ready:
        continue
    line = sys.stdin.readline().strip()
    if line == "quit":
        print("bye")
        break
    print("got", line, flush=True)
"""

# Behaves like sudo's password prompt: opens the controlling terminal,
# turns ECHO off and keeps ICANON, reads one line from it.
SUDO_LIKE = """\
import os
import termios

fd = os.open("/dev/tty", os.O_RDWR | os.O_NOCTTY)
saved = termios.tcgetattr(fd)
quiet = termios.tcgetattr(fd)
quiet[3] = (quiet[3] & ~termios.ECHO) | termios.ICANON
termios.tcsetattr(fd, termios.TCSAFLUSH, quiet)
try:
    os.write(fd, b"[sudo] password for corpus: ")
    line = b""
    while not line.endswith(b"\\n"):
        chunk = os.read(fd, 1024)
        if not chunk:
            break
        line += chunk
finally:
    termios.tcsetattr(fd, termios.TCSAFLUSH, saved)
    os.write(fd, b"\\n")
print("authenticated with", len(line.rstrip(b"\\n")), "characters")
"""


def _compile_c(root):
    (root / "t.c").write_text(C_PROGRAM)
    subprocess.run(["cc", "-g", "-O0", "-o", "t", "t.c"], cwd=root, check=True)


def _no_cc():
    return None if shutil.which("cc") else "no C compiler (cc) to build the program gdb debugs"


def _git_repo(root):
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=corpus", "-c", "user.email=corpus@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    (repo / "f.txt").write_text("alpha\nbeta\n")
    subprocess.run([*git, "add", "f.txt"], check=True)
    subprocess.run([*git, "commit", "-qm", "one"], check=True)
    (repo / "f.txt").write_text("alpha\nBETA\n")


def _gnupg_home(root):
    (root / "gnupg").mkdir(mode=0o700)
    (root / "secret.txt").write_text("top secret\n")



def _git_history(root):
    """A repository with three commits, for an editor or a pager git opens."""
    repo = root / "repo"
    repo.mkdir()
    git = ["git", "-C", str(repo), "-c", "user.name=corpus", "-c", "user.email=corpus@example.invalid"]
    subprocess.run([*git, "init", "-q"], check=True)
    for n in ("one", "two", "three"):
        (repo / f"{n}.txt").write_text(f"{n}\n")
        subprocess.run([*git, "add", f"{n}.txt"], check=True)
        subprocess.run([*git, "commit", "-qm", f"add {n}"], check=True)
    (repo / "four.txt").write_text("four\n")
    subprocess.run([*git, "add", "four.txt"], check=True)


def _gnupg_agent_home(root):
    """A GnuPG home whose agent asks for passphrases with pinentry-curses
    on the terminal the agent is told about (GPG_TTY)."""
    _gnupg_home(root)
    pinentry = shutil.which("pinentry-curses") or "/usr/bin/pinentry-curses"
    (root / "gnupg" / "gpg-agent.conf").write_text(f"pinentry-program {pinentry}\n")


# Reads the terminal on a thread of its own while the main thread waits
# on a pipe the reader writes when it is done.
THREAD_READER = """\
import os
import threading

done_r, done_w = os.pipe()


def reader():
    while True:
        line = input("thread> ")
        if line == "quit":
            print("bye")
            break
        print("got", line.upper())
    os.write(done_w, b"x")


threading.Thread(target=reader, daemon=True).start()
os.read(done_r, 1)
"""

# Polls its input in 100 ms rounds with the four-argument select.
PERL_POLL = """\
$| = 1;
print "ready\\n";
while (1) {
    my $rin = '';
    vec($rin, fileno(STDIN), 1) = 1;
    next unless select(my $rout = $rin, undef, undef, 0.1);
    my $line = <STDIN>;
    last unless defined $line;
    chomp $line;
    if ($line eq 'quit') { print "bye\\n"; last }
    print "perl got $line\\n";
}
"""

NODE_SCRIPT = """\
const answer = 6 * 7;
console.log("answer", answer);
"""


# What the programs' setups started and the module must stop at its end
# (`cleanup`): a loopback sshd.
_RUNNING = []


def cleanup():
    """Stops what the setups started (called once the module is done)."""
    while _RUNNING:
        _RUNNING.pop().__exit__(None, None, None)


def _sshd(root):
    """A real OpenSSH server on loopback for this program (see
    `loopback_ssh.py`), stopped by `cleanup`."""
    from loopback_ssh import LoopbackSshd

    server = LoopbackSshd(root / "sshd", {"DSH_CORPUS": "1"}).__enter__()
    _RUNNING.append(server)


def _pg_tool(name):
    """A PostgreSQL server program: on PATH, or where Debian keeps it."""
    found = shutil.which(name)
    if found:
        return found
    versions = sorted(pathlib.Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))
    return str(versions[-1]) if versions else None


def _no_postgres():
    return None if _pg_tool("initdb") and _pg_tool("pg_ctl") else "no PostgreSQL server (initdb, pg_ctl)"


class _Postgres:
    """A throwaway PostgreSQL server on 127.0.0.1, run as `nobody` (the
    server refuses root) from a directory outside the workspace."""

    def __init__(self):
        import tempfile

        from loopback_ssh import free_port

        self.port = free_port()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="corpus-pg-"))
        self.dir.chmod(0o755)
        self.data = self.dir / "data"
        as_nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if os.geteuid() == 0 else []
        self.as_nobody = as_nobody
        if as_nobody:
            shutil.chown(self.dir, "nobody", "nogroup")
        subprocess.run([*as_nobody, _pg_tool("initdb"), "-A", "trust", "-U", "corpus", "-D", str(self.data)],
                       check=True, stdout=subprocess.DEVNULL, cwd=self.dir)
        options = f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"
        subprocess.run([*as_nobody, _pg_tool("pg_ctl"), "-s", "-w", "-D", str(self.data), "-o", options,
                        "-l", str(self.dir / "log"), "start"], check=True, cwd=self.dir)

    def __exit__(self, *exc):
        subprocess.run([*self.as_nobody, _pg_tool("pg_ctl"), "-s", "-w", "-D", str(self.data), "-m", "immediate",
                        "stop"], check=False, cwd=self.dir)
        shutil.rmtree(self.dir, ignore_errors=True)


def _postgres(root):
    """Starts a PostgreSQL server for this program (stopped by
    `cleanup`) and writes the psql command that reaches it."""
    server = _Postgres()
    _RUNNING.append(server)
    (root / "psql.sh").write_text(
        f"exec psql -X -h 127.0.0.1 -p {server.port} -U corpus -d postgres \"$@\"\n")


SSH_REMOTE = "ssh -F sshd/ssh_config -t dsh-test-remote 'PS1=\"remote\\$ \" exec bash --norc --noprofile -i'"

NUMBERS = "".join(f"{i}\n" for i in range(1, 201))

SHELL_DONE = dict(reason="prompt", exit_code=0)

PROGRAMS = [
    # --- REPLs ---
    Program("python3", ("python3",), command=["python3", "-q"], open_out=r">>> $", steps=[
        Step("assign", "x = 41", "input_wait", r"^>>> $", echo=True),
        Step("evaluate", "x + 1", "input_wait", r"^42\n>>> $", echo=True, bench=True),
        Step("exit", "exit()", "exit"),
    ]),
    Program("ipython3", ("ipython3",), command=["ipython3", "--no-banner", "--no-confirm-exit"],
            open_out=r"In \[1\]", steps=[
        Step("assign", "x = 41", "input_wait", r"In \[2\]", echo=True),
        Step("keeps the variable", "x + 1", "input_wait", r"Out\[2\]: 42", echo=True, bench=True),
        Step("exit", "exit", "exit"),
    ]),
    Program("node", ("node",), command=["node"], open_out=r"> $", steps=[
        Step("declare", "let x = 41", "input_wait", r"undefined\n> $", echo=True),
        Step("evaluate", "x + 1", "input_wait", r"42\n> $", echo=True, bench=True),
        Step("exit", ".exit", "exit"),
    ]),
    Program("bc", ("bc",), command=["bc", "-q"], steps=[
        Step("assign", "x = 41", "input_wait", r"^\n?$"),
        Step("evaluate", "x + 1", "input_wait", r"^\n?42\n$", bench=True),
        Step("precision", "scale = 3; 1 / 3", "input_wait", r"\.333\n"),
        Step("quit", "quit", "exit"),
    ]),
    Program("dc", ("dc",), command=["dc"], steps=[
        Step("evaluate", "41 1 + p", "input_wait", r"^42\n$", bench=True),
        Step("quit", "q", "exit"),
    ]),
    Program("sqlite3", ("sqlite3",), command=["sqlite3"], open_out=r"sqlite> $", steps=[
        Step("create", "create table t(x);", "input_wait", r"sqlite> $", echo=True),
        Step("insert", "insert into t values (41);", "input_wait", r"sqlite> $"),
        Step("select", "select x + 1 from t;", "input_wait", r"42\nsqlite> $", bench=True),
        Step("quit", ".quit", "exit"),
    ]),
    Program("lua", ("lua5.4",), command=["lua5.4"], open_out=r"> $", steps=[
        Step("assign", "x = 41", "input_wait", r"> $", echo=True),
        Step("evaluate", "print(x + 1)", "input_wait", r"42\n> $", bench=True),
        Step("exit", "os.exit()", "exit"),
    ]),
    Program("tclsh", ("tclsh",), command=["tclsh"], steps=[
        Step("set", "set x 41", "input_wait", r"41\n% $", echo=True),
        Step("evaluate", "expr {$x + 1}", "input_wait", r"^42\n% $", bench=True),
        Step("exit", "exit", "exit"),
    ]),
    Program("irb", ("irb",), command=["irb"], open_out=r">", steps=[
        Step("assign", "x = 41", "input_wait", r"41", echo=True),
        Step("evaluate", "x + 1", "input_wait", r"42", bench=True),
        Step("exit", "exit", "exit"),
    ]),
    Program("expect", ("expect",), command=["expect"], open_out=r"expect1\.1> $", steps=[
        Step("set", "set x 41", "input_wait", r"41\nexpect1\.2> $"),
        Step("evaluate", "expr {$x + 1}", "input_wait", r"42\nexpect1\.3> $", bench=True),
        Step("exit", "exit", "exit"),
    ]),
    Program("dash", ("dash",), command=["dash", "-i"], env={"PS1": "dash$ "}, open_out=r"dash\$ $", steps=[
        Step("assign", "x=41", "input_wait", r"^dash\$ $"),
        Step("evaluate", "echo $((x + 1))", "input_wait", r"^42\ndash\$ $", bench=True),
        Step("exit", "exit", "exit"),
    ]),
    Program("zsh", ("zsh",), command=["zsh", "-f", "-i"], env={"PS1": "zsh%% "}, open_out=r"zsh% $", steps=[
        Step("assign", "x=41", "input_wait", r"zsh% $"),
        Step("evaluate", "echo $((x + 1))", "input_wait", r"42\n(.*\n)*zsh% $", bench=True, floor=r"42\n"),
        Step("exit", "exit", "exit"),
    ]),
    # --- debuggers ---
    Program("pdb", ("python3",), setup=_write("s.py", PDB_SCRIPT), steps=[
        Step("start", "python3 -m pdb s.py", "input_wait", r"-> def f\(n\):\n\(Pdb\) $"),
        Step("break", "b f", "input_wait", r"Breakpoint 1 at .*s\.py:1\n\(Pdb\) $"),
        Step("continue", "c", "input_wait", r"-> total = 0\n\(Pdb\) $"),
        Step("print", "p n", "input_wait", r"^4\n\(Pdb\) $", bench=True),
        Step("quit", "q", **SHELL_DONE),
    ]),
    Program("gdb", ("gdb", "cc"), setup=_compile_c, skip_if=_no_cc, steps=[
        Step("start", "gdb -q ./t", "input_wait", r"\(gdb\) $"),
        Step("break", "break add", "input_wait", r"Breakpoint 1 at .*: file .*t\.c, line 3\.\n\(gdb\) $"),
        Step("run", "run", "input_wait", r"Breakpoint 1, add \(a=2, b=3\) at t\.c:3\n(.*\n)*\(gdb\) $"),
        Step("print", "p a + b", "input_wait", r"\$1 = 5\n\(gdb\) $", bench=True),
        Step("backtrace", "bt", "input_wait", r"#1 .* main \(\) at t\.c:6"),
        Step("kill", "kill", "input_wait", r"\(y or n\) $"),
        Step("confirm", "y", "input_wait", r"\(gdb\) $"),
        Step("quit", "quit", **SHELL_DONE),
    ]),
    # the perl debugger reads its commands from /dev/tty
    Program("perl debugger", ("perl",), steps=[
        Step("start", "perl -de0", "input_wait", r"DB<1> $"),
        Step("print", "p 6 * 7", "input_wait", r"42\n\s*DB<2> $", bench=True),
        Step("quit", "q", **SHELL_DONE),
    ]),
    # --- line editors and canonical-mode readers ---
    Program("ed", ("ed",), setup=_write("notes.txt", "alpha\n"),
            check=_file_is("notes.txt", "alpha\nbeta\n"), steps=[
        Step("open", "ed notes.txt", "input_wait", r"^6\n$"),
        Step("append", "a", "input_wait", r"^$"),
        Step("line", "beta", "input_wait", r"^$"),
        Step("end append", ".", "input_wait", r"^$"),
        Step("print", ",p", "input_wait", r"^alpha\nbeta\n$", bench=True),
        Step("write", "w", "input_wait", r"^11\n$"),
        Step("quit", "q", **SHELL_DONE),
    ]),
    Program("cat", ("cat",), steps=[
        Step("start", "cat", "input_wait", r"^$"),
        Step("line", "hello", "input_wait", r"^hello\n$", bench=True),
        Step("end of input", EOT, submit=False, **SHELL_DONE),
    ]),
    Program("cat long line", ("cat", "wc"), check=_file_is("long.txt", LONG_LINE + "\n"), steps=[
        Step("start", "cat > long.txt", "input_wait", r"^$"),
        Step("a 6000-character line", LONG_LINE, "input_wait", r"^$"),
        Step("end of input", EOT, submit=False, **SHELL_DONE),
        Step("size", "wc -c < long.txt", "prompt", r"^6001\n$", exit_code=0),
    ]),
    Program("awk", ("awk",), steps=[
        Step("start", "awk '{ print NR \": \" toupper($0) }'", "input_wait", r"^$"),
        Step("line", "hello", "input_wait", r"^1: HELLO\n$", bench=True),
        Step("end of input", EOT, submit=False, **SHELL_DONE),
    ]),
    Program("sort", ("sort",), steps=[
        Step("start", "sort", "input_wait", r"^$"),
        Step("line", "pear", "input_wait", r"^$"),
        Step("line", "apple", "input_wait", r"^$"),
        Step("end of input", EOT, "prompt", r"^apple\npear\n$", submit=False, exit_code=0, bench=True),
    ]),
    Program("tr", ("tr",), steps=[
        Step("start", "tr a-z A-Z", "input_wait", r"^$"),
        Step("line", "hello", "input_wait", r"^HELLO\n$", bench=True),
        Step("end of input", EOT, submit=False, **SHELL_DONE),
    ]),
    Program("units", ("units",), steps=[
        Step("start", "units", "input_wait", r"You have: $"),
        Step("have", "2 miles", "input_wait", r"You want: $"),
        Step("want", "km", "input_wait", r"\* 3\.218688\n(.*\n)*You have: $", bench=True),
        Step("end of input", EOT, submit=False, **SHELL_DONE),
    ]),
    Program("bash read", ("bash",), steps=[
        Step("question", "read -r -p 'name? ' n; echo \"hi $n\"", "input_wait", r"^name\? $", echo=True),
        Step("answer", "Ada", "prompt", r"^hi Ada\n$", exit_code=0, bench=True),
    ]),
    # a read with a timeout ends by itself: the send settles at once (the
    # shell waits for input) or at the prompt; the shell prints the
    # timeout's status by itself
    Program("bash read -t", ("bash",), steps=[
        Step("question", "read -r -t 1 -p 'quick? ' q; echo \"rc=$?\"", ("input_wait", "prompt"), r"quick\? "),
        Step("times out by itself", "", None, r"rc=142\n", poll=True),
        Step("shell is back", "echo after", "prompt", r"^after\n$", exit_code=0, bench=True),
    ]),
    Program("python select poll", ("python3",), setup=_write("poll.py", POLL_SCRIPT), steps=[
        Step("start", "python3 poll.py", "input_wait", r"^ready\n$"),
        Step("line", "abc", "input_wait", r"^got abc\n$", bench=True),
        Step("quit", "quit", "prompt", r"^bye\n$", exit_code=0),
    ]),
    # --- full-screen programs ---
    Program("vim", ("vim",), rows=24, cols=80, check=_file_is("notes.txt", "hello from vim\n"), steps=[
        Step("open", "vim notes.txt", "input_wait", screen=r"notes\.txt"),
        Step("insert", f"ihello from vim{ESC}", "input_wait", submit=False, screen=r"hello from vim"),
        Step("write and quit", ":wq", "prompt", r"notes\.txt.* written", exit_code=0),
    ]),
    Program("nano", ("nano",), rows=24, cols=80, check=_file_is("notes.txt", "hello nano\n"), steps=[
        Step("open", "nano notes.txt", "input_wait", r"GNU nano"),
        Step("type", "hello nano", "input_wait", submit=False, screen=r"hello nano"),
        Step("write out", "\u000f", "input_wait", r"File Name to Write", submit=False),
        Step("confirm the name", "\r", "input_wait", r"Wrote 1 line", submit=False),
        Step("exit", "\u0018", submit=False, **SHELL_DONE),
    ]),
    Program("less", ("less",), rows=10, cols=40, setup=_write("numbers.txt", NUMBERS), steps=[
        Step("open", "less numbers.txt", "input_wait", r"\b9\n", screen=r"^1\n2\n"),
        Step("search", "/150\r", "input_wait", r"150\n151\n", submit=False, bench=True),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("more", ("more",), rows=10, cols=40, setup=_write("numbers.txt", NUMBERS), steps=[
        Step("open", "more numbers.txt", "input_wait", r"--More--"),
        Step("next page", " ", "input_wait", r"\b18\n(.*\n)*--More--", submit=False, bench=True),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("man", ("man", "less"), env={"MANPAGER": "less"}, rows=24, cols=80, steps=[
        Step("open", "man ls", "input_wait", r"list directory contents", bench=True),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("top", ("top",), rows=24, cols=100, steps=[
        Step("open", "top -d 1", "input_wait", r"PID\s+USER", screen=r"PID\s+USER", bench=True),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("htop", ("htop",), rows=24, cols=100, steps=[
        Step("open", "htop -d 10", "input_wait", r"F10\s*Quit", bench=True),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("whiptail", ("whiptail",), rows=24, cols=80, check=_file_is("name.txt", "Ada"), steps=[
        Step("dialog", "whiptail --inputbox 'Your name?' 10 40 2> name.txt; echo \"rc=$?\"", "input_wait",
             screen=r"Your name\?", bench=True, floor=r"Your name\?"),
        Step("type", "Ada", "input_wait", submit=False, screen=r"Ada"),
        Step("ok", "\r", "prompt", r"rc=0\n$", submit=False, exit_code=0),
    ]),
    # --- interactive git ---
    Program("git add -p", ("git",), setup=_git_repo, steps=[
        Step("hunk", "cd repo && git add -p", "input_wait", r"\+BETA\n(.*\n)*.*Stage this hunk \[.*\]\? $", bench=True),
        Step("stage it", "y", **SHELL_DONE),
        Step("staged", "git diff --cached --stat", "prompt", r"1 file changed", exit_code=0),
    ]),
    # --- secrets read from the terminal, echo off ---
    Program("bash read -s /dev/tty", ("bash",), steps=[
        Step("password prompt", "read -r -s -p 'pw: ' p < /dev/tty; echo; echo \"got ${#p}\"", "input_wait",
             r"^pw: $", echo=False, bench=True),
        Step("answer", "hunter2", "prompt", r"got 7\n$", exit_code=0),
    ]),
    Program("python getpass", ("python3",), steps=[
        Step("password prompt", "python3 -c 'import getpass; p = getpass.getpass(\"pw: \"); print(\"got\", len(p))'",
             "input_wait", r"^pw: $", echo=False, bench=True),
        Step("answer", "hunter2", "prompt", r"got 7\n$", exit_code=0),
    ]),
    Program("sudo-like prompt", ("python3",), setup=_write("sudo_like.py", SUDO_LIKE), steps=[
        Step("password prompt", "python3 sudo_like.py", "input_wait", r"^\[sudo\] password for corpus: $",
             echo=False, bench=True),
        Step("answer", "hunter2", "prompt", r"authenticated with 7 characters\n$", exit_code=0),
    ]),
    Program("ssh-keygen", ("ssh-keygen",), check=_files_exist("k", "k.pub"), steps=[
        Step("passphrase", "ssh-keygen -q -t ed25519 -f ./k -C corpus", "input_wait",
             r"Enter passphrase.*: $", echo=False, bench=True),
        Step("again", "correct horse", "input_wait", r"Enter same passphrase again: $", echo=False),
        Step("done", "correct horse", **SHELL_DONE),
    ]),
    Program("openssl", ("openssl",), check=_files_exist("key.pem"), steps=[
        Step("pass phrase", "openssl genpkey -algorithm ed25519 -aes-256-cbc -out key.pem", "input_wait",
             r"Enter PEM pass phrase:$", echo=False, bench=True),
        Step("verify", "correct horse", "input_wait", r"Verifying - Enter PEM pass phrase:$", echo=False),
        Step("done", "correct horse", **SHELL_DONE),
        Step("encrypted", "head -n 1 key.pem", "prompt", r"BEGIN ENCRYPTED PRIVATE KEY", exit_code=0),
    ]),
    Program("gpg", ("gpg", "gpgconf"), env={"GNUPGHOME": "{dir}/gnupg"}, setup=_gnupg_home,
            check=_files_exist("secret.txt.gpg"), steps=[
        Step("passphrase", "gpg --pinentry-mode loopback --symmetric -o secret.txt.gpg secret.txt",
             "input_wait", r"Enter passphrase: $", echo=False, bench=True),
        Step("done", "correct horse", **SHELL_DONE),
        Step("stop the agent", "gpgconf --kill gpg-agent", **SHELL_DONE),
    ]),

    # --- the reader is not the foreground group's leader: a program
    # another program runs for it, or the last of a pipe ---
    # (an editor git opens for its own configuration, and for a commit in
    # a repository nested in the workspace, whose objects, refs and HEAD
    # the sandbox leaves writable)
    Program("git config editor", ("git", "vim"), rows=24, cols=80, env={"GIT_EDITOR": "vim"},
            setup=_write("notes.cfg", "[corpus]\n\tname = one\n"),
            check=_file_is("notes.cfg", "[corpus]\n\tname = two\n"), steps=[
        Step("editor opens", "git config --file notes.cfg --edit && echo edited", "input_wait",
             screen=r"name = one", bench=True, floor=r"name = one"),
        Step("change", ":%s/one/two/", "input_wait", screen=r"name = two"),
        Step("write and quit", ":wq", "prompt", r"edited\n$", exit_code=0),
    ]),
    Program("git commit editor", ("git", "vim"), rows=24, cols=80,
            env={"GIT_EDITOR": "vim", "GIT_AUTHOR_NAME": "corpus", "GIT_AUTHOR_EMAIL": "corpus@example.invalid",
                 "GIT_COMMITTER_NAME": "corpus", "GIT_COMMITTER_EMAIL": "corpus@example.invalid"},
            setup=_git_history, steps=[
        Step("editor opens", "cd repo && git commit && git log --oneline -1", "input_wait",
             screen=r"Please enter the commit message", bench=True, floor=r"Please enter the commit message"),
        Step("message", f"Oadd four{ESC}", "input_wait", submit=False, screen=r"^add four"),
        Step("write and quit", ":wq", "prompt", r"\[\w+ [0-9a-f]{7}\] add four\n(.*\n)*[0-9a-f]{7} .*add four\n$",
             exit_code=0),
    ]),
    Program("find -exec editor", ("find", "vim"), rows=24, cols=80, setup=_write("f.txt", "alpha\n"),
            check=_file_is("f.txt", "alpha\nbeta\n"), steps=[
        Step("editor opens", "find . -name f.txt -exec vim {} \\;", "input_wait", screen=r"^alpha",
             bench=True, floor=r"alpha"),
        Step("append", f"obeta{ESC}", "input_wait", submit=False, screen=r"^beta"),
        Step("write and quit", ":wq", **SHELL_DONE),
    ]),
    Program("git log pager", ("git", "less"), setup=_git_history, rows=10, cols=60, steps=[
        Step("pager opens", "cd repo && LESS=R GIT_PAGER=less git log --oneline", "input_wait", r"add three",
             screen=r"add one", bench=True),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("seq | less", ("seq", "less"), rows=10, cols=40, steps=[
        Step("pager opens", "seq 200 | less", "input_wait", r"\b9\n", bench=True),
        Step("search", "/170\r", "input_wait", r"170\n171\n", submit=False),
        Step("quit", "q", submit=False, **SHELL_DONE),
    ]),
    Program("seq | fzf", ("seq", "fzf"), rows=20, cols=60, steps=[
        Step("finder opens", "seq 100 | fzf; echo \"picked=$?\"", "input_wait", screen=r"100/100", bench=True,
             floor=r"100/100"),
        Step("narrow", "77", "input_wait", submit=False, screen=r"1/100"),
        Step("pick", "\r", "prompt", r"^77\npicked=0\n$", submit=False, exit_code=0),
    ]),
    Program("bc under python", ("python3", "bc"), steps=[
        Step("start", "python3 -c 'import subprocess; subprocess.run([\"bc\", \"-q\"]); print(\"back\")'",
             "input_wait", r"^$"),
        Step("evaluate", "6 * 7", "input_wait", r"^\n?42\n$", bench=True),
        Step("quit", "quit", "prompt", r"back\n$", exit_code=0),
    ]),
    Program("git credential fill", ("git",), env={"GIT_ASKPASS": "", "SSH_ASKPASS": ""}, steps=[
        Step("user name", "printf 'protocol=https\\nhost=example.invalid\\n\\n' | git credential fill",
             "input_wait", r"Username for 'https://example\.invalid': $", bench=True),
        Step("password", "ada", "input_wait", r"Password for 'https://ada@example\.invalid': $", echo=False),
        Step("filled", "hunter2", "prompt", r"username=ada\npassword=hunter2\n", exit_code=0),
    ]),
    # --- the reader is outside the foreground group: a multiplexer's
    # server, a dialog a daemon started, a program in a session of its own ---
    Program("psql pager", ("psql", "less", "setpriv"), setup=_postgres, skip_if=_no_postgres, rows=12, cols=60,
            env={"PAGER": "less", "LESS": "R"}, steps=[
        Step("connect", "sh psql.sh", "input_wait", r"postgres=# $"),
        Step("a long result in the pager", "select n from generate_series(1, 200) as n;", "input_wait",
             r"\b9\n", screen=r"^\s+1\s*$", bench=True, floor=r"\b9\b"),
        Step("leave the pager", "q", "input_wait", r"postgres=# $", submit=False),
        Step("quit", "\\q", **SHELL_DONE),
    ]),
    Program("tmux", ("tmux",), rows=24, cols=80, steps=[
        Step("open", "tmux -f /dev/null -S tmux.sock new-session 'PS1=\"in-tmux$ \" bash --norc --noprofile -i'",
             "input_wait", screen=r"in-tmux\$", bench=True, floor=r"in-tmux"),
        Step("evaluate", "echo $((6 * 7))", "input_wait", r"42", screen=r"^42\s*$"),
        # busy inside a window: the server waits at once, the answer is
        # only complete once the window's shell reads again
        Step("busy", "sleep 1; echo slept", "input_wait", r"slept", screen=r"^slept\s*$"),
        Step("exit", "exit", "prompt", r"exited", exit_code=0),
    ]),
    Program("screen", ("screen",), rows=24, cols=80, steps=[
        Step("open", "screen -q env PS1='in-screen$ ' bash --norc --noprofile -i", "input_wait",
             screen=r"in-screen\$", bench=True, floor=r"in-screen"),
        Step("evaluate", "echo $((6 * 7))", "input_wait", r"42", screen=r"^42\s*$"),
        Step("busy", "sleep 1; echo slept", "input_wait", r"slept", screen=r"^slept\s*$"),
        # (our shell's prompt is back; the reply may see the shell reading
        # before the prompt's marker is parsed)
        Step("exit", "exit", ("prompt", "input_wait"), r"screen is terminating"),
    ]),
    Program("setsid bc", ("setsid", "bc"), steps=[
        Step("start", "setsid -w bc -q", "input_wait", r"^$"),
        Step("evaluate", "6 * 7", "input_wait", r"^\n?42\n$", bench=True),
        Step("quit", "quit", **SHELL_DONE),
    ]),
    Program("gpg pinentry-curses", ("gpg", "gpgconf", "pinentry-curses"), env={"GNUPGHOME": "{dir}/gnupg"},
            setup=_gnupg_agent_home, check=_files_exist("secret.txt.gpg"), rows=24, cols=80, steps=[
        Step("dialog", "export GPG_TTY=$(tty); gpg --symmetric -o secret.txt.gpg secret.txt", "input_wait",
             echo=False, screen=r"Passphrase", bench=True, floor=r"Passphrase"),
        Step("passphrase", "correct horse 42!", "input_wait", echo=False, screen=r"(?i)re-?enter|repeat|again"),
        Step("again", "correct horse 42!", **SHELL_DONE),
        Step("stop the agent", "gpgconf --kill gpg-agent", **SHELL_DONE),
    ]),
    # --- the terminal is read on a thread other than the main one ---
    Program("erl", ("erl",), command=["erl"], open_out=r"1> $", steps=[
        Step("bind", "X = 41.", "input_wait", r"41\n2> $"),
        Step("evaluate", "X + 1.", "input_wait", r"42\n3> $", bench=True),
        Step("halt", "halt().", "exit"),
    ]),
    Program("python3 -m asyncio", ("python3",), command=["python3", "-m", "asyncio"], open_out=r">>> $", steps=[
        Step("assign", "x = 41", "input_wait", r">>> $", echo=True),
        Step("evaluate", "x + 1", "input_wait", r"42\n>>> $", bench=True),
        # sleep-ok: the program under test awaits a zero sleep, no test waits
        Step("await", "await asyncio.sleep(0, result=7)", "input_wait", r"7\n>>> $"),
        Step("exit", "exit()", ("exit", "input_wait")),
    ]),
    Program("python reader thread", ("python3",), setup=_write("reader.py", THREAD_READER), steps=[
        Step("start", "python3 reader.py", "input_wait", r"thread> $"),
        Step("line", "abc", "input_wait", r"got ABC\nthread> $", bench=True),
        Step("quit", "quit", "prompt", r"bye\n$", exit_code=0),
    ]),
    # --- the reader waits while the answer comes from another process ---
    Program("ssh", ("ssh", "sshd"), setup=_sshd, steps=[
        Step("connect", SSH_REMOTE, "input_wait", r"remote\$ $"),
        Step("remote command", "echo $((6 * 7))", "input_wait", r"42\n(.*\n)*remote\$ $", bench=True),
        Step("remote working directory", "cd / && pwd", "input_wait", r"(^|\n)/\n(.*\n)*remote\$ $"),
        Step("leave", "exit", "prompt", r"closed", exit_code=0),
    ]),
    Program("jshell", ("jshell",), command=["jshell", "-J-Xshare:auto"], open_out=r"jshell> $", steps=[
        Step("declare", "int x = 41;", "input_wait", r"x ==> 41"),
        Step("evaluate", "x + 1", "input_wait", r"==> 42", bench=True),
        Step("exit", "/exit", ("exit", "input_wait")),
    ]),
    Program("node inspect", ("node",), setup=_write("s.js", NODE_SCRIPT), steps=[
        Step("start", "node inspect s.js", "input_wait", r"debug> $"),
        Step("evaluate", "exec 6 * 7", "input_wait", r"42\n(.*\n)*debug> $", bench=True),
        Step("quit", ".exit", **SHELL_DONE),
    ]),
    # --- more programs that poll their input with a time limit ---
    Program("perl select poll", ("perl",), setup=_write("poll.pl", PERL_POLL), steps=[
        Step("start", "perl poll.pl", "input_wait", r"^ready\n$"),
        Step("line", "abc", "input_wait", r"^perl got abc\n$", bench=True),
        Step("quit", "quit", "prompt", r"^bye\n$", exit_code=0),
    ]),
    # --- busy programs that must not settle early ---
    Program("busy then done", ("bash",), steps=[
        # sleep-ok: the command under test is busy for a second; no test waits on it
        Step("sleep then print", "sleep 1; echo done", "prompt", r"^done\n$", exit_code=0, bench=True),
    ]),
    Program("late input", ("python3",), steps=[
        # sleep-ok: the program under test asks after a second; no test waits on it
        Step("asks after a while", "python3 -c 'import time; time.sleep(1); print(\"n =\", input(\"late? \"))'",
             "input_wait", r"^late\? $", bench=True),
        Step("answer", "5", "prompt", r"^n = 5\n$", exit_code=0),
    ]),
    Program("make", ("make",), setup=_write("Makefile", "all:\n\tsleep 1\n\t@echo built\n"), steps=[
        Step("build", "make", "prompt", r"built\n$", exit_code=0, bench=True),
    ]),
    Program("bash select menu", ("bash",), steps=[
        Step("menu", "select f in apple pear; do echo \"chose $f\"; break; done", "input_wait",
             r"1\) apple\n2\) pear\n#\? $", bench=True),
        Step("choose", "2", "prompt", r"^chose pear\n$", exit_code=0),
    ]),
]


def distinct_programs():
    return {p.name for p in PROGRAMS}


ANSI = re.compile(r"\x1b(\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78MDEHc])")


def strip_ansi(text: str) -> str:
    """The text of raw terminal output: escape sequences removed, CR-LF as
    LF, lone CRs dropped."""
    return ANSI.sub("", text).replace("\r\n", "\n").replace("\r", "")


def raw_env(root: pathlib.Path, program: Program) -> dict:
    """The environment of a raw-pty run: the shell's prompt is a marker
    the floor waits for. `DSH_CORPUS_FLOOR` marks every process of the run,
    so the ones that leave the pty's session (a multiplexer's server, an
    agent) can be found and ended after it."""
    env = dict(os.environ, TERM="xterm-256color", PAGER="cat", GIT_PAGER="cat", PS1="raw$ ",
               DSH_CORPUS_FLOOR=str(root))
    env.update(program.terminal_env(root))
    return env
